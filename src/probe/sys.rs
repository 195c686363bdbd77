//! The system calls the probes make that the standard library does not wrap (block-device
//! ioctls, among them a disk's sequence number and a loop device's backing for the write-safety
//! checks, `statx`, `statfs`, extended attributes, `fallocate`), each behind a safe function: with
//! the ring and its buffers (`engine::uring::ring`), the aligned buffers ([`super::buffer`]) and the timer
//! slack (`engine::schedule`), and the NVMe admin command (`crate::nvme_admin`), the only `unsafe`
//! of the agent, each block with its `// SAFETY:`.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `BLKGETSIZE64` = `_IOR(0x12, 114, size_t)`.
#[cfg(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc64"
))]
const BLKGETSIZE64: libc::Ioctl = 0x4008_1272;
/// `BLKGETSIZE64` = `_IOR(0x12, 114, size_t)`.
#[cfg(not(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc64"
)))]
const BLKGETSIZE64: libc::Ioctl = 0x8008_1272;

/// The size of the block device open as `file`, in bytes (`BLKGETSIZE64`).
pub(crate) fn block_device_size(file: &File) -> io::Result<u64> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points to a live local.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size as *mut u64) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size)
}

/// The logical block size of the block device open as `file` (`BLKSSZGET`), when it says one.
pub(crate) fn logical_block_size(file: &File) -> Option<u64> {
    let mut lbs: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int through the pointer, which points to a live local.
    let rc = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            libc::BLKSSZGET,
            &mut lbs as *mut libc::c_int,
        )
    };
    (rc == 0 && lbs > 0).then_some(lbs as u64)
}

/// The ID of the mount `path` is on (`statx` `STATX_MNT_ID`, Linux 5.8), as in mountinfo.
pub(crate) fn mount_id(path: &Path) -> Option<u64> {
    let path = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statx is a valid value of this plain C struct.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `stx` is a live, writable statx.
    let rc = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            path.as_ptr(),
            0,
            libc::STATX_MNT_ID,
            &mut stx,
        )
    };
    (rc == 0 && stx.stx_mask & libc::STATX_MNT_ID != 0).then_some(stx.stx_mnt_id)
}

/// The magic number of the filesystem `path` is on (`statfs` `f_type`).
pub(crate) fn statfs_magic(path: &Path) -> io::Result<i64> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: an all-zero statfs is a valid value of this plain C struct.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `buf` a live, writable statfs.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut buf) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)]
    Ok(buf.f_type as i64)
}

/// The id of the filesystem `path` is on (`statfs` `f_fsid`, as one 64-bit number): ext4 and
/// btrfs derive it from the filesystem's UUID; others from its device, or 0.
pub(crate) fn statfs_fsid(path: &Path) -> io::Result<u64> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: an all-zero statfs is a valid value of this plain C struct.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `buf` a live, writable statfs.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut buf) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fsid_t is two C ints (its field is private in the libc crate): 8 plain bytes,
    // which any [u32; 2] may hold.
    let halves: [u32; 2] = unsafe { std::mem::transmute(buf.f_fsid) };
    Ok((u64::from(halves[0]) << 32) | u64::from(halves[1]))
}

/// The size of the filesystem `path` is on and the space on it that unprivileged writers may
/// still take, in bytes (`statvfs`: `f_blocks` and `f_bavail` times `f_frsize`).
pub(crate) fn fs_space(path: &Path) -> io::Result<(u64, u64)> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut buf: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `buf` a live, writable statvfs.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut buf) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)]
    let unit = buf.f_frsize as u64;
    #[allow(clippy::unnecessary_cast)]
    Ok((
        (buf.f_blocks as u64).saturating_mul(unit),
        (buf.f_bavail as u64).saturating_mul(unit),
    ))
}

/// statx DIO alignment `(memory, offset)` of `file`, when the kernel and filesystem report it.
pub(crate) fn dio_alignment(file: &File) -> Option<(u64, u64)> {
    // SAFETY: an all-zero statx is a valid value of this plain C struct.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let empty = c"";
    // SAFETY: the fd is open, the path is an empty NUL-terminated string used with
    // AT_EMPTY_PATH, and `stx` is a live, writable statx.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if rc != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 || stx.stx_dio_offset_align == 0 {
        return None;
    }
    Some((
        u64::from(stx.stx_dio_mem_align),
        u64::from(stx.stx_dio_offset_align),
    ))
}

/// The birth time of `file` (`statx` `STATX_BTIME`: seconds and nanoseconds), when the kernel
/// and filesystem report one.
pub(crate) fn birth_time(file: &File) -> Option<(i64, u32)> {
    // SAFETY: an all-zero statx is a valid value of this plain C struct.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let empty = c"";
    // SAFETY: the fd is open, the path is an empty NUL-terminated string used with
    // AT_EMPTY_PATH, and `stx` is a live, writable statx.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_BTIME,
            &mut stx,
        )
    };
    (rc == 0 && stx.stx_mask & libc::STATX_BTIME != 0)
        .then_some((stx.stx_btime.tv_sec, stx.stx_btime.tv_nsec))
}

