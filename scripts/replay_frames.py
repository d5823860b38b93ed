#!/usr/bin/env python3
"""The replay checks' frames: make a capture, or compare a capture with its replay.

  replay_frames.py make OUT.pcap FRAMES
      UDP frames (7000 -> 7001) of random sizes at random gaps of 2 to 100 us, like a
      field capture's, in a nanosecond pcap; the same every time (seeded).
  replay_frames.py compare FIRST.pcap AGAIN.pcap [LABEL]
      Frames identical and in order, and the gap error (|gap in FIRST - gap in AGAIN|):
      median, p99 and max. Exit status 1 unless every frame came back identical.
      With JSON=1 a last line {"label", "frames", "identical", "gap_error_us": {...}}.
"""
import json
import os
import random
import struct
import sys


def make(path, count):
    random.seed(7)
    with open(path, 'wb') as out:
        out.write(struct.pack('<IHHiIII', 0xa1b23c4d, 2, 4, 0, 0, 65535, 1))
        t = 1_700_000_000 * 10**9
        for i in range(count):
            payload = bytes((k ^ i) & 0xff for k in range(random.randint(18, 1400)))
            udp = struct.pack('>HHHH', 7000, 7001, 8 + len(payload), 0) + payload
            ip = struct.pack('>BBHHHBBH4s4s', 0x45, 0, 20 + len(udp), i & 0xffff, 0, 64, 17,
                             0, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
            s = sum(struct.unpack('>10H', ip))
            s = (s & 0xffff) + (s >> 16)
            s = (s & 0xffff) + (s >> 16)
            ip = ip[:10] + struct.pack('>H', ~s & 0xffff) + ip[12:]
            frame = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0]) + ip + udp
            t += random.randint(2_000, 100_000)
            out.write(struct.pack('<IIII', t // 10**9, t % 10**9, len(frame), len(frame)))
            out.write(frame)


def frames(path):
    """(time in ns, frame bytes) of every record of a classic pcap, us or ns."""
    data = open(path, 'rb').read()
    magic = struct.unpack('<I', data[:4])[0]
    scale = {0xa1b2c3d4: 1000, 0xa1b23c4d: 1}[magic]
    out, at = [], 24
    while at < len(data):
        sec, frac, incl, _ = struct.unpack('<IIII', data[at:at + 16])
        out.append((sec * 10**9 + frac * scale, data[at + 16:at + 16 + incl]))
        at += 16 + incl
    return out


def compare(first_path, again_path, label):
    first, again = frames(first_path), frames(again_path)
    same = sum(a[1] == b[1] for a, b in zip(first, again))
    print(f"{label}frames: {len(first)} captured, {len(again)} captured again, "
          f"{same} identical in order")
    gaps = lambda f: [b[0] - a[0] for a, b in zip(f, f[1:])]
    errors = sorted(abs(a - b) / 1000 for a, b in zip(gaps(first), gaps(again)))
    summary = None
    if errors:
        pick = lambda q: errors[min(len(errors) - 1, int(q * len(errors)))]
        summary = {'median': pick(0.5), 'p99': pick(0.99), 'max': errors[-1]}
        print(f"{label}gap error: median {summary['median']:.2f} us, p99 {summary['p99']:.2f} us, "
              f"max {summary['max']:.2f} us "
              f"(median gap {sorted(gaps(first))[len(errors) // 2] / 1000:.2f} us)")
    if os.environ.get('JSON') == '1':
        print(json.dumps({'label': label.rstrip(': '), 'frames': len(first),
                          'identical': same, 'gap_error_us': summary}))
    return same == len(first) == len(again)


if __name__ == '__main__':
    if len(sys.argv) == 4 and sys.argv[1] == 'make':
        make(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) in (4, 5) and sys.argv[1] == 'compare':
        label = sys.argv[4] + ': ' if len(sys.argv) == 5 else ''
        sys.exit(0 if compare(sys.argv[2], sys.argv[3], label) else 1)
    else:
        sys.exit(__doc__)
