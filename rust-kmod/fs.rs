// SPDX-License-Identifier: GPL-2.0

//! fctracefs: the module's own pseudo file system, built on libfs like securityfs, and
//! mounted on `/sys/kernel/fctrace` (the module creates that mount point):
//!
//! ```text
//! mount -t fctrace nodev /sys/kernel/fctrace
//! ```

use crate::bindings;
use crate::control::{file_by_ino, FileId, Text, FILES};
use crate::engine::state;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};
use crate::reader::{TraceReader, READ_CHUNK};
use kernel::ffi::{c_char, c_int, c_uint};
use core::pin::Pin;
use kernel::alloc::KVec;
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::Mutex;
use kernel::uaccess::UserSlice;

const FCTRACE_MAGIC: u64 = 0x66637472; // "fctr"
// Constants whose C definitions are casts, which bindgen does not translate.
const FMODE_READ: u32 = 1 << 0;
const EPOLLIN: c_uint = 0x1;
const EPOLLERR: c_uint = 0x8;
const EPOLLRDNORM: c_uint = 0x40;

/// A C structure the kernel may write to (list heads), in a static.
struct SyncCell<T>(UnsafeCell<T>);

// SAFETY: the kernel serialises access to these structures (filesystem registration is
// done once, under its own locks); Rust only writes them before registering.
unsafe impl<T> Sync for SyncCell<T> {}

impl<T> SyncCell<T> {
    const fn new(v: T) -> Self {
        SyncCell(UnsafeCell::new(v))
    }
    fn get(&self) -> *mut T {
        self.0.get()
    }
}

const fn zeroed<T>() -> T {
    // SAFETY: used only for C structures of pointers and integers, for which all-zero is
    // the C default (NULL, 0).
    unsafe { core::mem::zeroed() }
}

static CTL_FOPS: SyncCell<bindings::file_operations> = SyncCell::new(bindings::file_operations {
    read: Some(ctl_read),
    write: Some(ctl_write),
    llseek: Some(bindings::default_llseek),
    ..zeroed()
});

static TRACE_FOPS: SyncCell<bindings::file_operations> = SyncCell::new(bindings::file_operations {
    open: Some(trace_open),
    read: Some(trace_read),
    write: Some(trace_write),
    release: Some(trace_release),
    llseek: Some(bindings::default_llseek),
    ..zeroed()
});

static PIPE_FOPS: SyncCell<bindings::file_operations> = SyncCell::new(bindings::file_operations {
    open: Some(pipe_open),
    read: Some(pipe_read),
    poll: Some(pipe_poll),
    release: Some(pipe_release),
    ..zeroed()
});

static CTX_OPS: SyncCell<bindings::fs_context_operations> =
    SyncCell::new(bindings::fs_context_operations { get_tree: Some(get_tree), ..zeroed() });

static FS_TYPE: SyncCell<bindings::file_system_type> = SyncCell::new(bindings::file_system_type {
    name: c"fctrace".as_ptr().cast(),
    init_fs_context: Some(init_fs_context),
    kill_sb: Some(bindings::kill_litter_super),
    ..zeroed()
});

/// The `tree_descr` table for `simple_fill_super`: entries 0 and 1 unused, then the files,
/// then an empty name.
static TREE: SyncCell<[bindings::tree_descr; FILES.len() + 3]> = SyncCell::new(zeroed());

/// The registered file system and its mount point; both removed on drop.
pub(crate) struct Registration;

impl Registration {
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: nothing uses these statics until the file system is registered below,
        // and this runs once, in module init.
        unsafe {
            let owner = bindings::fctrace_this_module();
            (*CTL_FOPS.get()).owner = owner;
            (*TRACE_FOPS.get()).owner = owner;
            (*PIPE_FOPS.get()).owner = owner;
            (*FS_TYPE.get()).owner = owner;
            let tree = &mut *TREE.get();
            for (i, (id, name, mode)) in FILES.iter().enumerate() {
                let ops = match id {
                    FileId::Trace => TRACE_FOPS.get(),
                    FileId::TracePipe => PIPE_FOPS.get(),
                    _ => CTL_FOPS.get(),
                };
                tree[i + 2] = bindings::tree_descr { name: name.as_char_ptr(), ops, mode: *mode as c_int };
            }
            tree[FILES.len() + 2].name = c"".as_ptr().cast();
        }
        // SAFETY: trivial C helper; creates /sys/kernel/fctrace.
        kernel::error::to_result(unsafe { bindings::fctrace_mountpoint_create() })?;
        // SAFETY: `FS_TYPE` is a static, fully initialised above.
        if let Err(e) = kernel::error::to_result(unsafe { bindings::register_filesystem(FS_TYPE.get()) }) {
            // SAFETY: created just above.
            unsafe { bindings::fctrace_mountpoint_remove() };
            return Err(e);
        }
        Ok(Registration)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // SAFETY: registered in `new`; the module cannot be unloaded while mounted (the
        // file system type holds a module reference), so no superblock is left.
        unsafe {
            bindings::unregister_filesystem(FS_TYPE.get());
            bindings::fctrace_mountpoint_remove();
        }
    }
}

