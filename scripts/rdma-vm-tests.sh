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
bin=$(cargo test --release -p rdma --test rxe --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "rxe" and m.get("executable"):
        print(m["executable"])')
[ -n "$bin" ] || { echo "rdma-vm-tests: could not build the test binary" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$TOOLS/rxe-vm" --timeout 600 -- "$bin" --test-threads=1 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
if grep -q "^SKIP" "$out"; then
    grep "^SKIP" "$out" | grep -v "an RDMA device is present" && {
        echo "rdma-vm-tests: FAILED: tests skipped inside the VM" >&2
        exit 1
    }
fi
exit "$rc"
