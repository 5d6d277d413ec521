//! The black box: how far the GPU got through what each queue was given, told by the GPU itself, so that a
//! crash, a lost device or a hang can name the dispatch *in flight* and not only the last ones submitted
//! (ggml puts up to 100 graph nodes into one submission, most of which finished long before a device loss).
//!
//! Two ways to learn it, chosen per device when it is created:
//! * **Buffer markers** (`VK_AMD_buffer_marker`: RADV, AMDVLK and NVIDIA's driver offer it). Each command buffer
//!   the layer follows owns two words of a host-visible, coherent buffer, `[started, completed]`, which the GPU
//!   writes with `vkCmdWriteBufferMarkerAMD`: "started" (`TOP_OF_PIPE`) the index of a dispatch the command
//!   processor reached, "completed" (`BOTTOM_OF_PIPE`) how many dispatches finished. None is a barrier: the GPU keeps
//!   overlapping what the application lets overlap. The words are plain memory, so even the signal handler reads
//!   them, and they stay readable after a device loss. Where the markers go is [`MarkerPlacement`]: every marker
//!   costs GPU time on NVIDIA's driver (a fraction of a microsecond), so by default only command buffers' ends are
//!   marked, and not every one ([`marker_min_dispatches`]).
//! * **Submissions** (any device with timeline semaphores, e.g. lavapipe, which offers no markers): each
//!   `vkQueueSubmit*` call that carried dispatches also signals a timeline semaphore of the layer's own with the
//!   queue's submission number, from the call's last batch (or from one batch added after it, where that batch's
//!   chain cannot take it: `api::calls`); a semaphore signal covers every command earlier in submission order.
//!   No command is added to any command buffer. It tells which submissions completed, not which dispatch of an
//!   unfinished one runs: the first unfinished submission's dispatches are reported as "one of these".
//!
//! Either way, a command buffer begun again (or whose pool was reset) finished its previous execution: Vulkan
//! forbids re-recording a pending buffer, so that is known without asking the GPU.
//!
//! Each followed command buffer keeps the identity (pipeline, workgroups) of its first [`TRAIL`] dispatches by
//! index, stored with atomics in memory that is never freed, so a reader on any thread (the signal handler
//! included) can name a dispatch by its index; each queue keeps its last [`RECENT`] (submission, command buffer)
//! pairs. Reading allocates nothing and takes no lock. A buffer keeps two trails, for even and odd generations: the
//! recording before the current one stays readable while the buffer is recorded again, which is what lets the crash
//! ring (`crate::locus`) name a submission's last dispatches by reference instead of copying them.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use ash::vk;

use crate::handles::HandleMap;

/// No marker slot (the device has no markers, or all slots are taken).
pub const NO_SLOT: u32 = u32::MAX;
/// Dispatches of one command buffer whose identity is kept by index (ggml records at most ~100 per buffer).
pub const TRAIL: usize = 1024;
/// (submission, command buffer) pairs each queue keeps for reading progress.
pub const RECENT: usize = 32;
/// Command buffers with marker words per device (8 bytes each).
pub const MARKER_SLOTS: u32 = 8192;
/// In-flight dispatches listed per queue.
pub const MAX_IN_FLIGHT: usize = 16;

/// Where the layer writes a command buffer's "completed" marker (`BACKSCOPE_VK_MARKERS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerPlacement {
    /// After every dispatch (`BOTTOM_OF_PIPE`): exact, but on NVIDIA's driver each such write waits for the GPU to
    /// drain (decode 38% slower on an H200, BENCHMARKS.md).
    Dispatch,
    /// After each of the program's own pipeline barriers, and at the end of the buffer: where the GPU drains anyway
    /// (ggml puts a barrier between dependent nodes), so no wait is added. Dispatches since the last barrier are
    /// "started, not known complete". With a "started" marker before every dispatch (at `TOP_OF_PIPE`).
    Sync,
    /// As `Sync` without the "started" markers: the first dispatch no completion marker covers is the one in flight
    /// (a queue runs its command buffers in order; ggml's barriers order its nodes).
    Barrier,
    /// Completion markers at the ends of command buffers (not every one: [`marker_min_dispatches`]): the first
    /// unfinished marked command buffer is known, not which of its dispatches runs (they and the unmarked buffers'
    /// before it are listed as candidates). The default: on NVIDIA's driver every marker costs GPU time, and ggml
    /// records a few hundred nodes per token but a few command buffers.
    Buffer,
}

/// What `BACKSCOPE_VK_MARKERS` asks for, read once: a placement, or none (`none`: see [`markers_wanted`]).
fn markers_asked() -> Option<MarkerPlacement> {
    static ASKED: OnceLock<Option<MarkerPlacement>> = OnceLock::new();
    *ASKED.get_or_init(|| match format::env::get(format::env::VK_MARKERS).as_deref().map(str::trim) {
        Some("none") => None,
        Some("dispatch") => Some(MarkerPlacement::Dispatch),
        Some("sync") => Some(MarkerPlacement::Sync),
        Some("barrier") => Some(MarkerPlacement::Barrier),
        _ => Some(MarkerPlacement::Buffer),
    })
}

/// Whether markers go at dispatches, as the dispatch hook asks it at every dispatch.
static PER_DISPATCH: &crate::flag::OnceFlag = &crate::flag::MARKERS_PER_DISPATCH;

/// Whether markers go at dispatches ([`MarkerPlacement::Dispatch`], [`MarkerPlacement::Sync`]).
#[inline(always)]
pub fn markers_per_dispatch() -> bool {
    PER_DISPATCH.get(|| matches!(marker_placement(), MarkerPlacement::Dispatch | MarkerPlacement::Sync))
}

/// Whether markers go after the program's barriers, as the barrier hooks ask it at every barrier (ggml records one
/// between dependent nodes).
static AT_BARRIERS: &crate::flag::OnceFlag = &crate::flag::MARKERS_AT_BARRIERS;

/// Whether markers go after the program's barriers ([`MarkerPlacement::Sync`], [`MarkerPlacement::Barrier`]); the
/// barrier hooks do nothing else, so with any other placement the layer does not hook barriers (`api::barriers_hooked`).
#[inline(always)]
pub fn markers_at_barriers() -> bool {
    AT_BARRIERS.get(|| matches!(marker_placement(), MarkerPlacement::Sync | MarkerPlacement::Barrier))
}

/// The placement asked for (`BACKSCOPE_VK_MARKERS`): `dispatch`, `sync`, `barrier`, or `buffer` (the default; also
/// what `none` reads as, where no marker is written at all).
pub fn marker_placement() -> MarkerPlacement {
    markers_asked().unwrap_or(MarkerPlacement::Buffer)
}

