//! Counts in a file never size an allocation. A file may claim as many KVs or tensor infos as its size
//! allows at the smallest encoding (13 and 24 bytes), yet a decoded entry is larger than that; a reader that
//! reserved the claimed count would allocate several times the file's size before finding that the first
//! entries are bad. Here the peak heap growth while parsing such files is measured with a counting
//! allocator. One test only: the allocator is global, and parallel tests would add their allocations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use gguf::{Entry, Gguf};

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `alloc`'s contract, which is passed on as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = CURRENT.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: `p` came from `alloc` above with this layout (the caller's contract).
        unsafe { System.dealloc(p, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Peak bytes allocated on top of what was live when `f` started.
fn peak_growth<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f();
    (out, PEAK.load(Ordering::Relaxed) - base)
}

fn header(tensors: u64, kvs: u64, body_len: usize) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&tensors.to_le_bytes());
    b.extend_from_slice(&kvs.to_le_bytes());
    b.resize(b.len() + body_len, 0);
    b
}

#[test]
fn claimed_counts_do_not_size_allocations() {
    const BODY: usize = 24 << 20;
    // Sizing by the count would take over 50 MB in both cases below.
    const LIMIT: usize = 1 << 20;

    // 1.9 million KVs claimed; the first, all zeros, has an empty key.
    let kvs = header(0, (BODY / 13) as u64, BODY);
    let (r, grew) = peak_growth(|| Gguf::parse(&kvs).map(|_| ()));
    let e = r.expect_err("an empty key is an error");
    assert_eq!((e.entry, e.field), (Entry::Kv { index: 0, at: 24 }, "key"), "{e}");
    assert!(grew < LIMIT, "parsing a file claiming {} KVs allocated {grew} bytes", BODY / 13);

    // A million tensor infos claimed; all zeros is a valid info (empty name, no dims, F32, offset 0), so the
    // second one repeats the first one's name.
    let tensors = header((BODY / 24) as u64, 0, BODY);
    let (r, grew) = peak_growth(|| Gguf::parse(&tensors).map(|_| ()));
    let e = r.expect_err("a repeated tensor name is an error");
    assert_eq!((e.entry, e.field), (Entry::Tensor { index: 1, at: 48 }, "name"), "{e}");
    assert!(grew < LIMIT, "parsing a file claiming {} tensor infos allocated {grew} bytes", BODY / 24);
}
