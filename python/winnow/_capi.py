"""The C ABI of include/winnow.h through ctypes: the library, its structs, enums and
prototypes. Nothing here imports torch, so the C API can be used and tested without it.

The library is, in this order: $WINNOW_LIBRARY (a path), the libwinnow.so.0 shipped in this
package (pip install .), or the system's libwinnow.so.0 (cmake --install)."""
import ctypes
import os

# ---- enums (winnow.h) ----
STATUS_SUCCESS = 0
STATUS_NAMES = {
    0: "WINNOW_STATUS_SUCCESS", 1: "WINNOW_STATUS_INVALID_ARGUMENT",
    2: "WINNOW_STATUS_NOT_SUPPORTED", 3: "WINNOW_STATUS_COMPILE_ERROR",
    4: "WINNOW_STATUS_NO_DEVICE", 5: "WINNOW_STATUS_CUDA_ERROR", 6: "WINNOW_STATUS_NOT_BUILT",
    7: "WINNOW_STATUS_WORKSPACE_TOO_SMALL", 8: "WINNOW_STATUS_INTERNAL_ERROR",
}

DTYPE_FLOAT32, DTYPE_FLOAT16, DTYPE_BFLOAT16, DTYPE_FP8_E4M3, DTYPE_INT32 = 1, 2, 3, 4, 5
DTYPE_UINT8 = 6  # raw bytes: the paged decode key cache
# The spellings the Python API takes for a plan's q_dtype / k_dtype (ops/common/names.cpp's short
# names).
DTYPES = {"fp32": DTYPE_FLOAT32, "fp16": DTYPE_FLOAT16, "bf16": DTYPE_BFLOAT16,
          "fp8_e4m3": DTYPE_FP8_E4M3}

SCORES = {"relu_mh": 0, "ip": 1, "l2": 2, "cosine": 3}
SCORE_EXPR = 4
WINDOWS = {"dense": 0, "ranges": 1, "causal": 2}
MODES = {"topk": 0, "materialize": 1}
OUTPUT_SORTED = 1
OUTPUT_ABSOLUTE_INDICES = 2
OUTPUT_DISTANCE = 4

INPUT_Q, INPUT_K, INPUT_WEIGHTS, INPUT_KEY_SCALE = 0, 1, 2, 3
INPUT_WINDOW_START, INPUT_WINDOW_END, INPUT_SAMPLE_HINT = 4, 5, 6
INPUT_KEY_NORMS = 7
NUM_INPUTS = 8  # the outputs' slots follow the inputs' (plan.py)
MAX_DIMS = 4


# ---- structs ----
class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * MAX_DIMS), ("strides", ctypes.c_int64 * MAX_DIMS),
                ("device", ctypes.c_int32)]


class ProblemDesc(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("version", ctypes.c_uint32),
                ("score", ctypes.c_int), ("expression", ctypes.c_char_p),
                ("heads", ctypes.c_int32), ("head_dim", ctypes.c_int32),
                ("q_dtype", ctypes.c_int), ("k_dtype", ctypes.c_int),
                ("key_scale", ctypes.c_int32), ("mode", ctypes.c_int), ("k", ctypes.c_int32),
                ("output_flags", ctypes.c_uint32), ("window", ctypes.c_int),
                ("causal_ratio", ctypes.c_int32), ("causal_offset", ctypes.c_int64),
                ("arch", ctypes.c_char_p), ("candidate_capacity", ctypes.c_int32),
                ("sample_size", ctypes.c_int32), ("key_splits", ctypes.c_int32),
                ("max_workspace_bytes", ctypes.c_uint64)]


class CallOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("version", ctypes.c_uint32),
                ("causal_offset", ctypes.c_int64), ("accumulate_counters", ctypes.c_int32)]


class StreamOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("version", ctypes.c_uint32),
                ("chunk_rows", ctypes.c_int64), ("sample_hint", ctypes.c_int32)]


class BlockDesc(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("version", ctypes.c_uint32),
                ("heads", ctypes.c_int32), ("kv_heads", ctypes.c_int32),
                ("head_dim", ctypes.c_int32), ("max_seq_len", ctypes.c_int64),
                ("arch", ctypes.c_char_p)]


class PagedDesc(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("version", ctypes.c_uint32),
                ("score", ctypes.c_int), ("expression", ctypes.c_char_p),
                ("heads", ctypes.c_int32), ("k", ctypes.c_int32), ("next_n", ctypes.c_int32),
                ("max_batch", ctypes.c_int32), ("max_blocks_per_seq", ctypes.c_int32),
                ("max_total_keys", ctypes.c_int64), ("sorted", ctypes.c_int32),
                ("key_splits", ctypes.c_int32), ("arch", ctypes.c_char_p)]


class PagedCallOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("version", ctypes.c_uint32),
                ("hint", ctypes.c_void_p)]


class BlockRule(ctypes.Structure):
    _fields_ = [("alpha", ctypes.c_float), ("sink_blocks", ctypes.c_int32),
                ("local_blocks", ctypes.c_int32), ("last_blocks", ctypes.c_int32),
                ("min_blocks", ctypes.c_int32)]


class MergeDesc(ctypes.Structure):  # winnowMergeDesc_t (sharded top-k)
    _fields_ = [("struct_size", ctypes.c_size_t), ("version", ctypes.c_uint32),
                ("ranks", ctypes.c_int32), ("k", ctypes.c_int32), ("max_rows", ctypes.c_int64),
                ("sorted", ctypes.c_int32), ("arch", ctypes.c_char_p)]


