//! The plan for people: one line per decision (`dataplane validate --plan`).

use super::*;
use std::fmt::Write as _;

impl Plan {
    /// The plan for people: one line per decision.
    pub fn human(&self) -> String {
        let mut s = String::new();
        self.human_engine(&mut s);
        self.human_regions(&mut s);
        self.human_queues(&mut s);
        self.human_cores(&mut s);
        self.human_hugepages(&mut s);
        self.human_dpdk(&mut s);
        self.human_engine_plan(&mut s);
        self.human_rdma(&mut s);
        s
    }

    /// The engine and its capabilities, and the stats thread's core.
    fn human_engine(&self, s: &mut String) {
        let c = &self.capabilities;
        let _ = writeln!(
            s,
            "engine: {} (rx overflow: {}; lends regions: {}; hardware steering: {}; own huge pages: {})",
            self.engine.name(),
            choice_name(&c.rx_overflow),
            c.receives_into_lent_regions,
            c.hardware_steering,
            c.own_hugepages
        );
        let _ = writeln!(s, "stats thread: core {}", self.master_core);
    }

    /// Each memory region: kind, node, buffers, headroom and stride, lent or not.
    fn human_regions(&self, s: &mut String) {
        let _ = writeln!(s, "memory regions:");
        for (i, r) in self.regions.iter().enumerate() {
            let lent = match (&r.lent, &r.not_lent_because) {
                (true, _) => "lent to the engine".to_owned(),
                (false, Some(why)) => format!("not lent: {why}"),
                (false, None) => "not lent".to_owned(),
            };
            let _ = writeln!(
                s,
                "  [{i}] {}: {} node {}, {} x {} B (headroom {}, stride {}), {lent}{}{}",
                r.name,
                r.kind.name(),
                r.affinity,
                r.num_bufs,
                r.buf_size,
                r.headroom,
                r.stride,
                if r.hugepage_bytes > 0 {
                    format!(", {} huge-page bytes", r.hugepage_bytes)
                } else {
                    String::new()
                },
                if r.retired {
                    " (retired by a live change: no queue uses it; freed when the plane stops)"
                } else {
                    ""
                }
            );
        }
    }

    /// Each queue: core, batch, segments and what else happens to its bursts.
    fn human_queues(&self, s: &mut String) {
        if !self.queues.is_empty() {
            let _ = writeln!(s, "queues:");
        }
        for q in &self.queues {
            let mut extra = Vec::new();
            if q.delivery == crate::config::Delivery::Handler {
                extra.push(format!("run to completion by core {}'s handler", q.core));
            }
            if q.timeout_us > 0 {
                extra.push(format!("timeout {} us", q.timeout_us));
            }
            match &q.protocol {
                Some(super::ProtocolPlan::Spead(sp)) => {
                    let mut line = spead_human(sp);
                    if let Some(r) = sp.chunk_region {
                        let _ = write!(line, " in region {}", self.regions[r.index()].name);
                    }
                    extra.push(line);
                }
                Some(super::ProtocolPlan::Iq(iq)) => {
                    let mut line = iq_human(iq);
                    if let Some(r) = iq.sample_region {
                        let _ = write!(
                            line,
                            " on the GPU into region {}",
                            self.regions[r.index()].name
                        );
                    }
                    extra.push(line);
                }
                Some(super::ProtocolPlan::SpeadSend(sp)) => extra.push(spead_send_human(sp)),
                None => {}
            }
            if let Some(st) = &q.stage {
                extra.push(format!(
                    "stage {}{}{}",
                    choice_name(&st.mode),
                    st.gpu.map(|g| format!(" on GPU {g}")).unwrap_or_default(),
                    st.split_header_bytes
                        .map(|h| format!(", split after {h} B"))
                        .unwrap_or_default()
                ));
            }
            if q.timestamps {
                extra.push("receive timestamps (software)".into());
            }
            if q.send_at_time {
                extra.push("send at each packet's time (software)".into());
            }
            if let Some(c) = &q.capture
                && let Some(t) = &c.transient
            {
                extra.push(format!(
                    "transient buffer of {} MiB in {} memory: {} ms before to {} ms after each trigger{} to {}_N ({}{})",
                    t.keep_mb,
                    t.keep_in.unwrap_or(crate::config::MemoryKind::Host).name(),
                    t.before_ms,
                    t.after_ms,
                    if t.trigger_on.is_some() { " (and matching packets)" } else { "" },
                    c.path,
                    c.format,
                    if t.keep_in == Some(crate::config::MemoryKind::Device) {
                        ", through cuFile"
                    } else {
                        ""
                    }
                ));
            } else if let Some(c) = &q.capture {
                extra.push(format!("captured to {} ({})", c.path, c.format));
            }
            if let Some(r) = q.staging {
                extra.push(format!(
                    "the engine {} `{}`",
                    match q.direction {
                        Direction::Rx => "receives into",
                        Direction::Tx => "sends from",
                    },
                    self.regions[r.index()].name
                ));
            }
            if !q.reorders.is_empty() {
                let names: Vec<String> = q
                    .reorders
                    .iter()
                    .map(|r| {
                        format!(
                            "{} ({}, {} x {} B into `{}`)",
                            r.name,
                            choice_name(&r.kind),
                            r.packets_per_batch,
                            r.in_slot_bytes,
                            self.regions[r.output.index()].name
                        )
                    })
                    .collect();
                extra.push(format!("reorders {}", names.join(", ")));
            }
            if q.eth_src != EthSrc::Off {
                extra.push(format!("tx_eth_src {}", choice_name(&q.eth_src)));
            }
            if let Some(r) = q.transform_region {
                let names: Vec<&str> = q.tx_flows.iter().map(|f| f.name.as_str()).collect();
                extra.push(format!(
                    "tx flows {} applied on copies in `{}`",
                    names.join(", "),
                    self.regions[r.index()].name
                ));
            }
            let segs: Vec<&str> = q
                .segments
                .iter()
                .map(|&r| self.regions[r.index()].name.as_str())
                .collect();
            let _ = writeln!(
                s,
                "  {} {} {}: core {}, batch {}, ring {} bursts, segments [{}]{}",
                q.interface_name,
                q.direction.name(),
                q.id,
                q.core,
                q.batch,
                q.ring_bursts,
                segs.join(", "),
                if extra.is_empty() {
                    String::new()
                } else {
                    format!("; {}", extra.join("; "))
                }
            );
        }
    }

