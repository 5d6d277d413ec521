//! Command buffers: the dispatches recorded into each, counted when the buffer is submitted.
//!
//! Recording is the hot path (`vkCmdDispatch*`, once per ggml op). The Vulkan specification makes
//! the application synchronise access to a command buffer and to the pool it came from ("Threading
//! Behavior": host access to `commandBuffer` must be externally synchronized), so the state of one
//! command buffer is only ever touched by one thread at a time and needs no lock: a dispatch looks
//! the buffer up (in a small cache of the buffers looked up last, [`RECENT`], else in a lock-free map) and stores its
//! pipeline and workgroup counts by index into the black box's trail (`crate::progress`). A recording with no label
//! region and no secondary buffer stops there: its entries — runs of equal dispatches, what the counting walks — are
//! made from the trail only if they are needed (a label opens, a secondary is executed, the trail is full, a
//! submission walks the recording). Otherwise a dispatch also compares with the last recorded entry and either bumps
//! its count or appends one. Entries grow with the largest buffer recorded (warm-up) and are reused after that; a
//! buffer that records more than [`MAX_ENTRIES`] distinct dispatches has them merged, and what still does not fit is
//! counted as the overflow kernel.
//!
//! A buffer's entries are read when it is submitted (`submission`: before the driver sees the submission, while the
//! buffer cannot be reset), and cleared when it is begun, reset, or its pool is reset. A secondary
//! buffer's dispatches count when a primary that executes it is submitted.
//!
//! ggml-vulkan records the same graph into the same command buffers token after token. Each buffer
//! therefore keeps what the walk over its entries counted ([`Counted`]), and a submission whose recording's trail
//! equals, dispatch for dispatch, the trail of the recording before (the trail keeps two: this one and the last),
//! which had the kept counts, adds the kept counts and sequence instead of walking the entries again. (A hash of the
//! dispatches stepped in the dispatch hook told the same before, at about 20 instructions a dispatch; the comparison
//! costs the hook nothing and a submission a memcmp of the two trails.)
//! Such a submission does not even add the kept counts to the shared counters: it bumps the buffer's count of
//! repeats, and the repeats are folded into the counters (repeats times the kept counts) when the writer reads them
//! for a window ([`fold_all`]), when the buffer records something else, and when it is freed. Adding a few dozen
//! (pipeline, workgroup count) counts with atomics at every submission touched a cache line per pipeline on ggml's
//! recording thread, token after token, for counts that only the writer reads.

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

use ash::vk;
use ash::vk::Handle;

use crate::dispatch::DeviceDispatch;
use crate::handles::HandleMap;
use crate::labels::{Label, Labels};
use format::spin::{SpinGuard, SpinLock};

mod pending;
pub mod repeat;
pub mod submission;
use pending::Pending;

/// Distinct entries one command buffer keeps (16 bytes each: 1 MiB).
pub const MAX_ENTRIES: usize = 1 << 16;
/// Entries a new command buffer has room for before it grows.
const INITIAL_ENTRIES: usize = 64;
/// An entry that stands for the dispatches of a secondary command buffer (`vkCmdExecuteCommands`).
const EXECUTE: u32 = u32::MAX;
/// Secondary buffers executed by secondaries (`VK_EXT_nested_command_buffer`) are followed this deep.
const MAX_NESTING: u32 = 8;
/// Command buffers alive at once that the layer follows.
const MAX_LIVE: usize = 1 << 20;

/// Dispatches of one pipeline with one workgroup count under one debug label, recorded in a row or merged later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    slot: u32,
    grid: [u32; 3],
    count: u32,
    /// The two innermost debug label regions open when they were recorded (`crate::labels`), in the buffer's arena.
    label: Label,
}

/// One command buffer's recorded dispatches.
///
/// The fields a bind or a dispatch hook reads and writes come first, in the state's first cache line (`repr(C)`
/// keeps the order, the alignment the line): the hooks run between the driver's calls, whose own code and data push
/// the layer's lines out of the core's caches, so each line a hook touches is one more to bring back.
#[repr(C, align(64))]
pub struct CommandBuffer {
    /// The next link's `vkCmdBindPipeline` and `vkCmdDispatch`, copied from the device's table when the buffer is
    /// allocated, so that the hooks' common paths forward from this line instead of loading the device's table (one
    /// line fewer to bring back per hook). [`forward_nothing`] where the device has none.
    next_bind: Cell<vk::PFN_vkCmdBindPipeline>,
    next_dispatch: Cell<vk::PFN_vkCmdDispatch>,
    /// The compute pipeline bound now: its handle, 0 when none is. Its slot is looked up only where a recording's
    /// dispatches are counted by a walk or named (`crate::progress::BufferProgress::slot_of`).
    bound: Cell<u64>,
    /// The handle of the command buffer this state follows, 0 while it follows none: what tells a hit in [`RECENT`].
    /// Set after the state is in [`BUFFERS`], cleared before it leaves.
    handle: AtomicU64,
    /// How many dispatches since begin the dispatch hook's common path may record ([`Self::record_in_trail`]): the
    /// trail's length while they are only in the black box's trail, not in `entries` ("deferred": a dispatch then
    /// costs the trail's three 8-byte stores and no entry), 0 once entries are made, so that one compare of the
    /// dispatch's index sends both a full trail and a buffer that needs entries to [`Self::record_slow`]. Deferral
    /// ends (the entries made from the trail) when a label region opens, a secondary buffer is executed, the trail is
    /// full, or a submission needs the entries ([`Self::materialize`]); a buffer begun for simultaneous use records
    /// entries from the start (two threads may submit it at once, and making the entries writes them).
    fast_limit: Cell<u32>,
    /// The dispatches by index and the marker slot of the black box (`crate::progress`); its hot fields first.
    pub progress: crate::progress::BufferProgress,
    device: Cell<*const DeviceDispatch>,
    pool: Cell<u64>,
    entries: UnsafeCell<Vec<Entry>>,
    /// Dispatches that did not fit [`MAX_ENTRIES`] even after merging.
    lost: Cell<u64>,
    /// A merge left the entries at least half full: merging again would not make room worth its cost.
    crowded: Cell<bool>,
    /// Entries were merged (sorted): the order they were recorded in is gone.
    merged: Cell<bool>,
    /// The dispatch sequence this recording was found to be (`crate::order`), [`SEQUENCE_UNKNOWN`] until its first
    /// submission looks it up. Atomic: a buffer recorded for simultaneous use may be submitted by two threads at once.
    pub sequence: AtomicU32,
    /// Debug label regions: the open ones, and the texts of those dispatches were recorded in.
    labels: UnsafeCell<Labels>,
    /// A secondary buffer was executed since begin: its dispatches are not in the trail.
    executes: Cell<bool>,
    /// Begun with `VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT`: two threads may submit it at once, so its
    /// submissions count on their own stack and keep nothing in `counted`.
    simultaneous: Cell<bool>,
    /// Begun since it was last cleared: it may hold a recording (Vulkan records into a buffer only between begin and
    /// end). A pool reset clears only such buffers ([`Self::clear_if_begun`]): ggml-vulkan resets its pools at every
    /// synchronisation, about ten times a token, and most of those resets find every buffer cleared already.
    begun: Cell<bool>,
    /// What the last walk over this buffer's entries counted (see [`Counted`]). Boxed: it is 1.5 KiB.
    counted: UnsafeCell<Box<Counted>>,
    /// A debug label region was opened since begin: the crash ring copies this recording's last entries (with their
    /// labels) instead of referring to the black box's trail, which keeps no label.
    labelled: Cell<bool>,
    /// Submissions that added the kept counts (`counted`) by a repeat, since the state was made. Those past
    /// [`Counted::folded`] are not in the shared counters yet. Written by the submitting thread only (a buffer not
    /// begun for simultaneous use is submitted by one thread at a time), read by whoever folds.
    repeats: AtomicU64,
    /// The trail generation (`crate::progress::BufferProgress::generation`) whose recording `counted` keeps the counts
    /// of: the walked one, or a later one found equal to it, dispatch for dispatch, at its submission. Written and
    /// read by the submitting thread only (a buffer `counted` is kept for is submitted by one thread at a time).
    kept_generation: Cell<u64>,
    /// Held while `counted` changes or its repeats are folded into the shared counters: by the submitting thread when
    /// the buffer recorded something else, by the writer's thread before a window ([`fold_all`]), when freed.
    folding: SpinLock<()>,
}

/// The counts of a command buffer's last walked recording, kept for its next one: ggml-vulkan records the same graph
/// into the same command buffers token after token, and a submission whose buffer recorded the same dispatches in
/// the same order (its trail equal to the previous recording's, which held the kept counts:
/// [`CommandBuffer::kept_generation`]) adds the kept counts and sequence without walking the entries again. Only for a
/// buffer one thread submits at a time (Vulkan forbids submitting a pending buffer that was not begun for simultaneous
/// use), written and read at submission.
struct Counted {
    /// The walked recording's counts per (pipeline, workgroup count), complete when `valid`.
    pending: Pending,
    valid: bool,
    recorded: u32,
    dispatches: u64,
    /// Its dispatch sequence (`crate::order`), [`SEQUENCE_UNKNOWN`] when it was not looked up.
    sequence: u32,
    /// [`CommandBuffer::repeats`] already folded into the shared counters.
    folded: u64,
    /// The device's pipeline removals when the walked recording began: trails keep pipeline handles, so the kept
    /// counts hold for a later recording only while no handle can have come back as another pipeline.
    removals: u64,
}

impl Counted {
    fn new() -> Counted {
        Counted {
            pending: Pending::new(),
            valid: false,
            recorded: 0,
            dispatches: 0,
            sequence: SEQUENCE_UNKNOWN,
            folded: 0,
            removals: 0,
        }
    }

