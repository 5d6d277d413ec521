//! Writing JSON without allocating: a byte sink ([`Out`]) that is either a `Vec<u8>` (the observers'
//! writer threads) or a fixed buffer ([`FixedBuf`], the crash path, which runs in a signal handler),
//! and the object, array and list writers ([`Obj`], [`Arr`], [`put_list`]) that every record writer of
//! [`crate::record`] uses.
//!
//! Strings are written from bytes: valid UTF-8 is copied with JSON escapes, invalid sequences become
//! U+FFFD, so a kernel name or an executable path that is not UTF-8 still gives a valid line.

/// Where JSON bytes go.
pub trait Out {
    fn put(&mut self, bytes: &[u8]);
}

impl Out for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// A buffer of `N` bytes that never allocates: writes past its end are dropped and remembered in
/// [`FixedBuf::overflowed`], so a caller can tell a whole record from a cut one and leave the cut one
/// out.
pub struct FixedBuf<const N: usize> {
    bytes: [u8; N],
    len: usize,
    overflowed: bool,
}

impl<const N: usize> FixedBuf<N> {
    pub const fn new() -> FixedBuf<N> {
        FixedBuf { bytes: [0; N], len: 0, overflowed: false }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Some write did not fit: the content is cut.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    pub fn clear(&mut self) {
        self.len = 0;
        self.overflowed = false;
    }

    /// Forgets everything after the first `len` bytes (to take back a record that did not fit).
    pub fn truncate(&mut self, len: usize) {
        if len < self.len {
            self.len = len;
        }
        self.overflowed = false;
    }
}

impl<const N: usize> std::fmt::Debug for FixedBuf<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FixedBuf")
            .field("len", &self.len)
            .field("capacity", &N)
            .field("overflowed", &self.overflowed)
            .finish()
    }
}

impl<const N: usize> Default for FixedBuf<N> {
    fn default() -> Self {
        FixedBuf::new()
    }
}

impl<const N: usize> Out for FixedBuf<N> {
    fn put(&mut self, bytes: &[u8]) {
        let room = N - self.len;
        if bytes.len() > room {
            self.overflowed = true;
            return;
        }
        self.bytes[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }
}

/// Decimal digits of `value`.
pub fn put_u64(out: &mut (impl Out + ?Sized), mut value: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.put(&digits[start..]);
}

pub fn put_i64(out: &mut (impl Out + ?Sized), value: i64) {
    if value < 0 {
        out.put(b"-");
    }
    put_u64(out, value.unsigned_abs());
}

/// A JSON number for `value`: integers without a fraction, others with up to 6 decimals, and `null`
/// for NaN and infinities (which JSON cannot hold).
pub fn put_f64(out: &mut (impl Out + ?Sized), value: f64) {
    if !value.is_finite() {
        out.put(b"null");
        return;
    }
    if value.fract() == 0.0 && value.abs() < 1e18 {
        put_i64(out, value as i64);
        return;
    }
    if value < 0.0 {
        out.put(b"-");
    }
    let value = value.abs();
    let whole = value.trunc();
    if whole >= 1e18 {
        // Beyond what a u64 holds exactly: scientific form with 6 significant decimals.
        let exponent = value.log10().floor() as i32;
        let mantissa = value / 10f64.powi(exponent);
        put_fraction(out, mantissa);
        out.put(b"e");
        put_i64(out, exponent.into());
        return;
    }
    put_fraction(out, value);
}

fn put_fraction(out: &mut (impl Out + ?Sized), value: f64) {
    let scaled = (value * 1e6).round() as u64;
    put_u64(out, scaled / 1_000_000);
    let mut fraction = scaled % 1_000_000;
    if fraction == 0 {
        return;
    }
    let mut digits = [b'0'; 6];
    for d in digits.iter_mut().rev() {
        *d = b'0' + (fraction % 10) as u8;
        fraction /= 10;
    }
    let end = digits.iter().rposition(|&d| d != b'0').map_or(0, |i| i + 1);
    out.put(b".");
    out.put(&digits[..end]);
}

/// `bytes` as a JSON string literal (quotes included).
pub fn put_str(out: &mut (impl Out + ?Sized), bytes: &[u8]) {
    out.put(b"\"");
    for chunk in bytes.utf8_chunks() {
        put_escaped(out, chunk.valid());
        if !chunk.invalid().is_empty() {
            out.put("\u{FFFD}".as_bytes());
        }
    }
    out.put(b"\"");
}

fn put_escaped(out: &mut (impl Out + ?Sized), text: &str) {
    let bytes = text.as_bytes();
    let mut plain_from = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => continue,
        };
        out.put(&bytes[plain_from..i]);
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.put(&[b'\\', b'u', b'0', b'0', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
        } else {
            out.put(escape);
        }
        plain_from = i + 1;
    }
    out.put(&bytes[plain_from..]);
}

