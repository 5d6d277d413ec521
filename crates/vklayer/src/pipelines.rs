//! Pipelines, shader modules and devices: what the trace's definitions say, and the per-pipeline
//! counters that submissions add to.
//!
//! Every compute pipeline gets a slot id (1, 2, …; 0 is the overflow kernel, used once
//! `BACKSCOPE_MAX_KERNELS` pipelines exist, and for dispatches the layer could not attribute). A
//! slot's counters are atomics in chunks that are allocated on demand and never freed, so a
//! submission adds to them without a lock, from any thread. What describes a slot (name, device,
//! SPIR-V hash, workgroup size, driver statistics) is kept under one lock with the shader modules
//! and the devices: it changes only when objects are created or named, and is read by the writer.
//!
//! A pipeline's definition is written when it is first counted in a window (or at exit): ggml-vulkan
//! names a pipeline right after creating it, so by then the name is known. A name set after the
//! definition was written is ignored.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use format::record::source;

use crate::shader::LocalSize;
use format::slots::{ClaimedKey, SlotChunks};
use format::spin::SpinLock;

/// Slot id of the overflow kernel.
pub const OVERFLOW: u32 = 0;
/// Distinct workgroup counts kept per pipeline; the others are counted together (`other_shapes`).
pub const SHAPE_BUCKETS: usize = 8;
/// Longest pipeline name kept (ggml's are under 100 bytes).
pub const MAX_NAME_BYTES: usize = 1024;

/// One workgroup-count shape of a pipeline and its dispatches: the counts' words (x and y, then z) claimed
/// lock-free ([`ClaimedKey`]).
#[derive(Default)]
struct ShapeEntry {
    grid: ClaimedKey<2>,
    count: AtomicU64,
}

impl ShapeEntry {
    fn try_add(&self, xy: u64, z: u32, n: u64) -> bool {
        let held = self.grid.holds_or_claims([xy, u64::from(z)]);
        if held {
            self.count.fetch_add(n, Ordering::Relaxed);
        }
        held
    }
}

/// A pipeline's counters. Its dispatches are the sum of its shape counts (no separate total: one
/// atomic add per submitted entry is enough).
#[derive(Default)]
pub struct Counters {
    /// Of the dispatches, those in submissions that returned an error.
    pub errors: AtomicU64,
    shapes: [ShapeEntry; SHAPE_BUCKETS],
    other: AtomicU64,
    /// The workgroup size, for the `shapes` block (`[0,0,0]` when unknown); set before the slot is
    /// published.
    local_size: [AtomicU32; 3],
    /// The slot's definition is in the trace file (set by the writer; read by the crash handler,
    /// which may name only defined kernels and cannot take the registry's lock).
    defined: AtomicBool,
}

/// A pipeline's dispatches by workgroup counts at one moment.
pub struct ShapeCounts {
    pub entries: [Option<([u32; 3], u64)>; SHAPE_BUCKETS],
    pub other: u64,
}

impl ShapeCounts {
    /// Dispatches in total: each is counted in exactly one shape entry or in `other`.
    pub fn dispatches(&self) -> u64 {
        self.entries.iter().flatten().fold(self.other, |sum, (_, n)| sum.wrapping_add(*n))
    }
}