/// # Safety
///
/// Called only by the kernel, with pointers that are valid for the duration of the call.
unsafe extern "C" fn fill_super(sb: *mut bindings::super_block, _fc: *mut bindings::fs_context) -> c_int {
    // SAFETY: `sb` is the new superblock; `TREE` was filled at init and lives forever.
    unsafe { bindings::simple_fill_super(sb, FCTRACE_MAGIC as _, TREE.get().cast()) }
}

/// # Safety
///
/// Called only by the kernel, with pointers that are valid for the duration of the call.
unsafe extern "C" fn get_tree(fc: *mut bindings::fs_context) -> c_int {
    // SAFETY: `fc` is the VFS's mount context; one superblock is shared by all mounts.
    unsafe { bindings::get_tree_single(fc, Some(fill_super)) }
}

/// # Safety
///
/// Called only by the kernel, with pointers that are valid for the duration of the call.
unsafe extern "C" fn init_fs_context(fc: *mut bindings::fs_context) -> c_int {
    // SAFETY: `fc` is the VFS's new mount context; `CTX_OPS` is static.
    unsafe { (*fc).ops = CTX_OPS.get() };
    0
}

fn errno(e: Error) -> isize {
    e.to_errno() as isize
}

/// The file's id and whether it was opened for appending.
///
/// # Safety
///
/// `file` must be a live file of this file system.
unsafe fn file_id(file: *mut bindings::file) -> (Option<FileId>, bool) {
    // SAFETY: the caller guarantees `file` is live; its inode is pinned while it is open.
    unsafe {
        let ino = (*(*file).f_inode).i_ino as u64;
        (file_by_ino(ino), (*file).f_flags & bindings::O_APPEND != 0)
    }
}

/// Copies `data[*ppos..]` to user space, at most `count` bytes.
fn read_from(data: &[u8], ubuf: *mut c_char, count: usize, ppos: *mut bindings::loff_t) -> isize {
    // SAFETY: `ppos` is the VFS's position for this read.
    let pos = unsafe { *ppos };
    if pos < 0 {
        return errno(EINVAL);
    }
    let pos = pos as usize;
    if pos >= data.len() {
        return 0;
    }
    let n = count.min(data.len() - pos);
    let mut w = UserSlice::new(ubuf as usize, n).writer();
    if let Err(e) = w.write_slice(&data[pos..pos + n]) {
        return errno(e);
    }
    // SAFETY: as above.
    unsafe { *ppos = (pos + n) as _ };
    n as isize
}

/// # Safety
///
/// Called only by the kernel, with pointers that are valid for the duration of the call.
unsafe extern "C" fn ctl_read(file: *mut bindings::file, ubuf: *mut c_char, count: usize, ppos: *mut bindings::loff_t) -> isize {
    // SAFETY: the VFS passes a live file of ours.
    let (Some(id), _) = (unsafe { file_id(file) }) else { return errno(EINVAL) };
    let Some(st) = state() else { return errno(ENODEV) };
    let mut t = Text::new();
    if st.render(id, &mut t).is_err() {
        return errno(ENOMEM);
    }
    read_from(&t.0, ubuf, count, ppos)
}

fn read_user(ubuf: *const c_char, count: usize) -> Result<KVec<u8>> {
    if count > 64 * 1024 {
        return Err(EINVAL);
    }
    let mut v = KVec::new();
    UserSlice::new(ubuf as usize, count).read_all(&mut v, GFP_KERNEL)?;
    Ok(v)
}

/// # Safety
///
/// Called only by the kernel, with pointers that are valid for the duration of the call.
unsafe extern "C" fn ctl_write(file: *mut bindings::file, ubuf: *const c_char, count: usize, _ppos: *mut bindings::loff_t) -> isize {
    // SAFETY: the VFS passes a live file of ours.
    let (Some(id), append) = (unsafe { file_id(file) }) else { return errno(EINVAL) };
    let Some(st) = state() else { return errno(ENODEV) };
    let data = match read_user(ubuf, count) {
        Ok(d) => d,
        Err(e) => return errno(e),
    };
    match st.write_file(id, &data, append) {
        Ok(()) => count as isize,
        Err(e) => errno(e),
    }
}