/// How many dispatches the `buffer` placement lets go unmarked before it marks a command buffer's end
/// (`BACKSCOPE_VK_MARKER_MIN_DISPATCHES`; default [`MARKER_MIN_DISPATCHES`]; 1 marks every buffer that holds a
/// dispatch): a buffer is marked when it brings the dispatches of the device's buffers ended since the last marked
/// one, its own included, to this many ([`Markers::marks_end`]). An unmarked buffer has no marker of its own: a later
/// buffer's completion marker covers it (a `BOTTOM_OF_PIPE` write waits for every command submitted before it on the
/// queue), and until one does, its dispatches are candidates with the next marked buffer's, so the candidates stay
/// fewer than this many plus the marked buffer's, whatever sizes the program's buffers have.
pub fn marker_min_dispatches() -> u32 {
    static MIN: OnceLock<u32> = OnceLock::new();
    *MIN.get_or_init(|| {
        format::env::get(format::env::VK_MARKER_MIN_DISPATCHES)
            .and_then(|v| v.trim().parse::<u32>().ok())
            .unwrap_or(MARKER_MIN_DISPATCHES)
            .max(1)
    })
}

/// The default of [`marker_min_dispatches`]. Every marker costs NVIDIA's driver a fraction of a microsecond of GPU
/// time per command buffer, and ggml-vulkan ends seven buffers a decode token on a 1.1B model (12, 22, 40, 100, 100,
/// 60 and 1 dispatches): with each marked, `trace --env` cost an H100's decode 0.60% [0.56, 0.66]; with 100, three or
/// four are, and it cost 0.26% [0.24, 0.29], prompts 0.11% [0.01, 0.20] (docs/validation/gpu-2026-12-05-submission-cost,
/// c23a-c23p). What it gives up: a hang in one of the ramp's small buffers lists up to 174 dispatches as candidates
/// instead of that buffer's.
pub const MARKER_MIN_DISPATCHES: u32 = 100;

/// Whether the layer adds `VK_AMD_buffer_marker` where a device offers it (`BACKSCOPE_VK_MARKERS` is not `none`).
/// With `none` no command is added to any command buffer and no extension is enabled for the black box: progress is
/// known by submissions (the layer's timeline semaphore), as on a device without markers; it tells which submission
/// was unfinished, not which of its command buffers. For measuring what the markers cost, and for drivers where
/// enabling the extension costs more than it tells.
pub fn markers_wanted() -> bool {
    markers_asked().is_some()
}

/// How a queue's progress is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum By {
    /// Not known: the device offers neither markers nor timeline semaphores (or they could not be set up).
    #[default]
    Nothing,
    BufferMarker,
    Submission,
}