/// One JSON object being written: `Obj::begin(out)`, a call per member, then [`Obj::end_line`]
/// (which closes the object and ends the line, as every trace record does) or [`Obj::end`] (an
/// object nested in another value).
#[allow(missing_debug_implementations)]
pub struct Obj<'o, O: Out + ?Sized>(Items<'o, O>);

impl<'o, O: Out + ?Sized> Obj<'o, O> {
    pub fn begin(out: &'o mut O) -> Self {
        Obj(Items::open(out, b"{"))
    }

    /// Writes `"key":` (with the separator) and returns the sink for the value.
    pub fn key(&mut self, key: &str) -> &mut O {
        let out = self.0.next();
        put_str(out, key.as_bytes());
        out.put(b":");
        out
    }

    pub fn u64(&mut self, key: &str, value: u64) -> &mut Self {
        put_u64(self.key(key), value);
        self
    }

    /// Left out when zero (the format's convention for counters).
    pub fn u64_nonzero(&mut self, key: &str, value: u64) -> &mut Self {
        if value != 0 {
            self.u64(key, value);
        }
        self
    }

    pub fn i64(&mut self, key: &str, value: i64) -> &mut Self {
        put_i64(self.key(key), value);
        self
    }

    pub fn f64(&mut self, key: &str, value: f64) -> &mut Self {
        put_f64(self.key(key), value);
        self
    }

    pub fn bool(&mut self, key: &str, value: bool) -> &mut Self {
        self.key(key).put(if value { b"true" } else { b"false" });
        self
    }

    pub fn str(&mut self, key: &str, value: &str) -> &mut Self {
        put_str(self.key(key), value.as_bytes());
        self
    }

    /// A string from bytes that need not be UTF-8.
    pub fn bytes(&mut self, key: &str, value: &[u8]) -> &mut Self {
        put_str(self.key(key), value);
        self
    }

    pub fn opt_str(&mut self, key: &str, value: Option<&str>) -> &mut Self {
        if let Some(value) = value {
            self.str(key, value);
        }
        self
    }

    /// `[a,b,c]`.
    pub fn u32x3(&mut self, key: &str, value: [u32; 3]) -> &mut Self {
        put_u32x3(self.key(key), value);
        self
    }

    /// `[[id,n],…]`, left out when empty.
    pub fn pairs(&mut self, key: &str, pairs: &[(u32, u64)]) -> &mut Self {
        if pairs.is_empty() {
            return self;
        }
        self.list(key, pairs, |out, &(id, n)| Arr::begin(out).u64(id.into()).u64(n).end())
    }

    /// `[item,…]`, each item written by `each` ([`put_list`]).
    pub fn list<T>(&mut self, key: &str, items: impl IntoIterator<Item = T>, each: impl FnMut(&mut O, T)) -> &mut Self {
        put_list(self.key(key), items, each);
        self
    }

    pub fn end(mut self) {
        self.0.close(b"}");
    }

    /// `}` and the newline that ends a record.
    pub fn end_line(mut self) {
        self.0.close(b"}\n");
    }
}

/// The items of a JSON object or array being written: the opening bracket, the items with a comma between
/// each two, the closing bracket.
struct Items<'o, O: Out + ?Sized> {
    out: &'o mut O,
    first: bool,
}

impl<'o, O: Out + ?Sized> Items<'o, O> {
    fn open(out: &'o mut O, bracket: &[u8]) -> Self {
        out.put(bracket);
        Items { out, first: true }
    }

    /// The separator (none before the first item), and the sink for the next item.
    fn next(&mut self) -> &mut O {
        if !self.first {
            self.out.put(b",");
        }
        self.first = false;
        self.out
    }

    fn close(&mut self, bracket: &[u8]) {
        self.out.put(bracket);
    }
}

