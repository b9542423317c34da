"""`attnkit export A --format gradescope`: the zip, and its run_autograder run on an /autograder-shaped tree.

The unpacked zip, not the repository, is the kit that grades here (run_autograder puts its source/ first
on the path and says so on stdout); the interpreter is this venv's (setup.sh, which needs the network,
is checked statically).
"""
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import nbformat
import pytest

from tests import KIT_ROOT
from attnkit.gradescope import _child_user_missing, failure_json, results_json
from attnkit.engine import config, secret
from attnkit.mutants import module as corpus
from tests.notebooks import solution_source, submission

A = "causal_head"
CFG = config.load(A)
FORBIDDEN = re.compile(r"(\.ipynb|\.pyc|\.db|\.txt|\.csv|\.html|\.pct\.py)$|(^|/)(__pycache__|\.venv|submitted|"
                       r"autograded|feedback|release|solutions|data|tests|bench|demo_course|\.attnkit)/")
VISIBILITIES = {"visible", "hidden", "after_due_date", "after_published"}


def export_zip(assignment, out: Path) -> Path:
    p = subprocess.run([sys.executable, "-m", "attnkit", "export", assignment, "--format", "gradescope",
                        "--output", str(out)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == str(out), p.stderr
    return out


@pytest.fixture(scope="module")
def zips(tmp_path_factory):
    d = tmp_path_factory.mktemp("zips")
    return {a: export_zip(a, d / f"{a}.zip") for a in ("causal_head", "attention_lm")}


def unpack(zip_path: Path, tmp: Path) -> Path:
    """What Gradescope builds: /autograder/{source (the zip, modes kept), submission, results}."""
    root = tmp / "autograder"
    for d in ("source", "submission", "results"):
        (root / d).mkdir(parents=True)
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(root / "source")
        for info in zf.infolist():
            os.chmod(root / "source" / info.filename, (info.external_attr >> 16) & 0o777)
    return root


def run_autograder(root: Path, **env) -> subprocess.Popen:
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "ATTNKIT_PYTHON": sys.executable,
           "ATTNKIT_CHILD_USER": "nobody", **env}
    env.pop("PYTHONPATH", None)
    return subprocess.Popen([str(root / "source" / "run_autograder")], cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def attnkit_grade(nb: Path, assignment: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "attnkit", "grade", str(nb), "--assignment", assignment, "--json"],
                            cwd=KIT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def submit(root: Path, nb, name: str) -> Path:
    """``nb`` as the student's submission, and a copy outside the tree for the reference grading."""
    nbformat.write(nb, root / "submission" / name)
    ref_path = root.parent / "reference" / name
    ref_path.parent.mkdir(exist_ok=True)
    nbformat.write(nb, ref_path)
    return ref_path


def grade_both(root: Path, ref_path: Path, assignment=A):
    """run_autograder on the submission and, meanwhile, `attnkit grade --json` of the repository on its copy."""
    run, ref = run_autograder(root), attnkit_grade(ref_path, assignment)
    stdout = run.communicate(timeout=180)[0]
    ref_out, ref_err = ref.communicate(timeout=180)
    assert run.returncode == 0, stdout[-3000:]
    assert ref.returncode == 0, ref_err[-3000:]
    assert f"attnkit kit: {root / 'source'}" in stdout          # the unpacked kit graded, not the repository's
    return json.loads((root / "results" / "results.json").read_text()), json.loads(ref_out), stdout


def check_schema(res: dict) -> None:
    assert isinstance(res["score"], float) and isinstance(res["output"], str)
    assert res["visibility"] == "visible" and res["stdout_visibility"] == "hidden"
    for t in res["tests"]:
        assert set(t) == {"name", "score", "max_score", "output", "visibility", "status"}
        assert isinstance(t["name"], str) and isinstance(t["output"], str)
        assert isinstance(t["score"], float) and isinstance(t["max_score"], float)
        assert t["visibility"] in VISIBILITIES and t["status"] in {"passed", "failed"}
    assert res["score"] == sum(t["score"] for t in res["tests"])


def agrees(res: dict, ref: dict, cfg=CFG) -> None:
    """Gradescope's tests are the judge's checks: same order, titles, points; hidden ones after the due date."""
    check_schema(res)
    assert [(t["name"], t["score"], t["max_score"]) for t in res["tests"]] == \
           [(c["title"], c["points"], c["max_points"]) for c in ref["checks"]]
    assert res["score"] == ref["score"]
    assert [t["visibility"] for t in res["tests"]] == ["visible" if c.visible else "after_due_date" for c in cfg.checks]
    for t, c in zip(res["tests"], ref["checks"]):
        assert t["status"] == ("passed" if c["passed"] else "failed")
        assert t["output"].startswith(c["message"])
        if not c["passed"]:
            assert c["diagnosis"] and c["diagnosis"] in t["output"]


def tree_digest(root: Path) -> dict:
    """Every file and directory under root: mode and content hash (results.json itself: only its presence)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", os.readlink(p))
        elif p.is_dir():
            out[rel] = ("dir", stat.S_IMODE(st.st_mode), st.st_uid)
        else:
            content = b"" if rel == "results/results.json" else p.read_bytes()
            out[rel] = ("file", stat.S_IMODE(st.st_mode), st.st_uid, hashlib.sha256(content).hexdigest())
    return out


# ------------------------------------------------------------------------------------------ the zip

def test_zip_holds_the_kit_only_and_is_deterministic(zips, tmp_path):
    assert export_zip(A, tmp_path / "again.zip").read_bytes() == zips[A].read_bytes()
    for assignment, path in zips.items():
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
        names = [i.filename for i in infos]
        assert names == sorted(names) and len(set(names)) == len(names)
        assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in infos)
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in infos}
        assert modes["setup.sh"] == modes["run_autograder"] == 0o755      # at the root, executable
        assert modes[".attnkit/grading-key"] == 0o600                        # a secret: its owner's alone
        assert {m for n, m in modes.items() if n not in ("setup.sh", "run_autograder", ".attnkit/grading-key")} \
            == {0o644}
        for required in ("attnkit/engine/judge.py", f"autograder/{assignment}/plan.py", f"autograder/{assignment}/manifest.toml",
                         "attnkit/gradescope.py", "attnkit/isolation/child_runtime.py", "attnkit/toolkit/plugin.py",
                         "pyproject.toml", "requirements.lock"):
            assert required in names, (assignment, required)
        assert [n for n in names if FORBIDDEN.search(n) and n not in (".attnkit/grading-key", "requirements-grading.txt")] \
            == [], assignment
        with zipfile.ZipFile(path) as zf:      # the course's own key: the same secret inputs on both paths
            assert zf.read(".attnkit/grading-key").decode().strip() == secret.key_hex()
        assert not [n for n in names if n.startswith("autograder/") and assignment not in n]
        assert not [n for n in names if n.startswith("attnkit/") and n.split("/")[1] in ("autograde", "templates")]
        with zipfile.ZipFile(path) as zf:
            assert zf.read("requirements.lock") == (KIT_ROOT / "requirements.lock").read_bytes()
            assert zf.read("attnkit/engine/judge.py") == (KIT_ROOT / "attnkit" / "engine" / "judge.py").read_bytes()
            assert f'"{assignment}"' in zf.read("run_autograder").decode()
    with zipfile.ZipFile(zips["attention_lm"]) as zf:     # the released helper the LM judge hands to the child
        assert "autograder/attention_lm/source/wordlm.py" in zf.namelist()
        assert "autograder/attention_lm/mutants.py" not in zf.namelist()     # the kit's tests, not grading's
    with zipfile.ZipFile(zips[A]) as zf:
        assert not [n for n in zf.namelist() if n.endswith("wordlm.py") or n.startswith("source/")]


def test_setup_installs_the_grading_pins_with_cpu_torch_and_the_child_user(zips, tmp_path):
    with zipfile.ZipFile(zips[A]) as zf:
        setup, conf, run, lock, reqs = (zf.read(n).decode() for n in (
            "setup.sh", "setup.conf", "run_autograder", "requirements.lock", "requirements-grading.txt"))
    pins = [l for l in lock.splitlines() if l.strip() and not l.startswith("#")]
    marker = r'python_(full_)?version [<>]=? "[0-9.]+"'
    pin = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][0-9A-Za-z.+!-]*(; {marker}( and {marker})*)?")
    assert pins and all(pin.fullmatch(p) for p in pins), [p for p in pins if not pin.fullmatch(p)]
    # what grading imports, pinned as the lock pins it (markers and all), and not the instructor's stack
    grading = [l for l in reqs.splitlines() if l and not l.startswith("#")]
    assert set(grading) <= set(pins) and grading[0].startswith("torch==")
    names = {re.split(r"[=;]", l)[0].lower() for l in grading}
    assert {"torch", "numpy", "matplotlib", "nbformat", "jsonschema", "tomli", "sympy"} <= names
    assert not names & {"jupyterlab", "nbgrader", "pytest", "notebook", "ipykernel", "nbconvert", "jupytext"}
    assert [l for l in pins if re.split(r"[=;]", l)[0].lower() in names] == grading      # every line of those
    lines = [l.strip() for l in setup.splitlines() if l.strip() and not l.strip().startswith("#")]
    assert 'ATTNKIT_TORCH_INDEX="${ATTNKIT_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"' in conf
    assert 'ATTNKIT_WHEELS="${ATTNKIT_WHEELS:-}"' in conf and '. "$SRC/setup.conf"' in setup
    index_install = next(l for l in lines if '"$TORCH_PIN"' in l and "--index-url" in l)
    assert '--no-deps --index-url "$ATTNKIT_TORCH_INDEX"' in index_install and "--extra-index-url" not in index_install
    wheel_install = next(l for l in lines if '"$TORCH_PIN"' in l and "--find-links" in l)
    assert '--no-deps --no-index --find-links "$ATTNKIT_WHEELS"' in wheel_install
    assert "TORCH_PIN=\"$(grep -E '^torch==' \"$REQS\")\"" in lines and 'REQS="$SRC/requirements-grading.txt"' in lines
    # the rest with the whole lock as constraints (what a pin needs on this Python only comes at its pin)
    assert '"${PIP[@]}" -c "$SRC/requirements.lock" -r "$REQS"' in lines
    assert 'PIP=("$VENV/bin/pip" install --no-cache-dir --progress-bar off)' in lines
    assert "not pinned by requirements.lock for this Python" in setup and "--upgrade" not in setup
    assert any(l.startswith('"$VENV/bin/pip" check') for l in lines)
    assert "torch.version.cuda is None" in setup
    assert 'python3 -m venv "$VENV"' in lines and 'VENV="$ROOT/venv"' in lines
    user = re.search(r"^CHILD_USER=(\w+)$", setup, re.M).group(1)
    assert 'useradd --system' in setup and f'ATTNKIT_CHILD_USER="${{ATTNKIT_CHILD_USER-{user}}}"' in run
    assert 'chmod -R a+rX,go-w "$VENV"' in lines and 'chmod -R go-rwx "$SRC"' in lines
    for script in ("setup.sh", "run_autograder"):
        (tmp_path / script).write_text({"setup.sh": setup, "run_autograder": run}[script])
        p = subprocess.run(["bash", "-n", str(tmp_path / script)], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr


FAKE_PYTHON = """#!/bin/sh
# python3 as an image might have it: answers setup.sh's probes, installs nothing
case "$*" in
    *implementation*) echo "{impl} {major} {minor}" ;;
    *) exit 0 ;;
