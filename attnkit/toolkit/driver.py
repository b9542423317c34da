"""What an assignment's driver (``autograder/<A>/drive.py``) imports: its one door to the student's code.

The driver runs inside the grading child, loaded by the fork server before any submission code exists
(attnkit/isolation/child_runtime.py); it defines ``run_experiment(module, experiment, tensors, torch, state)``
and returns ``(meta, arrays)``: ``meta`` a JSON-able dict, ``arrays`` a dict of name -> torch.Tensor (either may
be empty). ``state["stage"]`` names what it is doing, so an error says where it happened.

The helpers below are what more than one driver does; each takes torch from its caller. None sets
``state["stage"]`` or words a message of its own: the judge shows a page only the stages and words written in the
assignment's own drive.py (attnkit/engine/judge.py), so the driver names both and passes its words in.

Nothing here imports torch (the child passes it in) or anything of the kit: this module is the toolkit's, and
the child's runtime, one layer above, tells it what the student writes (``use_contract``).
"""
from __future__ import annotations

_contract: tuple[str, str] | None = None     # (name, kind) of the manifest's [contract], set by the child runtime

# What torch says when a tensor made on the CPU meets the module's moved ones (the meta experiments read it).
DEVICE_MISMATCH = ("is not on the expected device", "Expected all tensors to be on the same device")


def use_contract(name: str, kind: str) -> None:
    """The student's ``name`` (a ``kind``: class or function) is what ``student_object`` reaches."""
    global _contract
    _contract = (name, kind)


class ContractMissing(LookupError):
    """The contract's class or function is not in the notebook: the kit's own finding, told apart from a
    LookupError the student's code raises (which is reported as any exception of theirs is)."""


def student_object(module):
    """The class or function the manifest's [contract] names, or the plain-words reason it is missing."""
    name, kind = _contract
    obj = getattr(module, name, None)
    if not callable(obj):                 # a class is called to build it, a function to run it
        raise ContractMissing(f"{kind} `{name}` not found in your notebook")
    return obj


def as_tensor(value, what: str, torch):
    """``value`` when it is a tensor, else a TypeError naming ``what`` (the student reads it)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{what} is a {type(value).__name__}, expected a torch.Tensor")
    return value


def load_weights(module, tensors: dict, prefix: str, names, torch) -> None:
    """Copy the judge's ``tensors[f"{prefix}_{name}"]`` into ``module.<name>.weight`` for each of ``names``."""
    with torch.no_grad():
        for name in names:
            getattr(module, name).weight.copy_(tensors[f"{prefix}_{name}"])


def module_state(module) -> dict:
    """A copy of every buffer and parameter of the student's module: what a call may not change."""
    return {n: t.detach().clone() for n, t in list(module.named_buffers()) + list(module.named_parameters())}


def changed_since(before: dict, module, torch) -> list[str]:
    """The buffers and parameters a call changed (values, shape or dtype), or added, since ``module_state``."""
    now = dict(list(module.named_buffers()) + list(module.named_parameters()))
    return sorted(n for n, t in now.items() if n not in before or t.shape != before[n].shape
                  or t.dtype != before[n].dtype or not torch.equal(t.detach().cpu(), before[n].cpu()))


def build(module, args: tuple = (), kwargs: dict | None = None, *, seed: int | None = None, torch=None):
    """The student's object: the contract's class called with ``args`` and ``kwargs`` (``Head(d, d_head, T)``).

    With ``seed``, torch's global generator is seeded first (``torch`` is then required), so the module's own
    initialisation, and any dropout after it, is the same on every run of the same submission."""
    if seed is not None:
        torch.manual_seed(seed)
    return student_object(module)(*args, **(kwargs or {}))


def forward(fn, x, what: str, torch):
    """``fn(x)`` without autograd, on a copy of ``x`` (the student's code may write into its input; the judge's
    tensor is used again): the returned tensor as the student made it (its own dtype and device), or a TypeError
    naming ``what``. For a module, ``fn`` is the module.

    x: the judge's input, any shape  ->  the student's output tensor, the shape their code gives it."""
    with torch.no_grad():
        return as_tensor(fn(x.clone()), what, torch)


def float64(t, torch):
    """``t`` detached, as float64 on the CPU's terms: what a driver hands back for the checks to compare with
    the judge's float64 reference. Same shape."""
    return t.detach().to(torch.float64)


def train(model, x, y, steps: int, lr: float, torch, training: bool = True) -> None:
    """``steps`` full-batch steps of AdamW (no weight decay) on the cross-entropy of ``model(x)`` against ``y``:
    an overfit of a few examples, which a correct model drives towards zero loss. The model is left in train mode,
    or with ``training=False`` run and left in eval mode (what a train-only dropout does is then left out).

    x: (B, T) int64 token ids -> model(x): (B, V) logits of the next token; y: (B,) int64 targets."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train(training)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def error_text(e: BaseException) -> str:
    """What a driver records of an exception the student's code raised and it reports as data: its type and
    the first 200 characters of its message."""
    return f"{type(e).__name__}: {str(e)[:200]}"


SUBMISSION_FILE = "<submission>"      # the file name the grading child compiles the student's code under


def submission_line(e: BaseException) -> int | None:
    """The line of the student's code (in the judge's assembled source) where ``e`` was last raised, or None."""
    import traceback
    lines = [fs.lineno for fs in traceback.extract_tb(e.__traceback__) if fs.filename == SUBMISSION_FILE]
    return lines[-1] if lines else None


def device_guard(torch):
    """A torch-function mode for a module moved to the meta device, standing in for a GPU: it raises, as CUDA
    would, when an embedding lookup mixes a module tensor on the meta device with indices made on the CPU (the
    meta kernels accept that), and it gives ``t.cpu()`` / ``t.to('cpu')`` of a meta tensor a CPU tensor of its
    shape (meta has no data to copy; on a GPU the copy works, and what is made from it on the CPU then meets the
    GPU's tensors: blind set 13's m19, a padding test on ids.cpu())."""
    F = torch.nn.functional
    lookups = {F.embedding, torch.index_select, torch.Tensor.index_select, torch.gather, torch.Tensor.gather}

    def to_cpu(func, args, kwargs) -> bool:
        if func is torch.Tensor.cpu:
            return True
        if func is not torch.Tensor.to:
            return False
        where = kwargs.get("device", args[1] if len(args) > 1 else None)
        return isinstance(where, (str, torch.device)) and torch.device(where).type == "cpu"

    class Guard(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if args and isinstance(args[0], torch.Tensor) and args[0].device.type == "meta" and to_cpu(
                    func, args, kwargs):
                return torch.zeros(args[0].shape, dtype=kwargs.get("dtype") or args[0].dtype)
            if func in lookups:
                ts = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
                if any(t.device.type == "meta" for t in ts) and any(t.device.type == "cpu" and t.dim() > 0
                                                                    for t in ts):
                    raise RuntimeError("Expected all tensors to be on the same device, but found at least two "
                                       "devices, meta and cpu! (an index tensor made on the CPU)")
            return func(*args, **kwargs)
    return Guard()


def device_mismatch(e: BaseException) -> str | None:
    """``error_text(e)`` when ``e`` is torch saying a tensor met tensors on another device (a tensor made on
    the CPU inside forward after the module moved), else None: any other failure on the meta device is none."""
    return error_text(e) if any(m in str(e) for m in DEVICE_MISMATCH) else None
