//! How every command opens the files it reads: regular files only, without ever blocking, read with a size
//! limit, and mappings that survive the file being cut short underneath them. A user's paths and the paths a
//! run directory names are equally untrusted: a FIFO hangs a reader forever, a link to `/dev/zero` is endless,
//! and a record may name `/dev/stdin`. [`read_limited`] and [`open_input`] are the doors for whole-file reads;
//! [`open_stream`] is the one door that also takes a pipe, for commands whose input is meant to be a stream
//! (`-`, `<(…)`); [`same_file`] tells an output that would overwrite one of the inputs.
//!
//! **Never a blocking open.** A path may name a FIFO, a terminal or a device (`/dev/stdin` in a
//! `DT_NEEDED`, a FIFO next to a library): `open` of a FIFO waits for a writer and `read` of a terminal
//! waits for input, forever. [`open_regular`] checks the type with `stat` first, opens with `O_NONBLOCK`
//! (which also keeps a FIFO swapped in between the two calls from blocking), and checks again with
//! `fstat` on what it opened.
//!
//! **Truncation during a scan.** Files are memory-mapped: the decoders touch a few pages (headers, notes,
//! symbol tables) of libraries of hundreds of MB, which keeps peak RSS below the file size and the scan
//! 27× faster than `strings`. Reading them with `pread` instead would mean either reading whole files or
//! restructuring every decoder around I/O. But when another process truncates a mapped file (pip, apt or
//! Ollama updating a tree in place), touching a page past the new end raises SIGBUS, which kills the whole
//! scan. So every mapping is registered in a fixed table, and a SIGBUS handler that finds the faulting
//! address inside a registered mapping maps anonymous zero pages over the rest of it (`mmap` with
//! `MAP_FIXED`, a plain system call that is safe in a signal handler), notes the offset and returns: the
//! interrupted read goes on and sees zeros, which the decoders treat as any other malformed bytes, and
//! the scan reports the file as changed and drops its records. A fault at any other address is passed to
//! the handler that was installed before (Rust's stack-overflow handler, which restores the default action
//! so the fault kills the process as it would have).

use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Open `path` for reading if it is a regular file, without blocking whatever it is. `Ok(Err(kind))`
/// when it exists but is not a regular file (a FIFO, a socket, a device, a directory).
pub fn open_regular(path: &Path) -> io::Result<Result<File, &'static str>> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Ok(Err(kind_of(&meta.file_type())));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)?;
    let opened = file.metadata()?;
    if !opened.is_file() {
        return Ok(Err(kind_of(&opened.file_type())));
    }
    Ok(Ok(file))
}

/// What a non-regular file is, for messages.
fn kind_of(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// Why an input could not be read.
#[derive(Debug)]
pub enum InputError {
    /// Opening or reading failed.
    Io { path: PathBuf, error: io::Error },
    /// The path exists but is not a regular file; the kind it is.
    NotRegular { path: PathBuf, kind: &'static str },
    /// A named FIFO where a stream was asked for: it may have no writer, and its open would wait for one.
    NamedFifo { path: PathBuf },
    /// The file is larger than the command reads: its size (`None` when it grew past the limit while being
    /// read) and the limit.
    TooLarge { path: PathBuf, size: Option<u64>, limit: u64 },
    /// The command's [`ReadBudget`] does not cover the file: why, in words.
    OverBudget { path: PathBuf, what: String },
}

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InputError::Io { path, error } => write!(f, "cannot read {}: {error}", path.display()),
            InputError::NotRegular { path, kind } => {
                write!(f, "{} is {kind}, not a regular file: backscope reads only regular files here", path.display())
            }
            InputError::NamedFifo { path } => write!(
                f,
                "{} is a named FIFO, which may have no writer: pass its contents on standard input instead (`- < {}`)",
                path.display(),
                path.display()
            ),
            InputError::TooLarge { path, size: Some(size), limit } => {
                write!(f, "{} is {size} bytes, more than the {limit} bytes read for this input", path.display())
            }
            InputError::TooLarge { path, size: None, limit } => {
                write!(f, "{} grew past the {limit} bytes read for this input while being read", path.display())
            }
            InputError::OverBudget { path, what } => write!(f, "{} is not read: {what}", path.display()),
        }
    }
}