pub fn put_u32x3(out: &mut (impl Out + ?Sized), value: [u32; 3]) {
    Arr::begin(out).u64(value[0].into()).u64(value[1].into()).u64(value[2].into()).end();
}

/// `[item,…]`: each item written by `each`, commas between (an [`Obj`] or an [`Arr`] per item).
pub fn put_list<O: Out + ?Sized, T>(out: &mut O, items: impl IntoIterator<Item = T>, mut each: impl FnMut(&mut O, T)) {
    let mut list = Items::open(out, b"[");
    for item in items {
        each(list.next(), item);
    }
    list.close(b"]");
}

/// One JSON array being written, a call per value: `Arr::begin(out).u64(a).u32x3(b).end()`; the trace format
/// writes its tuples (a launch, a shape count, a dispatch) so.
#[allow(missing_debug_implementations)]
pub struct Arr<'o, O: Out + ?Sized>(Items<'o, O>);

impl<'o, O: Out + ?Sized> Arr<'o, O> {
    pub fn begin(out: &'o mut O) -> Self {
        Arr(Items::open(out, b"["))
    }

    pub fn u64(&mut self, value: u64) -> &mut Self {
        put_u64(self.0.next(), value);
        self
    }

    /// `[a,b,c]`.
    pub fn u32x3(&mut self, value: [u32; 3]) -> &mut Self {
        put_u32x3(self.0.next(), value);
        self
    }

    /// A string from bytes that need not be UTF-8.
    pub fn bytes(&mut self, value: &[u8]) -> &mut Self {
        put_str(self.0.next(), value);
        self
    }

    pub fn end(&mut self) {
        self.0.close(b"]");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn strings_are_escaped_as_json_requires() {
        // RFC 8259 section 7: quotation mark, reverse solidus and controls U+0000..U+001F must be escaped.
        assert_eq!(text(|o| put_str(o, "a\"b\\c\nd\u{1}é<>\t\r".as_bytes())), r#""a\"b\\c\nd\u0001é<>\t\r""#);
        assert_eq!(text(|o| put_str(o, b"\x1f\x00")), r#""\u001f\u0000""#);
    }

    #[test]
    fn invalid_utf8_becomes_the_replacement_character() {
        assert_eq!(text(|o| put_str(o, b"ab\xffc\xe2\x82")), "\"ab\u{FFFD}c\u{FFFD}\"");
    }

    #[test]
    fn numbers_print_like_rust_does() {
        for v in [0u64, 7, 10, 999, u64::MAX] {
            assert_eq!(text(|o| put_u64(o, v)), v.to_string());
        }
        for v in [i64::MIN, -1, 0, 42] {
            assert_eq!(text(|o| put_i64(o, v)), v.to_string());
        }
        assert_eq!(text(|o| put_f64(o, 2.5)), "2.5");
        assert_eq!(text(|o| put_f64(o, -0.125)), "-0.125");
        assert_eq!(text(|o| put_f64(o, 1024.0)), "1024");
        assert_eq!(text(|o| put_f64(o, f64::NAN)), "null");
        let big: f64 = text(|o| put_f64(o, 3.25e20)).parse().unwrap();
        assert_eq!(big, 3.25e20);
    }

    #[test]
    fn objects_separate_members_and_skip_empty_lists() {
        let line = text(|o| {
            let mut obj = Obj::begin(o);
            obj.u64("a", 1).pairs("empty", &[]).pairs("p", &[(1, 2), (3, 4)]).u32x3("s", [1, 2, 3]);
            obj.u64_nonzero("zero", 0).bool("b", true).opt_str("none", None).str("s2", "x");
            obj.end_line();
        });
        assert_eq!(line, "{\"a\":1,\"p\":[[1,2],[3,4]],\"s\":[1,2,3],\"b\":true,\"s2\":\"x\"}\n");
    }

    #[test]
    fn a_fixed_buffer_drops_what_does_not_fit_and_says_so() {
        let mut buf = FixedBuf::<8>::new();
        buf.put(b"12345");
        assert!(!buf.overflowed());
        buf.put(b"6789");
        assert!(buf.overflowed());
        assert_eq!(buf.as_bytes(), b"12345");
        buf.truncate(2);
        assert_eq!((buf.as_bytes(), buf.overflowed()), (&b"12"[..], false));
        buf.clear();
        assert!(buf.is_empty());
    }
}
