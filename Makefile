# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo test test-fast ui bench chromium clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# the CPU build of torch must come first: any other torch requirement pulls GBs of CUDA wheels
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/dhs demo

# headless Chromium opens the evaluation report in the tests; in CI (CI=true) its absence is an
# error, as the browser tests fail there rather than skip
chromium:
	@test -x /usr/bin/chromium || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	  else case "$$(echo "$${CI:-}" | tr A-Z a-z)" in 1|true|yes|on) \
	    echo "chromium is not installed and CI=$$CI: run make test as root (it installs chromium) or install it" >&2; exit 1;; \
	  *) echo "chromium not installed and not root: the browser checks will be skipped";; esac; fi; }

test: setup chromium
	$(BIN)/python -m pytest -q -ra --durations=15

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

ui: setup
	mkdir -p .dagster_home && cp -n dagster.yaml .dagster_home/dagster.yaml || true
	DAGSTER_HOME=$(CURDIR)/.dagster_home $(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

bench: setup
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b; done

clean:
	rm -rf lakehouse .dagster_home .dhs_mock
