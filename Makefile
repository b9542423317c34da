# Two commands: `make demo` (grade a sample class end to end) and `make test`.
# Both create or refresh the local virtual environment first, installing only what is missing.

# The Pythons the kit supports are pyproject.toml's requires-python (">=3.10,<3.13"), written nowhere
# else: attnkit doctor and tests/test_environment.py read the same line. The virtual environment is made
# with PYTHON: by default the first of python3.12, python3.11, python3.10, python3 on PATH that runs and is
# a CPython within those bounds (`make python` tells which, or why none); PYTHON=... is checked too.
PY_REQUIRES := $(shell sed -n 's/^requires-python *= *"\(.*\)".*/\1/p' pyproject.toml)
PY_MIN := $(shell echo '$(PY_REQUIRES)' | sed -n 's/^ *>= *3\.\([0-9][0-9]*\) *, *< *3\.[0-9][0-9]* *$$/\1/p')
PY_END := $(shell echo '$(PY_REQUIRES)' | sed -n 's/^ *>= *3\.[0-9][0-9]* *, *< *3\.\([0-9][0-9]*\) *$$/\1/p')
ifeq ($(PY_MIN)$(PY_END),)
$(error pyproject.toml: requires-python must read ">=3.X,<3.Y" (found "$(PY_REQUIRES)"))
endif
comma := ,
PY_ACCEPTED := $(subst $(eval) ,$(comma) ,$(shell m=$(PY_MIN); while [ $$m -lt $(PY_END) ]; do echo 3.$$m; m=$$((m+1)); done))
PY_CANDIDATES := $(shell m=$(PY_END); while [ $$m -gt $(PY_MIN) ]; do m=$$((m-1)); printf 'python3.%s ' $$m; done)python3
# true when $(1) runs and is a CPython within the bounds; leaves "cpython 3 MINOR X.Y.Z" in $$1..$$4
PY_PROBE = v=$$($(1) -c 'import sys; print(sys.implementation.name, *sys.version_info[:2], sys.version.split()[0])' \
  2>/dev/null) && set -- $$v && [ "$$1" = cpython ] && [ "$$2" = 3 ] && [ "$$3" -ge $(PY_MIN) ] && [ "$$3" -lt $(PY_END) ]
PYTHON ?= $(shell for p in $(PY_CANDIDATES); do if $(call PY_PROBE,$$p); then echo $$p; break; fi; done)
CHECK_PYTHON = p='$(PYTHON)'; if [ -n "$$p" ] && $(call PY_PROBE,$$p); then echo "Python for .venv: $$p ($$4)"; else \
  echo "make: no supported Python$(if $(filter command line environment,$(origin PYTHON)), (PYTHON=$(PYTHON) is not one), on PATH (tried $(PY_CANDIDATES))):" \
       "attnkit needs CPython $(PY_ACCEPTED) (pyproject.toml: requires-python \"$(PY_REQUIRES)\")." \
       "Install one (Debian, Ubuntu: apt-get install python3.X python3.X-venv) or name it: make PYTHON=/path/to/python3.X" >&2; \
  exit 1; fi
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PATH := $(abspath $(BIN)):$(PATH)
export OMP_NUM_THREADS ?= 1
export MPLBACKEND ?= Agg
# where the corpora are, as attnkit/engine/datasets.py looks: ../shared/data beside the checkout when it exists, else data/
export ATTNKIT_DATA_DIR ?= $(if $(wildcard ../shared/data),$(abspath ../shared/data),$(CURDIR)/data)

.PHONY: venv torch python browser spreadsheet chp demo test test-install release bench doctor clean

venv: $(STAMP)

python:
	@$(CHECK_PYTHON)

torch:
	@test -x $(BIN)/python || { $(CHECK_PYTHON); }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(INSTALL_TORCH)

