//! What a run (or one psync thread) has measured so far ([`Tally`]), turned into the run's
//! [`Measurement`] when it ends.

use super::job::Job;
use super::schedule::Issue;
use crate::probe::measurement::{
    CpuWait, Ending, EngineKind, Measurement, RunError, StuckIos, Syncs, new_latency_histogram,
};
use hdrhistogram::Histogram;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// What a run (or one psync thread) has measured so far.
pub(crate) struct Tally {
    ios: u64,
    bytes: u64,
    errors: u64,
    first_error: Option<RunError>,
    latency_ns: Histogram<u64>,
    /// Rate-capped runs: latency from submission, and how many I/Os the device held back.
    submission_ns: Option<Histogram<u64>>,
    held_back: u64,
    /// Profiles that sync: syncs completed and their latency.
    syncs: Option<(u64, Histogram<u64>)>,
    last_completion: Option<Instant>,
    /// The run delay of the threads that did this tally's I/O, over the run (`None` until a
    /// thread has said, or when the kernel does not tell).
    cpu_wait: Option<CpuWait>,
}

impl Tally {
    /// An empty tally; `rate_capped` ones also keep the latency from submission.
    pub(crate) fn new(rate_capped: bool) -> Tally {
        Tally {
            ios: 0,
            bytes: 0,
            errors: 0,
            first_error: None,
            latency_ns: new_latency_histogram(),
            submission_ns: rate_capped.then(new_latency_histogram),
            held_back: 0,
            syncs: None,
            last_completion: None,
            cpu_wait: None,
        }
    }

    /// The tally of a job: rate-capped jobs also keep the latency from submission, jobs that
    /// sync the latency of their syncs.
    pub(crate) fn of(job: &Job) -> Tally {
        let mut tally = Tally::new(job.rate_interval.is_some());
        if job.sync.is_some() {
            tally.syncs = Some((0, new_latency_histogram()));
        }
        tally
    }

    /// A sync submitted at `since` completed at `at`.
    #[inline]
    pub(crate) fn synced(&mut self, since: Instant, at: Instant) {
        if let Some((count, h)) = &mut self.syncs {
            *count += 1;
            h.saturating_record(nanos(at.saturating_duration_since(since)));
        }
        self.last_completion = Some(at);
    }

    /// An I/O of `bytes`, issued as `issue` says, completed at `at`.
    #[inline]
    pub(crate) fn completed(&mut self, bytes: u64, issue: Issue, at: Instant) {
        self.ios += 1;
        self.bytes += bytes;
        self.latency_ns
            .saturating_record(nanos(at.saturating_duration_since(issue.origin)));
        if let Some(h) = &mut self.submission_ns {
            h.saturating_record(nanos(at.saturating_duration_since(issue.submitted)));
            if issue.origin < issue.submitted {
                self.held_back += 1;
            }
        }
        self.last_completion = Some(at);
    }

    /// An I/O failed at `at` (its completion still ends the run's elapsed time).
    pub(crate) fn failed(&mut self, error: impl FnOnce() -> RunError, at: Instant) {
        self.error(error);
        self.last_completion = Some(at);
    }

    /// A failure that is not an I/O's completion (a submission or a system call).
    pub(crate) fn error(&mut self, error: impl FnOnce() -> RunError) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(error());
        }
    }

    /// Notes what went wrong without counting a failed I/O.
    pub(crate) fn note(&mut self, error: impl FnOnce() -> RunError) {
        if self.first_error.is_none() {
            self.first_error = Some(error());
        }
    }

    /// The thread that did this tally's I/O waited `waited` for a CPU over the run (`None`: the
    /// kernel does not tell), `in_latency` of it while it had I/O in flight, counted once per I/O
    /// (rate-capped runs; `None` for the rest).
    pub(crate) fn waited(&mut self, waited: Option<Duration>, in_latency: Option<Duration>) {
        self.cpu_wait = waited.map(|waited| CpuWait {
            waited,
            threads: 1,
            in_latency,
        });
    }

    /// Whether any I/O or system call failed.
    pub(crate) fn has_errors(&self) -> bool {
        self.errors > 0
    }

    /// Adds another thread's tally.
    pub(crate) fn merge(&mut self, other: Tally) {
        self.ios += other.ios;
        self.bytes += other.bytes;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        let _ = self.latency_ns.add(&other.latency_ns);
        if let (Some(a), Some(b)) = (&mut self.submission_ns, &other.submission_ns) {
            let _ = a.add(b);
        }
        self.held_back += other.held_back;
        if let (Some((a, ha)), Some((b, hb))) = (&mut self.syncs, &other.syncs) {
            *a += b;
            let _ = ha.add(hb);
        }
        self.last_completion = self.last_completion.max(other.last_completion);
        self.cpu_wait = match (self.cpu_wait, other.cpu_wait) {
            (Some(a), Some(b)) => Some(CpuWait {
                waited: a.waited + b.waited,
                threads: a.threads + b.threads,
                in_latency: match (a.in_latency, b.in_latency) {
                    (Some(x), Some(y)) => Some(x + y),
                    (x, y) => x.or(y),
                },
            }),
            (a, b) => a.or(b),
        };
    }

    /// The measurement of a run that started at `start` and ended as `ending`; its elapsed time
    /// runs to the last completion (or to `now` when nothing completed).
    pub(crate) fn into_measurement(
        self,
        engine: EngineKind,
        start: Instant,
        ending: Ending,
        stuck: Option<Arc<StuckIos>>,
    ) -> Measurement {
        let end = self.last_completion.unwrap_or_else(Instant::now);
        Measurement {
            engine,
            ios: self.ios,
            bytes: self.bytes,
            elapsed: end.saturating_duration_since(start),
            errors: self.errors,
            first_error: self.first_error,
            ending,
            stuck,
            latency_ns: self.latency_ns,
            submission_latency_ns: self.submission_ns,
            held_back: self.held_back,
            syncs: self
                .syncs
                .map(|(count, latency_ns)| Syncs { count, latency_ns }),
            cpu_wait: self.cpu_wait,
        }
    }
}
