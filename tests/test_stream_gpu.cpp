// The sample hint and the streaming driver on the GPU: every result equal to materialize
// + exact select and to the CPU reference, whatever the hint holds.
#include <algorithm>
#include <numeric>

#include "support.h"
#include "topk_check.h"

using namespace winnow;
using winnow::test::GpuFixture;

namespace {

// n distinct random keys of [lo, hi), ascending (as an unsorted output holds them).
std::vector<int> random_keys(std::mt19937_64& rng, int n, int lo, int hi) {
  std::vector<int> all(size_t(hi - lo));
  std::iota(all.begin(), all.end(), lo);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(std::min<size_t>(all.size(), size_t(n)));
  std::sort(all.begin(), all.end());
  return all;
}

ops::TopkProblem causal(ops::TopkProblem p, int ratio, int64_t offset) {
  p.window = ops::WindowKind::Causal;
  p.causal_ratio = ratio;
  p.causal_offset = offset;
  return p;
}

}  // namespace

TEST_CASE("sample hint of random keys: ascending, unsorted with duplicates, longest",
          "[gpu][hint]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  const int k = GENERATE(1, 512);
  const int form = GENERATE(0, 1, 2);  // ascending keys, shuffled with repeats, longest
  auto p = test::relu_mh_problem(64, k, ops::DType::E4M3);
  p.window = GENERATE(ops::WindowKind::Dense, ops::WindowKind::Causal);
  p.causal_offset = 5003 - 40;
  INFO("k " << k << " form " << form << " window " << int(p.window));
  const int most = int(GpuFixture::get().build(p)->max_sample_hint());  // 2 next_pow2(k)
  std::mt19937_64 rng(test::test_seed() + 17);
  test::run_and_check(p, 40, 5003, {}, {0, 39}, false, [&](ops::ProblemData& d) {
    if (form == 0) d.sample_hint = random_keys(rng, std::max(1, most / 2), 0, 5003);
    if (form == 1) {
      std::uniform_int_distribution<int> key(0, 5002);
      for (int i = 0; i < most - most / 4; ++i) d.sample_hint.push_back(key(rng));
      for (int i = 0; i < most / 4; ++i) d.sample_hint.push_back(d.sample_hint[i]);  // repeats
    }
    if (form == 2) d.sample_hint = random_keys(rng, most, 0, 5003);
  });
}

TEST_CASE("sample hint of the worst keys: a low gate, still exact", "[gpu][hint]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  const int k = GENERATE(16, 300);
  auto p = test::relu_mh_problem(64, k, ops::DType::E4M3);
  p.sample_size = GENERATE(0, -1);  // the hint alone, or beside the strided sample
  // More keys than the candidate capacity: the loose first gate makes the filter compact.
  const int64_t rows = 8, keys = 20011;
  test::run_and_check(p, rows, keys, {}, {0, 7}, false, [&](ops::ProblemData& d) {
    // The lowest reference scores of row 0 (rows of a block share the hint).
    const ops::HostInputs host = d.host(p);
    const std::vector<double> score = ops::reference_row_scores(p, host, 0, 0, keys);
    std::vector<std::pair<double, int>> by_score;
    for (int s = 0; s < keys; ++s) by_score.emplace_back(score[s], s);
    std::sort(by_score.begin(), by_score.end());
    for (int i = 0; i < 2 * k; ++i) d.sample_hint.push_back(by_score[i].second);
    std::sort(d.sample_hint.begin(), d.sample_hint.end());
  });
}

