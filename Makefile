# dataplane: setup, build, run, test, bench, lint. Works as root on a fresh Debian 12.
CARGO ?= cargo
export PATH := $(HOME)/.cargo/bin:$(PATH)

.PHONY: setup build run test bench lint clean

setup:
	./scripts/setup.sh

build: setup
	$(CARGO) build --release --workspace

run: build
	./target/release/dataplane bench raw configs/sw_loopback.yaml --seconds 5

test: setup
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) test --workspace --release
	./scripts/smoke.sh

bench: build
	./scripts/bench.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