impl std::error::Error for InputError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            InputError::Io { error, .. } => Some(error),
            _ => None,
        }
    }
}

impl InputError {
    fn io(path: &Path, error: io::Error) -> InputError {
        InputError::Io { path: path.to_path_buf(), error }
    }
}

/// An opened regular file and its size when opened.
#[derive(Debug)]
pub struct Input {
    pub file: File,
    pub len: u64,
}

/// Opens `path` as a regular file (symlinks followed; FIFOs, devices, sockets and directories refused without
/// blocking), in blocking mode for reading.
pub fn open_input(path: &Path) -> Result<Input, InputError> {
    let file = open_regular(path)
        .map_err(|e| InputError::io(path, e))?
        .map_err(|kind| InputError::NotRegular { path: path.to_path_buf(), kind })?;
    clear_nonblock(&file).map_err(|e| InputError::io(path, e))?;
    let len = file.metadata().map_err(|e| InputError::io(path, e))?.len();
    Ok(Input { file, len })
}

/// The whole of a regular file, refused when it is larger than `limit` bytes (checked on its size and again
/// while reading, since it may grow).
pub fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>, InputError> {
    let input = open_input(path)?;
    if input.len > limit {
        return Err(InputError::TooLarge { path: path.to_path_buf(), size: Some(input.len), limit });
    }
    read_all(path, input.file, input.len as usize, limit)
}

