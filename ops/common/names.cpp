#include "ops/common/names.h"

#include <array>
#include <vector>

namespace winnow::ops {
namespace {

constexpr std::array kDTypes = {
    DTypeName{DType::E4M3, WINNOW_DTYPE_FP8_E4M3, "fp8_e4m3", "fp8", true},
    DTypeName{DType::BF16, WINNOW_DTYPE_BFLOAT16, "bf16", "bf16", true},
    DTypeName{DType::F16, WINNOW_DTYPE_FLOAT16, "fp16", "fp16", true},
    DTypeName{DType::F32, WINNOW_DTYPE_FLOAT32, "fp32", "fp32", true},
    DTypeName{DType::I32, WINNOW_DTYPE_INT32, "int32", "int32", false},
    DTypeName{DType::U8, WINNOW_DTYPE_UINT8, "uint8", "uint8", false},
};

const std::array kScores = {
    BuiltinScore{WINNOW_SCORE_RELU_MH, "relu_mh", true, [](bool s) { return ir::relu_mh(s); }},
    BuiltinScore{WINNOW_SCORE_IP, "ip", false, [](bool) { return ir::ip(); }},
    BuiltinScore{WINNOW_SCORE_L2, "l2", false, [](bool) { return ir::l2(); }},
    BuiltinScore{WINNOW_SCORE_COSINE, "cosine", false, [](bool) { return ir::cosine(); }},
};

// "a, b, c or d"
template <typename Range, typename Name>
std::string choices(const Range& items, Name name) {
  std::vector<const char*> names;
  for (const auto& item : items)
    if (const char* n = name(item)) names.push_back(n);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

}  // namespace

const char* dtype_name(DType t) {
  for (const DTypeName& d : dtype_names())
    if (d.dtype == t) return d.name;
  return "invalid";
}

std::span<const DTypeName> dtype_names() { return kDTypes; }

const char* dtype_short_name(DType t) {
  for (const DTypeName& d : kDTypes)
    if (d.dtype == t) return d.short_name;
  return "invalid";
}

DType dtype_from_c(winnowDataType_t t) {
  for (const DTypeName& d : kDTypes)
    if (d.c_value == t) return d.dtype;
  return DType::Invalid;
}

std::optional<DType> parse_score_dtype(std::string_view spelling) {
  for (const DTypeName& d : kDTypes)
    if (d.score && (spelling == d.name || spelling == d.short_name)) return d.dtype;
  if (spelling == "e4m3") return DType::E4M3;
  return std::nullopt;
}

std::string score_dtype_choices() {
  return choices(kDTypes, [](const DTypeName& d) { return d.score ? d.short_name : nullptr; });
}

std::span<const BuiltinScore> builtin_scores() { return kScores; }

const BuiltinScore* find_builtin_score(std::string_view name) {
  for (const BuiltinScore& s : kScores)
    if (name == s.name) return &s;
  return nullptr;
}

const BuiltinScore* find_builtin_score(winnowScore_t c_value) {
  for (const BuiltinScore& s : kScores)
    if (s.c_value == c_value) return &s;
  return nullptr;
}

std::string builtin_score_choices() {
  return choices(kScores, [](const BuiltinScore& s) { return s.name; });
}

}  // namespace winnow::ops
