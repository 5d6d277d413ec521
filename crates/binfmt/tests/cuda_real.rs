//! The CUDA decoders against real libraries, checked against independent oracles:
//!
//! - an embedded Python walker ([`ORACLE`]) that reads the host ELF section table, walks `.nv_fatbin`,
//!   decodes LZ4 blocks with its own decoder and zstd frames with the `zstd` CLI, and reads symbol
//!   tables and `.nv.info` records of the cubins with `struct`; it shares no code with the crate;
//! - GNU `readelf` (binutils) on every extracted cubin for kernel symbols and section sizes.
//!
//! Fixtures are located through `BACKSCOPE_FIXTURES` (default `$BACKSCOPE_CACHE/fixtures`, else
//! `$HOME/.cache/backscope/fixtures`, where scripts/fixtures.sh puts them). A missing fixture fails the test with a message to run `scripts/fixtures.sh`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use binfmt::cuda::cubin::Cubin;
use binfmt::cuda::fatbin::{self, Compression, EntryKind};
use binfmt::cuda::ptx;
use binfmt::Limits;
use object::read::elf::ElfFile64;
use object::{Object, ObjectSection};

const GGML: &str = "unpacked/cyllama_cuda12/cyllama_cuda12.libs/libggml-cuda-3851d25f.so";
const NVJPEG12: &str = "unpacked/nvidia_nvjpeg_cu12/nvidia/nvjpeg/lib/libnvjpeg.so.12";
const NVJPEG13: &str = "unpacked/nvidia_nvjpeg/nvidia/cu13/lib/libnvjpeg.so.13";

fn fixtures_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("BACKSCOPE_FIXTURES") {
        return PathBuf::from(dir);
    }
    // Where scripts/fixtures.sh puts them: under $BACKSCOPE_CACHE when set (as `.ci/run` sets it), else the home cache.
    if let Some(cache) = std::env::var_os("BACKSCOPE_CACHE").filter(|c| !c.is_empty()) {
        return Path::new(&cache).join("fixtures");
    }
    let home = std::env::var_os("HOME").expect("HOME is not set and BACKSCOPE_FIXTURES is not set");
    Path::new(&home).join(".cache/backscope/fixtures")
}

fn fixture_path(rel: &str) -> PathBuf {
    let path = fixtures_dir().join(rel);
    assert!(
        path.is_file(),
        "missing fixture {}: run scripts/fixtures.sh (or set BACKSCOPE_FIXTURES) to download and unpack it",
        path.display()
    );
    path
}

/// `.nv_fatbin` of a host library, found with `object` (not with the crate under test).
fn nv_fatbin(file: &[u8]) -> &[u8] {
    let elf = ElfFile64::<object::LittleEndian>::parse(file).expect("host library is ELF64");
    let section = elf.section_by_name(".nv_fatbin").expect("host library has .nv_fatbin");
    section.data().expect(".nv_fatbin data")
}

/// Independent walker. Arguments: host library, directory to write cubins to. Output lines:
/// `E <container> <container offset> <entry offset> <kind> <header size> <payload size> <compressed size>
///  <major> <minor> <sm> <flags> <decompressed size> <content length> <crc32>`;
/// for each PTX entry `P <entry offset> <version> <target> <number of .entry> <first .entry>`;
/// for each cubin `C <entry offset> <kernels> <api version> <toolkit>` and per kernel
/// `K <entry offset> <symbol index> <name> <regcount> <param size> <max threads> <frame size> <barriers>`
/// (`-` when absent; the toolkit with spaces replaced by `_`).
const ORACLE: &str = r#"
import struct, sys, zlib, subprocess, re, os
path, outdir = sys.argv[1], sys.argv[2]
data = open(path, 'rb').read()

