#!/bin/bash
# perftest's ib_send_bw and `dataplane bench rdma` on the same Soft-RoCE VM in one run
# (../shared/tools/rxe-vm: server on rxe0 = 198.18.0.1, client on rxe1 = 198.18.0.2), one
# direction (client -> server), at 4 KiB and 64 KiB messages. Prints both rates and the
# ratio (ours / perftest). Under software emulation absolute numbers mean nothing; the
# ratio does. Env: SIZES (default "4096 65536"), ITERS for ib_send_bw (default 2000),
# SECONDS_RUN for ours (default 4), JSON=1 for a JSON line.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${DATAPLANE_BIN:-target/release/dataplane}")
TOOLS=${DATAPLANE_SHARED_TOOLS:-}
for t in ../shared/tools /work/shared/tools; do
    [ -z "$TOOLS" ] && [ -x "$t/rxe-vm" ] && TOOLS=$t
done
[ -n "$TOOLS" ] || { echo "rdma-vs-perftest: rxe-vm not found" >&2; exit 1; }
sizes=${SIZES:-4096 65536}
iters=${ITERS:-2000}
secs=${SECONDS_RUN:-4}
tmp=$(mktemp -d /tmp/rdma-vs-perftest.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for s in $sizes; do
    # One direction, like ib_send_bw: the client sends, the server receives.
    python3 - "$s" configs/rdma_loopback.yaml "$tmp/ours-$s.yaml" <<'PY'
import sys
size, src, dst = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(src).read()
text = text.replace("message_size: 4096", f"message_size: {size}")
server, client = text.split("rdma_bench_client:")
server = server.replace("  send: true                # both directions at once", "  send: false")
client = client.replace("  receive: true", "  receive: false")
open(dst, "w").write(server + "rdma_bench_client:" + client)
PY
done
cat > "$tmp/run.sh" <<EOF2
#!/bin/sh
for s in $sizes; do
  for try in 1 2 3; do
    ib_send_bw -d rxe0 -s \$s -n $iters -F > $tmp/ib-srv-\$s.txt 2>&1 &
    sleep 2
    ib_send_bw -d rxe1 -s \$s -n $iters -F 198.18.0.1 > $tmp/ib-cli-\$s.txt 2>&1
    wait
    # Under emulation the client can start before the server listens: try again.
    awk '/^ *[0-9]+ +[0-9]+ /{f=1} END{exit !f}' $tmp/ib-cli-\$s.txt && break
  done
  echo "PERFTEST \$s \$(awk '/^ *[0-9]+ +[0-9]+ /{print \$4; exit}' $tmp/ib-cli-\$s.txt)"
  $bin bench rdma $tmp/ours-\$s.yaml --mode both --seconds $secs --json 2>/dev/null | tail -n 1 | sed "s/^/OURS \$s /"
done
EOF2
chmod +x "$tmp/run.sh"
# Our binary and the libraries it links go into the VM at their own paths.
files=(--file "$tmp" --file "$bin")
for l in $(ldd "$bin" | grep -o '/[^ ]*'); do files+=(--file "$l"); done
"$TOOLS/rxe-vm" --timeout 900 "${files[@]}" -- "$tmp/run.sh" > "$tmp/out.txt" 2>&1 || true
grep -q "^OURS " "$tmp/out.txt" || { echo "rdma-vs-perftest: our bench printed nothing; VM output:" >&2; tail -20 "$tmp/out.txt" >&2; }
python3 - "$tmp/out.txt" <<'PY'
import json, os, sys
perf, ours = {}, {}
for line in open(sys.argv[1], errors="replace"):
    line = line.strip()
    if line.startswith("PERFTEST "):
        _, size, mbps = (line.split() + ["0"])[:3]
        try:
            perf[int(size)] = float(mbps) * 8 / 1000  # MB/s -> Gb/s
        except ValueError:
            perf[int(size)] = 0.0
    elif line.startswith("OURS "):
        _, size, js = line.split(" ", 2)
        r = (lambda v: v.get("result", v))(json.loads(js))
        ours[int(size)] = (r["server"]["rx_gbps"], r["errors"], r["messages_received"])
rows = []
print(f"{'size':>8} {'ib_send_bw Gb/s':>16} {'ours Gb/s':>10} {'ratio':>6} {'errors':>6}", file=sys.stderr)
for size in sorted(set(perf) | set(ours)):
    p = perf.get(size, 0.0)
    o, errs, msgs = ours.get(size, (0.0, -1, 0))
    ratio = o / p if p > 0 else float("nan")
    print(f"{size:>8} {p:>16.3f} {o:>10.3f} {ratio:>6.2f} {errs:>6}", file=sys.stderr)
    rows.append({"size": size, "perftest_gbps": p, "ours_gbps": o, "ratio": ratio,
                 "errors": errs, "messages": msgs})
if os.environ.get("JSON") == "1":
    print(json.dumps({"bench": "rdma_vs_perftest", "rows": rows}))
bad = not rows or any(r["errors"] != 0 or r["perftest_gbps"] == 0 for r in rows)
sys.exit(1 if bad else 0)
PY
