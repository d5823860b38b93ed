//! One port brought up from its plan: configured, its queues set up with their pools (or a
//! lent region), started, flow rules installed or software steering chosen. Everything
//! made is owned by [`Port`] and released in reverse order when it drops, also when a
//! later step of the bring-up fails.

use super::error::{DpdkError, c_text};
use super::extmem::{Device, ExternalMemory, lend_region};
use super::flow;
use super::mempool::{LentPool, Mempool, PoolPtr};
use crate::config::Direction;
use crate::descriptor::QueueId;
use crate::engine::EngineError;
use crate::engine::wire::WireGrid;
use crate::memory::RegionSet;
use crate::plan::dpdk::{self as dpdk_plan, PoolSize, PortPlan, RxReceive};
use crate::steering::InterfaceSteering;
use dpdk_sys as sys;
use std::ffi::CString;
use std::sync::{Arc, Mutex};

mod link;
mod setup;

pub use link::{LINK_WAIT, wait_for_links};
use link::{join_groups, raise_kernel_mtu, raise_mtu};

use setup::QueueSetup;

/// A DPDK port id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortId(pub u16);

/// A queue index on the device (its position among the port's configured queues), as
/// opposed to the queue id of the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueIndex(pub u16);

/// How a port's packets reach their RX queues.
pub enum PortSteering {
    /// The device places every packet (its own RSS, or no rules at all). Flows added at
    /// run time become rte_flow rules here (flow ids then come from the headers).
    Device {
        /// Rules added at run time.
        flows: Arc<Mutex<flow::InstalledFlows>>,
    },
    /// rte_flow rules place packets. `marks`: the rules tag packets with the flow id;
    /// otherwise (a PMD without MARK) the RX worker finds the id from the headers.
    RteFlow {
        /// The installed rules, and those added at run time.
        flows: Arc<Mutex<flow::InstalledFlows>>,
        /// Packets carry the flow id.
        marks: bool,
    },
    /// The device cannot take the rules: each RX worker classifies what its device queue
    /// receives and hands every packet to its queue over the wires.
    Software {
        /// The wires.
        grid: WireGrid,
    },
}

/// An RX queue as set up.
pub struct RxSetup {
    /// Queue id in the configuration.
    pub queue: QueueId,
    /// Device queue.
    pub index: QueueIndex,
    /// The lent region's pool, for a zero-copy queue.
    pub lent: Option<Arc<LentPool>>,
}

/// A TX queue as set up.
pub struct TxSetup {
    /// Queue id in the configuration.
    pub queue: QueueId,
    /// Device queue.
    pub index: QueueIndex,
    /// The mbuf pool frames are copied into.
    pub pool: PoolPtr,
    /// Bytes a frame copied into one of `pool`'s mbufs may have.
    pub room: usize,
    /// Mbufs without data room, for attaching region buffers.
    pub attach: PoolPtr,
}

/// A port that exists on the device: stopped (when started) and closed on drop.
struct OpenDevice {
    id: PortId,
    started: bool,
}

impl OpenDevice {
    fn start(&mut self) -> Result<(), DpdkError> {
        // SAFETY: a configured port with every queue set up.
        super::error::check("rte_eth_dev_start", unsafe {
            sys::rte_eth_dev_start(self.id.0)
        })?;
        self.started = true;
        Ok(())
    }

    fn stop(&mut self) {
        if self.started {
            // SAFETY: a started port.
            unsafe { sys::rte_eth_dev_stop(self.id.0) };
            self.started = false;
        }
    }
}

impl Drop for OpenDevice {
    fn drop(&mut self) {
        self.stop();
        // SAFETY: a port this handle configured; closing releases its queues (and their
        // mbufs, back to the pools the port's owner frees next).
        unsafe { sys::rte_eth_dev_close(self.id.0) };
    }
}

/// A device clock and the mbuf dynamic field (and flag) that carries its values.
#[derive(Clone, Copy, Debug)]
pub struct DeviceTime {
    /// The device clock against the wall clock.
    pub clock: super::clock::NicClock,
    /// Offset of the timestamp field in an mbuf.
    pub offset: i32,
    /// The `ol_flags` bit saying the field is set.
    pub flag: u64,
}

