//! `dataplane doctor` against recorded /proc and /sys trees (`tests/doctor/`): a tuned
//! and an untuned two-socket server with a ConnectX port, an H200 and an RDMA device
//! (modelled: no such machine is reachable from here), this 2-core VM and the H200 and H100
//! GPU machines as `scripts/doctor-record.sh` recorded them, and this machine for real.

#[macro_use]
#[path = "../../bench/tests/common/mod.rs"]
mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn tree(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/doctor")
        .join(name)
}

/// A DPDK configuration on the ConnectX port 0000:3b:00.0 receiving into GPU memory and
/// sending from huge pages, workers on cores 4 and 5 of node 0.
const DPDK_GPU: &str = include_str!("doctor/connectx_gpu.yaml");
/// An RDMA server on 192.168.100.1 with 32 MiB of registered regions.
const RDMA: &str = config_yaml!(
    socket,
    2,
    r#"    memory_regions:
    - {name: DATA_RX_GPU_SERVER, kind: host, affinity: 0, num_bufs: 256, buf_size: 65536}
    - {name: DATA_TX_GPU_SERVER, kind: host, affinity: 0, num_bufs: 256, buf_size: 65536}
    interfaces:
    - name: server
      address: 192.168.100.1
      socket_config: {mode: server, local_addr: "roce://192.168.100.1:4791"}
      roce_config: {transport_mode: RC}
      rx: {queues: [{name: rq, id: 0, cpu_core: 4, batch_size: 1}]}
      tx: {queues: [{name: tq, id: 0, cpu_core: 4, batch_size: 1}]}
"#
);

/// Runs `dataplane doctor` on `yaml` (written to a file) or on this file path, with
/// `--root root --json`: the exit status and the findings.
fn doctor(config: Option<&str>, root: &Path) -> (i32, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_dataplane"));
    c.arg("doctor");
    if let Some(text) = config {
        let file = if text.contains('\n') {
            let f = dir.path().join("c.yaml");
            std::fs::write(&f, text).unwrap();
            f
        } else {
            common::config_path(text)
        };
        c.arg(file);
    }
    let out = c.arg("--root").arg(root).arg("--json").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.trim_start().starts_with('{'),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let envelope = common::json_envelope(&out.stdout);
    assert_eq!(envelope["command"], "doctor");
    let v: Value = envelope["result"].clone();
    let status = out.status.code().unwrap();
    assert_eq!(v["blocking"], status == 3, "{v}");
    (status, v["findings"].as_array().unwrap().clone())
}

/// The findings of `check` with `severity`, as "message | fix" lines.
fn of(findings: &[Value], check: &str, severity: &str) -> Vec<String> {
    findings
        .iter()
        .filter(|f| f["check"] == check && f["severity"] == severity)
        .map(|f| {
            format!(
                "{} | {}",
                f["message"].as_str().unwrap(),
                f["fix"].as_str().unwrap_or("")
            )
        })
        .collect()
}

fn has(lines: &[String], needle: &str) -> bool {
    lines.iter().any(|l| l.contains(needle))
}

#[test]
fn a_tuned_server_passes_the_dpdk_gpu_configuration() {
    let (status, f) = doctor(Some(DPDK_GPU), &tree("tuned-server"));
    assert_eq!(status, 0, "{f:#?}");
    assert!(of(&f, "cores", "warn").is_empty(), "{f:#?}");
    assert!(of(&f, "pci", "warn").is_empty(), "{f:#?}");
    let ok = |c| of(&f, c, "ok");
    assert!(
        has(&ok("hugepages"), "node 0: 4096 free 2048 KiB pages"),
        "{f:#?}"
    );
    assert!(has(&ok("cores"), "worker cores 4,5 are isolated"));
    assert!(has(
        &ok("cores"),
        "no interrupt is delivered to a worker core"
    ));
    assert!(has(&ok("pci"), "0000:3b:00.0 bound to mlx5_core"));
    assert!(has(&ok("pci"), "ens1f0np0 MTU 9000"));
    assert!(has(
        &ok("gpu"),
        "dma-buf (open kernel modules) and nvidia-peermem"
    ));
    // PCIe: the NIC at its full link, passthrough IOMMU, 4096-byte reads; the idle GPU's
    // lowered link speed is no finding.
    assert!(of(&f, "pcie", "warn").is_empty(), "{f:#?}");
    let pcie = ok("pcie");
    assert!(
        has(&pcie, "PCIe link 16.0 GT/s x16, the device's maximum"),
        "{pcie:#?}"
    );
    assert!(has(&pcie, "IOMMU group 12 is `identity`"));
    assert!(has(&pcie, "max read request 4096 B"));
    assert!(has(&pcie, "an idle GPU lowers its link speed"));
    assert!(has(
        &pcie,
        "BAR1 128.00 GiB holds the 0.50 GiB of device regions"
    ));
}

