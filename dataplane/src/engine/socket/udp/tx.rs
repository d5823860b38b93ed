//! A UDP lane's TX queue: `sendmmsg` on the lane's socket, equal-sized runs as GSO sends.

use super::*;

/// A TX queue: `sendmmsg` on its lane's socket, equal-sized runs as GSO sends.
pub(super) struct UdpTx {
    pub(super) socket: Arc<UdpSocket>,
    pub(super) to: Destination,
    /// Packets shorter than this go out in GSO runs; the kernel refuses GSO for segments
    /// that do not fit the path's MTU (no fragmenting with GSO), so a refusal lowers it.
    pub(super) gso_below: usize,
    pub(super) link: Arc<Link>,
    pub(super) counters: Arc<QueueCounters>,
    pub(super) interface: String,
    pub(super) warn_unreadable: WarnLimiter,
}

/// A run of packets sent as one message.
struct Run {
    first: usize,
    packets: usize,
    slices: (usize, usize),
    /// Length of the run's first packet: the GSO segment size.
    segment: usize,
    /// Packets as long as the first may still join (a shorter one ends the run).
    open: bool,
}

impl UdpTx {
    /// Groups packets into messages: with GSO, runs of equal length (the last may be
    /// shorter) within the kernel's limits; without, one packet per message.
    fn runs<'b>(&self, burst: &'b Burst, slices: &mut Vec<IoSlice<'b>>) -> Vec<Run> {
        let mut runs: Vec<Run> = Vec::new();
        for i in 0..burst.len() {
            let len = burst.packets()[i].len();
            let start = slices.len();
            for seg in 0..burst.packets()[i].segments().len() {
                if let Some(d) = burst.data(i, seg) {
                    slices.push(IoSlice::new(d));
                }
            }
            let end = slices.len();
            if let Some(r) = runs.last_mut()
                && r.segment < self.gso_below
                && r.open
                && len > 0
                && len <= r.segment
                && r.packets < GSO_MAX_SEGMENTS
                && (r.packets + 1) * r.segment <= super::super::MAX_UDP_PAYLOAD
            {
                r.packets += 1;
                r.slices.1 = end;
                r.open = len == r.segment;
                continue;
            }
            runs.push(Run {
                first: i,
                packets: 1,
                slices: (start, end),
                segment: len,
                open: len > 0,
            });
        }
        runs
    }
}

impl TxPort for UdpTx {
    fn transmit(&mut self, mut burst: Burst) -> Option<Burst> {
        let to = match &self.to {
            Destination::Connected => None,
            Destination::Fixed(a) => Some(*a),
            Destination::Learned(p) => match p.load() {
                Some(a) => {
                    p.answered();
                    Some(a)
                }
                // Nobody to answer yet: hold (the application sees the link down).
                None => return Some(burst),
            },
        };
        if super::super::drop_unreadable(&mut burst, &self.counters, &self.warn_unreadable) {
            return None;
        }
        let too_large = burst
            .packets()
            .iter()
            .filter(|p| p.len() > super::super::MAX_UDP_PAYLOAD)
            .count();
        if too_large > 0 {
            let over: Vec<bool> = burst
                .packets()
                .iter()
                .map(|p| p.len() > super::super::MAX_UDP_PAYLOAD)
                .collect();
            let n = burst.len();
            burst.drop_front_where(n, |i| over[i]);
            if burst.is_empty() {
                self.counters
                    .drop_packets(DropReason::Malformed, too_large as u64);
                return None;
            }
        }
        let mut slices = Vec::with_capacity(burst.len());
        let runs = self.runs(&burst, &mut slices);
        let mut sent_packets = 0usize;
        let mut failed = None;
        let mut k = 0;
        while k < runs.len() {
            let chunk = &runs[k..runs.len().min(k + sys::MAX_MESSAGES)];
            let messages: Vec<Outgoing> = chunk
                .iter()
                .map(|r| Outgoing {
                    slices: &slices[r.slices.0..r.slices.1],
                    segment: (r.packets > 1).then_some(r.segment as u16),
                })
                .collect();
            match sys::send_datagrams(&self.socket, &messages, to) {
                Ok(0) => break,
                Ok(m) => {
                    sent_packets = chunk[m - 1].first + chunk[m - 1].packets;
                    k += m;
                    if m < chunk.len() {
                        break;
                    }
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        drop(slices);
        if let Some(e) = failed {
            let gso_refused = matches!(
                e.raw_os_error(),
                Some(libc::EIO | libc::EINVAL | libc::EMSGSIZE)
            ) && runs[k].packets > 1;
            if gso_refused {
                // Nothing of this run was sent: it goes again, one datagram per packet.
                self.gso_below = runs[k].segment;
                tracing::warn!(
                    "interface `{}`: the kernel refused UDP GSO for {}-byte datagrams ({e}; larger than the path MTU or no checksum offload); datagrams of that size and above go one by one from now on",
                    self.interface,
                    runs[k].segment
                );
            } else if e.raw_os_error() == Some(libc::ECONNREFUSED) {
                // The peer's port answered "unreachable" to an earlier datagram; the
                // kernel reports it once, on this call, and sent nothing.
                let peer = match &self.to {
                    Destination::Connected => self.socket.peer_addr().ok(),
                    Destination::Fixed(a) => Some(*a),
                    Destination::Learned(p) => p.load(),
                };
                self.link.failed(refused(peer));
            } else {
                // The packets of the failing message cannot go: count and drop them.
                let r = &runs[k];
                self.counters
                    .drop_packets(DropReason::Malformed, r.packets as u64);
                self.link.failed(format!("send: {e}"));
                tracing::warn!(
                    "interface `{}`: {} datagram(s) dropped: {e}",
                    self.interface,
                    r.packets
                );
                sent_packets = r.first + r.packets;
            }
        }
        if too_large > 0 {
            self.counters
                .drop_packets(DropReason::Malformed, too_large as u64);
            tracing::warn!(
                "interface `{}`: {too_large} packet(s) above the {}-byte UDP payload limit, dropped (counted as malformed)",
                self.interface,
                super::super::MAX_UDP_PAYLOAD
            );
        }
        if sent_packets >= burst.len() {
            return None;
        }
        burst.hand_over_front(sent_packets, |_| false);
        Some(burst)
    }
}
