#!/usr/bin/env bash
# `make test`: every check, in named steps, each timed, with a table of times at the end.
#   STEPS="tests c-api" runs only those (default: all, in the order below).
#   FEATURES (default `--features dataplane-cli/dpdk`): the workspace's features.
# One release build serves everything after `tests`: cargo test builds the examples, the
# binary and libdataplane_c with the workspace's features, so those steps run what it built
# instead of building the crates again with the features of a smaller selection.
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
FEATURES=${FEATURES---features dataplane-cli/dpdk}
export FEATURES
all="fmt clippy clippy-default tests examples c-api memcheck gpu-kernels python book embed loom smoke tapflow-vm pci-vm rdma-vm aarch64 python-aarch64"
# Asked for by name only (too slow for every run): the container recipe built and run.
optional="container"
# The steps build about 70 test binaries, each linking the whole library: mold (installed
# by setup) links them several times faster than ld. Only this machine's own target (the
# cross builds and the roots' builds keep their linkers), and for every step alike, so one
# build serves them all.
if command -v mold >/dev/null && [ -z "${RUSTFLAGS:-}" ]; then
  host=$(rustc -vV | sed -n 's/^host: //p' | tr 'a-z-' 'A-Z_')
  export "CARGO_TARGET_${host}_RUSTFLAGS=-C link-arg=-fuse-ld=mold"
fi
steps=${STEPS:-$all}
unset STEPS # test-aarch64.sh has steps of its own
times=()
t0=$(date +%s)
summary() {
  echo "make test: step times"
  local line
  for line in "${times[@]}"; do echo "  $line"; done
  echo "  total $(( $(date +%s) - t0 )) s"
}
run_step() { # run_step NAME: runs that step, timed; stops with its name on failure
  local name=$1 start rc=0
  start=$(date +%s)
  echo "make test: == $name"
  # In a subshell with errexit of its own: called as `step || rc=$?`, bash would ignore
  # `set -e` inside the step, and a failing command before its last would pass unseen.
  set +e
  (set -e; "step_${name//-/_}")
  rc=$?
  set -e
  times+=("$(printf '%-15s %5d s' "$name" $(( $(date +%s) - start )))")
  if [ $rc -ne 0 ]; then
    summary
    echo "make test: FAILED at: $name (exit $rc)" >&2
    exit $rc
  fi
}

