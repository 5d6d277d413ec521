//! The crash locus: per Vulkan queue, the last dispatches submitted to it; per thread, the Vulkan call
//! it is inside. Kept so that the signal handler (`crate::crash`) and a `VK_ERROR_DEVICE_LOST`
//! (`crate::writer::device_lost`) can say what the GPU was last given and what the program was doing.
//!
//! Both live in static tables, not in thread-local storage or on the heap: the handler reads them
//! from whichever thread crashed, and must never read freed memory or take a lock.
//!
//! * A [`QueueRing`] is claimed by the first submission with dispatches to a queue (a CAS on its
//!   handle; found again by a short scan: programs use one to a few queues). Vulkan makes the
//!   application synchronise `vkQueueSubmit*` on one queue ("Threading Behavior"), so each ring has
//!   one writer at a time, like the CUDA/HIP observer's per-thread rings. A submission writes the
//!   last [`RING_DISPATCHES`] entries of each command buffer (never more: the cost per submission is
//!   bounded however many dispatches a buffer holds) with the bytes of their debug label paths
//!   (`crate::labels`, at most [`LABEL_BYTES`] each, copied into the slot as the outer and the inner
//!   region's text, which the reader joins, so that the reader needs no lookup), advancing the ring's
//!   count after each entry: the count works as a sequence lock for the reader.
//!   A command buffer whose dispatches its black-box trail holds whole (`crate::progress`: no debug labels, no
//!   secondary buffers, at most [`crate::progress::TRAIL`] dispatches) is remembered by one *reference* entry
//!   instead — the buffer's progress record, its generation and its number of dispatches — and the reader expands
//!   it from the trail, which stays whole while the buffer is recorded once more. ggml-vulkan records the same
//!   graph token after token: one entry per submitted buffer instead of a copy of its last 32.
//! * A thread's in-flight slot is claimed at its first marked call (the cold path, once per
//!   thread); marking a call is then one store before forwarding and one after. The recording calls
//!   (`vkCmd*`) are not marked: they are the hot path and only append to host memory.

use std::cell::Cell;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use format::record::QueueDispatch;

/// Queues followed at once; the dispatches of a queue past it are not remembered (still counted).
pub const QUEUES: usize = 16;
/// Dispatch entries remembered per queue.
pub const RING_DISPATCHES: usize = 32;
/// Slots per ring: more than remembered, for the entry the owner may be writing while the handler reads; a power of
/// two, so that an entry's slot is its number's low bits (no division, no bounds check on the submission path).
const SLOTS: usize = (RING_DISPATCHES + 1).next_power_of_two();
/// Bytes of a dispatch's label path kept in its slot.
pub const LABEL_BYTES: usize = crate::labels::MAX_PATH;
/// A slot keeps a label path in two parts, the outer region's text and the inner one's, and the reader puts
/// `OUTER > INNER` together: a submission then copies each part's words straight from the command buffer's label
/// arena, with no path assembled per entry. The first part holds a region's text ([`crate::labels::MAX_TEXT`]
/// bytes); the second the rest of a longer path given whole ([`RingWriter`], or in tests `QueueRing::push`).
const FIRST_WORDS: usize = crate::labels::MAX_TEXT.div_ceil(8);
const SECOND_WORDS: usize = (LABEL_BYTES - FIRST_WORDS * 8).div_ceil(8);
const _: () = assert!(crate::labels::MAX_TEXT <= SECOND_WORDS * 8, "an inner region's text fits the second part");
/// A label path read back from a ring.
pub type LabelText = [u8; LABEL_BYTES];
/// `kernel_count` of a reference entry (no kernel has slot `u32::MAX`): `xy` holds the command buffer's
/// [`BufferProgress`], `z_label` its generation, `first[0]` its dispatches.
const REFERENCE: u64 = u64::MAX;

use crate::progress::BufferProgress;

/// Threads whose call in flight is tracked at once (a slot of a thread that exited is taken again when
/// all are claimed).
pub const THREADS: usize = 256;

/// One remembered entry: kernel and count packed, submission, workgroup counts packed, the third workgroup count
/// with the label parts' lengths and whether a separator joins them, and the parts' bytes, eight to a word.
struct Entry {
    kernel_count: AtomicU64,
    submit: AtomicU64,
    xy: AtomicU64,
    /// `z | first_len << 32 | second_len << 40 | joined << 48`.
    z_label: AtomicU64,
    first: [AtomicU64; FIRST_WORDS],
    second: [AtomicU64; SECOND_WORDS],
}

