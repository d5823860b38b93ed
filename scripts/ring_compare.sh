#!/usr/bin/env bash
# Runs our ring benchmark and DPDK's ring_perf_autotest (dpdk-test) back to back, ROUNDS times
# interleaved, on the same two cores, and prints medians side by side with the ratio
# (DPDK ns per item / ours: above 1 means ours is faster).
#
# Both report cycles or time per item the same way:
#   same-thread: enqueue then dequeue of one bulk on one core, per item.
#   two cores:   producer's own time per item plus consumer's own time per item.
# DPDK's cycles are converted with the TSC frequency that its EAL prints.
#
# Usage: scripts/ring_compare.sh [CORE_A,CORE_B]   (default: the first two usable cores)
# Env: ROUNDS (default 3), ITEMS per run for ours (default 4000000), JSON=1 for a JSON line,
# DATAPLANE_BIN (our binary, absolute path), DPDK_TEST_CMD (the dpdk-test command line; not DPDK_TEST, which dpdk-test itself reads).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DATAPLANE_BIN:-./target/release/dataplane}
rounds=${ROUNDS:-3}
items=${ITEMS:-4000000}

dpdk_test=${DPDK_TEST_CMD:-dpdk-test}   # a command line; e.g. a carried binary with its loader
if [ -z "${DPDK_TEST_CMD:-}" ] && ! command -v dpdk-test >/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "ring_compare: dpdk-test missing; install the Debian package dpdk-dev as root" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dpdk dpdk-dev >/dev/null
fi
[ -x "$bin" ] || cargo build --release -p dataplane-cli

cores=${1:-$(python3 -c 'import os; c=sorted(os.sched_getaffinity(0)); print(f"{c[0]},{c[1]}")')}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "/var/run/dpdk/ringcmp$$"' EXIT

for r in $(seq 1 "$rounds"); do
  echo "round $r/$rounds: dpdk-test ring_perf_autotest on cores $cores" >&2
  echo ring_perf_autotest | $dpdk_test -l "$cores" --no-huge -m 256 --no-pci \
    --file-prefix "ringcmp$$" --log-level=eal,debug >"$tmp/dpdk-$r.txt" 2>&1 || {
    echo "ring_compare: dpdk-test failed:" >&2; tail -20 "$tmp/dpdk-$r.txt" >&2; exit 1; }
  echo "round $r/$rounds: dataplane bench ring on cores $cores" >&2
  taskset -c "$cores" "$bin" bench ring --items "$items" --reps 1 --json 2>/dev/null \
    | tail -n 1 >"$tmp/ours-$r.json"
done

python3 - "$tmp" "$rounds" "${JSON:-0}" <<'PY'
import json, re, statistics, sys
tmp, rounds, as_json = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"

def dpdk(path):
    """Legacy-API SP/SC figures in ns per item, keyed like our case names."""
    text = open(path).read()
    m = re.search(r"TSC frequency is ~(\d+) KHz", text)
    if not m:
        sys.exit("ring_compare: dpdk-test did not print its TSC frequency")
    ghz = int(m.group(1)) / 1e6
    out, section = {}, ""
    for line in text.splitlines():
        if line.startswith("###"):
            section = line
        m = re.match(r"legacy APIs: SP/SC: (single|bulk \(size: (\d+)\)): ([\d.]+)", line)
        if not m:
            continue
        bulk = int(m.group(2) or 1)
        cycles = float(m.group(3))
        name = "single" if bulk == 1 else f"bulk{bulk}"
        if "single element" in section:
            out.setdefault(f"same-thread {name}", cycles / ghz)
        elif "Testing bulk" in section:
            out.setdefault(f"same-thread {name}", cycles / bulk / ghz)
        elif "two physical cores" in section:
            out.setdefault(f"spsc {name}", cycles / ghz)
    return out

def ours(path):
    cases = (lambda v: v.get("result", v))(json.load(open(path)))["cases"]
    return {c["case"]: c["enq_plus_deq_ns"] for c in cases}

d = [dpdk(f"{tmp}/dpdk-{r}.txt") for r in range(1, rounds + 1)]
o = [ours(f"{tmp}/ours-{r}.json") for r in range(1, rounds + 1)]
rows = []
for case in ["same-thread single", "same-thread bulk8", "same-thread bulk32",
             "spsc bulk8", "spsc bulk32"]:
    dv = [x[case] for x in d if case in x]
    ov = [x[case] for x in o if case in x]
    if not dv or not ov:
        continue
    dm, om = statistics.median(dv), statistics.median(ov)
    rows.append({"case": case, "dpdk_ns_per_item": round(dm, 3),
                 "ours_ns_per_item": round(om, 3), "ratio_dpdk_over_ours": round(dm / om, 3)})
print(f"{'case':<20} {'rte_ring ns/item':>17} {'ours ns/item':>13} {'ratio':>7}", file=sys.stderr)
for r in rows:
    print(f"{r['case']:<20} {r['dpdk_ns_per_item']:>17.2f} {r['ours_ns_per_item']:>13.2f} "
          f"{r['ratio_dpdk_over_ours']:>7.2f}", file=sys.stderr)
print("ratio > 1: ours takes less time per item; medians of", rounds, "interleaved rounds",
      file=sys.stderr)
if as_json:
    print(json.dumps({"bench": "ring_compare", "rounds": rounds, "cases": rows}))
PY