    /// Each worker core and the queues it serves.
    fn human_cores(&self, s: &mut String) {
        for c in &self.cores {
            let names: Vec<String> = c
                .queues
                .iter()
                .map(|&i| {
                    let q = &self.queues[i];
                    format!("{} {} {}", q.interface_name, q.direction.name(), q.id)
                })
                .collect();
            let names = if names.is_empty() {
                "connections, as they are made".to_owned()
            } else {
                names.join(", ")
            };
            let _ = writeln!(s, "worker core {}: {names}", c.core);
        }
    }

    /// Huge-page bytes each region and the engine need.
    fn human_hugepages(&self, s: &mut String) {
        if !self.hugepages.is_empty() {
            let _ = writeln!(s, "huge pages:");
            for (name, node, bytes) in self.hugepages.regions.iter().chain(&self.hugepages.engine) {
                let _ = writeln!(s, "  {name}: {bytes} bytes on node {node}");
            }
        }
    }

    /// DPDK: EAL arguments, each port's queues and pools, how each region's buffers are sent.
    fn human_dpdk(&self, s: &mut String) {
        if let Some(d) = self.dpdk() {
            let _ = writeln!(
                s,
                "dpdk: EAL {} (memory {} MiB; at start: --file-prefix, --huge-dir, $DATAPLANE_EAL_ARGS)",
                d.eal_args.join(" "),
                d.eal_memory_bytes.div_ceil(1 << 20)
            );
            for p in &d.ports {
                let _ = writeln!(
                    s,
                    "  port {} ({}), MTU at least {} (frames up to {} B; raised at start, never lowered), rings of {} RX and {} TX descriptors{}:",
                    p.ethdev,
                    if p.pci { "PCI" } else { "vdev" },
                    p.mtu,
                    usize::from(p.mtu) + dpdk::FRAME_OVERHEAD,
                    p.rx_descriptors,
                    p.tx_descriptors,
                    if p.rx_scatter {
                        ", RX scatter (frames above an RX buffer arrive chained and are dropped as malformed)"
                    } else {
                        ""
                    }
                );
                if !p.multicast.is_empty() {
                    let _ = writeln!(
                        s,
                        "    joins {} through kernel interface {}",
                        groups(&p.multicast),
                        p.kernel_interface.as_deref().unwrap_or("of the PCI device")
                    );
                }
                for q in &p.rx {
                    let how = match &q.receive {
                        dpdk::RxReceive::Lent { region } => {
                            format!("into region `{}` (lent)", self.regions[region.index()].name)
                        }
                        dpdk::RxReceive::Copy { pool } => format!(
                            "copy from a pool of {} mbufs x {} B",
                            pool.mbufs, pool.data_room
                        ),
                        dpdk::RxReceive::Split {
                            header,
                            payload,
                            header_bytes,
                        } => format!(
                            "buffer split after {header_bytes} B: pools of {} x {} B and {} x {} B",
                            header.mbufs, header.data_room, payload.mbufs, payload.data_room
                        ),
                    };
                    let _ = writeln!(
                        s,
                        "    rx {} (device queue {}): {how}",
                        q.queue, q.device_queue
                    );
                }
                for q in &p.tx {
                    let _ = writeln!(
                        s,
                        "    tx {} (device queue {}): copies into a pool of {} mbufs x {} B, attaches to {} mbufs",
                        q.queue,
                        q.device_queue,
                        q.pool.mbufs,
                        q.pool.data_room,
                        q.attach_pool.mbufs
                    );
                }
            }
            let _ = writeln!(s, "  TX of each region's buffers:");
            for (r, carry) in self.regions.iter().zip(&d.tx_regions) {
                let how = match carry {
                    dpdk::TxCarry::Attached => "attached to mbufs (no copy)".to_owned(),
                    dpdk::TxCarry::OwnMbufs => "in the RX pool's own mbufs (no copy)".to_owned(),
                    dpdk::TxCarry::Lent => {
                        "in mbufs of its own pool, lent for sending (no copy, no attach)".to_owned()
                    }
                    dpdk::TxCarry::Copied { because } => format!("copied: {because}"),
                };
                let _ = writeln!(s, "    {}: {how}", r.name);
            }
        }
    }

