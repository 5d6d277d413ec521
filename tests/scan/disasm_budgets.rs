//! `scan --disasm` in memory and time proportional to the input: a code object whose 300,000 symbols share one
//! 4000-byte name (under 10 MB, it used to cost gigabytes), aliased and compressed code objects disassembled once,
//! the listing cache bounded, and a library truncated during `--disasm`. Each input is generated here, run through
//! the `backscope` binary under an address-space limit and a deadline ([`crate::support::bounded`]), and must end
//! with a warning or problem that names the file and the limit, in bounded RSS and time.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::bounded::{Bounds, GIB, MIB};
use crate::support::scan_inputs::*;

// ---------------------------------------------------------------------------------------------------
// `scan --disasm`
// ---------------------------------------------------------------------------------------------------

/// The llvm-objdump the disassembly tests run (the Debian llvm-19 package, as tests/scan/disasm.rs uses).
fn llvm_objdump() -> PathBuf {
    let p = PathBuf::from("/usr/bin/llvm-objdump-19");
    assert!(p.exists(), "llvm-objdump-19 is needed: apt-get install llvm-19");
    p
}

/// `s_endpgm` in the GCN3/gfx9 encoding (SOPP, opcode 1: 0xBF810000), little-endian.
const S_ENDPGM: [u8; 4] = [0x00, 0x00, 0x81, 0xbf];

/// A gfx900 code object whose `.text` is `symbols` `s_endpgm` instructions, each under its own function symbol,
/// every symbol's name pointing at the same `name` in `.strtab`; its metadata note names one kernel, `name`.
fn code_object_with_symbols(name: &str, symbols: usize) -> Vec<u8> {
    const SHT_PROGBITS: u32 = 1;
    const SHT_SYMTAB: u32 = 2;
    const SHF_ALLOC_EXECINSTR: u64 = 2 | 4;
    let text = S_ENDPGM.repeat(symbols);
    let mut strtab = vec![0u8];
    strtab.extend(name.as_bytes());
    strtab.push(0);
    let mut symtab = vec![0u8; 24];
    for i in 0..symbols as u64 {
        symtab.extend(1u32.to_le_bytes()); // st_name: the one name
        symtab.push(0x12); // STB_GLOBAL, STT_FUNC
        symtab.push(0);
        symtab.extend(1u16.to_le_bytes()); // st_shndx: .text
        symtab.extend((i * 4).to_le_bytes());
        symtab.extend(4u64.to_le_bytes());
    }
    let mut note = Vec::new();
    let desc = note_with_kernels(&[name.to_string()]);
    note.extend(7u32.to_le_bytes());
    note.extend((desc.len() as u32).to_le_bytes());
    note.extend(32u32.to_le_bytes());
    note.extend(b"AMDGPU\0\0");
    note.extend(&desc);
    note.resize(note.len().next_multiple_of(4), 0);
    let secs = vec![
        Sec { align: 256, flags: SHF_ALLOC_EXECINSTR, ..sec(".text", SHT_PROGBITS, text) },
        Sec { align: 1, ..sec(".strtab", SHT_STRTAB, strtab) },
        Sec { link: 2, info: 1, entsize: 24, ..sec(".symtab", SHT_SYMTAB, symtab) },
        Sec { align: 4, ..sec(".note", SHT_NOTE, note) },
    ];
    elf64(224, 64, 3, 0x2c, secs)
}

/// Files under `dir`, recursively, with their sizes.
fn files_under(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        let meta = e.metadata().unwrap();
        if meta.is_dir() {
            out.extend(files_under(&e.path()));
        } else {
            out.push((e.path(), meta.len()));
        }
    }
    out
}

/// `scan --disasm` of the code object `co` (written to `dir/shared-names.co`) with its listing cache in
/// `dir/cache`, bounded: the file, the cache and the run.
fn disasm_with_cache(dir: &Path, co: &[u8]) -> (PathBuf, PathBuf, Run) {
    let file = dir.join("shared-names.co");
    fs::write(&file, co).unwrap();
    let cache = dir.join("cache");
    let objdump = llvm_objdump();
    let args = ["--disasm", "--llvm-objdump", objdump.to_str().unwrap(), "--disasm-cache", cache.to_str().unwrap()];
    let run = scan_bounded(&args, &[&file], Bounds::default());
    (file, cache, run)
}

