//! Fuzz target `release_archive`: arbitrary bytes unpacked as a llama.cpp release archive would be (the first byte
//! picks `.tar.gz`, plain tar or `.zip`), into a scratch directory under small limits: an error or a tree, never a
//! panic, and never a file, directory or link beside the destination or a link that leads out of it.

#![no_main]

use std::io::Cursor;
use std::path::Path;

use backscope::builds::unpack::{self, UnpackLimits};

const LIMITS: UnpackLimits = UnpackLimits { max_total_bytes: 1 << 20, max_entries: 256, max_entry_bytes: 1 << 19 };

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&kind, bytes)) = data.split_first() else { return };
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let dest = scratch.path().join("d");
    std::fs::create_dir(&dest).expect("the destination");
    let _ = match kind % 3 {
        0 => unpack::unpack_tar(flate2::read::GzDecoder::new(bytes), &dest, LIMITS, "fuzz.tar.gz"),
        1 => unpack::unpack_tar(bytes, &dest, LIMITS, "fuzz.tar"),
        _ => unpack::unpack_zip(Cursor::new(bytes), &dest, LIMITS, "fuzz.zip"),
    };
    let beside: Vec<_> = std::fs::read_dir(scratch.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(beside.len(), 1, "written beside the destination: {beside:?}");
    check_links(&dest, &dest);
});

/// Every symlink under `dir` must be one the unpacker's own rule accepts at its place.
fn check_links(root: &Path, dir: &Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let Ok(t) = e.file_type() else { continue };
        if t.is_symlink() {
            let target = std::fs::read_link(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap();
            assert!(unpack::link_target_problem(rel, &target.to_string_lossy()).is_none(), "{rel:?} -> {target:?}");
        } else if t.is_dir() {
            check_links(root, &p);
        }
    }
}
