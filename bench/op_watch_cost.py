"""Benchmark: what the child's operator watch (attnkit/isolation/op_watch.py) adds to one experiment.

Not a test: it prints figures. Usage: python bench/op_watch_cost.py [--repeat 400] [--compare OLD_OP_WATCH.py]

Loads the watch as the child does (the fragment, primed once) and times, on one core, two experiments
shaped like a single-head judge's: a head built and run forward on four inputs, and one forward and
backward. Each is run bare and inside a watched block, interleaved, and the medians are printed. With
``--compare`` another version of the fragment (say ``git show REV:attnkit/isolation/op_watch.py``) is loaded
in the same process and timed in the same interleaving, so a machine's load moves both alike.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]


def load_watch(path: Path):
    fragment = {"__name__": "op_watch"}
    exec(compile(path.read_text(), "op_watch.py", "exec"), fragment)
    fragment["prime_op_watch"](torch)
    return fragment["watch_ops"]


class Head(nn.Module):
    """The seed's head, as a correct submission writes it."""

    def __init__(self, d, d_head, T_max, causal=True):
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(d, d_head, bias=False) for _ in range(3))
        self.causal = causal
        self.register_buffer("tril", torch.tril(torch.ones(T_max, T_max)))

    def forward(self, x):
        B, T, d = x.shape
        q, k, v = self.query(x), self.key(x), self.value(x)                  # (B, T, d_head)
        scores = q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5                 # (B, T, T)
        if self.causal:
            scores = scores.masked_fill(self.tril[:T, :T] == 0, float("-inf"))
        A = F.softmax(scores, dim=-1)                                         # (B, T, T)
        self.A = A.detach()
        return A @ v                                                          # (B, T, d_head)


X = torch.randn(2, 6, 8)                                                      # (B, T, d)


def forward_x4():
    head = Head(8, 4, 6)
    for _ in range(4):
        with torch.no_grad():
            head(X.clone()).to(torch.float64)


def backward():
    head = Head(8, 4, 6)
    x = X.clone().requires_grad_(True)
    head(x)[0, 3].sum().backward()
    x.grad.to(torch.float64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=400)
    ap.add_argument("--compare", type=Path, help="another op_watch.py, timed alongside")
    args = ap.parse_args()
    torch.set_num_threads(1)
    watches = {"watch": load_watch(ROOT / "autograder" / "op_watch.py")}
    if args.compare:
        watches = {"compared": load_watch(args.compare), **watches}
    for name, experiment in (("forward x4", forward_x4), ("forward+backward", backward)):
        times = {label: [] for label in ("bare", *watches)}
        for _ in range(args.repeat):
            for label in times:
                t = time.perf_counter()
                if label == "bare":
                    experiment()
                else:
                    with watches[label](torch):
                        experiment()
                times[label].append(time.perf_counter() - t)
        med = {label: statistics.median(v) * 1e6 for label, v in times.items()}
        extra = ", ".join(f"{label} +{med[label] - med['bare']:.0f} us" for label in watches)
        print(f"{name:17s} bare {med['bare']:.0f} us; {extra}   (medians of {args.repeat}, interleaved)")


if __name__ == "__main__":
    sys.exit(main())
