//! The flow-steering rule model (`rx.flows`) translated to rte_flow: patterns from the
//! match fields, a MARK with the flow id, QUEUE or RSS to the hardware queues, and the
//! header transforms as actions. Translation is plain data (tested without a device);
//! [`install`] validates every rule with the device before it creates any, and
//! [`InstalledFlows`] destroys them in creation order.

use crate::config::{FlowConfig, FlowTransform, TunnelKind};
use crate::plan::dpdk::PortFlows;
use dpdk_sys as sys;
use std::mem::size_of;

/// eCPRI's EtherType (eCPRI directly over Ethernet).
const ETHERTYPE_ECPRI: u16 = 0xAEFE;

/// One pattern item: spec, last (ranges) and mask in the rte_flow item layout; an empty
/// spec matches any header of this kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// rte_flow item type.
    pub kind: sys::rte_flow_item_type,
    /// Values to match.
    pub spec: Vec<u8>,
    /// Upper ends of ranges (empty: no range).
    pub last: Vec<u8>,
    /// Bits that take part.
    pub mask: Vec<u8>,
}

impl Item {
    fn any(kind: sys::rte_flow_item_type) -> Self {
        Self {
            kind,
            spec: Vec::new(),
            last: Vec::new(),
            mask: Vec::new(),
        }
    }

    fn sized(kind: sys::rte_flow_item_type, size: usize) -> Self {
        Self {
            kind,
            spec: vec![0; size],
            last: Vec::new(),
            mask: vec![0; size],
        }
    }

    /// Sets a big-endian field at `offset` to `value` under `mask`.
    fn field(&mut self, offset: usize, value: &[u8], mask: &[u8]) {
        self.spec[offset..offset + value.len()].copy_from_slice(value);
        self.mask[offset..offset + mask.len()].copy_from_slice(mask);
    }

    /// Sets the upper end of a range field (the spec holds the lower end).
    fn range_end(&mut self, offset: usize, value: &[u8]) {
        if self.last.is_empty() {
            self.last = self.spec.clone();
        }
        self.last[offset..offset + value.len()].copy_from_slice(value);
    }
}

/// One action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Tag packets with the flow id (read back from the mbuf).
    Mark(u32),
    /// Deliver to one hardware queue.
    Queue(u16),
    /// Spread over hardware queues by RSS hash of the IP addresses and UDP ports.
    Rss(Vec<u16>),
    /// Remove the outer VLAN tag.
    PopVlan,
    /// Remove VXLAN outer headers.
    VxlanDecap,
    /// Remove NVGRE outer headers.
    NvgreDecap,
}

/// One rte_flow rule: the flow it came from, its priority (0 is the highest) and contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Flow name for messages.
    pub flow: String,
    /// Flow id (0 for the exception queue's catch-all).
    pub flow_id: u32,
    /// Priority: the flow's position, so that the first matching flow wins as in software.
    pub priority: u32,
    /// Pattern, without the END item.
    pub items: Vec<Item>,
    /// Actions, without the END action.
    pub actions: Vec<Action>,
}

/// Translates a port's planned flows (plus the exception queue under isolation) to
/// rte_flow rules.
/// `hw_queue` maps a queue id to the device's queue index; `mark` adds a MARK action
/// carrying the flow id. Errors name the flow and the part that has no rte_flow form.
pub fn translate(
    rx: &PortFlows,
    hw_queue: &dyn Fn(u16) -> Option<u16>,
    mark: bool,
) -> Result<Vec<Rule>, FlowError> {
    let mut rules = Vec::with_capacity(rx.flows.len() + 1);
    for (i, flow) in rx.flows.iter().enumerate() {
        rules.push(translate_flow(flow, i as u32, hw_queue, mark)?);
    }
    if rx.isolation
        && let Some(q) = rx.exception_queue
    {
        // Below the static rules and the places reserved for flows added at run time.
        rules.push(Rule {
            flow: "exception_queue".into(),
            flow_id: 0,
            priority: rx.flows.len() as u32 + rx.dynamic_flow_capacity,
            items: vec![Item::any(sys::rte_flow_item_type_RTE_FLOW_ITEM_TYPE_ETH)],
            actions: vec![Action::Queue(queue_index(hw_queue, q, "exception_queue")?)],
        });
    }
    Ok(rules)
}

fn queue_index(
    hw_queue: &dyn Fn(u16) -> Option<u16>,
    q: u16,
    flow: &str,
) -> Result<u16, FlowError> {
    hw_queue(q).ok_or_else(|| FlowError::Untranslatable {
        flow: flow.to_owned(),
        what: format!("queue {q} is not an RX queue of the port"),
    })
}

/// Translates one flow to its rte_flow rule at `priority`.
pub fn translate_flow(
    flow: &FlowConfig,
    priority: u32,
    hw_queue: &dyn Fn(u16) -> Option<u16>,
    mark: bool,
) -> Result<Rule, FlowError> {
    let m = &flow.matches;
    if m.flex.is_some() {
        return Err(FlowError::Untranslatable {
            flow: flow.name.clone(),
            what: "flex items are not translated to rte_flow".into(),
        });
    }
    let mut items = Vec::new();
    // dst(6) src(6) type(2); the type after a VLAN tag is the VLAN item's inner type.
    let mut eth = Item::sized(
        sys::rte_flow_item_type_RTE_FLOW_ITEM_TYPE_ETH,
        size_of::<sys::rte_flow_item_eth>(),
    );
    let e = m.ethernet.unwrap_or_default();
    if let Some(dst) = e.dst {
        eth.field(0, &dst, &[0xff; 6]);
    }
    if let Some(src) = e.src {
        eth.field(6, &src, &[0xff; 6]);
    }
    let ethertype = e.ethertype.or(m.ecpri.map(|_| ETHERTYPE_ECPRI));
    let any_if_empty = |item: Item| {
        if item.mask.iter().all(|&b| b == 0) {
            Item::any(item.kind)
        } else {
            item
        }
    };
    if let Some(vid) = m.vlan_id {
        items.push(any_if_empty(eth));
        let mut vlan = Item::sized(
            sys::rte_flow_item_type_RTE_FLOW_ITEM_TYPE_VLAN,
            size_of::<sys::rte_flow_item_vlan>(),
        );
        vlan.field(0, &vid.to_be_bytes(), &0x0fffu16.to_be_bytes());
        if let Some(t) = ethertype {
            vlan.field(2, &t.to_be_bytes(), &[0xff, 0xff]);
        }
        items.push(vlan);
    } else {
        if let Some(t) = ethertype {
            eth.field(12, &t.to_be_bytes(), &[0xff, 0xff]);
        }
        items.push(any_if_empty(eth));
    }
    if let Some(e) = &m.ecpri {
        let mut ecpri = Item::sized(
            sys::rte_flow_item_type_RTE_FLOW_ITEM_TYPE_ECPRI,
            size_of::<sys::rte_flow_item_ecpri>(),
        );
        // Common header: revision/c, message type, payload size; then PC_ID or RTC_ID.
        if let Some(t) = e.msg_type {
            ecpri.field(1, &[t], &[0xff]);
        }
        if let Some(id) = e.id {
            ecpri.field(4, &id.to_be_bytes(), &[0xff, 0xff]);
        }
        items.push(ecpri);
    } else if m.has_ip_fields() {
        // As the software classifier: IPv4 fields match any IPv4 packet, UDP fields only
        // UDP; a flow with neither matches every frame its Ethernet fields accept.
        let mut ip = Item::sized(
            sys::rte_flow_item_type_RTE_FLOW_ITEM_TYPE_IPV4,
            size_of::<sys::rte_flow_item_ipv4>(),
        );
        // version/ihl(1) tos(1) total_length(2) id(2) frag(2) ttl(1) proto(1) csum(2) src(4) dst(4)
        if let Some(len) = m.ipv4_len {
            ip.field(2, &len.to_be_bytes(), &[0xff, 0xff]);
        }
        if let Some(p) = m.ipv4_src {
            ip.field(12, &p.addr.octets(), &p.mask().to_be_bytes());
        }
        if let Some(p) = m.ipv4_dst {
            ip.field(16, &p.addr.octets(), &p.mask().to_be_bytes());
        }
        items.push(any_if_empty(ip));
        if m.udp_src.is_some() || m.udp_dst.is_some() {
            let mut udp = Item::sized(
                sys::rte_flow_item_type_RTE_FLOW_ITEM_TYPE_UDP,
                size_of::<sys::rte_flow_item_udp>(),
            );
            for (offset, range) in [(0, m.udp_src), (2, m.udp_dst)] {
                if let Some(r) = range {
                    udp.field(offset, &r.first.to_be_bytes(), &[0xff, 0xff]);
                    if r.last != r.first {
                        udp.range_end(offset, &r.last.to_be_bytes());
                    }
                }
            }
            items.push(udp);
        }
    }

    let mut actions = Vec::new();
    for t in &flow.transforms {
        actions.push(match t {
            FlowTransform::VlanPop => Action::PopVlan,
            FlowTransform::TunnelDecap(tc) => match tc.kind {
                TunnelKind::Vxlan => Action::VxlanDecap,
                TunnelKind::Nvgre => Action::NvgreDecap,
                other => {
                    return Err(FlowError::Untranslatable {
                        flow: flow.name.clone(),
                        what: format!("tunnel_decap of {other:?} is not translated to rte_flow"),
                    });
                }
            },
        });
    }
    if mark {
        actions.push(Action::Mark(flow.id));
    }
    let queues = flow
        .queue_ids
        .iter()
        .map(|&q| queue_index(hw_queue, q, &flow.name))
        .collect::<Result<Vec<_>, _>>()?;
    actions.push(if queues.len() == 1 {
        Action::Queue(queues[0])
    } else {
        Action::Rss(queues)
    });
    Ok(Rule {
        flow: flow.name.clone(),
        flow_id: flow.id,
        priority,
        items,
        actions,
    })
}

