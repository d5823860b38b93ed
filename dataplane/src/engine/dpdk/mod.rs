//! DPDK engine (cargo feature `dpdk`): EAL from the configuration, ports from PCI
//! addresses or any vdev string, one mbuf pool per queue segment, burst I/O from our
//! workers, flow rules programmed with rte_flow or steered in software when the device
//! cannot take them.
//!
//! What it builds comes from the plan (`crate::plan::dpdk`): per RX queue either a region
//! lent to an mbuf pool (external buffers: the PMD fills the region's own buffers, and the
//! application's bursts carry them, returned to the pool when dropped), buffer split over
//! two pools, or a pool frames are copied out of; per TX queue a pool frames are copied
//! into. Either way the application sees the same `Burst`s, buffers and pools as with
//! every other engine.

pub mod flow;

use super::wire::{Ingress, WireGrid, WireReceiver};
use super::{Capabilities, Engine, EngineError, RxPort, TxPort};
use crate::burst::Burst;
use crate::config::{Config, MemoryKind, RxConfig};
use crate::hugepages;
use crate::memory::{BufferLender, RegionId, RegionSet};
use crate::plan::Plan;
use crate::plan::dpdk::{self as dpdk_plan, DpdkPlan, PoolSize, PortPlan, RxReceive};
use crate::ring::Ring;
use crate::stats::{DropReason, QueueCounters};
use crate::steering::InterfaceSteering;
use dpdk_sys as sys;
use std::ffi::{CStr, CString};
use std::sync::Arc;

/// Descriptors per RX and TX ring.
const RING_DESCRIPTORS: u16 = dpdk_plan::RING_DESCRIPTORS as u16;
/// Mbufs taken from or handed to the driver per call.
const MAX_BURST: usize = 64;

/// A C string from DPDK (a static name or message), or `default` for null.
///
/// # Safety
/// `p` is null or points at a NUL-terminated string that lives through the call.
pub(super) unsafe fn c_text(p: *const std::os::raw::c_char, default: &str) -> String {
    if p.is_null() {
        return default.to_owned();
    }
    // SAFETY: the caller's guarantee.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn dpdk_error(what: &str, code: i32) -> String {
    let code = if code < 0 { -code } else { code };
    // SAFETY: rte_strerror returns a valid C string for any errno value.
    let text = unsafe { CStr::from_ptr(sys::rte_strerror(code)) }.to_string_lossy();
    format!("{what}: {text} (errno {code})")
}

fn last_error(what: &str) -> String {
    // SAFETY: reads the calling thread's rte_errno.
    dpdk_error(what, unsafe { sys::shim_rte_errno() })
}

/// What the machine has free, for allocation errors: available memory and free huge
/// pages (from /proc/meminfo).
pub fn free_memory_text() -> String {
    use crate::sysinfo::meminfo;
    match (
        meminfo("MemAvailable"),
        meminfo("HugePages_Free"),
        meminfo("Hugepagesize"),
    ) {
        (Some(avail_kib), Some(free), Some(page_kib)) => format!(
            "free memory: {} MiB available, {free} free huge pages of {} KiB",
            avail_kib / 1024,
            page_kib
        ),
        _ => "free memory: unknown (/proc/meminfo unreadable)".into(),
    }
}

/// The message of a failed mbuf pool: what was asked for, DPDK's reason, what is free.
fn pool_error(what: &str, mbufs: usize, data_room: usize) -> String {
    // An mbuf is its 128-byte header, the data room and the private area (none here).
    let bytes = mbufs as u64 * (128 + data_room as u64);
    format!(
        "{} (asked for {mbufs} mbufs of {data_room} bytes, {:.1} MiB; {})",
        last_error(what),
        bytes as f64 / (1u64 << 20) as f64,
        free_memory_text()
    )
}

/// The EAL arguments to start with: the plan's, then what only this process knows: its
/// file prefix, the hugetlbfs mount our region files use (when the plan maps huge pages
/// and there is one), and whatever the environment variable `DATAPLANE_EAL_ARGS` adds.
pub fn eal_args(plan: &DpdkPlan, huge: bool) -> Vec<String> {
    let mut a = plan.eal_args.clone();
    a.push(format!("--file-prefix={}", hugepages::file_prefix()));
    if huge && let Ok(Some(m)) = hugepages::mount_for(hugepages::default_page_size()) {
        a.push(format!("--huge-dir={}", m.path.display()));
    }
    // Extra EAL options for debugging or tuning (e.g. `--log-level=pmd.net.tap:debug`).
    if let Ok(extra) = std::env::var("DATAPLANE_EAL_ARGS") {
        a.extend(extra.split_whitespace().map(str::to_owned));
    }
    a
}

/// A mempool pointer that may move between threads (DPDK mempools are thread-safe).
#[derive(Clone, Copy)]
struct Pool(*mut sys::rte_mempool);
// SAFETY: rte_mempool operations are multi-thread safe; the pointer stays valid until EAL
// cleanup, which happens only after every port handle is gone (the engine owns both).
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

/// An mbuf pool over a region's own buffers (external buffers), and the mbuf of each
/// buffer so freed buffers find their way back.
struct LentPool {
    pool: Pool,
    /// `mbufs[i]` carries region buffer `i`.
    mbufs: Vec<*mut sys::rte_mbuf>,
    /// Buffers the application is done with. The RX worker frees their mbufs (in bulk,
    /// through its own mempool cache): freeing on the application's thread would pull
    /// every mbuf header across cores.
    returned: Ring<u32>,
}

// SAFETY: the mbuf pointers are only dereferenced by DPDK calls on the RX worker; the
// returned ring is thread-safe.
unsafe impl Send for LentPool {}
// SAFETY: as above.
unsafe impl Sync for LentPool {}

/// The region side of a [`LentPool`].
struct LentBuffers(Arc<LentPool>);

impl BufferLender for LentBuffers {
    fn give_back(&self, indices: &[u32]) {
        // The ring has a slot for every buffer, so it cannot be full.
        let ok = self.0.returned.enqueue_bulk(indices);
        assert!(ok, "lent buffer returned twice");
    }
}

