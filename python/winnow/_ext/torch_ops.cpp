// The fast path of winnow's torch ops: C++ kernels for the CUDA and CPU dispatch keys of the
// ops that python/winnow/ops.py defines (their schemas and fake implementations stay there),
// written against the torch stable ABI (torch/csrc/stable, targeted at torch 2.11, so one
// build serves later torch releases too). A call is: torch's dispatcher -> the tensors'
// pointers, sizes and strides read here -> winnowTensor_t -> winnowExecuteEx on the current
// CUDA stream, with no Python in between.
//
// Plans are built in Python (python/winnow/plan.py); the Python side registers each TopkPlan
// here by its id (its winnowPlan_t, workspace, kind, k and device: winnow_torch_register_plan)
// and removes it before destroying the handle (winnow_torch_unregister_plan). A call holds
// the table's shared lock while it runs, so removing a plan waits for the calls that use it.
//
// Errors are std::runtime_error, which torch raises in Python as RuntimeError with this text:
//   "WINNOW_STATUS_<NAME>: <the C library's message>"  a failed C call (winnowGetLastError)
//   "winnow: ..."                                      an unknown plan id, a wrong kind of plan
// python/winnow/_fast_ops.py turns them back into the Python path's exceptions for
// winnow.indexer_topk and winnow.knn.
//
// The kernels for the CPU key take the same code with no stream: CPU tensors reach the C
// checks, which refuse them with the C message (as the Python implementation does).
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <winnow.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>

#define WINNOW_TORCH_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;
using OptionalTensor = std::optional<Tensor>;

// The kinds of plan the Python side registers (python/winnow/_fast_ops.py, KIND_*).
enum PlanKind : int32_t { kTopkPlan = 0, kMaterializePlan = 1 };

struct PlanEntry {
  winnowPlan_t handle;
  void* workspace;
  size_t workspace_bytes;
  int32_t kind;
  int32_t k;
  int32_t device;  // the context's CUDA device: its current stream takes the launches
};

struct PlanTable {
  std::shared_mutex mutex;
  std::unordered_map<int64_t, PlanEntry> plans;
};

PlanTable& plan_table() {
  static PlanTable table;
  return table;
}

const char* status_name(winnowStatus_t status) {
  switch (status) {
    case WINNOW_STATUS_SUCCESS: return "WINNOW_STATUS_SUCCESS";
    case WINNOW_STATUS_INVALID_ARGUMENT: return "WINNOW_STATUS_INVALID_ARGUMENT";
    case WINNOW_STATUS_NOT_SUPPORTED: return "WINNOW_STATUS_NOT_SUPPORTED";
    case WINNOW_STATUS_COMPILE_ERROR: return "WINNOW_STATUS_COMPILE_ERROR";
    case WINNOW_STATUS_NO_DEVICE: return "WINNOW_STATUS_NO_DEVICE";
    case WINNOW_STATUS_CUDA_ERROR: return "WINNOW_STATUS_CUDA_ERROR";
    case WINNOW_STATUS_NOT_BUILT: return "WINNOW_STATUS_NOT_BUILT";
    case WINNOW_STATUS_WORKSPACE_TOO_SMALL: return "WINNOW_STATUS_WORKSPACE_TOO_SMALL";
    case WINNOW_STATUS_INTERNAL_ERROR: return "WINNOW_STATUS_INTERNAL_ERROR";
  }
  return "WINNOW_STATUS_INTERNAL_ERROR";
}

[[noreturn]] void fail_status(winnowStatus_t status, const std::string& message) {
  throw std::runtime_error(std::string(status_name(status)) + ": " + message);
}

[[noreturn]] void fail_invalid(const std::string& message) {
  fail_status(WINNOW_STATUS_INVALID_ARGUMENT, message);
}

void check(winnowStatus_t status) {
  if (status != WINNOW_STATUS_SUCCESS) fail_status(status, winnowGetLastError());
}

// The torch spelling of a dtype, for the message about one winnow does not take (the
// Python path prints str(tensor.dtype)).
std::string torch_dtype_name(ScalarType t) {
  switch (t) {
    case ScalarType::Double: return "torch.float64";
    case ScalarType::Long: return "torch.int64";
    case ScalarType::Short: return "torch.int16";
    case ScalarType::Char: return "torch.int8";
    case ScalarType::Bool: return "torch.bool";
    case ScalarType::Float8_e5m2: return "torch.float8_e5m2";
    case ScalarType::ComplexFloat: return "torch.complex64";
    case ScalarType::ComplexDouble: return "torch.complex128";
    default: return std::string("torch.") + torch::headeronly::toString(t);
  }
}

