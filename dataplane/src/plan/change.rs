//! What changes between the plan a data plane runs and a new one, and which of it the
//! running plane can carry out without stopping ([`crate::DataPlane::change`]). Pure: read
//! from the two plans and their configurations alone.
//!
//! Carried out live: flow rules changed in software (flows added, removed or changed, flow
//! isolation, the exception queue; one atomic switch per interface), queues added or
//! removed on the software loopback, and on UDP interfaces TX queues added or removed and
//! RX queues added (without a socket of their own: the rules steer to them what the
//! interface's sockets receive), on DPDK ports whose rules run in software RX queues added
//! (without a device queue of their own, fed over the port's wires; the engine refuses
//! them on a port whose device places packets), on running or new worker cores; on the
//! loopback and the sockets,
//! regions added, resized (a new region in a new slot: a queue that keeps running keeps
//! the region it has, so a resized region's queues are removed first) or removed, their
//! ids kept stable ([`Plan::in_slots_of`]). Everything else a change may hold is named in
//! [`PlanChange::not_live`] with the reason, and nothing is changed: a queue's settings,
//! regions on the other engines, interfaces, plane-wide settings, a UDP interface's RX queues removed (each reads a
//! socket of its SO_REUSEPORT group), and queues of engines whose devices or kernels fix
//! them while they run (TCP, DPDK device queues, RDMA) or on handler cores.

use super::socket::SocketInterfacePlan;
use super::{EnginePlan, Plan, QueuePlan};
use crate::config::{Config, Direction, EngineKind, InterfaceConfig, RxConfig, Transport};
use crate::descriptor::QueueId;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Debug;

/// The difference between two plans.
#[derive(Clone, Debug, Default, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct PlanChange {
    /// Every queue of either plan, with what happens to it.
    pub queues: Vec<QueueChange>,
    /// Regions added, removed or changed (a changed region is a new one; the running
    /// one keeps its memory until the plane stops).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<RegionChange>,
    /// Interfaces whose rules change.
    pub rules: Vec<RulesChange>,
    /// What the running plane cannot do without a restart; empty when the change can be
    /// made live.
    pub not_live: Vec<NotLive>,
}

/// One queue and what the change does to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct QueueChange {
    /// Interface name.
    pub interface: String,
    /// Interface index (the same in both plans when the change is live).
    #[serde(skip)]
    pub port: usize,
    /// `rx` or `tx`.
    #[cfg_attr(feature = "schemars", schemars(with = "String"))]
    pub direction: Direction,
    /// Queue id.
    #[cfg_attr(feature = "schemars", schemars(with = "u16"))]
    pub id: QueueId,
    /// What happens to it.
    pub fate: QueueFate,
    /// How an added queue runs until the next restart, where that differs from a start
    /// (a UDP RX queue without a socket of its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl QueueChange {
    /// The queue as [`NotLive::key`] names it.
    fn key(&self) -> String {
        format!(
            "interfaces `{}` {} queue {}",
            self.interface,
            self.direction.name(),
            self.id
        )
    }
}

/// A region the change adds, removes or changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct RegionChange {
    /// Region name.
    pub name: String,
    /// Added, removed, or changed with its planned fields that differ.
    pub fate: QueueFate,
}

/// What a change does to one queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum QueueFate {
    /// Unchanged: it keeps running and loses nothing.
    Kept,
    /// Only in the new plan.
    Added,
    /// Only in the running plan.
    Removed,
    /// In both, with these planned fields different.
    Changed(Vec<String>),
}

impl QueueFate {
    /// One word, with the fields for a change: `kept`, `added`, `removed`, `changed: KEYS`.
    pub fn short(&self) -> String {
        match self {
            QueueFate::Kept => "kept".to_owned(),
            QueueFate::Added => "added".to_owned(),
            QueueFate::Removed => "removed".to_owned(),
            QueueFate::Changed(keys) => format!("changed: {}", keys.join(", ")),
        }
    }
}

/// An interface whose flow rules change.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct RulesChange {
    /// Interface name.
    pub interface: String,
    /// Interface index.
    #[serde(skip)]
    pub port: usize,
    /// Flows only in the new rules, by name.
    pub added: Vec<String>,
    /// Flows only in the running rules.
    pub removed: Vec<String>,
    /// Flows in both (by id) with a different rule.
    pub changed: Vec<String>,
    /// Other keys of the rules that change (`flow_isolation`, `exception_queue`,
    /// `flex_items`, the queues RSS spreads over).
    pub other: Vec<String>,
}

/// Something the running plane cannot change without a restart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct NotLive {
    /// The configuration key.
    pub key: String,
    /// Why.
    pub reason: String,
}

impl std::fmt::Display for NotLive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.reason)
    }
}

/// `Debug` text without source positions: two configurations that say the same thing in
/// different places of their files compare equal.
fn text<T: Debug + ?Sized>(value: &T) -> String {
    let s = format!("{value:?}");
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(at) = rest.find("location: Location {") {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        rest = rest.find('}').map_or("", |end| &rest[end + 1..]);
    }
    out.push_str(rest);
    out
}

fn same<T: Debug + ?Sized>(a: &T, b: &T) -> bool {
    text(a) == text(b)
}

impl PlanChange {
    /// The change from `old` (running) to `new`, each a staged configuration with its
    /// plan ([`super::staging::with_staging_regions`], [`Plan::from_staged`]), `new`'s
    /// in its own region ids (compared in the running plan's: [`Plan::in_slots_of`]).
    pub fn between(old: (&Config, &Plan), new: (&Config, &Plan)) -> Self {
        Self::between_in_slots(old, new).0
    }

    /// [`PlanChange::between`], with `new`'s plan in the running plan's region ids: the
    /// plan the running plane carries out ([`Plan::in_slots_of`]).
    pub fn between_in_slots(old: (&Config, &Plan), new: (&Config, &Plan)) -> (Self, Plan) {
        let mut change = PlanChange::default();
        change.plane_keys(old.0, new.0);
        let slotted = new.1.clone().in_slots_of(old.1);
        change.regions(old.1, new.1, &slotted);
        let new = (new.0, &slotted);
        let same_interfaces = change.interfaces(old.0, new.0);
        change.queues(old.1, new.1);
        if same_interfaces {
            change.rules(old, new);
        }
        change.live_queues(old.1, new.1);
        (change, slotted)
    }

    /// True when the running plane can make the whole change.
    pub fn is_live(&self) -> bool {
        self.not_live.is_empty()
    }

    /// True when the change does nothing.
    pub fn is_empty(&self) -> bool {
        self.not_live.is_empty()
            && self.rules.is_empty()
            && self.regions.is_empty()
            && self.queues.iter().all(|q| q.fate == QueueFate::Kept)
    }

    /// The change for people: each queue's fate, each interface's rule changes, and
    /// whether the running plane can make it.
    pub fn human(&self) -> String {
        let mut out = String::new();
        for q in &self.queues {
            let fate = match (&q.fate, &q.note) {
                (QueueFate::Added, Some(note)) => format!("added ({note})"),
                (fate, _) => fate_text(fate),
            };
            out += &format!(
                "  {} {} queue {}: {fate}\n",
                q.interface,
                q.direction.name(),
                q.id
            );
        }
        for r in &self.regions {
            let fate = match &r.fate {
                QueueFate::Added => "added (allocated while the plane runs)".to_owned(),
                QueueFate::Removed => {
                    "removed (no queue uses it; its memory stays until the plane stops)".to_owned()
                }
                QueueFate::Changed(keys) => format!(
                    "changed: {} (a new region for the queues added with it; the old one's memory stays until the plane stops)",
                    keys.join(", ")
                ),
                QueueFate::Kept => continue,
            };
            out += &format!("  memory region {}: {fate}\n", r.name);
        }
        for r in &self.rules {
            let mut parts = Vec::new();
            for (what, names) in [
                ("added", &r.added),
                ("removed", &r.removed),
                ("changed", &r.changed),
                ("also", &r.other),
            ] {
                if !names.is_empty() {
                    parts.push(format!("{what} {}", names.join(", ")));
                }
            }
            out += &format!(
                "  rules of {}: {} (one switch: each packet meets the old rules or the new)\n",
                r.interface,
                parts.join("; ")
            );
        }
        if self.is_empty() {
            out += "nothing changes\n";
        } else if self.is_live() {
            out +=
                "live: a running plane makes this change while traffic flows (DataPlane::change)\n";
        } else {
            out += "not live, needs a restart:\n";
            for n in &self.not_live {
                out += &format!("  {n}\n");
            }
        }
        out
    }

    /// Takes back the refusal of each removed queue for which `closes` says the running
    /// engine can close it after all: one the plan alone cannot tell apart, such as an RX
    /// queue added to a UDP interface while it ran (no socket of its own), which looks
    /// like one that reads a socket.
    pub fn allow_removals(&mut self, closes: impl Fn(&QueueChange) -> bool) {
        let allowed: Vec<String> = self
            .queues
            .iter()
            .filter(|q| q.fate == QueueFate::Removed && closes(q))
            .map(QueueChange::key)
            .collect();
        self.not_live.retain(|n| !allowed.contains(&n.key));
    }

    /// Lifts the refusal of rule changes on the interfaces whose rules the running engine
    /// steers in software after all (a DPDK port whose device could not take them): the
    /// plane switches their rules as the loopback's.
    pub fn allow_software_rules(&mut self, in_software: impl Fn(usize) -> bool) {
        let allowed: Vec<String> = self
            .rules
            .iter()
            .filter(|r| in_software(r.port))
            .map(|r| rules_key(&r.interface))
            .collect();
        self.not_live.retain(|n| !allowed.contains(&n.key));
    }

    fn refuse(&mut self, key: impl Into<String>, reason: impl Into<String>) {
        self.not_live.push(NotLive {
            key: key.into(),
            reason: reason.into(),
        });
    }

    /// Plane-wide settings: fixed while the plane runs.
    fn plane_keys(&mut self, old: &Config, new: &Config) {
        let fixed = "set when the plane starts";
        if old.engine != new.engine || old.stream_type != new.stream_type {
            self.refuse("engine", "the engine is chosen when the plane starts");
        }
        for (key, differs) in [
            ("master_core", old.master_core != new.master_core),
            (
                "log_level",
                old.log_level != new.log_level || old.debug != new.debug,
            ),
            ("gpu_stage", !same(&old.gpu_stage, &new.gpu_stage)),
            ("metrics", !same(&old.metrics, &new.metrics)),
            ("bench", !same(&old.bench, &new.bench)),
        ] {
            if differs {
                self.refuse(
                    key,
                    if key == "bench" {
                        "read by a bench when it starts; a running plane has nothing to apply it to"
                    } else {
                        fixed
                    },
                );
            }
        }
    }

    /// Regions added, removed or changed, in the running plan's ids (`slotted`). The
    /// loopback and the sockets take them live; the other engines' devices took the
    /// regions at start (DPDK's mbuf pools, RDMA's memory registrations).
    fn regions(&mut self, old: &Plan, planned: &Plan, slotted: &Plan) {
        fn live(p: &Plan) -> Vec<&super::RegionPlan> {
            p.regions.iter().filter(|r| !r.retired).collect()
        }
        let (before, after) = (live(old), live(slotted));
        for r in &after {
            let fate = match before.iter().find(|o| o.name == r.name) {
                None => QueueFate::Added,
                Some(o) if !o.same_memory(r) => QueueFate::Changed(region_fields_changed(o, r)),
                Some(_) => continue,
            };
            self.regions.push(RegionChange {
                name: r.name.clone(),
                fate,
            });
        }
        for o in &before {
            if !after.iter().any(|r| r.name == o.name) {
                self.regions.push(RegionChange {
                    name: o.name.clone(),
                    fate: QueueFate::Removed,
                });
            }
        }
        if matches!(old.engine, EngineKind::Loopback | EngineKind::Socket) {
            return;
        }
        let reason = "the engine's device took the regions when the plane started (DPDK's mbuf pools, RDMA's memory registrations); adding, removing, resizing or reordering one needs a restart";
        let refusals: Vec<(String, String)> = self
            .regions
            .iter()
            .map(|r| {
                (
                    format!("memory_regions `{}`", r.name),
                    format!("{}: {reason}", r.fate.short()),
                )
            })
            .collect();
        let none_refused = refusals.is_empty();
        for (key, why) in refusals {
            self.refuse(key, why);
        }
        if none_refused && planned.renumbers_regions(old) {
            self.refuse("memory_regions", format!("reordered: {reason}"));
        }
    }

