#!/usr/bin/env bash
# End-to-end checks of the release binary: make run's config is lossless, every shipped
# config validates, and SIGTERM ends a bench with a final report.
set -euo pipefail
bin=./target/release/dataplane
for f in configs/*.yaml; do
  case "$f" in *template*) continue ;; esac   # has <placeholders> on purpose
  case "$f" in *huge*) [ "$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)" -gt 0 ] || { echo "smoke: skipping $f (no free hugepages)"; continue; } ;; esac
  $bin validate "$f" >/dev/null
done
out=$($bin bench raw configs/sw_loopback.yaml --seconds 2 --json 2>/dev/null | tail -n 1)
python3 -c 'import json,sys; r=(lambda v: v.get("result", v))(json.loads(sys.argv[1])); assert r["lossless"] and r["rx_packets"]>0, r' "$out"
echo "smoke: sw_loopback lossless: $out" | cut -c1-200
out=$($bin bench raw configs/sw_loopback_4q.yaml --seconds 2 --json 2>/dev/null | tail -n 1)
python3 -c '
import json, sys
r = (lambda v: v.get("result", v))(json.loads(sys.argv[1]))
rx = [q["packets"] for q in r["queues"] if q["direction"] == "rx"]
assert r["lossless"] and r["steering"] == "software", r
assert all(n > 0 for n in rx) and max(rx) - min(rx) <= 1 + r["tx_packets"] // 1000, rx
' "$out"
echo "smoke: sw_loopback_4q lossless, queues: $(python3 -c 'import json,sys; print([q["packets"] for q in (lambda v: v.get("result", v))(json.loads(sys.argv[1]))["queues"]])' "$out")"
$bin bench raw configs/sw_loopback.yaml --seconds 30 --json >/tmp/dp-sigterm.out 2>/dev/null &
pid=$!
sleep 2
start=$(date +%s%N)
kill -TERM $pid
rc=0; wait $pid || rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ "$rc" -eq 143 ] || { echo "smoke: SIGTERM should exit 143, got $rc"; exit 1; }
tail -n 1 /tmp/dp-sigterm.out | python3 -c 'import json,sys; r=(lambda v: v.get("result", v))(json.loads(sys.stdin.read())); assert r["seconds"] < 30 and r["lossless"] and r["interrupted"], r'
echo "smoke: SIGTERM ended the bench with a lossless report in ${ms} ms (exit $rc)"