/// How a port's packets reach their RX queues.
enum PortSteering {
    /// The device places every packet (its own RSS, or no rules at all).
    Device,
    /// rte_flow rules place packets. `marks`: the rules tag packets with the flow id;
    /// otherwise (a PMD without MARK) the RX worker finds the id from the headers.
    RteFlow {
        flows: flow::InstalledFlows,
        marks: bool,
    },
    /// The device cannot take the rules: each RX worker classifies what its device queue
    /// receives and hands every packet to its queue over the wires.
    Software { grid: WireGrid },
}

struct Port {
    id: u16,
    /// Interface name from the configuration.
    interface: String,
    rx_pools: Vec<(u16, Pool)>,
    tx_pools: Vec<(u16, Pool)>,
    rx_queue_index: Vec<(u16, u16)>,
    tx_queue_index: Vec<(u16, u16)>,
    steering: PortSteering,
    rules: Arc<InterfaceSteering>,
    /// RX queues receiving into their region without copying: (queue id, pool).
    lent: Vec<(u16, Arc<LentPool>)>,
    /// External memory registered with EAL: (address, length, DMA-mapped for the device).
    registered: Vec<(u64, usize, bool)>,
    /// The port's rte_device (for DMA mapping).
    device: Device,
}

/// A port's rte_device handle.
#[derive(Clone, Copy)]
struct Device(*mut sys::rte_device);
// SAFETY: an opaque handle EAL keeps alive until cleanup; only passed back to EAL calls.
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

impl Port {
    fn steering_name(&self) -> &'static str {
        match &self.steering {
            PortSteering::Device => "device",
            PortSteering::RteFlow { marks: true, .. } => "rte_flow",
            PortSteering::RteFlow { marks: false, .. } => "rte_flow (flow ids from headers)",
            PortSteering::Software { .. } => "software",
        }
    }
}

/// The DPDK engine: EAL, ports and pools, torn down in reverse order when dropped.
pub struct DpdkEngine {
    regions: Arc<RegionSet>,
    ports: Vec<Port>,
    segment_regions: Vec<Vec<(u16, Vec<RegionId>)>>,
}

fn flow_isolate(port_id: u16, on: bool) -> Result<(), String> {
    let mut err = sys::rte_flow_error::default();
    // SAFETY: a valid port id and error out structure.
    if unsafe { sys::rte_flow_isolate(port_id, i32::from(on), &mut err) } == 0 {
        return Ok(());
    }
    Err(flow::flow_error(&format!("rte_flow_isolate({on})"), &err))
}

/// The device queue index of queue id `queue` in a port's (id, index) list.
fn device_queue(map: &[(u16, u16)], port: u16, dir: &str, queue: u16) -> Result<u16, EngineError> {
    map.iter()
        .find(|(q, _)| *q == queue)
        .map(|(_, i)| *i)
        .ok_or_else(|| EngineError::Config(format!("port {port} has no {dir} queue {queue}")))
}

/// True when the port's flows need steering beyond the device's defaults.
fn has_rules(rx: &RxConfig) -> bool {
    !rx.flows.is_empty() || rx.flow_isolation
}

fn init_eal(args: Vec<String>) -> Result<(), EngineError> {
    // EAL pins the calling thread to the main lcore; a throwaway thread keeps that away
    // from the application's threads.
    std::thread::spawn(move || {
        let cargs: Vec<CString> = args
            .iter()
            .map(|s| CString::new(s.as_str()).expect("no NUL in EAL arguments"))
            .collect();
        let mut argv: Vec<*mut std::os::raw::c_char> =
            cargs.iter().map(|a| a.as_ptr() as *mut _).collect();
        // SAFETY: argv points at C strings that outlive the call.
        let ret = unsafe { sys::rte_eal_init(argv.len() as i32, argv.as_mut_ptr()) };
        if ret < 0 {
            for base in hugepages::dpdk_runtime_bases() {
                let _ = std::fs::remove_dir_all(base.join(hugepages::file_prefix()));
            }
            return Err(EngineError::Config(format!(
                "{} (EAL arguments: {}; {})",
                last_error("DPDK EAL initialisation failed"),
                args.join(" "),
                free_memory_text()
            )));
        }
        Ok(())
    })
    .join()
    .map_err(|_| EngineError::Config("DPDK EAL initialisation panicked".into()))?
}

impl DpdkEngine {
    /// Starts EAL and every port of `config`.
    pub fn new(
        config: &Config,
        plan: &Plan,
        regions: &Arc<RegionSet>,
        steering: &[Arc<InterfaceSteering>],
    ) -> Result<Self, EngineError> {
        let dpdk = plan
            .dpdk
            .as_ref()
            .ok_or_else(|| EngineError::Config("the plan has no DPDK part".into()))?;
        init_eal(eal_args(dpdk, !plan.hugepages.regions.is_empty()))?;
        let mut engine = Self {
            regions: regions.clone(),
            ports: Vec::new(),
            segment_regions: Vec::new(),
        };
        for (index, iface) in config.interfaces.iter().enumerate() {
            let port = engine.open_port(config, &dpdk.ports[index], &steering[index])?;
            engine.ports.push(port);
            let segs = config
                .queues()
                .filter(|(i, _, _)| *i == index)
                .map(|(_, _, q)| {
                    (
                        q.id,
                        q.memory_regions
                            .iter()
                            .filter_map(|n| regions.id_of(n))
                            .collect(),
                    )
                })
                .collect();
            engine.segment_regions.push(segs);
            let p = &engine.ports[index];
            tracing::info!(
                "DPDK port {} ready for `{}` (steering: {})",
                p.id,
                iface.name,
                p.steering_name()
            );
        }
        Ok(engine)
    }

