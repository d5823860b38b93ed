#!/usr/bin/env bash
# DPDK's dpdk-testpmd and `dataplane` doing the same work on the same virtual devices, in
# one run, at 64 and 1500-byte frames; prints both rates and the ratio (ours / testpmd).
#
# Pairs (PAIRS, default "gen fwd"):
#   gen  testpmd txonly -> rxonly (headers written per frame into reused mbufs, frames
#        freed unread) against `bench raw --tx-work headers` -> `--rx-work count`.
#        memif: two processes. ring: one process, one net_ring port that loops back
#        (testpmd flowgen on one lcore; ours: TX and RX worker on one core).
#   fwd  testpmd io forwarding against `dataplane bench fwd` (frames relayed as they are).
#        memif: three processes, testpmd txonly -> the relay -> testpmd rxonly, the same
#        sender and receiver for both relays; rate = the receiver's median Rx-pps.
#        ring: one net_ring port forwarding to itself, 512 frames circling (testpmd
#        --tx-first with --burst=512; ours --tx-first 8 bursts of 64).
# Topologies (TOPOLOGIES, default "memif ring"), frame sizes (LENS, default "64 1500"),
# seconds per run (SECONDS_TX, default 5), rounds (ROUNDS, default 1; medians of alternating
# rounds), our modes (MODES, default "threads inline": generators, checkers and relays on
# threads of their own, or run to completion on the workers' cores with --inline).
# JSON=1 adds a JSON line; OURS_ONLY=1 skips
# testpmd (an A/B of two builds of ours: DATAPLANE_BIN). Cores are spread as on a 16-core
# host and folded onto the cores this machine has. Root not required.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DATAPLANE_BIN:-./target/release/dataplane}
secs=${SECONDS_TX:-5}
lens=${LENS:-64 1500}
topologies=${TOPOLOGIES:-memif ring}
pairs=${PAIRS:-gen fwd}
modes=${MODES:-threads inline}
rounds=${ROUNDS:-1}
inline=
ours_only=${OURS_ONLY:-0}
[ "$ours_only" = 1 ] || command -v dpdk-testpmd >/dev/null ||
  { echo "bench-vs-testpmd: dpdk-testpmd missing (apt-get install dpdk)" >&2; exit 1; }
"$bin" --version >/dev/null
ncpu=$(nproc)
c() { echo $(($1 % ncpu)); } # a core of a 16-core layout, on this machine
tmp=$(mktemp -d)
cleanup() {
  [ -n "${KEEP:-}" ] && cp -r "$tmp" "$KEEP"
  jobs -p | xargs -r kill 2>/dev/null || true
  rm -rf "$tmp" /var/run/dpdk/tpmd*$$ 2>/dev/null || true
}
trap cleanup EXIT
strip() { sed 's/\x1b\[[0-9;]*[A-Za-z]//g' "$1"; }
# A memif server creates its socket once it is up; start its peer only then.
wait_for_socket() { # SOCKET [LOG]
  for _ in $(seq 200); do [ -S "$1" ] && return 0; sleep 0.05; done
  echo "bench-vs-testpmd: $1 never appeared (its server failed to start)" >&2
  [ -n "${2:-}" ] && tail -n 5 "$2" >&2
  return 1
}
median_rx_pps() { # LOG [PORT] -> Mpps: median of the port's per-second Rx-pps samples
  strip "$1" | awk -v want="${2:-any}" '
    /statistics for port/ { port = $0; sub(/.*port +/, "", port); sub(/ .*/, "", port) }
    /Rx-pps:/ { if (want == "any" || port == want) { v = $0; sub(/.*Rx-pps: */, "", v); sub(/ .*/, "", v); if (v + 0 > 0) print v + 0 } }' |
    sort -n | awk '{v[NR]=$1} END {if (NR == 0) print 0; else printf "%.3f\n", v[int((NR+1)/2)] / 1e6}'
}
eal="--no-pci --no-huge -m 512 --no-shconf"
app="--stats-period 1 --total-num-mbufs=16384 --txd=1024 --rxd=1024"
memif() { echo "net_memif$1,role=$2,socket=$3,socket-abstract=no"; }
testpmd() { # NAME CORES MAIN SECONDS LOG ARGS... (runs in the background)
  local name=$1 cores=$2 main=$3 s=$4 log=$5
  shift 5
  timeout -s INT "$s" dpdk-testpmd -l "$cores" --main-lcore "$main" --file-prefix "tpmd$name$$" \
    $eal "$@" >"$log" 2>&1 </dev/null &
}
# Our configuration for a frame length, cores moved to the 16-core layout: the master
# core, the queues' worker core, the generator's and the checker's core.
ours_config() { # SOURCE LEN OUT MASTER WORKER GENERATOR CHECKER [SOCKET]
  sed -e "s/header_size: 64/header_size: 42/" -e "s/payload_size: 64/payload_size: $(($2 - 42))/" \
    -e "s/buf_size: 1088/buf_size: 2048/" -e "s/master_core: 0/master_core: $4/" \
    -e "s/cpu_core: [0-9]*,/cpu_core: $5,/" -e "0,/cpu_core: -1/s//cpu_core: $6/" \
    -e "s/cpu_core: -1/cpu_core: $7/" -e "s|/tmp/dataplane-memif.sock|${8:-}|" "$1" >"$3"
}
json_field() { # FILE EXPRESSION (on the last JSON line, as `r`)
  python3 - "$1" "$2" <<'PY'
import json, sys
r = (lambda v: v.get("result", v))(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]))
print(eval(sys.argv[2]))
PY
}

