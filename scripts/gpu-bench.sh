#!/bin/bash
# GPU benchmarks on a machine with an NVIDIA GPU (BENCHMARKS.md, "GPU"): `bench gpu`
# (staged ingest vs a pinned host-to-device copy, reorder kernel vs a device copy), then
# the GPU loopback configs in both stage modes next to the same configs in pinned host
# memory (no stage). Build elsewhere and carry the binary: DATAPLANE_BIN=path/to/dataplane.
# Prints one summary line per run; OUT=dir also keeps the JSON reports there.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${DATAPLANE_BIN:-target/release/dataplane}
out=${OUT:-$(mktemp -d)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Each case's line to the terminal as it is measured (stderr), the JSON (the last line of
# stdout) to the reports folder. GPU_PARTS="--only stage" (for instance) narrows it.
timeout 300 "$bin" bench gpu ${GPU_PARTS:-} --json > "$tmp/gpu.txt" || exit 1
grep '^{' "$tmp/gpu.txt" > "$out/bench_gpu.json"
summary() { # label json-line
  python3 -c "import json,sys; r=(lambda v: v.get('result', v))(json.loads(sys.argv[2])); print(sys.argv[1], 'lossless' if r['lossless'] else 'NOT LOSSLESS', round(r['rx_mpps'],2), 'Mpps', round(r['rx_gbps'],1), 'Gb/s', r.get('reorder',''))" "$1" "$2"
}
run() { # label config
  local line
  line=$(timeout 120 "$bin" bench raw "$2" --seconds "${SECONDS_RUN:-4}" --json 2>/dev/null | tail -1)
  [ -n "$line" ] || { echo "$1: no report (failed or timed out)"; return; }
  echo "$line" >> "$out/raw.jsonl"
  summary "$1" "$line"
}
for c in gpu_loopback_64 gpu_loopback_8k; do
  for mode in copy kernel; do
    sed "s/gpu_stage: \"copy\"/gpu_stage: \"$mode\"/" "configs/$c.yaml" > "$tmp/$c-$mode.yaml"
    run "$c device $mode" "$tmp/$c-$mode.yaml"
  done
  # The stage on a worker of its own (stage_core: 2), the RX worker only receiving.
  sed 's/memory_regions: \["rx_gpu"\]}/stage_core: 2, memory_regions: ["rx_gpu"]}/' \
    "configs/$c.yaml" > "$tmp/$c-stage-core.yaml"
  run "$c device copy, stage_core 2" "$tmp/$c-stage-core.yaml"
  sed 's/kind: "device"/kind: "host_pinned"/' "configs/$c.yaml" > "$tmp/$c-host.yaml"
  run "$c host_pinned (no stage, peer)" "$tmp/$c-host.yaml"
done
run gpu_loopback_hds configs/gpu_loopback_hds.yaml
run gpu_loopback_reorder configs/gpu_loopback_reorder.yaml
echo "reports in $out"