// torch dtype -> winnowDataType_t, as python/winnow/_tensors.py maps them: uint8 is taken as
// fp8 e4m3 bytes (engines keep fp8 caches as uint8 views). The shim's dtype codes are asked
// once: each is a call into libtorch.
winnowDataType_t winnow_dtype(int32_t code) {
  static const int32_t kFloat32 = aoti_torch_dtype_float32(), kFloat16 = aoti_torch_dtype_float16(),
                       kBFloat16 = aoti_torch_dtype_bfloat16(),
                       kFp8E4m3 = aoti_torch_dtype_float8_e4m3fn(),
                       kUint8 = aoti_torch_dtype_uint8(), kInt32 = aoti_torch_dtype_int32();
  if (code == kFloat32) return WINNOW_DTYPE_FLOAT32;
  if (code == kFloat16) return WINNOW_DTYPE_FLOAT16;
  if (code == kBFloat16) return WINNOW_DTYPE_BFLOAT16;
  if (code == kFp8E4m3 || code == kUint8) return WINNOW_DTYPE_FP8_E4M3;
  if (code == kInt32) return WINNOW_DTYPE_INT32;
  return WINNOW_DTYPE_INVALID;
}

// A borrowed tensor as a winnowTensor_t (an absent one: all zero), read through the shim's
// accessors directly (Tensor's own ask for some twice). The caller keeps the tensor alive
// over the call.
void describe(winnowTensor_t& slot, const Tensor& t, const char* name) {
  AtenTensorHandle h = t.get();
  int32_t code = 0, device = 0;
  int64_t ndim = 0;
  int64_t* sizes = nullptr;
  int64_t* strides = nullptr;
  void* data = nullptr;
  if (aoti_torch_get_dtype(h, &code) != AOTI_TORCH_SUCCESS ||
      aoti_torch_get_dim(h, &ndim) != AOTI_TORCH_SUCCESS ||
      aoti_torch_get_sizes(h, &sizes) != AOTI_TORCH_SUCCESS ||
      aoti_torch_get_strides(h, &strides) != AOTI_TORCH_SUCCESS ||
      aoti_torch_get_data_ptr(h, &data) != AOTI_TORCH_SUCCESS ||
      aoti_torch_get_device_index(h, &device) != AOTI_TORCH_SUCCESS)
    throw std::runtime_error(std::string("winnow: cannot read the tensor ") + name);
  const winnowDataType_t dtype = winnow_dtype(code);
  if (dtype == WINNOW_DTYPE_INVALID)
    fail_invalid(std::string(name) + ": torch dtype " + torch_dtype_name(t.scalar_type()) +
                 " has no winnow dtype (float32, float16, bfloat16, float8_e4m3fn or uint8 "
                 "bytes of fp8, int32)");
  if (ndim > WINNOW_MAX_DIMS)
    fail_invalid(std::string(name) + ": " + std::to_string(ndim) + " dims, at most " +
                 std::to_string(WINNOW_MAX_DIMS));
  slot = winnowTensor_t{};
  slot.data = data;
  slot.dtype = dtype;
  slot.ndim = static_cast<int32_t>(ndim);
  for (int64_t i = 0; i < ndim; ++i) {
    slot.shape[i] = sizes[i];
    slot.strides[i] = strides[i];
  }
  slot.device = device;
}

void describe(winnowTensor_t& slot, const OptionalTensor& t, const char* name) {
  if (t.has_value())
    describe(slot, *t, name);
  else
    slot = winnowTensor_t{};
}

// The call's slots, in winnowExecute's order: the inputs (winnowInput_t), then the outputs.
constexpr int kOutIndices = WINNOW_NUM_INPUTS;
constexpr int kOutScores = WINNOW_NUM_INPUTS + 1;
struct CallSlots {
  winnowTensor_t slot[WINNOW_NUM_INPUTS + 2];
};