# --- gen: txonly/rxonly against headers-only generation and counting ---
testpmd_gen_memif() { # LEN
  local sock=$tmp/tg-$1.sock
  testpmd rx "$(c 4),$(c 5)" "$(c 4)" $((secs + 6)) "$tmp/rx.log" \
    --vdev "$(memif 0 server "$sock")" -- --forward-mode=rxonly $app
  local rxp=$!
  wait_for_socket "$sock" "$tmp/rx.log"
  sleep 1.5
  testpmd tx "$(c 2),$(c 3)" "$(c 2)" "$secs" "$tmp/tx.log" \
    --vdev "$(memif 0 client "$sock")" -- --forward-mode=txonly --txpkts="$1" $app
  wait $! || true
  wait $rxp || true
  median_rx_pps "$tmp/rx.log"
}
ours_gen_memif() { # LEN
  local sock=$tmp/og-$1.sock
  ours_config configs/dpdk_memif_rx.yaml "$1" "$tmp/rx.yaml" "$(c 4)" "$(c 5)" "$(c 10)" "$(c 10)" "$sock"
  ours_config configs/dpdk_memif_tx.yaml "$1" "$tmp/tx.yaml" "$(c 2)" "$(c 3)" "$(c 9)" "$(c 9)" "$sock"
  "$bin" bench raw "$tmp/rx.yaml" --rx-work count --seconds $((secs + 5)) $inline --json >"$tmp/o-rx.json" 2>/dev/null &
  local rxp=$!
  wait_for_socket "$sock"
  sleep 1.5
  "$bin" bench raw "$tmp/tx.yaml" --tx-work headers --seconds "$secs" $inline --json 2>/dev/null >"$tmp/o-tx.json"
  wait $rxp || true
  local sent got s
  sent=$(json_field "$tmp/o-tx.json" 'r["tx_packets"]')
  got=$(json_field "$tmp/o-rx.json" 'r["rx_packets"]')
  s=$(json_field "$tmp/o-tx.json" 'r["seconds"]')
  [ "$got" = "$sent" ] || echo "bench-vs-testpmd: ours lost frames: sent $sent, received $got" >&2
  python3 -c "print(f'{$got / $s / 1e6:.3f}')"
}
testpmd_gen_ring() { # LEN
  testpmd ring "$(c 0),$(c 1)" "$(c 0)" "$secs" "$tmp/ring.log" --vdev net_ring0 -- \
    --forward-mode=flowgen --txpkts="$1" $app
  wait $! || true
  median_rx_pps "$tmp/ring.log"
}
ours_gen_ring() { # LEN
  ours_config configs/dpdk_ring.yaml "$1" "$tmp/ring.yaml" "$(c 0)" "$(c 1)" "$(c 2)" "$(c 3)"
  "$bin" bench raw "$tmp/ring.yaml" --tx-work headers --rx-work count --seconds "$secs" $inline --json \
    2>/dev/null >"$tmp/o-ring.json" || true
  json_field "$tmp/o-ring.json" \
    '"%.3f" % (r["rx_packets"] / r["seconds"] / 1e6) if r["lossless"] else "0"'
}

