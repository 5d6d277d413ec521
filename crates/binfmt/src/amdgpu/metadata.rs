//! The `NT_AMDGPU_METADATA` note (code object V3+): one MessagePack map with `amdhsa.version`,
//! `amdhsa.target` and `amdhsa.kernels` (AMDGPUUsage, "Code Object V3 Metadata" and later).
//!
//! A ggml HIP library holds about 20,000 kernel maps with their argument lists (about two million
//! MessagePack values), so this is a streaming, zero-copy walk: it reads the fields a scanner reports and
//! skips everything else (notably `.args`, counted but not decoded) without building a value tree.
//! The walk is bounded: nesting depth is capped, and every length is checked against the bytes left.

use rmp::Marker;

use crate::error::{Error, Result};
use crate::{Limits, EXPECT_KERNELS_CAP};

/// Deepest nesting accepted. Real notes nest 4 levels (map → kernels → kernel → args → arg).
const MAX_DEPTH: u32 = 16;

/// Per-kernel facts from the metadata. Any key may be absent, hence the options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelMeta<'a> {
    pub name: &'a str,
    pub symbol: &'a str,
    pub sgpr_count: Option<u64>,
    /// On gfx90a/gfx94x this is the unified total of arch VGPRs and AGPRs (up to 512).
    pub vgpr_count: Option<u64>,
    /// Present only on targets with matrix cores (gfx908, gfx90a, gfx94x, gfx950).
    pub agpr_count: Option<u64>,
    pub sgpr_spill_count: Option<u64>,
    pub vgpr_spill_count: Option<u64>,
    /// Static LDS bytes (`.group_segment_fixed_size`).
    pub lds_bytes: Option<u64>,
    /// Scratch bytes per work-item (`.private_segment_fixed_size`).
    pub scratch_bytes: Option<u64>,
    pub kernarg_size: Option<u64>,
    pub wavefront_size: Option<u64>,
    pub max_flat_workgroup_size: Option<u64>,
    pub uses_dynamic_stack: Option<bool>,
    /// Number of entries in `.args` (hidden arguments included).
    pub arg_count: u64,
}

/// The decoded note.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metadata<'a> {
    /// `amdhsa.version` as (major, minor): [1,0] for V3, [1,1] V4, [1,2] V5.
    pub version: Option<(u64, u64)>,
    /// `amdhsa.target`, e.g. `amdgcn-amd-amdhsa--gfx90a` (V4+).
    pub target: Option<&'a str>,
    pub kernels: Vec<KernelMeta<'a>>,
}

/// Decode a metadata note descriptor. Offsets in errors are relative to `desc`. At most
/// [`Limits::DEFAULT`]'s `max_kernels` kernels; see [`parse_with_limit`].
pub fn parse(desc: &[u8]) -> Result<Metadata<'_>> {
    parse_with_limit(desc, Limits::DEFAULT.max_kernels)
}

/// [`parse`], failing with [`EXPECT_KERNELS_CAP`] at the `amdhsa.kernels` array if the note holds more than
/// `max_kernels` kernels. The count is checked before any kernel is decoded: a note can hold one kernel map
/// per byte, and each becomes a [`KernelMeta`] of about 200 bytes.
pub fn parse_with_limit(desc: &[u8], max_kernels: u64) -> Result<Metadata<'_>> {
    let mut c = Cursor { data: desc, pos: 0 };
    let mut meta = Metadata::default();
    let n = c.map_len("metadata root")?;
    for _ in 0..n {
        let key = c.str("metadata root key")?;
        match key {
            "amdhsa.version" => {
                let len = c.array_len("amdhsa.version")?;
                let mut v = [0u64; 2];
                for i in 0..len {
                    let x = c.uint("amdhsa.version element")?;
                    if let Some(slot) = v.get_mut(i as usize) {
                        *slot = x;
                    }
                }
                meta.version = Some((v[0], v[1]));
            }
            "amdhsa.target" => meta.target = Some(c.str("amdhsa.target")?),
            "amdhsa.kernels" => {
                let at = c.pos;
                let len = c.array_len("amdhsa.kernels")?;
                // The key may repeat in a hostile note; the cap holds for all its arrays together.
                if len.saturating_add(meta.kernels.len() as u64) > max_kernels {
                    return Err(Error::new(at as u64, "amdhsa.kernels", EXPECT_KERNELS_CAP));
                }
                // Each kernel map takes at least one byte, so `len` is bounded by the note size; but a
                // KernelMeta is ~200 bytes, so reserving `len` would turn a 100 MB note into 20 GB.
                meta.kernels.reserve(len.min(4096) as usize);
                for _ in 0..len {
                    meta.kernels.push(kernel(&mut c)?);
                }
            }
            _ => c.skip(0)?,
        }
    }
    Ok(meta)
}