/// Rules created on a port; destroyed in creation order by [`InstalledFlows::destroy`] or
/// on drop.
pub struct InstalledFlows {
    port_id: u16,
    /// Flow name, flow id and handle, in creation order.
    flows: Vec<(String, u32, *mut sys::rte_flow)>,
}

// SAFETY: rte_flow handles are plain tokens for the control path, used from one thread at
// a time (the engine's owner).
unsafe impl Send for InstalledFlows {}
// SAFETY: shared access never touches the handles.
unsafe impl Sync for InstalledFlows {}

impl InstalledFlows {
    /// No rule yet on `port_id`.
    pub fn none(port_id: u16) -> Self {
        Self {
            port_id,
            flows: Vec::new(),
        }
    }

    /// Number of rules on the device.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// True when no rule was created.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// Destroys every rule, in creation order.
    pub fn destroy(&mut self) {
        for (name, _, f) in self.flows.drain(..) {
            let mut err = sys::rte_flow_error::default();
            // SAFETY: a handle created on this port and destroyed once.
            if unsafe { sys::rte_flow_destroy(self.port_id, f, &mut err) } != 0 {
                tracing::warn!(
                    "port {}: {}",
                    self.port_id,
                    flow_error(format!("destroying flow `{name}`"), &err)
                );
            }
        }
    }
}

