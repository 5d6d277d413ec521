//! A map from Vulkan handles (and dispatch keys) to the layer's own records, read without locks.
//!
//! Every hooked call finds its record here: a command buffer's recorded dispatches, a pipeline's
//! slot, a device's dispatch table. Readers probe an open-addressing table of atomics; writers
//! (object creation and destruction, rare) take a lock. A removed entry keeps its key with the
//! value 0, so probe chains stay intact and a handle the driver hands out again reuses its entry.
//! When keys fill half the table it is rebuilt from the live entries (twice the size when they
//! need it) and published; the old table is leaked, because a reader may still be probing it.
//! Handles are recycled by drivers (a freed command buffer's address comes back), so the table
//! grows with the most objects alive at once, not with the number ever created.

use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use format::spin::SpinLock;

struct Entry {
    /// 0: never used. Vulkan handles and dispatch keys are never 0.
    key: AtomicU64,
    /// 0: no value (removed, or being inserted).
    value: AtomicU64,
}

struct Table {
    mask: usize,
    entries: Box<[Entry]>,
}

impl Table {
    fn with_capacity(capacity: usize) -> Table {
        let capacity = capacity.next_power_of_two().max(16);
        let entries = (0..capacity).map(|_| Entry { key: AtomicU64::new(0), value: AtomicU64::new(0) }).collect();
        Table { mask: capacity - 1, entries }
    }

    #[inline(always)]
    fn start(&self, key: u64) -> usize {
        // Fibonacci hashing: handles are aligned pointers or small counters, so mix the bits.
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize & self.mask
    }

    #[inline]
    fn get(&self, key: u64) -> Option<u64> {
        let mut i = self.start(key);
        // A table is rebuilt before half its keys are used, so the walk meets a free key; the probe limit only
        // guards that.
        for _ in 0..=self.mask {
            debug_assert!(i <= self.mask && self.entries.len() == self.mask + 1);
            // SAFETY: `i` is masked (`start`, and each step below), and `entries` holds `mask + 1` entries
            // (`with_capacity`): a lookup on the hot path needs no bounds check.
            let entry = unsafe { self.entries.get_unchecked(i) };
            match entry.key.load(Ordering::Acquire) {
                k if k == key => {
                    let value = entry.value.load(Ordering::Acquire);
                    return (value != 0).then_some(value);
                }
                0 => return None,
                _ => i = (i + 1) & self.mask,
            }
        }
        None
    }

    /// Under the writers' lock. Returns whether a new key was used.
    fn put(&self, key: u64, value: u64) -> bool {
        let mut i = self.start(key);
        loop {
            let entry = &self.entries[i];
            match entry.key.load(Ordering::Relaxed) {
                k if k == key => {
                    entry.value.store(value, Ordering::Release);
                    return false;
                }
                0 => {
                    // The value first: a reader that sees the key sees the value.
                    entry.value.store(value, Ordering::Release);
                    entry.key.store(key, Ordering::Release);
                    return true;
                }
                _ => i = (i + 1) & self.mask,
            }
        }
    }
}

/// (32-bit: the map's fields that a lookup reads share a device record's first cache line with its hottest function
/// pointers, `crate::dispatch`; no map here holds more than 2^20 entries.)
struct Counts {
    /// Entries whose key is set (live or removed).
    keys: u32,
    live: u32,
}

/// See the module documentation. Values are never 0. The table's pointer, all a lookup reads of the map itself, comes
/// first (`repr(C)`): a map inside a larger record (a device's pipelines) is read at its start.
#[repr(C)]
pub struct HandleMap {
    table: AtomicPtr<Table>,
    /// Entries removed since the map was made: a handle looked up before and after a removal may name another
    /// object (drivers hand a destroyed object's handle out again), so what keeps handles for later compares this.
    removals: AtomicU64,
    writers: SpinLock<Counts>,
    /// Most live entries; inserts beyond fail.
    max_live: u32,
}

impl HandleMap {
    pub const fn new(max_live: usize) -> HandleMap {
        HandleMap {
            table: AtomicPtr::new(ptr::null_mut()),
            removals: AtomicU64::new(0),
            writers: SpinLock::new(Counts { keys: 0, live: 0 }),
            max_live: if max_live > u32::MAX as usize { u32::MAX } else { max_live as u32 },
        }
    }

    fn table(&self) -> Option<&Table> {
        let table = self.table.load(Ordering::Acquire);
        // SAFETY: a published table comes from `Box::into_raw` and is never freed.
        (!table.is_null()).then(|| unsafe { &*table })
    }

    /// The value of `key`, without a lock.
    #[inline]
    pub fn get(&self, key: u64) -> Option<u64> {
        self.table()?.get(key)
    }

    /// Sets `key` to `value` (not 0); false when the map holds `max_live` entries already.
    pub fn insert(&self, key: u64, value: u64) -> bool {
        debug_assert!(key != 0 && value != 0);
        let mut counts = self.writers.lock();
        if self.table().and_then(|t| t.get(key)).is_none() && counts.live >= self.max_live {
            return false;
        }
        let table = match self.table() {
            Some(table) if (counts.keys as usize + 1) * 2 <= table.entries.len() => table,
            current => self.rebuild(current, &mut counts),
        };
        let was_live = table.get(key).is_some();
        if table.put(key, value) {
            counts.keys += 1;
        }
        if !was_live {
            counts.live += 1;
        }
        true
    }

