//! The yes-or-no settings the recording hooks ask at every call, in one cache line ([`HOT`]): whether the layer
//! observes, whether it is paused, whether a profile is impersonated, where the black box puts its markers. A hook
//! runs between two of the driver's calls, whose code and data push the layer's out of the core's first-level caches;
//! one line of settings instead of five statics wherever the linker put them is four fewer lines to bring back per
//! call. Each setting's meaning belongs to the module that sets it (named on its lane below).
//!
//! The four settings the bind and dispatch hooks need are the bytes of one word ([`Hot::first_word`]): the hooks
//! tell their common path (observing, nothing else asked) with one load and one compare, where four loads and their
//! branches took ten instructions. Each setting is a [`Lane`] of its word, written by compare-and-swap of the whole
//! word (rarely: at start, at a pause, when a setting is worked out), so that every access is of one size.
//!
//! Settings worked out once ([`OnceFlag`]) come from `OnceLock`s behind environment variables and files, which cost
//! more to ask each time.

use std::sync::atomic::{AtomicU32, Ordering};

/// See the module documentation.
#[repr(C, align(64))]
pub struct Hot {
    /// Bytes 0 to 3: [`STATE`], [`PAUSED`], [`IMPERSONATING`], [`MARKERS_PER_DISPATCH`].
    first: AtomicU32,
    /// Byte 0: [`MARKERS_AT_BARRIERS`].
    second: AtomicU32,
}

pub static HOT: Hot = Hot { first: AtomicU32::new(0), second: AtomicU32::new(0) };

impl Hot {
    /// The first word's four settings ([`STATE`]'s the lowest byte), in one relaxed load: compared whole with a
    /// word made by `u32::from_le_bytes` (as bytes, the compiler compares them one by one).
    #[inline(always)]
    pub fn first_word(&self) -> u32 {
        self.first.load(Ordering::Relaxed)
    }
}

/// `crate::state`'s life cycle (0: not started, then on or off).
pub static STATE: Lane = Lane::new(&HOT.first, 0);
/// `crate::switch`: observation paused (1) or not (0).
pub static PAUSED: Lane = Lane::new(&HOT.first, 1);
/// `crate::impersonate::impersonating`.
pub static IMPERSONATING: OnceFlag = OnceFlag::new(Lane::new(&HOT.first, 2));
/// `crate::progress::markers_per_dispatch`.
pub static MARKERS_PER_DISPATCH: OnceFlag = OnceFlag::new(Lane::new(&HOT.first, 3));
/// `crate::progress::markers_at_barriers`.
pub static MARKERS_AT_BARRIERS: OnceFlag = OnceFlag::new(Lane::new(&HOT.second, 0));

/// One byte of a word of settings.
pub struct Lane {
    word: &'static AtomicU32,
    shift: u32,
}

impl Lane {
    /// Byte `byte` (0 to 3, the lowest first, as `u32::from_le_bytes` numbers them) of `word`.
    pub const fn new(word: &'static AtomicU32, byte: u32) -> Lane {
        Lane { word, shift: byte * 8 }
    }

    #[inline(always)]
    pub fn load(&self, order: Ordering) -> u8 {
        (self.word.load(order) >> self.shift) as u8
    }

    /// Sets the byte to `value` and returns what it was; the word's other bytes are kept.
    pub fn swap(&self, value: u8, order: Ordering) -> u8 {
        let mask = 0xff << self.shift;
        let fetch = match order {
            Ordering::SeqCst => Ordering::SeqCst,
            Ordering::Release | Ordering::Relaxed => Ordering::Relaxed,
            _ => Ordering::Acquire,
        };
        let was = self
            .word
            .fetch_update(order, fetch, |w| Some((w & !mask) | (u32::from(value) << self.shift)))
            .unwrap_or_else(|w| w);
        (was >> self.shift) as u8
    }

    pub fn store(&self, value: u8, order: Ordering) {
        self.swap(value, order);
    }
}