impl InstalledFlows {
    /// Validates and creates one more rule.
    pub fn create(&mut self, rule: &Rule) -> Result<(), FlowError> {
        let raw = RawRule::new(rule);
        let mut err = sys::rte_flow_error::default();
        // SAFETY: END-terminated arrays whose pointers target `rule` and `raw`, both alive
        // for the calls.
        let rc = unsafe {
            sys::rte_flow_validate(
                self.port_id,
                &raw.attr,
                raw.items.as_ptr(),
                raw.actions.as_ptr(),
                &mut err,
            )
        };
        if rc != 0 {
            return Err(flow_error(
                format!("flow `{}` rejected by rte_flow_validate", rule.flow),
                &err,
            ));
        }
        // SAFETY: as above.
        let f = unsafe {
            sys::rte_flow_create(
                self.port_id,
                &raw.attr,
                raw.items.as_ptr(),
                raw.actions.as_ptr(),
                &mut err,
            )
        };
        if f.is_null() {
            return Err(flow_error(
                format!("flow `{}` rejected by rte_flow_create", rule.flow),
                &err,
            ));
        }
        self.flows.push((rule.flow.clone(), rule.flow_id, f));
        Ok(())
    }

    /// Destroys the rule of flow `flow_id` (a flow added at run time).
    pub fn destroy_flow(&mut self, flow_id: u32) -> Result<(), FlowError> {
        let Some(at) = self
            .flows
            .iter()
            .position(|(_, id, _)| *id == flow_id && flow_id != 0)
        else {
            return Err(FlowError::Untranslatable {
                flow: format!("flow id {flow_id}"),
                what: "no rule with this flow id is on the device".into(),
            });
        };
        let mut err = sys::rte_flow_error::default();
        // SAFETY: a handle created on this port, destroyed once (removed from the list).
        if unsafe { sys::rte_flow_destroy(self.port_id, self.flows[at].2, &mut err) } != 0 {
            return Err(flow_error(
                format!("destroying flow `{}`", self.flows[at].0),
                &err,
            ));
        }
        self.flows.remove(at);
        Ok(())
    }
}

impl Drop for InstalledFlows {
    fn drop(&mut self) {
        self.destroy();
    }
}

/// Why flow rules could not be put on a device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlowError {
    /// A rule has no rte_flow form.
    #[error("flow `{flow}`: {what}")]
    Untranslatable {
        /// The flow's name.
        flow: String,
        /// The part that has no rte_flow form.
        what: String,
    },
    /// The PMD refused a call.
    #[error("{what}: {message} (rte_flow error type {kind})")]
    Refused {
        /// The call and the flow.
        what: String,
        /// The PMD's message.
        message: String,
        /// rte_flow's error type.
        kind: u32,
    },
}

/// `what`, the PMD's message and the error type.
pub(super) fn flow_error(what: String, err: &sys::rte_flow_error) -> FlowError {
    // SAFETY: the PMD sets a NUL-terminated static message, or none.
    let message = unsafe { super::error::c_text(err.message, "no message") };
    FlowError::Refused {
        what,
        message,
        kind: err.type_,
    }
}

/// Configuration an action's `conf` points at.
enum Conf {
    None,
    Mark(sys::rte_flow_action_mark),
    Queue(sys::rte_flow_action_queue),
    Rss(sys::rte_flow_action_rss),
}

/// The C view of one rule; borrows the rule's bytes, so it lives only for one call.
struct RawRule {
    attr: sys::rte_flow_attr,
    items: Vec<sys::rte_flow_item>,
    actions: Vec<sys::rte_flow_action>,
    // Targets of the actions' `conf` pointers: filled before any pointer is taken and
    // never changed after, so the addresses stay valid.
    _confs: Vec<Conf>,
}

fn ptr_or_null(v: &[u8]) -> *const std::ffi::c_void {
    if v.is_empty() {
        std::ptr::null()
    } else {
        v.as_ptr().cast()
    }
}