fn kernel<'a>(c: &mut Cursor<'a>) -> Result<KernelMeta<'a>> {
    let mut k = KernelMeta::default();
    let n = c.map_len("kernel map")?;
    for _ in 0..n {
        // Keys are matched as bytes: a key equal to one of these ASCII names is valid UTF-8, so only the
        // others need the check (there are 400,000 keys in a ggml HIP library).
        let key_at = c.pos;
        let key = c.str_bytes("kernel map key")?;
        let (slot, field) = match key {
            b".name" => {
                k.name = c.str(".name")?;
                continue;
            }
            b".symbol" => {
                k.symbol = c.str(".symbol")?;
                continue;
            }
            b".args" => {
                k.arg_count = c.array_len(".args")?;
                for _ in 0..k.arg_count {
                    c.skip(2)?;
                }
                continue;
            }
            b".uses_dynamic_stack" => {
                k.uses_dynamic_stack = Some(c.bool(".uses_dynamic_stack")?);
                continue;
            }
            b".sgpr_count" => (&mut k.sgpr_count, ".sgpr_count"),
            b".vgpr_count" => (&mut k.vgpr_count, ".vgpr_count"),
            b".agpr_count" => (&mut k.agpr_count, ".agpr_count"),
            b".sgpr_spill_count" => (&mut k.sgpr_spill_count, ".sgpr_spill_count"),
            b".vgpr_spill_count" => (&mut k.vgpr_spill_count, ".vgpr_spill_count"),
            b".group_segment_fixed_size" => (&mut k.lds_bytes, ".group_segment_fixed_size"),
            b".private_segment_fixed_size" => (&mut k.scratch_bytes, ".private_segment_fixed_size"),
            b".kernarg_segment_size" => (&mut k.kernarg_size, ".kernarg_segment_size"),
            b".wavefront_size" => (&mut k.wavefront_size, ".wavefront_size"),
            b".max_flat_workgroup_size" => (&mut k.max_flat_workgroup_size, ".max_flat_workgroup_size"),
            _ => {
                utf8(key, key_at, "kernel map key")?;
                c.skip(1)?;
                continue;
            }
        };
        *slot = Some(c.uint(field)?);
    }
    Ok(k)
}

fn utf8<'a>(bytes: &'a [u8], at: usize, field: &'static str) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|_| Error::new(at as u64, field, "UTF-8 text"))
}