def elf_sections(d):
    shoff, = struct.unpack_from('<Q', d, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', d, 0x3a)
    hs = [struct.unpack_from('<IIQQQQIIQQ', d, shoff + i * shentsize) for i in range(shnum)]
    st = hs[shstrndx][4] if hs else 0
    return [(d[st + h[0]:d.index(b'\0', st + h[0])], h) for h in hs]

def lz4_block(src):
    out = bytearray(); i = 0; n = len(src)
    while i < n:
        tok = src[i]; i += 1
        lit = tok >> 4
        if lit == 15:
            while True:
                b = src[i]; i += 1; lit += b
                if b != 255: break
        out += src[i:i + lit]; i += lit
        if i >= n: break
        off = src[i] | (src[i + 1] << 8); i += 2
        ml = tok & 15
        if ml == 15:
            while True:
                b = src[i]; i += 1; ml += b
                if b != 255: break
        ml += 4
        start = len(out) - off
        if off >= ml:
            out += out[start:start + ml]
        else:
            for k in range(ml): out.append(out[start + k])
    return bytes(out)

def records(b):
    p = 0
    while p + 4 <= len(b):
        f, a, v = struct.unpack_from('<BBH', b, p)
        pl = b[p + 4:p + 4 + v] if f == 4 else b''
        yield f, a, v, pl
        p += 4 + (v if f == 4 else 0)

def cubin(off, d):
    secs = elf_sections(d)
    byname = {n: h for n, h in secs}
    symtab = [h for n, h in secs if h[1] == 2][0]
    strtab = secs[symtab[6]][1]
    kernels = []
    for i in range(symtab[5] // 24):
        st_name, st_info, st_other, st_shndx, st_value, st_size = struct.unpack_from('<IBBHQQ', d, symtab[4] + 24 * i)
        if st_info & 0xf == 2 and st_other & 0x10:
            s = strtab[4] + st_name
            kernels.append((i, d[s:d.index(b'\0', s)].decode()))
    regs = {}
    g = byname.get(b'.nv.info')
    if g:
        for f, a, v, pl in records(d[g[4]:g[4] + g[5]]):
            if a == 0x2f and f == 4:
                sym, val = struct.unpack_from('<II', pl)
                regs[sym] = val
    api = '-'
    for n, h in secs:
        if n.startswith(b'.nv.info.'):
            for f, a, v, pl in records(d[h[4]:h[4] + h[5]]):
                if a == 0x37: api = str(struct.unpack_from('<I', pl)[0])
            break
    tk = re.search(rb'Cuda compilation tools, release [^\x00]*', d)
    tk = tk.group(0).decode().replace(' ', '_') if tk else '-'
    print('C', off, len(kernels), api, tk)
    for i, name in kernels:
        ps = mt = bar = '-'
        h = byname.get(b'.nv.info.' + name.encode())
        if h:
            for f, a, v, pl in records(d[h[4]:h[4] + h[5]]):
                if a == 0x19: ps = str(v)
                if a == 0x05: mt = 'x'.join(str(x) for x in struct.unpack_from('<III', pl))
                if a == 0x4c: bar = str(v)
        frame = '-'
        if g:
            for f, a, v, pl in records(d[g[4]:g[4] + g[5]]):
                if a == 0x11 and f == 4 and struct.unpack_from('<I', pl)[0] == i:
                    frame = str(struct.unpack_from('<I', pl, 4)[0])
        print('K', off, i, name, regs.get(i, '-'), ps, mt, frame, bar)

sec = [d for d in [data[h[4]:h[4] + h[5]] for n, h in elf_sections(data) if n == b'.nv_fatbin']][0]
pos = 0; c = -1
while pos < len(sec):
    magic, ver, hsz, fsz = struct.unpack_from('<IHHQ', sec, pos)
    if magic != 0xBA55ED50:
        pos += 8; continue
    c += 1
    e = pos + hsz; end = pos + hsz + fsz
    while e < end:
        kind, _, ehs, psz, csz, _, mn, mj, sm, _, _, flags, _, dsz = struct.unpack_from('<HHIQIIHHIIIQQQ', sec, e)
        p = sec[e + ehs:e + ehs + psz]
        if flags & 0xB000:
            p = p[:csz]
            if p[:4] == b'\x28\xb5\x2f\xfd':
                p = subprocess.run(['zstd', '-dc'], input=p, capture_output=True, check=True).stdout
            else:
                p = lz4_block(p)
        print('E', c, pos, e, kind, ehs, psz, csz, mj, mn, sm, flags, dsz, len(p), zlib.crc32(p))
        if kind == 1:
            t = p.decode('latin-1')
            v = re.search(r'^\s*\.version\s+(\S+)', t, re.M)
            tg = re.search(r'^\s*\.target\s+([^\s,]+)', t, re.M)
            es = re.findall(r'^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([^\s(]+)', t, re.M)
            print('P', e, v.group(1) if v else '-', tg.group(1) if tg else '-', len(es), es[0] if es else '-')
        if kind == 2:
            open(os.path.join(outdir, '%d.cubin' % e), 'wb').write(p)
            cubin(e, p)
        e += ehs + psz
    pos = end
"#;

#[derive(Debug, Default)]
struct Oracle {
    /// Per entry: the whitespace-separated fields after `E`.
    entries: Vec<Vec<String>>,
    ptx: HashMap<u64, Vec<String>>,
    cubins: HashMap<u64, Vec<String>>,
    kernels: HashMap<u64, Vec<Vec<String>>>,
    dir: PathBuf,
}

impl Drop for Oracle {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run_oracle(lib: &Path, tag: &str) -> Oracle {
    let dir = std::env::temp_dir().join(format!("backscope-cuda-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    let out = Command::new("python3")
        .arg("-c")
        .arg(ORACLE)
        .arg(lib)
        .arg(&dir)
        .output()
        .expect("python3 is needed for the independent fatbin walker");
    assert!(out.status.success(), "oracle failed: {}", String::from_utf8_lossy(&out.stderr));
    let mut oracle = Oracle::default();
    oracle.dir = dir;
    for line in String::from_utf8(out.stdout).expect("oracle output is UTF-8").lines() {
        let fields: Vec<String> = line.split(' ').map(str::to_owned).collect();
        let Some((tag, rest)) = fields.split_first() else { continue };
        let key = || rest.first().and_then(|s| s.parse::<u64>().ok()).expect("entry offset");
        match tag.as_str() {
            "E" => oracle.entries.push(rest.to_vec()),
            "P" => {
                oracle.ptx.insert(key(), rest.to_vec());
            }
            "C" => {
                oracle.cubins.insert(key(), rest.to_vec());
            }
            "K" => oracle.kernels.entry(key()).or_default().push(rest.to_vec()),
            other => panic!("unexpected oracle line tag {other}"),
        }
    }
    oracle
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// `readelf -s --wide`: names of FUNC symbols whose st_other shows as `[<other>: 10]`.
fn readelf_kernels(cubin: &Path) -> Vec<String> {
    let out = Command::new("readelf").args(["-s", "--wide"]).arg(cubin).output().expect("readelf (binutils) is needed");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let mut names: Vec<String> = text
        .lines()
        .filter(|l| l.contains(" FUNC ") && l.contains("[<other>: 10]"))
        .filter_map(|l| l.split_whitespace().last().map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// `readelf -S --wide`: section name -> (type, size).
fn readelf_sections(cubin: &Path) -> HashMap<String, (String, u64)> {
    let out = Command::new("readelf").args(["-S", "--wide"]).arg(cubin).output().expect("readelf (binutils) is needed");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let mut map = HashMap::new();
    for line in text.lines() {
        let Some(rest) = line.trim_start().strip_prefix('[') else { continue };
        let Some((_, rest)) = rest.split_once(']') else { continue };
        let cols: Vec<&str> = rest.split_whitespace().collect();
        // name type address offset size ...
        if cols.len() < 5 {
            continue;
        }
        if let Ok(size) = u64::from_str_radix(cols[4], 16) {
            map.insert(cols[0].to_owned(), (cols[1].to_owned(), size));
        }
    }
    map
}

/// What the facts tests collect from the crate's decoders.
#[derive(Debug, Default)]
struct Decoded {
    containers: usize,
    entries: usize,
    /// (kind, sm) -> count
    kinds: BTreeMap<(u16, u32), usize>,
    kernels: usize,
    kernel_names: Vec<String>,
    /// Kernels with a `.nv.shared.<name>` section (static shared memory).
    shared_sections: usize,
    /// Of those, the ones with a nonzero size.
    shared_nonzero: usize,
    compressions: BTreeMap<String, usize>,
}

/// Decode the whole `.nv_fatbin` of `rel` and compare every entry, PTX and cubin with the oracle, and
/// every cubin's kernels with readelf.
fn check_library(rel: &str, tag: &str) -> Decoded {
    let path = fixture_path(rel);
    let file = std::fs::read(&path).expect("read fixture");
    let section = nv_fatbin(&file);
    let oracle = run_oracle(&path, tag);
    let limits = Limits::default();
    let mut decoded = Decoded::default();
    let mut oracle_entries = oracle.entries.iter();
    for (ci, container) in fatbin::containers(section).enumerate() {
        let container = container.expect("container");
        decoded.containers += 1;
        for entry in container.entries() {
            let entry = entry.expect("entry");
            let o = oracle_entries.next().expect("oracle has as many entries");
            let content = entry.contents(&limits).expect("contents");
            let mut crc = flate2::Crc::new();
            crc.update(&content);
            let ours = [
                ci.to_string(),
                container.offset.to_string(),
                entry.offset.to_string(),
                entry.kind.raw().to_string(),
                entry.header_size.to_string(),
                entry.payload_size.to_string(),
                entry.compressed_size.to_string(),
                entry.version.0.to_string(),
                entry.version.1.to_string(),
                entry.sm.to_string(),
                entry.flags.to_string(),
                entry.decompressed_size.to_string(),
                content.len().to_string(),
                crc.sum().to_string(),
            ];
            assert_eq!(&ours[..], &o[..], "entry at {:#x} of {rel}", entry.offset);
            if entry.is_compressed() {
                assert_eq!(content.len() as u64, entry.decompressed_size, "decompressed size = header's");
            }
            decoded.entries += 1;
            *decoded.kinds.entry((entry.kind.raw(), entry.sm)).or_default() += 1;
            *decoded.compressions.entry(format!("{:?}", entry.compression())).or_default() += 1;
            match entry.kind {
                EntryKind::Ptx => {
                    let p = ptx::parse(&content);
                    let po = &oracle.ptx[&entry.offset];
                    let ours =
                        [opt(p.version), opt(p.target), p.entries.len().to_string(), opt(p.entries.first().copied())];
                    assert_eq!(&ours[..], &po[1..], "PTX at {:#x}", entry.offset);
                    assert_eq!(entry.sm.to_string(), p.target.unwrap_or("").trim_start_matches("sm_"));
                }
                EntryKind::Cubin => {
                    let cubin = Cubin::parse(&content).expect("cubin");
                    decoded.kernels += check_cubin(&cubin, &entry, &oracle, &mut decoded);
                }
                EntryKind::Other(k) => panic!("unexpected entry kind {k}"),
            }
        }
    }
    assert!(oracle_entries.next().is_none(), "oracle has more entries than the decoder");
    decoded
}

fn check_cubin(cubin: &Cubin<'_>, entry: &fatbin::Entry<'_>, oracle: &Oracle, decoded: &mut Decoded) -> usize {
    let at = entry.offset;
    // Two independent sources for the SM: the fatbin entry header and the cubin's e_flags.
    assert_eq!(cubin.sm, entry.sm, "cubin e_flags SM vs entry SM at {at:#x}");
    assert_eq!(u16::from(cubin.abi_version), entry.version.1, "ELF ABI version vs entry version 1.7/1.8");
    let kernels = cubin.kernels().expect("kernels");
    let co = &oracle.cubins[&at];
    let ours =
        [kernels.len().to_string(), opt(cubin.cuda_api_version), opt(cubin.toolkit.map(|t| t.replace(' ', "_")))];
    assert_eq!(&ours[..], &co[1..], "cubin at {at:#x}");
    let empty = Vec::new();
    let ko = oracle.kernels.get(&at).unwrap_or(&empty);
    assert_eq!(kernels.len(), ko.len());
    for (k, o) in kernels.iter().zip(ko) {
        let mt = k.max_threads.map(|m| format!("{}x{}x{}", m[0], m[1], m[2]));
        let ours = [
            at.to_string(),
            k.symbol_index.to_string(),
            k.name.to_owned(),
            opt(k.registers),
            opt(k.param_size),
            opt(mt),
            opt(k.frame_size),
            if cubin.abi_version >= 8 { opt(k.num_barriers) } else { "-".to_owned() },
        ];
        assert_eq!(&ours[..], &o[..], "kernel of cubin at {at:#x}");
        assert!(k.registers.is_some_and(|r| r > 0 && r <= 255), "register count for {}", k.name);
    }

    // readelf on the same cubin, written by the oracle.
    let file = oracle.dir.join(format!("{at}.cubin"));
    let mut ours: Vec<String> = kernels.iter().map(|k| k.name.to_owned()).collect();
    ours.sort();
    assert_eq!(ours, readelf_kernels(&file), "readelf -s kernels of cubin at {at:#x}");
    let sections = readelf_sections(&file);
    for k in &kernels {
        let shared = sections.get(&format!(".nv.shared.{}", k.name));
        if let Some((ty, _)) = shared {
            assert_eq!(ty, "NOBITS");
        }
        assert_eq!(k.static_shared, shared.map_or(0, |s| s.1), ".nv.shared size of {}", k.name);
        let text = sections.get(&format!(".text.{}", k.name)).expect(".text.<kernel>");
        assert_eq!(k.code_size, text.1, ".text size of {}", k.name);
    }
    // Every `.nv.shared.<x>` except the reserved ones belongs to a kernel.
    let (mut shared, mut nonzero) = (0, 0);
    for (name, (_, size)) in &sections {
        if let Some(x) = name.strip_prefix(".nv.shared.") {
            if !x.starts_with("reserved.") {
                assert!(kernels.iter().any(|k| k.name == x), "{name} has no kernel");
                shared += 1;
                nonzero += usize::from(*size > 0);
            }
        }
    }
    assert_eq!(nonzero, kernels.iter().filter(|k| k.static_shared > 0).count(), "kernels with static shared memory");
    decoded.shared_sections += shared;
    decoded.shared_nonzero += nonzero;
    decoded.kernel_names.extend(ours);
    kernels.len()
}

#[test]
fn ggml_cuda12_fatbin_matches_oracle_and_readelf() {
    let d = check_library(GGML, "ggml");
    // python3 /tmp/walk.py (the ORACLE walk above, counting only): "containers 137 entries 274",
    // kinds {1: 137, 2: 137}, every entry sm 75; header sizes 72 (cubin) and 88 (PTX).
    assert_eq!(d.containers, 137);
    assert_eq!(d.entries, 274);
    // ggml was built for sm_75 only: one sm_75 cubin and one compute_75 PTX per translation unit, so on
    // any GPU newer than Turing the driver JIT-compiles the PTX.
    assert_eq!(d.kinds, BTreeMap::from([((1, 75), 137), ((2, 75), 137)]));
    // Only the PTX entries are compressed (flags 0x2011 = LZ4); the cubins are stored (flags 0x11).
    assert_eq!(d.compressions, BTreeMap::from([("Lz4".to_owned(), 137), ("None".to_owned(), 137)]));
    // for f in cubins/*.cubin; do readelf -s --wide $f | grep ' FUNC ' | grep -c '\[<other>: 10\]'; done
    //   | sum -> 6537; `sort -u` of the names -> 5965; names containing mul_mat_vec_q -> 264.
    assert_eq!(d.kernels, 6537);
    // readelf -S --wide | grep '] .nv.shared.' | grep -vc nv.shared.reserved, summed over the cubins: 5979;
    // of those, 4626 have size 0 (`awk '$6 == "000000"'`): most ggml kernels use only dynamic shared memory.
    assert_eq!(d.shared_sections, 5979);
    assert_eq!(d.shared_nonzero, 5979 - 4626);
    assert_eq!(d.kernel_names.iter().collect::<BTreeSet<_>>().len(), 5965);
    assert_eq!(d.kernel_names.iter().filter(|n| n.contains("mul_mat_vec_q")).count(), 264);
}

#[test]
fn nvjpeg_cu12_fatbin_matches_oracle_and_readelf() {
    let d = check_library(NVJPEG12, "nvjpeg12");
    // formats.md §4.1 and the oracle walk: 11 containers, 175 entries: 165 cubins (sm_50…90 and
    // 100/101/103/120/121, 11 each), 10 PTX for sm_121.
    assert_eq!(d.containers, 11);
    assert_eq!(d.entries, 175);
    let mut expected = BTreeMap::from([((1, 121), 10)]);
    for sm in [50, 52, 60, 61, 70, 75, 80, 86, 89, 90, 100, 101, 103, 120, 121] {
        expected.insert((2, sm), 11);
    }
    assert_eq!(d.kinds, expected);
    // 160 LZ4 entries (formats.md §4.3), the 15 stored ones are the empty cubins of container 0.
    assert_eq!(d.compressions, BTreeMap::from([("Lz4".to_owned(), 160), ("None".to_owned(), 15)]));
    // readelf -s --wide | grep ' FUNC ' | grep -c '\[<other>: 10\]' summed over the 165 cubins.
    assert_eq!(d.kernels, 3720);
    assert_eq!((d.shared_sections, d.shared_nonzero), (645, 645));
}

#[test]
fn nvjpeg_cu13_fatbin_matches_oracle_and_readelf() {
    let d = check_library(NVJPEG13, "nvjpeg13");
    // formats.md §4.3 and the oracle walk: 10 containers, 110 zstd entries: cubins sm_75…121 incl.
    // sm_107, one PTX for sm_121 per container.
    assert_eq!(d.containers, 10);
    assert_eq!(d.entries, 110);
    let mut expected = BTreeMap::from([((1, 121), 10)]);
    for sm in [75, 80, 86, 89, 90, 100, 103, 107, 120, 121] {
        expected.insert((2, sm), 10);
    }
    assert_eq!(d.kinds, expected);
    assert_eq!(d.compressions, BTreeMap::from([("Zstd".to_owned(), 110)]));
    assert_eq!(d.kernels, 2490);
    assert_eq!((d.shared_sections, d.shared_nonzero), (430, 430));
}

/// Checks on individual cubins with values read by hand with readelf (commands in the comments).
#[test]
fn nvjpeg_cu13_sm120_cubin_header_and_notes() {
    let file = std::fs::read(fixture_path(NVJPEG13)).expect("read fixture");
    let section = nv_fatbin(&file);
    let limits = Limits::default();
    let entry = fatbin::containers(section)
        .flat_map(|c| c.expect("container").entries())
        .map(|e| e.expect("entry"))
        .find(|e| e.kind == EntryKind::Cubin && e.sm == 120)
        .expect("an sm_120 cubin");
    assert_eq!(entry.compression(), Compression::Zstd);
    let content = entry.contents(&limits).expect("contents");
    let cubin = Cubin::parse(&content).expect("cubin");
    // readelf -h: "OS/ABI: <unknown: 41>", "ABI Version: 8", "Type: EXEC", "Flags: 0x6007802".
    assert_eq!((cubin.os_abi, cubin.abi_version, cubin.e_type, cubin.e_flags), (0x41, 8, 2, 0x600_7802));
    assert_eq!((cubin.sm, cubin.virtual_sm, cubin.accelerated), (120, None, None));
    // readelf -n: .note.nv.cuinfo "02 00 78 00 86 00 00 00"; .note.nv.tkinfo holds the release string.
    assert_eq!(cubin.cuda_api_version, Some(0x86));
    assert_eq!(cubin.toolkit, Some("Cuda compilation tools, release 13.4, V13.4.46"));
    // readelf -S: the mercury duplicates exist but are not kernels' sections.
    assert!(cubin.sections().any(|(name, _, _)| name.starts_with(b".nv.merc.nv.info.")));
}

#[test]
fn ggml_first_cubin_by_hand() {
    let file = std::fs::read(fixture_path(GGML)).expect("read fixture");
    let section = nv_fatbin(&file);
    let container = fatbin::containers(section).next().expect("one container").expect("container");
    let entries: Vec<_> = container.entries().map(|e| e.expect("entry")).collect();
    // python3 peek: entry 0 at 0x10: PTX, header 88, payload 29840, compressed 29833, decompressed 99808,
    // flags 0x2011; entry 1 at 0x74f8: cubin, header 72, payload 35016, flags 0x11, version 1.7.
    assert_eq!(entries.len(), 2);
    let (p, c) = (&entries[0], &entries[1]);
    assert_eq!((p.offset, p.kind, p.header_size, p.payload_size), (0x10, EntryKind::Ptx, 88, 29840));
    assert_eq!((p.compressed_size, p.decompressed_size, p.flags), (29833, 99808, 0x2011));
    assert_eq!((c.offset, c.kind, c.header_size, c.payload_size, c.flags), (0x74f8, EntryKind::Cubin, 72, 35016, 0x11));
    assert_eq!(c.version, (1, 7));
    let ptx_text = p.contents(&Limits::default()).expect("ptx");
    let parsed = ptx::parse(&ptx_text);
    assert_eq!(parsed.version, Some("8.4"));
    assert_eq!(parsed.target, Some("sm_75"));
    assert_eq!(parsed.entries, ["_Z7acc_f32PKfS0_Pflllllllll"]);
    let cubin = Cubin::parse(c.payload).expect("cubin");
    // readelf -h: "OS/ABI: <unknown: 33>", "ABI Version: 7", "Flags: 0x4b054b".
    assert_eq!((cubin.os_abi, cubin.abi_version, cubin.e_flags), (0x33, 7, 0x4b_054b));
    assert_eq!((cubin.sm, cubin.virtual_sm, cubin.accelerated), (75, Some(75), Some(false)));
    let kernels = cubin.kernels().expect("kernels");
    assert_eq!(kernels.len(), 1);
    let k = &kernels[0];
    // readelf -S: [13] .text._Z7acc_f32PKfS0_Pflllllllll ... size 0x1000, Inf 503316481 (0x1e000001:
    // 30 registers, symbol 1); no .nv.shared section; [12] .nv.constant0 size 0x1c0.
    assert_eq!(
        (k.name, k.symbol_index, k.code_size, k.registers),
        ("_Z7acc_f32PKfS0_Pflllllllll", 1, 0x1000, Some(30))
    );
    assert_eq!(k.static_shared, 0);
}
