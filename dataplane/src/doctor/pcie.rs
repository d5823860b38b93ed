//! PCIe health of the functions the data path crosses (DPDK ports on PCI, the GPUs of
//! device and pinned regions): the link trained at the card's speed and width, the IOMMU
//! mode of its group, for NICs the read request size (MRRS) from its config space, and for
//! GPUs the BAR1 aperture a NIC reaches their memory through.
//! Each reads sysfs only; a file a virtual or older machine lacks skips its check.

use super::*;

/// What a PCI function is to the data path.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// A NIC a DPDK port drives.
    Nic,
    /// A GPU a region lives on.
    Gpu,
}

/// The link, IOMMU and (for NICs) MRRS checks of function `addr`, named `what` in the
/// findings (`interface \`p0\``, `GPU 0`).
pub(super) fn function(m: &Machine, what: &str, addr: &str, role: Role, out: &mut Vec<Finding>) {
    let dir = format!("sys/bus/pci/devices/{addr}");
    link(m, what, addr, &dir, role, out);
    iommu_mode(m, what, addr, &dir, out);
    if role == Role::Nic {
        read_request_size(m, what, addr, &dir, out);
    }
}

/// A GPU's BAR1 (the aperture through which a NIC or another device reads and writes its
/// memory for GPUDirect) against the bytes of the device regions on it: every registered
/// buffer needs BAR1 space, and a region larger than the aperture cannot be mapped whole.
pub(super) fn bar1(m: &Machine, what: &str, addr: &str, device_bytes: u64, out: &mut Vec<Finding>) {
    let Some(resources) = m.read(&format!("sys/bus/pci/devices/{addr}/resource")) else {
        return;
    };
    // One line per BAR: start, end, flags; BAR1 is the second.
    let bounds: Option<Vec<u64>> = resources.lines().nth(1).map(|line| {
        line.split_whitespace()
            .filter_map(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16).ok())
            .collect()
    });
    let Some(&[start, end, ..]) = bounds.as_deref() else {
        return;
    };
    if end <= start {
        return;
    }
    let size = end - start + 1;
    let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
    if size < device_bytes {
        push(
            out,
            "pcie",
            Severity::Warn,
            format!(
                "{what} ({addr}): BAR1 is {:.2} GiB, the device regions on it {:.2} GiB: a NIC cannot map them whole for GPUDirect",
                gib(size),
                gib(device_bytes)
            ),
            Some("enable Resizable BAR (and Above 4G Decoding) in the BIOS, or shrink the regions; nvidia-smi -q -d MEMORY shows BAR1".into()),
        );
    } else {
        push(
            out,
            "pcie",
            Severity::Ok,
            format!(
                "{what} ({addr}): BAR1 {:.2} GiB holds the {:.2} GiB of device regions",
                gib(size),
                gib(device_bytes)
            ),
            None,
        );
    }
}

/// A link speed file's GT/s (`16.0 GT/s PCIe` is 16.0).
fn gts(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

/// The trained link against what the device can do: a narrower or slower link caps the
/// data path below line rate whatever the software does.
fn link(m: &Machine, what: &str, addr: &str, dir: &str, role: Role, out: &mut Vec<Finding>) {
    let read = |f: &str| m.read(&format!("{dir}/{f}"));
    let (Some(speed), Some(max_speed), Some(width), Some(max_width)) = (
        read("current_link_speed"),
        read("max_link_speed"),
        read("current_link_width").and_then(|w| w.parse::<u32>().ok()),
        read("max_link_width").and_then(|w| w.parse::<u32>().ok()),
    ) else {
        return;
    };
    let (Some(now), Some(max)) = (gts(&speed), gts(&max_speed)) else {
        return;
    };
    let trained = format!("{now:.1} GT/s x{width}");
    let capable = format!("{max:.1} GT/s x{max_width}");
    let fix = format!(
        "lspci -vv -s {addr} (LnkCap against LnkSta): seat the card in a slot as wide as it (x{max_width}), without a narrower riser; check the BIOS's slot speed setting"
    );
    if width < max_width {
        push(
            out,
            "pcie",
            Severity::Warn,
            format!(
                "{what} ({addr}): PCIe link {trained}, the device can do {capable}: {:.0} % of its lanes",
                100.0 * f64::from(width) / f64::from(max_width)
            ),
            Some(fix),
        );
    } else if now < max && role == Role::Nic {
        push(
            out,
            "pcie",
            Severity::Warn,
            format!("{what} ({addr}): PCIe link {trained}, the device can do {capable}"),
            Some(fix),
        );
    } else if now < max {
        // GPUs lower their link speed while idle and raise it under load.
        push(
            out,
            "pcie",
            Severity::Ok,
            format!(
                "{what} ({addr}): PCIe link x{width} of x{max_width}, {trained} now (an idle GPU lowers its link speed; it returns to {max:.1} GT/s under load)"
            ),
            None,
        );
    } else {
        push(
            out,
            "pcie",
            Severity::Ok,
            format!("{what} ({addr}): PCIe link {trained}, the device's maximum"),
            None,
        );
    }
}

/// Whether the IOMMU translates the function's DMA. A kernel driver's function (mlx5_core,
/// nvidia) in a translated group pays an IOMMU lookup per DMA and IOTLB misses at line
/// rate; passthrough (`iommu=pt`) keeps the IOMMU for vfio-pci without that cost. A
/// vfio-pci function always translates (DPDK maps its own memory), so it is not checked.
fn iommu_mode(m: &Machine, what: &str, addr: &str, dir: &str, out: &mut Vec<Finding>) {
    let driver = m.link_name(&format!("{dir}/driver"));
    let Some(driver) = driver.filter(|d| d != "vfio-pci") else {
        return;
    };
    let Some(group) = m.link_name(&format!("{dir}/iommu_group")) else {
        return;
    };
    let Some(kind) = m.read(&format!("sys/kernel/iommu_groups/{group}/type")) else {
        return;
    };
    if kind.starts_with("DMA") {
        push(
            out,
            "pcie",
            Severity::Warn,
            format!(
                "{what} ({addr}, {driver}): IOMMU group {group} translates DMA (`{kind}`): every transfer is looked up in the IOMMU's tables"
            ),
            Some("add `iommu=pt` to the kernel command line (with `intel_iommu=on` or `amd_iommu=on`) and reboot: passthrough for kernel drivers, translation still for vfio-pci".into()),
        );
    } else {
        push(
            out,
            "pcie",
            Severity::Ok,
            format!("{what} ({addr}, {driver}): IOMMU group {group} is `{kind}` (no translation)"),
            None,
        );
    }
}

/// Sizes from the PCI Express capability (config space; its extended part is readable by
/// root only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RequestSizes {
    /// Max read request size (device control).
    pub mrrs: u32,
    /// Max payload size in use (device control).
    pub mps: u32,
    /// Max payload size the device supports (device capabilities).
    pub mps_supported: u32,
}