# ---- the library ----
def library_path():
    """Where the library is loaded from (see the module's docstring)."""
    forced = os.environ.get("WINNOW_LIBRARY")
    if forced:
        return forced
    shipped = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libwinnow.so.0")
    return shipped if os.path.exists(shipped) else "libwinnow.so.0"


def _load():
    path = library_path()
    try:
        return ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(
            f"winnow: cannot load the C library {path!r} ({e}). Install the package with "
            "`pip install .`, or point WINNOW_LIBRARY at a built libwinnow.so.0") from None


lib = _load()

_P = ctypes.c_void_p
_I = ctypes.c_int
_STATUS = ctypes.c_int
_PROTOTYPES = {
    "winnowGetVersion": (ctypes.c_uint32, []),
    "winnowGetStatusString": (ctypes.c_char_p, [_I]),
    "winnowGetLastError": (ctypes.c_char_p, []),
    "winnowProblemDescInit": (None, [_P]),
    "winnowCallOptionsInit": (None, [_P]),
    "winnowStreamOptionsInit": (None, [_P]),
    "winnowBlockDescInit": (None, [_P]),
    "winnowBlockRuleInit": (None, [_P]),
    "winnowCreate": (_STATUS, [_P, _I]),
    "winnowDestroy": (_STATUS, [_P]),
    "winnowPlanCreate": (_STATUS, [_P, _P, _P]),
    "winnowPlanBuild": (_STATUS, [_P]),
    "winnowPlanFinishBuild": (_STATUS, [_P]),
    "winnowPlanGetWorkspaceSize": (_STATUS, [_P, _P]),
    "winnowPlanGetCounterOffset": (_STATUS, [_P, _P]),
    "winnowPlanGetSource": (_STATUS, [_P, _P]),
    "winnowPlanDestroy": (_STATUS, [_P]),
    # Tensor arguments are addresses (ints) of packed winnowTensor_t arrays: see _tensors.
    "winnowExecute": (_STATUS, [_P, _P, _I, _P, _P, _P, ctypes.c_size_t, _P]),
    "winnowExecuteEx": (_STATUS, [_P, _P, _I, _P, _P, _P, ctypes.c_size_t, _P, _P]),
    "winnowExecuteStream": (_STATUS, [_P, _P, _I, _P, _P, _P, ctypes.c_size_t, _P, _P]),
    "winnowBlockPlanCreate": (_STATUS, [_P, _P, _P]),
    "winnowBlockPlanBuild": (_STATUS, [_P]),
    "winnowBlockPlanGetWorkspaceSize": (_STATUS, [_P, ctypes.c_int64, _P]),
    "winnowBlockIndexCapacity": (_STATUS, [_P, ctypes.c_int64, _P]),
    "winnowBlockPlanDestroy": (_STATUS, [_P]),
    "winnowBlockSelect": (_STATUS, [_P, _P, _P, _P, _P, _P, _P, ctypes.c_size_t, _P]),
    "winnowBlockAttention": (_STATUS, [_P, _P, _P, _P, _P, _P, _P, _P]),
    # Paged decode.
    "winnowPagedDescInit": (None, [_P]),
    "winnowPagedPlanCreate": (_STATUS, [_P, _P, _P]),
    "winnowPagedPlanBuild": (_STATUS, [_P]),
    "winnowPagedPlanGetWorkspaceSize": (_STATUS, [_P, _P]),
    "winnowPagedPlanGetCounterOffset": (_STATUS, [_P, _P]),
    "winnowPagedPlanDestroy": (_STATUS, [_P]),
    "winnowPagedTopk": (_STATUS, [_P, _P, _P, _P, _P, _P, _P, _P, ctypes.c_size_t, _P]),
    "winnowPagedCallOptionsInit": (None, [_P]),
    "winnowPagedTopkEx": (_STATUS, [_P, _P, _P, _P, _P, _P, _P, _P, ctypes.c_size_t, _P, _P]),
    # Sharded top-k.
    "winnowPlanSetShard": (_STATUS, [_P, ctypes.c_int64, ctypes.c_int64]),
    "winnowMergeDescInit": (None, [_P]),
    "winnowMergePlanCreate": (_STATUS, [_P, _P, _P]),
    "winnowMergePlanBuild": (_STATUS, [_P]),
    "winnowMergePlanGetWorkspaceSize": (_STATUS, [_P, _P]),
    "winnowMergePlanGetCounterOffset": (_STATUS, [_P, _P]),
    "winnowMergePlanDestroy": (_STATUS, [_P]),
    "winnowShardMerge": (_STATUS, [_P, _P, _P, _P, _P, _P, _P, _P, ctypes.c_size_t, _P]),
    "winnowShardMergeNccl": (_STATUS, [_P, _P, _P, _P, _P, _P, _P, ctypes.c_size_t, _P]),
}
for _name, (_restype, _argtypes) in _PROTOTYPES.items():
    _fn = getattr(lib, _name)
    _fn.restype = _restype
    _fn.argtypes = _argtypes


def version():
    """The library's version as (major, minor, patch), from winnowGetVersion()."""
    code = lib.winnowGetVersion()
    return (code // 10000, code // 100 % 100, code % 100)
