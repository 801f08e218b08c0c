// The fast first build (ops/fast_first_build.h, WINNOW_FAST_FIRST_BUILD=1): the cache's
// lookup without a compile, the first tier's request and key, the background full build
// filling the cache; on a GPU, the first tier's kernels (NVRTC -Ofc=max -split-compile=0) against
// the full build's, bit for bit, and a plan that starts on the first tier and switches.
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "compiler/backend/backend.h"
#include "compiler/ir/ir.h"
#include "ops/topk/fast_first_build.h"
#include "ops/common/jit_module.h"
#include "ops/common/topk_op.h"
#include "runtime/kernel_cache.h"
#include "support.h"
#include "tests/cache_support.h"
#include "topk_check.h"

using namespace winnow;

namespace {

// A backend that is not NVRTC (the fast first build is NVRTC's options only).
struct OtherBackend : backend::Backend {
  std::string name() const override { return "llvm"; }
  std::string version() const override { return "test"; }
  backend::CompileResult compile(const backend::CompileRequest&, bool) const override {
    throw std::logic_error("not compiled in this test");
  }
};

ops::TopkProblem relu_problem() {
  ops::TopkProblem p = test::relu_mh_problem(64, 64, ops::DType::E4M3);
  p.arch = backend::parse_arch("sm_90a");
  return p;
}

}  // namespace

TEST_CASE("CubinCache::find gives memory and disk hits and never compiles", "[cache]") {
  test::TempDir dir;
  const rt::CubinId id{"sm_90a", std::string(64, 'a'), "nvrtc 13.0"};
  rt::CubinCache cache(rt::DiskStore(dir.path));
  CHECK_FALSE(cache.find(id));
  int compiles = 0;
  const std::vector<char> cubin(256, 'x');
  cache.get(id, "test", [&] {
    ++compiles;
    return cubin;
  });
  REQUIRE(compiles == 1);
  const auto memory = cache.find(id);
  REQUIRE(memory);
  CHECK(memory->from == rt::CubinCache::Result::From::Memory);
  CHECK(memory->cubin == cubin);
  rt::CubinCache other(rt::DiskStore(dir.path));  // another process's view: the disk
  const auto disk = other.find(id);
  REQUIRE(disk);
  CHECK(disk->from == rt::CubinCache::Result::From::Disk);
  CHECK(disk->cubin == cubin);
  CHECK(other.find(id)->from == rt::CubinCache::Result::From::Memory);
  CHECK(compiles == 1);
}

TEST_CASE("fast first build: its request, its key, the background full build", "[nvrtc]") {
  const auto nvrtc = backend::make_nvrtc_backend();
  {
    test::ScopedEnv unset{"WINNOW_FAST_FIRST_BUILD", nullptr};
    CHECK_FALSE(ops::fast_first_wanted(*nvrtc));
  }
  {
    test::ScopedEnv on{"WINNOW_FAST_FIRST_BUILD", "1"};
    CHECK(ops::fast_first_wanted(*nvrtc));
    CHECK_FALSE(ops::fast_first_wanted(OtherBackend{}));
  }
  {
    test::ScopedEnv other{"WINNOW_FAST_FIRST_BUILD", "yes"};
    CHECK_FALSE(ops::fast_first_wanted(*nvrtc));
  }
  test::ScopedEnv no_options{"WINNOW_NVRTC_OPTIONS", nullptr};
  auto op = ops::TopkOp::create(relu_problem(), nullptr);
  const backend::CompileRequest full = op->compile_request();
  const backend::CompileRequest fast = ops::fast_first_request(full);
  CHECK(fast.options.size() == full.options.size() + ops::fast_first_options().size());
  CHECK(std::is_sorted(fast.options.begin(), fast.options.end()));
  CHECK(ops::fast_first_request(fast).options == fast.options);  // added once
  CHECK(fast.source == full.source);
  const std::string program = op->cache_program();
  CHECK(ops::module_id(*nvrtc, fast, program).key != ops::module_id(*nvrtc, full, program).key);

  // The first tier compiles (an sm_90a cubin), and the background build fills the cache
  // with the full one under the full request's key.
  rt::CubinCache cache(std::nullopt);
  CHECK_FALSE(ops::is_cached(cache, *nvrtc, full, program));
  ops::BackgroundBuild background(cache, *nvrtc, full, "winnow_topk", program, "test");
  const ops::CompiledModule first = ops::compile_cached(cache, *nvrtc, fast, "winnow_topk", program, "test");
  CHECK(std::string(first.cubin.data() + 1, 3) == "ELF");
  const auto& module = background.wait();
  REQUIRE(module);
  CHECK(background.done());
  CHECK(module->key == ops::module_id(*nvrtc, full, program).key);
  CHECK(module->cubin != first.cubin);
  CHECK(ops::is_cached(cache, *nvrtc, full, program));
  CHECK(background.seconds() > 0);

  // Without a device the op compiles the full build only (nothing would run the first).
  test::ScopedEnv on{"WINNOW_FAST_FIRST_BUILD", "1"};
  rt::CubinCache empty(std::nullopt);
  auto compile_only = ops::TopkOp::create(relu_problem(), nullptr);
  compile_only->build(empty, *nvrtc);
  CHECK(compile_only->build_state() == "full");
  CHECK(compile_only->content_key() == module->key);
}