impl By {
    pub fn name(self) -> &'static str {
        match self {
            By::Nothing => "none",
            By::BufferMarker if marker_placement() == MarkerPlacement::Buffer => "command_buffer_marker",
            By::BufferMarker => "buffer_marker",
            By::Submission => "submission",
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Per device

/// A device's marker words: two `u32` per command buffer slot, `[started, completed]`.
pub struct Markers {
    words: *const AtomicU32,
    slots: u32,
    pub buffer: vk::Buffer,
    pub write: vk::PFN_vkCmdWriteBufferMarkerAMD,
    next: AtomicU32,
    free: format::spin::SpinLock<Vec<u32>>,
    /// Set when the device is destroyed: its memory is gone, so nothing reads the words any more.
    dead: AtomicBool,
    pub memory: vk::DeviceMemory,
    /// Dispatches of the command buffers ended unmarked since the last marked end ([`Markers::marks_end`]).
    unmarked: AtomicU32,
}

// SAFETY: `words` points at a persistently mapped allocation the layer never unmaps or frees; it is only
// accessed through atomics.
unsafe impl Sync for Markers {}
// SAFETY: as above.
unsafe impl Send for Markers {}

impl Markers {
    /// # Safety
    /// `words` must point at `2 * slots` u32 of mapped memory that stays mapped until [`Markers::retire`].
    pub unsafe fn new(
        words: *mut u32,
        slots: u32,
        buffer: vk::Buffer,
        memory: vk::DeviceMemory,
        write: vk::PFN_vkCmdWriteBufferMarkerAMD,
    ) -> Self {
        Markers {
            words: words as *const AtomicU32,
            slots,
            buffer,
            memory,
            write,
            next: AtomicU32::new(0),
            free: format::spin::SpinLock::new(Vec::new()),
            dead: AtomicBool::new(false),
            unmarked: AtomicU32::new(0),
        }
    }

    /// Whether a command buffer of this device that ends with `recorded` dispatches gets a completion marker, with
    /// at most `min - 1` dispatches let go unmarked in a row ([`marker_min_dispatches`]). Buffers ended on several
    /// threads at once share the count without a lock: one of them may be marked a little early or late, which only
    /// moves where the candidates end (the reader goes by each buffer's own [`BufferProgress::marked`]).
    pub fn marks_end(&self, recorded: u32, min: u32) -> bool {
        if min <= 1 {
            return true;
        }
        let since = self.unmarked.fetch_add(recorded, Ordering::Relaxed).saturating_add(recorded);
        if since < min {
            return false;
        }
        self.unmarked.store(0, Ordering::Relaxed);
        true
    }

    /// The device is being destroyed: the words are not read from now on.
    pub fn retire(&self) {
        self.dead.store(true, Ordering::SeqCst);
    }

    pub fn retired(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    fn word(&self, i: u32) -> &AtomicU32 {
        debug_assert!(i < 2 * self.slots);
        // SAFETY: `i < 2 * slots` (callers pass slots below `self.slots`); the memory lives forever.
        unsafe { &*self.words.add(i as usize) }
    }

    /// A slot for a new command buffer, or [`NO_SLOT`] when all are taken.
    pub fn claim(&self) -> u32 {
        if let Some(slot) = self.free.lock().pop() {
            return slot;
        }
        let slot = self.next.fetch_add(1, Ordering::Relaxed);
        if slot < self.slots {
            slot
        } else {
            self.next.store(self.slots, Ordering::Relaxed);
            NO_SLOT
        }
    }

    pub fn release(&self, slot: u32) {
        if slot < self.slots {
            self.free.lock().push(slot);
        }
    }

    /// `[started, completed]` of `slot`.
    pub fn read(&self, slot: u32) -> (u32, u32) {
        if slot >= self.slots || self.retired() {
            return (0, 0);
        }
        (self.word(2 * slot).load(Ordering::Acquire), self.word(2 * slot + 1).load(Ordering::Acquire))
    }

    /// Before a submission of the slot's buffer: nothing of it started. The buffer's previous execution finished
    /// (a pending buffer cannot be submitted again), so the GPU writes nothing here until the new one runs.
    pub fn reset(&self, slot: u32) {
        if slot < self.slots && !self.retired() {
            self.word(2 * slot).store(0, Ordering::Relaxed);
            self.word(2 * slot + 1).store(0, Ordering::Release);
        }
    }

    /// Byte offsets of the slot's words in the marker buffer.
    pub fn offsets(slot: u32) -> (u64, u64) {
        (u64::from(slot) * 8, u64::from(slot) * 8 + 4)
    }
}

/// The black box's state of one device.
#[derive(Default)]
pub struct DeviceProgress {
    pub markers: OnceLock<Markers>,
    /// The application enabled timeline semaphores: the submission way can be used where markers are not.
    pub timeline: AtomicBool,
}

impl DeviceProgress {
    pub fn by(&self) -> By {
        if self.markers.get().is_some() {
            By::BufferMarker
        } else if self.timeline.load(Ordering::Relaxed) {
            By::Submission
        } else {
            By::Nothing
        }
    }
}

/// The extension the layer adds to devices that offer it.
pub const BUFFER_MARKER: &std::ffi::CStr = c"VK_AMD_buffer_marker";

/// Whether the black box is wanted in this process: observing, and not turned off (`BACKSCOPE_VK_BLACKBOX=0`).
pub fn wanted() -> bool {
    static WANTED: OnceLock<bool> = OnceLock::new();
    crate::state::on() && *WANTED.get_or_init(|| format::env::on_unless_zero(format::env::VK_BLACKBOX))
}

// ---------------------------------------------------------------------------------------------------------------
// Per command buffer

/// One dispatch as the trail keeps it: the pipeline's handle and the workgroup counts, each count a word of its own
/// so that the dispatch hook stores the three registers it is given as they are (packing two counts into one 64-bit
/// word took four instructions more and a saved register). `_padding` is never written: it makes the entry 24 bytes
/// with no padding, so that two trails compare as plain words.
#[repr(C)]
pub struct TrailEntry {
    handle: AtomicU64,
    grid: [AtomicU32; 3],
    _padding: AtomicU32,
}

impl TrailEntry {
    const fn new() -> TrailEntry {
        TrailEntry {
            handle: AtomicU64::new(0),
            grid: [AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0)],
            _padding: AtomicU32::new(0),
        }
    }

    /// The pipeline handle and workgroups kept here.
    fn read(&self) -> (u64, [u32; 3]) {
        let [x, y, z] = &self.grid;
        (
            self.handle.load(Ordering::Relaxed),
            [x.load(Ordering::Relaxed), y.load(Ordering::Relaxed), z.load(Ordering::Relaxed)],
        )
    }
}

/// What the black box keeps of one command buffer. The fields a dispatch reads and writes come first, kept in the
/// order written (`repr(C)`): `commands::CommandBuffer` puts them in its first cache line.
#[repr(C)]
pub struct BufferProgress {
    /// The current generation's half of `trail` (where its first dispatch goes): set at begin, so that a dispatch
    /// computes no half from the generation. Read and written by the thread that owns the buffer only.
    half: AtomicPtr<TrailEntry>,
    /// Dispatches recorded since the buffer was begun.
    recorded: AtomicU32,
    /// Its two marker words in its device's marker buffer ([`NO_SLOT`]: none).
    pub slot: AtomicU32,
    /// Bumped whenever the buffer is begun or reset after recording dispatches: a submission of an older generation
    /// finished. (Not when nothing was recorded since: ggml resets its pools and then begins each buffer, and two
    /// bumps would leave no generation between the one recorded and the one being recorded.) Written by the thread
    /// that owns the buffer only.
    generation: AtomicU64,
    /// Each of the first [`TRAIL`] dispatches, by index, for even generations then for odd ones (one array: one
    /// bounds check per dispatch recorded). The pipeline's handle, not its slot: the bind then looks nothing up (on an
    /// H100 the lookup made a bind 3–5 µs a token dearer, docs/validation/gpu-2026-12-05-submission-cost); a reader
    /// looks the slot up ([`Self::slot_of`]). A dispatch writes through `half`, not through this pointer.
    trail: Box<[TrailEntry; 2 * TRAIL]>,
    /// The device's [`Markers`] the slot belongs to (0: none).
    markers: AtomicUsize,
    /// The device's pipelines (handle → slot + 1) the trail's handles are looked up in (0: none, for unit tests: a
    /// handle is then its own slot).
    pipelines: AtomicUsize,
    /// [`HandleMap::removals`] of the device's pipelines when each generation began (even, odd): a trail whose
    /// pipelines may have been destroyed since (and their handles handed out again) names none.
    removals_at_begin: [AtomicU64; 2],
    /// The recording's end has a completion marker (`buffer` placement; set when it ended).
    marked: AtomicBool,
}

impl Default for BufferProgress {
    fn default() -> Self {
        Self::new()
    }
}

impl BufferProgress {
    /// Where the fields a dispatch reads and writes (the half's pointer, the count) end.
    #[cfg(test)]
    pub const HOT_BYTES: usize = std::mem::offset_of!(BufferProgress, recorded) + 4;

    pub fn new() -> BufferProgress {
        let progress = BufferProgress {
            slot: AtomicU32::new(NO_SLOT),
            markers: AtomicUsize::new(0),
            recorded: AtomicU32::new(0),
            generation: AtomicU64::new(0),
            // Collected on the heap and converted in place: built as an array, its 48 KiB would first go on the stack
            // of the application's thread that allocates the command buffer.
            trail: match (0..2 * TRAIL).map(|_| TrailEntry::new()).collect::<Box<[_]>>().try_into() {
                Ok(trail) => trail,
                Err(_) => unreachable!("2 * TRAIL entries were collected"),
            },
            pipelines: AtomicUsize::new(0),
            removals_at_begin: [AtomicU64::new(0), AtomicU64::new(0)],
            half: AtomicPtr::new(std::ptr::null_mut()),
            marked: AtomicBool::new(false),
        };
        progress.set_half();
        progress
    }

    /// Points `half` at the current generation's half of the trail.
    fn set_half(&self) {
        // Taken from the slice of the trail from there on, not from a reference to its first entry: a pointer made
        // from `&trail[i]` may reach that one entry only (Miri's Stacked Borrows reports the dispatch hook's write to
        // the second as undefined behaviour), and `record_next` reaches TRAIL entries through it.
        let half = self.trail[trail_slot(self.generation.load(Ordering::Relaxed), 0)..].as_ptr();
        self.half.store(half.cast_mut(), Ordering::Relaxed);
    }

    /// The buffer was allocated on a device whose pipelines are `pipelines`: claims a marker slot where the device
    /// has markers.
    pub fn attach(&self, device: &'static DeviceProgress, pipelines: &'static HandleMap) {
        self.detach();
        self.pipelines.store(pipelines as *const HandleMap as usize, Ordering::Release);
        self.note_removals();
        if let Some(m) = device.markers.get() {
            let slot = m.claim();
            if slot != NO_SLOT {
                self.markers.store(m as *const Markers as usize, Ordering::Relaxed);
                self.slot.store(slot, Ordering::Release);
            }
        }
    }

    /// The buffer was freed: its slot goes back to its device.
    pub fn detach(&self) {
        let slot = self.slot.swap(NO_SLOT, Ordering::AcqRel);
        if let Some(m) = self.markers_ref() {
            m.release(slot);
        }
        self.markers.store(0, Ordering::Relaxed);
    }

    pub fn markers_ref(&self) -> Option<&'static Markers> {
        let p = self.markers.load(Ordering::Acquire);
        // SAFETY: a non-zero value points at a device's `Markers`, which live as long as the process (device tables
        // are never freed).
        (p != 0).then(|| unsafe { &*(p as *const Markers) })
    }

    /// Begun or reset: a new generation with no dispatches (the same one, when it has none yet).
    pub fn begin(&self) {
        if self.recorded.load(Ordering::Relaxed) != 0 || self.generation.load(Ordering::Relaxed) == 0 {
            // One writer (the owning thread: begin and reset are externally synchronised), so no locked add.
            let next = self.generation.load(Ordering::Relaxed).wrapping_add(1);
            self.generation.store(next, Ordering::Release);
            // The new generation's trail stores come after the bump for any reader (a reader that sees one of them
            // sees the bump when it checks the generation again: `holds_trail_of`).
            std::sync::atomic::fence(Ordering::Release);
            self.recorded.store(0, Ordering::Relaxed);
            self.set_half();
        }
        self.marked.store(false, Ordering::Relaxed);
        self.note_removals();
    }

    /// Whether the recording's end was given a completion marker (`buffer` placement).
    pub fn set_marked(&self, marked: bool) {
        self.marked.store(marked, Ordering::Relaxed);
    }

    pub fn marked(&self) -> bool {
        self.marked.load(Ordering::Relaxed)
    }

    /// Keeps the device's pipeline removals now as the current generation's, which has no dispatch yet.
    fn note_removals(&self) {
        let generation = self.generation.load(Ordering::Relaxed);
        self.removals_at_begin[(generation & 1) as usize].store(self.removals_now(), Ordering::Relaxed);
    }

    /// [`HandleMap::removals`] of the device's pipelines when the recording now began.
    pub fn removals_at_begin(&self) -> u64 {
        self.removals_at_begin[(self.generation.load(Ordering::Relaxed) & 1) as usize].load(Ordering::Relaxed)
    }

    fn pipelines_ref(&self) -> Option<&'static HandleMap> {
        let p = self.pipelines.load(Ordering::Acquire);
        // SAFETY: a non-zero value is the address of a device's pipeline map; device tables are never freed.
        (p != 0).then(|| unsafe { &*(p as *const HandleMap) })
    }

