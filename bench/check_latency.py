"""The check service's latency, warm: `attnkit serve` on 127.0.0.1, the solution notebook of each assignment
checked by one client in a row, then by 30 clients at once (30 students, each granted plenty of checks so no
429 interferes). With --hub, the same through a real JupyterHub (tests/hub.py: configurable-http-proxy, the
service started by the hub as `attnkit serve --hub`): each check goes through the hub's proxy with a token the hub
made for the student, and the service asks the hub whose it is. Beside it, the floor: the judge's own time, as the service measured it for each check
(`Server-Timing`), and for the same notebook graded in this process before the service starts (what the
service adds to it: HTTP, a temporary file, the record and the HTML report; under 30 clients, the queue).

    python bench/check_latency.py [--hub] [--single 10] [--clients 30] [--rounds 2] [--assignment A ...]

The service's state is a scratch folder, never the course's .attnkit/.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")
# a key of the bench's own unless one is given, inherited by the service: the course's .attnkit/ is never written
os.environ.setdefault("ATTNKIT_GRADING_KEY", secrets.token_hex(32))


def quantiles(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]


def post(port: int, assignment: str, token: str, body: bytes, prefix: str = "") -> tuple[float, float]:
    """(seconds the client waited, seconds the service's judge.grade took: its Server-Timing)."""
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", f"{prefix}/api/v1/check/{assignment}", body, {"Authorization": f"token {token}"})
    r = conn.getresponse()
    got = json.loads(r.read())
    conn.close()
    if r.status != 200 or got["score"] != got["max_score"]:
        raise SystemExit(f"check of {assignment}: HTTP {r.status} {str(got)[:300]}")
    judged = float(r.getheader("Server-Timing", "judge;dur=nan").split("dur=")[1]) / 1000
    return time.perf_counter() - started, judged


def floor(assignment: str, nb: Path, n: int) -> list[float]:
    from attnkit.engine import judge
    judge.grade(nb, assignment, student="floor")        # warm: fork server, reader, plan
    times = []
    for _ in range(n):
        started = time.perf_counter()
        judge.grade(nb, assignment, student="floor")
        times.append(time.perf_counter() - started)
    return times


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def standalone(port: int, state: Path, workers: int, queue: int, assignments) -> callable:
    """`attnkit serve` on 127.0.0.1:``port``, once it answers: the function that stops it."""
    log = open(state / "serve.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "attnkit", "serve", "--port", str(port), "--course-dir", str(ROOT),
                             "--state-dir", str(state), "--workers", str(workers), "--queue", str(queue),
                             *sum((["--assignment", a] for a in assignments), [])],
                            stdout=log, stderr=subprocess.STDOUT)
    while True:
        if proc.poll() is not None:
            raise SystemExit((state / "serve.log").read_text())
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/")
            if conn.getresponse().status == 200:
                break
        except OSError:
            time.sleep(0.1)

    def stop():
        proc.terminate()
        proc.wait(60)
        log.close()
    return stop


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--assignment", action="append", help="default: every assignment of this course")
    p.add_argument("--single", type=int, default=10, help="checks in a row by one client (default 10)")
    p.add_argument("--clients", type=int, default=30, help="concurrent clients (default 30)")
    p.add_argument("--rounds", type=int, default=2, help="checks per concurrent client (default 2)")
    p.add_argument("--workers", type=int, default=2, help="the service's --workers (default 2)")
    p.add_argument("--hub", action="store_true", help="through a JupyterHub and its proxy (attnkit serve --hub)")
    args = p.parse_args()
    from attnkit.engine import config, registry
    from attnkit.serve import limits, tokens
    from attnkit.serve.store import Store
    registry.use_course(ROOT)
    assignments = args.assignment or registry.names()
    state = Path(tempfile.mkdtemp(prefix="attnkit-bench-serve-"))
    students = [f"s{i:02d}" for i in range(args.clients + 1)]
    notebooks = {a: (ROOT / "solutions" / a / f"{a}.ipynb") for a in assignments}

    print(f"bench/check_latency.py, {datetime.now().isoformat(timespec='minutes')}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f} at start, --workers {args.workers}"
          + (", through JupyterHub's proxy (attnkit serve --hub)" if args.hub else ""))
    floors = {a: floor(a, notebooks[a], max(3, args.single // 2)) for a in assignments}

    started = time.monotonic()
    if args.hub:
        from tests.hub import PREFIX, Hub
        hub = Hub(state, students=students, others=(), workers=args.workers, queue=args.clients * 2,
                  assignments=assignments)
        port, prefix, store, stop = hub.port, PREFIX, Store(state / "state"), hub.stop
        keys = {s: hub.user_token(s) for s in students}
    else:
        port, prefix, store = free_port(), "", Store(state)
        keys = {s: tokens.add(store, s) for s in students}
        stop = standalone(port, state, args.workers, args.clients * 2, assignments)
    for a in assignments:
        for s in students:
            limits.grant(store, s, a, 10_000, config.load(a).check_service)
    print(f"service up and warm in {time.monotonic() - started:.1f} s\n")
    try:
        print(f"{'assignment':14} {'clients':>7} {'checks':>6} {'p50 s':>7} {'p95 s':>7} {'checks/min':>10} "
              f"{'its judging p50 s':>17} {'judge alone p50 s':>17}")

        def row(a, clients, got, wall):
            waited, judged = [g[0] for g in got], [g[1] for g in got]
            p50, p95 = quantiles(waited)
            print(f"{a:14} {clients:7d} {len(got):6d} {p50:7.2f} {p95:7.2f} {60 * len(got) / wall:10.1f} "
                  f"{statistics.median(judged):17.2f} {statistics.median(floors[a]):17.2f}", flush=True)

        for a in assignments:
            body = notebooks[a].read_bytes()
            post(port, a, keys[students[0]], body, prefix)          # this student's plan, made once
            began = time.perf_counter()
            row(a, 1, [post(port, a, keys[students[0]], body, prefix) for _ in range(args.single)],
                time.perf_counter() - began)
            got, lock = [], threading.Lock()

            def client(token):
                for _ in range(args.rounds):
                    one = post(port, a, token, body, prefix)
                    with lock:
                        got.append(one)
            threads = [threading.Thread(target=client, args=(keys[s],)) for s in students[1:]]
            began = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            row(a, args.clients, got, time.perf_counter() - began)
    finally:
        stop()
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end (other jobs share this machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
