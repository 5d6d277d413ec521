//! The bounded `backscope scan` runner and the generators of hostile scan inputs (ELF host libraries and AMDGPU code
//! objects, offload bundles, zlib streams and CCOBs), shared by tests/scan/budgets.rs and tests/scan/disasm_budgets.rs.

use std::fs;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::support::bounded::{self, Bounds, MIB};

/// What one bounded scan did.
pub struct Run {
    /// Exit code, or `None` when a signal ended it.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// The `--json` report, when the scan wrote one.
    pub report: Option<Value>,
    pub stderr: String,
    pub peak_rss: u64,
    pub elapsed: Duration,
}

impl Run {
    pub fn report(&self) -> &Value {
        self.report.as_ref().unwrap_or_else(|| panic!("no report: {}", self.describe()))
    }

    pub fn describe(&self) -> String {
        format!(
            "exit {:?}, signal {:?}, {:.1} s, peak RSS {} MiB, stderr: {}",
            self.code,
            self.signal,
            self.elapsed.as_secs_f64(),
            self.peak_rss / MIB,
            self.stderr.chars().take(2000).collect::<String>()
        )
    }

    /// Exit 0 or 1 within `seconds`, below `rss` bytes, with a report.
    pub fn assert_bounded(&self, seconds: u64, rss: u64) -> &Value {
        assert!(matches!(self.code, Some(0 | 1)), "{}", self.describe());
        assert!(self.elapsed < Duration::from_secs(seconds), "slower than {seconds} s: {}", self.describe());
        assert!(self.peak_rss < rss, "peak RSS above {} MiB: {}", rss / MIB, self.describe());
        self.report()
    }

