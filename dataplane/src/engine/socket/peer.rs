//! Whom a UDP server lane takes datagrams from and answers: `allowed_peers`, and the peer
//! it learns (see SECURITY.md).

use crate::config::PeerFilter;
use crate::engine::Link;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The peer a server lane answers, packed as `ip << 16 | port` plus one (0: none), and
/// whether the lane has answered it yet.
#[derive(Default)]
pub(super) struct LearnedPeer(AtomicU64, std::sync::atomic::AtomicBool);

impl LearnedPeer {
    /// Notes that the lane sent to its peer (one load per burst once set).
    pub(super) fn answered(&self) {
        if !self.1.load(Ordering::Relaxed) {
            self.1.store(true, Ordering::Relaxed);
        }
    }

    pub(super) fn has_answered(&self) -> bool {
        self.1.load(Ordering::Relaxed)
    }

    fn packed(a: SocketAddrV4) -> u64 {
        ((u64::from(u32::from(*a.ip())) << 16) | u64::from(a.port())) + 1
    }

    pub(super) fn store(&self, a: SocketAddrV4) -> bool {
        let v = Self::packed(a);
        self.0.swap(v, Ordering::Relaxed) != v
    }

    /// Learns `a` if no peer is learned yet: `Some(true)` when it was learned now,
    /// `Some(false)` when it is the peer already learned, `None` for any other source
    /// (which never takes the learned peer's place).
    pub(super) fn pin(&self, a: SocketAddrV4) -> Option<bool> {
        let v = Self::packed(a);
        match self
            .0
            .compare_exchange(0, v, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => Some(true),
            Err(current) if current == v => Some(false),
            Err(_) => None,
        }
    }

    pub(super) fn load(&self) -> Option<SocketAddrV4> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            v => {
                let v = v - 1;
                Some(SocketAddrV4::new(
                    Ipv4Addr::from((v >> 16) as u32),
                    (v & 0xffff) as u16,
                ))
            }
        }
    }
}

/// Which sources an RX lane takes.
pub(super) struct PeerGate {
    /// Sources outside are dropped as `rejected_peer`.
    pub(super) peers: PeerFilter,
    /// A server that answers: the first source is the peer it answers, for good; once it
    /// has answered, no other source is taken.
    pub(super) pin: bool,
    pub(super) learned: Arc<LearnedPeer>,
}

impl PeerGate {
    /// Whether a datagram from `from` is taken: its source passes `allowed_peers`; and on a
    /// server that answers, the first source becomes the peer it answers and never
    /// changes (`link` hears of it), and once the server has answered it, datagrams from
    /// any other source are refused (a second sender on the conversation, or a forgery).
    pub(super) fn admits(&self, from: SocketAddrV4, link: &Link) -> bool {
        if !self.peers.allows(std::net::IpAddr::V4(*from.ip())) {
            return false;
        }
        if !self.pin {
            return true;
        }
        match self.learned.pin(from) {
            Some(true) => {
                link.connected(SocketAddr::V4(from));
                true
            }
            Some(false) => true,
            None => !self.learned.has_answered(),
        }
    }

    /// Why a datagram from `from` was refused.
    pub(super) fn why_refused(&self, from: SocketAddrV4) -> &'static str {
        if self.peers.allows(std::net::IpAddr::V4(*from.ip())) {
            "not the peer this server answers"
        } else {
            "not in allowed_peers"
        }
    }
}
