//! The VFS every connection to the embedded store's file opens it through ([`NAME`]): SQLite's
//! own `unix-excl` (one exclusive lock for the process, the WAL index in the heap; see
//! [`super::sqlite::VFS`]) with one change — **a commit's WAL frames reach the file in one
//! write instead of two per frame**.
//!
//! SQLite appends a transaction's pages to the WAL as frames and writes each frame with two
//! `pwrite` calls, its 24-byte header and then the page; a run of the end-to-end benchmark
//! commits about 90 frames, ~180 system calls, and on this machine a small `pwrite` costs
//! nearly as much as a page (2 × 4 µs per frame against ~2.5 µs per frame written as one
//! buffer). Here a WAL handle gathers the frames SQLite writes one after the other — a header,
//! then the page right after it — in its buffer, and writes the buffer as one call the moment
//! the **commit frame** (the frame whose header carries the database's size after the commit,
//! non-zero only there) has its page: inside SQLite's `xWrite` of that page, before it returns.
//! SQLite publishes a commit to readers (the WAL index's header) only after that call, so
//! readers, checkpoints and a process killed a moment later see exactly what they saw before:
//! the commit is in the file (the kernel's page cache, as before — `synchronous = NORMAL`
//! never synced a commit).
//!
//! Every other operation on the WAL file — a read, a sync, a truncate, its size, a file
//! control, a close, any other write (the WAL's header, a page rewritten) — writes the buffer
//! first, so the file always reads back what SQLite wrote, in order. The buffer holds at most
//! [`MAX_WRITE`] bytes, what `unix-excl` writes in one call (a bigger commit takes several),
//! and only whole frames plus, for a moment, the header of the one being written.
//!
//! One rule keeps this sound: a write transaction's frames must all be written by its commit,
//! never before. SQLite writes frames early only when a transaction's changed pages overflow
//! its page cache ("spilling"); frames spilled by a transaction that then rolls back would stay
//! in the buffer after the write lock was released, and a later flush could overwrite frames
//! another connection had committed meanwhile. Every connection of the store therefore runs
//! with `cache_spill = OFF` ([`CONNECTION_PRAGMA`]): a big transaction keeps its pages in memory
//! until its commit instead (the store's transactions are bounded by what a tenant may send; the
//! largest are a migration rebuilding a table, which holds that table's changed pages, and the
//! periodic purges of old outputs and deliveries, which hold the pages of one period's rows).
//! For the same reason a frame
//! header written where the handle has just read (SQLite rewriting the checksums of frames it
//! spilled and overwrote) is never gathered.
//!
//! Database files, journals and temporary files are `unix-excl`'s own, untouched.

use rusqlite::ffi;
use std::ffi::{CStr, c_int, c_void};
use std::sync::OnceLock;

/// The name connections open the file with (`vfs=` for sqlx, `open_with_flags_and_vfs`).
pub(super) const NAME: &str = match NAME_C.to_str() {
    Ok(name) => name,
    Err(_) => panic!("the VFS name is UTF-8"),
};
const NAME_C: &CStr = c"norma-unix-excl";
/// The VFS this one is built on.
const BASE: &CStr = c"unix-excl";

/// The pragma every connection runs first (see the module doc).
pub(super) const CONNECTION_PRAGMA: (&str, &str) = ("cache_spill", "OFF");

/// The most `unix-excl` writes in one call (its `seekAndWrite` takes at most 128 KiB − 1), and
/// so the most a WAL handle gathers.
const MAX_WRITE: usize = 0x1_ffff;
/// A WAL frame's header: page number, database size after commit (0 unless commit), salts,
/// checksums (SQLite's file format, section 4.1).
const FRAME_HEADER: usize = 24;

/// Registers [`NAME`] once per process (later calls answer the first call's outcome).
pub(super) fn register() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            // SAFETY: `sqlite3_vfs_find` and `sqlite3_vfs_register` are thread-safe once SQLite
            // is initialised (find initialises it). The VFS struct is leaked: SQLite keeps the
            // pointer for the process's life. `unix-excl` is a VFS SQLite itself registers at
            // initialisation and never unregisters.
            unsafe {
                let base = ffi::sqlite3_vfs_find(BASE.as_ptr());
                if base.is_null() {
                    return Err("SQLite has no unix-excl VFS".to_owned());
                }
                let mut vfs: ffi::sqlite3_vfs = *base;
                vfs.pNext = std::ptr::null_mut();
                vfs.zName = NAME_C.as_ptr();
                vfs.pAppData = base.cast::<c_void>();
                vfs.szOsFile = c_int::try_from(std::mem::size_of::<WalFile>())
                    .ok()
                    .and_then(|own| own.checked_add((*base).szOsFile))
                    .ok_or_else(|| "VFS file size overflows".to_owned())?;
                vfs.xOpen = Some(open);
                let vfs = Box::leak(Box::new(vfs));
                match ffi::sqlite3_vfs_register(vfs, 0) {
                    ffi::SQLITE_OK => Ok(()),
                    code => Err(format!("registering the SQLite VFS failed: code {code}")),
                }
            }
        })
        .clone()
}

