//! Tensor infos: name, shape, ggml type and data offset of each tensor.

use crate::error::{Error, Result};
use crate::format::MAX_DIMS;
use crate::types::GgmlType;

use super::cursor::Cursor;

/// One tensor info. `Copy`: the shape is held inline (at most [`MAX_DIMS`] dimensions), so reading a file
/// allocates nothing per tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorInfo<'a> {
    pub name: &'a str,
    pub ggml_type: GgmlType,
    /// Offset of the data relative to the data section.
    pub offset: u64,
    pub n_elements: u64,
    pub n_bytes: u64,
    /// File offset of this tensor info (its name's length field).
    pub info_offset: u64,
    /// File offset of the info's data offset field (where a bad offset is reported).
    pub(crate) offset_field_at: u64,
    n_dims: usize,
    dims: [u64; MAX_DIMS as usize],
}

impl TensorInfo<'_> {
    /// The shape in ggml order: `dims()[0]` is the row length (ne0), the fastest-varying dimension.
    pub fn dims(&self) -> &[u64] {
        self.dims.get(..self.n_dims).unwrap_or_default()
    }
}

impl<'a> Cursor<'a> {
    /// One tensor info: u64-length name, u32 n_dims, n_dims × u64 dims, u32 ggml type, u64 data offset.
    pub(crate) fn tensor_info(&mut self) -> Result<TensorInfo<'a>> {
        let info_offset = self.offset();
        let name = self.utf8("name", "name length")?;
        let at = self.offset();
        let n_dims = self.u32("n_dims")?;
        if n_dims > MAX_DIMS {
            return Err(Error::new(at, "n_dims", "at most 4 dimensions (GGML_MAX_DIMS)").found(n_dims.into()));
        }
        let mut dims = [0u64; MAX_DIMS as usize];
        let mut n_elements: u64 = 1;
        for d in dims.iter_mut().take(n_dims as usize) {
            let at = self.offset();
            let v = self.u64("dims")?;
            // llama.cpp stores dims as int64_t and rejects negative ones.
            if v > i64::MAX as u64 {
                return Err(Error::new(at, "dims", "a dimension below 2^63 (ggml stores int64_t)").found(v));
            }
            n_elements = n_elements.checked_mul(v).ok_or(Error::new(
                at,
                "dims",
                "dimensions whose product (the element count) fits in 64 bits",
            ))?;
            *d = v;
        }
        let type_at = self.offset();
        let ggml_type = GgmlType(self.u32("type")?);
        let Some(info) = ggml_type.info() else {
            return Err(Error::new(type_at, "type", "a known ggml type").found(ggml_type.0.into()));
        };
        // A scalar (no dims) is one row of one element.
        let (row, row_at) = if n_dims == 0 { (1, type_at) } else { (dims[0], at + 4) };
        if !row.is_multiple_of(info.block_size) {
            return Err(
                Error::new(row_at, "dims[0]", "a row length that is a whole number of the type's blocks").found(row)
            );
        }
        let n_bytes = ggml_type.tensor_bytes(row, n_elements).ok_or(Error::new(
            row_at,
            "dims",
            "a shape whose size in bytes fits in 64 bits",
        ))?;
        let offset_field_at = self.offset();
        let offset = self.u64("offset")?;
        Ok(TensorInfo {
            name,
            ggml_type,
            offset,
            n_elements,
            n_bytes,
            info_offset,
            offset_field_at,
            n_dims: n_dims as usize,
            dims,
        })
    }
}
