"""Arrays in, pointers out: numpy arrays and PyTorch tensors (CPU, or CUDA on
the current stream) seen the same way by the binding."""

import ctypes
from typing import Any, Optional, Sequence, Tuple

import numpy as np


def is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


class View:
    """Pointer, shape, byte strides and device of one array argument."""

    def __init__(self, x: Any, name: str, dtype: Optional[str] = None,
                 ndim: Optional[int] = None):
        self.name = name
        if is_torch(x):
            self.torch = True
            self.ptr = x.data_ptr()
            self.itemsize = x.element_size()
            self.shape = tuple(x.shape)
            self.strides = tuple(s * self.itemsize for s in x.stride())
            self.cuda = bool(x.is_cuda)
            self.device = x.device.index if self.cuda else None
            self.dtype = str(x.dtype).replace("torch.", "")
        elif isinstance(x, np.ndarray):
            self.torch = False
            self.ptr = x.ctypes.data
            self.itemsize = x.itemsize
            self.shape = x.shape
            self.strides = x.strides
            self.cuda = False
            self.device = None
            self.dtype = str(x.dtype)
            if not x.flags.writeable:
                raise ValueError("%s: a read-only numpy array" % name)
        else:
            raise TypeError("%s: expected a numpy array or a torch tensor, got %s"
                            % (name, type(x).__name__))
        if dtype is not None and self.dtype != dtype:
            raise TypeError("%s: dtype %s, expected %s" % (name, self.dtype, dtype))
        if ndim is not None and len(self.shape) != ndim:
            raise ValueError("%s: %d dimensions %s, expected %d"
                             % (name, len(self.shape), self.shape, ndim))
        if any(s < 0 for s in self.strides):
            raise ValueError("%s: negative strides %s" % (name, self.strides))

    def dense_tail(self, first: int) -> int:
        """Bytes of the dims from @first on, which must be dense (an entry)."""
        size = self.itemsize
        for d in range(len(self.shape) - 1, first - 1, -1):
            if self.shape[d] > 1 and self.strides[d] != size:
                raise ValueError("%s: dims %d.. must be contiguous (strides %s, shape %s)"
                                 % (self.name, first, self.strides, self.shape))
            size *= self.shape[d]
        return size

    def contiguous(self) -> None:
        self.dense_tail(0)


def to_device(a: np.ndarray, backend: str, device: int):
    """@a on the context's backend: itself on the CPU, a torch tensor on a GPU."""
    if backend == "cpu":
        return a
    import torch

    return torch.from_numpy(a.view(np.uint8)).to("cuda:%d" % device)


def carray_view(ptr: int, count: int, ctype) -> np.ndarray:
    """A numpy view of @count @ctype values of host memory at @ptr (no copy)."""
    return np.ctypeslib.as_array((ctype * count).from_address(ptr))


class CudaArray:
    """Device memory exposed through __cuda_array_interface__ (for torch.as_tensor)."""

    def __init__(self, ptr: int, shape: Tuple[int, ...], typestr: str, owner: Any):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (ptr, True), "version": 2}
        self._owner = owner


def u32_array(values: Sequence[int]):
    arr = (ctypes.c_uint32 * len(values))(*values)
    return arr
