"""The life of a C plan handle, shared by TopkPlan and BlockPlan: adopted from its Create
call, registered with its context and with the ops' id registry, its workspace (the
caller's tensor or one allocated once), mirrored in the torch extension's plan table when it
is loaded (_fast_ops), destroyed by close() or at collection."""
import ctypes

from . import _capi, _device, _fast_ops, _registry
from ._tensors import TensorSlots
from .errors import check


class PlanHandle:
    _kind = "plan"  # the class name in messages
    _destroy = None  # the C function that destroys the handle
    _fast_kind = None  # the torch extension's kind of plan (_fast_ops.KIND_*), None: not taken
    # The C functions that build the handle and read its workspace size and counter offset
    # (BlockPlan has its own build and workspace_size).
    _build_plan = _get_workspace_size = _get_counter_offset = None

    def build(self, workspace=None):
        """Compiles (or loads the cached cubins), then the workspace: the caller's, or one
        of workspace_size bytes allocated now on the context's device (none without a GPU)."""
        check(type(self)._build_plan(self.handle))
        self.built = True
        self._use_workspace(workspace, lambda: self.workspace_size)
        return self

    @property
    def workspace_size(self):
        return self._ask(type(self)._get_workspace_size)

    @property
    def counter_offset(self):
        """Where the two uint32 counters of the last call lie in the workspace."""
        return self._ask(type(self)._get_counter_offset)

    def _set_expression(self, desc, expression):
        """A text score in the descriptor (the bytes kept alive with the plan)."""
        desc.score = _capi.SCORE_EXPR
        self._expression = expression.encode()
        desc.expression = self._expression

    def _create(self, context, create, desc, slots, build, workspace):
        """create(context, &desc, &handle), the handle adopted, then build(workspace) when
        asked."""
        handle = ctypes.c_void_p()
        check(create(context.handle, ctypes.byref(desc), ctypes.byref(handle)))
        self._adopt(context, handle, slots)
        if build:
            self.build(workspace)

    def _ask(self, getter):
        """The size_t a getter of this plan writes (getter(handle, &value))."""
        n = ctypes.c_size_t()
        check(getter(self.handle, ctypes.byref(n)))
        return n.value

    def _adopt(self, context, handle, slots):
        """Takes the handle a Create call returned; slots: the tensor descriptors a call packs."""
        self._handle = handle
        context._plans.add(self)
        self._slots = TensorSlots(slots)
        self.id = _registry.new_id()
        _registry.add(self)  # the ops find it by id; an unbuilt plan's call fails in C
        self.workspace = None
        self._workspace_ptr, self._workspace_bytes = None, 0
        self.built = False
        _fast_ops.sync(self)

    @property
    def closed(self):
        return self._handle is None

    @property
    def handle(self):
        if self._handle is None:
            raise ValueError(f"winnow.{self._kind} is closed")
        return self._handle

    def _launch(self, call, *args, stream=None):
        """check(call(handle, *args, workspace, workspace bytes, stream)): a plan's C call
        whose last three arguments are its workspace and the stream (None: torch's current
        stream on the context's device)."""
        if stream is None:
            stream = _device.current_stream(self.context.device)
        check(call(self.handle, *args, self._workspace_ptr, self._workspace_bytes, stream))

    def _use_workspace(self, workspace, size):
        """The caller's uint8 device tensor, or one of size() bytes allocated now on the
        context's device (none without a GPU)."""
        if workspace is None and _device.gpu_available():
            workspace = _device.allocate(self.context.device, size())
        self.workspace = workspace
        if workspace is None:
            self._workspace_ptr, self._workspace_bytes = None, 0
        else:
            self._workspace_ptr = workspace.data_ptr()
            self._workspace_bytes = workspace.numel() * workspace.element_size()
        _fast_ops.sync(self)

    def counters(self):
        """(fallback rows, malformed-window rows) of the last call, from the two uint32 at
        the plan's counter_offset in its workspace (synchronises the stream: not for a hot
        path)."""
        if self.workspace is None:
            raise ValueError("the plan has no workspace (no GPU)")
        import torch
        offset = self.counter_offset
        words = self.workspace[offset:offset + 8].cpu().view(dtype=torch.int32)
        return int(words[0]), int(words[1])

    def close(self):
        if getattr(self, "_handle", None) is not None:
            _registry.remove(self)
            _fast_ops.forget(self)  # waits for the extension's calls on this plan
            check(type(self)._destroy(self._handle))
            self._handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass
