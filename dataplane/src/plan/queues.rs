//! The packet queues of a plan: per queue its segments, core, batch, stage, staging region,
//! reorders, offloads and capture.

use super::*;
use crate::config::{
    CaptureSpec, Delivery, InterfaceConfig, MemoryKind, ProtocolConfig, QueueConfig,
};

pub(super) fn queues(
    config: &Config,
    regions: &[RegionPlan],
    capabilities: &Capabilities,
) -> Result<Vec<QueuePlan>, PlanError> {
    let mut out = Vec::new();
    for (i, iface) in config.interfaces.iter().enumerate() {
        let gpu_source = gpu_source(regions, capabilities, iface);
        // Where RX packets arrive besides the RX queue's own region: in the TX queues'
        // buffers, on an engine that hands them over.
        let tx_regions: Vec<RegionId> = if capabilities.tx_buffers_reach_rx {
            iface
                .tx
                .iter()
                .flat_map(|t| &t.queues)
                .filter_map(|t| t.memory_regions.first())
                .filter_map(|n| region_id(regions, n))
                .collect()
        } else {
            Vec::new()
        };
        for (dir, queues) in [
            (Direction::Rx, iface.rx.as_ref().map(|r| &r.queues)),
            (Direction::Tx, iface.tx.as_ref().map(|t| &t.queues)),
        ] {
            for (qi, q) in queues.into_iter().flatten().enumerate() {
                let at = QueueAt {
                    config,
                    regions,
                    iface,
                    dir,
                    q,
                    tx_regions: &tx_regions,
                };
                out.push(at.plan(i, qi, gpu_source)?);
            }
        }
    }
    Ok(out)
}

/// The GPU whose memory `iface`'s RX queues receive packets in when the engine hands TX
/// buffers to RX (a TX queue in GPU memory means packets arrive in GPU memory).
fn gpu_source(
    regions: &[RegionPlan],
    capabilities: &Capabilities,
    iface: &InterfaceConfig,
) -> Option<u32> {
    if !capabilities.tx_buffers_reach_rx {
        return None;
    }
    iface
        .tx
        .iter()
        .flat_map(|t| &t.queues)
        .filter_map(|t| t.memory_regions.first())
        .filter_map(|n| region_id(regions, n))
        .map(|r| &regions[r.index()])
        .find(|r| r.kind == MemoryKind::Device)
        .map(|r| r.affinity)
}

/// The id of the planned region named `name`.
fn region_id(regions: &[RegionPlan], name: &str) -> Option<RegionId> {
    regions
        .iter()
        .position(|r| r.name == name)
        .map(|i| RegionId(i as u16))
}

/// One configured queue being planned, with what its decisions read.
struct QueueAt<'a> {
    config: &'a Config,
    regions: &'a [RegionPlan],
    iface: &'a InterfaceConfig,
    dir: Direction,
    q: &'a QueueConfig,
    /// The interface's TX regions when the engine hands TX buffers to RX.
    tx_regions: &'a [RegionId],
}

