#!/usr/bin/env bash
# Payload-size sweep on a configuration (default: the software loopback), one
# `bench raw --json` result per size, then one plot of them all.
#   scripts/sweep.sh [CONFIG] [OUT_DIR]
# Environment: SIZES (payload bytes, default "64 128 256 512 1024 2048 4096 8000"),
# SECONDS_RUN (per size, default 5), DATAPLANE_BIN (default target/release/dataplane).
# The config's `payload_size: N` and `buf_size: M` lines (every one of each) are
# rewritten per size; buffers become header + payload bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/sw_loopback.yaml}
out=${2:-target/sweep}
bin=${DATAPLANE_BIN:-target/release/dataplane}
sizes=${SIZES:-64 128 256 512 1024 2048 4096 8000}
seconds=${SECONDS_RUN:-5}
[ -x "$bin" ] || cargo build --release --bin dataplane
mkdir -p "$out"
header=$(sed -n 's/^ *header_size: *\([0-9]*\).*/\1/p' "$config" | head -n 1)
header=${header:-64}
results=()
for p in $sizes; do
  buf=$((header + p))
  sed -e "s/payload_size: *[0-9]*/payload_size: $p/" \
      -e "s/buf_size: *[0-9]*/buf_size: $buf/" "$config" > "$out/payload_$p.yaml"
  echo "sweep: payload $p B ($seconds s)" >&2
  "$bin" bench raw "$out/payload_$p.yaml" --seconds "$seconds" --json -q \
    --csv "$out/payload_$p.csv" > "$out/payload_$p.json" || {
    echo "sweep: payload $p B: the run failed (exit $?); see $out/payload_$p.json" >&2
    exit 1
  }
  results+=("$out/payload_$p.json")
done
"$bin" plot "${results[@]}" -o "$out/sweep.png"
for r in "${results[@]}"; do
  python3 -c "import json,sys; d=(lambda v: v.get('result', v))(json.loads(open(sys.argv[1]).read().splitlines()[-1])); print(f\"{d['setup']['payload_bytes']:>6} B  {d['rx_mpps']:8.3f} Mpps  {d['rx_gbps']:8.2f} Gb/s  {d['verdict']}\")" "$r"
done