impl Counters {
    /// Counts `n` dispatches with workgroup counts `grid`.
    #[inline]
    pub fn add(&self, grid: [u32; 3], n: u64) {
        let xy = u64::from(grid[0]) | (u64::from(grid[1]) << 32);
        if !self.shapes.iter().any(|e| e.try_add(xy, grid[2], n)) {
            self.other.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub fn shape_counts(&self) -> ShapeCounts {
        let mut entries = [None; SHAPE_BUCKETS];
        for (out, e) in entries.iter_mut().zip(&self.shapes) {
            if let Some([xy, z]) = e.grid.get() {
                let grid = [xy as u32, (xy >> 32) as u32, z as u32];
                *out = Some((grid, e.count.load(Ordering::Relaxed)));
            }
        }
        ShapeCounts { entries, other: self.other.load(Ordering::Relaxed) }
    }

    pub fn local_size(&self) -> [u32; 3] {
        [0, 1, 2].map(|i| self.local_size[i].load(Ordering::Relaxed))
    }
}

/// 1024 chunks of 1024 slots.
type Slots = SlotChunks<Counters, 10, 1024>;
/// Most slots (about a million pipelines); `BACKSCOPE_MAX_KERNELS` may only lower it.
pub const HARD_MAX_SLOTS: u32 = Slots::MAX_ID;

static SLOTS: Slots = Slots::new();
/// Slots `0..SLOT_COUNT` exist (0, the overflow kernel, always).
static SLOT_COUNT: AtomicU32 = AtomicU32::new(0);
static OVERFLOWED: AtomicBool = AtomicBool::new(false);

/// The counters of slot `id`.
#[inline]
pub fn counters(id: u32) -> Option<&'static Counters> {
    SLOTS.get(id)
}

/// Whether slot `id`'s definition is in the trace file. Lock-free (the crash handler asks).
pub fn is_defined(id: u32) -> bool {
    counters(id).is_some_and(|c| c.defined.load(Ordering::Acquire))
}

/// The writer wrote slot `id`'s definition.
pub fn mark_defined(id: u32) {
    if let Some(c) = counters(id) {
        c.defined.store(true, Ordering::Release);
    }
}

pub fn slot_count() -> u32 {
    SLOT_COUNT.load(Ordering::Acquire)
}

/// Some pipeline had to go into the overflow slot because the table was full.
pub fn overflowed() -> bool {
    OVERFLOWED.load(Ordering::Relaxed)
}

/// One driver statistic of a pipeline executable.
#[derive(Clone, Debug, PartialEq)]
pub struct Stat {
    pub executable: String,
    pub name: String,
    pub value: f64,
}

/// What the trace's definition of a pipeline says.
#[derive(Clone, Debug)]
pub struct Meta {
    pub name: Vec<u8>,
    /// `debug_name` or `spirv_hash`.
    pub source: &'static str,
    /// The `device` record it names (none when its device could not be described).
    pub device: Option<u32>,
    pub spirv_hash: u64,
    pub local_size: Option<[u32; 3]>,
    pub spirv_object: Option<Arc<[u8]>>,
    pub stats: Vec<Stat>,
}

/// A shader module: the hash and workgroup-size recipe of its code, and where the code came from.
#[derive(Debug)]
pub struct Module {
    pub hash: u64,
    pub local_size: LocalSize,
    pub object: Option<Arc<[u8]>>,
}

/// A physical device as the trace's `device` record describes it.
#[derive(Clone, Debug, Default)]
pub struct DeviceFacts {
    pub id: u32,
    pub name: Vec<u8>,
    pub driver: Vec<u8>,
    pub driver_info: Vec<u8>,
    pub driver_version: u32,
    pub api_version: [u32; 3],
    pub vendor_id: u32,
    pub device_id: u32,
    pub device_type: &'static str,
    pub subgroup_size: u32,
    pub subgroup_size_min: u32,
    pub subgroup_size_max: u32,
    pub integer_dot: bool,
    pub cooperative_matrix: bool,
    /// ggml-vulkan's `shader_core_count` and the extension it came from ([`crate::device::facts`]).
    pub shader_core_count: (u32, &'static str),
    pub flags: Vec<(&'static str, bool)>,
    /// The device answered from a profile (`crate::impersonate`): profile id and source, real name and driver.
    pub impersonated: Option<ImpersonatedFacts>,
}

#[derive(Clone, Debug, Default)]
pub struct ImpersonatedFacts {
    pub profile: Vec<u8>,
    pub profile_source: Vec<u8>,
    pub real_name: Vec<u8>,
    pub real_driver: Vec<u8>,
}

struct Registry {
    max_slots: u32,
    /// Index: slot id. `None` for the overflow slot.
    metas: Vec<Option<Meta>>,
    /// The writer has written the slot's definition.
    defined: Vec<bool>,
    /// By (device dispatch key, module handle).
    modules: HashMap<(u64, u64), Arc<Module>>,
    devices: Vec<DeviceFacts>,
    /// Devices whose record is written.
    devices_written: usize,
    /// Device ids by the physical device's handle.
    device_ids: HashMap<u64, u32>,
}

static REGISTRY: SpinLock<Option<Registry>> = SpinLock::new(None);

/// Sets up the slot table (start-up); slot 0 is the overflow kernel.
pub fn init(max_kernels: u32) {
    let mut registry = REGISTRY.lock();
    if registry.is_none() {
        SLOTS.ensure(0);
        SLOT_COUNT.store(1, Ordering::Release);
        *registry = Some(Registry {
            max_slots: max_kernels.clamp(1, HARD_MAX_SLOTS),
            metas: vec![None],
            defined: vec![false],
            modules: HashMap::new(),
            devices: Vec::new(),
            devices_written: 0,
            device_ids: HashMap::new(),
        });
    }
}

fn with_registry<T>(f: impl FnOnce(&mut Registry) -> T) -> Option<T> {
    REGISTRY.lock().as_mut().map(f)
}

/// The trace's id of the physical device `physical`, recording its facts the first time.
pub fn device_id(physical: u64, facts: impl FnOnce() -> DeviceFacts) -> Option<u32> {
    with_registry(|r| {
        if let Some(&id) = r.device_ids.get(&physical) {
            return id;
        }
        let id = r.devices.len() as u32;
        r.devices.push(DeviceFacts { id, ..facts() });
        r.device_ids.insert(physical, id);
        id
    })
}

/// Records shader module `module` of the device with dispatch key `device_key`.
pub fn add_module(device_key: u64, module: u64, info: Module) {
    with_registry(|r| r.modules.insert((device_key, module), Arc::new(info)));
}

pub fn module(device_key: u64, module: u64) -> Option<Arc<Module>> {
    with_registry(|r| r.modules.get(&(device_key, module)).cloned()).flatten()
}

pub fn remove_module(device_key: u64, module: u64) {
    with_registry(|r| r.modules.remove(&(device_key, module)));
}

/// Forgets the modules of a destroyed device.
pub fn remove_device_modules(device_key: u64) {
    with_registry(|r| r.modules.retain(|(d, _), _| *d != device_key));
}

/// A new slot for a pipeline described by `meta`; the overflow slot when the table is full.
pub fn add_pipeline(meta: Meta) -> u32 {
    with_registry(|r| {
        let id = r.metas.len() as u32;
        if id > r.max_slots {
            OVERFLOWED.store(true, Ordering::Relaxed);
            return OVERFLOW;
        }
        SLOTS.ensure(id);
        if let Some(c) = counters(id) {
            for (d, v) in c.local_size.iter().zip(meta.local_size.unwrap_or_default()) {
                d.store(v, Ordering::Relaxed);
            }
        }
        r.metas.push(Some(meta));
        r.defined.push(false);
        SLOT_COUNT.store(id + 1, Ordering::Release);
        id
    })
    .unwrap_or(OVERFLOW)
}

/// Names slot `id` (a debug name), unless its definition is written already.
pub fn set_name(id: u32, name: &[u8]) {
    with_registry(|r| {
        let written = r.defined.get(id as usize).copied().unwrap_or(true);
        if let Some(Some(meta)) = r.metas.get_mut(id as usize).filter(|_| !written) {
            meta.name = name[..name.len().min(MAX_NAME_BYTES)].to_vec();
            meta.source = source::DEBUG_NAME;
        }
    });
}

/// What the writer needs from the registry in one flush.
pub struct ForWriter {
    pub devices: Vec<DeviceFacts>,
    /// Definitions to write now: (slot id, description).
    pub definitions: Vec<(u32, Meta)>,
}

/// Takes the device records not yet written and the definitions of the slots in `wanted` (or of
/// every slot, at exit) not yet written, marking them written.
pub fn take_for_writer(wanted: &[u32], all: bool) -> ForWriter {
    with_registry(|r| {
        let devices = r.devices[r.devices_written..].to_vec();
        r.devices_written = r.devices.len();
        let mut definitions = Vec::new();
        let mut define = |id: u32, r: &mut Registry| {
            if let (Some(done), Some(Some(meta))) = (r.defined.get(id as usize), r.metas.get(id as usize)) {
                if !done {
                    definitions.push((id, meta.clone()));
                    r.defined[id as usize] = true;
                }
            }
        };
        if all {
            for id in 1..r.metas.len() as u32 {
                define(id, r);
            }
        } else {
            for &id in wanted {
                define(id, r);
            }
        }
        ForWriter { devices, definitions }
    })
    .unwrap_or(ForWriter { devices: Vec::new(), definitions: Vec::new() })
}

/// In a forked child: a parent thread may have held the registry lock.
pub const FORK: format::fork::ForkHandlers = format::fork::ForkHandlers::child(force_unlock_in_child);

fn force_unlock_in_child() {
    REGISTRY.release_for_fork();
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The registry is process-global: unit tests that use it take this lock.
    pub static TEST_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

    pub fn meta(name: &str) -> Meta {
        Meta {
            name: name.as_bytes().to_vec(),
            source: source::SPIRV_HASH,
            device: Some(0),
            spirv_hash: 1,
            local_size: Some([64, 1, 1]),
            spirv_object: None,
            stats: Vec::new(),
        }
    }

    #[test]
    fn counters_keep_eight_shapes_then_count_the_rest_together() {
        let c = Counters::default();
        for i in 0..10u32 {
            c.add([i + 1, 2, 3], u64::from(i) + 1);
        }
        let counts = c.shape_counts();
        assert_eq!(counts.entries[0], Some(([1, 2, 3], 1)));
        assert_eq!(counts.entries[7], Some(([8, 2, 3], 8)));
        assert_eq!(counts.other, 9 + 10);
        assert_eq!(counts.dispatches(), 55);
    }

    #[test]
    fn concurrent_submissions_lose_no_counts() {
        let c = Arc::new(Counters::default());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || (0..10_000u32).for_each(|i| c.add([i % 3, t % 2, 1], 1)))
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let counts = c.shape_counts();
        let per_shape: u64 = counts.entries.iter().flatten().map(|(_, n)| n).sum();
        assert_eq!((per_shape, counts.dispatches(), counts.other), (40_000, 40_000, 0));
    }

    #[test]
    fn names_are_kept_until_the_definition_is_written() {
        let _serial = TEST_LOCK.lock().unwrap();
        init(1 << 20);
        let id = add_pipeline(meta("spirv:0000000000000001"));
        assert!(id > OVERFLOW);
        assert_eq!(counters(id).unwrap().local_size(), [64, 1, 1]);
        set_name(id, b"mul_mat_vec_f16_f32_f32");
        let taken = take_for_writer(&[id], false);
        assert_eq!(taken.definitions.len(), 1);
        assert_eq!(taken.definitions[0].1.name, b"mul_mat_vec_f16_f32_f32");
        assert_eq!(taken.definitions[0].1.source, source::DEBUG_NAME);
        set_name(id, b"renamed later");
        assert!(take_for_writer(&[id], false).definitions.is_empty(), "written once");
        let never_counted = add_pipeline(meta("b"));
        let at_exit = take_for_writer(&[], true);
        assert!(at_exit.definitions.iter().any(|(i, m)| *i == never_counted && m.name == b"b"));
    }
}
