"""Arrays in, pointers out: numpy arrays and PyTorch tensors (CPU, or CUDA on
the current stream) seen the same way by the binding."""

import ctypes
import operator
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from ._errors import ArgumentError


_TORCH_TYPES = {}  # type -> whether it is torch's (the hot path asks per argument)
_DTYPE_NAMES = {}  # numpy / torch dtype -> its name ("float16", "bfloat16", ...)


def is_torch(x: Any) -> bool:
    t = type(x)
    known = _TORCH_TYPES.get(t)
    if known is None:
        known = _TORCH_TYPES[t] = t.__module__.split(".")[0] == "torch"
    return known


def _dtype_name(dt: Any) -> str:
    name = _DTYPE_NAMES.get(dt)
    if name is None:
        name = _DTYPE_NAMES[dt] = str(dt).replace("torch.", "")
    return name


class View:
    """Pointer, shape, byte strides and device of one array argument.

    const: the library only reads the argument (a const pointer in C), so a
    read-only numpy array is taken as it is, and a broadcast one (a zero
    stride, np.broadcast_to) as a dense copy, held by the view: the library
    takes a zero stride for its dense default, so it cannot read a
    broadcast view itself."""

    __slots__ = ("name", "torch", "ptr", "itemsize", "shape", "strides", "cuda", "device",
                 "dtype", "owner", "const")

    def __init__(self, x: Any, name: str, dtype: Optional[str] = None,
                 ndim: Optional[int] = None, const: bool = False):
        self.name = name
        self.const = const
        if is_torch(x):
            self.torch = True
            self.ptr = x.data_ptr()
            self.itemsize = size = x.element_size()
            self.shape = tuple(x.shape)
            self.strides = tuple([s * size for s in x.stride()])
            self.cuda = cuda = x.is_cuda
            self.device = x.device.index if cuda else None
            self.dtype = _dtype_name(x.dtype)
        elif isinstance(x, np.ndarray):
            if not x.flags.writeable and not const:
                raise ValueError("%s: a read-only numpy array, but the library writes into it: "
                                 "pass a writable one (%s.copy())" % (name, name))
            if const and _broadcast(x.shape, x.strides):
                x = np.ascontiguousarray(x)
            self.torch = False
            self.ptr = x.ctypes.data
            self.itemsize = x.itemsize
            self.shape = x.shape
            self.strides = x.strides
            self.cuda = False
            self.device = None
            self.dtype = _dtype_name(x.dtype)
        else:
            raise ArgumentError("%s: expected a numpy array or a torch tensor, got %s"
                                % (name, type(x).__name__), x)
        self.owner = x
        if dtype is not None and self.dtype != dtype:
            raise TypeError("%s: dtype %s, expected %s" % (name, self.dtype, dtype))
        if ndim is not None and len(self.shape) != ndim:
            raise ValueError("%s: %d dimensions %s, expected %d"
                             % (name, len(self.shape), self.shape, ndim))
        if self.strides and min(self.strides) < 0:
            raise ValueError("%s: negative strides %s%s" % (name, self.strides, self.copy_hint()))

    def copy_hint(self) -> str:
        """How to pass a dense copy, for the messages that refuse a layout."""
        copy = ("%s.contiguous()" if self.torch else "np.ascontiguousarray(%s)") % self.name
        return "; pass %s%s" % (copy, "" if self.const else
                                " (the library writes into it: read the results from the copy)")

    def dense_tail(self, first: int) -> int:
        """Bytes of the dims from @first on, which must be dense (an entry)."""
        size = self.itemsize
        for d in range(len(self.shape) - 1, first - 1, -1):
            if self.shape[d] > 1 and self.strides[d] != size:
                raise ValueError("%s: not contiguous: dims %d.. must be dense, but dim %d has "
                                 "stride %d bytes, not %d (strides %s, shape %s)%s"
                                 % (self.name, first, d, self.strides[d], size,
                                    self.strides, _shape_str(self.shape), self.copy_hint()))
            size *= self.shape[d]
        return size

    def contiguous(self) -> None:
        self.dense_tail(0)

    def expect(self, shape: Optional[Sequence[Any]] = None, *, size: Any = None,
               why: str = "") -> None:
        """The one length check of the binding: refuse an array the library would
        index past, before the call. shape: per dim an int (exactly), at_least(n)
        or None (any), and the rank must match; size: the element count, an int
        or at_least(n). The message names the argument, its shape and the need
        (why: where the need comes from)."""
        ok = True
        if shape is not None:
            ok = len(shape) == len(self.shape) and all(
                _fits(have, want) for have, want in zip(self.shape, shape))
        count = 1
        for n in self.shape:
            count *= n
        if size is not None and not _fits(count, size):
            ok = False
        if ok:
            return
        need = []
        if shape is not None:
            need.append("shape %s" % _shape_str([_need_str(w) for w in shape]))
        if size is not None:
            need.append("%s elements" % _need_str(size))
        raise ValueError("%s: shape %s%s, expected %s%s" % (
            self.name, _shape_str(self.shape), " (%d elements)" % count if size is not None else "",
            " and ".join(need), " (%s)" % why if why else ""))

    def no_broadcast(self) -> None:
        """Refuse a zero stride on a dim of more than one element (torch's
        expand): the library takes a zero stride for its dense default, so it
        would read or write a dense array past the memory the view holds."""
        for d, (n, s) in enumerate(zip(self.shape, self.strides)):
            if n > 1 and s == 0:
                raise ValueError("%s: stride 0 on dim %d (of %d elements, shape %s): a broadcast "
                                 "view (expand) is not supported here%s"
                                 % (self.name, d, n, _shape_str(self.shape), self.copy_hint()))

    def is_dense(self) -> bool:
        """Whether the array is C-contiguous (dims of one element aside)."""
        size = self.itemsize
        for d in range(len(self.shape) - 1, -1, -1):
            if self.shape[d] > 1 and self.strides[d] != size:
                return False
            size *= self.shape[d]
        return True

    def where(self) -> str:
        """"cuda:N" or "host", for messages."""
        return "cuda:%d" % self.device if self.cuda else "host"


