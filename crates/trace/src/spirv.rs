//! SPIR-V modules as the Vulkan layer and backscope both see them: a bounded walk over a module's
//! instructions, and the module hash that names a pipeline nobody named.
//!
//! The layer hashes the code of every shader module it sees (`vkCreateShaderModule`); backscope
//! hashes the shaders embedded in `libggml-vulkan.so` with the same function and so learns which
//! shader a `spirv:<hash>` pipeline runs. Both sides must agree on every byte, hence one definition.
//!
//! The hash is 64-bit FNV-1a over the module's bytes, except for the instructions ggml-vulkan adds
//! to a module at pipeline creation when the device has FP16 float controls
//! (`ggml_vk_create_pipeline_func` in ggml-vulkan.cpp inserts `OpCapability RoundingModeRTE` /
//! `DenormPreserve`, `OpExtension "SPV_KHR_float_controls"` and `OpExecutionMode … RoundingModeRTE
//! 16` / `DenormPreserve 16`): a patched module hashes like the embedded one it came from. Those
//! instructions are skipped wherever they appear, on both sides, so the rule is symmetric. Likewise
//! for what ggml-vulkan strips from a coopmat2 shader on a device without
//! VK_NV_cooperative_matrix_decode_vector (`ggml_vk_strip_decode_vector`): its `OpExtension
//! "SPV_NV_cooperative_matrix_decode_vector"` and `OpCapability CooperativeMatrixDecodeVectorNV` are
//! skipped, and an `OpCooperativeMatrixLoadTensorNV` that names a decode-vector function is hashed as
//! the stripped instruction (the function operand dropped, its tensor-addressing bit cleared, the
//! word count one less). Bytes that are not a well-formed little-endian module are hashed whole.

/// The first word of every SPIR-V module (read little-endian).
pub const MAGIC: u32 = 0x0723_0203;
/// Words in the module header (magic, version, generator, bound, schema).
pub const HEADER_WORDS: usize = 5;

/// Opcodes this crate and the layer read.
pub mod op {
    pub const EXTENSION: u16 = 10;
    pub const ENTRY_POINT: u16 = 15;
    pub const EXECUTION_MODE: u16 = 16;
    pub const CAPABILITY: u16 = 17;
    pub const CONSTANT: u16 = 43;
    pub const CONSTANT_COMPOSITE: u16 = 44;
    pub const SPEC_CONSTANT: u16 = 50;
    pub const SPEC_CONSTANT_COMPOSITE: u16 = 51;
    pub const DECORATE: u16 = 71;
    pub const EXECUTION_MODE_ID: u16 = 331;
}

/// `OpCapability` / `OpExecutionMode` operands ggml-vulkan patches in.
const CAPABILITY_DENORM_PRESERVE: u32 = 4464;
const CAPABILITY_ROUNDING_MODE_RTE: u32 = 4467;
const MODE_DENORM_PRESERVE: u32 = 4459;
const MODE_ROUNDING_MODE_RTE: u32 = 4462;
const FLOAT_CONTROLS_EXTENSION: &[u8] = b"SPV_KHR_float_controls";

/// What ggml-vulkan strips from coopmat2 shaders on devices without decode-vector support
/// (ggml-vulkan-types.h: kSpvCapabilityCooperativeMatrixDecodeVectorNV, kSpvOpCooperativeMatrixLoadTensorNV,
/// kSpvTensorAddressingDecodeVectorFuncBit).
const DECODE_VECTOR_EXTENSION: &[u8] = b"SPV_NV_cooperative_matrix_decode_vector";
const CAPABILITY_DECODE_VECTOR: u32 = 5447;
const OP_COOPERATIVE_MATRIX_LOAD_TENSOR: u16 = 5367;
const TENSOR_ADDRESSING_DECODE_VECTOR: u32 = 0x4;
/// Memory-access bits that carry one operand each (Aligned, MakePointerAvailable, MakePointerVisible, the two
/// Intel alias masks): what lies between an `OpCooperativeMatrixLoadTensorNV`'s memory-access mask and its
/// tensor-addressing mask.
const MEMORY_ACCESS_OPERAND_BITS: [u32; 5] = [0x2, 0x8, 0x10, 0x1_0000, 0x2_0000];

/// One instruction: its opcode and its operand words (after the word holding count and opcode).
#[derive(Clone, Copy, Debug)]
pub struct Instruction<'a> {
    pub opcode: u16,
    /// The operands as little-endian bytes, a multiple of 4 long.
    operands: &'a [u8],
}