    /// Adds the kept counts once for each repeat not folded yet (`repeats`: [`CommandBuffer::repeats`] read now).
    /// Under the buffer's `folding` lock.
    fn fold(&mut self, repeats: u64) {
        let n = repeats.wrapping_sub(self.folded);
        self.folded = repeats;
        if n != 0 && self.valid {
            self.pending.add_all_times(n);
        }
    }
}

// SAFETY: a command buffer's state is used by one thread at a time: Vulkan requires the application
// to synchronise host access to a command buffer (recording, reset, submission, freeing), and the
// layer touches a buffer's state only inside calls that access that buffer.
unsafe impl Sync for CommandBuffer {}
// SAFETY: as above; the state holds no thread-bound data.
unsafe impl Send for CommandBuffer {}

impl CommandBuffer {
    /// A buffer followed by no device, for unit tests elsewhere in the crate.
    #[cfg(test)]
    pub(crate) fn for_test() -> CommandBuffer {
        CommandBuffer::new()
    }

    fn new() -> CommandBuffer {
        CommandBuffer {
            next_bind: Cell::new(forward_nothing::bind),
            next_dispatch: Cell::new(forward_nothing::dispatch),
            device: Cell::new(std::ptr::null()),
            pool: Cell::new(0),
            bound: Cell::new(0),
            handle: AtomicU64::new(0),
            entries: UnsafeCell::new(Vec::with_capacity(INITIAL_ENTRIES)),
            lost: Cell::new(0),
            crowded: Cell::new(false),
            merged: Cell::new(false),
            sequence: AtomicU32::new(SEQUENCE_UNKNOWN),
            labels: UnsafeCell::new(Labels::new()),
            progress: crate::progress::BufferProgress::new(),
            executes: Cell::new(false),
            simultaneous: Cell::new(false),
            begun: Cell::new(false),
            counted: UnsafeCell::new(Box::new(Counted::new())),
            repeats: AtomicU64::new(0),
            folding: SpinLock::new(()),
            labelled: Cell::new(false),
            fast_limit: Cell::new(crate::progress::TRAIL as u32),
            kept_generation: Cell::new(u64::MAX),
        }
    }

    /// The kept counts, read: by the submitting thread (which alone writes them, under `folding`), or by another
    /// thread under `folding`.
    #[inline(always)]
    fn kept(&self) -> &Counted {
        // SAFETY: writes happen only under `folding`, by the thread that reads here without it (see `counted`).
        unsafe { &*self.counted.get() }
    }

    /// Folds the repeats of the kept counts into the shared counters (see the module documentation). Waits for a
    /// submitting thread that is walking a new recording of this buffer (about a microsecond).
    pub fn fold(&self) {
        let folding = self.folding.lock();
        self.fold_locked(&folding);
    }

    /// Folds the repeats, the caller holding `folding` (the guard proves it).
    fn fold_locked(&self, _folding: &SpinGuard<'_, ()>) {
        // SAFETY: under `folding`, the only place `counted` is written from.
        unsafe { self.counted() }.fold(self.repeats.load(Ordering::Acquire));
    }

    /// [`Self::fold`] for the writer's thread, which must not wait without end: a thread that crashed while walking
    /// this buffer holds its lock, and the crash record is written after a window. A walk takes microseconds; a
    /// buffer still busy after a few thousand tries keeps its repeats for the next window.
    fn fold_unless_busy(&self) {
        for _ in 0..4096 {
            if let Some(folding) = self.folding.try_lock() {
                self.fold_locked(&folding);
                return;
            }
            std::hint::spin_loop();
        }
    }

    /// # Safety
    /// Only under `folding` (at submission of a buffer not begun for simultaneous use, when folding), or while no
    /// other thread can reach the state (allocation).
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    unsafe fn counted(&self) -> &mut Counted {
        // SAFETY: one thread at a time, per the caller's promise.
        unsafe { &mut *self.counted.get() }
    }

    /// Follows a buffer of `device`: its table, and the two functions the hooks forward to from the first line.
    fn set_device(&self, device: &'static DeviceDispatch) {
        self.device.set(device);
        self.next_bind.set(device.cmd_bind_pipeline.unwrap_or(forward_nothing::bind));
        self.next_dispatch.set(device.cmd_dispatch.unwrap_or(forward_nothing::dispatch));
    }

    /// The next link's `vkCmdBindPipeline` (see the field).
    #[inline(always)]
    pub fn next_bind(&self) -> vk::PFN_vkCmdBindPipeline {
        self.next_bind.get()
    }

    /// The next link's `vkCmdDispatch` (see the field).
    #[inline(always)]
    pub fn next_dispatch(&self) -> vk::PFN_vkCmdDispatch {
        self.next_dispatch.get()
    }

    /// The device the buffer belongs to.
    #[inline(always)]
    pub fn device(&self) -> &'static DeviceDispatch {
        // SAFETY: set from a `&'static DeviceDispatch` when the buffer is allocated; device tables are
        // never freed.
        unsafe { &*self.device.get() }
    }

    /// # Safety
    /// Only while the caller has the buffer's external synchronisation (see the type's Sync note).
    #[allow(clippy::mut_from_ref)]
    unsafe fn entries(&self) -> &mut Vec<Entry> {
        // SAFETY: one thread at a time, per the caller's promise.
        unsafe { &mut *self.entries.get() }
    }

    /// # Safety
    /// As for [`Self::entries`].
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    unsafe fn labels(&self) -> &mut Labels {
        // SAFETY: one thread at a time, per the caller's promise.
        unsafe { &mut *self.labels.get() }
    }

    /// Forgets everything recorded (begin, reset).
    pub fn clear(&self) {
        // SAFETY: called from hooks on this command buffer (begin, reset) or its pool (reset, free),
        // which the application synchronises.
        unsafe { self.entries() }.clear();
        self.bound.set(0);
        self.lost.set(0);
        self.crowded.set(false);
        self.merged.set(false);
        self.sequence.store(SEQUENCE_UNKNOWN, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { self.labels() }.clear();
        self.progress.begin();
        self.executes.set(false);
        self.labelled.set(false);
        self.fast_limit.set(if self.simultaneous.get() { 0 } else { crate::progress::TRAIL as u32 });
        self.begun.set(false);
    }

    /// [`Self::clear`] for a buffer that may hold a recording; one cleared since its last begin holds none.
    pub fn clear_if_begun(&self) {
        if self.begun.get() {
            self.clear();
        }
    }

    /// `vkBeginCommandBuffer`: forgets everything recorded; `simultaneous`: begun for simultaneous use.
    pub fn begin(&self, simultaneous: bool) {
        self.simultaneous.set(simultaneous);
        self.clear();
        self.begun.set(true);
    }

    /// Makes the entries of the dispatches recorded only in the trail so far (see `deferred`), and records entries
    /// from now on. Called by the recording hooks that need entries, and at submission before the entries are read
    /// (the application may not record into a buffer it submits; a buffer two threads may submit at once is never
    /// deferred).
    #[inline(always)]
    fn materialize(&self) {
        if self.deferred() {
            self.materialize_now();
        }
    }

    /// The dispatches recorded since begin are only in the trail, not in `entries` (see `fast_limit`).
    #[inline(always)]
    fn deferred(&self) -> bool {
        self.fast_limit.get() != 0
    }

    #[cold]
    #[inline(never)]
    fn materialize_now(&self) {
        self.fast_limit.set(0);
        let recorded = (self.progress.recorded() as usize).min(crate::progress::TRAIL) as u32;
        for index in 1..=recorded {
            let (slot, grid) = self.progress.own_dispatch(index);
            self.push(Entry { slot, grid, count: 1, label: Label::NONE });
        }
    }

    /// `vkCmdBeginDebugUtilsLabelEXT` with label `text`.
    #[inline]
    pub fn begin_label(&self, text: &[u8]) {
        self.materialize();
        self.labelled.set(true);
        // SAFETY: called from a command-recording hook on this buffer.
        unsafe { self.labels() }.begin(text);
    }

    /// `vkCmdEndDebugUtilsLabelEXT`.
    #[inline]
    pub fn end_label(&self) {
        // SAFETY: called from a command-recording hook on this buffer.
        unsafe { self.labels() }.end();
    }

    /// The two innermost open label regions.
    #[inline(always)]
    fn label(&self) -> Label {
        // SAFETY: called from a command-recording hook on this buffer.
        unsafe { self.labels() }.current()
    }

    /// `vkCmdBindPipeline` with the compute bind point: pipeline `handle`, kept as it is (one store).
    #[inline(always)]
    pub fn bind(&self, handle: u64) {
        self.bound.set(handle);
    }

    /// One `vkCmdDispatch*` with workgroup counts `grid` (`[0,0,0]` for an indirect dispatch); its index in the
    /// buffer, from 1.
    ///
    /// Up to the entry it cannot panic (wrapping arithmetic, `Cell`s, the trail's checked store), so the dispatch hook
    /// calls it without `state::guarded`, inline; what may (making and pushing entries, which allocates) is guarded,
    /// out of line. A recording kept only in the trail never gets there.
    #[inline(always)]
    pub fn record(&self, grid: [u32; 3]) -> u32 {
        if !self.record_in_trail(grid) {
            self.record_slow(grid);
        }
        self.progress.recorded_own()
    }

    /// [`Self::record`]'s common path: a dispatch of a recording kept in the trail only (see `fast_limit`), stored
    /// there; `false` (nothing recorded) when the trail is full or the buffer needs entries, for
    /// [`Self::record_slow`]. For a hook whose common path makes no call but the driver's (so that it needs no
    /// saved registers: the compiler then saves none on entry). One load of the count, one compare, the trail's
    /// three stores and the count's.
    #[inline(always)]
    pub fn record_in_trail(&self, grid: [u32; 3]) -> bool {
        let index = self.progress.recorded_own().wrapping_add(1);
        if index.wrapping_sub(1) >= self.fast_limit.get() {
            return false;
        }
        // SAFETY: index - 1 is below `fast_limit`, which is at most TRAIL; the recording hooks run on the thread
        // that records the buffer.
        unsafe { self.progress.record_next(index, self.bound.get(), grid) };
        true
    }

    /// A dispatch [`Self::record_in_trail`] did not record: in the trail while it has room, and its entry.
    #[inline(never)]
    pub fn record_slow(&self, grid: [u32; 3]) {
        let handle = self.bound.get();
        self.progress.record(handle, grid);
        crate::state::guarded(|| {
            let slot = self.progress.slot_of(self.progress.generation(), handle);
            self.materialize();
            self.push(Entry { slot, grid, count: 1, label: self.label() });
        });
    }

    /// `vkCmdExecuteCommands`: the secondary buffer's dispatches count with this one's.
    pub fn execute(&self, secondary: vk::CommandBuffer) {
        self.materialize();
        let raw = secondary.as_raw();
        self.executes.set(true);
        self.push(Entry { slot: EXECUTE, grid: [raw as u32, (raw >> 32) as u32, 0], count: 1, label: Label::NONE });
    }

    #[inline]
    fn push(&self, entry: Entry) {
        // SAFETY: called from a command-recording hook on this buffer.
        let entries = unsafe { self.entries() };
        if let Some(last) = entries.last_mut() {
            if last.slot == entry.slot && last.grid == entry.grid && last.label == entry.label && last.count < u32::MAX
            {
                last.count += 1;
                return;
            }
        }
        if entries.len() < MAX_ENTRIES {
            entries.push(entry);
            return;
        }
        self.push_when_full(entry);
    }

    #[cold]
    #[inline(never)]
    fn push_when_full(&self, entry: Entry) {
        // SAFETY: called from `push`, on this buffer.
        let entries = unsafe { self.entries() };
        // A merge costs O(n log n): worth it when it frees half the entries (the next one is then
        // MAX_ENTRIES / 2 dispatches away), not on every dispatch of a buffer with tens of thousands of
        // distinct ones, whose further new entries are lost instead (counted as the overflow kernel).
        if !self.crowded.get() {
            merge(entries);
            self.merged.set(true);
            self.crowded.set(entries.len() >= MAX_ENTRIES / 2);
        }
        if entries.len() < MAX_ENTRIES {
            entries.push(entry);
        } else {
            self.lost.set(self.lost.get() + 1);
        }
    }
}

