# pmlab's two everyday commands (each first installs what it needs, or, run
# without root, prints the one apt-get line that does: scripts/setup.sh):
#   make demo   build pmlab, then run the main job on its embedded default
#   make test   build everything, lint, and run every test
CARGO ?= cargo
PMLAB := target/release/pmlab

.PHONY: all build demo test lint fmt workloads clean validate-sim validate-emu bench setup-demo setup-test

all: build

build:
	$(CARGO) build --release --workspace

workloads: build
	$(MAKE) -C workloads

setup-demo:
	@scripts/setup.sh demo

setup-test:
	@scripts/setup.sh test

# The main job on its embedded default: build memlat with pmlab's
# instrumentation and emulate it at several PM latencies (no PMU needed),
# printing measured ns per access against each target. `validate` builds
# memlat itself, so the demo needs neither the PMDK workloads nor their
# libraries.
demo: setup-demo
	$(CARGO) build --release --workspace
	$(PMLAB) validate --only memlat --reps 3 --loose

# Regenerate the records in docs/ (each prints its figures).
validate-sim: build
	$(PMLAB) sim validate --write docs/validation.md --svg docs/validation

validate-emu: build workloads
	$(PMLAB) validate --json results/accuracy.json --plot results/accuracy

bench: build workloads
	PMLAB=$(PMLAB) bench/runtime.sh 7
	PMLAB=$(PMLAB) bench/synthetic-delay.sh 5
	PMLAB=$(PMLAB) bench/instr.sh
	PMLAB=$(PMLAB) bench/sim-speed.sh 5
	PMLAB=$(PMLAB) bench/probe-suite.sh
	PMLAB=$(PMLAB) bench/trace-speed.sh
	PMLAB=$(PMLAB) bench/trace-whisper.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --release -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --release -q

# Each skipped test adds a line to SKIP_LOG (crates/cli/tests/common);
# the count and the list end the run. With PMLAB_TEST_REQUIRE_ALL=1 (set by
# .ci/run, where every tool is installed) a skip fails its test instead.
SKIP_LOG := $(CURDIR)/target/test-skips.txt

test: setup-test
	$(MAKE) build workloads lint
	@rm -f $(SKIP_LOG)
	@echo "$(CARGO) test --workspace --release --no-fail-fast"
	@PMLAB_TEST_SKIP_LOG=$(SKIP_LOG) $(CARGO) test --workspace --release --no-fail-fast; st=$$?; \
	n=$$(cat $(SKIP_LOG) 2>/dev/null | wc -l); \
	echo "make test: $$n skipped or not fully exercised on this machine$$([ $$n -gt 0 ] && echo :)"; \
	[ $$n -eq 0 ] || sed 's/^/  /' $(SKIP_LOG); \
	exit $$st

fmt:
	$(CARGO) fmt --all

clean:
	$(CARGO) clean
	$(MAKE) -C workloads clean