    fn open_port(
        &self,
        config: &Config,
        planned: &PortPlan,
        rules: &Arc<InterfaceSteering>,
    ) -> Result<Port, EngineError> {
        let index = planned.interface;
        let iface = &config.interfaces[index];
        let err = |what: &str, code: i32| {
            EngineError::Config(format!(
                "interface `{}` ({}): {}",
                iface.name,
                iface.address,
                dpdk_error(what, code)
            ))
        };
        let name = CString::new(planned.ethdev.as_str())
            .map_err(|_| EngineError::Config(format!("interface `{}`: bad address", iface.name)))?;
        let mut id = 0u16;
        // SAFETY: a valid C string and out pointer.
        let r = unsafe { sys::rte_eth_dev_get_port_by_name(name.as_ptr(), &mut id) };
        if r != 0 {
            return Err(EngineError::Config(format!(
                "interface `{}`: no DPDK port `{}` (address `{}`): check the PCI address or vdev string and that its driver is installed",
                iface.name, planned.ethdev, iface.address
            )));
        }
        let mut info = sys::rte_eth_dev_info::default();
        // SAFETY: a valid port id and out structure.
        let r = unsafe { sys::rte_eth_dev_info_get(id, &mut info) };
        if r != 0 {
            return Err(err("rte_eth_dev_info_get", r));
        }
        // SAFETY: the PMD's static driver name, or null.
        let driver = unsafe { c_text(info.driver_name, "unknown driver") };
        let rx: Vec<_> = iface.rx.iter().flat_map(|r| &r.queues).collect();
        let tx: Vec<_> = iface.tx.iter().flat_map(|t| &t.queues).collect();
        let rx_config = iface.rx.clone().unwrap_or_else(RxConfig::empty);
        let hw_queue = |q: u16| rx.iter().position(|x| x.id == q).map(|i| i as u16);

        // Flow rules: translate now; isolation must be asked for before configuration.
        let mut fallback: Option<String> = None;
        let mut plan = None;
        if has_rules(&rx_config) {
            match flow::translate(&rx_config, &hw_queue, true) {
                Ok(rules) => plan = Some(rules),
                Err(e) => fallback = Some(e),
            }
        }
        let mut isolated = false;
        if plan.is_some() && rx_config.flow_isolation {
            match flow_isolate(id, true) {
                Ok(()) => isolated = true,
                Err(e) => {
                    plan = None;
                    fallback = Some(e);
                }
            }
        }

        let mut conf = sys::rte_eth_conf::default();
        // SAFETY: reads a constant defined in the shim.
        let rss_hf = unsafe { sys::shim_rss_ip_udp } & info.flow_type_rss_offloads;
        if rx.len() > 1 && rss_hf != 0 {
            // Packets no rule places are spread over every queue, as in software.
            conf.rxmode.mq_mode = sys::rte_eth_rx_mq_mode_RTE_ETH_MQ_RX_RSS;
            conf.rx_adv_conf.rss_conf.rss_hf = rss_hf;
        }
        // net_tap wants as many RX as TX queues: it gets idle ones to match.
        let (hw_rx, hw_tx) = if driver == "net_tap" {
            let n = rx.len().max(tx.len());
            (n, n)
        } else {
            (rx.len(), tx.len())
        };
        // SAFETY: a valid port id and configuration.
        let r = unsafe { sys::rte_eth_dev_configure(id, hw_rx as u16, hw_tx as u16, &conf) };
        if r != 0 {
            return Err(err("rte_eth_dev_configure", r));
        }
        // SAFETY: valid port id.
        let socket = unsafe { sys::rte_eth_dev_socket_id(id) };
        let mut port = Port {
            id,
            interface: iface.name.clone(),
            rx_pools: Vec::new(),
            tx_pools: Vec::new(),
            rx_queue_index: Vec::new(),
            tx_queue_index: Vec::new(),
            steering: PortSteering::Device,
            rules: rules.clone(),
            lent: Vec::new(),
            registered: Vec::new(),
            device: Device(info.device),
        };
        let pci = planned.pci;
        let pool_for = |q: &crate::config::QueueConfig,
                        dir: &str,
                        seg: usize,
                        size: &PoolSize|
         -> Result<Pool, EngineError> {
            let data_room = size.data_room;
            if size.mbufs > size.configured {
                tracing::warn!(
                    "interface `{}` {dir} queue {}: {} buffers are below 1.5x the {RING_DESCRIPTORS}-descriptor ring; the DPDK pool gets {}",
                    iface.name,
                    q.id,
                    size.configured,
                    size.mbufs
                );
            }
            let pname = CString::new(format!("dp{index}{dir}{}s{seg}", q.id)).expect("pool name");
            // Validation keeps DPDK queues' buffers inside an mbuf's 16-bit data room.
            let room = u16::try_from(data_room).map_err(|_| {
                EngineError::Config(format!(
                    "interface `{}` {dir} queue {}: a {data_room}-byte buffer does not fit an mbuf",
                    iface.name, q.id
                ))
            })?;
            // SAFETY: valid arguments; the pool lives until EAL cleanup.
            let p = unsafe {
                sys::rte_pktmbuf_pool_create(
                    pname.as_ptr(),
                    size.mbufs as u32,
                    256,
                    0,
                    room,
                    socket,
                )
            };
            if p.is_null() {
                return Err(EngineError::Config(format!(
                    "interface `{}` {dir} queue {}: {}",
                    iface.name,
                    q.id,
                    pool_error("cannot create the mbuf pool", size.mbufs, data_room)
                )));
            }
            Ok(Pool(p))
        };
        for (q, planned_rx) in rx.iter().zip(&planned.rx) {
            let i = planned_rx.device_queue as usize;
            let mut rxconf = info.default_rxconf;
            let mut split = Vec::new();
            let pool = match &planned_rx.receive {
                RxReceive::Lent { region } => {
                    let region = *region;
                    let name = format!("dp{index}rx{}z", q.id);
                    let (pool, lent) = self
                        .lend_region(&mut port, pci, socket, region, &name)
                        .map_err(|e| {
                            EngineError::Config(format!(
                                "interface `{}` RX queue {}: {e}",
                                iface.name, q.id
                            ))
                        })?;
                    tracing::info!(
                        "interface `{}` RX queue {}: receives into region `{}` without copying",
                        iface.name,
                        q.id,
                        self.regions.get(region).name()
                    );
                    port.lent.push((q.id, lent));
                    pool
                }
                RxReceive::Copy { pool } => pool_for(q, "rx", 0, pool)?,
                RxReceive::Split {
                    header,
                    payload,
                    header_bytes,
                } => {
                    // SAFETY: reads a constant defined in the shim.
                    let offload = unsafe { sys::shim_rx_offload_buffer_split };
                    if info.rx_offload_capa & offload == 0 {
                        return Err(EngineError::Config(format!(
                            "interface `{}` RX queue {}: header-data split (two memory regions) is not supported by this device ({driver} has no buffer split offload); give the queue one memory region",
                            iface.name, q.id
                        )));
                    }
                    let head = pool_for(q, "rx", 0, header)?;
                    let body = pool_for(q, "rx", 1, payload)?;
                    for (mp, length) in [(head.0, *header_bytes as u16), (body.0, 0)] {
                        split.push(sys::rte_eth_rxseg {
                            split: sys::rte_eth_rxseg_split {
                                mp,
                                length,
                                offset: 0,
                                proto_hdr: 0,
                            },
                        });
                    }
                    rxconf.offloads |= offload;
                    rxconf.rx_nseg = 2;
                    rxconf.rx_seg = split.as_mut_ptr();
                    port.rx_pools.push((q.id, body));
                    head
                }
            };
            // SAFETY: configured port, queue index below the configured count; with buffer
            // split the pools come from rx_seg (alive for the call) and `mp` is null.
            let r = unsafe {
                sys::rte_eth_rx_queue_setup(
                    id,
                    i as u16,
                    RING_DESCRIPTORS,
                    socket as u32,
                    &rxconf,
                    if split.is_empty() {
                        pool.0
                    } else {
                        std::ptr::null_mut()
                    },
                )
            };
            if r != 0 {
                return Err(err("rte_eth_rx_queue_setup", r));
            }
            port.rx_pools.push((q.id, pool));
            port.rx_queue_index.push((q.id, i as u16));
        }
        for i in rx.len()..hw_rx {
            // An idle queue nobody polls; its pool only has to fill the ring.
            let pname = CString::new(format!("dp{index}idle{i}")).expect("pool name");
            // SAFETY: valid arguments; the pool lives until EAL cleanup.
            let pool = unsafe {
                sys::rte_pktmbuf_pool_create(
                    pname.as_ptr(),
                    (RING_DESCRIPTORS as u32) * 2,
                    0,
                    0,
                    (2048 + dpdk_plan::HEADROOM) as u16,
                    socket,
                )
            };
            if pool.is_null() {
                return Err(EngineError::Config(format!(
                    "interface `{}`: {}",
                    iface.name,
                    pool_error(
                        "cannot create the idle queue's mbuf pool",
                        usize::from(RING_DESCRIPTORS) * 2,
                        2048 + dpdk_plan::HEADROOM
                    )
                )));
            }
            // SAFETY: configured port, queue index below the configured count.
            let r = unsafe {
                sys::rte_eth_rx_queue_setup(
                    id,
                    i as u16,
                    RING_DESCRIPTORS,
                    socket as u32,
                    std::ptr::null(),
                    pool,
                )
            };
            if r != 0 {
                return Err(err("rte_eth_rx_queue_setup (idle queue)", r));
            }
        }
        // Configured TX queues, then idle ones up to the device's count (net_tap).
        for i in 0..hw_tx {
            let q = tx.get(i);
            let pool = match (q, planned.tx.get(i)) {
                (Some(q), Some(t)) => Some(pool_for(q, "tx", 0, &t.pool)?),
                _ => None,
            };
            // SAFETY: configured port, queue index below the configured count.
            let r = unsafe {
                sys::rte_eth_tx_queue_setup(
                    id,
                    i as u16,
                    RING_DESCRIPTORS,
                    socket as u32,
                    std::ptr::null(),
                )
            };
            if r != 0 {
                return Err(err("rte_eth_tx_queue_setup", r));
            }
            if let (Some(q), Some(pool)) = (q, pool) {
                port.tx_pools.push((q.id, pool));
                port.tx_queue_index.push((q.id, i as u16));
            }
        }
        // SAFETY: a configured port.
        let r = unsafe { sys::rte_eth_dev_start(id) };
        if r != 0 {
            return Err(err("rte_eth_dev_start", r));
        }
        // Promiscuous mode: bench traffic is addressed to made-up MACs. Not every vdev
        // supports it, which is fine.
        // SAFETY: a started port.
        let _ = unsafe { sys::rte_eth_promiscuous_enable(id) };

        if let Some(rules_with_marks) = plan {
            port.steering = match flow::install(id, &rules_with_marks) {
                Ok(flows) => PortSteering::RteFlow { flows, marks: true },
                Err(with_marks) => {
                    // Some PMDs place packets but cannot tag them: keep the placement and
                    // find flow ids from the headers.
                    let plain = flow::translate(&rx_config, &hw_queue, false)
                        .map_err(EngineError::Config)?;
                    match flow::install(id, &plain) {
                        Ok(flows) => PortSteering::RteFlow {
                            flows,
                            marks: false,
                        },
                        Err(_) => {
                            fallback = Some(with_marks);
                            PortSteering::Device
                        }
                    }
                }
            };
            if fallback.is_some() && isolated {
                // Software steering needs every packet: leave isolation again.
                // SAFETY: a started port, stopped before isolation changes.
                unsafe { sys::rte_eth_dev_stop(id) };
                flow_isolate(id, false)
                    .map_err(|e| EngineError::Config(format!("interface `{}`: {e}", iface.name)))?;
                // SAFETY: a configured port.
                let r = unsafe { sys::rte_eth_dev_start(id) };
                if r != 0 {
                    return Err(err("rte_eth_dev_start", r));
                }
            }
        }
        if let Some(reason) = fallback {
            if let Some(f) = rx_config.flows.iter().find(|f| !f.transforms.is_empty()) {
                return Err(EngineError::Config(format!(
                    "interface `{}`: the device cannot take the flow rules ({reason}), and flow `{}` needs header transforms: not supported in software steering",
                    iface.name, f.name
                )));
            }
            tracing::warn!(
                "interface `{}`: flow rules steered in software ({reason})",
                iface.name
            );
            let ids: Vec<u16> = rx.iter().map(|q| q.id).collect();
            port.steering = PortSteering::Software {
                grid: WireGrid::new(rules, &ids, ids.len()),
            };
        }
        if matches!(port.steering, PortSteering::RteFlow { .. }) {
            rules.set_device_programmed();
        }
        Ok(port)
    }

