# Two commands matter: `make demo` and `make test`. Both set up .venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The scheduler's compiled victim search (native/, Rust with PyO3) is built with rustup's cargo.
export PATH := $(HOME)/.cargo/bin:$(PATH)
NATIVE := native/Cargo.toml native/Cargo.lock native/pyproject.toml $(wildcard native/src/*.rs)

.PHONY: demo demo-kube up kube-up testbed test lint proto reference bench clean ui-vendor docs

$(STAMP): pyproject.toml $(NATIVE)
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required")'
	@command -v cargo >/dev/null || { echo "Rust's cargo is required to build native/ (https://rustup.rs)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m pip install --quiet ./native
	@touch $@

demo: $(STAMP)
	$(BIN)/fedctl dev demo

# The same demo with the H100 member cluster on a real Kubernetes API server, nodes faked by KWOK.
demo-kube: $(STAMP)
	$(BIN)/fedctl dev demo --kube

# The Kubernetes test bed alone, kept running until Ctrl-C; prints its kubeconfigs.
kube-up: $(STAMP)
	$(BIN)/fedctl dev kube

# Build the test bed (kube-apiserver, etcd, kube-controller-manager, KWOK, Volcano's CRDs) into its cache
# outside the repo, once per version: about 10 minutes on 2 cores the first time, nothing after.
testbed: $(STAMP)
	$(BIN)/python -m federation.testbed.build

# The same federation kept running on localhost:50051 for `fedctl` (.venv/bin/fedctl), until Ctrl-C.
up: $(STAMP)
	$(BIN)/fedctl dev up

# Two pytest workers (pytest-xdist), each taking a whole test file at a time (a file's fixtures stay in one
# process): most of the suite waits on processes it started, so two at once take about 30 minutes on 2 cores where
# one at a time took 48. TEST_WORKERS=0 runs every test in pytest's own process.
# pytest exits 5 when it collected no tests: that is a failure here, not a pass.
TEST_WORKERS ?= 2
test: testbed
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

lint: $(STAMP)
	$(BIN)/ruff check .

# The documentation site (mkdocs.yml, docs/) into site/, strictly: a broken link or anchor fails it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Rewrite the documentation's generated pages (configuration, fedctl, the gRPC API, the site's home) from what they
# describe (a test checks them).
reference: $(STAMP)
	$(BIN)/python -m federation.cli.reference

# Regenerate the committed gRPC stubs from proto/ (a test fails when they are stale).
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -I proto --python_out=. --pyi_out=. --grpc_python_out=. proto/federation/v1/*.proto

# Every benchmark, then bench/results/README.md, the report (about an hour; BENCH_ARGS=--quick: a few minutes,
# written to bench/results/quick/). One benchmark alone: make bench-NAME (the names are
# bench/run_all.py's BENCHMARKS), with the same BENCH_ARGS.
bench: $(STAMP)
	$(BIN)/python -m bench.run_all $(BENCH_ARGS)

bench-%: $(STAMP)
	$(BIN)/python -m bench.run_all --only $* $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .demo .pytest_cache .ruff_cache *.egg-info native/target site

# The dashboard's charting library, from the npm registry, into federation/ui/static/vendor/ (committed, so the
# dashboard serves it from loopback with no build step).
UPLOT := 1.6.32
ui-vendor:
	d=$$(mktemp -d) && cd $$d && npm pack --silent uplot@$(UPLOT) >/dev/null && tar xzf uplot-$(UPLOT).tgz && \
	cp package/dist/uPlot.iife.min.js package/dist/uPlot.min.css $(CURDIR)/federation/ui/static/vendor/ && \
	cp package/LICENSE $(CURDIR)/federation/ui/static/vendor/uPlot.LICENSE && rm -rf $$d
