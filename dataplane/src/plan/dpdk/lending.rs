//! Which regions the DPDK engine receives into and sends from without copying.

use super::super::PlanError;
use super::*;

/// How the DPDK engine transmits the buffers of a region.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum TxCarry {
    /// Attached to mbufs as external buffers (the region is registered with EAL): no
    /// copy; the buffer returns to its pool when the driver frees the mbuf.
    Attached,
    /// In the mbuf of the RX pool the region is lent to: no copy.
    OwnMbufs,
    /// In the mbuf of the region's own pool: the region is lent to an mbuf pool for
    /// sending ([`tx_lending`]), so its buffers are that pool's mbufs: no copy, no
    /// attach, and the driver frees a sent mbuf straight back into the pool.
    Lent,
    /// Copied into an mbuf of the TX queue's pool.
    Copied {
        /// Why not without a copy.
        because: String,
    },
}

impl TxCarry {
    /// True unless copied.
    pub fn zero_copy(&self) -> bool {
        !matches!(self, TxCarry::Copied { .. })
    }
}

/// The fewest buffers of a region lent for sending: the pool's per-lcore caches (256
/// mbufs, flushed above 384) on the cores that send and free its mbufs must hold only a
/// small part of it, or an allocation fails while buffers sit in another core's cache.
pub const TX_LEND_MIN_BUFS: usize = 2048;

/// Per region: whether the DPDK engine lends it to an mbuf pool of its own for sending.
/// A region qualifies when only TX queues of virtual devices use it (PCI NICs attach, see
/// below), it is not received into, its memory is
/// host memory (attachable too, but lending saves the attach and the free callback per
/// packet), its `zero_copy` is not `false`, it has at least [`TX_LEND_MIN_BUFS`] buffers,
/// and its stride with the mbuf headroom fits an mbuf's 16-bit length. Other regions
/// sent from are attached or copied ([`tx_carry`]).
pub(in crate::plan) fn tx_lending(
    config: &Config,
    rx_lending: &[(bool, Option<String>)],
) -> Vec<bool> {
    config
        .memory_regions
        .iter()
        .zip(rx_lending)
        .map(|(m, (rx_lent, _))| {
            let mut users = config
                .queues()
                .filter(|(_, _, q)| q.memory_regions.contains(&m.name))
                .peekable();
            // Virtual devices only: on a PCI NIC the headroom moves buffers across page
            // boundaries the configuration kept them within (QEMU's igb drops such frames
            // in scripts/pci-vm.sh), and lending is not yet shown on a real NIC there.
            let only_sent_from = users.peek().is_some()
                && users.all(|(i, d, _)| {
                    d == Direction::Tx && !is_pci_address(&config.interfaces[i].address)
                });
            let stride = (HEADROOM + m.buf_size).next_multiple_of(LENT_ALIGN);
            !rx_lent
                && only_sent_from
                && m.zero_copy != Some(false)
                && m.kind != MemoryKind::Device
                && m.num_bufs >= TX_LEND_MIN_BUFS
                && stride <= u16::MAX as usize
        })
        .collect()
}

/// Per region: how its buffers are sent (see [`TxCarry`]). A host region is lent for
/// sending where [`tx_lending`] says so, else attached unless its `zero_copy` is `false`
/// or its buffers exceed an mbuf's 16-bit buffer length.
pub(in crate::plan) fn tx_carry(
    config: &Config,
    lending: &[(bool, Option<String>)],
) -> Vec<TxCarry> {
    let lent_for_tx = tx_lending(config, lending);
    config
        .memory_regions
        .iter()
        .zip(lending)
        .zip(lent_for_tx)
        .map(|((m, (lent, _)), lent_for_tx)| {
            let copied = |because: &str| TxCarry::Copied {
                because: because.to_owned(),
            };
            if *lent {
                TxCarry::OwnMbufs
            } else if lent_for_tx {
                TxCarry::Lent
            } else if m.zero_copy == Some(false) {
                copied("zero_copy: false")
            } else if m.kind == MemoryKind::Device {
                copied("GPU memory that is not lent to a PCI NIC's RX pool")
            } else if m.buf_size > u16::MAX as usize {
                copied("buf_size is above 65,535 bytes (an mbuf's buffer length)")
            } else {
                TxCarry::Attached
            }
        })
        .collect()
}

