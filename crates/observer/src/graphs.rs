//! CUDA/HIP graph attribution.
//!
//! With graphs on (ggml's default), steady decoding launches each kernel once, during stream
//! capture, and afterwards replays the instantiated graph once per token. Counting only direct
//! launches would then report almost nothing. So:
//!
//! * `…StreamBeginCapture(stream)` starts a capture record for the stream.
//! * A launch on a capturing stream is added to that record (`captured`), not counted as executed.
//! * `…StreamEndCapture(stream, &graph)` turns the record into the graph's kernel list.
//! * `…GraphInstantiate(&exec, graph)` / `…GraphExecUpdate(exec, graph)` give the exec that list.
//! * `…GraphLaunch(exec)` counts every kernel of the exec's list as executed (`graph`), with the
//!   captured shapes. An exec whose graph was not captured under our eyes (built node by node, or
//!   captured through an API we do not hook) is counted in `unknown_graph_launches`.
//!
//! Capture bookkeeping takes a lock (capture is recording, not execution). `…GraphLaunch`, which
//! runs once per token, does not: it reads the exec table like the kernel table. Exec lists replaced
//! by an update or destroy are freed only when no graph launch is reading (a reader count acts as
//! the grace period), because ggml updates its exec on every re-capture.

use std::collections::HashMap;
use std::ffi::c_int;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::ffi::{Handle, Status, SUCCESS};
use crate::observe::{Family, Stream};
use crate::real::RealFn;
use crate::registry::{self, Shape};
use crate::state;
use crate::sync::SpinLock;

/// One captured kernel: how many launches with this shape the graph contains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CapturedLaunch {
    slot: u32,
    shape: Shape,
    count: u64,
}

/// What an exec replays. `None`: a graph we did not see being captured.
struct ExecKernels {
    kernels: Option<Arc<[CapturedLaunch]>>,
}

struct Capture {
    family: Family,
    stream: Stream,
    /// `cudaStreamBeginCaptureToGraph`: the graph that the capture adds to.
    into_graph: Option<usize>,
    kernels: HashMap<(u32, Shape), u64>,
}

enum Retired {
    Kernels(*mut ExecKernels),
    Table(*mut ExecTable),
}

#[derive(Default)]
struct GraphState {
    captures: Vec<Capture>,
    graphs: HashMap<(Family, usize), Arc<[CapturedLaunch]>>,
    retired: Vec<Retired>,
    execs_used: usize,
}

// SAFETY: the raw pointers in `retired` are owned exclusively by this state (they were unpublished
// before being pushed) and are only freed under the lock.
unsafe impl Send for GraphState {}

static GRAPHS: SpinLock<Option<GraphState>> = SpinLock::new(None);
static ACTIVE_CAPTURES: AtomicUsize = AtomicUsize::new(0);
static EXECS: AtomicPtr<ExecTable> = AtomicPtr::new(ptr::null_mut());
/// Graph launches currently reading the exec table (the grace-period count).
static READERS: AtomicUsize = AtomicUsize::new(0);

static GRAPH_LAUNCHES: AtomicU64 = AtomicU64::new(0);
static UNKNOWN_GRAPH_LAUNCHES: AtomicU64 = AtomicU64::new(0);
static UNATTRIBUTED_CAPTURES: AtomicU64 = AtomicU64::new(0);

pub fn graph_launches() -> u64 {
    GRAPH_LAUNCHES.load(Ordering::Relaxed)
}

pub fn unknown_graph_launches() -> u64 {
    UNKNOWN_GRAPH_LAUNCHES.load(Ordering::Relaxed)
}

pub fn unattributed_captures() -> u64 {
    UNATTRIBUTED_CAPTURES.load(Ordering::Relaxed)
}

#[inline(always)]
pub fn any_capture_active() -> bool {
    ACTIVE_CAPTURES.load(Ordering::Relaxed) != 0
}

type IsCapturingFn = unsafe extern "C" fn(Handle, *mut c_int) -> Status;
// SAFETY: `cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus*)`; the status enum is an int.
static CUDA_STREAM_IS_CAPTURING: RealFn<IsCapturingFn> = unsafe { RealFn::new(c"cudaStreamIsCapturing") };
// SAFETY: `hipStreamIsCapturing(hipStream_t, hipStreamCaptureStatus*)`; the status enum is an int.
static HIP_STREAM_IS_CAPTURING: RealFn<IsCapturingFn> = unsafe { RealFn::new(c"hipStreamIsCapturing") };

