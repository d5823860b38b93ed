#!/usr/bin/env bash
# iperf3 and `dataplane bench socket` on the same path with the same message sizes, one
# stream and four, in one run:
#   UDP 1472 B and 8 KiB: the highest lossless rate of each (bisection over the paced
#       rate: iperf3 -b against --target-gbps; a probe is lossless when no datagram of it
#       was lost), and the unpaced rate with its loss;
#   TCP 64 KiB writes: throughput (iperf3 -l 64K against 64 KiB messages).
# Paths (PATHS, default "loopback veth"): 127.0.0.1 in one namespace, or a veth pair with
# a 9000-byte MTU between two network namespaces (root; server 10.251.0.2, client
# 10.251.0.1).
# STREAMS (default "1 4"), CASES (default "udp1472 udp8192 tcp65536"), ROUNDS of each TCP
# case (default 3, alternating, medians reported), SECONDS_RUN per
# probe (default 2), PROBES bisection steps (default 5), QUEUED_BURSTS (ours:
# --queued-bursts, default the bench's), WORK (ours: --work; default full, every byte
# written and checked; `count` is iperf3's work: payloads neither written nor read),
# UDP_GRO (1, the default: our UDP server reads with udp_gro: true; 0: without),
# DATAPLANE_BIN, IPERF3.
# Both get the same socket buffers: ours asks for its region's bytes (at most 64 MiB), and
# iperf3 gets the same with -w; as root the script raises net.core.rmem_max/wmem_max to
# 64 MiB for the run (restored at exit) so that iperf3's request is not capped.
# Prints one line per case: ours, iperf3, ratio; JSON=1 adds a JSON line per case.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DATAPLANE_BIN:-./target/release/dataplane}
iperf=${IPERF3:-iperf3}
paths=${PATHS:-loopback veth}
streams_list=${STREAMS:-1 4}
cases=${CASES:-udp1472 udp8192 tcp65536}
secs=${SECONDS_RUN:-2}
probes=${PROBES:-5}
rounds=${ROUNDS:-3}
command -v "$iperf" >/dev/null || { echo "bench-vs-iperf: iperf3 missing (apt-get install iperf3)" >&2; exit 1; }
"$bin" --version >/dev/null
ncpu=$(nproc)
tmp=$(mktemp -d)
ns_c=dpiperf1
ns_s=dpiperf2
old_rmem=$(sysctl -n net.core.rmem_max)
old_wmem=$(sysctl -n net.core.wmem_max)
if [ "$(id -u)" = 0 ]; then
  sysctl -qw net.core.rmem_max=67108864 net.core.wmem_max=67108864