#[test]
fn an_untuned_server_blocks_the_dpdk_gpu_configuration_and_says_how_to_fix_each_finding() {
    let (status, f) = doctor(Some(DPDK_GPU), &tree("untuned-server"));
    assert_eq!(status, 3);
    let block = |c| of(&f, c, "block");
    let warn = |c| of(&f, c, "warn");
    assert!(
        has(
            &block("hugepages"),
            "no hugetlbfs mount | mkdir -p /dev/hugepages && mount -t hugetlbfs"
        ),
        "{f:#?}"
    );
    // A 65536-buffer huge region of 8256-byte buffers and the EAL's pools; 100 free.
    assert!(
        has(&block("hugepages"), "node 0: 100 free 2048 KiB pages")
            && has(&block("hugepages"), "nr_hugepages"),
        "{f:#?}"
    );
    assert!(has(
        &block("pci"),
        "0000:3b:00.0 has no driver bound | dpdk-devbind.py --bind=vfio-pci"
    ));
    assert!(has(&block("gpu"), "need the NVIDIA driver"));
    let cores = warn("cores");
    assert!(
        has(&cores, "4,5 not in isolcpus; 4,5 not in nohz_full"),
        "{cores:#?}"
    );
    assert!(has(&cores, "isolcpus=4,5 nohz_full=4,5 rcu_nocbs=4,5"));
    assert!(has(&cores, "interrupts 122 are delivered to worker cores"));
    assert!(has(
        &cores,
        "core 4: cpufreq governor `powersave` (clock changes under load) | echo performance > /sys/devices/system/cpu/cpu4/cpufreq/scaling_governor"
    ));
    assert!(has(&cores, "core 5: its SMT sibling 21 is not isolated"));
    let pci = warn("pci");
    assert!(
        has(&pci, "is on NUMA node 1, the configured cores on 0"),
        "{pci:#?}"
    );
    assert!(has(&pci, "ens1f0np0 has MTU 1500") && has(&pci, "ip link set dev ens1f0np0 mtu"));
    let pcie = warn("pcie");
    assert!(
        has(
            &pcie,
            "PCIe link 8.0 GT/s x8, the device can do 16.0 GT/s x16: 50 % of its lanes | lspci -vv -s 0000:3b:00.0"
        ),
        "{pcie:#?}"
    );
    assert!(
        has(&pcie, "max read request 512 B (payload 128 B)")
            && has(&pcie, "setpci -s 0000:3b:00.0 CAP_EXP+8.w=5000:7000")
    );
    assert!(
        has(
            &pcie,
            "max payload 128 B, below the 512 B the device supports: DMA writes of received frames go in more, smaller packets | boot with pci=pcie_bus_perf"
        ),
        "{pcie:#?}"
    );
    assert!(
        has(
            &pcie,
            "GPU 0 (0000:3c:00.0, nvidia): IOMMU group 13 translates DMA (`DMA-FQ`)"
        ) && has(&pcie, "iommu=pt")
    );
    assert!(has(
        &pcie,
        "BAR1 is 0.25 GiB, the device regions on it 0.50 GiB: a NIC cannot map them whole for GPUDirect | enable Resizable BAR"
    ));
}

