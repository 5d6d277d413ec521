//! The crash locus: per thread, the CUDA/HIP call in flight and the last launches, kept so that the
//! signal handler (`crate::crash`) can say what was running when the process crashed.
//!
//! Each thread that makes a hooked call while the observer runs claims a [`Ring`] in a static table
//! (the cold path, once per thread). After that, recording takes no lock and allocates nothing: the
//! hook stores the name of the call it forwards before forwarding and clears it after, and a launch
//! writes its kernel, shape and window into the next of the ring's [`RING_LAUNCHES`] entries, then
//! advances the ring's launch count. Only the owning thread writes a ring; the handler reads every
//! ring from whichever thread crashed. The count works as a sequence lock: a reader reads it, the
//! entries, and the count again, and keeps only the entries the writer cannot have been rewriting
//! meanwhile (those more than one lap ahead of the oldest slot the second count allows).
//!
//! The table lives in static memory, not in thread-local storage: a thread's TLS is freed when it
//! exits, and the handler must never read freed memory. A ring whose thread exited keeps its last
//! launches until a new thread needs the slot and finds the table full.

use std::cell::Cell;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use format::record::CrashLaunch;

use crate::registry::Shape;

/// Threads tracked at once; a thread that finds every ring taken by a live thread is not tracked.
pub const RINGS: usize = 256;
/// Launches remembered per thread.
pub const RING_LAUNCHES: usize = 8;
/// Entries per ring: one more than it remembers, for the launch the owner may be writing while the
/// handler reads.
const SLOTS: usize = RING_LAUNCHES + 1;

/// Start of the window that launches made now will be counted in: the end of the last flush (the
/// writer moves it), or the observer's start before the first.
pub static OPEN_WINDOW_T0: AtomicU64 = AtomicU64::new(0);

/// One remembered launch, in as few words as it takes (each store costs the launch path time).
struct Entry {
    /// The kernel slot, with [`FAILED`] set when the launch call returned an error.
    kernel: AtomicU32,
    window_t0: AtomicU64,
    /// Grid and block, packed as `Shape::words` packs them.
    shape: [AtomicU64; 3],
}

/// Marks a failed launch in `Entry::kernel` (slot ids stay far below it: `registry::HARD_MAX_KERNELS`).
const FAILED: u32 = 1 << 31;
const _: () = assert!(crate::registry::HARD_MAX_KERNELS < FAILED);

impl Entry {
    const fn new() -> Entry {
        Entry { kernel: AtomicU32::new(0), window_t0: AtomicU64::new(0), shape: [const { AtomicU64::new(0) }; 3] }
    }
}

/// One thread's call in flight and last launches.
pub struct Ring {
    /// [`format::runtime::thread_token`] of the owning thread; 0 while free.
    owner: AtomicUsize,
    /// The owner's kernel thread id.
    tid: AtomicU32,
    /// Address of the `&'static str` naming the hooked call the thread is inside; 0 outside.
    in_flight: AtomicUsize,
    /// Launches recorded so far; the next goes into entry `head % RING_LAUNCHES`.
    head: AtomicU32,
    entries: [Entry; SLOTS],
}

impl Ring {
    const fn new() -> Ring {
        Ring {
            owner: AtomicUsize::new(0),
            tid: AtomicU32::new(0),
            in_flight: AtomicUsize::new(0),
            head: AtomicU32::new(0),
            entries: [const { Entry::new() }; SLOTS],
        }
    }

