//! Debug label texts, interned: ggml-vulkan under `GGML_VK_DEBUG_MARKERS` opens one label region per graph node
//! (`MUL_MAT blk.0.attn_q`, `RMS_NORM+MUL blk.3.ffn_norm`) around the node's dispatches. A command buffer keeps the
//! id of the label its dispatches are recorded under (`crate::commands`), the queues' rings keep it with each
//! remembered dispatch (`crate::locus`), and the crash record writes its text, so that a crash names the graph
//! node as well as the pipeline.
//!
//! Interning takes a lock and allocates, once per label begun (only programs that label their commands pay it;
//! ggml builds a `std::string` for each label itself). Reading a text back is lock-free: the crash handler calls
//! [`text`]. Texts are never freed; at most [`MAX_LABELS`] distinct ones are kept (a graph has a few thousand
//! nodes), later ones are not remembered (id 0).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use format::spin::SpinLock;

/// Distinct label texts kept.
pub const MAX_LABELS: usize = 1 << 16;
/// Longest text kept (ggml's are under 100 bytes).
pub const MAX_LABEL_BYTES: usize = 256;

/// Per id: the address and length of its leaked text; 0 while unset.
static ADDRESS: [AtomicUsize; MAX_LABELS] = [const { AtomicUsize::new(0) }; MAX_LABELS];
static LENGTH: [AtomicU32; MAX_LABELS] = [const { AtomicU32::new(0) }; MAX_LABELS];
static IDS: SpinLock<Option<HashMap<&'static [u8], u32>>> = SpinLock::new(None);

/// The id of `text` (from 1); 0 for an empty text or when the table is full.
pub fn intern(text: &[u8]) -> u32 {
    let text = &text[..text.len().min(MAX_LABEL_BYTES)];
    if text.is_empty() {
        return 0;
    }
    let mut ids = IDS.lock();
    let ids = ids.get_or_insert_with(HashMap::new);
    if let Some(&id) = ids.get(text) {
        return id;
    }
    let id = ids.len() + 1;
    if id >= MAX_LABELS {
        return 0;
    }
    let leaked: &'static [u8] = Box::leak(text.to_vec().into_boxed_slice());
    LENGTH[id].store(leaked.len() as u32, Ordering::Relaxed);
    ADDRESS[id].store(leaked.as_ptr() as usize, Ordering::Release);
    ids.insert(leaked, id as u32);
    id as u32
}

/// Separates a label from the one it is nested in.
pub const NESTED: &[u8] = b" > ";

/// The id of label `text` begun inside label `parent` (0: none): `PARENT > TEXT`, with only the innermost part of
/// the parent's own path, so that a dispatch names the two innermost regions open (ggml-vulkan: the graph node,
/// then its own per-dispatch label `PIPELINE (X,Y,Z)`).
pub fn nested(parent: u32, label: &[u8]) -> u32 {
    let parent = text(parent);
    if parent.is_empty() {
        return intern(label);
    }
    let own = match parent.windows(NESTED.len()).rposition(|w| w == NESTED) {
        Some(at) => &parent[at + NESTED.len()..],
        None => parent,
    };
    let mut path = Vec::with_capacity(own.len() + NESTED.len() + label.len());
    path.extend_from_slice(own);
    path.extend_from_slice(NESTED);
    path.extend_from_slice(label);
    intern(&path)
}

/// The text of label `id`; empty for 0 or an unknown id. Lock-free, allocation-free.
pub fn text(id: u32) -> &'static [u8] {
    let Some(address) = ADDRESS.get(id as usize).map(|a| a.load(Ordering::Acquire)).filter(|&a| a != 0) else {
        return b"";
    };
    let len = LENGTH[id as usize].load(Ordering::Relaxed) as usize;
    // SAFETY: `address` and `len` describe a leaked, never-freed slice, published (Release) after its length.
    unsafe { std::slice::from_raw_parts(address as *const u8, len) }
}

/// In a forked child: a parent thread may have held the lock.
pub fn force_unlock_in_child() {
    IDS.release_for_fork();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_keeps_its_id_and_its_text_reads_back() {
        let a = intern(b"MUL_MAT blk.0.attn_q");
        assert!(a > 0);
        assert_eq!(intern(b"MUL_MAT blk.0.attn_q"), a);
        let b = intern(b"ADD blk.0.ffn_inp");
        assert_ne!(a, b);
        assert_eq!((text(a), text(b)), (&b"MUL_MAT blk.0.attn_q"[..], &b"ADD blk.0.ffn_inp"[..]));
        assert_eq!((intern(b""), text(0), text(u32::MAX)), (0, &b""[..], &b""[..]));
        assert_eq!(text(intern(&[b'x'; 1000])).len(), MAX_LABEL_BYTES);
    }

    #[test]
    fn a_nested_label_names_its_parent_region_only() {
        let submit = intern(b"submit 3");
        let node = nested(submit, b"MUL_MAT blk.0.attn_q");
        let dispatch = nested(node, b"mul_mat_vec_f16_f32_f32 (16000,1,1)");
        assert_eq!(text(node), b"submit 3 > MUL_MAT blk.0.attn_q");
        assert_eq!(text(dispatch), b"MUL_MAT blk.0.attn_q > mul_mat_vec_f16_f32_f32 (16000,1,1)");
        assert_eq!(nested(0, b"alone"), intern(b"alone"));
    }
}