esac
"""


@pytest.mark.parametrize("impl, version, ok", [("cpython", "3.9", False), ("cpython", "3.13", False),
                                               ("pypy", "3.10", False), ("cpython", "3.10", True)])
def test_setup_refuses_a_python_the_lock_does_not_support(zips, tmp_path, impl, version, ok):
    root = unpack(zips[A], tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    major, minor = version.split(".")
    (bin_dir / "python3").write_text(FAKE_PYTHON.format(impl=impl, major=major, minor=minor))
    (bin_dir / "python3").chmod(0o755)
    # nothing else on PATH (no apt-get, no real Python): whatever the script, it can install nothing here
    (bin_dir / "grep").symlink_to(shutil.which("grep"))
    p = subprocess.run([shutil.which("bash"), str(root / "source" / "setup.sh")], capture_output=True, text=True,
                       timeout=60, env={"PATH": str(bin_dir), "AUTOGRADER_ROOT": str(root)})
    refused = f"this image's python3 is {impl} {version}; the kit needs CPython >= 3.10 and < 3.13"
    assert p.returncode != 0 and (refused in p.stderr) != ok, p.stderr
    # an accepted one goes on to its venv (which this fake cannot make); a refused one stops before it
    assert (f"{root}/venv/bin/pip" in p.stderr) == ok, p.stderr


# ------------------------------------------------------------------------------------------ results.json

def test_results_json_is_the_judges_result_in_gradescopes_words():
    ids = [c.id for c in CFG.checks]
    failed = {"scaling", "simplex_rows"}
    result = {"assignment": A, "score": 0.0, "max_score": CFG.max_score, "error": None, "checks": [
        {"id": c.id, "title": c.title, "passed": c.id not in failed, "points": 0.0 if c.id in failed else c.points,
         "max_points": c.points, "message": f"{c.id} broke" if c.id in failed else "passed",
         "diagnosis": "No 1/sqrt(d_k) scaling." if c.id in failed else None} for c in CFG.checks]}
    res = results_json(result, CFG)
    check_schema(res)
    assert res["score"] == CFG.max_score - 3
    by_name = {t["name"]: t for t in res["tests"]}
    for c in CFG.checks:
        t = by_name[c.title]
        assert t["visibility"] == ("visible" if c.visible else "after_due_date")
        assert t["max_score"] == c.points
        if c.id in failed:
            assert t["status"] == "failed" and t["score"] == 0
            assert t["output"] == f"{c.id} broke\nDiagnosis: No 1/sqrt(d_k) scaling."
        else:
            assert t["status"] == "passed" and t["output"] == "passed" and t["score"] == c.points
    visible_max = sum(c.points for c in CFG.checks if c.visible)
    assert f"Visible checks: {visible_max - 1:g} / {visible_max:g} points." in res["output"]
    assert f"Hidden checks ({CFG.max_score - visible_max:g} points)" in res["output"]
    # the judge's error reaches the student; a check the configuration does not know is hidden, not shown
    odd = dict(result, error="class `Head` not found in your notebook",
               checks=result["checks"] + [dict(result["checks"][0], id="new_check", title="New")])
    res = results_json(odd, CFG)
    assert res["output"].startswith("Your notebook could not be graded completely: class `Head` not found")
    assert res["tests"][-1]["visibility"] == "after_due_date" and len(res["tests"]) == len(ids) + 1
    assert failure_json("no notebook") == {"score": 0.0, "output": "no notebook", "visibility": "visible",
                                           "stdout_visibility": "hidden", "tests": []}


def test_grading_as_root_needs_the_child_user(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("ATTNKIT_CHILD_USER", "attnkit-no-such-user")
    assert "does not exist" in _child_user_missing()
    monkeypatch.setenv("ATTNKIT_CHILD_USER", "nobody")
    assert _child_user_missing() is None
    monkeypatch.setattr(os, "geteuid", lambda: 1000)                # not root: nothing to drop from
    monkeypatch.setenv("ATTNKIT_CHILD_USER", "attnkit-no-such-user")
    assert _child_user_missing() is None


# ------------------------------------------------------------------------------------------ run_autograder

@pytest.mark.parametrize("case", ["solution", "mistake:mask_after_softmax"])
def test_run_autograder_scores_as_attnkit_grade(zips, tmp_path, case):
    root = unpack(zips[A], tmp_path)
    if case == "solution":
        nb = nbformat.read(KIT_ROOT / "solutions" / A / f"{A}.ipynb", as_version=4)
    else:
        nb = submission(A, {"head": corpus(A).mutate(solution_source(A, "head"), case.split(":")[1])})
    res, ref, stdout = grade_both(root, submit(root, nb, f"{A}.ipynb"))
    agrees(res, ref)
    assert (res["score"] == 20) == (case == "solution")
    if case != "solution":
        assert "Mask applied after the softmax" in "".join(t["output"] for t in res["tests"] if t["status"] == "failed")
    assert sorted(p.name for p in (root / "results").iterdir()) == ["results.json"]    # no temporary file left
    assert stat.S_IMODE((root / "results").stat().st_mode) == 0o755
    assert stat.S_IMODE((root / "results" / "results.json").stat().st_mode) == 0o644
    assert not list((root / "source").rglob("__pycache__"))          # grading wrote nothing into the kit


def test_attention_lm_on_the_same_path(zips, tmp_path):
    root = unpack(zips["attention_lm"], tmp_path)
    c = corpus("attention_lm")
    nb = submission("attention_lm", {c.SOLUTION_CELL: c.mutate(solution_source("attention_lm", c.SOLUTION_CELL),
                                                                 "no_padding_mask")})
    res, ref, _ = grade_both(root, submit(root, nb, "attention_lm.ipynb"), "attention_lm")
    agrees(res, ref, config.load("attention_lm"))
    assert 0 < res["score"] < 22


HOSTILE = """import os, json, time
R = {root!r}
def _try(f):
    try:
        f()
    except BaseException:
        pass
