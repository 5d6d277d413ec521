//! Kernel slots and the launch-key table.
//!
//! Every distinct kernel (API + name) gets a slot id. A slot holds the kernel's counters and its
//! bounded shape histogram, all atomics. A launch finds its slot through [`lookup`]: an
//! open-addressing table keyed by the pointer the launch passes (host stub, `cudaKernel_t`,
//! `hipFunction_t`, `CUfunction`), read without locks. Everything that allocates or locks happens
//! at registration time or at the first launch of a key the table does not know yet.
//!
//! Memory is never freed while the process runs: slots live in chunks that are allocated on demand
//! and leaked, and a grown key table leaks its predecessor (which readers may still be probing);
//! the total stays under twice the final table size.

use format::fork::ForkHandlers;
use std::collections::HashMap;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use format::slots::{ClaimedKey, SlotChunks};
use format::spin::SpinLock;

/// Which entry point family a kernel was seen through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    /// CUDA runtime: registered by `__cudaRegisterFunction`, launched by `cudaLaunchKernel` & co.
    Cuda,
    /// CUDA driver: `CUfunction` launched by `cuLaunchKernel(Ex)`.
    Cu,
    /// HIP runtime: registered by `__hipRegisterFunction`, launched by `hipLaunchKernel` & co.
    Hip,
    /// HIP module API: `hipFunction_t` from `hipModuleGetFunction` (rocBLAS/Tensile kernels).
    HipModule,
    /// The overflow slot (id 0) used once the kernel table is full.
    Overflow,
}

impl Api {
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Cuda => "cuda",
            Api::Cu => "cu",
            Api::Hip => "hip",
            Api::HipModule => "hip_module",
            Api::Overflow => "overflow",
        }
    }
}

/// Where a kernel's name came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameSource {
    /// `__cudaRegisterFunction` / `__hipRegisterFunction` at static initialisation.
    Register,
    /// `hipModuleGetFunction` / `cuModuleGetFunction`.
    GetFunction,
    /// Asked from the runtime at the first launch of an unknown key (`cudaFuncGetName`,
    /// `cuFuncGetName`, `cuKernelGetName`, `hipKernelNameRef(ByPtr)`).
    Runtime,
    /// Nothing could name it: the name is made from the key (`?cuda@0x7f…`).
    Synthetic,
    /// The overflow slot.
    None,
}

impl NameSource {
    pub fn as_str(self) -> &'static str {
        match self {
            NameSource::Register => "register",
            NameSource::GetFunction => "get_function",
            NameSource::Runtime => "runtime",
            NameSource::Synthetic => "synthetic",
            NameSource::None => "none",
        }
    }
}

/// Grid and block dimensions of a launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Shape {
    pub grid: [u32; 3],
    pub block: [u32; 3],
}

impl Shape {
    pub fn words(&self) -> [u64; 3] {
        let pack = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
        [pack(self.grid[0], self.grid[1]), pack(self.grid[2], self.block[0]), pack(self.block[1], self.block[2])]
    }

    pub fn from_words(w: [u64; 3]) -> Shape {
        let lo = |v: u64| v as u32;
        let hi = |v: u64| (v >> 32) as u32;
        Shape { grid: [lo(w[0]), hi(w[0]), lo(w[1])], block: [hi(w[1]), lo(w[2]), hi(w[2])] }
    }
}

/// Distinct shapes kept per kernel; further shapes are counted in the kernel's "other" bucket.
pub const SHAPE_BUCKETS: usize = 8;

/// A counter that is bumped without a locked read-modify-write in the common case.
///
/// A locked add (`lock xadd`) waits for the store buffer, which the runtime has just filled with
/// the launch's commands. Nearly every process launches all its kernels from one thread, so a
/// kernel's slot has an owner thread (see [`Slot::record`]) that adds into `owned` with a plain
/// load and store, since no other thread writes it; every other thread adds into `shared`
/// atomically. The sum of the two is exact.
#[derive(Default)]
pub struct Counter {
    owned: AtomicU64,
    shared: AtomicU64,
}