impl DeviceTime {
    /// Registers DPDK's timestamp field (RX or TX) and calibrates port `id`'s clock.
    fn set_up(id: u16, tx: bool) -> Result<Self, super::clock::DeviceClockError> {
        let (mut offset, mut flag) = (0i32, 0u64);
        // SAFETY: out pointers to locals; registration is idempotent within the process.
        let rc = unsafe {
            if tx {
                sys::shim_tx_timestamp_register(&mut offset, &mut flag)
            } else {
                sys::shim_rx_timestamp_register(&mut offset, &mut flag)
            }
        };
        if rc != 0 {
            return Err(super::clock::DeviceClockError::Field(rc));
        }
        let read = || {
            let mut t = 0u64;
            // SAFETY: a started port and an out pointer.
            match unsafe { sys::rte_eth_read_clock(id, &mut t) } {
                0 => Ok(t),
                e => Err(e),
            }
        };
        let clock = crate::clock::WallClock::new();
        let wall = || clock.now_ns();
        let clock = super::clock::NicClock::calibrate(read, wall)?;
        Ok(Self {
            clock,
            offset,
            flag,
        })
    }
}

/// A port brought up for one interface. Fields drop in order: flows first (in `Drop`),
/// then the device (stop, close), then the pools, then the registered memory.
pub struct Port {
    /// Its id.
    pub id: PortId,
    /// Interface name from the configuration.
    pub interface: String,
    /// How packets reach RX queues.
    pub steering: PortSteering,
    /// RX queues in configuration order.
    pub rx: Vec<RxSetup>,
    /// TX queues in configuration order.
    pub tx: Vec<TxSetup>,
    /// The interface's flow rules.
    pub rules: Arc<InterfaceSteering>,
    /// The PCI device, which memory sent without a copy must be DMA-mapped for.
    pub pci_device: Option<Device>,
    /// RX timestamps from the device (`hardware_timestamps` on a device that offers them).
    pub rx_time: Option<DeviceTime>,
    /// Send-on-timestamp by the device (`accurate_send` on a device that offers it).
    pub tx_time: Option<DeviceTime>,
    /// The TX flows the device tags frames for (its VLAN insert offload), when every flow
    /// pushes one 802.1Q tag and the driver offers it; the TX queues mark each frame.
    pub tx_vlan: Option<Arc<crate::steering::TxTransformer>>,
    device: OpenDevice,
    pools: Vec<Mempool>,
    memory: Vec<ExternalMemory>,
    /// `multicast_groups` joined through the port's kernel interface, left at drop before
    /// the device stops (af_packet takes its interface down then, and a down interface
    /// sends no leave).
    groups: Option<crate::netdev::GroupMembership>,
}

impl Drop for Port {
    fn drop(&mut self) {
        if let Some(groups) = self.groups.take() {
            // Before af_packet takes the interface down, which would keep the kernel's
            // leave reports from going out.
            if groups.leave(std::time::Duration::from_secs(2)) {
                tracing::info!("interface `{}`: left its multicast groups", self.interface);
            } else {
                tracing::warn!(
                    "interface `{}`: left its multicast groups, but the kernel sent no leave report within 2 s; a switch drops the groups when its membership times out",
                    self.interface
                );
            }
        }
        if let PortSteering::RteFlow { flows, .. } | PortSteering::Device { flows } = &self.steering
        {
            flows.lock().unwrap_or_else(|e| e.into_inner()).destroy();
        }
        // Frames still waiting in the RX rings are freed now, while the pools and the
        // regions whose buffers they may carry (sent without a copy over a port that loops
        // back) still exist; closing a virtual device may not free them.
        if self.device.started {
            let mut mbufs = [std::ptr::null_mut(); 64];
            for q in self.rx.iter().map(|q| q.index.0) {
                for _ in 0..(1 << 16) {
                    // SAFETY: a started port whose workers have stopped; `mbufs` has room
                    // for 64.
                    let n =
                        unsafe { sys::shim_rte_eth_rx_burst(self.id.0, q, mbufs.as_mut_ptr(), 64) };
                    if n == 0 {
                        break;
                    }
                    // SAFETY: received mbufs, each freed once.
                    unsafe { sys::shim_rte_pktmbuf_free_bulk(mbufs.as_mut_ptr(), n.into()) };
                }
            }
        }
    }
}