    fn removals_now(&self) -> u64 {
        self.pipelines_ref().map_or(0, HandleMap::removals)
    }

    /// The slot of pipeline `handle` as kept in generation `generation`'s trail: [`crate::pipelines::OVERFLOW`]
    /// when the device does not know it, or when a pipeline was destroyed since the generation began (its handle may
    /// name another pipeline now). Lock-free (the signal handler calls it).
    pub fn slot_of(&self, generation: u64, handle: u64) -> u32 {
        let Some(map) = self.pipelines_ref() else { return handle as u32 };
        if map.removals() != self.removals_at_begin[(generation & 1) as usize].load(Ordering::Relaxed) {
            return crate::pipelines::OVERFLOW;
        }
        map.get(handle).map_or(crate::pipelines::OVERFLOW, |v| v.wrapping_sub(1) as u32)
    }

    /// One dispatch of pipeline `handle` with workgroups `grid` recorded, by the thread recording the buffer; its
    /// index in the buffer, from 1.
    #[inline(always)]
    pub fn record(&self, handle: u64, grid: [u32; 3]) -> u32 {
        let index = self.recorded.load(Ordering::Relaxed).wrapping_add(1);
        // Past TRAIL dispatches the index would leave this generation's half: counted, not kept. (Wrapping: the
        // dispatch hook calls this without a panic guard, and 2^32 dispatches in one buffer would make the index 0.)
        if (index as usize).wrapping_sub(1) < TRAIL {
            // SAFETY: the index is in 1..=TRAIL (just checked); recording hooks run on the buffer's recording thread.
            unsafe { self.record_next(index, handle, grid) };
        } else {
            self.recorded.store(index, Ordering::Release);
        }
        index
    }

    /// [`Self::record`] of dispatch `index` for the thread recording the buffer, which knows that `index` is the
    /// next one ([`Self::recorded`] + 1) and at most [`TRAIL`]: no bounds check, no half computed (the dispatch
    /// hook's common path).
    ///
    /// # Safety
    /// `index` is in `1..=TRAIL`, and the caller is the thread that owns the buffer (it records into it).
    #[inline(always)]
    pub unsafe fn record_next(&self, index: u32, handle: u64, grid: [u32; 3]) {
        debug_assert!((1..=TRAIL).contains(&(index as usize)));
        // SAFETY: `half` points at the first of TRAIL entries of `trail` (set at begin by this thread), and index - 1
        // is below TRAIL by the caller's promise.
        let entry = unsafe { &*self.half.load(Ordering::Relaxed).add(index as usize - 1) };
        entry.handle.store(handle, Ordering::Relaxed);
        entry.grid[0].store(grid[0], Ordering::Relaxed);
        entry.grid[1].store(grid[1], Ordering::Relaxed);
        entry.grid[2].store(grid[2], Ordering::Relaxed);
        self.recorded.store(index, Ordering::Release);
    }

    /// The number of dispatches recorded since begin, read by the thread that records them.
    #[inline(always)]
    pub fn recorded_own(&self) -> u32 {
        self.recorded.load(Ordering::Relaxed)
    }

