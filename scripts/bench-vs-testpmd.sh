#!/usr/bin/env bash
# DPDK's dpdk-testpmd and `dataplane bench raw` on the same topologies in one run, at 64
# and 1500-byte frames; prints both rates and the ratio (ours / testpmd). Root not required.
#
# memif: two processes over net_memif (TX client -> RX server, no hugepages).
#   testpmd: txonly -> rxonly, rate = median of its per-second Rx-pps samples.
#   ours: configs/dpdk_memif_{tx,rx}.yaml with frames of the same size (42-byte headers),
#         rate = packets the RX process verified / seconds the TX process sent.
# ring: one process, one net_ring port whose TX feeds its RX, sending and receiving on
#   one core. testpmd: flowgen (receives and drops, then sends), rate = median Rx-pps.
#   ours: configs/dpdk_ring.yaml (TX and RX workers share core 1), rate = verified RX.
# Env: SECONDS_TX (default 5), LENS (default "64 1500"), TOPOLOGIES (default
# "memif ring"), JSON=1 for a JSON line, OURS_ONLY=1 to skip testpmd (an A/B of two
# builds of ours: DATAPLANE_BIN).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DATAPLANE_BIN:-./target/release/dataplane}
secs=${SECONDS_TX:-5}
lens=${LENS:-64 1500}
topologies=${TOPOLOGIES:-memif ring}
ours_only=${OURS_ONLY:-0}
[ "$ours_only" = 1 ] || command -v dpdk-testpmd >/dev/null ||
  { echo "bench-vs-testpmd: dpdk-testpmd missing (apt-get install dpdk)" >&2; exit 1; }
"$bin" --version >/dev/null
tmp=$(mktemp -d)
cleanup() { rm -rf "$tmp" /var/run/dpdk/tpmd*$$ 2>/dev/null || true; }
trap cleanup EXIT
strip() { sed 's/\x1b\[[0-9;]*[A-Za-z]//g' "$1"; }
# The RX side creates the memif socket once it is up; start the TX side only then.
wait_for_socket() { # SOCKET [LOG]
  for _ in $(seq 200); do [ -S "$1" ] && return 0; sleep 0.05; done
  echo "bench-vs-testpmd: $1 never appeared (RX side failed to start)" >&2
  [ -n "${2:-}" ] && tail -n 5 "$2" >&2
  return 1
}

testpmd_rate() { # LEN -> Mpps
  local len=$1 sock=$tmp/tpmd-$1.sock
  local eal="--no-pci --no-huge -m 512 --no-shconf"
  local app="--stats-period 1 --total-num-mbufs=16384 --txd=1024 --rxd=1024"
  timeout -s INT $((secs + 6)) dpdk-testpmd -l 0,1 --main-lcore 1 --file-prefix tpmdrx$$ $eal \
    --vdev "net_memif0,role=server,socket=$sock,socket-abstract=no" -- --forward-mode=rxonly $app \
    >"$tmp/rx.log" 2>&1 </dev/null &
  local rxp=$!
  wait_for_socket "$sock" "$tmp/rx.log"
  sleep 0.5
  timeout -s INT "$secs" dpdk-testpmd -l 0,1 --main-lcore 0 --file-prefix tpmdtx$$ $eal \
    --vdev "net_memif0,role=client,socket=$sock,socket-abstract=no" -- --forward-mode=txonly \
    --txpkts="$len" $app >"$tmp/tx.log" 2>&1 </dev/null || true
  wait $rxp || true
  strip "$tmp/rx.log" | grep -o 'Rx-pps: *[0-9]*' | awk '$2 > 0 {print $2}' | sort -n |
    awk '{v[NR]=$1} END {if (NR == 0) print 0; else printf "%.3f\n", v[int((NR+1)/2)] / 1e6}'
}

