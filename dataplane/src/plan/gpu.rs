//! GPU memory a NIC reads or writes by DMA (GPUDirect), and where that cannot work: an
//! integrated GPU (GB10, Jetson) shares the system's memory and has no PCIe BAR a NIC can
//! reach, so a `device` region the NIC must fill or send from is refused with the fix
//! (`host_pinned`, which the integrated GPU reads in place).
//!
//! Whether a GPU is integrated is a fact of the machine, not of the configuration: the
//! plan says which regions depend on it ([`Plan::gpu_memory_nics_reach`]) and the caller
//! (start, `validate --plan`, `doctor`) supplies the answer.

use super::{Plan, PlanError, RegionPlan};
use crate::config::MemoryKind;
use crate::descriptor::RegionId;
use serde::Serialize;

/// A `device` region a NIC reaches by DMA.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NicGpuAccess {
    /// The region.
    pub region: RegionId,
    /// Who reaches it and how, for messages ("interface `rx0` receives into it (DPDK, PCI)").
    pub via: String,
}

impl Plan {
    /// The `device` regions a NIC reads or writes by DMA: lent to a PCI DPDK port's RX
    /// pool, or registered with the RDMA NIC under `gpu_memory_path: direct` (`auto`
    /// stages where registration fails, so it does not depend on it).
    pub fn gpu_memory_nics_reach(&self) -> Vec<NicGpuAccess> {
        let device = |r: RegionId| {
            self.regions
                .get(r.index())
                .is_some_and(|p| p.kind == MemoryKind::Device)
        };
        let mut out = Vec::new();
        if let Some(d) = self.dpdk() {
            for q in &self.queues {
                let port = d.ports.iter().find(|p| p.interface == q.interface);
                let Some(port) = port.filter(|p| p.pci) else {
                    continue;
                };
                for &r in q.segments.iter().filter(|&&r| device(r)) {
                    if self.regions[r.index()].lent {
                        out.push(NicGpuAccess {
                            region: r,
                            via: format!(
                                "interface `{}` receives into it by DMA (DPDK, PCI {})",
                                port.name, port.address
                            ),
                        });
                    }
                }
            }
        }
        for iface in self.rdma() {
            for slot in &iface.slots {
                let rx = slot.rx_staging.is_none().then_some(slot.rx_region);
                let tx = slot.tx_region.filter(|_| slot.tx_staging.is_none());
                for r in [rx, tx].into_iter().flatten().filter(|&r| device(r)) {
                    out.push(NicGpuAccess {
                        region: r,
                        via: format!(
                            "RDMA interface `{}` registers it with the NIC (gpu_memory_path: direct)",
                            iface.name
                        ),
                    });
                }
            }
        }
        out.sort_by_key(|a| a.region);
        out.dedup_by_key(|a| a.region);
        out
    }

    /// Refuses a `device` region that a NIC must reach by DMA on a GPU that `integrated`
    /// says is integrated. `integrated` is asked only about such regions, so a plan
    /// without them never touches the GPU.
    pub fn check_integrated_gpus(
        &self,
        integrated: &dyn Fn(&RegionPlan) -> bool,
    ) -> Result<(), PlanError> {
        for access in self.gpu_memory_nics_reach() {
            let region = &self.regions[access.region.index()];
            if integrated(region) {
                return Err(PlanError::IntegratedGpu {
                    region: region.name.clone(),
                    gpu: region.affinity,
                    via: access.via,
                });
            }
        }
        Ok(())
    }
}
