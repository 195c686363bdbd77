//! What a run does, checked once: a [`Job`] made from a profile and an open target (with the
//! descriptor and the fresh space of a durability profile), and the [`Offsets`] its I/Os go to.
//! Nothing changes a job after [`Job::new`].

use super::durability_setup::DurabilitySetup;
use super::options::RunOptions;
use crate::probe::error::{ProbeError, ProfileError};
use crate::probe::io_target::{OpenTarget, TargetError, TargetKind};
use crate::probe::profile::{Profile, Rw, SyncEvery};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

/// Everything an engine needs, validated.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    /// The descriptor the I/O goes through: the target's, or the one a durability profile
    /// reopened it as; engine threads hold it for as long as they use it.
    pub fd: Arc<OwnedFd>,
    pub rw: Rw,
    pub region_offset: u64,
    pub blocks: u64,
    pub block_size: u64,
    pub mem_align: usize,
    pub iodepth: u32,
    pub runtime: Option<Duration>,
    pub number_ios: Option<u64>,
    pub rate_interval: Option<Duration>,
    pub timeout: Duration,
    /// Profiles with `fsync`/`fdatasync`: which, and after how many writes.
    pub sync: Option<SyncEvery>,
}

impl Job {
    /// The job of `profile` on `target`, checked, with the descriptor and, for `etcd-wal`, the
    /// fresh space a durability profile writes through; the [`DurabilitySetup`] must be kept until the
    /// run returns (the space is then given back).
    pub(crate) fn new(
        target: &OpenTarget,
        profile: &Profile,
        opts: &RunOptions,
    ) -> Result<(Job, DurabilitySetup), ProbeError> {
        let blocks = fit(target, profile)?;
        let bs = profile.block_size;
        let durable = DurabilitySetup::prepare(target, profile, blocks * bs)?;
        let runtime = match (profile.runtime, profile.number_ios) {
            (None, None) => Some(opts.default_runtime),
            (r, _) => r,
        };
        // Fresh space is written once from its start: the run ends when it is full.
        let (region_offset, number_ios) = match durable.fresh_space_start() {
            Some(start) => (
                start,
                Some(profile.number_ios.map_or(blocks, |n| n.min(blocks))),
            ),
            None => (target.region_offset, profile.number_ios),
        };
        let fd = match durable.fd() {
            Some(fd) => fd,
            None => {
                let own = target
                    .file()
                    .try_clone()
                    .map_err(|source| TargetError::Io {
                        path: target.path.clone(),
                        what: "duplicate the descriptor of",
                        source,
                    })?;
                Arc::new(OwnedFd::from(own))
            }
        };
        let job = Job {
            fd,
            rw: profile.rw,
            region_offset,
            blocks,
            block_size: bs,
            mem_align: (target.mem_align.max(4096)) as usize,
            iodepth: profile.iodepth,
            runtime,
            number_ios,
            rate_interval: profile
                .rate_iops
                .map(|r| Duration::from_nanos(1_000_000_000 / u64::from(r.max(1)))),
            timeout: opts.timeout,
            sync: profile.durability.sync_every,
        };
        Ok((job, durable))
    }

    /// Fresh offsets for a run of this job.
    pub(crate) fn offsets(&self) -> Offsets {
        Offsets::new(
            self.rw.is_random(),
            self.region_offset,
            self.blocks,
            self.block_size,
        )
    }
}

