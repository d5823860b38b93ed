//! Region ids that stay the same across live changes. A running plane's regions never
//! move ([`crate::memory::RegionSet`] only grows): a new plan is renumbered so that each
//! region it shares with the running plan, by name and every planned setting, keeps its
//! id, and each one it adds or resizes takes the next free id. A running region the new
//! plan no longer has stays in the plan, `retired`, at its id.

use super::{EnginePlan, Plan, ProtocolPlan, RegionPlan};
// A plan fresh from planning has no retired region, so a running region that is not
// retired and compares equal is the same region (name and every planned setting).
use crate::descriptor::RegionId;

impl Plan {
    /// This plan (a new one) with its region ids in the running plan's numbering: each
    /// region the running plan has (not retired, same name and settings) at its id there,
    /// the others after the running plan's last; running regions this plan lacks are
    /// kept at their ids, retired. Pure; the identity when the regions are the same ones
    /// in the same order.
    pub fn in_slots_of(mut self, running: &Plan) -> Plan {
        let mut next = running.regions.len();
        let mut taken = vec![false; next];
        let slots: Vec<usize> = self
            .regions
            .iter()
            .map(|r| {
                let found = running
                    .regions
                    .iter()
                    .enumerate()
                    .position(|(i, o)| !o.retired && !taken[i] && o.same_memory(r));
                match found {
                    Some(i) => {
                        taken[i] = true;
                        i
                    }
                    None => {
                        next += 1;
                        next - 1
                    }
                }
            })
            .collect();
        let mut regions: Vec<Option<RegionPlan>> = running
            .regions
            .iter()
            .map(|o| {
                Some(RegionPlan {
                    retired: true,
                    ..o.clone()
                })
            })
            .collect();
        regions.resize(next, None);
        for (r, &slot) in std::mem::take(&mut self.regions).into_iter().zip(&slots) {
            regions[slot] = Some(r);
        }
        // Every id below `next` is a running region or one of this plan's.
        self.regions = regions.into_iter().flatten().collect();
        self.map_region_ids(|id| RegionId(slots[id.index()] as u16));
        self
    }

    /// Regions of this plan that `running` does not have: (id, region), each to be
    /// allocated at its id in order.
    pub fn regions_beyond<'a>(
        &'a self,
        running: &Plan,
    ) -> impl Iterator<Item = (RegionId, &'a RegionPlan)> {
        self.regions
            .iter()
            .enumerate()
            .skip(running.regions.len())
            .map(|(i, r)| (RegionId(i as u16), r))
    }

    /// True when the regions are renumbered: some id of this plan (before
    /// [`Plan::in_slots_of`]) names another region than in `running`.
    pub(crate) fn renumbers_regions(&self, running: &Plan) -> bool {
        self.regions.len() != running.regions.len()
            || self
                .regions
                .iter()
                .zip(&running.regions)
                .any(|(n, o)| !o.same_memory(n))
    }

    /// Rewrites every region id of the plan with `map`.
    fn map_region_ids(&mut self, map: impl Fn(RegionId) -> RegionId) {
        let map_opt = |r: &mut Option<RegionId>| {
            if let Some(id) = r {
                *id = map(*id);
            }
        };
        for q in &mut self.queues {
            for s in &mut q.segments {
                *s = map(*s);
            }
            map_opt(&mut q.staging);
            map_opt(&mut q.transform_region);
            for r in &mut q.reorders {
                r.output = map(r.output);
            }
            match &mut q.protocol {
                Some(ProtocolPlan::Iq(iq)) => map_opt(&mut iq.sample_region),
                Some(ProtocolPlan::Spead(s)) => map_opt(&mut s.chunk_region),
                Some(ProtocolPlan::SpeadSend(_)) | None => {}
            }
        }
        match &mut self.engine_plan {
            EnginePlan::Loopback(l) => {
                for i in &mut l.interfaces {
                    for (_, r) in &mut i.tx_queues {
                        map_opt(r);
                    }
                }
            }
            EnginePlan::Socket(interfaces) => {
                for q in interfaces
                    .iter_mut()
                    .flat_map(|i| i.rx.iter_mut().chain(&mut i.tx))
                {
                    q.region = map(q.region);
                }
            }
            // Their devices take the regions at start: a change that renumbers regions is
            // refused for them (`PlanChange`), so their ids stay as planned.
            EnginePlan::Dpdk(_) | EnginePlan::Rdma(_) | EnginePlan::Unavailable => {}
        }
    }
}