TEST_CASE("sample hint with keys outside the windows, negative and past num_keys",
          "[gpu][hint]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  const int k = GENERATE(8, 200);
  const int64_t rows = 300, keys = 2000;
  // Causal m = 4 from position 4 * 1000: row r sees [0, 1000 + (r + 1) / 4); ranges: random.
  auto p = causal(test::relu_mh_problem(64, k, ops::DType::BF16), 4, 4 * 1000);
  p.score = ir::relu_mh(false);
  const bool ranges = GENERATE(false, true);
  if (ranges) p.window = ops::WindowKind::Ranges;
  const int split = GENERATE(1, 3);
  p.key_splits = split;
  // Below the ~1000-key windows, so that rows take a sample (a window that fits the
  // buffer needs none).
  p.candidate_capacity = 800;
  INFO("k " << k << " ranges " << ranges << " key splits " << split);
  const int most = int(GpuFixture::get().build(p)->max_sample_hint());
  std::mt19937_64 rng(test::test_seed() + 29);
  test::run_and_check(p, rows, keys, {}, {0, 150, 299}, false, [&](ops::ProblemData& d) {
    d.sample_hint = {-7, -1};
    // Mostly keys no early row sees (past 1000 + r / 4), some it sees, then junk.
    for (int key : random_keys(rng, most - 5, 900, int(keys))) d.sample_hint.push_back(key);
    d.sample_hint.push_back(int(keys));
    d.sample_hint.push_back(int(keys) + 12345);
    d.sample_hint.push_back(5);  // below the running maximum: ignored
  });
}

TEST_CASE("a sample hint longer than the candidate capacity is refused", "[gpu][hint]") {
  WINNOW_REQUIRE_GPU();
  auto& f = GpuFixture::get();
  auto p = test::relu_mh_problem(64, 8, ops::DType::E4M3);
  auto op = f.build(p);
  std::mt19937_64 rng(test::test_seed());
  ops::ProblemData d = ops::random_problem(p, 4, 500, rng);
  d.sample_hint.assign(size_t(op->max_sample_hint() + 1), 3);
  CHECK_THROWS_WITH(ops::run_on_device(*op, *f.ctx, d),
                    Catch::Contains("sample_hint: shape[0] is"));
}

namespace {

// The streaming driver's result, checked against materialize + select and the CPU
// reference, and equal (bit for bit) to one launch of the same op.
void stream_equals_one_shot(const ops::StreamProblem& sp, int64_t rows, int64_t keys) {
  auto& f = GpuFixture::get();
  const ops::TopkProblem& p = sp.topk;
  std::mt19937_64 rng(test::test_seed() ^ uint64_t(rows * 7 + p.k));
  ops::ProblemData d = ops::random_problem(p, rows, keys, rng);
  auto stream = ops::StreamTopk::create(sp, f.ctx.get());
  stream->build(*f.cache, *f.be);
  INFO("chunks " << stream->chunks_for(rows).chunks << " of " << stream->chunks_for(rows).chunk_rows
                 << " rows, workspace " << stream->workspace_bytes());
  if (sp.topk.max_workspace_bytes) CHECK(stream->workspace_bytes() <= sp.topk.max_workspace_bytes);
  ops::RunResult rs = ops::run_on_device(*stream, *f.ctx, d);
  auto one = f.build(p);
  ops::RunResult r1 = ops::run_on_device(*one, *f.ctx, d);
  CHECK(rs.indices == r1.indices);
  CHECK(rs.scores == r1.scores);
  ops::TopkProblem pm = p;
  pm.mode = ops::Mode::Materialize;
  ops::RunResult rm = ops::run_on_device(*f.build(pm), *f.ctx, d);
  test::check_against_materialize(p, d, rs, rm);
  test::check_against_reference(p, d, rs, {0, rows / 2, rows - 1}, false);
}

}  // namespace

TEST_CASE("streaming driver: several chunks equal the one-shot result", "[gpu][stream]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  // bf16 with k = 64, fp8 with per-key scale and k = 512 (the csa-1m types, few kernels).
  const bool fp8 = GENERATE(false, true);
  ops::StreamProblem sp;
  // Offset 0: windows of at most 750 keys, which fit the buffer (no sample); 12000:
  // 3000 to 3750 keys, above the capacity, so rows sample and use the hint.
  sp.topk = causal(test::relu_mh_problem(64, fp8 ? 512 : 64, fp8 ? ops::DType::E4M3
                                                                   : ops::DType::BF16),
                   4, GENERATE(0, 12000));
  sp.topk.score = ir::relu_mh(fp8);
  sp.topk.candidate_capacity = fp8 ? 2048 : 1024;
  sp.chunk_rows = GENERATE(256, 700);
  sp.hint = GENERATE(true, false);
  sp.topk.sorted = sp.chunk_rows == 700;  // rank order: the hint is not ascending
  INFO("fp8 " << fp8 << " k " << sp.topk.k << " offset " << sp.topk.causal_offset << " chunk "
              << sp.chunk_rows << " hint " << sp.hint << " sorted " << sp.topk.sorted);
  const int64_t rows = test::sized(3000, 1000), keys = (sp.topk.causal_offset + rows) / 4;
  stream_equals_one_shot(sp, rows, keys);
}

