// The whole C API path on the GPU: plan, build, workspace, execute on a stream, and the
// same execute captured in a CUDA graph and replayed (no allocation, no sync inside).
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "testing/harness.h"
#include "capi_support.h"
#include "capi_tensor.h"
#include "support.h"
#include "topk_check.h"
#include "winnow.h"

using namespace winnow;

namespace {
using test::capi_tensor;

// A relu_mh plan (64 heads, d = 128, fp8 with key scale) made and built through the C
// API, with the same problem's random data on the device, for the C API [gpu] cases.
// The context and plan come first among the members, so that they are destroyed last:
// the device buffers are freed while the context they were allocated in still exists.
struct CapiHandles {
  winnowContext_t ctx = nullptr;
  winnowPlan_t plan = nullptr;
  CapiHandles() = default;
  CapiHandles(const CapiHandles&) = delete;
  CapiHandles& operator=(const CapiHandles&) = delete;
  ~CapiHandles() {
    if (plan) winnowPlanDestroy(plan);
    if (ctx) winnowDestroy(ctx);
  }
};

struct CapiDsa {
  CapiHandles handles;
  winnowContext_t& ctx = handles.ctx;
  winnowPlan_t& plan = handles.plan;
  size_t ws_bytes = 0, counters = 0;
  ops::ProblemData d;
  int64_t rows, keys;
  rt::DeviceBuffer q, k, w, ks, ws;

  CapiDsa(const winnowProblemDesc_t& desc, const ops::TopkProblem& p, int64_t rows_,
          int64_t keys_, uint64_t seed)
      : rows(rows_), keys(keys_) {
    REQUIRE_OK(winnowCreate(&ctx, 0));
    REQUIRE_OK(winnowPlanCreate(ctx, &desc, &plan));
    REQUIRE_OK(winnowPlanBuild(plan));
    REQUIRE_OK(winnowPlanGetWorkspaceSize(plan, &ws_bytes));
    REQUIRE_OK(winnowPlanGetCounterOffset(plan, &counters));
    std::mt19937_64 rng(seed);
    d = ops::random_problem(p, rows, keys, rng);
    q = rt::DeviceBuffer(d.q.bytes.size());
    k = rt::DeviceBuffer(d.k.bytes.size());
    w = rt::DeviceBuffer(d.w.size() * 4);
    ks = rt::DeviceBuffer(d.kscale.size() * 4);
    ws = rt::DeviceBuffer(ws_bytes);
    q.upload(d.q.bytes.data(), q.size());
    k.upload(d.k.bytes.data(), k.size());
    w.upload(d.w.data(), w.size());
    ks.upload(d.kscale.data(), ks.size());
  }

  // Rows [r0, r1) of q and the weights, all keys, as execute's inputs.
  void inputs(int64_t r0, int64_t r1, winnowTensor_t (&in)[WINNOW_NUM_INPUTS]) const {
    char* qb = static_cast<char*>(q.data()) + r0 * 64 * 128;  // fp8: one byte per element
    float* wb = static_cast<float*>(w.data()) + r0 * 64;
    in[WINNOW_INPUT_Q] = capi_tensor(qb, WINNOW_DTYPE_FP8_E4M3, {r1 - r0, 64, 128});
    in[WINNOW_INPUT_K] = capi_tensor(k.data(), WINNOW_DTYPE_FP8_E4M3, {keys, 128});
    in[WINNOW_INPUT_WEIGHTS] = capi_tensor(wb, WINNOW_DTYPE_FLOAT32, {r1 - r0, 64});
    in[WINNOW_INPUT_KEY_SCALE] = capi_tensor(ks.data(), WINNOW_DTYPE_FLOAT32, {keys});
  }

  // Rows whose window ran past num_keys, as the last call left the counter.
  uint32_t bad_windows() const {
    uint32_t count[2];
    rt::check(rt::driver().cuMemcpyDtoH(count, ws.ptr() + counters, sizeof count), "counters");
    return count[1];
  }
};

}  // namespace

