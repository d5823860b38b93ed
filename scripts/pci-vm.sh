#!/bin/bash
# The DPDK engine's PCI path on a real PMD and a real IOMMU: a throw-away QEMU VM (TCG)
# booting Debian's stock kernel (the one ../shared/tools/rxe-vm caches) with an emulated
# Intel IOMMU and two Intel 82576 NICs (QEMU's `igb`) on one hub. In the VM both NICs are
# bound to vfio-pci and `dataplane bench raw` sends on one and receives on the other, as on
# a server: EAL probes the PCI bus, net_e1000_igb drives the devices, regions are lent to
# the receiving NIC (external memory DMA-mapped through the IOMMU), the MTU is set, the
# rings are fitted to the driver. Passes when the bench is lossless, verified, received
# into the lent region, and the engine's log shows the PCI decisions (below); and when a
# TX flow's VLAN tags are inserted by the NIC (its VLAN insert offload) and arrive as
# configured on exactly the frames the flow matches.
# Usage: scripts/pci-vm.sh [dataplane binary]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-target/release/dataplane}")
PMDS=$(ls -d "$(pkg-config --variable=libdir libdpdk)"/dpdk/pmds-* | tail -1)
. scripts/vm-initrd.sh
vm_prepare pci-vm
copy_with_libs "$CACHE/busybox/busybox" "$BIN" "$PMDS"/librte_net_e1000.so.23.0 \
    "$PMDS"/librte_bus_pci.so.23.0 "$PMDS"/librte_mempool_ring.so.23.0
for f in "$PMDS"/librte_{net_e1000,bus_pci,mempool_ring}.so.23; do copy_path "$f"; done
cp "$BIN" "$IR/opt/dataplane"
KM=$W/k/lib/modules/$KVER/kernel
for m in virt/lib/irqbypass drivers/vfio/vfio drivers/vfio/vfio_iommu_type1 \
    drivers/vfio/vfio_virqfd drivers/vfio/pci/vfio-pci-core drivers/vfio/pci/vfio-pci; do
    cp "$KM/$m.ko" "$IR/mods/"
done
# TX on the first NIC, RX on the second; the RX region is lent to the NIC (zero copy),
# TX buffers attached; 9000-byte frames need the MTU raised from 1500. The 82576 fills
# 1 KiB multiples of a buffer (8 KiB of a 9000-byte one), so each frame arrives in two of
# the region's buffers and is joined in the first. TX buffers are 16 KiB so that no frame
# crosses a 2 MiB page: QEMU's igb drops a frame whose TX buffer crosses an IOMMU mapping
# boundary (seen: 1 frame in 234 with 9000-byte buffers; copying TX (zero_copy: false)
# loses none).
cat > "$IR/pci_vm.yaml" <<'YAML'
dataplane:
  cfg:
    version: 1
    stream_type: raw
    master_core: 0
    log_level: info
    memory_regions:
    - {name: tx_bufs, kind: huge, affinity: 0, num_bufs: 4096, buf_size: 16384}
    - {name: rx_bufs, kind: huge, affinity: 0, num_bufs: 8192, buf_size: 9000, zero_copy: true}
    interfaces:
    - name: tx_nic
      address: "0000:00:04.0"
      tx:
        queues:
        - {name: t, id: 0, cpu_core: 1, batch_size: 32, memory_regions: [tx_bufs]}
    - name: rx_nic
      address: "0000:00:08.0"
      rx:
        queues:
        - {name: r, id: 0, cpu_core: 1, batch_size: 32, timeout_us: 100, memory_regions: [rx_bufs]}
bench_tx:
  interface_name: tx_nic
  queue_id: 0
  cpu_core: -1
  batch_size: 32
  header_size: 64
  payload_size: 8936
  eth_src_addr: "02:00:00:00:00:01"
  eth_dst_addr: "02:00:00:00:00:02"
  ip_src_addr: 198.18.0.1
  ip_dst_addr: 198.18.0.2
  udp_src_port: 4096
  udp_dst_port: 5000