    /// Registers `region` as external memory (and DMA-maps it for a PCI device), creates an
    /// mbuf pool whose buffers are the region's, and lends the region's buffers to it.
    fn lend_region(
        &self,
        port: &mut Port,
        pci: bool,
        socket: i32,
        region: RegionId,
        name: &str,
    ) -> Result<(Pool, Arc<LentPool>), String> {
        let r = self.regions.get(region);
        let (base, len) = r.extent();
        let page = if r.kind() == MemoryKind::Huge {
            hugepages::default_page_size() as usize
        } else {
            4096
        };
        let reg_len = len.next_multiple_of(page);
        // SAFETY: the region's mapping covers [base, base + reg_len) (mappings are whole
        // pages) and outlives EAL; IOVA is the virtual address (no table).
        let rc = unsafe {
            sys::rte_extmem_register(base as *mut _, reg_len, std::ptr::null_mut(), 0, page)
        };
        if rc != 0 {
            return Err(last_error("rte_extmem_register"));
        }
        let mut mapped = false;
        if pci {
            // SAFETY: a registered range and the port's device.
            let rc = unsafe { sys::rte_dev_dma_map(port.device.0, base as *mut _, base, reg_len) };
            if rc != 0 {
                // SAFETY: registered just above.
                unsafe { sys::rte_extmem_unregister(base as *mut _, reg_len) };
                return Err(last_error(
                    "rte_dev_dma_map (the NIC cannot reach this memory)",
                ));
            }
            mapped = true;
        }
        port.registered.push((base, reg_len, mapped));
        let n = r.num_bufs();
        let elt_size = u16::try_from(r.stride())
            .map_err(|_| format!("a {}-byte buffer stride does not fit an mbuf", r.stride()))?;
        let room = u16::try_from(r.headroom() + r.buf_size()).map_err(|_| {
            format!(
                "a {}-byte buffer does not fit an mbuf",
                r.headroom() + r.buf_size()
            )
        })?;
        let ext = sys::rte_pktmbuf_extmem {
            buf_ptr: base as *mut _,
            buf_iova: base,
            buf_len: r.stride() * n,
            elt_size,
        };
        let cname = CString::new(name).expect("pool name");
        // SAFETY: `ext` describes the region's n buffers; the pool lives until EAL cleanup.
        let pool = unsafe {
            sys::rte_pktmbuf_pool_create_extbuf(
                cname.as_ptr(),
                n as u32,
                256,
                0,
                room,
                socket,
                &ext,
                1,
            )
        };
        if pool.is_null() {
            return Err(pool_error(
                "cannot create the mbuf pool over the region",
                n,
                room as usize,
            ));
        }
        // Learn which mbuf carries which buffer: take them all once.
        let mut all = vec![std::ptr::null_mut(); n];
        // SAFETY: a fresh pool of n mbufs and room for n pointers.
        if unsafe { sys::shim_rte_pktmbuf_alloc_bulk(pool, all.as_mut_ptr(), n as u32) } != 0 {
            return Err("cannot take every mbuf of the new pool".into());
        }
        let mut mbufs: Vec<*mut sys::rte_mbuf> = vec![std::ptr::null_mut(); n];
        for &m in &all {
            // SAFETY: an mbuf of the pool.
            let addr = unsafe { sys::shim_rte_mbuf_buf_addr(m) } as u64;
            match r.index_of(addr) {
                Some(i) if mbufs[i as usize].is_null() => mbufs[i as usize] = m,
                _ => {
                    return Err(format!(
                        "mbuf buffer {addr:#x} is not a buffer of the region"
                    ));
                }
            }
        }
        // SAFETY: every mbuf taken above goes back once.
        unsafe { sys::shim_rte_pktmbuf_free_bulk(all.as_mut_ptr(), n as u32) };
        let lent = Arc::new(LentPool {
            pool: Pool(pool),
            mbufs,
            // Multi-consumer too: the queue reads it through the shared pool.
            returned: Ring::new(n).map_err(|e| e.to_string())?,
        });
        r.lend_all(Box::new(LentBuffers(lent.clone())))?;
        Ok((Pool(pool), lent))
    }

