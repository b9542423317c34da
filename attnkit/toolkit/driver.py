"""What an assignment's driver (``autograder/<A>/drive.py``) imports: its one door to the student's code.

The driver runs inside the grading child, loaded by the fork server before any submission code exists
(attnkit/isolation/child_runtime.py); it defines ``run_experiment(module, experiment, tensors, torch, state)``
and returns ``(meta, arrays)``: ``meta`` a JSON-able dict, ``arrays`` a dict of name -> torch.Tensor (either may
be empty). ``state["stage"]`` names what it is doing, so an error says where it happened.

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