bench_rx:
  interface_name: rx_nic
  queue_id: 0
  cpu_core: -1
YAML
# TX VLAN insert in hardware: frames to UDP port 5000 match a TX flow that pushes VLAN 100
# with priority 5, those to 5001 none. The 82576 offers VLAN insert, so the device tags the
# frames (no software copy); the other NIC receives them with the tag (no VLAN strip) and
# the capture's first bytes show what was on the wire.
python3 - "$IR/pci_vm.yaml" "$IR/vlan.yaml" <<'PY'
import sys
s = open(sys.argv[1]).read()
for old, new in [
    ("num_bufs: 4096, buf_size: 16384", "num_bufs: 1024, buf_size: 2048"),
    ("num_bufs: 8192, buf_size: 9000, zero_copy: true", "num_bufs: 2048, buf_size: 2048"),
    ("      tx:\n        queues:", "      tx:\n        flows:\n        - {name: tag, id: 1, actions: "
     "[{type: vlan_push, vlan_id: 100, pcp: 5}], match: {udp_dst: 5000}}\n        queues:"),
    ("payload_size: 8936", "payload_size: 64"),
    ("udp_dst_port: 5000", 'udp_dst_port: "5000-5001"'),
]:
    assert old in s, old
    s = s.replace(old, new)
open(sys.argv[2], "w").write(s)
PY
cat > "$IR/init" <<INIT
#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev; mount -t tmpfs tmp /tmp
for m in irqbypass vfio vfio_iommu_type1 vfio_virqfd vfio-pci-core vfio-pci; do
    insmod /mods/\$m.ko || echo "PCIVM: insmod \$m failed"
done
for d in 0000:00:04.0 0000:00:08.0; do
    echo "PCIVM: \$d \$(cat /sys/bus/pci/devices/\$d/vendor):\$(cat /sys/bus/pci/devices/\$d/device) iommu_group \$(basename \$(readlink /sys/bus/pci/devices/\$d/iommu_group))"
    echo vfio-pci > /sys/bus/pci/devices/\$d/driver_override
    echo \$d > /sys/bus/pci/drivers_probe
done
ls /dev/vfio | sed 's/^/PCIVM: vfio /'
echo 400 > /proc/sys/vm/nr_hugepages
mkdir -p /dev/hugepages; mount -t hugetlbfs nodev /dev/hugepages
export DATAPLANE_EAL_ARGS="-d /usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0/librte_bus_pci.so.23.0 -d /usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0/librte_net_e1000.so.23.0 -d /usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0/librte_mempool_ring.so.23.0"
timeout 400 /opt/dataplane bench raw /pci_vm.yaml --seconds 3 --json > /tmp/out 2>&1
echo "PCIVM: bench rc=\$?"
sed 's/^/PCIVM: /' /tmp/out
timeout 200 /opt/dataplane capture /vlan.yaml /tmp/vlan.pcap --tx --seconds 1 --target-gbps 0.005 > /tmp/vlan.out 2>&1
echo "PCIVMVLAN: capture rc=\$?"
grep -E "VLAN|TX flow" /tmp/vlan.out | sed "s/^/PCIVMVLAN: /"; tail -5 /tmp/vlan.out | sed "s/^/PCIVMVLAN: /"
od -A n -t x1 -v -N 4096 /tmp/vlan.pcap | sed 's/^/PCIVMHEX:/'
poweroff -f
INIT
chmod +x "$IR/init"
vm_pack_initrd
timeout 600 qemu-system-x86_64 -accel tcg -cpu max -m 2048 -smp 2 -nographic -no-reboot \
    -machine q35 -device intel-iommu,caching-mode=on -nic none \
    -netdev hubport,id=n0,hubid=0 -device igb,netdev=n0,addr=04 \
    -netdev hubport,id=n1,hubid=0 -device igb,netdev=n1,addr=08 \
    -kernel "$KDIR/vmlinux" -initrd "$W/initrd" \
    -append "console=ttyS0 panic=-1 quiet intel_iommu=on" </dev/null \
    > "$W/console.log" 2>&1 || true
