//! Moving data on a `Connection`: SEND/RECV through its slots or caller buffers, one-sided
//! WRITE and READ on the peer's window, the key exchange, and completions.

use super::*;

/// The peer's RDMA window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteWindow {
    /// Its address in the peer's memory.
    pub addr: u64,
    /// Its remote key.
    pub rkey: u32,
    /// Its length.
    pub len: u64,
}

impl RemoteWindow {
    /// Bytes of the key-exchange message: magic, address, key, length.
    pub const MESSAGE_LEN: usize = 24;

    /// The key-exchange message that announces this window.
    pub fn encode(&self) -> [u8; Self::MESSAGE_LEN] {
        let mut m = [0u8; Self::MESSAGE_LEN];
        m[..4].copy_from_slice(&KEY_MAGIC);
        m[4..12].copy_from_slice(&self.addr.to_le_bytes());
        m[12..16].copy_from_slice(&self.rkey.to_le_bytes());
        m[16..24].copy_from_slice(&self.len.to_le_bytes());
        m
    }

    /// The window a peer's key-exchange message announces, or `None` for anything else
    /// (any length, any bytes: the message comes from the network).
    pub fn decode(m: &[u8]) -> Option<Self> {
        let m: &[u8; Self::MESSAGE_LEN] = m.try_into().ok()?;
        if m[..4] != KEY_MAGIC {
            return None;
        }
        let word = |r: std::ops::Range<usize>| {
            let mut b = [0u8; 8];
            b[..r.len()].copy_from_slice(&m[r]);
            u64::from_le_bytes(b)
        };
        Some(Self {
            addr: word(4..12),
            rkey: word(12..16) as u32,
            len: word(16..24),
        })
    }
}

/// The operation a send slot carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SendOp {
    Send,
    Write,
    Read { len: u32 },
}

/// One completed operation, as `poll_completions` reports it.
#[derive(Debug, PartialEq, Eq)]
pub enum Completion<'a> {
    /// A message arrived.
    Received(&'a [u8]),
    /// The peer wrote `len` bytes at `offset` of our window and sent `imm` with it.
    WrittenWithImm {
        /// Immediate value.
        imm: u32,
        /// Bytes written.
        len: u32,
    },
    /// One of our SENDs or WRITEs completed.
    Sent,
    /// A receive into a caller buffer completed with `len` bytes.
    ReceivedExternal {
        /// The buffer's token.
        token: u64,
        /// Bytes received.
        len: u32,
    },
    /// A SEND of a caller buffer completed.
    SentExternal {
        /// The buffer's token.
        token: u64,
    },
    /// One of our READs completed; `data` is what was read.
    ReadDone {
        /// The token `read` returned.
        token: u32,
        /// The bytes read.
        data: &'a [u8],
    },
}

/// `IBV_WC_WR_FLUSH_ERR`: the request was flushed because its QP had failed.
pub(super) const FLUSHED: u32 = 5;

/// Work request ids of caller buffers carry this bit (own slots never reach it).
pub(super) const EXTERNAL: u64 = 1 << 63;

/// A registration of caller memory with a connection's protection domain.
pub struct Registration {
    pub(super) mr: Arc<MemoryRegion>,
}

impl Registration {
    /// Local key for work requests.
    pub fn lkey(&self) -> u32 {
        self.mr.lkey()
    }

    /// Remote key for the peer's READ/WRITE.
    pub fn rkey(&self) -> u32 {
        self.mr.rkey()
    }
}

/// A caller-owned buffer for a work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExternalBuffer {
    /// Local key of its registration.
    pub lkey: u32,
    /// Address.
    pub addr: u64,
    /// Bytes (to send, or room to receive into).
    pub len: u32,
    /// Reported back on completion (below 2^63).
    pub token: u64,
}

/// Magic of the key-exchange message.
pub(super) const KEY_MAGIC: [u8; 4] = *b"DPKX";

// SAFETY: the connection is used by one thread at a time (its worker); verbs objects may
// be used from any thread.
unsafe impl Send for Connection {}

/// What one `poll` saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Polled {
    /// Messages received (and handed to the callback).
    pub received: u64,
    /// Bytes received.
    pub received_bytes: u64,
    /// Sends completed.
    pub sent: u64,
}

