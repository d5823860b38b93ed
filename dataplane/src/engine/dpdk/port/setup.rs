//! Setting up a port's queues: their pools (lent regions, copies, header-data split), the
//! RX and TX queues with the idle ones a driver needs, and the device clocks.

use super::*;
use crate::descriptor::QueueId;
use crate::memory::RegionId;

/// What setting up a port's queues needs of the port: its plan, the regions, the device's
/// information, its id and NUMA socket.
pub(super) struct QueueSetup<'a> {
    pub(super) planned: &'a PortPlan,
    pub(super) regions: &'a RegionSet,
    pub(super) info: &'a sys::rte_eth_dev_info,
    pub(super) driver: &'a str,
    pub(super) id: u16,
    pub(super) socket: i32,
    /// Descriptors per RX ring, as the driver takes them.
    pub(super) rx_descriptors: u16,
    /// Descriptors per TX ring, as the driver takes them.
    pub(super) tx_descriptors: u16,
}

impl QueueSetup<'_> {
    fn device_err(&self, source: DpdkError) -> EngineError {
        device_error(self.planned, source)
    }

    /// A pool of `size` for segment `seg` of queue `queue`.
    fn pool(
        &self,
        queue: QueueId,
        direction: Direction,
        seg: usize,
        size: &PoolSize,
    ) -> Result<Mempool, EngineError> {
        let (planned, socket, index) = (self.planned, self.socket, self.planned.interface);

        if size.mbufs > size.configured {
            tracing::warn!(
                "interface `{}` {} queue {}: {} buffers are below 1.5x the planned {}-descriptor ring plus a burst; the DPDK pool gets {}",
                planned.name,
                direction.name(),
                queue,
                size.configured,
                match direction {
                    Direction::Rx => planned.rx_descriptors,
                    Direction::Tx => planned.tx_descriptors,
                },
                size.mbufs
            );
        }
        // The plan keeps DPDK queues' buffers inside an mbuf's 16-bit data room.
        let room = u16::try_from(size.data_room).map_err(|_| EngineError::Queue {
            interface: planned.name.clone(),
            direction,
            queue,
            reason: format!("a {}-byte buffer does not fit an mbuf", size.data_room),
        })?;
        Mempool::pktmbuf(
            format!("dp{index}{}{}s{seg}", direction.name(), queue),
            size.mbufs,
            256,
            room,
            socket,
        )
        .map_err(|source| EngineError::Pool {
            interface: planned.name.clone(),
            direction,
            queue: Some(queue),
            source,
        })
    }

    /// Lends `region` to DPDK for RX queue `q` (zero-copy receive): the pool's pointer and
    /// the lent pool; the pool and the registered memory are kept in `port`.
    fn lend_rx(
        &self,
        port: &mut Port,
        q: QueueId,
        region: RegionId,
    ) -> Result<(PoolPtr, Arc<LentPool>), EngineError> {
        let (planned, regions) = (self.planned, self.regions);
        let device = (planned.pci).then_some(Device(self.info.device));
        let made = lend_region(
            regions,
            region,
            device,
            self.socket,
            format!("dp{}rx{}z", planned.interface, q),
        )
        .map_err(|source| EngineError::Lend {
            interface: planned.name.clone(),
            queue: q,
            source,
        })?;
        tracing::info!(
            "interface `{}` RX queue {}: receives into region `{}` without copying",
            planned.name,
            q,
            regions.get(region).name()
        );
        let ptr = made.pool.ptr();
        port.pools.push(made.pool);
        port.memory.push(made.memory);
        Ok((ptr, made.lent))
    }

    /// Idle RX queue `i`, which nobody polls; its pool only has to fill the ring.
    fn idle_rx_queue(&self, port: &mut Port, i: u16) -> Result<(), EngineError> {
        let (planned, id, socket, index) =
            (self.planned, self.id, self.socket, self.planned.interface);
        // An idle queue nobody polls; its pool only has to fill the ring.
        let room = 2048 + dpdk_plan::HEADROOM;
        let pool = Mempool::pktmbuf(
            format!("dp{index}idle{i}"),
            usize::from(self.rx_descriptors) * 2,
            0,
            room as u16,
            socket,
        )
        .map_err(|source| EngineError::Pool {
            interface: planned.name.clone(),
            direction: Direction::Rx,
            queue: None,
            source,
        })?;
        let ptr = pool.ptr();
        port.pools.push(pool);
        // SAFETY: configured port, queue index below the configured count.
        super::super::error::check("rte_eth_rx_queue_setup (idle queue)", unsafe {
            sys::rte_eth_rx_queue_setup(
                id,
                i,
                self.rx_descriptors,
                socket as u32,
                std::ptr::null(),
                ptr.0,
            )
        })
        .map_err(|source| self.device_err(source))?;
        Ok(())
    }

    /// The configured RX queues (lent, copied or split), then idle ones up to `hw_rx`.
    pub(super) fn rx_queues(&self, port: &mut Port, hw_rx: usize) -> Result<(), EngineError> {
        let (planned, info, driver) = (self.planned, self.info, self.driver);
        let (id, socket) = (self.id, self.socket);
        let device_err = |source| self.device_err(source);
        let rx: Vec<QueueId> = planned.rx.iter().map(|q| q.queue).collect();
        for (&q, planned_rx) in rx.iter().zip(&planned.rx) {
            let i = planned_rx.device_queue;
            let mut rxconf = info.default_rxconf;
            let mut split = Vec::new();
            let mut lent = None;
            let pool: PoolPtr = match &planned_rx.receive {
                RxReceive::Lent { region } => {
                    let (ptr, made) = self.lend_rx(port, q, *region)?;
                    lent = Some(made);
                    ptr
                }
                RxReceive::Copy { pool } => {
                    let pool = self.pool(q, Direction::Rx, 0, pool)?;
                    let ptr = pool.ptr();
                    port.pools.push(pool);
                    ptr
                }
                RxReceive::Split {
                    header,
                    payload,
                    header_bytes,
                } => {
                    // SAFETY: reads a constant defined in the shim.
                    let offload = unsafe { sys::shim_rx_offload_buffer_split };
                    if info.rx_offload_capa & offload == 0 {
                        return Err(EngineError::Queue {
                            interface: planned.name.clone(),
                            direction: Direction::Rx,
                            queue: q,
                            reason: format!(
                                "header-data split (two memory regions) is not supported by this device ({driver} has no buffer split offload); give the queue one memory region"
                            ),
                        });
                    }
                    let head = self.pool(q, Direction::Rx, 0, header)?;
                    let body = self.pool(q, Direction::Rx, 1, payload)?;
                    for (mp, length) in [(head.ptr().0, *header_bytes as u16), (body.ptr().0, 0)] {
                        split.push(sys::rte_eth_rxseg {
                            split: sys::rte_eth_rxseg_split {
                                mp,
                                length,
                                offset: 0,
                                proto_hdr: 0,
                            },
                        });
                    }
                    rxconf.offloads |= offload;
                    rxconf.rx_nseg = 2;
                    rxconf.rx_seg = split.as_mut_ptr();
                    let ptr = head.ptr();
                    port.pools.push(head);
                    port.pools.push(body);
                    ptr
                }
            };
            // SAFETY: configured port, queue index below the configured count; with buffer
            // split the pools come from rx_seg (alive for the call) and `mp` is null.
            super::super::error::check("rte_eth_rx_queue_setup", unsafe {
                sys::rte_eth_rx_queue_setup(
                    id,
                    i,
                    self.rx_descriptors,
                    socket as u32,
                    &rxconf,
                    if split.is_empty() {
                        pool.0
                    } else {
                        std::ptr::null_mut()
                    },
                )
            })
            .map_err(device_err)?;
            port.rx.push(RxSetup {
                queue: q,
                index: QueueIndex(i),
                lent,
            });
        }
        for i in rx.len()..hw_rx {
            self.idle_rx_queue(port, i as u16)?;
        }
        Ok(())
    }

    /// The configured TX queues, then idle ones up to `hw_tx` (net_tap).
    pub(super) fn tx_queues(&self, port: &mut Port, hw_tx: usize) -> Result<(), EngineError> {
        let planned = self.planned;
        let (id, socket, index) = (self.id, self.socket, planned.interface);
        let device_err = |source| self.device_err(source);
        let tx: Vec<QueueId> = planned.tx.iter().map(|q| q.queue).collect();
        // Configured TX queues, then idle ones up to the device's count (net_tap).
        for i in 0..hw_tx {
            let pool = match (tx.get(i).copied(), planned.tx.get(i)) {
                (Some(q), Some(t)) => {
                    let pool = self.pool(q, Direction::Tx, 0, &t.pool)?;
                    let ptr = pool.ptr();
                    port.pools.push(pool);
                    // Direct mbufs of no data room: their buffers are attached region ones.
                    let attach = Mempool::pktmbuf(
                        format!("dp{index}txa{}", q),
                        t.attach_pool.mbufs,
                        256,
                        0,
                        socket,
                    )
                    .map_err(|source| EngineError::Pool {
                        interface: planned.name.clone(),
                        direction: Direction::Tx,
                        queue: Some(q),
                        source,
                    })?;
                    let attach_ptr = attach.ptr();
                    port.pools.push(attach);
                    let room = t.pool.data_room.saturating_sub(dpdk_plan::HEADROOM);
                    Some((q, ptr, room, attach_ptr))
                }
                _ => None,
            };
            // SAFETY: configured port, queue index below the configured count.
            super::super::error::check("rte_eth_tx_queue_setup", unsafe {
                sys::rte_eth_tx_queue_setup(
                    id,
                    i as u16,
                    self.tx_descriptors,
                    socket as u32,
                    std::ptr::null(),
                )
            })
            .map_err(device_err)?;
            if let Some((queue, pool, room, attach)) = pool {
                port.tx.push(TxSetup {
                    queue,
                    index: QueueIndex(i as u16),
                    pool,
                    room,
                    attach,
                });
            }
        }
        Ok(())
    }

    /// The device clocks for RX timestamps and send-on-timestamp, where asked and offered;
    /// software takes over (with a warning) where one cannot be set up.
    pub(super) fn device_clocks(
        &self,
        port: &mut Port,
        device_rx_time: bool,
        device_tx_time: bool,
    ) {
        let (planned, id) = (self.planned, self.id);
        for (wanted, tx) in [(device_rx_time, false), (device_tx_time, true)] {
            if !wanted {
                continue;
            }
            match DeviceTime::set_up(id, tx) {
                Ok(t) => {
                    tracing::info!(
                        "interface `{}`: {} device clock at {:.3} MHz",
                        planned.name,
                        if tx {
                            "send-on-timestamp (accurate_send) by the"
                        } else {
                            "RX timestamps (hardware_timestamps) from the"
                        },
                        t.clock.hz() / 1e6
                    );
                    if tx {
                        port.tx_time = Some(t);
                    } else {
                        port.rx_time = Some(t);
                    }
                }
                Err(e) => tracing::warn!(
                    "interface `{}`: the device offers {} but {e}; done in software instead",
                    planned.name,
                    if tx {
                        "send-on-timestamp"
                    } else {
                        "RX timestamps"
                    }
                ),
            }
        }
    }
}
