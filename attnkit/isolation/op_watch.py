"""Run inside the submission's process: which attention operators its code ran.

Imported by child_runtime in the grading child's fork server (see sandbox.child_program);
stdlib only, plus the torch it is handed. ``watch_ops(torch)`` is a context manager:

    with watch_ops(torch) as seen:
        ...                        # the student's code runs here
    seen.fused                     # sorted names of the banned attention operators that ran
    seen.intact                    # False when that code took the grader's stand-ins away meanwhile

The witness lives in torch's dispatcher. ``prime_op_watch(torch)``, run once per process before
any submission code (in the fork server, so every child inherits it), puts a stand-in in front of
every kernel of every fused attention operator torch registers (sdpa and its math, flash,
efficient and cudnn kernels, native multi-head attention, the transformer fast path): for each
such operator, each dispatch key with a kernel of its own, and the composite aliases that
``OpOverload.decompose`` calls directly. A stand-in notes the operator's name and calls the kernel
it replaced (``torch.library.get_kernel``), so results and gradients are torch's own; every other
operator dispatches exactly as before, so the watch costs nothing per operator. Whatever route
reaches a fused kernel (``F.scaled_dot_product_attention`` under any spelling, ``torch.ops.aten``,
``.decompose()``, vmap, inference mode, another thread, a traced graph, torch's Python
decompositions, nn.MultiheadAttention's fast path) passes a stand-in. torch's attention written in
Python (``F.multi_head_attention_forward``, the quantizable ``MultiheadAttention``, flex_attention's
kernels) reaches the dispatcher only as matmul and softmax, so its entry points and the Python
kernels of torch's attention higher-order operators get stand-ins of their own; a copy of such a
function made from the stand-in is still the stand-in.

Tampering is checked at the end of each block: every stand-in must still be what torch runs (a
dispatcher kernel's registration site, as torch reports it, unchanged since priming; a Python
stand-in still in its place, else put back). A stand-in that is gone or covered leaves the block
not intact. What it cannot see: attention written by hand under another name, which includes
torch's Python source pasted into the notebook and any other Python helper inside torch that
computes attention from matmul and softmax; code that reaches into the grader's own objects in
this process (gc, frames, this module's globals, a stand-in's closure) to take the originals or
unregister the stand-ins and register look-alikes; and work done in another process. The judge's
text scan of the source remains a further witness.
"""

_OW_EXTRA = frozenset({"_transformer_encoder_layer_fwd"})
# torch's attention written in Python reaches the dispatcher only as matmul and softmax, so its entry
# points get a stand-in of their own: (module, attribute path, the name noted).
_OW_PYTHON = (
    ("torch.nn.functional", ("multi_head_attention_forward",), "multi_head_attention_forward"),
    ("torch.ao.nn.quantizable.modules.activation", ("MultiheadAttention", "_forward_impl"), "MultiheadAttention"),
    ("torch._higher_order_ops.flex_attention", ("math_attention",), "flex_attention"),
    ("torch._higher_order_ops.flex_attention", ("sdpa_dense",), "flex_attention"),
    ("torch._higher_order_ops.flex_attention", ("sdpa_dense_backward",), "flex_attention"),
)
_OW_SKIP_KEYS = frozenset({"Tracer"})          # the JIT tracer's wrapper: it only redispatches
_OW_ALIASES = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")
_ow_torch = {}           # what the watch holds of torch, taken once per process (see prime_op_watch)
_ow_seen = set()         # names the stand-ins noted since the current block began


def _ow_banned(op):
    """Whether operator ``op`` ("aten::name.overload") is a fused attention operator."""
    if not op.startswith("aten::"):
        return False
    base = op[6:].split(".", 1)[0]
    return "attention" in base or base in _OW_EXTRA


def _ow_kernels(torch):
    """(operator, dispatch key, the kernel it runs there) for every kernel of a banned operator: each
    runtime key with a registration of its own, and each composite alias (whose kernel every key
    without one of its own runs: read at such a key)."""
    C = torch._C
    keys = C.DispatchKey.__members__
    runtime = sorted({k.name for k in keys.values()                 # canonical names: the enum has synonyms
                      if not C._dispatch_is_alias_key(k) and k.name not in _OW_SKIP_KEYS})
    found = []
    for op in sorted(filter(_ow_banned, C._dispatch_get_all_op_names())):
        own = [k for k in runtime if _ow_has_own(C, op, keys[k])]
        for key in own:
            found.append((op, key, key))
        for alias in _OW_ALIASES:
            if _ow_has_own(C, op, keys[alias]):
                via = next((k for k in ("CPU", "Meta", "AutogradCPU") if k not in own), None)
                if via is not None:
                    found.append((op, alias, via))
    kernels = []
    for op, key, via in found:
        try:
            kernels.append((op, key, via, torch.library.get_kernel(op, via)))
        except (RuntimeError, ValueError):       # a key this build computes no kernel for
            pass
    return kernels


