//! Scrapes that arrive together share one gather.
//!
//! A scrape (collect, encode, compress) runs on the blocking pool, one at a time. When several
//! scrapers ask at once (a pair of Prometheus servers, a dashboard's ad-hoc queries, a load test)
//! each would wait for the ones before it and then cost a full gather of its own. Instead, a
//! request joins the gather that is queued but **not yet started** for the same wire format
//! ([`Coalescer::share`]); the first request that finds none queues one. A gather leaves the queue
//! the moment it starts, before it reads anything, so every answer was read after its request
//! arrived: no scraper ever gets older data than it would have got alone. A scraper alone (how
//! Prometheus scrapes a target: one request per interval) always gets a gather of its own.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::watch;

type Work<K, V> = dyn Fn(K) -> V + Send + Sync;

/// The run queued but not yet started for each key: where its answer will appear. Only the run's
/// own [`Ticket`] removes it, so an entry is always that of the key's latest run.
type Queued<K, V> = HashMap<K, watch::Receiver<Option<V>>>;

/// Runs `work` on the blocking pool for a key, shared by every request for that key that arrives
/// before the run starts.
pub(crate) struct Coalescer<K, V> {
    work: Arc<Work<K, V>>,
    queued: Arc<Mutex<Queued<K, V>>>,
}

impl<K, V> Coalescer<K, V>
where
    K: Eq + Hash + Clone + Send + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// A coalescer that answers with `work(key)`.
    pub(crate) fn new(work: impl Fn(K) -> V + Send + Sync + 'static) -> Self {
        Self {
            work: Arc::new(work),
            queued: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Joins the queued run for `key`, or queues one. The request is registered when this is
    /// called, not when the future is first polled. The future yields `None` if the run panicked
    /// or never ran (the runtime is shutting down).
    pub(crate) fn share(&self, key: K) -> impl Future<Output = Option<V>> + Send + 'static {
        let mut rx = {
            let mut queued = lock(&self.queued);
            if let Some(rx) = queued.get(&key) {
                rx.clone()
            } else {
                let (tx, rx) = watch::channel(None);
                queued.insert(key.clone(), rx.clone());
                let mut ticket = Ticket {
                    queued: self.queued.clone(),
                    key: Some(key),
                };
                let work = self.work.clone();
                // If the pool drops the closure unrun, the ticket's drop dequeues the run and the
                // dropped sender wakes its requests.
                drop(tokio::task::spawn_blocking(move || {
                    // Dequeue before reading anything: later arrivals need a run of their own.
                    let key = ticket.start();
                    let value = work(key);
                    // Nobody waiting any more is fine.
                    let _ = tx.send(Some(value));
                }));
                rx
            }
        };
        async move {
            let value = rx.wait_for(Option::is_some).await.ok()?;
            value.clone()
        }
    }
}

/// A queued run's claim on its entry in the queue; `key` is `None` once the run has started.
struct Ticket<K: Eq + Hash, V> {
    queued: Arc<Mutex<Queued<K, V>>>,
    key: Option<K>,
}

impl<K: Eq + Hash, V> Ticket<K, V> {
    /// Takes the run out of the queue (no request joins it from now on) and returns its key.
    fn start(&mut self) -> K {
        let key = self.key.take().expect("a run starts once");
        lock(&self.queued).remove(&key);
        key
    }
}

impl<K: Eq + Hash, V> Drop for Ticket<K, V> {
    fn drop(&mut self) {
        // The run never started (the pool dropped it): its requests must not wait on it.
        if let Some(key) = self.key.take() {
            lock(&self.queued).remove(&key);
        }
    }
}

/// The map stays consistent under a panic (no code that can panic runs while it is held).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    /// The agent's runtime: one worker, one blocking thread, so a run queued behind a running one
    /// stays queued until that one ends.
    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(1)
            .build()
            .unwrap()
    }

    type Gated = Coalescer<&'static str, Option<(&'static str, u32)>>;

    /// A coalescer whose runs return (key, run number), each run announcing its start on the
    /// receiver and then waiting for a go on the sender; a run for the key "panic" panics.
    fn gated() -> (Gated, mpsc::Receiver<u32>, mpsc::Sender<()>) {
        let (started_tx, started) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let go_rx = Mutex::new(go_rx);
        let runs = AtomicU32::new(0);
        let c = Coalescer::new(move |key| {
            let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
            started_tx.send(n).unwrap();
            go_rx
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(10))
                .unwrap();
            assert_ne!(key, "panic", "this run fails");
            Some((key, n))
        });
        (c, started, go)
    }

    fn wait_started(started: &mpsc::Receiver<u32>) -> u32 {
        started.recv_timeout(Duration::from_secs(10)).unwrap()
    }

    /// Waits for the next run to start, lets it finish and returns its number.
    fn finish_next(started: &mpsc::Receiver<u32>, go: &mpsc::Sender<()>) -> u32 {
        let n = wait_started(started);
        go.send(()).unwrap();
        n
    }

    #[test]
    fn requests_during_a_run_share_the_next_one_and_never_the_running_one() {
        runtime().block_on(async {
            let (c, started, go) = gated();
            let a = c.share("text");
            assert_eq!(wait_started(&started), 1);
            // Run 1 has started reading: these must not get its answer. They queue behind it.
            let (b, d, other) = (c.share("text"), c.share("text"), c.share("protobuf"));
            go.send(()).unwrap();
            assert_eq!(a.await, Some(Some(("text", 1))));
            assert_eq!(finish_next(&started, &go), 2);
            assert_eq!(finish_next(&started, &go), 3);
            let (b, d, other) = (b.await.unwrap(), d.await.unwrap(), other.await.unwrap());
            assert_eq!(b, Some(("text", 2)), "the next run, in queue order");
            assert_eq!(d, b, "requests queued together share one run");
            assert_eq!(other, Some(("protobuf", 3)), "formats never share a run");
            // Nothing is left queued: the next request starts run 4.
            let e = c.share("text");
            assert_eq!(finish_next(&started, &go), 4);
            assert_eq!(e.await, Some(Some(("text", 4))));
        });
    }

    #[test]
    fn one_request_at_a_time_gets_a_run_each() {
        runtime().block_on(async {
            let (c, started, go) = gated();
            for n in 1..=3 {
                let r = c.share("text");
                assert_eq!(finish_next(&started, &go), n);
                assert_eq!(r.await, Some(Some(("text", n))));
            }
        });
    }

    #[test]
    fn a_panicking_run_fails_its_requests_and_not_the_next() {
        runtime().block_on(async {
            let (c, started, go) = gated();
            let busy = c.share("text");
            assert_eq!(wait_started(&started), 1);
            let (first, joined) = (c.share("panic"), c.share("panic"));
            go.send(()).unwrap();
            assert!(busy.await.is_some());
            assert_eq!(finish_next(&started, &go), 2);
            assert_eq!(first.await, None);
            assert_eq!(joined.await, None);
            let after = c.share("text");
            assert_eq!(finish_next(&started, &go), 3);
            assert_eq!(after.await, Some(Some(("text", 3))));
        });
    }
}