    fn port(&self, port: u16) -> Result<&Port, EngineError> {
        self.ports
            .get(port as usize)
            .ok_or_else(|| EngineError::Config(format!("no interface with index {port}")))
    }

    fn segments(&self, port: u16, queue: u16) -> Vec<RegionId> {
        self.segment_regions
            .get(port as usize)
            .and_then(|v| v.iter().find(|(q, _)| *q == queue))
            .map(|(_, r)| r.clone())
            .unwrap_or_default()
    }
}

impl Drop for DpdkEngine {
    fn drop(&mut self) {
        for p in &mut self.ports {
            if let PortSteering::RteFlow { flows, .. } = &mut p.steering {
                flows.destroy();
            }
            // SAFETY: every port handle is gone (workers joined before the engine drops);
            // stop and close each started port once.
            unsafe {
                sys::rte_eth_dev_stop(p.id);
                sys::rte_eth_dev_close(p.id);
            }
            for &(base, len, mapped) in &p.registered {
                // SAFETY: registered (and mapped) by this port; nothing uses it any more.
                unsafe {
                    if mapped {
                        sys::rte_dev_dma_unmap(p.device.0, base as *mut _, base, len);
                    }
                    sys::rte_extmem_unregister(base as *mut _, len);
                }
            }
        }
        // SAFETY: nothing uses DPDK any more; pools and ports are released with it.
        unsafe { sys::rte_eal_cleanup() };
        // EAL 22.11 leaves its runtime directory behind even after a clean exit.
        for base in hugepages::dpdk_runtime_bases() {
            let _ = std::fs::remove_dir_all(base.join(hugepages::file_prefix()));
        }
    }
}