    /// Interfaces stay the same ones, in the same order, with the same settings outside
    /// their queues and RX rules. False when they do not.
    fn interfaces(&mut self, old: &Config, new: &Config) -> bool {
        let names = |c: &Config| {
            c.interfaces
                .iter()
                .map(|i| i.name.clone())
                .collect::<Vec<_>>()
        };
        if names(old) != names(new) {
            self.refuse(
                "interfaces",
                format!(
                    "the interfaces are opened when the plane starts: {:?} would become {:?}",
                    names(old),
                    names(new)
                ),
            );
            return false;
        }
        for (o, n) in old.interfaces.iter().zip(&new.interfaces) {
            for key in interface_keys_changed(o, n) {
                self.refuse(
                    format!("interfaces `{}`: {key}", n.name),
                    "set when the interface opens",
                );
            }
        }
        true
    }

    /// Every queue of either plan by (interface, direction, id).
    fn queues(&mut self, old: &Plan, new: &Plan) {
        let key = |q: &QueuePlan| (q.interface_name.clone(), q.direction == Direction::Tx, q.id);
        let before: BTreeMap<_, &QueuePlan> = old.queues.iter().map(|q| (key(q), q)).collect();
        let after: BTreeMap<_, &QueuePlan> = new.queues.iter().map(|q| (key(q), q)).collect();
        for (k, q) in &before {
            let fate = match after.get(k) {
                None => QueueFate::Removed,
                Some(n) => match fields_changed(q, n) {
                    keys if keys.is_empty() => QueueFate::Kept,
                    keys => QueueFate::Changed(keys),
                },
            };
            self.queues.push(QueueChange {
                interface: q.interface_name.clone(),
                port: q.interface,
                direction: q.direction,
                id: q.id,
                fate,
                note: None,
            });
        }
        for (k, q) in &after {
            if !before.contains_key(k) {
                self.queues.push(QueueChange {
                    interface: q.interface_name.clone(),
                    port: q.interface,
                    direction: q.direction,
                    id: q.id,
                    fate: QueueFate::Added,
                    note: None,
                });
            }
        }
    }

    /// What of the queue changes the running plane can do.
    fn live_queues(&mut self, old: &Plan, new: &Plan) {
        let mut refusals = Vec::new();
        for q in &mut self.queues {
            if q.fate == QueueFate::Added {
                q.note = added_note(new, q);
            }
            let key = q.key();
            match &q.fate {
                QueueFate::Kept => {}
                QueueFate::Added => {
                    if let Some(why) = queue_fixed(new, q) {
                        refusals.push((key, format!("added: {why}")));
                    }
                }
                QueueFate::Changed(keys) => refusals.push((key, format!("changed ({}): a running queue keeps its settings; remove it in one change and add it back in the next", keys.join(", ")))),
                QueueFate::Removed => {
                    if let Some(why) = queue_fixed(old, q) {
                        refusals.push((key, format!("removed: {why}")));
                    }
                }
            }
        }
        for (key, reason) in refusals {
            self.refuse(key, reason);
        }
    }

    /// The RX rules of each interface (the interfaces are the same ones).
    fn rules(&mut self, old: (&Config, &Plan), new: (&Config, &Plan)) {
        let empty = RxConfig::empty();
        for (port, (o, n)) in old.0.interfaces.iter().zip(&new.0.interfaces).enumerate() {
            let (a, b) = (
                o.rx.as_ref().unwrap_or(&empty),
                n.rx.as_ref().unwrap_or(&empty),
            );
            let r = rules_changed(&n.name, port, a, b);
            if r == (RulesChange {
                interface: n.name.clone(),
                port,
                ..Default::default()
            }) {
                continue;
            }
            if old.1.capabilities.hardware_steering {
                self.refuse(
                    rules_key(&n.name),
                    "the rules are on the device (rte_flow): change them flow by flow (DataPlane::add_flow, remove_flow)",
                );
            }
            self.rules.push(r);
        }
    }
}

/// The key a refused rule change is named by.
fn rules_key(interface: &str) -> String {
    format!("interfaces `{interface}`: rx.flows")
}

/// A queue's fate for people.
fn fate_text(fate: &QueueFate) -> String {
    match fate {
        QueueFate::Kept => "kept, loses nothing".to_owned(),
        QueueFate::Added => "added".to_owned(),
        QueueFate::Removed => "removed (hands over what it holds, then stops)".to_owned(),
        QueueFate::Changed(keys) => format!("changed: {}", keys.join(", ")),
    }
}

