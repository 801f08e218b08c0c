// The C API's context and status entry points (include/winnow.h), and the boundary
// helpers of ops/capi/boundary.h.
#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "ops/capi/boundary.h"
#include "ops/common/backend_choice.h"
#include "ops/common/names.h"
#include "runtime/env.h"

using namespace winnow;
using namespace winnow::capi;

static_assert(WINNOW_MAX_EXPRESSION_BYTES == ir::kMaxTextBytes &&
                  WINNOW_MAX_EXPRESSION_NODES == ir::kMaxNodes,
              "include/winnow.h states the IR's limits");

namespace winnow::capi {

thread_local std::string t_last_error;

std::string user_error_text(const ir::UserError& e) {
  if (e.position() < 0) return e.what();
  return fmt::format("{} (at position {})", e.what(), e.position());
}

ops::DType to_dtype(winnowDataType_t t) { return ops::dtype_from_c(t); }

ir::Expr score_program(const winnowProblemDesc_t& d) {
  if (const ops::BuiltinScore* builtin = ops::find_builtin_score(d.score))
    return builtin->program(d.key_scale != 0);
  if (d.score != WINNOW_SCORE_EXPR)
    invalid(fmt::format("desc->score = {} is not a winnowScore_t", static_cast<int>(d.score)));
  if (d.expression == nullptr)
    invalid("desc->expression is null, but desc->score is WINNOW_SCORE_EXPR");
  // Reads at most one byte past the limit: the caller's string may be huge.
  const size_t length = strnlen(d.expression, WINNOW_MAX_EXPRESSION_BYTES + 1);
  if (length > WINNOW_MAX_EXPRESSION_BYTES)
    invalid(fmt::format("desc->expression is longer than the maximum {} bytes "
                        "(WINNOW_MAX_EXPRESSION_BYTES): \"{}\"",
                        WINNOW_MAX_EXPRESSION_BYTES,
                        ir::text_excerpt(std::string_view(d.expression, 64))));
  const std::string_view text(d.expression, length);
  try {
    return ir::parse(text);
  } catch (const ir::UserError& e) {
    if (e.position() < 0)
      invalid(fmt::format("expression \"{}\": {}", ir::text_excerpt(text), e.what()));
    std::string shown = ir::text_excerpt(text, e.position());
    const size_t newline = shown.find('\n');
    shown.replace(newline, 1, "\n  ");
    invalid(fmt::format("expression, position {}: {}\n  {}", e.position(), e.what(), shown));
  }
}

backend::Arch target_arch(const winnowContext& ctx, const char* arch) {
  const std::optional<std::string> forced = rt::env_get("WINNOW_FORCE_ARCH");
  if (arch != nullptr || (forced && !forced->empty())) {
    const std::string text = arch != nullptr ? arch : *forced;
    const char* source = arch != nullptr ? "desc->arch" : "WINNOW_FORCE_ARCH";
    try {
      return backend::parse_arch(text);
    } catch (const std::invalid_argument& e) {
      invalid(fmt::format("{} = \"{}\": {}", source, text, e.what()));
    }
  }
  if (ctx.cuda) return ops::device_arch(*ctx.cuda);
  throw StatusError{WINNOW_STATUS_NO_DEVICE,
                    "no GPU: pass an explicit arch such as sm_90a to compile without one"};
}

void check_version(size_t struct_size, size_t needed, uint32_t version, uint32_t supported,
                   const char* init, const char* what) {
  if (struct_size < needed)
    invalid(fmt::format("{}->struct_size = {} is smaller than {}, the size of a version {} "
                        "descriptor (call {} first)",
                        what, struct_size, needed, supported, init));
  if (version != supported)
    invalid(fmt::format("{}->version = {} is not supported: this winnow reads version {}", what,
                        version, supported));
}

ops::TensorView to_view(const winnowTensor_t& t, const char* name) {
  ops::TensorView v;
  v.data = t.data;
  v.ndim = t.ndim;
  v.device = t.device;
  if (t.data == nullptr && t.ndim == 0) return v;  // absent
  if (t.ndim < 0 || t.ndim > WINNOW_MAX_DIMS)
    invalid(fmt::format("{}: ndim is {}, must be in 0..{}", name, t.ndim, WINNOW_MAX_DIMS));
  v.dtype = to_dtype(t.dtype);
  if (v.dtype == ops::DType::Invalid)
    invalid(fmt::format("{}: dtype = {} is not a valid winnowDataType_t", name,
                        static_cast<int>(t.dtype)));
  for (int i = 0; i < t.ndim; ++i) {
    v.shape[i] = t.shape[i];
    v.strides[i] = t.strides[i];
  }
  return v;
}

}  // namespace winnow::capi

