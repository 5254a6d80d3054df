# pmlab's two everyday commands:
#   make demo   build everything, then run the main job on its embedded default
#   make test   build everything, lint, and run every test
CARGO ?= cargo
PMLAB := target/release/pmlab

.PHONY: all build demo test lint fmt workloads clean validate-sim validate-emu bench

all: build

build:
	$(CARGO) build --release --workspace

workloads: build
	$(MAKE) -C workloads

# The main job on its embedded default: build memlat with pmlab's
# instrumentation and emulate it at several PM latencies (no PMU needed),
# printing measured ns per access against each target.
demo: build workloads
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

test: build workloads lint
	$(CARGO) test --workspace --release

fmt:
	$(CARGO) fmt --all

clean:
	$(CARGO) clean
	$(MAKE) -C workloads clean