/// The socket plan of the interface of queue `q`, when `plan` runs kernel sockets.
fn socket_interface<'p>(plan: &'p Plan, q: &QueueChange) -> Option<&'p SocketInterfacePlan> {
    match &plan.engine_plan {
        EnginePlan::Socket(interfaces) => interfaces.iter().find(|i| i.name == q.interface),
        _ => None,
    }
}

/// How added queue `q` runs until a restart, where a start would run it otherwise.
fn added_note(plan: &Plan, q: &QueueChange) -> Option<String> {
    if plan.engine == EngineKind::Dpdk && q.direction == Direction::Rx {
        return Some("no device queue of its own until a restart: it receives what the rules steer to it from the port's device queues (only where they run in software; a port whose device places packets refuses it)".to_owned());
    }
    let iface = socket_interface(plan, q)?;
    (iface.transport == Transport::Udp && q.direction == Direction::Rx).then(|| {
        "no socket of its own until a restart: it receives what the rules steer to it from the interface's sockets".to_owned()
    })
}

/// Why the running plane cannot add or remove queue `q` (planned in `plan`), if it
/// cannot.
fn queue_fixed(plan: &Plan, q: &QueueChange) -> Option<String> {
    let planned = plan
        .queues
        .iter()
        .find(|p| p.interface == q.port && p.direction == q.direction && p.id == q.id)?;
    let on_handler_core = plan
        .cores
        .iter()
        .any(|c| c.handler && c.core == planned.core);
    if planned.delivery == crate::config::Delivery::Handler || on_handler_core {
        return Some(
            "on a handler core: its worker's handler was made for the queues it serves".into(),
        );
    }
    match plan.engine {
        EngineKind::Loopback => None,
        EngineKind::Socket => {
            let iface = socket_interface(plan, q)?;
            match (iface.transport, q.direction, &q.fate) {
                (Transport::Udp, Direction::Tx, _) | (Transport::Udp, Direction::Rx, QueueFate::Added) => None,
                (Transport::Udp, Direction::Rx, _) => Some("an RX queue of a UDP interface reads a socket of its SO_REUSEPORT group; the kernel keeps sending that socket its share of the flows until a restart (a running plane removes one it added live, which has no socket)".into()),
                _ => Some("a TCP interface's queues are its connections, made when it starts".into()),
            }
        }
        // An RX queue without a device queue of its own, where the rules run in software
        // (the engine refuses it on a port whose device places packets).
        EngineKind::Dpdk if q.direction == Direction::Rx && q.fate == QueueFate::Added => None,
        EngineKind::Dpdk | EngineKind::Ibverbs => Some("the device spreads packets over the queues its port started with; their number is fixed while the port runs (a running plane removes an RX queue it added live, which has no device queue)".into()),
        EngineKind::Rdma => Some("RDMA queues are connection slots".into()),
    }
}

/// Interface settings outside the queues and the RX rules that differ.
fn interface_keys_changed(o: &InterfaceConfig, n: &InterfaceConfig) -> Vec<&'static str> {
    let mut keys = Vec::new();
    let empty_rx = RxConfig::empty();
    let (orx, nrx) = (
        o.rx.as_ref().unwrap_or(&empty_rx),
        n.rx.as_ref().unwrap_or(&empty_rx),
    );
    for (key, differs) in [
        ("address", o.address != n.address),
        ("socket_config", !same(&o.socket, &n.socket)),
        ("roce_config", !same(&o.roce, &n.roce)),
        ("fault_injection", !same(&o.faults, &n.faults)),
        ("multicast_groups", !same(&o.multicast, &n.multicast)),
        ("rx.reorder_configs", !same(&orx.reorder, &nrx.reorder)),
        (
            "rx.dynamic_flow_capacity",
            orx.dynamic_flow_capacity != nrx.dynamic_flow_capacity,
        ),
        ("rx.hardware_timestamps", orx.timestamps != nrx.timestamps),
        ("rx.descriptors", orx.descriptors != nrx.descriptors),
        // A missing `tx` section is one with every key at its default (a change may add
        // the first TX queue).
        (
            "tx.accurate_send",
            o.tx.as_ref().is_some_and(|t| t.accurate_send)
                != n.tx.as_ref().is_some_and(|t| t.accurate_send),
        ),
        (
            "tx.descriptors",
            o.tx.as_ref().and_then(|t| t.descriptors) != n.tx.as_ref().and_then(|t| t.descriptors),
        ),
        (
            "tx.flows",
            !same(
                o.tx.as_ref().map_or(&[][..], |t| &t.flows[..]),
                n.tx.as_ref().map_or(&[][..], |t| &t.flows[..]),
            ),
        ),
    ] {
        if differs {
            keys.push(key);
        }
    }
    keys
}