impl Port {
    /// The steering mode's name for reports.
    pub fn steering_name(&self) -> &'static str {
        match &self.steering {
            PortSteering::Device { .. } => "device",
            PortSteering::RteFlow { marks: true, .. } => "rte_flow",
            PortSteering::RteFlow { marks: false, .. } => "rte_flow (flow ids from headers)",
            PortSteering::Software { .. } => "software",
        }
    }

    /// Names of the pools this port made (unique in the process).
    pub fn pool_names(&self) -> Vec<String> {
        self.pools.iter().map(|p| p.name().to_owned()).collect()
    }

    /// The device queue of RX queue `queue`.
    pub fn rx_setup(&self, queue: QueueId) -> Option<&RxSetup> {
        self.rx.iter().find(|q| q.queue == queue)
    }

    /// The device queue and pool of TX queue `queue`.
    pub fn tx_setup(&self, queue: QueueId) -> Option<&TxSetup> {
        self.tx.iter().find(|q| q.queue == queue)
    }

    /// Brings up the port of an interface as `planned`. Regions of `regions` the plan
    /// lends become the RX queues' pools. On failure, everything made so far is released
    /// before the error returns.
    pub fn open(
        planned: &PortPlan,
        regions: &RegionSet,
        rules: &Arc<InterfaceSteering>,
    ) -> Result<Self, EngineError> {
        let device_err = |source| device_error(planned, source);
        let no_port = || EngineError::Interface {
            interface: planned.name.clone(),
            reason: format!(
                "no DPDK port `{}` (address `{}`): check the PCI address or vdev string and that its driver is installed",
                planned.ethdev, planned.address
            ),
        };
        let name = CString::new(planned.ethdev.as_str()).map_err(|_| no_port())?;
        let mut id = 0u16;
        // SAFETY: a valid C string and out pointer.
        if unsafe { sys::rte_eth_dev_get_port_by_name(name.as_ptr(), &mut id) } != 0 {
            return Err(no_port());
        }
        let mut info = sys::rte_eth_dev_info::default();
        // SAFETY: a valid port id and out structure.
        super::error::check("rte_eth_dev_info_get", unsafe {
            sys::rte_eth_dev_info_get(id, &mut info)
        })
        .map_err(device_err)?;
        // SAFETY: the PMD's static driver name, or null.
        let driver = unsafe { c_text(info.driver_name, "unknown driver") };
        let (flow_plan, fallback, isolated) = device_flows(planned, id);
        let DeviceConf {
            conf,
            hw_rx,
            hw_tx,
            device_rx_time,
            device_tx_time,
            vlan_insert,
        } = DeviceConf::new(planned, &info, &driver);
        // SAFETY: a valid port id and configuration.
        super::error::check("rte_eth_dev_configure", unsafe {
            sys::rte_eth_dev_configure(id, hw_rx as u16, hw_tx as u16, &conf)
        })
        .map_err(device_err)?;
        let (rx_descriptors, tx_descriptors) = ring_depths(planned, id)?;
        let kernel_raised = raise_kernel_mtu(planned);
        raise_mtu(planned, id, &info, kernel_raised);
        // From here on the port is ours: a failure closes it (OpenDevice's drop).
        // SAFETY: valid port id.
        let socket = unsafe { sys::rte_eth_dev_socket_id(id) };
        let mut port = Port {
            id: PortId(id),
            interface: planned.name.clone(),
            steering: PortSteering::Device {
                flows: Arc::new(Mutex::new(flow::InstalledFlows::none(id))),
            },
            rx: Vec::new(),
            tx: Vec::new(),
            rules: rules.clone(),
            pci_device: planned.pci.then_some(Device(info.device)),
            rx_time: None,
            tx_time: None,
            tx_vlan: vlan_insert
                .then(|| Arc::new(crate::steering::TxTransformer::new(&planned.tx_vlan_flows))),
            device: OpenDevice {
                id: PortId(id),
                started: false,
            },
            pools: Vec::new(),
            memory: Vec::new(),
            groups: None,
        };
        let setup = QueueSetup {
            planned,
            regions,
            info: &info,
            driver: &driver,
            id,
            socket,
            rx_descriptors,
            tx_descriptors,
        };
        setup.rx_queues(&mut port, hw_rx)?;
        setup.tx_queues(&mut port, hw_tx)?;
        port.device.start().map_err(device_err)?;
        setup.device_clocks(&mut port, device_rx_time, device_tx_time);
        // Promiscuous mode: bench traffic is addressed to made-up MACs. Not every vdev
        // supports it, which is fine.
        // SAFETY: a started port.
        let _ = unsafe { sys::rte_eth_promiscuous_enable(id) };
        port.groups = join_groups(planned, id)?;

        port.steer(planned, rules, flow_plan, fallback, isolated)?;
        Ok(port)
    }

    /// Installs the port's planned flows on the device: with MARK (flow ids from the
    /// device), else without (flow ids from the headers), else steered in software, which
    /// leaves isolation again. Rules already refused while planning the port come in as
    /// `fallback`. Then tells the interface's steering where its rules live.
    fn steer(
        &mut self,
        planned: &PortPlan,
        rules: &Arc<InterfaceSteering>,
        flow_plan: Option<Vec<flow::Rule>>,
        mut fallback: Option<flow::FlowError>,
        isolated: bool,
    ) -> Result<(), EngineError> {
        let port = self;
        let id = port.id.0;
        let flows = &planned.flows;
        let rx: Vec<QueueId> = planned.rx.iter().map(|q| q.queue).collect();
        let hw_queue = |q: u16| planned.device_queue(QueueId(q));
        let device_err = |source| device_error(planned, source);
        if let Some(rules_with_marks) = flow_plan {
            port.steering = match flow::install(id, &rules_with_marks) {
                Ok(flows) => PortSteering::RteFlow {
                    flows: Arc::new(Mutex::new(flows)),
                    marks: true,
                },
                Err(with_marks) => {
                    // Some PMDs place packets but cannot tag them: keep the placement and
                    // find flow ids from the headers.
                    let plain = flow::translate(flows, &hw_queue, false).map_err(|source| {
                        EngineError::Flow {
                            interface: planned.name.clone(),
                            source,
                        }
                    })?;
                    match flow::install(id, &plain) {
                        Ok(flows) => PortSteering::RteFlow {
                            flows: Arc::new(Mutex::new(flows)),
                            marks: false,
                        },
                        Err(_) => {
                            fallback = Some(with_marks);
                            PortSteering::Device {
                                flows: Arc::new(Mutex::new(flow::InstalledFlows::none(id))),
                            }
                        }
                    }
                }
            };
            if fallback.is_some() && isolated {
                // Software steering needs every packet: leave isolation again.
                port.device.stop();
                flow_isolate(id, false).map_err(|source| EngineError::Flow {
                    interface: planned.name.clone(),
                    source,
                })?;
                port.device.start().map_err(device_err)?;
            }
        }
        if let Some(reason) = fallback {
            if let Some(f) = flows.flows.iter().find(|f| !f.transforms.is_empty()) {
                return Err(EngineError::Interface {
                    interface: planned.name.clone(),
                    reason: format!(
                        "the device cannot take the flow rules ({reason}), and flow `{}` needs header transforms: not supported in software steering",
                        f.name
                    ),
                });
            }
            tracing::warn!(
                "interface `{}`: flow rules steered in software ({reason})",
                planned.name
            );
            let ids = rx.clone();
            port.steering = PortSteering::Software {
                grid: WireGrid::new(rules, &ids, ids.len()),
            };
        }
        // The steering layer keeps the configuration's queue ids.
        let queues: Vec<u16> = rx.iter().map(|q| q.0).collect();
        match &port.steering {
            PortSteering::RteFlow { flows, marks } => {
                rules.set_device_programmed(Arc::new(RunTimeFlows {
                    flows: flows.clone(),
                    queues,
                    marks: *marks,
                }))
            }
            PortSteering::Device { flows } if !queues.is_empty() => {
                rules.set_device_programmed(Arc::new(RunTimeFlows {
                    flows: flows.clone(),
                    queues,
                    marks: false,
                }))
            }
            _ => {}
        }
        Ok(())
    }
}

