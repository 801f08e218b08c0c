// CPU stand-in of templates/ptx/mbarrier.cuh for tests/emu/cuda_emulation.h: each mbarrier's
// phase, pending arrivals and transaction bytes live in the CTA's table (keyed by the
// barrier's shared-memory address), and waiters sleep on the CTA's condition variable.
// A phase completes when its arrivals and its bytes are both in, as the PTX ISA says;
// waiting for parity P returns once the current phase's parity differs from P.
#pragma once
#include <chrono>
#include "ptx/mma_sync.cuh"
#include "common/portable.cuh"
#include "common/ring_slot.cuh"

namespace winnow {

inline void mbarrier_init(u64* bar, unsigned arrivals) {
  std::lock_guard<std::mutex> lock(winnow_emu::cta->mbar_mutex);
  winnow_emu::cta->mbars[shared_address(bar)] = winnow_emu::Mbarrier{int(arrivals), int(arrivals), 0, 0};
}
inline void mbarrier_init_fence() {}

namespace emu_detail {
inline winnow_emu::Mbarrier& state(winnow_emu::Cta& c, unsigned bar) {
  auto it = c.mbars.find(bar);
  if (it == c.mbars.end()) winnow_emu::fail("mbarrier used before mbarrier_init");
  return it->second;
}
inline winnow_emu::Mbarrier& state(unsigned bar) { return state(*winnow_emu::cta, bar); }
// Arrivals and transaction bytes (negative: landed) on barrier `bar` of CTA `c`.
inline void update(winnow_emu::Cta& c, unsigned bar, int arrivals, long long bytes) {
  std::lock_guard<std::mutex> lock(c.mbar_mutex);
  winnow_emu::Mbarrier& m = state(c, bar);
  m.pending -= arrivals;
  m.tx += bytes;
  if (m.pending < 0) winnow_emu::fail("mbarrier: more arrivals than its phase expects");
  if (m.pending == 0 && m.tx == 0) {
    m.phase ^= 1;
    m.pending = m.expected;
    c.mbar_changed.notify_all();
  }
}
inline void update(unsigned bar, int arrivals, long long bytes) {
  update(*winnow_emu::cta, bar, arrivals, bytes);
}
}  // namespace emu_detail

inline void mbarrier_arrive(unsigned bar) { emu_detail::update(bar, 1, 0); }
inline void mbarrier_arrive(u64* bar) { mbarrier_arrive(shared_address(bar)); }
inline void mbarrier_arrive_expect_tx(u64* bar, unsigned bytes) {
  emu_detail::update(shared_address(bar), 1, (long long)bytes);
}
// cp.async copies are synchronous here: they have landed when the arrival is made.
inline void mbarrier_arrive_after_copies(u64* bar) { mbarrier_arrive(bar); }
// The copy engine's side of a TMA load (tests/emu/ptx/tma.cuh).
inline void mbarrier_complete_tx(u64* bar, unsigned bytes) {
  emu_detail::update(shared_address(bar), 0, -(long long)bytes);
}
// A phase that does not complete within a minute (a missing arrival, bytes never landing,
// a wrong parity) stops the test instead of hanging it.
inline void mbarrier_wait(unsigned bar, unsigned parity) {
  std::unique_lock<std::mutex> lock(winnow_emu::cta->mbar_mutex);
  if (!winnow_emu::cta->mbar_changed.wait_for(lock, std::chrono::seconds(60), [&] {
        return unsigned(emu_detail::state(bar).phase) != parity;
      }))
    winnow_emu::fail("mbarrier wait: the phase did not complete within 60 s");
}
inline void mbarrier_wait(u64* bar, unsigned parity) { mbarrier_wait(shared_address(bar), parity); }

template <int Pending>
inline void copies_landed() {}

template <int Id, int Threads>
inline void named_barrier_sync() {
  static_assert(Id >= 1 && Id < 16 && Threads % 32 == 0, "named barriers 1..15, whole warps");
  winnow_emu::cta->named(Id, Threads).arrive_and_wait();
}
template <int Id, int Threads>
inline void named_barrier_arrive() {
  static_assert(Id >= 1 && Id < 16 && Threads % 32 == 0, "named barriers 1..15, whole warps");
  (void)winnow_emu::cta->named(Id, Threads).arrive();
}

}  // namespace winnow
