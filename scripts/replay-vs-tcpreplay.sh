#!/usr/bin/env bash
# `dataplane replay` against tcpreplay on the same wire, same capture, same receiver, in one
# run: a made-up capture (scripts/replay_frames.py: UDP frames of random sizes at random
# gaps of 2 to 100 us) sent at its own gaps from one network namespace over a veth pair,
# and captured again by tcpdump (nanosecond kernel timestamps) in the other. Ours is the
# DPDK engine on net_af_packet with an `accurate_send` queue (software pacing in the TX
# worker); tcpreplay sends through PF_PACKET as well. Both senders run on core CORE
# (default 1); ROUNDS (default 3) alternating rounds of each, FRAMES per capture (default
# 20000). Prints each round's frames and gap error (|gap sent - gap captured|), then the
# medians and the ratio of tcpreplay's median gap error to ours. Root; needs a build with
# DPDK (`--features dpdk`), tcpreplay and tcpdump (apt-get install tcpreplay tcpdump).
# The receiver's timestamps are the kernel's, taken on the same core mix for both senders,
# so the figures compare the senders, not the clock.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DATAPLANE_BIN:-target/release/dataplane}
frames=${FRAMES:-20000}
rounds=${ROUNDS:-3}
core=${CORE:-1}
for tool in tcpreplay tcpdump; do
  command -v $tool >/dev/null || { echo "replay-vs-tcpreplay: $tool missing (apt-get install tcpreplay tcpdump)" >&2; exit 1; }
done
"$bin" --version | grep -q dpdk || { echo "replay-vs-tcpreplay: $bin has no DPDK (build with --features dpdk)" >&2; exit 1; }
work=$(mktemp -d /tmp/replay-vs.XXXXXX)
ns_tx=dprp1 ns_rx=dprp2
cleanup() {
  jobs -p | xargs -r kill 2>/dev/null || true
  ip netns del $ns_tx 2>/dev/null || true
  ip netns del $ns_rx 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add $ns_tx
ip netns add $ns_rx
ip link add dprpa netns $ns_tx type veth peer name dprpb netns $ns_rx
ip -n $ns_tx link set dprpa up
ip -n $ns_rx link set dprpb up
# No IPv6 chatter (router solicitations) in the capture.
for ns in $ns_tx $ns_rx; do ip netns exec $ns sysctl -qw net.ipv6.conf.all.disable_ipv6=1; done

cat > "$work/replay.yaml" <<YAML
dataplane:
  cfg:
    version: 1
    stream_type: raw
    master_core: 0
    memory_regions:
    - {name: tx, kind: host, affinity: 0, num_bufs: 8192, buf_size: 1500}
    interfaces:
    - name: veth
      address: "net_af_packet0,iface=dprpa"
      tx:
        accurate_send: true
        queues: [{name: tq, id: 0, cpu_core: $core, batch_size: 32, memory_regions: [tx]}]
YAML
python3 scripts/replay_frames.py make "$work/first.pcap" "$frames"
# The capture's length plus slack: tcpdump stops after every frame, or here.
limit=$((frames * 51 / 1000000 + 15))

# One round: tcpdump ready in the receiving namespace, then the sender; the capture
# compared with the original. SENDER is `ours` or `tcpreplay`.
round() {
  local sender=$1 n=$2 again="$work/$1-$2.pcap"
  ip netns exec $ns_rx timeout -s INT $limit tcpdump -i dprpb -Q in -B 65536 -U -n \
    --time-stamp-precision=nano -c "$frames" -w "$again" 'udp dst port 7001' \
    2> "$work/tcpdump.log" &
  local dump=$!
  for _ in $(seq 100); do grep -q listening "$work/tcpdump.log" && break; sleep 0.1; done
  case $sender in
  ours) ip netns exec $ns_tx "$bin" replay "$work/replay.yaml" "$work/first.pcap" --quiet ;;
  tcpreplay) ip netns exec $ns_tx taskset -c "$core" tcpreplay -q -K ${TCPREPLAY_TIMER:+--timer=$TCPREPLAY_TIMER} -i dprpa "$work/first.pcap" >/dev/null ;;
  esac
  wait $dump || true
  JSON=1 python3 scripts/replay_frames.py compare "$work/first.pcap" "$again" "$sender round $n" \
    | tee -a "$work/results" | grep -v '^{' || true
}

for n in $(seq "$rounds"); do
  round ours "$n"
  round tcpreplay "$n"
done
python3 - "$work/results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
median = {}
for sender in ('ours', 'tcpreplay'):
    errors = [r['gap_error_us']['median'] for r in rows
              if r['label'].startswith(sender) and r['gap_error_us']]
    lost = sum(r['frames'] - r['identical'] for r in rows if r['label'].startswith(sender))
    median[sender] = statistics.median(errors) if errors else float('nan')
    print(f"{sender}: median of the rounds' median gap error {median[sender]:.2f} us, "
          f"frames not identical or missing over all rounds: {lost}")
print(f"tcpreplay / ours (median gap error): {median['tcpreplay'] / median['ours']:.2f}")
PY
