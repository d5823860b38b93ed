#!/usr/bin/env bash
# Model-checks the ring's head/tail protocol with loom (its own target dir: `--cfg loom`
# rebuilds the crate with loom's atomics and cells).
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p dataplane-ring --test loom --release