// A backend that records the nice value of the thread that compiles, then fails.
struct NiceProbe : backend::Backend {
  mutable std::atomic<int> nice{-100};
  std::string name() const override { return "nvrtc"; }
  std::string version() const override { return "probe"; }
  backend::CompileResult compile(const backend::CompileRequest&, bool) const override {
    errno = 0;
    const int v = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
    nice = errno == 0 ? v : -200;
    throw backend::CompileError("probe: not compiled", "", "");
  }
};

TEST_CASE("fast first build: the background full build yields the cores to the first tier",
          "[nvrtc]") {
  errno = 0;
  const int mine = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  REQUIRE(errno == 0);
  NiceProbe probe;
  rt::CubinCache cache(std::nullopt);
  backend::CompileRequest req;
  req.source = "// probe";
  req.arch = backend::parse_arch("sm_90a");
  ops::BackgroundBuild background(cache, probe, req, "winnow_topk", "probe", "test");
  CHECK_FALSE(background.wait());  // the probe's compile fails: logged, nothing cached
  CHECK(probe.nice == std::min(19, mine + ops::kBackgroundNice));
  errno = 0;
  CHECK(getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid))) == mine);  // the caller's stays
}

// The first tier's kernel is an ordinary build with its options: built that way
// (WINNOW_NVRTC_OPTIONS, the same key as the first tier), its materialized scores equal the
// full build's bit for bit and its fused results equal materialize + exact select; then a
// plan under WINNOW_FAST_FIRST_BUILD=1 with nothing cached starts on the first tier, gives
// the same results, switches (finish_build) and gives them again.
TEST_CASE("fast first build: the first tier's kernels equal the full build's, and the switch", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  auto& f = test::GpuFixture::get();
  if (f.be->name() != "nvrtc") {
    WARN("WINNOW_SKIP: the fast first build is NVRTC's; the tests run on " << f.be->name());
    return;
  }
  const int pick = GENERATE(0, 1);
  ops::TopkProblem p;
  if (pick == 0) {
    p = test::relu_mh_problem(64, 512, ops::DType::E4M3);
  } else {
    p = test::relu_mh_problem(16, 100, ops::DType::BF16);
    p.score = ir::parse("sum_h(w[h] * softplus(dot(h))) * kscale");
  }
  p.arch = ops::device_arch(*f.ctx);
  INFO(ir::print(p.score));
  ops::TopkProblem pm = p;
  pm.mode = ops::Mode::Materialize;
  std::mt19937_64 rng(test::test_seed() ^ uint64_t(pick));
  const ops::ProblemData d = ops::random_problem(p, 37, 5000, rng);
  auto build = [&](const ops::TopkProblem& q, rt::CubinCache& cache) {
    auto op = ops::TopkOp::create(q, f.ctx.get());
    op->build(cache, *f.be);
    return op;
  };
  rt::CubinCache cache(std::nullopt);
  auto full_mat = build(pm, cache);
  auto full = build(p, cache);
  const ops::RunResult want_scores = ops::run_on_device(*full_mat, *f.ctx, d);
  const ops::RunResult want = ops::run_on_device(*full, *f.ctx, d);
  {
    std::string first_tier;  // the first tier's options, as WINNOW_NVRTC_OPTIONS takes them
    for (const std::string& o : ops::fast_first_options()) first_tier += (first_tier.empty() ? "" : " ") + o;
    test::ScopedEnv options{"WINNOW_NVRTC_OPTIONS", first_tier.c_str()};
    auto fast_mat = build(pm, cache);
    auto fast = build(p, cache);
    const ops::RunResult scores = ops::run_on_device(*fast_mat, *f.ctx, d);
    REQUIRE(scores.scores.size() == want_scores.scores.size());
    size_t differ = 0;
    for (size_t i = 0; i < scores.scores.size(); ++i)
      differ += std::memcmp(&scores.scores[i], &want_scores.scores[i], sizeof(float)) != 0;
    INFO(differ << " materialized scores differ between the tiers");
    CHECK(differ == 0);
    const ops::RunResult got = ops::run_on_device(*fast, *f.ctx, d);
    test::check_against_materialize(p, d, got, scores);
    CHECK(got.indices == want.indices);
  }
  test::ScopedEnv on{"WINNOW_FAST_FIRST_BUILD", "1"};
  rt::CubinCache fresh(std::nullopt);
  auto tiered = build(p, fresh);
  const std::string state = tiered->build_state();
  INFO("state after build: " << state);
  CHECK(state.rfind("fast first build", 0) == 0);
  CHECK(ops::run_on_device(*tiered, *f.ctx, d).indices == want.indices);
  CHECK(tiered->finish_build());
  CHECK(tiered->build_state() == "full");
  CHECK(ops::run_on_device(*tiered, *f.ctx, d).indices == want.indices);
}
