//! Debug label regions of one command buffer: ggml-vulkan under `GGML_VK_DEBUG_MARKERS` opens a region per command
//! buffer (`submit 3`), inside it one per graph node (`MUL_MAT blk.0.attn_q`, `RMS_NORM+MUL blk.3.ffn_norm`) and
//! inside that one per dispatch (`mul_mat_vec_q4_k_f32_f32 (16000,1,1)`). A dispatch is remembered with the two
//! innermost regions open when it was recorded, `PARENT > TEXT` (`MUL_MAT blk.0.attn_q > mul_mat_vec_… (16000,1,1)`),
//! so that a crash names the graph node as well as the pipeline.
//!
//! ggml's innermost, per-dispatch region only repeats what the dispatch's entry holds already (the pipeline's name
//! and the workgroup counts): a region whose text has that form, `NAME (X,Y,Z)` ([`is_dispatch_label`]), is followed
//! (its end closes it) but not kept, so a dispatch is remembered with the two innermost *other* regions, `submit 3 >
//! MUL_MAT blk.0.attn_q`: the arena copy per dispatch goes away, equal dispatches of one node share an entry, and a
//! submission copies shorter paths. A crash record names the pipeline and its workgroup counts beside the label.
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

/// A label's text in its command buffer's arena, read as words of eight bytes for the crash ring.
#[derive(Clone, Copy, Debug)]
pub struct Words<'a> {
    /// The arena up to the text's end: the bytes before the text let its last, partial word be read in one load.
    arena: &'a [u8],
    start: usize,
}

impl Words<'_> {
    const NONE: Words<'static> = Words { arena: &[], start: 0 };

    /// The text's length in bytes.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.arena.len().saturating_sub(self.start)
    }

    /// Gives `store` the text's words in order with their index, eight bytes each, little-endian; the bytes of the
    /// last word past the text are zero.
    #[inline(always)]
    pub fn each(self, mut store: impl FnMut(usize, u64)) {
        let text = self.arena.get(self.start..).unwrap_or_default();
        let whole = text.chunks_exact(8);
        let rest = whole.remainder();
        let n = text.len() / 8;
        for (k, word) in whole.enumerate() {
            store(k, u64::from_le_bytes(word.try_into().unwrap_or_default()));
        }
        if rest.is_empty() {
            return;
        }
        let end = self.arena.len();
        let last = match self.arena.get(end.wrapping_sub(8)..) {
            // The eight bytes that end the text, shifted so that its own last bytes come first.
            Some(eight) if end >= 8 => {
                u64::from_le_bytes(eight.try_into().unwrap_or_default()) >> (8 * (8 - rest.len()))
            }
            // A short text at the very start of the arena.
            _ => {
                let mut le = [0u8; 8];
                le[..rest.len()].copy_from_slice(rest);
                u64::from_le_bytes(le)
            }
        };
        store(n, last);
    }
}

/// The label regions of one command buffer.
pub struct Labels {
    arena: Vec<u8>,
    /// The texts of the open regions that are kept (not a dispatch's own), outermost first.
    kept: [Text; MAX_DEPTH],
    kept_len: u32,
    /// Bit `d`: the region open at depth `d` (of the first [`MAX_DEPTH`]) is a dispatch's own, not kept.
    own: u32,
    depth: u32,
}

/// Whether `text` is ggml-vulkan's per-dispatch label, `NAME (X,Y,Z)` (`ggml_vk_debug_label` for a pipeline and
/// its workgroup counts): a name, a space, then three decimal numbers separated by commas in parentheses, at the end.
#[inline]
pub fn is_dispatch_label(text: &[u8]) -> bool {
    // The shortest is `A (0,0,0)`; anything not ending in `)` is rejected at once (a graph node's label).
    let n = text.len();
    if n < 9 || text[n - 1] != b')' {
        return false;
    }
    let (mut i, mut commas, mut digits) = (n - 1, 0, 0);
    while i > 0 {
        i -= 1;
        match text[i] {
            b'0'..=b'9' => digits += 1,
            b',' if digits > 0 => (commas, digits) = (commas + 1, 0),
            b'(' => return digits > 0 && commas == 2 && i >= 2 && text[i - 1] == b' ',
            _ => return false,
        }
    }
    false
}

impl Labels {
    pub fn new() -> Labels {
        Labels { arena: Vec::new(), kept: [Text::NONE; MAX_DEPTH], kept_len: 0, own: 0, depth: 0 }
    }