impl Counter {
    #[inline(always)]
    fn add(&self, n: u64, owner: bool) {
        if owner {
            self.owned.store(self.owned.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
        } else {
            self.shared.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub fn load(&self) -> u64 {
        self.owned.load(Ordering::Relaxed).wrapping_add(self.shared.load(Ordering::Relaxed))
    }

    fn reset(&self) {
        self.owned.store(0, Ordering::Relaxed);
        self.shared.store(0, Ordering::Relaxed);
    }
}

/// One launch shape of a kernel and its count: the shape's words claimed lock-free ([`ClaimedKey`]).
#[derive(Default)]
struct ShapeEntry {
    words: ClaimedKey<3>,
    count: Counter,
}

impl ShapeEntry {
    /// Counts `n` launches into this entry if it holds `words`, or was empty and is now claimed
    /// for them; `false` if it holds another shape (or another thread is writing it).
    #[inline(always)]
    fn try_record(&self, words: [u64; 3], n: u64, owner: bool) -> bool {
        let held = self.words.holds_or_claims(words);
        if held {
            self.count.add(n, owner);
        }
        held
    }

    fn snapshot(&self) -> Option<(Shape, u64)> {
        self.words.get().map(|words| (Shape::from_words(words), self.count.load()))
    }

    fn reset(&self) {
        self.words.clear();
        self.count.reset();
    }
}

/// A kernel's shapes after its first: allocated when a second distinct shape is launched (the
/// only allocation a launch can make), so that the many kernels with one shape, and the
/// registered-but-unused ones, cost no more than their slot.
#[derive(Default)]
struct MoreShapes {
    entries: [ShapeEntry; SHAPE_BUCKETS - 1],
    other: Counter,
}

impl MoreShapes {
    #[inline]
    fn record(&self, words: [u64; 3], n: u64, owner: bool) {
        if !self.entries.iter().any(|entry| entry.try_record(words, n, owner)) {
            self.other.add(n, owner);
        }
    }
}

/// A kernel's launches by shape at one moment: the first [`SHAPE_BUCKETS`] distinct shapes (in
/// the order they were first seen; `None` for unused entries) and the count of all others.
pub struct ShapeCounts {
    pub entries: [Option<(Shape, u64)>; SHAPE_BUCKETS],
    pub other: u64,
}

impl ShapeCounts {
    /// Executions in total: every launch is counted in exactly one shape entry or in "other".
    pub fn launches(&self) -> u64 {
        self.entries.iter().flatten().fold(self.other, |sum, (_, n)| sum.wrapping_add(*n))
    }
}

/// Immutable description of a slot, published once before the slot id becomes visible.
pub struct SlotMeta {
    pub name: Box<str>,
    pub api: Api,
    pub source: NameSource,
}

/// One kernel: counters and shape histogram.
///
/// A launch with the kernel's first shape, on the slot's owner thread, reads and writes the first
/// cache line only: between two launches of a kernel the runtime's own work pushes the observer's
/// data out of the nearest caches, and each further line (and each pointer followed to reach it)
/// added measurable time per launch in llama.cpp decoding (`bench/gpu/decode_ab.cpp`). There is
/// no separate launch counter for the same reason: launches are the sum of the shape counts.
#[repr(C, align(64))]
#[derive(Default)]
pub struct Slot {
    first_shape: ShapeEntry,
    /// [`format::runtime::thread_token`] of the thread that counts into the `owned` halves of this
    /// slot's counters (the first that recorded a launch); 0 while there is none.
    owner: AtomicUsize,
    more_shapes: AtomicPtr<MoreShapes>,
    // Second cache line: what launches touch only when they fail or come from a graph replay.
    meta: AtomicPtr<SlotMeta>,
    /// Of the launches, those whose launch call returned an error.
    pub errors: Counter,
    /// Of the launches, those that came from graph replays.
    pub graph: Counter,
    /// Launches recorded into a stream capture (not executed by themselves). Counted under the
    /// graph bookkeeping's lock, so a plain atomic.
    pub captured: AtomicU64,
}

const _: () = assert!(std::mem::offset_of!(Slot, more_shapes) + std::mem::size_of::<usize>() <= 64);

impl Slot {
    pub fn meta(&self) -> Option<&'static SlotMeta> {
        let meta = self.meta.load(Ordering::Acquire);
        // SAFETY: a non-null meta pointer comes from `Box::into_raw` in `publish_slot` and is never
        // freed or replaced.
        (!meta.is_null()).then(|| unsafe { &*meta })
    }

    /// Counts `n` executions of this kernel with `shape`, on the thread with token `thread`
    /// ([`format::runtime::thread_token`]).
    #[inline]
    pub fn record(&self, shape: &Shape, n: u64, failed: bool, via_graph: bool, thread: usize) {
        let owner = self.is_owner(thread);
        if failed {
            self.errors.add(n, owner);
        }
        if via_graph {
            self.graph.add(n, owner);
        }
        let words = shape.words();
        if !self.first_shape.try_record(words, n, owner) {
            self.more_shapes_table().record(words, n, owner);
        }
    }

    /// Whether `thread` owns this slot's counters; the first thread to ask becomes the owner.
    #[inline(always)]
    fn is_owner(&self, thread: usize) -> bool {
        if thread == 0 {
            return false;
        }
        match self.owner.load(Ordering::Relaxed) {
            owner if owner == thread => true,
            0 => self.owner.compare_exchange(0, thread, Ordering::Relaxed, Ordering::Relaxed).is_ok(),
            _ => false,
        }
    }

    /// Launches by shape now; `launches()` of the result is the kernel's execution count.
    pub fn shape_counts(&self) -> ShapeCounts {
        let mut entries = [None; SHAPE_BUCKETS];
        entries[0] = self.first_shape.snapshot();
        let mut other = 0;
        if let Some(more) = self.more_shapes() {
            for (out, entry) in entries[1..].iter_mut().zip(&more.entries) {
                *out = entry.snapshot();
            }
            other = more.other.load();
        }
        ShapeCounts { entries, other }
    }

    fn more_shapes(&self) -> Option<&MoreShapes> {
        let table = self.more_shapes.load(Ordering::Acquire);
        // SAFETY: a non-null table pointer comes from `Box::into_raw` in `more_shapes_table` and
        // is never freed.
        (!table.is_null()).then(|| unsafe { &*table })
    }

    #[inline]
    fn more_shapes_table(&self) -> &MoreShapes {
        match self.more_shapes() {
            Some(table) => table,
            None => self.allocate_more_shapes(),
        }
    }

    #[cold]
    #[inline(never)]
    fn allocate_more_shapes(&self) -> &MoreShapes {
        let fresh = Box::into_raw(Box::<MoreShapes>::default());
        match self.more_shapes.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: `fresh` was just leaked from a Box and is now owned by the slot forever.
            Ok(_) => unsafe { &*fresh },
            Err(winner) => {
                // SAFETY: `fresh` was never published; this thread still owns it.
                drop(unsafe { Box::from_raw(fresh) });
                // SAFETY: `winner` is a published, never-freed table.
                unsafe { &*winner }
            }
        }
    }

    fn reset_counters(&self) {
        for counter in [&self.errors, &self.graph] {
            counter.reset();
        }
        self.captured.store(0, Ordering::Relaxed);
        self.owner.store(0, Ordering::Relaxed);
        self.first_shape.reset();
        if let Some(more) = self.more_shapes() {
            more.entries.iter().for_each(ShapeEntry::reset);
            more.other.reset();
        }
    }
}

/// 1024 chunks of 4096 slots.
type Slots = SlotChunks<Slot, 12, 1024>;
/// Hard limit of slot ids (about 4 million kernels); `BACKSCOPE_MAX_KERNELS` may only lower it.
pub const HARD_MAX_KERNELS: u32 = Slots::MAX_ID;
pub use format::env::DEFAULT_MAX_KERNELS;
/// Slot id of the overflow bucket.
pub const OVERFLOW_SLOT: u32 = 0;

static SLOTS: Slots = Slots::new();
/// Number of published slots (ids `0..SLOT_COUNT`); slot 0 is the overflow slot.
static SLOT_COUNT: AtomicU32 = AtomicU32::new(0);
/// Set once a kernel had to go into the overflow slot.
static OVERFLOWED: AtomicBool = AtomicBool::new(false);
static MAX_KERNELS: AtomicU32 = AtomicU32::new(DEFAULT_MAX_KERNELS);

/// The slot `id`, if it exists.
#[inline]
pub fn slot(id: u32) -> Option<&'static Slot> {
    SLOTS.get(id)
}

