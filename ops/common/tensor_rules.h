// Checks of one borrowed tensor, shared by the validation of every op: each message
// starts with the tensor's role name and says what was given and what is allowed.
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <string>

#include "ops/common/errors.h"
#include "ops/common/names.h"
#include "ops/common/tensor.h"

namespace winnow::ops {

inline constexpr int64_t kMaxExtent = std::numeric_limits<int32_t>::max();  // sizes below 2^31

[[noreturn]] inline void fail(std::string msg) { throw InvalidArgument(std::move(msg)); }

inline std::string shape_text(const TensorView& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim && i < 4; ++i) s += fmt::format("{}{}", i ? ", " : "", t.shape[i]);
  return s + "]";
}

inline uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// One borrowed tensor under check: every message starts with its role name.
class TensorRules {
 public:
  TensorRules(const char* name, const TensorView& t) : name_(name), t_(t) {}

  // Pointer, dtype, device, ndim, non-negative extents, element alignment.
  void basics(DType dtype, int device, int ndim, const char* layout) const {
    if (t_.data == nullptr) fail(fmt::format("{}: data is null", name_));
    if (t_.dtype != dtype)
      fail(fmt::format("{}: dtype is {}, expected {}", name_, dtype_name(t_.dtype),
                       dtype_name(dtype)));
    if (t_.device != device)
      fail(fmt::format("{}: device is {}, but the context is on device {}", name_, t_.device,
                       device));
    if (t_.ndim != ndim)
      fail(fmt::format("{}: ndim is {} (shape {}), expected {} ({})", name_, t_.ndim,
                       shape_text(t_), ndim, layout));
    extents();
    aligned(dtype_bytes(dtype));
  }
  void extents() const {
    for (int i = 0; i < t_.ndim; ++i) {
      if (t_.shape[i] < 0)
        fail(fmt::format("{}: shape[{}] is {}, must be >= 0", name_, i, t_.shape[i]));
      if (t_.shape[i] > kMaxExtent)
        fail(fmt::format("{}: shape[{}] is {}, the maximum is {} (sizes must be below 2^31)",
                         name_, i, t_.shape[i], kMaxExtent));
    }
  }
  void aligned(int bytes) const {
    if (address(t_.data) % bytes != 0)
      fail(fmt::format("{}: data pointer {} is not {}-byte aligned", name_, t_.data, bytes));
  }
  void dim(int i, int64_t want, const char* what) const {
    if (t_.shape[i] != want)
      fail(fmt::format("{}: shape[{}] is {} (shape {}), expected {} = {}", name_, i, t_.shape[i],
                       shape_text(t_), what, want));
  }
  void stride(int i, int64_t want, const char* why) const {
    if (t_.strides[i] != want)
      fail(fmt::format("{}: strides[{}] is {}, expected {} ({})", name_, i, t_.strides[i], want,
                       why));
  }
  void min_stride(int i, int64_t least, const char* what) const {
    if (t_.strides[i] < least)
      fail(fmt::format("{}: strides[{}] is {}, must be >= {} = {}", name_, i, t_.strides[i], what,
                       least));
  }
  // q and k rows are loaded in 16-byte vectors.
  void vector_rows(int row_dim) const {
    aligned(16);
    // Unsigned: wraps instead of overflowing, and 16 divides 2^64, so the test still holds.
    const uint64_t row_bytes = uint64_t(t_.strides[row_dim]) * uint64_t(dtype_bytes(t_.dtype));
    if (row_bytes % 16 != 0)
      fail(fmt::format("{}: row stride of {} elements is {} bytes, must be a multiple of 16 bytes",
                       name_, t_.strides[row_dim], row_bytes));
  }

 private:
  const char* name_;
  const TensorView& t_;
};

// [n] contiguous (key_scale, window arrays).
inline void check_vector(const char* name, const TensorView& t, DType dtype, int device, int64_t n,
                  const char* n_name) {
  TensorRules r(name, t);
  r.basics(dtype, device, 1, fmt::format("[{}]", n_name).c_str());
  r.dim(0, n, n_name);
  r.stride(0, 1, "must be contiguous");
}

}  // namespace winnow::ops