impl RawRule {
    fn new(rule: &Rule) -> Self {
        let mut attr = sys::rte_flow_attr {
            priority: rule.priority,
            ..Default::default()
        };
        attr.set_ingress(1);
        let mut items: Vec<_> = rule
            .items
            .iter()
            .map(|i| sys::rte_flow_item {
                type_: i.kind,
                spec: ptr_or_null(&i.spec),
                last: ptr_or_null(&i.last),
                mask: if i.spec.is_empty() {
                    std::ptr::null()
                } else {
                    ptr_or_null(&i.mask)
                },
            })
            .collect();
        items.push(sys::rte_flow_item {
            type_: sys::rte_flow_item_type_RTE_FLOW_ITEM_TYPE_END,
            spec: std::ptr::null(),
            last: std::ptr::null(),
            mask: std::ptr::null(),
        });
        let (types, confs): (Vec<_>, Vec<_>) = rule
            .actions
            .iter()
            .map(|a| match a {
                Action::Mark(id) => (
                    sys::rte_flow_action_type_RTE_FLOW_ACTION_TYPE_MARK,
                    Conf::Mark(sys::rte_flow_action_mark { id: *id }),
                ),
                Action::Queue(index) => (
                    sys::rte_flow_action_type_RTE_FLOW_ACTION_TYPE_QUEUE,
                    Conf::Queue(sys::rte_flow_action_queue { index: *index }),
                ),
                Action::Rss(list) => (
                    sys::rte_flow_action_type_RTE_FLOW_ACTION_TYPE_RSS,
                    Conf::Rss(sys::rte_flow_action_rss {
                        func: sys::rte_eth_hash_function_RTE_ETH_HASH_FUNCTION_DEFAULT,
                        level: 0,
                        // SAFETY: reads a constant defined in the shim.
                        types: unsafe { sys::shim_rss_ip_udp },
                        key_len: 0,
                        queue_num: list.len() as u32,
                        key: std::ptr::null(),
                        queue: list.as_ptr(),
                    }),
                ),
                Action::PopVlan => (
                    sys::rte_flow_action_type_RTE_FLOW_ACTION_TYPE_OF_POP_VLAN,
                    Conf::None,
                ),
                Action::VxlanDecap => (
                    sys::rte_flow_action_type_RTE_FLOW_ACTION_TYPE_VXLAN_DECAP,
                    Conf::None,
                ),
                Action::NvgreDecap => (
                    sys::rte_flow_action_type_RTE_FLOW_ACTION_TYPE_NVGRE_DECAP,
                    Conf::None,
                ),
            })
            .unzip();
        let mut actions: Vec<_> = types
            .into_iter()
            .zip(&confs)
            .map(|(type_, conf)| sys::rte_flow_action {
                type_,
                conf: match conf {
                    Conf::None => std::ptr::null(),
                    Conf::Mark(c) => std::ptr::from_ref(c).cast(),
                    Conf::Queue(c) => std::ptr::from_ref(c).cast(),
                    Conf::Rss(c) => std::ptr::from_ref(c).cast(),
                },
            })
            .collect();
        actions.push(sys::rte_flow_action {
            type_: sys::rte_flow_action_type_RTE_FLOW_ACTION_TYPE_END,
            conf: std::ptr::null(),
        });
        Self {
            attr,
            items,
            actions,
            _confs: confs,
        }
    }
}

