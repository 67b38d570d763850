// SPDX-License-Identifier: GPL-2.0

//! fctracefs: the module's own pseudo file system, built on libfs like securityfs, and
//! mounted on `/sys/kernel/fctrace` (the module creates that mount point):
//!
//! ```text
//! mount -t fctrace nodev /sys/kernel/fctrace
//! ```
//!
//! Each kind of file implements [`FileKind`]; [`Ops`] builds its `file_operations` and
//! owns every `unsafe extern "C"` function, the way `rust/kernel/miscdevice.rs` does.
//! Per-open data goes through `file->private_data` as a [`ForeignOwnable`].

use crate::bindings;
use crate::control::{self, file_by_ino, FileId, OpenFile, FILES};
use crate::engine::{tracer, Tracer, Wait};
use crate::parse;
use crate::reader::{self, TraceReader, READ_CHUNK};
use crate::sys;
use crate::text::Text;
use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::pin::Pin;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::alloc::KVec;
use kernel::ffi::{c_char, c_int, c_uint, c_void};
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::Mutex;
use kernel::types::ForeignOwnable;
use kernel::uaccess::UserSliceWriter;

const FCTRACE_MAGIC: u64 = 0x66637472; // "fctr"
/// The longest write a file takes (the control files refuse more than 16 KiB).
const MAX_USER_WRITE: usize = 64 * 1024;
// Constants whose C definitions are casts, which bindgen does not translate.
const FMODE_READ: u32 = 1 << 0;
const FMODE_WRITE: u32 = 1 << 1;
const EPOLLIN: c_uint = 0x1;
const EPOLLERR: c_uint = 0x8;
const EPOLLRDNORM: c_uint = 0x40;

