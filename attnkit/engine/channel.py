"""What a submission can say through its feedback: little, by construction (issue 29's covert channel).

Everything the grading child reports is chosen by the submission, and the child has seen the student's hidden
inputs: an exception message of 200 characters carried 375 bytes of them (15 bits a CJK character), 20 messages a
page, enough to bring back every input in two submissions. So no free text of the child's reaches a page. What
does, and its most bits (bench/feedback_channel.py adds them up for a page):

- an exception's type: a name of Python's or torch's own, else "an exception of its own class" (< 7 bits);
- its message: one sentence of ``CAUSES`` chosen by the message (< 4 bits), naming at most one identifier, and
  only one the student's own source spells (the source was written before the inputs existed);
- where it was raised: a line of the source (the line itself is the student's own, static text);
- a string the driver reports (a class name, a dtype): at most ``WORD`` characters of ``[A-Za-z0-9_.]``;
- the attention picture: weights rounded to ``PICTURE_STEP``.

Each is still a few bits that depend on the run; the feedback is a narrow channel, not a closed one, and each
student's inputs are their own (attnkit/engine/secret.py), so what one learns is worth nothing to a classmate.
"""
from __future__ import annotations

import builtins
import functools
import re

WORD = 40                     # characters of a string the child reports (type names, dtypes)
PICTURE_STEP = 0.05           # the attention picture's resolution: 21 levels a cell
OWN_CLASS = "an exception of its own class"

# Python's exception names and torch's (the kit's own kinds are added by the reader of the child's records)
KNOWN_TYPES = frozenset(n for n in dir(builtins) if isinstance(getattr(builtins, n), type)
                        and issubclass(getattr(builtins, n), BaseException)) | frozenset({
    "OutOfMemoryError", "AcceleratorError", "DeferredCudaCallError", "LinAlgError", "TorchRuntimeError",
    "Timeout", "Killed", "Exited", "OutputLimit", "Garbled", "Error", "NoNewProcess", "NotFound"})

# (what the message says, the sentence shown): the first that matches; `{name}` is an identifier of the message,
# shown only when the student's source spells it
CAUSES = (
    # the child's own sentences for what it caught (attnkit/isolation/child_runtime.py describe_error): shown as
    # matched (`None`), which the pattern bounds
    (r"^not answered yet$", None),
    (r"^took longer than the time allowed for this check$", None),
    (r"^ran out of the memory allowed for this check$", None),
    (r"^called sys\.exit\((?:0|1|None|True|False)\)", None),
    (r"^tried to start another process or thread \(multiprocessing,",
     "tried to start another process or thread (multiprocessing, subprocess, threads, torch.compile's compiler): "
     "grading runs your code in the one process that calls it, and nothing in this assignment needs another"),
    (r"not answered yet", "not answered yet"),
    (r"mat1 and mat2 shapes cannot be multiplied|Expected size for first two dimensions of batch2 tensor|"
     r"size mismatch|shapes? .* (?:cannot|can't) be (?:multiplied|broadcast)",
     "a matrix product of tensors whose shapes do not fit together"),
    (r"size of tensor a .* must match the size of tensor b|must match the existing size|expanded size",
     "two tensors whose sizes do not match"),
    (r"shape '\[[-\d, ]*\]' is invalid for input of size|view size is not compatible",
     "a view or reshape to a shape of another size"),
    (r"[Dd]imension out of range", "a dimension index out of range"),
    (r"index .*out of (?:range|bounds)|out of range", "an index out of range"),
    (r"expected (?:scalar type|m1 and m2 to have the same dtype)|dtype|[Ff]ound dtype|expected .* but found",
     "tensors of different dtypes"),
    (r"can't allocate memory|out of memory|DefaultCPUAllocator", "memory ran out"),
    (r"does not require grad and does not have a grad_fn",
     "the loss has no gradient: nothing it was computed from requires one (computed under torch.no_grad(), or "
     "detached)"),
    (r"backward through the graph a second time|modified by an inplace operation|does not require grad",
     "autograd could not differentiate it (a graph used twice, an in-place edit, or no gradient)"),
    (r"the model has no parameter `(?P<name>[\w.]+)`", "the model has no parameter `{name}`"),
    (r"`(?P<name>[\w.]+)` has shape .*, expected", "`{name}` has another shape than the contract's"),
    (r"has no attribute '(?P<name>\w+)'", "no attribute `{name}`"),
    (r"name '(?P<name>\w+)' is not defined", "the name `{name}` is not defined"),
    (r"(?:got an unexpected keyword argument|missing \d+ required positional argument)s?:? '?(?P<name>\w+)?",
     "called with arguments it does not take"),
    (r"takes \d+ positional arguments? but \d+ (?:was|were) given", "called with arguments it does not take"),
    (r"^class `(?P<name>\w+)` not found in your notebook", "class `{name}` not found in your notebook"),
    (r"^function `(?P<name>\w+)` not found in your notebook", "function `{name}` not found in your notebook"),
    # the drivers' own words (attnkit/toolkit/driver.py as_tensor: "<what> is a <type>, expected a torch.Tensor")
    (r"^forward's return value is a NoneType, expected", "forward returned None (no `return` on this path?)"),
    (r"^(?P<name>self\.\w+) is a NoneType, expected a torch\.Tensor", "`{name}` is None after this call"),
    (r"^(?P<name>self\.\w+) is a \w+, expected a torch\.Tensor", "`{name}` is not a torch.Tensor"),
    (r"is a \w+, expected a torch\.Tensor", "returned something that is not a torch.Tensor"),
)
_CAUSES = [(re.compile(p), s) for p, s in CAUSES]
_WORD_CHARS = re.compile(r"[^A-Za-z0-9_.]")


