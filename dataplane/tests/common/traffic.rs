//! Traffic under a live change: a sender that cycles over destination ports, each with its
//! own sequence, and a receiver that records what arrived per port, so a test can check
//! that the queues a change keeps lose nothing.

use dataplane::packet::UdpFrame;
use dataplane::{DataPlane, RecvError};
use std::collections::BTreeMap;
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// A UDP frame from 10.0.0.1:`source` to 10.0.0.2:`port` whose payload is `seq` (8 bytes,
/// little endian).
pub fn frame(source: u16, port: u16, seq: u64) -> Vec<u8> {
    let udp = UdpFrame::new(
        SocketAddrV4::new([10, 0, 0, 1].into(), source),
        SocketAddrV4::new([10, 0, 0, 2].into(), port),
    );
    let mut f = vec![0u8; udp.header_len() + 8];
    udp.write(&seq.to_le_bytes(), &mut f).unwrap();
    f
}

/// What a receiver saw per destination port: the sequence numbers, in arrival order.
pub type Seen = BTreeMap<u16, Vec<u64>>;

pub fn receive(mut rx: dataplane::RxQueue, done: Arc<AtomicBool>) -> Seen {
    let mut seen = Seen::new();
    loop {
        match rx.recv(Duration::from_millis(20)) {
            Ok(Some(b)) => {
                for i in 0..b.len() {
                    let v = dataplane::packet::parse(b.data(i, 0).unwrap()).unwrap();
                    let port = v.udp_ports.unwrap().1;
                    let seq = u64::from_le_bytes(v.payload[..8].try_into().unwrap());
                    seen.entry(port).or_default().push(seq);
                }
            }
            Ok(None) if done.load(Ordering::Acquire) => return seen,
            Ok(None) => {}
            Err(RecvError::Stopped) => return seen,
            Err(e) => panic!("{e}"),
        }
    }
}

/// A sender on a TX queue: frames from source port 7000 cycling over `ports`, each port
/// with its own sequence, until finished.
pub struct Traffic {
    sent: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<u64>>,
}

impl Traffic {
    pub fn start(mut tx: dataplane::TxQueue, ports: &'static [u16]) -> Self {
        let sent = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (sent, stop) = (sent.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut next = vec![0u64; ports.len()];
                while !stop.load(Ordering::Acquire) {
                    let frames: Vec<Vec<u8>> = (0..ports.len() * 5)
                        .map(|k| {
                            let p = k % ports.len();
                            next[p] += 1;
                            frame(7000, ports[p], next[p] - 1)
                        })
                        .collect();
                    super::send_frames(&mut tx, &frames);
                    sent.fetch_add(frames.len() as u64, Ordering::Release);
                }
                next
            })
        };
        Self { sent, stop, thread }
    }

    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Acquire)
    }

    pub fn wait_for(&self, n: u64) {
        while self.sent() < n {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Stops it, lets `plane` hand over what it holds, takes its counters and tells the
    /// receivers (`done`) to stop once their queues are empty; how many frames went to
    /// each port, and the counters.
    pub fn finish_on(
        self,
        plane: &DataPlane,
        done: &AtomicBool,
    ) -> (Vec<u64>, dataplane::stats::Snapshot) {
        let next = self.finish();
        plane.flush();
        std::thread::sleep(Duration::from_millis(300));
        let counters = plane.snapshot();
        done.store(true, Ordering::Release);
        (next, counters)
    }

    /// Stops it; how many frames went to each port.
    pub fn finish(self) -> Vec<u64> {
        self.stop.store(true, Ordering::Release);
        self.thread.join().unwrap()
    }
}

/// Takes RX queue `queue` of `interface` and runs [`receive`] on it on a thread of its
/// own, until `done` and the queue is empty.
pub fn receive_on(
    plane: &mut DataPlane,
    interface: &str,
    queue: u16,
    done: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<Seen> {
    let rx = plane
        .take_rx_queue(interface, queue)
        .unwrap_or_else(|| panic!("RX queue {queue} of `{interface}`"));
    let done = done.clone();
    std::thread::spawn(move || receive(rx, done))
}

/// Traffic from TX queue 0 of `interface` to `ports`, RX queue 0 received on a thread of
/// its own ([`receive_on`]), after `first` frames were sent: the sender, the receiver and
/// the flag that ends it ([`Traffic::finish_on`]).
pub fn flowing(
    plane: &mut DataPlane,
    interface: &str,
    ports: &'static [u16],
    first: u64,
) -> (Traffic, std::thread::JoinHandle<Seen>, Arc<AtomicBool>) {
    let t0 = plane
        .take_tx_queue(interface, 0)
        .unwrap_or_else(|| panic!("TX queue 0 of `{interface}`"));
    let done = Arc::new(AtomicBool::new(false));
    let q0 = receive_on(plane, interface, 0, &done);
    let traffic = Traffic::start(t0, ports);
    traffic.wait_for(first);
    (traffic, q0, done)
}
