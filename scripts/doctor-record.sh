#!/usr/bin/env bash
# Records the /proc and /sys files `dataplane doctor` reads into OUT, so a machine can be
# checked elsewhere (`dataplane doctor CONFIG --root OUT`) or kept as a test case.
#   scripts/doctor-record.sh OUT
set -euo pipefail
out=${1:?usage: scripts/doctor-record.sh OUT}
mkdir -p "$out"
copy() { # copy FILE...: each existing regular file, under its own path
  for f in "$@"; do
    [ -f "$f" ] || continue
    mkdir -p "$out$(dirname "$f")"
    cat "$f" > "$out$f" 2>/dev/null || rm -f "$out$f"
  done
}
link() { # link PATH: a symbolic link, as a link to the same target
  [ -L "$1" ] || return 0
  mkdir -p "$out$(dirname "$1")"
  ln -sfn "$(readlink "$1")" "$out$1"
}
# Only the lines doctor reads, so a recording says nothing else about the machine.
mkdir -p "$out/proc/self"
grep -E '^(MemTotal|HugePages_|Hugepagesize)' /proc/meminfo > "$out/proc/meminfo" || true
# Huge page mounts, and the file systems on block devices (where a GPU capture's files go).
grep -E '^([^ ]+ [^ ]+ hugetlbfs |/dev/)' /proc/mounts > "$out/proc/mounts" || true
grep -E '^(Limit|Max locked memory)' /proc/self/limits > "$out/proc/self/limits" || true
grep -E '^CapEff:' /proc/self/status > "$out/proc/self/status" || true
copy /proc/sys/net/core/rmem_max /proc/sys/net/core/wmem_max /proc/driver/nvidia/version
copy /proc/irq/*/smp_affinity_list /proc/irq/*/effective_affinity_list
for g in /proc/driver/nvidia/gpus/*; do [ -d "$g" ] && copy "$g/information"; done
copy /sys/devices/system/cpu/online /sys/devices/system/cpu/isolated /sys/devices/system/cpu/nohz_full
copy /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor /sys/devices/system/cpu/cpu*/topology/thread_siblings_list
copy /sys/devices/system/node/node*/cpulist
copy /sys/devices/system/node/node*/hugepages/hugepages-*/nr_hugepages /sys/devices/system/node/node*/hugepages/hugepages-*/free_hugepages
copy /sys/kernel/mm/hugepages/hugepages-*/nr_hugepages /sys/kernel/mm/hugepages/hugepages-*/free_hugepages
for d in /sys/bus/pci/devices/*; do
  copy "$d/vendor" "$d/class" "$d/numa_node" "$d"/net/*/mtu
  copy "$d/current_link_speed" "$d/max_link_speed" "$d/current_link_width" "$d/max_link_width"
  # Config space (root reads all of it): the PCI Express capability's read request size.
  copy "$d/config"
  # BARs (start, end, flags per line): a GPU's BAR1 is the GPUDirect aperture.
  copy "$d/resource"
  link "$d/driver"
  link "$d/iommu_group"
done
for g in /sys/kernel/iommu_groups/*; do
  [ -d "$g" ] && mkdir -p "$out$g" && touch "$out$g/.keep" && copy "$g/type"
done
for p in /sys/class/infiniband/*/ports/*; do
  [ -d "$p" ] || continue
  copy "$p"/gids/* "$p"/gid_attrs/types/*
done
# Block devices' numbers and udev's database entries for them: cuFile reads the file
# system's type there (GPUDirect Storage).
copy /sys/class/block/*/dev /run/udev/data/b*
# Of cuFile's configuration only the switch doctor reads.
if [ -f /etc/cufile.json ]; then
  mkdir -p "$out/etc"
  compat=$(grep -o '"allow_compat_mode"[^,}]*' /etc/cufile.json | head -1)
  echo "{\"properties\": {${compat:-}}}" > "$out/etc/cufile.json"
fi
[ -d /proc/driver/nvidia-fs ] && mkdir -p "$out/proc/driver/nvidia-fs" && touch "$out/proc/driver/nvidia-fs/.keep"
# What only the driver knows (persistence mode, clocks): nvidia-smi's answer, as doctor
# asks for it on a live machine.
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,pci.bus_id,persistence_mode,clocks.applications.graphics,clocks.max.graphics,clocks.applications.memory,clocks.max.memory \
    --format=csv,noheader,nounits > "$out/nvidia-smi-query-gpu.csv" || rm -f "$out/nvidia-smi-query-gpu.csv"
fi
# Which GPUs the CUDA driver calls integrated (CU_DEVICE_ATTRIBUTE_INTEGRATED, 18): no file
# says it (a GB10's or a Jetson's GPU).
if command -v python3 >/dev/null; then
  python3 - "$out/cuda-integrated-gpus" <<'PY' || true
import ctypes, sys
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError:
    sys.exit(0)
n = ctypes.c_int()
if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(n)) != 0:
    sys.exit(0)
found = []
for i in range(n.value):
    dev, v = ctypes.c_int(), ctypes.c_int()
    if cuda.cuDeviceGet(ctypes.byref(dev), i) == 0 and cuda.cuDeviceGetAttribute(ctypes.byref(v), 18, dev) == 0 and v.value:
        found.append(str(i))
open(sys.argv[1], "w").write(",".join(found) + "\n")
PY
fi
for mod in nvidia nvidia_fs nvidia_peermem; do [ -d "/sys/module/$mod" ] && mkdir -p "$out/sys/module/$mod" && touch "$out/sys/module/$mod/.keep"; done
echo "recorded into $out ($(find "$out" -type f | wc -l) files)"