# torch comes first, alone, from PyTorch's CPU wheel index as the only index (as the Gradescope setup.sh does):
# PyPI's torch for Linux is the CUDA build, gigabytes with a dozen nvidia-* and triton packages the lock does not
# pin. Its "2.13.0+cpu" satisfies the lock's "torch==2.13.0", so the lock's install then keeps it, and brings
# torch's own requirements at their pins. A torch already installed at the pin is kept without a look at the
# index. `make torch VENV=dir` runs this step alone (tests/test_make_torch.py, against a local index).
TORCH_INDEX_URL ?= https://download.pytorch.org/whl/cpu
TORCH_PIN := $(shell grep -E '^torch==' requirements.lock)
INSTALL_TORCH = $(BIN)/python -m pip install -q --no-deps --index-url $(TORCH_INDEX_URL) '$(TORCH_PIN)'

$(STAMP): requirements.lock pyproject.toml
	@test -x $(BIN)/python || { $(CHECK_PYTHON); }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(INSTALL_TORCH)
	$(BIN)/python -m pip install -q -r requirements.lock
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	@# exact pins and nothing else (attnkit doctor's packages check): a venv that drifted is refused, not used
	$(BIN)/python -c 'import sys; from attnkit.doctor import check_pins; ok, text = check_pins(); print(text); sys.exit(not ok)'
	touch $(STAMP)

# The corpora first, from their public origins into the data directory (verified; ones already there are only
# checked): where that fails, one sentence says what to do and nothing is graded.
demo: $(STAMP)
	$(BIN)/attnkit data fetch
	$(BIN)/attnkit demo

# Debian's chromium renders the HTML reports in the browser tests; installed when missing and possible.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  echo "chromium is not installed and cannot be: the browser tests will be reported as skipped"

# Debian's LibreOffice Calc (no GUI) opens the kit's CSV files as a spreadsheet user would, in the formula tests
# (tests/test_csv_formulas.py); installed when missing and possible.
spreadsheet:
	@command -v soffice >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libreoffice-calc-nogui >/dev/null; } || \
	  echo "LibreOffice is not installed and cannot be: the spreadsheet tests will be reported as skipped (failed under CI)"

# JupyterHub's proxy (npm's configurable-http-proxy) for the check service's hub tests (tests/test_serve_hub.py),
# into .cache/chp (git ignores it) when it is on neither PATH nor there; under CI a failed install stops the run.
CHP := .cache/chp/node_modules/.bin/configurable-http-proxy
chp:
	@command -v configurable-http-proxy >/dev/null 2>&1 || test -x $(CHP) || \
	  npm install -s --no-audit --no-fund --prefix .cache/chp configurable-http-proxy@5 >/dev/null || \
	  { if [ -n "$$CI" ]; then echo "configurable-http-proxy cannot be installed from npm: the hub tests need it" >&2; exit 1; \
	    else echo "configurable-http-proxy is not installed and cannot be: the hub tests will be reported as skipped"; fi; }

# The suite runs on every core, up to 4 (pytest-xdist; TEST_JOBS=1 for one process): its tests are hermetic, what
# several need is built once per run (tests/conftest.py, once_per_run), and the slowest (tests/slow_tests.txt)
# start first, spread over the workers (tests/slowest_first.py).
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ "$$n" -gt 4 ] && n=4; echo $$n)

test: $(STAMP) browser spreadsheet chp
	$(BIN)/python -m pytest -q -n $(TEST_JOBS) --dist worksteal

# The real Gradescope image build (tests/test_gradescope_install.py): minutes; needs root, debootstrap,
# the package registries and a local torch wheel directory. Not part of `make test`.
test-install: $(STAMP)
	@command -v debootstrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
	$(BIN)/python -m pytest -q -s -m install tests/test_gradescope_install.py

release: $(STAMP)
	$(BIN)/attnkit release

bench: $(STAMP)
	$(BIN)/python bench/floor.py
	$(BIN)/python bench/grade_one.py
	$(BIN)/python bench/class_throughput.py

doctor: $(STAMP)
	$(BIN)/attnkit doctor

clean:
	rm -rf demo_course .scratch autograded feedback submitted gradebook.db