/// Asks the runtime whether `stream` is capturing: catches streams that joined a capture through
/// events (fork/join capture), which never went through `BeginCapture` themselves.
fn runtime_says_capturing(family: Family, stream: Stream) -> bool {
    let f = match family {
        Family::Cuda => CUDA_STREAM_IS_CAPTURING.get(),
        Family::Hip => HIP_STREAM_IS_CAPTURING.get(),
    };
    let Some(f) = f else { return false };
    let mut status: c_int = 0;
    // SAFETY: the runtime's own query with a stream handle the caller just launched on and a
    // writable status.
    let rc = unsafe { f(stream.0 as Handle, &mut status) };
    rc == SUCCESS && status == crate::ffi::STREAM_CAPTURE_STATUS_ACTIVE
}

fn state_mut(guard: &mut Option<GraphState>) -> &mut GraphState {
    guard.get_or_insert_with(GraphState::default)
}

impl GraphState {
    fn capture_mut(&mut self, family: Family, stream: Stream) -> Option<&mut Capture> {
        self.captures.iter_mut().find(|c| c.family == family && c.stream == stream)
    }
}

/// Routes a launch on `stream` into the capture it belongs to, if any: returns `true` when the
/// stream is capturing (the launch did not execute). `add` records into the capture and runs under
/// the lock. A stream the runtime reports as capturing without a `BeginCapture` of its own joined
/// a capture through events; it is attributed to the only capture of its family, or counted as
/// unattributed when that is ambiguous.
fn into_capture(family: Family, stream: Stream, failed: bool, add: impl FnOnce(&mut Capture)) -> bool {
    {
        let mut guard = GRAPHS.lock();
        if let Some(capture) = guard.as_mut().and_then(|s| s.capture_mut(family, stream)) {
            // A launch that failed during capture added no node and ran nothing.
            if !failed {
                add(capture);
            }
            return true;
        }
    }
    // The runtime query runs without our lock held: it takes the runtime's own locks.
    if !runtime_says_capturing(family, stream) {
        return false;
    }
    if failed {
        return true;
    }
    let mut guard = GRAPHS.lock();
    let state = state_mut(&mut guard);
    let mut same_family = state.captures.iter_mut().filter(|c| c.family == family);
    match (same_family.next(), same_family.next()) {
        (Some(only), None) => add(only),
        _ => {
            UNATTRIBUTED_CAPTURES.fetch_add(1, Ordering::Relaxed);
        }
    }
    true
}

/// A launch while some capture is active: `true` if it was recorded into a capture.
pub fn record_launch_if_capturing(family: Family, stream: Stream, slot: u32, shape: &Shape, failed: bool) -> bool {
    into_capture(family, stream, failed, |capture| {
        *capture.kernels.entry((slot, *shape)).or_insert(0) += 1;
        if let Some(slot) = registry::slot(slot) {
            slot.captured.fetch_add(1, Ordering::Relaxed);
        }
    })
}

pub fn begin_capture(family: Family, stream: Stream, into_graph: Option<usize>) {
    if !state::active() {
        return;
    }
    let mut guard = GRAPHS.lock();
    let state = state_mut(&mut guard);
    if state.capture_mut(family, stream).is_none() {
        state.captures.push(Capture { family, stream, into_graph, kernels: HashMap::new() });
    }
    ACTIVE_CAPTURES.store(state.captures.len(), Ordering::Relaxed);
}

