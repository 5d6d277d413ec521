//! Debug label regions of one command buffer: ggml-vulkan under `GGML_VK_DEBUG_MARKERS` opens a region per command
//! buffer (`submit 3`), inside it one per graph node (`MUL_MAT blk.0.attn_q`, `RMS_NORM+MUL blk.3.ffn_norm`) and
//! inside that one per dispatch (`mul_mat_vec_q4_k_f32_f32 (16000,1,1)`). A dispatch is remembered with the two
//! innermost regions open when it was recorded, `PARENT > TEXT` (`MUL_MAT blk.0.attn_q > mul_mat_vec_… (16000,1,1)`),
//! so that a crash names the graph node as well as the pipeline.
//!
//! Labels are begun once or more per dispatch, on the recording path, so this takes no lock, hashes nothing and,
//! once the buffer has recorded its largest batch, allocates nothing: each label begun appends its path (the
//! parent's own text, [`NESTED`], its own text, each cut at [`MAX_TEXT`] bytes) to the buffer's byte arena, which
//! is emptied when the buffer is begun or reset and keeps its capacity. A dispatch keeps the path as a [`Label`]
//! (offset and length in the arena, plain integers), and a submission copies the bytes of its last dispatches'
//! paths into the queue's ring (`crate::locus`), where the crash handler reads them without a lookup.

/// Longest own text of one label kept (ggml's node and dispatch labels are under 80 bytes).
pub const MAX_TEXT: usize = 96;
/// Separates a label from the one it is nested in.
pub const NESTED: &[u8] = b" > ";
/// Longest path: the parent's text, the separator, the label's text.
pub const MAX_PATH: usize = 2 * MAX_TEXT + NESTED.len();
/// Arena bytes one command buffer keeps (offsets fit in 24 bits); labels begun past it are not remembered.
pub const MAX_ARENA: usize = 1 << 24;
/// Nested label regions followed; deeper ones stand in for by the deepest followed.
pub const MAX_DEPTH: usize = 8;

/// A label's path in its command buffer's arena: offset << 8 | length; 0 for none (or an empty path).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Label(u32);

impl Label {
    pub const NONE: Label = Label(0);

    fn new(offset: usize, len: usize) -> Label {
        debug_assert!(offset < MAX_ARENA && len <= MAX_PATH && MAX_PATH < 256);
        if len == 0 {
            return Label::NONE;
        }
        Label(((offset as u32) << 8) | len as u32)
    }

    fn range(self) -> std::ops::Range<usize> {
        let offset = (self.0 >> 8) as usize;
        offset..offset + (self.0 & 0xff) as usize
    }
}

/// One open region: its path and, inside the path, its own text (which a region nested in it starts with).
#[derive(Clone, Copy, Default)]
struct Open {
    path: Label,
    own: Label,
}

/// The label regions of one command buffer.
pub struct Labels {
    arena: Vec<u8>,
    open: [Open; MAX_DEPTH],
    depth: u32,
}

impl Labels {
    pub fn new() -> Labels {
        Labels { arena: Vec::new(), open: [Open::default(); MAX_DEPTH], depth: 0 }
    }

    /// Forgets every label (the buffer is begun or reset); the arena keeps its capacity.
    pub fn clear(&mut self) {
        self.arena.clear();
        self.depth = 0;
    }

    /// `vkCmdBeginDebugUtilsLabelEXT` with label `text` (cut at [`MAX_TEXT`] bytes).
    #[inline]
    pub fn begin(&mut self, text: &[u8]) {
        let depth = self.depth as usize;
        self.depth = self.depth.saturating_add(1);
        if depth >= MAX_DEPTH {
            return;
        }
        let text = &text[..text.len().min(MAX_TEXT)];
        let parent = match depth {
            0 => 0..0,
            d => self.open[d - 1].own.range(),
        };
        let sep = if parent.is_empty() || text.is_empty() { 0 } else { NESTED.len() };
        let start = self.arena.len();
        if start + parent.len() + sep + text.len() > MAX_ARENA {
            self.open[depth] = Open::default();
            return;
        }
        // The parent's text is copied from inside the arena.
        self.arena.extend_from_within(parent);
        self.arena.extend_from_slice(&NESTED[..sep]);
        self.arena.extend_from_slice(text);
        let end = self.arena.len();
        self.open[depth] = Open { path: Label::new(start, end - start), own: Label::new(end - text.len(), text.len()) };
    }

    /// `vkCmdEndDebugUtilsLabelEXT`.
    #[inline]
    pub fn end(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    /// The path of the innermost open region (the deepest followed when more are open); [`Label::NONE`] for none.
    #[inline(always)]
    pub fn current(&self) -> Label {
        match self.depth as usize {
            0 => Label::NONE,
            d => self.open[d.min(MAX_DEPTH) - 1].path,
        }
    }

    /// The bytes of `label` (a label of this buffer since it was last cleared); empty for none.
    pub fn text(&self, label: Label) -> &[u8] {
        self.arena.get(label.range()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(labels: &Labels) -> &str {
        std::str::from_utf8(labels.text(labels.current())).unwrap()
    }

    #[test]
    fn a_region_names_itself_and_the_region_it_is_nested_in() {
        let mut l = Labels::new();
        assert_eq!(l.current(), Label::NONE);
        l.begin(b"submit 3");
        assert_eq!(text(&l), "submit 3");
        l.begin(b"MUL_MAT blk.0.attn_q");
        assert_eq!(text(&l), "submit 3 > MUL_MAT blk.0.attn_q");
        l.begin(b"mul_mat_vec_f16_f32_f32 (16000,1,1)");
        let dispatch = l.current();
        assert_eq!(text(&l), "MUL_MAT blk.0.attn_q > mul_mat_vec_f16_f32_f32 (16000,1,1)");
        l.end();
        assert_eq!(text(&l), "submit 3 > MUL_MAT blk.0.attn_q");
        l.end();
        l.begin(b"ADD blk.0.ffn_inp");
        assert_eq!(text(&l), "submit 3 > ADD blk.0.ffn_inp");
        assert_eq!(
            l.text(dispatch),
            b"MUL_MAT blk.0.attn_q > mul_mat_vec_f16_f32_f32 (16000,1,1)",
            "a closed region's path stays readable until the buffer is cleared"
        );
        l.end();
        l.end();
        assert_eq!(l.current(), Label::NONE);
        l.end();
        assert_eq!(l.current(), Label::NONE, "an unbalanced end is harmless");
    }

    #[test]
    fn texts_are_cut_deep_regions_stand_in_and_clearing_keeps_the_arena() {
        let mut l = Labels::new();
        l.begin(&[b'x'; 1000]);
        l.begin(&[b'y'; 1000]);
        assert_eq!(l.text(l.current()).len(), MAX_PATH);
        l.clear();
        assert_eq!(l.current(), Label::NONE);
        l.begin(b"");
        assert_eq!(l.current(), Label::NONE, "an empty label names nothing");
        l.begin(b"inner");
        assert_eq!(text(&l), "inner", "nested in an empty one: no separator");
        l.clear();
        for i in 0..(MAX_DEPTH + 3) {
            l.begin(format!("d{i}").as_bytes());
        }
        assert_eq!(text(&l), format!("d{} > d{}", MAX_DEPTH - 2, MAX_DEPTH - 1));
        l.end();
        l.end();
        l.end();
        assert_eq!(text(&l), format!("d{} > d{}", MAX_DEPTH - 2, MAX_DEPTH - 1));
        let capacity = l.arena.capacity();
        l.clear();
        assert_eq!(l.arena.capacity(), capacity);
    }
}