    /// Loopback ports and socket interfaces.
    fn human_engine_plan(&self, s: &mut String) {
        match &self.engine_plan {
            EnginePlan::Loopback(l) => {
                for i in &l.interfaces {
                    let _ = writeln!(
                        s,
                        "loopback {}: port of `{}`, frames reach RX queues {:?} of `{}`, {} TX queue(s) from ingress {}",
                        i.name,
                        l.interfaces[i.port].name,
                        i.rx_queues,
                        l.interfaces[i.rx_interface].name,
                        i.tx_queues.len(),
                        i.first_ingress
                    );
                }
            }
            EnginePlan::Socket(sockets) => {
                for i in sockets {
                    let _ = writeln!(
                        s,
                        "socket {} ({} {}, local {}, remote {}): socket buffers {} / {} KiB, peers: {}",
                        i.name,
                        choice_name(&i.transport),
                        choice_name(&i.mode),
                        i.local.map_or("-".into(), |a| a.to_string()),
                        i.remote.map_or("-".into(), |a| a.to_string()),
                        i.buffers.0 / 1024,
                        i.buffers.1 / 1024,
                        i.peers
                    );
                    if !i.multicast.is_empty() {
                        let _ = writeln!(s, "  joins {}", groups(&i.multicast));
                    }
                }
            }
            _ => {}
        }
    }

    /// RDMA interfaces and their connection slots.
    fn human_rdma(&self, s: &mut String) {
        for i in self.rdma() {
            let _ = writeln!(
                s,
                "rdma {} ({} on {}, retry every {} s, peers: {}):",
                i.name,
                choice_name(&i.mode),
                i.local,
                i.retry_connect_s,
                i.allowed_peers
            );
            for (n, slot) in i.slots.iter().enumerate() {
                let name = |r: RegionId| self.regions[r.index()].name.as_str();
                let layout: Vec<&str> = slot.rx_layout.iter().map(|&r| name(r)).collect();
                let _ = writeln!(
                    s,
                    "  slot {n}: rx region `{}`{}, core {}, recv window {}, send window {}",
                    layout.join("` + `"),
                    slot.tx_region
                        .map(|t| format!(", tx region `{}`", name(t)))
                        .unwrap_or_default(),
                    slot.core,
                    slot.recv_window,
                    slot.send_window
                );
                for (side, staging) in [("receives", &slot.rx_staging), ("sends", &slot.tx_staging)]
                {
                    let Some(st) = staging else { continue };
                    let _ = writeln!(
                        s,
                        "    {side} staged through `{}` ({} stage{}){}",
                        name(st.region),
                        st.stage
                            .gpu
                            .map_or("CPU".to_owned(), |g| format!("GPU {g}")),
                        if st.stage.split_header_bytes.is_some() {
                            ", header-data split"
                        } else {
                            ""
                        },
                        if st.always {
                            ""
                        } else {
                            " when the NIC cannot register the GPU memory"
                        }
                    );
                }
            }
        }
    }
}

