"""The judge runs what the student's class needs from the notebook's module level (attnkit/isolation/notebook_slice.py):
honest module-level code keeps every point, code that never runs is named, never a bare NameError."""
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from attnkit.mutants import solution_source, submission
from attnkit.engine import config
from attnkit.engine.judge import grade
from attnkit.isolation.notebook_code import extract
from attnkit.course import nbgrader
from tests.conftest import STUDENT_HELPER, copy_course
from tests.notebooks import write

SOL = solution_source("causal_head", "head")
HONEST = {   # a correct Head that reads a name its own cell binds at module level, as students write them
    "device": "device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
              + SOL.replace("torch.ones(T_max, T_max)", "torch.ones(T_max, T_max, device=device)"),
    "lambda": "softmax_rows = lambda s: F.softmax(s, dim=-1)\n" + SOL.replace("F.softmax(scores, dim=-1)",
                                                                             "softmax_rows(scores)"),
    "tuple": "NEG, EPS = float('-inf'), 1e-9\n" + SOL.replace("float('-inf'))", "NEG)").replace(
        "A = F.softmax(scores, dim=-1)", "A = F.softmax(scores, dim=-1) + 0 * EPS"),
}
# a notebook whose module level reads a file and trains: none of it runs, and the head needs none of it
TRAINS = ("opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)\n"
          "text = open('no_such_file.txt').read()\n"
          "for step in range(10**9):\n    loss = torch.zeros(1, requires_grad=True).sum()\n"
          "    loss.backward()\n    opt.step()\n")


def full_marks(result):
    cfg = config.load("causal_head")
    return result["score"] == cfg.max_score and all(c["passed"] for c in result["checks"])


def nb(*sources):
    return new_notebook(cells=[new_markdown_cell("# intro")] + [new_code_cell(s) for s in sources])


@pytest.mark.parametrize("kind", sorted(HONEST))
def test_honest_module_level_keeps_every_point(tmp_path, kind):
    """Through `attnkit grade`'s route (a notebook file): every check passes. Before, the judge kept definitions
    and literal constants only: NameError on every check (device 0/20, lambda 1/20, tuple 0/20)."""
    result = grade(write(submission("causal_head", {"head": HONEST[kind]}), tmp_path / "a.ipynb"), "causal_head")
    assert full_marks(result), [(c["id"], c["message"]) for c in result["checks"] if not c["passed"]]


def test_nbgrader_autograde_gives_the_honest_notebooks_every_point(tmp_path, released_course):
    """The same notebooks handed in and graded by `nbgrader autograde` (tests/test_nbgrader_path.py): every grade
    cell records its full points in the real gradebook."""
    from nbgrader.api import Gradebook
    course = copy_course(released_course, tmp_path / "course")
    for student, head in HONEST.items():
        dest = course / "submitted" / student / "causal_head"
        dest.mkdir(parents=True)
        nbformat.write(submission("causal_head", {"head": head}), str(dest / "causal_head.ipynb"))
        (dest / "corpus.py").write_text(STUDENT_HELPER)       # as tests/test_nbgrader_path.py hands it in
    nbgrader("autograde", "causal_head", cwd=course)
    cfg = config.load("causal_head")
    cells = cfg.by_cell()
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student in HONEST:
            nb = gb.find_submission_notebook("causal_head", "causal_head", student)
            recorded = {cells[g.name].id: g.auto_score for g in nb.grades if g.name in cells}
            assert recorded == {c.id: c.points for c in cfg.checks}, student


def test_training_and_file_reading_never_run_and_cost_nothing(tmp_path):
    head = HONEST["device"] + "\n" + TRAINS
    result = grade(write(submission("causal_head", {"head": head}), tmp_path / "a.ipynb"), "causal_head")
    assert full_marks(result), [(c["id"], c["message"]) for c in result["checks"] if not c["passed"]]
    code = extract(submission("causal_head", {"head": head}), "Head")
    assert "open(" not in code.source and "backward" not in code.source and "SGD" not in code.source


def test_reading_the_notebooks_T_loses_the_checks_that_measure_it_and_says_so():
    """The release notebook binds `d, dh, T, B = 32, 16, 8, 4` below the class: a head that reads that `T` (or
    `dh`) where it should read its own T_max (d_head) is judged as it runs, with a sentence saying what it read."""
    for name, head in (("T", SOL.replace("torch.ones(T_max, T_max)", "torch.ones(T, T)")),
                       ("dh", SOL.replace("nn.Linear(d, d_head, bias=False)", "nn.Linear(d, dh, bias=False)"))):
        result = grade(submission("causal_head", {"head": head}), "causal_head")
        failed = [c for c in result["checks"] if not c["passed"]]
        assert failed and result["score"] < config.load("causal_head").max_score, name
        for c in failed:
            assert "NameError" not in c["message"], c["message"]
            assert f"`Head` reads the notebook's module-level `{name}`, bound in cell" in c["message"], c["message"]
            assert "`d, dh, T, B = 32, 16, 8, 4`" in c["message"]


