//! Flow steering: one rule model (`rx.flows`), compiled to a software classifier that runs
//! where packets enter an interface on engines without NIC flow tables (the software
//! loopback today), plus dynamic rule changes on a running data plane.
//!
//! Rule changes never take a lock on the packet path. The compiled [`Classifier`] sits
//! behind an atomically swapped pointer; each change gets a new epoch. Every ingress point
//! (where frames are classified) and every RX queue reports the newest epoch it has fully
//! adopted, and [`InterfaceSteering::add_flow`] / [`InterfaceSteering::remove_flow`] return
//! only once all of them have: after that, no burst classified under the old rules can
//! still reach the application.

#![forbid(unsafe_code)]

pub mod classifier;
pub mod headers;
mod memo;
pub mod rss;
pub mod tx_transform;

pub use classifier::{Classifier, Target, Verdict};
pub use headers::Malformed;
pub use memo::VerdictMemo;
pub use tx_transform::{TransformError, TxTransformer};

use crate::config::diag::Diagnostics;
use crate::config::{FlowConfig, RxConfig, validate};
use arc_swap::ArcSwap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a rule change waits for every worker to adopt it.
const ADOPT_TIMEOUT: Duration = Duration::from_secs(2);

/// A flow added at run time; pass it to `remove_flow`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowHandle {
    /// Interface index.
    pub port: u16,
    /// Flow id (the mark its packets carry).
    pub flow_id: u32,
}

/// A rule change was refused or not confirmed.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    /// No such interface.
    #[error("no interface `{0}`")]
    UnknownInterface(String),
    /// The flow is invalid for this interface.
    #[error("flow rejected:\n{0}")]
    Invalid(String),
    /// No dynamic flow with this handle.
    #[error("interface `{interface}` has no dynamic flow with id {flow_id}")]
    UnknownFlow {
        /// Interface name.
        interface: String,
        /// Flow id.
        flow_id: u32,
    },
    /// No device priority is left for a flow added at run time (the rules' order on the
    /// NIC is fixed by `dynamic_flow_capacity`).
    #[error("interface `{interface}`: {reason}")]
    NoPriority {
        /// Interface name.
        interface: String,
        /// What is full and how to make room.
        reason: String,
    },
    /// The device refused to create or destroy the flow's rule.
    #[error("interface `{interface}`: {source}")]
    Device {
        /// Interface name.
        interface: String,
        /// The engine's error.
        #[source]
        source: DeviceFlowError,
    },
    /// The rule set changed, but not every worker confirmed it in time.
    #[error(
        "interface `{interface}`: rule epoch {epoch} was not adopted by every worker within {ADOPT_TIMEOUT:?} (a worker may be stopped or stalled)"
    )]
    NotAdopted {
        /// Interface name.
        interface: String,
        /// Epoch.
        epoch: u64,
    },
}

/// Why a device did not create or destroy a rule: the engine's own error (steering sits
/// below the engines, so it holds their errors without naming their types).
pub type DeviceFlowError = Box<dyn std::error::Error + Send + Sync>;

/// The device side of an interface whose rules live in the NIC's flow tables (rte_flow):
/// flows added or removed at run time are created or destroyed there.
pub trait DeviceFlows: Send + Sync {
    /// Creates the device rule of `flow` at `priority` (0 is the highest).
    fn create(&self, flow: &FlowConfig, priority: u32) -> Result<(), DeviceFlowError>;
    /// Destroys the device rule of flow `flow_id`.
    fn destroy(&self, flow_id: u32) -> Result<(), DeviceFlowError>;
}

/// An epoch acknowledgement slot of one ingress point or RX queue.
pub type EpochAck = Arc<AtomicU64>;

struct Control {
    rx: RxConfig,
    /// Flows added at run time, oldest first, with their device priority.
    dynamic: Vec<(u32, u32)>,
    epoch: u64,
}

/// Steering state of one interface, shared by its ingress points, RX queues and the
/// control path.
pub struct InterfaceSteering {
    port: u16,
    interface: String,
    software: bool,
    /// The device's flow tables hold the rules (rte_flow), so changes go there too.
    device: std::sync::OnceLock<Arc<dyn DeviceFlows>>,
    rules: ArcSwap<Classifier>,
    control: Mutex<Control>,
    acks: Mutex<Vec<EpochAck>>,
}

