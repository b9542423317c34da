# Two commands: `make demo` (grade a sample class end to end) and `make test`.
# Both create or refresh the local virtual environment first, installing only what is missing.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PATH := $(CURDIR)/$(BIN):$(PATH)
export OMP_NUM_THREADS ?= 1
export MPLBACKEND ?= Agg
export ATTNKIT_DATA_DIR ?= $(if $(wildcard ../shared/data/tinyshakespeare.txt),$(abspath ../shared/data),$(CURDIR)/data)

.PHONY: venv browser demo test release bench doctor clean

venv: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install -q -r requirements.lock
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/attnkit demo

# Debian's chromium renders the HTML reports in the browser tests; installed when missing and possible.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  echo "chromium is not installed and cannot be: the browser tests will be reported as skipped"

test: $(STAMP) browser
	$(BIN)/python -m pytest -q

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