/// Validates every rule on `port_id`, then creates them in order. On any failure nothing
/// stays on the device and the error names the flow and the PMD's reason.
pub fn install(port_id: u16, rules: &[Rule]) -> Result<InstalledFlows, FlowError> {
    let raw: Vec<RawRule> = rules.iter().map(RawRule::new).collect();
    for (rule, r) in rules.iter().zip(&raw) {
        let mut err = sys::rte_flow_error::default();
        // SAFETY: attr, pattern and actions are END-terminated arrays whose pointers target
        // `rules` and `raw`, both alive for the call.
        let rc = unsafe {
            sys::rte_flow_validate(
                port_id,
                &r.attr,
                r.items.as_ptr(),
                r.actions.as_ptr(),
                &mut err,
            )
        };
        if rc != 0 {
            return Err(flow_error(
                format!("flow `{}` rejected by rte_flow_validate", rule.flow),
                &err,
            ));
        }
    }
    let mut installed = InstalledFlows {
        port_id,
        flows: Vec::new(),
    };
    for (rule, r) in rules.iter().zip(&raw) {
        let mut err = sys::rte_flow_error::default();
        // SAFETY: as for validation.
        let f = unsafe {
            sys::rte_flow_create(
                port_id,
                &r.attr,
                r.items.as_ptr(),
                r.actions.as_ptr(),
                &mut err,
            )
        };
        if f.is_null() {
            // Dropping `installed` destroys what was created so far.
            return Err(flow_error(
                format!("flow `{}` rejected by rte_flow_create", rule.flow),
                &err,
            ));
        }
        installed.flows.push((rule.flow.clone(), rule.flow_id, f));
    }
    Ok(installed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rx(flows_yaml: &str) -> PortFlows {
        let text = format!(
            config_yaml!(
                raw,
                0,
                r#"    memory_regions:
    - {{name: b, kind: host, affinity: 0, num_bufs: 4096, buf_size: 2048}}
    interfaces:
    - name: a
      address: net_null0
      rx:
        flow_isolation: true
        exception_queue: 7
        queues:
        - {{name: q1, id: 1, cpu_core: 0, batch_size: 32, memory_regions: [b]}}
        - {{name: q3, id: 3, cpu_core: 0, batch_size: 32, memory_regions: [b]}}
        - {{name: q7, id: 7, cpu_core: 0, batch_size: 32, memory_regions: [b]}}
        flows:
{flows_yaml}
"#
            ),
            flows_yaml = flows_yaml
        );
        let cfg = crate::config::load_with(&text, "t", &|_| true)
            .unwrap()
            .config;
        let rx = cfg.interfaces[0].rx.clone().unwrap();
        PortFlows {
            flows: rx.flows,
            isolation: rx.flow_isolation,
            exception_queue: rx.exception_queue,
            dynamic_flow_capacity: rx.dynamic_flow_capacity,
        }
    }

    fn hw(q: u16) -> Option<u16> {
        [1, 3, 7].iter().position(|&x| x == q).map(|i| i as u16)
    }

    #[test]
    fn udp_ipv4_flow_becomes_pattern_and_mark_queue() {
        let r = rx(r#"        - name: f
          id: 42
          action: {type: queue, id: 3}
          match: {udp_src: 4096, udp_dst: "5000-5010", ipv4_dst: 10.0.0.0/8}
"#);
        let rules = translate(&r, &hw, true).unwrap();
        assert_eq!(rules.len(), 2, "the flow plus the exception rule");
        let f = &rules[0];
        assert_eq!(f.priority, 0);
        assert_eq!(
            f.actions,
            vec![Action::Mark(42), Action::Queue(1)],
            "queue id 3 is the port's second queue"
        );
        let kinds: Vec<_> = f.items.iter().map(|i| i.kind).collect();
        assert_eq!(
            kinds,
            vec![
                sys::rte_flow_item_type_RTE_FLOW_ITEM_TYPE_ETH,
                sys::rte_flow_item_type_RTE_FLOW_ITEM_TYPE_IPV4,
                sys::rte_flow_item_type_RTE_FLOW_ITEM_TYPE_UDP
            ]
        );
        assert!(f.items[0].spec.is_empty(), "any Ethernet header");
        let ip = &f.items[1];
        assert_eq!(&ip.spec[16..20], &[10, 0, 0, 0]);
        assert_eq!(&ip.mask[16..20], &[255, 0, 0, 0]);
        assert!(ip.mask[..16].iter().all(|&b| b == 0));
        let udp = &f.items[2];
        assert_eq!(&udp.spec[..4], &[0x10, 0x00, 0x13, 0x88]);
        assert_eq!(&udp.mask[..4], &[0xff; 4]);
        assert_eq!(&udp.last[..4], &[0x10, 0x00, 0x13, 0x92], "range 5000-5010");
        let exc = &rules[1];
        assert_eq!(exc.priority, 1, "below every flow");
        assert_eq!(exc.actions, vec![Action::Queue(2)]);
    }

    #[test]
    fn rss_vlan_and_ecpri_translate() {
        let r = rx(r#"        - name: spread
          id: 1
          action: {type: queue, ids: [1, 7]}
          match: {vlan_id: 100, udp_dst: 4791}
"#);
        let rules = translate(&r, &hw, false).unwrap();
        assert_eq!(rules[0].actions, vec![Action::Rss(vec![0, 2])]);
        let vlan = &rules[0].items[1];
        assert_eq!(vlan.kind, sys::rte_flow_item_type_RTE_FLOW_ITEM_TYPE_VLAN);
        assert_eq!(&vlan.spec[..2], &100u16.to_be_bytes());
        assert_eq!(&vlan.mask[..2], &[0x0f, 0xff]);

        let r = rx(r#"        - name: radio
          id: 2
          action: {type: queue, id: 1}
          match: {ecpri: {msg_type: 0, pc_id: 4660}}
"#);
        let rules = translate(&r, &hw, false).unwrap();
        let e = &rules[0];
        assert_eq!(&e.items[0].spec[12..14], &[0xAE, 0xFE], "eCPRI EtherType");
        assert_eq!(
            e.items[1].kind,
            sys::rte_flow_item_type_RTE_FLOW_ITEM_TYPE_ECPRI
        );
        assert_eq!(&e.items[1].spec[..6], &[0, 0, 0, 0, 0x12, 0x34]);
        assert_eq!(&e.items[1].mask[..6], &[0, 0xff, 0, 0, 0xff, 0xff]);
        assert_eq!(
            rules[0].actions,
            vec![Action::Queue(0)],
            "no MARK when asked"
        );
    }

    /// `match.ethernet` fills the ETH item; its EtherType moves to the VLAN item's inner
    /// type when the flow also matches a VLAN id; with no IPv4 or UDP field the pattern
    /// stops at Ethernet (every frame of those addresses), as in software.
    #[test]
    fn ethernet_fields_translate_to_the_eth_and_vlan_items() {
        let item = sys::rte_flow_item_type_RTE_FLOW_ITEM_TYPE_ETH;
        let r = rx(r#"        - name: group
          id: 1
          action: {type: queue, id: 1}
          match: {ethernet: {dst: "01:00:5e:01:02:03", src: "02:00:00:00:00:09", ethertype: 0x86dd}}
        - name: tagged
          id: 2
          action: {type: queue, id: 7}
          match: {vlan_id: 5, ethernet: {ethertype: 0x0800}, udp_dst: 6000}
"#);
        let rules = translate(&r, &hw, true).unwrap();
        let g = &rules[0];
        assert_eq!(g.items.len(), 1, "{:?}", g.items);
        assert_eq!(g.items[0].kind, item);
        assert_eq!(
            &g.items[0].spec[..14],
            &[1, 0, 0x5e, 1, 2, 3, 2, 0, 0, 0, 0, 9, 0x86, 0xdd]
        );
        assert_eq!(&g.items[0].mask[..14], &[0xff; 14]);
        let t = &rules[1];
        let kinds: Vec<_> = t.items.iter().map(|i| i.kind).collect();
        assert_eq!(
            kinds,
            [
                item,
                sys::rte_flow_item_type_RTE_FLOW_ITEM_TYPE_VLAN,
                sys::rte_flow_item_type_RTE_FLOW_ITEM_TYPE_IPV4,
                sys::rte_flow_item_type_RTE_FLOW_ITEM_TYPE_UDP
            ]
        );
        assert!(t.items[0].mask.is_empty(), "no Ethernet field: any");
        assert_eq!(&t.items[1].spec[..4], &[0, 5, 0x08, 0x00]);
        assert_eq!(&t.items[1].mask[..4], &[0x0f, 0xff, 0xff, 0xff]);
    }
}