impl Entry {
    const fn new() -> Entry {
        Entry {
            kernel_count: AtomicU64::new(0),
            submit: AtomicU64::new(0),
            xy: AtomicU64::new(0),
            z_label: AtomicU64::new(0),
            first: [const { AtomicU64::new(0) }; FIRST_WORDS],
            second: [const { AtomicU64::new(0) }; SECOND_WORDS],
        }
    }
}

/// One queue's last submitted dispatches.
pub struct QueueRing {
    /// The queue's handle; 0 while free.
    queue: AtomicU64,
    /// The trace's device id + 1 (0: not described).
    device: AtomicU32,
    /// Submissions with dispatches written into this ring.
    submits: AtomicU64,
    /// Entries written so far; the next goes into slot `head % SLOTS`.
    head: AtomicU64,
    entries: [Entry; SLOTS],
    /// How far the GPU got through this queue's submissions (the black box).
    pub progress: crate::progress::QueueProgress,
}

impl QueueRing {
    const fn new() -> QueueRing {
        QueueRing {
            queue: AtomicU64::new(0),
            device: AtomicU32::new(0),
            submits: AtomicU64::new(0),
            head: AtomicU64::new(0),
            entries: [const { Entry::new() }; SLOTS],
            progress: crate::progress::QueueProgress::new(),
        }
    }

    /// Starts a submission; its number (from 1). Called by the queue's submitting thread only.
    #[inline]
    pub fn begin_submit(&self) -> u64 {
        let n = self.submits.load(Ordering::Relaxed) + 1;
        self.submits.store(n, Ordering::Relaxed);
        n
    }

    /// Remembers `count` equal dispatches of kernel `kernel`, recorded under the debug label path `label` (cut at
    /// [`LABEL_BYTES`]; empty: none). Called by the submitting thread only. A submission writes its entries through
    /// [`QueueRing::writer`] instead.
    #[cfg(test)]
    pub fn push(&self, kernel: u32, grid: [u32; 3], count: u32, submit: u64, label: &[u8]) {
        let label = &label[..label.len().min(LABEL_BYTES)];
        let (first, second) = label.split_at(label.len().min(FIRST_WORDS * 8));
        let mut writer = self.writer(submit);
        let entry = writer.start(kernel, grid, count);
        store_bytes(&entry.first, first);
        store_bytes(&entry.second, second);
        entry.z_label.store(z_label(grid[2], first.len(), second.len(), false), Ordering::Relaxed);
        writer.finish();
    }

