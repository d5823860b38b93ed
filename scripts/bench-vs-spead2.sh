#!/usr/bin/env bash
# spead2's own benchmark (spead2_bench.py: agent and master, a binary search for the
# highest rate without a lost heap) and `dataplane bench spead` (the same search, our
# sender and our SPEAD queue) on the UDP loopback, same heap and packet sizes, rounds
# alternating. Prints per case the medians of both and their ratio; JSON=1 adds a JSON
# line per case.
#   CASES   "PACKET:HEAP ..." (default "1024:262144 8192:1048576 9000:4194304")
#   ROUNDS  rounds per case (default 3), SECONDS_RUN per rate of ours (default 0.5)
#   SPEAD2_PYTHON  a Python with spead2 (default: the venv scripts/setup.sh makes)
#   DATAPLANE_BIN
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DATAPLANE_BIN:-./target/release/dataplane}
py=${SPEAD2_PYTHON:-${DATAPLANE_CACHE:-/var/cache/dataplane}/spead2-venv/bin/python}
cases=${CASES:-1024:262144 8192:1048576 9000:4194304}
rounds=${ROUNDS:-3}
secs=${SECONDS_RUN:-0.5}
"$py" -c 'import spead2' || { echo "bench-vs-spead2: no spead2 in $py (scripts/setup.sh)" >&2; exit 1; }
sb=$(dirname "$py")/spead2_bench.py
[ -f "$sb" ] || sb=$("$py" -c 'import shutil; print(shutil.which("spead2_bench.py") or "")')
[ -n "$sb" ] || { echo "bench-vs-spead2: spead2_bench.py not found" >&2; exit 1; }
"$bin" --version >/dev/null
agent_port=8890
"$py" "$sb" agent "$agent_port" >/dev/null 2>&1 &
agent=$!
trap 'kill $agent 2>/dev/null || true' EXIT
sleep 1
median() { python3 -c 'import sys, statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
echo "bench-vs-spead2: $(nproc) cores, spead2 $("$py" -c 'import spead2; print(spead2.__version__)'), $("$bin" --version | head -1)"
for c in $cases; do
  packet=${c%%:*}
  heap=${c##*:}
  ours=() theirs=() limits=()
  for ((r = 1; r <= rounds; r++)); do
    out=$("$py" "$sb" master --heap-size "$heap" --packet "$packet" "localhost:$agent_port" 2>&1)
    rate=$(sed -n 's/.*Sustainable rate: \([0-9.]*\) Gbps.*/\1/p' <<<"$out" | tail -1)
    [ -n "$rate" ] || { echo "bench-vs-spead2: spead2_bench gave no rate: $out" >&2; exit 1; }
    theirs+=("$rate")
    grep -q "Limited by send speed" <<<"$out" && limits+=("spead2 sender") || true
    json=$("$bin" bench spead --heap-bytes "$heap" --packet-bytes "$packet" --seconds "$secs" --json --quiet | tail -1)
    ours+=("$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["result"]["lossless_gbps"])' "$json")")
    python3 -c 'import json,sys; sys.exit(0 if json.loads(sys.argv[1])["result"]["limited_by_sender"] else 1)' "$json" \
      && limits+=("our sender") || true
  done
  mo=$(median "${ours[@]}")
  mt=$(median "${theirs[@]}")
  ratio=$(python3 -c "print(round($mo / $mt, 2) if $mt > 0 else 0)")
  echo "packet $packet B, heap $heap B: ours ${ours[*]} (median $mo) Gb/s, spead2 ${theirs[*]} (median $mt) Gb/s, ratio $ratio; limits: ${limits[*]:-none}"
  if [ "${JSON:-0}" = 1 ]; then
    python3 -c 'import json,sys; a=sys.argv; print(json.dumps({"packet": int(a[1]), "heap": int(a[2]), "ours_gbps": [float(x) for x in a[3].split()], "spead2_gbps": [float(x) for x in a[4].split()], "ratio": float(a[5])}))' \
      "$packet" "$heap" "${ours[*]}" "${theirs[*]}" "$ratio"
  fi
done
