// The names users write for dtypes and built-in scores: one table each, read by the C API
// (ops/capi/), dtype_name() and the `winnow` tool's flags, so that a spelling or a score
// is added in one place.
#pragma once
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "compiler/ir/ir.h"
#include "ops/common/tensor.h"
#include "winnow.h"

namespace winnow::ops {

struct DTypeName {
  DType dtype;
  winnowDataType_t c_value;  // the C API's enum
  const char* name;          // dtype_name(): "fp8_e4m3"
  const char* short_name;    // the tool's flags and bench records: "fp8"
  bool score;                // a q / k dtype (int32 is not)
};
std::span<const DTypeName> dtype_names();
const char* dtype_name(DType t);  // "fp32", "fp16", "bf16", "fp8_e4m3", "int32", "uint8"
// The short name of a dtype ("fp8"); "invalid" for one not in the table.
const char* dtype_short_name(DType t);

// The C enum as a DType; DType::Invalid for a value not in the table.
DType dtype_from_c(winnowDataType_t t);
// A score dtype from any of its spellings (name, short name, "e4m3"); nullopt otherwise.
std::optional<DType> parse_score_dtype(std::string_view spelling);
// The short names of the score dtypes for messages: "fp8, bf16, fp16 or fp32".
std::string score_dtype_choices();

struct BuiltinScore {
  winnowScore_t c_value;  // the C API's enum
  const char* name;       // the tool's --score NAME
  bool multi_head;        // sums over heads (the tool defaults it to 64 heads, fp8)
  ir::Expr (*program)(bool key_scale);  // key_scale: relu_mh's per-key scale
};
std::span<const BuiltinScore> builtin_scores();

// nullptr when there is no such built-in score.
const BuiltinScore* find_builtin_score(std::string_view name);
const BuiltinScore* find_builtin_score(winnowScore_t c_value);
// Their names for messages: "relu_mh, ip, l2 or cosine".
std::string builtin_score_choices();

}  // namespace winnow::ops
