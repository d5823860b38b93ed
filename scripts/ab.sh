#!/usr/bin/env bash
# A/B of two builds of `dataplane` on the raw bench, the order alternating within the call
# (odd rounds NEW first, even rounds OLD first), so a drift of the host during the call
# cancels out of the per-round ratios. Prints one line a run and, at the end, per config
# and mode the median Mpps of each build and the median of the per-round NEW/OLD ratios.
# Usage: OLD=path/to/old NEW=path/to/new [ROUNDS=8] [CONFIGS="dpdk_ring sw_loopback"]
#        [MODES="threads inline"] [SECONDS_RUN=2] scripts/ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
old=${OLD:?OLD=path of the old dataplane binary}
new=${NEW:?NEW=path of the new dataplane binary}
out=$(mktemp)
for r in $(seq 1 "${ROUNDS:-8}"); do
  if [ $((r % 2)) -eq 1 ]; then order="new old"; else order="old new"; fi
  for c in ${CONFIGS:-dpdk_ring sw_loopback}; do
    for mode in ${MODES:-threads inline}; do
      flag=""; [ "$mode" = inline ] && flag=--inline
      for b in $order; do
        bin=$new; [ "$b" = old ] && bin=$old
        m=$("$bin" bench raw "configs/$c.yaml" --seconds "${SECONDS_RUN:-2}" --json $flag 2>/dev/null | tail -n 1 |
          python3 -c 'import json,sys; r=(lambda v: v.get("result", v))(json.load(sys.stdin)); print(r["rx_mpps"], r["lossless"])')
        echo "$r $c $mode $b $m" | tee -a "$out"
      done
    done
  done
done
python3 - "$out" <<'PY'
import collections, statistics as st, sys
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    r, c, mode, b, mpps, ok = line.split()
    runs[(c, mode)].setdefault(r, {})[b] = float(mpps)
for (c, mode), rounds in runs.items():
    pairs = [v for v in rounds.values() if len(v) == 2]
    ratio = st.median(v["new"] / v["old"] for v in pairs)
    old = st.median(v["old"] for v in pairs)
    new = st.median(v["new"] for v in pairs)
    print(f"{c} {mode}: old {old:.2f} new {new:.2f} Mpps, median of paired new/old {ratio:.3f} ({len(pairs)} rounds)")
PY
rm -f "$out"