#[test]
fn rdma_needs_a_roce_v2_gid_for_its_address_and_room_to_register_its_regions() {
    let (status, f) = doctor(Some(RDMA), &tree("tuned-server"));
    assert_eq!(status, 0, "{f:#?}");
    assert!(
        has(
            &of(&f, "rdma", "ok"),
            "192.168.100.1 is RoCE v2 GID 3 of mlx5_0 port 1"
        ),
        "{f:#?}"
    );
    assert!(has(&of(&f, "memlock", "ok"), "unlimited"));

    let (status, f) = doctor(Some(RDMA), &tree("untuned-server"));
    assert_eq!(status, 3);
    assert!(
        has(
            &of(&f, "rdma", "block"),
            "no RDMA device has a GID for 192.168.100.1 (devices: mlx5_0)"
        ),
        "{f:#?}"
    );
    assert!(
        has(
            &of(&f, "memlock", "block"),
            "locked-memory limit 8192 KiB, 32768 KiB of RDMA-registered or VFIO-mapped memory | ulimit -l unlimited"
        ),
        "{f:#?}"
    );
}

/// The tuned server with the NVIDIA driver's proprietary modules and no nvidia-peermem:
/// its NIC cannot register GPU memory. A copy made here from `tuned-server`.
fn server_without_gpu_registration() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let copied = Command::new("cp")
        .arg("-a")
        .arg(tree("tuned-server").join("."))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(copied.success());
    std::fs::remove_dir_all(dir.path().join("sys/module/nvidia_peermem")).unwrap();
    let version = dir.path().join("proc/driver/nvidia/version");
    let text = std::fs::read_to_string(&version).unwrap();
    assert!(text.contains("Open Kernel Module"), "{text}");
    std::fs::write(
        &version,
        text.replace("Open Kernel Module", "Kernel Module"),
    )
    .unwrap();
    dir
}

/// RDMA into GPU memory where the NIC cannot register it: connections stage through
/// pinned host memory (a warning), unless `gpu_memory_path: direct` insists (blocking);
/// `staged` never registers GPU memory, so nothing is said.
#[test]
fn rdma_into_gpu_memory_without_dma_buf_or_peer_memory_stages_unless_told_not_to() {
    let root = server_without_gpu_registration();
    let config = |path: &str| {
        RDMA.replace(
            "{name: DATA_RX_GPU_SERVER, kind: host,",
            "{name: DATA_RX_GPU_SERVER, kind: device,",
        )
        .replace(
            "roce_config: {transport_mode: RC}",
            &format!("roce_config: {{transport_mode: RC, gpu_memory_path: {path}}}"),
        )
    };
    assert!(
        config("auto").contains("kind: device") && config("auto").contains("gpu_memory_path: auto")
    );
    let (status, f) = doctor(Some(&config("auto")), root.path());
    assert_eq!(status, 0, "{f:#?}");
    assert!(
        has(
            &of(&f, "gpu", "warn"),
            "RDMA connections will stage their device regions through pinned host memory (gpu_memory_path auto), a copy each way | modprobe nvidia-peermem"
        ),
        "{f:#?}"
    );
    let (status, f) = doctor(Some(&config("direct")), root.path());
    assert_eq!(status, 3, "{f:#?}");
    assert!(
        has(
            &of(&f, "gpu", "block"),
            "neither is there | modprobe nvidia-peermem"
        ),
        "{f:#?}"
    );
    let (_, f) = doctor(Some(&config("staged")), root.path());
    assert!(
        !f.iter()
            .any(|x| x["check"] == "gpu" && x["message"].as_str().unwrap().contains("register")),
        "{f:#?}"
    );
    // Where the NIC can register it, all three say so or say nothing.
    let (status, f) = doctor(Some(&config("direct")), &tree("tuned-server"));
    assert_eq!(status, 0, "{f:#?}");
    assert!(has(
        &of(&f, "gpu", "ok"),
        "GPU memory can be registered with the NIC"
    ));
}

