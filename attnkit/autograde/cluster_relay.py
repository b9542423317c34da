"""The Dask client of `attnkit autograde --scheduler`, in a process of its own that cannot read the course.

Why a process of its own: Dask's protocol unpickles some frames whatever the client's ``deserializers``
say (``distributed.protocol.core.loads`` unpickles every ``__Pickled__`` frame), so a dishonest worker, the
scheduler or anyone on the wire can run code in the process that holds the Dask client. That process is
this one: started by cluster_pool.Relay under the kit's confinement (attnkit/isolation/confine.py): a root
holding only read-only binds of the system, the Python installation, the virtual environment and the kit's
package folder (not the course, its grading key, gradebook or submissions, not /home, not the host's /tmp),
its own PID and IPC namespaces and /proc, an unprivileged uid with no capabilities; only the network is
the host's, to reach the scheduler. It never learns the grading key: it is handed each student's plan
seed, the kit fingerprint and each student's notebooks, which the workers receive anyway.

The protocol, one JSON object per line. From the instructor's process (stdin): first the connection
(address, TLS certificates as PEM text, Dask's configuration, the assignment, the fingerprint),
then ``{"judge": student, "payload": ...}`` (the student's notebooks and plan seed), ``{"cancel": student}`` and ``{"end": true}``. To it (the
original stdout, every library's prints sent to /dev/null): ``{"started": workers}`` or ``{"refused": why}``,
``{"want": n}`` (room for n more tasks), ``{"student": s, "reply": text}`` (the worker's JSON text, as it
came) or ``{"student": s, "error": why}``, ``{"lost": why}``. The instructor's process trusts none of it:
cluster_reply.py checks every line before anything reaches the gradebook.
"""
import base64
import json
import os
import queue
import signal
import sys
import threading
import time

WINDOW_PER_THREAD = 2            # tasks kept out per worker thread: each busy, the next one already there


def _confine(spec: dict) -> None:
    """Into the private world; this process waits there as the outer one, its fork (PID 1 inside) goes on."""
    from attnkit.isolation import linux
    from attnkit.isolation.confine import build_world, settle_world
    world = spec.get("world")
    if not world:
        return
    build_world(world)
    pid = os.fork()
    if pid:
        for fd in (0, 1):
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        os._exit(0 if status == 0 else 1)
    linux.die_with_parent(signal.SIGKILL)
    settle_world(world)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)        # Ctrl-C is the instructor's process's to handle
    _confine(json.loads(sys.argv[1]))
    from attnkit.isolation.confine import hide_from_peers
    hide_from_peers()
    out = os.fdopen(os.dup(1), "w", buffering=1)        # the protocol's own channel
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)                                    # what anything else prints goes nowhere
    inbox = os.fdopen(0, "r")
    lock = threading.Lock()

    def send(**msg):
        with lock:
            out.write(json.dumps(msg) + "\n")
            out.flush()
    first = json.loads(inbox.readline())
    import dask
    dask.config.update(dask.config.config, first["dask_config"], priority="new")
    from attnkit.autograde import cluster
    try:
        client = cluster.connect(first["address"], timeout=first["timeout"], tls=first.get("tls"))
    except cluster.SchedulerRefused as e:
        send(refused=str(e))
        return
    try:
        client.register_plugin(cluster.Grading([first["assignment"]], first["worker_course"]), name=cluster.PLUGIN)
        send(started=sorted(client.scheduler_info().get("workers", {})))
        _serve(client, first, inbox, send)
    finally:
        try:
            client.close(timeout=10)
        except Exception:  # noqa: BLE001 - the scheduler may be gone; nothing is left to ask of it
            pass


def _read(inbox, q: queue.Queue) -> None:
    for line in inbox:
        q.put(json.loads(line))
    q.put(None)                                         # the instructor's process closed the pipe: stop


def _serve(client, first: dict, inbox, send) -> None:
    from attnkit.autograde import cluster
    q: queue.Queue = queue.Queue()
    threading.Thread(target=_read, args=(inbox, q), daemon=True).start()
    out: dict = {}                                      # future -> student
    asked, ending = 0, False
    try:
        while True:
            try:
                while True:
                    msg = q.get_nowait()
                    if msg is None:
                        return
                    if "judge" in msg:
                        asked = max(0, asked - 1)
                        payload = dict(msg["payload"], kit=first["kit"],             # the seed: the student's own
                                       assignment=first["assignment"])
                        payload["notebooks"] = {k: base64.b64decode(v) for k, v in payload["notebooks"].items()}
                        f = client.submit(cluster.judge_submission, payload, pure=False, retries=0,
                                          key=f"attnkit-{first['assignment']}-{msg['judge']}-{os.urandom(6).hex()}")
                        out[f] = msg["judge"]
                    elif "cancel" in msg:
                        for f, s in list(out.items()):
                            if s == msg["cancel"]:
                                _cancel(f)
                                del out[f]
                    elif msg.get("end"):
                        ending = True
            except queue.Empty:
                pass
            if ending and not out:
                return
            if not ending:
                room = WINDOW_PER_THREAD * (sum(client.nthreads().values()) or 1) - len(out) - asked
                if room > 0:
                    send(want=room)
                    asked += room
            # a task's result as it came: a str is the worker's JSON text; anything else is refused
            for f in _first_done(list(out), q, seconds=1.0):
                student = out.pop(f)
                try:
                    value = f.result()
                except Exception as e:  # noqa: BLE001 - KilledWorker, a lost or cancelled task, a refused form
                    why = str(e) or type(e).__name__
                    send(student=student, error=f"the cluster did not judge it: {type(e).__name__}: {why[:300]}")
                    continue
                if type(value) is str:
                    send(student=student, reply=value)
                else:
                    send(student=student, error="the cluster sent back something other than the judge's JSON text")
    except OSError as e:                                # the scheduler is gone (CommClosedError is an OSError)
        send(lost=f"the Dask scheduler {first['address']} was lost ({str(e)[:120]})")
    finally:
        for f in out:                                   # nothing of ours stays queued on the cluster
            _cancel(f)


def _cancel(f) -> None:
    try:
        f.cancel()
    except Exception:  # noqa: BLE001 - the scheduler is gone: nothing stays queued there either
        pass


def _first_done(futures: list, q: queue.Queue, seconds: float) -> list:
    """The futures done now, or within ``seconds``, or as soon as the instructor's process says something
    (distributed.wait asks for the process's default client, which this process does not install)."""
    deadline = time.monotonic() + seconds
    while True:
        done = [f for f in futures if f.done()]
        if done or not q.empty() or time.monotonic() >= deadline:
            return done
        time.sleep(0.02)


if __name__ == "__main__":
    main()
