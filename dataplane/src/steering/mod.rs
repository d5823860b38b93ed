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
pub mod rss;

pub use classifier::{Classifier, Target, Verdict};
pub use headers::Malformed;

use crate::config::diag::Diagnostics;
use crate::config::{FlowConfig, RxConfig, validate};
use arc_swap::ArcSwap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// An epoch acknowledgement slot of one ingress point or RX queue.
pub type EpochAck = Arc<AtomicU64>;

struct Control {
    rx: RxConfig,
    dynamic: Vec<u32>,
    epoch: u64,
}

/// Steering state of one interface, shared by its ingress points, RX queues and the
/// control path.
pub struct InterfaceSteering {
    port: u16,
    interface: String,
    software: bool,
    /// The device's flow tables hold the rules (rte_flow), so changes must go there.
    device_programmed: AtomicBool,
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
            device_programmed: AtomicBool::new(false),
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

    /// Marks the rules as programmed into the device (rte_flow): run-time changes are
    /// refused from then on, since the software classifier would not see the packets.
    pub fn set_device_programmed(&self) {
        self.device_programmed.store(true, Ordering::Release);
    }

    fn refuse_if_device_programmed(&self) -> Result<(), FlowError> {
        if self.device_programmed.load(Ordering::Acquire) {
            return Err(FlowError::Invalid(format!(
                "interface `{}` steers with rte_flow rules on the device: not supported: adding or removing flows at run time there (start with the flows in the configuration)",
                self.interface
            )));
        }
        Ok(())
    }

    /// Adds a flow after the existing ones (so it has the lowest priority). A flow id of 0
    /// gets the lowest unused id. Returns once every worker uses the new rules.
    pub fn add_flow(&self, mut flow: FlowConfig) -> Result<FlowHandle, FlowError> {
        self.refuse_if_device_programmed()?;
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
            c.rx = candidate;
            c.dynamic.push(id);
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
        self.refuse_if_device_programmed()?;
        let epoch = {
            let mut c = self.control.lock().expect("steering control lock");
            let Some(pos) = c.dynamic.iter().position(|&id| id == flow_id) else {
                return Err(FlowError::UnknownFlow {
                    interface: self.interface.clone(),
                    flow_id,
                });
            };
            c.dynamic.remove(pos);
            c.rx.flows.retain(|f| f.id != flow_id);
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