/// A WAL file: SQLite's handle (`base`, whose methods are [`WAL_METHODS`]) in front of
/// `unix-excl`'s own, which lives right after this struct in the block SQLite allocated.
#[repr(C)]
struct WalFile {
    base: ffi::sqlite3_file,
    real: *mut ffi::sqlite3_file,
    /// Bytes written by SQLite, not yet by the file: whole frames, and perhaps the header of
    /// the frame being written; they belong at `buffer_at`.
    buffer: Vec<u8>,
    buffer_at: i64,
    /// The buffer ends with a frame's header: whether it is the commit frame's.
    header_commits: Option<bool>,
    /// The size of the last page gathered (room for the next frame).
    page_len: usize,
    /// Where the handle's last read started, until its next write.
    read_at: Option<i64>,
}

/// `unix-excl`'s VFS, kept in this VFS's `pAppData`.
unsafe fn base_of(vfs: *mut ffi::sqlite3_vfs) -> *mut ffi::sqlite3_vfs {
    // SAFETY (caller): `vfs` is the VFS `register` built.
    unsafe { (*vfs).pAppData.cast() }
}

unsafe extern "C" fn open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: SQLite hands `file` as a block of this VFS's `szOsFile` bytes (at least 8-aligned,
    // its allocator's guarantee); `unix-excl` is called with its own VFS pointer, since
    // `unixOpen` recognises its exclusive mode by the VFS's name.
    unsafe {
        let base = base_of(vfs);
        let base_open = (*base).xOpen.expect("unix-excl opens files");
        if flags & ffi::SQLITE_OPEN_WAL == 0 {
            return base_open(base, name, file, flags, out_flags);
        }
        let real = file
            .cast::<u8>()
            .add(std::mem::size_of::<WalFile>())
            .cast::<ffi::sqlite3_file>();
        let rc = base_open(base, name, real, flags, out_flags);
        if rc != ffi::SQLITE_OK || (*real).pMethods.is_null() {
            (*file).pMethods = std::ptr::null();
            return rc;
        }
        std::ptr::write(
            file.cast::<WalFile>(),
            WalFile {
                base: ffi::sqlite3_file {
                    pMethods: &WAL_METHODS,
                },
                real,
                buffer: Vec::new(),
                buffer_at: 0,
                header_commits: None,
                page_len: 0,
                read_at: None,
            },
        );
        rc
    }
}

static WAL_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    // Version 1: no shared memory, no memory mapping (SQLite uses them on the database file
    // only, never on its WAL).
    iVersion: 1,
    xClose: Some(wal_close),
    xRead: Some(wal_read),
    xWrite: Some(wal_write),
    xTruncate: Some(wal_truncate),
    xSync: Some(wal_sync),
    xFileSize: Some(wal_file_size),
    xLock: Some(wal_lock),
    xUnlock: Some(wal_unlock),
    xCheckReservedLock: Some(wal_check_reserved_lock),
    xFileControl: Some(wal_file_control),
    xSectorSize: Some(wal_sector_size),
    xDeviceCharacteristics: Some(wal_device_characteristics),
    xShmMap: None,
    xShmLock: None,
    xShmBarrier: None,
    xShmUnmap: None,
    xFetch: None,
    xUnfetch: None,
};

impl WalFile {
    /// # Safety
    /// `file` is a handle [`open`] initialised and SQLite has not closed.
    unsafe fn of<'a>(file: *mut ffi::sqlite3_file) -> &'a mut WalFile {
        // SAFETY (caller): see above; SQLite never calls one handle's methods concurrently.
        unsafe { &mut *file.cast::<WalFile>() }
    }

    fn methods(&self) -> &ffi::sqlite3_io_methods {
        // SAFETY: `real` was opened successfully by `unix-excl` and stays open until `close`.
        unsafe { &*(*self.real).pMethods }
    }

    /// Writes `bytes` at `at` through `unix-excl`.
    fn write_through(&mut self, bytes: *const c_void, len: usize, at: i64) -> c_int {
        let Ok(len) = c_int::try_from(len) else {
            return ffi::SQLITE_IOERR_WRITE;
        };
        #[cfg(test)]
        tests::WAL_WRITES.with(|count| count.set(count.get() + 1));
        let write = self.methods().xWrite.expect("unix-excl writes");
        // SAFETY: `real` is open; `bytes` holds `len` bytes.
        unsafe { write(self.real, bytes, len, at) }
    }

    /// Writes the buffer, if anything is in it.
    fn flush(&mut self) -> c_int {
        self.header_commits = None;
        if self.buffer.is_empty() {
            return ffi::SQLITE_OK;
        }
        let rc = self.write_through(
            self.buffer.as_ptr().cast(),
            self.buffer.len(),
            self.buffer_at,
        );
        self.buffer.clear();
        rc
    }