/// A yes-or-no setting worked out once, in a [`Lane`]: 0 not worked out yet, then [`OnceFlag::NO`] or
/// [`OnceFlag::YES`].
pub struct OnceFlag(Lane);

impl OnceFlag {
    pub const NO: u8 = 1;
    pub const YES: u8 = 2;

    pub const fn new(lane: Lane) -> OnceFlag {
        OnceFlag(lane)
    }

    /// The answer, from `work_out` the first time (two threads asking first may both call it: it must give the same
    /// answer every time).
    #[inline(always)]
    pub fn get(&self, work_out: fn() -> bool) -> bool {
        match self.0.load(Ordering::Relaxed) {
            OnceFlag::NO => false,
            OnceFlag::YES => true,
            _ => self.first(work_out),
        }
    }

    /// Whether the answer was worked out as yes; "no" while it is not worked out. For the bind and dispatch hooks,
    /// which run only after `crate::start::start` worked out every flag they read (a command buffer needs a device,
    /// a device an instance, and the first instance starts the layer): one load and one compare, without the branch
    /// to the first asking that `get` keeps beside every use.
    #[inline(always)]
    pub fn worked_out_yes(&self) -> bool {
        self.0.load(Ordering::Relaxed) == OnceFlag::YES
    }

    #[cold]
    #[inline(never)]
    fn first(&self, work_out: fn() -> bool) -> bool {
        let yes = work_out();
        self.0.store(if yes { OnceFlag::YES } else { OnceFlag::NO }, Ordering::Relaxed);
        yes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static CALLS: AtomicU32 = AtomicU32::new(0);

    fn yes_once() -> bool {
        CALLS.fetch_add(1, Ordering::Relaxed) == 0
    }

    fn word() -> &'static AtomicU32 {
        Box::leak(Box::new(AtomicU32::new(0)))
    }

    #[test]
    fn the_answer_is_worked_out_once_and_kept() {
        let flag = OnceFlag::new(Lane::new(word(), 0));
        assert!(flag.get(yes_once));
        assert!(flag.get(yes_once), "kept, although the function would now say no");
        assert_eq!(CALLS.load(Ordering::Relaxed), 1);
        assert!(!OnceFlag::new(Lane::new(word(), 3)).get(|| false));
    }

    #[test]
    fn not_worked_out_reads_as_no() {
        let flag = OnceFlag::new(Lane::new(word(), 1));
        assert!(!flag.worked_out_yes());
        assert!(flag.get(|| true));
        assert!(flag.worked_out_yes());
        let no = OnceFlag::new(Lane::new(word(), 2));
        assert!(!no.get(|| false));
        assert!(!no.worked_out_yes());
    }

    #[test]
    fn each_lane_is_its_own_byte_of_the_word() {
        let w = word();
        let lanes = [Lane::new(w, 0), Lane::new(w, 1), Lane::new(w, 2), Lane::new(w, 3)];
        for (i, lane) in lanes.iter().enumerate() {
            lane.store(0x10 + i as u8, Ordering::Release);
        }
        assert_eq!(w.load(Ordering::Relaxed), u32::from_le_bytes([0x10, 0x11, 0x12, 0x13]));
        assert_eq!(lanes[2].swap(0xff, Ordering::SeqCst), 0x12);
        assert_eq!(w.load(Ordering::Relaxed), u32::from_le_bytes([0x10, 0x11, 0xff, 0x13]));
        assert_eq!([lanes[0].load(Ordering::Acquire), lanes[3].load(Ordering::Relaxed)], [0x10, 0x13]);
    }

    #[test]
    fn lanes_written_from_several_threads_keep_one_another() {
        let w = word();
        let threads: Vec<_> = (0..4u32)
            .map(|byte| {
                std::thread::spawn(move || {
                    let lane = Lane::new(w, byte);
                    for v in 0..2_000u32 {
                        lane.store((v % 251) as u8, Ordering::Release);
                    }
                    lane.store(byte as u8 + 1, Ordering::Release);
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(w.load(Ordering::Relaxed), u32::from_le_bytes([1, 2, 3, 4]));
    }
}
