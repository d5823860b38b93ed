#!/usr/bin/env bash
# Debian 13 (trixie) roots for the aarch64 cross build and the DPDK 24.11 build, made with
# debootstrap from Debian's own packages and reused while complete.
#   scripts/trixie-root.sh amd64|cross     (under $DATAPLANE_CACHE, default /var/cache/dataplane)
# amd64: Rust from trixie-backports, clang, DPDK 24.11 and rdma-core development packages.
# cross: the same Rust with the arm64 standard library, the aarch64 cross compiler,
#        qemu-user, and the arm64 DPDK 24.11 and rdma-core development packages.
# (Two roots: rdma-core, which DPDK's mlx drivers depend on, cannot be installed for both
# architectures at once.) Needs root. Prints the root's path on its last line.
set -euo pipefail
role=${1:?usage: scripts/trixie-root.sh amd64|cross}
cache=${DATAPLANE_CACHE:-/var/cache/dataplane}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
base=$cache/trixie-base
root=$cache/trixie-$role
step() { echo "trixie-root: $*" >&2; }
fail() { echo "trixie-root: FAILED at: $*" >&2; exit 1; }
case $role in
  amd64)
    pkgs="build-essential pkg-config cmake clang libclang-dev git python3 libdpdk-dev dpdk libibverbs-dev librdmacm-dev"
    rust="rustc cargo libstd-rust-dev" ;;
  cross)
    pkgs="build-essential pkg-config cmake clang libclang-dev git python3 qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross libc6-dev:arm64 libdpdk-dev:arm64 libibverbs-dev:arm64 librdmacm-dev:arm64"
    rust="rustc cargo libstd-rust-dev libstd-rust-dev:arm64" ;;
  *) fail "unknown role $role (amd64 or cross)" ;;
esac
stamp="$root/.dataplane-root-v2"
if [ -e "$stamp" ]; then
  step "reusing $root"
  echo "$root"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || fail "needs root (debootstrap, chroot)"
mkdir -p "$cache/apt-archives/partial"
if [ ! -e "$base/.dataplane-base-v1" ]; then
  command -v debootstrap >/dev/null || {
    step "installing debootstrap"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  } || fail "installing debootstrap"
  rm -rf "$base"
  mkdir -p "$base"
  step "debootstrap trixie into $base"
  debootstrap --variant=minbase --include=ca-certificates trixie "$base" "$mirror" > "$cache/debootstrap.log" 2>&1 \
    || { tail -20 "$cache/debootstrap.log" >&2; fail "debootstrap (log: $cache/debootstrap.log)"; }
  cat > "$base/etc/apt/sources.list" <<SRC
deb $mirror trixie main
deb $mirror trixie-updates main
deb $mirror trixie-backports main
SRC
  touch "$base/.dataplane-base-v1"
fi
rm -rf "$root"
step "copying the base into $root"
cp -a "$base" "$root"
# Downloads go to one archive shared by both roots.
mount --bind "$cache/apt-archives" "$root/var/cache/apt/archives"
trap 'umount -l "$root/var/cache/apt/archives" 2>/dev/null || true' EXIT
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root DEBIAN_FRONTEND=noninteractive "$@"; }
log="$cache/apt-$role.log"
step "apt ($role): $pkgs"
[ "$role" = cross ] && { in_root dpkg --add-architecture arm64 || fail "dpkg --add-architecture arm64"; }
in_root apt-get update -qq > "$log" 2>&1 || { tail -20 "$log" >&2; fail "apt-get update (log: $log)"; }
in_root apt-get install -y -qq --no-install-recommends $pkgs >> "$log" 2>&1 \
  || { tail -30 "$log" >&2; fail "apt-get install (log: $log)"; }
step "apt ($role): $rust from trixie-backports"
if [ "$role" = cross ]; then
  # The host's and the target's standard library must be the same build. While the
  # mirror has built a new Rust for one architecture only, no cross root can exist: exit
  # 3 (test-aarch64.sh reports the cross steps as SKIPPED and says why).
  candidate() { in_root apt-cache policy -t trixie-backports "$1" | awk '/Candidate:/ {print $2}'; }
  host_v=$(candidate libstd-rust-dev:amd64) target_v=$(candidate libstd-rust-dev:arm64)
  if [ "$host_v" != "$target_v" ]; then
    echo "trixie-root: SKIPPED: trixie-backports has Rust $host_v for amd64 but $target_v for arm64 (the mirror is between builds); no cross root until they match" >&2
    exit 3
  fi
fi
in_root apt-get install -y -qq --no-install-recommends -t trixie-backports $rust >> "$log" 2>&1 \
  || { tail -30 "$log" >&2; fail "apt-get install Rust from trixie-backports (log: $log)"; }
touch "$stamp"
step "ready: $root, $(in_root rustc --version)"
echo "$root"
