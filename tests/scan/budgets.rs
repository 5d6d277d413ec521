//! Inputs whose every field is in bounds but whose limits multiply into hours or gigabytes, and system
//! situations that used to stall or kill a scan: each runs the `backscope scan` binary as a child under a
//! 4 GiB address-space limit and a deadline, and must end with a problem or warning that names the file,
//! the offset and the limit, exit 0 or 1, bounded peak RSS and time, and no process left behind.
//!
//! Every input is generated here (or cut from a real fixture) at a size that broke the scan before the
//! budgets existed: an abort, the OOM killer, a hang or a SIGBUS.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::bounded::{self, Bounds, GIB, MIB};
use crate::support::scan_inputs::*;
use crate::support::util::*;

// ---------------------------------------------------------------------------------------------------
// Generators (the shared ones are in scan_inputs)
// ---------------------------------------------------------------------------------------------------

/// An LZ4 raw block that decodes to `n` zero bytes (n ≥ 12): one literal zero, one match of offset 1
/// covering all but the last 5 bytes, then 5 literal zeros (the block format ends with literals). About
/// n / 255 bytes: LZ4's densest encoding, the ratio the 1 GiB cap was measured against.
fn lz4_zeros(n: u64) -> Vec<u8> {
    let match_len = n - 6;
    let mut out = Vec::with_capacity((n / 255 + 64) as usize);
    let extra = match_len - 4;
    out.push(0x10 | extra.min(15) as u8);
    out.push(0);
    out.extend(1u16.to_le_bytes());
    if extra >= 15 {
        let mut rest = extra - 15;
        while rest >= 255 {
            out.push(255);
            rest -= 255;
        }
        out.push(rest as u8);
    }
    out.push(0x50);
    out.extend([0u8; 5]);
    out
}

/// A CUDA fatbin container whose entries are LZ4-compressed cubins (kind 2, sm_86) of `payloads`
/// (compressed block, decompressed size).
fn lz4_fatbin(payloads: &[(Vec<u8>, u64)]) -> Vec<u8> {
    let mut entries = Vec::new();
    for (block, decompressed) in payloads {
        let padded = block.len().next_multiple_of(8);
        entries.extend(2u16.to_le_bytes());
        entries.extend(0x0101u16.to_le_bytes());
        entries.extend(64u32.to_le_bytes());
        entries.extend((padded as u64).to_le_bytes());
        entries.extend((block.len() as u32).to_le_bytes());
        entries.extend(0u32.to_le_bytes());
        entries.extend(7u16.to_le_bytes());
        entries.extend(1u16.to_le_bytes());
        entries.extend(86u32.to_le_bytes());
        entries.extend(0u32.to_le_bytes());
        entries.extend(0u32.to_le_bytes());
        entries.extend((0x2000u64 | 0x11).to_le_bytes());
        entries.extend(0u64.to_le_bytes());
        entries.extend(decompressed.to_le_bytes());
        entries.extend_from_slice(block);
        entries.resize(entries.len().next_multiple_of(8), 0);
    }
    let mut out = 0xBA55_ED50u32.to_le_bytes().to_vec();
    out.extend(1u16.to_le_bytes());
    out.extend(16u16.to_le_bytes());
    out.extend((entries.len() as u64).to_le_bytes());
    out.extend(entries);
    out
}

// ---------------------------------------------------------------------------------------------------
// Rows
// ---------------------------------------------------------------------------------------------------

/// Row 1: 30,000 `DT_NEEDED` names and a 30,000-directory `DT_RPATH` (1 MB): every name was probed in
/// every directory (9 · 10⁸ opens) and every queue entry copied the RPATH list (23.5 GB, OOM-killed).
#[test]
fn dependency_product_stops_at_the_probe_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let needed: Vec<String> = (0..30_000).map(|i| format!("libabsent{i:05}.so")).collect();
    let rpath: Vec<String> = (0..30_000).map(|i| format!("/nonexistent/d{i:05}")).collect();
    let lib = tmp.path().join("libproduct.so");
    fs::write(&lib, host_library(&needed, &rpath.join(":"))).unwrap();
    assert!(fs::metadata(&lib).unwrap().len() > 900_000);

    let run = scan_bounded(&[], &[&lib], Bounds::default());
    let report = run.assert_bounded(30, 512 * MIB);
    let (offset, severity, message) = run.problem(&lib, &["dependency", "limit"]);
    assert_eq!((offset, severity.as_str()), (None, "warning"), "{message}");
    let deps = report["files"][0]["dependencies"].as_array().unwrap();
    assert!(!deps.is_empty() && deps.len() < needed.len(), "resolution stopped partway: {}", deps.len());
    assert!(deps.iter().all(|d| d["via"] == "missing"));
}

