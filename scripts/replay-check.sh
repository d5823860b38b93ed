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
python3 - "$work/first.pcap" "$frames" <<'PY'
import random, struct, sys
random.seed(7)
out = open(sys.argv[1], 'wb')
out.write(struct.pack('<IHHiIII', 0xa1b23c4d, 2, 4, 0, 0, 65535, 1))
t = 1_700_000_000 * 10**9
for i in range(int(sys.argv[2])):
    payload = bytes((k ^ i) & 0xff for k in range(random.randint(18, 1400)))
    udp = struct.pack('>HHHH', 7000, 7001, 8 + len(payload), 0) + payload
    ip = struct.pack('>BBHHHBBH4s4s', 0x45, 0, 20 + len(udp), i & 0xffff, 0, 64, 17, 0,
                     bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    s = sum(struct.unpack('>10H', ip))
    s = (s & 0xffff) + (s >> 16); s = (s & 0xffff) + (s >> 16)
    ip = ip[:10] + struct.pack('>H', ~s & 0xffff) + ip[12:]
    frame = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0]) + ip + udp
    t += random.randint(2_000, 100_000)
    out.write(struct.pack('<IIII', t // 10**9, t % 10**9, len(frame), len(frame)) + frame)
PY
"$bin" replay "$work/replay.yaml" "$work/first.pcap" --json --quiet | tail -1 > "$work/replay.json"
python3 - "$work/first.pcap" "$work/again.pcap" "$work/replay.json" <<'PY'
import json, struct, sys

def frames(path):
    data = open(path, 'rb').read()
    magic = struct.unpack('<I', data[:4])[0]
    scale = {0xa1b2c3d4: 1000, 0xa1b23c4d: 1}[magic]
    out, at = [], 24
    while at < len(data):
        sec, frac, incl, _ = struct.unpack('<IIII', data[at:at + 16])
        out.append((sec * 10**9 + frac * scale, data[at + 16:at + 16 + incl]))
        at += 16 + incl
    return out

first, again = frames(sys.argv[1]), frames(sys.argv[2])
report = json.loads(open(sys.argv[3]).read())['result']
same = sum(a[1] == b[1] for a, b in zip(first, again))
print(f"frames: {len(first)} captured, {len(again)} captured again, {same} identical in order")
gaps = lambda f: [b[0] - a[0] for a, b in zip(f, f[1:])]
errors = sorted(abs(a - b) / 1000 for a, b in zip(gaps(first), gaps(again)))
if errors:
    pick = lambda q: errors[min(len(errors) - 1, int(q * len(errors)))]
    print(f"gap error: median {pick(0.5):.2f} us, p99 {pick(0.99):.2f} us, max {errors[-1]:.2f} us "
          f"(median gap {sorted(gaps(first))[len(errors) // 2] / 1000:.2f} us)")
e = report.get('send_error') or {}
print(f"send-time error: median {e.get('p50_ns')} ns, p99 {e.get('p99_ns')} ns, max {e.get('max_ns')} ns")
sys.exit(0 if same == len(first) == len(again) else 1)
PY