    fn write(&mut self, bytes: &[u8], at: i64) -> c_int {
        let read_at = self.read_at.take();
        let buffer_end = self.buffer_at + self.buffer.len() as i64;
        let continues = self.buffer.is_empty() || at == buffer_end;
        match self.header_commits {
            // The page of the frame whose header ends the buffer.
            Some(commits) if at == buffer_end => {
                self.buffer.extend_from_slice(bytes);
                self.header_commits = None;
                self.page_len = bytes.len();
                if commits {
                    return self.flush();
                }
                ffi::SQLITE_OK
            }
            // A frame's header, not a rewrite of one just read: the start of a frame to gather.
            None if bytes.len() == FRAME_HEADER && continues && read_at != Some(at) => {
                if self.buffer.len() + FRAME_HEADER + self.page_len > MAX_WRITE {
                    let rc = self.flush();
                    if rc != ffi::SQLITE_OK {
                        return rc;
                    }
                }
                if self.buffer.is_empty() {
                    self.buffer_at = at;
                }
                self.buffer.extend_from_slice(bytes);
                let database_size = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
                self.header_commits = Some(database_size != 0);
                ffi::SQLITE_OK
            }
            // Anything else is written as it comes, after what is gathered.
            _ => {
                let rc = self.flush();
                if rc != ffi::SQLITE_OK {
                    return rc;
                }
                self.write_through(bytes.as_ptr().cast(), bytes.len(), at)
            }
        }
    }
}

/// Hands the call to `unix-excl` as SQLite made it.
macro_rules! forwarded {
    ($file:ident, $method:ident $(, $arg:expr)*) => {{
        // SAFETY: SQLite calls this handle's methods only while it is open.
        let wal = unsafe { WalFile::of($file) };
        let method = wal.methods().$method.expect("unix-excl implements every version-1 method");
        // SAFETY: forwarded as SQLite called it, to the open `unix-excl` handle.
        unsafe { method(wal.real $(, $arg)*) }
    }};
}

/// Writes the buffer, then hands the call to `unix-excl`.
macro_rules! flushed {
    ($file:ident, $method:ident $(, $arg:expr)*) => {{
        // SAFETY: SQLite calls this handle's methods only while it is open.
        let rc = unsafe { WalFile::of($file) }.flush();
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        forwarded!($file, $method $(, $arg)*)
    }};
}

unsafe extern "C" fn wal_close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite closes a handle once, after its last other call.
    let wal = unsafe { WalFile::of(file) };
    let flushed = wal.flush();
    let close = wal.methods().xClose.expect("unix-excl closes");
    // SAFETY: `real` is open; this is its close.
    let closed = unsafe { close(wal.real) };
    // SAFETY: the handle is done; its buffer is dropped once, here.
    unsafe { std::ptr::drop_in_place(&mut wal.buffer) };
    if flushed != ffi::SQLITE_OK {
        flushed
    } else {
        closed
    }
}

unsafe extern "C" fn wal_read(
    file: *mut ffi::sqlite3_file,
    into: *mut c_void,
    len: c_int,
    at: ffi::sqlite3_int64,
) -> c_int {
    let rc = flushed!(file, xRead, into, len, at);
    // SAFETY: as in `flushed!`.
    unsafe { WalFile::of(file) }.read_at = Some(at);
    rc
}

unsafe extern "C" fn wal_write(
    file: *mut ffi::sqlite3_file,
    bytes: *const c_void,
    len: c_int,
    at: ffi::sqlite3_int64,
) -> c_int {
    let Ok(len) = usize::try_from(len) else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    // SAFETY: SQLite passes `len` readable bytes at `bytes` and an open handle.
    let (wal, bytes) = unsafe {
        (
            WalFile::of(file),
            std::slice::from_raw_parts(bytes.cast::<u8>(), len),
        )
    };
    wal.write(bytes, at)
}

unsafe extern "C" fn wal_truncate(file: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    flushed!(file, xTruncate, size)
}

unsafe extern "C" fn wal_sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    flushed!(file, xSync, flags)
}

unsafe extern "C" fn wal_file_size(
    file: *mut ffi::sqlite3_file,
    size: *mut ffi::sqlite3_int64,
) -> c_int {
    flushed!(file, xFileSize, size)
}

unsafe extern "C" fn wal_lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    flushed!(file, xLock, level)
}

unsafe extern "C" fn wal_unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    flushed!(file, xUnlock, level)
}

unsafe extern "C" fn wal_check_reserved_lock(
    file: *mut ffi::sqlite3_file,
    out: *mut c_int,
) -> c_int {
    flushed!(file, xCheckReservedLock, out)
}

unsafe extern "C" fn wal_file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    flushed!(file, xFileControl, op, arg)
}

/// A question about the device: nothing to write first.
unsafe extern "C" fn wal_sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    forwarded!(file, xSectorSize)
}

/// A question about the device: nothing to write first.
unsafe extern "C" fn wal_device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    forwarded!(file, xDeviceCharacteristics)
}

#[cfg(test)]
#[path = "sqlite_vfs_tests.rs"]
mod tests;