/// An 8.4 MB code object: 300,000 symbols sharing one 4000-byte name. llvm-objdump prints the name once
/// per symbol (1.2 GB of labels): 1.34 GB RSS, a 1.2 GB cache file, 2.5 GB when read back. Now a listing keeps
/// one entry per distinct name, the output read is capped in proportion to the code object's size (a warning names
/// the cap), and a listing cut at the cap is not cached.
#[test]
fn a_code_object_whose_symbols_share_one_long_name_is_disassembled_in_bounded_memory() {
    let name = "k".repeat(4000);
    let co = code_object_with_symbols(&name, 300_000);
    assert!(co.len() < 9_000_000, "{}", co.len());
    let tmp = tempfile::tempdir().unwrap();
    let (file, cache, run) = disasm_with_cache(tmp.path(), &co);
    eprintln!("{}", run.describe());
    let report = run.assert_bounded(30, GIB);
    let (_, severity, message) = run.problem(&file, &["disassembler's output", "cut", "limit"]);
    assert_eq!(severity, "warning", "{message}");
    let cos = report["disasm"]["code_objects"].as_array().unwrap();
    assert_eq!(cos.len(), 1);
    assert_eq!(cos[0]["truncated"], true);
    let kernels = cos[0]["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 1);
    let counted = kernels[0]["instructions"].as_u64().unwrap();
    assert!(counted > 0 && counted <= 300_000, "a lower bound of the 300,000 s_endpgm: {counted}");
    let cached: u64 = files_under(&cache).iter().map(|(_, n)| n).sum();
    assert!(cached < MIB, "a cut listing is not cached: {cached} bytes");
}

/// The same name shared by 2,000 symbols: 8 MB of labels, read whole. Every label of the name is one function, so
/// the kernel counts all 2,000 instructions (the generator put one `s_endpgm` under each symbol), and the
/// listing cached for it holds the name once.
#[test]
fn labels_that_repeat_a_name_count_as_one_function() {
    let name = "k".repeat(4000);
    let co = code_object_with_symbols(&name, 2000);
    let tmp = tempfile::tempdir().unwrap();
    let (_, cache, run) = disasm_with_cache(tmp.path(), &co);
    let report = run.assert_bounded(30, 512 * MIB);
    let k = &report["disasm"]["code_objects"][0]["kernels"][0];
    assert_eq!(k["instructions"], 2000, "{k}");
    assert_eq!(report["disasm"]["code_objects"][0]["truncated"], false);
    let entries = files_under(&cache);
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(entries[0].1 < 8000, "the name is stored once: {} bytes", entries[0].1);
}

/// The listing cache: an entry far larger than any listing (a 1.2 GB file, sparse here) was read whole (2.5 GB) and
/// never evicted. Now an entry over the per-entry cap is a miss that is not read, the listing is disassembled
/// again and stored over it, and old entries are evicted once the cache passes its cap.
#[test]
fn the_listing_cache_is_bounded_on_read_and_evicts_old_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("small.co");
    fs::write(&file, code_object_with_symbols("kernel", 1000)).unwrap();
    let cache = tmp.path().join("cache");
    let objdump = llvm_objdump();
    let args = ["--disasm", "--llvm-objdump", objdump.to_str().unwrap(), "--disasm-cache", cache.to_str().unwrap()];
    let first = scan_bounded(&args, &[&file], Bounds::default());
    first.assert_bounded(30, 512 * MIB);
    let entries = files_under(&cache);
    assert_eq!(entries.len(), 1, "{entries:?}");
    let (entry, _) = &entries[0];
    // Planted: the entry itself and an unrelated old entry of another tool, each 1.2 GB (sparse).
    let planted_other = cache.join("llvm-objdump-old").join("gfx900-0000.json");
    fs::create_dir_all(planted_other.parent().unwrap()).unwrap();
    for p in [entry, &planted_other] {
        let f = fs::File::create(p).unwrap();
        f.set_len(1_200_000_000).unwrap();
        f.set_modified(std::time::SystemTime::now() - Duration::from_secs(3600)).unwrap();
    }

    let again = scan_bounded(&args, &[&file], Bounds::default());
    eprintln!("{}", again.describe());
    let report = again.assert_bounded(30, 512 * MIB);
    assert_eq!(report["disasm"]["stats"]["from_cache"], 0, "the oversized entry is a miss");
    assert_eq!(report["disasm"]["stats"]["disassembled"], 1);
    // One s_endpgm under each of the 1000 symbols, all named `kernel`.
    assert_eq!(report["disasm"]["code_objects"][0]["kernels"][0]["instructions"], 1000);
    let after = files_under(&cache);
    assert!(!planted_other.exists(), "the old entry is evicted: {after:?}");
    assert!(after.iter().all(|(_, n)| *n < MIB), "{after:?}");
    assert!(after.iter().any(|(p, _)| p == entry), "the entry is rewritten: {after:?}");
}

