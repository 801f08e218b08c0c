"""winnow.Context: winnowCreate / winnowDestroy. Plans keep their context alive, so it is
destroyed after every plan made from it."""
import ctypes
import weakref

from . import _capi
from .errors import check


class Context:
    """A winnow context on one CUDA device (its primary context, shared with torch). With no
    GPU it still compiles plans for an explicit arch such as "sm_90a"."""

    def __init__(self, device=0):
        if hasattr(device, "index"):  # a torch.device
            device = device.index or 0
        self.device = int(device)
        handle = ctypes.c_void_p()
        check(_capi.lib.winnowCreate(ctypes.byref(handle), self.device))
        self._handle = handle
        self._plans = weakref.WeakSet()  # closed before the context

    @property
    def handle(self):
        if self._handle is None:
            raise ValueError("winnow.Context is closed")
        return self._handle

    def topk_plan(self, **fields):
        """A TopkPlan (winnowPlanCreate + winnowPlanBuild): see TopkPlan."""
        from .plan import TopkPlan
        return TopkPlan(self, **fields)

    def block_plan(self, **fields):
        """A BlockPlan (winnowBlockPlanCreate + winnowBlockPlanBuild): see BlockPlan."""
        from .block_plan import BlockPlan
        return BlockPlan(self, **fields)

    def paged_plan(self, **fields):
        """A PagedPlan (winnowPagedPlanCreate + winnowPagedPlanBuild): see PagedPlan."""
        from .paged_plan import PagedPlan
        return PagedPlan(self, **fields)

    def close(self):
        """winnowDestroy. Refused while a plan of this context is open."""
        if any(not p.closed for p in getattr(self, "_plans", ())):
            raise ValueError("winnow.Context.close: close its plans first")
        if getattr(self, "_handle", None) is not None:
            check(_capi.lib.winnowDestroy(self._handle))
            self._handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to report to
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
