//! The engines agree: one script of events, played on a device the test controls, ends a run the
//! same way on io_uring and psync (the one run controller, `src/probe/engine/control.rs`): the
//! same ending, the same `result` label, the same counts of I/Os, errors and stuck I/Os.
//!
//! The device is a loop device over a file a FUSE server of the test serves
//! ([`crate::common::fuse`]), each read held for a delay the script sets; the server can stop
//! answering reads (a hung device) or die (every waiting and later read fails: a device that
//! vanishes). Each engine's run gets a server and a device of its own. The scripts, at QD1 so
//! that what is in flight when an event happens is one known I/O:
//! - a yield, then an error while the run drains what is in flight: failed (an error outranks
//!   why the run stopped), not skipped;
//! - a completion that comes in after the hard timeout: timed out, the I/O counted;
//! - a device that never completes: timed out, its I/O stuck;
//! - a cancellation: cancelled, the I/O in flight counted when it completes;
//! - a device that vanishes mid-run: failed, one error.

use crate::common;
use crate::common::fuse::{self, FuseFs, Mode};
use crate::common::loopdev::{self, LoopDev};

use diskprobe_exporter::probe::engine::{self, EngineChoice, RunOptions};
use diskprobe_exporter::probe::fio;
use diskprobe_exporter::probe::io_target::{self, TargetOptions};
use diskprobe_exporter::probe::measurement::{Ending, Measurement, RunStatus};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// What a script expects of a run, on either engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Outcome {
    ending: Ending,
    status: RunStatus,
    ios: u64,
    errors: u64,
    stuck: usize,
}

impl Outcome {
    fn of(m: &Measurement) -> Outcome {
        Outcome {
            ending: m.ending,
            status: m.status(),
            ios: m.ios,
            errors: m.errors,
            stuck: m.stuck.as_ref().map_or(0, |s| s.count()),
        }
    }
}

/// An event a script plays while the run goes on, once the run has completed `after` I/Os.
#[derive(Debug, Clone, Copy)]
enum Event {
    /// Ask the run to yield, and once it has had the time to see that (more than an engine's
    /// poll), kill the server: the read still in flight fails.
    YieldThenError,
    /// Set the run's cancellation flag.
    Cancel,
    /// Kill the server: the read in flight, and every later one, fails.
    Vanish,
}

/// One script: the run's timing, the device's, and what happens during the run.
struct Script {
    name: &'static str,
    read_delay: Duration,
    runtime: Duration,
    timeout: Duration,
    /// Reads are left unanswered from the start.
    hang: bool,
    event: Option<(u64, Event)>,
    expected: Outcome,
}

fn scripts() -> Vec<Script> {
    let ms = Duration::from_millis;
    vec![
        Script {
            name: "a yield, then an error while draining",
            read_delay: ms(600),
            runtime: ms(3000),
            timeout: ms(5000),
            hang: false,
            event: Some((2, Event::YieldThenError)),
            expected: Outcome {
                ending: Ending::Failed,
                status: RunStatus::Error,
                ios: 2,
                errors: 1,
                stuck: 0,
            },
        },
        Script {
            name: "a completion after the hard timeout",
            read_delay: ms(900),
            runtime: ms(200),
            timeout: ms(600),
            hang: false,
            event: None,
            expected: Outcome {
                ending: Ending::TimedOut,
                status: RunStatus::Timeout,
                ios: 1,
                errors: 0,
                stuck: 0,
            },
        },
        Script {
            name: "a device that never completes",
            read_delay: ms(0),
            runtime: ms(200),
            timeout: ms(500),
            hang: true,
            event: None,
            expected: Outcome {
                ending: Ending::TimedOut,
                status: RunStatus::Timeout,
                ios: 0,
                errors: 0,
                stuck: 1,
            },
        },
        Script {
            name: "a cancellation",
            read_delay: ms(50),
            runtime: ms(3000),
            timeout: ms(5000),
            hang: false,
            event: Some((2, Event::Cancel)),
            expected: Outcome {
                ending: Ending::Cancelled,
                status: RunStatus::Error,
                ios: 3,
                errors: 0,
                stuck: 0,
            },
        },
        Script {
            name: "a device that vanishes",
            read_delay: ms(50),
            runtime: ms(3000),
            timeout: ms(5000),
            hang: false,
            event: Some((2, Event::Vanish)),
            expected: Outcome {
                ending: Ending::Failed,
                status: RunStatus::Error,
                ios: 2,
                errors: 1,
                stuck: 0,
            },
        },
    ]
}

/// Plays `script` on a device of its own with `engine`.
fn play(script: &Script, engine: EngineChoice) -> Outcome {
    let fs = FuseFs::mount(16 << 20);
    fs.set_read_delay(script.read_delay);
    // Dropped first: whatever the script did, a stuck read ends and the device detaches.
    let dev = LoopDev::read_only_over(&fs.file());
    let _aborted = fs.abort_on_drop();
    let target = io_target::open(
        &dev.path,
        &TargetOptions {
            size: None,
            offset: 0,
            write: false,
            rewrite: false,
            device_writes: false,
            min_free: 0,
            procfs: "/proc".into(),
            sysfs: "/sys".into(),
            devfs: "/dev".into(),
            pinned: None,
            confined: false,
            filesystem: Default::default(),
        },
    )
    .expect("open the device");
    let profile = fio::parse(&format!(
        "-rw=randread -bs=4k -iodepth=1 -runtime={}ms",
        script.runtime.as_millis()
    ))
    .expect("a profile");
    let opts = RunOptions {
        engine,
        timeout: script.timeout,
        ..RunOptions::default()
    };
    if script.hang {
        fs.set_mode(Mode::HangReads);
    }
    let m = std::thread::scope(|scope| {
        if let Some((after, event)) = script.event {
            let (progress, yield_now, cancel) = (
                opts.progress.clone(),
                opts.yield_now.clone(),
                opts.cancel.clone(),
            );
            let fs = &fs;
            scope.spawn(move || {
                let deadline = Instant::now() + script.timeout;
                while progress.completed.load(Ordering::SeqCst) < after {
                    assert!(Instant::now() < deadline, "{after} I/Os never completed");
                    std::thread::sleep(Duration::from_millis(1));
                }
                match event {
                    Event::YieldThenError => {
                        yield_now.store(true, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(300));
                        fs.abort();
                    }
                    Event::Cancel => cancel.store(true, Ordering::SeqCst),
                    Event::Vanish => fs.abort(),
                }
            });
        }
        engine::run(&target, &profile, &opts).expect("the run")
    });
    Outcome::of(&m)
}

fn the_same_events_end_a_run_the_same_way_on_both_engines() {
    if !loopdev::ready() || !fuse::ready() {
        return;
    }
    let _guard = common::shared();
    let mut disagreements = Vec::new();
    for script in scripts() {
        let uring = play(&script, EngineChoice::IoUring);
        let psync = play(&script, EngineChoice::Psync);
        eprintln!("{}: io_uring {uring:?}, psync {psync:?}", script.name);
        for (engine, got) in [("io_uring", uring), ("psync", psync)] {
            if got != script.expected {
                disagreements.push(format!(
                    "{}: {engine} {got:?}, expected {:?}",
                    script.name, script.expected
                ));
            }
        }
    }
    assert!(disagreements.is_empty(), "{disagreements:#?}");
}

crate::tests! {
    the_same_events_end_a_run_the_same_way_on_both_engines: [LOOP],
}