/// [`read_limited`] as UTF-8 text (invalid sequences replaced: inputs are logs and JSON of other programs).
pub fn read_text_limited(path: &Path, limit: u64) -> Result<String, InputError> {
    let bytes = read_limited(path, limit)?;
    Ok(match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

fn read_all(path: &Path, file: impl io::Read, hint: usize, limit: u64) -> Result<Vec<u8>, InputError> {
    use io::Read;
    let mut bytes = Vec::with_capacity(hint.min(limit as usize));
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes).map_err(|e| InputError::io(path, e))?;
    if bytes.len() as u64 > limit {
        return Err(InputError::TooLarge { path: path.to_path_buf(), size: None, limit });
    }
    Ok(bytes)
}

/// A stream to read once: standard input for `-`, an already-open pipe (`/dev/fd/N` of `<(…)`, `/dev/stdin`),
/// or a regular file. A named FIFO that no process holds open is refused instead of waited on: its open would
/// block until a writer came, which is the hang this module exists to prevent.
pub fn open_stream(path: &Path) -> Result<Box<dyn io::Read + Send>, InputError> {
    use std::os::unix::fs::FileTypeExt;
    if path == Path::new("-") {
        return Ok(Box::new(io::stdin()));
    }
    let meta = std::fs::metadata(path).map_err(|e| InputError::io(path, e))?;
    let t = meta.file_type();
    if t.is_file() {
        return Ok(Box::new(open_input(path)?.file));
    }
    if !t.is_fifo() {
        return Err(InputError::NotRegular { path: path.to_path_buf(), kind: kind_of(&t) });
    }
    // A FIFO: opened without blocking, then taken only if it is an anonymous pipe (`<(…)`, a shell's `|`), whose
    // writer exists by construction. A named FIFO may have no writer, and Linux offers no way to ask without
    // waiting, so it is refused with the way around.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| InputError::io(path, e))?;
    if !is_anonymous_pipe(&file) {
        return Err(InputError::NamedFifo { path: path.to_path_buf() });
    }
    clear_nonblock(&file).map_err(|e| InputError::io(path, e))?;
    Ok(Box::new(file))
}

/// Whether an open descriptor is an anonymous pipe: the kernel names those `pipe:[INODE]` in `/proc/self/fd`.
fn is_anonymous_pipe(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .is_ok_and(|target| target.as_os_str().as_encoded_bytes().starts_with(b"pipe:["))
}

/// Puts a descriptor opened with `O_NONBLOCK` (so that opening could not hang) back into blocking mode.
pub(crate) fn clear_nonblock(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether two paths name the same file (device and inode; symlinks followed). A path that does not exist is
/// the same as nothing.
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Whether `path`, with every symlink resolved, lies inside `dir` (also resolved). A path that cannot be
/// resolved is not inside.
pub fn resolved_inside(dir: &Path, path: &Path) -> bool {
    match (std::fs::canonicalize(dir), std::fs::canonicalize(path)) {
        (Ok(d), Ok(p)) => p.starts_with(d),
        _ => false,
    }
}

/// Makes `dir` a directory that only the current user can write to, so that what is found in it later can be
/// trusted as written by this user's processes: created with mode 0700 if it does not exist (its parent must), and
/// refused with the reason if it exists as a symlink, as anything but a directory, owned by another user, or
/// writable by group or others — in a shared place such as `/var/tmp`, any local user could have made it first
/// and planted FIFOs, `/dev/zero` links or fake files there.
pub fn private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("cannot inspect {}: {e}", dir.display()))?;
    let dir = dir.display();
    if meta.file_type().is_symlink() {
        return Err(format!(
            "{dir} is a symlink, where a private directory was expected: another user may have planted it; remove it"
        ));
    }
    if !meta.is_dir() {
        let kind = if meta.is_file() { "a regular file" } else { kind_of(&meta.file_type()) };
        return Err(format!("{dir} is {kind}, where a private directory was expected; remove it"));
    }
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    if meta.uid() != uid {
        return Err(format!(
            "{dir} is owned by uid {}, not by you (uid {uid}): files in it could have been planted; remove it",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{dir} is writable by {} (mode {:o}): anyone could plant files in it; chmod 700 it",
            if meta.mode() & 0o002 != 0 { "every user" } else { "its group" },
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// How much one command reads of the files its records and traces name (the library a Vulkan pipeline's SPIR-V
/// came from, and the like): a trace is written by the program under test, or copied from anywhere, and may name
/// as many files as it likes, each as large as a file can be. Every such read goes through the command's budget
/// ([`ReadBudget::command`]); a file over it is not read, and the caller turns the refusal
/// ([`InputError::OverBudget`], naming the path) into a skipped file or a Limited claim instead of failing.
///
/// **What a file costs.** Each distinct file (device and inode) costs one of [`ReadBudget::files`] and its size
/// in [`ReadBudget::bytes`] the first time it is read; reading it again costs nothing (a sweep names each
/// server's pipelines from the same library, a run's records share their server's). A mapped read costs the
/// file's apparent size (`st_size`), not the pages it has on disk: the decoders of such files (a shader library's
/// symbol table and every shader it embeds, each hashed) may touch any page, the size is the only bound known
/// before reading, and a sparse file's holes still cost a zero-filled page each when touched. So twelve sparse
/// 1 GiB "libraries" spend the bytes after two, while the one real library a trace names (29 MB for llama.cpp's
/// libggml-vulkan) costs what it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadBudget {
    /// Distinct files that may still be read.
    pub files: u64,
    /// Bytes that may still be read.
    pub bytes: u64,
    /// The files charged already (device, inode).
    charged: std::collections::BTreeSet<(u64, u64)>,
}

/// The budget of this process's command ([`ReadBudget::command`]).
static COMMAND_BUDGET: std::sync::Mutex<ReadBudget> =
    std::sync::Mutex::new(ReadBudget::new(ReadBudget::DEFAULT_FILES, ReadBudget::DEFAULT_BYTES));

impl ReadBudget {
    /// Distinct files a command reads from what records and traces name: a trace names one shader library, a
    /// sweep run one per server build.
    pub const DEFAULT_FILES: u64 = 16;
    /// Bytes a command reads from what records and traces name: some seventy 29 MB libraries.
    pub const DEFAULT_BYTES: u64 = 2 << 30;

    pub const fn new(files: u64, bytes: u64) -> ReadBudget {
        ReadBudget { files, bytes, charged: std::collections::BTreeSet::new() }
    }

    /// The budget of the command this process runs, shared by every reader of record- and trace-named files. Hold
    /// it only while opening: the guard is a lock.
    pub fn command() -> std::sync::MutexGuard<'static, ReadBudget> {
        COMMAND_BUDGET.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Charges the opened file `input` to the budget, or says why it is not read.
    fn take(&mut self, path: &Path, input: &Input) -> Result<(), InputError> {
        use std::os::unix::fs::MetadataExt;
        let meta = input.file.metadata().map_err(|e| InputError::io(path, e))?;
        let id = (meta.dev(), meta.ino());
        if self.charged.contains(&id) {
            return Ok(());
        }
        let refused = |what: String| Err(InputError::OverBudget { path: path.to_path_buf(), what });
        if self.files == 0 {
            return refused("the command's budget of files read from what traces and records name is spent".into());
        }
        if input.len > self.bytes {
            return refused(format!(
                "its {} bytes are more than the {} bytes left of the command's budget for files that traces and \
                 records name",
                input.len, self.bytes
            ));
        }
        self.files -= 1;
        self.bytes -= input.len;
        self.charged.insert(id);
        Ok(())
    }

    /// An opened regular file of at most `limit` bytes, charged to the budget.
    fn open(&mut self, path: &Path, limit: u64) -> Result<Input, InputError> {
        let input = open_input(path)?;
        if input.len > limit {
            return Err(InputError::TooLarge { path: path.to_path_buf(), size: Some(input.len), limit });
        }
        self.take(path, &input)?;
        Ok(input)
    }

    /// [`read_limited`] within the budget: a whole regular file of at most `limit` bytes.
    pub fn read(&mut self, path: &Path, limit: u64) -> Result<Vec<u8>, InputError> {
        let input = self.open(path, limit)?;
        read_all(path, input.file, input.len as usize, limit)
    }

    /// [`MappedFile::open`] within the budget: a regular file of at most `limit` bytes, charged its apparent size
    /// (see the type's documentation). Only the pages the caller touches are read.
    pub fn map(&mut self, path: &Path, limit: u64) -> Result<MappedFile, InputError> {
        let input = self.open(path, limit)?;
        MappedFile::of_file(&input.file).map_err(|e| match e {
            MapError::Io(error) => InputError::Io { path: path.to_path_buf(), error },
            MapError::NotRegular(kind) => InputError::NotRegular { path: path.to_path_buf(), kind },
            MapError::NoGuardSlot => {
                InputError::Io { path: path.to_path_buf(), error: io::Error::other(e.to_string()) }
            }
        })
    }
}

/// A read-only map of a whole regular file, guarded against truncation (see the module documentation).
#[derive(Debug)]
pub struct MappedFile {
    map: memmap2::Mmap,
    /// Index in [`SLOTS`], or `None` for an empty map (nothing to guard).
    slot: Option<usize>,
}

/// Why a file could not be mapped.
#[derive(Debug)]
pub enum MapError {
    Io(io::Error),
    /// The path exists but is not a regular file; the kind of file it is.
    NotRegular(&'static str),
    /// Every guard slot is taken (more files mapped at once than any scan maps).
    NoGuardSlot,
}

impl std::fmt::Display for MapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MapError::Io(e) => write!(f, "{e}"),
            MapError::NotRegular(kind) => write!(f, "not a regular file ({kind})"),
            MapError::NoGuardSlot => write!(f, "more than {} files mapped at once", SLOTS.len()),
        }
    }
}

impl MappedFile {
    pub fn open(path: &Path) -> Result<MappedFile, MapError> {
        let file = open_regular(path).map_err(MapError::Io)?.map_err(MapError::NotRegular)?;
        MappedFile::of_file(&file)
    }

    /// Maps a regular file already opened (by [`open_regular`] or [`open_input`]).
    fn of_file(file: &File) -> Result<MappedFile, MapError> {
        // SAFETY: a read-only private map. The file may be truncated by another process while we read it;
        // the mapping is registered before any byte of it is read and stays registered until it is
        // unmapped, so such a fault reads zeros instead of killing the process (module documentation).
        let map = unsafe { memmap2::Mmap::map(file) }.map_err(MapError::Io)?;
        let slot = if map.is_empty() { None } else { Some(register(map.as_ptr() as usize, map.len())?) };
        Ok(MappedFile { map, slot })
    }

    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// The file offset of the lowest page that could not be read (the file was truncated, or the read
    /// failed), if any page could not.
    pub fn cut_at(&self) -> Option<u64> {
        let slot = &SLOTS[self.slot?];
        slot.cut.load(Ordering::Acquire).then(|| slot.cut_offset.load(Ordering::Acquire) as u64)
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // Unregister before the map field drops (and unmaps): nothing reads the map any more.
        if let Some(i) = self.slot {
            let slot = &SLOTS[i];
            slot.start.store(0, Ordering::Release);
            slot.end.store(0, Ordering::Release);
            slot.cut.store(false, Ordering::Release);
            slot.taken.store(false, Ordering::Release);
        }
    }
}

/// One registered mapping. `start` is non-zero only while the range is live.
struct Slot {
    taken: AtomicBool,
    start: AtomicUsize,
    end: AtomicUsize,
    cut: AtomicBool,
    cut_offset: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)] // only used to initialise SLOTS
