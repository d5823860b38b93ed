//! Whom a UDP server lane takes datagrams from and answers: `allowed_peers`, and the peer
//! it learns (see SECURITY.md).

use crate::config::PeerFilter;
use crate::engine::Link;
use arc_swap::ArcSwapOption;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The peer a server lane answers (IPv4 or IPv6; replaced only when it changes, so a
/// steady peer costs one load per burst), and whether the lane has answered it yet.
#[derive(Default)]
pub(super) struct LearnedPeer(ArcSwapOption<SocketAddr>, AtomicBool);

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

    /// Makes `a` the peer; true when it differs from the one before.
    pub(super) fn store(&self, a: SocketAddr) -> bool {
        if self.load() == Some(a) {
            return false;
        }
        self.0.store(Some(Arc::new(a)));
        true
    }

    /// Learns `a` if no peer is learned yet: `Some(true)` when it was learned now,
    /// `Some(false)` when it is the peer already learned, `None` for any other source
    /// (which never takes the learned peer's place).
    pub(super) fn pin(&self, a: SocketAddr) -> Option<bool> {
        let before = self
            .0
            .compare_and_swap(&None::<Arc<SocketAddr>>, Some(Arc::new(a)));
        match before.as_deref() {
            None => Some(true),
            Some(current) if *current == a => Some(false),
            Some(_) => None,
        }
    }

    pub(super) fn load(&self) -> Option<SocketAddr> {
        self.0.load().as_deref().copied()
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
    pub(super) fn admits(&self, from: SocketAddr, link: &Link) -> bool {
        if !self.peers.allows(from.ip()) {
            return false;
        }
        if !self.pin {
            return true;
        }
        match self.learned.pin(from) {
            Some(true) => {
                link.connected(from);
                true
            }
            Some(false) => true,
            None => !self.learned.has_answered(),
        }
    }

    /// Why a datagram from `from` was refused.
    pub(super) fn why_refused(&self, from: SocketAddr) -> &'static str {
        if self.peers.allows(from.ip()) {
            "not the peer this server answers"
        } else {
            "not in allowed_peers"
        }
    }
}