TEST_CASE("streaming driver: a workspace bound and the default chunks", "[gpu][stream]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  auto& f = GpuFixture::get();
  ops::StreamProblem sp;
  sp.topk = causal(test::relu_mh_problem(64, 128, ops::DType::E4M3), 4, 0);
  const size_t unbounded = f.build(sp.topk)->workspace_bytes();
  sp.topk.max_workspace_bytes = unbounded / 8;
  stream_equals_one_shot(sp, 5000, 1250);
}

TEST_CASE("streaming driver: captured in a CUDA graph, replays give the same bits",
          "[gpu][stream]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  auto& f = GpuFixture::get();
  ops::StreamProblem sp;
  sp.topk = causal(test::relu_mh_problem(64, 512, ops::DType::E4M3), 4, 12000);
  sp.topk.candidate_capacity = 2048;
  sp.chunk_rows = 700;
  const int64_t rows = test::sized(3000, 1000), keys = (12000 + rows) / 4;
  std::mt19937_64 rng(test::test_seed() + 41);
  ops::ProblemData d = ops::random_problem(sp.topk, rows, keys, rng);
  auto stream_op = ops::StreamTopk::create(sp, f.ctx.get());
  stream_op->build(*f.cache, *f.be);
  const ops::RunResult direct = ops::run_on_device(*stream_op, *f.ctx, d);

  const rt::DriverApi& cu = rt::driver();
  f.ctx->bind();
  rt::DeviceBuffer q(d.q.bytes.size()), k(d.k.bytes.size()), w(d.w.size() * 4),
      ks(d.kscale.size() * 4), idx(rows * 512 * 4), ws(stream_op->workspace_bytes());
  q.upload(d.q.bytes.data(), q.size());
  k.upload(d.k.bytes.data(), k.size());
  w.upload(d.w.data(), w.size());
  ks.upload(d.kscale.data(), ks.size());
  ops::TopkInputs in;
  in.q = ops::contiguous_view(q.data(), ops::DType::E4M3, {rows, 64, 128});
  in.k = ops::contiguous_view(k.data(), ops::DType::E4M3, {keys, 128});
  in.weights = ops::contiguous_view(w.data(), ops::DType::F32, {rows, 64});
  in.key_scale = ops::contiguous_view(ks.data(), ops::DType::F32, {keys});
  const ops::TensorView out = ops::contiguous_view(idx.data(), ops::DType::I32, {rows, 512});
  std::vector<int> poison(size_t(rows) * 512, 12345);
  idx.upload(poison.data(), poison.size() * 4);

  CUstream stream;
  rt::check(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  CUgraph graph;
  CUgraphExec exec;
  rt::check(cu.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "capture");
  stream_op->execute(in, &out, nullptr, ws.data(), ws.size(), stream);
  rt::check(cu.cuStreamEndCapture(stream, &graph), "end capture");
  rt::check(cu.cuGraphInstantiate(&exec, graph, 0), "instantiate");
  for (int replay = 0; replay < 2; ++replay) {
    rt::check(cu.cuGraphLaunch(exec, stream), "graph launch");
    rt::check(cu.cuStreamSynchronize(stream), "sync");
    std::vector<int> got(size_t(rows) * 512);
    idx.download(got.data(), got.size() * 4);
    CHECK(got == direct.indices);
    idx.upload(poison.data(), poison.size() * 4);
  }
  cu.cuGraphExecDestroy(exec);
  cu.cuGraphDestroy(graph);
  cu.cuStreamDestroy(stream);
}