/// Row 2: a `DT_NEEDED` naming a FIFO (absolute, or next to the library) or `/dev/stdin`: the resolver
/// opened candidates with a blocking `open` and `read`, so the scan hung forever.
#[test]
fn fifos_and_stdin_among_dependencies_are_not_opened() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let fifo = dir.join("libfifo-abs.so");
    for f in [&fifo, &dir.join("libfifo-next.so")] {
        assert!(Command::new("mkfifo").arg(f).status().unwrap().success());
    }
    let needed = vec![fifo.display().to_string(), "libfifo-next.so".to_string(), "/dev/stdin".to_string()];
    let lib = dir.join("libneedsfifo.so");
    fs::write(&lib, host_library(&needed, "$ORIGIN")).unwrap();
    // Standard input is a pipe that stays open and silent, as a terminal would.
    let (reader, _writer) = std::io::pipe().unwrap();
    let bounds = Bounds { stdin: Some(reader.into()), deadline: Duration::from_secs(60), ..Bounds::default() };
    let run = scan_bounded(&[], &[&lib], bounds);
    let report = run.assert_bounded(20, 512 * MIB);
    let lib_record = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == lib.display().to_string())
        .expect("the library has a record");
    let deps = lib_record["dependencies"].as_array().unwrap();
    assert_eq!(deps.len(), 3, "{deps:?}");
    assert!(deps.iter().all(|d| d["via"] == "missing"), "{deps:?}");
    let (_, severity, _) = run.problem(&fifo, &["not a regular file"]);
    assert_eq!(severity, "warning");
    run.problem(&dir.join("libfifo-next.so"), &["not a regular file"]);
}

/// Row 3: LZ4 entries that each inflate to exactly the 1 GiB cap, six in one 25 MB fatbin. Every rayon
/// thread held its own 1 GiB buffer: with 8 threads the scan needed 8 GiB and aborted under the limit
/// ("memory allocation of 1073741824 bytes failed"). Now the decompression budget holds the bytes in flight
/// to 1.5 GiB whatever the thread count, and every entry is still decoded.
#[test]
fn full_size_payloads_share_one_decompression_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let block = lz4_zeros(GIB);
    let fatbin = lz4_fatbin(&vec![(block, GIB); 6]);
    let file = tmp.path().join("six-gib.fatbin");
    fs::write(&file, &fatbin).unwrap();
    let bounds = Bounds { env: vec![("RAYON_NUM_THREADS", "8".into())], ..Bounds::default() };
    let run = scan_bounded(&[], &[&file], bounds);
    let report = run.assert_bounded(120, 2 * GIB);
    let entries = report["files"][0]["cuda"]["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 6);
    // Each decoded to its announced size: the cubin decoder then rejects the zeros as an ELF.
    for e in entries {
        assert_eq!(e["compression"]["uncompressed_size"], GIB);
        assert!(e["error"].as_str().unwrap().contains("cubin ELF magic"), "{e}");
    }
}

/// Row 3, second half: under an address-space limit too small for even one 1 GiB buffer the allocation
/// failed with an abort; now it is a problem naming the entry's size field.
#[test]
fn an_allocation_the_memory_limit_refuses_is_a_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let fatbin = lz4_fatbin(&[(lz4_zeros(GIB), GIB)]);
    let file = tmp.path().join("one-gib.fatbin");
    fs::write(&file, &fatbin).unwrap();
    let bounds = Bounds { address_space: 768 * MIB, ..Bounds::default() };
    let run = scan_bounded(&[], &[&file], bounds);
    run.assert_bounded(60, 768 * MIB);
    let (offset, severity, message) = run.problem(&file, &["decompressed size", "allocat"]);
    assert_eq!((offset, severity.as_str()), (Some(16 + 56), "error"), "{message}");
}

/// Row 4: a metadata note with 20 million empty kernel maps (20 MB): a 208-byte record per 1-byte map,
/// 4.1 GB, and an abort under the limit. Now the count is checked against the cap at the array header.
#[test]
fn metadata_note_flood_is_refused_at_its_count() {
    let tmp = tempfile::tempdir().unwrap();
    let count: u32 = 20_000_000;
    let mut desc = vec![0x81];
    mp_str(&mut desc, "amdhsa.kernels");
    let array_at = desc.len() as u64;
    desc.push(0xdd);
    desc.extend(count.to_be_bytes());
    desc.resize(desc.len() + count as usize, 0x80);
    let co = amdgpu_code_object(&desc);
    let file = tmp.path().join("flood.hsaco");
    fs::write(&file, &co).unwrap();
    let note_desc_at = find(&co, &desc[..16]).unwrap() as u64;

    let run = scan_bounded(&["--kernels"], &[&file], Bounds::default());
    run.assert_bounded(30, 512 * MIB);
    let (offset, severity, message) = run.problem(&file, &["amdhsa.kernels", "262144 kernels"]);
    assert_eq!((offset, severity.as_str()), (Some(note_desc_at + array_at), "error"), "{message}");
}

