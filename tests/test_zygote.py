"""The warm fork server: same verdicts as a fresh interpreter, nothing carried from one submission to
the next, and a dead zygote replaced without losing a grade."""
import os
import signal

import pytest

from attnkit.engine import judge
from attnkit.isolation import sandbox, zygote
from attnkit.engine.judge import grade
from attnkit.mutants import submissions
from tests.test_hostile import CASES, LIMITS, PATCHES, SOL, head, in_class_body

A = "causal_head"
SUBS = submissions(A)
SAMPLE = ["solution", "release", "mistake:mask_after_softmax", "mistake:no_scale", "mistake:running_mean",
          "alternative:" + sorted(n for n in SUBS if n.startswith("alternative:"))[0].split(":", 1)[1]]


def _verdicts(result):
    return result["score"], result["error"], [(c["id"], c["points"], c["message"], c["diagnosis"])
                                              for c in result["checks"]]


def _zygote_pids():
    """The live fork servers of Head's children (other tests may have started the LM's too)."""
    import hashlib

    key = hashlib.sha256(sandbox.zygote_program(judge.child_program("causal_head")).encode()).hexdigest()
    z = zygote._zygotes.get(key)
    return {z.proc.pid} if z is not None and z.alive() else set()


@pytest.mark.parametrize("name", SAMPLE + ["hostile:privilege_escape", "hostile:os_exit_forward"])
def test_warm_and_fresh_children_give_the_same_verdicts(name, monkeypatch):
    nb = CASES[name.split(":")[1]] if name.startswith("hostile:") else SUBS[name]
    warm = grade(nb, A, LIMITS)
    assert _zygote_pids(), "the warm path did not use a fork server"
    monkeypatch.setenv("ATTNKIT_ZYGOTE", "0")
    fresh = grade(nb, A, LIMITS)
    assert _verdicts(warm) == _verdicts(fresh)


def test_one_submission_leaves_nothing_for_the_next():
    """A submission that rewires torch at import and writes files: the next correct one still scores full."""
    litter = "import os\nfor d in ('/dev/shm', os.path.expanduser('~'), '/tmp'):\n" \
             "    try:\n        open(os.path.join(d, 'litter'), 'w').write('x')\n" \
             "    except OSError:\n        pass"
    rewired = head("import sys\n" + in_class_body(PATCHES + "\n" + litter + "\n"
                                                  "torch.softmax = lambda *a, **k: 0\n"
                                                  "torch.Tensor.softmax = lambda *a, **k: 0\n"
                                                  "torch.nn.functional.softmax = lambda *a, **k: 0"))
    before = _zygote_pids() or {None}
    host_files = ("/dev/shm/litter", "/tmp/litter")      # the host's: compared with what was there before
    host_before = {path: _stat(path) for path in host_files}
    assert grade(rewired, A, LIMITS)["score"] < 20
    assert grade(head(SOL), A, LIMITS)["score"] == 20
    assert _zygote_pids() == before or before == {None}, "the zygote was restarted: it must have been harmed"
    assert {path: _stat(path) for path in host_files} == host_before, "the submission wrote into the host's /tmp"


def _stat(path):
    """What identifies a file's version: None when there is none (another process may own one already)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def test_a_dead_zygote_is_replaced_and_no_grade_is_lost():
    assert grade(head(SOL), A, LIMITS)["score"] == 20
    (pid,) = _zygote_pids()
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert grade(head(SOL), A, LIMITS)["score"] == 20
    assert _zygote_pids() and pid not in _zygote_pids()


def test_children_of_the_zygote_are_confined_like_fresh_ones():
    if not sandbox.namespaces_available() and not os.environ.get("CI"):
        pytest.skip("this machine offers no unprivileged namespaces")
    result = grade(CASES["privilege_escape"], A, LIMITS)
    assert result["score"] == 20 and _zygote_pids()


def test_the_zygote_ends_with_its_grading_process(tmp_path):
    """`attnkit grade` exits: its fork server and the fork server's home directory go with it."""
    import subprocess

    from attnkit.course import BIN
    from tests.notebooks import write
    nb = write(head(SOL), tmp_path / "sub.ipynb")
    env = dict(os.environ, TMPDIR=str(tmp_path))
    out = subprocess.run([str(BIN / "attnkit"), "grade", str(nb), "--assignment", A, "--json"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and '"score": 20.0' in out.stdout, out.stderr[-2000:]
    assert not list(tmp_path.glob("attnkit-*")), "a scratch or zygote directory was left behind"
    assert not _processes_started_in(tmp_path), "the fork server outlived its grading process"


def _processes_started_in(folder) -> list[int]:
    """Processes whose working directory is (or was, before it was deleted) inside ``folder``: the
    zygote of a command run with TMPDIR=folder works in its home there. Only ours can be."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd.startswith(str(folder)):
            found.append(int(pid))
    return found
