"""Borrowed tensors for the C API: torch tensors (or raw pointers) packed as winnowTensor_t
in place, no copy of the data. One TensorSlots buffer per plan is reused by every call, so
the per-call cost is one struct.pack_into per tensor."""
import ctypes
import struct

from . import _capi
from .errors import InvalidArgument

# winnowTensor_t: data, dtype, ndim, shape[4], strides[4], device, padding; one layout per
# ndim, whose pad bytes zero the unused shape and stride entries.
_LAYOUTS = [struct.Struct(f"=Qii{n}q{8 * (4 - n)}x{n}q{8 * (4 - n)}xi4x")
            for n in range(_capi.MAX_DIMS + 1)]
_SIZE = ctypes.sizeof(_capi.Tensor)
assert all(layout.size == _SIZE for layout in _LAYOUTS), "winnowTensor_t layout"
_ABSENT = bytes(_SIZE)

_torch_codes = None


def torch_dtype_codes():
    """torch dtype -> winnowDataType_t. uint8 is taken as fp8 e4m3 bytes (engines keep fp8
    caches as uint8 views)."""
    global _torch_codes
    if _torch_codes is None:
        import torch
        _torch_codes = {torch.float32: _capi.DTYPE_FLOAT32, torch.float16: _capi.DTYPE_FLOAT16,
                        torch.bfloat16: _capi.DTYPE_BFLOAT16,
                        torch.float8_e4m3fn: _capi.DTYPE_FP8_E4M3,
                        torch.uint8: _capi.DTYPE_FP8_E4M3, torch.int32: _capi.DTYPE_INT32}
    return _torch_codes


class TensorSlots:
    """A C array of `count` winnowTensor_t, filled per call."""

    def __init__(self, count):
        self._buffer = (ctypes.c_char * (count * _SIZE))()
        self._view = memoryview(self._buffer).cast("B")
        self.count = count
        self.address = ctypes.addressof(self._buffer)

    def at(self, i):
        """The address of slot i (for a single-tensor argument)."""
        return self.address + i * _SIZE

    def clear(self, i):
        offset = i * _SIZE
        self._view[offset:offset + _SIZE] = _ABSENT

    def set_raw(self, i, data, dtype, shape, strides, device):
        """Slot i from a raw device pointer, a winnowDataType_t and element strides."""
        n = len(shape)
        if n > _capi.MAX_DIMS or len(strides) != n:
            raise InvalidArgument(1, f"tensor {i}: {n} dims (at most {_capi.MAX_DIMS}) "
                                     f"with {len(strides)} strides")
        _LAYOUTS[n].pack_into(self._buffer, i * _SIZE, data, dtype, n, *shape, *strides,
                              device)

    def set(self, i, tensor, name, raw_bytes=False):
        """Slot i from a torch tensor (None: absent). The tensor is borrowed: the caller
        keeps it alive over the call. raw_bytes: a uint8 tensor is bytes (the paged key
        cache), not fp8 codes."""
        if tensor is None:
            self.clear(i)
            return
        codes = _torch_codes or torch_dtype_codes()
        code = codes.get(tensor.dtype)
        if raw_bytes and code == _capi.DTYPE_FP8_E4M3 and not tensor.is_floating_point():
            code = _capi.DTYPE_UINT8
        if code is None:
            raise InvalidArgument(1, f"{name}: torch dtype {tensor.dtype} has no winnow "
                                     "dtype (float32, float16, bfloat16, float8_e4m3fn or "
                                     "uint8 bytes of fp8, int32)")
        shape = tensor.shape
        n = len(shape)
        if n > _capi.MAX_DIMS:
            raise InvalidArgument(1, f"{name}: {n} dims, at most {_capi.MAX_DIMS}")
        _LAYOUTS[n].pack_into(self._buffer, i * _SIZE, tensor.data_ptr(), code, n, *shape,
                              *tensor.stride(), tensor.get_device())
