"""`attnkit autograde --scheduler ADDRESS`: the judge runs on a Dask cluster, the gradebook stays here.

Workers compute, this process records. A Dask worker judges each notebook with the same judge in the
same private world (attnkit.engine.judge, its sandbox, limits and operator watch) and returns data only: a
JSON text of the judge's result per notebook. This process then runs nbgrader's own Autograde converter
for the student exactly as a local worker does (worker.grade_one), with the judge step handed the
cluster's verdict; so the gradebook, autograded/, the marker and the CSV are written here, as on the
local path, and every grade cell equals stock `nbgrader autograde`.

Why the verdict fits the notebook nbgrader hands the judge step: the worker judges a *view* of the
submitted notebook, holding exactly what the judge reads (each cell's type; the source of the cells it
reads; the grade/solution flags that say which cells are tests; the nbformat version), and returns
the view's hash beside the result. At the judge step here, the step's notebook (after nbgrader's
sanitizing: OverwriteCells, DeduplicateGradeIds, ...) is viewed the same way: same hash, the cluster's
verdict is the judge's verdict on that notebook; another hash (a student edited a locked cell, which
nbgrader restored) and the judge runs here instead, as on the local path.

Faults, with Dask's own mechanisms: a task never raises (a fault on a submission comes back as data);
a worker that dies takes its task to another worker until the scheduler's
``distributed.scheduler.allowed-failures`` is spent (then KilledWorker: the student is reported not
graded); a worker that stops answering is dropped after ``distributed.scheduler.worker-ttl`` and its
task rescheduled; a task running longer than the run's watchdog is cancelled and its student reported
not graded. A student is recorded only here and only once (the first result of its future); a rerun
grades whoever has no completion marker (markers.py).

Trust: see docs/scaling.md. A plain tcp:// address only on loopback unless --insecure-scheduler;
tls:// with Dask's Security settings; the client (``connect``) deserializes msgpack only, but Dask still
unpickles ``__Pickled__`` frames, so the client runs in a confined process that cannot read the course
(cluster_relay.py) and this process takes only checked JSON from it (cluster_reply.py); a worker learns
each assignment's plan seed, never the course's grading key.
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from distributed import WorkerPlugin

PLUGIN = "attnkit-grading"
CONNECT_SECONDS = 30
LOCAL = "local"                         # --scheduler local: the forked pool, whatever the course configures


class SchedulerRefused(ValueError):
    """The scheduler address cannot be used, said in one sentence."""


# ----------------------------------------------------------------------------- which cluster, and whether to trust it

def check_address(address: str, insecure: bool = False) -> str:
    """``address`` as Dask takes it, or SchedulerRefused: tls:// anywhere; tcp:// (or no scheme) only on a
    loopback address unless ``insecure``, because the grading inputs and the hidden checks' verdicts then
    cross the network in clear and anyone on it could pose as a worker."""
    if "://" not in address:
        address = "tcp://" + address
    parts = urlsplit(address)
    if parts.scheme not in ("tcp", "tls"):
        raise SchedulerRefused(f"scheduler address {address!r}: only tcp:// and tls:// addresses are supported")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise SchedulerRefused(f"scheduler address {address!r} needs a host and a port, e.g. tls://grader.example.org:8786")
    if parts.scheme == "tcp" and not insecure and not _loopback(parts.hostname):
        raise SchedulerRefused(
            f"scheduler {address} is a plain tcp:// address off this machine: grading inputs and verdicts would "
            f"cross the network unencrypted and unauthenticated; use a tls:// address with Dask's TLS settings, "
            f"or --insecure-scheduler if this network is the course's own")
    return address


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def connect(address: str, timeout: float | None = None, tls: dict | None = None):
    """A Client of ``address`` that deserializes msgpack only. ``tls``: the certificates as PEM text (``ca``,
    ``cert``, ``key``), as the confined relay receives them (it cannot read the instructor's files); default:
    Dask's own configuration. Dask still unpickles some frames whatever ``deserializers`` say, which is why
    `attnkit autograde` holds its client in a confined process (cluster_relay.py)."""
    from distributed import Client
    from distributed.security import Security
    timeout = timeout or CONNECT_SECONDS           # also how long a lost scheduler is waited for
    security = None
    if address.startswith("tls://"):
        if tls:
            security = Security(tls_ca_file=tls["ca"], tls_client_cert=tls["cert"], tls_client_key=tls.get("key"),
                                require_encryption=True)
        else:
            security = Security()                  # Dask's own configuration: distributed.comm.tls.*
        if not (security.tls_ca_file and security.tls_client_cert):
            raise SchedulerRefused(
                f"scheduler {address} is tls:// but Dask's TLS settings are missing: set "
                f"distributed.comm.tls.ca-file and distributed.comm.tls.client.cert (and .key) in Dask's configuration")
    try:
        return Client(address, deserializers=["msgpack"], security=security, timeout=timeout,
                      set_as_default=False)
    except OSError as e:
        raise SchedulerRefused(f"no Dask scheduler answered at {address} within {timeout:g} s ({e})") from None


def tls_text(address: str) -> dict | None:
    """For a tls:// address: Dask's configured certificates as PEM text, read here for the confined relay;
    SchedulerRefused when they are not configured."""
    if not address.startswith("tls://"):
        return None
    from distributed.security import Security
    security = Security()
    if not (security.tls_ca_file and security.tls_client_cert):
        raise SchedulerRefused(
            f"scheduler {address} is tls:// but Dask's TLS settings are missing: set "
            f"distributed.comm.tls.ca-file and distributed.comm.tls.client.cert (and .key) in Dask's configuration")

    def text(v):
        return None if not v else v if "\n" in v else Path(v).read_text()
    return {"ca": text(security.tls_ca_file), "cert": text(security.tls_client_cert),
            "key": text(security.tls_client_key)}


# ----------------------------------------------------------------------------- what the judge reads, and nothing else

def view(nb) -> dict:
    """What the judge reads of notebook ``nb``, as a plain notebook: every cell's type (cells are counted in
    messages), the source of each code cell it reads, the flags that make a cell a test cell, and the
    format version. attnkit.engine.judge.grade of this equals its verdict on ``nb`` (attnkit/isolation/notebook_code.py
    reads cells through these fields alone; refuse_unreadable reads the version and the cell types)."""
    from attnkit.isolation.notebook_code import _is_test_cell, cell_source
    meta = nb.get("metadata") if isinstance(nb, dict) else None
    cells = []
    for c in nb.get("cells") or [] if isinstance(nb, dict) else []:
        if not isinstance(c, dict):
            cells.append({"cell_type": None, "metadata": {}, "source": ""})
            continue
        test = _is_test_cell(c)
        cells.append({"cell_type": c.get("cell_type"),
                      "metadata": {"nbgrader": {"grade": True, "solution": False}} if test else {},
                      "source": "" if test or c.get("cell_type") != "code" else cell_source(c)})
    out = {"cells": cells, "metadata": {}, "nbformat": nb.get("nbformat") if isinstance(nb, dict) else None,
           "nbformat_minor": nb.get("nbformat_minor") if isinstance(nb, dict) else None}
    orig = meta.get("orig_nbformat") if isinstance(meta, dict) else None
    if orig is not None:
        out["metadata"]["orig_nbformat"] = orig
    return out


def view_hash(v: dict) -> str:
    return hashlib.sha256(json.dumps(v, sort_keys=True, ensure_ascii=True).encode()).hexdigest()


def kit_fingerprint(assignment: str) -> str:
    """The judge's code and the assignment's checks: a worker with another version of either must not grade."""
    import attnkit
    from attnkit.engine import registry
    h = hashlib.sha256()
    kit = Path(attnkit.__file__).parent
    for folder in (kit / "engine", kit / "isolation", kit / "toolkit", registry.get(assignment).folder):
        for p in sorted(folder.rglob("*")):
            if p.is_file() and p.suffix in (".py", ".toml") and "source" not in p.relative_to(folder).parts[:1]:
                h.update(str(p.relative_to(folder.parent)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


# ----------------------------------------------------------------------------- on a worker

class Grading(WorkerPlugin):
    """Kept by each worker: the judge's fork server (zygote) started once per worker, warm for every submission it
    judges. (The plan seed comes with each task: a worker holds no grading key.)"""
    name = PLUGIN

    def __init__(self, assignments: list[str], course: str):
        self.assignments, self.course = list(assignments), course

    async def setup(self, worker):
        # In a thread of its own: the fork server's imports take seconds (a minute on a loaded machine), and a
        # synchronous setup runs on the worker's event loop, which then sends no heartbeat; past the scheduler's
        # worker-ttl the worker is dropped mid-registration and the client's register_plugin fails
        # (CommClosedError). The registration still waits for the warm-up: no task arrives before it.
        import asyncio
        await asyncio.get_running_loop().run_in_executor(None, self._warm)

    def _warm(self):
        from attnkit.engine import config as judge_config, registry
        try:
            registry.use_course(self.course)        # the course's hidden autograders, as this worker sees them
        except registry.NotACourse:
            return                                   # each task says so (registry.get fails inside it)
        from attnkit.isolation import sandbox
        for a in self.assignments:
            try:
                known = registry.get(a)
                warm = sandbox.prestart(known.driver, judge_config.load(known.name).contract)
                known.plugin()
                if warm is not None:
                    warm.ensure_ready()
            except Exception:  # noqa: BLE001 - each task reports what is wrong with this worker in its own result
                pass


_fingerprints: dict[str, str] = {}


def judge_submission(payload: dict) -> str:
    """On a worker: judge each notebook of one submission; a JSON text, never an exception (a task's exception
    would travel as a pickle, and the instructor's client accepts none)."""
    t0 = time.monotonic()
    out = {"ok": False, "error": None, "notebooks": {}, "worker": _worker_address(), "pid": os.getpid()}
    scratch = None
    try:
        from attnkit.engine import judge
        from attnkit.isolation.untrusted import UnreadableNotebook
        assignment = payload["assignment"]
        mine = _fingerprints.get(assignment) or _fingerprints.setdefault(assignment, kit_fingerprint(assignment))
        if mine != payload["kit"]:
            raise RuntimeError(f"worker {out['worker']} has another version of the judge or of {assignment}'s checks "
                               "than the instructor's: install the same kit on every worker")
        scratch = tempfile.mkdtemp(prefix="attnkit-cluster-")
        for name, data in sorted(payload["notebooks"].items()):
            path = Path(scratch) / f"{Path(name).name}.ipynb"
            path.write_bytes(data)
            try:
                nb = judge.read_notebook(path)          # inside the judge's caps, in a helper process
            except UnreadableNotebook:
                out["notebooks"][name] = None           # judged where nbgrader reads it (same sentence)
                continue
            v = view(nb)
            result = judge.grade(v, assignment, seed=int.from_bytes(bytes.fromhex(payload["seed"]), "little"))
            out["notebooks"][name] = {"view": view_hash(v), "result": json.loads(json.dumps(result))}
        out["ok"] = True
    except Exception as e:  # noqa: BLE001 - everything a worker has to say comes back as data
        out["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        if scratch:
            import shutil
            shutil.rmtree(scratch, ignore_errors=True)
    out["seconds"] = time.monotonic() - t0
    return json.dumps(out)


def _worker_address() -> str:
    try:
        from distributed import get_worker
        return get_worker().address
    except Exception:  # noqa: BLE001 - called outside a worker (tests)
        return f"pid {os.getpid()}"
