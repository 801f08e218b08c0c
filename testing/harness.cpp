#include "testing/harness.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <type_traits>


namespace winnow::ops {

HostInputs ProblemData::host(const TopkProblem& p) const {
  HostInputs h;
  h.rows = rows;
  h.num_keys = num_keys;
  h.heads = p.heads;
  h.dim = p.head_dim;
  h.q = q.values;
  h.k = k.values;
  h.w = w;
  h.kscale = kscale;
  h.key_norms = key_norms;
  h.window_start = window_start;
  h.window_end = window_end;
  return h;
}

ProblemData random_problem(const TopkProblem& p, int64_t rows, int64_t num_keys,
                           std::mt19937_64& rng, const DataOptions& opt) {
  ProblemData d;
  d.rows = rows;
  d.num_keys = num_keys;
  const ir::Uses u = ir::uses(p.score);
  // Scale so that fp8 products stay in range and scores are not all saturated.
  const float scale = 1.0f;
  d.q = random_tensor(p.q_dtype, size_t(rows) * p.heads * p.head_dim, rng, scale, opt.levels);
  std::vector<float> kv = random_tensor(p.k_dtype, size_t(num_keys) * p.head_dim, rng, scale,
                                        opt.levels).values;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  if (opt.nan_fraction > 0) {
    for (int64_t s = 0; s < num_keys; ++s) {
      if (unit(rng) < opt.nan_fraction) kv[s * p.head_dim] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  if (opt.inf_fraction > 0 && !u.kscale) {
    for (int64_t s = 0; s < num_keys; ++s) {
      if (unit(rng) < opt.inf_fraction) kv[s * p.head_dim] = std::numeric_limits<float>::infinity();
    }
  }
  d.k = make_tensor(p.k_dtype, std::move(kv));
  if (u.w) {
    std::uniform_real_distribution<float> wd(-1.0f, 1.0f);
    d.w.resize(size_t(rows) * p.heads);
    for (auto& x : d.w) x = opt.levels > 0 ? float(int(wd(rng) * 4)) : wd(rng);
  }
  if (u.kscale) {
    std::uniform_real_distribution<float> sd(0.5f, 2.0f);
    d.kscale.resize(num_keys);
    for (auto& x : d.kscale) x = opt.levels > 0 ? 1.0f : sd(rng);
    if (opt.inf_fraction > 0) {
      for (auto& x : d.kscale) {
        if (unit(rng) < opt.inf_fraction) x = std::numeric_limits<float>::infinity();
      }
    }
  }
  if (opt.key_norms && u.ksq) {
    std::uniform_real_distribution<float> fd(0.5f, 2.0f);
    d.key_norms.resize(num_keys);
    for (int64_t s = 0; s < num_keys; ++s) {
      const float* kv = &d.k.values[size_t(s) * p.head_dim];
      double sq = 0;
      for (int i = 0; i < p.head_dim; ++i) sq += double(kv[i]) * kv[i];
      float& x = d.key_norms[s];
      x = opt.levels > 0 ? float(int(sq) + int(fd(rng) * 4)) : float(sq * fd(rng));
      if (unit(rng) < opt.nan_fraction) x = std::numeric_limits<float>::quiet_NaN();
      else if (unit(rng) < opt.inf_fraction) x = std::numeric_limits<float>::infinity();
    }
  }
  if (p.window == WindowKind::Ranges) {
    d.window_start.resize(rows);
    d.window_end.resize(rows);
    std::uniform_int_distribution<int64_t> pos(0, num_keys);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t a = pos(rng), b = pos(rng);
      if (r % 7 == 3) b = a;  // some empty windows
      d.window_start[r] = int(std::min(a, b));
      d.window_end[r] = int(std::max(a, b));
    }
  }
  return d;
}

namespace {

// Uploads, runs execute(inputs, out_indices, out_scores, workspace, bytes, stream) once
// (and `repeats` more times, timed), downloads. Op: TopkOp or StreamTopk. scores false:
// the top-k mode's call asks for indices only (RunResult::scores stays empty).
template <class Op>
RunResult run_op(const Op& op, const TopkProblem& p, const rt::Context& ctx,
                 const ProblemData& d, int repeats, bool scores) {
  const rt::DriverApi& cu = rt::driver();
  ctx.bind();
  const bool materialize = p.mode == Mode::Materialize;
  rt::DeviceBuffer q = upload(d.q.bytes), k = upload(d.k.bytes);
  rt::DeviceBuffer w = upload(d.w), ks = upload(d.kscale), kn = upload(d.key_norms);
  rt::DeviceBuffer wst = upload(d.window_start), wen = upload(d.window_end);
  rt::DeviceBuffer hint = upload(d.sample_hint);
  const int64_t out_cols = materialize ? d.num_keys : p.k;
  rt::DeviceBuffer idx(std::max<size_t>(size_t(d.rows) * p.k * 4, 16));
  rt::DeviceBuffer sc(std::max<size_t>(size_t(d.rows) * out_cols * 4, 16));
  const size_t ws_bytes = op.workspace_bytes();
  rt::DeviceBuffer ws(std::max<size_t>(ws_bytes, 256));

  TopkInputs in;
  if (p.heads == 1) {
    in.q = contiguous_view(q.data(), p.q_dtype, {d.rows, p.head_dim});
  } else {
    in.q = contiguous_view(q.data(), p.q_dtype, {d.rows, p.heads, p.head_dim});
  }
  in.k = contiguous_view(k.data(), p.k_dtype, {d.num_keys, p.head_dim});
  if (!d.w.empty()) in.weights = contiguous_view(w.data(), DType::F32, {d.rows, p.heads});
  if (!d.kscale.empty()) in.key_scale = contiguous_view(ks.data(), DType::F32, {d.num_keys});
  if (!d.key_norms.empty()) in.key_norms = contiguous_view(kn.data(), DType::F32, {d.num_keys});
  if (p.window == WindowKind::Ranges) {
    in.window_start = contiguous_view(wst.data(), DType::I32, {d.rows});
    in.window_end = contiguous_view(wen.data(), DType::I32, {d.rows});
  }
  // The hint seeds the top-k mode's sample; materialize takes none, so one ProblemData
  // serves both modes.
  if (!materialize && !d.sample_hint.empty()) {
    in.sample_hint = contiguous_view(hint.data(), DType::I32, {int64_t(d.sample_hint.size())});
  }
  TensorView out_idx = contiguous_view(idx.data(), DType::I32, {d.rows, p.k});
  TensorView out_sc = contiguous_view(sc.data(), DType::F32, {d.rows, out_cols});
  const TensorView* oi = materialize ? nullptr : &out_idx;
  const TensorView* os = materialize || scores ? &out_sc : nullptr;

  CUstream stream = nullptr;
  op.execute(in, oi, os, ws.data(), ws.size(), stream);
  rt::check(cu.cuStreamSynchronize(stream), "cuStreamSynchronize");

  RunResult r;
  if (!materialize) {
    r.indices.resize(size_t(d.rows) * p.k);
    idx.download(r.indices.data(), r.indices.size() * 4);
  }
  if (os) {
    r.scores.resize(size_t(d.rows) * out_cols);
    sc.download(r.scores.data(), r.scores.size() * 4);
  }
  uint32_t counters[2];
  rt::check(cu.cuMemcpyDtoH(counters, ws.ptr() + op.counter_offset(), sizeof counters),
            "cuMemcpyDtoH (counters)");
  r.fallback_rows = counters[0];
  r.bad_windows = counters[1];

  if (repeats > 0) {
    CUevent a, b;
    rt::check(cu.cuEventCreate(&a, 0), "cuEventCreate");
    rt::check(cu.cuEventCreate(&b, 0), "cuEventCreate");
    std::vector<float> times, host;
    for (int i = 0; i < repeats; ++i) {
      rt::check(cu.cuEventRecord(a, stream), "cuEventRecord");
      const auto h0 = std::chrono::steady_clock::now();
      op.execute(in, oi, os, ws.data(), ws.size(), stream);
      host.push_back(std::chrono::duration<float, std::micro>(std::chrono::steady_clock::now() - h0).count());
      rt::check(cu.cuEventRecord(b, stream), "cuEventRecord");
      rt::check(cu.cuEventSynchronize(b), "cuEventSynchronize");
      float ms = 0;
      rt::check(cu.cuEventElapsedTime(&ms, a, b), "cuEventElapsedTime");
      times.push_back(ms);
    }
    cu.cuEventDestroy(a);
    cu.cuEventDestroy(b);
    std::sort(times.begin(), times.end());
    r.ms_min = times.front();
    r.ms_max = times.back();
    r.ms_median = times[times.size() / 2];
    std::sort(host.begin(), host.end());
    r.host_us_median = host[host.size() / 2];
  }
  return r;
}

}  // namespace

RunResult run_on_device(const TopkOp& op, const rt::Context& ctx, const ProblemData& d,
                        int repeats, bool scores) {
  return run_op(op, op.problem(), ctx, d, repeats, scores);
}

RunResult run_on_device(const StreamTopk& op, const rt::Context& ctx, const ProblemData& d,
                        int repeats) {
  return run_op(op, op.problem().topk, ctx, d, repeats, true);
}

}  // namespace winnow::ops

