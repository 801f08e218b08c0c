// The generated stub of the shard merge: two entry points over
// templates/shard/shard_merge.cuh, the same source for every plan (sizes are run-time values).
#pragma once
#include "compiler/codegen/emit_cuda.h"

namespace winnow::codegen {

inline constexpr const char* kShardPackEntry = "winnow_shard_pack";
inline constexpr const char* kShardMergeEntry = "winnow_shard_merge";

// `entry` of the result names the merge kernel.
GeneratedKernel emit_shard_merge();

}  // namespace winnow::codegen
