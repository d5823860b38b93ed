//! `dataplane doctor`: checks a machine against a configuration and says, per finding,
//! the command that fixes it. It reads `/proc`, `/sys` and a few files under `/etc` and
//! `/run` (below a root that tests point at recorded trees) and asks `nvidia-smi`; it
//! never changes anything, and decides nothing the start-up does not also decide: the
//! configuration's needs come from its [`Plan`].
//!
//! Checks: huge pages per NUMA node against the plan and a hugetlbfs mount; the configured
//! cores (present, isolated with `isolcpus` and `nohz_full`, not serving interrupts, the
//! cpufreq governor, SMT siblings); PCI devices (present, NUMA node against the cores and
//! GPUs, driver, IOMMU, MTU against the frame size); RDMA devices and a RoCE v2 GID for
//! every `roce://` address; the GPU driver, and dma-buf or peer memory for RDMA into GPU
//! memory; socket buffer limits for kernel sockets; the locked-memory limit; PCIe (`pcie`):
//! the NICs' and GPUs' links trained at their speed and width, the IOMMU mode of their
//! groups, the NICs' read request size; the GPUs' persistence mode and clocks (from
//! `nvidia-smi`); GPUDirect Storage for captures of GPU memory (nvidia-fs or cuFile's
//! compatibility mode, udev's entry for the file system).

#![forbid(unsafe_code)]

use crate::config::{Config, EngineKind, GpuMemoryPath, MemoryKind};
use crate::plan::{EnginePlan, Plan};
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

mod devices;
mod gpu_driver;
mod host;
mod pcie;

use devices::*;
use host::*;

/// How much a finding matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// As it should be.
    Ok,
    /// Works, but costs performance or predictability.
    Warn,
    /// The configuration cannot start here (or cannot do what it asks).
    Block,
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The check (`hugepages`, `cores`, `pci`, `pcie`, `rdma`, `gpu`, `gds`, `sockets`,
    /// `memlock`).
    pub check: &'static str,
    /// How much it matters.
    pub severity: Severity,
    /// What was found.
    pub message: String,
    /// The command (or kernel argument) that fixes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// The machine's `/proc` and `/sys`, below `root` (`/` for this machine).
#[derive(Clone, Debug)]
pub struct Machine {
    root: PathBuf,
    integrated_gpus: IntegratedGpus,
}

/// Where the answer to "is this GPU integrated?" comes from: no file says it, the CUDA
/// driver does (`CU_DEVICE_ATTRIBUTE_INTEGRATED`).
#[derive(Clone, Debug)]
enum IntegratedGpus {
    /// Ask this machine's driver.
    Driver,
    /// These ordinals (a recorded machine).
    Known(BTreeSet<u32>),
}

impl Machine {
    /// The machine under `root` (`/` for this one, whose CUDA driver says which GPUs are
    /// integrated; a recorded tree, whose `cuda-integrated-gpus` file lists the ordinals
    /// the driver said were integrated when it was recorded: none without the file, or as
    /// [`Machine::with_integrated_gpus`] says).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let integrated_gpus = if root == Path::new("/") {
            IntegratedGpus::Driver
        } else {
            let listed = std::fs::read_to_string(root.join(INTEGRATED_GPUS_FILE))
                .map(|t| parse_cpu_list(t.trim()))
                .unwrap_or_default();
            IntegratedGpus::Known(listed)
        };
        Self {
            root,
            integrated_gpus,
        }
    }

    /// The same machine with GPUs `ordinals` integrated (a recorded GB10 or Jetson).
    pub fn with_integrated_gpus(mut self, ordinals: impl IntoIterator<Item = u32>) -> Self {
        self.integrated_gpus = IntegratedGpus::Known(ordinals.into_iter().collect());
        self
    }

    /// Whether the GPU of `region` is integrated.
    fn region_on_integrated_gpu(&self, region: &crate::plan::RegionPlan) -> bool {
        match &self.integrated_gpus {
            IntegratedGpus::Driver => {
                crate::sysinfo::gpu_is_integrated(region.affinity, region.gpu_uuid.as_deref())
            }
            IntegratedGpus::Known(set) => {
                region.gpu_uuid.is_none() && set.contains(&region.affinity)
            }
        }
    }

    /// True for this machine (`/`), whose live state (the GPU driver) may be asked.
    fn is_this_machine(&self) -> bool {
        self.root == Path::new("/")
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel.trim_start_matches('/'))
    }

    /// A file's text, trimmed.
    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.path(rel))
            .ok()
            .map(|s| s.trim().to_owned())
    }

    fn exists(&self, rel: &str) -> bool {
        self.path(rel).exists()
    }

    /// Names in a directory, sorted.
    fn list(&self, rel: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.path(rel))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// The last component of a symbolic link's target (a device's driver).
    fn link_name(&self, rel: &str) -> Option<String> {
        let t = std::fs::read_link(self.path(rel)).ok()?;
        Some(t.file_name()?.to_string_lossy().into_owned())
    }

    /// A CPU list file (`0-3,8,10-11`) as a set.
    fn cpus(&self, rel: &str) -> Option<BTreeSet<u32>> {
        self.read(rel).map(|s| parse_cpu_list(&s))
    }

    /// NUMA node of a CPU (`None` on a machine without NUMA nodes in sysfs).
    fn node_of_cpu(&self, cpu: u32) -> Option<u32> {
        self.list("sys/devices/system/node")
            .iter()
            .filter_map(|n| n.strip_prefix("node")?.parse::<u32>().ok())
            .find(|n| {
                self.cpus(&format!("sys/devices/system/node/node{n}/cpulist"))
                    .is_some_and(|c| c.contains(&cpu))
            })
    }
}