impl Connection {
    /// Registers `len` bytes at `addr` (host memory, or GPU memory where the NIC and
    /// driver allow it) with this connection's protection domain, with the remote access
    /// `access` grants (buffers for SEND/RECV: [`RemoteAccess::None`]).
    ///
    /// # Safety
    /// The memory must stay mapped for as long as the registration and any work request
    /// using it live.
    pub unsafe fn register(
        &self,
        addr: u64,
        len: usize,
        access: RemoteAccess,
    ) -> Result<Registration, VerbsError> {
        // SAFETY: the caller keeps the memory mapped (see above).
        let mr = unsafe { self._pd.reg_mr(addr as usize, len, access.flags()) }
            .map_err(call("ibv_reg_mr"))?;
        Ok(Registration { mr })
    }

    /// Registers `len` bytes of a dma-buf (GPU memory exported with
    /// `gpudirect::DeviceBuffer::export_dmabuf`), starting `offset` bytes into it, reachable
    /// in work requests at address `iova` (the device pointer), with the remote access
    /// `access` grants. Needs a NIC and driver with
    /// dma-buf support (Soft-RoCE has none); the descriptor may be closed afterwards.
    ///
    /// # Safety
    /// The exported memory must stay allocated for as long as the registration and any
    /// work request using it live.
    pub unsafe fn register_dmabuf(
        &self,
        fd: std::os::fd::RawFd,
        offset: u64,
        len: usize,
        iova: u64,
        access: RemoteAccess,
    ) -> Result<Registration, VerbsError> {
        // SAFETY: the caller keeps the exported memory allocated (see above).
        let mr = unsafe {
            self._pd
                .reg_dmabuf_mr(offset, len, iova, fd, access.flags())
        }
        .map_err(call("ibv_reg_dmabuf_mr"))?;
        Ok(Registration { mr })
    }

    /// Posts receives into caller-owned registered buffers; each completes as
    /// `Completion::ReceivedExternal` with its token.
    pub fn post_external_receives(&mut self, bufs: &[ExternalBuffer]) -> Result<(), VerbsError> {
        if bufs.is_empty() {
            return Ok(());
        }
        let mut guard = self.qp.start_post_recv();
        for b in bufs {
            let wr = guard.construct_wr(EXTERNAL | b.token);
            // SAFETY: the caller registered the buffer and keeps it until its completion.
            unsafe { wr.setup_sge(b.lkey, b.addr, b.len) };
        }
        guard.post().map_err(call("ibv_post_recv"))?;
        self.posted_recv += bufs.len() as u32;
        Ok(())
    }

    /// SENDs caller-owned registered buffers, one message each, all or none: returns false
    /// when the send queue lacks room for all of them. Each completes as
    /// `Completion::SentExternal` with its token, in order.
    pub fn send_external(&mut self, bufs: &[ExternalBuffer]) -> Result<bool, VerbsError> {
        if bufs.len() > self.send_room() {
            return Ok(false);
        }
        if bufs.is_empty() {
            return Ok(true);
        }
        let mut guard = self.qp.start_post_send();
        for b in bufs {
            let wr = guard.construct_wr(EXTERNAL | b.token, WorkRequestFlags::Signaled);
            // SAFETY: the caller registered the buffer and keeps it until its completion.
            unsafe { wr.setup_send().setup_sge(b.lkey, b.addr, b.len) };
        }
        guard.post().map_err(call("ibv_post_send"))?;
        self.external_sends += bufs.len();
        Ok(true)
    }

    /// Receives currently posted.
    pub fn posted_receives(&self) -> u32 {
        self.posted_recv
    }

    /// Sends that can be posted now.
    pub fn send_room(&self) -> usize {
        self.free_send.len().saturating_sub(self.external_sends)
    }

    /// Copies `data` into a send slot and posts a SEND. Returns false (nothing posted) when
    /// every send slot is in flight.
    pub fn send(&mut self, data: &[u8]) -> Result<bool, VerbsError> {
        self.post_from_slot(data, SendOp::Send, None, None)
    }