    /// Removes `key`; its former value.
    pub fn remove(&self, key: u64) -> Option<u64> {
        let mut counts = self.writers.lock();
        let table = self.table()?;
        let old = table.get(key)?;
        // Counted before the entry goes: a reader that still finds the key after comparing the count sees a value
        // from before the removal, and one that reads the count after finds no key.
        self.removals.fetch_add(1, Ordering::AcqRel);
        table.put(key, 0);
        counts.live -= 1;
        Some(old)
    }

    /// Entries removed since the map was made ([`Self::remove`], [`Self::remove_where`]).
    #[inline]
    pub fn removals(&self) -> u64 {
        self.removals.load(Ordering::Acquire)
    }

    /// Removes every entry for which `keep` says false; their values, for the caller to release.
    pub fn remove_where(&self, mut keep: impl FnMut(u64, u64) -> bool) -> Vec<u64> {
        let mut counts = self.writers.lock();
        let mut removed = Vec::new();
        let Some(table) = self.table() else { return removed };
        for entry in table.entries.iter() {
            let key = entry.key.load(Ordering::Relaxed);
            let value = entry.value.load(Ordering::Relaxed);
            if key != 0 && value != 0 && !keep(key, value) {
                self.removals.fetch_add(1, Ordering::AcqRel);
                entry.value.store(0, Ordering::Release);
                counts.live -= 1;
                removed.push(value);
            }
        }
        removed
    }

    /// In a forked child (one thread): a parent thread may have held the writers' lock.
    pub fn force_unlock(&self) {
        self.writers.release_for_fork();
    }

    /// Calls `f` with every live (key, value), under the writers' lock; allocates nothing.
    pub fn for_each(&self, mut f: impl FnMut(u64, u64)) {
        let _counts = self.writers.lock();
        let Some(table) = self.table() else { return };
        for e in table.entries.iter() {
            let (k, v) = (e.key.load(Ordering::Relaxed), e.value.load(Ordering::Relaxed));
            if k != 0 && v != 0 {
                f(k, v);
            }
        }
    }

    /// A table with room for one more key: the live entries of `current` in a table of at least four
    /// times their number, published; `current` is leaked for readers still probing it.
    fn rebuild(&self, current: Option<&Table>, counts: &mut Counts) -> &Table {
        let live: Vec<(u64, u64)> = current
            .map(|t| {
                t.entries
                    .iter()
                    .map(|e| (e.key.load(Ordering::Relaxed), e.value.load(Ordering::Relaxed)))
                    .filter(|&(k, v)| k != 0 && v != 0)
                    .collect()
            })
            .unwrap_or_default();
        let capacity = ((live.len() + 1) * 4).max(current.map_or(0, |t| t.entries.len()));
        let fresh = Table::with_capacity(capacity);
        for &(k, v) in &live {
            fresh.put(k, v);
        }
        // At most `max_live` (a u32) entries are live.
        counts.keys = live.len() as u32;
        counts.live = live.len() as u32;
        let fresh = Box::into_raw(Box::new(fresh));
        self.table.store(fresh, Ordering::Release);
        // SAFETY: just published from a Box; never freed.
        unsafe { &*fresh }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_lookup_reads_the_map_at_its_start() {
        assert_eq!(std::mem::offset_of!(HandleMap, table), 0);
    }

    #[test]
    fn inserts_finds_removes_and_reuses_keys() {
        let map = HandleMap::new(1 << 20);
        assert_eq!(map.get(42), None);
        for key in 1..=5_000u64 {
            assert!(map.insert(key * 64, key + 7));
        }
        for key in 1..=5_000u64 {
            assert_eq!(map.get(key * 64), Some(key + 7));
        }
        assert_eq!(map.remove(64), Some(8));
        assert_eq!(map.get(64), None);
        assert_eq!(map.remove(64), None);
        assert!(map.insert(64, 99), "a removed handle comes back");
        assert_eq!(map.get(64), Some(99));
        let removed = map.remove_where(|key, _| key > 128);
        assert_eq!(removed.len(), 2);
        let mut live = 0;
        map.for_each(|_, _| live += 1);
        assert_eq!(live, 4_998);
    }

    #[test]
    fn recycled_handles_do_not_grow_the_table_without_bound() {
        // A driver hands freed handles out again; the live set stays small, so rebuilds keep the size.
        let map = HandleMap::new(1 << 20);
        for round in 0..200u64 {
            for key in 1..=100u64 {
                assert!(map.insert(round * 1_000_000 + key, key));
            }
            map.remove_where(|_, _| false);
        }
        assert!(map.table().unwrap().entries.len() <= 1024, "{}", map.table().unwrap().entries.len());
    }

    #[test]
    fn refuses_inserts_past_its_limit_but_updates_existing_keys() {
        let map = HandleMap::new(3);
        assert!(map.insert(1, 1) && map.insert(2, 2) && map.insert(3, 3));
        assert!(!map.insert(4, 4));
        assert!(map.insert(3, 30));
        assert_eq!(map.get(3), Some(30));
        map.remove(1);
        assert!(map.insert(4, 4));
    }

    #[test]
    fn readers_see_every_entry_while_writers_grow_the_table() {
        let map = Arc::new(HandleMap::new(1 << 20));
        for key in 1..=100u64 {
            map.insert(key, key);
        }
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let map = Arc::clone(&map);
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        for key in 1..=100u64 {
                            assert_eq!(map.get(key), Some(key), "an old key is never lost during a rebuild");
                        }
                    }
                })
            })
            .collect();
        for key in 1_000..20_000u64 {
            map.insert(key, key);
        }
        readers.into_iter().for_each(|r| r.join().unwrap());
    }
}