impl Engine for DpdkEngine {
    fn name(&self) -> &'static str {
        "dpdk"
    }

    fn rx_port(
        &self,
        port: u16,
        queue: u16,
        counters: Arc<QueueCounters>,
    ) -> Result<Box<dyn RxPort>, EngineError> {
        let p = self.port(port)?;
        let hw = device_queue(&p.rx_queue_index, port, "RX", queue)?;
        let segments = self.segments(port, queue);
        if segments.is_empty() {
            return Err(EngineError::Config(format!(
                "RX queue {queue}: no memory region"
            )));
        }
        let (mode, marks, classify_ids) = match &p.steering {
            PortSteering::Device => (RxMode::Direct, false, false),
            PortSteering::RteFlow { marks, .. } => (RxMode::Direct, *marks, !*marks),
            PortSteering::Software { grid, .. } => (
                RxMode::Software(Box::new((
                    grid.ingress(hw as usize, &self.regions, port, counters.clone()),
                    grid.receiver(queue).ok_or_else(|| {
                        EngineError::Config(format!("port {port} has no RX queue {queue}"))
                    })?,
                ))),
                false,
                false,
            ),
        };
        Ok(Box::new(DpdkRx {
            device: DeviceQueue {
                port_id: p.id,
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
                lent_pool: p
                    .lent
                    .iter()
                    .find(|(q, _)| *q == queue)
                    .map(|(_, l)| l.clone()),
                rules: p.rules.clone(),
                scratch: [std::ptr::null_mut(); MAX_BURST],
                mark_values: [0; MAX_BURST],
                infos: [sys::shim_mbuf_info::default(); MAX_BURST],
                reserve: [std::ptr::null_mut(); MAX_BURST],
                reserve_len: 0,
            },
            mode,
        }))
    }

    fn tx_port(
        &self,
        port: u16,
        queue: u16,
        _counters: Arc<QueueCounters>,
    ) -> Result<Box<dyn TxPort>, EngineError> {
        let p = self.port(port)?;
        let hw = device_queue(&p.tx_queue_index, port, "TX", queue)?;
        let pool = p
            .tx_pools
            .iter()
            .find(|(q, _)| *q == queue)
            .map(|(_, pool)| *pool)
            .expect("a pool per TX queue");
        Ok(Box::new(DpdkTx {
            port_id: p.id,
            hw_queue: hw,
            pool,
            scratch: [std::ptr::null_mut(); MAX_BURST],
        }))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::DPDK
    }

    fn mac_address(&self, port: u16) -> Option<[u8; 6]> {
        let id = self.ports.get(port as usize)?.id;
        let mut mac = sys::rte_ether_addr::default();
        // SAFETY: a started port and an out structure.
        let rc = unsafe { sys::rte_eth_macaddr_get(id, &mut mac) };
        (rc == 0).then_some(mac.addr_bytes)
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
                        last_error("rte_thread_register (the worker runs without mempool caches)")
                    );
                }
            } else {
                sys::rte_thread_unregister();
            }
        }
    }
}

/// Polls between reads of the port's counters (a few per second at full speed).
const NIC_STATS_EVERY: u32 = 1 << 20;

/// One device RX queue: pulls frames and copies them into a queue's memory regions.
struct DeviceQueue {
    port_id: u16,
    hw_queue: u16,
    /// Polls since the port's counters were last read (queue 0 of a port reads them).
    polls: u32,
    /// Missed + errored and no-mbuf counts already folded into our counters.
    nic_seen: (u64, u64),
    port: u16,
    queue: u16,
    regions: Arc<RegionSet>,
    /// The queue's region per segment (two with header-data split).
    segments: Vec<RegionId>,
    counters: Arc<QueueCounters>,
    /// The device tags packets with the flow id (rte_flow MARK).
    marks: bool,
    /// rte_flow placed the packet but could not tag it: find the flow id from the headers.
    classify_ids: bool,
    /// The queue's region is its mbuf pool (this one): frames are handed over, not copied.
    lent_pool: Option<Arc<LentPool>>,
    rules: Arc<InterfaceSteering>,
    scratch: [*mut sys::rte_mbuf; MAX_BURST],
    mark_values: [u32; MAX_BURST],
    infos: [sys::shim_mbuf_info; MAX_BURST],
    /// Zero copy: mbufs of the lent pool kept ready, `reserve[..reserve_len]`.
    reserve: [*mut sys::rte_mbuf; MAX_BURST],
    reserve_len: usize,
}

/// How an RX queue gets its packets.
enum RxMode {
    /// Straight from its device queue.
    Direct,
    /// Its device queue is one ingress point of software steering; the queue's packets
    /// come over the wires (from its own and every other device queue).
    Software(Box<(Ingress, WireReceiver)>),
}

struct DpdkRx {
    device: DeviceQueue,
    mode: RxMode,
}

// SAFETY: the scratch pointers are only used inside one call on the owning worker thread.
unsafe impl Send for DeviceQueue {}

impl DeviceQueue {
    /// Folds the port's own drop counters into this queue's: packets the NIC missed or
    /// rejected become `engine_missed`, receives without an mbuf `pool_empty`, so
    /// "lossless" also covers the device.
    fn fold_nic_counters(&mut self) {
        if self.hw_queue != 0 {
            return;
        }
        let mut st = sys::rte_eth_stats::default();
        // SAFETY: a valid port and an out structure.
        if unsafe { sys::rte_eth_stats_get(self.port_id, &mut st) } != 0 {
            return;
        }
        let (missed, nombuf) = (st.imissed + st.ierrors, st.rx_nombuf);
        self.counters.drop_packets(
            DropReason::EngineMissed,
            missed.saturating_sub(self.nic_seen.0),
        );
        self.counters.drop_packets(
            DropReason::PoolEmpty,
            nombuf.saturating_sub(self.nic_seen.1),
        );
        self.nic_seen = (missed, nombuf);
    }

    /// Receives up to `max` mbufs into `scratch` (and their marks); returns how many.
    fn receive_mbufs(&mut self, max: usize) -> usize {
        self.polls += 1;
        if self.polls >= NIC_STATS_EVERY {
            self.polls = 0;
            self.fold_nic_counters();
        }
        if max == 0 {
            return 0;
        }
        // SAFETY: a started port; scratch has room for `max` <= MAX_BURST pointers.
        let n = unsafe {
            sys::shim_rte_eth_rx_burst(
                self.port_id,
                self.hw_queue,
                self.scratch.as_mut_ptr(),
                max.min(MAX_BURST) as u16,
            )
        } as usize;
        if n > 0 && self.marks {
            // SAFETY: n received mbufs and room for n marks.
            unsafe {
                sys::shim_rte_mbuf_marks(
                    self.scratch.as_ptr(),
                    self.mark_values.as_mut_ptr(),
                    n as u32,
                )
            };
        }
        n
    }