    /// Whether the first `n` dispatches of the recording now are those of the recording before, in the same order:
    /// its generation's trail against the previous generation's (the other half), compared whole. `false` past
    /// [`TRAIL`]. For the thread that owns the buffer (its submission), while nothing records into it.
    pub fn same_as_previous(&self, n: u32) -> bool {
        let n = n as usize;
        if n > TRAIL {
            return false;
        }
        let generation = self.generation.load(Ordering::Relaxed);
        let now = &self.trail[trail_slot(generation, 0)..trail_slot(generation, 0) + n];
        let before = &self.trail[trail_slot(generation ^ 1, 0)..trail_slot(generation ^ 1, 0) + n];
        // As plain words, so that the comparison is one memcmp.
        const { assert!(std::mem::size_of::<TrailEntry>() == 24 && std::mem::align_of::<TrailEntry>() == 8) };
        // SAFETY: an entry is 24 bytes of atomics with no padding (`TrailEntry`, `repr(C)`: 8 + 3 × 4 + 4, checked
        // above), which have the layout of plain integers, aligned to 8; the only writer of these words is the thread
        // that records the buffer, which is this one (the caller's promise), so no store races these reads; other
        // threads only load them.
        let words = |t: &[TrailEntry]| unsafe { std::slice::from_raw_parts(t.as_ptr() as *const u64, 3 * t.len()) };
        words(now) == words(before)
    }

    pub fn recorded(&self) -> u32 {
        self.recorded.load(Ordering::Acquire)
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The pipeline slot ([`Self::slot_of`]) and workgroups of dispatch `index` (from 1) of generation `generation`,
    /// as kept in its trail, when it is kept (the index is within [`TRAIL`], and the generation is the current one or
    /// the one before). A reader that may race the buffer's next recording checks [`Self::holds_trail_of`] after
    /// reading.
    pub fn dispatch(&self, generation: u64, index: u32) -> Option<(u32, [u32; 3])> {
        let i = (index as usize).checked_sub(1).filter(|&i| i < TRAIL)?;
        if !self.holds_trail_of(generation) {
            return None;
        }
        let (handle, grid) = self.trail.get(trail_slot(generation, i)).map(TrailEntry::read)?;
        Some((self.slot_of(generation, handle), grid))
    }

    /// The pipeline slot ([`Self::slot_of`]) and workgroups of dispatch `index` (from 1, at most [`TRAIL`]) of the
    /// recording now, read by the thread that owns the buffer (its recording or its submission).
    pub fn own_dispatch(&self, index: u32) -> (u32, [u32; 3]) {
        let i = (index as usize).clamp(1, TRAIL) - 1;
        let generation = self.generation.load(Ordering::Relaxed);
        let (handle, grid) = self.trail[trail_slot(generation, i)].read();
        (self.slot_of(generation, handle), grid)
    }

    /// Whether generation `generation`'s trail is still whole: it is the current generation or the one before. After
    /// reading a trail, a reader calls this again (the recording of generation + 2 overwrites it).
    pub fn holds_trail_of(&self, generation: u64) -> bool {
        std::sync::atomic::fence(Ordering::Acquire);
        let now = self.generation.load(Ordering::Relaxed);
        now == generation || now == generation.wrapping_add(1)
    }
}

/// Where dispatch `i` (from 0, below [`TRAIL`]) of generation `generation` is kept in a buffer's trail: even
/// generations in its first half, odd ones in its second.
#[inline(always)]
fn trail_slot(generation: u64, i: usize) -> usize {
    (generation & 1) as usize * TRAIL + i
}

// ---------------------------------------------------------------------------------------------------------------
// Per queue

struct Recent {
    /// The command buffer's [`BufferProgress`] (0: empty entry).
    buffer: AtomicUsize,
    submit: AtomicU64,
    generation: AtomicU64,
    dispatches: AtomicU32,
    /// The buffer's recording ends with a completion marker (`buffer` placement).
    marked: AtomicBool,
}

impl Recent {
    const fn new() -> Recent {
        Recent {
            buffer: AtomicUsize::new(0),
            submit: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            dispatches: AtomicU32::new(0),
            marked: AtomicBool::new(false),
        }
    }
}

/// What the black box keeps of one queue.
pub struct QueueProgress {
    recent: [Recent; RECENT],
    /// Entries written so far.
    head: AtomicU64,
    /// The layer's timeline semaphore on this queue (0: none) and its device's table.
    semaphore: AtomicU64,
    device: AtomicUsize,
    /// The highest submission number the semaphore was seen to reach.
    signaled: AtomicU64,
    /// How progress is known on this queue.
    by: AtomicU32,
}

impl Default for QueueProgress {
    fn default() -> Self {
        Self::new()
    }
}

impl QueueProgress {
    pub const fn new() -> QueueProgress {
        QueueProgress {
            recent: [const { Recent::new() }; RECENT],
            head: AtomicU64::new(0),
            semaphore: AtomicU64::new(0),
            device: AtomicUsize::new(0),
            signaled: AtomicU64::new(0),
            by: AtomicU32::new(0),
        }
    }

    pub fn reset(&self) {
        self.head.store(0, Ordering::Relaxed);
        self.semaphore.store(0, Ordering::Relaxed);
        self.device.store(0, Ordering::Relaxed);
        self.signaled.store(0, Ordering::Relaxed);
        self.by.store(0, Ordering::Relaxed);
    }

    pub fn by(&self) -> By {
        match self.by.load(Ordering::Relaxed) {
            1 => By::BufferMarker,
            2 => By::Submission,
            _ => By::Nothing,
        }
    }

    pub fn set_by(&self, by: By) {
        self.by.store(
            match by {
                By::Nothing => 0,
                By::BufferMarker => 1,
                By::Submission => 2,
            },
            Ordering::Relaxed,
        );
    }

    /// The layer's semaphore on this queue, with the device table that created it.
    pub fn semaphore(&self) -> Option<(vk::Semaphore, usize)> {
        let s = self.semaphore.load(Ordering::Acquire);
        (s != 0).then(|| (ash::vk::Handle::from_raw(s), self.device.load(Ordering::Relaxed)))
    }

    /// Forgets the semaphore (its device is being destroyed); returns it.
    pub fn take_semaphore_of(&self, device: usize) -> Option<vk::Semaphore> {
        if self.device.load(Ordering::Relaxed) != device {
            return None;
        }
        let s = self.semaphore.swap(0, Ordering::AcqRel);
        (s != 0).then(|| ash::vk::Handle::from_raw(s))
    }

    pub fn set_semaphore(&self, semaphore: vk::Semaphore, device: usize) {
        self.device.store(device, Ordering::Relaxed);
        self.semaphore.store(ash::vk::Handle::as_raw(semaphore), Ordering::Release);
    }

