#!/bin/bash
# rte_flow programming checked on a real PMD: net_tap turns rte_flow rules into kernel TC
# filters, and this machine's kernel lacks the TC modules it needs, so the check runs in a
# throw-away QEMU VM (TCG) booting Debian's stock kernel (the one ../shared/tools/rxe-vm
# caches; `rxe-vm --prepare` fills the cache and installs QEMU).
#
# In the VM two net_tap ports are joined by a bridge: `dataplane bench raw
# configs/dpdk_tap_flows.yaml` sends on one, and the other's rte_flow rules (isolated mode)
# steer UDP port 5000 to queue 0 and 5001 to queue 1 (with MAC matches, one of which must
# take nothing). The script passes when the engine
# reports rte_flow steering, both queues received, and each queue holds exactly its flow's
# packets. Then it runs the test binary of bench/tests/dpdk_tap_dynamic_flows.rs there
# (DATAPLANE_TAP_VM=1): flows added and removed at run time become and stop being rte_flow
# rules. Usage: scripts/tapflow-vm.sh [dataplane binary]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-target/release/dataplane}")
CFG=configs/dpdk_tap_flows.yaml
. scripts/vm-initrd.sh
DYN=$(cargo test --release -p dataplane-bench --features dpdk --test dpdk_tap_dynamic_flows --no-run \
    --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if (m.get("reason") == "compiler-artifact" and m.get("executable")
            and m["target"]["name"] == "dpdk_tap_dynamic_flows"):
        print(m["executable"])' | tail -1)
[ -x "$DYN" ] || { echo "tapflow-vm: FAILED: the dynamic-flow test binary did not build" >&2; exit 1; }
PMDS=$(ls -d "$(pkg-config --variable=libdir libdpdk)"/dpdk/pmds-* | tail -1)

vm_prepare tapflow-vm
copy_with_libs "$CACHE/busybox/busybox" "$BIN" "$DYN" /usr/sbin/ip /usr/sbin/tc "$PMDS"/librte_net_tap.so.23.0 "$PMDS"/librte_bus_vdev.so.23.0 \
    "$PMDS"/librte_mempool_ring.so.23.0
# iproute2's ip (bridges, multi-queue taps), not busybox's applet of the same name.
rm -f "$IR/usr/sbin/ip"
cp -L /usr/sbin/ip "$IR/usr/sbin/ip"
for f in "$PMDS"/librte_{net_tap,bus_vdev,mempool_ring}.so.23; do copy_path "$f"; done
cp "$CFG" "$IR/dpdk_tap_flows.yaml"
# A fixed path: /tmp is a fresh tmpfs inside, so a binary under /tmp would be hidden.
cp "$BIN" "$IR/opt/dataplane"
cp "$DYN" "$IR/opt/dynamic_flows"
KM=$W/k/lib/modules/$KVER/kernel
for m in drivers/net/tun net/sched/sch_multiq net/sched/sch_ingress net/sched/cls_flower \
    net/sched/act_gact net/sched/act_mirred net/sched/act_skbedit net/sched/cls_bpf \
    net/sched/act_bpf net/llc/llc net/802/stp net/bridge/bridge; do
    cp "$KM/$m.ko" "$IR/mods/"
done
cat > "$IR/init" <<INIT
#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev; mount -t tmpfs tmp /tmp
for m in tun sch_multiq sch_ingress cls_flower act_gact act_mirred act_skbedit cls_bpf act_bpf llc stp bridge; do
    insmod /mods/\$m.ko || echo "insmod \$m failed"
done
mkdir -p /dev/net; [ -e /dev/net/tun ] || mknod /dev/net/tun c 10 200
ip link set lo up
# No IPv6 on the test links: the kernel's own neighbour and multicast frames would reach
# the RX port in the moment between port start and rule creation.
echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6
echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6
ip link add dpbr0 type bridge forward_delay 0 stp_state 0
ip link set dpbr0 up
for t in dptap0 dptap1; do ip tuntap add dev \$t mode tap multi_queue; ip link set \$t master dpbr0 up; done
DATAPLANE_EAL_ARGS="${DATAPLANE_EAL_ARGS:-}" timeout 200 /opt/dataplane bench raw /dpdk_tap_flows.yaml --seconds 3 --json > /tmp/out 2>&1
echo "bench rc=\$?"
[ -n "${TAPFLOW_DEBUG:-}" ] && ip -s link | sed 's/^/TAPFLOW-LINK: /'

sed 's/^/TAPFLOW: /' /tmp/out
# Fresh taps for the run-time flow test.
for t in dptap0 dptap1; do ip link del \$t 2>/dev/null; ip tuntap add dev \$t mode tap multi_queue; ip link set \$t master dpbr0 up; done
DATAPLANE_TAP_VM=1 timeout 200 /opt/dynamic_flows --nocapture --test-threads=1 > /tmp/dyn 2>&1
rc=\$?
echo "dynamic rc=\$rc"
sed 's/^/DYNFLOW: /' /tmp/dyn
# On failure, what the kernel saw: each tap's and the bridge's counters.
[ \$rc = 0 ] || ip -s link | sed 's/^/DYNFLOW-LINK: /'
poweroff -f
INIT
chmod +x "$IR/init"
vm_pack_initrd
timeout 300 qemu-system-x86_64 -accel tcg -cpu max -m 2048 -smp 2 -nographic -no-reboot -nic none \
    -kernel "$KDIR/vmlinux" -initrd "$W/initrd" -append "console=ttyS0 panic=-1 quiet" </dev/null \
    > "$W/console.log" 2>&1 || true
grep -a "bench rc=\|dynamic rc=\|TAPFLOW\|DYNFLOW\|insmod" "$W/console.log" | sed 's/\r$//' | tee "$W/result" >&2
JSON=$(grep -a '^TAPFLOW: {' "$W/result" | tail -1 | sed 's/^TAPFLOW: //')
if [ -z "$JSON" ]; then
    echo "tapflow-vm: FAILED: no report from the VM; console tail:" >&2
    tail -30 "$W/console.log" >&2
    exit 1
fi
python3 - "$JSON" <<'PY'
import json, sys
r = (lambda v: v.get("result", v))(json.loads(sys.argv[1]))
q = {s["queue"]: s["packets"] for s in r["queues"] if s["direction"] == "rx"}
ids = {int(k): v for k, v in r["flow_ids"].items()}
print(f"tapflow-vm: steering={r['steering']} tx={r['tx_packets']} rx={r['rx_packets']} "
      f"queue0={q.get(0)} queue1={q.get(1)} flow_ids={ids}")
# The RX port's rules ran on the device, both queues got traffic, and each queue holds
# exactly its flow's packets (flow ids come from the headers: net_tap has no MARK). The
# kernel may put a frame of its own on the bridge (IPv6 neighbour discovery as the taps come
# up): no rule matches it (flow id 0), the checker counts it as not bench traffic, and it
# goes to a queue by RSS; at most a few such frames are allowed beside the bench's.
strays = ids.pop(0, 0)
bench = {1: q.get(0, 0), 2: q.get(1, 0)}
ok = ("tap_rx: rte_flow" in r["steering"] and q.get(0, 0) > 0 and q.get(1, 0) > 0
      and set(ids) == {1, 2} and ids[1] + ids[2] == r["tx_packets"]
      and strays <= 4 and strays == r["checker"]["corrupt"]
      and all(0 <= bench[k] - ids[k] <= strays for k in (1, 2))
      and sum(bench.values()) == r["tx_packets"] + strays)
if strays:
    print(f"tapflow-vm: note: {strays} frame(s) of the kernel's own arrived beside the bench's")
if not r["lossless"]:
    print("tapflow-vm: note: not lossless under emulation:", r["problems"])
print("tapflow-vm: PASSED" if ok else "tapflow-vm: FAILED")
sys.exit(0 if ok else 1)
PY
if ! grep -aq "^DYNFLOW: DYNAMIC FLOWS: PASSED" "$W/result" || ! grep -aq "^dynamic rc=0" "$W/result"; then
    echo "tapflow-vm: FAILED: flows added at run time (see DYNFLOW lines)" >&2
    exit 1
fi
echo "tapflow-vm: dynamic flows PASSED" >&2
