#!/bin/bash
# Runs the RDMA test binary (rdma/tests/rxe.rs) against real verbs and rdma_cm: Soft-RoCE
# in a throw-away QEMU VM (../shared/tools/rxe-vm; rxe0 = 198.18.0.1, rxe1 = 198.18.0.2).
# The host has no RDMA device, so this is where those tests really run.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=${DATAPLANE_SHARED_TOOLS:-}
for t in ../shared/tools /work/shared/tools; do
    [ -z "$TOOLS" ] && [ -x "$t/rxe-vm" ] && TOOLS=$t
done
if [ -z "$TOOLS" ]; then
    echo "rdma-vm-tests: SKIPPED: rxe-vm (the Soft-RoCE VM tool) not found" >&2
    exit 0
fi
# The same build as `make test` (workspace, DPDK feature), so nothing is rebuilt.
bins=$(cargo test --release --workspace --features dataplane-cli/dpdk --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] in ("rxe", "rdma_bursts", "rdma_peers") and m.get("executable"):
        print(m["executable"])')
[ "$(echo "$bins" | wc -w)" = 3 ] || { echo "rdma-vm-tests: could not build the test binaries" >&2; exit 1; }
dp=$(realpath target/release/dataplane)
[ -x "$dp" ] || cargo build --release -p dataplane-cli --features dpdk
work=$(mktemp -d /tmp/rdma-vm-tests.XXXXXX)
trap 'rm -rf "$work"' EXIT
cat > "$work/run.sh" <<EOF2
#!/bin/sh
for b in $(echo $bins); do "\$b" --test-threads=1 --nocapture || exit \$?; done
for c in rdma_loopback rdma_split; do
  echo "--- dataplane bench rdma configs/\$c.yaml --mode both"
  "$dp" bench rdma "$PWD/configs/\$c.yaml" --mode both --seconds 3 --json || exit \$?
done
EOF2
chmod +x "$work/run.sh"
files=(--file "$work" --file "$dp" --file "$PWD/configs/rdma_loopback.yaml" --file "$PWD/configs/rdma_split.yaml")
for b in $bins; do files+=(--file "$b"); done
for l in $( (ldd "$dp"; for b in $bins; do ldd "$b"; done) | grep -o '=> /[^ ]*\|^\s*/[^ ]*' | grep -o '/[^ ]*' | sort -u); do files+=(--file "$l"); done
"$TOOLS/rxe-vm" --timeout 600 "${files[@]}" -- "$work/run.sh" 2>&1 | tee "$work/out.txt"
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || { echo "rdma-vm-tests: FAILED (exit $rc)" >&2; exit "$rc"; }
python3 - "$work/out.txt" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1], errors="replace") if l.startswith('{"mode"')]
assert len(lines) == 2, f"expected reports for rdma_loopback and rdma_split, got {len(lines)}"
for name, line in zip(["rdma_loopback", "rdma_split"], lines):
    r = json.loads(line)
    assert r["errors"] == 0 and r["server"]["messages_received"] > 0 and r["client"]["messages_received"] > 0, r
    print(f"rdma-vm-tests: bench {name} --mode both: server received {r['server']['messages_received']}, "
          f"client received {r['client']['messages_received']}, errors 0")
PY
