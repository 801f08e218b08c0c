// The C API's boundary (ops/capi/*.cpp, one file per plan family): the context and the
// top-k plan behind the opaque handles of include/winnow.h, and the helpers every entry
// point shares. Every entry point catches every exception and turns it into a status plus
// the thread's detail message (guarded). Internal: not installed.
#pragma once
#include <fmt/format.h>

#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>

#include "compiler/backend/arch.h"
#include "compiler/backend/backend.h"
#include "compiler/ir/ir.h"
#include "ops/common/errors.h"
#include "ops/common/tensor.h"
#include "ops/common/topk_op.h"
#include "runtime/cuda_driver.h"
#include "runtime/kernel_cache.h"
#include "runtime/tuning_db.h"
#include "winnow.h"

struct winnowContext {
  int device = 0;
  std::unique_ptr<winnow::rt::Context> cuda;  // null when there is no GPU: compile only
  winnow::rt::CubinCache cache;
  std::unique_ptr<winnow::backend::Backend> compiler;
  // Beside the disk cache; null when that is off.
  std::unique_ptr<winnow::rt::TuningDb> tuning;
  std::string compiler_text;  // "<name> <version>", for winnowContextBackend

  winnowContext(int ordinal, std::unique_ptr<winnow::rt::Context> c,
                std::optional<winnow::rt::DiskStore> disk,
                std::unique_ptr<winnow::backend::Backend> be)
      : device(ordinal), cuda(std::move(c)), cache(std::move(disk)), compiler(std::move(be)),
        compiler_text(compiler->name() + " " + compiler->version()) {
    if (cache.disk()) tuning = std::make_unique<winnow::rt::TuningDb>(cache.disk()->root());
  }
};

struct winnowPlan {
  winnowContext* ctx = nullptr;  // borrowed: plans are destroyed before their context
  // As the caller described it (a tuned point replaces knobs).
  winnow::ops::TopkProblem problem;
  std::unique_ptr<winnow::ops::TopkOp> op;
  winnowTuningPolicy_t produced_by = WINNOW_TUNING_HEURISTIC;
  double expected_us = -1;
};

namespace winnow::capi {

// The thread's detail message (winnowGetLastError).
extern thread_local std::string t_last_error;

// A status with its message, raised inside an entry point and returned at its boundary.
struct StatusError {
  winnowStatus_t status;
  std::string message;
};

[[noreturn]] inline void invalid(std::string msg) {
  throw StatusError{WINNOW_STATUS_INVALID_ARGUMENT, std::move(msg)};
}

template <class T>
void require_non_null(const T* p, const char* name) {
  if (p == nullptr) invalid(fmt::format("{} is null", name));
}

// The start of a plan-creating entry point: the out-pointer cleared, every pointer given.
template <class Desc, class Plan>
void begin_plan_create(winnowContext_t ctx, const Desc* desc, Plan** plan) {
  require_non_null(plan, "plan");
  *plan = nullptr;
  require_non_null(ctx, "ctx");
  require_non_null(desc, "desc");
}

std::string user_error_text(const ir::UserError& e);

// Runs one entry point's body; maps whatever it throws to a status.
template <class F>
winnowStatus_t guarded(F&& body) {
  winnowStatus_t status = WINNOW_STATUS_INTERNAL_ERROR;
  try {
    body();
    return WINNOW_STATUS_SUCCESS;
  } catch (const StatusError& e) {
    status = e.status;
    t_last_error = e.message;
  } catch (const ops::WorkspaceTooSmall& e) {
    status = WINNOW_STATUS_WORKSPACE_TOO_SMALL;
    t_last_error = e.what();
  } catch (const ops::InvalidArgument& e) {
    status = WINNOW_STATUS_INVALID_ARGUMENT;
    t_last_error = e.what();
  } catch (const ops::NotSupported& e) {
    status = WINNOW_STATUS_NOT_SUPPORTED;
    t_last_error = e.what();
  } catch (const ops::NotBuilt& e) {
    status = WINNOW_STATUS_NOT_BUILT;
    t_last_error = e.what();
  } catch (const backend::CompileError& e) {
    status = WINNOW_STATUS_COMPILE_ERROR;
    t_last_error = e.what();
  } catch (const rt::NoDevice& e) {
    status = WINNOW_STATUS_NO_DEVICE;
    t_last_error = e.what();
  } catch (const rt::CudaError& e) {
    status = WINNOW_STATUS_CUDA_ERROR;
    t_last_error = e.what();
  } catch (const ir::UserError& e) {
    status = WINNOW_STATUS_INVALID_ARGUMENT;
    t_last_error = user_error_text(e);
  } catch (const std::bad_alloc&) {
    status = WINNOW_STATUS_INTERNAL_ERROR;
    t_last_error = "out of host memory";
  } catch (const std::exception& e) {
    status = WINNOW_STATUS_INTERNAL_ERROR;
    t_last_error = fmt::format("internal error (please report it): {}", e.what());
  } catch (...) {
    status = WINNOW_STATUS_INTERNAL_ERROR;
    t_last_error = "internal error (please report it): unknown exception";
  }
  return status;
}

ops::DType to_dtype(winnowDataType_t t);

// The score program of a descriptor; a bad expression names the position in the text.
ir::Expr score_program(const winnowProblemDesc_t& d);

// The target: the caller's arch, else WINNOW_FORCE_ARCH, else the context's device.
backend::Arch target_arch(const winnowContext& ctx, const char* arch);

// The struct_size and version of a versioned descriptor.
// `what`: the parameter's name in messages ("desc", "options").
void check_version(size_t struct_size, size_t needed, uint32_t version, uint32_t supported,
                   const char* init, const char* what = "desc");

// A caller's tensor as a view; `name` names it in messages.
ops::TensorView to_view(const winnowTensor_t& t, const char* name);

}  // namespace winnow::capi
