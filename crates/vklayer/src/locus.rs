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
//!   (`crate::labels`, at most [`LABEL_BYTES`] each, copied into the slot so that the reader needs no
//!   lookup), then advances the ring's count, which works as a sequence lock for the reader.
//! * A thread's in-flight slot is claimed at its first marked call (the cold path, once per
//!   thread); marking a call is then one store before forwarding and one after. The recording calls
//!   (`vkCmd*`) are not marked: they are the hot path and only append to host memory.

use std::cell::Cell;
use std::mem::MaybeUninit;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use format::record::QueueDispatch;

/// Queues followed at once; the dispatches of a queue past it are not remembered (still counted).
pub const QUEUES: usize = 16;
/// Dispatch entries remembered per queue.
pub const RING_DISPATCHES: usize = 32;
/// Slots per ring: one more than remembered, for the entry the owner may be writing while the
/// handler reads.
const SLOTS: usize = RING_DISPATCHES + 1;
/// Bytes of a dispatch's label path kept in its slot.
pub const LABEL_BYTES: usize = crate::labels::MAX_PATH;
const LABEL_WORDS: usize = LABEL_BYTES.div_ceil(8);
/// A label path read back from a ring.
pub type LabelText = [u8; LABEL_BYTES];

/// Threads whose call in flight is tracked at once (a slot of a thread that exited is taken again when
/// all are claimed).
pub const THREADS: usize = 256;

/// One remembered entry: kernel and count packed, submission, workgroup counts packed, debug label path
/// (its length and its bytes, eight to a word).
struct Entry {
    kernel_count: AtomicU64,
    submit: AtomicU64,
    xy: AtomicU64,
    z: AtomicU32,
    label_len: AtomicU32,
    label: [AtomicU64; LABEL_WORDS],
}

