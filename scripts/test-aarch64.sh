#!/usr/bin/env bash
# `make test-aarch64`: in a Debian 13 root (scripts/trixie-root.sh), with Debian's Rust
# from trixie-backports:
#   1. the DPDK bindings and engine built for x86_64 against DPDK 24.11, and the DPDK
#      tests run there;
#   2. the workspace cross-built for aarch64-unknown-linux-gnu with the `dpdk` feature;
#   3. the unit tests and the software-loopback integration tests run under qemu-aarch64.
# Every step prints its time; a failure names its step. Needs root.
#   STEPS="dpdk2411 cross qemu" (default: all three), DATAPLANE_CACHE (the root's parent).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
steps=${STEPS:-dpdk2411 cross qemu}
t0=$(date +%s)
registry=${CARGO_HOME:-$HOME/.cargo}/registry
mkdir -p "$registry"
mounted=()
cleanup() { for m in "${mounted[@]}"; do umount -l "$m" 2>/dev/null || true; done; }
trap cleanup EXIT
# prepare ROLE: makes (or reuses) the trixie root of ROLE and mounts the repository, the
# cargo registry, /proc, /sys and /dev into it; sets `root`.
declare -A roots=()
prepare() {
  if [ -n "${roots[$1]:-}" ]; then
    root=${roots[$1]}
    return 0
  fi
  local t=$(date +%s)
  root=$(scripts/trixie-root.sh "$1" | tail -n 1) || { echo "test-aarch64: FAILED at: the trixie $1 root" >&2; exit 1; }
  roots[$1]=$root
  echo "test-aarch64: trixie $1 root ready ($(( $(date +%s) - t )) s)"
  # A copy of the working tree (tracked and untracked, not ignored files), so edits made
  # while it builds do not change what is tested; build outputs stay in the root.
  rm -rf "$root/src"
  mkdir -p "$root/src" "$root/root/.cargo/registry"
  (cd "$repo" && git ls-files -z -co --exclude-standard | tar -cf - --null -T -) | tar -xf - -C "$root/src" \
    || { echo "test-aarch64: FAILED at: copying the working tree into the $1 root" >&2; exit 1; }
  local pairs=("$registry" "$root/root/.cargo/registry" /sys "$root/sys" /dev "$root/dev")
  for ((i = 0; i < ${#pairs[@]}; i += 2)); do
    mount --bind "${pairs[i]}" "${pairs[i+1]}" && mounted=("${pairs[i+1]}" "${mounted[@]}")
  done
  [ -d /dev/shm ] && mount --bind /dev/shm "$root/dev/shm" && mounted=("$root/dev/shm" "${mounted[@]}")
  mount -t proc proc "$root/proc" && mounted=("$root/proc" "${mounted[@]}")
}
in_root() {
  # No debug info: it is most of a target folder's size, and nothing here reads it.
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
    CARGO_TERM_COLOR=never CARGO_HOME=/root/.cargo \
    CARGO_PROFILE_DEV_DEBUG=0 CARGO_PROFILE_RELEASE_DEBUG=0 "$@"
}
cross_env=(
  CARGO_TARGET_DIR=/target/aarch64
  PKG_CONFIG_ALLOW_CROSS=1
  PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
  CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER=qemu-aarch64
)
step() { # step NAME COMMAND...: runs it, timed; stops with the step's name on failure
  local name=$1 start
  shift
  start=$(date +%s)
  echo "test-aarch64: == $name"
  if ! "$@"; then
    echo "test-aarch64: FAILED at: $name ($(( $(date +%s) - start )) s)" >&2
    exit 1
  fi
  echo "test-aarch64: ok: $name ($(( $(date +%s) - start )) s)"
}
for s in $steps; do
  case $s in
    dpdk2411)
      prepare amd64
      echo "test-aarch64: $(in_root rustc --version), DPDK $(in_root pkg-config --modversion libdpdk)"
      step "x86_64 build against DPDK 24.11 (bindings, engine, DPDK tests)" in_root sh -c 'cd /src && CARGO_TARGET_DIR=/target/amd64 cargo build -p dpdk-sys -p dataplane -p dataplane-bench -p dataplane-cli --features dataplane-cli/dpdk --bins --test dpdk_ring --test dpdk_memif --test dpdk_ring_zero_copy --test dpdk_ring_flows --test dpdk_bad_address'
      step "DPDK tests against 24.11 (net_ring, memif, zero copy, flows)" in_root sh -c 'cd /src && CARGO_TARGET_DIR=/target/amd64 cargo test -p dataplane -p dataplane-bench -p dataplane-cli --features dataplane-cli/dpdk --test dpdk_ring --test dpdk_memif --test dpdk_ring_zero_copy --test dpdk_ring_flows --test dpdk_bad_address -- --test-threads=1'
      ;;
    cross)
      prepare cross
      echo "test-aarch64: $(in_root rustc --version), DPDK $(in_root env PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig pkg-config --modversion libdpdk) for aarch64"
      step "aarch64 cross build (workspace, dpdk feature)" in_root env "${cross_env[@]}" sh -c 'cd /src && cargo build --release --workspace --target aarch64-unknown-linux-gnu --features dataplane-cli/dpdk --tests --bins'
      ;;
    qemu)
      prepare cross
      step "aarch64 unit tests under qemu-aarch64" in_root env "${cross_env[@]}" sh -c 'cd /src && cargo test --release --target aarch64-unknown-linux-gnu --features dataplane/dpdk -p dataplane-ring -p gpudirect -p dataplane --lib'
      step "aarch64 software-loopback tests under qemu-aarch64" in_root env "${cross_env[@]}" sh -c 'cd /src && cargo test --release --target aarch64-unknown-linux-gnu --features dataplane/dpdk,dataplane-bench/dpdk -p dataplane -p dataplane-bench --test loopback --test steering --test reorder --test soundness --test embedding --test metrics'
      ;;
    *) echo "test-aarch64: unknown step $s (dpdk2411, cross, qemu)" >&2; exit 2 ;;
  esac
done
echo "test-aarch64: all steps passed ($(( $(date +%s) - t0 )) s)"