/// Flows added or removed at run time on a port whose packets the device places: each
/// becomes or stops being an rte_flow rule.
struct RunTimeFlows {
    flows: Arc<Mutex<flow::InstalledFlows>>,
    /// RX queue ids in device queue order.
    queues: Vec<u16>,
    /// Rules carry a MARK with the flow id.
    marks: bool,
}

impl crate::steering::DeviceFlows for RunTimeFlows {
    fn create(
        &self,
        f: &crate::config::FlowConfig,
        priority: u32,
    ) -> Result<(), crate::steering::DeviceFlowError> {
        let hw_queue = |q: u16| self.queues.iter().position(|&x| x == q).map(|i| i as u16);
        let rule = flow::translate_flow(f, priority, &hw_queue, self.marks)?;
        Ok(self
            .flows
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .create(&rule)?)
    }

    fn destroy(&self, flow_id: u32) -> Result<(), crate::steering::DeviceFlowError> {
        Ok(self
            .flows
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .destroy_flow(flow_id)?)
    }
}

/// A device call of `planned`'s port failed.
/// The planned ring depths as the driver takes them (`rte_eth_dev_adjust_nb_rx_tx_desc`
/// clamps to its maximum and rounds to its alignment). Fewer is logged; more, in a
/// direction with queues, is refused, because the pools were sized for the planned rings
/// and a ring that holds every buffer stalls the queue (idle queues size their pools from
/// the ring they get).
fn ring_depths(planned: &PortPlan, id: u16) -> Result<(u16, u16), EngineError> {
    let (mut rx, mut tx) = (planned.rx_descriptors, planned.tx_descriptors);
    // SAFETY: a configured port; both pointers are to live locals.
    super::error::check("rte_eth_dev_adjust_nb_rx_tx_desc", unsafe {
        sys::rte_eth_dev_adjust_nb_rx_tx_desc(id, &mut rx, &mut tx)
    })
    .map_err(|source| device_error(planned, source))?;
    for (dir, want, got, used) in [
        ("rx", planned.rx_descriptors, rx, !planned.rx.is_empty()),
        ("tx", planned.tx_descriptors, tx, !planned.tx.is_empty()),
    ] {
        if got > want && used {
            return Err(EngineError::Interface {
                interface: planned.name.clone(),
                reason: format!(
                    "the driver's {dir} rings take at least {got} descriptors, more than the {want} planned: set {dir}.descriptors: {got} (and num_bufs of the queues' regions to at least 1.5x that plus a burst)"
                ),
            });
        }
        if got < want && used {
            tracing::info!(
                "interface `{}`: {dir} rings of {got} descriptors (the driver's most; {want} planned)",
                planned.name
            );
        }
    }
    Ok((rx, tx))
}