/// Row 5: a bundle of a million empty entries (24 MB) became a million records (685 MB, "1000000 code
/// objects").
#[test]
fn a_bundle_of_a_million_empty_entries_is_refused_at_its_count() {
    let tmp = tempfile::tempdir().unwrap();
    let million = offload_bundle(&vec![("", 0, 0); 1_000_000], 32 + 24 * 1_000_000, b"");
    let flat = tmp.path().join("million.co");
    fs::write(&flat, &million).unwrap();
    let run = scan_bounded(&[], &[&flat], Bounds::default());
    let report = run.assert_bounded(30, 512 * MIB);
    let (offset, severity, message) = run.problem(&flat, &["entry count", "4096 entries per bundle"]);
    assert_eq!((offset, severity.as_str()), (Some(24), "error"), "{message}");
    assert!(report["files"][0]["amdgpu"]["code_objects"].as_array().unwrap().is_empty());
}

/// Row 5, second half: a 6.6 MB CCOB whose 1 GiB bundle claims 44 million entries reserved 4.29 GB for them
/// and aborted.
#[test]
fn a_ccob_whose_bundle_claims_44_million_entries_is_refused_at_its_count() {
    let tmp = tempfile::tempdir().unwrap();
    // The decompressed bundle is a header and zero entries up to 1 GiB.
    let inner_len = GIB;
    let count = (inner_len - 32) / 24;
    let mut header = b"__CLANG_OFFLOAD_BUNDLE__".to_vec();
    header.extend(count.to_le_bytes());
    let stream = zlib_prefix_then_zeros(&header, inner_len - 32);
    let ccob = ccob_v3_zlib(&stream, inner_len, 0);
    let file = tmp.path().join("claims44m.co");
    fs::write(&file, &ccob).unwrap();
    let run = scan_bounded(&[], &[&file], Bounds::default());
    run.assert_bounded(120, 1536 * MIB);
    let (offset, _, message) = run.problem(&file, &["entry count", "4096 entries per bundle", "decompressed"]);
    assert_eq!(offset, Some(0), "the CCOB's file offset: {message}");
    assert!(message.contains("0x18"), "names the offset inside the decompressed bundle: {message}");
}

const GFX900_KERNELS: &str = "librocblas0/usr/lib/x86_64-linux-gnu/rocblas/2.47.0/library/Kernels.so-000-gfx900.hsaco";
const GFX900_ID: &str = "hipv4-amdgcn-amd-amdhsa--gfx900";

/// Where the payload of a bundle of `n` entries with [`GFX900_ID`] may start.
fn payload_at(n: u64) -> u64 {
    (32 + n * (24 + GFX900_ID.len() as u64)).next_multiple_of(4096)
}

/// Row 6: 100,000 bundle entries that all point at the same real 22 MB code object (rocBLAS's gfx900
/// kernels): every alias was parsed again (98 s), and with `--kernels` its 1,542 kernels were repeated
/// each time. Now a bundle has at most 4096 entries.
#[test]
fn more_bundle_entries_than_the_cap_are_refused() {
    let co = fs::read(fixture(GFX900_KERNELS)).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let id = GFX900_ID;
    let many: Vec<_> = vec![(id, payload_at(100_000), co.len() as u64); 100_000];
    let file = tmp.path().join("aliases-100000.co");
    fs::write(&file, offload_bundle(&many, payload_at(100_000), &co)).unwrap();
    let run = scan_bounded(&["--kernels"], &[&file], Bounds::default());
    run.assert_bounded(30, 512 * MIB);
    run.problem(&file, &["entry count", "4096 entries per bundle"]);
}

/// Row 6, at the cap: 4096 entries aliasing the real code object are decoded once and its kernels are
/// listed once.
#[test]
fn aliased_bundle_entries_are_decoded_and_listed_once() {
    let co = fs::read(fixture(GFX900_KERNELS)).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let id = GFX900_ID;
    let n = 4096;
    let at_cap: Vec<_> = vec![(id, payload_at(n), co.len() as u64); n as usize];
    let file = tmp.path().join("aliases-4096.co");
    fs::write(&file, offload_bundle(&at_cap, payload_at(n), &co)).unwrap();
    let run = scan_bounded(&["--kernels"], &[&file], Bounds::default());
    let report = run.assert_bounded(60, GIB);
    let cos = report["files"][0]["amdgpu"]["code_objects"].as_array().unwrap();
    assert_eq!(cos.len(), n as usize, "one record per entry");
    let decoded: Vec<_> = cos.iter().filter(|c| c.get("alias").is_none()).collect();
    assert_eq!(decoded.len(), 1, "the code object is decoded once");
    assert_eq!(decoded[0]["kernels"].as_array().unwrap().len(), 1542);
    for c in cos.iter().filter(|c| c["alias"] == true) {
        assert_eq!(c["kernel_count"], 1542);
        assert_eq!(c["offset"], decoded[0]["offset"]);
        assert!(c.get("kernels").is_none(), "alias records do not repeat the kernels");
    }
}

