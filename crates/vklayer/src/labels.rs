//! Debug label regions of one command buffer: ggml-vulkan under `GGML_VK_DEBUG_MARKERS` opens a region per command
//! buffer (`submit 3`), inside it one per graph node (`MUL_MAT blk.0.attn_q`, `RMS_NORM+MUL blk.3.ffn_norm`) and
//! inside that one per dispatch (`mul_mat_vec_q4_k_f32_f32 (16000,1,1)`). A dispatch is remembered with the two
//! innermost regions open when it was recorded, `PARENT > TEXT` (`MUL_MAT blk.0.attn_q > mul_mat_vec_… (16000,1,1)`),
//! so that a crash names the graph node as well as the pipeline.
//!
//! Labels are begun once or more per dispatch, on the recording path, so this takes no lock, hashes nothing and,
//! once the buffer has recorded its largest batch, allocates nothing: each label begun appends its text (cut at
//! [`MAX_TEXT`] bytes) to the buffer's byte arena, which is emptied when the buffer is begun or reset and keeps its
//! capacity. A dispatch keeps the two innermost open regions' texts as a [`Label`] (offsets and lengths in the
//! arena, plain integers), and a submission copies the path of its last dispatches (`OUTER > INNER`) into the
//! queue's ring (`crate::locus`), where the crash handler reads it without a lookup.

/// Longest own text of one label kept (ggml's node and dispatch labels are under 80 bytes).
pub const MAX_TEXT: usize = 96;
/// Separates a label from the one it is nested in.
pub const NESTED: &[u8] = b" > ";
/// Longest path: the outer region's text, the separator, the inner one's.
pub const MAX_PATH: usize = 2 * MAX_TEXT + NESTED.len();
/// Arena bytes one command buffer keeps (offsets fit in 24 bits); labels begun past it are not remembered.
pub const MAX_ARENA: usize = 1 << 24;
/// Nested label regions followed; deeper ones stand in for by the deepest followed.
pub const MAX_DEPTH: usize = 8;

/// One label's text in its command buffer's arena: offset << 8 | length; 0 for none (or an empty text).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Text(u32);

impl Text {
    const NONE: Text = Text(0);

    #[inline(always)]
    fn new(offset: usize, len: usize) -> Text {
        debug_assert!(offset < MAX_ARENA && len <= MAX_TEXT && MAX_TEXT < 256);
        if len == 0 {
            return Text::NONE;
        }
        Text(((offset as u32) << 8) | len as u32)
    }

    #[inline(always)]
    fn range(self) -> std::ops::Range<usize> {
        let offset = (self.0 >> 8) as usize;
        offset..offset + (self.0 & 0xff) as usize
    }
}

/// The debug label regions a dispatch was recorded in: the two innermost open, in the buffer's arena.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Label {
    outer: Text,
    inner: Text,
}

impl Label {
    pub const NONE: Label = Label { outer: Text::NONE, inner: Text::NONE };
}

/// The label regions of one command buffer.
pub struct Labels {
    arena: Vec<u8>,
    /// The open regions' texts, outermost first (the first [`MAX_DEPTH`] of `depth`).
    open: [Text; MAX_DEPTH],
    depth: u32,
}

impl Labels {
    pub fn new() -> Labels {
        Labels { arena: Vec::new(), open: [Text::NONE; MAX_DEPTH], depth: 0 }
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
        let start = self.arena.len();
        self.open[depth] = if start + text.len() <= MAX_ARENA {
            self.arena.extend_from_slice(text);
            Text::new(start, text.len())
        } else {
            Text::NONE
        };
    }

    /// `vkCmdEndDebugUtilsLabelEXT`.
    #[inline]
    pub fn end(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    /// The two innermost open regions (the deepest followed when more are open); [`Label::NONE`] for none.
    #[inline(always)]
    pub fn current(&self) -> Label {
        match (self.depth as usize).min(MAX_DEPTH) {
            0 => Label::NONE,
            1 => Label { outer: Text::NONE, inner: self.open[0] },
            d => Label { outer: self.open[d - 2], inner: self.open[d - 1] },
        }
    }

    /// The path of `label` (a label of this buffer since it was last cleared), `OUTER > INNER` or the one region's
    /// text, written into `out`; empty for none.
    pub fn path<'a>(&self, label: Label, out: &'a mut [u8; MAX_PATH]) -> &'a [u8] {
        let part = |t: Text| self.arena.get(t.range()).unwrap_or_default();
        let (outer, inner) = (part(label.outer), part(label.inner));
        let sep = if outer.is_empty() || inner.is_empty() { &[][..] } else { NESTED };
        let mut len = 0;
        for piece in [outer, sep, inner] {
            out[len..len + piece.len()].copy_from_slice(piece);
            len += piece.len();
        }
        &out[..len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(labels: &Labels) -> String {
        path(labels, labels.current())
    }

    fn path(labels: &Labels, label: Label) -> String {
        String::from_utf8(labels.path(label, &mut [0; MAX_PATH]).to_vec()).unwrap()
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
            path(&l, dispatch),
            "MUL_MAT blk.0.attn_q > mul_mat_vec_f16_f32_f32 (16000,1,1)",
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
        assert_eq!(text(&l).len(), MAX_PATH);
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
