#include "testing/paged_harness.h"

#include <algorithm>

#include "testing/harness.h"

namespace winnow::ops {

namespace {

// d on the device, with the views execute takes.
struct DeviceCall {
  rt::DeviceBuffer q, cache, table, lens, w, idx, ws, hint;
  size_t ws_bytes = 0;
  PagedInputs in;
  TensorView out;
  DeviceCall(const PagedTopkOp& op, const rt::Context& ctx, const PagedHostData& d,
             const PagedHint& h = {})
      : q(upload(d.q)), cache(upload(d.cache)), table(upload(d.block_table)),
        lens(upload(d.context_lens)), w(upload(d.w)),
        idx(std::max<size_t>(size_t(d.batch) * d.next_n * op.problem().k * 4, 16)),
        ws(std::max<size_t>(op.workspace_bytes(), 256)), ws_bytes(op.workspace_bytes()),
        hint(std::max<size_t>(h.rows.size() * 4, 16)) {
    const int64_t rows = int64_t(d.batch) * d.next_n;
    in.q = contiguous_view(q.data(), DType::E4M3, {d.batch, d.next_n, d.heads, 128});
    in.cache = contiguous_view(cache.data(), DType::U8, {d.num_blocks, 64, 1, 132});
    in.block_table = contiguous_view(table.data(), DType::I32, {d.batch, d.max_blocks});
    in.context_lens = d.lens_per_query
                          ? contiguous_view(lens.data(), DType::I32, {d.batch, d.next_n})
                          : contiguous_view(lens.data(), DType::I32, {d.batch});
    in.weights = contiguous_view(w.data(), DType::F32, {rows, d.heads});
    for (TensorView* v : {&in.q, &in.cache, &in.block_table, &in.context_lens, &in.weights})
      v->device = ctx.info().ordinal;
    out = contiguous_view(idx.data(), DType::I32, {rows, op.problem().k});
    out.device = ctx.info().ordinal;
    if (h.given) {
      rt::DeviceBuffer& at = h.in_place ? idx : hint;
      if (!h.rows.empty()) at.upload(h.rows.data(), h.rows.size() * 4);
      in.hint = contiguous_view(at.data(), DType::I32, {rows, op.problem().k});
      in.hint.device = ctx.info().ordinal;
    }
  }
  // The outputs and the first two counters, after the stream's work.
  PagedRunResult result(const PagedTopkOp& op, const PagedHostData& d, CUstream stream) {
    rt::check(rt::driver().cuStreamSynchronize(stream), "cuStreamSynchronize");
    PagedRunResult r;
    r.indices.resize(size_t(d.batch) * d.next_n * op.problem().k);
    if (!r.indices.empty()) idx.download(r.indices.data(), r.indices.size() * 4);
    uint32_t counters[2] = {0, 0};
    rt::check(rt::driver().cuMemcpyDtoH(counters, ws.ptr() + op.counter_offset(), 8),
              "cuMemcpyDtoH (counters)");
    r.fallback_rows = counters[0];
    r.bad_windows = counters[1];
    return r;
  }
};

}  // namespace

PagedRunResult run_paged_on_device(const PagedTopkOp& op, const rt::Context& ctx,
                                   const PagedHostData& d, const PagedHint& hint) {
  ctx.bind();
  DeviceCall c(op, ctx, d, hint);
  op.execute(c.in, c.out, c.ws.data(), c.ws_bytes, nullptr);
  return c.result(op, d, nullptr);
}

PagedGraphResult run_paged_graph_on_device(const PagedTopkOp& op, const rt::Context& ctx,
                                           const PagedHostData& d,
                                           const std::vector<int>& replay_lens,
                                           const PagedHint& hint) {
  ctx.bind();
  const rt::DriverApi& cu = rt::driver();
  DeviceCall c(op, ctx, d, hint);
  CUstream stream;
  rt::check(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  CUgraph graph;
  CUgraphExec exec;
  rt::check(cu.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
  op.execute(c.in, c.out, c.ws.data(), c.ws_bytes, stream);
  rt::check(cu.cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");
  rt::check(cu.cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate");
  PagedGraphResult r;
  rt::check(cu.cuGraphLaunch(exec, stream), "cuGraphLaunch");
  r.captured = c.result(op, d, stream);
  c.lens.upload(replay_lens.data(), replay_lens.size() * 4);
  rt::check(cu.cuGraphLaunch(exec, stream), "cuGraphLaunch");
  r.replayed = c.result(op, d, stream);
  op.execute(c.in, c.out, c.ws.data(), c.ws_bytes, stream);
  r.eager = c.result(op, d, stream);
  cu.cuGraphExecDestroy(exec);
  cu.cuGraphDestroy(graph);
  cu.cuStreamDestroy(stream);
  return r;
}

}  // namespace winnow::ops
