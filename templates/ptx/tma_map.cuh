// The key tensor map a kernel's TMA loads read (templates/ptx/tma.cuh): CUtensorMap's 128
// opaque bytes (cuda.h), with its alignment, passed by value as a kernel parameter.
#pragma once

namespace winnow {

struct alignas(64) TmaMap {
  unsigned long long opaque[16];
};

}  // namespace winnow
