# dataplane: setup, build, run, test, bench, lint. Works as root on a fresh Debian 12.
CARGO ?= cargo
export PATH := $(HOME)/.cargo/bin:$(PATH)
# The DPDK engine is built and tested too (setup installs DPDK); `make build FEATURES=`
# builds without it (for hosts without DPDK's shared libraries). The command line's `dpdk`
# feature turns on the library's and the benches'.
FEATURES ?= --features dataplane-cli/dpdk

.PHONY: setup build run test test-aarch64 python-test bench lint clean capi install

setup:
	./scripts/setup.sh

build: setup
	$(CARGO) build --release --workspace $(FEATURES)

run: build
	./target/release/dataplane bench raw configs/sw_loopback.yaml --seconds 5

# Every check in named, timed steps (scripts/test.sh); `make test STEPS="tests smoke"` runs
# only those.
test: setup
	FEATURES="$(FEATURES)" STEPS="$(STEPS)" ./scripts/test.sh

# aarch64 (DGX Spark) and DPDK 24.11: in Debian 13 roots made with debootstrap, the
# workspace built for x86_64 against DPDK 24.11 with its DPDK tests, cross-built for
# aarch64, and its unit and software-loopback tests run under qemu-aarch64.
test-aarch64: setup
	./scripts/test-aarch64.sh

# The Python package: a wheel built with maturin in a venv made from PyPI, its tests, and
# the Python benchmark for a second.
PYENV := target/pyenv
python-test: setup
	[ -x $(PYENV)/bin/pip ] || python3 -m venv $(PYENV)
	$(PYENV)/bin/pip install -q maturin numpy pytest
	rm -rf target/wheels
	cd python && ../$(PYENV)/bin/maturin build --release -q -o ../target/wheels
	$(PYENV)/bin/pip install -q --force-reinstall target/wheels/dataplane_gpudirect-*.whl
	$(PYENV)/bin/python -m pytest -q -rs python/tests
	$(PYENV)/bin/python examples/python/bench_raw.py configs/sw_loopback.yaml --seconds 1

# The C library (capi/): `make install PREFIX=/opt/dataplane` builds libdataplane_c.so and
# installs it with its soname, dataplane.h and a pkg-config file (`pkg-config --cflags
# --libs dataplane`); DESTDIR stages it. CAPI_FEATURES= builds it without DPDK.
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
CAPI_FEATURES ?= --features dataplane-c/dpdk
capi: setup
	$(CARGO) build --release -p dataplane-c $(CAPI_FEATURES)

install: capi
	./scripts/install-c.sh target/release/libdataplane_c.so "$(PREFIX)" "$(LIBDIR)" "$(INCLUDEDIR)"

bench: build
	./scripts/bench.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets $(FEATURES) -- -D warnings

clean:
	$(CARGO) clean
