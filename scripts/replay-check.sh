#!/usr/bin/env bash
# The replay regression recipe, on the software loopback: a capture (here made up: UDP
# frames of random sizes at random gaps, 2 to 100 us, like a field capture's), replayed at
# its own gaps through an accurate_send queue while the RX queue captures again; then the
# two files compared frame by frame (bytes) and gap by gap. Prints the gap error's
# median, p99 and max, and the replay's own send-time error.
# Usage: scripts/replay-check.sh [FRAMES] (default 20000); CORE=N puts the workers there.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DATAPLANE_BIN:-target/release/dataplane}
frames=${1:-20000}
work=$(mktemp -d /tmp/replay-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
core=${CORE:-1}
cat > "$work/replay.yaml" <<YAML
dataplane:
  cfg:
    version: 1
    stream_type: raw
    master_core: 0
    loopback: "sw"
    memory_regions:
    - {name: tx, kind: host, affinity: 0, num_bufs: 8192, buf_size: 1536}
    - {name: rx, kind: host, affinity: 0, num_bufs: 8192, buf_size: 1536}
    interfaces:
    - name: loop0
      address: loopback
      tx:
        accurate_send: true
        queues: [{name: tq, id: 0, cpu_core: $core, batch_size: 32, memory_regions: [tx]}]
      rx:
        hardware_timestamps: true
        queues:
        - {name: rq, id: 0, cpu_core: $core, batch_size: 32, timeout_us: 20, memory_regions: [rx],
           capture: {path: "$work/again.pcap", format: pcap}}
YAML
python3 scripts/replay_frames.py make "$work/first.pcap" "$frames"
"$bin" replay "$work/replay.yaml" "$work/first.pcap" --json --quiet | tail -1 > "$work/replay.json"
ok=0
python3 scripts/replay_frames.py compare "$work/first.pcap" "$work/again.pcap" || ok=$?
python3 - "$work/replay.json" <<'PY'
import json, sys
e = json.loads(open(sys.argv[1]).read())['result'].get('send_error') or {}
print(f"send-time error: median {e.get('p50_ns')} ns, p99 {e.get('p99_ns')} ns, max {e.get('max_ns')} ns")
PY
exit $ok