/// Per region: whether the DPDK engine receives into it without copying, and if not,
/// why. A region qualifies when it is the only region of one RX queue (no other queue
/// uses it), has buffers of at least [`ZERO_COPY_MIN_BUF_SIZE`] bytes and enough of them
/// for the descriptor ring, and is memory the port can reach (host kinds; `device` only
/// for a PCI NIC, which writes it by DMA). A qualifying region is lent unless its
/// `zero_copy` is `false` or, by default, the port is a `net_ring` (which hands over the
/// sender's mbufs, so a lent pool would only add a copy). [`check_lending`] says which
/// outcomes are errors.
pub(in crate::plan) fn lending(config: &Config) -> Vec<(bool, Option<String>)> {
    let n = config.memory_regions.len();
    let index = |name: &String| config.memory_regions.iter().position(|m| &m.name == name);
    let mut uses = vec![0usize; n];
    for (_, _, q) in config.queues() {
        for i in q.memory_regions.iter().filter_map(index) {
            uses[i] += 1;
        }
    }
    let mut plan: Vec<(bool, Option<String>)> = vec![
        (
            false,
            Some("it is not the only memory region of one RX queue".into())
        );
        n
    ];
    for (iface, dir, q) in config.queues() {
        if dir != Direction::Rx || q.memory_regions.len() != 1 {
            continue;
        }
        let Some(i) = index(&q.memory_regions[0]) else {
            continue;
        };
        let m = &config.memory_regions[i];
        let pci = is_pci_address(&config.interfaces[iface].address);
        let stride = (HEADROOM + m.buf_size).next_multiple_of(LENT_ALIGN);
        let rx_descriptors = descriptors(config, &config.interfaces[iface]).0;
        let ring = min_mbufs(rx_descriptors, q.batch_size);
        let why_not = if uses[i] != 1 {
            Some("other queues use it too".to_owned())
        } else if m.kind == MemoryKind::Device && !pci {
            Some("a virtual device cannot reach GPU memory".to_owned())
        } else if m.buf_size < ZERO_COPY_MIN_BUF_SIZE {
            Some(format!("buf_size is below {ZERO_COPY_MIN_BUF_SIZE}"))
        } else if stride > u16::MAX as usize {
            Some("buf_size is above 65 KiB".to_owned())
        } else if m.num_bufs < ring {
            Some(format!(
                "num_bufs is below {ring} (1.5x the {rx_descriptors}-descriptor ring plus a burst)"
            ))
        } else {
            None
        };
        let net_ring = config.interfaces[iface].address.starts_with("net_ring");
        plan[i] = match (why_not, m.zero_copy) {
            (Some(reason), _) => (false, Some(reason)),
            (None, Some(false)) => (false, Some("zero_copy: false".into())),
            (None, None) if net_ring => (
                false,
                Some("a net_ring port hands over the sender's mbufs (set zero_copy: true to lend it anyway)".into()),
            ),
            (None, _) => (true, None),
        };
    }
    plan
}

/// A region with `zero_copy: true` that cannot be lent, or a `device` region that is not
/// (nothing else can fill it), is an error.
pub(in crate::plan) fn check_lending(
    config: &Config,
    plan: &[(bool, Option<String>)],
) -> Result<(), PlanError> {
    let carry = tx_carry(config, plan);
    let received_into = |name: &str| {
        config
            .queues()
            .any(|(_, dir, q)| dir == Direction::Rx && q.memory_regions.iter().any(|n| n == name))
    };
    for ((m, (lent, why)), carry) in config.memory_regions.iter().zip(plan).zip(&carry) {
        // A region only sent from is zero copy when attached; one received into, when lent.
        let sent_without_copy = carry.zero_copy() && !received_into(&m.name);
        if m.zero_copy == Some(true) && !lent && !sent_without_copy {
            return Err(PlanError::ZeroCopyImpossible {
                region: m.name.clone(),
                reason: why.clone().unwrap_or_default(),
            });
        }
        // Queues on a virtual device receive into and send from their staging region;
        // the worker's stage moves packets to and from GPU memory.
        let staged = config.queues().all(|(i, dir, q)| {
            !q.memory_regions.contains(&m.name)
                || config
                    .memory_region(&crate::plan::staging::staging_name(
                        &config.interfaces[i].name,
                        dir,
                        q.id,
                    ))
                    .is_some()
        });
        if m.kind == MemoryKind::Device && !lent && !staged {
            return Err(PlanError::DeviceUnreachable {
                region: m.name.clone(),
                reason: why.clone().unwrap_or_default(),
            });
        }
    }
    Ok(())
}
