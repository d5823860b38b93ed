//! What only the GPU driver knows (persistence mode, clocks), and whether GPUDirect
//! Storage can write a GPU capture's files. The driver's answers come from `nvidia-smi`
//! on this machine and from its saved output (`nvidia-smi-query-gpu.csv`) in a recorded
//! tree (`scripts/doctor-record.sh` saves it).

use super::{Finding, Machine, Severity, configured_regions, push};
use crate::config::MemoryKind;
use crate::plan::Plan;
use std::collections::BTreeSet;

/// The `nvidia-smi --query-gpu` fields asked for, in this order.
pub(super) const QUERY: &str = "index,pci.bus_id,persistence_mode,clocks.applications.graphics,clocks.max.graphics,clocks.applications.memory,clocks.max.memory";

/// Where a recorded tree keeps `nvidia-smi`'s answer to [`QUERY`].
const RECORDED: &str = "nvidia-smi-query-gpu.csv";

/// One GPU's settings as the driver reports them (`None`: not reported, `[N/A]`, as an
/// integrated GPU answers for clocks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct GpuSettings {
    pub ordinal: u32,
    pub persistence: Option<bool>,
    /// Application clocks (MHz): graphics (SM) and memory.
    pub clocks: (Option<u32>, Option<u32>),
    /// The highest clocks (MHz): graphics and memory.
    pub max_clocks: (Option<u32>, Option<u32>),
}

/// `nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits` output, one GPU a line;
/// lines that do not parse are passed over.
pub(super) fn parse_query(text: &str) -> Vec<GpuSettings> {
    let mhz = |s: &str| s.trim().parse::<u32>().ok();
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            if f.len() != 7 {
                return None;
            }
            Some(GpuSettings {
                ordinal: f[0].parse().ok()?,
                persistence: match f[2] {
                    "Enabled" => Some(true),
                    "Disabled" => Some(false),
                    _ => None,
                },
                clocks: (mhz(f[3]), mhz(f[5])),
                max_clocks: (mhz(f[4]), mhz(f[6])),
            })
        })
        .collect()
}

impl Machine {
    /// The GPUs' settings: `nvidia-smi`'s answer on this machine, the saved one in a
    /// recorded tree; `None` when neither is there.
    pub(super) fn gpu_settings(&self) -> Option<Vec<GpuSettings>> {
        let text = if self.is_this_machine() {
            let out = std::process::Command::new("nvidia-smi")
                .args([
                    format!("--query-gpu={QUERY}").as_str(),
                    "--format=csv,noheader,nounits",
                ])
                .output()
                .ok()
                .filter(|o| o.status.success())?;
            String::from_utf8_lossy(&out.stdout).into_owned()
        } else {
            self.read(RECORDED)?
        };
        Some(parse_query(&text))
    }
}

/// Persistence mode and clocks of the GPUs the configuration's regions are on.
pub(super) fn gpu_settings(m: &Machine, p: &Plan, out: &mut Vec<Finding>) {
    let used: BTreeSet<u32> = configured_regions(p)
        .filter(|r| matches!(r.kind, MemoryKind::Device | MemoryKind::HostPinned))
        .map(|r| r.affinity)
        .collect();
    if used.is_empty() || !m.exists("proc/driver/nvidia/version") {
        return;
    }
    let Some(settings) = m.gpu_settings() else {
        // A tree recorded without the driver's answer says nothing either way.
        if !m.is_this_machine() {
            return;
        }
        push(
            out,
            "gpu",
            Severity::Warn,
            "persistence mode and clocks unknown: nvidia-smi did not answer".into(),
            Some("install the NVIDIA driver's utilities (nvidia-smi)".into()),
        );
        return;
    };
    for g in settings.iter().filter(|g| used.contains(&g.ordinal)) {
        let i = g.ordinal;
        match g.persistence {
            Some(true) => push(
                out,
                "gpu",
                Severity::Ok,
                format!("GPU {i}: persistence mode on"),
                None,
            ),
            Some(false) => push(
                out,
                "gpu",
                Severity::Warn,
                format!(
                    "GPU {i}: persistence mode off: the driver tears the GPU down when the last \
                     process lets go of it, and each start pays for bringing it up again"
                ),
                Some(format!(
                    "nvidia-smi -i {i} -pm 1 (or: systemctl enable --now nvidia-persistenced)"
                )),
            ),
            None => {}
        }
        match (g.clocks, g.max_clocks) {
            ((Some(gr), Some(mem)), (Some(max_gr), Some(max_mem)))
                if gr < max_gr || mem < max_mem =>
            {
                push(
                    out,
                    "gpu",
                    Severity::Warn,
                    format!(
                        "GPU {i}: application clocks {gr} MHz SM, {mem} MHz memory, below the \
                         highest {max_gr} and {max_mem}: the stage's copies and the reorder run \
                         slower under load"
                    ),
                    Some(format!("nvidia-smi -i {i} -ac {max_mem},{max_gr}")),
                );
            }
            ((Some(gr), Some(mem)), _) => push(
                out,
                "gpu",
                Severity::Ok,
                format!(
                    "GPU {i}: application clocks at their highest ({gr} MHz SM, {mem} MHz memory)"
                ),
                None,
            ),
            // An integrated GPU reports no clocks ([N/A]): nothing to set.
            _ => push(
                out,
                "gpu",
                Severity::Ok,
                format!(
                    "GPU {i}: the driver reports no application clocks (an integrated GPU does not)"
                ),
                None,
            ),
        }
    }
}