/// `disasm` mapped files with a plain mmap: a library truncated while its code objects are read for the
/// disassembler killed the scan with SIGBUS. A bundle of 64 code objects is cut to one page by the disassembler
/// itself, the first time it is run (a wrapper around llvm-objdump), while the other code objects are still to be
/// read from the map: they become a problem that names the file and where it now ends, and the process lives.
#[test]
fn a_file_truncated_during_disasm_is_a_problem_not_a_sigbus() {
    let tmp = tempfile::tempdir().unwrap();
    let id = "hipv4-amdgcn-amd-amdhsa--gfx900";
    let n = 64u64;
    let co = code_object_with_symbols("kernel", 16_000);
    let stride = (co.len() as u64).next_multiple_of(4096);
    let first_at = 0x10000u64;
    let entries: Vec<_> = (0..n).map(|i| (id, first_at + i * stride, co.len() as u64)).collect();
    let mut payload = Vec::new();
    for _ in 0..n {
        payload.extend(&co);
        payload.resize(payload.len().next_multiple_of(4096), 0);
    }
    let file = tmp.path().join("bundle.co");
    fs::write(&file, offload_bundle(&entries, first_at, &payload)).unwrap();
    let objdump = llvm_objdump();
    let wrapper = tmp.path().join("llvm-objdump-cutting");
    let mark = tmp.path().join("cut");
    fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ \"$1\" != --version ] && [ ! -e '{mark}' ]; then : > '{mark}'; truncate -s 4096 '{file}'; fi\n\
             exec '{objdump}' \"$@\"\n",
            mark = mark.display(),
            file = file.display(),
            objdump = objdump.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();

    let args = ["--disasm", "--no-disasm-cache", "--llvm-objdump", wrapper.to_str().unwrap()];
    let bounds = Bounds { env: vec![("RAYON_NUM_THREADS", "2".into())], ..Bounds::default() };
    let run = scan_bounded(&args, &[&file], bounds);
    assert_eq!(run.signal, None, "{}", run.describe());
    assert!(mark.exists(), "the wrapper ran and cut the file");
    let report = run.assert_bounded(60, GIB);
    assert_eq!(report["disasm"]["stats"]["selected"], n);
    let (offset, severity, message) = run.problem(&file, &["changed while it was read"]);
    let at = offset.expect("the offset where the bytes were gone");
    assert!(at >= 4096 && at < payload.len() as u64 + first_at, "past the cut at 4096: {message}");
    assert_eq!(severity, "error", "{message}");
    assert!(report["disasm"]["stats"]["failed"].as_u64().unwrap() > 0);
}

/// A wrapper around llvm-objdump that appends a line to `log` for every disassembly (not for `--version`).
fn counting_objdump(dir: &Path, log: &Path) -> PathBuf {
    let wrapper = dir.join("llvm-objdump-counting");
    let script = format!(
        "#!/bin/sh\n[ \"$1\" != --version ] && echo \"$@\" >> '{}'\nexec '{}' \"$@\"\n",
        log.display(),
        llvm_objdump().display()
    );
    fs::write(&wrapper, script).unwrap();
    fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    wrapper
}

/// Two code objects (kernels `alpha`, one `s_endpgm` under each of its 100 symbols, and `beta`, 200), each named by
/// three bundle entries (aliases), stored plain and as a CCOB: every alias was disassembled again, and inside the
/// CCOB every code object decompressed the whole bundle again. Now each code object is disassembled once (the
/// wrapper counts llvm-objdump's runs), the CCOB is decompressed once for both, and the report is the same for
/// the plain and the compressed bundle: six records, each alias with its code object's counts.
#[test]
fn aliased_and_compressed_code_objects_are_disassembled_once_each() {
    let id = "hipv4-amdgcn-amd-amdhsa--gfx900";
    let alpha = code_object_with_symbols("alpha", 100);
    let beta = code_object_with_symbols("beta", 200);
    let at = 0x1000u64;
    let beta_at = (at + alpha.len() as u64).next_multiple_of(4096);
    let mut payload = alpha.clone();
    payload.resize((beta_at - at) as usize, 0);
    payload.extend(&beta);
    let mut entries = Vec::new();
    for _ in 0..3 {
        entries.push((id, at, alpha.len() as u64));
        entries.push((id, beta_at, beta.len() as u64));
    }
    let plain = offload_bundle(&entries, at, &payload);
    let compressed = ccob_v3_zlib(&zlib_prefix_then_zeros(&plain, 0), plain.len() as u64, 0);

    let tmp = tempfile::tempdir().unwrap();
    let mut reports = Vec::new();
    for (name, bytes) in [("plain.co", &plain), ("compressed.co", &compressed)] {
        let file = tmp.path().join(name);
        fs::write(&file, bytes).unwrap();
        let log = tmp.path().join(format!("{name}.runs"));
        let wrapper = counting_objdump(tmp.path(), &log);
        let args = ["--disasm", "--no-disasm-cache", "--llvm-objdump", wrapper.to_str().unwrap()];
        let run = scan_bounded(&args, &[&file], Bounds::default());
        let report = run.assert_bounded(30, 512 * MIB).clone();
        let runs = fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(runs.lines().count(), 2, "{name}: one llvm-objdump run per code object: {runs}");
        let cos = report["disasm"]["code_objects"].as_array().unwrap().clone();
        assert_eq!(cos.len(), 6, "{name}");
        let counts: Vec<(String, u64)> = cos
            .iter()
            .map(|c| {
                let k = &c["kernels"][0];
                (k["name"].as_str().unwrap().to_string(), k["instructions"].as_u64().unwrap())
            })
            .collect();
        let mut sorted = counts.clone();
        sorted.sort();
        let expected: Vec<(String, u64)> =
            [("alpha", 100), ("alpha", 100), ("alpha", 100), ("beta", 200), ("beta", 200), ("beta", 200)]
                .map(|(n, c)| (n.to_string(), c))
                .into();
        assert_eq!(sorted, expected, "{name}");
        reports.push(counts);
    }
    assert_eq!(reports[0], reports[1], "the compressed bundle reports what the plain one does");
}