const FREE: Slot = Slot {
    taken: AtomicBool::new(false),
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    cut: AtomicBool::new(false),
    cut_offset: AtomicUsize::new(0),
};

/// The mappings the SIGBUS handler may repair. A scan maps one file per thread at a time, plus the ones a
/// thread picks up while it waits inside a nested parallel loop; this is far more than that.
static SLOTS: [Slot; 4096] = [FREE; 4096];

/// The SIGBUS disposition found when the handler was installed.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
static PAGE_SIZE: AtomicUsize = AtomicUsize::new(4096);

fn register(start: usize, len: usize) -> Result<usize, MapError> {
    install_handler();
    for (i, slot) in SLOTS.iter().enumerate() {
        if slot.taken.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            slot.cut.store(false, Ordering::Relaxed);
            slot.cut_offset.store(usize::MAX, Ordering::Relaxed);
            slot.end.store(start + len, Ordering::Release);
            slot.start.store(start, Ordering::Release);
            return Ok(i);
        }
    }
    Err(MapError::NoGuardSlot)
}

fn install_handler() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // SAFETY: sysconf and sigaction with valid pointers; the previous disposition is saved before ours
        // is installed, so the handler always finds it.
        unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE);
            if page > 0 {
                PAGE_SIZE.store(page as usize, Ordering::Relaxed);
            }
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut previous) != 0 {
                return;
            }
            let _ = PREVIOUS.set(previous);
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
        }
    });
}

