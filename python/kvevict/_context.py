"""Handles on C objects (_Owner, _Handle) and Context, a backend and its
settings (``kve_context``)."""

import ctypes
import weakref
from typing import TYPE_CHECKING, Any, Optional, Sequence, Tuple

import numpy as np

from . import _arrays
from ._lib import ArgumentError, check, lib

if TYPE_CHECKING:
    from ._state import State

_BACKENDS = {0: "auto", 1: "cpu", 2: "cuda", 3: "hip"}


class _Owner:
    """One C handle, destroyed once this object is dropped and every owner
    made on it (a State's on its Context's) has destroyed its own.

    The Python object (Context, State) holds one reference until close();
    a child's owner holds its parent's, and arrays viewing a handle's
    memory (State.row_table) hold its owner. The count of live children
    makes the order safe even where the cyclic gc (or interpreter exit)
    runs the finalizers of a parent and its children in any order: a
    parent dropped first waits for its last child."""

    __slots__ = ("h", "destroy", "parent", "children", "dropped")

    def __init__(self, h: ctypes.c_void_p, destroy: Any, parent: "Optional[_Owner]" = None):
        self.h, self.destroy, self.parent = h, destroy, parent
        self.children, self.dropped = 0, False
        if parent is not None:
            parent.children += 1

    def _release(self) -> None:
        if not self.dropped or self.children or self.h is None:
            return
        h, self.h = self.h, None
        self.destroy(h)
        parent, self.parent = self.parent, None
        if parent is not None:
            parent.children -= 1
            parent._release()

    def __del__(self) -> None:
        self.dropped = True
        self._release()


class _Handle:
    """Owns one C handle: closed by close(), with, or garbage collection;
    the C object goes with the last reference to its _Owner."""

    _destroy = None  # the kve_*_destroy function
    _h = None
    _owner = None
    _closed_why = ""

    def _own(self, h: ctypes.c_void_p, parent: Optional[_Owner] = None) -> None:
        self._owner = _Owner(h, type(self)._destroy, parent)
        self._h = h

    def close(self) -> None:
        """Close the handle: it is destroyed now, or, while arrays viewing its
        memory (State.row_table) live, when the last of them goes."""
        self._h = None
        self._owner = None

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def handle(self) -> ctypes.c_void_p:
        h = self._h
        if h is None:
            raise ValueError("%s is closed%s" % (type(self).__name__, self._closed_why))
        return h


class Context(_Handle):
    """A backend and its settings (``kve_context``); one per thread."""

    _destroy = lib.kve_context_destroy

    def __init__(self, backend: str = "auto", threads: Optional[int] = None, device: int = 0):
        if not isinstance(backend, str):
            raise TypeError("backend = %r: expected a name ('auto', 'cpu', 'cuda', 'hip')"
                            % (backend,))
        device = _arrays.i32("device", device)
        if threads is not None:
            threads = _arrays.i32("threads", threads)
        # the States made on it, closed first by close()
        self._children: "weakref.WeakSet[State]" = weakref.WeakSet()
        kind = ctypes.c_int()
        check(lib.kve_backend_from_name(backend.encode(), ctypes.byref(kind)),
              "kve_backend_from_name")
        handle = ctypes.c_void_p()
        check(lib.kve_context_create(kind.value, ctypes.byref(handle)), "kve_context_create")
        self._own(handle)
        check(lib.kve_context_get_backend(handle, ctypes.byref(kind)), "kve_context_get_backend")
        self.backend: str = _BACKENDS[kind.value]
        self.device = device
        # the library runs its kernels on this device (the CPU accepts only 0)
        check(lib.kve_context_set_device(handle, device), "kve_context_set_device")
        self._gpu = self.backend != "cpu"
        if threads is not None:
            check(lib.kve_context_set_threads(handle, threads), "kve_context_set_threads")

    @property
    def threads(self) -> int:
        """The CPU threads the library's calls on this context use
        (``kve_context_get_threads``; set with ``threads=`` at creation)."""
        n = ctypes.c_int()
        check(lib.kve_context_get_threads(self.handle, ctypes.byref(n)),
              "kve_context_get_threads")
        return n.value

    def close(self) -> None:
        """Close the States made on the context, then the context (the C
        objects go once no row_table array views them)."""
        for child in list(getattr(self, "_children", ())):
            child._close(" (its Context was closed)")
        super().close()

    def synchronize(self) -> None:
        """Wait for all work queued on torch's current stream (the one every
        call takes) and raise what the kernels refused there."""
        self._stream()
        check(lib.kve_context_synchronize(self.handle), "kve_context_synchronize")

    def _prepare(self, views: Sequence[_arrays.View]) -> None:
        """Arrays must live where the backend works, on the context's device;
        GPU calls follow torch's current stream."""
        gpu = self._gpu
        for v in views:
            if v.cuda != gpu or (gpu and v.device != self.device):
                raise ValueError("%s: %s memory, but the context is %s" % (
                    v.name, v.where(), "cuda:%d (%s)" % (self.device, self.backend) if gpu
                    else "on the host (cpu)"))
        self._stream()

    def _stream(self) -> None:
        """Queue the next call on torch's current stream of the context's device
        (a no-op on the CPU); every call that launches work takes it anew."""
        if self._gpu:
            import torch

            stream = torch.cuda.current_stream(self.device).cuda_stream
            check(lib.kve_context_set_stream(self.handle, ctypes.c_void_p(stream)),
                  "kve_context_set_stream")

    def _empty(self, shape: Tuple[int, ...], dtype: str, like_torch: bool) -> Any:
        if self.backend == "cpu" and not like_torch:
            return np.empty(shape, dtype=dtype)
        import torch

        device = "cpu" if self.backend == "cpu" else "cuda:%d" % self.device
        return torch.empty(shape, dtype=getattr(torch, dtype), device=device)


def as_context(ctx: Any, call: str) -> Context:
    """@ctx, when it is a Context; else ArgumentError naming ctx and @call."""
    if not isinstance(ctx, Context):
        raise ArgumentError("ctx: expected a kvevict.Context, got %s"
                            % ("None" if ctx is None else type(ctx).__name__), ctx, call)
    return ctx
