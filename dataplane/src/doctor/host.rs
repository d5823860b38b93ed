//! Checks of the host: the inventory, huge pages, cores (isolation, NUMA, the workers'
//! placement), socket buffer limits and the locked-memory limit.

use super::*;

/// Without a configuration: what the machine offers.
pub(super) fn inventory(m: &Machine, out: &mut Vec<Finding>) {
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

pub(super) fn hugepages(m: &Machine, plan: Option<&Plan>, out: &mut Vec<Finding>) {
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

pub(super) fn cores_check(
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
    let isolated = isolation_check(m, &online, &present, out);
    interrupts_check(m, &online, &present, out);
    per_core_check(m, &present, workers, &isolated, out);
}

/// Worker cores left to the scheduler and the timer tick (isolcpus, nohz_full), with the
/// kernel command line that isolates them; returns the isolated cores.
fn isolation_check(
    m: &Machine,
    online: &BTreeSet<u32>,
    present: &BTreeSet<u32>,
    out: &mut Vec<Finding>,
) -> BTreeSet<u32> {
    let isolated = m
        .cpus("sys/devices/system/cpu/isolated")
        .unwrap_or_default();
    let nohz = m
        .cpus("sys/devices/system/cpu/nohz_full")
        .unwrap_or_default();
    let system_cores = cpu_list(&online.difference(present).copied().collect());
    let cmdline_fix = if system_cores.is_empty() {
        "leave at least one core to the system (every online core runs a worker), then isolate the workers' with isolcpus, nohz_full and rcu_nocbs on the kernel command line".to_owned()
    } else {
        format!(
            "add `isolcpus={0} nohz_full={0} rcu_nocbs={0} irqaffinity={system_cores}` to GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub and reboot",
            cpu_list(present),
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
                cpu_list(present)
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
    isolated
}

/// Interrupts delivered to worker cores, with the commands that move them away.
fn interrupts_check(
    m: &Machine,
    online: &BTreeSet<u32>,
    present: &BTreeSet<u32>,
    out: &mut Vec<Finding>,
) {
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
    let others = cpu_list(&online.difference(present).copied().collect());
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
}

/// Per worker core: its cpufreq governor and its SMT siblings.
fn per_core_check(
    m: &Machine,
    present: &BTreeSet<u32>,
    workers: &BTreeSet<u32>,
    isolated: &BTreeSet<u32>,
    out: &mut Vec<Finding>,
) {
    for &c in present {
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

pub(super) fn sockets(m: &Machine, p: &Plan, out: &mut Vec<Finding>) {
    let EnginePlan::Socket(socket_ifaces) = &p.engine_plan else {
        return;
    };
    if socket_ifaces.is_empty() {
        return;
    }
    for i in socket_ifaces {
        socket_options(m, i, out);
    }
    for (file, sysctl, wanted) in [
        (
            "proc/sys/net/core/rmem_max",
            "net.core.rmem_max",
            socket_ifaces.iter().map(|i| i.buffers.0).max(),
        ),
        (
            "proc/sys/net/core/wmem_max",
            "net.core.wmem_max",
            socket_ifaces.iter().map(|i| i.buffers.1).max(),
        ),
    ] {
        let wanted = wanted.unwrap_or(crate::plan::socket::MIN_SOCKET_BUFFER);
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

/// The socket options interface `i` applies, and what of the machine they depend on: a
/// busy-poll time above `net.core.busy_read` needs CAP_NET_ADMIN; multicast joins count
/// against `net.ipv4.igmp_max_memberships` and source filters against `igmp_max_msf`.
fn socket_options(
    m: &Machine,
    i: &crate::plan::socket::SocketInterfacePlan,
    out: &mut Vec<Finding>,
) {
    let mut applied = vec![
        format!("SO_RCVBUF {} B", i.buffers.0),
        format!("SO_SNDBUF {} B", i.buffers.1),
    ];
    if i.busy_poll_us > 0 {
        applied.push(format!("SO_BUSY_POLL {} us", i.busy_poll_us));
    }
    if i.transport == crate::config::Transport::Udp {
        applied.push(format!("UDP_GRO {}", if i.gro { "on" } else { "off" }));
        applied.push(format!(
            "UDP_SEGMENT (GSO) {}",
            if i.gso { "on" } else { "off" }
        ));
    }
    if i.timestamps {
        applied.push("SO_TIMESTAMPNS".into());
    }
    if !i.multicast.is_empty() {
        applied.push(format!("{} multicast join(s)", i.multicast.len()));
    }
    push(
        out,
        "sockets",
        Severity::Ok,
        format!("interface `{}`: {}", i.name, applied.join(", ")),
        None,
    );
    let net_admin = m
        .read("proc/self/status")
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << 12) != 0);
    let number = |file: &str| m.read(file).and_then(|v| v.trim().parse::<u64>().ok());
    if i.busy_poll_us > 0
        && !net_admin
        && let Some(busy_read) = number("proc/sys/net/core/busy_read")
        && busy_read < u64::from(i.busy_poll_us)
    {
        push(
            out,
            "sockets",
            Severity::Warn,
            format!(
                "interface `{}`: busy_poll_us {} is above net.core.busy_read = {busy_read}, which needs CAP_NET_ADMIN: the sockets would not open",
                i.name, i.busy_poll_us
            ),
            Some(format!("sysctl -w net.core.busy_read={}", i.busy_poll_us)),
        );
    }
    let sources = i.multicast.iter().filter(|g| g.source.is_some()).count() as u64;
    for (file, sysctl, need) in [
        (
            "proc/sys/net/ipv4/igmp_max_memberships",
            "net.ipv4.igmp_max_memberships",
            i.multicast.len() as u64,
        ),
        (
            "proc/sys/net/ipv4/igmp_max_msf",
            "net.ipv4.igmp_max_msf",
            sources,
        ),
    ] {
        if need > 0
            && let Some(have) = number(file)
            && have < need
        {
            push(
                out,
                "sockets",
                Severity::Block,
                format!(
                    "interface `{}`: {need} multicast entries on one socket, but {sysctl} = {have}: the joins past it fail",
                    i.name
                ),
                Some(format!("sysctl -w {sysctl}={need}")),
            );
        }
    }
}

pub(super) fn memlock(m: &Machine, plan: Option<&Plan>, out: &mut Vec<Finding>) {
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
