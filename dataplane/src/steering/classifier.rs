//! Flow rules compiled for the packet path: a flat list of precomputed comparisons, tried
//! in configuration order (the first match wins), with no allocation per packet.

use super::headers::{self, Headers, Malformed};
use super::rss;
use crate::config::{FlowConfig, RxConfig};

/// Where a rule or the default sends a packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// One queue.
    Queue(u16),
    /// RSS over these queues (Toeplitz hash of the 4-tuple, 128-entry redirection table).
    Rss(Box<[u16]>),
    /// Drop and count as `no_flow` (flow isolation without an exception queue).
    Drop,
}

impl Target {
    fn from_ids(ids: &[u16]) -> Self {
        match ids {
            [one] => Target::Queue(*one),
            many => Target::Rss(many.into()),
        }
    }
}

/// The classifier's decision for one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Deliver to `queue`, marked with `flow_id` (0: no rule matched).
    Deliver {
        /// RX queue id.
        queue: u16,
        /// Flow id of the matching rule.
        flow_id: u32,
    },
    /// No rule matched and flow isolation drops it.
    NoFlow,
    /// The headers could not be read.
    Malformed(Malformed),
}

#[derive(Clone, Debug)]
struct Rule {
    flow_id: u32,
    target: Target,
    needs_ipv4: bool,
    needs_udp: bool,
    sport: (u16, u16),
    dport: (u16, u16),
    ipv4_len: Option<u16>,
    src: (u32, u32),
    dst: (u32, u32),
    vlan: Option<u16>,
    ecpri: Option<(Option<u8>, Option<u16>)>,
    /// (UDP destination port, payload offset, value under mask, mask).
    flex: Option<(u16, u32, u32, u32)>,
}

impl Rule {
    fn compile(f: &FlowConfig, rx: &RxConfig) -> Self {
        let m = &f.matches;
        let range =
            |r: Option<crate::config::PortRange>| r.map_or((0, u16::MAX), |r| (r.first, r.last));
        let prefix =
            |p: Option<crate::config::Ipv4Prefix>| p.map_or((0, 0), |p| (p.network(), p.mask()));
        let flex = m.flex.and_then(|fm| {
            rx.flex_items
                .iter()
                .find(|x| x.id == fm.item_id)
                .map(|x| (x.udp_dst_port, x.offset, fm.value & fm.mask, fm.mask))
        });
        Rule {
            flow_id: f.id,
            target: Target::from_ids(&f.queue_ids),
            needs_ipv4: m.has_ip_fields(),
            needs_udp: m.udp_src.is_some() || m.udp_dst.is_some(),
            sport: range(m.udp_src),
            dport: range(m.udp_dst),
            ipv4_len: m.ipv4_len,
            src: prefix(m.ipv4_src),
            dst: prefix(m.ipv4_dst),
            vlan: m.vlan_id,
            ecpri: m.ecpri.map(|e| (e.msg_type, e.id)),
            flex,
        }
    }

    #[inline]
    fn matches(&self, h: &Headers, frame: &[u8]) -> bool {
        if self.vlan.is_some() && h.vlan != self.vlan {
            return false;
        }
        if self.needs_ipv4 {
            let Some(ip) = h.ipv4 else { return false };
            if ip.src & self.src.1 != self.src.0
                || ip.dst & self.dst.1 != self.dst.0
                || self.ipv4_len.is_some_and(|l| l != ip.total_len)
            {
                return false;
            }
            if self.needs_udp {
                let Some(u) = h.udp else { return false };
                if u.src < self.sport.0
                    || u.src > self.sport.1
                    || u.dst < self.dport.0
                    || u.dst > self.dport.1
                {
                    return false;
                }
            }
        }
        if let Some((msg_type, id)) = self.ecpri {
            let Some(e) = h.ecpri else { return false };
            if msg_type.is_some_and(|t| t != e.msg_type) || id.is_some_and(|i| Some(i) != e.id) {
                return false;
            }
        }
        if let Some((port, offset, value, mask)) = self.flex {
            let Some(u) = h.udp else { return false };
            if u.dst != port {
                return false;
            }
            match headers::udp_payload_word(frame, &u, offset) {
                Some(w) if w & mask == value => {}
                _ => return false,
            }
        }
        true
    }
}

/// A compiled rule set for one interface.
#[derive(Clone, Debug)]
pub struct Classifier {
    rules: Vec<Rule>,
    unmatched: Target,
    /// Set when frames need no reading at all: no rules, no isolation, one queue.
    trivial: Option<u16>,
    epoch: u64,
}

/// RSS choice for a frame: 4-tuple for UDP, address pair for other IPv4, the first queue
/// otherwise.
#[inline]
fn rss_pick(queues: &[u16], h: &Headers) -> u16 {
    let hash = match (h.ipv4, h.udp) {
        (Some(ip), Some(u)) => rss::hash_ipv4_udp(ip.src, ip.dst, u.src, u.dst),
        (Some(ip), None) => rss::hash_ipv4(ip.src, ip.dst),
        _ => return queues[0],
    };
    queues[rss::reta_index(hash, queues.len())]
}

impl Classifier {
    /// Compiles the flows of `rx` (in order). Unmatched packets: with `flow_isolation`,
    /// dropped, or sent to `exception_queue` when set; without, to the only queue, or RSS
    /// over all queues (lowest id first in the table) when there are several.
    pub fn compile(rx: &RxConfig, epoch: u64) -> Self {
        let rules = rx.flows.iter().map(|f| Rule::compile(f, rx)).collect();
        let mut ids: Vec<u16> = rx.queues.iter().map(|q| q.id).collect();
        ids.sort_unstable();
        let unmatched = if rx.flow_isolation {
            rx.exception_queue.map_or(Target::Drop, Target::Queue)
        } else if ids.is_empty() {
            Target::Drop
        } else {
            Target::from_ids(&ids)
        };
        let trivial = match (&unmatched, rx.flows.is_empty() && !rx.flow_isolation) {
            (Target::Queue(q), true) => Some(*q),
            _ => None,
        };
        Self {
            rules,
            unmatched,
            trivial,
            epoch,
        }
    }

    /// The rule-set generation; it grows with every change.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// True when there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// When every frame goes to one queue without reading headers (no rules, one queue,
    /// no isolation), that queue.
    #[inline]
    pub fn trivial_queue(&self) -> Option<u16> {
        self.trivial
    }

    /// Classifies one frame.
    #[inline]
    pub fn classify(&self, frame: &[u8]) -> Verdict {
        if let Some(queue) = self.trivial_queue() {
            return Verdict::Deliver { queue, flow_id: 0 };
        }
        let h = match headers::parse(frame) {
            Ok(h) => h,
            Err(m) => return Verdict::Malformed(m),
        };
        let (target, flow_id) = match self.rules.iter().find(|r| r.matches(&h, frame)) {
            Some(r) => (&r.target, r.flow_id),
            None => (&self.unmatched, 0),
        };
        match target {
            Target::Queue(q) => Verdict::Deliver { queue: *q, flow_id },
            Target::Rss(qs) => Verdict::Deliver {
                queue: rss_pick(qs, &h),
                flow_id,
            },
            Target::Drop => Verdict::NoFlow,
        }
    }
}

#[cfg(test)]
mod tests;
