//! I/O buffers for direct I/O: page-aligned anonymous mappings filled with random bytes, and the
//! stamp that makes every write's data unique.
//!
//! A run's buffers come from one mapping advised for transparent huge pages when they total at
//! least one huge page or each is at least 512 KiB ([`AlignedBuf::many`]): a block device splits
//! an I/O whose memory has more physically separate pieces than its `max_segments`, and 4 KiB
//! pages that the kernel placed apart give a 1 MiB buffer 256 of them (a loop device takes 128
//! of at most 64 KiB each, so it splits every such read in two: `/sys/block/loopN/stat` counts
//! two 512 KiB requests per I/O). Inside a 2 MiB huge page a 1 MiB buffer is 16 pieces of 64 KiB:
//! one request, as an I/O of that size is meant to be.

use rand::RngCore;
use rand::rngs::SmallRng;
use std::ptr::NonNull;

/// Why a buffer could not be made.
#[derive(Debug, thiserror::Error)]
pub enum BufferError {
    /// The target asks for a memory alignment above what a mapping guarantees.
    #[error(
        "direct-I/O memory alignment of {align} bytes is above the supported {MAP_ALIGN} bytes"
    )]
    Alignment {
        /// The alignment asked for.
        align: usize,
    },
    /// `mmap` failed.
    #[error("cannot map {len} bytes for I/O buffers: {source}")]
    Map {
        /// Bytes asked for.
        len: usize,
        /// The system error.
        #[source]
        source: std::io::Error,
    },
}

/// Bytes between the fresh random words stamped into write buffers.
pub(crate) const STAMP_STRIDE: usize = 512;

/// Makes the data of the next write unique: stores a fresh random 64-bit word at the start of every
/// 512-byte sector of `buf` (the rest keeps the random bytes the buffer was filled with).
#[inline]
pub(crate) fn stamp(buf: &mut [u8], rng: &mut SmallRng) {
    for chunk in buf.chunks_exact_mut(STAMP_STRIDE) {
        chunk[..8].copy_from_slice(&rng.next_u64().to_ne_bytes());
    }
}

/// A buffer aligned for direct I/O, filled with random bytes.
///
/// Mapped with `mmap` rather than taken from the heap: a run's buffers (up to iodepth × block
/// size, e.g. 64 MiB for a 1M QD64 profile) go back to the system when the run ends instead of
/// staying in the allocator's arenas, so the agent's memory does not keep the largest run's size.
/// Whoever hands a buffer to the kernel for I/O must keep it alive until that I/O has completed
/// (see `uring::ring::RingIo`).
pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// Bytes from `ptr` that this buffer unmaps when dropped (at least `len`).
    mapped: usize,
}

// SAFETY: AlignedBuf owns its mapping exclusively (like a Box<[u8]>).
unsafe impl Send for AlignedBuf {}

/// Alignment every mapping has (Linux pages are at least 4 KiB).
const MAP_ALIGN: usize = 4096;

/// Size of a transparent huge page with 4 KiB base pages (x86-64, arm64).
const HUGE_PAGE: usize = 2 << 20;

/// Buffers from this size up get huge pages even alone ([`AlignedBuf::many`]): in base pages the
/// kernel placed apart, a buffer has a segment per 4 KiB, and a loop device takes at most 128 of
/// them (512 KiB) in a request.
const HUGE_MIN_BUFFER: usize = 512 << 10;

/// An anonymous private mapping of `len` bytes.
fn map(len: usize) -> Result<NonNull<u8>, BufferError> {
    // SAFETY: an anonymous private mapping of len bytes at an address the kernel chooses; no file
    // descriptor or existing memory is involved.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(BufferError::Map {
            len,
            source: std::io::Error::last_os_error(),
        });
    }
    NonNull::new(raw.cast::<u8>()).ok_or_else(|| out_of_memory(len))
}

/// The error for a mapping of `len` bytes that cannot be had.
fn out_of_memory(len: usize) -> BufferError {
    BufferError::Map {
        len,
        source: std::io::Error::from_raw_os_error(libc::ENOMEM),
    }
}

