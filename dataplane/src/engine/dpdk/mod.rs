//! DPDK engine (cargo feature `dpdk`): EAL from the plan, ports from PCI addresses or any
//! vdev string, one mbuf pool per queue segment, burst I/O from our workers, flow rules
//! programmed with rte_flow or steered in software when the device cannot take them.
//!
//! What it builds comes from the plan (`crate::plan::dpdk`): per RX queue either a region
//! lent to an mbuf pool (external buffers: the PMD fills the region's own buffers, and the
//! application's bursts carry them, returned to the pool when dropped), buffer split over
//! two pools, or a pool frames are copied out of; per TX queue a pool frames are copied
//! into. Either way the application sees the same `Burst`s, buffers and pools as with
//! every other engine.
//!
//! A safe layer split by resource, each owning what it creates: [`eal`] (EAL, cleaned up
//! on drop), [`port`] (bring-up; a port stops and closes on drop, also halfway through a
//! failed bring-up), [`mempool`] (pools freed on drop), [`extmem`] (registrations undone on
//! drop), [`queue`] (burst I/O), [`flow`] (rte_flow), and [`error`], the one place DPDK
//! return codes and `rte_errno` become typed errors. Raw bindings are used only here.

mod attach;
pub mod clock;
mod eal;
mod error;
mod extmem;
pub mod flow;
mod lent_tx;
mod mempool;
mod port;
mod queue;
mod tx;

pub use eal::eal_args;
pub use error::{DpdkError, free_memory_text};
pub use extmem::LendError;
pub use flow::FlowError;
pub use mempool::PoolError;

use super::{Capabilities, Engine, EngineError, NoDevicePacing, RxPort, TxPort};
use crate::config::Direction;
use crate::descriptor::PortIndex;
use crate::descriptor::QueueId;
use crate::memory::{RegionId, RegionSet};
use crate::plan::Plan;
use crate::stats::QueueCounters;
use crate::steering::InterfaceSteering;
use dpdk_sys as sys;
use eal::Eal;
use port::{Port, PortSteering};
use queue::{DeviceQueue, DpdkRx, MAX_BURST, RxMode};
use std::collections::BTreeMap;
use std::sync::Arc;
use tx::{DpdkTx, TxCarrier};

/// The DPDK engine: EAL, then ports (each owning its pools and registrations). Fields drop
/// in order, so every port is gone before EAL is cleaned up.
pub struct DpdkEngine {
    regions: Arc<RegionSet>,
    ports: Vec<Port>,
    /// Per region: how TX queues send its buffers. After the ports: closing a port frees
    /// the mbufs that carry attached buffers, whose release needs these tables.
    tx_carriers: Arc<Vec<TxCarrier>>,
    /// Per RX queue (port, queue id): the regions of its segments, from the plan.
    rx_segments: BTreeMap<(PortIndex, QueueId), Vec<RegionId>>,
    /// RX queues added while the engine runs, on ports that steer in software: each takes
    /// what the rules steer to it from the port's device queues, over the wires.
    added_rx: std::sync::Mutex<Vec<(PortIndex, QueueId)>>,
    _eal: Eal,
}

impl DpdkEngine {
    /// Starts EAL and every port as `plan` says.
    pub fn new(
        plan: &Plan,
        regions: &Arc<RegionSet>,
        steering: &[Arc<InterfaceSteering>],
    ) -> Result<Self, EngineError> {
        let dpdk = plan.dpdk().ok_or(EngineError::Unavailable("dpdk"))?;
        // The reference's examples may name one NIC port in two interfaces (one for TX,
        // one for RX); here each interface configures its own port, and a port is
        // configured once. Refused before EAL starts.
        for (i, p) in dpdk.ports.iter().enumerate() {
            if let Some(first) = dpdk.ports[..i].iter().find(|o| o.ethdev == p.ethdev) {
                return Err(EngineError::Interface {
                    interface: p.name.clone(),
                    reason: format!(
                        "not supported: it names the same DPDK port `{}` as interface `{}`; on DPDK put both directions in one interface (its tx and rx sections)",
                        p.ethdev, first.name
                    ),
                });
            }
        }
        let eal = Eal::init(eal_args(dpdk, !plan.hugepages.regions.is_empty())?)?;
        // Declared after `eal`, so on failure the ports made so far drop first.
        let mut ports = Vec::new();
        for planned in &dpdk.ports {
            let port = Port::open(planned, regions, &steering[planned.interface])?;
            tracing::info!(
                "DPDK port {} ready for `{}` (steering: {}; pools: {})",
                port.id.0,
                planned.name,
                port.steering_name(),
                port.pool_names().join(", ")
            );
            ports.push(port);
        }
        port::wait_for_links(&ports, port::LINK_WAIT);
        let rx_segments: BTreeMap<(PortIndex, QueueId), Vec<RegionId>> = plan
            .queues
            .iter()
            .filter(|q| q.direction == Direction::Rx)
            // A queue with a staging region (GPU memory on a virtual device) receives
            // into it; its stage moves the packets on.
            .map(|q| {
                let segs = q.staging.map_or_else(|| q.segments.clone(), |s| vec![s]);
                ((PortIndex(q.interface as u16), q.id), segs)
            })
            .collect();
        let sends = plan.queues.iter().any(|q| q.direction == Direction::Tx);
        let tx_carriers = Arc::new(tx_carriers(sends, dpdk, regions, &ports, &rx_segments));
        Ok(Self {
            regions: regions.clone(),
            ports,
            tx_carriers,
            rx_segments,
            added_rx: Default::default(),
            _eal: eal,
        })
    }