    /// The flow id of received mbuf `i`, now packet `slot` of `burst`.
    fn flow_id(
        &self,
        i: usize,
        burst: &Burst,
        slot: usize,
        rules: Option<&Arc<crate::steering::Classifier>>,
    ) -> u32 {
        if self.marks {
            return self.mark_values[i];
        }
        match rules.and_then(|r| burst.data(slot, 0).map(|f| r.classify(f))) {
            Some(crate::steering::Verdict::Deliver { flow_id, .. }) => flow_id,
            _ => 0,
        }
    }

    /// Up to `max` frames from the device as a burst of the queue's buffers, with their
    /// flow ids: handed over when the region is the mbuf pool, else copied.
    fn pull(&mut self, max: usize) -> Option<Burst> {
        if let Some(lent) = self.lent_pool.clone() {
            return self.pull_lent(max, &lent);
        }
        // Take from the device only what our pools can hold; the rest waits in the
        // device's ring (a NIC counts its own misses when that ring overflows).
        let room = self
            .segments
            .iter()
            .map(|&r| self.regions.get(r).available())
            .min()
            .unwrap_or(0);
        let n = self.receive_mbufs(max.min(room));
        if n == 0 {
            return None;
        }
        let out = match Burst::allocate(
            self.regions.clone(),
            self.port,
            self.queue,
            &self.segments,
            n,
        ) {
            Some(mut fresh) => {
                let rules = self.classify_ids.then(|| self.rules.rules());
                let mut kept = 0;
                for i in 0..n {
                    if !self.copy_frame(self.scratch[i], &mut fresh, kept) {
                        // Larger than the queue's buffers or more segments than regions:
                        // counted, never delivered cut.
                        self.counters.drop_packets(DropReason::Malformed, 1);
                        continue;
                    }
                    let id = self.flow_id(i, &fresh, kept, rules.as_deref());
                    fresh.set_flow_id(kept, id);
                    kept += 1;
                }
                fresh.truncate(kept);
                Some(fresh)
            }
            None => {
                self.counters.drop_packets(DropReason::PoolEmpty, n as u64);
                None
            }
        };
        // SAFETY: every received mbuf is freed once.
        unsafe { sys::shim_rte_pktmbuf_free_bulk(self.scratch.as_mut_ptr(), n as u32) };
        out
    }

    /// Zero-copy receive: each mbuf's buffer is one of the region's, so the burst takes
    /// the buffer index and the mbuf stays out of its pool until the burst is dropped.
    fn pull_lent(&mut self, max: usize, lent: &LentPool) -> Option<Burst> {
        // Buffers the application gave back go to the mempool first (this thread's cache).
        let mut back = [0u32; MAX_BURST];
        loop {
            let k = lent.returned.dequeue_burst(&mut back);
            if k == 0 {
                break;
            }
            let mut batch = [std::ptr::null_mut(); MAX_BURST];
            for (slot, &i) in batch.iter_mut().zip(&back[..k]) {
                *slot = lent.mbufs[i as usize];
            }
            // SAFETY: each returned buffer was handed out once by this queue and comes back
            // once (Burst ownership), so each mbuf is freed once.
            unsafe { sys::shim_rte_pktmbuf_free_bulk(batch.as_mut_ptr(), k as u32) };
            if k < MAX_BURST {
                break;
            }
        }
        let pool = lent.pool;
        // Keep a burst's worth of the pool's mbufs in reserve, for frames the device hands
        // over in mbufs of another pool (they are copied into these). Polling only as many
        // frames as the reserve holds stops receiving while the application holds the
        // buffers, and frames wait in the device's ring, as in copy mode.
        if self.reserve_len < MAX_BURST {
            let want = MAX_BURST - self.reserve_len;
            // SAFETY: a valid pool; the reserve has room for `want` more pointers.
            let ok = unsafe {
                sys::shim_rte_pktmbuf_alloc_bulk(
                    pool.0,
                    self.reserve[self.reserve_len..].as_mut_ptr(),
                    want as u32,
                )
            } == 0;
            if ok {
                self.reserve_len = MAX_BURST;
            }
        }
        let n = self.receive_mbufs(max.min(self.reserve_len));
        if n == 0 {
            return None;
        }
        // SAFETY: n received mbufs and room for n records.
        unsafe {
            sys::shim_rte_mbuf_infos(self.scratch.as_ptr(), self.infos.as_mut_ptr(), n as u32)
        };
        let regions = self.regions.clone();
        let region_id = self.segments[0];
        let region = regions.get(region_id);
        let mut out = Burst::empty(regions.clone(), self.port, self.queue, n);
        let rules = self.classify_ids.then(|| self.rules.rules());
        let mut done: [*mut sys::rte_mbuf; MAX_BURST] = [std::ptr::null_mut(); MAX_BURST];
        let (mut n_done, mut dropped) = (0, 0);
        for i in 0..n {
            let info = self.infos[i];
            let (buf, off, len) = (
                info.buf_addr as u64,
                info.data_off as usize,
                info.data_len as usize,
            );
            let fits = info.nb_segs == 1 && len <= region.buf_size();
            let index = match region.index_of(buf) {
                Some(index) if fits && (off == region.headroom() || region.host_accessible()) => {
                    if off != region.headroom() {
                        // The PMD left the data elsewhere in the buffer: move it to where
                        // the region's buffer starts.
                        // SAFETY: both ranges lie inside this mbuf's buffer (headroom +
                        // buf_size bytes), which nobody else uses now.
                        unsafe {
                            std::ptr::copy(
                                (buf + off as u64) as *const u8,
                                (buf + region.headroom() as u64) as *mut u8,
                                len,
                            )
                        };
                    }
                    index
                }
                None if fits && region.host_accessible() => {
                    // An mbuf of another pool (net_ring passes the sender's mbufs on):
                    // copy it into one of ours from the reserve.
                    self.reserve_len -= 1;
                    let own = self.reserve[self.reserve_len];
                    // SAFETY: `own` is an mbuf of the lent pool, so its buffer is a region
                    // buffer with room for headroom + buf_size bytes; the foreign mbuf
                    // holds `len` bytes at `off`.
                    let dst = unsafe {
                        let dst = sys::shim_rte_mbuf_buf_addr(own) as u64;
                        std::ptr::copy_nonoverlapping(
                            (buf + off as u64) as *const u8,
                            (dst + region.headroom() as u64) as *mut u8,
                            len,
                        );
                        dst
                    };
                    done[n_done] = self.scratch[i];
                    n_done += 1;
                    region
                        .index_of(dst)
                        .expect("mbufs of the lent pool carry region buffers")
                }
                _ => {
                    // A chained (too long) frame: counted, freed.
                    dropped += 1;
                    done[n_done] = self.scratch[i];
                    n_done += 1;
                    continue;
                }
            };
            out.push_owned(region_id, index, len as u32, 0);
            let slot = out.len() - 1;
            let id = self.flow_id(i, &out, slot, rules.as_deref());
            out.set_flow_id(slot, id);
        }
        if n_done > 0 {
            // SAFETY: mbufs not handed to the burst, each freed once.
            unsafe { sys::shim_rte_pktmbuf_free_bulk(done.as_mut_ptr(), n_done as u32) };
        }
        self.counters.drop_packets(DropReason::Malformed, dropped);
        (!out.is_empty()).then_some(out)
    }

