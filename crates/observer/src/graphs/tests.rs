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
