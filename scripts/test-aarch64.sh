#!/usr/bin/env bash
# `make test-aarch64`: in a Debian 13 root (scripts/trixie-root.sh), with Debian's Rust
# from trixie-backports:
#   1. the DPDK bindings and engine built for x86_64 against DPDK 24.11, and the DPDK
#      tests run there;
#   2. the workspace cross-built for aarch64-unknown-linux-gnu with the `dpdk` feature:
#      every crate's library and binary, as the unit-test executables that hold them, and
#      the integration tests step 3 runs (not the other integration tests: none of them
#      runs on aarch64, and their link steps were half of the build);
#   3. the unit tests and the software-loopback integration tests of that build run under
#      qemu-aarch64.
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
  [ "${roots[$1]:-}" = skipped ] && return 3
  if [ -n "${roots[$1]:-}" ]; then
    root=${roots[$1]}
    return 0
  fi
  local t=$(date +%s)
  local rc=0
  root=$(scripts/trixie-root.sh "$1" | tail -n 1) || rc=$?
  # 3: the mirror cannot make this root now (trixie-root.sh said why): the steps that
  # need it are skipped, visibly.
  [ "$rc" -eq 3 ] && { roots[$1]=skipped; return 3; }
  [ "$rc" -eq 0 ] || { echo "test-aarch64: FAILED at: the trixie $1 root" >&2; exit 1; }
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
# The cross build's release profile at opt-level 1 and 16 codegen units: the workspace's
# crates rebuilt in 156 s against 172 s at opt-level 3 with 4 units on two cores, and the
# emulated tests run the same code paths (x86_64 tests the release profile itself).
cross_env=(
  CARGO_PROFILE_RELEASE_OPT_LEVEL=1
  CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
  CARGO_TARGET_DIR=/target/aarch64
  PKG_CONFIG_ALLOW_CROSS=1
  PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
  CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER=qemu-aarch64
)
# The integration tests the qemu step runs (package test targets; unit tests: all).
cross_integration_tests="loopback steering reorder soundness embedding metrics"
cross_build="cargo test --no-run --release --workspace --target aarch64-unknown-linux-gnu --features dataplane-cli/dpdk --lib --bins $(printf -- '--test %s ' $cross_integration_tests)"
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
# cross_build_listing: runs the cross build (again: cargo only reports when it is
# current) and writes "KIND NAME PACKAGE_DIR EXECUTABLE" for every test executable it made
# to $cross_tests; compiler messages go to stderr as usual.
cross_tests=
cross_build_listing() {
  cross_tests=$(mktemp)
  in_root env "${cross_env[@]}" sh -c "cd /src && $cross_build --message-format=json-render-diagnostics" |
    python3 -c 'import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        kind = m["target"]["kind"][0]
        kind = "test" if kind == "test" else "lib" if kind in ("lib", "rlib", "cdylib", "staticlib") else kind
        print(kind, m["target"]["name"], os.path.dirname(m["manifest_path"]), m["executable"])' >"$cross_tests"
  [ -s "$cross_tests" ] || { echo "test-aarch64: the cross build reported no test executables" >&2; return 1; }
}
# run_cross_tests KIND NAME...: runs the named test executables of that kind under qemu.
run_cross_tests() {
  local kind=$1 name found dir exe
  shift
  for name in "$@"; do
    found=0
    while read -r k n dir exe; do
      [ "$k" = "$kind" ] && [ "$n" = "$name" ] || continue
      found=1
      echo "test-aarch64: $kind $name ($dir)"
      in_root sh -c "cd $dir && qemu-aarch64 $exe" || return 1
    done <"$cross_tests"
    [ $found = 1 ] || { echo "test-aarch64: no $kind test executable named $name" >&2; return 1; }
  done
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
      prepare cross || { echo "test-aarch64: SKIPPED $s: no cross root (see the trixie-root line above)"; continue; }
      echo "test-aarch64: $(in_root rustc --version), DPDK $(in_root env PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig pkg-config --modversion libdpdk) for aarch64"
      step "aarch64 cross build (workspace, dpdk feature)" cross_build_listing
      ;;
    qemu)
      prepare cross || { echo "test-aarch64: SKIPPED $s: no cross root (see the trixie-root line above)"; continue; }
      # The test executables the cross step built (same packages, features and profile, so
      # cargo rebuilds nothing), run under qemu-aarch64 from their package's folder as
      # `cargo test` would.
      [ -s "$cross_tests" ] || step "aarch64 test executables (cross step's build)" cross_build_listing
      step "aarch64 unit tests under qemu-aarch64" run_cross_tests lib dataplane_ring gpudirect dataplane
      # shellcheck disable=SC2086 # a list of names
      step "aarch64 software-loopback tests under qemu-aarch64" run_cross_tests test $cross_integration_tests
      ;;
    *) echo "test-aarch64: unknown step $s (dpdk2411, cross, qemu)" >&2; exit 2 ;;
  esac
done
echo "test-aarch64: all steps passed ($(( $(date +%s) - t0 )) s)"
