"""The Gradescope bundle installed for real: setup.sh as root in a fresh Debian 12, then run_autograder.

A minimal Debian 12 (bookworm) root is made with debootstrap under pytest's tmp_path (nothing is cached
elsewhere); the unpacked zip goes to its /autograder/source, as on Gradescope. Every command runs
chrooted, as root, in a mount namespace of its own (``unshare --mount``) where /proc is mounted and the
local torch wheels (/opt/wheels, or ATTNKIT_WHEELS) are bound read-only: the mounts end with the
namespace's last process, so nothing stays mounted on the host whatever happens. setup.sh installs
python3 and python3-venv with apt (minbase has no Python) and the grading pins from PyPI.

Gradescope's limits are imposed with cgroups (v1) this test makes and removes itself: 768 MiB of memory
and half a CPU for setup.sh and for each run_autograder. The submissions (the solution, a corpus mistake,
and a hostile one that tries to read the grading key and to write results.json itself) get the scores
`attnkit grade --json` gives them on this machine, graded when the zip is built (other work may edit
the kit while the image builds: the references and the zip are made from the same kit). The figures (sizes, times, peak memory, and which
confinement path the judge took) are printed.

Minutes, not seconds (debootstrap, a torch wheel of 190 MB, pip from PyPI): marked ``install``, which
``make test`` leaves out (pyproject's addopts); run with ``pytest -m install tests/test_gradescope_install.py -s``.
Needs root, debootstrap, the network (Debian's mirror, PyPI) and a torch CPU wheel for CPython 3.11.
"""
import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import nbformat
import pytest

from tests import KIT_ROOT
from attnkit.mutants import module as corpus
from tests.notebooks import solution_source, submission
from tests.test_gradescope import agrees, attnkit_grade, export_zip, tree_digest, unpack

pytestmark = pytest.mark.install

A = "causal_head"
MIRROR = os.environ.get("ATTNKIT_DEBIAN_MIRROR", "http://deb.debian.org/debian")
WHEELS = Path(os.environ.get("ATTNKIT_WHEELS", "/opt/wheels"))
MEMORY_BYTES = 768 * 2 ** 20            # Gradescope's default container
CPU_QUOTA = 0.5                         # of one CPU
CGROUP_V1 = Path("/sys/fs/cgroup")
# the host's CA bundle: this machine reaches PyPI through a proxy that signs with its own CA (on
# Gradescope nothing of the kind is needed: pip's own certifi bundle is used)
HOST_CA = Path(os.environ.get("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt"))
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _need(condition: bool, why: str) -> None:
    if not condition:
        pytest.skip(why)


class Limits:
    """A memory and a CPU cgroup (v1) of our own, with Gradescope's limits; join by writing a pid to
    ``procs``. On exit, what is still in them (a survivor of a hostile submission) is killed and they go."""

    def __init__(self):
        name = f"attnkit-install-{uuid.uuid4().hex[:8]}"
        self.memory, self.cpu = CGROUP_V1 / "memory" / name, CGROUP_V1 / "cpu" / name

    def __enter__(self):
        self.memory.mkdir()
        self.cpu.mkdir()
        (self.memory / "memory.limit_in_bytes").write_text(str(MEMORY_BYTES))
        (self.cpu / "cpu.cfs_period_us").write_text("100000")
        (self.cpu / "cpu.cfs_quota_us").write_text(str(int(100000 * CPU_QUOTA)))
        return self

    def wrap(self, argv: list[str]) -> list[str]:
        """argv, started inside both cgroups (its children stay in them)."""
        join = 'echo $$ > "$1" && echo $$ > "$2" && shift 2 && exec "$@"'
        return ["sh", "-c", join, "sh", str(self.memory / "cgroup.procs"), str(self.cpu / "cgroup.procs"), *argv]

    def peak_mib(self) -> int:
        """The most the group was charged: resident memory and page cache (as a container's limit counts)."""
        return int((self.memory / "memory.max_usage_in_bytes").read_text()) // 2 ** 20

    def oom_kills(self) -> int:
        """Processes the kernel killed for the limit (reaching it and reclaiming page cache is not one)."""
        fields = dict(l.split() for l in (self.memory / "memory.oom_control").read_text().splitlines())
        return int(fields.get("oom_kill", 0))

    def __exit__(self, *exc):
        for group in (self.memory, self.cpu):
            for _ in range(50):
                pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, 9)
                    except ProcessLookupError:
                        pass
                time.sleep(0.1)
            group.rmdir()