impl AlignedBuf {
    /// `len` random bytes aligned to `align` (a power of two, at most 4096): one buffer of
    /// [`AlignedBuf::many`], so in huge pages from [`HUGE_MIN_BUFFER`] up.
    pub(crate) fn new(
        len: usize,
        align: usize,
        rng: &mut SmallRng,
    ) -> Result<AlignedBuf, BufferError> {
        AlignedBuf::many(1, len, align, rng)?
            .pop()
            .ok_or_else(|| out_of_memory(len))
    }

    /// `count` buffers of `len` random bytes, each aligned to `align` (a power of two, at most
    /// 4096). When they total at least [`HUGE_PAGE`], or each is at least [`HUGE_MIN_BUFFER`],
    /// they are carved from one mapping aligned to [`HUGE_PAGE`], rounded up to a whole number of
    /// them and advised `MADV_HUGEPAGE`, so that each buffer lies in as few physically contiguous
    /// pieces as the kernel can give; where transparent huge pages are off or none is free, base
    /// pages back it, as they back a mapping per buffer. Each buffer starts on a page and unmaps
    /// its own pages when dropped (the last one also the rounding's).
    pub(crate) fn many(
        count: usize,
        len: usize,
        align: usize,
        rng: &mut SmallRng,
    ) -> Result<Vec<AlignedBuf>, BufferError> {
        if align > MAP_ALIGN {
            return Err(BufferError::Alignment { align });
        }
        let len = len.max(1);
        let stride = len.div_ceil(MAP_ALIGN) * MAP_ALIGN;
        let total = stride
            .checked_mul(count)
            .ok_or_else(|| out_of_memory(len))?;
        if count == 0 || (total < HUGE_PAGE && len < HUGE_MIN_BUFFER) {
            return (0..count)
                .map(|_| Ok(AlignedBuf::filled(map(len)?, len, len, rng)))
                .collect();
        }
        let span = total
            .checked_next_multiple_of(HUGE_PAGE)
            .and_then(|span| span.checked_add(HUGE_PAGE).map(|map_len| (span, map_len)));
        let (span, map_len) = span.ok_or_else(|| out_of_memory(total))?;
        let start = map(map_len)?.as_ptr() as usize;
        let base = start.next_multiple_of(HUGE_PAGE);
        let head = base - start;
        let tail = map_len - head - span;
        // SAFETY: [start, base) and [base + span, start + map_len) are the parts of the mapping
        // just made outside the aligned range kept; both are whole pages (start, base and span
        // are page multiples) and nothing refers to them. madvise only advises.
        unsafe {
            if head > 0 {
                libc::munmap(start as *mut libc::c_void, head);
            }
            if tail > 0 {
                libc::munmap((base + span) as *mut libc::c_void, tail);
            }
            // Without transparent huge pages this fails, and base pages back the range.
            libc::madvise(base as *mut libc::c_void, span, libc::MADV_HUGEPAGE);
        }
        (0..count)
            .map(|i| {
                let at = base + i * stride;
                let mapped = if i + 1 == count {
                    base + span - at
                } else {
                    stride
                };
                let ptr = NonNull::new(at as *mut u8).ok_or_else(|| out_of_memory(total))?;
                Ok(AlignedBuf::filled(ptr, len, mapped, rng))
            })
            .collect()
    }

