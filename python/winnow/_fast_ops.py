"""The fast path of the torch ops: libwinnow_torch.so, a C++ extension over the torch stable
ABI (python/winnow/_ext/torch_ops.cpp) that implements the hot ops (indexer_topk,
indexer_topk_out, knn) for the CUDA and CPU dispatch keys, so that a call runs no Python
between torch's dispatcher and winnowExecuteEx. Optional: without it the ops are the Python
implementations over ctypes (ops.py), with the same schemas, results and messages.

Where it is looked for, in this order:
  $WINNOW_TORCH_EXT: a path to libwinnow_torch.so; `0` (or `off`) keeps the ctypes path.
  libwinnow_torch.so beside the libwinnow.so.0 in use (the package's folder after
  `pip install .`, or a build folder named by $WINNOW_LIBRARY).
A library named by $WINNOW_TORCH_EXT that cannot be loaded is an ImportError; one found
beside the library that cannot be loaded (another torch, say) leaves the ctypes path with a
warning. The extension must be linked with the same libwinnow.so.0 that ctypes loaded (checked).

Plans reach the extension by id: each TopkPlan registers (id, handle, workspace, kind, k,
device) here when it is created and when its workspace changes, and unregisters before its
handle is destroyed. Nothing here imports torch until load() is called (by ops.py)."""
import ctypes
import os
import re
import warnings

from . import _capi

LIBRARY_NAME = "libwinnow_torch.so"
INTERFACE_VERSION = 2  # torch_ops.cpp's winnow_torch_interface_version (2: knn takes key_norms)
KIND_TOPK, KIND_MATERIALIZE = 0, 1

_ext = None  # the ctypes handle once loaded
_ops = frozenset()  # the ops it implements
_path = None
_status = "not loaded (torch not imported)"


def loaded():
    """Whether the torch ops of the extension are in use."""
    return _ext is not None


def status():
    """One line: which path the ops take and why."""
    return _status


def provides(name):
    """Whether the op `name` of the winnow namespace is the extension's."""
    return name in _ops


def _candidate():
    """(path, forced): the library to try, or (None, reason)."""
    forced = os.environ.get("WINNOW_TORCH_EXT")
    if forced is not None and forced != "":
        if forced.lower() in ("0", "off"):
            return None, f"ctypes path (WINNOW_TORCH_EXT={forced})"
        return forced, True
    library = _capi.library_path()
    folder = os.path.dirname(library) if os.sep in library else \
        os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(folder, LIBRARY_NAME)
    if not os.path.exists(path):
        return None, f"ctypes path (no {LIBRARY_NAME} in {folder}; WINNOW_TORCH_EXT names one)"
    return path, False


def load():
    """Loads the extension if there is one (after ops.py has defined the schemas): torch's
    dispatcher then calls its kernels for the ops it provides. Returns loaded()."""
    global _ext, _ops, _path, _status
    if _ext is not None:
        return True
    path, forced = _candidate()
    if path is None:
        _status = forced
        return False
    try:
        import torch
        torch.ops.load_library(path)  # registers the kernels (static initialisers)
        ext = ctypes.CDLL(path)  # the same loaded object: its registration functions
        ext.winnow_torch_interface_version.restype = ctypes.c_int32
        version = ext.winnow_torch_interface_version()
        if version != INTERFACE_VERSION:
            raise OSError(f"interface version {version}, this package needs "
                          f"{INTERFACE_VERSION}")
        ext.winnow_torch_linked_library.restype = ctypes.c_void_p
        ours = ctypes.cast(_capi.lib.winnowGetVersion, ctypes.c_void_p).value
        if ext.winnow_torch_linked_library() != ours:
            raise OSError(f"it is linked with another libwinnow.so.0 than {_capi.library_path()}"
                          " (load that one through WINNOW_LIBRARY)")
        ext.winnow_torch_ops.restype = ctypes.c_char_p
        ext.winnow_torch_register_plan.restype = ctypes.c_int32
        ext.winnow_torch_register_plan.argtypes = [
            ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int32,
            ctypes.c_int32, ctypes.c_int32]
        ext.winnow_torch_unregister_plan.restype = None
        ext.winnow_torch_unregister_plan.argtypes = [ctypes.c_int64]
        ext.winnow_torch_plan_count.restype = ctypes.c_int64
        ops = frozenset(ext.winnow_torch_ops().decode().split(","))
    except OSError as e:
        if forced:
            raise ImportError(f"winnow: WINNOW_TORCH_EXT={path}: {e}") from None
        warnings.warn(f"winnow: {path} not loaded ({e}); the torch ops take the ctypes path")
        _status = f"ctypes path ({path} not loaded: {e})"
        return False
    _ext, _ops, _path = ext, ops, path
    _status = f"c++ path ({path}: {', '.join(sorted(ops))})"
    from . import _registry
    for plan in _registry.open_plans():
        sync(plan)
    return True


def sync(plan):
    """Registers (or updates) a plan in the extension; a no-op without it or for plans the
    extension does not take (BlockPlan)."""
    if _ext is None:
        return
    kind = getattr(plan, "_fast_kind", None)
    if kind is None or plan.closed:
        return
    if _ext.winnow_torch_register_plan(plan.id, plan.handle.value, plan._workspace_ptr,
                                       plan._workspace_bytes, kind, plan.k,
                                       plan.context.device) != 0:
        raise MemoryError("winnow: the torch extension could not register the plan")


def forget(plan):
    """Unregisters a plan; returns once no call of the extension is using it."""
    if _ext is not None:
        _ext.winnow_torch_unregister_plan(plan.id)


def plan_count():
    """Plans registered in the extension (for the tests); None without it."""
    return None if _ext is None else _ext.winnow_torch_plan_count()


_STATUS_MESSAGE = re.compile(r"(WINNOW_STATUS_[A-Z_]+): (.*)", re.S)
_STATUS_CODES = {name: code for code, name in _capi.STATUS_NAMES.items()}


def python_error(error):
    """The Python path's exception for a RuntimeError raised by the extension's kernels (a
    C status: the WinnowError subclass with the C message; an unknown or wrong plan: a
    ValueError), or None for any other error."""
    from .errors import WinnowError, exception_for
    if isinstance(error, WinnowError):
        return None
    text = str(error)
    match = _STATUS_MESSAGE.fullmatch(text)
    if match and match.group(1) in _STATUS_CODES:
        return exception_for(_STATUS_CODES[match.group(1)], match.group(2))
    if text.startswith("winnow: "):
        return ValueError(text)
    return None