/// The buffer's dispatch sequence has not been looked up since it was recorded.
pub const SEQUENCE_UNKNOWN: u32 = u32::MAX;

/// What [`CommandBuffer::runs`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Walked {
    /// Runs given to the caller.
    pub runs: usize,
    /// The order is known: no entries were merged or lost, and there were no more runs than asked for.
    pub ordered: bool,
}

/// Joins consecutive dispatches of one pipeline into a run on their way to the caller. [`EXECUTE`], never a
/// pipeline's slot, marks "no run yet".
struct RunJoin {
    slot: u32,
    count: u32,
    runs: usize,
    max_runs: usize,
    ordered: bool,
}

impl RunJoin {
    #[inline(always)]
    fn push(&mut self, slot: u32, n: u32, emit: &mut impl FnMut(u32, u32)) {
        if slot == self.slot {
            self.count = self.count.saturating_add(n);
            return;
        }
        if self.slot != EXECUTE {
            emit(self.slot, self.count);
            self.runs += 1;
            self.ordered &= self.runs < self.max_runs;
        }
        self.slot = slot;
        self.count = n;
    }
}

/// Runs one sequence may have: as many as a command buffer keeps entries (a secondary executed in it adds its own).
pub const MAX_SEQUENCE_RUNS: usize = MAX_ENTRIES;

/// One step of a sequence's 64-bit hash (FxHash's mix, one word per run).
#[inline(always)]
pub fn mix(hash: u64, slot: u32, n: u32) -> u64 {
    let word = u64::from(slot) << 32 | u64::from(n);
    (hash.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95)
}

/// A submitted command buffer's sequence of pipelines, joined into runs and hashed while its dispatches are counted
/// ([`submission::count`]), so that `crate::order` finds it without another walk over the entries. The hash starts
/// with the "no run yet" mark (`EXECUTE`, 0), so that a run begins without a test for the first one.
#[derive(Clone, Copy)]
pub struct SequenceKey {
    slot: u32,
    count: u32,
    runs: usize,
    hash: u64,
    dispatches: u64,
    ordered: bool,
}

impl SequenceKey {
    fn new() -> SequenceKey {
        SequenceKey { slot: EXECUTE, count: 0, runs: 0, hash: 0, dispatches: 0, ordered: true }
    }

    #[inline(always)]
    fn push(&mut self, slot: u32, n: u32) {
        if slot == self.slot {
            self.count = self.count.saturating_add(n);
        } else {
            self.hash = mix(self.hash, self.slot, self.count);
            self.slot = slot;
            self.count = n;
            self.runs += 1;
        }
    }

    /// The last run joined in, the buffer's `dispatches` and whether its order is known.
    fn finish(&mut self, dispatches: u64) {
        self.hash = mix(self.hash, self.slot, self.count);
        self.slot = EXECUTE;
        self.dispatches = dispatches;
        self.ordered &= self.runs <= MAX_SEQUENCE_RUNS;
    }

    /// The hash of the runs, never 0.
    pub fn hash(&self) -> u64 {
        self.hash.max(1)
    }

    pub fn runs(&self) -> usize {
        self.runs
    }

    pub fn dispatches(&self) -> u64 {
        self.dispatches
    }

    /// The order is known (see [`Walked::ordered`]).
    pub fn ordered(&self) -> bool {
        self.ordered
    }
}

/// What a submission does with each command buffer's sequence: the buffer, and its key when the buffer's sequence
/// was not looked up since it was recorded (`crate::order::counted`).
pub type SequenceHook = fn(&CommandBuffer, Option<&SequenceKey>);

impl CommandBuffer {
    /// The pipelines this buffer dispatches, in order, as runs of (slot, dispatches in a row) given to `emit`; a
    /// secondary buffer's where it is executed. Stops early, with `ordered` false, when the order is not known
    /// (entries merged or lost once the buffer outgrew [`MAX_ENTRIES`]) or past `max_runs` runs.
    ///
    /// Called at submission, like the counting: the application may not record into or reset a buffer it submits.
    pub fn runs(&self, max_runs: usize, emit: &mut impl FnMut(u32, u32)) -> Walked {
        let mut join = RunJoin { slot: EXECUTE, count: 0, runs: 0, max_runs: max_runs.max(1), ordered: true };
        self.walk(0, &mut join, emit);
        if join.ordered && join.slot != EXECUTE {
            emit(join.slot, join.count);
            join.runs += 1;
        }
        Walked { runs: join.runs, ordered: join.ordered }
    }

    fn walk(&self, depth: u32, join: &mut RunJoin, emit: &mut impl FnMut(u32, u32)) {
        self.materialize();
        join.ordered &= !self.merged.get() && self.lost.get() == 0;
        // SAFETY: at submission (see `runs`), like `count_buffer`.
        let entries = unsafe { self.entries() };
        for e in entries.iter() {
            if !join.ordered {
                return;
            }
            if e.slot != EXECUTE {
                join.push(e.slot, e.count, emit);
                continue;
            }
            let secondary = vk::CommandBuffer::from_raw(u64::from(e.grid[0]) | (u64::from(e.grid[1]) << 32));
            let Some(s) = get(secondary).filter(|_| depth < MAX_NESTING) else { continue };
            for _ in 0..e.count {
                let before = (join.runs, join.slot, join.count);
                s.walk(depth + 1, join, emit);
                // A secondary that dispatches nothing adds nothing however often it is executed.
                if !join.ordered || (join.runs, join.slot, join.count) == before {
                    break;
                }
            }
        }
    }
}

/// Sorts entries and merges equal ones (order does not matter for counting).
fn merge(entries: &mut Vec<Entry>) {
    entries.sort_unstable_by_key(|e| (e.slot, e.grid, e.label));
    entries.dedup_by(|later, kept| {
        let same = later.slot == kept.slot
            && later.grid == kept.grid
            && later.label == kept.label
            && kept.count.checked_add(later.count).is_some();
        if same {
            kept.count += later.count;
        }
        same
    });
}

/// Command buffers by handle; values are pointers to leaked [`CommandBuffer`]s.
static BUFFERS: HandleMap = HandleMap::new(MAX_LIVE);
/// States of freed command buffers, for the next allocation.
static SPARE: SpinLock<Vec<usize>> = SpinLock::new(Vec::new());

/// Every followed buffer with its pool and device, in one short list: a pool reset (ggml-vulkan resets its pools at
/// every synchronisation, about ten times a decode token) clears its own buffers from here. A scan of [`BUFFERS`]
/// walked its whole table (on lavapipe about 160 entries, 40 cache lines, for ggml's 20-odd buffers) under its lock,
/// which made the reset more of the layer's instructions per token than all the token's binds
/// (bench/vklayer_ggml_instructions.sh).
static BY_POOL: SpinLock<Vec<PoolEntry>> = SpinLock::new(Vec::new());

/// A followed buffer's state with the pool and device it was allocated from (pool handles are only unique per device).
#[derive(Clone, Copy)]
struct PoolEntry {
    pool: u64,
    device: usize,
    state: usize,
}

