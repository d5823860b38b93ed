//! Changing a running data plane to a new configuration ([`DataPlane::change`]): planned
//! like a start, compared with the running plan ([`PlanChange`]), then carried out while
//! traffic flows, or refused whole.

use super::{DataPlane, StartError};
use crate::config::{Config, Direction, RxConfig};
use crate::plan::Plan;
use crate::plan::change::{NotLive, PlanChange, QueueFate};
use crate::steering::FlowError;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long a change waits for removed queues to hand over what they hold.
const RETIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a change was not made.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// The new configuration cannot be planned on this machine (nothing was changed), or
    /// an added queue could not be set up (the queues added before it stay; no rule
    /// switched, no queue was removed).
    #[error(transparent)]
    Start(#[from] StartError),
    /// Parts of the change need a restart; nothing was changed.
    #[error("not a live change, nothing was changed:\n  {}", .0.iter().map(|n| n.to_string()).collect::<Vec<_>>().join("\n  "))]
    NotLive(Vec<NotLive>),
    /// An interface's new rules were refused or not adopted in time. Interfaces listed
    /// before it in the change already use their new rules; no queue was removed.
    #[error("interface `{interface}`: {source}")]
    Rules {
        /// The interface.
        interface: String,
        /// Why.
        source: FlowError,
    },
}

/// What a change did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ChangeReport {
    /// The change, as planned.
    pub change: PlanChange,
    /// Worker cores started for added queues (the others joined running workers).
    pub added: AddedQueues,
    /// The queues removed, with their final counts.
    pub removed: Vec<RemovedQueue>,
    /// Worker cores stopped because none of their queues is left.
    pub stopped_cores: Vec<u32>,
    /// How long the change took, in seconds.
    pub seconds: f64,
}

/// What adding queues started.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct AddedQueues {
    /// Queues added.
    pub queues: usize,
    /// Worker cores started for them.
    pub started_cores: Vec<u32>,
}

/// A queue a change removed.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RemovedQueue {
    /// Interface name.
    pub interface: String,
    /// RX or TX.
    pub direction: Direction,
    /// Queue id.
    pub id: u16,
    /// Packets it moved in all (delivered to the ring for RX, sent for TX).
    pub packets: u64,
    /// Packets it dropped in all, by any cause.
    pub dropped: u64,
    /// False when it still held packets when the change returned (its worker keeps
    /// handing them over, then drops the queue).
    pub drained: bool,
}

