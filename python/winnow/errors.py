"""C API statuses as Python exceptions: each carries the status and the C library's
message (winnowGetLastError) for the call that failed."""
from . import _capi


class WinnowError(RuntimeError):
    """A winnow C API call failed: .status is the winnowStatus_t, str() the C message."""

    def __init__(self, status, message):
        self.status = status
        self.status_name = _capi.STATUS_NAMES.get(status, f"status {status}")
        super().__init__(message)


class InvalidArgument(WinnowError, ValueError):
    """WINNOW_STATUS_INVALID_ARGUMENT: a descriptor, tensor or size is wrong."""


class NotSupported(WinnowError):
    """WINNOW_STATUS_NOT_SUPPORTED: valid, but this build or arch cannot do it."""


class CompileError(WinnowError):
    """WINNOW_STATUS_COMPILE_ERROR: NVRTC rejected the generated source."""


class NoDevice(WinnowError):
    """WINNOW_STATUS_NO_DEVICE: no CUDA driver or device."""


class CudaError(WinnowError):
    """WINNOW_STATUS_CUDA_ERROR: a CUDA driver call failed."""


class NotBuilt(WinnowError):
    """WINNOW_STATUS_NOT_BUILT: the plan was not built (or its build failed)."""


class WorkspaceTooSmall(WinnowError, ValueError):
    """WINNOW_STATUS_WORKSPACE_TOO_SMALL."""


class InternalError(WinnowError):
    """WINNOW_STATUS_INTERNAL_ERROR: a bug in winnow."""


_BY_STATUS = {1: InvalidArgument, 2: NotSupported, 3: CompileError, 4: NoDevice, 5: CudaError,
              6: NotBuilt, 7: WorkspaceTooSmall, 8: InternalError}


def exception_for(status, message):
    """The exception of a non-zero status carrying `message`."""
    return _BY_STATUS.get(status, WinnowError)(status, message)


def check(status):
    """Raises the exception of a non-zero status with the thread's last C message."""
    if status != _capi.STATUS_SUCCESS:
        raise exception_for(status, _capi.lib.winnowGetLastError().decode("utf-8", "replace"))