TEST_CASE("C API: execute, then the same call in a CUDA graph, equal the reference", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  winnowProblemDesc_t desc;
  winnowProblemDescInit(&desc);
  desc.k = 256;
  desc.heads = 64;
  desc.output_flags = WINNOW_OUTPUT_SORTED;
  // The same problem through the ops layer, for data and the reference.
  ops::TopkProblem p;
  p.score = ir::relu_mh(true);
  p.k = desc.k;
  p.sorted = true;
  const int64_t rows = 64, keys = 10000;
  const CapiDsa c(desc, p, rows, keys, test::test_seed());
  const ops::ProblemData& d = c.d;
  // A built plan has nothing left to finish: the call only confirms it, every time.
  REQUIRE_OK(winnowPlanFinishBuild(c.plan));
  REQUIRE_OK(winnowPlanFinishBuild(c.plan));

  const rt::DriverApi& cu = rt::driver();
  rt::DeviceBuffer idx(rows * p.k * 4), sc(rows * p.k * 4);
  winnowTensor_t in[WINNOW_NUM_INPUTS] = {};
  c.inputs(0, rows, in);
  winnowTensor_t oi = capi_tensor(idx.data(), WINNOW_DTYPE_INT32, {rows, p.k});
  winnowTensor_t os = capi_tensor(sc.data(), WINNOW_DTYPE_FLOAT32, {rows, p.k});

  CUstream stream;
  rt::check(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  REQUIRE_OK(winnowExecute(c.plan, in, WINNOW_NUM_INPUTS, &oi, &os, c.ws.data(), c.ws_bytes,
                           stream));
  rt::check(cu.cuStreamSynchronize(stream), "sync");
  ops::RunResult direct;
  direct.indices.resize(rows * p.k);
  direct.scores.resize(rows * p.k);
  idx.download(direct.indices.data(), direct.indices.size() * 4);
  sc.download(direct.scores.data(), direct.scores.size() * 4);
  test::check_against_reference(p, d, direct, {0, 17, 63}, false);

  // Poison the outputs, then capture and replay.
  std::vector<int> poison(rows * p.k, 12345);
  idx.upload(poison.data(), poison.size() * 4);
  CUgraph graph;
  CUgraphExec exec;
  rt::check(cu.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "capture");
  REQUIRE_OK(winnowExecute(c.plan, in, WINNOW_NUM_INPUTS, &oi, &os, c.ws.data(), c.ws_bytes,
                           stream));
  rt::check(cu.cuStreamEndCapture(stream, &graph), "end capture");
  rt::check(cu.cuGraphInstantiate(&exec, graph, 0), "instantiate");
  rt::check(cu.cuGraphLaunch(exec, stream), "graph launch");
  rt::check(cu.cuGraphLaunch(exec, stream), "graph launch");
  rt::check(cu.cuStreamSynchronize(stream), "sync");
  std::vector<int> replay(rows * p.k);
  idx.download(replay.data(), replay.size() * 4);
  CHECK(replay == direct.indices);  // two runs (and graph replays) give the same bits
  CHECK(c.bad_windows() == 0);
  cu.cuGraphExecDestroy(exec);
  cu.cuGraphDestroy(graph);
  cu.cuStreamDestroy(stream);
}

// The chunked-prefill cases: relu_mh (64 heads, d = 128, fp8 with key scale), k = 256,
// compressed causal ratio 4 (position r sees keys t < (r + 1) / 4) over 4096 positions and
// 1024 keys, its one-call result checked against the CPU reference; each case then runs
// the sequence in chunks and compares with that result.
struct CausalChunks {
  static constexpr int64_t rows = 4096, keys = 1024;
  winnowProblemDesc_t desc;
  ops::TopkProblem p;
  std::unique_ptr<CapiDsa> c;
  rt::DeviceBuffer idx;
  ops::RunResult one;  // the whole sequence in one winnowExecute
  explicit CausalChunks(uint64_t seed) {
    winnowProblemDescInit(&desc);
    desc.k = 256;
    desc.window = WINNOW_WINDOW_CAUSAL;
    desc.causal_ratio = 4;
    desc.causal_offset = 0;
    p.score = ir::relu_mh(true);
    p.k = desc.k;
    p.window = ops::WindowKind::Causal;
    p.causal_ratio = 4;
    c = std::make_unique<CapiDsa>(desc, p, rows, keys, seed);
    idx = rt::DeviceBuffer(rows * p.k * 4);
    run(0, rows, nullptr);
    one.indices = download();
    test::check_against_reference(p, c->d, one, {0, 3, 1000, 2501, rows - 1}, false);
    std::vector<int> poison(rows * p.k, 12345);
    idx.upload(poison.data(), poison.size() * 4);
  }
  // Rows [r0, r1) of the sequence: the inputs and the output start at row r0.
  void inputs(int64_t r0, int64_t r1, winnowTensor_t (&in)[WINNOW_NUM_INPUTS],
              winnowTensor_t* out) const {
    c->inputs(r0, r1, in);
    int* ob = static_cast<int*>(idx.data()) + r0 * p.k;
    *out = capi_tensor(ob, WINNOW_DTYPE_INT32, {r1 - r0, p.k});
  }
  void run(int64_t r0, int64_t r1, const winnowCallOptions_t* options) const {
    winnowTensor_t in[WINNOW_NUM_INPUTS] = {}, oi;
    inputs(r0, r1, in, &oi);
    REQUIRE_OK(winnowExecuteEx(c->plan, in, WINNOW_NUM_INPUTS, &oi, nullptr, c->ws.data(),
                               c->ws_bytes, nullptr, options));
  }
  std::vector<int> download() const {
    std::vector<int> v(rows * p.k);
    rt::check(rt::driver().cuCtxSynchronize(), "sync");
    idx.download(v.data(), v.size() * 4);
    return v;
  }
};

TEST_CASE("C API: chunks with per-call causal offsets equal one call", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  const CausalChunks s(test::test_seed() + 5);
  winnowCallOptions_t o;
  winnowCallOptionsInit(&o);
  const int64_t cuts[] = {0, 1000, 2501, s.rows};  // 2501: a chunk starting at an odd row
  for (int i = 0; i < 3; ++i) {
    o.causal_offset = cuts[i];
    o.accumulate_counters = i > 0;  // the first call resets the counters
    s.run(cuts[i], cuts[i + 1], &o);
  }
  CHECK(s.download() == s.one.indices);  // exact results do not depend on the chunking
  CHECK(s.c->bad_windows() == 0);        // no window ran past num_keys in any chunk
}

TEST_CASE("C API: the sequence in chunks (winnowExecuteStream) equals one call", "[gpu]") {
  WINNOW_REQUIRE_GPU();
  INFO("seed " << test::test_seed());
  CausalChunks s(test::test_seed() + 6);
  winnowTensor_t in[WINNOW_NUM_INPUTS] = {}, oi;
  s.inputs(0, s.rows, in, &oi);
  for (const int64_t chunk_rows : {int64_t(1000), int64_t(0)}) {  // uneven chunks; chosen
    for (const int hint : {1, 0}) {
      INFO("chunk_rows " << chunk_rows << " sample_hint " << hint);
      std::vector<int> poison(s.rows * s.p.k, 12345);
      s.idx.upload(poison.data(), poison.size() * 4);
      winnowStreamOptions_t o;
      winnowStreamOptionsInit(&o);
      o.chunk_rows = chunk_rows;
      o.sample_hint = hint;
      REQUIRE_OK(winnowExecuteStream(s.c->plan, in, WINNOW_NUM_INPUTS, &oi, nullptr,
                                     s.c->ws.data(), s.c->ws_bytes, nullptr, &o));
      CHECK(s.download() == s.one.indices);  // exact results do not depend on the chunking
      CHECK(s.c->bad_windows() == 0);
    }
  }
}