def shown_type(name) -> str:
    """An exception's type as a page may show it: one of Python's or torch's names, else a fixed phrase."""
    return name if isinstance(name, str) and name in KNOWN_TYPES else OWN_CLASS


def shown_message(message, source: str = "") -> str:
    """The sentence a page shows for an exception message (a fixed one of ``CAUSES``), or "" when none fits."""
    if not isinstance(message, str):
        return ""
    message = message[:2000]
    for pattern, sentence in _CAUSES:
        found = pattern.search(message)
        if found:
            if sentence is None:
                return found.group(0)
            name = found.groupdict().get("name")
            if "{name}" not in sentence:
                return sentence
            if name and len(name) <= 64 and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", source):
                return sentence.format(name=name)
            return sentence.replace(" `{name}`", "").replace("`{name}`", "a name")
    return ""


_ERROR_TEXT = re.compile(r"(\w{1,80}): (.*)", re.S)


def vocabulary(source: str) -> frozenset:
    """The names a reported string may be made of: the identifiers of the student's source (written before the
    inputs existed) and of torch's and Python's own classes and dtypes."""
    return frozenset(re.findall(r"[A-Za-z_]\w*", source)) | library_names()


@functools.cache
def library_names() -> frozenset:
    """Names any reported word may be besides the source's (bench/feedback_channel.py counts them). Read on first
    use: importing this module (the feedback page reads PICTURE_STEP in nbgrader's own processes) imports no torch."""
    import torch                     # the judge's process has it; only names are read
    dtypes = {str(v).split(".")[-1] for v in vars(torch).values() if isinstance(v, torch.dtype)}
    names = set(dir(torch.nn)) | dtypes | set(dir(builtins)) | {"weight", "bias", "tril", "NoneType", "ndarray"}
    return frozenset(n for n in names if n.isidentifier())


def word(value, known: frozenset = frozenset()) -> str:
    """A string the child reports (a class, dtype or parameter name), as a page may show it: each dotted part an
    identifier of ``known`` (``vocabulary``) or a small number, else "?"; at most ``WORD`` characters. An error a
    driver caught (``"TypeName: message"``) shows as a page shows an exception: a known type, a fixed sentence."""
    if not isinstance(value, str):
        return ""
    caught = _ERROR_TEXT.fullmatch(value[:2000])
    if caught:
        why = shown_message(caught.group(2))
        return shown_type(caught.group(1)) + (f": {why}" if why else "")
    parts = value[:200].split(".")
    if len(parts) > 6 or not all(p in known or p in library_names() or re.fullmatch(r"\d{1,3}", p) for p in parts):
        return "?"
    return value[:WORD]


SHAPE_DIMS = 6                # a list of numbers the child reports (a shape) keeps this many, each within DIM_LIMIT
DIM_LIMIT = 4096              # the widest honest array: the LM's logits at the seed's 1,500 words
INT_LIMIT = 10**7             # an integer beyond it (a parameter count is 331,132) is not reported
FLOAT_DIGITS = 4              # significant digits of a reported float


def words(value, known: frozenset = frozenset(), depth: int = 0):
    """``value`` (JSON from the child) narrowed as a page may show it: every string, dictionary keys included,
    cut as ``word`` does; integers within ``INT_LIMIT``, floats to ``FLOAT_DIGITS`` digits, lists of numbers (a
    shape) to ``SHAPE_DIMS`` items. A shape was the widest door: an empty tensor of 255 dimensions of 7 bytes
    each, printed by a check as "forward returned shape [...]", carried 1.8 KB of the hidden inputs."""
    if isinstance(value, str):
        return word(value, known)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if abs(value) <= INT_LIMIT else None
    if isinstance(value, float):
        return float(f"{value:.{FLOAT_DIGITS}g}")
    if isinstance(value, list) and depth < 8:
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return [v if v is not None and abs(v) <= DIM_LIMIT else None for v in map(words, value[:SHAPE_DIMS])]
        return [words(v, known, depth + 1) for v in value[:256]]
    if isinstance(value, dict) and depth < 8:
        return {word(k, known): words(v, known, depth + 1) for k, v in list(value.items())[:256]}
    return None


def picture(matrix):
    """The student's attention matrix rounded to ``PICTURE_STEP`` (None stays None: NaN or inf)."""
    if matrix is None:
        return None
    return [[None if v is None else round(round(v / PICTURE_STEP) * PICTURE_STEP, 2) for v in row] for row in matrix]


# The sentences the child's monitor (the kit's PID 1 in the child, attnkit/isolation/child_runtime.py) writes for
# a process it ended: a fixed set, with small numbers. A submission's own exception named `Killed` says nothing.
_MONITOR = re.compile(r"(?:used more than \d{1,7} MiB of memory in all its processes together|started more than "
                      r"\d{1,4} processes|returned more data than allowed|exited \(status \d{1,3}\)|was killed by "
                      r"signal \d{1,2}|was killed \(memory or CPU-time limit\)|exceeded its CPU-time limit|crashed "
                      r"\(segmentation fault\)|ended too often|wrote something the judge could not read as a result|)")


def monitor_message(message: str) -> str:
    return message if _MONITOR.fullmatch(message) else ""


def small_shape(shape) -> bool:
    """Whether an array the child returned is of a shape a page may print: at most ``SHAPE_DIMS`` dimensions of
    at most ``DIM_LIMIT`` each. Another is dropped (the check then says the submission produced none)."""
    return len(shape) <= SHAPE_DIMS and all(d <= DIM_LIMIT for d in shape)
