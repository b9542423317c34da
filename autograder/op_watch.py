"""Program fragment run inside the submission's process: which attention operators its code ran.

Glued after child_runtime.py and before the assignment's driver (see sandbox.child_program);
stdlib only, plus the torch it is handed. ``watch_ops(torch)`` is a context manager:

    with watch_ops(torch) as seen:
        ...                        # the student's code runs here
    seen.fused                     # sorted names of the banned attention operators that ran
    seen.intact                    # False when that code switched the watch off meanwhile

Two witnesses, each installed before the block's code runs and checked after it:

  the dispatcher: torch's profiler (its legacy CPU recorder, on the thread that runs the block;
      kineto's costs twice as much and starts a thread of its own), which records each aten
      operator as it is dispatched, composite ones included, so
      ``torch.ops.aten._scaled_dot_product_attention_math``, a ``getattr``-assembled
      ``F.scaled_dot_product_attention`` and the kernels behind nn.MultiheadAttention's fast path
      all show. ``F.multi_head_attention_forward`` with need_weights=True reaches the dispatcher
      only as bmm and softmax, so the one helper it alone calls through its module's globals
      (``_mha_shape_check``) is wrapped to add an event of its own, which even a reference to the
      function taken before the watch passes. Two markers with a fresh random name open and close
      the recording: a recording that lacks either was stopped by the block's code (restarting
      it loses the first), and so was a helper that is no longer the wrapper at the end.
  the Python API: a TorchFunctionMode that notes every banned torch function called, by name
      (``aten::...`` for torch.ops). A marker call must reach it at the start and at the end, and
      it must still be the top of the mode stack then.

Torch functions and RecordFunction are switched on for the block, as the child runs them (only a
definition could have switched them off). A witness that cannot be installed (a profiler this
thread already runs) records nothing and accuses nobody: the watch never fails a correct
submission for the grader's sake. What it cannot see: attention written by hand under another
name (torch's own Python source of multi_head_attention_forward pasted into the notebook is, to
every witness, hand-written code); code that reaches into the grader's own objects in this
process (gc, frames, the program's globals); and work done on another thread or in another
process. The judge's text scan of the source remains a further witness. One thing it costs: a
forward that starts torch's profiler itself raises "Profiler is already enabled on this thread".
"""

_OW_EXTRA = frozenset({"aten::_transformer_encoder_layer_fwd", "_transformer_encoder_layer_fwd"})
_OW_MHA = "attnkit::multi_head_attention_forward"      # the profiler event of the wrapped helper
_ow_torch = {}           # what the watch holds of torch, taken once per process (see prime_op_watch)


def _ow_banned_event(name):
    """The banned name a profiler event stands for, or None: a fused attention operator (sdpa and
    its math/flash/efficient/cudnn kernels, native multi-head attention, the transformer fast
    path) or F.multi_head_attention_forward's helper."""
    if name.startswith("aten::") and ("attention" in name or name in _OW_EXTRA):
        return name
    return "multi_head_attention_forward" if name == _OW_MHA else None


def _ow_banned_function(func):
    """The name of banned torch function ``func``: ``aten::X`` for torch.ops, else its own."""
    qualified = getattr(func, "_qualified_op_name", None)                 # torch.ops.aten.X
    if isinstance(qualified, str):
        return qualified
    schema_name = getattr(getattr(func, "_schema", None), "name", None)   # torch.ops.aten.X.default
    return schema_name if isinstance(schema_name, str) else func.__name__


