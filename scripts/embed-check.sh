#!/bin/sh
# The library as an embedder takes it: without default features it pulls in no CLI, RDMA
# or CUDA crate, builds and lints on its own, and the example sensor application runs on
# the loopback.
set -eu
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
tree=$($CARGO tree -p dataplane --no-default-features -e normal --prefix none)
for crate in clap serde_json signal-hook tracing-subscriber rdma sideway cudarc; do
    if printf '%s\n' "$tree" | grep -q "^$crate v"; then
        echo "embed-check: \`dataplane\` without default features depends on $crate" >&2
        exit 1
    fi
done
echo "embed-check: $(printf '%s\n' "$tree" | sort -u | wc -l) crates without default features, none of them CLI, RDMA or CUDA crates"
$CARGO clippy -p dataplane --no-default-features --all-targets -- -D warnings
# The dev profile: nothing else in `make test` builds these crates without default
# features in release, and the example moves 100,000 samples, quick either way.
$CARGO run -p sensor-example