    /// Posts a SEND of `len` bytes that `fill` writes straight into a send slot (no copy).
    /// Returns false (nothing posted, `fill` not called) when every send slot is in flight.
    pub fn send_with(
        &mut self,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<bool, VerbsError> {
        self.post_filled(len, fill, SendOp::Send, None, None)
    }

    /// Copies `data` into a send slot and WRITEs it at `offset` of the peer's window, with
    /// an immediate value when `imm` is set (the peer sees a `WrittenWithImm`). Returns
    /// false when every send slot is in flight.
    pub fn write(
        &mut self,
        data: &[u8],
        offset: u64,
        imm: Option<u32>,
    ) -> Result<bool, VerbsError> {
        let remote = self.remote_range(offset, data.len())?;
        self.post_from_slot(data, SendOp::Write, Some(remote), imm)
    }

    /// READs `len` bytes at `offset` of the peer's window into a send slot. Returns a token
    /// that the matching `ReadDone` carries, or `None` when every send slot is in flight.
    pub fn read(&mut self, offset: u64, len: usize) -> Result<Option<u32>, VerbsError> {
        self.check_message_len(len)?;
        let (rkey, raddr) = self.remote_range(offset, len)?;
        let Some(slot) = self.free_send.pop() else {
            return Ok(None);
        };
        self.send_ops[slot as usize] = SendOp::Read { len: len as u32 };
        let addr = self.slot_addr(self.params.recv_depth + slot);
        let lkey = self.mr.lkey();
        let mut guard = self.qp.start_post_send();
        let wr = guard.construct_wr(slot as u64, WorkRequestFlags::Signaled);
        // SAFETY: the slot lies inside the registered area and is not touched until the
        // READ completes.
        unsafe { wr.setup_read(rkey, raddr).setup_sge(lkey, addr, len as u32) };
        if let Err(e) = guard.post() {
            self.free_send.push(slot);
            return Err(call("ibv_post_send (READ)")(e));
        }
        Ok(Some(slot))
    }

    pub(super) fn check_message_len(&self, len: usize) -> Result<(), VerbsError> {
        if len > self.params.message_size {
            return Err(VerbsError::Call {
                what: "posting a message",
                detail: format!(
                    "{len} bytes exceed the connection's message_size {}",
                    self.params.message_size
                ),
            });
        }
        Ok(())
    }

    pub(super) fn remote_range(&self, offset: u64, len: usize) -> Result<(u32, u64), VerbsError> {
        let r = self.remote.ok_or(VerbsError::Call {
            what: "RDMA READ/WRITE",
            detail: "the peer's window is unknown: call exchange_keys first".into(),
        })?;
        let end = offset.checked_add(len as u64);
        if end.is_none_or(|end| end > r.len) {
            return Err(VerbsError::Call {
                what: "RDMA READ/WRITE",
                detail: format!(
                    "{len} bytes at offset {offset} exceed the peer's {}-byte window",
                    r.len
                ),
            });
        }
        Ok((r.rkey, r.addr.wrapping_add(offset)))
    }

    pub(super) fn post_from_slot(
        &mut self,
        data: &[u8],
        op: SendOp,
        remote: Option<(u32, u64)>,
        imm: Option<u32>,
    ) -> Result<bool, VerbsError> {
        self.post_filled(
            data.len(),
            |slot| slot.copy_from_slice(data),
            op,
            remote,
            imm,
        )
    }

    /// Posts `len` bytes of a send slot that `fill` writes in place.
    pub(super) fn post_filled(
        &mut self,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        op: SendOp,
        remote: Option<(u32, u64)>,
        imm: Option<u32>,
    ) -> Result<bool, VerbsError> {
        self.check_message_len(len)?;
        let Some(slot) = self.free_send.pop() else {
            return Ok(false);
        };
        self.send_ops[slot as usize] = op;
        let index = self.params.recv_depth + slot;
        let addr = self.slot_addr(index);
        let off = index as usize * self.params.message_size;
        fill(&mut self.area[off..off + len]);
        let lkey = self.mr.lkey();
        let mut guard = self.qp.start_post_send();
        let wr = guard.construct_wr(slot as u64, WorkRequestFlags::Signaled);
        let len = len as u32;
        // SAFETY: the slot lies inside the registered area and stays untouched until its
        // completion returns it to `free_send`. Immediate values go on the wire in network
        // byte order.
        unsafe {
            match (remote, imm) {
                (Some((rkey, raddr)), Some(v)) => wr
                    .setup_write_imm(rkey, raddr, v.to_be())
                    .setup_sge(lkey, addr, len),
                (Some((rkey, raddr)), None) => {
                    wr.setup_write(rkey, raddr).setup_sge(lkey, addr, len)
                }
                (None, _) => wr.setup_send().setup_sge(lkey, addr, len),
            }
        };
        if let Err(e) = guard.post() {
            self.free_send.push(slot);
            return Err(call("ibv_post_send")(e));
        }
        Ok(true)
    }

    /// Tells the peer where our window is and learns where its window is: one SEND each
    /// way, before any other traffic. READ and WRITE need it. A side whose
    /// `window_access` grants nothing sends an empty window (no key, no address), so the
    /// peer's READs and WRITEs are refused before they are posted.
    pub fn exchange_keys(&mut self, timeout: Duration) -> Result<RemoteWindow, VerbsError> {
        let ours = self.remote_key().unwrap_or(RemoteWindow {
            addr: 0,
            rkey: 0,
            len: 0,
        });
        let hello = ours.encode();
        let deadline = Instant::now() + timeout;
        while !self.send(&hello)? {
            self.poll_completions(|_| {})?;
        }
        let mut got = None;
        let mut unexpected = false;
        while got.is_none() {
            if Instant::now() >= deadline {
                return Err(VerbsError::Timeout("waiting for the peer's window key"));
            }
            self.poll_completions(|c| {
                if let Completion::Received(m) = c {
                    match RemoteWindow::decode(m) {
                        Some(w) => got = Some(w),
                        None => unexpected = true,
                    }
                }
            })?;
            if unexpected {
                return Err(VerbsError::Call {
                    what: "key exchange",
                    detail: "the peer sent data before its window key".into(),
                });
            }
        }
        self.remote = got;
        Ok(got.expect("set above"))
    }

    /// Our window's contents (what the peer WRITEs and READs).
    pub fn window(&self) -> &[u8] {
        &self.area[self.window_offset()..]
    }

    /// Our window, writable (what the peer will READ).
    pub fn window_mut(&mut self) -> &mut [u8] {
        let off = self.window_offset();
        &mut self.area[off..]
    }

    pub(super) fn window_offset(&self) -> usize {
        (self.params.recv_depth + self.params.send_depth) as usize * self.params.message_size
    }

    /// Polls both completion queues and reports each completion to `on`: received
    /// messages (their slots are reposted at once), WRITE-with-immediate arrivals,
    /// completed sends and writes, and READ results. The first completion with an error
    /// status is returned as an error.
    pub fn poll_completions(
        &mut self,
        mut on: impl FnMut(Completion<'_>),
    ) -> Result<Polled, VerbsError> {
        const IBV_WC_RECV_RDMA_WITH_IMM: u32 = 129;
        let mut out = Polled::default();
        let mut repost = Vec::new();
        let mut failed: Option<CompletionError> = None;
        // The cause, not its echo: when a QP fails, every request still posted completes
        // as "flushed"; the failed one's own status is what is reported.
        let mut note = |e: CompletionError| {
            if failed
                .as_ref()
                .is_none_or(|f| f.status == FLUSHED && e.status != FLUSHED)
            {
                failed = Some(e);
            }
        };
        if let Ok(poller) = self.recv_cq.start_poll() {
            for wc in poller {
                let slot = wc.wr_id() as u32;
                self.posted_recv -= 1;
                if wc.status() != WorkCompletionStatus::Success as u32 {
                    note(completion_error(
                        "recv",
                        wc.wr_id(),
                        wc.status(),
                        wc.vendor_err(),
                    ));
                    continue;
                }
                let len = wc.byte_len();
                if wc.wr_id() & EXTERNAL != 0 {
                    on(Completion::ReceivedExternal {
                        token: wc.wr_id() & !EXTERNAL,
                        len,
                    });
                    out.received += 1;
                    out.received_bytes += len as u64;
                    continue;
                }
                if wc.opcode() == IBV_WC_RECV_RDMA_WITH_IMM {
                    on(Completion::WrittenWithImm {
                        imm: u32::from_be(wc.imm_data()),
                        len,
                    });
                } else {
                    let off = slot as usize * self.params.message_size;
                    on(Completion::Received(&self.area[off..off + len as usize]));
                    out.received += 1;
                    out.received_bytes += len as u64;
                }
                repost.push(slot);
            }
        }
        if let Ok(poller) = self.send_cq.start_poll() {
            for wc in poller {
                if wc.wr_id() & EXTERNAL != 0 {
                    self.external_sends -= 1;
                    if wc.status() != WorkCompletionStatus::Success as u32 {
                        note(completion_error(
                            "send",
                            wc.wr_id() & !EXTERNAL,
                            wc.status(),
                            wc.vendor_err(),
                        ));
                    } else {
                        on(Completion::SentExternal {
                            token: wc.wr_id() & !EXTERNAL,
                        });
                        out.sent += 1;
                    }
                    continue;
                }
                let slot = wc.wr_id() as u32;
                if wc.status() != WorkCompletionStatus::Success as u32 {
                    note(completion_error(
                        "send",
                        wc.wr_id(),
                        wc.status(),
                        wc.vendor_err(),
                    ));
                } else {
                    match self.send_ops[slot as usize] {
                        SendOp::Read { len } => {
                            let off =
                                (self.params.recv_depth + slot) as usize * self.params.message_size;
                            on(Completion::ReadDone {
                                token: slot,
                                data: &self.area[off..off + len as usize],
                            });
                        }
                        SendOp::Send | SendOp::Write => on(Completion::Sent),
                    }
                    out.sent += 1;
                }
                self.free_send.push(slot);
            }
        }
        if failed.is_none() {
            self.post_recv_slots(&repost)?;
        }
        match failed {
            Some(e) => Err(e.into()),
            None => Ok(out),
        }
    }

    /// As [`Connection::poll_completions`], handing only received messages to `on_message`.
    pub fn poll(&mut self, mut on_message: impl FnMut(&[u8])) -> Result<Polled, VerbsError> {
        self.poll_completions(|c| {
            if let Completion::Received(m) = c {
                on_message(m)
            }
        })
    }

    /// Identifies the connection in [`ListenerEvent`]s.
    pub fn key(&self) -> u64 {
        key_of(&self.id)
    }

    /// Starts an orderly disconnect.
    pub fn disconnect(&self) -> Result<(), VerbsError> {
        self.id.disconnect().map_err(call("rdma_disconnect"))
    }

    /// True when rdma_cm has reported a disconnect (checks the event channel once).
    pub fn peer_disconnected(&self) -> bool {
        match self.channel.get_cm_event() {
            Ok(ev) => {
                let gone = matches!(
                    ev.event_type(),
                    EventType::Disconnected | EventType::DeviceRemoval
                );
                let _ = ev.ack();
                gone
            }
            Err(_) => false,
        }
    }

    /// The retry and RNR settings the QP runs with, read back from the device.
    pub fn qp_settings(&self) -> Result<QpSettings, VerbsError> {
        use sideway::ibverbs::queue_pair::QueuePairAttributeMask as M;
        let (attr, _) = self
            .qp
            .query(M::MinResponderNotReadyTimer | M::ResponderNotReadyRetryCount | M::RetryCount)
            .map_err(call("ibv_query_qp"))?;
        Ok(QpSettings {
            min_rnr_timer: attr.min_rnr_timer(),
            rnr_retry: attr.rnr_retry(),
            retry_count: attr.retry_cnt(),
        })
    }

    /// Our window as the peer addresses it (for its READ/WRITE), or `None` when
    /// `window_access` grants the peer nothing.
    pub fn remote_key(&self) -> Option<RemoteWindow> {
        let mr = self.window_mr.as_ref()?;
        Some(RemoteWindow {
            addr: self.area.as_ptr() as u64 + self.window_offset() as u64,
            rkey: mr.rkey(),
            len: self.params.window_size as u64,
        })
    }

    /// Where the message slots are and their key, as a peer would address them. They are
    /// registered for local access only, so a peer's READ or WRITE there fails with a
    /// remote access error; this exists so tests can show exactly that.
    pub fn message_slots_key(&self) -> RemoteWindow {
        RemoteWindow {
            addr: self.area.as_ptr() as u64,
            rkey: self.mr.rkey(),
            len: self.window_offset() as u64,
        }
    }

    /// Uses `window` as the peer's window without [`Connection::exchange_keys`] (keys
    /// learned some other way). The peer's registration decides what succeeds: outside
    /// what it granted, the operation completes with a remote access error.
    pub fn assume_remote_window(&mut self, window: RemoteWindow) {
        self.remote = Some(window);
    }
}

pub(super) fn completion_error(
    kind: &'static str,
    wr_id: u64,
    status: u32,
    vendor_err: u32,
) -> CompletionError {
    CompletionError {
        kind,
        wr_id,
        status,
        status_text: status_name(status).to_owned(),
        vendor_err,
    }
}

#[cfg(test)]
mod key_message_tests {
    use super::RemoteWindow;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Whatever a peer sends, decoding neither panics nor accepts a message that is
        /// not exactly a key-exchange message.
        #[test]
        fn any_bytes_decode_without_panic(
            magic in any::<bool>(),
            rest in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            // Half of them start like a key message, so lengths around 24 are exercised.
            let mut m = if magic { b"DPKX".to_vec() } else { Vec::new() };
            m.extend_from_slice(&rest);
            let w = RemoteWindow::decode(&m);
            prop_assert_eq!(w.is_some(), m.len() == RemoteWindow::MESSAGE_LEN && m[..4] == *b"DPKX");
        }

        /// What we send is what the peer reads.
        #[test]
        fn windows_round_trip(addr in any::<u64>(), rkey in any::<u32>(), len in any::<u64>()) {
            let w = RemoteWindow { addr, rkey, len };
            prop_assert_eq!(RemoteWindow::decode(&w.encode()), Some(w));
        }
    }
}