/// Row 6, overlapping: entries that all start at the real code object but each end one byte later are
/// distinct, so aliasing does not catch them, yet each one is the whole 22 MB object again. A bundle now
/// decodes at most its own length: the first entry, then a problem.
#[test]
fn overlapping_bundle_entries_are_decoded_up_to_the_bundle_length() {
    let co = fs::read(fixture(GFX900_KERNELS)).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let n = 4096u64;
    let entries: Vec<_> = (0..n).map(|k| (GFX900_ID, payload_at(n), co.len() as u64 + k)).collect();
    let mut payload = co.clone();
    payload.resize(co.len() + n as usize, 0);
    let file = tmp.path().join("overlapping.co");
    fs::write(&file, offload_bundle(&entries, payload_at(n), &payload)).unwrap();
    let run = scan_bounded(&["--kernels"], &[&file], Bounds::default());
    let report = run.assert_bounded(60, GIB);
    let (offset, severity, message) = run.problem(&file, &["overlap", "at most its own length", "4095 entries"]);
    assert_eq!((offset, severity.as_str()), (Some(0), "error"), "{message}");
    let cos = report["files"][0]["amdgpu"]["code_objects"].as_array().unwrap();
    assert_eq!(cos.len(), 1);
    assert_eq!(cos[0]["kernels"].as_array().unwrap().len(), 1542);
}

/// A kernel-name demangling bomb: 20 nested back-references, each doubling what it refers to, make a
/// 239-byte name demangle to 27 MB (checked with cpp_demangle when this test was written). `variant`
/// picks the function's name, `f000`…`f999`, so that the names are distinct.
fn demangle_bomb(variant: usize) -> String {
    // Substitution candidates: the function (S_), A (S0_), B (S1_), A<B, B> (S2_), then each A<Sk, Sk>.
    let mut name = format!("_Z4f{variant:03}I1AI1B1BE");
    for k in 0..20 {
        let sub = seq_id(k + 4);
        name.push_str(&format!("S0_I{sub}{sub}E"));
    }
    name.push_str("Evv");
    name
}

/// `<seq-id>` of substitution `i` (`S_` is 0, `S0_` is 1, base 36 after that).
fn seq_id(i: usize) -> String {
    let mut n = i - 1;
    let digits = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let mut s = Vec::new();
    loop {
        s.push(digits[n % 36]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    s.reverse();
    format!("S{}_", String::from_utf8(s).unwrap())
}

/// Row 7: kernel names that demangle to megabytes each (`--kernels` on a 25 KB file: 43 s, 3.8 GB, an
/// abort). Now each name's demangled text is capped and the name shown as `f000<…>`, with a warning.
#[test]
fn demangling_bombs_are_cut_at_the_per_name_limit() {
    let names: Vec<String> = (0..100).map(demangle_bomb).collect();
    assert!(names.iter().all(|n| n.len() == 239), "{}", names[0].len());
    let co = amdgpu_code_object(&note_with_kernels(&names));
    assert!(co.len() < 27_000, "{}", co.len());
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("bombs.hsaco");
    fs::write(&file, &co).unwrap();
    let run = scan_bounded(&["--kernels"], &[&file], Bounds::default());
    let report = run.assert_bounded(30, 512 * MIB);
    let (offset, severity, message) = run.problem(&file, &["demangle", "65536 bytes"]);
    assert_eq!((offset, severity.as_str()), (Some(0), "warning"), "{message}");
    assert!(message.contains("100 kernel names"), "{message}");
    let kernels = report["files"][0]["amdgpu"]["code_objects"][0]["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 100);
    for (i, k) in kernels.iter().enumerate() {
        assert_eq!(k["demangled"], format!("f{i:03}<…>"));
    }
}

/// Row 8: a library truncated while it is scanned (a package manager rewriting it in place) killed the
/// whole scan with SIGBUS. Copies of the real CUDA ggml library are cut to a third (inside its 185 MB
/// `.nv_fatbin`) while a scan decodes them, after growing delays until a cut lands inside the scan: the
/// file becomes a problem naming where it now ends, and the process lives.
#[test]
fn a_library_truncated_during_the_scan_is_a_problem_not_a_sigbus() {
    let lib = fixture("cyllama_cuda12/cyllama_cuda12.libs/libggml-cuda-3851d25f.so");
    let len = fs::metadata(&lib).unwrap().len();
    let cut_to = len / 3;
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("libggml-cuda.so");
    let mut hit = false;
    for (attempt, delay_ms) in [20u64, 50, 100, 200, 400, 800, 1600, 3200].into_iter().cycle().take(16).enumerate() {
        fs::copy(&lib, &copy).unwrap();
        let target = copy.clone();
        let cutter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(delay_ms));
            fs::OpenOptions::new().write(true).open(&target).unwrap().set_len(cut_to).unwrap();
        });
        let run = scan_bounded(&[], &[&copy], Bounds { deadline: Duration::from_secs(60), ..Bounds::default() });
        cutter.join().unwrap();
        assert_eq!(run.signal, None, "attempt {attempt} ({delay_ms} ms): {}", run.describe());
        assert!(matches!(run.code, Some(0 | 1)), "attempt {attempt}: {}", run.describe());
        let cut = run.problems().into_iter().find(|(_, _, _, m)| m.contains("changed while it was read"));
        if let Some((path, offset, severity, message)) = cut {
            assert_eq!(path, copy.display().to_string());
            assert_eq!(severity, "error");
            let at = offset.expect("the offset where the file ended");
            assert!(at >= cut_to - 4095 && at < len, "{at:#x} vs the cut at {cut_to:#x}: {message}");
            assert!(run.report()["files"].as_array().unwrap().is_empty(), "its records are left out");
            hit = true;
            break;
        }
    }
    assert!(hit, "no truncation landed during a scan in 16 attempts");
}