    /// Writes the entries of submission `submit`, one after another. Called by the queue's submitting thread only.
    #[inline]
    pub fn writer(&self, submit: u64) -> RingWriter<'_> {
        let n = self.head.load(Ordering::Relaxed);
        RingWriter { ring: self, n, submit }
    }

    pub fn device(&self) -> Option<u32> {
        self.device.load(Ordering::Relaxed).checked_sub(1)
    }

    pub fn submits(&self) -> u64 {
        self.submits.load(Ordering::Relaxed)
    }

    /// Copies the last [`RING_DISPATCHES`] dispatches remembered, oldest first, into `out`, their label paths into
    /// `texts`; returns how many. A reference entry gives its buffer's dispatches, last first, as runs of equal ones,
    /// while its trail is whole. Entries the owner may be rewriting now are left out. Allocates nothing (the signal
    /// handler calls it).
    pub fn read<'a>(
        &self,
        out: &mut [QueueDispatch<'a>; RING_DISPATCHES],
        texts: &'a mut [LabelText; RING_DISPATCHES],
    ) -> usize {
        let before = self.head.load(Ordering::Acquire);
        // Newest first: each dispatch read, its label's length and the number of the entry it came from.
        let mut read = [QueueDispatch::default(); RING_DISPATCHES];
        let mut lens = [0usize; RING_DISPATCHES];
        let mut from = [0u64; RING_DISPATCHES];
        let mut count = 0;
        for n in (before.saturating_sub(RING_DISPATCHES as u64)..before).rev() {
            if count == RING_DISPATCHES {
                break;
            }
            let entry = &self.entries[(n % SLOTS as u64) as usize];
            let kc = entry.kernel_count.load(Ordering::Relaxed);
            let submit = entry.submit.load(Ordering::Relaxed);
            let xy = entry.xy.load(Ordering::Relaxed);
            let z_label = entry.z_label.load(Ordering::Relaxed);
            if kc == REFERENCE {
                let dispatches = entry.first[0].load(Ordering::Relaxed) as u32;
                let got = expand(xy as usize, z_label, dispatches, submit, &mut read[count..]);
                from[count..count + got].fill(n);
                count += got;
                continue;
            }
            read[count] = QueueDispatch {
                kernel: kc as u32,
                count: (kc >> 32) as u32,
                submit,
                grid: [xy as u32, (xy >> 32) as u32, z_label as u32],
                label: b"",
            };
            // The path is put together here, `FIRST > SECOND` or the two parts joined as they are: the writer
            // stores the parts as it finds them. Lengths are cut to the parts' room, so that a torn entry (left
            // out below) cannot send the copy out of bounds.
            let first_len = ((z_label >> 32) as usize & 0xff).min(FIRST_WORDS * 8);
            let second_len = ((z_label >> 40) as usize & 0xff).min(SECOND_WORDS * 8);
            let (mut first, mut second) = ([0u8; FIRST_WORDS * 8], [0u8; SECOND_WORDS * 8]);
            load_words(&entry.first, &mut first[..first_len]);
            load_words(&entry.second, &mut second[..second_len]);
            let mut len = append(&mut texts[count], 0, &first[..first_len]);
            if z_label >> 48 & 1 != 0 {
                len = append(&mut texts[count], len, crate::labels::NESTED);
            }
            lens[count] = append(&mut texts[count], len, &second[..second_len]);
            from[count] = n;
            count += 1;
        }
        // The entries were read before the count is read again.
        fence(Ordering::Acquire);
        let after = self.head.load(Ordering::Relaxed);
        let texts: &'a [LabelText; RING_DISPATCHES] = texts;
        let mut kept = 0;
        for i in (0..count).rev() {
            // Entries before `after` are complete; the owner may be writing entry `after` into the
            // slot of entry `after - SLOTS`: the last RING_DISPATCHES before `after` are intact.
            if after - from[i] <= RING_DISPATCHES as u64 {
                out[kept] = QueueDispatch { label: &texts[i][..lens[i]], ..read[i] };
                kept += 1;
            }
        }
        kept
    }

    fn reset(&self) {
        self.queue.store(0, Ordering::Relaxed);
        self.device.store(0, Ordering::Relaxed);
        self.submits.store(0, Ordering::Relaxed);
        self.head.store(0, Ordering::Relaxed);
        self.progress.reset();
    }
}

/// A submission's entries on their way into its queue's ring: the next entry's number is kept between entries, so
/// that an entry costs its stores. Each entry is published on its own (the ring's count
/// advances after each), as [`QueueRing::read`] expects.
#[derive(Clone, Copy)]
pub struct RingWriter<'a> {
    ring: &'a QueueRing,
    /// The number of the next entry.
    n: u64,
    submit: u64,
}