    /// The thread enters the hooked call `name`.
    #[inline(always)]
    pub fn call_begins(&self, name: &'static &'static str) {
        self.in_flight.store(name as *const &'static str as usize, Ordering::Relaxed);
    }

    #[inline(always)]
    pub fn call_ends(&self) {
        self.in_flight.store(0, Ordering::Relaxed);
    }

    /// Remembers one launch of kernel slot `kernel`. Called by the owning thread only.
    #[inline(always)]
    pub fn launch(&self, kernel: u32, shape: &Shape, failed: bool) {
        let n = self.head.load(Ordering::Relaxed);
        let entry = &self.entries[n as usize % SLOTS];
        // A reader that sees any of the stores below sees the count of the previous launch first
        // (a compiler barrier on x86-64).
        fence(Ordering::Release);
        entry.kernel.store(kernel | if failed { FAILED } else { 0 }, Ordering::Relaxed);
        entry.window_t0.store(OPEN_WINDOW_T0.load(Ordering::Relaxed), Ordering::Relaxed);
        for (word, value) in entry.shape.iter().zip(shape.words()) {
            word.store(value, Ordering::Relaxed);
        }
        self.head.store(n.wrapping_add(1), Ordering::Release);
    }

    /// The call this thread is inside, if any.
    pub fn in_flight(&self) -> Option<&'static str> {
        let name = self.in_flight.load(Ordering::Relaxed);
        // SAFETY: a non-zero value is the address of a `static &'static str` stored by `call_begins`
        // (the hooks' own statics, which live as long as the library).
        (name != 0).then(|| unsafe { *(name as *const &'static str) })
    }

    pub fn tid(&self) -> u32 {
        self.tid.load(Ordering::Relaxed)
    }

    /// Launches recorded in total (the last `RING_LAUNCHES` of them are kept).
    pub fn recorded(&self) -> u32 {
        self.head.load(Ordering::Acquire)
    }

    /// Copies the kept launches, oldest first, into `out`; returns how many. Entries the owner may be
    /// rewriting at this moment are left out. Allocates nothing (the signal handler calls it).
    pub fn read_launches(&self, out: &mut [CrashLaunch; RING_LAUNCHES]) -> usize {
        let before = self.head.load(Ordering::Acquire);
        let kept = (before as usize).min(RING_LAUNCHES) as u32;
        let mut read = [CrashLaunch::default(); RING_LAUNCHES];
        for (i, n) in (before.wrapping_sub(kept)..before).enumerate() {
            let entry = &self.entries[n as usize % SLOTS];
            let kernel = entry.kernel.load(Ordering::Relaxed);
            let shape = Shape::from_words([0, 1, 2].map(|i| entry.shape[i].load(Ordering::Relaxed)));
            read[i] = CrashLaunch {
                kernel: kernel & !FAILED,
                window_t0: entry.window_t0.load(Ordering::Relaxed),
                grid: shape.grid,
                block: shape.block,
                failed: kernel & FAILED != 0,
            };
        }
        // The entries were read before the count is read again.
        fence(Ordering::Acquire);
        let after = self.head.load(Ordering::Relaxed);
        // Launches before `after` are complete, and the owner may be writing launch `after` into the slot
        // of launch `after - SLOTS`: the last RING_LAUNCHES launches before `after` are intact.
        let mut count = 0;
        for (i, n) in (before.wrapping_sub(kept)..before).enumerate() {
            if intact(n, after) {
                out[count] = read[i];
                count += 1;
            }
        }
        count
    }
}

/// Whether launch `n` of a ring is intact when the count read after it is `after`: launches before
/// `after` are complete, and the owner may be writing launch `after` into the slot of launch
/// `after - SLOTS`, so the last [`RING_LAUNCHES`] before `after` are.
fn intact(n: u32, after: u32) -> bool {
    after.wrapping_sub(n).wrapping_sub(1) < RING_LAUNCHES as u32
}

impl Ring {
    fn reset(&self) {
        self.in_flight.store(0, Ordering::Relaxed);
        self.head.store(0, Ordering::Relaxed);
    }
}

static TABLE: [Ring; RINGS] = [const { Ring::new() }; RINGS];

/// Marks a thread that found no free ring: it is not tracked, and does not look again.
static UNTRACKED: Ring = Ring::new();

/// The rings claimed by some thread (live or exited).
pub fn claimed() -> impl Iterator<Item = &'static Ring> {
    TABLE.iter().filter(|r| r.owner.load(Ordering::Acquire) != 0)
}

/// A thread's link to its ring, kept in its thread-local state.
pub struct ThreadRing(Cell<*const Ring>);

impl ThreadRing {
    pub const fn new() -> ThreadRing {
        ThreadRing(Cell::new(std::ptr::null()))
    }

    /// This thread's ring, claimed at its first use while the observer runs; `None` before, or when
    /// the table is full.
    #[inline(always)]
    pub fn get(&self) -> Option<&'static Ring> {
        let mut ring = self.0.get();
        if ring.is_null() {
            if !crate::state::is_on() {
                return None;
            }
            ring = claim();
            self.0.set(ring);
        }
        if std::ptr::eq(ring, &UNTRACKED) {
            return None;
        }
        // SAFETY: a non-null pointer other than UNTRACKED points into the static TABLE.
        Some(unsafe { &*ring })
    }
}

/// The kernel thread id of the calling thread.
pub use format::runtime::gettid;

/// Whether thread `tid` of this process no longer exists.
fn thread_gone(tid: u32) -> bool {
    // SAFETY: tgkill with signal 0 only checks that the thread exists; it sends nothing.
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid as libc::pid_t, 0) };
    rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

#[cold]
#[inline(never)]
fn claim() -> *const Ring {
    let token = format::runtime::thread_token();
    let tid = gettid();
    let take = |ring: &Ring, from: usize| {
        if ring.owner.compare_exchange(from, token, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            ring.reset();
            ring.tid.store(tid, Ordering::Release);
            true
        } else {
            false
        }
    };
    if let Some(ring) = TABLE.iter().find(|r| take(r, 0)) {
        return ring;
    }
    // Full: take the ring of a thread that has exited.
    for ring in &TABLE {
        let owner = ring.owner.load(Ordering::Acquire);
        if owner != 0 && owner != token && thread_gone(ring.tid()) && take(ring, owner) {
            return ring;
        }
    }
    &UNTRACKED
}

/// In a forked child (single-threaded): the parent's threads are not here. The forking thread keeps
/// its ring (its thread-local link still points to it) under its new thread id; every other ring is
/// freed and emptied.
pub const FORK: format::fork::ForkHandlers = format::fork::ForkHandlers::child(reset_in_child);