/// One kind of file. Only the operations it implements are in its `file_operations`.
#[vtable]
pub(crate) trait FileKind: Sized + 'static {
    /// Per-open data, kept in `file->private_data`.
    type Data: ForeignOwnable + Send + Sync;

    /// A stream (no position, `stream_open()`), not a seekable file.
    const STREAM: bool = false;

    /// Opens the file.
    fn open(tr: &'static Tracer, file: &OpenFile) -> Result<Self::Data>;

    /// Reads at `*pos` into `out`; returns the bytes read (0 at the end).
    fn read(
        _tr: &'static Tracer,
        _data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
        _file: &OpenFile,
        _out: &mut UserSliceWriter,
        _pos: &mut i64,
    ) -> Result<usize> {
        kernel::build_error!(kernel::error::VTABLE_DEFAULT_ERROR)
    }

    /// Takes a write of `input`.
    fn write(
        _tr: &'static Tracer,
        _data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
        _file: &OpenFile,
        _input: &[u8],
    ) -> Result {
        kernel::build_error!(kernel::error::VTABLE_DEFAULT_ERROR)
    }

    /// `poll()`: registers on the wait queue, returns the ready mask.
    fn poll(
        _tr: &'static Tracer,
        _data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
        _file: *mut bindings::file,
        _pt: *mut bindings::poll_table_struct,
    ) -> c_uint {
        kernel::build_error!(kernel::error::VTABLE_DEFAULT_ERROR)
    }

    /// The last reference to the open file goes (the data is dropped after this).
    fn release(_tr: &'static Tracer, _data: &Self::Data, _file: &OpenFile) {}
}

fn errno(e: Error) -> isize {
    e.to_errno() as isize
}

/// The `file_operations` of a [`FileKind`], and the C functions in it.
struct Ops<T>(PhantomData<T>);

const fn zeroed<T>() -> T {
    // SAFETY: used only for C structures of pointers and integers, for which all-zero is
    // the C default (NULL, 0).
    unsafe { core::mem::zeroed() }
}

impl<T: FileKind> Ops<T> {
    const FOPS: bindings::file_operations = bindings::file_operations {
        open: Some(Self::open),
        read: if T::HAS_READ { Some(Self::read) } else { None },
        write: if T::HAS_WRITE {
            Some(Self::write)
        } else {
            None
        },
        poll: if T::HAS_POLL { Some(Self::poll) } else { None },
        release: Some(Self::release),
        llseek: if T::STREAM {
            None
        } else {
            Some(bindings::default_llseek)
        },
        ..zeroed()
    };

    /// What the operations see of `file`.
    ///
    /// # Safety
    ///
    /// `file` is a live file of this file system.
    unsafe fn open_file(file: *mut bindings::file) -> Option<OpenFile> {
        // SAFETY: the caller guarantees `file` is live; its inode is pinned while it is
        // open.
        let (ino, flags, mode) = unsafe {
            (
                (*(*file).f_inode).i_ino as u64,
                (*file).f_flags,
                (*file).f_mode,
            )
        };
        Some(OpenFile {
            id: file_by_ino(ino)?,
            append: flags & bindings::O_APPEND != 0,
            truncate: flags & bindings::O_TRUNC != 0,
            nonblock: flags & bindings::O_NONBLOCK != 0,
            readable: mode & FMODE_READ != 0,
            writable: mode & FMODE_WRITE != 0,
        })
    }

    /// # Safety
    ///
    /// Called only by the VFS, with a file of ours being opened.
    unsafe extern "C" fn open(inode: *mut bindings::inode, file: *mut bindings::file) -> c_int {
        let Some(tr) = tracer() else {
            return ENODEV.to_errno();
        };
        // SAFETY: `file` is being opened, so live.
        let Some(of) = (unsafe { Self::open_file(file) }) else {
            return EINVAL.to_errno();
        };
        if let Err(e) = control::may_open(&of) {
            return e.to_errno();
        }
        let data = match T::open(tr, &of) {
            Ok(d) => d,
            Err(e) => return e.to_errno(),
        };
        let ptr = data.into_foreign();
        // SAFETY: `file` is ours until release, which takes the data back.
        unsafe { (*file).private_data = ptr as *mut c_void };
        if T::STREAM {
            // SAFETY: `inode` and `file` are the ones being opened.
            let r = unsafe { bindings::stream_open(inode, file) };
            if r != 0 {
                // SAFETY: `ptr` came from `into_foreign` above and was not handed out.
                let data = unsafe { T::Data::from_foreign(ptr) };
                T::release(tr, &data, &of);
                return r;
            }
        }
        0
    }

    /// # Safety
    ///
    /// Called only by the VFS, with a file of ours and a user buffer of `count` bytes;
    /// `ppos` is the file position or NULL (a stream).
    unsafe extern "C" fn read(
        file: *mut bindings::file,
        ubuf: *mut c_char,
        count: usize,
        ppos: *mut bindings::loff_t,
    ) -> isize {
        let Some(tr) = tracer() else {
            return errno(ENODEV);
        };
        // SAFETY: the VFS passes a live file of ours.
        let Some(of) = (unsafe { Self::open_file(file) }) else {
            return errno(EINVAL);
        };
        // SAFETY: `private_data` was set by `open` and is taken back only at release,
        // which cannot run during a read.
        let data = unsafe { T::Data::borrow((*file).private_data) };
        let mut out = sys::user_slice(ubuf as usize, count).writer();
        let mut stream_pos = 0i64;
        // SAFETY: `ppos` is the VFS's position for this read, or NULL for a stream.
        let pos = unsafe { ppos.as_mut() }.unwrap_or(&mut stream_pos);
        match T::read(tr, data, &of, &mut out, pos) {
            Ok(n) => n as isize,
            Err(e) => errno(e),
        }
    }

    /// # Safety
    ///
    /// Called only by the VFS, with a file of ours and a user buffer of `count` bytes.
    unsafe extern "C" fn write(
        file: *mut bindings::file,
        ubuf: *const c_char,
        count: usize,
        _ppos: *mut bindings::loff_t,
    ) -> isize {
        let Some(tr) = tracer() else {
            return errno(ENODEV);
        };
        // SAFETY: the VFS passes a live file of ours.
        let Some(of) = (unsafe { Self::open_file(file) }) else {
            return errno(EINVAL);
        };
        if count > MAX_USER_WRITE {
            return errno(EINVAL);
        }
        let mut input = KVec::new();
        if let Err(e) = sys::user_slice(ubuf as usize, count).read_all(&mut input, GFP_KERNEL) {
            return errno(e);
        }
        // SAFETY: as in `read`.
        let data = unsafe { T::Data::borrow((*file).private_data) };
        match T::write(tr, data, &of, &input) {
            Ok(()) => count as isize,
            Err(e) => errno(e),
        }
    }

    /// # Safety
    ///
    /// Called only by the VFS, with a file of ours and its poll table.
    unsafe extern "C" fn poll(
        file: *mut bindings::file,
        pt: *mut bindings::poll_table_struct,
    ) -> c_uint {
        let Some(tr) = tracer() else { return EPOLLERR };
        // SAFETY: as in `read`.
        let data = unsafe { T::Data::borrow((*file).private_data) };
        T::poll(tr, data, file, pt)
    }

    /// # Safety
    ///
    /// Called only by the VFS, once, when the last reference to a file of ours goes.
    unsafe extern "C" fn release(_inode: *mut bindings::inode, file: *mut bindings::file) -> c_int {
        // SAFETY: `private_data` was set by `open` from `into_foreign` and is taken back
        // once, here; no other operation runs on a file being released.
        let data = unsafe { T::Data::from_foreign((*file).private_data) };
        // SAFETY: the file is live until this returns.
        let of = unsafe { Self::open_file(file) };
        if let (Some(tr), Some(of)) = (tracer(), of) {
            T::release(tr, &data, &of);
        }
        0
    }
}

/// Copies `text[*pos..]` to `out` as far as it takes; advances `*pos`.
fn read_text(text: &[u8], out: &mut UserSliceWriter, pos: &mut i64) -> Result<usize> {
    let start = usize::try_from(*pos).map_err(|_| EINVAL)?;
    let Some(rest) = text.get(start..) else {
        return Ok(0);
    };
    let n = out.len().min(rest.len());
    out.write_slice(&rest[..n])?;
    *pos += n as i64;
    Ok(n)
}

/// Every control file: settings, `stats`, `error_log`, `README`.
struct ControlFile;

/// An open control file's state, locked for the whole of each write: two writers on
/// one descriptor take turns.
struct ControlOpen {
    /// A write of this open file was taken (the first replaces a list, later ones add
    /// to it).
    taken: bool,
    /// A write was tried, whether it was taken or not.
    tried: bool,
    /// A list file's token that the end of the last write cut short, waiting for the
    /// next write or the release (at most `parse::CARRY_MAX` bytes).
    held: KVec<u8>,
    /// Opened with `O_TRUNC` (the VFS clears it from the file's flags after open).
    truncate: bool,
}

#[vtable]
impl FileKind for ControlFile {
    type Data = Pin<KBox<Mutex<ControlOpen>>>;

    fn open(_tr: &'static Tracer, file: &OpenFile) -> Result<Self::Data> {
        KBox::pin_init(
            new_mutex!(ControlOpen {
                taken: false,
                tried: false,
                held: KVec::new(),
                truncate: file.truncate,
            }),
            GFP_KERNEL,
        )
    }

    fn read(
        tr: &'static Tracer,
        _data: Pin<&Mutex<ControlOpen>>,
        file: &OpenFile,
        out: &mut UserSliceWriter,
        pos: &mut i64,
    ) -> Result<usize> {
        let mut t = Text::new();
        control::render(tr, file.id, &mut t).map_err(|_| ENOMEM)?;
        read_text(&t.0, out, pos)
    }

    /// A list file (`set_pid`, `filter`) takes later writes of one open as additions, as
    /// ftrace's files do: `(echo A; echo B) > set_pid` sets both. A token the end of a
    /// write cuts short waits for the next write, as in ftrace's parser: `printf 12;
    /// printf '345\n'` is PID 12345, and `echo -n 12345` is applied when the file is
    /// closed. A write that fails does not count, and changes nothing.
    fn write(
        tr: &'static Tracer,
        data: Pin<&Mutex<ControlOpen>>,
        file: &OpenFile,
        input: &[u8],
    ) -> Result {
        let mut s = data.lock();
        s.tried = true;
        let append = file.append || s.taken;
        let Some(kind) = control::list_kind(file.id) else {
            control::write(tr, file.id, input, append, Wait::Interruptible)?;
            s.taken = true;
            return Ok(());
        };
        let mut text = KVec::with_capacity(s.held.len() + input.len(), GFP_KERNEL)?;
        text.extend_from_slice(&s.held, GFP_KERNEL)?;
        text.extend_from_slice(input, GFP_KERNEL)?;
        let cut = parse::split_carry(kind, &text).map_err(|e| {
            let token = text
                .rsplit(|c| c.is_ascii_whitespace())
                .next()
                .unwrap_or(&[]);
            control::refuse_cut(tr, file.id, token, e)
        })?;
        let (now, rest) = text.split_at(cut);
        // (Copied first: once the list changed, the write must not fail.)
        let mut held = KVec::with_capacity(rest.len(), GFP_KERNEL)?;
        held.extend_from_slice(rest, GFP_KERNEL)?;
        // An empty write (nothing held either) clears the list, as `echo > set_pid` does.
        if !now.is_empty() || text.is_empty() {
            control::write(tr, file.id, now, append, Wait::Interruptible)?;
            s.taken = true;
        }
        s.held = held;
        Ok(())
    }

    /// A token still held is applied (a refusal goes to `error_log`: close() has no one
    /// to tell). Opened with `O_TRUNC` and never written to (`: > set_pid`): the list is
    /// cleared, as ftrace's `> set_ftrace_pid` does (a write that failed leaves it as it
    /// was).
    fn release(tr: &'static Tracer, data: &Self::Data, file: &OpenFile) {
        let s = data.lock();
        if !s.held.is_empty() {
            let _ = control::write(
                tr,
                file.id,
                &s.held,
                file.append || s.taken,
                Wait::Uninterruptible,
            );
        } else if file.writable
            && s.truncate
            && !file.append
            && !s.tried
            && control::list_kind(file.id).is_some()
        {
            let _ = control::write(tr, file.id, b"", false, Wait::Uninterruptible);
        }
    }
}

/// `trace`: a text snapshot of the buffer, made at open and rendered as it is read; a
/// write clears the buffer.
struct TraceFile;

/// An open `trace` file's state.
struct TraceOpen {
    /// A read is running (`pread()`s of one open file may come at once; the second is
    /// refused with EBUSY rather than waited for).
    busy: AtomicBool,
    /// Only touched by the read that set `busy`. `None` when opened only to write
    /// (`echo > trace`).
    reader: UnsafeCell<Option<TraceReader>>,
}

// SAFETY: `reader` is only used by the one read that holds `busy`.
unsafe impl Sync for TraceOpen {}
// SAFETY: the reader's buffer iterators may be finished from any thread.
unsafe impl Send for TraceOpen {}

#[vtable]
impl FileKind for TraceFile {
    type Data = KBox<TraceOpen>;

    fn open(tr: &'static Tracer, file: &OpenFile) -> Result<KBox<TraceOpen>> {
        let reader = if file.readable {
            Some(TraceReader::new(tr, control::hide_addrs())?)
        } else {
            None
        };
        Ok(KBox::new(
            TraceOpen {
                busy: AtomicBool::new(false),
                reader: UnsafeCell::new(reader),
            },
            GFP_KERNEL,
        )?)
    }

    fn read(
        tr: &'static Tracer,
        data: &TraceOpen,
        _file: &OpenFile,
        out: &mut UserSliceWriter,
        pos: &mut i64,
    ) -> Result<usize> {
        if data.busy.swap(true, Ordering::Acquire) {
            return Err(EBUSY);
        }
        // SAFETY: `busy` makes this read the only user of the reader until it is cleared.
        let r = unsafe { &mut *data.reader.get() };
        let ret = match r {
            Some(r) => trace_read_at(tr, r, out, pos),
            None => Err(EBADF),
        };
        data.busy.store(false, Ordering::Release);
        ret
    }

    fn write(tr: &'static Tracer, _data: &TraceOpen, file: &OpenFile, input: &[u8]) -> Result {
        control::write(tr, file.id, input, file.append, Wait::Interruptible)
    }
}

/// The text is made as it is read. A read at another offset than where the last one
/// ended skips forward (rendering what it skips), or starts over from a new snapshot of
/// the buffer to go back: `trace` reads like a file, sequential reads cost nothing extra.
fn trace_read_at(
    tr: &'static Tracer,
    r: &mut TraceReader,
    out: &mut UserSliceWriter,
    pos: &mut i64,
) -> Result<usize> {
    if *pos < 0 {
        return Err(EINVAL);
    }
    if *pos < r.pos {
        *r = TraceReader::new(tr, r.hide)?;
    }
    while r.pos < *pos {
        let skip = (*pos - r.pos).min(READ_CHUNK as i64) as usize;
        match r.next_chunk(tr, skip)? {
            [] => return Ok(0),
            c => r.pos += c.len() as i64,
        }
    }
    let chunk = r.next_chunk(tr, out.len().min(READ_CHUNK))?;
    if chunk.is_empty() {
        return Ok(0);
    }
    let n = chunk.len();
    out.write_slice(chunk)?;
    r.pos += n as i64;
    *pos = r.pos;
    Ok(n)
}

/// `trace_pipe`: consuming, blocking reads; each open file keeps the text of events it
/// consumed but has not handed out yet.
struct PipeFile;

struct Pending {
    text: Text,
    pos: usize,
    /// Kernel addresses are hashed for this reader (see `control::hide_addrs`).
    hide: bool,
}

#[vtable]
impl FileKind for PipeFile {
    type Data = Pin<KBox<Mutex<Pending>>>;
    const STREAM: bool = true;

    fn open(tr: &'static Tracer, _file: &OpenFile) -> Result<Self::Data> {
        let p = KBox::pin_init(
            new_mutex!(Pending {
                text: Text::new(),
                pos: 0,
                hide: control::hide_addrs(),
            }),
            GFP_KERNEL,
        )?;
        tr.readers.fetch_add(1, Ordering::Relaxed);
        Ok(p)
    }

    fn read(
        tr: &'static Tracer,
        data: Pin<&Mutex<Pending>>,
        file: &OpenFile,
        out: &mut UserSliceWriter,
        _pos: &mut i64,
    ) -> Result<usize> {
        let count = out.len();
        if count == 0 {
            return Ok(0);
        }
        loop {
            // The open file's text is locked only while it is filled and copied out, never
            // across the wait below: two reads of one open file both wait interruptibly.
            {
                let mut g = data.lock();
                if g.pos < g.text.0.len() {
                    let n = count.min(g.text.0.len() - g.pos);
                    out.write_slice(&g.text.0[g.pos..g.pos + n])?;
                    g.pos += n;
                    if g.pos == g.text.0.len() {
                        g.text = Text::new();
                        g.pos = 0;
                    }
                    return Ok(n);
                }
                let hide = g.hide;
                reader::drain(tr, &mut g.text, count.min(READ_CHUNK), hide)?;
                // Room was made: a task waiting for it (lossless) may go on.
                sys::throttle_wake();
                if !g.text.0.is_empty() {
                    continue;
                }
            }
            if file.nonblock {
                return Err(EAGAIN);
            }
            tr.buf.wait()?;
        }
    }

    fn poll(
        tr: &'static Tracer,
        data: Pin<&Mutex<Pending>>,
        file: *mut bindings::file,
        pt: *mut bindings::poll_table_struct,
    ) -> c_uint {
        let pending = {
            let g = data.lock();
            g.pos < g.text.0.len()
        };
        let mask = tr.buf.poll_wait(file, pt);
        if pending {
            mask | EPOLLIN | EPOLLRDNORM
        } else {
            mask
        }
    }

    fn release(tr: &'static Tracer, _data: &Self::Data, _file: &OpenFile) {
        tr.readers.fetch_sub(1, Ordering::Relaxed);
        sys::throttle_wake();
    }
}

/// A C structure the kernel may write to (list heads), in a static.
struct SyncCell<T>(UnsafeCell<T>);

// SAFETY: the kernel serialises access to these structures (file system registration is
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

static CONTROL_FOPS: SyncCell<bindings::file_operations> = SyncCell::new(Ops::<ControlFile>::FOPS);
static TRACE_FOPS: SyncCell<bindings::file_operations> = SyncCell::new(Ops::<TraceFile>::FOPS);
static PIPE_FOPS: SyncCell<bindings::file_operations> = SyncCell::new(Ops::<PipeFile>::FOPS);

static CTX_OPS: SyncCell<bindings::fs_context_operations> =
    SyncCell::new(bindings::fs_context_operations {
        get_tree: Some(get_tree),
        ..zeroed()
    });

static FS_TYPE: SyncCell<bindings::file_system_type> = SyncCell::new(bindings::file_system_type {
    name: c"fctrace".as_ptr().cast(),
    init_fs_context: Some(init_fs_context),
    kill_sb: Some(bindings::fctrace_kill_sb),
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
            let owner = sys::this_module();
            (*CONTROL_FOPS.get()).owner = owner;
            (*TRACE_FOPS.get()).owner = owner;
            (*PIPE_FOPS.get()).owner = owner;
            (*FS_TYPE.get()).owner = owner;
            let tree = &mut *TREE.get();
            for (i, (id, name, mode)) in FILES.iter().enumerate() {
                let ops = match id {
                    FileId::Trace => TRACE_FOPS.get(),
                    FileId::TracePipe => PIPE_FOPS.get(),
                    _ => CONTROL_FOPS.get(),
                };
                tree[i + 2] = bindings::tree_descr {
                    name: name.as_char_ptr(),
                    ops,
                    mode: *mode as c_int,
                };
            }
            tree[FILES.len() + 2].name = c"".as_ptr().cast();
        }
        sys::mountpoint_create()?;
        // SAFETY: `FS_TYPE` is a static, fully initialised above.
        let r = unsafe { bindings::register_filesystem(FS_TYPE.get()) };
        if let Err(e) = kernel::error::to_result(r) {
            sys::mountpoint_remove();
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
        }
        sys::mountpoint_remove();
    }
}

/// # Safety
///
/// Called only by the VFS, with a new superblock.
unsafe extern "C" fn fill_super(
    sb: *mut bindings::super_block,
    _fc: *mut bindings::fs_context,
) -> c_int {
    // SAFETY: `sb` is the new superblock; `TREE` was filled at init and lives forever.
    unsafe { bindings::simple_fill_super(sb, FCTRACE_MAGIC as _, TREE.get().cast()) }
}

/// # Safety
///
/// Called only by the VFS, with a mount context of ours.
unsafe extern "C" fn get_tree(fc: *mut bindings::fs_context) -> c_int {
    // SAFETY: `fc` is the VFS's mount context; one superblock is shared by all mounts.
    unsafe { bindings::get_tree_single(fc, Some(fill_super)) }
}

/// # Safety
///
/// Called only by the VFS, with a new mount context.
unsafe extern "C" fn init_fs_context(fc: *mut bindings::fs_context) -> c_int {
    // SAFETY: `fc` is the VFS's new mount context; `CTX_OPS` is static.
    unsafe { (*fc).ops = CTX_OPS.get() };
    0
}