/// The states of the command buffers looked up last, by a hash of their handle: a lookup in [`BUFFERS`] is a chain
/// of dependent loads (the map, its table, the entry, the state) that every bind and dispatch used to pay, between
/// driver calls that push those lines out of the core's caches; a hit here is one load before the state. Direct-mapped
/// and written only on a miss, so that one thread recording one buffer after another writes nothing here in the
/// steady state, and threads recording different buffers write different slots (or, colliding, only miss).
/// A slot may point to a state that follows another buffer now, or none: a hit is a state whose
/// [`CommandBuffer::handle`] is the handle looked up, which holds only while [`BUFFERS`] maps that handle to it
/// (states are never freed, so a stale pointer is still a state).
/// What a followed buffer forwards a bind or a dispatch to when its device's chain offers none (no Vulkan device
/// lacks them; a table built from a broken `vkGetDeviceProcAddr` could): nothing, as the hooks did when the table's
/// entry was empty.
mod forward_nothing {
    use ash::vk;

    pub unsafe extern "system" fn bind(_: vk::CommandBuffer, _: vk::PipelineBindPoint, _: vk::Pipeline) {}

    pub unsafe extern "system" fn dispatch(_: vk::CommandBuffer, _: u32, _: u32, _: u32) {}
}

static RECENT: [AtomicPtr<CommandBuffer>; RECENT_SLOTS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; RECENT_SLOTS];
const RECENT_SLOTS: usize = 64;

#[inline(always)]
fn recent_slot(cb: u64) -> &'static AtomicPtr<CommandBuffer> {
    // Fibonacci hashing, as `crate::handles` (handles are aligned pointers): the top bits index the slot.
    &RECENT[(cb.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize]
}

/// The state of command buffer `cb`.
///
/// Out of line on purpose: generic code calls it (submissions walk any iterator of buffers), and a static that
/// generic code of an rlib reads is exported with default visibility, which made the compiler address [`RECENT`]
/// through the global offset table in the bind and dispatch hooks too: one more load, and one more cache line, on
/// every bind and dispatch of the application's. Called from here, [`RECENT`] stays hidden and the hooks' [`recent`]
/// takes its address with a `lea`.
#[inline(never)]
pub fn get(cb: vk::CommandBuffer) -> Option<&'static CommandBuffer> {
    match recent(cb) {
        Some(s) => Some(s),
        None => get_and_remember(cb.as_raw(), recent_slot(cb.as_raw())),
    }
}

/// The state of command buffer `cb` if it is in [`RECENT`] (`None`: look it up with [`get`]). No call: for a hook's
/// common path.
#[inline(always)]
pub fn recent(cb: vk::CommandBuffer) -> Option<&'static CommandBuffer> {
    let key = cb.as_raw();
    // SAFETY: a slot holds null or a pointer to a never-freed state (see `allocated`).
    let s = unsafe { recent_slot(key).load(Ordering::Acquire).as_ref() }?;
    (s.handle.load(Ordering::Acquire) == key).then_some(s)
}

#[inline(never)]
fn get_and_remember(key: u64, slot: &AtomicPtr<CommandBuffer>) -> Option<&'static CommandBuffer> {
    // SAFETY: values are pointers to states that are never freed (see `allocated`).
    let s = BUFFERS.get(key).map(|p| unsafe { &*(p as *const CommandBuffer) })?;
    if s.handle.load(Ordering::Relaxed) == key {
        slot.store(s as *const CommandBuffer as *mut CommandBuffer, Ordering::Release);
    }
    Some(s)
}

/// Before `state` leaves [`BUFFERS`]: lookups of its handle stop hitting it in [`RECENT`].
fn forget_handle(state: u64) {
    // SAFETY: values of `BUFFERS` are pointers to never-freed states.
    unsafe { &*(state as *const CommandBuffer) }.handle.store(0, Ordering::Release);
}

/// `vkAllocateCommandBuffers` succeeded: follow `buffers`, from `pool` on `device`.
pub fn allocated(device: &'static DeviceDispatch, pool: vk::CommandPool, buffers: &[vk::CommandBuffer]) {
    for &cb in buffers {
        let state = SPARE.lock().pop().unwrap_or_else(|| Box::into_raw(Box::new(CommandBuffer::new())) as usize);
        // SAFETY: a state from the spare list or just leaked; no other thread uses it (the buffer
        // handle is new, and spare states belong to no buffer).
        let s = unsafe { &*(state as *const CommandBuffer) };
        s.set_device(device);
        s.pool.set(pool.as_raw());
        s.begin(false);
        // SAFETY: the state belongs to no buffer yet, so no submission walks it and no fold reaches it; its repeats
        // were folded when its last buffer was freed.
        let counted = unsafe { s.counted() };
        counted.valid = false;
        counted.folded = s.repeats.load(Ordering::Relaxed);
        s.kept_generation.set(u64::MAX);
        s.progress.attach(&device.progress, &device.pipelines);
        // A state still mapped to this handle (its buffer was freed while the layer was off, and the driver handed
        // the handle out again) must stop answering for it.
        if let Some(old) = BUFFERS.get(cb.as_raw()) {
            forget_handle(old);
            BY_POOL.lock().retain(|e| e.state != old as usize);
        }
        if BUFFERS.insert(cb.as_raw(), state as u64) {
            s.handle.store(cb.as_raw(), Ordering::Release);
            let device = device as *const DeviceDispatch as usize;
            BY_POOL.lock().push(PoolEntry { pool: pool.as_raw(), device, state });
        } else {
            s.progress.detach();
            SPARE.lock().push(state);
        }
    }
}

/// `vkFreeCommandBuffers`: stop following `buffers`.
pub fn freed(buffers: &[vk::CommandBuffer]) {
    for &cb in buffers {
        if let Some(state) = BUFFERS.get(cb.as_raw()) {
            forget_handle(state);
        }
        if let Some(state) = BUFFERS.remove(cb.as_raw()) {
            // SAFETY: values are pointers to never-freed states.
            let s = unsafe { &*(state as *const CommandBuffer) };
            s.fold();
            s.progress.detach();
            forget_pool_entry(state as usize);
            SPARE.lock().push(state as usize);
        }
    }
}

/// Takes a state that no longer follows a buffer out of [`BY_POOL`].
fn forget_pool_entry(state: usize) {
    let mut entries = BY_POOL.lock();
    if let Some(i) = entries.iter().position(|e| e.state == state) {
        entries.swap_remove(i);
    }
}

impl CommandBuffer {
    /// Whether the buffer came from `pool` of `device` (pool handles are only unique per device).
    fn belongs_to_pool(&self, device: &DeviceDispatch, pool: u64) -> bool {
        self.pool.get() == pool && std::ptr::eq(self.device.get(), device)
    }
}

/// `vkDestroyCommandPool`: its buffers are freed with it.
pub fn pool_destroyed(device: &DeviceDispatch, pool: vk::CommandPool) {
    let pool = pool.as_raw();
    let removed = BUFFERS.remove_where(|_, state| {
        // SAFETY: values are pointers to never-freed states.
        let s = unsafe { &*(state as *const CommandBuffer) };
        let keep = !s.belongs_to_pool(device, pool);
        if !keep {
            forget_handle(state);
        }
        keep
    });
    for &state in &removed {
        // SAFETY: values are pointers to never-freed states.
        let s = unsafe { &*(state as *const CommandBuffer) };
        s.fold();
        s.progress.detach();
    }
    let device = device as *const DeviceDispatch as usize;
    BY_POOL.lock().retain(|e| e.pool != pool || e.device != device);
    SPARE.lock().extend(removed.into_iter().map(|s| s as usize));
}

/// `vkResetCommandPool`: its buffers return to the initial state.
pub fn pool_reset(device: &DeviceDispatch, pool: vk::CommandPool) {
    let pool = pool.as_raw();
    let device = device as *const DeviceDispatch as usize;
    // ggml-vulkan resets its pools at every synchronisation: the short list of followed buffers, allocating nothing.
    for e in BY_POOL.lock().iter() {
        if e.pool == pool && e.device == device {
            // SAFETY: entries hold pointers to never-freed states.
            unsafe { &*(e.state as *const CommandBuffer) }.clear_if_begun();
        }
    }
}

/// In a forked child: a parent thread may have held these locks.
pub const FORK: format::fork::ForkHandlers = format::fork::ForkHandlers::child(force_unlock_in_child);

fn force_unlock_in_child() {
    SPARE.release_for_fork();
    BY_POOL.release_for_fork();
    BUFFERS.force_unlock();
    // A parent thread may have been folding or walking a buffer: its lock is the child's now (a count it was adding
    // may be short).
    let unlock = |state: u64| {
        // SAFETY: values are pointers to never-freed states.
        unsafe { &*(state as *const CommandBuffer) }.folding.release_for_fork()
    };
    BUFFERS.for_each(|_, state| unlock(state));
    SPARE.lock().iter().for_each(|&state| unlock(state as u64));
}

/// Folds every followed buffer's repeats into the shared counters (see the module documentation): the writer calls
/// it before it reads the counters for a window, after it read the sequences' counts.
pub fn fold_all() {
    BUFFERS.for_each(|_, state| {
        // SAFETY: values are pointers to never-freed states.
        unsafe { &*(state as *const CommandBuffer) }.fold_unless_busy()
    });
}

#[cfg(test)]
mod tests {
    use super::pending::PENDING;
    use super::submission::{count, count_one, remember, remember_buffer, Tally};
    use super::*;
    use crate::locus;
    use crate::pipelines::OVERFLOW;

    fn state() -> CommandBuffer {
        CommandBuffer::new()
    }