/// Planned fields of a region that differ, by their configuration keys (the stride and
/// headroom follow from them).
fn region_fields_changed(o: &super::RegionPlan, n: &super::RegionPlan) -> Vec<String> {
    [
        ("kind", o.kind != n.kind),
        (
            "affinity",
            o.affinity != n.affinity || o.gpu_uuid != n.gpu_uuid,
        ),
        ("num_bufs", o.num_bufs != n.num_bufs),
        ("buf_size", o.buf_size != n.buf_size),
        // What the memory is; why a region is not lent is an explanation, not a setting.
        (
            "zero_copy",
            o.lent != n.lent || o.headroom != n.headroom || o.stride != n.stride,
        ),
    ]
    .into_iter()
    .filter(|(_, differs)| *differs)
    .map(|(key, _)| key.to_owned())
    .collect()
}

/// Planned fields of a queue that differ, by their configuration keys (its key path is
/// where it stands in the file, not part of what it is).
fn fields_changed(o: &QueuePlan, n: &QueuePlan) -> Vec<String> {
    [
        (
            "memory_regions",
            o.segments != n.segments || o.staging != n.staging,
        ),
        ("cpu_core", o.core != n.core),
        ("batch_size", o.batch != n.batch),
        // Its bursts follow from the batch size when that changed.
        (
            "ring_packets",
            o.ring_bursts != n.ring_bursts && o.batch == n.batch,
        ),
        ("timeout_us", o.timeout_us != n.timeout_us),
        (
            "layout",
            o.stage != n.stage || o.host_memory_only != n.host_memory_only,
        ),
        (
            "stage_core",
            o.stage_core != n.stage_core || o.copy_cores != n.copy_cores,
        ),
        ("reorder", !same(&o.reorders, &n.reorders)),
        ("offloads", o.eth_src != n.eth_src),
        (
            "tx.flows",
            !same(&o.tx_flows, &n.tx_flows) || o.transform_region != n.transform_region,
        ),
        ("rate_limit", o.pacing_mbps != n.pacing_mbps),
        (
            "timestamps",
            o.timestamps != n.timestamps || o.send_at_time != n.send_at_time,
        ),
        ("capture", !same(&o.capture, &n.capture)),
        ("delivery", o.delivery != n.delivery),
        ("protocol", o.protocol != n.protocol),
    ]
    .into_iter()
    .filter(|(_, differs)| *differs)
    .map(|(key, _)| key.to_owned())
    .collect()
}

/// How `b`'s rules differ from `a`'s.
fn rules_changed(interface: &str, port: usize, a: &RxConfig, b: &RxConfig) -> RulesChange {
    let mut r = RulesChange {
        interface: interface.to_owned(),
        port,
        ..Default::default()
    };
    for f in &b.flows {
        match a.flows.iter().find(|o| o.id == f.id) {
            None => r.added.push(f.name.clone()),
            Some(o) if !same(o, f) => r.changed.push(f.name.clone()),
            Some(_) => {}
        }
    }
    for o in &a.flows {
        if !b.flows.iter().any(|f| f.id == o.id) {
            r.removed.push(o.name.clone());
        }
    }
    let order = |c: &RxConfig| c.flows.iter().map(|f| f.id).collect::<Vec<_>>();
    if r.added.is_empty() && r.removed.is_empty() && order(a) != order(b) {
        r.other.push("flow order".into());
    }
    let ids = |c: &RxConfig| {
        let mut v: Vec<u16> = c.queues.iter().map(|q| q.id).collect();
        v.sort_unstable();
        v
    };
    for (key, differs) in [
        ("flow_isolation", a.flow_isolation != b.flow_isolation),
        ("exception_queue", a.exception_queue != b.exception_queue),
        ("flex_items", !same(&a.flex_items, &b.flex_items)),
        ("queues", ids(a) != ids(b)),
    ] {
        if differs {
            r.other.push(key.into());
        }
    }
    r
}
