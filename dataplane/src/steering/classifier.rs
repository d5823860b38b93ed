//! Flow rules compiled for the packet path: a flat list of precomputed comparisons, tried
//! in configuration order (the first match wins), with no allocation per packet.

use super::headers::{self, Headers, Malformed};
use super::memo::{DecisiveBytes, at};
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
    ethernet: Option<crate::config::EthernetMatch>,
    ecpri: Option<(Option<u8>, Option<u16>)>,
    /// (UDP destination port, payload offset, value under mask, mask).
    flex: Option<(u16, u32, u32, u32)>,
}

impl Rule {
    fn compile(f: &FlowConfig, rx: &RxConfig) -> Self {
        let flex = f.matches.flex.and_then(|fm| {
            rx.flex_items
                .iter()
                .find(|x| x.id == fm.item_id)
                .map(|x| (x.udp_dst_port, x.offset, fm.value & fm.mask, fm.mask))
        });
        Self::from_match(&f.matches, f.id, Target::from_ids(&f.queue_ids), flex)
    }

    fn from_match(
        m: &crate::config::FlowMatch,
        flow_id: u32,
        target: Target,
        flex: Option<(u16, u32, u32, u32)>,
    ) -> Self {
        let range =
            |r: Option<crate::config::PortRange>| r.map_or((0, u16::MAX), |r| (r.first, r.last));
        let prefix =
            |p: Option<crate::config::Ipv4Prefix>| p.map_or((0, 0), |p| (p.network(), p.mask()));
        Rule {
            flow_id,
            target,
            needs_ipv4: m.has_ip_fields(),
            needs_udp: m.udp_src.is_some() || m.udp_dst.is_some(),
            sport: range(m.udp_src),
            dport: range(m.udp_dst),
            ipv4_len: m.ipv4_len,
            src: prefix(m.ipv4_src),
            dst: prefix(m.ipv4_dst),
            vlan: m.vlan_id,
            ethernet: m.ethernet,
            ecpri: m.ecpri.map(|e| (e.msg_type, e.id)),
            flex,
        }
    }

