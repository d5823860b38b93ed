//! The packet queues of a plan: per queue its segments, core, batch, stage, staging region,
//! reorders, offloads and capture.

use super::*;

pub(super) fn queues(
    config: &Config,
    regions: &[RegionPlan],
    capabilities: &Capabilities,
) -> Result<Vec<QueuePlan>, PlanError> {
    let region_id = |n: &String| {
        regions
            .iter()
            .position(|r| &r.name == n)
            .map(|i| i as RegionId)
    };
    let mut out = Vec::new();
    for (i, iface) in config.interfaces.iter().enumerate() {
        // TX buffers that reach RX queues: a TX queue in GPU memory means packets arrive
        // in GPU memory.
        let gpu_source = if capabilities.tx_buffers_reach_rx {
            iface
                .tx
                .iter()
                .flat_map(|t| &t.queues)
                .filter_map(|t| t.memory_regions.first())
                .filter_map(region_id)
                .map(|r| &regions[r as usize])
                .find(|r| r.kind == MemoryKind::Device)
                .map(|r| r.affinity)
        } else {
            None
        };
        for (dir, queues) in [
            (Direction::Rx, iface.rx.as_ref().map(|r| &r.queues)),
            (Direction::Tx, iface.tx.as_ref().map(|t| &t.queues)),
        ] {
            for (qi, q) in queues.into_iter().flatten().enumerate() {
                let segments: Vec<RegionId> =
                    q.memory_regions.iter().filter_map(region_id).collect();
                let bad = |reason: String| PlanError::Queue {
                    interface: iface.name.clone(),
                    direction: dir,
                    queue: q.id,
                    reason,
                };
                let kind_of = |r: RegionId| regions[r as usize].kind;
                let (stage, reorders, eth_src) = match dir {
                    Direction::Rx => {
                        let first_gpu = segments
                            .iter()
                            .find(|&&r| kind_of(r) == MemoryKind::Device)
                            .map(|&r| regions[r as usize].affinity);
                        let stage = if segments.len() < 2
                            && first_gpu.is_none()
                            && gpu_source.is_none()
                        {
                            None
                        } else if segments.len() > 2 {
                            return Err(bad(format!(
                                "the software path splits packets into at most two segments (headers, payload); this queue has {}",
                                segments.len()
                            )));
                        } else {
                            Some(StagePlan {
                                split_header_bytes: (segments.len() == 2)
                                    .then(|| regions[segments[0] as usize].buf_size),
                                gpu: first_gpu.or(gpu_source),
                                mode: config.gpu_stage,
                            })
                        };
                        let source_buf_size = segments
                            .first()
                            .map_or(0, |&r| regions[r as usize].buf_size);
                        let reorders = iface
                            .rx
                            .iter()
                            .flat_map(|rx| {
                                rx.reorder
                                    .iter()
                                    .filter(|r| rx.reorder_queue(r).is_some_and(|rq| rq.id == q.id))
                            })
                            .filter_map(|r| {
                                let spec = r.spec(source_buf_size);
                                Some(ReorderPlan {
                                    name: r.name.clone(),
                                    kind: r.kind,
                                    output: region_id(&r.memory_region)?,
                                    flow_ids: r.flow_ids.clone(),
                                    packets_per_batch: spec.packets_per_batch(),
                                    in_slot_bytes: spec.in_slot_bytes,
                                    spec,
                                })
                            })
                            .collect();
                        (stage, reorders, EthSrc::Off)
                    }
                    Direction::Tx => {
                        let header_on_gpu = segments
                            .first()
                            .is_some_and(|&r| kind_of(r) == MemoryKind::Device);
                        let eth_src = match (q.tx_eth_src, header_on_gpu) {
                            (false, _) => EthSrc::Off,
                            (true, false) => EthSrc::Stamp,
                            (true, true) => EthSrc::HeadersOnGpu,
                        };
                        let stage = staging::cpu_copies(config, iface)
                            .is_some()
                            .then(|| {
                                segments
                                    .first()
                                    .filter(|&&r| kind_of(r) == MemoryKind::Device)
                            })
                            .flatten()
                            .map(|&r| StagePlan {
                                split_header_bytes: None,
                                gpu: Some(regions[r as usize].affinity),
                                mode: config.gpu_stage,
                            });
                        (stage, Vec::new(), eth_src)
                    }
                };
                let name = staging::staging_name(&iface.name, dir, q.id);
                let staging = match (staging::cpu_copies(config, iface), &stage) {
                    (Some(staging::CpuCopies::EveryLayout), Some(_)) => Some(region_id(&name).ok_or_else(|| {
                        bad(format!(
                            "needs its staging region `{name}` (made by plan::staging::with_staging_regions)"
                        ))
                    })?),
                    // A DPDK virtual device stages only queues in GPU memory.
                    (Some(staging::CpuCopies::GpuMemoryOnly), Some(_)) => region_id(&name),
                    _ => None,
                };
                let stage_core = match (q.stage_core, &stage) {
                    (None, _) => None,
                    (Some(core), _) if core == q.cpu_core => {
                        return Err(bad(format!(
                            "stage_core {core} is its cpu_core; leave stage_core out to stage on the receiving worker"
                        )));
                    }
                    (Some(_), _) if q.copy_cores.contains(&q.cpu_core) => {
                        return Err(bad(format!(
                            "stage_core lists its cpu_core {} as a copy helper; a helper needs a core of its own",
                            q.cpu_core
                        )));
                    }
                    (Some(core), Some(_)) => Some(core),
                    (Some(_), None) => {
                        return Err(bad(format!(
                            "stage_core is set, but the queue needs no stage: the {} engine delivers into its memory regions as they are",
                            config.engine.name()
                        )));
                    }
                };
                let host_memory_only = dir == Direction::Tx
                    && staging::cpu_copies(config, iface).is_some()
                    && stage.is_none();
                out.push(QueuePlan {
                    host_memory_only,
                    interface: i,
                    interface_name: iface.name.clone(),
                    direction: dir,
                    id: q.id,
                    core_key: format!("interfaces[{i}].{}.queues[{qi}].cpu_core", dir.name()),
                    segments,
                    core: q.cpu_core,
                    batch: q.batch_size as usize,
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
                    pacing_mbps: (dir == Direction::Tx && q.pacing_mbps > 0)
                        .then_some(q.pacing_mbps),
                    timestamps: dir == Direction::Rx
                        && iface.rx.as_ref().is_some_and(|r| r.timestamps),
                    capture: q.capture.clone(),
                    send_at_time: dir == Direction::Tx
                        && iface.tx.as_ref().is_some_and(|t| t.accurate_send),
                });
            }
        }
    }
    Ok(out)
}