    #[test]
    fn what_a_dispatch_touches_is_in_the_first_cache_line() {
        use std::mem::{align_of, offset_of};
        assert_eq!(align_of::<CommandBuffer>(), 64);
        let progress = offset_of!(CommandBuffer, progress);
        for (field, end) in [
            ("next_bind", offset_of!(CommandBuffer, next_bind) + 8),
            ("next_dispatch", offset_of!(CommandBuffer, next_dispatch) + 8),
            ("progress's half and count", progress + crate::progress::BufferProgress::HOT_BYTES),
            ("bound", offset_of!(CommandBuffer, bound) + 8),
            ("handle", offset_of!(CommandBuffer, handle) + 8),
            ("fast_limit", offset_of!(CommandBuffer, fast_limit) + 4),
        ] {
            assert!(end <= 64, "{field} ends at byte {end} of the state");
        }
    }

    unsafe extern "system" fn no_commands(_: vk::Device, _: *const std::ffi::c_char) -> vk::PFN_vkVoidFunction {
        None
    }

    /// A followed buffer of a device whose pipelines are `pipelines` (handle, slot).
    fn state_on_device(pipelines: &[(u64, u32)]) -> (CommandBuffer, &'static DeviceDispatch) {
        // SAFETY: `no_commands` is a vkGetDeviceProcAddr that offers no command.
        let d: &'static DeviceDispatch =
            Box::leak(Box::new(unsafe { DeviceDispatch::new(vk::Device::null(), no_commands, Some(0), false) }));
        for &(handle, slot) in pipelines {
            assert!(d.pipelines.insert(handle, u64::from(slot) + 1));
        }
        let s = state();
        s.set_device(d);
        s.progress.attach(&d.progress, &d.pipelines);
        (s, d)
    }

    #[test]
    fn a_handle_finds_the_state_it_was_allocated_with_however_its_states_come_and_go() {
        let (_, d) = state_on_device(&[]);
        // Handles no other test allocates; the first two share a slot of `RECENT` (found below), so that each lookup
        // of one replaces the other there.
        let a = vk::CommandBuffer::from_raw(0x5eed_0000_0040);
        let mut b = vk::CommandBuffer::from_raw(0x5eed_0000_0080);
        while !std::ptr::eq(recent_slot(a.as_raw()), recent_slot(b.as_raw())) {
            b = vk::CommandBuffer::from_raw(b.as_raw() + 0x40);
        }
        let pool = vk::CommandPool::from_raw(0x5eed_9000);
        allocated(d, pool, &[a, b]);
        let (sa, sb) = (get(a).unwrap(), get(b).unwrap());
        assert!(!std::ptr::eq(sa, sb));
        for _ in 0..3 {
            assert!(std::ptr::eq(get(a).unwrap(), sa) && std::ptr::eq(get(b).unwrap(), sb));
        }
        // Freed: its state goes to the spare list and may follow another buffer; the handle finds nothing.
        freed(&[a]);
        assert!(get(a).is_none(), "a freed buffer's handle found a state");
        let c = vk::CommandBuffer::from_raw(0x5eed_0000_1000);
        allocated(d, pool, &[c]);
        assert!(get(a).is_none() && std::ptr::eq(get(c).unwrap(), sa), "the spare state follows the new buffer");
        // The driver hands `a` out again: a state of its own, whatever `RECENT` held for it.
        allocated(d, pool, &[a]);
        let sa2 = get(a).unwrap();
        assert!(!std::ptr::eq(sa2, sa) && !std::ptr::eq(sa2, sb));
        // Allocated again without a free the layer saw (it was off): the new state answers, not the old one.
        assert!(std::ptr::eq(get(a).unwrap(), sa2));
        allocated(d, pool, &[a]);
        let sa3 = get(a).unwrap();
        assert!(!std::ptr::eq(sa3, sa2), "the state of the earlier allocation still answers for the handle");
        // Destroying the pool frees its buffers.
        pool_destroyed(d, pool);
        assert!(get(a).is_none() && get(b).is_none() && get(c).is_none());
    }

    #[test]
    fn a_pool_reset_clears_the_buffers_of_that_pool_on_that_device_only() {
        let (_, d) = state_on_device(&[]);
        let (_, other_device) = state_on_device(&[]);
        let (pool, other_pool) = (vk::CommandPool::from_raw(0x5eed_a000), vk::CommandPool::from_raw(0x5eed_b000));
        let handle = |n: u64| vk::CommandBuffer::from_raw(0x5eed_0a00_0000 + n * 0x40);
        let (a, b, c, e) = (handle(1), handle(2), handle(3), handle(4));
        allocated(d, pool, &[a, b]);
        allocated(d, other_pool, &[c]);
        // The same pool handle on another device (pool handles are only unique per device).
        allocated(other_device, pool, &[e]);
        let record = |cb: vk::CommandBuffer| {
            let s = get(cb).unwrap();
            s.begin(false);
            s.bind(0x77);
            s.record([1, 1, 1]);
            (s.progress.generation(), s.progress.recorded())
        };
        let before: Vec<_> = [a, b, c, e].into_iter().map(record).collect();
        pool_reset(d, pool);
        let after: Vec<_> = [a, b, c, e].into_iter().map(|cb| get(cb).unwrap()).collect();
        for (i, s) in after.iter().enumerate() {
            let now = (s.progress.generation(), s.progress.recorded());
            if i < 2 {
                assert_eq!(
                    now,
                    (before[i].0 + 1, 0),
                    "buffer {i} of the reset pool: a new generation, nothing recorded"
                );
            } else {
                assert_eq!(now, before[i], "buffer {i} of another pool or device was touched");
            }
        }
        // A freed buffer's state leaves the list; destroying the pool takes the rest of it. (A state is looked for
        // with this test's pools only: another test may take a freed state from the spare list for a buffer of its own.)
        let ours = [(pool, d), (pool, d), (other_pool, d), (pool, other_device)];
        let listed = |i: usize| {
            let (pool, device) = (ours[i].0.as_raw(), ours[i].1 as *const DeviceDispatch as usize);
            let state = after[i] as *const CommandBuffer as usize;
            BY_POOL.lock().iter().any(|entry| entry.state == state && entry.pool == pool && entry.device == device)
        };
        assert!((0..4).all(listed));
        freed(&[a]);
        assert!(!listed(0) && listed(1));
        pool_destroyed(d, pool);
        assert!(!listed(1) && listed(2) && listed(3));
        pool_destroyed(d, other_pool);
        pool_destroyed(other_device, pool);
        assert!(!(0..4).any(listed));
    }

    #[test]
    fn a_recording_repeats_the_kept_counts_only_when_its_trail_equals_the_counted_one() {
        const A: u64 = 0x7f3a_0000_1000;
        const B: u64 = 0x7f3a_0000_2000;
        let (s, _d) = state_on_device(&[(A, 7), (B, 9)]);
        let record = |dispatches: &[(u64, u32)]| {
            s.begin(false);
            for &(pipeline, x) in dispatches {
                s.bind(pipeline);
                s.record([x, 1, 1]);
            }
        };
        let holds = || s.kept().holds(&s, false);
        let submit = || {
            let mut shared = Pending::new();
            count_one(&s, false, None, &mut Tally::default(), &mut shared);
            shared.flush(false);
        };
        let first = [(A, 1), (A, 2), (B, 3)];
        record(&first);
        assert!(!holds(), "nothing is kept before the first submission");
        submit();
        assert!(holds(), "submitted again without being recorded again");
        record(&first);
        assert!(holds(), "the same dispatches in the same order");
        submit();
        record(&first);
        assert!(holds(), "equal to the recording before, which was equal to the counted one");
        submit();
        for (other, why) in [
            ([(A, 1), (A, 2), (B, 4)], "a workgroup count differs"),
            ([(A, 1), (B, 2), (B, 3)], "a pipeline differs"),
            ([(A, 1), (A, 3), (B, 2)], "the order differs"),
        ] {
            record(&other);
            assert!(!holds(), "{why}");
            record(&first);
            assert!(!holds(), "{why}: the recording before was not submitted, so it was not compared");
            submit();
            record(&first);
            assert!(holds(), "{why}: counted again, then repeated");
            submit();
        }
        record(&first[..2]);
        assert!(!holds(), "fewer dispatches");
        submit();
        record(&first);
        assert!(!holds(), "the counts kept are those of the shorter recording");
        submit();
        // Past the trail's length the trail does not hold the recording: walked at each submission, counted whole.
        let long: Vec<(u64, u32)> = (0..crate::progress::TRAIL as u32 + 5).map(|i| (A, i % 7)).collect();
        record(&long);
        submit();
        assert!(holds(), "submitted again without being recorded again");
        record(&long);
        assert!(!holds(), "a recording longer than the trail is not compared");
        submit();
        assert_eq!(s.kept().dispatches, long.len() as u64);
    }