    /// True when RX queue `queue` of `port` was added while the engine runs.
    fn added_rx(&self, port: PortIndex, queue: QueueId) -> bool {
        let added = self.added_rx.lock().unwrap_or_else(|e| e.into_inner());
        added.contains(&(port, queue))
    }

    fn port(&self, port: PortIndex) -> Result<&Port, EngineError> {
        super::interface_at(&self.ports, port)
    }

    fn segments(&self, port: PortIndex, queue: QueueId) -> Vec<RegionId> {
        self.rx_segments
            .get(&(port, queue))
            .cloned()
            .unwrap_or_default()
    }
}

/// How TX queues send each region's buffers, as planned: attachable regions are
/// registered (and DMA-mapped for every PCI port); a region that cannot be is copied, with
/// a warning that says why.
fn tx_carriers(
    sends: bool,
    dpdk: &crate::plan::dpdk::DpdkPlan,
    regions: &Arc<RegionSet>,
    ports: &[Port],
    rx_segments: &BTreeMap<(PortIndex, QueueId), Vec<RegionId>>,
) -> Vec<TxCarrier> {
    use crate::plan::dpdk::TxCarry;
    let devices: Vec<_> = ports.iter().filter_map(|p| p.pci_device).collect();
    // SAFETY: reads a constant.
    let default_headroom = usize::from(unsafe { sys::shim_mbuf_headroom });
    let mut lent = BTreeMap::new();
    for (port_index, p) in ports.iter().enumerate() {
        for q in &p.rx {
            if let (Some(pool), Some(segs)) = (
                &q.lent,
                rx_segments.get(&(PortIndex(port_index as u16), q.queue)),
            ) {
                lent.insert(segs[0], pool.clone());
            }
        }
    }
    dpdk.tx_regions
        .iter()
        .enumerate()
        .map(|(i, carry)| {
            let id = RegionId(i as u16);
            let name = regions.get(id).name();
            match carry {
                TxCarry::Attached if sends => {
                    match attach::AttachableRegion::new(regions, id, &devices) {
                        Ok(a) => TxCarrier::Attach(Arc::new(a)),
                        Err(e) => {
                            tracing::warn!("memory region {name}: sent with a copy: {e}");
                            TxCarrier::Copy
                        }
                    }
                }
                TxCarry::OwnMbufs if regions.get(id).headroom() == default_headroom => lent
                    .get(&id)
                    .map_or(TxCarrier::Copy, |p| TxCarrier::Own(p.clone())),
                TxCarry::Lent if sends && regions.get(id).headroom() == default_headroom => {
                    // Any socket: the headers go where EAL has memory (a region's node may
                    // have none under --no-huge).
                    let socket = sys::SOCKET_ID_ANY;
                    match lent_tx::lend_for_tx(regions, id, &devices, socket, format!("dptx{i}l")) {
                        Ok(l) => TxCarrier::Lent(Arc::new(l)),
                        Err(e) => {
                            tracing::warn!(
                                "memory region {name}: not lent for sending ({e}); attached instead"
                            );
                            attach::AttachableRegion::new(regions, id, &devices)
                                .map_or(TxCarrier::Copy, |a| TxCarrier::Attach(Arc::new(a)))
                        }
                    }
                }
                _ => TxCarrier::Copy,
            }
        })
        .collect()
}