# The Debian roots of the aarch64 and python steps (debootstrap, apt: mostly waiting on the
# mirror and the disk) are made in the background from the start, while the first steps
# compile; those steps wait for them (the lock) and print what it did. A root that could
# not be made there is made, or reported, by its step as before.
cache=${DATAPLANE_CACHE:-/var/cache/dataplane}
prefetch_log=
start_prefetch() {
  case " $steps " in *" aarch64 "* | *" python "*) ;; *) return 0 ;; esac
  [ "$(id -u)" -eq 0 ] || return 0
  mkdir -p "$cache"
  prefetch_log=$(mktemp)
  # Locked here, before the job starts, so a step cannot miss it; the job keeps the lock
  # (the same open file) until it ends.
  exec 9>"$cache/roots.lock"
  flock 9
  (
    case " $steps " in *" aarch64 "*) scripts/trixie-root.sh amd64 || true; scripts/trixie-root.sh cross || true ;; esac
    case " $steps " in *" python "*) ROOT_ONLY=1 scripts/test-python-oldest.sh || true ;; esac
  ) >"$prefetch_log" 2>&1 &
  prefetch_pid=$!
  exec 9>&-
  # A run that stops early still waits for it: no debootstrap left behind.
  trap 'wait "$prefetch_pid" 2>/dev/null || true; rm -f "$prefetch_log" "$prefetch_log.shown"' EXIT
}
wait_for_prefetch() {
  [ -n "$prefetch_log" ] || return 0
  flock "$cache/roots.lock" true
  [ -e "$prefetch_log.shown" ] && return 0
  echo "make test: the roots made in the background:"
  sed 's/^/  /' "$prefetch_log"
  touch "$prefetch_log.shown"
}
step_fmt() { $CARGO fmt --all -- --check; }
# shellcheck disable=SC2086 # FEATURES is a list of words
step_clippy() { $CARGO clippy --workspace --all-targets $FEATURES -- -D warnings; }
step_clippy_default() { $CARGO clippy --workspace --all-targets -- -D warnings; }
# shellcheck disable=SC2086
step_tests() {
  # spead2 is installed by setup: its interoperability tests must run, not skip.
  DATAPLANE_REQUIRE_SPEAD2=1 $CARGO test --workspace --release $FEATURES
  # cargo test leaves the C library among its dependencies' outputs; put it where
  # `cargo build` would (a hard link, as cargo makes), for the C programs below.
  ln -f target/release/deps/libdataplane_c.so target/release/libdataplane_c.so
}
# The embedding examples (dataplane/examples) run and check themselves.
step_examples() {
  local e
  for e in receive_loop transmit_loop steering gpu_region; do
    ./target/release/examples/$e || return 1
  done
}
# The C API, as a user links it: installed (scripts/install-c.sh, what `make install` runs)
# into target/c-prefix, the examples built with pkg-config's flags against the installed
# header and library (its soname checked) and run: the loopback end to end, every segment,
# flow id and timestamp of split packets, the thread-safety contract from several
# threads, and a handler on the worker's core (run to completion). The header being
# current is a test above.
step_c_api() {
  local prefix=$PWD/target/c-prefix
  rm -rf "$prefix"
  ./scripts/install-c.sh target/release/libdataplane_c.so "$prefix"
  local flags
  read -ra flags <<< "$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs dataplane)"
  local c=(cc -O2 -Wall -Wextra -Werror) link=("${flags[@]}" -Wl,-rpath,"$prefix/lib")
  local e
  for e in loopback packets threads handler; do
    "${c[@]}" -pthread capi/examples/$e.c "${link[@]}" -o target/c-$e
    readelf -d target/c-$e | grep 'NEEDED.*\[libdataplane_c\.so\.[0-9]' >/dev/null \
      || { echo "target/c-$e does not link libdataplane_c by its soname" >&2; return 1; }
    ./target/c-$e
  done
}
# Both C programs under valgrind, with the unsafe-heavy crates' unit tests.
step_memcheck() { ./scripts/memcheck.sh; }
# The GPU kernels compile with NVIDIA's runtime compiler (from PyPI) even without a GPU.
step_gpu_kernels() {
  LD_LIBRARY_PATH=$(./scripts/nvrtc.sh) DATAPLANE_REQUIRE_NVRTC=1 \
    $CARGO test --release -p gpudirect kernels::tests
}
# The wheel built on CPython 3.9 and glibc 2.31 (a Debian 11 root), its tests there and
# here (target/pyenv), then the Python benchmark for a second, the stubs, and a wheel
# with DPDK and RDMA built here. `make python-test` builds
# a wheel here instead; the same tests run on this one.
step_python() {
  wait_for_prefetch
  ./scripts/test-python-oldest.sh
  target/pyenv/bin/python examples/python/bench_raw.py configs/sw_loopback.yaml --seconds 1
  # The type stubs the wheel ships (python/dataplane.pyi) against the module itself.
  target/pyenv/bin/pip install -q mypy
  target/pyenv/bin/python -m mypy.stubtest dataplane --allowlist python/stubtest-allowlist.txt
  # A wheel with DPDK and RDMA built against this machine's libraries (as a user builds
  # one; not repaired into a portable wheel): its DPDK test runs, then every other test.
  rm -rf target/wheels-dpdk
  (cd python && ../target/pyenv/bin/maturin build --release -q --features dpdk,rdma \
    --auditwheel skip -o ../target/wheels-dpdk)
  target/pyenv/bin/pip install -q --force-reinstall target/wheels-dpdk/dataplane_gpudirect-*.whl
  target/pyenv/bin/python -m pytest -q -rs -p no:cacheprovider python/tests
}
# The front page's and the book's sh, C, Python and YAML blocks (Rust ones ran as doctests).
step_book() { ./scripts/book-check.sh; }
step_embed() { ./scripts/embed-check.sh; }
step_loom() { ./scripts/loom.sh; }
step_smoke() { ./scripts/smoke.sh; }
step_tapflow_vm() { ./scripts/tapflow-vm.sh; }
# The PCI path: two emulated 82576 NICs behind an emulated IOMMU, bound to vfio-pci.
step_pci_vm() { ./scripts/pci-vm.sh; }
step_rdma_vm() { ./scripts/rdma-vm-tests.sh; }
# aarch64 cross build and emulated tests, DPDK 24.11 build and tests (Debian 13 roots).
step_aarch64() {
  wait_for_prefetch
  ./scripts/test-aarch64.sh
}
# The aarch64 Python wheel, cross-built and tested under qemu-aarch64.
step_python_aarch64() { ./scripts/test-python-aarch64.sh; }
step_container() { ./scripts/container-check.sh; }

for s in $steps; do
  case " $all $optional " in *" $s "*) ;; *) echo "make test: unknown step $s (steps: $all; by name: $optional)" >&2; exit 2 ;; esac
done
start_prefetch
for s in $steps; do run_step "$s"; done
summary
