#include "testing/paged_harness.h"

#include "testing/harness.h"

namespace winnow::ops {

PagedRunResult run_paged_on_device(const PagedTopkOp& op, const rt::Context& ctx,
                                   const PagedHostData& d) {
  const PagedProblem& p = op.problem();
  ctx.bind();
  const int64_t rows = int64_t(d.batch) * d.next_n;
  rt::DeviceBuffer q = upload(d.q), cache = upload(d.cache), table = upload(d.block_table);
  rt::DeviceBuffer lens = upload(d.context_lens), w = upload(d.w);
  rt::DeviceBuffer idx(std::max<size_t>(size_t(rows) * p.k * 4, 16));
  const size_t ws_bytes = op.workspace_bytes();
  rt::DeviceBuffer ws(std::max<size_t>(ws_bytes, 256));
  PagedInputs in;
  in.q = contiguous_view(q.data(), DType::E4M3, {d.batch, d.next_n, d.heads, 128});
  in.cache = contiguous_view(cache.data(), DType::U8, {d.num_blocks, 64, 1, 132});
  in.block_table = contiguous_view(table.data(), DType::I32, {d.batch, d.max_blocks});
  in.context_lens = d.lens_per_query
                        ? contiguous_view(lens.data(), DType::I32, {d.batch, d.next_n})
                        : contiguous_view(lens.data(), DType::I32, {d.batch});
  in.weights = contiguous_view(w.data(), DType::F32, {rows, d.heads});
  for (TensorView* v : {&in.q, &in.cache, &in.block_table, &in.context_lens, &in.weights})
    v->device = ctx.info().ordinal;
  TensorView out = contiguous_view(idx.data(), DType::I32, {rows, p.k});
  out.device = ctx.info().ordinal;
  op.execute(in, out, ws.data(), ws_bytes, nullptr);
  rt::check(rt::driver().cuStreamSynchronize(nullptr), "cuStreamSynchronize");
  PagedRunResult r;
  r.indices.resize(size_t(rows) * p.k);
  if (rows > 0) idx.download(r.indices.data(), r.indices.size() * 4);
  uint32_t counters[2] = {0, 0};
  rt::check(rt::driver().cuMemcpyDtoH(counters, ws.ptr() + op.counter_offset(), 8),
            "cuMemcpyDtoH (counters)");
  r.fallback_rows = counters[0];
  r.bad_windows = counters[1];
  return r;
}

}  // namespace winnow::ops