/// End of a capture; `graph` is the captured graph when the runtime returned one.
pub fn end_capture(family: Family, stream: Stream, graph: Option<usize>) {
    let mut guard = GRAPHS.lock();
    let Some(state) = guard.as_mut() else { return };
    let Some(index) = state.captures.iter().position(|c| c.family == family && c.stream == stream) else {
        return;
    };
    let capture = state.captures.swap_remove(index);
    ACTIVE_CAPTURES.store(state.captures.len(), Ordering::Relaxed);
    let Some(graph) = graph.or(capture.into_graph) else { return };
    let mut merged: HashMap<(u32, Shape), u64> = HashMap::new();
    if let Some(existing) = state.graphs.get(&(family, graph)) {
        for launch in existing.iter() {
            *merged.entry((launch.slot, launch.shape)).or_insert(0) += launch.count;
        }
    }
    for (key, count) in capture.kernels {
        *merged.entry(key).or_insert(0) += count;
    }
    let mut list: Vec<CapturedLaunch> =
        merged.into_iter().map(|((slot, shape), count)| CapturedLaunch { slot, shape, count }).collect();
    list.sort_by_key(|l| (l.slot, l.shape.grid, l.shape.block));
    state.graphs.insert((family, graph), list.into());
}

/// `exec` now replays `graph` (instantiation or a successful exec update).
pub fn set_exec_graph(family: Family, exec: usize, graph: usize) {
    if !state::active() {
        return;
    }
    let mut guard = GRAPHS.lock();
    let state = state_mut(&mut guard);
    let kernels = state.graphs.get(&(family, graph)).cloned();
    let fresh = Box::into_raw(Box::new(ExecKernels { kernels }));
    publish_exec(state, exec, fresh);
}

pub fn destroy_exec(exec: usize) {
    let mut guard = GRAPHS.lock();
    let Some(state) = guard.as_mut() else { return };
    publish_exec(state, exec, ptr::null_mut());
}

pub fn destroy_graph(family: Family, graph: usize) {
    let mut guard = GRAPHS.lock();
    if let Some(state) = guard.as_mut() {
        state.graphs.remove(&(family, graph));
    }
}

