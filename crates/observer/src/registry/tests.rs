use super::*;

/// The registry is process-global: unit tests that touch it take this lock.
pub static TEST_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn shape_words_round_trip() {
    let shape = Shape { grid: [u32::MAX, 7, 65535], block: [1024, 1, 64] };
    assert_eq!(Shape::from_words(shape.words()), shape);
}

#[test]
fn slot_keeps_first_shapes_then_other() {
    let slot = Slot::default();
    let thread = format::runtime::thread_token();
    for i in 0..(SHAPE_BUCKETS as u32 + 3) {
        let shape = Shape { grid: [i + 1, 1, 1], block: [32, 1, 1] };
        slot.record(&shape, u64::from(i) + 1, false, false, thread);
        // Token 0 (no owner possible) takes the atomic path: same counts.
        slot.record(&shape, 1, true, false, 0);
    }
    let counts = slot.shape_counts();
    for (i, entry) in counts.entries.iter().enumerate() {
        let (shape, count) = entry.expect("every bucket used");
        assert_eq!(shape.grid[0], i as u32 + 1);
        assert_eq!(count, i as u64 + 2);
    }
    // Shapes 9, 10, 11 (counts 9+1, 10+1, 11+1) went to "other".
    assert_eq!(counts.other, 10 + 11 + 12);
    assert_eq!(counts.launches(), (1..=11).map(|i| i + 1).sum::<u64>());
    assert_eq!(slot.errors.load(), 11);
    slot.reset_counters();
    assert_eq!(slot.shape_counts().launches(), 0);
}

#[test]
fn concurrent_launches_lose_no_counts() {
    // One of the threads becomes the slot's owner and counts without locked instructions, the
    // others count atomically; new shapes are claimed concurrently.
    let slot = std::sync::Arc::new(Slot::default());
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let slot = slot.clone();
            std::thread::spawn(move || {
                let thread = format::runtime::thread_token();
                for i in 0..10_000u32 {
                    slot.record(&Shape { grid: [i % 3, 1, 1], block: [1, 1, 1] }, 1, i % 7 == 0, false, thread);
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let counts = slot.shape_counts();
    let mut per_shape = [0u64; 3];
    for (shape, count) in counts.entries.iter().flatten() {
        per_shape[shape.grid[0] as usize] += count;
    }
    assert_eq!(counts.other, 0);
    assert_eq!(per_shape, [13_336, 13_332, 13_332]);
    assert_eq!(counts.launches(), 40_000);
    assert_eq!(slot.errors.load(), 4 * 1_429);
}

#[test]
fn registration_lookup_and_growth() {
    let _serial = TEST_LOCK.lock().unwrap();
    init(DEFAULT_MAX_KERNELS);
    let base = 0x5000_0000usize;
    let before = slot_count();
    // Enough keys to grow the table twice.
    for i in 0..20_000usize {
        let name = format!("registry_test_kernel_{i}");
        let id = register(Api::Hip, base + i * 16, name.as_bytes(), NameSource::Register).unwrap();
        assert_eq!(id, before + i as u32);
    }
    for i in 0..20_000usize {
        let id = lookup(base + i * 16).expect("registered key");
        assert_eq!(&*slot(id).unwrap().meta().unwrap().name, format!("registry_test_kernel_{i}"));
    }
    // Same name again under a second key: same slot. Same key again: unchanged.
    let again = register(Api::Hip, base + 7, b"registry_test_kernel_3", NameSource::Register).unwrap();
    assert_eq!(again, before + 3);
    assert_eq!(register(Api::Hip, base, b"registry_test_kernel_0", NameSource::Register), Some(before));
    // Same name, other API: another slot.
    let cuda = register(Api::Cuda, base + 9, b"registry_test_kernel_3", NameSource::Register).unwrap();
    assert_ne!(cuda, again);
    // First-launch naming keeps an existing mapping.
    assert_eq!(register_if_absent(Api::Hip, base, b"other", NameSource::Synthetic), Some(before));
    assert!(lookup(0x7777_0000).is_none());
    // A null key works like any other.
    let null = register(Api::Hip, 0, b"registry_test_null", NameSource::Synthetic).unwrap();
    assert_eq!(lookup(0), Some(null));
}
