//! The counter table of both observers: slots numbered from 0, allocated a chunk at a time and never
//! freed nor moved, so that a hook reaches a slot by its number with one atomic load and no lock,
//! while new slots are published beside it.

use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, Ordering};

/// Up to `MAX_CHUNKS` chunks of `1 << CHUNK_BITS` slots of `T`.
pub struct SlotChunks<T, const CHUNK_BITS: u32, const MAX_CHUNKS: usize> {
    chunks: [AtomicPtr<T>; MAX_CHUNKS],
    /// The table hands out `&T` to every thread: it is `Sync` only when `T` is.
    values: PhantomData<T>,
}

impl<T, const CHUNK_BITS: u32, const MAX_CHUNKS: usize> std::fmt::Debug for SlotChunks<T, CHUNK_BITS, MAX_CHUNKS> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotChunks").field("chunk_slots", &Self::CHUNK).field("max_chunks", &MAX_CHUNKS).finish()
    }
}

impl<T, const CHUNK_BITS: u32, const MAX_CHUNKS: usize> Default for SlotChunks<T, CHUNK_BITS, MAX_CHUNKS> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, const CHUNK_BITS: u32, const MAX_CHUNKS: usize> SlotChunks<T, CHUNK_BITS, MAX_CHUNKS> {
    const CHUNK: usize = 1 << CHUNK_BITS;
    /// The highest slot number the table can hold.
    pub const MAX_ID: u32 = (MAX_CHUNKS * Self::CHUNK - 1) as u32;

    pub const fn new() -> Self {
        SlotChunks { chunks: [const { AtomicPtr::new(ptr::null_mut()) }; MAX_CHUNKS], values: PhantomData }
    }

    /// Slot `id`, once its chunk exists.
    #[inline]
    pub fn get(&self, id: u32) -> Option<&T> {
        let chunk = self.chunks.get((id >> CHUNK_BITS) as usize)?.load(Ordering::Acquire);
        if chunk.is_null() {
            return None;
        }
        // SAFETY: a non-null chunk is a leaked, never-freed allocation of CHUNK slots (`ensure`),
        // and the index is masked to CHUNK - 1.
        Some(unsafe { &*chunk.add(id as usize & (Self::CHUNK - 1)) })
    }
}

impl<T: Default, const CHUNK_BITS: u32, const MAX_CHUNKS: usize> SlotChunks<T, CHUNK_BITS, MAX_CHUNKS> {
    /// Allocates the chunk of slot `id` (`id` at most [`Self::MAX_ID`]) if it does not exist yet.
    /// Callers serialise their calls (under their registry's lock): two racing calls would leave
    /// one chunk leaked and its counts unseen, though every reference stays valid.
    pub fn ensure(&self, id: u32) {
        let index = (id >> CHUNK_BITS) as usize;
        if self.chunks[index].load(Ordering::Acquire).is_null() {
            let chunk: Box<[T]> = (0..Self::CHUNK).map(|_| T::default()).collect();
            self.chunks[index].store(Box::into_raw(chunk) as *mut T, Ordering::Release);
        }
    }
}

const KEY_EMPTY: u8 = 0;
const KEY_WRITING: u8 = 1;
const KEY_READY: u8 = 2;

/// A key of `N` words written once into a shared entry, lock-free: an empty entry is claimed with a CAS, its
/// words written, then published. Two threads racing with the same new key may claim two entries; the writers
/// merge equal keys, so what is counted against them stays exact.
pub struct ClaimedKey<const N: usize> {
    state: AtomicU8,
    words: [AtomicU64; N],
}

impl<const N: usize> std::fmt::Debug for ClaimedKey<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ClaimedKey").field(&self.get()).finish()
    }
}

impl<const N: usize> Default for ClaimedKey<N> {
    fn default() -> Self {
        ClaimedKey { state: AtomicU8::new(KEY_EMPTY), words: std::array::from_fn(|_| AtomicU64::new(0)) }
    }
}

impl<const N: usize> ClaimedKey<N> {
    /// Whether the entry holds `key`, claimed for it now if it was empty; `false` if it holds another key (or
    /// another thread is writing one).
    #[inline(always)]
    pub fn holds_or_claims(&self, key: [u64; N]) -> bool {
        match self.state.load(Ordering::Acquire) {
            KEY_READY => self.words.iter().zip(key).all(|(w, v)| w.load(Ordering::Relaxed) == v),
            KEY_EMPTY
                if self
                    .state
                    .compare_exchange(KEY_EMPTY, KEY_WRITING, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok() =>
            {
                for (w, v) in self.words.iter().zip(key) {
                    w.store(v, Ordering::Relaxed);
                }
                self.state.store(KEY_READY, Ordering::Release);
                true
            }
            _ => false,
        }
    }

    /// The key, once one is published.
    #[inline]
    pub fn get(&self) -> Option<[u64; N]> {
        (self.state.load(Ordering::Acquire) == KEY_READY)
            .then(|| std::array::from_fn(|i| self.words[i].load(Ordering::Relaxed)))
    }

    /// Empties the entry, for a table that starts over while no thread records into it (a child after fork).
    pub fn clear(&self) {
        self.state.store(KEY_EMPTY, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn slots_exist_once_their_chunk_does_and_keep_their_place() {
        static TABLE: SlotChunks<AtomicU64, 2, 3> = SlotChunks::new();
        assert_eq!(SlotChunks::<AtomicU64, 2, 3>::MAX_ID, 11);
        assert!(TABLE.get(0).is_none() && TABLE.get(5).is_none());
        TABLE.ensure(5);
        // Slots 4..8 share the chunk of 5; 0..4 and 8..12 have none yet; 12 is past the table.
        assert!((4..8).all(|id| TABLE.get(id).is_some()));
        assert!(TABLE.get(3).is_none() && TABLE.get(8).is_none() && TABLE.get(12).is_none());
        let five = TABLE.get(5).unwrap();
        five.fetch_add(7, Ordering::Relaxed);
        TABLE.ensure(6);
        assert!(std::ptr::eq(five, TABLE.get(5).unwrap()), "a chunk is allocated once");
        assert_eq!(TABLE.get(5).unwrap().load(Ordering::Relaxed), 7);
        assert_eq!(TABLE.get(4).unwrap().load(Ordering::Relaxed), 0);
    }
}