/// Row 16: a tree with a symlink to `/`, and `/proc/self` (whose `root`, `cwd` and `fd/*` lead out): the
/// scan walked the whole file system. Links that leave the roots are now reported and not followed.
#[test]
fn links_out_of_the_scanned_roots_are_not_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("tree");
    fs::create_dir_all(d.join("lib")).unwrap();
    fs::copy(fixture("jax_rocm7_plugin/jax_rocm7_plugin/_prng.so"), d.join("lib/_prng.so")).unwrap();
    symlink("/", d.join("lib/root")).unwrap();
    symlink("/usr/lib/x86_64-linux-gnu/libc.so.6", d.join("lib/libc.so.6")).unwrap();
    symlink("_prng.so", d.join("lib/alias.so")).unwrap();
    let run = scan_bounded(&[], &[&d], Bounds { deadline: Duration::from_secs(60), ..Bounds::default() });
    let report = run.assert_bounded(20, 512 * MIB);
    for link in ["lib/root", "lib/libc.so.6"] {
        let (_, severity, message) = run.problem(&d.join(link), &["outside the scanned roots", "--follow-outside"]);
        assert_eq!(severity, "warning", "{message}");
    }
    let files: Vec<&str> = report["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(files, [d.join("lib/_prng.so").display().to_string()], "the link inside the tree is an alias");
    assert_eq!(report["stats"]["files_seen"], 1);

    // Asked to, the scan follows the link to the file outside (not the one to `/`, here: too big a test).
    fs::remove_file(d.join("lib/root")).unwrap();
    let run = scan_bounded(&["--follow-outside"], &[&d], Bounds::default());
    let report = run.assert_bounded(20, 512 * MIB);
    assert_eq!(report["stats"]["files_seen"], 2);
}

/// Row 16, `/proc/self`: its `root`, `cwd`, `exe` and `fd/*` lead out of it.
#[test]
fn proc_self_is_scanned_without_leaving_it() {
    let proc_self = Path::new("/proc/self");
    let run = scan_bounded(&[], &[proc_self], Bounds { deadline: Duration::from_secs(60), ..Bounds::default() });
    let report = run.assert_bounded(30, 512 * MIB);
    let ps = run.problems();
    for link in ["/root", "/cwd", "/exe"] {
        assert!(
            ps.iter().any(|(p, _, _, m)| p.ends_with(link) && m.contains("outside the scanned roots")),
            "{link} is reported: {:?}",
            ps.iter().take(20).collect::<Vec<_>>()
        );
    }
    assert!(report["stats"]["files_seen"].as_u64().unwrap() < 5000);
}

/// Row 17: a `.so` whose ELF magic was zeroed was skipped without a word (exit 0).
#[test]
fn a_library_with_a_damaged_magic_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let mut bytes = fs::read(fixture("jax_rocm7_plugin/jax_rocm7_plugin/_prng.so")).unwrap();
    bytes[..4].fill(0);
    let lib = tmp.path().join("_prng.so");
    fs::write(&lib, &bytes).unwrap();
    let run = scan_bounded(&[], &[&lib], Bounds::default());
    run.assert_bounded(20, 512 * MIB);
    assert_eq!(run.code, Some(1), "{}", run.describe());
    let (offset, severity, message) = run.problem(&lib, &["ELF magic", "00 00 00 00"]);
    assert_eq!((offset, severity.as_str()), (Some(0), "error"), "{message}");
}