/// The device's [`RequestSizes`], when its config space has the PCI Express capability.
pub(super) fn request_sizes(config: &[u8]) -> Option<RequestSizes> {
    const STATUS_CAP_LIST: u8 = 0x10;
    const PCI_EXPRESS: u8 = 0x10;
    if config.get(0x06)? & STATUS_CAP_LIST == 0 {
        return None;
    }
    let mut at = usize::from(*config.get(0x34)? & !3);
    // At most 48 capabilities fit in the first 256 bytes; a loop in a corrupt list ends.
    for _ in 0..48 {
        if at < 0x40 {
            return None;
        }
        let (id, next) = (*config.get(at)?, *config.get(at + 1)?);
        if id == PCI_EXPRESS {
            let caps = *config.get(at + 4)?;
            let control = u16::from_le_bytes([*config.get(at + 8)?, *config.get(at + 9)?]);
            return Some(RequestSizes {
                mrrs: 128 << ((control >> 12) & 7),
                mps: 128 << ((control >> 5) & 7),
                mps_supported: 128 << (caps & 7),
            });
        }
        at = usize::from(next & !3);
    }
    None
}

/// A NIC's max read request size: its TX DMA reads host memory in requests of at most
/// this size, and ConnectX needs 4096-byte requests for line rate on large frames.
fn read_request_size(m: &Machine, what: &str, addr: &str, dir: &str, out: &mut Vec<Finding>) {
    let Ok(config) = std::fs::read(m.path(&format!("{dir}/config"))) else {
        return;
    };
    let Some(RequestSizes {
        mrrs,
        mps,
        mps_supported,
    }) = request_sizes(&config)
    else {
        return;
    };
    if mps < mps_supported {
        push(
            out,
            "pcie",
            Severity::Warn,
            format!(
                "{what} ({addr}): max payload {mps} B, below the {mps_supported} B the device supports: DMA writes of received frames go in more, smaller packets"
            ),
            Some(
                "boot with pci=pcie_bus_perf (the kernel then sets each device's payload as large as the ports above it take)"
                    .into(),
            ),
        );
    }
    if mrrs < 4096 {
        push(
            out,
            "pcie",
            Severity::Warn,
            format!(
                "{what} ({addr}): max read request {mrrs} B (payload {mps} B): TX reads of large frames take {} requests each",
                9000_u32.div_ceil(mrrs)
            ),
            Some(format!(
                "setpci -s {addr} CAP_EXP+8.w=5000:7000 (4096-byte read requests; again after each reboot, e.g. from a udev rule)"
            )),
        );
    } else {
        push(
            out,
            "pcie",
            Severity::Ok,
            format!("{what} ({addr}): max read request {mrrs} B, max payload {mps} B"),
            None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{RequestSizes, request_sizes};

    /// A config space with the PCI Express capability second in the list.
    fn config(control: u16) -> Vec<u8> {
        let mut c = vec![0u8; 256];
        c[0x06] = 0x10;
        c[0x34] = 0x40;
        c[0x40] = 0x01; // power management
        c[0x41] = 0x60;
        c[0x60] = 0x10; // PCI Express
        c[0x64] = 0x02; // device capabilities: 512-byte payloads
        c[0x68..0x6a].copy_from_slice(&control.to_le_bytes());
        c
    }

    #[test]
    fn request_sizes_come_from_the_express_capability() {
        let sizes = |mrrs, mps, mps_supported| {
            Some(RequestSizes {
                mrrs,
                mps,
                mps_supported,
            })
        };
        assert_eq!(request_sizes(&config(0x5020)), sizes(4096, 256, 512));
        assert_eq!(request_sizes(&config(0x2000)), sizes(512, 128, 512));
        let mut no_list = config(0x5020);
        no_list[0x06] = 0;
        assert_eq!(request_sizes(&no_list), None);
        // The 64 bytes a user who is not root reads end before the capability.
        assert_eq!(request_sizes(&config(0x5020)[..64]), None);
        let mut looped = config(0x5020);
        looped[0x60] = 0x05;
        looped[0x61] = 0x40; // back to the first
        assert_eq!(request_sizes(&looped), None);
    }
}
