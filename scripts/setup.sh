#!/usr/bin/env bash
# Installs what building and testing need on Debian 12 (as root; skipped when present).
set -euo pipefail
need=()
command -v cc >/dev/null || need+=(build-essential)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v python3 >/dev/null || need+=(python3)
# venv with pip for the Python package's tests (make python-test).
python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
# Network namespaces for the veth tests; iperf3 for scripts/bench-vs-iperf.sh.
command -v ip >/dev/null || need+=(iproute2)
command -v iperf3 >/dev/null || need+=(iperf3)
# tcpdump reads the capture tests' pcap files back (an independent reader).
command -v tcpdump >/dev/null || need+=(tcpdump)
# DPDK 22.11 for the dpdk-sys crate (bindings generated against it with libclang).
pkg-config --exists libdpdk 2>/dev/null || need+=(dpdk libdpdk-dev)
command -v dpdk-test >/dev/null || need+=(dpdk-dev)
# sideway (RDMA) builds its vendored rdma-core headers with cmake; it loads libibverbs and
# librdmacm at run time.
command -v cmake >/dev/null || need+=(cmake)
# Memory checking of the C API examples and the unsafe-heavy crates' tests.
command -v valgrind >/dev/null || need+=(valgrind)
# qemu-aarch64 runs the aarch64 Python wheel's tests (scripts/test-python-aarch64.sh).
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
# A TrueType font for the text of `dataplane plot`.
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
# mold links the test binaries (scripts/test.sh; about 70 of them) faster than ld.
command -v mold >/dev/null || need+=(mold)
[ -e /usr/lib/llvm-14/lib/libclang.so ] || ls /usr/lib/x86_64-linux-gnu/libclang*.so >/dev/null 2>&1 || need+=(libclang-dev)
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing ${need[*]}; run as root or install them" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
# promtool (from Debian's prometheus package, without its recommended daemons) lints the
# metrics endpoint and the dashboard's queries in tests/metrics.rs.
if ! command -v promtool >/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing promtool (apt-get install prometheus); the metrics lint skips" >&2
  else
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus
  fi
fi
# spead2 (from PyPI) in a venv of its own: the SPEAD tests (dataplane/tests/spead_spead2.rs)
# run its sender and receiver against ours.
spead2_venv=${DATAPLANE_CACHE:-/var/cache/dataplane}/spead2-venv
if ! "$spead2_venv/bin/python" -c 'import spead2, numpy' 2>/dev/null; then
  if mkdir -p "$(dirname "$spead2_venv")" 2>/dev/null && python3 -m venv "$spead2_venv" \
    && "$spead2_venv/bin/pip" install -q spead2 numpy; then
    echo "setup: spead2 $("$spead2_venv/bin/python" -c 'import spead2; print(spead2.__version__)') in $spead2_venv"
  else
    echo "setup: could not install spead2 into $spead2_venv; the SPEAD interoperability tests skip" >&2
  fi
fi
if ! command -v cargo >/dev/null; then
  echo "setup: installing the Rust toolchain with rustup" >&2
  command -v curl >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl ca-certificates; }
  # rustup-init from Rust's own distribution server (what sh.rustup.rs downloads too; that
  # name does not resolve on every network that reaches static.rust-lang.org).
  curl -sSf "https://static.rust-lang.org/rustup/dist/$(uname -m)-unknown-linux-gnu/rustup-init" -o /tmp/rustup-init
  chmod +x /tmp/rustup-init
  /tmp/rustup-init -y --profile minimal --component clippy,rustfmt
  rm -f /tmp/rustup-init
  export PATH="$HOME/.cargo/bin:$PATH"
fi
rustup component list --installed 2>/dev/null | grep -q clippy || rustup component add clippy rustfmt 2>/dev/null || true
