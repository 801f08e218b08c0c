#include "ops/topk_device_timer.h"

#include <fmt/format.h>

#include <cstring>
#include <random>

namespace winnow::ops {

namespace {

// Random finite elements of dtype t, as their stored bits: exponents kept small, so
// that scores stay finite and spread (no NaN: e4m3's S.1111.111 needs the top exponent
// bit, which is cleared).
std::vector<unsigned char> random_elements(DType t, size_t count, std::mt19937_64& rng) {
  std::vector<unsigned char> out(count * size_t(dtype_bytes(t)));
  std::uniform_int_distribution<unsigned> bits(0, 0xFFFFFFFFu);
  for (size_t i = 0; i < count; ++i) {
    const unsigned r = bits(rng);
    switch (t) {
      case DType::E4M3: out[i] = (unsigned char)(r & 0xBF); break;
      case DType::BF16: {
        const auto v = (unsigned short)(((r >> 31) << 15) | ((123 + ((r >> 8) & 7)) << 7) | (r & 0x7F));
        std::memcpy(&out[2 * i], &v, 2);
        break;
      }
      case DType::F16: {
        const auto v = (unsigned short)(((r >> 31) << 15) | ((11 + ((r >> 12) & 3)) << 10) | (r & 0x3FF));
        std::memcpy(&out[2 * i], &v, 2);
        break;
      }
      default: {
        const float f = float(int(r & 0xFFFF) - 32768) / 32768.0f;
        std::memcpy(&out[4 * i], &f, 4);
      }
    }
  }
  return out;
}

rt::DeviceBuffer upload(const std::vector<unsigned char>& bytes) {
  rt::DeviceBuffer b(bytes.size());
  if (!bytes.empty()) b.upload(bytes.data(), bytes.size());
  return b;
}

std::vector<unsigned char> positive_floats(size_t count, std::mt19937_64& rng) {
  std::vector<unsigned char> out(count * 4);
  std::uniform_real_distribution<float> u(0.05f, 1.0f);
  for (size_t i = 0; i < count; ++i) {
    const float f = u(rng);
    std::memcpy(&out[4 * i], &f, 4);
  }
  return out;
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
  std::mt19937_64 rng(0x7475'6e65);  // "tune": the same inputs for every candidate
  const int64_t rows = shape.rows, keys = shape.num_keys;
  const ir::Uses u = ir::uses(p.score);
  m.q = upload(random_elements(p.q_dtype, size_t(rows * p.heads * p.head_dim), rng));
  m.k = upload(random_elements(p.k_dtype, size_t(keys * p.head_dim), rng));
  m.inputs.q = p.heads == 1 ? contiguous_view(m.q.data(), p.q_dtype, {rows, p.head_dim})
                            : contiguous_view(m.q.data(), p.q_dtype, {rows, p.heads, p.head_dim});
  m.inputs.k = contiguous_view(m.k.data(), p.k_dtype, {keys, p.head_dim});
  if (u.w) {
    m.w = upload(positive_floats(size_t(rows * p.heads), rng));
    m.inputs.weights = contiguous_view(m.w.data(), DType::F32, {rows, p.heads});
  }
  if (u.kscale) {
    m.kscale = upload(positive_floats(size_t(keys), rng));
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