/// Row 17: an error inside a decompressed payload named the payload's own offset as if it were a file
/// offset (0 for the code object's header). Now the problem points at the compressed container in the file
/// and names the offset inside the payload.
#[test]
fn errors_inside_decompressed_payloads_point_at_their_container() {
    let tmp = tempfile::tempdir().unwrap();
    let id = "hipv4-amdgcn-amd-amdhsa--gfx900";
    let ccob_of = |co: &[u8]| {
        let inner = offload_bundle(&[(id, 0x200, co.len() as u64)], 0x200, co);
        ccob_v3_zlib(&zlib_prefix_then_zeros(&inner, 0), inner.len() as u64, 0)
    };
    // A good CCOB, zero padding, then one whose code object's section table lies past its end.
    let good = amdgpu_code_object(&note_with_kernels(&["k".to_string()]));
    let mut bad = good.clone();
    bad[40..48].copy_from_slice(&u64::MAX.to_le_bytes());
    let mut bytes = ccob_of(&good);
    bytes.resize(0x3000, 0);
    bytes.extend(ccob_of(&bad));
    let file = tmp.path().join("two.co");
    fs::write(&file, &bytes).unwrap();
    let run = scan_bounded(&[], &[&file], Bounds::default());
    let report = run.assert_bounded(20, 512 * MIB);
    assert_eq!(report["files"][0]["amdgpu"]["compressed_bundles"], 2);
    let (offset, severity, message) = run.problem(&file, &["AMDGPU code object", "decompressed"]);
    assert_eq!((offset, severity.as_str()), (Some(0x3000), "error"), "the bad CCOB's file offset: {message}");
    // e_shoff sits at 0x28 of an ELF64 header, and the code object at 0x200 of the decompressed bundle.
    assert!(message.contains("at byte offset 0x228 of the payload"), "{message}");
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

// ---------------------------------------------------------------------------------------------------
// The scan-wide budgets through the library, with small limits on real inputs
// ---------------------------------------------------------------------------------------------------

use backscope::gpu::binaries::limits::ScanLimits;
use backscope::gpu::binaries::{self as scanlib, ScanOptions, ScanReport};

fn scan_with(paths: &[&Path], kernels: bool, limits: ScanLimits, threads: usize) -> ScanReport {
    let opts = ScanOptions {
        paths: paths.iter().map(|p| p.to_path_buf()).collect(),
        kernels,
        limits,
        ..ScanOptions::default()
    };
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    pool.install(|| scanlib::scan(&opts))
}

/// The per-file kernel budget is shared out per group of bundles, so what a file keeps does not depend on
/// the number of threads; the problems name the limit.
#[test]
fn the_kernel_budget_of_a_file_gives_the_same_result_on_any_thread_count() {
    let lib = cyllama_hip();
    let limits = ScanLimits { kernels_per_file: 5000, ..ScanLimits::DEFAULT };
    let one = scan_with(&[&lib], true, limits, 1);
    let four = scan_with(&[&lib], true, limits, 4);
    let kernels = |r: &ScanReport| -> Vec<u64> {
        r.files[0].amdgpu.as_ref().unwrap().code_objects.iter().map(|c| c.kernel_count).collect()
    };
    assert_eq!(kernels(&one), kernels(&four));
    let total: u64 = kernels(&one).iter().sum();
    assert!(total <= 5000 && total > 2500, "{total} of the 19,815 kernels fit in the budget");
    let records: usize =
        one.files[0].amdgpu.as_ref().unwrap().code_objects.iter().map(|c| c.kernels.as_ref().map_or(0, Vec::len)).sum();
    assert_eq!(records as u64, total);
    assert_eq!(one.problems, four.problems);
    assert!(
        one.problems.iter().any(|p| p.message.contains("5000 kernels per file") && p.offset.is_some()),
        "{:?}",
        one.problems.first()
    );
}

/// Dependency budgets on a real install tree: the chain stops at the limit with a warning that names it.
#[test]
fn dependency_budgets_stop_resolution_with_a_warning() {
    let dir = fixture("cyllama_rocm/cyllama_rocm.libs");
    let full = scan_with(&[&dir], false, ScanLimits::DEFAULT, 2);
    let most = full.files.iter().map(|f| f.dependencies.len()).max().unwrap();
    assert!(most > 3, "{most}");
    let limits = ScanLimits { dependencies_per_file: 3, ..ScanLimits::DEFAULT };
    let cut = scan_with(&[&dir], false, limits, 2);
    for (f, g) in full.files.iter().zip(&cut.files) {
        assert_eq!(g.dependencies[..], f.dependencies[..f.dependencies.len().min(3)], "{}", f.path);
        if f.dependencies.len() > 3 {
            assert!(cut.problems.iter().any(|p| p.path == f.path && p.message.contains("3 dependencies")));
        }
    }
    let limits = ScanLimits { dependency_probes_per_scan: 10, ..ScanLimits::DEFAULT };
    let cut = scan_with(&[&dir], false, limits, 2);
    assert!(cut.problems.iter().any(|p| p.message.contains("10 paths looked up on disk in this scan")));
}

/// The scan-wide budget of demangled text: past it, names are shown by their fallback, with a warning.
#[test]
fn the_demangling_budget_of_a_scan_falls_back_to_base_names() {
    let lib = cyllama_hip();
    let limits = ScanLimits { demangled_bytes_total: 20_000, ..ScanLimits::DEFAULT };
    let report = scan_with(&[&lib], true, limits, 2);
    let names: Vec<&str> = report.files[0]
        .amdgpu
        .as_ref()
        .unwrap()
        .code_objects
        .iter()
        .flat_map(|c| c.kernels.iter().flatten())
        .map(|k| &*k.demangled)
        .collect();
    let fallback = names.iter().filter(|n| n.ends_with("<…>")).count();
    assert!(fallback > names.len() / 2, "{fallback} of {}", names.len());
    assert!(report.problems.iter().any(|p| p.message.contains("20000 bytes (limit per scan")), "{:?}", report.problems);
}

// ---------------------------------------------------------------------------------------------------
// `$ORIGIN` expansion in the dependency probe
// ---------------------------------------------------------------------------------------------------

/// `count` distinct `DT_NEEDED` names that exist nowhere.
fn absent_names(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("libabsent{i:05}.so")).collect()
}

