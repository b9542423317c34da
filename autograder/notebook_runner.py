"""Program run in a grading child: execute a student's notebook in a real Jupyter kernel.

Text, not an import: sandbox.run_notebook prepends confine.py and starts it with
``python -I -c`` inside the same namespaces as the judge's child, so the kernel
(and anything it starts) sees no network, no course, a read-only system and a
scratch copy of the notebook's folder, and dies with the child.
"""
import json
import sys


def main():
    spec = json.loads(sys.argv[1])
    if spec.get("confine"):
        _confine(spec["confine"])
    import resource
    mem = int(spec["memory_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    import nbformat
    from jupyter_client import KernelManager
    from nbclient import NotebookClient

    nb = nbformat.read(spec["in"], as_version=4)
    client = NotebookClient(nb, km=KernelManager(kernel_name="python3", transport="ipc"),
                            timeout=spec["cell_timeout"], allow_errors=True, interrupt_on_timeout=True,
                            extra_arguments=["--HistoryManager.hist_file=:memory:"],
                            resources={"metadata": {"path": spec["workdir"]}})
    try:
        client.execute()
    finally:
        nbformat.write(nb, spec["out"])
