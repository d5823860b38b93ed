#!/usr/bin/env bash
# Builds the Containerfile with podman and runs what it runs (`make run`), which must end
# LOSSLESS. The test machines reach Debian's mirror but no image registry, so where
# `debian:12` cannot be pulled the base image is made with debootstrap from the mirror
# and tagged with the name the Containerfile asks for. About 15 minutes on 2 cores (the
# workspace builds inside), so `make test` runs it only when asked: STEPS=container.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v podman >/dev/null || need+=(podman)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [ "${#need[@]}" -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
base=docker.io/library/debian:12
if ! podman image exists "$base" && ! timeout 60 podman pull -q "$base"; then
  root=$(mktemp -d /tmp/container-root.XXXXXX)
  trap 'rm -rf "$root"' EXIT
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >/dev/null
  tar -C "$root" -c . | podman import -q - "$base" >/dev/null
  echo "container-check: $base made with debootstrap (no registry reachable)"
fi
podman build -q -t localhost/dataplane:check -f Containerfile . >/dev/null
out=$(podman run --rm localhost/dataplane:check)
echo "$out" | tail -3
grep -q '^LOSSLESS' <<< "$out" || { echo "container-check: make run in the container did not end LOSSLESS" >&2; exit 1; }
podman image rm -f localhost/dataplane:check >/dev/null
echo "container-check: the Containerfile builds and its make run is lossless"
