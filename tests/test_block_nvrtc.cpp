// The block-select and block-sparse attention kernels through NVRTC for sm_90a, with no GPU.
#include "compiler/backend/backend.h"
#include "ops/block/block_attention.h"
#include "ops/block/block_select.h"
#include "support.h"

using namespace winnow;

namespace {

ops::BlockProblem problem(int head_dim) {
  ops::BlockProblem p;
  p.head_dim = head_dim;
  p.arch = backend::parse_arch("sm_90a");
  return p;
}

}  // namespace

// A compiled cubin: an ELF with SASS.
template <class Op>
void check_builds(Op& op) {
  rt::CubinCache cache(std::nullopt);
  auto be = backend::make_nvrtc_backend();
  op.build(cache, *be);
  REQUIRE(op.cubin().size() > 1000);
  CHECK(std::string(op.cubin().data() + 1, 3) == "ELF");
  CHECK(op.content_key().size() == 64);
  CHECK(static_cast<unsigned char>(op.cubin()[18]) == 190);  // EM_CUDA
}

TEST_CASE("block-select and block-sparse attention compile for sm_90a without a GPU", "[nvrtc]") {
  const int d = GENERATE(64, 128);
  INFO("head_dim " << d);
  auto select = ops::BlockSelectOp::create(problem(d), nullptr);
  CHECK_THAT(select->source(), Catch::Contains("winnow_block_score"));
  CHECK_THAT(select->source(), Catch::Contains("struct WinnowScore"));
  check_builds(*select);
  CHECK_THROWS_AS(select->execute({}, {}, {}, {}, {}, nullptr, nullptr, 0, nullptr),
                  ops::InvalidArgument);  // q is null: refused before anything runs
  auto attention = ops::BlockAttentionOp::create(problem(d), nullptr);
  CHECK_THAT(attention->source(), Catch::Contains("winnow_block_attention"));
  check_builds(*attention);
}

TEST_CASE("the wgmma block attention kernel is sm_90a's default, 0 or the variable keeps mma.sync",
          "[nvrtc]") {
  const int d = GENERATE(64, 128);
  INFO("head_dim " << d);
  auto p = problem(d);
  p.attention_wgmma = 1;
  auto wgmma = ops::BlockAttentionOp::create(p, nullptr);
  CHECK_THAT(wgmma->source(), Catch::Contains("block_attention_wgmma<WinnowBlockConfig>"));
  CHECK_THAT(wgmma->plan_text(), Catch::Contains("attention_wgmma=1"));
  check_builds(*wgmma);
  // Unset (-1) with the variable unset or "1": the same plan; "0": the mma.sync kernel.
  p.attention_wgmma = -1;
  {
    test::ScopedEnv unset{"WINNOW_BLOCK_ATTENTION_WGMMA", nullptr};
    CHECK(ops::BlockAttentionOp::create(p, nullptr)->plan_text() == wgmma->plan_text());
  }
  {
    test::ScopedEnv on{"WINNOW_BLOCK_ATTENTION_WGMMA", "1"};
    CHECK(ops::BlockAttentionOp::create(p, nullptr)->plan_text() == wgmma->plan_text());
  }
  {
    test::ScopedEnv other{"WINNOW_BLOCK_ATTENTION_WGMMA", "yes"};  // not 0: the default
    CHECK(ops::BlockAttentionOp::create(p, nullptr)->plan_text() == wgmma->plan_text());
  }
  {
    test::ScopedEnv off{"WINNOW_BLOCK_ATTENTION_WGMMA", "0"};
    auto plain = ops::BlockAttentionOp::create(p, nullptr);
    CHECK_THAT(plain->source(), !Catch::Contains("wgmma"));
    CHECK_THAT(plain->plan_text(), !Catch::Contains("wgmma"));
  }
  // Off: the mma.sync kernel and the plan text (so the key) of before.
  p.attention_wgmma = 0;
  auto plain = ops::BlockAttentionOp::create(p, nullptr);
  CHECK_THAT(plain->source(), !Catch::Contains("wgmma"));
  CHECK_THAT(plain->plan_text(), !Catch::Contains("wgmma"));
  // Other archs keep the mma.sync kernel, asked for or not.
  p.arch = backend::parse_arch("sm_100a");
  for (int flag : {1, -1}) {
    p.attention_wgmma = flag;
    CHECK_THAT(ops::BlockAttentionOp::create(p, nullptr)->source(), !Catch::Contains("wgmma"));
  }
}