impl Engine for DpdkEngine {
    fn pace_tx_queue(
        &self,
        port: PortIndex,
        queue: QueueId,
        mbps: u64,
    ) -> Result<(), NoDevicePacing> {
        let p = self
            .port(port)
            .map_err(|e| NoDevicePacing::Port(Box::new(e)))?;
        let q =
            p.tx.iter()
                .find(|t| t.queue == queue)
                .ok_or(NoDevicePacing::NoQueue(queue))?;
        let rate = u32::try_from(mbps).map_err(|_| NoDevicePacing::RateOutOfRange(mbps))?;
        // SAFETY: a started port and one of its configured TX queues.
        let ret = unsafe { sys::rte_eth_set_queue_rate_limit(p.id.0, q.index.0, rate) };
        error::check("rte_eth_set_queue_rate_limit", ret)
            .map(drop)
            .map_err(NoDevicePacing::Refused)
    }

    fn name(&self) -> &'static str {
        "dpdk"
    }

    fn rx_port(
        &self,
        port: PortIndex,
        queue: QueueId,
        counters: Arc<QueueCounters>,
    ) -> Result<Box<dyn RxPort>, EngineError> {
        let p = self.port(port)?;
        let no_queue = || EngineError::no_queue(port, Direction::Rx, queue);
        let setup = match (p.rx_setup(queue), &p.steering) {
            (Some(setup), _) => setup,
            // Added live: no device queue, the port's wires.
            (None, PortSteering::Software { grid }) if self.added_rx(port, queue) => {
                let wires = grid.receiver(queue).ok_or_else(no_queue)?;
                return Ok(Box::new(super::wire::WireRxPort(wires)));
            }
            (None, _) => return Err(no_queue()),
        };
        let hw = setup.index.0;
        let segments = self.segments(port, queue);
        if segments.is_empty() {
            return Err(EngineError::Queue {
                interface: p.interface.clone(),
                direction: Direction::Rx,
                queue,
                reason: "no memory region".into(),
            });
        }
        let ids_after_changes = matches!(p.steering, PortSteering::Device { .. });
        let (mode, marks, classify_ids) = match &p.steering {
            PortSteering::Device { .. } => (RxMode::Direct, false, false),
            PortSteering::RteFlow { marks, .. } => (RxMode::Direct, *marks, !*marks),
            PortSteering::Software { grid, .. } => (
                RxMode::Software(Box::new((
                    grid.ingress(hw as usize, &self.regions, port, counters.clone()),
                    grid.receiver(queue).ok_or_else(no_queue)?,
                ))),
                false,
                false,
            ),
        };
        Ok(Box::new(DpdkRx {
            device: DeviceQueue {
                port_id: p.id.0,
                hw_queue: hw,
                polls: 0,
                nic_seen: (0, 0),
                port,
                queue,
                regions: self.regions.clone(),
                segments,
                counters,
                marks,
                classify_ids,
                lent_pool: setup.lent.clone(),
                lent_for_tx: self
                    .tx_carriers
                    .iter()
                    .filter_map(|c| match c {
                        TxCarrier::Lent(l) => Some(l.lent.clone()),
                        _ => None,
                    })
                    .collect(),
                rules: p.rules.clone(),
                scratch: [std::ptr::null_mut(); MAX_BURST],
                mark_values: [0; MAX_BURST],
                memo: Default::default(),
                infos: [sys::shim_mbuf_info::default(); MAX_BURST],
                taking_over: false,
                ids_after_changes,
                reserve: [std::ptr::null_mut(); MAX_BURST],
                reserve_len: 0,
                rx_time: p.rx_time,
                stamps: [0; MAX_BURST],
            },
            mode,
        }))
    }

    fn tx_port(
        &self,
        port: PortIndex,
        queue: QueueId,
        counters: Arc<QueueCounters>,
    ) -> Result<Box<dyn TxPort>, EngineError> {
        let p = self.port(port)?;
        let setup = p
            .tx_setup(queue)
            .ok_or(EngineError::no_queue(port, Direction::Tx, queue))?;
        let mut tx = DpdkTx::new(
            p.id.0,
            setup.index.0,
            setup.pool,
            setup.room,
            setup.attach,
            self.tx_carriers.clone(),
            counters,
        );
        tx.send_times = p.tx_time;
        tx.vlan_tags = p.tx_vlan.clone();
        Ok(Box::new(tx))
    }

    fn stamps_rx(&self, port: PortIndex) -> bool {
        self.ports
            .get(port.index())
            .is_some_and(|p| p.rx_time.is_some())
    }

    fn inserts_vlan_tags(&self, port: PortIndex) -> bool {
        self.ports
            .get(port.index())
            .is_some_and(|p| p.tx_vlan.is_some())
    }

    fn sends_at_time(&self, port: PortIndex) -> bool {
        self.ports
            .get(port.index())
            .is_some_and(|p| p.tx_time.is_some())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::DPDK
    }

    fn mac_address(&self, port: PortIndex) -> Option<[u8; 6]> {
        let id = self.ports.get(port.index())?.id.0;
        let mut mac = sys::rte_ether_addr::default();
        // SAFETY: a started port and an out structure.
        let rc = unsafe { sys::rte_eth_macaddr_get(id, &mut mac) };
        (rc == 0).then_some(mac.addr_bytes)
    }

    /// An RX queue on a port whose rules run in software: it has no device queue of its
    /// own and takes what the rules steer to it from the port's device queues. The device
    /// queues themselves (TX, and RX where rte_flow or the device places packets) are
    /// fixed once the port started.
    fn open_queue(
        &self,
        port: PortIndex,
        direction: Direction,
        queue: QueueId,
    ) -> Result<(), EngineError> {
        let p = self.port(port)?;
        let refused =
            |reason: &str| EngineError::queue_not_opened(port, direction, queue, reason.into());
        match (direction, &p.steering) {
            (Direction::Rx, PortSteering::Software { grid }) => {
                grid.add_rx_queue(queue).map_err(|e| refused(&e))?;
                let mut added = self.added_rx.lock().unwrap_or_else(|e| e.into_inner());
                if !added.contains(&(port, queue)) {
                    added.push((port, queue));
                }
                Ok(())
            }
            (Direction::Rx, _) => Err(refused(&format!(
                "the device places packets on port `{}`'s queues ({}), and their number is fixed while it runs: an RX queue is added live only where the rules run in software",
                p.interface,
                p.steering_name()
            ))),
            (Direction::Tx, _) => Err(refused(
                "a TX queue is a device queue, and their number is fixed while the port runs",
            )),
        }
    }

    fn closes_live(&self, port: PortIndex, direction: Direction, queue: QueueId) -> bool {
        direction == Direction::Rx && self.added_rx(port, queue)
    }

    fn rules_in_software(&self, port: PortIndex) -> bool {
        self.ports
            .get(port.index())
            .is_some_and(|p| matches!(p.steering, PortSteering::Software { .. }))
    }

    fn steering(&self) -> String {
        let mut names: Vec<&str> = self.ports.iter().map(Port::steering_name).collect();
        names.dedup();
        if names.len() <= 1 {
            return names.pop().unwrap_or("device").to_owned();
        }
        // Ports differ: name each one.
        self.ports
            .iter()
            .map(|p| format!("{}: {}", p.interface, p.steering_name()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn worker_thread(&self, starting: bool) {
        // A registered thread gets an lcore id, so mempools give it a per-lcore cache.
        // SAFETY: called on the worker thread itself, once at start and once at exit.
        unsafe {
            if starting {
                if sys::rte_thread_register() != 0 {
                    tracing::warn!(
                        "{}",
                        DpdkError::last(
                            "rte_thread_register (the worker runs without mempool caches)"
                        )
                    );
                }
            } else {
                sys::rte_thread_unregister();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn pool_failures_name_the_sizes_asked_for_and_the_free_memory() {
        let e = mempool::pool_error("cannot create the mbuf pool", 8192, 2176).to_string();
        assert!(e.starts_with("cannot create the mbuf pool"), "{e}");
        assert!(
            e.contains("asked for 8192 mbufs of 2176 bytes, 18.0 MiB"),
            "{e}"
        );
        assert!(
            e.contains("MiB available") && e.contains("free huge pages of"),
            "{e}"
        );
    }

    /// Bytes allocated from EAL's heap on socket 0.
    fn heap_bytes() -> usize {
        let mut st = sys::rte_malloc_socket_stats::default();
        // SAFETY: an out structure for socket 0, which exists in every EAL.
        assert_eq!(unsafe { sys::rte_malloc_get_socket_stats(0, &mut st) }, 0);
        st.heap_allocsz_bytes
    }

    fn pool_exists(name: &str) -> bool {
        let c = std::ffi::CString::new(name).unwrap();
        // SAFETY: a valid C string.
        !unsafe { sys::rte_mempool_lookup(c.as_ptr()) }.is_null()
    }

    fn registered(addr: u64) -> bool {
        // SAFETY: only looks the address up in EAL's tables.
        !unsafe { sys::rte_mem_virt2memseg_list(addr as *const _) }.is_null()
    }

    fn port_exists(name: &str) -> bool {
        let c = std::ffi::CString::new(name).unwrap();
        let mut id = 0u16;
        // SAFETY: a valid C string and out pointer.
        unsafe { sys::rte_eth_dev_get_port_by_name(c.as_ptr(), &mut id) == 0 }
    }

    /// Bring-up of a net_ring port that fails at its last step (the device takes no flow
    /// rules, and a rule needs a header transform software steering cannot do), after it
    /// was configured, lent a region, made pools, set up and started its queues: the
    /// failure releases all of it. A second port then comes up on the same EAL and
    /// releases everything when dropped.
    #[test]
    fn a_port_that_fails_late_releases_everything_it_made() {
        let text = |address: &str, flows: &str| {
            format!(
                config_yaml!(
                    raw,
                    0,
                    r#"    memory_regions:
    - {{name: lent, kind: host, affinity: 0, num_bufs: 2048, buf_size: 2048, zero_copy: true}}
    - {{name: copied, kind: host, affinity: 0, num_bufs: 2048, buf_size: 2048}}
    - {{name: tx, kind: host, affinity: 0, num_bufs: 2048, buf_size: 2048}}
    interfaces:
    - name: ring
      address: {address}
      rx:
        queues:
        - {{name: a, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [lent]}}
        - {{name: b, id: 1, cpu_core: 0, batch_size: 32, memory_regions: [copied]}}
{flows}      tx:
        queues:
        - {{name: t, id: 0, cpu_core: 0, batch_size: 32, memory_regions: [tx]}}
"#
                ),
                address = address,
                flows = flows
            )
        };
        let pop_vlan = r#"        flows:
        - name: pop
          id: 1
          actions:
          - {type: vlan_pop}
          - {type: queue, id: 1}
"#;
        let eal = Eal::init(
            [
                "dataplane-unit",
                "-l",
                "0",
                "--no-huge",
                "--no-shconf",
                "-m",
                "256",
                "--no-pci",
                "--vdev=net_ring0",
                "--vdev=net_ring1",
                "--log-level=lib.eal:error",
            ]
            .iter()
            .map(|s| s.to_string())
            .chain([format!("--file-prefix={}", crate::hugepages::file_prefix())])
            .collect(),
        )
        .expect("EAL");
        let bring_up = |address: &str, flows: &str| {
            let cfg = crate::config::load_with(&text(address, flows), "t", &|_| true)
                .unwrap()
                .config;
            let plan = Plan::from_config(&cfg).unwrap();
            let headroom: Vec<usize> = plan.regions.iter().map(|r| r.headroom).collect();
            let regions = Arc::new(
                RegionSet::allocate_with_headroom(&cfg.memory_regions, &headroom).unwrap(),
            );
            let rx = cfg.interfaces[0].rx.clone().unwrap();
            let rules = Arc::new(InterfaceSteering::new(0, "ring", &rx, false));
            let dpdk = plan.dpdk().unwrap();
            let port = Port::open(&dpdk.ports[0], &regions, &rules);
            (port, regions)
        };
        let heap = heap_bytes();

        let (failed, regions) = bring_up("net_ring0", pop_vlan);
        let err = failed
            .err()
            .expect("the flow rule cannot be done")
            .to_string();
        assert!(err.contains("needs header transforms"), "{err}");
        for pool in ["dp0rx0z", "dp0rx1s0", "dp0txt0s0", "dp0tx0s0"] {
            assert!(!pool_exists(pool), "pool {pool} freed");
        }
        let lent_base = regions.get(RegionId(0)).extent().0;
        assert!(!registered(lent_base), "the lent region is unregistered");
        assert!(!port_exists("net_ring0"), "the port is closed");
        // Closing the port also frees what the PMD allocated at probe time, so the heap
        // ends a little below where it started; a leaked pool (MiBs) would show.
        assert!(
            heap_bytes() <= heap,
            "EAL's heap: {} bytes after, {heap} before",
            heap_bytes()
        );
        drop(regions);

        let (port, regions) = bring_up("net_ring1", "");
        let port = port.expect("the other port comes up");
        let pools = port.pool_names();
        assert_eq!(pools, ["dp0rx0z", "dp0rx1s0", "dp0tx0s0", "dp0txa0"]);
        assert!(pools.iter().all(|p| pool_exists(p)));
        let lent_base = regions.get(RegionId(0)).extent().0;
        assert!(registered(lent_base));
        drop(port);
        assert!(
            pools.iter().all(|p| !pool_exists(p)),
            "dropping the port frees its pools"
        );
        assert!(!registered(lent_base));
        assert!(
            heap_bytes() <= heap,
            "EAL's heap: {} bytes after, {heap} before",
            heap_bytes()
        );
        drop(regions);
        drop(eal);
    }
}