    #[inline]
    fn matches(&self, h: &Headers, frame: &[u8]) -> bool {
        if self.vlan.is_some() && h.vlan != self.vlan {
            return false;
        }
        if let Some(e) = &self.ethernet
            && !ethernet_matches(e, h, frame, self.vlan.is_some())
        {
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

/// `match.ethernet` against a frame whose headers parsed as `h`: the EtherType compared is
/// the one after the outer VLAN tag when the rule matches a VLAN id (the frame then has
/// one: the VLAN check ran first), else the one after the addresses.
#[inline]
fn ethernet_matches(
    e: &crate::config::EthernetMatch,
    h: &Headers,
    frame: &[u8],
    after_tag: bool,
) -> bool {
    // The parser refused frames shorter than an Ethernet header (and than a tag it read).
    let at = if after_tag { 16 } else { 12 };
    let Some(header) = frame.get(..at + 2).filter(|_| h.ethernet) else {
        return false;
    };
    e.dst.is_none_or(|m| header[..6] == m)
        && e.src.is_none_or(|m| header[6..12] == m)
        && e.ethertype
            .is_none_or(|t| u16::from_be_bytes([header[at], header[at + 1]]) == t)
}

/// One flow's match fields, checked against a frame on its own (a TX flow picks the
/// frames its transforms apply to). The same comparison as the classifier's rules.
#[derive(Clone, Debug)]
pub struct FrameMatch(Rule);

impl FrameMatch {
    /// The matcher of `m`. A flex match needs an RX interface's flex items, so it is
    /// left out here (validation refuses it in TX flows).
    pub fn new(m: &crate::config::FlowMatch) -> Self {
        Self(Rule::from_match(m, 0, Target::from_ids(&[0]), None))
    }

    /// True when `frame` (an Ethernet frame) carries what the fields ask for; a frame
    /// whose headers cannot be read matches nothing.
    pub fn matches(&self, frame: &[u8]) -> bool {
        headers::parse(frame).is_ok_and(|h| self.0.matches(&h, frame))
    }
}

/// Rule sets larger than this use the column layout.
const COLUMNS_FROM_RULES: usize = 4;
/// Rules evaluated per block at once.
const LANES: usize = 16;
/// `need` of padding lanes: more than any frame has, so they never match.
const NEVER: u32 = 0xff;
const HAS_IPV4: u32 = 1;
const HAS_UDP: u32 = 2;

/// The fields an IPv4/UDP rule compares, taken once per frame.
#[derive(Clone, Copy, Debug)]
struct Key {
    flags: u32,
    vlan: u32,
    len: u32,
    sport: u32,
    dport: u32,
    src: u32,
    dst: u32,
}

impl Key {
    #[inline]
    fn of(h: &Headers) -> Self {
        let (flags, len, src, dst) = match h.ipv4 {
            Some(ip) => (HAS_IPV4, ip.total_len, ip.src, ip.dst),
            None => (0, 0, 0, 0),
        };
        let (flags, sport, dport) = match h.udp {
            Some(u) => (flags | HAS_UDP, u.src, u.dst),
            None => (flags, 0, 0),
        };
        Key {
            flags,
            // 0xffff is no valid VLAN id, so untagged frames fail any VLAN rule.
            vlan: u32::from(h.vlan.unwrap_or(0xffff)),
            len: u32::from(len),
            sport: u32::from(sport),
            dport: u32::from(dport),
            src,
            dst,
        }
    }
}

/// IPv4/UDP rules stored by column and compared [`LANES`] at a time with no branch per
/// rule, so the compiler can use vector compares; a wildcard is the full range or mask 0.
#[derive(Clone, Debug, Default)]
struct Columns {
    /// Original rule index of each lane (lanes hold a subset of the rules, in order).
    index: Vec<u32>,
    need: Vec<u32>,
    vlan_val: Vec<u32>,
    vlan_mask: Vec<u32>,
    /// Ranges as (low, span): `x` is inside when `x - low <= span` (wrapping).
    len_lo: Vec<u32>,
    len_span: Vec<u32>,
    sport_lo: Vec<u32>,
    sport_span: Vec<u32>,
    dport_lo: Vec<u32>,
    dport_span: Vec<u32>,
    src_net: Vec<u32>,
    src_mask: Vec<u32>,
    dst_net: Vec<u32>,
    dst_mask: Vec<u32>,
}

fn block<T>(v: &[T], base: usize) -> &[T; LANES] {
    v[base..base + LANES]
        .try_into()
        .expect("columns are padded to whole blocks")
}

impl Columns {
    fn compile(rules: &[Rule]) -> Self {
        let all: Vec<u32> = (0..rules.len() as u32).collect();
        Self::compile_subset(rules, &all)
    }

    /// Columns of the rules at `subset` (ascending original indices).
    fn compile_subset(rules: &[Rule], subset: &[u32]) -> Self {
        let mut c = Columns::default();
        let padded = subset.len().div_ceil(LANES) * LANES;
        for i in 0..padded {
            c.index.push(subset.get(i).copied().unwrap_or(u32::MAX));
            let r = subset.get(i).map(|&k| &rules[k as usize]);
            let need = r.map_or(NEVER, |r| {
                (if r.needs_ipv4 { HAS_IPV4 } else { 0 }) | (if r.needs_udp { HAS_UDP } else { 0 })
            });
            c.need.push(need);
            let vlan = r.and_then(|r| r.vlan);
            c.vlan_val.push(u32::from(vlan.unwrap_or(0)));
            c.vlan_mask.push(if vlan.is_some() { 0xffff } else { 0 });
            let len = r.and_then(|r| r.ipv4_len);
            let range = |lo: u16, hi: u16| (u32::from(lo), u32::from(hi) - u32::from(lo));
            let (l, ls) = range(len.unwrap_or(0), len.unwrap_or(u16::MAX));
            let (s0, ss) = r.map_or((0, u32::from(u16::MAX)), |r| range(r.sport.0, r.sport.1));
            let (d0, ds) = r.map_or((0, u32::from(u16::MAX)), |r| range(r.dport.0, r.dport.1));
            c.len_lo.push(l);
            c.len_span.push(ls);
            c.sport_lo.push(s0);
            c.sport_span.push(ss);
            c.dport_lo.push(d0);
            c.dport_span.push(ds);
            c.src_net.push(r.map_or(0, |r| r.src.0));
            c.src_mask.push(r.map_or(0, |r| r.src.1));
            c.dst_net.push(r.map_or(0, |r| r.dst.0));
            c.dst_mask.push(r.map_or(0, |r| r.dst.1));
        }
        c
    }

    /// Original index of the first rule that matches.
    #[inline]
    fn first_match(&self, k: &Key) -> Option<usize> {
        self.first_match_below(k, u32::MAX)
    }

    /// Original index of the first matching rule whose index is below `limit`; blocks
    /// that start at or past `limit` are not read.
    #[inline]
    fn first_match_below(&self, k: &Key, limit: u32) -> Option<usize> {
        for base in (0..self.need.len()).step_by(LANES) {
            if self.index[base] >= limit {
                return None;
            }
            let need = block(&self.need, base);
            let (vv, vm) = (block(&self.vlan_val, base), block(&self.vlan_mask, base));
            let (ll, lsp) = (block(&self.len_lo, base), block(&self.len_span, base));
            let (sl, ssp) = (block(&self.sport_lo, base), block(&self.sport_span, base));
            let (dl, dsp) = (block(&self.dport_lo, base), block(&self.dport_span, base));
            let (sn, sm) = (block(&self.src_net, base), block(&self.src_mask, base));
            let (dn, dm) = (block(&self.dst_net, base), block(&self.dst_mask, base));
            // 0 or all ones per lane, so the compiler can keep lanes in vector registers.
            let mask = |c: bool| 0u32.wrapping_sub(u32::from(c));
            let mut ok = [0u32; LANES];
            for i in 0..LANES {
                ok[i] = mask(k.flags & need[i] == need[i])
                    & mask(k.vlan & vm[i] == vv[i])
                    & mask(k.len.wrapping_sub(ll[i]) <= lsp[i])
                    & mask(k.sport.wrapping_sub(sl[i]) <= ssp[i])
                    & mask(k.dport.wrapping_sub(dl[i]) <= dsp[i])
                    & mask(k.src & sm[i] == sn[i])
                    & mask(k.dst & dm[i] == dn[i]);
            }
            let mut bits = 0u32;
            for (i, &m) in ok.iter().enumerate() {
                bits |= (m & 1) << i;
            }
            if bits != 0 {
                let original = self.index[base + bits.trailing_zeros() as usize];
                return (original < limit).then_some(original as usize);
            }
        }
        None
    }
}

/// Rule sets larger than this also get a [`DportIndex`].
const INDEX_FROM_RULES: usize = 8;
/// UDP rules whose destination port range spans at most this many ports are indexed
/// under each of its ports; wider ones (and wildcards) are scanned.
const MAX_INDEXED_PORTS: u32 = 256;
/// At most this many (port, rule) entries in the index; rules past it are scanned.
const MAX_INDEX_ENTRIES: u32 = 1 << 20;

/// One rule's comparisons in one cache line, for testing the few rules the index picks
/// (the column layout would touch a line per field).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
struct Packed {
    need: u32,
    vlan_val: u32,
    vlan_mask: u32,
    len_lo: u32,
    len_span: u32,
    sport_lo: u32,
    sport_span: u32,
    dport_lo: u32,
    dport_span: u32,
    src_net: u32,
    src_mask: u32,
    dst_net: u32,
    dst_mask: u32,
}

impl Packed {
    fn of(r: &Rule) -> Self {
        let range = |lo: u16, hi: u16| (u32::from(lo), u32::from(hi) - u32::from(lo));
        let len = r.ipv4_len;
        let (len_lo, len_span) = range(len.unwrap_or(0), len.unwrap_or(u16::MAX));
        let (sport_lo, sport_span) = range(r.sport.0, r.sport.1);
        let (dport_lo, dport_span) = range(r.dport.0, r.dport.1);
        Packed {
            need: (if r.needs_ipv4 { HAS_IPV4 } else { 0 })
                | (if r.needs_udp { HAS_UDP } else { 0 }),
            vlan_val: u32::from(r.vlan.unwrap_or(0)),
            vlan_mask: if r.vlan.is_some() { 0xffff } else { 0 },
            len_lo,
            len_span,
            sport_lo,
            sport_span,
            dport_lo,
            dport_span,
            src_net: r.src.0,
            src_mask: r.src.1,
            dst_net: r.dst.0,
            dst_mask: r.dst.1,
        }
    }

    /// The columns' test for this one rule, with early exits.
    #[inline]
    fn matches(&self, k: &Key) -> bool {
        k.flags & self.need == self.need
            && k.dport.wrapping_sub(self.dport_lo) <= self.dport_span
            && k.sport.wrapping_sub(self.sport_lo) <= self.sport_span
            && k.vlan & self.vlan_mask == self.vlan_val
            && k.len.wrapping_sub(self.len_lo) <= self.len_span
            && k.src & self.src_mask == self.src_net
            && k.dst & self.dst_mask == self.dst_net
    }
}

/// IPv4/UDP rules indexed by UDP destination port, so that a rule set's cost does not grow
/// with rules a frame cannot match: each rule whose destination port range is narrow
/// (at most [`MAX_INDEXED_PORTS`] ports) is listed under every port of its range; the
/// others (wide ranges, wildcards, rules without UDP) are scanned in columns, only up to
/// the first indexed match.
#[derive(Clone, Debug)]
struct DportIndex {
    /// Per destination port `p`, its listed rules are `listed[starts[p]..starts[p + 1]]`
    /// (original indices, ascending): a direct table, no hashing on the packet path.
    starts: Box<[u32]>,
    listed: Box<[u32]>,
    /// Every rule, one cache line each, for the test of the listed ones.
    packed: Box<[Packed]>,
    /// The rules not listed.
    others: Columns,
}

impl DportIndex {
    fn compile(rules: &[Rule]) -> Self {
        // A rule that does not need UDP matches frames whose dport reads as 0 too, so only
        // UDP rules are listed.
        let mut budget = MAX_INDEX_ENTRIES;
        let listed_rule: Vec<bool> = rules
            .iter()
            .map(|r| {
                let ports = u32::from(r.dport.1) - u32::from(r.dport.0) + 1;
                let ok = r.needs_udp && ports <= MAX_INDEXED_PORTS && ports <= budget;
                if ok {
                    budget -= ports;
                }
                ok
            })
            .collect();
        // Counting sort by port: `starts[p + 1]` first counts, then is the end of `p`.
        let mut starts = vec![0u32; (1 << 16) + 1];
        for (r, _) in rules.iter().zip(&listed_rule).filter(|(_, l)| **l) {
            for p in r.dport.0..=r.dport.1 {
                starts[p as usize + 1] += 1;
            }
        }
        for p in 1..starts.len() {
            starts[p] += starts[p - 1];
        }
        let mut next = starts.clone();
        let mut listed = vec![0u32; starts[1 << 16] as usize];
        let mut others = Vec::new();
        for (i, (r, l)) in rules.iter().zip(&listed_rule).enumerate() {
            if *l {
                for p in r.dport.0..=r.dport.1 {
                    let at = &mut next[p as usize];
                    listed[*at as usize] = i as u32;
                    *at += 1;
                }
            } else {
                others.push(i as u32);
            }
        }
        Self {
            starts: starts.into_boxed_slice(),
            listed: listed.into_boxed_slice(),
            packed: rules.iter().map(Packed::of).collect(),
            others: Columns::compile_subset(rules, &others),
        }
    }

    /// Index of the first rule that matches.
    #[inline]
    fn first_match(&self, k: &Key) -> Option<usize> {
        let hit = if k.flags & HAS_UDP != 0 {
            // `k.dport` is a 16-bit port, so both reads are inside the table.
            let p = k.dport as usize & 0xffff;
            let (from, to) = (self.starts[p] as usize, self.starts[p + 1] as usize);
            self.listed[from..to]
                .iter()
                .find(|&&i| self.packed[i as usize].matches(k))
                .map(|&i| i as usize)
        } else {
            None
        };
        if self.others.index.is_empty() {
            return hit;
        }
        let limit = hit.map_or(u32::MAX, |i| i as u32);
        self.others.first_match_below(k, limit).or(hit)
    }
}

/// A compiled rule set for one interface.
#[derive(Clone, Debug)]
pub struct Classifier {
    rules: Vec<Rule>,
    /// The rules in columns when all of them are IPv4/UDP rules.
    columns: Option<Columns>,
    /// Large IPv4/UDP rule sets: indexed by destination port instead of scanned.
    index: Option<DportIndex>,
    unmatched: Target,
    /// Set when frames need no reading at all: no rules, no isolation, one queue.
    trivial: Option<u16>,
    /// The bytes of a common-layout frame that decide its verdict (`None`: the rules read
    /// more, such as payload words).
    decisive: Option<Decisive>,
    epoch: u64,
}

/// The bytes of a common-layout frame that decide its verdict: those the rules read,
/// which decide which rule takes it (or none); and, where that target spreads over queues
/// (RSS), also the addresses and ports the hash reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Decisive {
    /// The layout's bytes and those the rules read.
    pub rules: DecisiveBytes,
    /// `rules` and the RSS hash's 4-tuple.
    pub spread: DecisiveBytes,
}

/// The bytes every rule reads from a frame of the common layout, and those RSS reads
/// besides; `None` when a rule reads payload bytes (flex items).
fn decisive_bytes(rules: &[Rule]) -> Option<Decisive> {
    let mut d = DecisiveBytes::layout();
    for r in rules {
        if r.flex.is_some() {
            return None;
        }
        // VLAN and eCPRI rules never match the common layout: nothing to read for them.
        if let Some(e) = &r.ethernet {
            if e.dst.is_some() {
                d.add(at::ETH_DST);
            }
            if e.src.is_some() {
                d.add(at::ETH_SRC);
            }
        }
        if r.needs_ipv4 {
            for (needed, range) in [
                (r.src.1 != 0, at::IP_SRC),
                (r.dst.1 != 0, at::IP_DST),
                (r.ipv4_len.is_some(), at::TOTAL_LEN),
                (r.needs_udp && r.sport != (0, u16::MAX), at::UDP_SRC),
                (r.needs_udp && r.dport != (0, u16::MAX), at::UDP_DST),
            ] {
                if needed {
                    d.add(range);
                }
            }
        }
    }
    let mut spread = d;
    for r in [at::IP_SRC, at::IP_DST, at::UDP_SRC, at::UDP_DST] {
        spread.add(r);
    }
    Some(Decisive { rules: d, spread })
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
        let rules: Vec<Rule> = rx.flows.iter().map(|f| Rule::compile(f, rx)).collect();
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
        // Columns pay off past a few rules (measured: BENCHMARKS.md); below that the
        // plain scan with early exits is faster.
        // The columns compare IPv4/UDP fields only.
        let columns = (rules.len() > COLUMNS_FROM_RULES
            && rx.flows.iter().all(|f| {
                f.matches.class() == crate::config::MatchClass::Ipv4Udp
                    && f.matches.ethernet.is_none()
            }))
        .then(|| Columns::compile(&rules));
        let index = (columns.is_some() && rules.len() > INDEX_FROM_RULES)
            .then(|| DportIndex::compile(&rules));
        let columns = if index.is_some() { None } else { columns };
        let decisive = decisive_bytes(&rules);
        Self {
            rules,
            columns,
            index,
            unmatched,
            trivial,
            decisive,
            epoch,
        }
    }

    /// Which bytes decide the verdict of a common-layout frame, if the rules read no
    /// other ([`VerdictMemo`](super::VerdictMemo)).
    #[inline]
    pub(crate) fn decisive_bytes(&self) -> Option<&Decisive> {
        self.decisive.as_ref()
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
        self.classify_spread(frame).0
    }

    /// Classifies one frame, and says whether its target spread it over queues (RSS),
    /// so that the verdict also depends on the addresses and ports the hash reads.
    #[inline]
    pub(crate) fn classify_spread(&self, frame: &[u8]) -> (Verdict, bool) {
        if let Some(queue) = self.trivial_queue() {
            return (Verdict::Deliver { queue, flow_id: 0 }, false);
        }
        match headers::parse(frame) {
            Ok(h) => self.classify_headers_spread(&h, frame),
            Err(m) => (Verdict::Malformed(m), false),
        }
    }

    /// Classifies a UDP datagram a kernel socket received: the rules see it as an IPv4/UDP
    /// packet from `from` to `to` whose UDP payload is `payload` (no Ethernet header, so
    /// VLAN and eCPRI rules never match it). An IPv6 datagram has no IPv4 header, so rules
    /// on IPv4 or UDP fields or payload words never match it (validation refuses them on
    /// IPv6 interfaces).
    #[inline]
    pub fn classify_datagram(
        &self,
        from: std::net::SocketAddr,
        to: std::net::SocketAddr,
        payload: &[u8],
    ) -> Verdict {
        use std::net::IpAddr::V4;
        if let Some(queue) = self.trivial_queue() {
            return Verdict::Deliver { queue, flow_id: 0 };
        }
        let len = payload.len().min(usize::from(u16::MAX) - 28) as u16;
        let ipv4 = match (from.ip(), to.ip()) {
            (V4(src), V4(dst)) => Some(headers::Ipv4Fields {
                src: u32::from(src),
                dst: u32::from(dst),
                total_len: len + 28,
            }),
            _ => None,
        };
        let h = Headers {
            ethernet: false,
            vlan: None,
            ipv4,
            // UDP fields come with an IPv4 header, as in a parsed frame.
            udp: ipv4.map(|_| headers::UdpFields {
                src: from.port(),
                dst: to.port(),
                payload_offset: 0,
                packet_end: len,
            }),
            ecpri: None,
        };
        self.classify_headers(&h, payload)
    }

    /// True when no rule exists and unmatched packets are spread over every queue: a
    /// receiver whose kernel already spread flows over its sockets (SO_REUSEPORT) keeps
    /// each packet on the queue of the socket that received it.
    #[inline]
    pub fn spreads_everything(&self) -> bool {
        self.rules.is_empty() && matches!(self.unmatched, Target::Rss(_))
    }

    #[inline]
    fn classify_headers(&self, h: &Headers, frame: &[u8]) -> Verdict {
        self.classify_headers_spread(h, frame).0
    }

    #[inline]
    fn classify_headers_spread(&self, h: &Headers, frame: &[u8]) -> (Verdict, bool) {
        let h = *h;
        let hit = match (&self.index, &self.columns) {
            (Some(x), _) => x.first_match(&Key::of(&h)).map(|i| &self.rules[i]),
            (None, Some(c)) => c.first_match(&Key::of(&h)).map(|i| &self.rules[i]),
            (None, None) => self.rules.iter().find(|r| r.matches(&h, frame)),
        };
        let (target, flow_id) = match hit {
            Some(r) => (&r.target, r.flow_id),
            None => (&self.unmatched, 0),
        };
        match target {
            Target::Queue(q) => (Verdict::Deliver { queue: *q, flow_id }, false),
            Target::Rss(qs) => (
                Verdict::Deliver {
                    queue: rss_pick(qs, &h),
                    flow_id,
                },
                true,
            ),
            Target::Drop => (Verdict::NoFlow, false),
        }
    }
}

#[cfg(test)]
mod tests;