extern "C" {

uint32_t winnowGetVersion(void) { return WINNOW_VERSION_CODE; }

const char* winnowGetStatusString(winnowStatus_t status) {
  switch (status) {
    case WINNOW_STATUS_SUCCESS: return "success";
    case WINNOW_STATUS_INVALID_ARGUMENT: return "invalid argument";
    case WINNOW_STATUS_NOT_SUPPORTED: return "not supported";
    case WINNOW_STATUS_COMPILE_ERROR: return "kernel compilation failed";
    case WINNOW_STATUS_NO_DEVICE: return "no CUDA driver or device";
    case WINNOW_STATUS_CUDA_ERROR: return "CUDA driver error";
    case WINNOW_STATUS_NOT_BUILT: return "plan not built";
    case WINNOW_STATUS_WORKSPACE_TOO_SMALL: return "workspace too small";
    case WINNOW_STATUS_INTERNAL_ERROR: return "internal error";
  }
  return "unknown status";
}

const char* winnowGetLastError(void) { return t_last_error.c_str(); }

winnowStatus_t winnowCreate(winnowContext_t* ctx, int device_ordinal) {
  return winnowCreateWithOptions(ctx, device_ordinal, nullptr);
}

void winnowContextOptionsInit(winnowContextOptions_t* o) {
  if (o == nullptr) return;
  *o = winnowContextOptions_t{};
  o->struct_size = sizeof(winnowContextOptions_t);
  o->version = WINNOW_CONTEXT_OPTIONS_VERSION;
}

winnowStatus_t winnowCreateWithOptions(winnowContext_t* ctx, int device_ordinal,
                                       const winnowContextOptions_t* options) {
  return guarded([&] {
    require_non_null(ctx, "ctx");
    *ctx = nullptr;
    if (device_ordinal < 0)
      invalid(fmt::format("device_ordinal = {} must be >= 0", device_ordinal));
    const char* requested = nullptr;
    if (options) {
      check_version(options->struct_size, sizeof(winnowContextOptions_t), options->version,
                    WINNOW_CONTEXT_OPTIONS_VERSION, "winnowContextOptionsInit", "options");
      requested = options->backend;
    }
    auto compiler = ops::choose_backend(requested);
    std::unique_ptr<rt::Context> cuda;
    if (rt::gpu_available()) cuda = std::make_unique<rt::Context>(device_ordinal);
    std::optional<rt::DiskStore> disk;
    if (rt::env_get("WINNOW_DISABLE_DISK_CACHE").value_or("") != "1")
      disk.emplace(rt::default_cache_dir());
    *ctx = new winnowContext(device_ordinal, std::move(cuda), std::move(disk), std::move(compiler));
  });
}

const char* winnowContextBackend(winnowContext_t ctx) {
  return ctx ? ctx->compiler_text.c_str() : nullptr;
}

winnowStatus_t winnowDestroy(winnowContext_t ctx) {
  return guarded([&] {
    require_non_null(ctx, "ctx");
    delete ctx;
  });
}

}  // extern "C"