# --- fwd: io forwarding against bench fwd ---
# The sender and receiver around a memif relay (testpmd txonly, testpmd rxonly).
fwd_around() { # LEN RELAY... (the relay command, run in the background)
  local len=$1 in=$tmp/fi.sock out=$tmp/fo.sock
  shift
  rm -f "$in" "$out"
  testpmd sink "$(c 4),$(c 5)" "$(c 4)" $((secs + 8)) "$tmp/sink.log" \
    --vdev "$(memif 0 server "$out")" -- --forward-mode=rxonly $app
  local sinkp=$!
  wait_for_socket "$out" "$tmp/sink.log"
  # The socket exists before the port is started; a client that connects earlier is
  # refused ("ID not found") and memif does not retry.
  sleep 1.5
  "$@" >"$tmp/relay.log" 2>&1 &
  local relayp=$!
  wait_for_socket "$in" "$tmp/relay.log"
  sleep 1.5
  testpmd src "$(c 2),$(c 3)" "$(c 2)" "$secs" "$tmp/src.log" \
    --vdev "$(memif 0 client "$in")" -- --forward-mode=txonly --txpkts="$len" $app
  wait $! || true
  wait $relayp || true
  wait $sinkp || true
  median_rx_pps "$tmp/sink.log"
}
testpmd_fwd_memif() { # LEN
  fwd_around "$1" timeout -s INT $((secs + 4)) dpdk-testpmd -l "$(c 6),$(c 7)" --main-lcore "$(c 6)" \
    --file-prefix "tpmdrelay$$" $eal --vdev "$(memif 0 server "$tmp/fi.sock")" \
    --vdev "$(memif 1 client "$tmp/fo.sock")" -- --forward-mode=io $app
}
ours_fwd_memif() { # LEN
  sed -e "s|/tmp/dataplane-fwd-in.sock|$tmp/fi.sock|" -e "s|/tmp/dataplane-fwd-out.sock|$tmp/fo.sock|" \
    -e "s/master_core: 0/master_core: $(c 6)/" -e "s/cpu_core: 1,/cpu_core: $(c 7),/" \
    configs/dpdk_memif_fwd.yaml >"$tmp/fwd.yaml"
  fwd_around "$1" "$bin" bench fwd "$tmp/fwd.yaml" --seconds $((secs + 3)) ${inline:---cores $(c 8)} --json
}
testpmd_fwd_ring() { # LEN
  testpmd ring "$(c 0),$(c 1)" "$(c 0)" "$secs" "$tmp/ring.log" --vdev net_ring0 -- \
    --forward-mode=io --port-topology=loop --tx-first --burst=512 --txpkts="$1" $app
  wait $! || true
  median_rx_pps "$tmp/ring.log"
}
ours_fwd_ring() { # LEN
  ours_config configs/dpdk_ring.yaml "$1" "$tmp/ring.yaml" "$(c 0)" "$(c 1)" "$(c 2)" "$(c 3)"
  "$bin" bench fwd "$tmp/ring.yaml" --tx-first 8 ${inline:---cores $(c 2)} --seconds "$secs" --json \
    2>/dev/null >"$tmp/o-fwd.json" || true
  json_field "$tmp/o-fwd.json" '"%.3f" % r["mpps"] if not r["problems"] else "0"'
}

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
ratio() { python3 -c "t=$1; o=$2; print(f'{o / t:.2f}' if t > 0 else 'n/a')"; }
rows=()
printf '%-5s %-6s %-6s %13s %13s %13s %7s %7s\n' "pair" "topo" "frame" "testpmd Mpps" "threads Mpps" "inline Mpps" "thr/t" "inl/t" >&2
for pair in $pairs; do
  for topo in $topologies; do
    for len in $lens; do
      ts=() os=() is=()
      # Alternating rounds: testpmd, ours with threads, ours inline, again; medians.
      for _ in $(seq "$rounds"); do
        t=0
        [ "$ours_only" = 1 ] || t=$("testpmd_${pair}_${topo}" "$len")
        ts+=("$t")
        o=0 i=0
        case " $modes " in *" threads "*) inline='' o=$("ours_${pair}_${topo}" "$len") ;; esac
        case " $modes " in *" inline "*) inline=--inline i=$("ours_${pair}_${topo}" "$len") ;; esac
        os+=("$o") is+=("$i")
      done
      t=$(median "${ts[@]}") o=$(median "${os[@]}") i=$(median "${is[@]}")
      printf '%-5s %-6s %-6s %13s %13s %13s %7s %7s\n' "$pair" "$topo" "${len}B" "$t" "$o" "$i" "$(ratio "$t" "$o")" "$(ratio "$t" "$i")" >&2
      rows+=("{\"pair\": \"$pair\", \"topology\": \"$topo\", \"frame\": $len, \"rounds\": $rounds, \"testpmd_mpps\": $t, \"ours_mpps\": $o, \"ours_inline_mpps\": $i, \"ratio\": \"$(ratio "$t" "$o")\", \"inline_ratio\": \"$(ratio "$t" "$i")\"}")
    done
  done
done
if [ "${JSON:-0}" = 1 ]; then
  (IFS=,; echo "{\"bench\": \"vs_testpmd\", \"rows\": [${rows[*]}]}")
fi
