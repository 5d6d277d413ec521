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
//! A capture can also end where no hook sees it: `…StreamEndCapture` reached through a function
//! pointer (`dlsym` on the runtime's handle, `cudaGetDriverEntryPoint`), or its stream destroyed
//! through such a path. Its record would then swallow every later launch on that stream as
//! "captured" and keep the capture path (and its lock) in use for every launch. So a record expires:
//! * a launch or graph launch on the record's stream asks the runtime (`…StreamIsCapturing`, without
//!   our lock held) whether the stream still captures, and drops the record if it does not;
//! * `…StreamBeginCapture` on a stream that has a record replaces it (the runtime only starts a
//!   capture on a stream that is not capturing);
//! * `…StreamDestroy` drops the records of the stream.
//!
//! Each expired record is counted in `expired_captures`. The runtime is only ever asked about the
//! stream the program is launching on at that moment, a handle known to be alive.
//!
//! Capture bookkeeping takes a lock (capture is recording, not execution). A launch on a stream
//! without a record, while captures are active elsewhere, takes no lock: the streams with a record
//! are mirrored in a small array of atomics. `…GraphLaunch`, which runs once per token, takes no
//! lock either: it reads the exec table like the kernel table. Exec lists replaced by an update or
//! destroy are freed only when no graph launch is reading (a reader count acts as the grace
//! period), because ggml updates its exec on every re-capture.

use std::collections::HashMap;
use std::ffi::c_int;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use format::fork::ForkHandlers;

use crate::ffi::{Family, Handle, Status, Stream, SUCCESS};
use crate::real::RealFn;
use crate::registry::{self, Shape};
use crate::state;
use format::spin::SpinLock;

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
    /// Tells this record apart from a later one on the same stream, across the unlocked runtime
    /// query in `into_capture`.
    id: u64,
    family: Family,
    stream: Stream,
    /// The thread that began the capture: the per-thread default stream has one handle but is a
    /// different stream in every thread.
    thread: usize,
    /// `cudaStreamBeginCaptureToGraph`: the graph that the capture adds to.
    into_graph: Option<usize>,
    kernels: HashMap<(u32, Shape), u64>,
    /// Index in `STREAM_KEYS`, or `None` when all were taken.
    key_slot: Option<usize>,
}

impl Capture {
    fn is_for(&self, family: Family, stream: Stream, thread: usize) -> bool {
        self.family == family
            && self.stream == stream
            && (stream.0 != crate::ffi::STREAM_PER_THREAD || self.thread == thread)
    }
}

enum Retired {
    Kernels(*mut ExecKernels),
    Table(*mut ExecTable),
}

#[derive(Default)]
struct GraphState {
    captures: Vec<Capture>,
    next_capture_id: u64,
    graphs: HashMap<(Family, usize), Arc<[CapturedLaunch]>>,
    retired: Vec<Retired>,
    execs_used: usize,
}

// SAFETY: the raw pointers in `retired` are owned exclusively by this state (they were unpublished
// before being pushed) and are only freed under the lock.
unsafe impl Send for GraphState {}

static GRAPHS: SpinLock<Option<GraphState>> = SpinLock::new(None);
static ACTIVE_CAPTURES: AtomicUsize = AtomicUsize::new(0);

/// Streams that have a capture record, as `handle + 1` (0: free), written under the GRAPHS lock and
/// read without it, so that a launch on any other stream can tell that it has no record without
/// taking the lock. A reader that races with a change sees either the old or the new key of one
/// slot; keys of other records are never cleared by a change.
const STREAM_KEY_SLOTS: usize = 16;
static STREAM_KEYS: [AtomicUsize; STREAM_KEY_SLOTS] = [const { AtomicUsize::new(0) }; STREAM_KEY_SLOTS];
/// Records that found no free slot: while there is one, any stream may have a record.
static UNKEYED_CAPTURES: AtomicUsize = AtomicUsize::new(0);
static EXECS: AtomicPtr<ExecTable> = AtomicPtr::new(ptr::null_mut());
/// Graph launches currently reading the exec table (the grace-period count).
static READERS: AtomicUsize = AtomicUsize::new(0);

static GRAPH_LAUNCHES: AtomicU64 = AtomicU64::new(0);
static UNKNOWN_GRAPH_LAUNCHES: AtomicU64 = AtomicU64::new(0);
static UNATTRIBUTED_CAPTURES: AtomicU64 = AtomicU64::new(0);
static EXPIRED_CAPTURES: AtomicU64 = AtomicU64::new(0);