// A registered top-k plan, looked up under the table's shared lock, which the caller holds
// over the whole call.
const PlanEntry& topk_plan(const PlanTable& table, int64_t id) {
  const auto it = table.plans.find(id);
  if (it == table.plans.end())
    throw std::runtime_error("winnow: no open TopkPlan with id " + std::to_string(id) +
                             " (closed plans are forgotten)");
  if (it->second.kind != kTopkPlan)
    throw std::runtime_error("winnow: plan " + std::to_string(id) +
                             " is a materialize plan; the ops take top-k plans "
                             "(TopkPlan.execute writes materialized scores)");
  return it->second;
}

template <bool kCuda>
void execute(const PlanEntry& plan, const CallSlots& s, bool with_scores) {
  CUstream stream = nullptr;
  if constexpr (kCuda) {
    void* current = nullptr;
    if (aoti_torch_get_current_cuda_stream(plan.device, &current) != AOTI_TORCH_SUCCESS)
      fail_status(WINNOW_STATUS_CUDA_ERROR, "winnow: torch has no current CUDA stream for "
                                            "device " + std::to_string(plan.device));
    stream = static_cast<CUstream>(current);
  }
  check(winnowExecuteEx(plan.handle, s.slot, WINNOW_NUM_INPUTS, &s.slot[kOutIndices],
                        with_scores ? &s.slot[kOutScores] : nullptr, plan.workspace,
                        plan.workspace_bytes, stream, nullptr));
}

// A new contiguous tensor [rows, k] on q's device (rows: q's first dimension, 0 for a q of
// no dimension, which the C checks then refuse).
Tensor new_rows_by_k(const Tensor& q, int64_t k, int32_t dtype) {
  const int64_t sizes[2] = {q.dim() > 0 ? q.size(0) : 0, k};
  const int64_t strides[2] = {k, 1};
  int32_t device_type = 0;
  if (aoti_torch_get_device_type(q.get(), &device_type) != AOTI_TORCH_SUCCESS)
    throw std::runtime_error("winnow: cannot read q's device type");
  AtenTensorHandle out = nullptr;
  if (aoti_torch_empty_strided(2, sizes, strides, dtype, device_type, q.get_device_index(),
                               &out) != AOTI_TORCH_SUCCESS)
    throw std::runtime_error("winnow: cannot allocate the [rows, k] output");
  return Tensor(out);
}

// Every input slot is written (absent ones zeroed): the call passes WINNOW_NUM_INPUTS.
void describe_topk_inputs(CallSlots& s, const Tensor& q, const Tensor& k,
                          const OptionalTensor& weights, const OptionalTensor& key_scale,
                          const OptionalTensor& window_start, const OptionalTensor& window_end,
                          const OptionalTensor& sample_hint, const OptionalTensor& key_norms) {
  describe(s.slot[WINNOW_INPUT_Q], q, "q");
  describe(s.slot[WINNOW_INPUT_K], k, "k");
  describe(s.slot[WINNOW_INPUT_WEIGHTS], weights, "weights");
  describe(s.slot[WINNOW_INPUT_KEY_SCALE], key_scale, "key_scale");
  describe(s.slot[WINNOW_INPUT_WINDOW_START], window_start, "window_start");
  describe(s.slot[WINNOW_INPUT_WINDOW_END], window_end, "window_end");
  describe(s.slot[WINNOW_INPUT_SAMPLE_HINT], sample_hint, "sample_hint");
  describe(s.slot[WINNOW_INPUT_KEY_NORMS], key_norms, "key_norms");
}

// indexer_topk_out(int plan, Tensor q, Tensor k, Tensor? weights, Tensor? key_scale,
//                  Tensor? window_start, Tensor? window_end, Tensor? sample_hint, *,
//                  Tensor(a!) out) -> ()
template <bool kCuda>
void indexer_topk_out(int64_t plan_id, Tensor q, Tensor k, OptionalTensor weights,
                      OptionalTensor key_scale, OptionalTensor window_start,
                      OptionalTensor window_end, OptionalTensor sample_hint, Tensor out) {
  PlanTable& table = plan_table();
  std::shared_lock lock(table.mutex);
  const PlanEntry& plan = topk_plan(table, plan_id);
  CallSlots s;
  describe_topk_inputs(s, q, k, weights, key_scale, window_start, window_end, sample_hint, {});
  describe(s.slot[kOutIndices], out, "out_indices");
  execute<kCuda>(plan, s, false);
}

