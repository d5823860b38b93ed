# dataplane: setup, build, run, test, bench, lint. Works as root on a fresh Debian 12.
CARGO ?= cargo
export PATH := $(HOME)/.cargo/bin:$(PATH)
# The DPDK engine is built and tested too (setup installs DPDK); `make build FEATURES=`
# builds without it (for hosts without DPDK's shared libraries). The command line's `dpdk`
# feature turns on the library's and the benches'; LIB_FEATURES is the same for commands
# that select only the library or a crate below the command line.
FEATURES ?= --features dataplane-cli/dpdk
LIB_FEATURES ?= $(subst dataplane-cli/,dataplane/,$(FEATURES))

.PHONY: setup build run test test-aarch64 python-test bench lint clean

setup:
	./scripts/setup.sh

build: setup
	$(CARGO) build --release --workspace $(FEATURES)

run: build
	./target/release/dataplane bench raw configs/sw_loopback.yaml --seconds 5

test: setup
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets $(FEATURES) -- -D warnings
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) test --workspace --release $(FEATURES)
	# The embedding examples (dataplane/examples) run and check themselves.
	for e in receive_loop transmit_loop steering gpu_region; do \
		$(CARGO) run --release -q $(LIB_FEATURES) -p dataplane --example $$e || exit 1; done
	# The C API: the header is current (a test above), the C example builds and runs.
	$(CARGO) build --release $(LIB_FEATURES) -p dataplane-c
	$(CC) -O2 -Wall -Wextra -Werror -I capi/include capi/examples/loopback.c \
		-L target/release -ldataplane_c -Wl,-rpath,$(CURDIR)/target/release -o target/c-loopback
	./target/c-loopback
	# Its thread-safety contract from several threads, then both under valgrind, with
	# the unsafe-heavy crates' unit tests.
	$(CC) -O2 -Wall -Wextra -Werror -pthread -I capi/include capi/examples/threads.c \
		-L target/release -ldataplane_c -Wl,-rpath,$(CURDIR)/target/release -o target/c-threads
	./target/c-threads
	./scripts/memcheck.sh
	# The GPU kernels compile with NVIDIA's runtime compiler (from PyPI) even without a GPU.
	LD_LIBRARY_PATH=$$(./scripts/nvrtc.sh) DATAPLANE_REQUIRE_NVRTC=1 $(CARGO) test --release -p gpudirect kernels::tests
	$(MAKE) python-test
	# The front page's and the book's sh, C, Python and YAML blocks (Rust ones ran as doctests).
	./scripts/book-check.sh
	# The same package on CPython 3.9 and glibc 2.31 (a Debian 11 root), then that wheel here.
	./scripts/test-python-oldest.sh
	./scripts/embed-check.sh
	./scripts/loom.sh
	./scripts/smoke.sh
	./scripts/tapflow-vm.sh
	./scripts/rdma-vm-tests.sh
	# aarch64 cross build and emulated tests, DPDK 24.11 build and tests (Debian 13 roots).
	./scripts/test-aarch64.sh

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
	$(PYENV)/bin/pip install -q --force-reinstall target/wheels/dataplane-*.whl
	$(PYENV)/bin/python -m pytest -q -rs python/tests
	$(PYENV)/bin/python examples/python/bench_raw.py configs/sw_loopback.yaml --seconds 1

bench: build
	./scripts/bench.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets $(FEATURES) -- -D warnings

clean:
	$(CARGO) clean