/// GPUDirect Storage for queues that capture packets held in GPU memory: cuFile reads
/// the file system's type from udev's database and refuses the file
/// (`CU_FILE_HANDLE_NOT_REGISTERED`) without it; without the nvidia-fs driver it works
/// only in compatibility mode (through host buffers), if cuFile allows it.
pub(super) fn gds(m: &Machine, p: &Plan, out: &mut Vec<Finding>) {
    for q in &p.queues {
        let Some(capture) = &q.capture else { continue };
        let on_gpu = q
            .segments
            .iter()
            .any(|r| p.regions[r.index()].kind == MemoryKind::Device);
        if !on_gpu {
            continue;
        }
        let what = format!(
            "interface `{}` RX queue {} captures GPU memory to {}",
            q.interface_name, q.id, capture.path
        );
        if m.exists("proc/driver/nvidia-fs") {
            push(
                out,
                "gds",
                Severity::Ok,
                format!("{what}: nvidia-fs is loaded (direct DMA to storage)"),
                None,
            );
        } else {
            let compat = m
                .read("etc/cufile.json")
                .is_some_and(|t| t.replace(' ', "").contains("\"allow_compat_mode\":true"));
            if compat {
                push(
                    out,
                    "gds",
                    Severity::Warn,
                    format!(
                        "{what}: no nvidia-fs driver, so cuFile's compatibility mode copies through host buffers (about half of the disk's speed)"
                    ),
                    Some("install and load nvidia-fs (modprobe nvidia-fs) for direct DMA".into()),
                );
            } else {
                push(
                    out,
                    "gds",
                    Severity::Block,
                    format!("{what}: no nvidia-fs driver, and /etc/cufile.json does not allow compatibility mode"),
                    Some("modprobe nvidia-fs, or set \"allow_compat_mode\": true under \"properties\" in /etc/cufile.json".into()),
                );
            }
        }
        udev_entry(m, &what, &capture.path, out);
    }
}

/// Whether udev's database has the entry cuFile reads for the file system `path` is on.
fn udev_entry(m: &Machine, what: &str, path: &str, out: &mut Vec<Finding>) {
    // The mount whose directory is the longest prefix of the path.
    let mounts = m.read("proc/mounts").unwrap_or_default();
    let mount = mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?, f.next()?, f.next()?))
        })
        .filter(|(_, dir, _)| {
            let dir = dir.trim_end_matches('/');
            dir.is_empty() || path == dir || path.starts_with(&format!("{dir}/"))
        })
        .max_by_key(|(_, dir, _)| dir.len());
    let Some((device, _, fs_type)) = mount else {
        return;
    };
    let Some(name) = device.strip_prefix("/dev/") else {
        return;
    };
    let Some(numbers) = m.read(&format!("sys/class/block/{name}/dev")) else {
        return;
    };
    let entry = format!("run/udev/data/b{numbers}");
    if m.read(&entry).is_some_and(|t| t.contains("ID_FS_TYPE=")) {
        push(
            out,
            "gds",
            Severity::Ok,
            format!("{what}: udev knows {device}'s file system ({fs_type})"),
            None,
        );
    } else {
        push(
            out,
            "gds",
            Severity::Block,
            format!(
                "{what}: udev's database has no entry for {device} (/{entry}), where cuFile reads the file system's type: the capture fails at start with CU_FILE_HANDLE_NOT_REGISTERED (a container or VM without udevd)"
            ),
            Some(format!(
                "printf 'E:ID_FS_TYPE={fs_type}\\nE:ID_FS_USAGE=filesystem\\n' > /{entry} (or run systemd-udevd and udevadm trigger --subsystem-match=block)"
            )),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_smi_answers_parse_with_missing_values_as_unknown() {
        let s = parse_query(
            "0, 00000000:00:06.0, Enabled, 1980, 1980, 2619, 2619\n\
             1, 0000000F:01:00.0, Disabled, [N/A], [N/A], [N/A], [N/A]\n\
             garbage\n",
        );
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].persistence, Some(true));
        assert_eq!(s[0].clocks, (Some(1980), Some(2619)));
        assert_eq!(s[1].persistence, Some(false));
        assert_eq!(s[1].max_clocks, (None, None));
    }
}
