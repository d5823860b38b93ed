#!/usr/bin/env bash
# The Python wheel on the oldest CPython it claims (3.9) and the oldest glibc we build on:
# in a Debian 11 root (debootstrap: CPython 3.9.2, glibc 2.31) the abi3 wheel is built with
# maturin and the machine's own Rust toolchain (mounted read-only), its tests run under 3.9;
# then the same wheel file is installed into `make python-test`'s venv (this machine's
# CPython) and the tests run again. Needs root. The root is kept under $DATAPLANE_CACHE
# (default /var/cache/dataplane) and reused while complete; ROOT_ONLY=1 makes it and stops.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
cache=${DATAPLANE_CACHE:-/var/cache/dataplane}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
root=$cache/bullseye-python
say() { echo "test-python-oldest: $*"; }
fail() { echo "test-python-oldest: FAILED at: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "needs root (debootstrap, chroot)"
t0=$(date +%s)

stamp=$root/.dataplane-root-v1
if [ ! -e "$stamp" ]; then
  command -v debootstrap >/dev/null || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  } || fail "installing debootstrap"
  rm -rf "$root"
  mkdir -p "$root"
  say "debootstrap bullseye into $root"
  debootstrap --variant=minbase --include=ca-certificates,python3,python3-venv,gcc,libc6-dev \
    bullseye "$root" "$mirror" > "$cache/debootstrap-bullseye.log" 2>&1 \
    || { tail -20 "$cache/debootstrap-bullseye.log" >&2; fail "debootstrap (log: $cache/debootstrap-bullseye.log)"; }
  touch "$stamp"
fi
# ROOT_ONLY=1: only the root (scripts/test.sh makes it in the background).
[ "${ROOT_ONLY:-}" = 1 ] && { say "root ready: $root"; exit 0; }

# The machine's Rust toolchain: rustup's builds need only glibc 2.17, so they run in the root.
toolchain=$(dirname "$(dirname "$(rustup which cargo)")") || fail "finding the Rust toolchain"
registry=${CARGO_HOME:-$HOME/.cargo}/registry
mkdir -p "$registry"
mounted=()
cleanup() { for m in "${mounted[@]}"; do umount -l "$m" 2>/dev/null || true; done; }
trap cleanup EXIT
mkdir -p "$root/toolchain" "$root/root/.cargo/registry" "$root/wheels"
mount --bind -o ro "$toolchain" "$root/toolchain" && mounted=("$root/toolchain" "${mounted[@]}")
mount --bind "$registry" "$root/root/.cargo/registry" && mounted=("$root/root/.cargo/registry" "${mounted[@]}")
mount --bind /dev "$root/dev" && mounted=("$root/dev" "${mounted[@]}")
mount -t proc proc "$root/proc" && mounted=("$root/proc" "${mounted[@]}")
# A copy of the working tree (tracked and untracked, not ignored files).
rm -rf "$root/src" "$root/wheels"/*
mkdir -p "$root/src"
git ls-files -z -co --exclude-standard | tar -cf - --null -T - | tar -xf - -C "$root/src" \
  || fail "copying the working tree into the root"
# This machine's certificate authorities, for pip (a registry behind a proxy may need them).
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/host-ca.crt" 2>/dev/null || true
in_root() {
  chroot "$root" /usr/bin/env -i PATH=/venv/bin:/toolchain/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_CERT=/etc/ssl/certs/host-ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 HOME=/root CARGO_HOME=/root/.cargo CARGO_TARGET_DIR=/target CARGO_TERM_COLOR=never \
    CARGO_PROFILE_RELEASE_DEBUG=0 "$@"
}
say "$(in_root python3 --version), $(in_root ldd --version | head -n 1), $(in_root rustc --version)"
if [ ! -x "$root/venv/bin/pytest" ]; then
  in_root python3 -m venv /venv || fail "python3 -m venv in the root"
  in_root pip install -q --upgrade pip || fail "pip upgrade in the root"
  in_root pip install -q maturin numpy pytest || fail "pip install maturin numpy pytest in the root"
fi
t=$(date +%s)
in_root sh -c 'cd /src/python && maturin build --release -q -o /wheels' || fail "maturin build under CPython 3.9"
wheel=$(ls "$root"/wheels/dataplane_gpudirect-*.whl)
say "built $(basename "$wheel") ($(( $(date +%s) - t )) s)"
in_root sh -c 'pip install -q --force-reinstall /wheels/dataplane_gpudirect-*.whl' || fail "pip install of the wheel under CPython 3.9"
in_root sh -c 'cd /src && python -m pytest -q -rs -p no:cacheprovider python/tests' || fail "python tests under CPython 3.9"
# The same file on this machine's CPython.
mkdir -p target/wheels-oldest
rm -f target/wheels-oldest/*.whl
cp "$wheel" target/wheels-oldest/
pyenv=target/pyenv
[ -x $pyenv/bin/pip ] || python3 -m venv $pyenv
$pyenv/bin/pip install -q maturin numpy pytest || fail "pip install in $pyenv"
$pyenv/bin/pip install -q --force-reinstall target/wheels-oldest/dataplane_gpudirect-*.whl || fail "pip install of the 3.9 wheel here"
say "the same wheel under $($pyenv/bin/python --version)"
$pyenv/bin/python -m pytest -q -rs -p no:cacheprovider python/tests || fail "python tests here with the wheel built under 3.9"
say "passed ($(( $(date +%s) - t0 )) s)"
