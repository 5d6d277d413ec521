//! A submission's counts on their way to the pipelines' shared counters: a small table on the stack that gathers
//! equal (pipeline, workgroup count) entries, and the add into the counters.

use std::mem::MaybeUninit;

use crate::pipelines;

/// Slots of [`Pending`].
pub(super) const PENDING: usize = 64;

/// A submission's counts gathered before they go to the shared counters: equal (pipeline, workgroup count) entries
/// recur through a submission (each layer of a model dispatches the same pipelines), so they cost one atomic add
/// together instead of one each. An open-addressed table on the stack (linear probing), so that it holds every key of
/// a recording with at most [`PENDING`] distinct ones: a command buffer keeps these counts for its next recording
/// ([`super::Counted`]) only when the table held them all, and a direct-mapped table lost that to two keys in one
/// slot in most of ggml-vulkan's decode buffers of a 1.1B model (about 20 distinct keys per buffer), which then walked
/// their entries at every submission (session 19: two submissions in three, on an H200 and an H100). Past
/// [`PENDING`] keys a new key sends the one in its home slot on to the shared counters. Slots are marked used in a bit
/// mask, so that a submission neither clears nor scans the whole table.
pub(super) struct Pending {
    /// `(slot | z << 32, x | y << 32)`: two words to compare.
    keys: [MaybeUninit<(u64, u64)>; PENDING],
    counts: [MaybeUninit<u64>; PENDING],
    /// Bit `i`: slot `i` holds a key and its count.
    used: u64,
    /// A key was sent on to the shared counters by one that found the table full: it does not hold every count.
    pub(super) collided: bool,
}

const _: () = assert!(PENDING == 64, "one bit per slot in `used`");

impl Pending {
    pub(super) fn new() -> Pending {
        Pending {
            // Inline-const arrays: `[MaybeUninit::uninit(); N]` had rustc clear the counts (a 521-byte memset at
            // every submission).
            keys: [const { MaybeUninit::uninit() }; PENDING],
            counts: [const { MaybeUninit::uninit() }; PENDING],
            used: 0,
            collided: false,
        }
    }

    pub(super) fn clear(&mut self) {
        self.used = 0;
        self.collided = false;
    }

    #[inline(always)]
    pub(super) fn add(&mut self, slot: u32, grid: [u32; 3], n: u64, errors: bool) {
        let key = (u64::from(slot) | (u64::from(grid[2]) << 32), u64::from(grid[0]) | (u64::from(grid[1]) << 32));
        // Multiplicative hashing: the top six bits of the product depend on every bit of the key's words.
        let home = ((key.1 ^ key.0.rotate_left(23)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize;
        let mut i = home;
        // A full table does not probe (a recording with more keys, such as a long prompt's, pays one slot's look per
        // dispatch as before): the home slot's key goes on unless it is this one. A key held in another slot may then
        // be held twice; each slot's count still goes to the counters once.
        let probes = if self.used == u64::MAX { 1 } else { PENDING };
        for _ in 0..probes {
            let bit = 1u64 << i;
            if self.used & bit == 0 {
                self.keys[i].write(key);
                self.counts[i].write(n);
                self.used |= bit;
                return;
            }
            // SAFETY: a used slot's key and count were written when its bit was set.
            let (kept, count) = unsafe { (self.keys[i].assume_init(), self.counts[i].assume_init()) };
            if kept == key {
                self.counts[i].write(count + n);
                return;
            }
            i = (i + 1) % PENDING;
        }
        self.replace(home, key, n, errors);
    }

    /// A full table: used slot `i`'s key's count goes to the shared counters, `key` takes the slot. Out of line, so
    /// that the walk that calls `add` keeps its values in registers.
    #[cold]
    #[inline(never)]
    fn replace(&mut self, i: usize, key: (u64, u64), n: u64, errors: bool) {
        // SAFETY: called for a used slot (see `add`).
        let (kept, count) = unsafe { (self.keys[i].assume_init(), self.counts[i].assume_init()) };
        add(kept.0 as u32, [kept.1 as u32, (kept.1 >> 32) as u32, (kept.0 >> 32) as u32], count, errors);
        self.keys[i].write(key);
        self.counts[i].write(n);
        self.collided = true;
    }

    /// Adds every count held to the shared counters, keeping them (a command buffer's [`Counted`](super::Counted)).
    pub(super) fn add_all(&self, errors: bool) {
        self.each(|slot, grid, n| add(slot, grid, n, errors));
    }

    /// Adds every count held `times` times to the shared counters (the repeats of a kept recording).
    pub(super) fn add_all_times(&self, times: u64) {
        self.each(|slot, grid, n| add(slot, grid, n.saturating_mul(times), false));
    }

    #[inline(always)]
    fn each(&self, mut f: impl FnMut(u32, [u32; 3], u64)) {
        let mut used = self.used;
        while used != 0 {
            let i = used.trailing_zeros() as usize;
            used &= used - 1;
            // SAFETY: as in `add`: the slot's bit was set.
            let ((a, b), n) = unsafe { (self.keys[i].assume_init(), self.counts[i].assume_init()) };
            f(a as u32, [b as u32, (b >> 32) as u32, (a >> 32) as u32], n);
        }
    }

    pub(super) fn flush(&mut self, errors: bool) {
        self.add_all(errors);
        self.clear();
    }
}

/// Adds `n` dispatches of pipeline `slot` with workgroup counts `grid` to its shared counters; with `errors`, to its
/// error counter.
pub(super) fn add(slot: u32, grid: [u32; 3], n: u64, errors: bool) {
    if let Some(c) = pipelines::counters(slot) {
        if errors {
            c.errors.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        } else {
            c.add(grid, n);
        }
    }
}