impl<'a> Instruction<'a> {
    /// Operand word `i`, if the instruction has it.
    pub fn word(&self, i: usize) -> Option<u32> {
        let start = i.checked_mul(4)?;
        let bytes = self.operands.get(start..start.checked_add(4)?)?;
        Some(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    /// Number of operand words.
    pub fn len(&self) -> usize {
        self.operands.len() / 4
    }

    pub fn is_empty(&self) -> bool {
        self.operands.is_empty()
    }

    /// The literal string starting at operand word `i` (nul-terminated, padded to a word), without
    /// its terminator; `None` when it is not terminated inside the instruction.
    pub fn string(&self, i: usize) -> Option<&'a [u8]> {
        let bytes = self.operands.get(i.checked_mul(4)?..)?;
        let end = bytes.iter().position(|&b| b == 0)?;
        Some(&bytes[..end])
    }
}

/// The instructions of a module, in order. Stops (for good) at the first malformed instruction: a
/// word count of 0, one that runs past the end, or a tail shorter than a word. [`Instructions::complete`]
/// then says whether the walk reached the end cleanly.
#[derive(Clone, Debug)]
pub struct Instructions<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Instructions<'a> {
    /// The instructions after the header of `code`; `None` unless `code` starts with the magic word
    /// and holds a whole header.
    pub fn of(code: &'a [u8]) -> Option<Instructions<'a>> {
        let magic = code.get(..4)?;
        if u32::from_le_bytes([magic[0], magic[1], magic[2], magic[3]]) != MAGIC {
            return None;
        }
        Some(Instructions { rest: code.get(HEADER_WORDS * 4..)?, failed: false })
    }

    /// Whether every byte was walked as whole instructions (so far, or in total once exhausted).
    pub fn complete(&self) -> bool {
        !self.failed
    }

    /// The bytes not walked yet.
    fn remaining(&self) -> &'a [u8] {
        self.rest
    }
}

impl<'a> Iterator for Instructions<'a> {
    type Item = Instruction<'a>;