/// An RPATH of `entries` distinct entries, each `$ORIGIN` repeated `repeat` times, then `/<index>`.
fn origin_rpath(entries: usize, repeat: usize) -> String {
    (0..entries).map(|i| format!("{}/{i}", "$ORIGIN".repeat(repeat))).collect::<Vec<_>>().join(":")
}

/// A directory as deep as an install's library directory, under `tmp`: `$ORIGIN` is this long.
fn install_dir(tmp: &Path) -> PathBuf {
    let dir = tmp.join("an-install-directory-of-ollama/lib/ollama");
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// The kernel's `PATH_MAX` (linux/limits.h): `open(2)` refuses longer paths with ENAMETOOLONG, and so would ld.so.
const PATH_MAX: usize = 4096;

/// Two shapes seen to break the probe: a 117 KB library whose one RPATH entry is 500 × `$ORIGIN` (453 MB, no warning)
/// and a 338 KB one with 64 such entries (an abort at 3.9 GB; here, before the fix: 140 MB in 9.5 s, and an abort after
/// 240 s at the 4 GiB limit). Each expanded entry is far longer than `PATH_MAX`: it is skipped with a warning that
/// names the library, the entry and the limit, and the names are still looked up in the other directories.
#[test]
fn origin_entries_that_expand_past_path_max_are_skipped_with_a_warning() {
    for (entries, names, size) in [(1, 3300, 117_000), (64, 3300, 338_000)] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = install_dir(tmp.path());
        let lib = dir.join("liborigin.so");
        fs::write(&lib, host_library(&absent_names(names), &origin_rpath(entries, 500))).unwrap();
        let len = fs::metadata(&lib).unwrap().len();
        assert!(len.abs_diff(size) < size / 10, "{len} bytes, the shape is {size}");
        // The first entry: 500 × the directory, then `/0`.
        let expanded = 500 * dir.display().to_string().len() + 2;
        assert!(expanded > PATH_MAX, "{expanded}");

        let run = scan_bounded(&[], &[&lib], Bounds { address_space: 2 * GIB, ..Bounds::default() });
        let report = run.assert_bounded(10, 256 * MIB);
        let (_, severity, message) = run.problem(&lib, &["RPATH", "$ORIGIN", "PATH_MAX", "4096"]);
        assert_eq!(severity, "warning", "{message}");
        assert!(message.contains(&format!("{expanded} bytes")), "names the expanded length: {message}");
        let deps = report["files"][0]["dependencies"].as_array().unwrap();
        assert_eq!(deps.len(), names, "every name is still looked up elsewhere");
        assert!(deps.iter().all(|d| d["via"] == "missing"));
    }
}

/// Entries that each expand to just under `PATH_MAX`, 64 of them, and 3,300 names: 3,300 × 64 candidate paths of
/// 4 KB each are 860 MB of paths, all kept in the scan's memo of probed paths (before the fix: 877 MB, 53 s). The
/// probe is now budgeted in bytes: it stops at the budget with a warning that names it.
#[test]
fn origin_entries_under_path_max_stop_at_the_byte_budget_of_the_probe() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = install_dir(tmp.path());
    let origin_len = dir.display().to_string().len();
    let repeat = (PATH_MAX - 64) / origin_len;
    let lib = dir.join("liborigin.so");
    fs::write(&lib, host_library(&absent_names(3300), &origin_rpath(64, repeat))).unwrap();
    assert!(fs::metadata(&lib).unwrap().len() < 10_000_000);

    let run = scan_bounded(&[], &[&lib], Bounds { address_space: 2 * GIB, ..Bounds::default() });
    let report = run.assert_bounded(10, 256 * MIB);
    let (_, severity, message) = run.problem(&lib, &["dependency resolution stopped", "bytes of candidate paths"]);
    assert_eq!(severity, "warning", "{message}");
    assert!(message.contains("limit per file"), "{message}");
    let deps = report["files"][0]["dependencies"].as_array().unwrap();
    assert!(!deps.is_empty() && deps.len() < 3300, "resolution stopped partway: {}", deps.len());
}