_try(lambda: open(R + "/results/results.json", "w").write(json.dumps({{"score": 999.0, "tests": []}})))
_try(lambda: open(R + "/results/extra.json", "w").write("{{}}"))
_try(lambda: os.symlink("/tmp", R + "/results/link"))
_try(lambda: open(R + "/source/attnkit/engine/judge.py", "a").write("\\nHACKED = 1\\n"))
_try(lambda: open(R + "/source/autograder/causal_head/manifest.toml", "w").write(""))
_try(lambda: open(R + "/source/attnkit/gradescope.py", "w").write("raise SystemExit(0)\\n"))
_try(lambda: os.chmod(R + "/source/run_autograder", 0o777))
_try(lambda: os.remove(R + "/source/setup.sh"))
_try(lambda: os.chmod(R + "/results", 0o777))
_try(lambda: open(R + "/submission/hostile.ipynb", "w").write("{{}}"))
_try(lambda: open(R + "/submission/causal_head.ipynb", "w").write("{{}}"))
if not os.path.exists("forked"):          # once: a process that would outlive grading and write afterwards
    open("forked", "w").close()
    if os.fork() == 0:
        os.setsid()
        time.sleep(3)
        _try(lambda: open(R + "/results/results.json", "w").write(json.dumps({{"score": 999.0, "tests": []}})))
        os._exit(0)"""


def test_a_hostile_submission_changes_nothing(zips, tmp_path):
    root = tmp_path / "autograder"
    sol = solution_source(A, "head")
    init = "        super().__init__()\n"
    hostile = sol.replace(init, init + "".join(f"        {l}\n" for l in HOSTILE.format(root=str(root)).splitlines()))
    assert hostile != sol
    nb = submission(A, {"head": hostile})
    # the reference verdict first, before the tree exists (and after its would-be survivor has given up),
    # so that whatever the tree suffers below is run_autograder's doing alone
    ref_path = tmp_path / "reference" / f"{A}.ipynb"
    ref_path.parent.mkdir()
    nbformat.write(nb, ref_path)
    ref_run = attnkit_grade(ref_path, A)
    ref = json.loads(ref_run.communicate(timeout=180)[0])
    time.sleep(4)
    root = unpack(zips[A], tmp_path)
    nbformat.write(nb, root / "submission" / f"{A}.ipynb")
    before = tree_digest(root)
    run = run_autograder(root)
    stdout = run.communicate(timeout=180)[0]
    assert run.returncode == 0, stdout[-3000:]
    time.sleep(4)                                        # longer than the would-be survivor sleeps
    after = tree_digest(root)
    res = json.loads((root / "results" / "results.json").read_text())
    assert res.get("score") != 999.0, "the submission wrote results.json"
    assert set(after) - set(before) == {"results/results.json"}
    assert after == dict(before, **{"results/results.json": after["results/results.json"]})
    agrees(res, ref)                                     # the grader's own verdict: the same as attnkit grade


@pytest.mark.parametrize("files", [[], ["a.ipynb", "sub/b.ipynb"]])
def test_no_notebook_or_several_score_zero_with_a_sentence(zips, tmp_path, files):
    root = unpack(zips[A], tmp_path)
    for f in files:
        (root / "submission" / f).parent.mkdir(parents=True, exist_ok=True)
        (root / "submission" / f).write_text("{}")
    (root / "submission" / ".ipynb_checkpoints").mkdir()                     # never counted
    (root / "submission" / ".ipynb_checkpoints" / "x-checkpoint.ipynb").write_text("{}")
    (root / "submission" / "kit.ipynb").symlink_to(root / "source" / "attnkit" / "engine" / "judge.py")   # nor a link
    run = run_autograder(root)
    out = run.communicate(timeout=60)[0]
    assert run.returncode == 0, out
    res = json.loads((root / "results" / "results.json").read_text())
    check_schema(res)
    assert res["score"] == 0.0 and res["tests"] == []
    if files:
        assert "2 notebooks (a.ipynb, sub/b.ipynb)" in res["output"] and "exactly one" in res["output"]
    else:
        assert "No Jupyter notebook (.ipynb)" in res["output"]


def test_an_installed_kit_builds_the_zip_from_its_environment(tmp_path, monkeypatch):
    # an installed kit has no requirements.lock or pyproject.toml beside its package (pip installs the package
    # alone): the zip then pins what this environment runs, for this Python, and names no file it lacks
    from attnkit import gradescope_zip
    installed = tmp_path / "site-packages"
    shutil.copytree(KIT_ROOT / "attnkit", installed / "attnkit", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(gradescope_zip, "KIT_SOURCE", installed)
    path = gradescope_zip.build_zip(A, tmp_path / "gs.zip")
    with zipfile.ZipFile(path) as zf:
        names, lock = zf.namelist(), zf.read("requirements.lock").decode()
        grading, setup = zf.read("requirements-grading.txt").decode(), zf.read("setup.sh").decode()
    from importlib import metadata
    assert "pyproject.toml" not in names and "attnkit/engine/judge.py" in names
    assert f"torch=={metadata.version('torch')}" in lock.splitlines() and "attnkit==" not in lock
    assert f"numpy=={metadata.version('numpy')}" in grading.splitlines()
    minor = sys.version_info[1]
    assert f"3.{minor}" in setup and f"3.{minor + 1}" in setup       # the bounds setup.sh checks: this Python's