    /// Forgets every label (the buffer is begun or reset); the arena keeps its capacity.
    pub fn clear(&mut self) {
        self.arena.clear();
        self.kept_len = 0;
        self.own = 0;
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
        if is_dispatch_label(text) {
            self.own |= 1 << depth;
            return;
        }
        self.own &= !(1 << depth);
        let text = &text[..text.len().min(MAX_TEXT)];
        let start = self.arena.len();
        let kept = if start + text.len() <= MAX_ARENA {
            self.arena.extend_from_slice(text);
            Text::new(start, text.len())
        } else {
            Text::NONE
        };
        // At most one kept region per open depth below MAX_DEPTH: `kept_len <= depth < MAX_DEPTH`.
        self.kept[self.kept_len as usize] = kept;
        self.kept_len += 1;
    }

    /// `vkCmdEndDebugUtilsLabelEXT`.
    #[inline]
    pub fn end(&mut self) {
        let Some(depth) = self.depth.checked_sub(1) else { return };
        self.depth = depth;
        if (depth as usize) < MAX_DEPTH && self.own & (1 << depth) == 0 {
            self.kept_len = self.kept_len.saturating_sub(1);
        }
    }

    /// The two innermost open regions that are kept (the deepest followed when more are open); [`Label::NONE`]
    /// for none.
    #[inline(always)]
    pub fn current(&self) -> Label {
        match self.kept_len as usize {
            0 => Label::NONE,
            1 => Label { outer: Text::NONE, inner: self.kept[0] },
            n => Label { outer: self.kept[n - 2], inner: self.kept[n - 1] },
        }
    }

    /// The texts of `label`'s two regions (a label of this buffer since it was last cleared); empty for none.
    #[cfg(test)]
    pub fn parts(&self, label: Label) -> (&[u8], &[u8]) {
        let part = |t: Text| self.arena.get(t.range()).unwrap_or_default();
        (part(label.outer), part(label.inner))
    }

    /// The texts of `label`'s two regions, for the crash ring (`crate::locus`), which copies them word by word.
    #[inline(always)]
    pub fn words(&self, label: Label) -> (Words<'_>, Words<'_>) {
        let part = |t: Text| {
            let range = t.range();
            match self.arena.get(..range.end) {
                Some(arena) => Words { arena, start: range.start },
                None => Words::NONE,
            }
        };
        (part(label.outer), part(label.inner))
    }

    /// The path of `label`, `OUTER > INNER` or the one region's text, written into `out`; empty for none.
    #[cfg(test)]
    pub fn path<'a>(&self, label: Label, out: &'a mut [u8; MAX_PATH]) -> &'a [u8] {
        let (outer, inner) = self.parts(label);
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
        l.begin(b"rms_norm (3,1,1) notes");
        assert_eq!(text(&l), "MUL_MAT blk.0.attn_q > rms_norm (3,1,1) notes");
        let nested = l.current();
        l.end();
        // ggml's per-dispatch region repeats the pipeline and workgroup counts: followed, not kept.
        l.begin(b"mul_mat_vec_f16_f32_f32 (16000,1,1)");
        let dispatch = l.current();
        assert_eq!(text(&l), "submit 3 > MUL_MAT blk.0.attn_q");
        l.end();
        assert_eq!(text(&l), "submit 3 > MUL_MAT blk.0.attn_q");
        l.end();
        l.begin(b"ADD blk.0.ffn_inp");
        assert_eq!(text(&l), "submit 3 > ADD blk.0.ffn_inp");
        assert_eq!(path(&l, dispatch), "submit 3 > MUL_MAT blk.0.attn_q");
        assert_eq!(
            path(&l, nested),
            "MUL_MAT blk.0.attn_q > rms_norm (3,1,1) notes",
            "a closed region's path stays readable until the buffer is cleared"
        );
        l.end();
        l.end();
        assert_eq!(l.current(), Label::NONE);
        l.end();
        assert_eq!(l.current(), Label::NONE, "an unbalanced end is harmless");
    }

    #[test]
    fn only_a_name_then_three_numbers_in_parentheses_is_a_dispatch_label() {
        // ggml_vk_debug_label(ctx, pipeline_name, wg0, wg1, wg2): `pipeline_name + " (" + wg0 + "," + wg1 + "," + wg2 + ")"`.
        for yes in [&b"mul_mat_vec_q4_k_f32_f32 (16000,1,1)"[..], b"a (0,0,0)", b"rope_neox_f32 (1,32,7)"] {
            assert!(is_dispatch_label(yes), "{}", String::from_utf8_lossy(yes));
        }
        for no in [
            &b"MUL_MAT blk.0.attn_q"[..],
            b"submit 3",
            b"(1,1,1)",
            b"x(1,1,1)",
            b"x (1,1)",
            b"x (1,1,1,1)",
            b"x (1,,1)",
            b"x (1,1,1) ",
            b"x (a,1,1)",
            b")",
            b"",
        ] {
            assert!(!is_dispatch_label(no), "{}", String::from_utf8_lossy(no));
        }
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