#[test]
fn kernel_sockets_want_socket_buffer_limits_raised() {
    let (_, f) = doctor(Some("socket_udp_bench.yaml"), &tree("untuned-server"));
    let warn = of(&f, "sockets", "warn");
    assert!(
        has(&warn, "net.core.rmem_max = 212992") && has(&warn, "sysctl -w net.core.rmem_max="),
        "{f:#?}"
    );
    assert!(has(&warn, "net.core.wmem_max = 212992"));
    let (_, f) = doctor(Some("socket_udp_bench.yaml"), &tree("tuned-server"));
    let ok = of(&f, "sockets", "ok");
    assert!(
        of(&f, "sockets", "warn").is_empty()
            && has(&ok, "net.core.rmem_max")
            && has(&ok, "net.core.wmem_max")
            && has(&ok, "SO_RCVBUF"),
        "{f:#?}"
    );
}

#[test]
fn the_recorded_two_core_vm_runs_the_loopback_and_lacks_huge_pages() {
    let (status, f) = doctor(Some("sw_loopback.yaml"), &tree("debian-vm"));
    assert_eq!(status, 0, "{f:#?}");
    assert!(has(&of(&f, "cores", "warn"), "1 not in isolcpus"));
    let (status, f) = doctor(Some("sw_loopback_huge.yaml"), &tree("debian-vm"));
    assert_eq!(status, 3);
    assert!(
        has(&of(&f, "hugepages", "block"), "no hugetlbfs mount"),
        "{f:#?}"
    );
    let (status, f) = doctor(Some("rdma_loopback.yaml"), &tree("debian-vm"));
    assert_eq!(status, 3);
    assert!(has(&of(&f, "rdma", "block"), "no RDMA device"), "{f:#?}");
    // Without a configuration: what the machine offers.
    let (status, f) = doctor(None, &tree("debian-vm"));
    assert_eq!(status, 0);
    assert!(has(&of(&f, "cores", "ok"), "online cores 0-1"), "{f:#?}");
    assert!(has(&of(&f, "gpu", "ok"), "no NVIDIA driver loaded"));
}

#[test]
fn on_this_machine_the_checks_agree_with_a_recording_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/doctor-record.sh");
    let rec = Command::new("bash")
        .arg(&script)
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(rec.status.success(), "{rec:?}");
    for config in [
        "sw_loopback.yaml",
        "sw_loopback_huge.yaml",
        "socket_udp_bench.yaml",
    ] {
        let (live_status, live) = doctor(Some(config), Path::new("/"));
        let (rec_status, recorded) = doctor(Some(config), dir.path());
        let kinds = |f: &[Value]| {
            let mut k: Vec<String> = f
                .iter()
                .map(|x| format!("{} {}", x["check"], x["severity"]))
                .collect();
            k.sort();
            k
        };
        assert_eq!(live_status, rec_status, "{config}");
        assert_eq!(
            kinds(&live),
            kinds(&recorded),
            "{config}: {live:#?} against {recorded:#?}"
        );
    }
}

/// A queue receiving into GPU memory and captured to `/var/tmp/dp/gpu.pcap`.
const GPU_CAPTURE: &str = config_yaml!(
    raw,
    0,
    loopback,
    r#"    memory_regions:
    - {name: tx, kind: host, affinity: 0, num_bufs: 1024, buf_size: 2048}
    - {name: gpu, kind: device, affinity: 0, num_bufs: 1024, buf_size: 2048}
    interfaces:
    - name: loop0
      address: loopback
      tx: {queues: [{name: tq, id: 0, cpu_core: 1, batch_size: 32, memory_regions: [tx]}]}
      rx:
        queues:
        - {name: rq, id: 0, cpu_core: 1, batch_size: 32, memory_regions: [gpu], capture: {path: /var/tmp/dp/gpu.pcap}}
"#
);

/// A copy of a recorded tree to change.
fn tree_copy(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", tree(name).display()))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    dir
}