/// A graph launch that returned `status`.
pub fn launch_graph(family: Family, exec: usize, stream: Stream, status: Status) {
    if !state::active() {
        return;
    }
    let failed = status != SUCCESS;
    if any_capture_active() && record_graph_if_capturing(family, stream, exec, failed) {
        return;
    }
    GRAPH_LAUNCHES.fetch_add(1, Ordering::Relaxed);
    let _reading = ReaderScope::enter();
    let table = EXECS.load(Ordering::SeqCst);
    // SAFETY: a published table stays allocated while READERS > 0 (it is freed only from the
    // retired list, when no reader is inside).
    let kernels = if table.is_null() { ptr::null_mut() } else { unsafe { &*table }.find(exec) };
    // SAFETY: same grace-period argument for the exec's kernel list.
    match unsafe { kernels.as_ref() }.and_then(|k| k.kernels.as_deref()) {
        Some(list) => {
            let thread = crate::sync::thread_token();
            for launch in list {
                if let Some(slot) = registry::slot(launch.slot) {
                    slot.record(&launch.shape, launch.count, failed, true, thread);
                }
            }
        }
        None => {
            UNKNOWN_GRAPH_LAUNCHES.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A graph launched into a capturing stream becomes a child-graph node: its kernels join the
/// capture instead of executing.
fn record_graph_if_capturing(family: Family, stream: Stream, exec: usize, failed: bool) -> bool {
    into_capture(family, stream, failed, |capture| {
        let table = EXECS.load(Ordering::SeqCst);
        // SAFETY: tables and lists are freed only under the GRAPHS lock, which `into_capture` holds
        // while this runs.
        let kernels = unsafe { table.as_ref() }.map(|t| t.find(exec));
        // SAFETY: as above.
        let list = kernels.and_then(|k| unsafe { k.as_ref() }).and_then(|k| k.kernels.as_deref());
        match list {
            Some(list) => {
                for launch in list {
                    *capture.kernels.entry((launch.slot, launch.shape)).or_insert(0) += launch.count;
                    if let Some(slot) = registry::slot(launch.slot) {
                        slot.captured.fetch_add(launch.count, Ordering::Relaxed);
                    }
                }
            }
            None => {
                UNATTRIBUTED_CAPTURES.fetch_add(1, Ordering::Relaxed);
            }
        }
    })
}

struct ReaderScope;

impl ReaderScope {
    fn enter() -> ReaderScope {
        READERS.fetch_add(1, Ordering::SeqCst);
        ReaderScope
    }
}

impl Drop for ReaderScope {
    fn drop(&mut self) {
        READERS.fetch_sub(1, Ordering::SeqCst);
    }
}

struct ExecTable {
    mask: usize,
    keys: Box<[AtomicUsize]>,
    values: Box<[AtomicPtr<ExecKernels>]>,
}

impl ExecTable {
    fn with_capacity(capacity: usize) -> ExecTable {
        let capacity = capacity.next_power_of_two().max(64);
        ExecTable {
            mask: capacity - 1,
            keys: (0..capacity).map(|_| AtomicUsize::new(0)).collect(),
            values: (0..capacity).map(|_| AtomicPtr::new(ptr::null_mut())).collect(),
        }
    }

    fn index_of(&self, exec: usize) -> Result<usize, usize> {
        let mut i = (exec.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 7) & self.mask;
        for _ in 0..self.keys.len() {
            match self.keys[i].load(Ordering::SeqCst) {
                0 => return Err(i),
                k if k == exec => return Ok(i),
                _ => i = (i + 1) & self.mask,
            }
        }
        Err(usize::MAX)
    }

    fn find(&self, exec: usize) -> *mut ExecKernels {
        match self.index_of(exec) {
            Ok(i) => self.values[i].load(Ordering::SeqCst),
            Err(_) => ptr::null_mut(),
        }
    }
}

/// Sets (or clears, with null) the list of `exec`, retiring what it replaces. Under the lock.
fn publish_exec(state: &mut GraphState, exec: usize, value: *mut ExecKernels) {
    if exec == 0 {
        if !value.is_null() {
            // SAFETY: never published.
            drop(unsafe { Box::from_raw(value) });
        }
        return;
    }
    let mut table = EXECS.load(Ordering::SeqCst);
    if table.is_null() {
        table = Box::into_raw(Box::new(ExecTable::with_capacity(64)));
        EXECS.store(table, Ordering::SeqCst);
    }
    // SAFETY: the current table is only replaced under this lock, which we hold.
    let current = unsafe { &*table };
    match current.index_of(exec) {
        Ok(i) => {
            let old = current.values[i].swap(value, Ordering::SeqCst);
            if !old.is_null() {
                state.retired.push(Retired::Kernels(old));
            }
        }
        Err(i) if i != usize::MAX && !value.is_null() => {
            current.values[i].store(value, Ordering::SeqCst);
            current.keys[i].store(exec, Ordering::SeqCst);
            state.execs_used += 1;
        }
        Err(_) => {
            if !value.is_null() {
                // Table full of tombstones: rebuild first, then insert.
                rebuild_exec_table(state, current, table);
                return publish_exec(state, exec, value);
            }
        }
    }
    if state.execs_used * 2 > current.keys.len() {
        rebuild_exec_table(state, current, table);
    }
    try_reclaim(state);
}

/// Copies live entries into a fresh table (dropping destroyed execs), publishes it and retires the
/// old one.
fn rebuild_exec_table(state: &mut GraphState, current: &ExecTable, current_ptr: *mut ExecTable) {
    let live: Vec<(usize, *mut ExecKernels)> = current
        .keys
        .iter()
        .zip(current.values.iter())
        .map(|(k, v)| (k.load(Ordering::SeqCst), v.load(Ordering::SeqCst)))
        .filter(|&(k, v)| k != 0 && !v.is_null())
        .collect();
    let fresh = ExecTable::with_capacity(live.len() * 4);
    for &(exec, kernels) in &live {
        if let Err(i) = fresh.index_of(exec) {
            fresh.values[i].store(kernels, Ordering::SeqCst);
            fresh.keys[i].store(exec, Ordering::SeqCst);
        }
    }
    state.execs_used = live.len();
    EXECS.store(Box::into_raw(Box::new(fresh)), Ordering::SeqCst);
    state.retired.push(Retired::Table(current_ptr));
}

/// Frees retired lists and tables if no graph launch is reading. A reader that could hold one of
/// them incremented READERS before loading it, and everything retired was unpublished before this
/// check (all SeqCst), so READERS == 0 here means none of them is in use.
fn try_reclaim(state: &mut GraphState) {
    if state.retired.is_empty() || READERS.load(Ordering::SeqCst) != 0 {
        return;
    }
    for retired in state.retired.drain(..) {
        match retired {
            // SAFETY: unpublished, unreachable by readers (see above), and freed exactly once.
            Retired::Kernels(kernels) => drop(unsafe { Box::from_raw(kernels) }),
            // SAFETY: same; the table's values were moved to its successor, not freed with it.
            Retired::Table(table) => drop(unsafe { Box::from_raw(table) }),
        }
    }
}

/// Called by the writer thread now and then, so retired lists do not wait for the next update.
pub fn reclaim_if_idle() {
    if let Some(mut guard) = GRAPHS.try_lock() {
        if let Some(state) = guard.as_mut() {
            try_reclaim(state);
        }
    }
}

pub fn acquire_for_fork() {
    GRAPHS.acquire_for_fork();
}

pub fn release_for_fork() {
    GRAPHS.release_for_fork();
}

/// In a forked child (single-threaded): captures in flight belong to the parent, and the window
/// counters restart at zero like the kernel counters.
pub fn reset_in_child() {
    // SAFETY: atfork child handler, only thread of the process, lock released just before.
    if let Some(state) = unsafe { GRAPHS.get_unchecked_mut() }.as_mut() {
        state.captures.clear();
    }
    ACTIVE_CAPTURES.store(0, Ordering::Relaxed);
    READERS.store(0, Ordering::Relaxed);
    for counter in [&GRAPH_LAUNCHES, &UNKNOWN_GRAPH_LAUNCHES, &UNATTRIBUTED_CAPTURES] {
        counter.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exec table is global and these tests write it without the GRAPHS lock: one at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn kernels(slot: u32) -> *mut ExecKernels {
        let list: Arc<[CapturedLaunch]> = vec![CapturedLaunch { slot, shape: Shape::default(), count: 1 }].into();
        Box::into_raw(Box::new(ExecKernels { kernels: Some(list) }))
    }

    fn slot_of(exec: usize) -> Option<u32> {
        let table = EXECS.load(Ordering::SeqCst);
        // SAFETY: no reclamation runs concurrently in this test (it owns the only state).
        let found = unsafe { table.as_ref()?.find(exec).as_ref()? };
        found.kernels.as_ref().map(|k| k[0].slot)
    }

    /// Thousands of execs created, updated and destroyed: the table keeps finding the live ones,
    /// rebuilds away destroyed ones, and frees what it replaced (no reader is active).
    #[test]
    fn exec_table_survives_churn_and_reclaims() {
        let _serial = SERIAL.lock().unwrap();
        let mut state = GraphState::default();
        let base = 0x10_0000usize;
        for round in 0..4u32 {
            for i in 0..5_000usize {
                publish_exec(&mut state, base + i * 64, kernels(round * 10_000 + i as u32));
            }
            for i in 0..5_000usize {
                assert_eq!(slot_of(base + i * 64), Some(round * 10_000 + i as u32));
            }
            for i in (0..5_000usize).step_by(2) {
                publish_exec(&mut state, base + i * 64, ptr::null_mut());
            }
            for i in 0..5_000usize {
                let expected = (i % 2 == 1).then_some(round * 10_000 + i as u32);
                assert_eq!(slot_of(base + i * 64), expected, "round {round} exec {i}");
            }
        }
        assert!(state.retired.is_empty(), "nothing reading: everything replaced was freed");
        // SAFETY: as in `slot_of`.
        let table = unsafe { &*EXECS.load(Ordering::SeqCst) };
        assert!(table.keys.len() <= 64 * 1024, "table grew to {} for 5,000 live execs", table.keys.len());
        assert_eq!(slot_of(0), None);
        publish_exec(&mut state, 0, kernels(1)); // a null exec handle is ignored
        assert_eq!(slot_of(0), None);
    }

    #[test]
    fn retired_lists_wait_for_readers() {
        let _serial = SERIAL.lock().unwrap();
        let mut state = GraphState::default();
        let exec = 0x7777_0000usize;
        publish_exec(&mut state, exec, kernels(1));
        let reading = ReaderScope::enter();
        publish_exec(&mut state, exec, kernels(2));
        assert_eq!(state.retired.len(), 1, "the old list is kept while a graph launch may read it");
        drop(reading);
        try_reclaim(&mut state);
        assert!(state.retired.is_empty());
        assert_eq!(slot_of(exec), Some(2));
    }
}
