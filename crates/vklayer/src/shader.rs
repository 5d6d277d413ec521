//! What a compute pipeline's workgroup size is, from its SPIR-V and specialization constants.
//!
//! ggml-vulkan writes `layout(local_size_x_id = 0, …)`: glslang turns that into a `WorkgroupSize`
//! built-in whose components are specialization constants, and the pipeline picks the size with
//! `VkSpecializationInfo`. So the size is read in two steps: a module gives a recipe per entry
//! point (each dimension a literal or a specialization constant with its default), and the pipeline
//! applies its constants. The SPIR-V rules (`LocalSize`, `LocalSizeId`, the `WorkgroupSize`
//! built-in overriding both) are those of the SPIR-V specification, "Execution Mode" and "BuiltIn".

use std::collections::HashMap;

use format::spirv::{op, Instructions};

const EXECUTION_MODEL_GL_COMPUTE: u32 = 5;
const MODE_LOCAL_SIZE: u32 = 17;
const MODE_LOCAL_SIZE_ID: u32 = 38;
const DECORATION_SPEC_ID: u32 = 1;
const DECORATION_BUILT_IN: u32 = 11;
const BUILT_IN_WORKGROUP_SIZE: u32 = 25;

/// One dimension of a workgroup size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dim {
    Fixed(u32),
    /// A specialization constant: its `SpecId` and default value.
    Spec {
        id: u32,
        default: u32,
    },
    /// An id the module does not define as a scalar constant.
    Unknown,
}

/// The workgroup size recipe of each compute entry point of a module.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalSize {
    entries: Vec<(Vec<u8>, [Dim; 3])>,
    /// The `WorkgroupSize` built-in, which overrides every entry point's execution mode.
    built_in: Option<[Dim; 3]>,
}

impl LocalSize {
    /// Reads `code` (a SPIR-V module). Linear in its length; anything it cannot read gives no recipe.
    pub fn parse(code: &[u8]) -> LocalSize {
        let Some(walk) = Instructions::of(code) else { return LocalSize::default() };
        let mut entry_ids: Vec<(u32, Vec<u8>)> = Vec::new();
        let mut modes: Vec<(u32, [Dim; 3])> = Vec::new();
        let mut mode_ids: Vec<(u32, [u32; 3])> = Vec::new();
        let mut spec_ids: HashMap<u32, u32> = HashMap::new();
        let mut built_in_id = None;
        let mut scalars: HashMap<u32, (bool, u32)> = HashMap::new();
        let mut composites: HashMap<u32, [u32; 3]> = HashMap::new();
        for inst in walk {
            let w = |i| inst.word(i);
            match inst.opcode {
                op::ENTRY_POINT if w(0) == Some(EXECUTION_MODEL_GL_COMPUTE) => {
                    if let (Some(id), Some(name)) = (w(1), inst.string(2)) {
                        entry_ids.push((id, name.to_vec()));
                    }
                }
                op::EXECUTION_MODE if w(1) == Some(MODE_LOCAL_SIZE) => {
                    if let (Some(id), Some(x), Some(y), Some(z)) = (w(0), w(2), w(3), w(4)) {
                        modes.push((id, [Dim::Fixed(x), Dim::Fixed(y), Dim::Fixed(z)]));
                    }
                }
                op::EXECUTION_MODE_ID if w(1) == Some(MODE_LOCAL_SIZE_ID) => {
                    if let (Some(id), Some(x), Some(y), Some(z)) = (w(0), w(2), w(3), w(4)) {
                        mode_ids.push((id, [x, y, z]));
                    }
                }
                op::DECORATE => match (w(0), w(1), w(2)) {
                    (Some(target), Some(DECORATION_SPEC_ID), Some(spec)) => {
                        spec_ids.insert(target, spec);
                    }
                    (Some(target), Some(DECORATION_BUILT_IN), Some(BUILT_IN_WORKGROUP_SIZE)) => {
                        built_in_id = Some(target);
                    }
                    _ => {}
                },
                op::CONSTANT | op::SPEC_CONSTANT => {
                    if let (Some(id), Some(value)) = (w(1), w(2)) {
                        scalars.insert(id, (inst.opcode == op::SPEC_CONSTANT, value));
                    }
                }
                op::CONSTANT_COMPOSITE | op::SPEC_CONSTANT_COMPOSITE if inst.len() == 5 => {
                    if let (Some(id), Some(x), Some(y), Some(z)) = (w(1), w(2), w(3), w(4)) {
                        composites.insert(id, [x, y, z]);
                    }
                }
                _ => {}
            }
        }
        let dim = |id: u32| match scalars.get(&id) {
            Some(&(true, default)) => match spec_ids.get(&id) {
                Some(&spec) => Dim::Spec { id: spec, default },
                None => Dim::Fixed(default),
            },
            Some(&(false, value)) => Dim::Fixed(value),
            None => Dim::Unknown,
        };
        let built_in = built_in_id.and_then(|id| composites.get(&id)).map(|c| c.map(dim));
        let entries = entry_ids
            .into_iter()
            .map(|(id, name)| {
                let from_ids = mode_ids.iter().find(|(t, _)| *t == id).map(|(_, ids)| ids.map(dim));
                let literal = modes.iter().find(|(t, _)| *t == id).map(|(_, d)| *d);
                (name, from_ids.or(literal).unwrap_or([Dim::Unknown; 3]))
            })
            .collect();
        LocalSize { entries, built_in }
    }

