# pmlab's two everyday commands:
#   make demo   build everything, then run the main job on its embedded default
#   make test   build everything, lint, and run every test
CARGO ?= cargo
PMLAB := target/release/pmlab

.PHONY: all build demo test lint fmt workloads clean

all: build

build:
	$(CARGO) build --release --workspace

workloads: build
	$(MAKE) -C workloads

demo: build workloads
	$(PMLAB) sim presets

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --release -- -D warnings

test: build workloads lint
	$(CARGO) test --workspace --release

fmt:
	$(CARGO) fmt --all

clean:
	$(CARGO) clean
	$(MAKE) -C workloads clean