TEST_CASE("the wgmma block score pass compiles for sm_90a, the default there", "[nvrtc]") {
  const int d = GENERATE(64, 128);
  INFO("head_dim " << d);
  auto p = problem(d);
  p.score_wgmma = 1;
  auto wgmma = ops::BlockSelectOp::create(p, nullptr);
  CHECK_THAT(wgmma->source(), Catch::Contains("block_score_wgmma<WinnowBlockConfig, WinnowScore>"));
  CHECK_THAT(wgmma->plan_text(), Catch::Contains("score_tile=128"));
  CHECK_THAT(wgmma->plan_text(), Catch::Contains("score_wgmma=1"));
  check_builds(*wgmma);
  // Off: the mma.sync kernel and its plan text (so its key).
  p.score_wgmma = 0;
  auto plain = ops::BlockSelectOp::create(p, nullptr);
  CHECK_THAT(plain->source(), !Catch::Contains("wgmma"));
  CHECK_THAT(plain->plan_text(), !Catch::Contains("wgmma"));
  // Unset in the problem: on unless WINNOW_BLOCK_SCORE_WGMMA is "0"; the flag overrides it.
  p.score_wgmma = -1;
  for (const char* v : {static_cast<const char*>(nullptr), "1", "yes"}) {
    test::ScopedEnv env("WINNOW_BLOCK_SCORE_WGMMA", v);
    INFO("WINNOW_BLOCK_SCORE_WGMMA " << (v ? v : "unset"));
    CHECK(ops::BlockSelectOp::create(p, nullptr)->plan_text() == wgmma->plan_text());
  }
  {
    test::ScopedEnv off("WINNOW_BLOCK_SCORE_WGMMA", "0");
    CHECK(ops::BlockSelectOp::create(p, nullptr)->plan_text() == plain->plan_text());
    p.score_wgmma = 1;
    CHECK(ops::BlockSelectOp::create(p, nullptr)->plan_text() == wgmma->plan_text());
    p.score_wgmma = -1;
  }
  // Other archs keep the mma.sync kernel, asked for or not.
  p.arch = backend::parse_arch("sm_100a");
  for (int flag : {1, -1}) {
    p.score_wgmma = flag;
    CHECK_THAT(ops::BlockSelectOp::create(p, nullptr)->source(), !Catch::Contains("wgmma"));
  }
}

TEST_CASE("block problems are checked with messages", "[nvrtc]") {
  auto p = problem(128);
  p.kv_heads = 5;
  CHECK_THROWS_WITH(ops::BlockSelectOp::create(p, nullptr),
                    Catch::Contains("multiple of kv_heads"));
  p = problem(96);
  CHECK_THROWS_AS(ops::BlockAttentionOp::create(p, nullptr), ops::NotSupported);
  // Each op names itself.
  CHECK_THROWS_WITH(ops::BlockAttentionOp::create(p, nullptr),
                    "head_dim = 96 is not supported: block-attention takes 64 or 128");
  CHECK_THROWS_WITH(ops::BlockSelectOp::create(p, nullptr),
                    "head_dim = 96 is not supported: block-select takes 64 or 128");
  p = problem(128);
  p.arch = backend::parse_arch("sm_80");
  CHECK_THROWS_AS(ops::BlockSelectOp::create(p, nullptr), ops::NotSupported);
  ops::BlockSelectRule r;
  r.alpha = 1.5f;
  CHECK_THROWS_WITH(ops::validate_block_rule(r), Catch::Contains("alpha"));
  r = {};
  r.local_blocks = 0;
  CHECK_THROWS_WITH(ops::validate_block_rule(r), Catch::Contains("diagonal"));
}