    #[test]
    fn pipelines_are_kept_by_handle_and_named_by_the_slot_they_had_when_recorded() {
        // Handles as a driver hands them out (addresses); slots as `create_compute_pipelines` gave them.
        const A: u64 = 0x7f3a_0000_1000;
        const B: u64 = 0x7f3a_0000_2000;
        let (s, d) = state_on_device(&[(A, 7), (B, 9)]);
        let record = || {
            s.begin(false);
            s.bind(A);
            s.record([1, 1, 1]);
            s.bind(B);
            s.record([2, 1, 1]);
            s.record([3, 1, 1]);
            s.bind(0x7f3a_0000_3000);
            s.record([4, 1, 1]);
        };
        let submit = || {
            let mut shared = Pending::new();
            count_one(&s, false, None, &mut Tally::default(), &mut shared);
            shared.flush(false);
        };
        let slots = |s: &CommandBuffer| entries(s).iter().map(|e| (e.slot, e.grid[0])).collect::<Vec<_>>();
        record();
        let g = s.progress.generation();
        assert_eq!(s.progress.dispatch(g, 1), Some((7, [1, 1, 1])));
        assert_eq!(s.progress.dispatch(g, 3), Some((9, [3, 1, 1])), "the last bind holds for later dispatches");
        assert_eq!(s.progress.dispatch(g, 4), Some((OVERFLOW, [4, 1, 1])), "a pipeline the device does not know");
        submit();
        assert_eq!(slots(&s), [(7, 1), (9, 2), (9, 3), (OVERFLOW, 4)]);
        assert!(s.kept().valid);
        record();
        assert!(s.kept().holds(&s, false), "the same recording again repeats the kept counts");

        // B is destroyed and its handle handed out again for another pipeline (slot 11).
        assert_eq!(d.pipelines.remove(B), Some(10));
        assert!(d.pipelines.insert(B, 12));
        assert_eq!(
            s.progress.dispatch(g + 1, 2),
            Some((OVERFLOW, [2, 1, 1])),
            "a recording begun before the removal names no pipeline by a handle that may be another's now"
        );
        record();
        assert!(!s.kept().holds(&s, false), "counts kept by handle do not hold across a removal");
        submit();
        assert_eq!(slots(&s), [(7, 1), (11, 2), (11, 3), (OVERFLOW, 4)]);
        assert_eq!(s.progress.dispatch(s.progress.generation(), 3), Some((11, [3, 1, 1])));
    }

    fn entries(s: &CommandBuffer) -> Vec<Entry> {
        s.materialize();
        // SAFETY: single-threaded test.
        unsafe { s.entries() }.clone()
    }

    /// The pipeline table to itself (its tests share one), fresh, with three pipelines named `PREFIX0..2`.
    fn three_pipelines(prefix: &str) -> (std::sync::MutexGuard<'static, ()>, Vec<u32>) {
        let serial = crate::pipelines::tests::TEST_LOCK.lock().unwrap();
        crate::pipelines::init(1 << 20);
        let add = |i| crate::pipelines::add_pipeline(crate::pipelines::tests::meta(&format!("{prefix}{i}")));
        (serial, (0..3).map(add).collect())
    }

    #[test]
    fn consecutive_equal_dispatches_share_an_entry() {
        let s = state();
        s.bind(3);
        s.record([4, 1, 1]);
        s.record([4, 1, 1]);
        s.record([8, 1, 1]);
        s.bind(5);
        s.record([8, 1, 1]);
        s.bind(3);
        s.record([4, 1, 1]);
        let e = entries(&s);
        assert_eq!(
            e,
            [
                Entry { slot: 3, grid: [4, 1, 1], count: 2, label: Label::NONE },
                Entry { slot: 3, grid: [8, 1, 1], count: 1, label: Label::NONE },
                Entry { slot: 5, grid: [8, 1, 1], count: 1, label: Label::NONE },
                Entry { slot: 3, grid: [4, 1, 1], count: 1, label: Label::NONE },
            ]
        );
        s.clear();
        assert!(entries(&s).is_empty());
        s.record([1, 1, 1]);
        assert_eq!(entries(&s)[0].slot, OVERFLOW, "nothing bound after a reset");
    }

    #[test]
    fn a_full_buffer_merges_and_then_loses_only_what_still_does_not_fit() {
        let s = state();
        // Alternating pipelines: every dispatch is a new entry until merging.
        for i in 0..MAX_ENTRIES as u32 {
            s.bind(u64::from(1 + i % 2));
            s.record([1, 1, 1]);
        }
        assert_eq!(entries(&s).len(), MAX_ENTRIES);
        s.bind(1);
        s.record([2, 2, 2]);
        let e = entries(&s);
        assert_eq!(e.len(), 3, "merged into two entries, then the new one");
        assert_eq!(e.iter().map(|e| u64::from(e.count)).sum::<u64>(), MAX_ENTRIES as u64 + 1);
        // Crowded with distinct workgroup counts: what does not fit after merging is lost, and counted.
        let crowded = state();
        for i in 0..(MAX_ENTRIES as u32 + 10) {
            crowded.record([i, 1, 1]);
        }
        let kept: u64 = entries(&crowded).iter().map(|e| u64::from(e.count)).sum();
        assert_eq!(kept + crowded.lost.get(), MAX_ENTRIES as u64 + 10);
        assert_eq!(crowded.lost.get(), 10);
    }

    #[test]
    fn dispatches_keep_their_open_label_regions_and_equal_ones_under_another_label_stay_apart() {
        let s = state();
        s.bind(3);
        s.begin_label(b"NODE a");
        s.record([4, 1, 1]);
        s.begin_label(b"stage two");
        s.record([4, 1, 1]);
        s.record([4, 1, 1]);
        s.end_label();
        s.record([4, 1, 1]);
        s.end_label();
        s.end_label();
        s.record([4, 1, 1]);
        let texts = |s: &CommandBuffer| -> Vec<(String, u32)> {
            // SAFETY: single-threaded test.
            let labels = unsafe { s.labels() };
            let text = |e: &Entry| {
                String::from_utf8_lossy(labels.path(e.label, &mut [0; crate::labels::MAX_PATH])).into_owned()
            };
            entries(s).iter().map(|e| (text(e), e.count)).collect()
        };
        let node = ("NODE a".to_string(), 1);
        assert_eq!(texts(&s), [node.clone(), ("NODE a > stage two".to_string(), 2), node, (String::new(), 1)]);
        s.clear();
        // ggml's own per-dispatch region (`PIPELINE (X,Y,Z)`) is not kept: equal dispatches of a node share an entry.
        s.begin_label(b"NODE b");
        for _ in 0..3 {
            s.begin_label(b"pipe (4,1,1)");
            s.record([4, 1, 1]);
            s.end_label();
        }
        s.end_label();
        assert_eq!(texts(&s), [("NODE b".to_string(), 3)]);
        s.clear();
        assert_eq!(s.label(), Label::NONE, "a reset buffer has no label open");
        // Merging keeps dispatches under different labels apart.
        for text in [&b"x"[..], b"y", b"x"] {
            s.begin_label(text);
            s.record([1, 1, 1]);
            s.end_label();
        }
        let e = entries(&s);
        let mut merged = vec![e[0], e[1], Entry { label: e[0].label, ..e[2] }];
        merge(&mut merged);
        assert_eq!(merged.iter().map(|e| (e.label, e.count)).collect::<Vec<_>>(), [(e[0].label, 2), (e[1].label, 1)]);
    }

    /// A submission copies each remembered dispatch's label parts word by word from the buffer's arena; the ring
    /// gives back the path the labels name, for texts of every length and at every offset in the arena.
    #[test]
    fn the_ring_remembers_each_dispatch_with_its_label_path() {
        let s = state();
        s.bind(3);
        s.record([9, 1, 1]);
        let texts: Vec<Vec<u8>> = (0..40u8).map(|n| (0..n * 3 % 101).map(|i| b'a' + (i + n) % 26).collect()).collect();
        for (i, text) in texts.iter().enumerate() {
            if i % 3 == 0 {
                s.begin_label(b"x");
            }
            s.begin_label(text);
            s.bind(u64::from(i as u32 + 1));
            s.record([i as u32, 2, 3]);
            s.end_label();
            if i % 3 == 0 {
                s.end_label();
            }
        }
        s.record([7, 7, 7]);
        let ring: &'static locus::QueueRing = locus::queue_ring(0x7e57_0001, None).unwrap();
        let submit = ring.begin_submit();
        let mut writer = ring.writer(submit);
        remember_buffer(&s, &mut writer, 0);
        let mut out = [format::record::QueueDispatch::default(); locus::RING_DISPATCHES];
        let mut read_texts = [[0; locus::LABEL_BYTES]; locus::RING_DISPATCHES];
        let n = ring.read(&mut out, &mut read_texts);
        let kept = entries(&s);
        let tail = &kept[kept.len() - locus::RING_DISPATCHES..];
        assert_eq!(n, tail.len());
        // SAFETY: single-threaded test.
        let labels = unsafe { s.labels() };
        for (d, e) in out[..n].iter().zip(tail) {
            assert_eq!((d.kernel, d.grid, d.count, d.submit), (e.slot, e.grid, e.count, submit));
            assert_eq!(d.label, labels.path(e.label, &mut [0; crate::labels::MAX_PATH]));
        }
        assert!(out[..n].iter().any(|d| d.label.starts_with(b"x > ")) && out[..n].iter().any(|d| d.label.is_empty()));
    }