    fn next(&mut self) -> Option<Instruction<'a>> {
        let Some(first) = self.rest.get(..4) else {
            // One to three bytes past the last whole word are not an instruction either.
            self.failed |= !self.rest.is_empty();
            self.rest = &[];
            return None;
        };
        let word = u32::from_le_bytes([first[0], first[1], first[2], first[3]]);
        let count = (word >> 16) as usize;
        let Some(bytes) = self.rest.get(..count * 4).filter(|_| count > 0) else {
            self.failed = true;
            self.rest = &[];
            return None;
        };
        self.rest = &self.rest[count * 4..];
        Some(Instruction { opcode: (word & 0xffff) as u16, operands: &bytes[4..] })
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// Whether `inst` is one of the float-control instructions ggml-vulkan patches into a module.
fn is_float_controls_patch(inst: &Instruction<'_>) -> bool {
    match inst.opcode {
        op::CAPABILITY => {
            inst.len() == 1 && matches!(inst.word(0), Some(CAPABILITY_DENORM_PRESERVE | CAPABILITY_ROUNDING_MODE_RTE))
        }
        op::EXTENSION => inst.string(0) == Some(FLOAT_CONTROLS_EXTENSION),
        op::EXECUTION_MODE => {
            inst.len() == 3
                && matches!(inst.word(1), Some(MODE_DENORM_PRESERVE | MODE_ROUNDING_MODE_RTE))
                && inst.word(2) == Some(16)
        }
        _ => false,
    }
}

/// Whether `inst` is one of the decode-vector declarations ggml-vulkan strips.
fn is_decode_vector_declaration(inst: &Instruction<'_>) -> bool {
    match inst.opcode {
        op::CAPABILITY => inst.len() == 1 && inst.word(0) == Some(CAPABILITY_DECODE_VECTOR),
        op::EXTENSION => inst.string(0) == Some(DECODE_VECTOR_EXTENSION),
        _ => false,
    }
}

/// An `OpCooperativeMatrixLoadTensorNV` that names a decode-vector function, as ggml-vulkan strips it: the words
/// of the instruction without that function, its bit cleared and the word count one less. `None` for any other
/// instruction, or one whose operands do not add up (hashed as it is).
fn stripped_load_tensor(inst: &Instruction<'_>) -> Option<Vec<u8>> {
    if inst.opcode != OP_COOPERATIVE_MATRIX_LOAD_TENSOR {
        return None;
    }
    // Operands: result type, result, pointer, object, tensor layout, memory-access mask, its operands, the
    // tensor-addressing mask, its operands (tensor view 0x1, decode function 0x2, decode-vector function 0x4).
    let memory = inst.word(5)?;
    let ta_at = 6 + MEMORY_ACCESS_OPERAND_BITS.iter().filter(|&&b| memory & b != 0).count();
    let ta = inst.word(ta_at)?;
    if ta & TENSOR_ADDRESSING_DECODE_VECTOR == 0 {
        return None;
    }
    let kept = usize::from(ta & 0x1 != 0) + usize::from(ta & 0x2 != 0);
    if inst.len() != ta_at + 1 + kept + 1 {
        return None;
    }
    let mut words = Vec::with_capacity(inst.len());
    words.push(((inst.len() as u32) << 16) | u32::from(inst.opcode));
    words.extend((0..ta_at).filter_map(|i| inst.word(i)));
    words.push(ta & !TENSOR_ADDRESSING_DECODE_VECTOR);
    words.extend((ta_at + 1..ta_at + 1 + kept).filter_map(|i| inst.word(i)));
    Some(words.iter().flat_map(|w| w.to_le_bytes()).collect())
}

/// The module hash of `code` (see the module documentation). Linear in `code`'s length.
pub fn module_hash(code: &[u8]) -> u64 {
    let Some(mut walk) = Instructions::of(code) else { return fnv1a(FNV_OFFSET, code) };
    let mut hash = fnv1a(FNV_OFFSET, &code[..HEADER_WORDS * 4]);
    let mut at = HEADER_WORDS * 4;
    loop {
        let before = walk.remaining().len();
        let Some(inst) = walk.next() else { break };
        let taken = before - walk.remaining().len();
        if let Some(stripped) = stripped_load_tensor(&inst) {
            hash = fnv1a(hash, &stripped);
        } else if !is_float_controls_patch(&inst) && !is_decode_vector_declaration(&inst) {
            hash = fnv1a(hash, &code[at..at + taken]);
        }
        at += taken;
    }
    // A malformed tail is hashed as it is.
    fnv1a(hash, &code[at..])
}

/// `hash` as the 16 lower-case hex digits the trace writes (`spirv_hash`, and `spirv:<hash>` names).
pub fn hex(hash: u64) -> [u8; 16] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 16];
    for (i, d) in out.iter_mut().enumerate() {
        *d = DIGITS[((hash >> (60 - 4 * i)) & 0xf) as usize];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn inst(opcode: u32, operands: &[u32]) -> Vec<u32> {
        let mut v = vec![((operands.len() as u32 + 1) << 16) | opcode];
        v.extend_from_slice(operands);
        v
    }

    /// `OpExtension "SPV_KHR_float_controls"`: the string padded with nul bytes to whole words.
    fn float_controls_extension() -> Vec<u32> {
        let mut text = FLOAT_CONTROLS_EXTENSION.to_vec();
        text.resize(text.len() / 4 * 4 + 4, 0);
        let operands: Vec<u32> = text.chunks(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        inst(10, &operands)
    }

    fn module(body: &[Vec<u32>]) -> Vec<u8> {
        let mut ws = vec![MAGIC, 0x0001_0300, 0x0008_000b, 40, 0];
        for i in body {
            ws.extend(i);
        }
        words(&ws)
    }

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        // The FNV reference test vectors (draft-eastlake-fnv, FNV-1a 64): "" and "a" and "foobar".
        assert_eq!(fnv1a(FNV_OFFSET, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(FNV_OFFSET, b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(&hex(0x8594_4171_f739_67e8), b"85944171f73967e8");
        assert_eq!(&hex(1), b"0000000000000001");
    }

    #[test]
    fn walks_instructions_and_reads_operands() {
        let code = module(&[inst(17, &[1]), float_controls_extension(), inst(16, &[4, 17, 64, 1, 1])]);
        let all: Vec<Instruction<'_>> = Instructions::of(&code).unwrap().collect();
        assert_eq!(all.iter().map(|i| i.opcode).collect::<Vec<_>>(), [17, 10, 16]);
        assert_eq!(all[1].string(0), Some(FLOAT_CONTROLS_EXTENSION));
        assert_eq!((all[2].word(1), all[2].word(2), all[2].word(5)), (Some(17), Some(64), None));
        assert!(Instructions::of(&code[..12]).is_none(), "no whole header");
        assert!(Instructions::of(&words(&[0x0302_2307, 0, 0, 0, 0])).is_none(), "big-endian or not SPIR-V");
        // A word count of zero, one running past the end, and bytes past the last whole word stop the walk and say so.
        let mut ragged = module(&[inst(17, &[1])]);
        ragged.extend([0x11, 0]);
        for broken in [module(&[inst(17, &[1]), vec![0]]), module(&[vec![(9 << 16) | 17, 1]]), ragged] {
            let mut walk = Instructions::of(&broken).unwrap();
            while walk.next().is_some() {}
            assert!(!walk.complete());
        }
    }

    #[test]
    fn a_module_patched_the_way_ggml_vulkan_patches_it_hashes_like_the_original() {
        let entry = inst(15, &[5, 4, 0x6e69_616d, 0]);
        let original = module(&[inst(17, &[1]), entry.clone(), inst(16, &[4, 17, 64, 1, 1]), inst(19, &[2])]);
        // Capabilities first, the extension after them, execution modes after the entry point.
        let patched = module(&[
            inst(17, &[1]),
            inst(17, &[CAPABILITY_DENORM_PRESERVE]),
            inst(17, &[CAPABILITY_ROUNDING_MODE_RTE]),
            float_controls_extension(),
            entry,
            inst(16, &[4, 17, 64, 1, 1]),
            inst(16, &[4, MODE_DENORM_PRESERVE, 16]),
            inst(16, &[4, MODE_ROUNDING_MODE_RTE, 16]),
            inst(19, &[2]),
        ]);
        assert_eq!(module_hash(&original), module_hash(&patched));
        // Anything else changes it: another capability, the same mode for 32-bit floats, one byte.
        let other_capability = module(&[inst(17, &[2]), inst(16, &[4, 17, 64, 1, 1]), inst(19, &[2])]);
        assert_ne!(module_hash(&original), module_hash(&other_capability));
        let fp32_mode = module(&[inst(17, &[1]), inst(16, &[4, MODE_ROUNDING_MODE_RTE, 32]), inst(19, &[2])]);
        let without = module(&[inst(17, &[1]), inst(19, &[2])]);
        assert_ne!(module_hash(&fp32_mode), module_hash(&without));
        let mut flipped = original.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_ne!(module_hash(&original), module_hash(&flipped));
        // Not SPIR-V: the plain FNV-1a of the bytes.
        assert_eq!(module_hash(b"foobar"), 0x8594_4171_f739_67e8);
    }

    fn decode_vector_extension() -> Vec<u32> {
        let mut text = DECODE_VECTOR_EXTENSION.to_vec();
        text.resize(text.len() / 4 * 4 + 4, 0);
        let operands: Vec<u32> = text.chunks(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        inst(10, &operands)
    }

    #[test]
    fn a_coopmat2_shader_stripped_of_decode_vector_hashes_like_the_original() {
        // What ggml_vk_strip_decode_vector (ggml-vulkan.cpp 386-504) does, written out by hand: the extension and
        // the capability go; a load whose tensor-addressing mask (after the memory-access mask 0x2 and its one
        // operand, the alignment 16) has the decode function 0x2 and the decode-vector function 0x4 keeps
        // the mask 0x2 and the function %30, drops %31, and counts one word less.
        let load = |ta: u32, extras: &[u32]| {
            let mut ops = vec![7, 8, 9, 10, 11, 0x2, 16, ta];
            ops.extend_from_slice(extras);
            inst(u32::from(OP_COOPERATIVE_MATRIX_LOAD_TENSOR), &ops)
        };
        let original = module(&[
            inst(17, &[1]),
            inst(17, &[CAPABILITY_DECODE_VECTOR]),
            decode_vector_extension(),
            load(0x6, &[30, 31]),
            load(0x2, &[30]),
            inst(19, &[2]),
        ]);
        let stripped = module(&[inst(17, &[1]), load(0x2, &[30]), load(0x2, &[30]), inst(19, &[2])]);
        assert_eq!(module_hash(&original), module_hash(&stripped));
        // The decode function kept is part of the hash: another one is another shader.
        let other = module(&[inst(17, &[1]), load(0x2, &[32]), load(0x2, &[30]), inst(19, &[2])]);
        assert_ne!(module_hash(&original), module_hash(&other));
        // A load whose operands do not add up is hashed as it is (no panic, no strip).
        let short = module(&[
            inst(17, &[1]),
            inst(u32::from(OP_COOPERATIVE_MATRIX_LOAD_TENSOR), &[7, 8, 9, 10, 11, 0x2, 16, 0x4]),
            inst(19, &[2]),
        ]);
        let without = module(&[inst(17, &[1]), inst(19, &[2])]);
        assert_ne!(module_hash(&short), module_hash(&without));
    }
}
