#!/usr/bin/env bash
# Memory checking with valgrind (memcheck): the C API examples (built by `make test`
# into target/), and the unit tests of the crates that hold most `unsafe`: the ring, and
# the library's bursts, pools and regions. Any invalid read or write, use of
# uninitialised memory or definite leak fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
vg=(valgrind -q --error-exitcode=99 --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite)
for bin in target/c-loopback target/c-threads target/c-handler; do
    echo "memcheck: $bin"
    "${vg[@]}" "$bin" >/dev/null
done
# The test binaries of the same build `make test` ran (nothing is rebuilt).
tests=$(cargo test --release --workspace ${FEATURES---features dataplane-cli/dpdk} --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    t = m.get("target", {})
    if m.get("reason") == "compiler-artifact" and m.get("executable") and t.get("kind") == ["lib"] \
            and t.get("name") in ("dataplane_ring", "dataplane"):
        print(t["name"], m["executable"])')
while read -r name bin; do
    case $name in
        # Bursts, pools and regions: the library's own unsafe code.
        dataplane) filter=(burst:: memory::) ;;
        *) filter=() ;;
    esac
    echo "memcheck: $name unit tests ${filter[*]:-}"
    "${vg[@]}" "$bin" -q --test-threads=2 "${filter[@]}" >/dev/null
done <<<"$tests"
echo "memcheck: no errors"