    /// The workgroup size of entry point `entry` with the specialization constants `constant` gives;
    /// `None` when the module does not say.
    pub fn resolve(&self, entry: &[u8], constant: impl Fn(u32) -> Option<u32>) -> Option<[u32; 3]> {
        let dims = match self.built_in {
            Some(dims) => dims,
            None => self.entries.iter().find(|(name, _)| name == entry)?.1,
        };
        let mut size = [0u32; 3];
        for (out, d) in size.iter_mut().zip(dims) {
            *out = match d {
                Dim::Fixed(v) => v,
                Dim::Spec { id, default } => constant(id).unwrap_or(default),
                Dim::Unknown => return None,
            };
        }
        Some(size)
    }
}

/// The 32-bit value of specialization constant `id` in `VkSpecializationInfo` data: its map entries
/// as (constant id, offset, size) and the data bytes. Entries that do not fit the data are ignored.
pub fn specialization_value(map: &[(u32, u32, usize)], data: &[u8], id: u32) -> Option<u32> {
    let &(_, offset, size) = map.iter().find(|(constant, _, _)| *constant == id)?;
    if size != 4 && size != 8 {
        return None;
    }
    let bytes = data.get(offset as usize..(offset as usize).checked_add(4)?)?;
    Some(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(body: &[&[u32]]) -> Vec<u8> {
        let mut ws = vec![format::spirv::MAGIC, 0x0001_0000, 0, 100, 0];
        for i in body {
            ws.push(((i.len() as u32) << 16) | i[0]);
            ws.extend_from_slice(&i[1..]);
        }
        ws.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    // "main\0" padded to two words.
    const MAIN: [u32; 2] = [0x6e69_616d, 0];

    #[test]
    fn reads_the_size_glslang_writes_for_local_size_x_id() {
        // `layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;` as glslang writes it:
        // LocalSize 1 1 1, and a WorkgroupSize built-in made of spec constant 0 (default 128) and 1s.
        let code = module(&[
            &[15, 5, 4, MAIN[0], MAIN[1]],
            &[16, 4, 17, 1, 1, 1],
            &[71, 10, 1, 0],
            &[71, 12, 11, 25],
            &[50, 6, 10, 128],
            &[43, 6, 11, 1],
            &[51, 7, 12, 10, 11, 11],
        ]);
        let size = LocalSize::parse(&code);
        assert_eq!(size.resolve(b"main", |_| None), Some([128, 1, 1]));
        assert_eq!(size.resolve(b"main", |id| (id == 0).then_some(64)), Some([64, 1, 1]));
        assert_eq!(size.resolve(b"other", |_| None), Some([128, 1, 1]), "the built-in covers every entry point");
    }

    #[test]
    fn reads_literal_and_id_execution_modes() {
        let literal = module(&[&[15, 5, 4, MAIN[0], MAIN[1]], &[16, 4, 17, 256, 2, 1]]);
        assert_eq!(LocalSize::parse(&literal).resolve(b"main", |_| None), Some([256, 2, 1]));
        assert_eq!(LocalSize::parse(&literal).resolve(b"absent", |_| None), None);
        let by_id = module(&[
            &[15, 5, 4, MAIN[0], MAIN[1]],
            &[331, 4, 38, 20, 21, 21],
            &[71, 20, 1, 3],
            &[50, 6, 20, 32],
            &[43, 6, 21, 1],
        ]);
        assert_eq!(LocalSize::parse(&by_id).resolve(b"main", |id| (id == 3).then_some(512)), Some([512, 1, 1]));
        // Not a compute entry point (Vertex = 0), or not SPIR-V at all: nothing.
        let vertex = module(&[&[15, 0, 4, MAIN[0], MAIN[1]], &[16, 4, 17, 8, 8, 1]]);
        assert_eq!(LocalSize::parse(&vertex).resolve(b"main", |_| None), None);
        assert_eq!(LocalSize::parse(b"not spir-v").resolve(b"main", |_| None), None);
    }

    #[test]
    fn specialization_data_is_read_within_bounds() {
        let data = [64u32.to_le_bytes(), 7u32.to_le_bytes()].concat();
        let map = [(0, 0, 4), (1, 4, 4), (2, 6, 4), (3, 0, 2)];
        assert_eq!(specialization_value(&map, &data, 0), Some(64));
        assert_eq!(specialization_value(&map, &data, 1), Some(7));
        assert_eq!(specialization_value(&map, &data, 2), None, "runs past the data");
        assert_eq!(specialization_value(&map, &data, 3), None, "not a 32-bit constant");
        assert_eq!(specialization_value(&map, &data, 9), None);
    }
}
