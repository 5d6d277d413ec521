//! Drains for the layer's fuzz targets (`fuzz/fuzz_targets/spirv_module.rs`, `vulkan_profile.rs`) and their replay in
//! `tests/fuzz_regressions.rs`: what the layer reads from the program it runs in, with the properties that must hold
//! for any input.
//!
//! `spirv_module`: the walk over a module's instructions accounts for every byte it calls complete; the module hash
//! ignores an instruction ggml-vulkan patches in or strips out, inserted at any instruction boundary (the rule that
//! lets a module ggml-vulkan patched hash like the shader it came from); the workgroup size and specialization
//! constants are read within the data given.
//!
//! `vulkan_profile`: the flat JSON reader agrees with serde_json, an independent JSON parser: what it reads is JSON
//! with the same keys and values, and JSON of the flat shape within its limits is never refused; a profile that reads
//! fills the device's answers within their fields.

#![allow(dead_code)]

use backscope_vklayer::fuzzing as layer;
use format::spirv::{self, op, Instructions};

/// A fuzz target's drain, as `fuzz_replay` calls it.
pub type Drain = fn(&[u8]);

pub const TARGETS: &[(&str, Drain)] = &[("spirv_module", spirv_module), ("vulkan_profile", vulkan_profile)];

/// Instructions ggml-vulkan adds to a module or strips from it at pipeline creation, which the module hash skips:
/// `OpCapability RoundingModeRTE` and `OpExtension "SPV_KHR_float_controls"` on a device with FP16 float controls
/// (`ggml_vk_create_pipeline_func`), `OpCapability CooperativeMatrixDecodeVectorNV` (`ggml_vk_strip_decode_vector`).
fn patch_instruction(kind: usize) -> Vec<u32> {
    match kind % 3 {
        0 => vec![(2 << 16) | u32::from(op::CAPABILITY), 4467],
        1 => vec![(2 << 16) | u32::from(op::CAPABILITY), 5447],
        _ => {
            let mut text = b"SPV_KHR_float_controls".to_vec();
            text.resize(text.len() / 4 * 4 + 4, 0);
            let mut words = vec![((1 + text.len() as u32 / 4) << 16) | u32::from(op::EXTENSION)];
            words.extend(text.chunks(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])));
            words
        }
    }
}

/// The input's first byte chooses which patch instruction goes where (low four bits) and how many specialization
/// map entries come off the input's end (high four bits: that many 12-byte entries, then as many 4-byte data words);
/// the rest is the module.
pub fn spirv_module(data: &[u8]) {
    let Some((&choice, rest)) = data.split_first() else { return };
    let map_entries = usize::from(choice >> 4).min(rest.len() / 16);
    let (code, spec) = rest.split_at(rest.len() - map_entries * 16);
    let (map_bytes, spec_data) = spec.split_at(map_entries * 12);
    let word = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let map: Vec<(u32, u32, usize)> = map_bytes
        .chunks_exact(12)
        .map(|e| (word(&e[0..]) % 8, word(&e[4..]) % 32, word(&e[8..]) as usize % 16))
        .collect();

    let hash = spirv::module_hash(code);
    let mut entry_names: Vec<Vec<u8>> = vec![b"main".to_vec()];
    if let Some(mut walk) = Instructions::of(code) {
        assert!(code.len() >= spirv::HEADER_WORDS * 4 && word(code) == spirv::MAGIC);
        let mut boundaries = vec![spirv::HEADER_WORDS * 4];
        for inst in walk.by_ref() {
            boundaries.push(boundaries.last().unwrap() + 4 * (1 + inst.len()));
            if inst.opcode == op::ENTRY_POINT {
                entry_names.extend(inst.string(2).map(<[u8]>::to_vec));
            }
        }
        let walked = *boundaries.last().unwrap();
        assert!(walked <= code.len());
        if walk.complete() {
            assert_eq!(walked, code.len(), "a complete walk covers every byte");
        } else {
            assert!(walked < code.len(), "an incomplete walk left bytes unread");
        }
        let at = boundaries[usize::from(choice & 0xf) % boundaries.len()];
        let patch = patch_instruction(usize::from(choice & 0xf) / 2);
        let mut patched = code[..at].to_vec();
        patched.extend(patch.iter().flat_map(|w| w.to_le_bytes()));
        patched.extend_from_slice(&code[at..]);
        assert_eq!(spirv::module_hash(&patched), hash, "{patch:x?} inserted at byte {at} changed the hash");
    } else {
        assert!(code.len() < spirv::HEADER_WORDS * 4 || word(code) != spirv::MAGIC);
    }

    for &(id, _, _) in &map {
        // The first entry naming a constant is the one read.
        let &(_, offset, size) = map.iter().find(|(i, _, _)| *i == id).unwrap();
        let fits = matches!(size, 4 | 8) && offset as usize + 4 <= spec_data.len();
        match layer::specialization_value(&map, spec_data, id) {
            Some(v) => assert!(fits && v == word(&spec_data[offset as usize..])),
            None => assert!(!fits),
        }
    }
    let size = layer::LocalSize::parse(code);
    for name in &entry_names {
        let defaults = size.resolve(name, |_| None);
        let given = size.resolve(name, |id| layer::specialization_value(&map, spec_data, id));
        assert_eq!(defaults.is_some(), given.is_some(), "constants change a size's values, never whether it is known");
    }
}