// `trace`: a text snapshot made at open.

/// # Safety
///
/// Called only by the kernel, with pointers that are valid for the duration of the call.
unsafe extern "C" fn trace_open(_inode: *mut bindings::inode, file: *mut bindings::file) -> c_int {
    let Some(st) = state() else { return ENODEV.to_errno() };
    // SAFETY: `file` is the file being opened.
    let mode = unsafe { (*file).f_mode };
    if mode & FMODE_READ == 0 {
        // Opened only to write (`echo > trace`): nothing to show.
        return 0;
    }
    let reader = match TraceReader::new(st) {
        Ok(r) => r,
        Err(e) => return e.to_errno(),
    };
    match KBox::new(TraceFile { busy: AtomicBool::new(false), reader: UnsafeCell::new(reader) }, GFP_KERNEL) {
        // SAFETY: `file` is ours until release, which frees this.
        Ok(b) => unsafe { (*file).private_data = KBox::into_raw(b).cast() },
        Err(_) => return ENOMEM.to_errno(),
    }
    0
}

/// An open `trace` file's state.
struct TraceFile {
    /// A read is running (`pread()`s of one open file may come at once; the second is
    /// refused with EBUSY rather than waited for).
    busy: AtomicBool,
    /// Only touched by the read that set `busy`.
    reader: UnsafeCell<TraceReader>,
}

/// # Safety
///
/// Called only by the kernel, with pointers that are valid for the duration of the call.
unsafe extern "C" fn trace_read(file: *mut bindings::file, ubuf: *mut c_char, count: usize, ppos: *mut bindings::loff_t) -> isize {
    let Some(st) = state() else { return errno(ENODEV) };
    // SAFETY: set in `trace_open` to a `KBox<TraceFile>` (freed only at release) or NULL.
    let Some(tf) = (unsafe { ((*file).private_data as *const TraceFile).as_ref() }) else {
        return errno(EBADF);
    };
    if tf.busy.swap(true, Ordering::Acquire) {
        return errno(EBUSY);
    }
    // SAFETY: `busy` makes this read the only user of the reader until it is cleared.
    let r = unsafe { &mut *tf.reader.get() };
    // SAFETY: `ppos` is the VFS's position for this read.
    let ret = trace_read_at(st, r, ubuf, count, unsafe { &mut *ppos });
    tf.busy.store(false, Ordering::Release);
    ret
}

/// The text is made as it is read. A read at another offset than where the last one
/// ended skips forward (rendering what it skips), or starts over from a new snapshot of
/// the buffer to go back: `trace` reads like a file, sequential reads cost nothing extra.
fn trace_read_at(st: &'static crate::engine::State, r: &mut TraceReader, ubuf: *mut c_char, count: usize, pos: &mut bindings::loff_t) -> isize {
    if *pos < 0 {
        return errno(EINVAL);
    }
    if *pos < r.pos {
        match TraceReader::new(st) {
            Ok(n) => *r = n,
            Err(e) => return errno(e),
        }
    }
    while r.pos < *pos {
        let skip = (*pos - r.pos).min(READ_CHUNK as i64) as usize;
        match r.next_chunk(st, skip) {
            Ok([]) => return 0,
            Ok(c) => r.pos += c.len() as i64,
            Err(e) => return errno(e),
        }
    }
    let count = count.min(READ_CHUNK);
    let chunk = match r.next_chunk(st, count) {
        Ok(c) => c,
        Err(e) => return errno(e),
    };
    let n = chunk.len();
    if n == 0 {
        return 0;
    }
    let mut w = UserSlice::new(ubuf as usize, n).writer();
    if let Err(e) = w.write_slice(chunk) {
        return errno(e);
    }
    r.pos += n as i64;
    *pos = r.pos;
    n as isize
}

/// # Safety
///
/// Called only by the kernel, with pointers that are valid for the duration of the call.
unsafe extern "C" fn trace_write(file: *mut bindings::file, ubuf: *const c_char, count: usize, ppos: *mut bindings::loff_t) -> isize {
    // SAFETY: forwarded unchanged.
    unsafe { ctl_write(file, ubuf, count, ppos) }
}