/// The value of the extended attribute `name` of `file` (up to 128 bytes), if it has one.
pub(crate) fn get_xattr(file: &File, name: &str) -> Option<Vec<u8>> {
    let name = CString::new(name).ok()?;
    let mut buf = [0u8; 128];
    // SAFETY: the fd is open, `name` is NUL-terminated and `buf` is writable for its length.
    let n = unsafe {
        libc::fgetxattr(
            file.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return None;
    }
    Some(buf[..n as usize].to_vec())
}

/// Sets the extended attribute `name` of `file` to `value`.
pub(crate) fn set_xattr(file: &File, name: &str, value: &[u8]) -> io::Result<()> {
    let name = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: the fd is open, `name` is NUL-terminated and `value` is readable for its length.
    let rc = unsafe {
        libc::fsetxattr(
            file.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `fallocate(fd, 0, offset, length)`: allocates the range, extending the file over unwritten
/// extents.
pub(crate) fn fallocate(file: &File, offset: i64, length: i64) -> io::Result<()> {
    // SAFETY: fallocate on an open descriptor with plain integer arguments.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, offset, length) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The file status flags of `file` (`fcntl(F_GETFL)`: `O_DIRECT`, `O_DSYNC`, ...).
pub(crate) fn status_flags(file: &File) -> io::Result<libc::c_int> {
    // SAFETY: F_GETFL on an open descriptor takes no argument and only returns its flags.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(flags)
}

/// Adds `flags` to the file status flags of `file` (`fcntl(F_SETFL)`).
pub(crate) fn add_status_flags(file: &File, flags: libc::c_int) -> io::Result<()> {
    let current = status_flags(file)?;
    // SAFETY: F_SETFL on an open descriptor with an int argument changes only its status flags.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, current | flags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `BLKGETDISKSEQ` = `_IOR(0x12, 128, __u64)` (Linux 5.15).
#[cfg(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc64"
))]
const BLKGETDISKSEQ: libc::Ioctl = 0x4008_1280;
/// `BLKGETDISKSEQ` = `_IOR(0x12, 128, __u64)` (Linux 5.15).
#[cfg(not(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc64"
)))]
const BLKGETDISKSEQ: libc::Ioctl = 0x8008_1280;

/// The disk sequence number of the block device open as `file` (`BLKGETDISKSEQ`, Linux 5.15): a
/// number the kernel gives each disk it attaches (a loop device at every attach), never the same
/// twice within one boot. A partition answers its disk's.
pub(crate) fn disk_seq(file: &File) -> io::Result<u64> {
    let mut seq: u64 = 0;
    // SAFETY: BLKGETDISKSEQ writes one u64 through the pointer, which points to a live local.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETDISKSEQ, &mut seq as *mut u64) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(seq)
}

/// `LOOP_GET_STATUS64` (linux/loop.h).
const LOOP_GET_STATUS64: libc::Ioctl = 0x4C05;

/// `struct loop_info64` (linux/loop.h), as the kernel fills it.
#[repr(C)]
// The kernel fills every field; the agent reads five.
#[allow(dead_code)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

const _: () = assert!(std::mem::size_of::<LoopInfo64>() == 232);

/// What a bound loop device reads and writes, as `LOOP_GET_STATUS64` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LoopStatus {
    /// `st_dev` of the backing file (of its node, for a block device), in the kernel's encoding.
    pub device: u64,
    /// Its inode.
    pub inode: u64,
    /// `st_rdev` of the backing file: the block device's number when it is one, else 0.
    pub rdevice: u64,
    /// Where the loop device starts in it, in bytes.
    pub offset: u64,
    /// How much of it the loop device covers (0: up to its end).
    pub sizelimit: u64,
}

/// What the loop device open as `file` is backed by (`LOOP_GET_STATUS64`); `ENXIO` when it is
/// not bound to a file.
pub(crate) fn loop_status(file: &File) -> io::Result<LoopStatus> {
    // SAFETY: an all-zero loop_info64 is a valid value of this plain C struct.
    let mut info: LoopInfo64 = unsafe { std::mem::zeroed() };
    // SAFETY: LOOP_GET_STATUS64 writes one struct loop_info64 through the pointer, which points
    // to a live local of that layout (repr(C), the fields of linux/loop.h in order).
    let rc = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            LOOP_GET_STATUS64,
            &mut info as *mut LoopInfo64,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(LoopStatus {
        device: info.lo_device,
        inode: info.lo_inode,
        rdevice: info.lo_rdevice,
        offset: info.lo_offset,
        sizelimit: info.lo_sizelimit,
    })
}