    pub fn problems(&self) -> Vec<(String, Option<u64>, String, String)> {
        self.report()["problems"]
            .as_array()
            .expect("problems")
            .iter()
            .map(|p| {
                (
                    p["path"].as_str().unwrap().to_string(),
                    p["offset"].as_u64(),
                    p["severity"].as_str().unwrap().to_string(),
                    p["message"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// The first problem of `path` whose message contains every one of `words`.
    pub fn problem(&self, path: &Path, words: &[&str]) -> (Option<u64>, String, String) {
        let shown = path.display().to_string();
        let ps = self.problems();
        ps.iter()
            .find(|(p, _, _, m)| *p == shown && words.iter().all(|w| m.contains(w)))
            .map(|(_, o, s, m)| (*o, s.clone(), m.clone()))
            .unwrap_or_else(|| panic!("no problem of {shown} mentioning {words:?}: {ps:#?}"))
    }
}

/// `backscope scan --json -o FILE ARGS… PATHS…` under [`bounded::run`]: a 4 GiB address-space limit by default,
/// a deadline, peak RSS measured, nothing of its process group left behind.
pub fn scan_bounded(args: &[&str], paths: &[&Path], bounds: Bounds) -> Run {
    let out_dir = tempfile::tempdir().unwrap();
    let out_file = out_dir.path().join("report.json");
    let mut argv: Vec<std::ffi::OsString> = vec!["scan".into(), "--json".into(), "-o".into(), out_file.clone().into()];
    argv.extend(args.iter().map(Into::into));
    argv.extend(paths.iter().map(|p| p.as_os_str().to_owned()));
    let done = bounded::run(&argv, bounds);
    let report = fs::metadata(&out_file)
        .ok()
        .filter(|m| m.len() > 0 && m.len() < 512 * MIB)
        .and_then(|_| serde_json::from_slice(&fs::read(&out_file).unwrap()).ok());
    assert!(!done.killed, "still running after its deadline, killed: {}", done.describe());
    Run {
        code: done.code,
        signal: done.signal,
        report,
        stderr: done.stderr,
        peak_rss: done.peak_rss,
        elapsed: done.elapsed,
    }
}

// ---------------------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------------------

/// One section of a generated little-endian ELF64.
pub struct Sec {
    pub name: &'static str,
    pub sh_type: u32,
    pub data: Vec<u8>,
    pub link: u32,
    pub entsize: u64,
    pub align: u64,
    /// `sh_flags` (`SHF_ALLOC | SHF_EXECINSTR` for code).
    pub flags: u64,
    /// `sh_info` (for a symbol table: the index of its first non-local symbol).
    pub info: u32,
}

pub fn sec(name: &'static str, sh_type: u32, data: Vec<u8>) -> Sec {
    Sec { name, sh_type, data, link: 0, entsize: 0, align: 8, flags: 0, info: 0 }
}

pub const SHT_STRTAB: u32 = 3;
pub const SHT_DYNAMIC: u32 = 6;
pub const SHT_NOTE: u32 = 7;

/// A little-endian ELF64 (ET_DYN) with the given sections after the null section; `.shstrtab` is added
/// last. `os_abi`/`abi_version`/`e_flags` as given (AMDGPU code objects need them).
pub fn elf64(machine: u16, os_abi: u8, abi_version: u8, e_flags: u32, mut secs: Vec<Sec>) -> Vec<u8> {
    let mut shstrtab = vec![0u8];
    let mut names = Vec::new();
    secs.push(sec(".shstrtab", SHT_STRTAB, Vec::new()));
    for s in &secs {
        names.push(shstrtab.len() as u32);
        shstrtab.extend_from_slice(s.name.as_bytes());
        shstrtab.push(0);
    }
    secs.last_mut().unwrap().data = shstrtab;
    let mut out = vec![0u8; 64];
    let mut offsets = Vec::new();
    for s in &secs {
        out.resize(out.len().next_multiple_of(8), 0);
        offsets.push(out.len() as u64);
        out.extend_from_slice(&s.data);
    }
    out.resize(out.len().next_multiple_of(8), 0);
    let shoff = out.len() as u64;
    out.extend_from_slice(&[0u8; 64]);
    for (i, s) in secs.iter().enumerate() {
        out.extend(names[i].to_le_bytes());
        out.extend(s.sh_type.to_le_bytes());
        out.extend(s.flags.to_le_bytes());
        out.extend(0u64.to_le_bytes()); // addr
        out.extend(offsets[i].to_le_bytes());
        out.extend((s.data.len() as u64).to_le_bytes());
        out.extend(s.link.to_le_bytes());
        out.extend(s.info.to_le_bytes());
        out.extend(s.align.to_le_bytes());
        out.extend(s.entsize.to_le_bytes());
    }
    let shnum = secs.len() as u16 + 1;
    out[..4].copy_from_slice(b"\x7fELF");
    out[4] = 2;
    out[5] = 1;
    out[6] = 1;
    out[7] = os_abi;
    out[8] = abi_version;
    out[16..18].copy_from_slice(&3u16.to_le_bytes());
    out[18..20].copy_from_slice(&machine.to_le_bytes());
    out[20..24].copy_from_slice(&1u32.to_le_bytes());
    out[40..48].copy_from_slice(&shoff.to_le_bytes());
    out[48..52].copy_from_slice(&e_flags.to_le_bytes());
    out[52..54].copy_from_slice(&64u16.to_le_bytes());
    out[58..60].copy_from_slice(&64u16.to_le_bytes());
    out[60..62].copy_from_slice(&shnum.to_le_bytes());
    out[62..64].copy_from_slice(&(shnum - 1).to_le_bytes());
    out
}

/// An x86-64 shared library whose dynamic section names `needed` and one `DT_RPATH` string.
pub fn host_library(needed: &[String], rpath: &str) -> Vec<u8> {
    const DT_NEEDED: u64 = 1;
    const DT_RPATH: u64 = 15;
    let mut dynstr = vec![0u8];
    let mut dynamic = Vec::new();
    let mut add = |tag: u64, s: &str, dynstr: &mut Vec<u8>| {
        dynamic.extend(tag.to_le_bytes());
        dynamic.extend((dynstr.len() as u64).to_le_bytes());
        dynstr.extend_from_slice(s.as_bytes());
        dynstr.push(0);
    };
    for n in needed {
        add(DT_NEEDED, n, &mut dynstr);
    }
    if !rpath.is_empty() {
        add(DT_RPATH, rpath, &mut dynstr);
    }
    dynamic.extend([0u8; 16]); // DT_NULL
    let secs = vec![
        Sec { align: 1, ..sec(".dynstr", SHT_STRTAB, dynstr) },
        Sec { link: 1, entsize: 16, ..sec(".dynamic", SHT_DYNAMIC, dynamic) },
    ];
    elf64(62, 0, 0, 0, secs)
}

/// A gfx900 code object (V5: EI_ABIVERSION 3) whose one `NT_AMDGPU_METADATA` note has `desc`.
pub fn amdgpu_code_object(desc: &[u8]) -> Vec<u8> {
    let mut note = Vec::new();
    note.extend(7u32.to_le_bytes());
    note.extend((desc.len() as u32).to_le_bytes());
    note.extend(32u32.to_le_bytes());
    note.extend(b"AMDGPU\0\0");
    note.extend_from_slice(desc);
    note.resize(note.len().next_multiple_of(4), 0);
    elf64(224, 64, 3, 0x2c, vec![Sec { align: 4, ..sec(".note", SHT_NOTE, note) }])
}

/// MessagePack: a str8 of up to 255 bytes, a str16 above.
pub fn mp_str(out: &mut Vec<u8>, s: &str) {
    if s.len() <= 255 {
        out.push(0xd9);
        out.push(s.len() as u8);
    } else {
        out.push(0xda);
        out.extend((s.len() as u16).to_be_bytes());
    }
    out.extend_from_slice(s.as_bytes());
}

/// A metadata note: `{amdhsa.version: [1, 2], amdhsa.kernels: [{.name: n}…]}` for `names`.
pub fn note_with_kernels(names: &[String]) -> Vec<u8> {
    let mut out = vec![0x82];
    mp_str(&mut out, "amdhsa.version");
    out.extend([0x92, 1, 2]);
    mp_str(&mut out, "amdhsa.kernels");
    out.push(0xdd);
    out.extend((names.len() as u32).to_be_bytes());
    for n in names {
        out.push(0x81);
        mp_str(&mut out, ".name");
        mp_str(&mut out, n);
    }
    out
}

/// An offload bundle: entries of (ID, offset from the bundle start, size), then `payload` at `payload_at`.
pub fn offload_bundle(entries: &[(&str, u64, u64)], payload_at: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = b"__CLANG_OFFLOAD_BUNDLE__".to_vec();
    out.extend((entries.len() as u64).to_le_bytes());
    for (id, offset, size) in entries {
        out.extend(offset.to_le_bytes());
        out.extend(size.to_le_bytes());
        out.extend((id.len() as u64).to_le_bytes());
        out.extend(id.as_bytes());
    }
    assert!(out.len() as u64 <= payload_at, "payload overlaps the entry table");
    out.resize(payload_at as usize, 0);
    out.extend_from_slice(payload);
    out
}
/// A zlib stream of `prefix` followed by `zeros` zero bytes, with fixed Huffman codes (RFC 1951 §3.2.6):
/// the prefix as literals, then matches of length 258 at distance 1 (13 bits each, a ratio of about 159).
/// The Adler-32 of the zero run is computed in closed form (RFC 1950 §8.2: each zero adds `a` to `b`).
pub fn zlib_prefix_then_zeros(prefix: &[u8], zeros: u64) -> Vec<u8> {
    struct Bits {
        out: Vec<u8>,
        acc: u64,
        n: u32,
    }
    impl Bits {
        fn put(&mut self, value: u64, len: u32) {
            self.acc |= value << self.n;
            self.n += len;
            while self.n >= 8 {
                self.out.push(self.acc as u8);
                self.acc >>= 8;
                self.n -= 8;
            }
        }
        /// A Huffman code: sent most significant bit first.
        fn code(&mut self, code: u64, len: u32) {
            let reversed = (0..len).fold(0, |r, i| r | ((code >> i) & 1) << (len - 1 - i));
            self.put(reversed, len);
        }
        fn literal(&mut self, b: u8) {
            match b {
                0..=143 => self.code(0x30 + u64::from(b), 8),
                _ => self.code(0x190 + u64::from(b) - 144, 9),
            }
        }
    }
    let mut bits = Bits { out: vec![0x78, 0x01], acc: 0, n: 0 };
    bits.put(1, 1); // BFINAL
    bits.put(1, 2); // BTYPE 01: fixed codes
    for &b in prefix {
        bits.literal(b);
    }
    let mut left = zeros;
    if left > 0 {
        bits.literal(0);
        left -= 1;
    }
    while left >= 258 + 3 || left == 258 {
        bits.code(0xc5, 8); // length code 285: 258 bytes (11000101)
        bits.code(0, 5); // distance code 0: distance 1
        left -= 258;
    }
    for _ in 0..left {
        bits.literal(0);
    }
    bits.code(0, 7); // end of block (code 256)
    if bits.n > 0 {
        bits.put(0, 8 - bits.n);
    }
    const MOD: u64 = 65521;
    let (mut a, mut b) = (1u64, 0u64);
    for &x in prefix {
        a = (a + u64::from(x)) % MOD;
        b = (b + a) % MOD;
    }
    b = (b + a * (zeros % MOD)) % MOD;
    bits.out.extend((((b << 16) | a) as u32).to_be_bytes());
    bits.out
}

/// A CCOB v3 zlib header + `stream`, padded with `pad` trailing bytes that the decoder never reads (the
/// total size covers them, so the compressed size passes the ratio check).
pub fn ccob_v3_zlib(stream: &[u8], uncompressed: u64, pad: usize) -> Vec<u8> {
    ccob_v3(0, stream, uncompressed, pad)
}

/// [`ccob_v3_zlib`] with any compression method (0 zlib, 1 zstd).
pub fn ccob_v3(method: u16, stream: &[u8], uncompressed: u64, pad: usize) -> Vec<u8> {
    let mut out = b"CCOB".to_vec();
    out.extend(3u16.to_le_bytes());
    out.extend(method.to_le_bytes());
    out.extend((32 + stream.len() as u64 + pad as u64).to_le_bytes());
    out.extend(uncompressed.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend_from_slice(stream);
    out.resize(out.len() + pad, 0xee);
    out
}