fn device_error(planned: &PortPlan, source: DpdkError) -> EngineError {
    EngineError::Device {
        interface: planned.name.clone(),
        address: planned.address.clone(),
        source,
    }
}

fn flow_isolate(port_id: u16, on: bool) -> Result<(), flow::FlowError> {
    let mut err = sys::rte_flow_error::default();
    // SAFETY: a valid port id and error out structure.
    if unsafe { sys::rte_flow_isolate(port_id, i32::from(on), &mut err) } == 0 {
        return Ok(());
    }
    Err(flow::flow_error(format!("rte_flow_isolate({on})"), &err))
}

/// The port's flow rules translated for the device, with isolation asked for (before the
/// port is configured, as DPDK wants): the rules, why the device refused them (then they
/// are steered in software), and whether the port is isolated.
fn device_flows(
    planned: &PortPlan,
    id: u16,
) -> (Option<Vec<flow::Rule>>, Option<flow::FlowError>, bool) {
    let flows = &planned.flows;
    let hw_queue = |q: u16| planned.device_queue(QueueId(q));
    let mut fallback: Option<flow::FlowError> = None;
    let mut flow_plan = None;
    if flows.any() {
        match flow::translate(flows, &hw_queue, true) {
            Ok(rules) => flow_plan = Some(rules),
            Err(e) => fallback = Some(e),
        }
    }
    let mut isolated = false;
    if flow_plan.is_some() && flows.isolation {
        match flow_isolate(id, true) {
            Ok(()) => isolated = true,
            Err(e) => {
                flow_plan = None;
                fallback = Some(e);
            }
        }
    }
    (flow_plan, fallback, isolated)
}