ours_rate() { # LEN -> Mpps
  local len=$1 sock=$tmp/ours-$1.sock
  for side in rx tx; do
    sed -e "s|/tmp/dataplane-memif.sock|$sock|" -e "s/buf_size: 1088/buf_size: 2048/" \
      -e "s/header_size: 64/header_size: 42/" -e "s/payload_size: 64/payload_size: $((len - 42))/" \
      "configs/dpdk_memif_$side.yaml" >"$tmp/$side.yaml"
  done
  "$bin" bench raw "$tmp/rx.yaml" --seconds $((secs + 5)) --json >"$tmp/ours-rx.json" 2>/dev/null &
  local rxp=$!
  wait_for_socket "$sock"
  sleep 0.5
  "$bin" bench raw "$tmp/tx.yaml" --seconds "$secs" --json 2>/dev/null | tail -n 1 >"$tmp/ours-tx.json"
  wait $rxp || true
  python3 - "$tmp/ours-tx.json" "$tmp/ours-rx.json" <<'PY'
import json, sys
tx = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
rx = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
if not rx["lossless"] or rx["rx_packets"] != tx["tx_packets"]:
    print(f"ours not lossless: sent {tx['tx_packets']}, verified {rx['checker']['valid']}", file=sys.stderr)
print(f"{rx['checker']['valid'] / tx['seconds'] / 1e6:.3f}")
PY
}

testpmd_ring_rate() { # LEN -> Mpps
  local len=$1
  timeout -s INT "$secs" dpdk-testpmd -l 0,1 --main-lcore 0 --file-prefix tpmdring$$ \
    --no-pci --no-huge -m 512 --no-shconf --vdev net_ring0 -- --forward-mode=flowgen \
    --txpkts="$len" --stats-period 1 --total-num-mbufs=16384 --txd=1024 --rxd=1024 \
    >"$tmp/ring.log" 2>&1 </dev/null || true
  strip "$tmp/ring.log" | grep -o 'Rx-pps: *[0-9]*' | awk '$2 > 0 {print $2}' | sort -n |
    awk '{v[NR]=$1} END {if (NR == 0) print 0; else printf "%.3f\n", v[int((NR+1)/2)] / 1e6}'
}

ours_ring_rate() { # LEN -> Mpps
  local len=$1
  sed -e "s/header_size: 64/header_size: 42/" -e "s/payload_size: 64/payload_size: $((len - 42))/" \
    -e "s/buf_size: 1088/buf_size: 2048/" configs/dpdk_ring.yaml >"$tmp/ring.yaml"
  "$bin" bench raw "$tmp/ring.yaml" --seconds "$secs" --json 2>/dev/null | tail -n 1 >"$tmp/ours-ring.json"
  python3 - "$tmp/ours-ring.json" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
if not r["lossless"]:
    print(f"ours not lossless: {r['problems']}", file=sys.stderr)
print(f"{r['checker']['valid'] / r['seconds'] / 1e6:.3f}")
PY
}

rows=()
printf '%-6s %-6s %14s %14s %8s\n' "topo" "frame" "testpmd Mpps" "ours Mpps" "ratio" >&2
for topo in $topologies; do
  for len in $lens; do
    t=0
    if [ "$topo" = ring ]; then
      [ "$ours_only" = 1 ] || t=$(testpmd_ring_rate "$len")
      o=$(ours_ring_rate "$len")
    else
      [ "$ours_only" = 1 ] || t=$(testpmd_rate "$len")
      o=$(ours_rate "$len")
    fi
    r=$(python3 -c "t=$t; o=$o; print(f'{o / t:.2f}' if t > 0 else 'n/a')")
    printf '%-6s %-6s %14s %14s %8s\n' "$topo" "${len}B" "$t" "$o" "$r" >&2
    rows+=("{\"topology\": \"$topo\", \"frame\": $len, \"testpmd_mpps\": $t, \"ours_mpps\": $o, \"ratio\": \"$r\"}")
  done
done
if [ "${JSON:-0}" = 1 ]; then
  (IFS=,; echo "{\"bench\": \"vs_testpmd\", \"rows\": [${rows[*]}]}")
fi