impl RingWriter<'_> {
    /// Writes the entry's kernel, count, submission and first workgroup counts into the next slot; the caller adds
    /// the rest and [`RingWriter::finish`]es it.
    #[inline(always)]
    fn start(&self, kernel: u32, grid: [u32; 3], count: u32) -> &Entry {
        let entry = &self.ring.entries[self.n as usize % SLOTS];
        // A reader that sees any store below sees the count of the previous entry first.
        fence(Ordering::Release);
        entry.kernel_count.store(u64::from(kernel) | (u64::from(count) << 32), Ordering::Relaxed);
        entry.submit.store(self.submit, Ordering::Relaxed);
        entry.xy.store(u64::from(grid[0]) | (u64::from(grid[1]) << 32), Ordering::Relaxed);
        entry
    }

    /// Publishes the entry written since [`RingWriter::start`].
    #[inline(always)]
    fn finish(&mut self) {
        self.n = self.n.wrapping_add(1);
        self.ring.head.store(self.n, Ordering::Release);
    }

    /// Remembers a command buffer's dispatches by reference: its progress record `buffer`, whose trail of generation
    /// `generation` holds all `dispatches` of them (see the module documentation).
    #[inline]
    pub fn push_reference(&mut self, buffer: &BufferProgress, generation: u64, dispatches: u32) {
        // Kernel and count `u32::MAX` make `kernel_count` the REFERENCE mark; the two "workgroup counts" the address.
        let address = buffer as *const BufferProgress as u64;
        let entry = self.start(u32::MAX, [address as u32, (address >> 32) as u32, 0], u32::MAX);
        debug_assert_eq!(entry.kernel_count.load(Ordering::Relaxed), REFERENCE);
        entry.z_label.store(generation, Ordering::Relaxed);
        entry.first[0].store(u64::from(dispatches), Ordering::Relaxed);
        self.finish();
    }

    /// Remembers `count` equal dispatches of kernel `kernel`, recorded under no debug label.
    #[inline]
    pub fn push(&mut self, kernel: u32, grid: [u32; 3], count: u32) {
        let entry = self.start(kernel, grid, count);
        entry.z_label.store(u64::from(grid[2]), Ordering::Relaxed);
        self.finish();
    }

    /// Remembers `count` equal dispatches of kernel `kernel`, recorded under the label path `OUTER > INNER` (either
    /// may be empty: then no separator), each part's words copied from its command buffer's label arena.
    #[inline]
    pub fn push_labelled(
        &mut self,
        kernel: u32,
        grid: [u32; 3],
        count: u32,
        (outer, inner): (crate::labels::Words<'_>, crate::labels::Words<'_>),
    ) {
        let entry = self.start(kernel, grid, count);
        // Words past a part's room are not stored (a region's text is at most MAX_TEXT bytes, which fit); the
        // reader cuts each part's length to its room.
        outer.each(|k, value| {
            if let Some(word) = entry.first.get(k) {
                word.store(value, Ordering::Relaxed);
            }
        });
        inner.each(|k, value| {
            if let Some(word) = entry.second.get(k) {
                word.store(value, Ordering::Relaxed);
            }
        });
        let joined = outer.len() != 0 && inner.len() != 0;
        entry.z_label.store(z_label(grid[2], outer.len(), inner.len(), joined), Ordering::Relaxed);
        self.finish();
    }
}

/// The dispatches of a reference entry (`buffer`'s progress record, `generation`, `dispatches`), last first, joined
/// into runs of equal ones, into `out` as far as it has room; how many runs. None when the buffer has been recorded
/// twice since (its trail of that generation is gone), also when that happened while it was being read.
fn expand(buffer: usize, generation: u64, dispatches: u32, submit: u64, out: &mut [QueueDispatch<'_>]) -> usize {
    if buffer == 0 || out.is_empty() {
        return 0;
    }
    // SAFETY: reference entries hold the address of a command buffer's progress record; those are never freed.
    let b = unsafe { &*(buffer as *const BufferProgress) };
    let mut n = 0;
    for index in (1..=dispatches.min(crate::progress::TRAIL as u32)).rev() {
        let Some((kernel, grid)) = b.dispatch(generation, index) else { return 0 };
        if n > 0 && out[n - 1].kernel == kernel && out[n - 1].grid == grid {
            out[n - 1].count = out[n - 1].count.saturating_add(1);
            continue;
        }
        if n == out.len() {
            break;
        }
        out[n] = QueueDispatch { kernel, count: 1, submit, grid, label: b"" };
        n += 1;
    }
    if b.holds_trail_of(generation) {
        n
    } else {
        0
    }
}

/// An entry's `z_label` word.
#[inline(always)]
fn z_label(z: u32, first: usize, second: usize, joined: bool) -> u64 {
    u64::from(z) | ((first as u64 & 0xff) << 32) | ((second as u64 & 0xff) << 40) | (u64::from(joined) << 48)
}

#[cfg(test)]
/// Stores `bytes` into `words`, eight to a word (little-endian, as `read` takes them apart), as far as they fit.
fn store_bytes(words: &[AtomicU64], bytes: &[u8]) {
    for (word, chunk) in words.iter().zip(bytes.chunks(8)) {
        let mut le = [0u8; 8];
        le[..chunk.len()].copy_from_slice(chunk);
        word.store(u64::from_le_bytes(le), Ordering::Relaxed);
    }
}

/// Loads `words` into `bytes` (as `store_bytes` put them there).
fn load_words<const N: usize>(words: &[AtomicU64; N], bytes: &mut [u8]) {
    for (word, chunk) in words.iter().zip(bytes.chunks_mut(8)) {
        chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes()[..chunk.len()]);
    }
}

