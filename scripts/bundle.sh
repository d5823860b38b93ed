#!/usr/bin/env bash
# Packs `dataplane` (and dpdk-testpmd, for scripts/bench-vs-testpmd.sh) with the DPDK
# libraries and drivers they load into one folder, for an x86_64 Linux machine without
# DPDK installed (glibc 2.36 or newer). Stripped. Use on that machine:
#   . BUNDLE/env.sh      # PATH, LD_LIBRARY_PATH, and DATAPLANE_EAL_ARGS loading the drivers
#   dataplane bench raw configs/dpdk_ring.yaml
# Usage: scripts/bundle.sh OUT [BINARY...]   (default: target/release/dataplane and the
# criterion classifier bench if built). Drivers: net_ring, net_memif, net_null, the ring
# mempool and the vdev bus (PMDS to change).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/bundle.sh OUT [BINARY...]}
shift
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(target/release/dataplane)
pmds=${PMDS:-bus_vdev mempool_ring net_ring net_memif net_null}
pmd_dir=$(pkg-config --variable=pmdsdir libdpdk 2>/dev/null || true)
[ -n "$pmd_dir" ] || pmd_dir=$(ls -d /usr/lib/*-linux-gnu/dpdk/pmds-* 2>/dev/null | head -n 1)
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
plugins=()
for p in $pmds; do
  f=$(ls "$pmd_dir"/librte_"$p".so.* 2>/dev/null | head -n 1)
  [ -n "$f" ] || { echo "bundle: no driver $p in $pmd_dir" >&2; exit 1; }
  cp -L "$f" "$out/lib/"
  plugins+=("$out/lib/$(basename "$f")")
done
for b in "${bins[@]}"; do
  # `cargo bench` or a plain `cargo build` rebuild the binary without DPDK.
  # (grep reads all of ldd's output: with pipefail, `grep -q` closing early fails the pipe.)
  if [ "$(basename "$b")" = dataplane ] && ! ldd "$b" | grep librte_eal >/dev/null; then
    echo "bundle: $b was built without the dpdk feature (cargo build --release --features dpdk)" >&2
    exit 1
  fi
  cp -L "$b" "$out/bin/"
done
testpmd=$(command -v dpdk-testpmd || true)
[ -n "$testpmd" ] && cp -L "$testpmd" "$out/bin/dpdk-testpmd.real"
# Every library these load, except glibc's own (the target's must be used).
for f in "$out"/bin/* "${plugins[@]}"; do
  ldd "$f" 2>/dev/null | awk '/=> \// {print $3}'
done | sort -u | grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
  while read -r lib; do cp -nL "$lib" "$out/lib/"; done
strip --strip-unneeded "$out"/bin/* "$out"/lib/* 2>/dev/null || true
args=""
for p in "${plugins[@]}"; do args+=" -d \$here/lib/$(basename "$p")"; done
cat >"$out/env.sh" <<EOF
here=\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)
export PATH=\$here/bin:\$PATH
export LD_LIBRARY_PATH=\$here/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export DATAPLANE_EAL_ARGS="$args"
EOF
if [ -n "$testpmd" ]; then
  cat >"$out/bin/dpdk-testpmd" <<'EOF'
#!/usr/bin/env bash
# dpdk-testpmd with the bundle's drivers loaded (EAL arguments come before `--`).
exec "$(dirname "$0")/dpdk-testpmd.real" $DATAPLANE_EAL_ARGS "$@"
EOF
  chmod +x "$out/bin/dpdk-testpmd"
fi
du -sh "$out" >&2
