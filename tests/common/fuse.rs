//! A hung filesystem for fault tests: a FUSE mount whose server answers the kernel's INIT and
//! then nothing, unmounted on drop.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A FUSE filesystem whose server answers the kernel's INIT and then nothing: a lookup in it (the
/// stat of any path below the mountpoint) waits until the filesystem is dropped, which unmounts it
/// and closes `/dev/fuse` (the connection aborts and waiters get ENOTCONN). A hung NFS server
/// looks the same to a client. While it is mounted, anything on the machine that stats every
/// mountpoint (`df`) waits too, for as long as the test keeps it.
pub struct HungFuse {
    dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
    fuse: Option<std::fs::File>,
}

impl HungFuse {
    /// Mounts it on a new directory under /var/tmp.
    pub fn mount() -> HungFuse {
        let temp = tempfile::tempdir_in("/var/tmp").unwrap();
        let mut hung = HungFuse::mount_at(temp.path());
        hung._temp = Some(temp);
        hung
    }

    /// Mounts it on `dir`, an empty directory the test created.
    pub fn mount_at(dir: &Path) -> HungFuse {
        use std::io::{Read, Write};
        use std::os::fd::AsRawFd;
        let fuse = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .expect("open /dev/fuse");
        let target = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
        let data = std::ffi::CString::new(format!(
            "fd={},rootmode=40000,user_id=0,group_id=0",
            fuse.as_raw_fd()
        ))
        .unwrap();
        // SAFETY: every pointer is a NUL-terminated string that outlives the call.
        let rc = unsafe {
            libc::mount(
                c"diskprobe-hung".as_ptr(),
                target.as_ptr(),
                c"fuse".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                data.as_ptr().cast(),
            )
        };
        assert_eq!(rc, 0, "mount fuse: {}", std::io::Error::last_os_error());
        // From here on, a failed handshake still unmounts (Drop).
        let mut hung = HungFuse {
            dir: dir.to_owned(),
            _temp: None,
            fuse: Some(fuse),
        };
        let fuse = hung.fuse.as_mut().unwrap();
        // FUSE_INIT (opcode 26): in_header (40 bytes: len, opcode, unique, ...) then init_in
        // (major, minor, max_readahead, ...). The reply: out_header (len, error, unique) and an
        // init_out of 64 bytes with the protocol version, no features and 4 KiB writes.
        let mut buf = vec![0u8; (1 << 20) + 4096];
        let n = fuse.read(&mut buf).expect("read FUSE_INIT");
        assert!(n >= 56, "short FUSE_INIT request");
        let word = |at: usize| u32::from_le_bytes(buf[at..at + 4].try_into().unwrap());
        assert_eq!(word(4), 26, "the first request is FUSE_INIT");
        let unique = &buf[8..16];
        let (minor, readahead) = (word(44), word(48));
        let mut reply = Vec::with_capacity(80);
        reply.extend_from_slice(&80u32.to_le_bytes());
        reply.extend_from_slice(&0i32.to_le_bytes());
        reply.extend_from_slice(unique);
        for v in [7, minor, readahead, 0] {
            reply.extend_from_slice(&u32::to_le_bytes(v));
        }
        reply.extend_from_slice(&16u16.to_le_bytes()); // max_background
        reply.extend_from_slice(&12u16.to_le_bytes()); // congestion_threshold
        reply.extend_from_slice(&4096u32.to_le_bytes()); // max_write
        reply.extend_from_slice(&1u32.to_le_bytes()); // time_gran
        reply.resize(80, 0);
        fuse.write_all(&reply).expect("answer FUSE_INIT");
        hung
    }

    /// The mountpoint.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Closes `/dev/fuse` and leaves the filesystem mounted: every waiting and later request fails
    /// with ENOTCONN, as on a FUSE mount whose server died.
    pub fn abort(&mut self) {
        drop(self.fuse.take());
    }
}

impl Drop for HungFuse {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        drop(self.fuse.take());
    }
}