def _ow_has_own(C, op, key):
    """Whether ``op`` has a kernel registered at ``key`` itself (not one computed from an alias or a fallback)."""
    try:
        return C._dispatch_has_kernel_for_dispatch_key(op, key)
    except RuntimeError:                          # a marker of the enum, not a key (EndOfDenseBackends, ...)
        return False


def _ow_stand_in(name, kernel, seen):
    def stand_in(keyset, *args, **kwargs):
        seen.add(name)
        return kernel.call_boxed(keyset, *args, **kwargs)
    return stand_in


def _ow_python_stand_in(name, function, seen):
    def stand_in(*args, **kwargs):
        seen.add(name)
        return function(*args, **kwargs)
    stand_in.__name__, stand_in.__qualname__ = function.__name__, function.__qualname__
    stand_in.__doc__, stand_in.__module__ = function.__doc__, function.__module__
    return stand_in


def _ow_python_entry_points(torch):
    """(owner, attribute, stand-in) for each of torch's attention entry points written in Python, and for
    each Python kernel of torch's attention higher-order operators (flex_attention, its backward)."""
    import importlib
    placed = []
    for module, path, name in _OW_PYTHON:
        try:
            owner = importlib.import_module(module)
            for attr in path[:-1]:
                owner = getattr(owner, attr)
        except (ImportError, AttributeError):                   # not in this torch
            continue
        if _ow_get(owner, path[-1]) is not None:
            placed.append((owner, path[-1], _ow_python_stand_in(name, _ow_get(owner, path[-1]), _ow_seen)))
    hops = {n: h for n, h in sorted(getattr(torch._ops, "_higher_order_ops", {}).items()) if "attention" in n}
    placed += [(hop.py_kernels, key, _ow_python_stand_in(name, kernel, _ow_seen))
               for name, hop in hops.items() for key, kernel in list(hop.py_kernels.items())]
    for owner, attr, stand_in in placed:
        _ow_put(owner, attr, stand_in)
    for hop in hops.values():
        hop._dispatch_cache.clear()                             # its kernels are read through this cache
    return placed


def _ow_get(owner, attr):
    """``attr`` of a module or a class itself (not inherited), or a dict's entry; None if absent."""
    return (owner if isinstance(owner, dict) else vars(owner)).get(attr)


def _ow_put(owner, attr, value):
    if isinstance(owner, dict):
        owner[attr] = value
    else:
        setattr(owner, attr, value)


def prime_op_watch(torch):
    """Install the stand-ins and take the references the watch uses, once per process, before any
    submission code has run (a definition can then neither steer nor precede them)."""
    if _ow_torch:
        return _ow_torch
    import warnings
    C = torch._C
    kernels = _ow_kernels(torch)                  # every original first: a registration changes others
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # "Overriding a previously registered kernel": ours
        for op, key, _, kernel in kernels:
            lib.impl(op[6:], _ow_stand_in(op.split(".", 1)[0], kernel, _ow_seen), key, with_keyset=True)
    computed = C._dispatch_get_computed_kernel_for_dispatch_key
    # The tamper check reads the stand-ins a dense CPU tensor reaches (12 in torch 2.13; reading all 57
    # costs about 1 ms per block): unregistering ours takes them all at once, and a student's own
    # registration over one of them can only compute by hand, since only a stand-in holds the original.
    expected = sorted({(op, via, repr(computed(op, via))) for op, _, via, _ in kernels if via == "CPU"})
    _ow_torch.update(lib=lib, expected=expected, computed=computed, python=_ow_python_entry_points(torch))
    return _ow_torch


class _OpWatch:
    """One watched block; ``fused`` and ``intact`` hold its record once it has ended."""

    def __init__(self, torch):
        self._t = prime_op_watch(torch)
        self.fused, self.intact = [], True

    def __enter__(self):
        _ow_seen.clear()
        return self

    def __exit__(self, *exc):
        t, intact = self._t, True
        try:                                       # each stand-in still what torch runs for its key
            computed = t["computed"]
            intact = all(repr(computed(op, key)) == kernel for op, key, kernel in t["expected"])
        except Exception:  # noqa: BLE001 - a dispatcher the block's code broke
            intact = False
        for owner, attr, stand_in in t["python"]:  # each Python stand-in still in its place; put back if not
            if _ow_get(owner, attr) is not stand_in:
                intact = False
                _ow_put(owner, attr, stand_in)
        self.fused, self.intact = sorted(_ow_seen), intact
        _ow_seen.clear()
        return False


def watch_ops(torch):
    """A context manager recording the fused attention operators run inside it (module doc)."""
    return _OpWatch(torch)