/// Copies as much of `piece` as fits after `len` bytes of `out`; the new length.
fn append(out: &mut LabelText, len: usize, piece: &[u8]) -> usize {
    let take = piece.len().min(LABEL_BYTES - len);
    out[len..len + take].copy_from_slice(&piece[..take]);
    len + take
}

static RINGS: [QueueRing; QUEUES] = [const { QueueRing::new() }; QUEUES];

/// The ring of `queue` (a non-null handle), claimed at its first submission; `None` when the table is full.
#[inline]
pub fn queue_ring(queue: u64, device: Option<u32>) -> Option<&'static QueueRing> {
    for ring in &RINGS {
        match ring.queue.load(Ordering::Acquire) {
            q if q == queue => return Some(ring),
            0 => return claim_queue(queue, device),
            _ => {}
        }
    }
    None
}

#[cold]
#[inline(never)]
fn claim_queue(queue: u64, device: Option<u32>) -> Option<&'static QueueRing> {
    for ring in &RINGS {
        // Set the device before the handle publishes the ring: a reader that finds the handle finds it.
        match ring.queue.compare_exchange(0, queue, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                ring.device.store(device.map_or(0, |d| d + 1), Ordering::Relaxed);
                return Some(ring);
            }
            Err(q) if q == queue => return Some(ring),
            Err(_) => {}
        }
    }
    None
}

/// The ring numbered `number` (see [`queue_rings`]).
pub fn ring(number: u32) -> Option<&'static QueueRing> {
    RINGS.get(number as usize).filter(|r| r.queue.load(Ordering::Acquire) != 0)
}

impl QueueRing {
    /// Its number in the table.
    pub fn number(&'static self) -> u32 {
        ((self as *const QueueRing as usize - RINGS.as_ptr() as usize) / std::mem::size_of::<QueueRing>()) as u32
    }
}

/// The rings claimed so far, with their number (the order queues first submitted).
/// The ring of `queue` if it has one (none is claimed for it).
pub fn ring_of(queue: u64) -> Option<&'static QueueRing> {
    RINGS.iter().find(|r| r.queue.load(Ordering::Acquire) == queue)
}

/// The rings of the queues of the device the trace describes as `device`.
pub fn rings_of_device(device: u32) -> impl Iterator<Item = &'static QueueRing> {
    RINGS.iter().filter(move |r| r.queue.load(Ordering::Acquire) != 0 && r.device.load(Ordering::Relaxed) == device + 1)
}

pub fn queue_rings() -> impl Iterator<Item = (u32, &'static QueueRing)> {
    RINGS.iter().enumerate().filter(|(_, r)| r.queue.load(Ordering::Acquire) != 0).map(|(i, r)| (i as u32, r))
}

/// One thread's Vulkan call in flight.
pub struct CallSlot {
    tid: AtomicU32,
    /// Address of the `&'static str` naming the call; 0 outside any marked call.
    call: AtomicUsize,
}

impl CallSlot {
    const fn new() -> CallSlot {
        CallSlot { tid: AtomicU32::new(0), call: AtomicUsize::new(0) }
    }

    pub fn tid(&self) -> u32 {
        self.tid.load(Ordering::Relaxed)
    }