/// How the port is configured: RSS, its queue counts and the timestamp offloads.
struct DeviceConf {
    conf: sys::rte_eth_conf,
    hw_rx: usize,
    hw_tx: usize,
    device_rx_time: bool,
    device_tx_time: bool,
    /// The device inserts the TX flows' VLAN tags.
    vlan_insert: bool,
}

impl DeviceConf {
    fn new(planned: &PortPlan, info: &sys::rte_eth_dev_info, driver: &str) -> Self {
        let rx = planned.rx.len();
        let tx = planned.tx.len();
        let mut conf = sys::rte_eth_conf::default();
        // SAFETY: reads a constant defined in the shim.
        let rss_hf = unsafe { sys::shim_rss_ip_udp } & info.flow_type_rss_offloads;
        if rx > 1 && rss_hf != 0 {
            // Packets no rule places are spread over every queue, as in software.
            conf.rxmode.mq_mode = sys::rte_eth_rx_mq_mode_RTE_ETH_MQ_RX_RSS;
            conf.rx_adv_conf.rss_conf.rss_hf = rss_hf;
        }
        // net_tap wants as many RX as TX queues: it gets idle ones to match. A memif end
        // must have a ring for each ring its peer adds, and peers (testpmd, VPP) add at
        // least one each way: a one-way interface gets an idle queue the other way.
        let (hw_rx, hw_tx) = if driver == "net_tap" {
            let n = rx.max(tx);
            (n, n)
        } else if driver == "net_memif" {
            (rx.max(1), tx.max(1))
        } else {
            (rx, tx)
        };
        // Device timestamps where the driver offers them; software otherwise (said at
        // start by the plane).
        // SAFETY: reads constants defined in the shim.
        let (rx_stamp, tx_stamp) = unsafe {
            (
                sys::shim_rx_offload_timestamp,
                sys::shim_tx_offload_send_on_timestamp,
            )
        };
        let device_rx_time = planned.rx_timestamps && info.rx_offload_capa & rx_stamp != 0;
        let device_tx_time = planned.accurate_send && info.tx_offload_capa & tx_stamp != 0;
        if device_rx_time {
            conf.rxmode.offloads |= rx_stamp;
        }
        if device_tx_time {
            conf.txmode.offloads |= tx_stamp;
        }
        // SAFETY: reads a constant defined in the shim.
        let vlan_offload = unsafe { sys::shim_tx_offload_vlan_insert };
        // PCI devices only: a virtual device that offers it (af_packet) inserts the tag in
        // software with rte_vlan_insert, which refuses attached mbufs (zero-copy TX).
        let vlan_insert = planned.pci
            && !planned.tx_vlan_flows.is_empty()
            && info.tx_offload_capa & vlan_offload != 0;
        if vlan_insert {
            conf.txmode.offloads |= vlan_offload;
            tracing::info!(
                "interface `{}`: TX VLAN tags inserted by the device ({driver}'s VLAN insert offload) for {} TX flow(s)",
                planned.name,
                planned.tx_vlan_flows.len()
            );
        } else if !planned.tx_vlan_flows.is_empty() {
            tracing::info!(
                "interface `{}`: the TX workers push the TX flows' VLAN tags in software ({})",
                planned.name,
                if planned.pci {
                    format!("{driver} has no TX VLAN insert offload")
                } else {
                    "a virtual device".to_owned()
                }
            );
        }
        if planned.rx_scatter {
            // SAFETY: reads a constant defined in the shim.
            let scatter = unsafe { sys::shim_rx_offload_scatter };
            let frame = usize::from(planned.mtu) + dpdk_plan::FRAME_OVERHEAD;
            if info.rx_offload_capa & scatter != 0 {
                conf.rxmode.offloads |= scatter;
                tracing::info!(
                    "interface `{}`: RX scatter on: {frame}-byte frames exceed an RX queue's buffers; those arrive chained and are dropped as malformed",
                    planned.name
                );
            } else {
                tracing::warn!(
                    "interface `{}`: {frame}-byte frames (the MTU a TX queue needs) exceed an RX queue's buffers and {driver} has no RX scatter: the device may refuse the queue or drop those frames",
                    planned.name
                );
            }
        }
        Self {
            conf,
            hw_rx,
            hw_tx,
            device_rx_time,
            device_tx_time,
            vlan_insert,
        }
    }
}
