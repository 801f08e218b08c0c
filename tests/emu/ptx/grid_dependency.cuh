// CPU stand-in of templates/ptx/grid_dependency.cuh for tests/emu/cuda_emulation.h: the
// emulation runs launches one after another, so a programmatic dependent launch's wait
// has nothing to wait for, and its trigger nothing to start.
#pragma once

namespace winnow {

inline void grid_dependency_wait() {}
inline void grid_dependency_trigger() {}

}  // namespace winnow