pub fn slot_count() -> u32 {
    SLOT_COUNT.load(Ordering::Acquire)
}

pub fn overflowed() -> bool {
    OVERFLOWED.load(Ordering::Relaxed)
}

pub fn max_kernels() -> u32 {
    MAX_KERNELS.load(Ordering::Relaxed)
}

struct KeyEntry {
    key: AtomicUsize,
    slot: AtomicU32,
}

struct KeyTable {
    mask: usize,
    entries: Box<[KeyEntry]>,
}

impl KeyTable {
    fn with_capacity(capacity: usize) -> KeyTable {
        let capacity = capacity.next_power_of_two();
        let entries = (0..capacity).map(|_| KeyEntry { key: AtomicUsize::new(0), slot: AtomicU32::new(0) }).collect();
        KeyTable { mask: capacity - 1, entries }
    }

    #[inline]
    fn find(&self, key: usize) -> Option<u32> {
        let mut i = hash(key) & self.mask;
        for _ in 0..self.entries.len() {
            let entry = &self.entries[i];
            let k = entry.key.load(Ordering::Acquire);
            if k == key {
                return Some(entry.slot.load(Ordering::Relaxed));
            }
            if k == 0 {
                return None;
            }
            i = (i + 1) & self.mask;
        }
        None
    }