pub fn graph_launches() -> u64 {
    GRAPH_LAUNCHES.load(Ordering::Relaxed)
}

pub fn unknown_graph_launches() -> u64 {
    UNKNOWN_GRAPH_LAUNCHES.load(Ordering::Relaxed)
}

pub fn unattributed_captures() -> u64 {
    UNATTRIBUTED_CAPTURES.load(Ordering::Relaxed)
}

/// Capture records dropped because the capture ended where no hook saw it (see the module docs).
pub fn expired_captures() -> u64 {
    EXPIRED_CAPTURES.load(Ordering::Relaxed)
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

/// The runtime's capture status of `stream` (`…StreamCaptureStatus`), or `None` when the runtime
/// has no such query or the query failed. Only called with the stream of the launch being observed:
/// a handle the program has just used, so known to be alive.
fn runtime_capture_status(family: Family, stream: Stream) -> Option<c_int> {
    let f = match family {
        Family::Cuda => CUDA_STREAM_IS_CAPTURING.get(),
        Family::Hip => HIP_STREAM_IS_CAPTURING.get(),
    }?;
    let mut status: c_int = 0;
    // SAFETY: the runtime's own query with a stream handle the caller just launched on and a
    // writable status.
    let rc = unsafe { f(stream.0 as Handle, &mut status) };
    (rc == SUCCESS).then_some(status)
}

/// Asks the runtime whether `stream` is capturing: catches streams that joined a capture through
/// events (fork/join capture), which never went through `BeginCapture` themselves.
fn runtime_says_capturing(family: Family, stream: Stream) -> bool {
    runtime_capture_status(family, stream) == Some(crate::ffi::STREAM_CAPTURE_STATUS_ACTIVE)
}

fn state_mut(guard: &mut Option<GraphState>) -> &mut GraphState {
    guard.get_or_insert_with(GraphState::default)
}

fn stream_key(stream: Stream) -> usize {
    stream.0.wrapping_add(1)
}

/// Whether `stream` may have a capture record (never a false `false`), without the lock.
#[inline]
fn may_have_record(stream: Stream) -> bool {
    let key = stream_key(stream);
    UNKEYED_CAPTURES.load(Ordering::Acquire) != 0 || STREAM_KEYS.iter().any(|k| k.load(Ordering::Acquire) == key)
}

impl GraphState {
    fn capture_mut(&mut self, family: Family, stream: Stream, thread: usize) -> Option<&mut Capture> {
        self.captures.iter_mut().find(|c| c.is_for(family, stream, thread))
    }

    /// Adds a capture record and publishes its stream key. Under the lock.
    fn add_capture(&mut self, family: Family, stream: Stream, thread: usize, into_graph: Option<usize>) {
        let key_slot = STREAM_KEYS.iter().position(|k| k.load(Ordering::Relaxed) == 0);
        match key_slot {
            Some(i) => STREAM_KEYS[i].store(stream_key(stream), Ordering::Release),
            None => {
                UNKEYED_CAPTURES.fetch_add(1, Ordering::Release);
            }
        }
        self.next_capture_id += 1;
        let id = self.next_capture_id;
        self.captures.push(Capture { id, family, stream, thread, into_graph, kernels: HashMap::new(), key_slot });
        ACTIVE_CAPTURES.store(self.captures.len(), Ordering::Relaxed);
    }

    /// Removes capture record `index` and withdraws its stream key. Under the lock.
    fn remove_capture(&mut self, index: usize) -> Capture {
        let capture = self.captures.swap_remove(index);
        match capture.key_slot {
            Some(i) => STREAM_KEYS[i].store(0, Ordering::Release),
            None => {
                UNKEYED_CAPTURES.fetch_sub(1, Ordering::Release);
            }
        }
        ACTIVE_CAPTURES.store(self.captures.len(), Ordering::Relaxed);
        capture
    }

    /// Drops a record whose capture ended unseen.
    fn expire(&mut self, index: usize) {
        self.remove_capture(index);
        EXPIRED_CAPTURES.fetch_add(1, Ordering::Relaxed);
    }
}

/// Routes a launch on `stream` into the capture it belongs to, if any: returns `true` when the
/// stream is capturing (the launch did not execute). `add` records into the capture and runs under
/// the lock.
///
/// A stream with a record is re-checked with the runtime first: a capture that ended through a path
/// no hook sees is expired here, and the launch counts as executed. A stream the runtime reports as
/// capturing without a record joined a capture through events; it is attributed to the only capture
/// of its family, or counted as unattributed when that is ambiguous.
fn into_capture(family: Family, stream: Stream, failed: bool, add: impl FnOnce(&mut Capture)) -> bool {
    let thread = format::runtime::thread_token();
    if may_have_record(stream) {
        let record = {
            let mut guard = GRAPHS.lock();
            guard.as_mut().and_then(|s| s.capture_mut(family, stream, thread)).map(|c| c.id)
        };
        if let Some(id) = record {
            // The runtime query runs without our lock held: it takes the runtime's own locks.
            // `Invalidated` (an error broke the capture) still needs its `EndCapture`: kept.
            let status = runtime_capture_status(family, stream);
            let mut guard = GRAPHS.lock();
            let state = state_mut(&mut guard);
            if let Some(index) = state.captures.iter().position(|c| c.id == id) {
                if status == Some(crate::ffi::STREAM_CAPTURE_STATUS_NONE) {
                    state.expire(index);
                    return false;
                }
                // A launch that failed during capture added no node and ran nothing.
                if !failed {
                    add(&mut state.captures[index]);
                }
                return true;
            }
            // The capture ended (through a hook) while the runtime was being asked: fall through.
        }
    }
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
    if !state::is_on() {
        return;
    }
    let thread = format::runtime::thread_token();
    let mut guard = GRAPHS.lock();
    let state = state_mut(&mut guard);
    // The runtime began a capture, so the stream was not capturing: a record still there is one
    // whose end no hook saw.
    if let Some(index) = state.captures.iter().position(|c| c.is_for(family, stream, thread)) {
        state.expire(index);
    }
    state.add_capture(family, stream, thread, into_graph);
}

/// End of a capture; `graph` is the captured graph when the runtime returned one.
pub fn end_capture(family: Family, stream: Stream, graph: Option<usize>) {
    let thread = format::runtime::thread_token();
    let mut guard = GRAPHS.lock();
    let Some(state) = guard.as_mut() else { return };
    let Some(index) = state.captures.iter().position(|c| c.is_for(family, stream, thread)) else {
        return;
    };
    let capture = state.remove_capture(index);
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

/// A stream was destroyed: a capture still recorded on it can never end.
pub fn destroy_stream(family: Family, stream: Stream) {
    let mut guard = GRAPHS.lock();
    let Some(state) = guard.as_mut() else { return };
    while let Some(index) = state.captures.iter().position(|c| c.family == family && c.stream == stream) {
        state.expire(index);
    }
}

/// `exec` now replays `graph` (instantiation or a successful exec update).
pub fn set_exec_graph(family: Family, exec: usize, graph: usize) {
    if !state::is_on() {
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
    if !state::is_on() {
        return;
    }
    crate::crash::arm_if_deferred();
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
            let thread = format::runtime::thread_token();
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

/// The graph lock around `fork`: taken before, so that the child finds the tables consistent.
pub const FORK_LOCK: ForkHandlers =
    ForkHandlers { prepare: Some(acquire_for_fork), parent: Some(release_for_fork), child: Some(release_for_fork) };
/// In a forked child (single-threaded): captures in flight belong to the parent, and the window
/// counters restart at zero like the kernel counters.
pub const FORK_RESET: ForkHandlers = ForkHandlers::child(reset_in_child);

fn acquire_for_fork() {
    GRAPHS.acquire_for_fork();
}

fn release_for_fork() {
    GRAPHS.release_for_fork();
}

fn reset_in_child() {
    // SAFETY: atfork child handler, only thread of the process, lock released just before.
    if let Some(state) = unsafe { GRAPHS.get_unchecked_mut() }.as_mut() {
        state.captures.clear();
    }
    ACTIVE_CAPTURES.store(0, Ordering::Relaxed);
    for key in &STREAM_KEYS {
        key.store(0, Ordering::Relaxed);
    }
    UNKEYED_CAPTURES.store(0, Ordering::Relaxed);
    READERS.store(0, Ordering::Relaxed);
    for counter in [&GRAPH_LAUNCHES, &UNKNOWN_GRAPH_LAUNCHES, &UNATTRIBUTED_CAPTURES, &EXPIRED_CAPTURES] {
        counter.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