/// A MessagePack reader over borrowed bytes. MessagePack is big-endian.
struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn err(&self, field: &'static str, expected: &'static str) -> Error {
        Error::new(self.pos as u64, field, expected)
    }

    fn take(&mut self, n: u64, field: &'static str) -> Result<&'a [u8]> {
        let bytes = usize::try_from(n)
            .ok()
            .and_then(|n| self.data.get(self.pos..self.pos.checked_add(n)?))
            .ok_or_else(|| self.err(field, "a length that fits in the note"))?;
        self.pos += bytes.len();
        Ok(bytes)
    }

    fn be(&mut self, n: u64, field: &'static str) -> Result<u64> {
        Ok(self.take(n, field)?.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
    }

    fn marker(&mut self, field: &'static str) -> Result<Marker> {
        let b =
            *self.data.get(self.pos).ok_or_else(|| self.err(field, "a MessagePack value, not the end of the note"))?;
        self.pos += 1;
        Ok(Marker::from_u8(b))
    }

    fn uint(&mut self, field: &'static str) -> Result<u64> {
        let at = self.pos;
        let v = match self.marker(field)? {
            Marker::FixPos(v) => u64::from(v),
            Marker::U8 => self.be(1, field)?,
            Marker::U16 => self.be(2, field)?,
            Marker::U32 => self.be(4, field)?,
            Marker::U64 => self.be(8, field)?,
            // Signed encodings of non-negative values are legal MessagePack.
            Marker::I8 | Marker::I16 | Marker::I32 | Marker::I64 => {
                let width = match self.data.get(at).copied() {
                    Some(0xd0) => 1,
                    Some(0xd1) => 2,
                    Some(0xd2) => 4,
                    _ => 8,
                };
                let raw = self.be(width, field)?;
                let shift = 64 - 8 * width;
                let signed = ((raw << shift) as i64) >> shift;
                u64::try_from(signed).map_err(|_| Error::new(at as u64, field, "a non-negative integer"))?
            }
            _ => return Err(Error::new(at as u64, field, "an integer")),
        };
        Ok(v)
    }

    fn bool(&mut self, field: &'static str) -> Result<bool> {
        match self.marker(field)? {
            Marker::True => Ok(true),
            Marker::False => Ok(false),
            _ => Err(Error::new(self.pos as u64 - 1, field, "a boolean")),
        }
    }

    fn str(&mut self, field: &'static str) -> Result<&'a str> {
        let at = self.pos;
        utf8(self.str_bytes(field)?, at, field)
    }

    /// A string's bytes, not checked to be UTF-8.
    fn str_bytes(&mut self, field: &'static str) -> Result<&'a [u8]> {
        let at = self.pos;
        let len = match self.marker(field)? {
            Marker::FixStr(n) => u64::from(n),
            Marker::Str8 => self.be(1, field)?,
            Marker::Str16 => self.be(2, field)?,
            Marker::Str32 => self.be(4, field)?,
            _ => return Err(Error::new(at as u64, field, "a string")),
        };
        self.take(len, field)
    }

    fn array_len(&mut self, field: &'static str) -> Result<u64> {
        let at = self.pos;
        let len = match self.marker(field)? {
            Marker::FixArray(n) => u64::from(n),
            Marker::Array16 => self.be(2, field)?,
            Marker::Array32 => self.be(4, field)?,
            _ => return Err(Error::new(at as u64, field, "an array")),
        };
        self.check_count(len, at, field)
    }

    fn map_len(&mut self, field: &'static str) -> Result<u64> {
        let at = self.pos;
        let len = match self.marker(field)? {
            Marker::FixMap(n) => u64::from(n),
            Marker::Map16 => self.be(2, field)?,
            Marker::Map32 => self.be(4, field)?,
            _ => return Err(Error::new(at as u64, field, "a map")),
        };
        self.check_count(len, at, field)
    }

    /// Every element takes at least one byte, so a count larger than the bytes left is a lie.
    fn check_count(&self, len: u64, at: usize, field: &'static str) -> Result<u64> {
        if len > (self.data.len() - self.pos) as u64 {
            return Err(Error::new(at as u64, field, "an element count that fits in the note"));
        }
        Ok(len)
    }

    /// Skip one value of any type together with everything nested in it, failing past `MAX_DEPTH` levels.
    ///
    /// Skipping is most of the work of [`parse`] (the `.args` lists are most of a note: 40 MB in a ggml HIP
    /// library), so this is a loop over an explicit count of values still to skip per nesting level
    /// rather than a recursion. It visits values in the same order as a recursive walk would, so it fails
    /// at the same place with the same error.
    fn skip(&mut self, depth: u32) -> Result<()> {
        // `pending[i]`: values still to skip at nesting level `depth + i`. A container is only opened at a
        // level at most `MAX_DEPTH`, so `i` stays below `MAX_DEPTH + 2`.
        let mut pending = [0u64; MAX_DEPTH as usize + 2];
        pending[0] = 1;
        let mut level = 0usize;
        loop {
            while pending[level] == 0 {
                if level == 0 {
                    return Ok(());
                }
                level -= 1;
            }
            pending[level] -= 1;
            if depth.saturating_add(level as u32) > MAX_DEPTH {
                return Err(self.err("MessagePack value", "nesting no deeper than 16 levels"));
            }
            let children = self.skip_header()?;
            if children > 0 {
                level += 1;
                pending[level] = children;
            }
        }
    }

    /// Skip one value's marker and its own bytes (a string's text, a number's digits); return how many
    /// values it contains (array elements, map keys and values), checked against the bytes left.
    fn skip_header(&mut self) -> Result<u64> {
        let field = "MessagePack value";
        let at = self.pos;
        // The markers that make up nearly all of `.args` (short strings, small integers), without the
        // general decoding below.
        match self.data.get(at).copied() {
            Some(b @ 0xa0..=0xbf) => {
                let end = at + 1 + usize::from(b & 0x1f);
                if end <= self.data.len() {
                    self.pos = end;
                    return Ok(0);
                }
            }
            Some(0x00..=0x7f | 0xc0 | 0xc2 | 0xc3 | 0xe0..=0xff) => {
                self.pos = at + 1;
                return Ok(0);
            }
            _ => {}
        }
        let (len, children) = match self.marker(field)? {
            Marker::FixPos(_) | Marker::FixNeg(_) | Marker::Null | Marker::True | Marker::False => (0, 0),
            Marker::U8 | Marker::I8 => (1, 0),
            Marker::U16 | Marker::I16 => (2, 0),
            Marker::U32 | Marker::I32 | Marker::F32 => (4, 0),
            Marker::U64 | Marker::I64 | Marker::F64 => (8, 0),
            Marker::FixStr(n) => (u64::from(n), 0),
            Marker::Str8 | Marker::Bin8 => (self.be(1, field)?, 0),
            Marker::Str16 | Marker::Bin16 => (self.be(2, field)?, 0),
            Marker::Str32 | Marker::Bin32 => (self.be(4, field)?, 0),
            Marker::FixExt1 => (2, 0),
            Marker::FixExt2 => (3, 0),
            Marker::FixExt4 => (5, 0),
            Marker::FixExt8 => (9, 0),
            Marker::FixExt16 => (17, 0),
            Marker::Ext8 => (self.be(1, field)? + 1, 0),
            Marker::Ext16 => (self.be(2, field)? + 1, 0),
            Marker::Ext32 => (self.be(4, field)? + 1, 0),
            Marker::FixArray(n) => (0, u64::from(n)),
            Marker::Array16 => (0, self.be(2, field)?),
            Marker::Array32 => (0, self.be(4, field)?),
            Marker::FixMap(n) => (0, 2 * u64::from(n)),
            Marker::Map16 => (0, 2 * self.be(2, field)?),
            Marker::Map32 => (0, 2 * self.be(4, field)?),
            Marker::Reserved => return Err(Error::new(at as u64, field, "a defined MessagePack marker (not 0xc1)")),
        };
        self.take(len, field)?;
        self.check_count(children, at, field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny MessagePack writer for tests (fixmap/fixarray/fixstr/u8/u16 only).
    enum V<'a> {
        U(u64),
        S(&'a str),
        A(Vec<V<'a>>),
        M(Vec<(&'a str, V<'a>)>),
        B(bool),
    }

    fn enc(v: &V<'_>, out: &mut Vec<u8>) {
        match v {
            V::U(x) if *x < 128 => out.push(*x as u8),
            V::U(x) => {
                out.push(0xcd);
                out.extend((*x as u16).to_be_bytes());
            }
            V::S(s) => {
                out.push(0xd9);
                out.push(s.len() as u8);
                out.extend(s.as_bytes());
            }
            V::A(a) => {
                out.push(0x90 | a.len() as u8);
                a.iter().for_each(|x| enc(x, out));
            }
            V::M(m) => {
                out.push(0x80 | m.len() as u8);
                for (k, x) in m {
                    enc(&V::S(k), out);
                    enc(x, out);
                }
            }
            V::B(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        }
    }

    fn sample() -> Vec<u8> {
        let arg = || V::M(vec![(".offset", V::U(0)), (".size", V::U(8)), (".value_kind", V::S("global_buffer"))]);
        let k = V::M(vec![
            (".name", V::S("k1")),
            (".symbol", V::S("k1.kd")),
            (".args", V::A(vec![arg(), arg(), arg()])),
            (".vgpr_count", V::U(288)),
            (".sgpr_count", V::U(32)),
            (".group_segment_fixed_size", V::U(4096)),
            (".uses_dynamic_stack", V::B(false)),
            (".language", V::S("OpenCL C")),
        ]);
        let root = V::M(vec![
            ("amdhsa.version", V::A(vec![V::U(1), V::U(2)])),
            ("amdhsa.target", V::S("amdgcn-amd-amdhsa--gfx90a")),
            ("amdhsa.kernels", V::A(vec![k])),
        ]);
        let mut out = Vec::new();
        enc(&root, &mut out);
        out
    }

    #[test]
    fn decodes_the_fields_it_reports() {
        let bytes = sample();
        let m = parse(&bytes).unwrap();
        assert_eq!(m.version, Some((1, 2)));
        assert_eq!(m.target, Some("amdgcn-amd-amdhsa--gfx90a"));
        let k = m.kernels[0];
        assert_eq!((k.name, k.symbol, k.arg_count), ("k1", "k1.kd", 3));
        assert_eq!((k.vgpr_count, k.sgpr_count, k.lds_bytes, k.agpr_count), (Some(288), Some(32), Some(4096), None));
        assert_eq!(k.uses_dynamic_stack, Some(false));
    }

    #[test]
    fn survives_every_truncation_and_lies() {
        let bytes = sample();
        for n in 0..bytes.len() {
            assert!(parse(&bytes[..n]).is_err(), "truncated at {n} must fail");
        }
        // Map32 claiming 4 billion entries.
        let err = parse(&[0xdf, 0xff, 0xff, 0xff, 0xff]).unwrap_err();
        assert_eq!(err.expected, "an element count that fits in the note");
        // Deep nesting: root map with one unknown key whose value is 100 nested arrays.
        let mut deep = vec![0x81, 0xa1, b'x'];
        deep.extend(std::iter::repeat_n(0x91, 100));
        deep.push(0x00);
        assert_eq!(parse(&deep).unwrap_err().expected, "nesting no deeper than 16 levels");
        assert!(parse(&[0xc1]).is_err());
    }

    #[test]
    fn kernel_count_is_capped_before_any_kernel_is_decoded() {
        // Root map {amdhsa.kernels: Array32 of 1000 empty maps}.
        let mut note = vec![0x81];
        enc(&V::S("amdhsa.kernels"), &mut note);
        let array_at = note.len() as u64;
        note.push(0xdd);
        note.extend(1000u32.to_be_bytes());
        note.extend(std::iter::repeat_n(0x80, 1000));
        assert_eq!(parse_with_limit(&note, 1000).unwrap().kernels.len(), 1000);
        let err = parse_with_limit(&note, 999).unwrap_err();
        assert_eq!((err.offset, err.field, err.expected), (array_at, "amdhsa.kernels", EXPECT_KERNELS_CAP));
        // A repeated key counts against the same cap.
        let mut twice = vec![0x82];
        for _ in 0..2 {
            enc(&V::S("amdhsa.kernels"), &mut twice);
            twice.extend([0x93, 0x80, 0x80, 0x80]);
        }
        assert_eq!(parse_with_limit(&twice, 6).unwrap().kernels.len(), 6);
        assert_eq!(parse_with_limit(&twice, 5).unwrap_err().expected, EXPECT_KERNELS_CAP);
    }

    #[test]
    fn kernel_map_keys_and_names_must_be_utf8() {
        let note = |key: &[u8], value: &[u8]| {
            let mut out = vec![0x81];
            enc(&V::S("amdhsa.kernels"), &mut out);
            out.extend([0x91, 0x81, 0xa0 | key.len() as u8]);
            out.extend(key);
            out.extend(value);
            out
        };
        // The kernel map's key starts after the root map, its key and the kernels array and map markers.
        let key_at = 1 + 2 + "amdhsa.kernels".len() as u64 + 2;
        let err = parse(&note(b"\xff\xfe", &[0x00])).unwrap_err();
        assert_eq!((err.offset, err.field, err.expected), (key_at, "kernel map key", "UTF-8 text"));
        let err = parse(&note(b".name", &[0xa1, 0xff])).unwrap_err();
        assert_eq!((err.offset, err.field, err.expected), (key_at + 6, ".name", "UTF-8 text"));
        assert_eq!(parse(&note(b".name", &[0xa1, b'k'])).unwrap().kernels[0].name, "k");
    }
}
