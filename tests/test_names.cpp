// ops/common/names.h: the one table of dtype spellings and of built-in scores that the C API and
// the `winnow` tool both read.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "compiler/ir/ir.h"
#include "ops/common/names.h"

using namespace winnow;

TEST_CASE("dtype spellings: every name and short name parses back, int32 is not a score dtype",
          "[capi]") {
  for (const ops::DTypeName& d : ops::dtype_names()) {
    CHECK(ops::dtype_from_c(d.c_value) == d.dtype);
    CHECK(std::string(ops::dtype_name(d.dtype)) == d.name);
    if (d.score) {
      CHECK(ops::parse_score_dtype(d.name) == d.dtype);
      CHECK(ops::parse_score_dtype(d.short_name) == d.dtype);
    } else {
      CHECK_FALSE(ops::parse_score_dtype(d.name).has_value());
    }
  }
  CHECK(ops::parse_score_dtype("e4m3") == ops::DType::E4M3);
  CHECK_FALSE(ops::parse_score_dtype("fp64").has_value());
  CHECK_FALSE(ops::parse_score_dtype("").has_value());
  CHECK(ops::dtype_from_c(WINNOW_DTYPE_INVALID) == ops::DType::Invalid);
  CHECK(ops::dtype_from_c(static_cast<winnowDataType_t>(99)) == ops::DType::Invalid);
  CHECK(ops::score_dtype_choices() == "fp8, bf16, fp16 or fp32");
}

TEST_CASE("built-in scores: one entry per winnowScore_t but EXPR, found by name and by value",
          "[capi]") {
  std::set<int> values;
  for (const ops::BuiltinScore& s : ops::builtin_scores()) {
    CHECK(values.insert(s.c_value).second);
    CHECK(ops::find_builtin_score(s.name) == &s);
    CHECK(ops::find_builtin_score(s.c_value) == &s);
    CHECK_FALSE(ir::print(s.program(true)).empty());
  }
  CHECK(values == std::set<int>{WINNOW_SCORE_RELU_MH, WINNOW_SCORE_IP, WINNOW_SCORE_L2,
                                WINNOW_SCORE_COSINE});
  CHECK(ops::find_builtin_score(WINNOW_SCORE_EXPR) == nullptr);
  CHECK(ops::find_builtin_score("expr") == nullptr);
  CHECK(ir::print(ops::find_builtin_score("relu_mh")->program(true)) ==
        ir::print(ir::relu_mh(true)));
  CHECK(ir::print(ops::find_builtin_score("relu_mh")->program(false)) ==
        ir::print(ir::relu_mh(false)));
  CHECK(ops::builtin_score_choices() == "relu_mh, ip, l2 or cosine");
}