#[test]
fn gpu_persistence_and_clocks_come_from_the_driver_with_their_fixes() {
    // Recorded on the H100 machine: persistence on, application clocks at their highest.
    let (_, f) = doctor(Some("gpu_loopback_64.yaml"), &tree("h100-vm"));
    assert!(
        has(&of(&f, "gpu", "ok"), "GPU 0: persistence mode on"),
        "{f:#?}"
    );
    assert!(
        has(
            &of(&f, "gpu", "ok"),
            "GPU 0: application clocks at their highest (1980 MHz SM, 2619 MHz memory)"
        ),
        "{f:#?}"
    );
    // The same machine untuned.
    let copy = tree_copy("h100-vm");
    std::fs::write(
        copy.path().join("nvidia-smi-query-gpu.csv"),
        "0, 00000000:00:06.0, Disabled, 1755, 1980, 2619, 2619\n",
    )
    .unwrap();
    let (status, f) = doctor(Some("gpu_loopback_64.yaml"), copy.path());
    assert_eq!(status, 0, "warnings do not block");
    let warn = of(&f, "gpu", "warn");
    assert!(
        has(&warn, "persistence mode off") && has(&warn, "| nvidia-smi -i 0 -pm 1"),
        "{warn:#?}"
    );
    assert!(
        has(
            &warn,
            "application clocks 1755 MHz SM, 2619 MHz memory, below the highest 1980 and 2619"
        ),
        "{warn:#?}"
    );
    assert!(has(&warn, "| nvidia-smi -i 0 -ac 2619,1980"), "{warn:#?}");
    // An integrated GPU reports no clocks: nothing to set.
    std::fs::write(
        copy.path().join("nvidia-smi-query-gpu.csv"),
        "0, 0000000F:01:00.0, Enabled, [N/A], [N/A], [N/A], [N/A]\n",
    )
    .unwrap();
    let (_, f) = doctor(Some("gpu_loopback_64.yaml"), copy.path());
    assert!(
        has(&of(&f, "gpu", "ok"), "reports no application clocks"),
        "{f:#?}"
    );
}

#[test]
fn a_gpu_capture_needs_udev_s_entry_and_nvidia_fs_or_compatibility_mode() {
    // The H100 machine as recorded: no nvidia-fs, cuFile allows compatibility mode, and
    // no udevd (the capture test fails there with CU_FILE_HANDLE_NOT_REGISTERED).
    let (status, f) = doctor(Some(GPU_CAPTURE), &tree("h100-vm"));
    assert_eq!(status, 3, "{f:#?}");
    let what = "interface `loop0` RX queue 0 captures GPU memory to /var/tmp/dp/gpu.pcap";
    assert!(
        has(
            &of(&f, "gds", "warn"),
            &format!("{what}: no nvidia-fs driver, so cuFile's compatibility mode")
        ),
        "{f:#?}"
    );
    assert!(
        has(
            &of(&f, "gds", "block"),
            "udev's database has no entry for /dev/vda (/run/udev/data/b254:0), where cuFile reads the file system's type: the capture fails at start with CU_FILE_HANDLE_NOT_REGISTERED"
        ),
        "{f:#?}"
    );
    assert!(
        has(
            &of(&f, "gds", "block"),
            "| printf 'E:ID_FS_TYPE=ext4\\nE:ID_FS_USAGE=filesystem\\n' > /run/udev/data/b254:0"
        ),
        "{f:#?}"
    );
    // The fix applied: the capture can start (still in compatibility mode).
    let copy = tree_copy("h100-vm");
    let udev = copy.path().join("run/udev/data");
    std::fs::create_dir_all(&udev).unwrap();
    std::fs::write(
        udev.join("b254:0"),
        "E:ID_FS_TYPE=ext4\nE:ID_FS_USAGE=filesystem\n",
    )
    .unwrap();
    let (status, f) = doctor(Some(GPU_CAPTURE), copy.path());
    assert_eq!(status, 0, "{f:#?}");
    assert!(
        has(
            &of(&f, "gds", "ok"),
            "udev knows /dev/vda's file system (ext4)"
        ),
        "{f:#?}"
    );
    // Without compatibility mode and without nvidia-fs, cuFile cannot write at all.
    std::fs::write(
        copy.path().join("etc/cufile.json"),
        r#"{"properties": {"allow_compat_mode": false}}"#,
    )
    .unwrap();
    let (status, f) = doctor(Some(GPU_CAPTURE), copy.path());
    assert_eq!(status, 3);
    assert!(
        has(
            &of(&f, "gds", "block"),
            "does not allow compatibility mode | modprobe nvidia-fs"
        ),
        "{f:#?}"
    );
    // With nvidia-fs: direct DMA.
    std::fs::create_dir_all(copy.path().join("proc/driver/nvidia-fs")).unwrap();
    let (status, f) = doctor(Some(GPU_CAPTURE), copy.path());
    assert_eq!(status, 0, "{f:#?}");
    assert!(has(&of(&f, "gds", "ok"), "nvidia-fs is loaded"), "{f:#?}");
}