    /// Copies the segments of mbuf chain `m` into packet `slot` of `fresh`; false when it
    /// does not fit.
    fn copy_frame(&self, m: *mut sys::rte_mbuf, fresh: &mut Burst, slot: usize) -> bool {
        let mut cur = m;
        let mut seg = 0;
        while !cur.is_null() {
            if seg >= self.segments.len() {
                return false;
            }
            // SAFETY: a received mbuf segment, ours until the burst's mbufs are freed.
            let (src, len) = unsafe {
                (
                    sys::shim_rte_pktmbuf_data(cur) as *const u8,
                    sys::shim_rte_pktmbuf_data_len(cur) as usize,
                )
            };
            let Some(buf) = fresh.buffer_mut(slot, seg) else {
                return false;
            };
            if len > buf.len() {
                return false;
            }
            // SAFETY: `len` bytes of packet data in the segment.
            buf[..len].copy_from_slice(unsafe { std::slice::from_raw_parts(src, len) });
            fresh.set_len(slot, seg, len);
            // SAFETY: as above.
            cur = unsafe { sys::shim_rte_pktmbuf_next(cur) };
            seg += 1;
        }
        for s in seg..self.segments.len() {
            fresh.set_len(slot, s, 0);
        }
        true
    }
}

impl Drop for DeviceQueue {
    fn drop(&mut self) {
        // Runs on the worker thread as it exits: the last read of the port's counters.
        self.fold_nic_counters();
        if self.reserve_len > 0 {
            // SAFETY: reserved mbufs, never handed out, each freed once.
            unsafe {
                sys::shim_rte_pktmbuf_free_bulk(self.reserve.as_mut_ptr(), self.reserve_len as u32)
            };
        }
    }
}

impl RxPort for DpdkRx {
    fn receive(&mut self, into: &mut Burst, max: usize) -> usize {
        match &mut self.mode {
            RxMode::Direct => match self.device.pull(max) {
                Some(mut fresh) => {
                    let n = fresh.len();
                    into.take_from(&mut fresh, n)
                }
                None => 0,
            },
            RxMode::Software(ends) => {
                let (ingress, receiver) = &mut **ends;
                if ingress.has_room() {
                    match self.device.pull(MAX_BURST) {
                        Some(fresh) => {
                            // Cannot be refused: every wire has room.
                            let _ = ingress.steer(fresh);
                        }
                        None => ingress.idle(),
                    }
                }
                receiver.receive(into, max)
            }
        }
    }

    fn take_boundary(&mut self) -> bool {
        match &mut self.mode {
            RxMode::Direct => false,
            RxMode::Software(ends) => ends.1.take_boundary(),
        }
    }
}

struct DpdkTx {
    port_id: u16,
    hw_queue: u16,
    pool: Pool,
    scratch: [*mut sys::rte_mbuf; MAX_BURST],
}

// SAFETY: as for DpdkRx.
unsafe impl Send for DpdkTx {}

impl TxPort for DpdkTx {
    fn transmit(&mut self, mut burst: Burst) -> Option<Burst> {
        while !burst.is_empty() {
            let n = burst.len().min(MAX_BURST);
            // SAFETY: a valid pool; scratch has room for n.
            if unsafe {
                sys::shim_rte_pktmbuf_alloc_bulk(self.pool.0, self.scratch.as_mut_ptr(), n as u32)
            } != 0
            {
                return Some(burst);
            }
            for i in 0..n {
                let m = self.scratch[i];
                let mut off = 0usize;
                // SAFETY: a fresh mbuf whose data room holds buf_size + headroom bytes.
                let dst = unsafe { sys::shim_rte_pktmbuf_data(m) as *mut u8 };
                for seg in 0..burst.packets()[i].segments().len() {
                    let data = burst.data(i, seg).expect("DPDK regions are host memory");
                    // SAFETY: the pool's data room was sized from the region's buf_size.
                    unsafe {
                        std::ptr::copy_nonoverlapping(data.as_ptr(), dst.add(off), data.len())
                    };
                    off += data.len();
                }
                // SAFETY: as above.
                unsafe { sys::shim_rte_pktmbuf_set_len(m, off as u16) };
            }
            // SAFETY: a started port; the driver takes the mbufs it accepts.
            let sent = unsafe {
                sys::shim_rte_eth_tx_burst(
                    self.port_id,
                    self.hw_queue,
                    self.scratch.as_mut_ptr(),
                    n as u16,
                )
            } as usize;
            if sent < n {
                // SAFETY: the mbufs the driver did not take are still ours.
                unsafe {
                    sys::shim_rte_pktmbuf_free_bulk(
                        self.scratch[sent..n].as_mut_ptr(),
                        (n - sent) as u32,
                    )
                };
            }
            burst.release_front(sent);
            if sent < n {
                return Some(burst);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_failures_name_the_sizes_asked_for_and_the_free_memory() {
        let e = pool_error("cannot create the mbuf pool", 8192, 2176);
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
}