    /// Inserts or updates `key`; returns true if it added a key. Single writer (registry lock).
    fn put(&self, key: usize, id: u32) -> bool {
        let mut i = hash(key) & self.mask;
        loop {
            let entry = &self.entries[i];
            let k = entry.key.load(Ordering::Relaxed);
            if k == key {
                entry.slot.store(id, Ordering::Release);
                return false;
            }
            if k == 0 {
                // Value first, then the key with Release: a reader that sees the key sees the value.
                entry.slot.store(id, Ordering::Relaxed);
                entry.key.store(key, Ordering::Release);
                return true;
            }
            // The caller keeps the load factor at or below 1/2, so an empty entry exists.
            i = (i + 1) & self.mask;
        }
    }
}

#[inline]
fn hash(key: usize) -> usize {
    let h = (key as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h ^ (h >> 29)) as usize
}

/// Table key of a launch pointer. 0 marks an empty entry, so a null pointer (an invalid launch the
/// runtime will reject) is stored under an address no object can have.
#[inline]
fn table_key(ptr: usize) -> usize {
    if ptr == 0 {
        usize::MAX
    } else {
        ptr
    }
}

static KEYS: AtomicPtr<KeyTable> = AtomicPtr::new(ptr::null_mut());

struct Registry {
    by_name: HashMap<(Api, Box<str>), u32>,
    keys_used: usize,
}

static REGISTRY: SpinLock<Option<Registry>> = SpinLock::new(None);

/// Sets up slot 0 and the key table. Called once per process image, during observer start-up.
pub fn init(max_kernels: u32) {
    MAX_KERNELS.store(max_kernels.clamp(1, HARD_MAX_KERNELS), Ordering::Relaxed);
    let mut registry = REGISTRY.lock();
    if registry.is_some() {
        return;
    }
    KEYS.store(Box::into_raw(Box::new(KeyTable::with_capacity(4096))), Ordering::Release);
    publish_slot(OVERFLOW_SLOT, "(overflow)", Api::Overflow, NameSource::None);
    *registry = Some(Registry { by_name: HashMap::new(), keys_used: 0 });
}

/// Slot of a launch key, if known. The hot path: no locks, no allocation.
#[inline]
pub fn lookup(ptr: usize) -> Option<u32> {
    let table = KEYS.load(Ordering::Acquire);
    if table.is_null() {
        return None;
    }
    // SAFETY: published key tables are leaked and never freed.
    unsafe { &*table }.find(table_key(ptr))
}