    /// The call this thread is inside, if any.
    pub fn call(&self) -> Option<&'static str> {
        let name = self.call.load(Ordering::Relaxed);
        // SAFETY: a non-zero value is the address of a `static &'static str` stored by `Marked::enter`.
        (name != 0).then(|| unsafe { *(name as *const &'static str) })
    }
}

/// Names of the calls marked in flight (statics: the crash handler reads them through their address). Kept here, under
/// both the api module that marks the calls and the hang watcher (`crate::blackbox`) that asks which ones wait.
pub mod call {
    pub static CREATE_DEVICE: &str = "vkCreateDevice";
    pub static CREATE_SHADER_MODULE: &str = "vkCreateShaderModule";
    pub static CREATE_COMPUTE_PIPELINES: &str = "vkCreateComputePipelines";
    pub static QUEUE_SUBMIT: &str = "vkQueueSubmit";
    pub static QUEUE_SUBMIT2: &str = "vkQueueSubmit2";
    pub static QUEUE_SUBMIT2_KHR: &str = "vkQueueSubmit2KHR";
    pub static WAIT_FOR_FENCES: &str = "vkWaitForFences";
    pub static GET_FENCE_STATUS: &str = "vkGetFenceStatus";
    pub static QUEUE_WAIT_IDLE: &str = "vkQueueWaitIdle";
    pub static DEVICE_WAIT_IDLE: &str = "vkDeviceWaitIdle";
    pub static WAIT_SEMAPHORES: &str = "vkWaitSemaphores";
    pub static GET_SEMAPHORE_COUNTER_VALUE: &str = "vkGetSemaphoreCounterValue";
    pub static GET_QUERY_POOL_RESULTS: &str = "vkGetQueryPoolResults";
    pub static ALLOCATE_MEMORY: &str = "vkAllocateMemory";
    pub static MAP_MEMORY: &str = "vkMapMemory";

    /// Whether a thread inside `name` is blocked until the GPU finishes something (a fence, a queue, the device or a
    /// timeline semaphore); the polls (`vkGetFenceStatus`, `vkGetSemaphoreCounterValue`) return at once.
    pub fn waits_for_gpu(name: &str) -> bool {
        [WAIT_FOR_FENCES, QUEUE_WAIT_IDLE, DEVICE_WAIT_IDLE, WAIT_SEMAPHORES].contains(&name)
    }
}

static CALLS: [CallSlot; THREADS] = [const { CallSlot::new() }; THREADS];
/// Slots handed out so far.
static CLAIMED: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's slot: null before its first marked call, `usize::MAX` as an address when none was free.
    static MY_SLOT: Cell<*const CallSlot> = const { Cell::new(std::ptr::null()) };
}

const NO_SLOT: *const CallSlot = usize::MAX as *const CallSlot;

/// The slots of threads that made a marked call.
pub fn call_slots() -> impl Iterator<Item = &'static CallSlot> {
    CALLS[..CLAIMED.load(Ordering::Acquire).min(THREADS)].iter().filter(|s| s.tid() != 0)
}

pub use format::runtime::gettid;

#[cold]
#[inline(never)]
fn claim_call_slot() -> *const CallSlot {
    let me = gettid();
    let i = CLAIMED.fetch_add(1, Ordering::AcqRel);
    if let Some(slot) = CALLS.get(i) {
        slot.tid.store(me, Ordering::Release);
        return slot;
    }
    CLAIMED.store(THREADS, Ordering::Release);
    // Full: take the slot of a thread that has exited (a server that starts threads per request).
    for slot in &CALLS {
        let tid = slot.tid();
        if tid != 0
            && slot.call.load(Ordering::Relaxed) == 0
            && thread_gone(tid)
            && slot.tid.compare_exchange(tid, me, Ordering::AcqRel, Ordering::Relaxed).is_ok()
        {
            return slot;
        }
    }
    NO_SLOT
}

/// Whether thread `tid` of this process no longer exists.
fn thread_gone(tid: u32) -> bool {
    // SAFETY: tgkill with signal 0 only checks that the thread exists; it sends nothing.
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid as libc::pid_t, 0) };
    rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// The call `name` is in flight on this thread until the value is dropped.
pub struct Marked(*const CallSlot);