fi
cleanup() {
  [ "$(id -u)" = 0 ] && sysctl -qw net.core.rmem_max="$old_rmem" net.core.wmem_max="$old_wmem"
  jobs -p | xargs -r kill 2>/dev/null || true
  ip netns del $ns_c 2>/dev/null || true
  ip netns del $ns_s 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# Cores: the server's queues on the first half of the cores, the client's on the second
# (folded onto what this machine has); the application threads after them.
core() { echo $(($1 % ncpu)); }
half=$((ncpu / 2 > 0 ? ncpu / 2 : 1))

config() { # TRANSPORT STREAMS BUF SERVER_IP CLIENT_IP PORT -> file
  local t=$1 n=$2 buf=$3 sip=$4 cip=$5 port=$6 f="$tmp/$1-$2-$3-$4.yaml"
  queues() { # PREFIX REGION FIRST_CORE
    for i in $(seq 0 $((n - 1))); do
      echo "        - {name: $1$i, id: $i, cpu_core: $(core $(($3 + i))), batch_size: 32, memory_regions: [$2]}"
    done
  }
  local sc=1 cc=$((half + 1)) gro=""
  [ "$t" = udp ] && [ "${UDP_GRO:-1}" = 1 ] && gro=", udp_gro: true"
  [ "$ncpu" -le 2 ] && sc=0 && cc=1
  cat >"$f" <<EOF
daqiri:
  cfg:
    version: 1
    stream_type: socket
    master_core: 0
    memory_regions:
    - {name: SRV, kind: host, affinity: 0, num_bufs: 16384, buf_size: $buf}
    - {name: CLI, kind: host, affinity: 0, num_bufs: 16384, buf_size: $buf}
    interfaces:
    - name: server
      address: $sip
      socket_config: {mode: server, local_addr: "$t://$sip:$port"$gro}
      rx:
        queues:
$(queues srx SRV $sc)
      tx:
        queues:
$(queues stx SRV $sc)
    - name: client
      address: $cip
      socket_config: {mode: client, local_addr: "$t://$cip:$((port + 100))", remote_addr: "$t://$sip:$port"}
      rx:
        queues:
$(queues crx CLI $cc)
      tx:
        queues:
$(queues ctx CLI $cc)
socket_bench_server: {server: true, send: false, receive: true, cpu_core: $(core $((sc + n))), message_size: $buf, server_address: $sip, server_port: $port}
socket_bench_client: {server: false, send: true, receive: false, cpu_core: $(core $((cc + n))), message_size: $buf, server_address: $sip, client_address: $cip, server_port: $port}
EOF
  echo "$f"
}

setup_veth() {
  [ "$(id -u)" = 0 ] || { echo "bench-vs-iperf: the veth path needs root" >&2; return 1; }
  ip netns del $ns_c 2>/dev/null || true
  ip netns del $ns_s 2>/dev/null || true
  ip netns add $ns_c
  ip netns add $ns_s
  ip link add dpia netns $ns_c type veth peer name dpib netns $ns_s
  ip -n $ns_c addr add 10.251.0.1/24 dev dpia
  ip -n $ns_s addr add 10.251.0.2/24 dev dpib
  for ns in $ns_c $ns_s; do ip -n $ns link set lo up; done
  # Jumbo frames, as a path for 8 KiB datagrams would have (no IP fragments).
  ip -n $ns_c link set dpia mtu 9000 up
  ip -n $ns_s link set dpib mtu 9000 up
}

# inns NS COMMAND...: runs in a namespace ("" = here).
inns() { local ns=$1; shift; if [ -n "$ns" ]; then ip netns exec "$ns" "$@"; else "$@"; fi; }

# ours PATH TRANSPORT STREAMS SIZE [GBPS] -> "rx_gbps lossless tx_gbps lost"
ours() {
  local path=$1 t=$2 n=$3 size=$4 gbps=${5:-} sip cip sns cns port=$((20000 + RANDOM % 20000))
  if [ "$path" = veth ]; then sip=10.251.0.2 cip=10.251.0.1 sns=$ns_s cns=$ns_c; else sip=127.0.0.1 cip=127.0.0.1 sns= cns=; fi
  local buf=$size; [ "$t" = tcp ] && buf=65536
  local f; f=$(config "$t" "$n" "$buf" $sip $cip $port)
  local extra=(--seconds "$secs" --message-size "$size" --json --quiet)
  [ -n "${QUEUED_BURSTS:-}" ] && extra+=(--queued-bursts "$QUEUED_BURSTS")
  [ -n "${WORK:-}" ] && extra+=(--work "$WORK")
  [ -n "$gbps" ] && extra+=(--target-gbps "$gbps")
  local out
  if [ "$path" = veth ]; then
    inns "$sns" "$bin" bench socket "$f" --mode server "${extra[@]}" >"$tmp/srv.json" 2>/dev/null &
    local pid=$!
    # A datagram sent before the server's socket is bound would be lost uncounted.
    local hex; hex=$(printf ':%04X ' "$port")
    for _ in $(seq 200); do
      inns "$sns" cat /proc/net/udp /proc/net/tcp | grep -q "$hex" && break
      sleep 0.02
    done
    inns "$cns" "$bin" bench socket "$f" --mode client "${extra[@]}" >"$tmp/cli.json" 2>/dev/null || true
    wait $pid || true
    out=$(python3 - "$tmp/srv.json" "$tmp/cli.json" <<'PY'
import json,sys
s=(lambda v: v.get("result", v))(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])); c=(lambda v: v.get("result", v))(json.loads(open(sys.argv[2]).read().strip().splitlines()[-1]))
print(f"{s['rx_gbps']:.3f} {str(s['lossless'] and s['lost']==0).lower()} {c['tx_gbps']:.3f} {s['lost']}")
PY
)
  else
    "$bin" bench socket "$f" --mode both "${extra[@]}" >"$tmp/both.json" 2>/dev/null || true
    out=$(python3 - "$tmp/both.json" <<'PY'
import json,sys
r=(lambda v: v.get("result", v))(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]))
print(f"{r['rx_gbps']:.3f} {str(r['lossless']).lower()} {r['tx_gbps']:.3f} {r['lost']}")
PY
)
  fi
  echo "$out"
}

