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
# RUN steps in a chroot (buildah's chroot isolation): works where nested containers cannot
# set up cgroups, as inside the CI's own container.
# Certificate authorities this machine adds to Debian's (an intercepting proxy's) are lent
# to the build, where installing ca-certificates takes them in.
extra_ca=()
if [ -n "$(ls /usr/local/share/ca-certificates 2>/dev/null)" ]; then
  extra_ca=(--volume /usr/local/share/ca-certificates:/usr/local/share/ca-certificates:ro)
fi
podman build --no-cache --isolation=chroot "${extra_ca[@]}" -q -t localhost/dataplane:check -f Containerfile . >/dev/null
if ! out=$(podman run --rm localhost/dataplane:check 2>/tmp/container-run.err); then
  # Nested inside another container, crun may not set rlimits or cgroups: run the image's
  # command (make run) in a chroot of a container's writable root instead, and say so.
  echo "container-check: podman run is not permitted here ($(tail -1 /tmp/container-run.err)); running the image's command in a chroot of a container made from it"
  cid=$(podman create localhost/dataplane:check)
  root=$(podman mount "$cid")
  mount -t proc proc "$root/proc"
  out=$(chroot "$root" sh -c 'cd /dataplane && PATH=/root/.cargo/bin:$PATH make run' 2>/dev/null) || true
  umount "$root/proc"
  podman umount "$cid" >/dev/null
  podman rm "$cid" >/dev/null
fi
echo "$out" | tail -3
grep -q '^LOSSLESS' <<< "$out" || { echo "container-check: make run in the container did not end LOSSLESS" >&2; exit 1; }
podman image rm -f localhost/dataplane:check >/dev/null
echo "container-check: the Containerfile builds and its make run is lossless"
