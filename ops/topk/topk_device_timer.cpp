#include "ops/topk/topk_device_timer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace winnow::ops {

namespace {

// A well-mixed 64-bit value of (stream, i): the inputs are the same for every candidate
// and are filled in parallel (a 1M-row csa problem has 8G elements of q).
uint64_t hash_bits(uint64_t stream, uint64_t i) {
  uint64_t z = stream * 0x9E3779B97F4A7C15ull + i + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Elements [first, last) of stream `stream` as dtype t's stored bits: random finite
// values with small exponents, so that scores stay finite and spread (no NaN: e4m3's
// S.1111.111 needs the top exponent bit, which is cleared). kind 1: positive fp32 in
// [0.05, 1) (weights, key scales).
void fill_range(unsigned char* out, DType t, int kind, uint64_t stream, size_t first,
                size_t last) {
  for (size_t i = first; i < last; ++i) {
    const uint64_t h = hash_bits(stream, i);
    const unsigned r = unsigned(h >> 32);
    if (kind == 1) {
      const float f = 0.05f + 0.95f * float(r >> 8) / float(1u << 24);
      std::memcpy(out + 4 * i, &f, 4);
      continue;
    }
    switch (t) {
      case DType::E4M3: out[i] = (unsigned char)(r & 0xBF); break;
      case DType::BF16: {
        const auto v = (unsigned short)(((r >> 31) << 15) | ((123 + ((r >> 8) & 7)) << 7) | (r & 0x7F));
        std::memcpy(out + 2 * i, &v, 2);
        break;
      }
      case DType::F16: {
        const auto v = (unsigned short)(((r >> 31) << 15) | ((11 + ((r >> 12) & 3)) << 10) | (r & 0x3FF));
        std::memcpy(out + 2 * i, &v, 2);
        break;
      }
      default: {
        const float f = float(int(r & 0xFFFF) - 32768) / 32768.0f;
        std::memcpy(out + 4 * i, &f, 4);
      }
    }
  }
}

// `count` elements of stream `stream` on the device, generated on all the host's cores.
rt::DeviceBuffer device_elements(DType t, int kind, uint64_t stream, size_t count) {
  const size_t bytes = count * size_t(kind == 1 ? 4 : dtype_bytes(t));
  std::vector<unsigned char> host(bytes);
  const size_t threads = std::max(1u, std::thread::hardware_concurrency());
  const size_t per = (count + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (size_t w = 0; w < threads && w * per < count; ++w)
    pool.emplace_back(fill_range, host.data(), t, kind, stream, w * per, std::min(count, (w + 1) * per));
  for (std::thread& th : pool) th.join();
  rt::DeviceBuffer b(bytes);
  if (bytes > 0) b.upload(host.data(), bytes);
  return b;
}

struct Event {
  CUevent e = nullptr;
  Event() { rt::check(rt::driver().cuEventCreate(&e, 0), "cuEventCreate"); }
  ~Event() { rt::driver().cuEventDestroy(e); }
};

}  // namespace

struct TopkDeviceTimer::Impl {
  Impl(const TopkProblem& p, const std::vector<TopkCandidate>& c, const rt::Context& x,
       rt::CubinCache& ca, const backend::Backend& b, const TopkShape& s)
      : problem(p), candidates(c), ctx(x), cache(ca), be(b), shape(s) {}
  const TopkProblem& problem;
  const std::vector<TopkCandidate>& candidates;
  const rt::Context& ctx;
  rt::CubinCache& cache;
  const backend::Backend& be;
  TopkShape shape;
  rt::DeviceBuffer q, k, w, kscale, ks, ke, indices, flush;
  TopkInputs inputs;
  TensorView out;
  CUstream stream = nullptr;
  // The candidate being timed.
  std::unique_ptr<TopkOp> op;
  rt::DeviceBuffer workspace;
};

TopkDeviceTimer::TopkDeviceTimer(const TopkProblem& p, const std::vector<TopkCandidate>& c,
                                 const rt::Context& ctx, rt::CubinCache& cache,
                                 const backend::Backend& be, const TopkShape& shape)
    : impl_(std::make_unique<Impl>(p, c, ctx, cache, be, shape)) {
  Impl& m = *impl_;
  ctx.bind();
  const int64_t rows = shape.rows, keys = shape.num_keys;
  const ir::Uses u = ir::uses(p.score);
  m.q = device_elements(p.q_dtype, 0, 1, size_t(rows * p.heads * p.head_dim));
  m.k = device_elements(p.k_dtype, 0, 2, size_t(keys * p.head_dim));
  m.inputs.q = p.heads == 1 ? contiguous_view(m.q.data(), p.q_dtype, {rows, p.head_dim})
                            : contiguous_view(m.q.data(), p.q_dtype, {rows, p.heads, p.head_dim});
  m.inputs.k = contiguous_view(m.k.data(), p.k_dtype, {keys, p.head_dim});
  if (u.w) {
    m.w = device_elements(DType::F32, 1, 3, size_t(rows * p.heads));
    m.inputs.weights = contiguous_view(m.w.data(), DType::F32, {rows, p.heads});
  }
  if (u.kscale) {
    m.kscale = device_elements(DType::F32, 1, 4, size_t(keys));
    m.inputs.key_scale = contiguous_view(m.kscale.data(), DType::F32, {keys});
  }
  if (p.window == WindowKind::Ranges) {
    // Every row sees the whole key range: the dense cost through the ranges path.
    const std::vector<int> start(static_cast<size_t>(rows), 0);
    const std::vector<int> end(static_cast<size_t>(rows), static_cast<int>(keys));
    m.ks = rt::DeviceBuffer(start.size() * 4);
    m.ke = rt::DeviceBuffer(end.size() * 4);
    m.ks.upload(start.data(), start.size() * 4);
    m.ke.upload(end.data(), end.size() * 4);
    m.inputs.window_start = contiguous_view(m.ks.data(), DType::I32, {rows});
    m.inputs.window_end = contiguous_view(m.ke.data(), DType::I32, {rows});
  }
  m.indices = rt::DeviceBuffer(size_t(rows) * size_t(p.k) * 4);
  m.out = contiguous_view(m.indices.data(), DType::I32, {rows, p.k});
  m.flush = rt::DeviceBuffer(2 * size_t(std::max(ctx.info().l2_bytes, 1 << 20)));
  rt::check(rt::driver().cuStreamCreate(&m.stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
}

TopkDeviceTimer::~TopkDeviceTimer() {
  if (impl_->stream) rt::driver().cuStreamDestroy(impl_->stream);
}

void TopkDeviceTimer::prepare(std::size_t i) {
  Impl& m = *impl_;
  m.ctx.bind();
  TopkProblem p = with_point(m.problem, m.candidates[i].point);
  p.causal_offset = shape_causal_offset(p, m.shape);
  m.op = TopkOp::create(p, &m.ctx);
  m.op->build(m.cache, m.be);  // a cache hit: TopkCandidateCompiler compiled it
  m.workspace = rt::DeviceBuffer(m.op->workspace_bytes());
}

double TopkDeviceTimer::run_us(std::size_t i) {
  Impl& m = *impl_;
  const rt::DriverApi& cu = rt::driver();
  rt::check(cu.cuMemsetD32Async(m.flush.ptr(), i & 0xFF, m.flush.size() / 4, m.stream),
            "cuMemsetD32Async (L2 flush)");
  Event start, stop;
  rt::check(cu.cuEventRecord(start.e, m.stream), "cuEventRecord");
  m.op->execute(m.inputs, &m.out, nullptr, m.workspace.data(), m.workspace.size(), m.stream);
  rt::check(cu.cuEventRecord(stop.e, m.stream), "cuEventRecord");
  rt::check(cu.cuEventSynchronize(stop.e), "cuEventSynchronize");
  float ms = 0;
  rt::check(cu.cuEventElapsedTime(&ms, start.e, stop.e), "cuEventElapsedTime");
  return double(ms) * 1000.0;
}

std::string TopkDeviceTimer::describe(std::size_t) {
  return impl_->op ? impl_->op->launch_info() : "";
}

void TopkDeviceTimer::release(std::size_t) {
  impl_->op.reset();
  impl_->workspace = rt::DeviceBuffer();
}

}  // namespace winnow::ops