// indexer_topk(int plan, Tensor q, Tensor k, Tensor? weights, ...) -> Tensor (int32 [rows, k])
template <bool kCuda>
Tensor indexer_topk(int64_t plan_id, Tensor q, Tensor k, OptionalTensor weights,
                    OptionalTensor key_scale, OptionalTensor window_start,
                    OptionalTensor window_end, OptionalTensor sample_hint) {
  PlanTable& table = plan_table();
  std::shared_lock lock(table.mutex);
  const PlanEntry& plan = topk_plan(table, plan_id);
  Tensor out = new_rows_by_k(q, plan.k, aoti_torch_dtype_int32());
  CallSlots s;
  describe_topk_inputs(s, q, k, weights, key_scale, window_start, window_end, sample_hint, {});
  describe(s.slot[kOutIndices], out, "out_indices");
  execute<kCuda>(plan, s, false);
  return out;
}

// knn(int plan, Tensor q, Tensor k, Tensor? key_norms=None) -> (Tensor, Tensor): int32 and
// fp32 [rows, k]
template <bool kCuda>
std::tuple<Tensor, Tensor> knn(int64_t plan_id, Tensor q, Tensor k, OptionalTensor key_norms) {
  PlanTable& table = plan_table();
  std::shared_lock lock(table.mutex);
  const PlanEntry& plan = topk_plan(table, plan_id);
  Tensor indices = new_rows_by_k(q, plan.k, aoti_torch_dtype_int32());
  Tensor scores = new_rows_by_k(q, plan.k, aoti_torch_dtype_float32());
  CallSlots s;
  const OptionalTensor none;
  describe_topk_inputs(s, q, k, none, none, none, none, none, key_norms);
  describe(s.slot[kOutIndices], indices, "out_indices");
  describe(s.slot[kOutScores], scores, "out_scores");
  execute<kCuda>(plan, s, true);
  return {indices, scores};
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(winnow, CUDA, m) {
  m.impl("indexer_topk", TORCH_BOX(&indexer_topk<true>));
  m.impl("indexer_topk_out", TORCH_BOX(&indexer_topk_out<true>));
  m.impl("knn", TORCH_BOX(&knn<true>));
}

STABLE_TORCH_LIBRARY_IMPL(winnow, CPU, m) {
  m.impl("indexer_topk", TORCH_BOX(&indexer_topk<false>));
  m.impl("indexer_topk_out", TORCH_BOX(&indexer_topk_out<false>));
  m.impl("knn", TORCH_BOX(&knn<false>));
}

// ---- the interface python/winnow/_fast_ops.py calls through ctypes ----

// Bumped when a function below or a kernel's signature changes (2: knn takes key_norms), so
// that a stale build is refused.
WINNOW_TORCH_EXPORT int32_t winnow_torch_interface_version(void) { return 2; }

// The ops this library implements, comma-separated: the Python library registers its own
// implementation for the others.
WINNOW_TORCH_EXPORT const char* winnow_torch_ops(void) {
  return "indexer_topk,indexer_topk_out,knn";
}

// The address of winnowGetVersion in the libwinnow this library is linked with: Python
// compares it with its own (ctypes) copy's, so that plan handles never cross two copies.
WINNOW_TORCH_EXPORT const void* winnow_torch_linked_library(void) {
  return reinterpret_cast<const void*>(&winnowGetVersion);
}

// Adds or replaces plan `id`. kind: 0 top-k plan, 1 materialize plan. Returns 0, or -1 when
// out of memory.
WINNOW_TORCH_EXPORT int32_t winnow_torch_register_plan(int64_t id, void* handle, void* workspace,
                                                       uint64_t workspace_bytes, int32_t kind,
                                                       int32_t k, int32_t device) {
  try {
    PlanTable& table = plan_table();
    std::unique_lock lock(table.mutex);
    table.plans[id] = PlanEntry{static_cast<winnowPlan_t>(handle), workspace,
                                static_cast<size_t>(workspace_bytes), kind, k, device};
    return 0;
  } catch (...) {
    return -1;
  }
}

// Removes plan `id` (nothing if absent), after the calls that use it have returned.
WINNOW_TORCH_EXPORT void winnow_torch_unregister_plan(int64_t id) {
  PlanTable& table = plan_table();
  std::unique_lock lock(table.mutex);
  table.plans.erase(id);
}

// How many plans are registered (for the tests).
WINNOW_TORCH_EXPORT int64_t winnow_torch_plan_count(void) {
  PlanTable& table = plan_table();
  std::shared_lock lock(table.mutex);
  return static_cast<int64_t>(table.plans.size());
}