/// `multicast_groups` as (source, group) pairs, `*` for any source.
/// A choice by the name the configuration and the JSON plan give it (`backpressure`,
/// `server`), not Rust's (`Backpressure`).
pub fn choice_name<T: Serialize>(choice: &T) -> String {
    serde_saphyr::to_string(choice).map_or_else(|e| format!("<{e}>"), |t| t.trim().to_owned())
}

fn groups(g: &[crate::config::MulticastGroup]) -> String {
    g.iter()
        .map(|g| match g.source {
            Some(src) => format!("({src}, {})", g.group),
            None => format!("(*, {})", g.group),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A radio queue's line part: format, sample storage, precision.
fn iq_human(iq: &super::IqPlan) -> String {
    use crate::protocol::iq::{Compression, IqFormat, Precision, SampleFormat};
    let format = match iq.format {
        IqFormat::Vrt { samples } => format!(
            "VITA-49 signal data, {} samples",
            match samples {
                SampleFormat::I8 => "8-bit",
                SampleFormat::I16Be => "16-bit big-endian",
                SampleFormat::I16Le => "16-bit little-endian",
            }
        ),
        IqFormat::EcpriUplane {
            compression,
            prbs_when_zero,
        } => format!(
            "O-RAN U-plane in eCPRI, {}, {prbs_when_zero} PRBs when a section says 0",
            match compression {
                Compression::None => "uncompressed".to_string(),
                Compression::BlockFloatingPoint { iq_width } =>
                    format!("block floating point of {iq_width}-bit mantissas"),
            }
        ),
    };
    format!(
        "{format} {}, to complex {}",
        if iq.frames {
            "in UDP frames"
        } else {
            "datagrams"
        },
        match iq.precision {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
        }
    )
}

/// A SPEAD TX queue's line part: flavour, packet size, descriptors, addresses.
fn spead_send_human(sp: &super::SpeadSendPlan) -> String {
    let names: Vec<String> = sp
        .descriptors
        .iter()
        .map(|d| format!("{} ({:#x})", d.name, d.id))
        .collect();
    let described = match (names.is_empty(), sp.descriptors_every) {
        (true, _) => "no item descriptors".to_string(),
        (false, 0) => format!("descriptors of {} before the first heap", names.join(", ")),
        (false, n) => format!("descriptors of {} every {n} heaps", names.join(", ")),
    };
    let to = match &sp.udp {
        Some(u) => {
            let m = u.destination_mac;
            format!(
                " in UDP frames {} -> {} ({:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x})",
                u.source, u.destination, m[0], m[1], m[2], m[3], m[4], m[5]
            )
        }
        None => " datagrams".to_string(),
    };
    format!(
        "sends SPEAD 64-{}{to}, packets of at most {} B, {described}",
        sp.flavour.heap_address_bits(),
        sp.max_packet_bytes
    )
}

/// A SPEAD queue's line part: flavour, placement, chunk size.
fn spead_human(sp: &super::SpeadPlan) -> String {
    use crate::protocol::spead::chunks::PlacementKey;
    let p = sp.placement;
    let key = match p.key {
        PlacementKey::HeapCnt => "heap counter".to_string(),
        PlacementKey::Item(id) if p.step == 1 => format!("item {id:#x}"),
        PlacementKey::Item(id) => format!("item {id:#x} / {}", p.step),
    };
    format!(
        "SPEAD 64-{} {}: heaps of {} B by {key}, {} a chunk ({} B), {} chunks open",
        sp.flavour.heap_address_bits(),
        if sp.frames {
            "in UDP frames"
        } else {
            "datagrams"
        },
        p.heap_bytes,
        p.heaps_per_chunk,
        u64::from(p.heap_bytes) * u64::from(p.heaps_per_chunk),
        p.max_chunks
    )
}