/// Registers `name` (of `api`) and maps the launch key `ptr` to its slot. Registering the same
/// (api, name) again, under the same key or another, reuses the slot. Returns the slot id.
pub fn register(api: Api, ptr: usize, name: &[u8], source: NameSource) -> Option<u32> {
    let name: Box<str> = String::from_utf8_lossy(name).into();
    let mut guard = REGISTRY.lock();
    let registry = guard.as_mut()?;
    Some(register_locked(registry, api, ptr, name, source))
}

/// Like [`register`], but keeps an existing mapping of `ptr` (used for keys named at their first
/// launch, where another thread may have won the race).
pub fn register_if_absent(api: Api, ptr: usize, name: &[u8], source: NameSource) -> Option<u32> {
    let name: Box<str> = String::from_utf8_lossy(name).into();
    let mut guard = REGISTRY.lock();
    let registry = guard.as_mut()?;
    if let Some(id) = lookup(ptr) {
        return Some(id);
    }
    Some(register_locked(registry, api, ptr, name, source))
}

/// Maps one more launch key to an existing slot: CUDA 12.4+ launches `<<<>>>` through a
/// `cudaKernel_t` obtained from the host stub by `__cudaGetKernel`.
pub fn alias(ptr: usize, id: u32) {
    let mut guard = REGISTRY.lock();
    if let Some(registry) = guard.as_mut() {
        put_key(registry, table_key(ptr), id);
    }
}

fn register_locked(registry: &mut Registry, api: Api, ptr: usize, name: Box<str>, source: NameSource) -> u32 {
    let id = match registry.by_name.get(&(api, name.clone())) {
        Some(&id) => id,
        None => {
            let next = SLOT_COUNT.load(Ordering::Relaxed);
            if next > MAX_KERNELS.load(Ordering::Relaxed) {
                OVERFLOWED.store(true, Ordering::Relaxed);
                OVERFLOW_SLOT
            } else {
                publish_slot(next, &name, api, source);
                registry.by_name.insert((api, name), next);
                next
            }
        }
    };
    put_key(registry, table_key(ptr), id);
    id
}

fn publish_slot(id: u32, name: &str, api: Api, source: NameSource) {
    SLOTS.ensure(id);
    let meta = Box::new(SlotMeta { name: name.into(), api, source });
    if let Some(slot) = slot(id) {
        slot.meta.store(Box::into_raw(meta), Ordering::Release);
    }
    SLOT_COUNT.store(id + 1, Ordering::Release);
}

fn put_key(registry: &mut Registry, key: usize, id: u32) {
    let current = KEYS.load(Ordering::Acquire);
    // SAFETY: published key tables are never freed; the registry lock makes this the only writer.
    let table = unsafe { &*current };
    if table.put(key, id) {
        registry.keys_used += 1;
    }
    if registry.keys_used * 2 > table.entries.len() {
        // Grow by 4x and publish; readers still probing the old table see a consistent (older)
        // snapshot, and a key they miss sends them to the cold path, which looks again here.
        let grown = KeyTable::with_capacity(table.entries.len() * 4);
        for entry in table.entries.iter() {
            let k = entry.key.load(Ordering::Relaxed);
            if k != 0 {
                grown.put(k, entry.slot.load(Ordering::Relaxed));
            }
        }
        KEYS.store(Box::into_raw(Box::new(grown)), Ordering::Release);
    }
}

/// The registry lock around `fork`: taken before, so that the child finds the tables consistent.
pub const FORK_LOCK: ForkHandlers =
    ForkHandlers { prepare: Some(acquire_for_fork), parent: Some(release_for_fork), child: Some(release_for_fork) };
/// In a forked child: start counting from zero, so the child's trace holds only its own launches.
pub const FORK_RESET: ForkHandlers = ForkHandlers::child(reset_counters_in_child);

fn acquire_for_fork() {
    REGISTRY.acquire_for_fork();
}

fn release_for_fork() {
    REGISTRY.release_for_fork();
}

/// Runs single-threaded (atfork child handler).
fn reset_counters_in_child() {
    for id in 0..SLOT_COUNT.load(Ordering::Relaxed) {
        if let Some(slot) = slot(id) {
            slot.reset_counters();
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