/// The SIGBUS handler. Only async-signal-safe work: atomic loads and stores, `mmap`, `sigaction`.
extern "C" fn on_sigbus(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for a SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    // SAFETY: errno is thread-local; it is restored before returning to the interrupted code.
    let saved_errno = unsafe { *libc::__errno_location() };
    let repaired = repair(addr);
    unsafe { *libc::__errno_location() = saved_errno };
    if !repaired {
        // SAFETY: forwards the same arguments the kernel gave us.
        unsafe { pass_on(signal, info, context) };
    }
}

/// Map zero pages from the page of `addr` to the end of the registered mapping that holds it.
fn repair(addr: usize) -> bool {
    let page = PAGE_SIZE.load(Ordering::Relaxed);
    for slot in &SLOTS {
        let start = slot.start.load(Ordering::Acquire);
        if start == 0 || addr < start {
            continue;
        }
        let end = slot.end.load(Ordering::Acquire);
        if addr >= end {
            continue;
        }
        let from = addr & !(page - 1);
        let to = end.next_multiple_of(page);
        // SAFETY: [from, to) lies inside a live mapping we own (it is registered); replacing it with
        // anonymous read-only zero pages only changes what our own reads of it return.
        let p = unsafe {
            libc::mmap(
                from as *mut libc::c_void,
                to - from,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return false;
        }
        // Pages are repaired in the order they are touched; the lowest one is where the file now ends.
        slot.cut_offset.fetch_min(from.saturating_sub(start), Ordering::AcqRel);
        slot.cut.store(true, Ordering::Release);
        return true;
    }
    false
}

/// Hand the signal to the disposition that was there before ours; for the default (or none known),
/// restore it and return, so that the fault repeats and takes its default action.
unsafe fn pass_on(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let previous = PREVIOUS.get();
    let handler = previous.map_or(libc::SIG_DFL, |p| p.sa_sigaction);
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // SAFETY: an all-zero sigaction with SIG_DFL is a valid default disposition.
        unsafe {
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(signal, &default, std::ptr::null_mut());
        }
        return;
    }
    let siginfo = previous.is_some_and(|p| p.sa_flags & libc::SA_SIGINFO != 0);
    // SAFETY: the previous handler was installed with these flags, so it has this signature.
    unsafe {
        if siginfo {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = std::mem::transmute(handler);
            f(signal, info, context);
        } else {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
            f(signal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn fifos_devices_and_directories_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("trace-1.jsonl");
        mkfifo(&fifo);
        let zero = dir.path().join("run.json");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        for (path, kind) in
            [(&fifo, "a FIFO"), (&zero, "a character device"), (&dir.path().to_path_buf(), "a directory")]
        {
            let err = read_limited(path, 1 << 20).unwrap_err();
            assert!(matches!(err, InputError::NotRegular { kind: k, .. } if k == kind), "{err}");
            let text = err.to_string();
            assert!(text.contains(&path.display().to_string()) && text.contains(kind), "{text}");
        }
        // A named FIFO is no stream either: nobody may be writing to it.
        let err = open_stream(&fifo).err().expect("a named FIFO is refused");
        assert!(err.to_string().contains("named FIFO"), "{err}");
    }

    #[test]
    fn a_read_budget_charges_each_file_once_and_refuses_past_it_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (dir.path().join("a.so"), dir.path().join("b.so"), dir.path().join("c.so"));
        std::fs::write(&a, vec![7u8; 600]).unwrap();
        std::fs::hard_link(&a, dir.path().join("a-link.so")).unwrap();
        // Sparse: no block on disk, charged its apparent size all the same.
        File::create(&b).unwrap().set_len(500).unwrap();
        std::fs::write(&c, b"c").unwrap();
        let mut budget = ReadBudget::new(2, 1000);
        assert_eq!(budget.read(&a, 1 << 20).unwrap().len(), 600);
        assert_eq!(budget.map(&dir.path().join("a-link.so"), 1 << 20).unwrap().bytes()[599], 7, "the same file");
        assert_eq!((budget.files, budget.bytes), (1, 400), "charged once");
        let err = budget.map(&b, 1 << 20).unwrap_err();
        assert!(matches!(err, InputError::OverBudget { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains(&b.display().to_string()) && text.contains("500 bytes are more than the 400"), "{text}");
        assert_eq!((budget.files, budget.bytes), (1, 400), "a refusal costs nothing");
        budget.read(&c, 10).unwrap();
        let err = budget.read(&b, 1 << 20).unwrap_err().to_string();
        assert!(err.contains("budget of files") && err.contains("is spent"), "{err}");
        // What is not a regular file is refused before the budget is asked.
        let err = budget.map(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert!(matches!(err, InputError::NotRegular { kind: "a character device", .. }), "{err}");
    }

    #[test]
    fn a_file_over_the_limit_is_refused_by_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spec.toml");
        std::fs::write(&path, vec![b'x'; 1001]).unwrap();
        assert_eq!(read_limited(&path, 1001).unwrap().len(), 1001);
        let err = read_limited(&path, 1000).unwrap_err();
        assert!(matches!(err, InputError::TooLarge { size: Some(1001), limit: 1000, .. }), "{err}");
        assert!(err.to_string().contains("1001 bytes, more than the 1000"), "{err}");
    }

    #[test]
    fn an_anonymous_pipe_is_a_stream() {
        let mut fds = [0; 2];
        // SAFETY: two descriptors for a new pipe.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: we own both descriptors from here on.
        let mut writer = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fds[1]) };
        let reader_fd = fds[0];
        io::Write::write_all(&mut writer, b"{\"a\":1}\n").unwrap();
        drop(writer);
        let mut text = String::new();
        io::Read::read_to_string(&mut open_stream(Path::new(&format!("/dev/fd/{reader_fd}"))).unwrap(), &mut text)
            .unwrap();
        // SAFETY: our descriptor, closed once.
        unsafe { libc::close(reader_fd) };
        assert_eq!(text, "{\"a\":1}\n");
    }

    #[test]
    fn same_file_and_inside_follow_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        std::fs::create_dir(&run).unwrap();
        let key = dir.path().join("id_ed25519");
        std::fs::write(&key, "secret").unwrap();
        let link = run.join("server.log");
        std::os::unix::fs::symlink(&key, &link).unwrap();
        assert!(same_file(&link, &key));
        assert!(!same_file(&link, &run.join("absent")));
        assert!(!resolved_inside(&run, &link), "a link out of the run is not inside it");
        std::fs::write(run.join("real.log"), "x").unwrap();
        assert!(resolved_inside(&run, &run.join("real.log")));
        assert!(!resolved_inside(&run, &run.join("../id_ed25519")));
    }

    #[test]
    fn a_private_dir_is_created_0700_and_a_planted_one_is_refused() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let base = tempfile::tempdir().unwrap();
        let fresh = base.path().join("traces");
        private_dir(&fresh).unwrap();
        let meta = std::fs::symlink_metadata(&fresh).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.mode() & 0o7777, 0o700, "created private whatever the umask");
        // SAFETY: getuid cannot fail.
        assert_eq!(meta.uid(), unsafe { libc::getuid() });
        private_dir(&fresh).expect("an existing private directory is taken as it is");

        let open = base.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = private_dir(&open).unwrap_err();
        assert!(err.contains(&open.display().to_string()) && err.contains("writable by every user"), "{err}");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o770)).unwrap();
        assert!(private_dir(&open).unwrap_err().contains("writable by its group"));

        let link = base.path().join("link");
        std::os::unix::fs::symlink(&fresh, &link).unwrap();
        let err = private_dir(&link).unwrap_err();
        assert!(err.contains("is a symlink"), "a link to a good directory is refused too: {err}");

        let file = base.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(private_dir(&file).unwrap_err().contains("is a regular file, where a private directory"));
        let fifo = base.path().join("fifo");
        mkfifo(&fifo);
        assert!(private_dir(&fifo).unwrap_err().contains("is a FIFO"));

        // Another user's directory (only root can make one here: elsewhere this part has nothing to check).
        let theirs = base.path().join("theirs");
        std::fs::DirBuilder::new().create(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
        if std::os::unix::fs::chown(&theirs, Some(65534), None).is_ok() {
            let err = private_dir(&theirs).unwrap_err();
            assert!(err.contains("owned by uid 65534, not by you"), "{err}");
        }
    }

    #[test]
    fn reads_past_a_truncation_see_zeros_and_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lib.so");
        let page = PAGE_SIZE.load(Ordering::Relaxed).max(4096);
        std::fs::write(&path, vec![0xab_u8; page * 8]).unwrap();
        let mapped = MappedFile::open(&path).unwrap();
        assert_eq!(mapped.bytes()[page * 5], 0xab);
        assert_eq!(mapped.cut_at(), None);
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len((page * 3 + 100) as u64).unwrap();
        let bytes = mapped.bytes();
        assert_eq!(bytes[page * 3 + 50], 0xab, "the part that is still there reads as before");
        // Past the new end: a SIGBUS without the guard. Pages are repaired as they are touched, and the
        // lowest one touched is reported.
        assert_eq!(std::hint::black_box(bytes[page * 6]), 0);
        assert_eq!(mapped.cut_at(), Some((page * 6) as u64));
        assert_eq!(std::hint::black_box(bytes[page * 7 + 1]), 0);
        assert_eq!(std::hint::black_box(bytes[page * 4 + 1]), 0);
        assert_eq!(mapped.cut_at(), Some((page * 4) as u64));
        drop(mapped);
        // The slot is free again and a new map of the (now shorter) file is clean.
        let again = MappedFile::open(&path).unwrap();
        assert_eq!(again.bytes().len(), page * 3 + 100);
        assert_eq!(again.cut_at(), None);
    }

    #[test]
    fn fifos_and_devices_are_not_opened() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        assert_eq!(open_regular(&fifo).unwrap().unwrap_err(), "a FIFO");
        assert_eq!(open_regular(Path::new("/dev/null")).unwrap().unwrap_err(), "a character device");
        assert!(matches!(MappedFile::open(&fifo), Err(MapError::NotRegular("a FIFO"))));
        assert!(open_regular(&dir.path().join("absent")).is_err());
    }
}
