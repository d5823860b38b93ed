#!/usr/bin/env bash
# Multi-core scaling of the software loopback (BENCHMARKS.md, "Scaling"), pinned, 64 B
# payload, each case ROUNDS times (default 3), median printed:
#   split   TX worker, RX worker, generator, checker on four different cores
#   shared  the same four threads on two cores (workers on one, generator and checker on
#           the other)
#   q1      one queue pair: worker (TX and RX queue), generator, checker on three cores
#   q4      four such pairs, each on three cores of its own (flow rules keep each
#           generator's traffic on its pair); qN for any N (q2, q8, ...)
#   pool8k / pool64k  configs/sw_loopback_4q.yaml with 8,192 and 65,536 TX buffers
# Needs 13 cores for q4; on a smaller machine cores are folded (numbers then mean little).
# Env: DATAPLANE_BIN, SECONDS_RUN (default 4), ROUNDS, CASES (default all), JSON=1,
# STAGES=1 (time every stage: `bench raw --stages`, busy ns per packet printed per run),
# EXTRA (more `bench raw` flags; with --inline a queue pair's generator and checker run on
# its worker, and the qN pairs take cores 1 to N).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DATAPLANE_BIN:-./target/release/dataplane}
secs=${SECONDS_RUN:-4}
rounds=${ROUNDS:-3}
cases=${CASES:-split shared q1 q4 pool8k pool64k}
ncpu=$(nproc)
c() { echo $(($1 % ncpu)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

config_for() { # CASE OUT
  local tx rx
  case $1 in
    split | shared)
      if [ "$1" = split ]; then set -- "$2" 2 3 4 5; else set -- "$2" 2 2 3 3; fi
      # The TX queue's cpu_core comes first in the file, then the RX queue's; then the
      # generator's and the checker's `cpu_core: -1`.
      awk -v t="$(c $2)" -v r="$(c $3)" -v g="$(c $4)" -v k="$(c $5)" '
        /cpu_core: 1/ && n == 0 { sub(/cpu_core: 1/, "cpu_core: " t); n++ ; print; next }
        /cpu_core: 1/ && n == 1 { sub(/cpu_core: 1/, "cpu_core: " r); n++ ; print; next }
        /cpu_core: -1/ && m == 0 { sub(/cpu_core: -1/, "cpu_core: " g); m++; print; next }
        /cpu_core: -1/ && m == 1 { sub(/cpu_core: -1/, "cpu_core: " k); m++; print; next }
        { print }' configs/sw_loopback.yaml | sed "s/payload_size: 1024/payload_size: 64/" >"$1"
      ;;
    q[0-9]*)
      local n=${1#q} step=3
      # Run to completion (EXTRA=--inline): the generator and checker run on the queue's
      # worker, so N queues take N cores, side by side.
      case " ${EXTRA:-} " in *" --inline "*) step=1 ;; esac
      {
        cat <<EOF
dataplane:
  cfg:
    version: 1
    stream_type: raw
    master_core: 0
    log_level: warn
    loopback: sw
    memory_regions:
    - {name: tx_buffers, kind: host, affinity: 0, num_bufs: 32768, buf_size: 1088}
    - {name: rx_buffers, kind: host, affinity: 0, num_bufs: 4096, buf_size: 1088}
    interfaces:
    - name: loop0
      address: loopback
      tx:
        queues:
EOF
        for q in $(seq 0 $((n - 1))); do
          echo "        - {name: tq$q, id: $q, cpu_core: $(c $((1 + step * q))), batch_size: 256, memory_regions: [tx_buffers]}"
        done
        echo "      rx:"
        echo "        queues:"
        for q in $(seq 0 $((n - 1))); do
          echo "        - {name: rq$q, id: $q, cpu_core: $(c $((1 + step * q))), batch_size: 256, timeout_us: 100, memory_regions: [rx_buffers]}"
        done
        echo "        flows:"
        for q in $(seq 0 $((n - 1))); do
          echo "        - {name: f$q, id: $((q + 1)), action: {type: queue, id: $q}, match: {udp_dst: $((5000 + q))}}"
        done
        echo "bench_tx:"
        for q in $(seq 0 $((n - 1))); do
          cat <<EOF
- {interface_name: loop0, queue_id: $q, cpu_core: $(c $((2 + 3 * q))), batch_size: 256, header_size: 64, payload_size: 64, eth_src_addr: "02:00:00:00:00:01", eth_dst_addr: "02:00:00:00:00:02", ip_src_addr: 198.18.0.1, ip_dst_addr: 198.18.0.2, udp_src_port: "4096-4103", udp_dst_port: "$((5000 + q))"}
EOF
        done
        echo "bench_rx:"
        for q in $(seq 0 $((n - 1))); do
          echo "- {interface_name: loop0, queue_id: $q, cpu_core: $(c $((3 + 3 * q)))}"
        done
      } >"$2"
      ;;
    pool8k) cp configs/sw_loopback_4q.yaml "$2" ;;
    pool64k) sed 's/num_bufs: 8192 /num_bufs: 65536/' configs/sw_loopback_4q.yaml >"$2" ;;
  esac
}

rows=()
printf '%-8s %s\n' "case" "Mpps (runs) median" >&2
for case in $cases; do
  config_for "$case" "$tmp/$case.yaml"
  runs=()
  for _ in $(seq "$rounds"); do
    # shellcheck disable=SC2206 # EXTRA is a list of flags
    extra=(${EXTRA:-})
    [ "${STAGES:-0}" = 1 ] && extra+=(--stages)
    "$bin" bench raw "$tmp/$case.yaml" --seconds "$secs" --json "${extra[@]}" 2>/dev/null |
      tail -n 1 >"$tmp/last.json" || true
    r=$(python3 -c 'import json,sys; r=(lambda v: v.get("result", v))(json.load(open(sys.argv[1]))); print("%.2f" % r["rx_mpps"] if r["lossless"] else "0")' "$tmp/last.json") || r=0
    [ "${STAGES:-0}" = 1 ] && python3 -c '
import json, sys
for s in (lambda v: v.get("result", v))(json.load(open(sys.argv[1])))["stages"]:
    print("   ", sys.argv[2], s["stage"], "%.1f ns/packet" % s["ns_per_packet"], file=sys.stderr)' "$tmp/last.json" "$case"
    runs+=("$r")
  done
  med=$(printf '%s\n' "${runs[@]}" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
  printf '%-8s %s  %s\n' "$case" "${runs[*]}" "$med" >&2
  rows+=("{\"case\": \"$case\", \"runs\": [$(IFS=,; echo "${runs[*]}")], \"median_mpps\": $med}")
done
if [ "${JSON:-0}" = 1 ]; then
  (IFS=,; echo "{\"bench\": \"scaling\", \"rows\": [${rows[*]}]}")
fi