def chrooted(root: Path, argv: list[str], env: dict, limits: Limits | None = None, timeout: float = 600):
    """argv run as root chrooted in ``root``, in a private mount namespace holding /proc and the wheels."""
    mounts = ('mount -t proc proc "$R/proc" && mount --bind -o ro "$W" "$R/opt/wheels" && '
              'exec chroot "$R" /usr/bin/env -i "$@"')
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mounts, "sh",
           *[f"{k}={v}" for k, v in env.items()], *argv]
    cmd = limits.wrap(cmd) if limits else cmd
    return subprocess.run(cmd, env={"PATH": PATH, "R": str(root), "W": str(WHEELS)}, capture_output=True,
                          text=True, timeout=timeout)


def du_bytes(path: Path) -> int:
    return int(subprocess.run(["du", "-sxb", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


ENV = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", "PIP_CERT": "/etc/attnkit-test-ca.pem",
       "PIP_DEFAULT_TIMEOUT": "180", "ATTNKIT_WHEELS": "/opt/wheels"}
FIGURES = {}


def snapshot(tmp: Path) -> tuple[Path, dict]:
    """The zip and each case's `attnkit grade --json` on the host, graded by the kit the zip was built from.
    Other work may edit the kit meanwhile: when a second build no longer gives the same bytes, again."""
    for attempt in range(3):
        built = export_zip(A, tmp / f"{A}-{attempt}.zip")
        running = {}
        for case, make in CASES.items():
            path = tmp / f"reference-{attempt}" / case.replace(":", "_") / f"{A}.ipynb"
            path.parent.mkdir(parents=True)
            nbformat.write(make(), path)
            running[case] = attnkit_grade(path, A)
        refs = {case: json.loads(run.communicate(timeout=300)[0]) for case, run in running.items()}
        if export_zip(A, tmp / f"again-{attempt}.zip").read_bytes() == built.read_bytes():
            return built, refs
    pytest.fail("the kit kept changing while the references were graded")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh Debian 12 root with the causal_head bundle unpacked in /autograder/source and setup.sh run."""
    _need(os.geteuid() == 0, "needs root (debootstrap, chroot, mounts, cgroups)")
    _need(shutil.which("debootstrap") is not None, "debootstrap is not installed (apt-get install debootstrap)")
    _need(any(WHEELS.glob("torch-*+cpu-cp311-*.whl")), f"no torch CPU wheel for CPython 3.11 in {WHEELS}")
    _need((CGROUP_V1 / "memory").is_dir() and (CGROUP_V1 / "cpu").is_dir(), "no cgroup v1 memory and cpu hierarchies")
    tmp = tmp_path_factory.mktemp("install")
    root = tmp / "root"
    t0 = time.monotonic()
    p = subprocess.run(["debootstrap", "--variant=minbase", "bookworm", str(root), MIRROR],
                       capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    FIGURES["debootstrap_s"] = round(time.monotonic() - t0, 1)
    assert not (root / "usr/bin/python3").exists()              # setup.sh must bring the image's Python itself
    shutil.copyfile(HOST_CA, root / "etc/attnkit-test-ca.pem")
    (root / "opt/wheels").mkdir(parents=True)
    base = du_bytes(root)
    zip_path, refs = snapshot(tmp)
    ag = unpack(zip_path, root)                                 # root/autograder/{source, submission, results}
    assert ag == root / "autograder"
    with Limits() as limits:
        t0 = time.monotonic()
        p = chrooted(root, ["bash", "/autograder/source/setup.sh"], ENV, limits, timeout=2400)
        FIGURES["setup_s"] = round(time.monotonic() - t0, 1)
        FIGURES["setup_peak_mib"], FIGURES["setup_oom_kills"] = limits.peak_mib(), limits.oom_kills()
    assert p.returncode == 0, p.stdout[-5000:] + p.stderr[-5000:]
    FIGURES["venv_mib"] = du_bytes(root / "autograder/venv") // 2 ** 20
    FIGURES["root_growth_mib"] = (du_bytes(root) - base) // 2 ** 20
    probe = chrooted(root, ["/autograder/venv/bin/python", "-c",
                            "import attnkit.isolation.sandbox as s, sys; print(sys.version.split()[0], s.namespaces_available())"],
                     dict(ENV, PYTHONPATH="/autograder/source"))
    assert probe.returncode == 0, probe.stderr
    FIGURES["python"], FIGURES["namespaces"] = probe.stdout.split()
    yield root, refs
    print("\nGRADESCOPE-INSTALL-FIGURES", json.dumps(FIGURES))


def test_setup_installs_only_grading_needs_on_the_images_python(installed):
    root, _ = installed
    venv = root / "autograder/venv"
    site = next((venv / "lib").glob("python3.*/site-packages"))
    dists = {d.name.split("-")[0].lower() for d in site.glob("*.dist-info")}
    assert {"torch", "numpy", "matplotlib", "nbformat"} <= dists
    assert not dists & {"jupyterlab", "nbgrader", "pytest", "notebook", "ipykernel", "nbconvert"}, dists
    assert FIGURES["python"] == "3.11.2"                            # Debian 12's own python3
    cfg = dict(l.split(" = ", 1) for l in (venv / "pyvenv.cfg").read_text().splitlines() if " = " in l)
    assert cfg["home"] == "/usr/bin" and cfg["version"] == "3.11.2", cfg      # a venv of the image's python3
    assert (root / "usr/bin/python3").exists()                     # which setup.sh installed with apt
    torch_dist = next(site.glob("torch-*.dist-info")).name
    assert "+cpu" in torch_dist, torch_dist
    assert "student" in (root / "etc/passwd").read_text()
    assert FIGURES["setup_oom_kills"] == 0                          # within 768 MiB


def _hostile() -> str:
    """The solution, whose __init__ also tries to read the grading key (a head that read it raises, so it
    would lose every point), to write results.json, and to leave a process that writes it later. Each try
    swallows its own failure, so the head scores as the solution where every attack fails (on the host, where
    there is no /autograder, it tries nothing); an unswallowed refused fork would cost every point in the image
    alone."""
    sol = solution_source(A, "head")
    init = "        super().__init__()\n"
    attack = '''import os, json, time
R = "/autograder"
def _try(f):
    try:
        f()
        return True
    except BaseException:
        return False
leaked = _try(lambda: open(R + "/source/.attnkit/grading-key").read())
_try(lambda: open(R + "/results/results.json", "w").write(json.dumps({"score": 999.0, "tests": []})))
_try(lambda: open(R + "/source/attnkit/engine/judge.py", "a").write("\\nHACKED = 1\\n"))
_try(lambda: os.remove(R + "/source/setup.sh"))
def _survivor():
    if os.fork() == 0:
        os.setsid()
        time.sleep(3)
        _try(lambda: open(R + "/results/results.json", "w").write(json.dumps({"score": 999.0, "tests": []})))
        os._exit(0)
if os.path.isdir(R):
    _try(_survivor)        # refused where submission code may start no process; a refusal it hides costs nothing
if leaked:
    raise RuntimeError("read the grading key")'''
    hostile = sol.replace(init, init + "".join(f"        {l}\n" for l in attack.splitlines()))
    assert hostile != sol
    return hostile


CASES = {
    "solution": lambda: nbformat.read(KIT_ROOT / "solutions" / A / f"{A}.ipynb", as_version=4),
    "mistake:mask_after_softmax": lambda: submission(A, {"head": corpus(A).mutate(solution_source(A, "head"),
                                                                                  "mask_after_softmax")}),
    "hostile": lambda: submission(A, {"head": _hostile()}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_run_autograder_in_the_image_scores_as_attnkit_grade(installed, case):
    root, refs = installed
    ag = root / "autograder"
    nb = CASES[case]()
    for d in ("submission", "results"):
        shutil.rmtree(ag / d)
        (ag / d).mkdir()
    nbformat.write(nb, ag / "submission" / f"{A}.ipynb")
    before = tree_digest(ag / "source")
    with Limits() as limits:
        t0 = time.monotonic()
        p = chrooted(root, ["/autograder/source/run_autograder"], ENV, limits, timeout=300)
        seconds = time.monotonic() - t0
        time.sleep(4 if case == "hostile" else 0)            # longer than its would-be survivor sleeps
        FIGURES[f"run_{case}"] = {"s": round(seconds, 1), "peak_mib": limits.peak_mib(),
                                  "oom_kills": limits.oom_kills()}
    ref = refs[case]                                           # the host's verdict, by the same kit
    assert p.returncode == 0, p.stdout[-5000:] + p.stderr[-5000:]
    assert "attnkit kit: /autograder/source" in p.stdout
    # which confinement the judge's child had in the image (reported; both keep the key and results.json)
    FIGURES["confinement"] = next(l for l in p.stdout.splitlines() if l.startswith("confinement: "))
    assert FIGURES["confinement"].startswith("confinement: no namespaces") == (FIGURES["namespaces"] == "False")
    res = json.loads((ag / "results" / "results.json").read_text())
    agrees(res, ref)
    assert (res["score"] == 20) == (case != "mistake:mask_after_softmax"), res["output"]
    assert FIGURES[f"run_{case}"]["oom_kills"] == 0
    assert sorted(x.name for x in (ag / "results").iterdir()) == ["results.json"]
    assert tree_digest(ag / "source") == before                # the kit is untouched