def test_a_needed_name_bound_by_a_statement_that_never_runs_is_named():
    head = "vocab = sorted(set(open('input.txt').read()))\n" + SOL.replace(
        "self.causal = causal", "self.causal = causal\n        self.n = len(vocab)")
    result = grade(nb("import torch, torch.nn as nn, torch.nn.functional as F", head), "causal_head")
    assert result["score"] == 0
    for c in result["checks"]:
        assert c["message"].startswith("`Head` reads `vocab`, which cell 3, line 1 (`vocab = sorted(set(open(")
        assert "binds by opening a file; the grader does not run that statement" in c["message"]
        assert "text cells included" in c["message"] and "NameError" not in c["message"]
    # that one sentence stopped every check: it is the diagnosis (blind corpus m25, m31: "no known pattern" before)
    assert {c["diagnosis_id"] for c in result["checks"]} == {"raised_NameError"}, result["checks"]
    assert all(c["diagnosis"].startswith("Every check you lost stopped on the same error") and
               "binds by opening a file; the grader does not run that statement" in c["diagnosis"]
               for c in result["checks"])


def test_a_needed_statement_that_fails_is_named_with_its_error():
    head = "SCALE = torch.tensor([1.0]).item() / torch.zeros(0).sum().item()\n" + SOL.replace(
        "/ k.shape[-1]**0.5", "/ k.shape[-1]**0.5 * SCALE")
    result = grade(nb("import torch, torch.nn as nn, torch.nn.functional as F", head), "causal_head")
    messages = {c["message"] for c in result["checks"] if not c["passed"]}
    assert messages and all(m.startswith("`Head` reads `SCALE`, which cell 3, line 1 (`SCALE = torch.tensor(")
                            and "the grader ran that statement and it raised ZeroDivisionError" in m
                            for m in messages), messages


# ---- the rule, statement by statement (no child needed)

def sliced(*sources, target="Head"):
    return extract(nb(*sources), target)


def test_assignments_of_every_form_run_in_notebook_order():
    code = sliced("import torch, functools\nimport torch.nn.functional as F\ntorch.manual_seed(1)\n",
                  "d, (dh, T) = 32, (16, 8)\nNEG: float = float('-inf')\nSCALE = dh ** -0.5\nSCALE *= 1.0\n"
                  "dev = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
                  "sm = functools.partial(F.softmax, dim=-1)\nM = torch.ones(T, T).tril()\nM[0, 0] = 1\n"
                  "unused = torch.randn(3)\nplot = F.relu(torch.randn(2))\n",
                  "class Head:\n    def f(self, s):\n        return sm(s * SCALE).masked_fill(M == 0, NEG).to(dev)\n")
    lines = code.source.splitlines()
    for stmt in ("torch.manual_seed(1)", "d, (dh, T) = 32, (16, 8)", "NEG: float = float('-inf')",
                 "SCALE = dh ** -0.5", "SCALE *= 1.0", "sm = functools.partial(F.softmax, dim=-1)",
                 "M = torch.ones(T, T).tril()", "M[0, 0] = 1"):
        assert stmt in lines, stmt
    assert lines.index("SCALE *= 1.0") < lines.index("M[0, 0] = 1") < lines.index("class Head:")
    assert "unused = torch.randn(3)" not in lines and "plot = F.relu(torch.randn(2))" not in lines
    assert {r[0] for r in code.module_reads} == {"M", "NEG", "SCALE", "dev"}      # `sm` is a function
    assert all(r[4] == "" for r in code.module_reads)


@pytest.mark.parametrize("binding, why", [
    ("for i in range(3):\n    X = i", "in a loop"),
    ("with open('f') as f:\n    X = f.read()", "inside a `with` block"),
    ("X = open('f').read()", "by opening a file"),
    ("X = torch.load('w.pt')", "by reading or writing a file"),
    ("import numpy as np\nX = np.loadtxt('w.txt')", "by reading or writing a file"),
    ("import pathlib\nX = pathlib.Path('f').read_text()", "(files, the network or the system)"),
    ("import urllib.request\nX = urllib.request.urlopen('http://x').read()", "(files, the network or the system)"),
    ("import matplotlib.pyplot as plt\nX = plt.figure()", "by plotting or displaying"),
    ("def train():\n    return 1\nX = train()", "by calling your own `train`"),
    ("X = Other(3)\nclass Other:\n    pass", "by calling your own `Other`"),
    ("W = torch.zeros(2, requires_grad=True)\nX = W.sum()\nX.backward()", "by training"),
    ("X = torch.compile(torch.nn.Linear(2, 2))", "with `compile`"),
    ("from corpus import load_text\nX = len(load_text())", "from a module the grader does not call"),
    ("text = open('f').read()\nX = len(text)", "from `text`, which cell 2, line"),
])
def test_what_never_runs_is_named_with_why(binding, why):
    code = sliced("import torch\n" + binding, "class Head:\n    def f(self):\n        return X\n")
    (read,) = [r for r in code.module_reads if r[0] == "X"]
    assert why in read[4], read
    assert not any(line.startswith("X =") for line in code.source.splitlines())