impl Marked {
    /// Marks this thread as inside `name` (a `static` holding the call's name).
    #[inline]
    pub fn enter(name: &'static &'static str) -> Marked {
        let slot = MY_SLOT
            .try_with(|s| {
                let mut p = s.get();
                if p.is_null() {
                    p = claim_call_slot();
                    s.set(p);
                }
                p
            })
            .unwrap_or(NO_SLOT);
        if slot != NO_SLOT {
            // SAFETY: a non-sentinel pointer points into the static CALLS table.
            unsafe { &*slot }.call.store(name as *const &'static str as usize, Ordering::Relaxed);
        }
        Marked(slot)
    }
}

impl Drop for Marked {
    #[inline]
    fn drop(&mut self) {
        if self.0 != NO_SLOT {
            // SAFETY: as in `enter`.
            unsafe { &*self.0 }.call.store(0, Ordering::Relaxed);
        }
    }
}

/// In a forked child: the parent's queues and threads are not the child's.
pub const FORK: format::fork::ForkHandlers = format::fork::ForkHandlers::child(reset_in_child);

fn reset_in_child() {
    for ring in &RINGS {
        ring.reset();
    }
    for slot in &CALLS {
        slot.call.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_ring_keeps_the_last_dispatches_in_order() {
        let ring = QueueRing::new();
        let (mut out, mut texts) = ([QueueDispatch::default(); RING_DISPATCHES], [[0; LABEL_BYTES]; RING_DISPATCHES]);
        assert_eq!(ring.read(&mut out, &mut texts), 0);
        let mut out = [QueueDispatch::default(); RING_DISPATCHES];
        for i in 0..(RING_DISPATCHES as u32 + 5) {
            let submit = ring.begin_submit();
            ring.push(i, [i, 2, 3], i + 1, submit, format!("node {i}").as_bytes());
        }
        assert_eq!(ring.read(&mut out, &mut texts), RING_DISPATCHES);
        let kernels: Vec<u32> = out.iter().map(|d| d.kernel).collect();
        assert_eq!(kernels, (5..RING_DISPATCHES as u32 + 5).collect::<Vec<_>>(), "oldest first, the first 5 gone");
        assert!(out
            .iter()
            .all(|d| d.grid == [d.kernel, 2, 3] && d.count == d.kernel + 1 && d.submit == d.kernel as u64 + 1));
        assert!(out.iter().all(|d| d.label == format!("node {}", d.kernel).as_bytes()));
        assert_eq!(ring.submits(), RING_DISPATCHES as u64 + 5);
    }

    /// A label whose length and bytes depend on `k`, up to the longest kept.
    fn label_of(k: u32) -> Vec<u8> {
        vec![b'a' + (k % 26) as u8; 3 + k as usize % (LABEL_BYTES - 2)]
    }

    #[test]
    fn a_ring_read_while_its_owner_submits_returns_only_whole_entries() {
        let ring: &'static QueueRing = Box::leak(Box::new(QueueRing::new()));
        let stop: &'static std::sync::atomic::AtomicBool =
            Box::leak(Box::new(std::sync::atomic::AtomicBool::new(false)));
        let writer = std::thread::spawn(move || {
            let mut k = 0u32;
            while !stop.load(Ordering::Relaxed) {
                ring.push(k % 1000, [k % 1000; 3], k % 1000, u64::from(k % 1000), &label_of(k % 1000));
                k = k.wrapping_add(1);
            }
        });
        let mut texts = [[0; LABEL_BYTES]; RING_DISPATCHES];
        // Miri (which checks the reads against the writer's stores for data races) runs a few hundred times slower.
        for _ in 0..if cfg!(miri) { 300 } else { 100_000 } {
            let mut out = [QueueDispatch::default(); RING_DISPATCHES];
            let n = ring.read(&mut out, &mut texts);
            for d in &out[..n] {
                assert_eq!((d.grid, d.count, d.submit), ([d.kernel; 3], d.kernel, u64::from(d.kernel)), "a torn entry");
                assert_eq!(d.label, &label_of(d.kernel)[..], "a torn label");
            }
            for pair in out[..n].windows(2) {
                assert_eq!(pair[1].kernel, (pair[0].kernel + 1) % 1000, "entries out of order");
            }
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
    }

    #[test]
    fn queues_claim_rings_and_threads_mark_their_calls() {
        static CALL: &str = "vkWaitForFences";
        let a = queue_ring(0xa0, Some(2)).unwrap();
        assert!(std::ptr::eq(a, queue_ring(0xa0, None).unwrap()), "found again");
        assert_eq!(a.device(), Some(2));
        assert!(queue_rings().any(|(_, r)| std::ptr::eq(r, a)));
        // Found without claiming one (a wait for an idle queue), and among its device's (a wait for an idle device).
        assert!(std::ptr::eq(ring_of(0xa0).unwrap(), a));
        assert!(ring_of(0xa1).is_none() && queue_rings().all(|(_, r)| r.queue.load(Ordering::Relaxed) != 0xa1));
        let b = queue_ring(0xa2, Some(3)).unwrap();
        assert!(rings_of_device(2).any(|r| std::ptr::eq(r, a)) && !rings_of_device(2).any(|r| std::ptr::eq(r, b)));
        let tid = std::thread::spawn(|| {
            let _inside = Marked::enter(&CALL);
            let me = gettid();
            assert_eq!(call_slots().find(|s| s.tid() == me).and_then(|s| s.call()), Some("vkWaitForFences"));
            me
        })
        .join()
        .unwrap();
        assert_eq!(
            call_slots().find(|s| s.tid() == tid).map(|s| s.call()),
            Some(None),
            "cleared when the call returns"
        );
    }
}