/// Ingest on a DGX Spark: the first ConnectX-7 function receives into memory of the
/// integrated GPU, TX from huge pages, workers on two Cortex-X925 cores.
const SPARK: &str = config_yaml!(
    raw,
    2,
    r#"    memory_regions:
    - {name: rx_gpu, kind: host_pinned, affinity: 0, num_bufs: 8192, buf_size: 9000}
    - {name: tx_buffers, kind: huge, affinity: 0, num_bufs: 8192, buf_size: 9000}
    interfaces:
    - name: port0_a
      address: "0000:01:00.0"
      rx: {queues: [{name: rq, id: 0, cpu_core: 17, batch_size: 64, memory_regions: [rx_gpu]}]}
      tx: {queues: [{name: tq, id: 0, cpu_core: 18, batch_size: 64, memory_regions: [tx_buffers]}]}
"#
);

#[test]
fn a_gb10_takes_pinned_memory_for_its_integrated_gpu_and_refuses_device_memory_a_nic_fills() {
    // Modelled from the GB10's public description (tests/doctor/gb10-modelled/README): no
    // DGX Spark is reachable from here. The tree says GPU 0 is integrated as a recording
    // does (`cuda-integrated-gpus`, from the CUDA driver).
    let tree = tree("gb10-modelled");
    let (status, f) = doctor(Some(SPARK), &tree);
    assert_eq!(status, 0, "{f:#?}");
    let ok = of(&f, "gpu", "ok");
    assert!(
        has(
            &ok,
            "region `rx_gpu` is pinned host memory of GPU 0, an integrated GPU"
        ),
        "{ok:#?}"
    );
    assert!(
        has(&ok, "GPU 0: the driver reports no application clocks"),
        "{ok:#?}"
    );
    assert!(
        has(
            &of(&f, "pcie", "ok"),
            "(0000:01:00.0): PCIe link 32.0 GT/s x4, the device's maximum"
        ),
        "{f:#?}"
    );
    assert!(
        has(&of(&f, "cores", "ok"), "worker cores 17,18 are isolated"),
        "{f:#?}"
    );
    let device = SPARK.replace("kind: host_pinned", "kind: device");
    let (status, f) = doctor(Some(&device), &tree);
    assert_eq!(status, 3, "{f:#?}");
    assert!(
        has(
            &of(&f, "gpu", "block"),
            "region `rx_gpu`: kind device on GPU 0, an integrated GPU (no PCIe BAR a NIC can write into), but interface `port0_a` receives into it by DMA (DPDK, PCI 0000:01:00.0) | make `rx_gpu` kind: host_pinned"
        ),
        "{f:#?}"
    );
}

#[test]
fn the_recorded_h200_host_has_the_driver_a_gpu_configuration_needs() {
    // Recorded with scripts/doctor-record.sh on the GPU machine (16 cores, one H200,
    // NVIDIA open kernel modules, no huge pages, no RDMA device).
    let (status, f) = doctor(Some("gpu_loopback_64.yaml"), &tree("h200-vm"));
    assert_eq!(status, 0, "{f:#?}");
    assert!(
        has(
            &of(&f, "gpu", "ok"),
            "1 GPU(s); NVRM version: NVIDIA UNIX Open Kernel Module"
        ),
        "{f:#?}"
    );
    let (status, f) = doctor(None, &tree("h200-vm"));
    assert_eq!(status, 0);
    assert!(has(&of(&f, "cores", "ok"), "online cores 0-15"), "{f:#?}");
    // The same configuration on the recorded 2-core VM has no driver.
    let (status, f) = doctor(Some("gpu_loopback_64.yaml"), &tree("debian-vm"));
    assert_eq!(status, 3);
    assert!(
        has(&of(&f, "gpu", "block"), "need the NVIDIA driver"),
        "{f:#?}"
    );
}