def test_a_constant_whose_last_binding_never_runs_is_not_run_stale():
    code = sliced("T = 8\n", "T = len(open('f').read())\n", "class Head:\n    def f(self):\n        return T\n")
    assert "T = 8" not in code.source
    assert code.module_reads[0][:3] == ["T", 3, 1] and "by opening a file" in code.module_reads[0][4]


def test_names_the_class_binds_itself_are_not_the_modules():
    """A local, an argument, a comprehension variable that shares a module-level name is the class's own."""
    code = sliced("T = 8\nk = 3\n", "class Head:\n    def f(self, T_max):\n        T = T_max\n"
                  "        return [k for k in range(T)]\n")
    assert code.module_reads == []


def test_without_a_target_only_definitions_and_constants():
    code = extract(nb("import torch\ndevice = torch.device('cpu')\n", "class Head:\n    d = device\n"))
    assert "device = torch.device('cpu')" not in code.source and code.module_reads == []


def test_an_expression_as_deep_as_the_parser_takes_is_read_without_recursion():
    """The slice reads every statement's names: a long sum the parser accepts must not run the judge out of
    Python's stack (a recursive visitor did at 600 terms, refusing an honest notebook as too deeply nested)."""
    code = sliced("import torch\nN = " + "+".join(["1"] * 2000) + "\n", "class Head:\n    def f(self):\n        return N\n")
    assert code.source.count("+1") == 1999 and code.module_reads[0][:2] == ["N", 2]


def test_a_slow_module_level_statement_is_stopped_and_named(monkeypatch):
    """Each statement of the slice has its own time (Limits.seconds_per_statement); one that takes longer is
    named, and the statements after it still run."""
    from attnkit.isolation import sandbox
    head = ("import time\nSLOW = sum(i for i in range(10**10))\nNEG = float('-inf')\n"
            + SOL.replace("/ k.shape[-1]**0.5", "/ k.shape[-1]**0.5 + 0 * SLOW").replace(
                "self.causal = causal", "self.causal = causal\n        self.neg = NEG"))   # read first, in __init__
    limits = sandbox.Limits(**{**config.load("causal_head").limits.__dict__, "seconds_per_statement": 1.0})
    result = grade(nb("import torch, torch.nn as nn, torch.nn.functional as F", head), "causal_head", limits)
    failed = [c for c in result["checks"] if not c["passed"]]
    assert failed and all(c["message"].startswith("`Head` reads `SLOW`, which cell 3, line 2 (`SLOW = sum(")
                          and "it took longer than 1 s (the limit per statement)" in c["message"] for c in failed)
    assert "`NEG`, which" not in " ".join(c["message"] for c in failed)    # the statement after it ran


def test_a_helpers_result_shown_after_its_definition_does_not_rebind_it():
    """Blind set 10's c07, a correct notebook, lost every point: its helper cell ends by showing the helper's result
    (`build_mask(ids, 0).int()`), which the slice took for a change to `build_mask` in place, its last binding, and
    a call of the student's own function never runs. A method of a call's fresh result changes no name; a method of
    a view (`W.view(-1).zero_()`) still changes its root."""
    code = sliced("import torch\ndef helper(n):\n    return torch.ones(n)\n\nhelper(3).int()\n",
                  "class Head:\n    def f(self):\n        return helper(2)\n")
    assert code.module_reads == [] and "def helper" in code.source
    code = sliced("import torch\nW = torch.ones(3)\nW.view(-1).zero_()\n",
                  "class Head:\n    def f(self):\n        return W\n")
    assert "W.view(-1).zero_()" in code.source


def test_a_later_cell_may_wrap_its_own_classs_constructor():
    """Blind set 12's c09, a correct notebook, lost every point: a later cell wrapped the class's __init__ to add a
    dropout (`_old = Cls.__init__`; `Cls.__init__ = new`), which the slice refused as a private attribute, so the
    class itself went unbound (and its m10 added a helper method `Cls._attend = _attend`). Those run now, after a
    patch of forward too; Python's own dunders, or __init__ of a value that is not the notebook's class, never run."""
    patch = ("def _helper(self):\n    return 1\nHead._helper = _helper\n"
             "Head.forward = Head.forward\n_old_init = Head.__init__\n"
             "def _init_more(self, *a, **k):\n    _old_init(self, *a, **k)\n    self.extra = 1\n"
             "Head.__init__ = _init_more\n")
    code = sliced("import torch\n", "class Head:\n    def __init__(self):\n        self.x = 0\n"
                  "    def forward(self):\n        return self.x\n", patch)
    lines = code.source.splitlines()
    assert all(r[4] == "" for r in code.module_reads), code.module_reads                 # every needed read runs
    for statement in ("Head._helper = _helper", "_old_init = Head.__init__", "Head.__init__ = _init_more"):
        assert statement in lines, statement
    for statement, why in (("_old_init = Head.__class__", "by reaching a private attribute"),
                           ("_old_init = torch.Tensor.__init__", "by reaching a private attribute")):
        code = sliced("import torch\n", "class Head:\n    def __init__(self):\n        self.x = 0\n",
                      statement + "\ndef _init_more(self):\n    _old_init(self)\nHead.__init__ = _init_more\n")
        assert any(why in r[4] for r in code.module_reads), (statement, code.module_reads)
