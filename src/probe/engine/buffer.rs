//! I/O buffers for direct I/O: page-aligned anonymous mappings filled with random bytes, and the
//! stamp that makes every write's data unique.

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
pub const STAMP_STRIDE: usize = 512;

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
}

// SAFETY: AlignedBuf owns its mapping exclusively (like a Box<[u8]>).
unsafe impl Send for AlignedBuf {}

/// Alignment every mapping has (Linux pages are at least 4 KiB).
const MAP_ALIGN: usize = 4096;

impl AlignedBuf {
    /// `len` random bytes aligned to `align` (a power of two, at most 4096).
    pub(crate) fn new(
        len: usize,
        align: usize,
        rng: &mut SmallRng,
    ) -> Result<AlignedBuf, BufferError> {
        if align > MAP_ALIGN {
            return Err(BufferError::Alignment { align });
        }
        let len = len.max(1);
        // SAFETY: an anonymous private mapping of len bytes at an address the kernel chooses;
        // no file descriptor or existing memory is involved.
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
        let ptr = NonNull::new(raw.cast::<u8>()).ok_or_else(|| BufferError::Map {
            len,
            source: std::io::Error::from_raw_os_error(libc::ENOMEM),
        })?;
        let mut buf = AlignedBuf { ptr, len };
        rng.fill_bytes(buf.as_mut_slice());
        Ok(buf)
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is a live mapping of len bytes (zero-filled by the kernel, then written in
        // new()), borrowed mutably through &mut self only.
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
        // SAFETY: ptr/len is exactly the mapping made in new(), unmapped once; owners drop a
        // buffer only after every I/O using it has completed (uring::ring::RingIo leaks it otherwise).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
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