def prime_op_watch(torch):
    """Take the references the watch uses, once per process. Called before the submission's
    definitions load, it also keeps a definition that rebinds torch's attributes from steering
    the watch; otherwise the first watch_ops does it."""
    if _ow_torch:
        return _ow_torch
    import os
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")   # should a submission start kineto: no lines on stderr
    C, A, P = torch._C, torch._C._autograd, torch._C._profiler
    mark, marker, neg = P._RecordFunctionFast, torch.empty(0), torch.neg

    class _OpWatchMode(torch.overrides.TorchFunctionMode):
        def __init__(self):
            self.seen, self.marks = set(), 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", None)       # kept lean: this runs for every torch call
            if isinstance(name, str) and ("attention" in name or name in _OW_EXTRA):
                self.seen.add(_ow_banned_function(func))
            elif func is neg and args and args[0] is marker:
                self.marks += 1
            return func(*args, **kwargs) if kwargs else func(*args)

    functional = torch.nn.functional.__dict__
    shape_check = functional.get("_mha_shape_check")
    sentinel = None
    if callable(shape_check):
        def sentinel(*args, **kwargs):
            with mark(_OW_MHA):
                pass
            return shape_check(*args, **kwargs)
        functional["_mha_shape_check"] = sentinel

    _ow_torch.update(
        enable=A._enable_profiler_legacy, disable=A._disable_profiler_legacy, event_name=A.ProfilerEvent.name,
        config=P.ProfilerConfig(P.ProfilerState.CPU, False, False, False, False, False, P._ExperimentalConfig(), ""),
        profiling=A._profiler_enabled, enable_record_function=A._enable_record_function,
        mark=mark, functional=functional, sentinel=sentinel,
        push=C._push_on_torch_function_stack, pop=C._pop_torch_function_stack,
        depth=C._len_torch_function_stack, mode_at=C._get_function_stack_at,
        tf_state=C._get_torch_function_state, tf_set=C._set_torch_function_state,
        tf_enabled=C._TorchFunctionState.ENABLED,
        neg=neg, marker=marker, mode=_OpWatchMode, urandom=os.urandom)
    return _ow_torch


class _OpWatch:
    """One watched block; ``fused`` and ``intact`` hold its record once it has ended."""

    def __init__(self, torch):
        self._t = prime_op_watch(torch)
        self.fused, self.intact = [], True
        self._markers = self._mode = self._tf_before = None

    def __enter__(self):
        for start in (self._start_profiler, self._start_mode):
            try:
                start(self._t)
            except Exception:  # noqa: BLE001 - no witness rather than a failed check
                pass
        return self

    def _start_profiler(self, t):
        t["enable_record_function"](True)      # as the child runs it: a definition may have switched it off
        if t["sentinel"] is not None:
            t["functional"]["_mha_shape_check"] = t["sentinel"]
        if t["profiling"]():                   # a recording this thread already runs: not ours
            return
        t["enable"](t["config"])
        nonce = t["urandom"](8).hex()
        self._markers = (f"attnkit-watch-begin-{nonce}", f"attnkit-watch-end-{nonce}")
        with t["mark"](self._markers[0]):
            pass

    def _start_mode(self, t):
        self._tf_before = t["tf_state"]()      # a definition may have switched torch functions off:
        if self._tf_before != t["tf_enabled"]:   # on for the block, as the child runs it, then back
            t["tf_set"](t["tf_enabled"])
        mode = t["mode"]()
        t["push"](mode)
        self._mode, self._depth = mode, t["depth"]()
        t["neg"](t["marker"])
        if mode.marks != 1:                    # torch functions do not reach modes here
            self._drop_mode(t)
            self._mode = None

    def __exit__(self, *exc):
        t, fused, intact = self._t, set(), True
        if self._mode is not None:
            mode = self._mode
            try:
                on_top = t["depth"]() == self._depth and t["mode_at"](self._depth - 1) is mode
                if on_top:
                    t["neg"](t["marker"])
                intact = on_top and mode.marks == 2
                self._drop_mode(t)
            except Exception:  # noqa: BLE001 - a mode stack the block's code broke
                intact = False
            fused |= mode.seen
        if self._tf_before is not None and self._tf_before != t["tf_enabled"]:
            t["tf_set"](self._tf_before)
        if self._markers is not None:
            begin, end = self._markers
            try:                               # a recording stopped meanwhile raises or lacks a marker
                with t["mark"](end):
                    pass
                names = set()
                for thread in t["disable"]():
                    names.update(map(t["event_name"], thread))
                intact = intact and begin in names and end in names
                fused.update(b for b in map(_ow_banned_event, names) if b)
            except Exception:  # noqa: BLE001 - a recording the block's code broke
                intact = False
            if t["sentinel"] is not None and t["functional"].get("_mha_shape_check") is not t["sentinel"]:
                intact = False
                t["functional"]["_mha_shape_check"] = t["sentinel"]
        self.fused, self.intact = sorted(fused), intact
        return False

    def _drop_mode(self, t):
        """Take our mode off the stack, with whatever the block left above it."""
        for i in range(t["depth"]() - 1, -1, -1):
            if t["mode_at"](i) is self._mode:
                while t["depth"]() > i:
                    t["pop"]()
                return


def watch_ops(torch):
    """A context manager recording the fused attention operators run inside it (module doc)."""
    return _OpWatch(torch)