    /// The semaphore was seen at `value`.
    pub fn signaled_at(&self, value: u64) {
        self.signaled.fetch_max(value, Ordering::AcqRel);
    }

    pub fn signaled(&self) -> u64 {
        self.signaled.load(Ordering::Acquire)
    }

    /// Submission `submit` carried `buffer` with `dispatches` dispatches. Called by the queue's submitting thread
    /// only (Vulkan makes the application synchronise submissions to one queue).
    pub fn submitted(&self, submit: u64, buffer: &BufferProgress, dispatches: u32) {
        let n = self.head.load(Ordering::Relaxed);
        let e = &self.recent[(n % RECENT as u64) as usize];
        // Invalidate the entry before rewriting it: a reader that sees buffer 0 skips it.
        e.buffer.store(0, Ordering::Release);
        e.submit.store(submit, Ordering::Relaxed);
        e.generation.store(buffer.generation(), Ordering::Relaxed);
        e.dispatches.store(dispatches, Ordering::Relaxed);
        e.marked.store(buffer.marked(), Ordering::Relaxed);
        e.buffer.store(buffer as *const BufferProgress as usize, Ordering::Release);
        self.head.store(n + 1, Ordering::Release);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Reading

/// A dispatch the GPU had started and not finished (buffer markers), or one of the dispatches of the first
/// unfinished submission (submissions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InFlight {
    pub kernel: u32,
    pub submit: u64,
    /// Its index in its command buffer, from 1.
    pub index: u32,
    pub grid: [u32; 3],
}

/// One queue's progress as read.
#[derive(Clone, Copy, Debug, Default)]
pub struct QueueState {
    pub by: By,
    /// Dispatches of the followed submissions known to have completed.
    pub completed: u64,
    /// In flight (markers), or the candidates (submissions): see `by`.
    pub in_flight: [InFlight; MAX_IN_FLIGHT],
    pub n_in_flight: usize,
    /// In-flight dispatches past [`MAX_IN_FLIGHT`] (or whose identity was not kept).
    pub more_in_flight: u32,
    /// Dispatches known not to have started (markers), or of later unfinished submissions (submissions).
    pub not_started: u64,
    /// Some followed work is not known to be complete.
    pub pending: bool,
    /// Pending only through command buffers that no marker covers yet (one marker at some buffers' ends): nothing
    /// shows them unfinished, only not seen to finish.
    pub unconfirmed: bool,
    /// Changes whenever the GPU makes progress or new work arrives (the hang watcher compares it).
    pub signature: u64,
}

impl QueueState {
    pub fn in_flight(&self) -> &[InFlight] {
        &self.in_flight[..self.n_in_flight]
    }

    fn push(&mut self, d: InFlight) {
        if self.n_in_flight < MAX_IN_FLIGHT {
            self.in_flight[self.n_in_flight] = d;
            self.n_in_flight += 1;
        } else {
            self.more_in_flight = self.more_in_flight.saturating_add(1);
        }
    }

    fn push_range(&mut self, b: &BufferProgress, generation: u64, submit: u64, from: u32, to: u32) {
        for index in from..=to {
            match b.dispatch(generation, index) {
                Some((kernel, grid)) => self.push(InFlight { kernel, submit, index, grid }),
                None => self.more_in_flight = self.more_in_flight.saturating_add(1),
            }
        }
    }
}

/// Reads how far the GPU got through the queue's followed submissions, oldest first. Allocates nothing and takes no
/// lock (the signal handler calls it).
pub fn read(q: &QueueProgress) -> QueueState {
    read_placed(q, marker_placement())
}

/// The last of the queue's recent submissions (`first..head`) whose own completion marker says it finished, with the
/// `buffer` placement: every command submitted before it on the queue finished too, marked or not.
fn covered_until(q: &QueueProgress, first: u64, head: u64) -> Option<u64> {
    (first..head).rev().find(|&n| {
        let e = &q.recent[(n % RECENT as u64) as usize];
        let p = e.buffer.load(Ordering::Acquire);
        let dispatches = e.dispatches.load(Ordering::Relaxed);
        if p == 0 || !e.marked.load(Ordering::Relaxed) {
            return false;
        }
        // SAFETY: entries point at command buffer states, which are never freed.
        let b = unsafe { &*(p as *const BufferProgress) };
        match (b.generation() == e.generation.load(Ordering::Relaxed), b.slot.load(Ordering::Acquire), b.markers_ref())
        {
            (true, slot, Some(m)) if slot != NO_SLOT => m.read(slot).1 >= dispatches,
            _ => false,
        }
    })
}

/// [`read`] for markers placed as `placement` (with the `buffer` placement, each buffer's end marked or not as it
/// was recorded).
fn read_placed(q: &QueueProgress, placement: MarkerPlacement) -> QueueState {
    let by = q.by();
    let mut state = QueueState { by, ..Default::default() };
    let head = q.head.load(Ordering::Acquire);
    let first = head.saturating_sub(RECENT as u64);
    let signaled = q.signaled();
    let mut signature = head.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ signaled;
    // Submissions mode: the first unfinished submission is the one in flight; its dispatches are the candidates.
    let mut candidate_submit: Option<u64> = None;
    // Barrier placement: the first unfinished command buffer is the one running.
    let mut running_found = false;
    // Buffer placement: unmarked buffers after the last one a marker covers are candidates up to and including the
    // first marked, unfinished one, which closes the candidates.
    let one_marker_per_buffer = by == By::BufferMarker && placement == MarkerPlacement::Buffer;
    let covered = if one_marker_per_buffer { covered_until(q, first, head) } else { None };
    let mut candidates_closed = false;
    for n in first..head {
        let e = &q.recent[(n % RECENT as u64) as usize];
        let p = e.buffer.load(Ordering::Acquire);
        if p == 0 {
            continue;
        }
        // SAFETY: entries point at command buffer states, which are never freed.
        let b = unsafe { &*(p as *const BufferProgress) };
        let submit = e.submit.load(Ordering::Relaxed);
        let dispatches = e.dispatches.load(Ordering::Relaxed);
        let generation = e.generation.load(Ordering::Relaxed);
        // Finished: the buffer was begun again, or the queue was seen past this submission (the layer's semaphore,
        // or the application's fence or wait for idle, which count with markers too: a buffer too small to be marked
        // has no marker of its own).
        if b.generation() != generation || signaled >= submit {
            state.completed += u64::from(dispatches);
            continue;
        }
        if covered.is_some_and(|c| n <= c) {
            // A later buffer's marker (or its own) says it finished.
            signature = signature.wrapping_mul(31).wrapping_add(u64::from(dispatches));
            state.completed += u64::from(dispatches);
            continue;
        }
        match by {
            By::BufferMarker => {
                let (started, completed) = match (b.slot.load(Ordering::Acquire), b.markers_ref()) {
                    (slot, Some(m)) if slot != NO_SLOT => m.read(slot),
                    _ => {
                        state.pending = true;
                        continue;
                    }
                };
                let (mut started, completed) = (started.min(dispatches), completed.min(dispatches));
                if placement == MarkerPlacement::Buffer && completed < dispatches {
                    // One marker per buffer: the first unfinished buffer's dispatches are the candidates (with the
                    // unmarked ones before it, which no marker covers yet).
                    if !candidates_closed {
                        state.push_range(b, generation, submit, 1, dispatches);
                    } else {
                        state.not_started += u64::from(dispatches);
                    }
                    candidates_closed |= e.marked.load(Ordering::Relaxed);
                    state.pending = true;
                    continue;
                }
                if placement == MarkerPlacement::Barrier && completed < dispatches {
                    // No "started" markers: the first unfinished buffer runs its first unfinished dispatch.
                    started = if running_found { 0 } else { completed + 1 };
                    running_found = true;
                }
                signature = signature.wrapping_mul(31).wrapping_add(u64::from(started) << 32 | u64::from(completed));
                state.completed += u64::from(completed);
                if completed >= dispatches {
                    continue;
                }
                state.pending = true;
                if started > completed {
                    state.push_range(b, generation, submit, completed + 1, started);
                }
                state.not_started += u64::from(dispatches - started.max(completed));
            }
            By::Submission => {
                state.pending = true;
                if candidate_submit.is_none_or(|s| s == submit) {
                    candidate_submit = Some(submit);
                    state.push_range(b, generation, submit, 1, dispatches);
                } else {
                    state.not_started += u64::from(dispatches);
                }
            }
            By::Nothing => state.pending = true,
        }
    }
    state.signature = signature;
    state.unconfirmed = one_marker_per_buffer && state.pending && !candidates_closed;
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "system" fn dummy_write(
        _: vk::CommandBuffer,
        _: vk::PipelineStageFlags,
        _: vk::Buffer,
        _: vk::DeviceSize,
        _: u32,
    ) {
    }

    fn device_with_markers(slots: usize) -> &'static DeviceProgress {
        let d: &'static DeviceProgress = Box::leak(Box::default());
        let words: &'static mut [u32] = Box::leak(vec![0u32; 2 * slots].into_boxed_slice());
        // SAFETY: leaked memory lives forever.
        let m = unsafe {
            Markers::new(words.as_mut_ptr(), slots as u32, vk::Buffer::null(), vk::DeviceMemory::null(), dummy_write)
        };
        assert!(d.markers.set(m).is_ok());
        d
    }

