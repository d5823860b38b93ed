#!/usr/bin/env bash
# The Python wheel for aarch64 (DGX Spark and other Arm servers), built and tested under
# emulation: maturin cross-builds the manylinux2014 aarch64 wheel with zig as the linker
# (the Rust aarch64 standard library from rustup), then Debian 12's aarch64 CPython 3.11,
# unpacked from its packages into a folder, runs python/tests under qemu-aarch64 with the
# wheel, NumPy's and pytest's aarch64 wheels installed for it. Root on Debian 12 (adds
# the arm64 architecture to apt to download those packages; installs nothing of them).
#   Outputs: target/wheels-aarch64/*.whl; the Python root is kept in target/aarch64-python.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
say() { echo "test-python-aarch64: $*"; }
fail() { echo "test-python-aarch64: FAILED at: $*" >&2; exit 1; }
pyenv=target/pyenv
[ -x $pyenv/bin/pip ] || python3 -m venv $pyenv
$pyenv/bin/pip install -q maturin ziglang || fail "pip install maturin ziglang"
command -v rustup >/dev/null && { rustup target add aarch64-unknown-linux-gnu >/dev/null || fail "rustup target add aarch64-unknown-linux-gnu"; }
command -v qemu-aarch64 >/dev/null || fail "qemu-aarch64 missing (apt-get install qemu-user)"

t=$(date +%s)
rm -rf target/wheels-aarch64
(cd python && PATH=$PWD/../$pyenv/bin:$PATH CARGO_PROFILE_RELEASE_DEBUG=0 \
  ../$pyenv/bin/maturin build --release -q --target aarch64-unknown-linux-gnu --zig -o ../target/wheels-aarch64) \
  || fail "maturin build --target aarch64-unknown-linux-gnu --zig"
wheel=$(ls target/wheels-aarch64/dataplane_gpudirect-*aarch64*.whl)
say "built $(basename "$wheel") ($(( $(date +%s) - t )) s)"

# CPython for aarch64: Debian's own packages, unpacked (not installed) into a folder that
# qemu-aarch64 takes as the root of library lookups.
root=target/aarch64-python
if [ ! -x "$root/usr/bin/python3.11" ]; then
  dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
  apt-get update -qq || fail "apt-get update (arm64)"
  debs=$(mktemp -d)
  (cd "$debs" && apt-get download -q=2 python3.11-minimal:arm64 libpython3.11-minimal:arm64 \
    libpython3.11-stdlib:arm64 libc6:arm64 zlib1g:arm64 libexpat1:arm64 libffi8:arm64 \
    libssl3:arm64 libbz2-1.0:arm64 liblzma5:arm64 libgcc-s1:arm64 libstdc++6:arm64 \
    libuuid1:arm64 libsqlite3-0:arm64 libncursesw6:arm64 libtinfo6:arm64 libreadline8:arm64 \
    libcrypt1:arm64 libnsl2:arm64 libtirpc3:arm64 libdb5.3:arm64) 2>/dev/null \
    || fail "apt-get download of the arm64 Python packages"
  rm -rf "$root"
  mkdir -p "$root"
  for d in "$debs"/*.deb; do dpkg -x "$d" "$root"; done
  rm -rf "$debs"
fi
py() { qemu-aarch64 -L "$root" "$root/usr/bin/python3.11" "$@"; }
say "$(py -c 'import platform, sys; print("CPython", sys.version.split()[0], "on", platform.machine())')"
site=target/aarch64-python-site
rm -rf "$site"
$pyenv/bin/pip install -q --target "$site" --platform manylinux2014_aarch64 \
  --platform manylinux_2_17_aarch64 --python-version 3.11 --implementation cp \
  --only-binary=:all: numpy pytest "$wheel" || fail "pip install --target (aarch64 wheels)"
t=$(date +%s)
PYTHONPATH=$site py -m pytest -q -rs -p no:cacheprovider python/tests \
  || fail "python tests under qemu-aarch64"
say "tests under qemu-aarch64 passed ($(( $(date +%s) - t )) s); all $(( $(date +%s) - t0 )) s"
