// The ring of a warp-specialised pipeline (templates/ptx/mbarrier.cuh guards its stages): the
// stage and phase parity of each use, counted alike by the producer and the consumers.
// Plain arithmetic, for the host tests too.
#pragma once
#include "common/portable.cuh"

namespace winnow {

// Stage and phase parity of the pos-th use of a ring of `stages` (producer and consumers
// count the same uses).
struct RingSlot {
  int stage;
  unsigned parity;
  // The next use: the next stage, the phase flipping on each wrap (no division per tile).
  WINNOW_HD void advance(int stages) {
    if (++stage == stages) {
      stage = 0;
      parity ^= 1u;
    }
  }
};
WINNOW_HD RingSlot ring_slot(unsigned pos, int stages) {
  return RingSlot{int(pos % unsigned(stages)), (pos / unsigned(stages)) & 1u};
}

}  // namespace winnow