    /// A queue followed `by` (leaked, as the layer's queues live as long as the process).
    fn queue_by(by: By) -> &'static QueueProgress {
        let q: &'static QueueProgress = Box::leak(Box::default());
        q.set_by(by);
        q
    }

    /// `n` command buffer states, each attached to `device`'s markers (and the test pipelines) when given one.
    fn buffers(n: usize, device: Option<&'static DeviceProgress>) -> Vec<&'static BufferProgress> {
        let all: Vec<&'static BufferProgress> = (0..n).map(|_| &*Box::leak(Box::new(BufferProgress::new()))).collect();
        if let Some(device) = device {
            for b in &all {
                b.attach(device, pipelines_by_number());
            }
        }
        all
    }

    /// A device's pipeline map in which handle `k` (1 to 64) is the pipeline of slot `k`.
    fn pipelines_by_number() -> &'static HandleMap {
        static MAP: HandleMap = HandleMap::new(1024);
        for k in 1..=64u64 {
            MAP.insert(k, k + 1);
        }
        &MAP
    }

    fn record(b: &BufferProgress, kernels: &[u32]) {
        b.begin();
        for &k in kernels {
            b.record(u64::from(k), [k, 1, 1]);
        }
    }

    /// Ends `b`'s recording as the layer does with one marker per buffer, at most `min - 1` dispatches unmarked.
    fn end(b: &BufferProgress, min: u32) {
        b.set_marked(b.markers_ref().unwrap().marks_end(b.recorded(), min));
    }

    /// What the GPU would write: `started` and `completed` of the buffer's slot.
    fn gpu_reached(b: &BufferProgress, started: u32, completed: u32) {
        let m = b.markers_ref().unwrap();
        let slot = b.slot.load(Ordering::Relaxed);
        m.word(2 * slot).store(started, Ordering::Relaxed);
        m.word(2 * slot + 1).store(completed, Ordering::Relaxed);
    }

    #[test]
    fn markers_name_the_dispatches_between_completed_and_started() {
        let device = device_with_markers(4);
        let q = queue_by(By::BufferMarker);
        let two = buffers(2, Some(device));
        let (a, b) = (two[0], two[1]);
        assert_ne!(a.slot.load(Ordering::Relaxed), b.slot.load(Ordering::Relaxed));
        record(a, &[10, 11, 12]);
        record(b, &[20, 21, 22, 23]);
        end(a, 1);
        end(b, 1);
        a.markers_ref().unwrap().reset(a.slot.load(Ordering::Relaxed));
        q.submitted(1, a, 3);
        q.submitted(2, b, 4);
        gpu_reached(a, 3, 3);
        gpu_reached(b, 3, 1);
        let s = read_placed(q, MarkerPlacement::Sync);
        assert_eq!(s.by, By::BufferMarker);
        assert!(s.pending);
        assert_eq!(s.completed, 3 + 1);
        let names: Vec<(u32, u64, u32)> = s.in_flight().iter().map(|d| (d.kernel, d.submit, d.index)).collect();
        assert_eq!(names, [(21, 2, 2), (22, 2, 3)]);
        assert_eq!(s.not_started, 1);
        let before = s.signature;
        // Without "started" markers the first dispatch no completion marker covers is the one in flight.
        let barrier = read_placed(q, MarkerPlacement::Barrier);
        let names: Vec<(u32, u64, u32)> = barrier.in_flight().iter().map(|d| (d.kernel, d.submit, d.index)).collect();
        assert_eq!((names, barrier.not_started), (vec![(21, 2, 2)], 2));
        // One marker per command buffer (its end): every dispatch of the first unfinished one is a candidate, and only
        // whole buffers count as completed.
        let buffer = read_placed(q, MarkerPlacement::Buffer);
        let names: Vec<u32> = buffer.in_flight().iter().map(|d| d.kernel).collect();
        assert_eq!((names, buffer.completed), (vec![20, 21, 22, 23], 3));
        gpu_reached(b, 4, 4);
        let done = read_placed(q, MarkerPlacement::Sync);
        assert!(!done.pending);
        assert_eq!((done.completed, done.n_in_flight, done.not_started), (7, 0, 0));
        assert_ne!(done.signature, before, "progress changes the signature");
    }

