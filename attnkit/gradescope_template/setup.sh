#!/usr/bin/env bash
# Gradescope runs this once, as root, while building the autograder image (base image: Ubuntu 22.04).
# It installs Python @PYTHON@ (Ubuntu 22.04's python3.11 package; the kit's scores are proven on 3.11),
# a virtual environment at /autograder/venv with
# exactly the pins of requirements.lock for that Python (its markers choose them; torch as its CPU
# build: no multi-GB CUDA download), the kit, and the unprivileged user the student's code runs as.
set -euo pipefail
SRC=/autograder/source
VENV=/autograder/venv
PY=python@PYTHON@
CHILD_USER=student
CPU_INDEX=https://download.pytorch.org/whl/cpu

export DEBIAN_FRONTEND=noninteractive
if ! command -v "$PY" >/dev/null 2>&1 || ! "$PY" -c "import venv, ensurepip" >/dev/null 2>&1; then
    apt-get update -qq
    apt-get install -y -qq "$PY" "$PY-venv" || {
        echo "setup.sh: $PY is not installable here; choose Gradescope's Ubuntu 22.04 base image" \
             "(the kit runs on CPython 3.10, 3.11 or 3.12)" >&2; exit 1; }
fi
"$PY" -m venv "$VENV"

# torch first, with the CPU index as its only index, so pip can never fall back to PyPI's CUDA build
# (the lock's "torch==X" matches the index's "X+cpu"); then every other pin of requirements.lock from
# PyPI, with --no-deps: the lock is complete (pip check below proves it), so nothing unpinned comes in,
# and the torch already installed satisfies its line.
TORCH_PIN="$(grep -E '^torch==' "$SRC/requirements.lock")"
"$VENV/bin/pip" install --no-cache-dir --no-deps --index-url "$CPU_INDEX" "$TORCH_PIN"
"$VENV/bin/pip" install --no-cache-dir --no-deps -r "$SRC/requirements.lock"
"$VENV/bin/pip" check
"$VENV/bin/python" -c "import sys, torch; sys.exit(0 if torch.version.cuda is None else 'torch is a CUDA build')"

# The kit itself, in place (its grading_config/ is found beside the packages).
"$VENV/bin/pip" install --no-cache-dir --no-deps -e "$SRC"
rm -f "$VENV/bin/attnkit"      # the instructor's command line is not shipped; the container grades through
                               # python -m attnkit.gradescope (run_autograder)
"$VENV/bin/python" -m compileall -q "$SRC/autograder" "$SRC/attnkit"
(cd / && PYTHONPATH="$SRC" "$VENV/bin/python" -c "import torch, nbformat, autograder.judge, attnkit.gradescope")

# The user the judge's child process drops to before it loads any student code.
id -u "$CHILD_USER" >/dev/null 2>&1 || \
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$CHILD_USER"

# The venv must be readable by that user (its Python imports torch from it); the kit (hidden checks,
# reference) only by root, so no student code can read, let alone change, it.
chown -R root:root "$SRC" "$VENV"
chmod -R go-rwx "$SRC"
chmod -R a+rX,go-w "$VENV"
chmod 0755 /autograder