    /// A buffer without labels is remembered by reference: the ring reads its dispatches back from the black box's
    /// trail, as runs, last ones kept, in submission order with copied entries; they stay readable while the buffer is
    /// recorded again, and are left out (never wrong) once it is recorded twice more.
    #[test]
    fn the_ring_reads_referenced_buffers_from_their_trail_while_it_is_whole() {
        let ring: &'static locus::QueueRing = locus::queue_ring(0x7e57_0002, None).unwrap();
        let read = || {
            let mut out = [format::record::QueueDispatch::default(); locus::RING_DISPATCHES];
            let mut texts = [[0; locus::LABEL_BYTES]; locus::RING_DISPATCHES];
            let n = ring.read(&mut out, &mut texts);
            out[..n].iter().map(|d| (d.kernel, d.grid[0], d.count, d.submit, d.label.to_vec())).collect::<Vec<_>>()
        };
        let submit = |s: &'static CommandBuffer| {
            let cb = vk::CommandBuffer::from_raw(s as *const CommandBuffer as u64);
            assert!(BUFFERS.insert(cb.as_raw(), s as *const CommandBuffer as u64));
            let n = remember(std::iter::once(cb), ring);
            BUFFERS.remove(cb.as_raw());
            n
        };
        let a: &'static CommandBuffer = Box::leak(Box::new(state()));
        let b: &'static CommandBuffer = Box::leak(Box::new(state()));
        // `a` labelled (copied), then `b` plain (referenced): 40 dispatches, two of each in a row.
        a.begin(false);
        a.begin_label(b"node");
        a.bind(7);
        a.record([1, 1, 1]);
        a.end_label();
        let first = submit(a);
        b.begin(false);
        for i in 0..40u32 {
            b.bind(u64::from(100 + i / 2));
            b.record([i / 2, 1, 1]);
        }
        let second = submit(b);
        let a_read = (7, 1, 1, first, b"node".to_vec());
        let b_read: Vec<_> = (0..20u32).map(|k| (100 + k, k, 2, second, vec![])).collect();
        assert_eq!(read(), [vec![a_read.clone()], b_read.clone()].concat(), "in submission order, as runs");
        b.begin(false);
        b.bind(9);
        b.record([5, 5, 5]);
        assert_eq!(read(), [vec![a_read.clone()], b_read].concat(), "recorded again: the trail is still whole");
        b.begin(false);
        b.bind(9);
        b.record([6, 6, 6]);
        assert_eq!(read(), [a_read], "recorded twice since: left out, not misnamed");
        // More runs than the ring gives: the last ones.
        let c: &'static CommandBuffer = Box::leak(Box::new(state()));
        c.begin(false);
        for i in 0..40u32 {
            c.bind(u64::from(200 + i));
            c.record([i, 1, 1]);
        }
        let third = submit(c);
        let c_read: Vec<_> = (8..40u32).map(|k| (200 + k, k, 1, third, vec![])).collect();
        assert_eq!(read(), c_read);
    }

    /// A reader of the ring (the signal handler) races the owner, who submits a buffer by reference and records it
    /// again at once, over and over: every dispatch read belongs to the submission it is listed under (its
    /// workgroup counts carry that submission's number and its index), never to a later recording of the buffer.
    #[test]
    fn a_ring_read_while_its_owner_records_the_referenced_buffer_again_names_no_dispatch_wrongly() {
        let ring: &'static locus::QueueRing = locus::queue_ring(0x7e57_0003, None).unwrap();
        let s: &'static CommandBuffer = Box::leak(Box::new(state()));
        let cb = vk::CommandBuffer::from_raw(s as *const CommandBuffer as u64);
        assert!(BUFFERS.insert(cb.as_raw(), s as *const CommandBuffer as u64));
        let kernel = |submit: u32, i: u32| 1 + (submit.wrapping_mul(31).wrapping_add(i)) % 1000;
        let stop: &'static std::sync::atomic::AtomicBool =
            Box::leak(Box::new(std::sync::atomic::AtomicBool::new(false)));
        let owner = std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let submit = ring.submits() as u32 + 1;
                s.begin(false);
                for i in 0..1 + submit % 40 {
                    s.bind(u64::from(kernel(submit, i)));
                    s.record([submit, i, 7]);
                }
                assert_eq!(remember(std::iter::once(cb), ring), u64::from(submit));
            }
        });
        let mut texts = [[0; locus::LABEL_BYTES]; locus::RING_DISPATCHES];
        let mut named = 0usize;
        for _ in 0..100_000 {
            let mut out = [format::record::QueueDispatch::default(); locus::RING_DISPATCHES];
            let n = ring.read(&mut out, &mut texts);
            for d in &out[..n] {
                assert_eq!(u64::from(d.grid[0]), d.submit, "a dispatch of another recording: {d:?}");
                assert_eq!((d.kernel, d.grid[2], d.count), (kernel(d.grid[0], d.grid[1]), 7, 1), "a torn dispatch");
            }
            named += n;
        }
        stop.store(true, Ordering::Relaxed);
        owner.join().unwrap();
        BUFFERS.remove(cb.as_raw());
        assert!(named > 0, "the reader named some dispatches while the owner recorded");
    }

    /// A submission of a recording equal to the buffer's last walked one adds the kept counts and sequence; any
    /// other recording is walked. Either way the counts, the dispatches and the sequences are those of a walk.
    #[test]
    fn a_recording_equal_to_the_last_walked_one_counts_the_same_without_a_walk() {
        let (_serial, p) = three_pipelines("c");
        crate::order::init(true);
        let s = state();
        let record = |grids: &[(usize, u32)], label: &[u8]| {
            s.begin(false);
            s.begin_label(label);
            for &(k, x) in grids {
                s.bind(u64::from(p[k]));
                s.record([x, 1, 1]);
            }
            s.end_label();
        };
        let submit = |walked: bool| {
            let totals: Vec<u64> = p.iter().map(|&k| total(k)).collect();
            let mut tally = Tally::default();
            let mut shared = Pending::new();
            // SAFETY: single-threaded test.
            let hit = unsafe { s.counted() }.holds(&s, true);
            count_one(&s, false, Some(crate::order::counted), &mut tally, &mut shared);
            shared.flush(false);
            assert_eq!(hit, !walked, "walked or not as expected");
            let added = |totals: &[u64]| p.iter().zip(totals).map(|(&k, t)| total(k) - t).collect::<Vec<u64>>();
            if hit {
                // A repeat waits on its buffer until it is folded (by the writer before a window, or below).
                assert_eq!(added(&totals), vec![0; 3], "a repeat adds to no counter before it is folded");
            }
            s.fold();
            let id = s.sequence.load(Ordering::Relaxed);
            (added(&totals), tally.dispatches, id)
        };
        let a = [(0, 4), (1, 4), (0, 4), (2, 8), (2, 8)];
        record(&a, b"one");
        let (counts, dispatches, id) = submit(true);
        assert_eq!((counts, dispatches), (vec![2, 1, 2], 5));
        let submissions = crate::order::submissions(id);
        // Recorded again, under another label: the kept counts and sequence.
        record(&a, b"two");
        assert_eq!(submit(false), (vec![2, 1, 2], 5, id));
        assert_eq!(crate::order::submissions(id), submissions + 1);
        // Submitted again without recording: kept too.
        assert_eq!(submit(false), (vec![2, 1, 2], 5, id));
        // Another workgroup count, another order, one dispatch more: walked.
        let b = [(0, 4), (1, 4), (0, 4), (2, 8), (2, 9)];
        record(&b, b"one");
        let (counts, dispatches, other) = submit(true);
        assert_eq!((counts, dispatches, other), (vec![2, 1, 2], 5, id), "the same pipelines in the same order");
        record(&[(1, 4), (0, 4), (0, 4), (2, 8), (2, 8)], b"one");
        let (counts, _, other) = submit(true);
        assert_eq!(counts, vec![2, 1, 2]);
        assert_ne!(other, id, "another order, another sequence");
        record(&[(0, 4), (1, 4), (0, 4), (2, 8), (2, 8), (2, 8)], b"one");
        assert_eq!(submit(true).0, vec![2, 1, 3]);
        // Begun for simultaneous use: walked every time, nothing kept.
        s.begin(true);
        s.bind(u64::from(p[0]));
        s.record([4, 1, 1]);
        let totals = total(p[0]);
        for _ in 0..2 {
            let mut shared = Pending::new();
            count_one(&s, false, None, &mut Tally::default(), &mut shared);
            shared.flush(false);
        }
        assert_eq!(total(p[0]) - totals, 2);
    }

    /// Repeats of a kept recording reach the counters once each, whoever folds them: the submission of another
    /// recording (before its counts replace the kept ones), the writer's fold, or freeing the buffer.
    #[test]
    fn repeats_are_folded_into_the_counters_once_by_whoever_comes_first() {
        let (_serial, p) = three_pipelines("r");
        let s = state();
        let record = |k: usize, n: usize| {
            s.begin(false);
            s.bind(u64::from(p[k]));
            (0..n).for_each(|x| {
                s.record([x as u32 + 1, 1, 1]);
            });
        };
        let submit = || {
            let mut shared = Pending::new();
            count_one(&s, false, None, &mut Tally::default(), &mut shared);
            shared.flush(false);
        };
        let before: Vec<u64> = p.iter().map(|&k| total(k)).collect();
        let added = || p.iter().zip(&before).map(|(&k, b)| total(k) - b).collect::<Vec<u64>>();
        record(0, 3);
        submit();
        assert_eq!(added(), [3, 0, 0], "a walked recording counts at once");
        for _ in 0..4 {
            record(0, 3);
            submit();
        }
        assert_eq!(added(), [3, 0, 0], "four repeats wait");
        record(1, 2);
        submit();
        assert_eq!(added(), [15, 2, 0], "another recording folds the repeats of the kept one, then counts");
        s.fold();
        s.fold();
        assert_eq!(added(), [15, 2, 0], "nothing left to fold, however often");
        for _ in 0..3 {
            submit();
        }
        s.fold();
        assert_eq!(added(), [15, 8, 0]);
        // Counts for a failed submission go to the error counters at once, repeat or not.
        let errors = || crate::pipelines::counters(p[1]).unwrap().errors.load(Ordering::Relaxed);
        let e = errors();
        let mut shared = Pending::new();
        count_one(&s, true, None, &mut Tally::default(), &mut shared);
        shared.flush(true);
        assert_eq!(errors() - e, 2);
        assert_eq!(added(), [15, 8, 0], "an error is not a submission");
    }

    /// The writer reads the sequences' counts, then folds every followed buffer (`fold_all`), then reads the
    /// counters: every submission its sequences counted then has its dispatches in the counters.
    #[test]
    fn fold_all_brings_the_counters_up_to_the_sequences_counted_before_it() {
        let (_serial, p) = three_pipelines("f");
        crate::order::init(true);
        let s: &'static CommandBuffer = Box::leak(Box::new(state()));
        let cb = vk::CommandBuffer::from_raw(s as *const CommandBuffer as u64);
        assert!(BUFFERS.insert(cb.as_raw(), s as *const CommandBuffer as u64));
        let before: Vec<u64> = p.iter().map(|&k| total(k)).collect();
        for _ in 0..4 {
            s.begin(false);
            for (k, x) in [(0, 1), (1, 2), (0, 1), (2, 3)] {
                s.bind(u64::from(p[k]));
                s.record([x, 1, 1]);
            }
            count(std::iter::once(cb), false, Some(crate::order::counted));
        }
        let id = s.sequence.load(Ordering::Relaxed);
        let added = || p.iter().zip(&before).map(|(&k, b)| total(k) - b).collect::<Vec<u64>>();
        assert_eq!(added(), [2, 1, 1], "one walked submission counted, three repeats waiting");
        let submissions = crate::order::submissions(id);
        fold_all();
        assert!(submissions >= 4);
        assert_eq!(added(), [8, 4, 4], "after the fold: every submission the sequence counted");
        BUFFERS.remove(cb.as_raw());
    }

    #[test]
    fn a_submission_s_pending_counts_keep_every_dispatch_through_collisions() {
        // More distinct keys than slots: collisions send counts on; the sums per key stay exact.
        let (_serial, slots) = three_pipelines("p");
        let before: Vec<u64> = slots.iter().map(|&s| total(s)).collect();
        let mut pending = Pending::new();
        let mut expected = vec![0u64; slots.len()];
        for round in 0..5u32 {
            for x in 0..(PENDING as u32 * 2) {
                let k = (x % 3) as usize;
                pending.add(slots[k], [x % 7, 1, 1], u64::from(round + 1), false);
                expected[k] += u64::from(round + 1);
            }
        }
        pending.flush(false);
        let after: Vec<u64> = slots.iter().zip(&before).map(|(&s, b)| total(s) - b).collect();
        assert_eq!(after, expected);
    }

    #[test]
    fn a_recording_with_many_distinct_dispatches_keeps_its_counts_for_a_repeat() {
        // ggml-vulkan's decode buffers of a 1.1B model hold about 20 distinct (pipeline, workgroup count) keys; a
        // direct-mapped table of 64 slots lost one to a collision in most of them, and every submission walked.
        let (_serial, p) = three_pipelines("m");
        let s = state();
        let record = || {
            s.begin(false);
            for x in 1..=20u32 {
                for &k in &p {
                    s.bind(u64::from(k));
                    s.record([x, 2, 1]);
                }
            }
        };
        let submit = || {
            let mut shared = Pending::new();
            count_one(&s, false, None, &mut Tally::default(), &mut shared);
            shared.flush(false);
        };
        let before: Vec<u64> = p.iter().map(|&k| total(k)).collect();
        record();
        submit();
        assert!(s.kept().valid, "60 distinct keys, all kept");
        let repeats = s.repeats.load(Ordering::Relaxed);
        record();
        submit();
        assert_eq!(s.repeats.load(Ordering::Relaxed), repeats + 1, "the same recording again is a repeat");
        s.fold();
        let added: Vec<u64> = p.iter().zip(&before).map(|(&k, b)| total(k) - b).collect();
        assert_eq!(added, [40, 40, 40]);
    }

    #[test]
    fn the_pending_table_holds_every_key_until_it_is_full() {
        let (_serial, p) = three_pipelines("t");
        let before = total(p[0]);
        let mut pending = Pending::new();
        for x in 0..PENDING as u32 {
            pending.add(p[0], [x, 1, 1], 2, false);
        }
        assert!(!pending.collided, "{PENDING} keys in {PENDING} slots");
        pending.add(p[0], [0, 1, 1], 1, false);
        assert!(!pending.collided, "a key held already adds to its slot");
        pending.add(p[0], [PENDING as u32, 1, 1], 1, false);
        assert!(pending.collided, "one key more sends one on");
        // Full: keys come and go through their home slots, every count still exact.
        for x in 0..3 * PENDING as u32 {
            pending.add(p[0], [x, 1, 1], 1, false);
        }
        pending.flush(false);
        assert_eq!(total(p[0]) - before, 2 * PENDING as u64 + 2 + 3 * PENDING as u64);
    }

    fn total(slot: u32) -> u64 {
        let counts = crate::pipelines::counters(slot).unwrap().shape_counts();
        counts.entries.iter().flatten().map(|(_, n)| n).sum::<u64>() + counts.other
    }

    fn runs(s: &CommandBuffer, max: usize) -> (Vec<(u32, u32)>, Walked) {
        let mut out = Vec::new();
        let walked = s.runs(max, &mut |slot, n| out.push((slot, n)));
        (out, walked)
    }

    #[test]
    fn runs_join_a_pipeline_s_dispatches_in_a_row_and_keep_the_order() {
        let s = state();
        s.bind(3);
        s.record([4, 1, 1]);
        s.begin_label(b"NODE a");
        s.record([4, 1, 1]);
        s.record([8, 1, 1]);
        s.end_label();
        s.bind(5);
        s.record([1, 1, 1]);
        s.bind(3);
        s.record([4, 1, 1]);
        assert_eq!(runs(&s, 16), (vec![(3, 3), (5, 1), (3, 1)], Walked { runs: 3, ordered: true }));
        assert!(!runs(&s, 2).1.ordered, "more runs than asked for");
        assert!(runs(&s, 3).1.ordered, "exactly as many as asked for");
        s.clear();
        assert_eq!(runs(&s, 16), (vec![], Walked { runs: 0, ordered: true }));
    }

    /// The key a submission hashes while counting holds the runs `CommandBuffer::runs` gives, hashed.
    #[test]
    fn the_key_counted_at_submission_hashes_the_runs() {
        let s = state();
        for p in [3u64, 3, 5, 3] {
            s.bind(p);
            s.record([4, 1, 1]);
        }
        let key = s.key_for_test();
        let (runs, walked) = runs(&s, 16);
        let hash = runs.iter().fold(mix(0, EXECUTE, 0), |h, &(slot, n)| mix(h, slot, n));
        assert_eq!((key.hash(), key.runs(), key.dispatches(), key.ordered()), (hash, walked.runs, 4, true));
        assert_eq!(runs, [(3, 2), (5, 1), (3, 1)]);
    }

    #[test]
    fn a_merged_buffer_has_no_order() {
        let s = state();
        for i in 0..=MAX_ENTRIES as u32 {
            s.bind(u64::from(1 + i % 2));
            s.record([1, 1, 1]);
        }
        assert!(!runs(&s, MAX_ENTRIES * 2).1.ordered);
        s.clear();
        s.bind(1);
        s.record([1, 1, 1]);
        assert_eq!(runs(&s, 4), (vec![(1, 1)], Walked { runs: 1, ordered: true }), "begun again, in order again");
    }

    /// Dispatches recorded only into the trail give the same entries as recorded ones: across the trail's end, and
    /// with a label region or a secondary buffer arriving in the middle of a recording.
    #[test]
    fn a_recording_kept_only_in_the_trail_gives_the_entries_a_recorded_one_gives() {
        let expected = |n: u32| -> Vec<Entry> {
            let mut e: Vec<Entry> = Vec::new();
            for i in 0..n {
                let (slot, grid) = (1 + i % 3 / 2, [i / 4, 1, 1]);
                match e.last_mut() {
                    Some(l) if l.slot == slot && l.grid == grid => l.count += 1,
                    _ => e.push(Entry { slot, grid, count: 1, label: Label::NONE }),
                }
            }
            e
        };
        let record = |s: &CommandBuffer, from: u32, to: u32| {
            for i in from..to {
                s.bind(u64::from(1 + i % 3 / 2));
                s.record([i / 4, 1, 1]);
            }
        };
        for n in [0, 1, 7, crate::progress::TRAIL as u32, crate::progress::TRAIL as u32 + 1, 1500] {
            let s = state();
            s.begin(false);
            record(&s, 0, n);
            assert_eq!(entries(&s), expected(n), "{n} dispatches");
        }
        // A label region opened after 10 dispatches: those keep no label, the later ones the region's.
        let s = state();
        s.begin(false);
        record(&s, 0, 10);
        s.begin_label(b"node");
        record(&s, 10, 12);
        let e = entries(&s);
        let under = |labelled: bool| e.iter().filter(|e| (e.label != Label::NONE) == labelled).map(|e| e.count).sum();
        assert_eq!((under(false), under(true)), (10u32, 2u32), "{e:?}");
        assert!(e[..e.len() - 2].iter().all(|e| e.label == Label::NONE), "the label's dispatches come last: {e:?}");
        // Begun for simultaneous use: entries from the first dispatch (nothing is made at submission).
        s.begin(true);
        record(&s, 0, 3);
        assert!(!s.deferred());
        // SAFETY: single-threaded test.
        assert_eq!(unsafe { s.entries() }.clone(), expected(3));
    }

    #[test]
    fn merging_adds_the_counts_of_equal_entries() {
        let mut e = vec![
            Entry { slot: 2, grid: [1, 1, 1], count: 3, label: Label::NONE },
            Entry { slot: 1, grid: [1, 1, 1], count: 1, label: Label::NONE },
            Entry { slot: 2, grid: [1, 1, 1], count: 4, label: Label::NONE },
            Entry { slot: 2, grid: [2, 1, 1], count: 1, label: Label::NONE },
        ];
        merge(&mut e);
        assert_eq!(
            e,
            [
                Entry { slot: 1, grid: [1, 1, 1], count: 1, label: Label::NONE },
                Entry { slot: 2, grid: [1, 1, 1], count: 7, label: Label::NONE },
                Entry { slot: 2, grid: [2, 1, 1], count: 1, label: Label::NONE },
            ]
        );
    }
}