/// In a recorded tree: the ordinals of its integrated GPUs, as a list (`0`, `0-1`), which
/// `scripts/doctor-record.sh` asks the CUDA driver for.
pub const INTEGRATED_GPUS_FILE: &str = "cuda-integrated-gpus";

/// Highest CPU number a CPU list may name (Linux's `NR_CPUS` is at most 8192): a range
/// read from sysfs past it is cut there, so a corrupt file cannot make a set of billions.
pub const MAX_CPU: u32 = 65_535;

/// `0-3,8,10-11` as a set (an empty string is an empty set), CPUs up to [`MAX_CPU`].
pub fn parse_cpu_list(s: &str) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    out.extend(a..=b.min(MAX_CPU));
                }
            }
            None => {
                if let Ok(c) = part.parse()
                    && c <= MAX_CPU
                {
                    out.insert(c);
                }
            }
        }
    }
    out
}

/// A set as a CPU list, runs of three or more as ranges (`0-3,5,7-9`).
fn cpu_list(cpus: &BTreeSet<u32>) -> String {
    let mut parts = Vec::new();
    let mut it = cpus.iter().copied().peekable();
    while let Some(start) = it.next() {
        let mut end = start;
        while it.peek() == Some(&(end + 1)) {
            end = it.next().unwrap_or(end);
        }
        parts.push(match end - start {
            0 => start.to_string(),
            1 => format!("{start},{end}"),
            _ => format!("{start}-{end}"),
        });
    }
    parts.join(",")
}

/// The findings for `config` (or, without one, the machine-wide checks) on `m`.
pub fn check(m: &Machine, config: Option<&Config>) -> Vec<Finding> {
    let mut out = Vec::new();
    let plan = match config.map(Plan::from_config) {
        Some(Err(e)) => {
            out.push(Finding {
                check: "plan",
                severity: Severity::Block,
                message: format!("the configuration cannot be planned: {e}"),
                fix: None,
            });
            None
        }
        Some(Ok(p)) => Some(p),
        None => None,
    };
    if config.is_none() {
        inventory(m, &mut out);
    }
    hugepages(m, plan.as_ref(), &mut out);
    let cores: BTreeSet<u32> = plan.as_ref().map_or_else(BTreeSet::new, |p| {
        p.cores
            .iter()
            .map(|c| c.core)
            .chain(std::iter::once(p.master_core))
            .collect()
    });
    let workers: BTreeSet<u32> = plan
        .as_ref()
        .map(|p| p.cores.iter().map(|c| c.core).collect())
        .unwrap_or_default();
    cores_check(m, &cores, &workers, &mut out);
    if let Some(p) = &plan {
        pci(m, p, &cores, &mut out);
        rdma(m, p, &mut out);
        gpu(m, p, &mut out);
        gpu_driver::gpu_settings(m, p, &mut out);
        gpu_driver::gds(m, p, &mut out);
        gpu_links(m, p, &mut out);
        sockets(m, p, &mut out);
    }
    memlock(m, plan.as_ref(), &mut out);
    out
}