grep -a "PCIVM" "$W/console.log" | sed 's/\r$//' | grep -v '^PCIVM: {' | tee "$W/result" >&2
JSON=$(grep -a '^PCIVM: {' "$W/console.log" | sed 's/\r$//; s/^PCIVM: //' | tail -1)
fail() { echo "pci-vm: FAILED: $*" >&2; [ -s "$W/result" ] || tail -30 "$W/console.log" >&2; exit 1; }
[ -n "$JSON" ] || fail "no report from the VM"
# What the PCI path must show: the rings fitted to the 82576's most (4096), the MTU raised
# for 9000-byte frames, the RX region lent to the NIC, the links waited for.
for want in "tx rings of 4096 descriptors (the driver's most; 8192 planned)" \
    "MTU raised from 1500 to 8986" "receives into region \`rx_bufs\` without copying" \
    "links up after" "bench rc=0"; do
    grep -qF "$want" "$W/result" || fail "the log lacks: $want"
done
# The VLAN run: the device tagged the frames (no software transform on the worker), and
# the wire shows 802.1Q, priority 5, VLAN 100 on exactly the frames to port 5000.
grep -a "PCIVMVLAN" "$W/console.log" | sed 's/\r$//' >&2
grep -aq "PCIVMVLAN: capture rc=0" "$W/console.log" || fail "the VLAN capture failed"
grep -aq "TX VLAN tags inserted by the device" "$W/console.log" || fail "the device did not take the VLAN tags"
grep -aq "leaves its 1 TX flow(s) to the device" "$W/console.log" || fail "the TX worker still pushes the tags"
grep -a "^PCIVMHEX:" "$W/console.log" | sed 's/\r$//; s/^PCIVMHEX://' > "$W/vlan.hex"
python3 - "$W/vlan.hex" <<'PY' || fail "the VLAN tags on the wire are wrong"
import struct, sys
data = bytes.fromhex("".join(open(sys.argv[1]).read().split()))
at, tagged, plain, bad = 24, 0, 0, []
while at + 16 <= len(data):
    incl = struct.unpack_from("<I", data, at + 8)[0]
    frame = data[at + 16:at + 16 + incl]
    at += 16 + incl
    if len(frame) < incl:
        break
    if frame[12:14] == b"\x81\x00":
        ok = frame[14:16] == bytes([0xa0, 100]) and frame[16:18] == b"\x08\x00" \
            and int.from_bytes(frame[40:42], "big") == 5000
        tagged += ok
    else:
        ok = frame[12:14] == b"\x08\x00" and int.from_bytes(frame[36:38], "big") == 5001
        plain += ok
    if not ok:
        bad.append(frame[:42].hex())
print(f"pci-vm: VLAN insert by the device: {tagged} frames to port 5000 tagged 802.1Q pcp 5 vid 100, {plain} to 5001 untagged, {len(bad)} wrong")
sys.exit(0 if tagged > 3 and plain > 3 and not bad else 1)
PY
python3 - "$JSON" <<'PY'
import json, sys
r = (lambda v: v.get("result", v))(json.loads(sys.argv[1]))
ok = (r["lossless"] and r["zero_copy_regions"] == ["rx_bufs"] and r["rx_packets"] > 1000
      and r["rx_packets"] == r["tx_packets"] and r["setup"]["frame_bytes"] == 9000
      and r["checker"]["valid"] == r["rx_packets"]
      and all(q["copied_packets"] == q["packets"] for q in r["queues"] if q["direction"] == "rx"))
print(f"pci-vm: {r['tx_packets']} frames of {r['setup']['frame_bytes']} B sent, "
      f"{r['rx_packets']} received and verified, lossless={r['lossless']}, "
      f"zero copy into {r['zero_copy_regions']}, "
      f"joined from two buffers: {[q['copied_packets'] for q in r['queues'] if q['direction'] == 'rx']}")
print("pci-vm: PASSED" if ok else "pci-vm: FAILED")
sys.exit(0 if ok else 1)
PY
