//! `dataplane doctor`: checks a machine against a configuration and says, per finding,
//! the command that fixes it. It reads only `/proc` and `/sys` (below a root that tests
//! point at recorded trees), never changes anything, and decides nothing the start-up
//! does not also decide: the configuration's needs come from its [`Plan`].
//!
//! Checks: huge pages per NUMA node against the plan and a hugetlbfs mount; the configured
//! cores (present, isolated with `isolcpus` and `nohz_full`, not serving interrupts, the
//! cpufreq governor, SMT siblings); PCI devices (present, NUMA node against the cores and
//! GPUs, driver, IOMMU, MTU against the frame size); RDMA devices and a RoCE v2 GID for
//! every `roce://` address; the GPU driver, and dma-buf or peer memory for RDMA into GPU
//! memory; socket buffer limits for kernel sockets; the locked-memory limit.

#![forbid(unsafe_code)]

use crate::config::{Config, Endpoint, EngineKind, GpuMemoryPath, MemoryKind};
use crate::plan::{EnginePlan, Plan};
use serde::Serialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

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
    /// The check (`hugepages`, `cores`, `pci`, `rdma`, `gpu`, `sockets`, `memlock`).
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
}

impl Machine {
    /// The machine under `root` (`/` for this one; a recorded tree in tests).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
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

/// Without a configuration: what the machine offers.
fn inventory(m: &Machine, out: &mut Vec<Finding>) {
    let online = m.read("sys/devices/system/cpu/online").unwrap_or_default();
    let isolated = m
        .read("sys/devices/system/cpu/isolated")
        .unwrap_or_default();
    push(
        out,
        "cores",
        Severity::Ok,
        format!(
            "online cores {online}; isolated: {}",
            if isolated.is_empty() {
                "none"
            } else {
                &isolated
            }
        ),
        None,
    );
    for c in crate::hugepages::page_counts_under(&m.root) {
        if let Some(node) = c.node {
            push(
                out,
                "hugepages",
                Severity::Ok,
                format!(
                    "node {node}: {} of {} {} KiB pages free",
                    c.free,
                    c.total,
                    c.page_size / 1024
                ),
                None,
            );
        }
    }
    let rdma = m.list("sys/class/infiniband");
    push(
        out,
        "rdma",
        Severity::Ok,
        if rdma.is_empty() {
            "no RDMA devices".into()
        } else {
            format!("RDMA devices: {}", rdma.join(", "))
        },
        None,
    );
    let gpus = m.list("proc/driver/nvidia/gpus");
    push(
        out,
        "gpu",
        Severity::Ok,
        match m
            .read("proc/driver/nvidia/version")
            .and_then(|v| v.lines().next().map(str::to_owned))
        {
            Some(v) => format!("{} GPU(s); {v}", gpus.len()),
            None => "no NVIDIA driver loaded".into(),
        },
        None,
    );
}

fn hugepages(m: &Machine, plan: Option<&Plan>, out: &mut Vec<Finding>) {
    let Some(plan) = plan else {
        return;
    };
    let page_kib = crate::sysinfo::meminfo_under(&m.root, "Hugepagesize").unwrap_or(2048);
    let need = Some(plan.hugepages.in_pages(page_kib * 1024)).filter(|n| !n.per_node.is_empty());
    let mounted = m.read("proc/mounts").is_some_and(|t| {
        t.lines()
            .any(|l| l.split_whitespace().nth(2) == Some("hugetlbfs"))
    });
    let Some(need) = need else {
        push(
            out,
            "hugepages",
            Severity::Ok,
            "no huge pages needed".into(),
            None,
        );
        return;
    };
    if !mounted {
        push(
            out,
            "hugepages",
            Severity::Block,
            "no hugetlbfs mount".into(),
            Some("mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages".into()),
        );
    }
    let counts = crate::hugepages::page_counts_under(&m.root);
    let per_node = counts.iter().any(|c| c.node.is_some());
    for (node, (pages, parts)) in &need.per_node {
        let dir = if per_node {
            format!("sys/devices/system/node/node{node}/hugepages/hugepages-{page_kib}kB")
        } else {
            format!("sys/kernel/mm/hugepages/hugepages-{page_kib}kB")
        };
        let count = counts
            .iter()
            .find(|c| c.page_size == page_kib * 1024 && c.node == per_node.then_some(*node));
        let (free, total) = (count.map(|c| c.free), count.map(|c| c.total));
        let what = parts
            .iter()
            .map(|(n, p)| format!("{n} {p}"))
            .collect::<Vec<_>>()
            .join(", ");
        match free {
            Some(free) if free >= *pages => push(
                out,
                "hugepages",
                Severity::Ok,
                format!("node {node}: {free} free {page_kib} KiB pages, {pages} needed ({what})"),
                None,
            ),
            _ => {
                let free = free.unwrap_or(0);
                let target = total.unwrap_or(0) + (pages - free.min(*pages));
                push(
                    out,
                    "hugepages",
                    Severity::Block,
                    format!(
                        "node {node}: {free} free {page_kib} KiB pages, {pages} needed ({what})"
                    ),
                    Some(format!("echo {target} > /{dir}/nr_hugepages")),
                );
            }
        }
    }
}

fn cores_check(
    m: &Machine,
    cores: &BTreeSet<u32>,
    workers: &BTreeSet<u32>,
    out: &mut Vec<Finding>,
) {
    if cores.is_empty() {
        return;
    }
    let online = m.cpus("sys/devices/system/cpu/online").unwrap_or_default();
    let missing: BTreeSet<u32> = cores.difference(&online).copied().collect();
    if !missing.is_empty() {
        push(
            out,
            "cores",
            Severity::Block,
            format!(
                "cores {} are not online here (online: {})",
                cpu_list(&missing),
                cpu_list(&online)
            ),
            Some("use online cores in cpu_core / master_core, or bring them online: echo 1 > /sys/devices/system/cpu/cpuN/online".into()),
        );
    }
    let present: BTreeSet<u32> = workers.intersection(&online).copied().collect();
    if present.is_empty() {
        return;
    }
    let isolated = m
        .cpus("sys/devices/system/cpu/isolated")
        .unwrap_or_default();
    let nohz = m
        .cpus("sys/devices/system/cpu/nohz_full")
        .unwrap_or_default();
    let system_cores = cpu_list(&online.difference(&present).copied().collect());
    let cmdline_fix = if system_cores.is_empty() {
        "leave at least one core to the system (every online core runs a worker), then isolate the workers' with isolcpus, nohz_full and rcu_nocbs on the kernel command line".to_owned()
    } else {
        format!(
            "add `isolcpus={0} nohz_full={0} rcu_nocbs={0} irqaffinity={system_cores}` to GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub and reboot",
            cpu_list(&present),
        )
    };
    let not_isolated: BTreeSet<u32> = present.difference(&isolated).copied().collect();
    let not_nohz: BTreeSet<u32> = present.difference(&nohz).copied().collect();
    if not_isolated.is_empty() && not_nohz.is_empty() {
        push(
            out,
            "cores",
            Severity::Ok,
            format!(
                "worker cores {} are isolated (isolcpus, nohz_full)",
                cpu_list(&present)
            ),
            None,
        );
    } else {
        let mut what = Vec::new();
        if !not_isolated.is_empty() {
            what.push(format!("{} not in isolcpus", cpu_list(&not_isolated)));
        }
        if !not_nohz.is_empty() {
            what.push(format!("{} not in nohz_full", cpu_list(&not_nohz)));
        }
        push(
            out,
            "cores",
            Severity::Warn,
            format!(
                "worker cores: {} (the scheduler and the timer tick interrupt busy polling)",
                what.join("; ")
            ),
            Some(cmdline_fix),
        );
    }
    // Interrupts delivered to worker cores: the effective affinity where the kernel
    // reports it, else an affinity mask narrower than all cores that includes one.
    let mut irqs = Vec::new();
    for irq in m.list("proc/irq") {
        if irq.parse::<u32>().is_err() {
            continue;
        }
        let hits = match m.cpus(&format!("proc/irq/{irq}/effective_affinity_list")) {
            Some(eff) => eff.iter().any(|c| present.contains(c)),
            None => m
                .cpus(&format!("proc/irq/{irq}/smp_affinity_list"))
                .is_some_and(|aff| {
                    aff.len() < online.len() && aff.iter().any(|c| present.contains(c))
                }),
        };
        if hits {
            irqs.push(irq);
        }
    }
    let others = cpu_list(&online.difference(&present).copied().collect());
    if irqs.is_empty() {
        push(
            out,
            "cores",
            Severity::Ok,
            "no interrupt is delivered to a worker core".into(),
            None,
        );
    } else {
        push(
            out,
            "cores",
            Severity::Warn,
            format!(
                "interrupts {} are delivered to worker cores",
                irqs.join(",")
            ),
            Some(if others.is_empty() {
                "leave at least one core to the system: every online core runs a worker".into()
            } else {
                format!(
                    "systemctl stop irqbalance; for i in {}; do echo {others} > /proc/irq/$i/smp_affinity_list; done",
                    irqs.join(" ")
                )
            }),
        );
    }
    for &c in &present {
        let dir = format!("sys/devices/system/cpu/cpu{c}");
        match m.read(&format!("{dir}/cpufreq/scaling_governor")) {
            Some(g) if g == "performance" => {}
            Some(g) => push(
                out,
                "cores",
                Severity::Warn,
                format!("core {c}: cpufreq governor `{g}` (clock changes under load)"),
                Some(format!(
                    "echo performance > /{dir}/cpufreq/scaling_governor"
                )),
            ),
            None => {}
        }
        if let Some(sib) = m.cpus(&format!("{dir}/topology/thread_siblings_list")) {
            let others: BTreeSet<u32> = sib.iter().copied().filter(|&s| s != c).collect();
            let busy: Vec<u32> = others
                .iter()
                .copied()
                .filter(|s| workers.contains(s) || !isolated.contains(s))
                .collect();
            if !busy.is_empty() {
                let why = if busy.iter().any(|s| workers.contains(s)) {
                    "runs another worker"
                } else {
                    "is not isolated, so other threads share the physical core"
                };
                push(
                    out,
                    "cores",
                    Severity::Warn,
                    format!(
                        "core {c}: its SMT sibling {} {why}",
                        cpu_list(&busy.iter().copied().collect())
                    ),
                    Some(format!(
                        "isolate and leave idle the siblings ({}), or echo 0 > /sys/devices/system/cpu/cpu{}/online",
                        cpu_list(&busy.iter().copied().collect()),
                        busy[0]
                    )),
                );
            }
        }
    }
}

/// `dddd:bb:dd.f` for a PCI address written with or without its domain.
fn full_pci(addr: &str) -> String {
    if addr.matches(':').count() == 1 {
        format!("0000:{}", addr.to_lowercase())
    } else {
        addr.to_lowercase()
    }
}

/// The regions the configuration names, without the staging regions the plan added (the
/// checks speak of what the user wrote).
fn configured_regions(p: &Plan) -> impl Iterator<Item = &crate::plan::RegionPlan> {
    let staging: BTreeSet<u16> = p
        .queues
        .iter()
        .filter_map(|q| q.staging)
        .chain(p.rdma().iter().flat_map(|i| &i.slots).flat_map(|s| {
            [&s.rx_staging, &s.tx_staging]
                .into_iter()
                .flatten()
                .map(|st| st.region)
        }))
        .collect();
    p.regions
        .iter()
        .enumerate()
        .filter(move |(i, _)| !staging.contains(&(*i as u16)))
        .map(|(_, r)| r)
}

/// Largest frame interface `interface` sends or receives (bytes after the Ethernet
/// header's 14 count against the MTU).
fn largest_buffer(p: &Plan, interface: usize) -> usize {
    p.queues
        .iter()
        .filter(|q| q.interface == interface)
        .map(|q| {
            q.segments
                .iter()
                .map(|&r| p.regions[r as usize].buf_size)
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0)
}

fn pci(m: &Machine, p: &Plan, cores: &BTreeSet<u32>, out: &mut Vec<Finding>) {
    let core_nodes: BTreeSet<u32> = cores.iter().filter_map(|&c| m.node_of_cpu(c)).collect();
    for iface in p.dpdk().iter().flat_map(|d| &d.ports) {
        if !iface.pci {
            continue;
        }
        let addr = full_pci(&iface.address);
        let dir = format!("sys/bus/pci/devices/{addr}");
        if !m.exists(&dir) {
            push(
                out,
                "pci",
                Severity::Block,
                format!("interface `{}`: no PCI device {addr}", iface.name),
                Some("lspci -D -d 15b3: lists the ConnectX functions; put one of their addresses in `address`".into()),
            );
            continue;
        }
        let driver = m.link_name(&format!("{dir}/driver"));
        match driver.as_deref() {
            None => push(
                out,
                "pci",
                Severity::Block,
                format!("interface `{}`: {addr} has no driver bound", iface.name),
                Some(format!(
                    "dpdk-devbind.py --bind=vfio-pci {addr} (or modprobe mlx5_core for ConnectX)"
                )),
            ),
            Some("mlx5_core") | Some("vfio-pci") => push(
                out,
                "pci",
                Severity::Ok,
                format!(
                    "interface `{}`: {addr} bound to {}",
                    iface.name,
                    driver.as_deref().unwrap_or_default()
                ),
                None,
            ),
            Some(d) => push(
                out,
                "pci",
                Severity::Warn,
                format!(
                    "interface `{}`: {addr} bound to {d}; DPDK needs vfio-pci (or mlx5_core for ConnectX)",
                    iface.name
                ),
                Some(format!("dpdk-devbind.py --bind=vfio-pci {addr}")),
            ),
        }
        if driver.as_deref() == Some("vfio-pci") && m.list("sys/kernel/iommu_groups").is_empty() {
            push(
                out,
                "pci",
                Severity::Block,
                format!(
                    "interface `{}`: vfio-pci without an IOMMU (no /sys/kernel/iommu_groups)",
                    iface.name
                ),
                Some("add `intel_iommu=on iommu=pt` (or `amd_iommu=on`) to the kernel command line and reboot".into()),
            );
        }
        if let Some(node) = m
            .read(&format!("{dir}/numa_node"))
            .and_then(|n| n.parse::<i64>().ok())
            .filter(|&n| n >= 0)
        {
            let node = node as u32;
            if !core_nodes.is_empty() && !core_nodes.contains(&node) {
                let near = m
                    .cpus(&format!("sys/devices/system/node/node{node}/cpulist"))
                    .map(|c| cpu_list(&c))
                    .unwrap_or_default();
                push(
                    out,
                    "pci",
                    Severity::Warn,
                    format!(
                        "interface `{}`: {addr} is on NUMA node {node}, the configured cores on {} (every packet crosses the socket link)",
                        iface.name,
                        core_nodes
                            .iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join(",")
                    ),
                    Some(format!("use cores of node {node} ({near}) for its queues")),
                );
            }
            for r in configured_regions(p)
                .filter(|r| matches!(r.kind, MemoryKind::Device | MemoryKind::HostPinned))
            {
                if let Some(gpu_node) = gpu_node(m, r.affinity)
                    && gpu_node != node
                {
                    push(
                        out,
                        "pci",
                        Severity::Warn,
                        format!(
                            "interface `{}` ({addr}) is on NUMA node {node}, GPU {} of region `{}` on node {gpu_node}: GPUDirect traffic crosses the socket link",
                            iface.name, r.affinity, r.name
                        ),
                        Some("pick a GPU behind the same PCIe switch or socket as the NIC (nvidia-smi topo -m)".into()),
                    );
                }
            }
        }
        let frame = largest_buffer(p, iface.interface);
        for net in m.list(&format!("{dir}/net")) {
            if let Some(mtu) = m
                .read(&format!("{dir}/net/{net}/mtu"))
                .and_then(|v| v.parse::<usize>().ok())
            {
                let needed = frame.saturating_sub(14);
                if needed > mtu {
                    push(
                        out,
                        "pci",
                        Severity::Warn,
                        format!(
                            "interface `{}`: {net} has MTU {mtu}, the queues' buffers hold {frame}-byte frames (MTU {needed} needed)",
                            iface.name
                        ),
                        Some(format!("ip link set dev {net} mtu {needed}")),
                    );
                } else {
                    push(
                        out,
                        "pci",
                        Severity::Ok,
                        format!("interface `{}`: {net} MTU {mtu}", iface.name),
                        None,
                    );
                }
            }
        }
    }
}

/// NUMA node of GPU `ordinal` (its order among NVIDIA display/3D functions by address).
fn gpu_node(m: &Machine, ordinal: u32) -> Option<u32> {
    let gpus: Vec<String> = m
        .list("sys/bus/pci/devices")
        .into_iter()
        .filter(|d| {
            let dev = format!("sys/bus/pci/devices/{d}");
            m.read(&format!("{dev}/vendor")).as_deref() == Some("0x10de")
                && m.read(&format!("{dev}/class"))
                    .is_some_and(|c| c.starts_with("0x0300") || c.starts_with("0x0302"))
        })
        .collect();
    let d = gpus.get(ordinal as usize)?;
    m.read(&format!("sys/bus/pci/devices/{d}/numa_node"))?
        .parse::<i64>()
        .ok()
        .filter(|&n| n >= 0)
        .map(|n| n as u32)
}

/// The IPv4 address as the GID table writes a RoCE v2 IPv4 GID.
fn ipv4_gid(ip: std::net::Ipv4Addr) -> String {
    let o = ip.octets();
    format!(
        "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}",
        o[0], o[1], o[2], o[3]
    )
}

fn rdma(m: &Machine, p: &Plan, out: &mut Vec<Finding>) {
    let roce: Vec<_> = p
        .rdma()
        .iter()
        .filter_map(|i| match i.local.ip() {
            std::net::IpAddr::V4(ip) => Some((
                i,
                Endpoint {
                    ip,
                    port: i.local.port(),
                },
            )),
            std::net::IpAddr::V6(_) => None,
        })
        .collect();
    if roce.is_empty() {
        return;
    }
    let devices = m.list("sys/class/infiniband");
    if devices.is_empty() {
        push(
            out,
            "rdma",
            Severity::Block,
            "no RDMA device (/sys/class/infiniband is empty)".into(),
            Some("modprobe mlx5_ib (ConnectX), or for a software test: rdma link add rxe0 type rxe netdev IFACE".into()),
        );
        return;
    }
    for (iface, local) in roce {
        let gid = ipv4_gid(local.ip);
        let mut found = None;
        for dev in &devices {
            for port in m.list(&format!("sys/class/infiniband/{dev}/ports")) {
                let base = format!("sys/class/infiniband/{dev}/ports/{port}");
                for idx in m.list(&format!("{base}/gids")) {
                    if m.read(&format!("{base}/gids/{idx}")).as_deref() == Some(gid.as_str()) {
                        let kind = m
                            .read(&format!("{base}/gid_attrs/types/{idx}"))
                            .unwrap_or_default();
                        if found.is_none() || kind.contains("v2") {
                            found = Some((dev.clone(), port.clone(), idx.clone(), kind));
                        }
                    }
                }
            }
        }
        match found {
            Some((dev, port, idx, kind)) if kind.contains("v2") => push(
                out,
                "rdma",
                Severity::Ok,
                format!(
                    "interface `{}`: {} is RoCE v2 GID {idx} of {dev} port {port}",
                    iface.name, local.ip
                ),
                None,
            ),
            Some((dev, port, idx, kind)) => push(
                out,
                "rdma",
                Severity::Warn,
                format!(
                    "interface `{}`: {} is GID {idx} of {dev} port {port}, but of type `{kind}`, not RoCE v2",
                    iface.name, local.ip
                ),
                Some(format!("cma_roce_mode -d {dev} -p {port} -m 2")),
            ),
            None => push(
                out,
                "rdma",
                Severity::Block,
                format!(
                    "interface `{}`: no RDMA device has a GID for {} (devices: {})",
                    iface.name,
                    local.ip,
                    devices.join(", ")
                ),
                Some(format!(
                    "ip addr add {}/24 dev NETDEV (the netdev of an RDMA port: rdma link show)",
                    local.ip
                )),
            ),
        }
    }
}

fn gpu(m: &Machine, p: &Plan, out: &mut Vec<Finding>) {
    let gpu_regions: Vec<_> = configured_regions(p)
        .filter(|r| matches!(r.kind, MemoryKind::Device | MemoryKind::HostPinned))
        .collect();
    if gpu_regions.is_empty() {
        return;
    }
    let gpus = m.list("proc/driver/nvidia/gpus");
    let version = m
        .read("proc/driver/nvidia/version")
        .and_then(|v| v.lines().next().map(str::to_owned));
    let Some(version) = version else {
        push(
            out,
            "gpu",
            Severity::Block,
            format!(
                "regions {} need the NVIDIA driver, which is not loaded (/proc/driver/nvidia/version)",
                gpu_regions
                    .iter()
                    .map(|r| format!("`{}`", r.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some(
                "install the NVIDIA driver (open kernel modules for dma-buf) and modprobe nvidia"
                    .into(),
            ),
        );
        return;
    };
    push(
        out,
        "gpu",
        Severity::Ok,
        format!("{} GPU(s); {version}", gpus.len()),
        None,
    );
    for r in &gpu_regions {
        if r.gpu_uuid.is_none() && r.affinity as usize >= gpus.len() {
            push(
                out,
                "gpu",
                Severity::Block,
                format!(
                    "region `{}` asks for GPU {}, {} present",
                    r.name,
                    r.affinity,
                    gpus.len()
                ),
                Some("set its affinity to a GPU ordinal that exists (nvidia-smi -L)".into()),
            );
        }
    }
    // RDMA interfaces that would register GPU memory, and whether one insists
    // (`gpu_memory_path: direct`; `auto` stages where it cannot, `staged` always does).
    let rdma_paths: Vec<GpuMemoryPath> = if gpu_regions.iter().any(|r| r.kind == MemoryKind::Device)
    {
        p.rdma()
            .iter()
            .map(|i| i.roce.gpu_memory_path)
            .filter(|&p| p != GpuMemoryPath::Staged)
            .collect()
    } else {
        Vec::new()
    };
    let rdma_into_gpu = !rdma_paths.is_empty();
    let rdma_must_register = rdma_paths.contains(&GpuMemoryPath::Direct);
    let dpdk_pci_gpu = p.dpdk().is_some_and(|d| d.ports.iter().any(|i| i.pci))
        && gpu_regions.iter().any(|r| r.kind == MemoryKind::Device);
    if rdma_into_gpu || dpdk_pci_gpu {
        // The open kernel modules export GPU memory as dma-buf (with a 5.12+ kernel).
        let open_modules = version.contains("Open Kernel Module");
        let peermem = m.exists("sys/module/nvidia_peermem");
        if open_modules || peermem {
            push(
                out,
                "gpu",
                Severity::Ok,
                format!(
                    "GPU memory can be registered with the NIC: {}",
                    match (open_modules, peermem) {
                        (true, true) => "dma-buf (open kernel modules) and nvidia-peermem",
                        (true, false) => "dma-buf (open kernel modules)",
                        _ => "nvidia-peermem",
                    }
                ),
                None,
            );
            return;
        }
        let fix = "modprobe nvidia-peermem (or install the open kernel modules: nvidia-open)";
        if dpdk_pci_gpu || rdma_must_register {
            push(
                out,
                "gpu",
                Severity::Block,
                "device regions on a NIC need dma-buf (NVIDIA open kernel modules) or nvidia-peermem; neither is there".into(),
                Some(fix.into()),
            );
        } else {
            push(
                out,
                "gpu",
                Severity::Warn,
                "the NIC cannot register GPU memory here (no dma-buf, no nvidia-peermem): RDMA connections will stage their device regions through pinned host memory (gpu_memory_path auto), a copy each way".into(),
                Some(fix.into()),
            );
        }
    }
}

fn sockets(m: &Machine, p: &Plan, out: &mut Vec<Finding>) {
    let EnginePlan::Socket(socket_ifaces) = &p.engine_plan else {
        return;
    };
    if socket_ifaces.is_empty() {
        return;
    }
    let wanted = socket_ifaces
        .iter()
        .map(|i| i.buffers.0.max(i.buffers.1))
        .max()
        .unwrap_or(crate::plan::socket::MIN_SOCKET_BUFFER);
    for (file, sysctl) in [
        ("proc/sys/net/core/rmem_max", "net.core.rmem_max"),
        ("proc/sys/net/core/wmem_max", "net.core.wmem_max"),
    ] {
        let Some(have) = m.read(file).and_then(|v| v.parse::<usize>().ok()) else {
            continue;
        };
        if have >= wanted {
            push(
                out,
                "sockets",
                Severity::Ok,
                format!("{sysctl} = {have} (socket buffers of {wanted} bytes asked for)"),
                None,
            );
        } else {
            push(
                out,
                "sockets",
                Severity::Warn,
                format!(
                    "{sysctl} = {have}: sockets get less buffer than the {wanted} bytes asked for (bursts drop in the kernel), unless run with CAP_NET_ADMIN"
                ),
                Some(format!("sysctl -w {sysctl}={wanted}")),
            );
        }
    }
}

fn memlock(m: &Machine, plan: Option<&Plan>, out: &mut Vec<Finding>) {
    let Some(limits) = m.read("proc/self/limits") else {
        return;
    };
    let Some(line) = limits.lines().find(|l| l.starts_with("Max locked memory")) else {
        return;
    };
    let soft = line
        .trim_start_matches("Max locked memory")
        .split_whitespace()
        .next()
        .unwrap_or("");
    // Locked by the kernel on our behalf: RDMA registrations (every region of an RDMA
    // configuration) and VFIO's DMA mappings of DPDK's huge pages on a PCI device.
    let needed: u64 = plan.map_or(0, |p| {
        let vfio = p.dpdk().is_some_and(|d| d.ports.iter().any(|i| i.pci));
        configured_regions(p)
            .filter(|r| p.engine == EngineKind::Rdma || (vfio && r.kind == MemoryKind::Huge))
            .map(|r| (r.num_bufs * r.buf_size) as u64)
            .sum()
    });
    // CAP_IPC_LOCK (bit 14 of the effective set; root has it) lifts the limit.
    let ipc_lock = m
        .read("proc/self/status")
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << 14) != 0);
    if soft == "unlimited" || ipc_lock {
        push(
            out,
            "memlock",
            Severity::Ok,
            format!(
                "locked memory: {}",
                if soft == "unlimited" {
                    "unlimited"
                } else {
                    "the limit does not apply (CAP_IPC_LOCK)"
                }
            ),
            None,
        );
        return;
    }
    let Ok(bytes) = soft.parse::<u64>() else {
        return;
    };
    let severity = if needed > bytes {
        Severity::Block
    } else if needed > 0 {
        Severity::Ok
    } else {
        return;
    };
    push(
        out,
        "memlock",
        severity,
        format!(
            "locked-memory limit {} KiB, {} KiB of RDMA-registered or VFIO-mapped memory",
            bytes / 1024,
            needed / 1024
        ),
        (severity == Severity::Block).then(|| {
            "ulimit -l unlimited (or `* - memlock unlimited` in /etc/security/limits.conf; LimitMEMLOCK=infinity for a systemd unit)".into()
        }),
    );
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

    #[test]
    fn pci_addresses_get_their_domain() {
        assert_eq!(full_pci("3B:00.0"), "0000:3b:00.0");
        assert_eq!(full_pci("0001:3b:00.1"), "0001:3b:00.1");
    }
}