/// Exit status for the findings: 0 when nothing blocks a start, 1 otherwise.
pub fn exit_status(findings: &[Finding]) -> u8 {
    u8::from(findings.iter().any(|f| f.severity == Severity::Block))
}

/// The findings as text, one line each with its fix below.
pub fn human(findings: &[Finding]) -> String {
    let mut out = String::new();
    for f in findings {
        let tag = match f.severity {
            Severity::Ok => "ok   ",
            Severity::Warn => "WARN ",
            Severity::Block => "BLOCK",
        };
        out += &format!("{tag} [{}] {}\n", f.check, f.message);
        if let Some(fix) = &f.fix {
            out += &format!("        fix: {fix}\n");
        }
    }
    let blocks = findings
        .iter()
        .filter(|f| f.severity == Severity::Block)
        .count();
    let warns = findings
        .iter()
        .filter(|f| f.severity == Severity::Warn)
        .count();
    out += &format!(
        "{} checks: {blocks} blocking, {warns} warnings\n",
        findings.len()
    );
    out
}

fn push(
    out: &mut Vec<Finding>,
    check: &'static str,
    severity: Severity,
    message: String,
    fix: Option<String>,
) {
    out.push(Finding {
        check,
        severity,
        message,
        fix,
    });
}

/// The root this machine's files are read from by default.
pub fn this_machine() -> Machine {
    Machine::at(Path::new("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_ranges_singles_and_nothing() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            [0, 1, 2, 3, 8, 10, 11].into_iter().collect()
        );
        assert!(parse_cpu_list("").is_empty());
        assert_eq!(parse_cpu_list("0-4294967295").len(), MAX_CPU as usize + 1);
        assert!(parse_cpu_list("4294967295").is_empty());
        assert_eq!(cpu_list(&parse_cpu_list("2,1")), "1,2");
        assert_eq!(
            cpu_list(&parse_cpu_list("0-3,5,7,8,10-31")),
            "0-3,5,7,8,10-31"
        );
    }

    #[test]
    fn an_ipv4_address_maps_to_its_roce_v2_gid() {
        assert_eq!(
            ipv4_gid("192.168.1.10".parse().unwrap()),
            "0000:0000:0000:0000:0000:ffff:c0a8:010a"
        );
    }

    /// On a recorded GB10-like machine (the tuned server with GPU 0 said to be
    /// integrated), a `device` region a PCI port receives into by DMA blocks, with
    /// `host_pinned` as the fix; the same file with `host_pinned` does not; a discrete
    /// GPU (the same tree as recorded) lets the `device` region through.
    #[test]
    fn device_regions_a_nic_fills_on_an_integrated_gpu_block_with_the_fix() {
        const DEVICE_RX: &str = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../cli/tests/doctor/connectx_gpu.yaml"
        ));
        let tree = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../cli/tests/doctor/tuned-server"
        );
        let load = |text: &str| {
            crate::config::load_with(text, "gb10.yaml", &|_| true)
                .unwrap()
                .config
        };
        let gpu_findings = |m: &Machine, text: &str| -> Vec<Finding> {
            check(m, Some(&load(text)))
                .into_iter()
                .filter(|f| f.check == "gpu")
                .collect()
        };
        let gb10 = Machine::at(tree).with_integrated_gpus([0]);
        let f = gpu_findings(&gb10, DEVICE_RX);
        let block = f
            .iter()
            .find(|f| f.severity == Severity::Block)
            .unwrap_or_else(|| panic!("{f:#?}"));
        assert!(
            block
                .message
                .contains("region `payloads`: kind device on GPU 0, an integrated GPU")
                && block
                    .message
                    .contains("interface `nic0` receives into it by DMA (DPDK, PCI 0000:3b:00.0)"),
            "{block:#?}"
        );
        assert_eq!(
            block.fix.as_deref(),
            Some("make `payloads` kind: host_pinned (the integrated GPU reads it in place)")
        );
        let pinned = DEVICE_RX.replace(
            "name: payloads, kind: device",
            "name: payloads, kind: host_pinned",
        );
        assert_ne!(pinned, DEVICE_RX);
        let f = gpu_findings(&gb10, &pinned);
        assert!(f.iter().all(|f| f.severity == Severity::Ok), "{f:#?}");
        assert!(
            f.iter().any(|f| f
                .message
                .contains("pinned host memory of GPU 0, an integrated GPU")),
            "{f:#?}"
        );
        let f = gpu_findings(&Machine::at(tree), DEVICE_RX);
        assert!(f.iter().all(|f| f.severity != Severity::Block), "{f:#?}");
        assert!(
            !f.iter().any(|f| f.message.contains("integrated")),
            "{f:#?}"
        );
    }

    /// The socket options an interface applies are listed, and the machine settings they
    /// depend on are checked: a busy-poll time above `net.core.busy_read` without
    /// CAP_NET_ADMIN, and more joins than `net.ipv4.igmp_max_memberships`.
    #[test]
    fn socket_options_are_listed_and_checked_against_the_machine() {
        let tree = std::env::temp_dir().join(format!("dp-doctor-sockets-{}", std::process::id()));
        for (file, value) in [
            ("proc/sys/net/core/rmem_max", "212992"),
            ("proc/sys/net/core/wmem_max", "67108864"),
            ("proc/sys/net/core/busy_read", "0"),
            ("proc/sys/net/ipv4/igmp_max_memberships", "1"),
            ("proc/sys/net/ipv4/igmp_max_msf", "10"),
            (
                "proc/self/status",
                "Name:\tdataplane\nCapEff:\t0000000000000000\n",
            ),
        ] {
            let path = tree.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, value).unwrap();
        }
        let text = config_yaml!(
            socket,
            0,
            r#"    memory_regions:
    - {name: bufs, kind: host, affinity: 0, num_bufs: 64, buf_size: 2048}
    interfaces:
    - name: mc
      address: 198.18.5.2
      socket_config: {mode: server, local_addr: "udp://198.18.5.2:5000", busy_poll_us: 50, receive_buffer_bytes: 8388608}
      multicast_groups: ["239.1.1.1", {group: 232.1.1.1, source: 198.18.5.1}]
      rx: {queues: [{name: q, id: 0, cpu_core: 0, batch_size: 8, memory_regions: [bufs]}]}
"#
        );
        let config = crate::config::load_with(text, "mc.yaml", &|_| true)
            .unwrap()
            .config;
        let f: Vec<Finding> = check(&Machine::at(&tree), Some(&config))
            .into_iter()
            .filter(|f| f.check == "sockets")
            .collect();
        let _ = std::fs::remove_dir_all(&tree);
        let has = |severity: Severity, needle: &str| {
            f.iter()
                .any(|f| f.severity == severity && f.message.contains(needle))
        };
        assert!(
            has(
                Severity::Ok,
                "interface `mc`: SO_RCVBUF 8388608 B, SO_SNDBUF 4194304 B, SO_BUSY_POLL 50 us"
            ) && has(Severity::Ok, "2 multicast join(s)"),
            "{f:#?}"
        );
        assert!(
            has(
                Severity::Warn,
                "busy_poll_us 50 is above net.core.busy_read = 0"
            ),
            "{f:#?}"
        );
        assert!(has(Severity::Warn, "net.core.rmem_max = 212992"), "{f:#?}");
        let block = f
            .iter()
            .find(|f| f.severity == Severity::Block)
            .unwrap_or_else(|| panic!("{f:#?}"));
        assert!(
            block.message.contains("net.ipv4.igmp_max_memberships = 1"),
            "{block:#?}"
        );
        assert_eq!(
            block.fix.as_deref(),
            Some("sysctl -w net.ipv4.igmp_max_memberships=2")
        );
    }

    #[test]
    fn pci_addresses_get_their_domain() {
        assert_eq!(full_pci("3B:00.0"), "0000:3b:00.0");
        assert_eq!(full_pci("0001:3b:00.1"), "0001:3b:00.1");
    }
}
