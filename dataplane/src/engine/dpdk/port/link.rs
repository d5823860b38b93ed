//! A port's link to the world beyond it: its MTU (raised, never lowered), the multicast
//! groups its kernel interface joins, and the wait for its link to come up.

use super::Port;
use crate::engine::EngineError;
use crate::plan::dpdk::PortPlan;
use dpdk_sys as sys;

/// Raises the port's MTU to the planned one (the largest frame its queues hold), never
/// lowers it: a virtual device over a kernel interface (af_packet) sets that interface's
/// MTU, which other users of it rely on. A device that keeps a smaller MTU drops the
/// larger frames, so that is a warning that says which frames and what was refused.
pub(super) fn raise_mtu(
    planned: &PortPlan,
    id: u16,
    info: &sys::rte_eth_dev_info,
    kernel_raised: bool,
) {
    const ENOTSUP: i32 = 95;
    let mut current = 0u16;
    // SAFETY: a valid port id and out pointer.
    if unsafe { sys::rte_eth_dev_get_mtu(id, &mut current) } != 0 || current >= planned.mtu {
        return;
    }
    let want = planned.mtu.min(info.max_mtu.max(current));
    // SAFETY: a configured, not yet started port.
    let set = crate::engine::dpdk::error::check("rte_eth_dev_set_mtu", unsafe {
        sys::rte_eth_dev_set_mtu(id, want)
    });
    let largest = usize::from(planned.mtu) + crate::plan::dpdk::FRAME_OVERHEAD;
    match set {
        Ok(_) if want == planned.mtu => tracing::info!(
            "interface `{}`: MTU raised from {current} to {want} for its {largest}-byte frames",
            planned.name
        ),
        Ok(_) => tracing::warn!(
            "interface `{}`: the device's MTU goes up to {want} only; frames larger than {} bytes (its queues hold {largest}) are dropped",
            planned.name,
            usize::from(want) + crate::plan::dpdk::FRAME_OVERHEAD
        ),
        // No MTU control (net_ring, net_null): such devices do not enforce one either; a
        // device over a kernel interface whose MTU was raised sends what that takes.
        Err(e) if e.errno == ENOTSUP || kernel_raised => tracing::debug!(
            "interface `{}`: the device has no MTU setting ({e}); its queues hold {largest}-byte frames",
            planned.name
        ),
        Err(e) => tracing::warn!(
            "interface `{}`: the device keeps MTU {current} ({e}); frames larger than {} bytes (its queues hold {largest}) are dropped",
            planned.name,
            usize::from(current) + crate::plan::dpdk::FRAME_OVERHEAD
        ),
    }
}

/// Raises the MTU of the kernel interface a virtual device sends through (af_packet,
/// af_xdp) to the planned one, never lowering it; true when it now takes the planned
/// frames. A refusal is a warning with the command that does it.
pub(super) fn raise_kernel_mtu(planned: &PortPlan) -> bool {
    let Some(netdev) = &planned.kernel_interface else {
        return false;
    };
    let mtu = u32::from(planned.mtu);
    match crate::netdev::raise_mtu(netdev, mtu) {
        Ok(had) if had < mtu => {
            tracing::info!(
                "interface `{}`: kernel interface {netdev}'s MTU raised from {had} to {mtu}",
                planned.name
            );
            true
        }
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(
                "interface `{}`: cannot raise kernel interface {netdev}'s MTU to {mtu} ({e}); larger frames are dropped until `ip link set dev {netdev} mtu {mtu}`",
                planned.name
            );
            false
        }
    }
}

/// Joins the port's `multicast_groups` through its kernel interface (`iface=` of af_packet
/// and af_xdp, or the netdev a PCI NIC's kernel driver keeps, as mlx5's does), so the
/// kernel sends the IGMP reports and admits the groups; asks the device for all-multicast
/// too. A port without a kernel interface cannot send the joins: an error naming why.
pub(super) fn join_groups(
    planned: &PortPlan,
    id: u16,
) -> Result<Option<crate::netdev::GroupMembership>, EngineError> {
    if planned.multicast.is_empty() {
        return Ok(None);
    }
    let bad = |reason: String| EngineError::Interface {
        interface: planned.name.clone(),
        reason,
    };
    let netdev = planned
        .kernel_interface
        .clone()
        .or_else(|| planned.pci.then(|| crate::netdev::of_pci_device(&planned.address)).flatten())
        .ok_or_else(|| {
            bad("multicast_groups: the port has no kernel interface to send the IGMP joins through (af_packet and af_xdp have `iface=`; a PCI NIC needs a driver that keeps its netdev beside DPDK, as mlx5 does, not vfio-pci)".into())
        })?;
    let joined = crate::netdev::join_groups(&netdev, &planned.multicast)
        .map_err(|e| bad(format!("multicast_groups: {e}")))?;
    // SAFETY: a started port.
    let all = unsafe { sys::rte_eth_allmulticast_enable(id) };
    tracing::info!(
        "interface `{}`: joined {} multicast group(s) through kernel interface {netdev}{}",
        planned.name,
        planned.multicast.len(),
        if all == 0 {
            ", device all-multicast on"
        } else {
            " (the device has no all-multicast switch; it receives what its filters pass)"
        }
    );
    Ok(Some(joined))
}

/// How long start waits for the ports' links, as testpmd does (9 s).
pub const LINK_WAIT: std::time::Duration = std::time::Duration::from_secs(9);

/// Whether port `id`'s link is up (a driver that cannot say counts as up).
fn link_up(id: u16) -> bool {
    // SAFETY: a started port; the shim reads the link into a local of its own.
    unsafe { sys::shim_eth_link_up(id) != 0 }
}

/// Waits until every port's link is up, at most `limit`, polling every 100 ms: frames sent
/// before a link (or its peer's) is up are lost on the wire (seen with an emulated 82576,
/// whose link comes up about a second after start). A port still down after the wait is
/// a warning that names it; virtual devices report up at once.
pub fn wait_for_links(ports: &[Port], limit: std::time::Duration) {
    let start = std::time::Instant::now();
    let mut down: Vec<&Port> = ports.iter().filter(|p| !link_up(p.id.0)).collect();
    while !down.is_empty() && start.elapsed() < limit {
        std::thread::sleep(std::time::Duration::from_millis(100));
        down.retain(|p| !link_up(p.id.0));
    }
    let waited = start.elapsed();
    if down.is_empty() {
        if waited.as_millis() >= 100 {
            tracing::info!("links up after {:.1} s", waited.as_secs_f64());
        }
    } else {
        for p in down {
            tracing::warn!(
                "interface `{}`: link still down {:.0} s after start; frames sent meanwhile are lost",
                p.interface,
                waited.as_secs_f64()
            );
        }
    }
}