    #[test]
    fn unmarked_small_buffers_are_covered_by_a_later_marker_and_are_candidates_until_then() {
        // At most 4 dispatches unmarked in a row: a (2) has no marker, b (2 + 4) has, c (1) has none, d (1 + 5) has.
        let device = device_with_markers(8);
        let q = queue_by(By::BufferMarker);
        let bufs = buffers(4, Some(device));
        for (b, kernels) in bufs.iter().zip([&[1u32, 2][..], &[3, 4, 5, 6], &[7], &[8, 9, 10, 11, 12]]) {
            record(b, kernels);
            end(b, 5);
        }
        assert_eq!(bufs.iter().map(|b| b.marked()).collect::<Vec<_>>(), [false, true, false, true]);
        for (i, b) in bufs.iter().enumerate() {
            b.markers_ref().unwrap().reset(b.slot.load(Ordering::Relaxed));
            q.submitted(i as u64 + 1, b, b.recorded());
        }
        let kernels = |s: &QueueState| s.in_flight().iter().map(|d| d.kernel).collect::<Vec<_>>();
        let read = || read_placed(q, MarkerPlacement::Buffer);
        // Nothing marked yet: a's dispatches and b's are the candidates (b's marker closes them), c and d not started.
        let s = read();
        assert_eq!((kernels(&s), s.completed, s.not_started, s.pending), (vec![1, 2, 3, 4, 5, 6], 0, 6, true));
        // b's marker covers a too.
        gpu_reached(bufs[1], 0, 4);
        let t = read();
        assert_eq!((kernels(&t), t.completed, t.not_started), (vec![7, 8, 9, 10, 11, 12], 6, 0));
        assert_ne!(t.signature, s.signature, "a marker that covers more is progress");
        // d's marker covers c.
        gpu_reached(bufs[3], 0, 5);
        let u = read();
        assert_eq!((u.completed, u.n_in_flight, u.pending), (12, 0, false));
    }

    #[test]
    fn buffers_are_marked_once_enough_dispatches_went_unmarked_whatever_their_sizes() {
        // ggml-vulkan's buffers of a decode token on a 1.1B model, two tokens, at most 99 dispatches unmarked in a
        // row: marked where the count since the last marked end reaches 100.
        let m = device_with_markers(1).markers.get().unwrap();
        let sizes = [12, 22, 40, 100, 100, 60, 1, 12, 22, 40, 100, 100, 60, 1];
        let marked: Vec<bool> = sizes.iter().map(|&n| m.marks_end(n, 100)).collect();
        // 12, 34, 74, 174 (marked), 100 (marked), 60, 61, 73, 95, 135 (marked), 100 (marked), 100 (marked), 60, 61.
        let want = [false, false, false, true, true, false, false, false, false, true, true, true, false, false];
        assert_eq!(marked, want);
        // Many small buffers are marked too (a minimum per buffer would mark none of them).
        let m = device_with_markers(1).markers.get().unwrap();
        let small: Vec<bool> = (0..10).map(|_| m.marks_end(3, 10)).collect();
        assert_eq!(small.iter().filter(|&&b| b).count(), 2, "{small:?}");
        // Every buffer, by default.
        assert!((0..5).all(|_| m.marks_end(1, 1)));
    }

    #[test]
    fn an_unmarked_last_buffer_is_the_candidate_until_the_application_sees_its_fence() {
        let device = device_with_markers(4);
        let q = queue_by(By::BufferMarker);
        let two = buffers(2, Some(device));
        let (a, b) = (two[0], two[1]);
        record(a, &[1, 2, 3]);
        end(a, 2);
        record(b, &[4]);
        end(b, 2);
        q.submitted(1, a, 3);
        q.submitted(2, b, 1);
        let r = read_placed(q, MarkerPlacement::Buffer);
        assert!(r.pending && !r.unconfirmed, "a's own end marker is not written: a is unfinished");
        gpu_reached(a, 0, 3);
        let s = read_placed(q, MarkerPlacement::Buffer);
        let names: Vec<u32> = s.in_flight().iter().map(|d| d.kernel).collect();
        assert_eq!((names, s.completed, s.pending), (vec![4], 3, true));
        // Nothing shows b unfinished: it was only not seen to finish (the hang watcher waits for the application to
        // wait for it).
        assert!(s.unconfirmed);
        // The application's fence of submission 2 (or its wait for the queue to be idle) says it finished; with no
        // marker of its own and none after it, nothing else would.
        q.signaled_at(2);
        let t = read_placed(q, MarkerPlacement::Buffer);
        assert_eq!((t.completed, t.pending, t.unconfirmed), (4, false, false));
    }

    #[test]
    fn a_buffer_begun_again_finished_its_previous_submission() {
        let device = device_with_markers(2);
        let q = queue_by(By::BufferMarker);
        let a = buffers(1, Some(device))[0];
        record(a, &[1, 2]);
        q.submitted(1, a, 2);
        assert!(read(q).pending);
        a.begin();
        let s = read(q);
        assert!(!s.pending);
        assert_eq!(s.completed, 2);
    }

    #[test]
    fn submissions_name_the_first_unfinished_submission_as_candidates() {
        let q = queue_by(By::Submission);
        let bufs = buffers(3, None);
        record(bufs[0], &[1, 2]);
        record(bufs[1], &[3]);
        record(bufs[2], &[4, 5]);
        for (i, b) in bufs.iter().enumerate() {
            q.submitted(i as u64 + 1, b, b.recorded());
        }
        q.signaled_at(1);
        let s = read(q);
        assert_eq!(s.completed, 2);
        assert_eq!(s.in_flight().iter().map(|d| d.kernel).collect::<Vec<_>>(), [3]);
        assert_eq!(s.not_started, 2);
        q.signaled_at(3);
        assert!(!read(q).pending);
    }

    #[test]
    fn slots_are_reused_and_run_out_without_failing() {
        let device = device_with_markers(2);
        let m = device.markers.get().unwrap();
        let (x, y) = (m.claim(), m.claim());
        assert_eq!((x, y, m.claim()), (0, 1, NO_SLOT));
        m.release(x);
        assert_eq!(m.claim(), x);
        assert_eq!(m.read(99), (0, 0));
    }
}
