#!/usr/bin/env bash
# Runs the benchmarks recorded in BENCHMARKS.md on this machine.
set -euo pipefail
bin=./target/release/dataplane
for p in 64 1024; do
  sed "s/payload_size: 1024 /payload_size: $p /" configs/sw_loopback.yaml > /tmp/dp-bench-$p.yaml
  for r in 1 2 3; do
    $bin bench raw /tmp/dp-bench-$p.yaml --seconds 5 --json 2>/dev/null | tail -n 1
  done
done
$bin bench ring --json