# theirs PATH TRANSPORT STREAMS SIZE [GBPS] -> "rx_gbps lossless tx_gbps lost"
theirs() {
  local path=$1 t=$2 n=$3 size=$4 gbps=${5:-} sip sns cns port=$((40000 + RANDOM % 20000))
  if [ "$path" = veth ]; then sip=10.251.0.2 sns=$ns_s cns=$ns_c; else sip=127.0.0.1 sns= cns=; fi
  inns "$sns" taskset -c "$(core 1)" "$iperf" -s -1 -p $port >/dev/null 2>&1 &
  local pid=$!
  sleep 0.3
  local buf=$size; [ "$t" = tcp ] && buf=65536
  local window=$((16384 * buf)); [ $window -gt 67108864 ] && window=67108864
  local args=(-c $sip -p $port -t "$secs" -P "$n" -l "$size" -w "$window")
  if [ "$t" = udp ]; then
    # -b is per stream.
    local per=0
    [ -n "$gbps" ] && per=$(python3 -c "print(f'{$gbps*1000/$n:.1f}M')")
    args+=(-u -b "$per")
  fi
  inns "$cns" taskset -c "$(core $((half + 1)))" "$iperf" "${args[@]}" >"$tmp/iperf.txt" 2>&1 || true
  wait $pid 2>/dev/null || true
  python3 - "$tmp/iperf.txt" "$t" <<'PY'
import re,sys
text=open(sys.argv[1]).read(); udp=sys.argv[2]=="udp"
def rate(line):
    m=re.search(r"([\d.]+) ([KMG])bits/sec",line); return float(m.group(1))*{"K":1e-6,"M":1e-3,"G":1}[m.group(2)] if m else 0.0
lines=[l for l in text.splitlines() if re.search(r"bits/sec",l)]
sums=[l for l in lines if l.startswith("[SUM]")] or lines
snd=[l for l in sums if "sender" in l]; rcv=[l for l in sums if "receiver" in l]
tx=rate(snd[-1]) if snd else 0.0; rx=rate(rcv[-1]) if rcv else 0.0
lost=0
if udp and rcv:
    m=re.search(r"(\d+)/(\d+) \(",rcv[-1]); lost=int(m.group(1)) if m else -1
print(f"{rx:.3f} {'true' if (lost==0 and rx>0) else 'false'} {tx:.3f} {lost}")
PY
}

# highest_lossless TOOL PATH STREAMS SIZE -> "best_rx_gbps unpaced_rx unpaced_lost"
highest_lossless() {
  local tool=$1 path=$2 n=$3 size=$4
  read -r rx ok tx lost < <($tool "$path" udp "$n" "$size")
  local unpaced="$rx $lost"
  if [ "$ok" = true ]; then echo "$rx $unpaced"; return; fi
  local lo=0 hi=$tx best=0
  for _ in $(seq "$probes"); do
    local mid; mid=$(python3 -c "print(round(($lo+$hi)/2,3))")
    read -r rx ok tx lost < <($tool "$path" udp "$n" "$size" "$mid")
    if [ "$ok" = true ]; then lo=$mid; best=$rx; else hi=$mid; fi
  done
  echo "$best $unpaced"
}

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
ratio() { python3 -c "a,b=$1,$2; print(f'{a/b:.2f}' if b>0 else 'n/a')"; }

for path in $paths; do
  if [ "$path" = veth ]; then setup_veth || continue; fi
  for case in $cases; do
    t=${case%%[0-9]*}; size=${case#$t}
    for n in $streams_list; do
      if [ "$t" = udp ]; then
        read -r o_best o_unp o_unp_lost < <(highest_lossless ours "$path" "$n" "$size")
        read -r i_best i_unp i_unp_lost < <(highest_lossless theirs "$path" "$n" "$size")
        printf "%-8s udp %5d B x%d  highest lossless Gb/s: ours %7.3f iperf3 %7.3f ratio %s | unpaced: ours %.3f (lost %s) iperf3 %.3f (lost %s)\n" \
          "$path" "$size" "$n" "$o_best" "$i_best" "$(ratio "$o_best" "$i_best")" "$o_unp" "$o_unp_lost" "$i_unp" "$i_unp_lost"
        [ -n "${JSON:-}" ] && echo "{\"path\":\"$path\",\"transport\":\"udp\",\"size\":$size,\"streams\":$n,\"ours_lossless_gbps\":$o_best,\"iperf3_lossless_gbps\":$i_best,\"ours_unpaced_gbps\":$o_unp,\"ours_unpaced_lost\":$o_unp_lost,\"iperf3_unpaced_gbps\":$i_unp,\"iperf3_unpaced_lost\":$i_unp_lost}"
      else
        # Alternating runs, medians (loopback TCP varies by 10-15 % between runs).
        o_all=() i_all=()
        for _ in $(seq "$rounds"); do
          read -r o _ _ _ < <(ours "$path" tcp "$n" "$size"); o_all+=("$o")
          read -r i _ _ _ < <(theirs "$path" tcp "$n" "$size"); i_all+=("$i")
        done
        o_rx=$(median "${o_all[@]}")
        i_rx=$(median "${i_all[@]}")
        printf "%-8s tcp %5d B x%d  Gb/s: ours %7.3f iperf3 %7.3f ratio %s\n" "$path" "$size" "$n" "$o_rx" "$i_rx" "$(ratio "$o_rx" "$i_rx")"
        [ -n "${JSON:-}" ] && echo "{\"path\":\"$path\",\"transport\":\"tcp\",\"size\":$size,\"streams\":$n,\"ours_gbps\":$o_rx,\"iperf3_gbps\":$i_rx}"
      fi
    done
  done
done