impl InterfaceSteering {
    /// Compiles the static rules of `rx` (epoch 1).
    pub fn new(port: u16, interface: &str, rx: &RxConfig, software: bool) -> Self {
        Self {
            port,
            interface: interface.to_owned(),
            software,
            device: std::sync::OnceLock::new(),
            rules: ArcSwap::from_pointee(Classifier::compile(rx, 1)),
            control: Mutex::new(Control {
                rx: rx.clone(),
                dynamic: Vec::new(),
                epoch: 1,
            }),
            acks: Mutex::new(Vec::new()),
        }
    }

    /// The current rule set (lock-free; hold it only for one burst).
    #[inline]
    pub fn rules(&self) -> arc_swap::Guard<Arc<Classifier>> {
        self.rules.load()
    }

    /// The newest epoch.
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.rules.load().epoch()
    }

    /// Registers an ingress point or RX queue whose acknowledgement rule changes wait for.
    pub fn register(&self) -> EpochAck {
        let ack = Arc::new(AtomicU64::new(0));
        self.acks.lock().expect("acks lock").push(ack.clone());
        ack
    }

    /// Stops waiting for `ack`: its ingress point or RX queue is gone (a queue removed
    /// from a running plane), so rule changes no longer wait for it.
    pub fn forget(&self, ack: &EpochAck) {
        self.acks
            .lock()
            .expect("acks lock")
            .retain(|a| !Arc::ptr_eq(a, ack));
    }

    /// Marks the rules as programmed into the device (rte_flow): run-time changes are
    /// created and destroyed there through `device`, and the software rules stay in step
    /// (they give flow ids from headers where the device cannot mark packets).
    pub fn set_device_programmed(&self, device: Arc<dyn DeviceFlows>) {
        let _ = self.device.set(device);
    }

    /// The device priority for a flow added now: after the static rules and every flow
    /// added before (so the device's order is the software's first-match order), and below
    /// the exception queue's catch-all, which sits `dynamic_flow_capacity` places after the
    /// static rules.
    fn device_priority(&self, c: &Control) -> Result<u32, FlowError> {
        let statics = (c.rx.flows.len() - c.dynamic.len()) as u32;
        let next = c.dynamic.last().map_or(statics, |&(_, p)| p + 1);
        let capacity = c.rx.dynamic_flow_capacity;
        let catch_all = c.rx.flow_isolation && c.rx.exception_queue.is_some();
        let refuse = |why: String| {
            Err(FlowError::NoPriority {
                interface: self.interface.clone(),
                reason: why,
            })
        };
        if capacity > 0 && c.dynamic.len() as u32 >= capacity {
            return refuse(format!(
                "dynamic_flow_capacity {capacity} reached: remove a flow added at run time first"
            ));
        }
        if catch_all && capacity == 0 {
            return refuse("flows added at run time sit between the static rules and the exception_queue catch-all: set rx.dynamic_flow_capacity to how many there may be".into());
        }
        if catch_all && next >= statics + capacity {
            return refuse(format!(
                "no device priority left between the static rules and the exception_queue catch-all (dynamic_flow_capacity {capacity}): remove the newest flows added at run time"
            ));
        }
        Ok(next)
    }

    /// Adds a flow after the existing ones (so it has the lowest priority). A flow id of 0
    /// gets the lowest unused id. Returns once every worker uses the new rules.
    pub fn add_flow(&self, mut flow: FlowConfig) -> Result<FlowHandle, FlowError> {
        let epoch = {
            let mut c = self.control.lock().expect("steering control lock");
            if flow.id == 0 {
                flow.id = (1..=0xFF_FFFF)
                    .find(|id| c.rx.flows.iter().all(|f| f.id != *id))
                    .ok_or_else(|| FlowError::Invalid("no free flow id".into()))?;
            } else if let Some(f) = c.rx.flows.iter().find(|f| f.id == flow.id) {
                return Err(FlowError::Invalid(format!(
                    "flow id {} is already used by flow `{}`",
                    flow.id, f.name
                )));
            }
            if let Some(f) = c.rx.flows.iter().find(|f| f.name == flow.name) {
                return Err(FlowError::Invalid(format!(
                    "flow name `{}` is already used (flow id {})",
                    f.name, f.id
                )));
            }
            let mut candidate = c.rx.clone();
            let id = flow.id;
            candidate.flows.push(flow);
            let mut d = Diagnostics::default();
            validate::flow_rules(&mut d, "rx", &self.interface, &candidate, self.software);
            if d.has_errors() {
                return Err(FlowError::Invalid(
                    d.into_error(&format!("dynamic flow on `{}`", self.interface))
                        .to_string(),
                ));
            }
            let mut priority = 0;
            if let Some(device) = self.device.get() {
                priority = self.device_priority(&c)?;
                let flow = candidate.flows.last().expect("pushed above");
                device
                    .create(flow, priority)
                    .map_err(|source| FlowError::Device {
                        interface: self.interface.clone(),
                        source,
                    })?;
            }
            c.rx = candidate;
            c.dynamic.push((id, priority));
            (self.publish(&mut c), id)
        };
        let (epoch, flow_id) = epoch;
        self.wait_adopted(epoch)?;
        Ok(FlowHandle {
            port: self.port,
            flow_id,
        })
    }

    /// Removes a flow added with `add_flow`. Returns once no worker uses the old rules and
    /// every burst classified under them has been handed to the application.
    pub fn remove_flow(&self, flow_id: u32) -> Result<(), FlowError> {
        let epoch = {
            let mut c = self.control.lock().expect("steering control lock");
            let Some(pos) = c.dynamic.iter().position(|&(id, _)| id == flow_id) else {
                return Err(FlowError::UnknownFlow {
                    interface: self.interface.clone(),
                    flow_id,
                });
            };
            if let Some(device) = self.device.get() {
                device
                    .destroy(flow_id)
                    .map_err(|source| FlowError::Device {
                        interface: self.interface.clone(),
                        source,
                    })?;
            }
            c.dynamic.remove(pos);
            c.rx.flows.retain(|f| f.id != flow_id);
            self.publish(&mut c)
        };
        self.wait_adopted(epoch)
    }

    /// Replaces the interface's rules with `rx`'s (its flows, flow isolation, exception
    /// queue and queues for RSS), keeping flows added at run time after them, in one step:
    /// every packet is classified under the old rules or the new ones, never lost between
    /// them. Returns once every worker uses the new rules. Only for rules in software;
    /// rules on the device are changed flow by flow ([`Self::add_flow`]).
    pub fn replace_rules(&self, rx: &RxConfig) -> Result<(), FlowError> {
        let epoch = {
            let mut c = self.control.lock().expect("steering control lock");
            if self.device.get().is_some() {
                return Err(FlowError::Invalid(format!(
                    "interface `{}`: its rules are on the device (rte_flow); change them flow by flow",
                    self.interface
                )));
            }
            let mut candidate = rx.clone();
            for &(id, _) in &c.dynamic {
                let Some(added) = c.rx.flows.iter().find(|f| f.id == id) else {
                    continue;
                };
                if let Some(f) = candidate
                    .flows
                    .iter()
                    .find(|f| f.id == id || f.name == added.name)
                {
                    return Err(FlowError::Invalid(format!(
                        "flow `{}` (id {}) collides with flow `{}` (id {id}), added at run time: remove that one first",
                        f.name, f.id, added.name
                    )));
                }
                candidate.flows.push(added.clone());
            }
            let mut d = Diagnostics::default();
            validate::flow_rules(&mut d, "rx", &self.interface, &candidate, self.software);
            if d.has_errors() {
                return Err(FlowError::Invalid(
                    d.into_error(&format!("new rules of `{}`", self.interface))
                        .to_string(),
                ));
            }
            c.rx = candidate;
            self.publish(&mut c)
        };
        self.wait_adopted(epoch)
    }

    /// The flows in effect, static first.
    pub fn flows(&self) -> Vec<FlowConfig> {
        self.control
            .lock()
            .expect("steering control lock")
            .rx
            .flows
            .clone()
    }

    fn publish(&self, c: &mut Control) -> u64 {
        c.epoch += 1;
        self.rules
            .store(Arc::new(Classifier::compile(&c.rx, c.epoch)));
        c.epoch
    }

    fn wait_adopted(&self, epoch: u64) -> Result<(), FlowError> {
        let acks: Vec<EpochAck> = self.acks.lock().expect("acks lock").clone();
        let start = Instant::now();
        while !acks.iter().all(|a| a.load(Ordering::Acquire) >= epoch) {
            if start.elapsed() > ADOPT_TIMEOUT {
                return Err(FlowError::NotAdopted {
                    interface: self.interface.clone(),
                    epoch,
                });
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{FlowMatch, PortRange, QueueConfig};

    /// Records what a device would be asked to do. A stand-in for a NIC's flow table in
    /// this unit test of the priority bookkeeping; the real one (rte_flow on net_tap) is
    /// exercised by `tests/dpdk_tap_dynamic_flows.rs` in the tapflow VM.
    #[derive(Default)]
    struct Recorder {
        created: Mutex<Vec<(u32, u32)>>,
        destroyed: Mutex<Vec<u32>>,
    }

    impl DeviceFlows for Recorder {
        fn create(&self, flow: &FlowConfig, priority: u32) -> Result<(), DeviceFlowError> {
            self.created.lock().unwrap().push((flow.id, priority));
            Ok(())
        }
        fn destroy(&self, flow_id: u32) -> Result<(), DeviceFlowError> {
            self.destroyed.lock().unwrap().push(flow_id);
            Ok(())
        }
    }

    fn flow(name: &str, id: u32, port: u16) -> FlowConfig {
        FlowConfig {
            name: name.into(),
            id,
            queue_ids: vec![0],
            matches: FlowMatch {
                udp_dst: Some(PortRange {
                    first: port,
                    last: port,
                }),
                ..Default::default()
            },
            transforms: vec![],
            location: Default::default(),
        }
    }

    fn steering(capacity: u32, exception: bool) -> (InterfaceSteering, Arc<Recorder>) {
        let mut rx = RxConfig::empty();
        rx.queues.push(QueueConfig::new("q0", 0, 0, 32, &["m"]));
        rx.flows = vec![flow("a", 1, 5000), flow("b", 2, 5001)];
        rx.flow_isolation = exception;
        rx.exception_queue = exception.then_some(0);
        rx.dynamic_flow_capacity = capacity;
        let s = InterfaceSteering::new(0, "nic", &rx, false);
        let rec = Arc::new(Recorder::default());
        s.set_device_programmed(rec.clone());
        (s, rec)
    }

    #[test]
    fn run_time_flows_get_device_priorities_after_the_static_rules_in_order() {
        let (s, rec) = steering(2, true);
        let h1 = s.add_flow(flow("c", 0, 6000)).unwrap();
        let h2 = s.add_flow(flow("d", 0, 6001)).unwrap();
        assert_eq!(*rec.created.lock().unwrap(), [(3, 2), (4, 3)]);
        let err = s.add_flow(flow("e", 0, 6002)).unwrap_err().to_string();
        assert!(err.contains("dynamic_flow_capacity 2 reached"), "{err}");
        s.remove_flow(h2.flow_id).unwrap();
        assert_eq!(*rec.destroyed.lock().unwrap(), [4]);
        // After the newest is gone its place is free again; below the catch-all at 2 + 2.
        s.add_flow(flow("e", 0, 6002)).unwrap();
        assert_eq!(rec.created.lock().unwrap()[2].1, 3);
        s.remove_flow(h1.flow_id).unwrap();
        assert_eq!(s.flows().len(), 3, "static a, b and dynamic e");
    }

    #[test]
    fn a_catch_all_without_capacity_refuses_run_time_flows_and_says_why() {
        let (s, rec) = steering(0, true);
        let err = s.add_flow(flow("c", 0, 6000)).unwrap_err().to_string();
        assert!(err.contains("set rx.dynamic_flow_capacity"), "{err}");
        assert!(rec.created.lock().unwrap().is_empty());
        assert_eq!(s.flows().len(), 2, "nothing changed");
        // Without a catch-all there is no limit.
        let (s, rec) = steering(0, false);
        for k in 0..5 {
            s.add_flow(flow(&format!("x{k}"), 0, 6000 + k)).unwrap();
        }
        let prios: Vec<u32> = rec.created.lock().unwrap().iter().map(|c| c.1).collect();
        assert_eq!(prios, [2, 3, 4, 5, 6]);
    }
}