/// `gate --install` scans the install with the same probe: the same libraries cost it as little (before the fix:
/// 84 s for the two).
#[test]
fn gate_install_on_an_origin_bomb_is_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = install_dir(tmp.path());
    let origin_len = dir.display().to_string().len();
    let repeat = (PATH_MAX - 64) / origin_len;
    fs::write(dir.join("liborigin.so"), host_library(&absent_names(3300), &origin_rpath(64, repeat))).unwrap();
    fs::write(dir.join("libpastmax.so"), host_library(&absent_names(3300), &origin_rpath(64, 500))).unwrap();
    let args =
        ["gate".into(), "--json".into(), "--arch".into(), "gfx900".into(), "--install".into(), dir.into_os_string()];
    let done = bounded::run(&args, Bounds { address_space: 2 * GIB, ..Bounds::default() });
    done.assert_bounded(&[0, 1], 10, 256 * MIB);
    let report: serde_json::Value = serde_json::from_str(&done.stdout).expect("gate --json prints JSON");
    assert_eq!(report["schema"], "backscope.gate/1");
    // The budget the scan reached is said, naming the library, not dropped.
    let claim = report["claims"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "gate.scan_problems")
        .unwrap_or_else(|| panic!("no scan-problems claim: {}", report["claims"]));
    assert_eq!(claim["confidence"], "Limited");
    let statement = claim["statement"].as_str().unwrap();
    assert!(statement.contains("liborigin.so") || statement.contains("libpastmax.so"), "{statement}");
}

// ---------------------------------------------------------------------------------------------------
// A CCOB whose bundle header says nothing is there
// ---------------------------------------------------------------------------------------------------

/// An offload bundle header (clang's ClangOffloadBundler documentation): the 24-byte magic and a u64 entry count.
fn bundle_header(count: u64) -> Vec<u8> {
    let mut out = b"__CLANG_OFFLOAD_BUNDLE__".to_vec();
    out.extend(count.to_le_bytes());
    out
}

/// A zstd frame (RFC 8878) of `prefix` then `zeros` zero bytes: a raw block with the prefix, then RLE blocks of
/// 128 KiB (the largest block, §3.1.1.2.3), 4 bytes each; the frame content size is given, no checksum.
fn zstd_prefix_then_zeros(prefix: &[u8], zeros: u64) -> Vec<u8> {
    const BLOCK: u64 = 128 << 10;
    let mut out = vec![0x28, 0xb5, 0x2f, 0xfd];
    // Frame header descriptor: an 8-byte content size (flag 3), not single-segment, so a window descriptor
    // follows: exponent 7, mantissa 0 → a 2^(10+7) = 128 KiB window.
    out.push(0xc0);
    out.push(7 << 3);
    out.extend((prefix.len() as u64 + zeros).to_le_bytes());
    let block_header = |out: &mut Vec<u8>, last: bool, kind: u32, size: u64| {
        let h = (size as u32) << 3 | kind << 1 | u32::from(last);
        out.extend(&h.to_le_bytes()[..3]);
    };
    block_header(&mut out, zeros == 0, 0, prefix.len() as u64);
    out.extend_from_slice(prefix);
    let mut left = zeros;
    while left > 0 {
        let n = left.min(BLOCK);
        left -= n;
        block_header(&mut out, left == 0, 1, n);
        out.push(0);
    }
    out
}

/// A 4 MiB CCOB (zstd) and its zlib twin: a bundle header with an entry count of 0, then zeros up to the
/// 1 GiB the CCOB header announces. The whole gibibyte was decompressed (1.03–1.06 GB RSS, 3.3 s) before the
/// 32-byte bundle header said there was nothing in it. Decompression now stops once the bundle's header and entry
/// table say where its entries end, with a warning that names the bytes left undecompressed.
#[test]
fn a_ccob_whose_bundle_has_no_entries_stops_decompressing_at_its_header() {
    let header = bundle_header(0);
    let zstd = zstd_prefix_then_zeros(&header, GIB - 32);
    // The ratio cap (Limits::max_ratio, 256) wants at least 4 MiB of compressed bytes for 1 GiB.
    let ccob_zstd = ccob_v3(1, &zstd, GIB, (4 * MIB as usize).saturating_sub(zstd.len()));
    let zlib = zlib_prefix_then_zeros(&header, GIB - 32);
    let ccob_zlib = ccob_v3_zlib(&zlib, GIB, 0);
    for (name, ccob) in [("empty-zstd.co", ccob_zstd), ("empty-zlib.co", ccob_zlib)] {
        assert!(ccob.len() < 10_000_000, "{name}: {}", ccob.len());
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join(name);
        fs::write(&file, &ccob).unwrap();
        let run = scan_bounded(&[], &[&file], Bounds::default());
        eprintln!("{name}: {}", run.describe());
        let report = run.assert_bounded(10, 256 * MIB);
        let (offset, severity, message) = run.problem(&file, &["not decompressed", "1073741824 bytes"]);
        assert_eq!((offset, severity.as_str()), (Some(0), "warning"), "{name}: {message}");
        assert!(message.contains("0 entries"), "{name}: {message}");
        assert_eq!(report["files"][0]["amdgpu"]["compressed_bundles"], 1, "{name}");
        assert!(report["files"][0]["amdgpu"]["code_objects"].as_array().unwrap().is_empty(), "{name}");
    }
}