/// # Safety
///
/// Called only by the kernel, with pointers that are valid for the duration of the call.
unsafe extern "C" fn trace_release(_inode: *mut bindings::inode, file: *mut bindings::file) -> c_int {
    // SAFETY: `private_data` is NULL or the `KBox<TraceFile>` from `trace_open`, freed
    // once here (no read is running: the file is being released).
    unsafe {
        let p = (*file).private_data as *mut TraceFile;
        if !p.is_null() {
            drop(KBox::from_raw(p));
        }
    }
    0
}

// `trace_pipe`: consuming reads; each open file keeps the text of events it consumed but
// has not handed out yet.

struct Pending {
    text: Text,
    pos: usize,
}

type PipeReader = Mutex<Pending>;

/// # Safety
///
/// Called only by the kernel, with pointers that are valid for the duration of the call.
unsafe extern "C" fn pipe_open(inode: *mut bindings::inode, file: *mut bindings::file) -> c_int {
    let r = match KBox::pin_init(new_mutex!(Pending { text: Text::new(), pos: 0 }), GFP_KERNEL) {
        Ok(r) => r,
        Err(e) => return e.to_errno(),
    };
    // SAFETY: the reader stays pinned: it is only used through this pointer and freed in
    // `pipe_release`.
    let raw = KBox::into_raw(unsafe { Pin::into_inner_unchecked(r) });
    // SAFETY: `file` is being opened by us.
    let r = unsafe {
        (*file).private_data = raw.cast();
        bindings::stream_open(inode, file)
    };
    if r != 0 {
        // SAFETY: `raw` came from `KBox::into_raw` above and was not handed out.
        unsafe { drop(KBox::from_raw(raw)) };
        return r;
    }
    if let Some(st) = state() {
        st.readers.fetch_add(1, Ordering::Relaxed);
    }
    0
}

/// # Safety
///
/// Called only by the kernel, with pointers that are valid for the duration of the call.
unsafe extern "C" fn pipe_read(file: *mut bindings::file, ubuf: *mut c_char, count: usize, _ppos: *mut bindings::loff_t) -> isize {
    let Some(st) = state() else { return errno(ENODEV) };
    // SAFETY: set in `pipe_open`, valid until `pipe_release`.
    let r = unsafe { &*((*file).private_data as *const PipeReader) };
    // SAFETY: `file` is live.
    let nonblock = unsafe { (*file).f_flags } & bindings::O_NONBLOCK != 0;
    if count == 0 {
        return 0;
    }
    let mut g = r.lock();
    loop {
        if g.pos < g.text.0.len() {
            let n = count.min(g.text.0.len() - g.pos);
            let mut w = UserSlice::new(ubuf as usize, n).writer();
            if let Err(e) = w.write_slice(&g.text.0[g.pos..g.pos + n]) {
                return errno(e);
            }
            g.pos += n;
            if g.pos == g.text.0.len() {
                g.text = Text::new();
                g.pos = 0;
            }
            return n as isize;
        }
        if crate::reader::drain(st, &st.buf, &mut g.text, count.min(READ_CHUNK)).is_err() {
            return errno(ENOMEM);
        }
        // Room was made: a task waiting for it (lossless) may go on.
        // SAFETY: trivial C helper, process context.
        unsafe { bindings::fctrace_throttle_wake() };
        if !g.text.0.is_empty() {
            continue;
        }
        if nonblock {
            return errno(EAGAIN);
        }
        if let Err(e) = st.buf.wait() {
            return errno(e);
        }
    }
}

/// # Safety
///
/// Called only by the kernel, with pointers that are valid for the duration of the call.
unsafe extern "C" fn pipe_poll(file: *mut bindings::file, pt: *mut bindings::poll_table_struct) -> c_uint {
    let Some(st) = state() else { return EPOLLERR };
    // SAFETY: set in `pipe_open`, valid until `pipe_release`.
    let r = unsafe { &*((*file).private_data as *const PipeReader) };
    let pending = {
        let g = r.lock();
        g.pos < g.text.0.len()
    };
    let mask = st.buf.poll_wait(file, pt);
    if pending {
        mask | EPOLLIN | EPOLLRDNORM
    } else {
        mask
    }
}

/// # Safety
///
/// Called only by the kernel, with pointers that are valid for the duration of the call.
unsafe extern "C" fn pipe_release(_inode: *mut bindings::inode, file: *mut bindings::file) -> c_int {
    // SAFETY: `private_data` is the reader from `pipe_open`, freed once here.
    unsafe { drop(KBox::from_raw((*file).private_data as *mut PipeReader)) };
    if let Some(st) = state() {
        st.readers.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: trivial C helper, process context.
        unsafe { bindings::fctrace_throttle_wake() };
    }
    0
}