    /// The buffer of `len` bytes at `ptr`, owning `mapped` bytes of mapping, filled with random
    /// bytes.
    fn filled(ptr: NonNull<u8>, len: usize, mapped: usize, rng: &mut SmallRng) -> AlignedBuf {
        let mut buf = AlignedBuf { ptr, len, mapped };
        rng.fill_bytes(buf.as_mut_slice());
        buf
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is a live mapping of at least len bytes (zero-filled by the kernel, then
        // written in filled()), borrowed mutably through &mut self only.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr/mapped is a whole mapping made in many(), or this buffer's own pages of the
        // one it shares out (which no other buffer holds), unmapped once; owners drop a
        // buffer only after every I/O using it has completed (uring::ring::RingIo leaks it
        // otherwise).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.mapped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn stamps_make_writes_unique_and_nonzero() {
        let mut rng = SmallRng::from_os_rng();
        let mut buf = AlignedBuf::new(4096, 4096, &mut rng).unwrap();
        assert_eq!(buf.as_mut_ptr() as usize % 4096, 0);
        assert_eq!(buf.len(), 4096);
        let before = buf.as_mut_slice().to_vec();
        stamp(buf.as_mut_slice(), &mut rng);
        let after = buf.as_mut_slice().to_vec();
        assert_ne!(before, after);
        for (a, b) in before.chunks(512).zip(after.chunks(512)) {
            assert_ne!(a[..8], b[..8]);
            assert_eq!(a[8..], b[8..]);
        }
    }

    /// Whether `len` bytes from `ptr` are all unmapped (`msync` fails with ENOMEM on a hole).
    fn unmapped(ptr: usize, len: usize) -> bool {
        // SAFETY: msync only inspects the mappings of the range; no memory is accessed.
        let rc = unsafe { libc::msync(ptr as *mut libc::c_void, len, libc::MS_ASYNC) };
        rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOMEM)
    }

    #[test]
    fn many_carves_one_huge_page_aligned_mapping_and_each_buffer_unmaps_its_own() {
        let mut rng = SmallRng::from_os_rng();
        // 3 buffers of 600,000 bytes: each at least HUGE_MIN_BUFFER, total under a huge page.
        let mut bufs = AlignedBuf::many(3, 600_000, 512, &mut rng).unwrap();
        let stride = 600_000usize.div_ceil(MAP_ALIGN) * MAP_ALIGN;
        let base = bufs[0].as_mut_ptr() as usize;
        assert_eq!(base % HUGE_PAGE, 0, "aligned to a huge page");
        for (i, buf) in bufs.iter_mut().enumerate() {
            assert_eq!(buf.as_mut_ptr() as usize, base + i * stride);
            assert_eq!(buf.len(), 600_000);
            buf.as_mut_slice().fill(i as u8 + 1);
        }
        for (i, buf) in bufs.iter_mut().enumerate() {
            assert!(
                buf.as_mut_slice().iter().all(|b| *b == i as u8 + 1),
                "buffers are disjoint"
            );
        }
        assert!(!unmapped(base, MAP_ALIGN));
        let middle = bufs.remove(1);
        drop(middle);
        assert!(
            unmapped(base + stride, stride),
            "a buffer unmaps its own pages"
        );
        assert!(!unmapped(base, MAP_ALIGN) && !unmapped(base + 2 * stride, MAP_ALIGN));
        drop(bufs);
        assert!(
            unmapped(base, HUGE_PAGE),
            "the last buffer unmaps the rounding too"
        );
    }

    #[test]
    fn small_buffers_keep_a_mapping_each_and_large_ones_start_on_a_huge_page() {
        let mut rng = SmallRng::from_os_rng();
        let bufs = AlignedBuf::many(4, 4096, 4096, &mut rng).unwrap();
        assert_eq!(bufs.len(), 4);
        let mut big = AlignedBuf::new(1 << 20, 4096, &mut rng).unwrap();
        assert_eq!(big.as_mut_ptr() as usize % HUGE_PAGE, 0);
        let mut deep = AlignedBuf::many(64, 64 << 10, 4096, &mut rng).unwrap();
        assert_eq!(
            deep[0].as_mut_ptr() as usize % HUGE_PAGE,
            0,
            "4 MiB in total"
        );
        assert!(
            AlignedBuf::many(0, 1 << 20, 4096, &mut rng)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn alignments_above_a_page_are_refused() {
        let mut rng = SmallRng::from_os_rng();
        let err = AlignedBuf::new(4096, 8192, &mut rng).err().unwrap();
        assert!(
            matches!(err, BufferError::Alignment { align: 8192 }),
            "{err}"
        );
    }
}