impl QueueAt<'_> {
    /// The queue's plan; `i` and `qi` are the interface's and the queue's places in the
    /// configuration (for the key path of its core).
    fn plan(&self, i: usize, qi: usize, gpu_source: Option<u32>) -> Result<QueuePlan, PlanError> {
        let (config, iface, dir, q) = (self.config, self.iface, self.dir, self.q);
        let segments: Vec<RegionId> = q
            .memory_regions
            .iter()
            .filter_map(|n| region_id(self.regions, n))
            .collect();
        let (stage, reorders, eth_src) = match dir {
            Direction::Rx => (
                self.rx_stage(&segments, gpu_source)?,
                self.rx_reorders(&segments),
                EthSrc::Off,
            ),
            Direction::Tx => {
                let (stage, eth_src) = self.tx_stage(&segments);
                (stage, Vec::new(), eth_src)
            }
        };
        let staging = self.staging(&stage)?;
        let stage_core = self.stage_core(&stage)?;
        if q.delivery == Delivery::Handler && stage_core.is_some() {
            return Err(self.bad(
                "delivery: handler runs the queue's bursts on its worker (cpu_core), and stage_core would move them to another core; leave one of them out".into(),
            ));
        }
        let protocol = self.protocol(&segments, stage.is_some())?;
        let capture = self.capture(&segments)?;
        let host_memory_only =
            dir == Direction::Tx && staging::cpu_copies(config, iface).is_some() && stage.is_none();
        let tx_flows = match (dir, iface.tx.as_ref()) {
            (Direction::Tx, Some(tx)) => tx.flows.clone(),
            _ => Vec::new(),
        };
        let on_gpu = segments
            .iter()
            .any(|&r| self.kind_of(r) == MemoryKind::Device);
        if let Some(f) = tx_flows.first()
            && on_gpu
            && stage.is_none()
        {
            return Err(self.bad(format!(
                "TX flow `{}` is applied by the worker's CPU, which copies each frame it sends and cannot read device memory: use host or host_pinned regions for this queue",
                f.name
            )));
        }
        let transform_region = if tx_flows.is_empty() {
            None
        } else {
            let name = staging::transform_name(&iface.name, q.id);
            Some(region_id(self.regions, &name).ok_or_else(|| {
                self.bad(format!(
                    "needs its transform region `{name}` (made by plan::staging::with_staging_regions)"
                ))
            })?)
        };
        Ok(QueuePlan {
            tx_flows,
            transform_region,
            host_memory_only,
            interface: i,
            interface_name: iface.name.clone(),
            direction: dir,
            id: QueueId(q.id),
            core_key: format!("interfaces[{i}].{}.queues[{qi}].cpu_core", dir.name()),
            segments,
            core: q.cpu_core,
            batch: q.batch_size as usize,
            ring_bursts: ring_bursts(q.ring_packets, q.batch_size),
            timeout_us: if dir == Direction::Rx {
                q.timeout_us
            } else {
                0
            },
            stage,
            staging,
            stage_core,
            copy_cores: if stage_core.is_some() {
                q.copy_cores.clone()
            } else {
                Vec::new()
            },
            reorders,
            eth_src,
            pacing_mbps: (dir == Direction::Tx && q.pacing_mbps > 0).then_some(q.pacing_mbps),
            timestamps: dir == Direction::Rx && iface.rx.as_ref().is_some_and(|r| r.timestamps),
            capture,
            send_at_time: dir == Direction::Tx
                && iface.tx.as_ref().is_some_and(|t| t.accurate_send),
            delivery: q.delivery,
            protocol,
        })
    }

    /// The queue's protocol: packets in one host-visible segment, taken by the
    /// application through the ring (the decoder runs where the application polls).
    fn protocol(
        &self,
        segments: &[RegionId],
        staged: bool,
    ) -> Result<Option<ProtocolPlan>, PlanError> {
        let Some(protocol) = &self.q.protocol else {
            return Ok(None);
        };
        let name = match protocol {
            ProtocolConfig::Spead(_) | ProtocolConfig::SpeadSend(_) => "spead",
            ProtocolConfig::Iq(c) => match c.format {
                crate::protocol::iq::IqFormat::Vrt { .. } => "vrt",
                crate::protocol::iq::IqFormat::EcpriUplane { .. } => "ecpri_uplane",
            },
        };
        if self.q.delivery == Delivery::Handler {
            return Err(self.bad(format!(
                "protocol: {name} decodes packets where the application takes the queue's packets; use delivery: ring"
            )));
        }
        if segments.len() != 1
            || staged
            || segments
                .iter()
                .any(|&r| self.kind_of(r) == MemoryKind::Device)
        {
            return Err(self.bad(format!(
                "protocol: {name} reads each packet with the CPU: one memory region (no header-data split) of kind host, huge or host_pinned"
            )));
        }
        let frames = self.config.stream_type == crate::config::StreamType::Raw;
        Ok(Some(match protocol {
            ProtocolConfig::SpeadSend(send) => {
                ProtocolPlan::SpeadSend(self.spead_send(send, segments[0], frames)?)
            }
            ProtocolConfig::Spead(spead) => ProtocolPlan::Spead(SpeadPlan {
                flavour: spead.flavour,
                placement: spead.placement,
                frames,
                chunk_region: self.chunk_region(spead, segments)?,
            }),
            ProtocolConfig::Iq(iq) => ProtocolPlan::Iq(IqPlan {
                format: iq.format,
                precision: iq.precision,
                frames,
                sample_region: self.sample_region(iq, segments[0])?,
            }),
        }))
    }

    /// A SPEAD TX queue: each packet, with its frame's headers on a raw engine, fits one
    /// buffer; a raw engine needs the frames' addresses, a socket has its own.
    fn spead_send(
        &self,
        send: &crate::config::SpeadSendConfig,
        segment: RegionId,
        frames: bool,
    ) -> Result<SpeadSendPlan, PlanError> {
        let udp = match (frames, send.udp) {
            (true, None) => {
                return Err(self.bad(
                    "protocol.spead on a raw engine needs udp: {source, destination, destination_mac} for its frames' headers".into(),
                ));
            }
            (false, Some(_)) => {
                return Err(self.bad(
                    "protocol.spead.udp applies to raw engines; a socket sends to its own remote address".into(),
                ));
            }
            (true, Some(u)) if u.source_mac.is_none() && !self.q.tx_eth_src => {
                return Err(self.bad(
                    "protocol.spead.udp needs source_mac, or offloads: [tx_eth_src] for the port's own address".into(),
                ));
            }
            (_, udp) => udp,
        };
        let headers = if frames { UDP_FRAME_HEADERS } else { 0 };
        let buffer = self.regions[segment.index()].buf_size as u64;
        if u64::from(send.max_packet_bytes) + headers > buffer {
            return Err(self.bad(format!(
                "protocol.spead.max_packet_bytes {} (with {headers} bytes of headers) does not fit the queue's {buffer}-byte buffers",
                send.max_packet_bytes
            )));
        }
        if let Some(d) = send
            .descriptors
            .iter()
            .find(|d| d.encode(send.flavour).is_none())
        {
            return Err(self.bad(format!(
                "protocol.spead.items: item {:#x} does not fit flavour 64-{}",
                d.id,
                send.flavour.heap_address_bits()
            )));
        }
        Ok(SpeadSendPlan {
            flavour: send.flavour,
            max_packet_bytes: send.max_packet_bytes,
            descriptors_every: send.descriptors_every,
            descriptors: send.descriptors.clone(),
            udp,
        })
    }

    /// A SPEAD queue's `chunk_region`: its buffers hold whole chunks, one per buffer, and
    /// at least one more than the window, so the application can hold a chunk while the
    /// window stays open. GPU memory is written by the GPU, which reads each payload
    /// where it arrived: the queue's region must then be pinned host memory.
    fn chunk_region(
        &self,
        spead: &crate::config::SpeadConfig,
        segments: &[RegionId],
    ) -> Result<Option<RegionId>, PlanError> {
        let Some(name) = &spead.chunk_region else {
            return Ok(None);
        };
        let id = region_id(self.regions, name).ok_or_else(|| {
            self.bad(format!(
                "protocol.spead.chunk_region: no memory region named `{name}`"
            ))
        })?;
        let r = &self.regions[id.index()];
        let p = spead.placement;
        let chunk = u64::from(p.heaps_per_chunk) * u64::from(p.heap_bytes);
        if (r.buf_size as u64) < chunk {
            return Err(self.bad(format!(
                "protocol.spead.chunk_region: buffers of `{name}` hold {} bytes, a chunk {chunk}",
                r.buf_size
            )));
        }
        if r.num_bufs <= p.max_chunks as usize {
            return Err(self.bad(format!(
                "protocol.spead.chunk_region: `{name}` has {} buffers; a window of {} chunks needs at least {}",
                r.num_bufs,
                p.max_chunks,
                p.max_chunks + 1
            )));
        }
        if segments.contains(&id) {
            return Err(self.bad(format!(
                "protocol.spead.chunk_region: `{name}` receives the queue's packets; chunks need a region of their own"
            )));
        }
        if r.kind == MemoryKind::Device && !self.arrives_pinned(segments) {
            return Err(self.bad(format!(
                "protocol.spead.chunk_region: `{name}` is GPU memory, which the GPU fills from the packets where they arrived: the queue's region must be host_pinned (on the loopback, the TX queues' too)"
            )));
        }
        Ok(Some(id))
    }

    /// A radio queue's `sample_region`: GPU memory, one buffer per burst, each holding a
    /// burst's stored samples (gathered there first) and its decoded ones; the GPU reads
    /// the samples where they arrived, so the queue receives into pinned memory. Three
    /// buffers at least: the gathering one, one filling, one the application holds.
    fn sample_region(
        &self,
        iq: &crate::config::IqConfig,
        segment: RegionId,
    ) -> Result<Option<RegionId>, PlanError> {
        let Some(name) = &iq.sample_region else {
            return Ok(None);
        };
        let at = |m: String| self.bad(format!("protocol sample_region: {m}"));
        let id = region_id(self.regions, name)
            .ok_or_else(|| at(format!("no memory region named `{name}`")))?;
        let r = &self.regions[id.index()];
        if r.kind != MemoryKind::Device {
            return Err(at(format!(
                "`{name}` is {} memory; the GPU decodes into device memory (leave sample_region out to decode on the CPU)",
                r.kind.name()
            )));
        }
        if !self.arrives_pinned(&[segment]) {
            return Err(at(
                "the GPU reads the samples where they arrive, so the queue must receive into host_pinned memory (on the loopback, the TX queues' buffers arrive: host_pinned too)".into(),
            ));
        }
        let packet = self.regions[segment.index()].buf_size as u64;
        let burst_in = u64::from(self.q.batch_size) * packet;
        let burst_out = u64::from(self.q.batch_size) * iq_output_bytes(iq, packet);
        let need = burst_in.max(burst_out);
        if (r.buf_size as u64) < need {
            return Err(at(format!(
                "buffers of `{name}` hold {} bytes; a burst of {} packets of up to {packet} bytes needs {need}",
                r.buf_size, self.q.batch_size
            )));
        }
        if r.num_bufs < 3 {
            return Err(at(format!(
                "`{name}` has {} buffers; it needs 3 (gathering, filling, held by the application)",
                r.num_bufs
            )));
        }
        Ok(Some(id))
    }

    /// A planning error about this queue.
    /// The queue's capture, with where a transient buffer keeps its packets decided:
    /// beside the packets (device memory for a queue in device memory, else host) unless
    /// `keep_in` says otherwise, and only where its copies can be made.
    fn capture(&self, segments: &[RegionId]) -> Result<Option<CaptureSpec>, PlanError> {
        let Some(mut c) = self.q.capture.clone() else {
            return Ok(None);
        };
        let Some(t) = &mut c.transient else {
            return Ok(Some(c));
        };
        let on_gpu = segments
            .iter()
            .any(|&r| self.kind_of(r) == MemoryKind::Device);
        let keep_in = *t.keep_in.get_or_insert(if on_gpu {
            MemoryKind::Device
        } else {
            MemoryKind::Host
        });
        match (on_gpu, keep_in) {
            (true, MemoryKind::Device) if t.trigger_on.is_some() => Err(self.bad(
                "capture.transient.trigger_on reads packets with the CPU, and this queue's packets are in device memory: fire its trigger from the API, SIGUSR1 or POST /trigger instead".into(),
            )),
            (true, MemoryKind::Device) | (false, MemoryKind::Host | MemoryKind::HostPinned) => {
                Ok(Some(c))
            }
            (true, _) => Err(self.bad(
                "capture.transient.keep_in: this queue's packets are in device memory, so they are kept there (keep_in: device; windows written through cuFile)".into(),
            )),
            (false, _) => Err(self.bad(
                "capture.transient.keep_in: device keeps a queue's packets that are in device memory; this queue's are in host memory (keep_in: host or host_pinned)".into(),
            )),
        }
    }

    fn bad(&self, reason: String) -> PlanError {
        PlanError::Queue {
            interface: self.iface.name.clone(),
            direction: self.dir,
            queue: QueueId(self.q.id),
            reason,
        }
    }

    /// True when an RX queue's packets arrive in pinned memory only: its own regions,
    /// and the TX queues' where the engine hands those buffers over.
    fn arrives_pinned(&self, segments: &[RegionId]) -> bool {
        segments
            .iter()
            .chain(self.tx_regions)
            .all(|&s| self.kind_of(s) == MemoryKind::HostPinned)
    }

    fn kind_of(&self, r: RegionId) -> MemoryKind {
        self.regions[r.index()].kind
    }

    /// An RX queue's stage: needed when its packets must be split into two segments or
    /// land in GPU memory the engine cannot write.
    fn rx_stage(
        &self,
        segments: &[RegionId],
        gpu_source: Option<u32>,
    ) -> Result<Option<StagePlan>, PlanError> {
        let first_gpu = segments
            .iter()
            .find(|&&r| self.kind_of(r) == MemoryKind::Device)
            .map(|&r| self.regions[r.index()].affinity);
        if segments.len() < 2 && first_gpu.is_none() && gpu_source.is_none() {
            return Ok(None);
        }
        if segments.len() > 2 {
            return Err(self.bad(format!(
                "the software path splits packets into at most two segments (headers, payload); this queue has {}",
                segments.len()
            )));
        }
        Ok(Some(StagePlan {
            split_header_bytes: (segments.len() == 2)
                .then(|| self.regions[segments[0].index()].buf_size),
            gpu: first_gpu.or(gpu_source),
            mode: self.config.gpu_stage,
        }))
    }

    /// The reorders whose flows all go to this RX queue.
    fn rx_reorders(&self, segments: &[RegionId]) -> Vec<ReorderPlan> {
        let source_buf_size = segments
            .first()
            .map_or(0, |&r| self.regions[r.index()].buf_size);
        self.iface
            .rx
            .iter()
            .flat_map(|rx| {
                rx.reorder
                    .iter()
                    .filter(|r| rx.reorder_queue(r).is_some_and(|rq| rq.id == self.q.id))
            })
            .filter_map(|r| {
                let spec = r.spec(source_buf_size);
                Some(ReorderPlan {
                    name: r.name.clone(),
                    kind: r.kind,
                    output: region_id(self.regions, &r.memory_region)?,
                    flow_ids: r.flow_ids.clone(),
                    packets_per_batch: spec.packets_per_batch(),
                    in_slot_bytes: spec.in_slot_bytes,
                    spec,
                })
            })
            .collect()
    }

    /// A TX queue's stage (bursts in GPU memory for an engine that reads bytes with the
    /// CPU) and how `tx_eth_src` is applied.
    fn tx_stage(&self, segments: &[RegionId]) -> (Option<StagePlan>, EthSrc) {
        let header_on_gpu = segments
            .first()
            .is_some_and(|&r| self.kind_of(r) == MemoryKind::Device);
        let eth_src = match (self.q.tx_eth_src, header_on_gpu) {
            (false, _) => EthSrc::Off,
            (true, false) => EthSrc::Stamp,
            (true, true) => EthSrc::HeadersOnGpu,
        };
        let stage = staging::cpu_copies(self.config, self.iface)
            .is_some()
            .then(|| {
                segments
                    .first()
                    .filter(|&&r| self.kind_of(r) == MemoryKind::Device)
            })
            .flatten()
            .map(|&r| StagePlan {
                split_header_bytes: None,
                gpu: Some(self.regions[r.index()].affinity),
                mode: self.config.gpu_stage,
            });
        (stage, eth_src)
    }

    /// The host region the engine receives into or sends from when the queue is staged.
    fn staging(&self, stage: &Option<StagePlan>) -> Result<Option<RegionId>, PlanError> {
        let name = staging::staging_name(&self.iface.name, self.dir, self.q.id);
        Ok(match (staging::cpu_copies(self.config, self.iface), stage) {
            (Some(staging::CpuCopies::EveryLayout), Some(_)) => {
                Some(region_id(self.regions, &name).ok_or_else(|| {
                    self.bad(format!(
                        "needs its staging region `{name}` (made by plan::staging::with_staging_regions)"
                    ))
                })?)
            }
            // A DPDK virtual device stages only queues in GPU memory.
            (Some(staging::CpuCopies::GpuMemoryOnly), Some(_)) => region_id(self.regions, &name),
            _ => None,
        })
    }

    /// The core of the queue's stage, when it has one of its own (`stage_core`).
    fn stage_core(&self, stage: &Option<StagePlan>) -> Result<Option<u32>, PlanError> {
        let q = self.q;
        match (q.stage_core, stage) {
            (None, _) => Ok(None),
            (Some(core), _) if core == q.cpu_core => Err(self.bad(format!(
                "stage_core {core} is its cpu_core; leave stage_core out to stage on the receiving worker"
            ))),
            (Some(_), _) if q.copy_cores.contains(&q.cpu_core) => Err(self.bad(format!(
                "stage_core lists its cpu_core {} as a copy helper; a helper needs a core of its own",
                q.cpu_core
            ))),
            (Some(core), Some(_)) => Ok(Some(core)),
            (Some(_), None) => Err(self.bad(format!(
                "stage_core is set, but the queue needs no stage: the {} engine delivers into its memory regions as they are",
                self.config.engine.name()
            ))),
        }
    }
}

/// The most decoded bytes one packet of `packet` bytes gives in `iq`'s format.
fn iq_output_bytes(iq: &crate::config::IqConfig, packet: u64) -> u64 {
    use crate::protocol::iq::{IqFormat, Precision};
    let per_value = match iq.precision {
        Precision::F32 => 4,
        Precision::F16 => 2,
    };
    let samples = match iq.format {
        IqFormat::Vrt { samples } => packet / samples.bytes() as u64,
        IqFormat::EcpriUplane { compression, .. } => packet / compression.prb_bytes() as u64 * 12,
    };
    samples * 2 * per_value
}