impl DataPlane {
    /// Changes the running plane to `new` while traffic flows, or changes nothing.
    ///
    /// Done live (see [`crate::plan::change`]), in this order: regions added or resized
    /// (allocated in new slots of the running [`crate::memory::RegionSet`]; a replaced
    /// one keeps its memory until the plane stops); queues added on the software
    /// loopback and UDP interfaces (set up in the engine, their tasks handed to their cores'
    /// workers or to new ones; take their application ends with `take_rx_queue` and
    /// `take_tx_queue` afterwards); flow rules in software (flows added, removed or
    /// changed, flow isolation, the exception queue, the queues RSS spreads over; one
    /// switch per interface, so every packet is steered by the old rules or the new ones);
    /// queues removed on the software loopback (the new rules no longer steer to them, so
    /// each hands over what it holds; its application end then reports `Stopped`).
    /// Queues the change does not touch keep running and lose nothing. Anything else,
    /// such as a queue's settings or the region of a queue that keeps running, is refused with
    /// [`ChangeError::NotLive`] naming each key and why, before anything is changed.
    pub fn change(&mut self, new: &Config) -> Result<ChangeReport, ChangeError> {
        let started = Instant::now();
        let (new, plan) = super::start::plan_for_this_machine(new)?;
        let (mut change, plan) =
            PlanChange::between_in_slots((&self.config, &self.plan), (&new, &plan));
        change.allow_removals(|q| {
            self.engine.closes_live(
                crate::descriptor::PortIndex(q.port as u16),
                q.direction,
                q.id,
            )
        });
        change.allow_software_rules(|port| {
            self.engine
                .rules_in_software(crate::descriptor::PortIndex(port as u16))
        });
        if !change.is_live() {
            return Err(ChangeError::NotLive(change.not_live));
        }
        super::start::check_cores(&plan)?;
        self.add_regions(&plan)?;
        let added = self.add_queues(&change, &plan)?;
        let empty = RxConfig::empty();
        for r in &change.rules {
            let rx = new.interfaces[r.port].rx.as_ref().unwrap_or(&empty);
            self.steering[r.port]
                .replace_rules(rx)
                .map_err(|source| ChangeError::Rules {
                    interface: r.interface.clone(),
                    source,
                })?;
        }
        let removed = self.remove_queues(&change);
        let stopped_cores = self.stop_idle_workers(&plan, &removed);
        self.config = new;
        self.plan = plan;
        if let Some(sources) = &self.sources {
            sources.store(std::sync::Arc::new(self.metrics_sources()));
        }
        Ok(ChangeReport {
            change,
            added,
            removed,
            stopped_cores,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// Allocates the regions the change adds or resizes, each in the slot the plan gave
    /// it. One that fails stops the change; those allocated before it stay, unused,
    /// until the plane stops.
    fn add_regions(&mut self, plan: &Plan) -> Result<(), ChangeError> {
        let added: Vec<_> = plan
            .regions_beyond(&self.plan)
            .map(|(id, r)| (id, r.clone()))
            .collect();
        for (id, r) in added {
            self.regions.append(&r, id).map_err(StartError::from)?;
            // Retired until the change is done: a change that fails after this leaves the
            // running plan naming every slot of the set.
            self.plan.regions.push(crate::plan::RegionPlan {
                retired: true,
                ..r.clone()
            });
            tracing::info!(
                "memory region `{}`: {} buffers of {} bytes allocated while the plane runs (region {})",
                r.name,
                r.num_bufs,
                r.buf_size,
                id.index()
            );
        }
        Ok(())
    }

    /// Sets up each added queue in the running engine and hands its task to its core's
    /// worker (a new worker for a core not running yet). Their application ends are then
    /// taken as at start; the new rules, switched after this, steer to them.
    fn add_queues(&mut self, change: &PlanChange, plan: &Plan) -> Result<AddedQueues, ChangeError> {
        let planned: Vec<&crate::plan::QueuePlan> = change
            .queues
            .iter()
            .filter(|q| q.fate == QueueFate::Added)
            .filter_map(|q| {
                plan.queues
                    .iter()
                    .find(|p| p.interface == q.port && p.direction == q.direction && p.id == q.id)
            })
            .collect();
        if planned.is_empty() {
            return Ok(AddedQueues::default());
        }
        let engine = self.engine.clone();
        let regions = self.regions.clone();
        let mut build = super::start::QueueBuild::new(&engine, &regions);
        for w in &self.workers {
            if w.thread.is_some() {
                build.health.insert(w.core, w.health.clone());
            }
        }
        for q in &planned {
            engine
                .open_queue(
                    crate::descriptor::PortIndex(q.interface as u16),
                    q.direction,
                    q.id,
                )
                .map_err(StartError::from)?;
            build.add(q)?;
        }
        let super::start::QueueBuild {
            mut tasks,
            mut health,
            counters,
            mut stage_tasks,
            rx_queues,
            tx_queues,
            retirements,
            ..
        } = build;
        // Each task to its core: a running worker takes it at its next housekeeping pass.
        let mut new_cores: std::collections::BTreeMap<u32, Vec<crate::worker::Task>> =
            Default::default();
        for (i, q) in planned.iter().enumerate() {
            let placed = [(q.core, tasks[i].take())]
                .into_iter()
                .chain(q.stage_core.map(|c| (c, stage_tasks.remove(&i))));
            for (core, task) in placed {
                let Some(task) = task else { continue };
                match self
                    .workers
                    .iter()
                    .find(|w| w.core == core && w.thread.is_some())
                {
                    Some(w) => w.control.attach(vec![task]),
                    None => new_cores.entry(core).or_default().push(task),
                }
            }
        }
        let started_cores: Vec<u32> = new_cores.keys().copied().collect();
        for (core, tasks) in new_cores {
            let h = health.remove(&core).unwrap_or_default();
            self.spawn_worker(core, tasks, h)?;
        }
        self.transient_triggers.extend(
            rx_queues
                .values()
                .filter_map(|q| q.transient_trigger.clone()),
        );
        self.rx_queues
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .extend(rx_queues);
        self.tx_queues
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .extend(tx_queues);
        self.retirements.extend(retirements);
        let mut all = Vec::clone(&self.counters.load());
        all.extend(counters);
        self.counters.store(std::sync::Arc::new(all));
        Ok(AddedQueues {
            queues: planned.len(),
            started_cores,
        })
    }

    /// Asks each removed queue's task to finish (its rules already steer nothing to it)
    /// and waits, bounded, until each handed over what it held.
    fn remove_queues(&mut self, change: &PlanChange) -> Vec<RemovedQueue> {
        let gone: Vec<_> = change
            .queues
            .iter()
            .filter(|q| q.fate == QueueFate::Removed)
            .map(|q| (q, (q.port, q.direction == Direction::Tx, q.id)))
            .collect();
        for (_, key) in &gone {
            // An application end never taken goes with it.
            match key.1 {
                false => drop(
                    self.rx_queues
                        .get_mut()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&(key.0, key.2)),
                ),
                true => drop(
                    self.tx_queues
                        .get_mut()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&(key.0, key.2)),
                ),
            }
            if let Some(r) = self.retirements.get(key) {
                r.ask();
            }
        }
        let deadline = Instant::now() + RETIRE_TIMEOUT;
        while Instant::now() < deadline
            && !gone
                .iter()
                .all(|(_, k)| self.retirements.get(k).is_none_or(|r| r.is_done()))
        {
            std::thread::sleep(Duration::from_micros(200));
        }
        let report: Vec<RemovedQueue> = gone
            .into_iter()
            .map(|(q, key)| {
                let counters = self
                    .counters
                    .load()
                    .iter()
                    .find(|(l, _)| {
                        l.interface == q.interface && l.direction == q.direction && l.queue == q.id
                    })
                    .map(|(_, c)| c.snapshot());
                let drained = self.retirements.remove(&key).is_none_or(|r| r.is_done());
                RemovedQueue {
                    interface: q.interface.clone(),
                    direction: q.direction,
                    id: q.id.0,
                    packets: counters.as_ref().map_or(0, |c| c.0),
                    dropped: counters.as_ref().map_or(0, |c| c.2.total()),
                    drained,
                }
            })
            .collect();
        // A drained queue's counters leave the list (its series ends in the metrics; a
        // queue added back with its id gets new ones).
        let left: Vec<_> = self
            .counters
            .load()
            .iter()
            .filter(|(l, _)| {
                !report.iter().any(|r| {
                    r.drained
                        && (r.interface.as_str(), r.direction, r.id)
                            == (l.interface.as_str(), l.direction, l.queue.0)
                })
            })
            .cloned()
            .collect();
        self.counters.store(std::sync::Arc::new(left));
        report
    }

    /// Stops and joins the workers of cores the new plan no longer uses, once every queue
    /// they served was removed and drained.
    fn stop_idle_workers(&mut self, plan: &Plan, removed: &[RemovedQueue]) -> Vec<u32> {
        if removed.iter().any(|r| !r.drained) {
            return Vec::new();
        }
        let mut stopped = Vec::new();
        for w in &mut self.workers {
            if plan.cores.iter().any(|c| c.core == w.core) || w.thread.is_none() {
                continue;
            }
            w.control.stop.store(true, Ordering::Relaxed);
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
            w.health.stop();
            stopped.push(w.core);
        }
        stopped
    }
}