impl Entry {
    const fn new() -> Entry {
        Entry {
            kernel_count: AtomicU64::new(0),
            submit: AtomicU64::new(0),
            xy: AtomicU64::new(0),
            z: AtomicU32::new(0),
            label_len: AtomicU32::new(0),
            label: [const { AtomicU64::new(0) }; LABEL_WORDS],
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

    /// Remembers `count` equal dispatches of kernel `kernel`, recorded under the debug label path `label`
    /// (`crate::labels`, cut at [`LABEL_BYTES`]; empty: none). Called by the submitting thread only.
    #[inline]
    pub fn push(&self, kernel: u32, grid: [u32; 3], count: u32, submit: u64, label: &[u8]) {
        self.push_path(kernel, grid, count, submit, (label, b""));
    }

    /// [`QueueRing::push`] with the label path in its two parts, `OUTER > INNER` (either may be empty: then
    /// no separator), assembled straight into the slot.
    #[inline]
    pub fn push_path(&self, kernel: u32, grid: [u32; 3], count: u32, submit: u64, (outer, inner): (&[u8], &[u8])) {
        let n = self.head.load(Ordering::Relaxed);
        let entry = &self.entries[(n % SLOTS as u64) as usize];
        // A reader that sees any store below sees the count of the previous entry first.
        fence(Ordering::Release);
        entry.kernel_count.store(u64::from(kernel) | (u64::from(count) << 32), Ordering::Relaxed);
        entry.submit.store(submit, Ordering::Relaxed);
        entry.xy.store(u64::from(grid[0]) | (u64::from(grid[1]) << 32), Ordering::Relaxed);
        entry.z.store(grid[2], Ordering::Relaxed);
        if outer.is_empty() && inner.is_empty() {
            // No label (ggml without debug markers): nothing to assemble.
            entry.label_len.store(0, Ordering::Relaxed);
            self.head.store(n.wrapping_add(1), Ordering::Release);
            return;
        }
        // The path is assembled in place and only its words are stored; nothing else of the buffer is touched.
        let mut bytes = [MaybeUninit::<u8>::uninit(); LABEL_WORDS * 8];
        let mut len = append(&mut bytes, 0, outer);
        if !outer.is_empty() && !inner.is_empty() {
            len = append(&mut bytes, len, crate::labels::NESTED);
        }
        len = append(&mut bytes, len, inner);
        let words = len.div_ceil(8);
        bytes[len..words * 8].iter_mut().for_each(|b| {
            b.write(0);
        });
        entry.label_len.store(len as u32, Ordering::Relaxed);
        for (k, word) in entry.label[..words].iter().enumerate() {
            // SAFETY: bytes `..words * 8` are initialised above; an unaligned 8-byte read inside the buffer.
            let w = unsafe { std::ptr::read_unaligned(bytes.as_ptr().add(k * 8).cast::<u64>()) };
            // Little-endian words, as `read` takes them apart.
            word.store(u64::from_le(w), Ordering::Relaxed);
        }
        self.head.store(n.wrapping_add(1), Ordering::Release);
    }

    pub fn device(&self) -> Option<u32> {
        self.device.load(Ordering::Relaxed).checked_sub(1)
    }

    pub fn submits(&self) -> u64 {
        self.submits.load(Ordering::Relaxed)
    }

    /// Copies the kept entries, oldest first, into `out`, their label paths into `texts`; returns how many.
    /// Entries the owner may be rewriting now are left out. Allocates nothing (the signal handler calls it).
    pub fn read<'a>(
        &self,
        out: &mut [QueueDispatch<'a>; RING_DISPATCHES],
        texts: &'a mut [LabelText; RING_DISPATCHES],
    ) -> usize {
        let before = self.head.load(Ordering::Acquire);
        let kept = before.min(RING_DISPATCHES as u64);
        let mut read = [QueueDispatch::default(); RING_DISPATCHES];
        let mut lens = [0usize; RING_DISPATCHES];
        for (i, n) in (before - kept..before).enumerate() {
            let entry = &self.entries[(n % SLOTS as u64) as usize];
            let kc = entry.kernel_count.load(Ordering::Relaxed);
            let xy = entry.xy.load(Ordering::Relaxed);
            read[i] = QueueDispatch {
                kernel: kc as u32,
                count: (kc >> 32) as u32,
                submit: entry.submit.load(Ordering::Relaxed),
                grid: [xy as u32, (xy >> 32) as u32, entry.z.load(Ordering::Relaxed)],
                label: b"",
            };
            lens[i] = (entry.label_len.load(Ordering::Relaxed) as usize).min(LABEL_BYTES);
            for (word, bytes) in entry.label.iter().zip(texts[i].chunks_mut(8)) {
                let le = word.load(Ordering::Relaxed).to_le_bytes();
                bytes.copy_from_slice(&le[..bytes.len()]);
            }
        }
        // The entries were read before the count is read again.
        fence(Ordering::Acquire);
        let after = self.head.load(Ordering::Relaxed);
        let texts: &'a [LabelText; RING_DISPATCHES] = texts;
        let mut count = 0;
        for (i, n) in (before - kept..before).enumerate() {
            // Entries before `after` are complete; the owner may be writing entry `after` into the
            // slot of entry `after - SLOTS`: the last RING_DISPATCHES before `after` are intact.
            if after - n <= RING_DISPATCHES as u64 {
                out[count] = QueueDispatch { label: &texts[i][..lens[i]], ..read[i] };
                count += 1;
            }
        }
        count
    }

    fn reset(&self) {
        self.queue.store(0, Ordering::Relaxed);
        self.device.store(0, Ordering::Relaxed);
        self.submits.store(0, Ordering::Relaxed);
        self.head.store(0, Ordering::Relaxed);
        self.progress.reset();
    }
}

/// Copies as much of `piece` as fits after `len` bytes of `bytes`; the new length.
#[inline(always)]
fn append(bytes: &mut [MaybeUninit<u8>; LABEL_WORDS * 8], len: usize, piece: &[u8]) -> usize {
    let take = piece.len().min(LABEL_BYTES - len);
    // SAFETY: `len + take <= LABEL_BYTES <= bytes.len()`; the source has `take` bytes; no overlap.
    unsafe { std::ptr::copy_nonoverlapping(piece.as_ptr(), bytes.as_mut_ptr().add(len).cast::<u8>(), take) };
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
        for _ in 0..100_000 {
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