fn reset_in_child() {
    let token = format::runtime::thread_token();
    let tid = gettid();
    for ring in &TABLE {
        ring.reset();
        if ring.owner.load(Ordering::Relaxed) == token {
            ring.tid.store(tid, Ordering::Relaxed);
        } else {
            ring.owner.store(0, Ordering::Relaxed);
            ring.tid.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static CALL: &str = "hipLaunchKernel";

    #[test]
    fn a_ring_keeps_the_last_launches_in_order_and_the_call_in_flight() {
        let ring = Ring::new();
        assert_eq!(ring.read_launches(&mut [CrashLaunch::default(); RING_LAUNCHES]), 0);
        for i in 0..(RING_LAUNCHES as u32 + 3) {
            ring.launch(i, &Shape { grid: [i, 1, 1], block: [64, 1, 1] }, i % 2 == 0);
        }
        let mut out = [CrashLaunch::default(); RING_LAUNCHES];
        assert_eq!(ring.read_launches(&mut out), RING_LAUNCHES);
        let kernels: Vec<u32> = out.iter().map(|l| l.kernel).collect();
        assert_eq!(kernels, (3..RING_LAUNCHES as u32 + 3).collect::<Vec<_>>(), "oldest first, the first 3 overwritten");
        assert!(out.iter().all(|l| l.grid[0] == l.kernel && l.block == [64, 1, 1] && l.failed == (l.kernel % 2 == 0)));
        assert_eq!(ring.in_flight(), None);
        ring.call_begins(&CALL);
        assert_eq!(ring.in_flight(), Some("hipLaunchKernel"));
        ring.call_ends();
        assert_eq!(ring.in_flight(), None);
    }

    #[test]
    fn entries_the_owner_may_be_rewriting_are_left_out() {
        let ring = Ring::new();
        for k in 0..RING_LAUNCHES as u32 {
            ring.launch(k, &Shape::default(), false);
        }
        let mut out = [CrashLaunch::default(); RING_LAUNCHES];
        assert_eq!(ring.read_launches(&mut out), RING_LAUNCHES);
        // A reader whose second look finds the count at 10 (two more launches): the owner may be writing
        // launch 10 into the slot of launch 1, so only launches 2..=9 are intact.
        assert!(!intact(1, 10) && intact(2, 10) && intact(9, 10) && !intact(10, 10));
        // Wrapping counts behave the same.
        assert!(intact(u32::MAX, 3) && !intact(u32::MAX - 5, 3));
    }

    #[test]
    fn a_ring_read_while_its_owner_launches_returns_only_whole_entries() {
        // The owner launches kernel k with grid [k, k, k]; an entry mixing two launches would show.
        let ring: &'static Ring = Box::leak(Box::new(Ring::new()));
        let stop: &'static std::sync::atomic::AtomicBool =
            Box::leak(Box::new(std::sync::atomic::AtomicBool::new(false)));
        let writer = std::thread::spawn(move || {
            let mut k = 0u32;
            while !stop.load(Ordering::Relaxed) {
                ring.launch(k % 1000, &Shape { grid: [k % 1000; 3], block: [k % 1000; 3] }, false);
                k = k.wrapping_add(1);
            }
        });
        let mut out = [CrashLaunch::default(); RING_LAUNCHES];
        for _ in 0..200_000 {
            let n = ring.read_launches(&mut out);
            for l in &out[..n] {
                assert_eq!((l.grid, l.block), ([l.kernel; 3], [l.kernel; 3]), "a torn entry");
            }
            for pair in out[..n].windows(2) {
                assert_eq!(pair[1].kernel, (pair[0].kernel + 1) % 1000, "entries out of order");
            }
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
    }

    #[test]
    fn threads_claim_rings_of_their_own_and_read_them_from_another_thread() {
        // (`ThreadRing::get` claims only while the observer runs, which this unit test binary never
        // starts; `claim` is what it calls then.)
        // SAFETY: claim returns a pointer into the static table (the table has free rings here).
        let mine = unsafe { &*claim() };
        assert!(!std::ptr::eq(mine, &UNTRACKED));
        assert_eq!(mine.tid(), gettid());
        let other = std::thread::spawn(|| {
            // SAFETY: as above.
            let ring = unsafe { &*claim() };
            ring.launch(42, &Shape { grid: [2, 2, 1], block: [32, 1, 1] }, true);
            (ring as *const Ring as usize, gettid())
        })
        .join()
        .unwrap();
        assert_ne!(other.0, mine as *const Ring as usize);
        assert!(ThreadRing::new().get().is_none(), "no ring while the observer is not running");
        let ring = claimed().find(|r| r.tid() == other.1).expect("the other thread's ring");
        let mut out = [CrashLaunch::default(); RING_LAUNCHES];
        assert_eq!(ring.read_launches(&mut out), 1);
        assert_eq!((out[0].kernel, out[0].grid, out[0].failed), (42, [2, 2, 1], true));
        assert!(thread_gone(other.1), "that thread has exited");
        assert!(!thread_gone(gettid()));
    }
}
