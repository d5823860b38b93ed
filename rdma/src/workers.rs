//! Per-connection worker threads and the table that holds them.
//!
//! Each worker has its own stop flag. Stopping one sets the flag, takes the worker out of
//! the table, releases the table's lock, and only then joins the thread: a worker that
//! needs the table on its way out (reporting its final stats, say) can never deadlock
//! against the thread that stops it. The worker's result (its rings and buffers) is handed
//! back only after the join.

#![forbid(unsafe_code)]

use crate::cm::ConnId;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A running worker: its stop flag and its thread.
#[derive(Debug)]
pub struct Worker<R> {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<R>,
}

impl<R: Send + 'static> Worker<R> {
    /// Spawns `body` with a fresh stop flag, which it must poll and obey.
    pub fn spawn(
        name: String,
        body: impl FnOnce(Arc<AtomicBool>) -> R + Send + 'static,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || body(flag))?;
        Ok(Self { stop, thread })
    }

    /// Sets the stop flag and waits for the thread; returns what it returned, or `None`
    /// when it panicked.
    pub fn stop_and_join(self) -> Option<R> {
        self.stop.store(true, Ordering::Release);
        self.thread.join().ok()
    }
}

/// The workers of all connections, by connection.
#[derive(Debug)]
pub struct WorkerTable<R> {
    workers: Mutex<BTreeMap<ConnId, Worker<R>>>,
}

impl<R: Send + 'static> Default for WorkerTable<R> {
    fn default() -> Self {
        Self {
            workers: Mutex::new(BTreeMap::new()),
        }
    }
}

impl<R: Send + 'static> WorkerTable<R> {
    /// Adds the worker of `conn`.
    pub fn insert(&self, conn: ConnId, worker: Worker<R>) {
        self.workers
            .lock()
            .expect("worker table lock")
            .insert(conn, worker);
    }

    /// Number of running workers.
    pub fn len(&self) -> usize {
        self.workers.lock().expect("worker table lock").len()
    }

    /// True when no worker runs.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops the worker of `conn`: flag, removal, lock released, join. Returns its result.
    pub fn stop(&self, conn: ConnId) -> Option<R> {
        let worker = {
            let mut table = self.workers.lock().expect("worker table lock");
            let worker = table.remove(&conn)?;
            worker.stop.store(true, Ordering::Release);
            worker
        };
        // The lock is released here, before the join.
        worker.stop_and_join()
    }

    /// Stops every worker the same way (all flags first, so they wind down together).
    pub fn stop_all(&self) -> Vec<(ConnId, Option<R>)> {
        let drained: Vec<(ConnId, Worker<R>)> = {
            let mut table = self.workers.lock().expect("worker table lock");
            let all = std::mem::take(&mut *table);
            for w in all.values() {
                w.stop.store(true, Ordering::Release);
            }
            all.into_iter().collect()
        };
        drained
            .into_iter()
            .map(|(conn, w)| (conn, w.stop_and_join()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Runs `f` on a thread and fails (instead of hanging) if it takes longer than `limit`.
    fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(limit)
            .expect("did not finish: a join under the table lock would deadlock here")
    }

    #[test]
    fn disconnect_while_stats_are_reported_stops_the_worker_without_deadlock() {
        // The worker reports its stats through the table on its way out (it takes the
        // lock); a stats thread takes the lock all the time. Stopping must still finish.
        let table: Arc<WorkerTable<u64>> = Arc::new(WorkerTable::default());
        let t2 = table.clone();
        let worker = Worker::spawn("conn-1".into(), move |stop| {
            let mut polls = 0u64;
            while !stop.load(Ordering::Acquire) {
                polls += 1;
                std::thread::yield_now();
            }
            // Final stats: needs the table lock.
            let _ = t2.len();
            polls
        })
        .unwrap();
        table.insert(1, worker);
        let stats_stop = Arc::new(AtomicBool::new(false));
        let (t3, s3) = (table.clone(), stats_stop.clone());
        let stats = std::thread::spawn(move || {
            while !s3.load(Ordering::Acquire) {
                let _ = t3.len();
            }
        });
        std::thread::sleep(Duration::from_millis(20));
        let t4 = table.clone();
        let polls = within(Duration::from_secs(5), move || t4.stop(1));
        assert!(polls.is_some_and(|p| p > 0), "the worker ran and returned");
        assert!(table.is_empty());
        stats_stop.store(true, Ordering::Release);
        stats.join().unwrap();
    }

    #[test]
    fn each_worker_has_its_own_flag_and_stop_all_joins_them_all() {
        let table: Arc<WorkerTable<ConnId>> = Arc::new(WorkerTable::default());
        for conn in 0..3 {
            table.insert(
                conn,
                Worker::spawn(format!("conn-{conn}"), move |stop| {
                    while !stop.load(Ordering::Acquire) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    conn
                })
                .unwrap(),
            );
        }
        assert_eq!(table.stop(1), Some(1), "only connection 1 stops");
        assert_eq!(table.len(), 2);
        assert_eq!(table.stop(1), None, "already gone");
        let t = table.clone();
        let mut done = within(Duration::from_secs(5), move || t.stop_all());
        done.sort();
        assert_eq!(done, vec![(0, Some(0)), (2, Some(2))]);
        assert!(table.is_empty());
    }
}