/// One JSON object's entries in order, duplicates kept (serde_json's own map keeps the last of a repeated key).
struct Entries(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Entries {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Entries, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Entries;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    out.push(entry);
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// Whether serde_json's `value` is one the flat reader gives as `flat`.
fn same_value(flat: &layer::FlatJsonValue, value: &serde_json::Value) -> bool {
    use layer::FlatJsonValue as F;
    use serde_json::Value as J;
    match (flat, value) {
        (F::Str(s), J::String(t)) => s == t,
        (F::Num(n), J::Number(m)) => m.as_u64() == Some(*n),
        (F::Bool(b), J::Bool(c)) => b == c,
        (F::Strs(items), J::Array(a)) => {
            items.len() == a.len() && items.iter().zip(a).all(|(s, v)| v.as_str() == Some(s.as_str()))
        }
        (F::Nums(items), J::Array(a)) => {
            !items.is_empty() && items.len() == a.len() && items.iter().zip(a).all(|(n, v)| v.as_u64() == Some(*n))
        }
        _ => false,
    }
}

/// Whether serde_json's `value` is of the flat shape: a string, an unsigned 64-bit integer, a boolean, or an array
/// of strings only or of such integers only, no longer than the reader's limit.
fn flat_shape(value: &serde_json::Value) -> bool {
    use serde_json::Value as J;
    match value {
        J::String(_) | J::Bool(_) => true,
        J::Number(n) => n.is_u64(),
        J::Array(a) => {
            a.len() <= layer::MAX_PROFILE_ITEMS
                && (a.iter().all(J::is_string)
                    || a.iter().all(|v| v.as_number().is_some_and(serde_json::Number::is_u64)))
        }
        _ => false,
    }
}

pub fn vulkan_profile(data: &[u8]) {
    let flat = layer::parse_flat_json(data);
    let json = serde_json::from_slice::<Entries>(data);
    match &flat {
        Ok(map) => {
            assert!(map.len() <= layer::MAX_PROFILE_ITEMS);
            let Entries(entries) =
                json.unwrap_or_else(|e| panic!("the layer read as JSON what serde_json refuses: {e}"));
            assert_eq!(entries.len(), map.len(), "a key given twice is refused");
            for (key, value) in &entries {
                assert!(same_value(&map[key], value), "{key}: {:?} against serde_json's {value}", map[key]);
            }
        }
        Err(e) => {
            assert!(e.offset <= data.len(), "error offset {} past the input's {} bytes", e.offset, data.len());
            if let Ok(Entries(entries)) = json {
                let mut keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
                keys.sort_unstable();
                keys.dedup();
                let flat_json = keys.len() == entries.len()
                    && entries.len() <= layer::MAX_PROFILE_ITEMS
                    && data.len() <= layer::MAX_PROFILE_BYTES
                    && entries.iter().all(|(_, v)| flat_shape(v));
                assert!(!flat_json, "the layer refused flat JSON that serde_json reads: {e}");
            }
        }
    }

    match layer::parse_profile(data) {
        Ok(profile) => {
            assert!(flat.is_ok());
            let mut properties = ash::vk::PhysicalDeviceProperties::default();
            layer::properties(&profile, &mut properties);
            let name = properties.device_name_as_c_str().expect("the device name is NUL-terminated");
            assert!(profile.device_name.as_bytes().starts_with(name.to_bytes()));
            assert_eq!((properties.vendor_id, properties.device_id), (profile.vendor_id, profile.device_id));
            let mut features = ash::vk::PhysicalDeviceFeatures::default();
            layer::features(&profile, &mut features);
            for shape in &profile.flexible_dimensions {
                // SAFETY: plain integers, enums and a null pointer: all-zero bytes are a valid value.
                let mut out: layer::FlexibleDimensionsProperties = unsafe { std::mem::zeroed() };
                layer::flexible_dimensions(shape, &mut out);
                assert_eq!(out.granularity, shape.granularity);
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}
