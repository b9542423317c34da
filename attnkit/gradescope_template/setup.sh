#!/usr/bin/env bash
# Gradescope runs this once, as root, while building the autograder image (base image: Ubuntu 22.04).
# It makes a virtual environment at /autograder/venv on the image's own python3 (3.10 on Ubuntu 22.04;
# any CPython @PYTHON_LOW@ <= x < @PYTHON_BELOW@, the Pythons requirements.lock supports) holding only what grading
# imports: requirements-grading.txt, the lock's pins for them (its markers choose per Python), torch as
# its CPU build (setup.conf: which index, or a local wheel directory). No JupyterLab, nbgrader or pytest:
# the container never runs a notebook. Then it creates the unprivileged user the student's code runs as.
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"      # overridable for tests, as in run_autograder
SRC="$ROOT/source"
VENV="$ROOT/venv"
CHILD_USER=student
. "$SRC/setup.conf"            # ATTNKIT_TORCH_INDEX, ATTNKIT_WHEELS (the environment's values win)
REQS="$SRC/requirements-grading.txt"

say() { echo "setup.sh: $*" >&2; }
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c "import venv, ensurepip" >/dev/null 2>&1; then
    # the image's Python, with its venv module (Debian and Ubuntu ship it apart, as python3-venv)
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends python3 python3-venv >/dev/null || {
        say "could not install python3 and python3-venv from the image's apt repositories"; exit 1; }
fi
# requirements.lock pins wheels for CPython @PYTHON_LOW@ <= x < @PYTHON_BELOW@ only (pyproject's requires-python)
read -r IMPL MAJOR MINOR <<<"$(python3 -c 'import sys; print(sys.implementation.name, *sys.version_info[:2])')"
if [ "$IMPL" != cpython ] || [ "$MAJOR" != 3 ] || [ "$MINOR" -lt @PYTHON_LOW_MINOR@ ] || [ "$MINOR" -ge @PYTHON_BELOW_MINOR@ ]; then
    say "this image's python3 is $IMPL $MAJOR.$MINOR; the kit needs CPython >= @PYTHON_LOW@ and < @PYTHON_BELOW@" \
        "(the Pythons requirements.lock supports): choose Gradescope's Ubuntu 22.04 base image (Python 3.10)"
    exit 1
fi
python3 -m venv "$VENV"
PIP=("$VENV/bin/pip" install --no-cache-dir --progress-bar off)

# torch first, from its CPU index as the only index (or from the local wheels alone), so pip can never
# fall back to PyPI's CUDA build (the pin "torch==X" matches the CPU build's "X+cpu"); its requirements
# come with the rest. Then what grading imports, from PyPI, with requirements.lock as constraints: pip's
# resolver, on this Python, adds what a pin for this Python requires beyond the list (six for 3.10's
# python-dateutil), each at the lock's pin; the torch already installed satisfies its line.
TORCH_PIN="$(grep -E '^torch==' "$REQS")"
if [ -n "$ATTNKIT_WHEELS" ]; then
    "${PIP[@]}" --no-deps --no-index --find-links "$ATTNKIT_WHEELS" "$TORCH_PIN"
else
    "${PIP[@]}" --no-deps --index-url "$ATTNKIT_TORCH_INDEX" "$TORCH_PIN"
fi
"${PIP[@]}" -c "$SRC/requirements.lock" -r "$REQS"
"$VENV/bin/pip" check
"$VENV/bin/python" -c "import sys, torch; sys.exit(0 if torch.version.cuda is None else 'torch is a CUDA build')"
# nothing unpinned came in: every distribution in the venv (but pip) is at its pin for this Python
"$VENV/bin/python" - "$SRC/requirements.lock" <<'PY'
import sys
from importlib import metadata
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as canon
from packaging.version import Version
lines = (l.split("#", 1)[0].strip() for l in open(sys.argv[1]))
pins = {canon(r.name): r.specifier for r in map(Requirement, filter(None, lines)) if not r.marker or r.marker.evaluate()}
off = [f"{d.name} {d.version}" for d in metadata.distributions() if canon(d.name) != "pip"
       and not (canon(d.name) in pins and Version(d.version).public in pins[canon(d.name)])]
sys.exit(f"setup.sh: not pinned by requirements.lock for this Python: {', '.join(sorted(off))}" if off else 0)
PY

# The kit is not installed: run_autograder puts $SRC first on the path (the assignment's folder, with its
# manifest, is found beside the packages). Compile it now, as root, since grading never writes into it.
"$VENV/bin/python" -m compileall -q "$SRC/autograder" "$SRC/attnkit"
(cd / && PYTHONPATH="$SRC" "$VENV/bin/python" -c "import torch, matplotlib, nbformat, attnkit.engine.judge, attnkit.gradescope, autograder.@ASSIGNMENT@")

# The user the judge's child process drops to before it loads any student code.
id -u "$CHILD_USER" >/dev/null 2>&1 || \
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$CHILD_USER"

# The venv must be readable by that user (its Python imports torch from it); the kit (hidden checks,
# reference, grading key) only by root, so no student code can read, let alone change, it.
chown -R root:root "$SRC" "$VENV"
chmod -R go-rwx "$SRC"
chmod -R a+rX,go-w "$VENV"
chmod 0755 "$ROOT"
echo "setup.sh: $("$VENV/bin/python" -V) venv at $VENV, $(du -sh "$VENV" | cut -f1)"