/// Whether `profile` fits `target`: the number of its blocks in the region, or why not. Only
/// what depends on the target is checked here; the profile's own limits and durability settings
/// were checked when it was made ([`Profile::new`]).
fn fit(target: &OpenTarget, profile: &Profile) -> Result<u64, ProfileError> {
    let name = || profile.name.clone();
    let bs = profile.block_size;
    // Buffered writes have no alignment to keep.
    if profile.durability.direct && !bs.is_multiple_of(target.offset_align) {
        return Err(ProfileError::Unaligned {
            profile: name(),
            block_size: bs,
            align: target.offset_align,
            path: target.path.clone(),
        });
    }
    if profile.rw.is_write() && !target.writable {
        return Err(ProfileError::ReadOnly {
            profile: name(),
            path: target.path.clone(),
        });
    }
    let region = match profile.size {
        Some(size) if size > target.region_len => {
            return Err(ProfileError::SizeBeyondRegion {
                profile: name(),
                size,
                region: target.region_len,
            });
        }
        Some(size) => size,
        None => target.region_len,
    };
    let blocks = region / bs;
    if blocks == 0 {
        return Err(ProfileError::RegionBelowOneBlock {
            profile: name(),
            region,
            path: target.path.clone(),
            block_size: bs,
        });
    }
    if profile.rw.is_write()
        && profile.durability.fresh_space
        && target.kind == TargetKind::BlockDevice
    {
        return Err(ProfileError::FreshSpaceOnDevice {
            profile: name(),
            path: target.path.clone(),
        });
    }
    Ok(blocks)
}

/// Offsets of a run: uniformly random block-aligned offsets over the region (freshly seeded from
/// the OS every run), or a sequential walk that wraps at the end of the region.
#[derive(Debug)]
pub(crate) struct Offsets {
    random: bool,
    start: u64,
    blocks: u64,
    block_size: u64,
    next: u64,
    rng: SmallRng,
}

impl Offsets {
    /// Offsets over `blocks` blocks of `block_size` bytes starting at byte `start`.
    pub(crate) fn new(random: bool, start: u64, blocks: u64, block_size: u64) -> Offsets {
        Offsets {
            random,
            start,
            blocks: blocks.max(1),
            block_size,
            next: 0,
            rng: SmallRng::from_os_rng(),
        }
    }

    /// The next offset in bytes.
    #[inline]
    pub(crate) fn next_offset(&mut self) -> u64 {
        let block = if self.random {
            self.rng.random_range(0..self.blocks)
        } else {
            let b = self.next;
            self.next += 1;
            if self.next == self.blocks {
                self.next = 0;
            }
            b
        };
        self.start + block * self.block_size
    }

    /// The offset of the `k`-th I/O of the sequential walk (wrapping at the end of the region),
    /// for engines whose threads share one walk through a common counter.
    pub(crate) fn sequential(&self, k: u64) -> u64 {
        self.start + (k % self.blocks) * self.block_size
    }

    /// The run's fast random generator (also used for write data).
    pub(crate) fn rng(&mut self) -> &mut SmallRng {
        &mut self.rng
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_offsets_are_aligned_in_region_and_spread() {
        let mut o = Offsets::new(true, 1 << 20, 256, 4096);
        let mut seen = vec![0u32; 256];
        for _ in 0..256 * 100 {
            let off = o.next_offset();
            assert!(off >= 1 << 20);
            assert!(off + 4096 <= (1 << 20) + 256 * 4096);
            assert_eq!(off % 4096, 0);
            seen[((off - (1 << 20)) / 4096) as usize] += 1;
        }
        // Uniform: each block expected 100 times; all within a generous band.
        assert!(seen.iter().all(|&n| (40..=180).contains(&n)), "{seen:?}");
    }

    #[test]
    fn sequential_offsets_walk_and_wrap() {
        let mut o = Offsets::new(false, 8192, 3, 1 << 20);
        let got: Vec<u64> = (0..7).map(|_| o.next_offset()).collect();
        let b = 1u64 << 20;
        assert_eq!(
            got,
            vec![
                8192,
                8192 + b,
                8192 + 2 * b,
                8192,
                8192 + b,
                8192 + 2 * b,
                8192
            ]
        );
        // The shared walk of the psync threads gives the same sequence by I/O number.
        let shared: Vec<u64> = (0..7).map(|k| o.sequential(k)).collect();
        assert_eq!(shared, got);
    }

    #[test]
    fn runs_are_reseeded() {
        let mut a = Offsets::new(true, 0, 1 << 30, 4096);
        let mut b = Offsets::new(true, 0, 1 << 30, 4096);
        let x: Vec<u64> = (0..8).map(|_| a.next_offset()).collect();
        let y: Vec<u64> = (0..8).map(|_| b.next_offset()).collect();
        assert_ne!(x, y);
    }
}
