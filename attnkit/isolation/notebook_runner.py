"""Program run in a grading child: execute a student's notebook in a real Jupyter kernel.

sandbox.run_notebook starts ``python -I -c`` with a program that imports this module (sandbox.runner_program).
It builds the same private world as the judge's child (confine.build_world), forks PID 1 of its
namespaces, which settles there, copies the read-only inbox (the notebook and the files handed in
beside it) into its /tmp, caps its resources and runs the notebook, so the kernel (and anything it
starts) sees no network, no course, a read-only system and only its own /tmp, and dies with it.
The executed notebook goes back over a pipe the judge made; the runner is not dumpable, so the
kernel (same uid) cannot write to that pipe through /proc or trace the runner.
"""
import json
import os as _os
import sys

from attnkit.isolation.confine import build_world, hide_from_peers, settle_world
from attnkit.isolation import linux

# As in attnkit/fast_start.py: jsonschema (under nbformat) leaves out the grammar of its unused "iri" format,
# 1.4 s at every start of this process, which runs once per notebook.
if "jsonschema" not in sys.modules:
    sys.modules.setdefault("rfc3987_syntax", None)


def main():
    spec = json.loads(sys.argv[1])
    world = spec.get("world")
    if world:
        build_world(world)
        pid = _os.fork()
        if pid:
            _os.close(spec["out_fd"])
            _, status = _os.waitpid(pid, 0)
            _os._exit(0 if status == 0 else 1)
        linux.die_with_parent(9)                            # SIGKILL: die with the runner
        settle_world(world)
        import shutil
        work = "/tmp/work"
        shutil.copytree(_os.path.join(spec["inbox"], "work"), work, symlinks=True)
    else:
        work = spec["workdir"]
    _os.chdir(work)
    hide_from_peers()
    import resource
    mem = int(spec["memory_mb"]) * 1024 * 1024
    for res, value in ((resource.RLIMIT_AS, mem), (resource.RLIMIT_CORE, 0),
                       (resource.RLIMIT_FSIZE, int(spec["file_mb"]) * 1024 * 1024)):
        resource.setrlimit(res, (value, value))
    if world:                       # in a user namespace of its own: the count is this run's alone
        resource.setrlimit(resource.RLIMIT_NPROC, (spec["max_processes"], spec["max_processes"]))
    for d in ("runtime", "ipython", "mpl"):
        _os.makedirs(_os.path.join("/tmp" if world else _os.environ["HOME"], ".attnkit-" + d), exist_ok=True)
    base = "/tmp" if world else _os.environ["HOME"]
    _os.environ.update(JUPYTER_RUNTIME_DIR=f"{base}/.attnkit-runtime", IPYTHONDIR=f"{base}/.attnkit-ipython",
                       MPLCONFIGDIR=f"{base}/.attnkit-mpl")

    import nbformat
    from jupyter_client import KernelManager
    from nbclient import NotebookClient

    nb = nbformat.read(_os.path.join(spec["inbox"], "in.ipynb"), as_version=4)
    client = NotebookClient(nb, km=KernelManager(kernel_name="python3", transport="ipc"),
                            timeout=spec["cell_timeout"], allow_errors=True, interrupt_on_timeout=True,
                            extra_arguments=["--HistoryManager.hist_file=:memory:"],
                            resources={"metadata": {"path": work}})
    try:
        client.execute()
    finally:
        data = nbformat.writes(nb).encode()
        view = memoryview(data)
        while view:
            view = view[_os.write(spec["out_fd"], view):]
        _os._exit(0)