# kve_dtype values of the element types the library converts (include/kvevict.h);
# any other dtype is raw bytes, copied only into a cache of the same dtype.
KVE_DTYPES = {"float32": 1, "float16": 2, "bfloat16": 3, "float8_e4m3fn": 4, "float8_e5m2": 5}
# vLLM's kv_cache_dtype names of fp8 caches held in one-byte tensors (uint8).
FP8_CACHE_DTYPES = {"fp8": 4, "fp8_e4m3": 4, "fp8_e5m2": 5}
DTYPE_NAMES = {0: "raw", 1: "float32", 2: "float16", 3: "bfloat16", 4: "fp8_e4m3",
               5: "fp8_e5m2"}


def _broadcast(shape: Tuple[int, ...], strides: Tuple[int, ...]) -> bool:
    """Whether a dim of more than one element has a zero stride."""
    return any(n > 1 and s == 0 for n, s in zip(shape, strides))


class AtLeast:
    """A lower bound in View.expect."""

    __slots__ = ("n",)

    def __init__(self, n: int):
        self.n = n


def at_least(n: int) -> AtLeast:
    return AtLeast(n)


def _fits(have: int, want: Any) -> bool:
    if want is None:
        return True
    if isinstance(want, AtLeast):
        return have >= want.n
    return have == want


def _need_str(want: Any) -> str:
    if want is None:
        return "*"
    if isinstance(want, AtLeast):
        return ">= %d" % want.n
    return "%d" % want


def _shape_str(dims: Sequence[Any]) -> str:
    dims = [str(d) for d in dims]
    return "(%s)" % (dims[0] + "," if len(dims) == 1 else ", ".join(dims))


# Integer arguments: ctypes truncates out-of-range values modulo 2^bits, so
# every integer the library takes passes through as_int first.
INT_RANGES = {"u32": (0, 2 ** 32 - 1), "u64": (0, 2 ** 64 - 1), "i32": (-2 ** 31, 2 ** 31 - 1)}


def as_int(name: str, value: Any, kind: str = "u32") -> int:
    """@value as a Python int in the range of C type @kind ("u32", "u64",
    "i32"): TypeError for a non-integer, ValueError naming @name outside."""
    try:
        v = operator.index(value)
    except TypeError:
        raise ArgumentError("%s = %r: expected an integer, got %s"
                            % (name, value, type(value).__name__), value) from None
    lo, hi = INT_RANGES[kind]
    if not lo <= v <= hi:
        raise ValueError("%s = %d: out of range, must be %d..%d (%s)" % (name, v, lo, hi, kind))
    return v


def u32(name: str, value: Any) -> int:
    return as_int(name, value, "u32")


def u64(name: str, value: Any) -> int:
    return as_int(name, value, "u64")


def i32(name: str, value: Any) -> int:
    return as_int(name, value, "i32")


def to_device(a: np.ndarray, backend: str, device: int):
    """@a on the context's backend: itself on the CPU, a torch tensor on a GPU."""
    if backend == "cpu":
        return a
    import torch

    return torch.from_numpy(a.view(np.uint8)).to("cuda:%d" % device)


def carray_view(ptr: int, count: int, ctype) -> np.ndarray:
    """A numpy view of @count @ctype values of host memory at @ptr (no copy),
    valid only while that memory is: copy it before it goes (see HostArray
    for a view that keeps its memory's owner)."""
    return np.ctypeslib.as_array((ctype * count).from_address(ptr))


class HostArray:
    """Host memory exposed through __array_interface__ (for np.asarray), holding
    @owner: the array numpy makes keeps this object, hence @owner, alive."""

    def __init__(self, ptr: int, shape: Tuple[int, ...], typestr: str, owner: Any):
        self.__array_interface__ = {"shape": shape, "typestr": typestr,
                                    "data": (ptr, False), "version": 3}
        self._owner = owner


class CudaArray:
    """Device memory exposed through __cuda_array_interface__ (for torch.as_tensor).
    Published writable (the interface's read-only flag False): PyTorch refuses
    a read-only flag ("the read only flag is not supported, should always be
    False"), and the memory is the state's own, written by its kernels."""

    def __init__(self, ptr: int, shape: Tuple[int, ...], typestr: str, owner: Any):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (ptr, False), "version": 2}
        self._owner = owner


def u32_array(values: Sequence[int], name: str = "values"):
    """A C uint32 array of @values, each range-checked (named @name[i])."""
    values = list(values)
    arr = (ctypes.c_uint32 * len(values))(*[u32("%s[%d]" % (name, i), v)
                                            for i, v in enumerate(values)])
    return arr


def call_rows(rows: Any, n_new: Any, counts: str = "n_new") -> Tuple[View, View]:
    """A call planned on the device: rows and n_new (named @counts), int32
    or uint32 [n_rows] contiguous arrays in the backend's memory (placement
    is the context's to check), as Views."""
    call = []
    for name, x in (("rows", rows), (counts, n_new)):
        v = View(x, name, ndim=1, const=True)
        if v.dtype not in ("int32", "uint32"):
            raise TypeError("%s: dtype %s, expected int32 or uint32" % (name, v.dtype))
        v.contiguous()
        call.append(v)
    call[1].expect((call[0].shape[0],), why="one per call row: rows has %d" % call[0].shape[0])
    return call[0], call[1]
