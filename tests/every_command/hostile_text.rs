//! The text output under hostile text, through `logs` and the error messages: unbreakable tokens in text wrapping,
//! terminal escapes in error messages, and bidi, line-separator and zero-width characters in tables. Every input is
//! generated here; the commands run as children under [`bounded::run`] (address-space limit, deadline, peak RSS).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::bounded::{self, Bounds, GIB};

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, bytes).unwrap();
    p
}

fn bounds(seconds: u64) -> Bounds {
    Bounds { address_space: 4 * GIB, deadline: Duration::from_secs(seconds), ..Bounds::default() }
}

/// A 64 KiB token without a space: where one stands, text output must cut it, not choke on it.
fn token(i: usize, len: usize) -> String {
    let mut t = format!("t{i:04}-");
    t.extend((0..len - t.len()).map(|k| char::from(b'a' + (k % 26) as u8)));
    t
}

#[test]
fn text_output_of_unbreakable_tokens_takes_seconds_not_minutes() {
    // A 6.5 MB log whose backend paths and Vulkan device names and drivers are tokens of up to 63 KiB (under the
    // 64 KiB line cap; lines of
    // tests/data's shapes: `load_backend: …` of ollama/ollama#13070, `ggml_vulkan: N = …` of llama.cpp#17334).
    // Before: 172 s (backend paths, wrapped as facts and claims) and 81 s (device drivers, wrapped in a table
    // column) in a debug build, against under a second for --json; wrapping measured and copied the rest of the
    // token at every cut.
    let dir = tempfile::tempdir().unwrap();
    let mut log = String::new();
    for i in 0..50 {
        log += &format!("load_backend: loaded CPU backend from /{}\n", token(i, 63 << 10));
    }
    for i in 0..50 {
        log += &format!(
            "ggml_vulkan: {i} = {} ({}) | uma: 0 | fp16: 1 | warp size: 64 | shared memory: 65536 | int dot: 1 | matrix cores: none\n",
            token(i, 32 << 10),
            token(i + 1000, 32 << 10)
        );
    }
    assert!(log.len() > 6_500_000);
    let path = write(dir.path(), "tokens.log", log.as_bytes());
    let width = 100;
    let columns = Bounds { env: vec![("COLUMNS", width.to_string())], ..bounds(120) };
    let text = bounded::run(&["logs".into(), "--all".into(), path.clone().into_os_string()], columns);
    text.assert_bounded(&[0], 15, GIB);
    for line in text.stdout.lines() {
        assert!(unicode_width::UnicodeWidthStr::width(line) <= width, "wider than {width}: {line:.200}");
    }
    // The tokens are cut, not lost: a backend path whole across its wrapped lines, the last driver's start.
    let joined: String = text.stdout.split(['\n', ' ']).collect();
    assert!(joined.contains(&token(0, 63 << 10)), "the first backend path is not whole");
    assert!(text.stdout.contains("t1049-"), "the last driver is missing");
    let json = bounded::run(&["logs".into(), "--json".into(), path.into_os_string()], bounds(120));
    json.assert_bounded(&[0], 15, GIB);
    assert!(
        text.elapsed < json.elapsed * 20 + Duration::from_secs(3),
        "text {:?}, json {:?}",
        text.elapsed,
        json.elapsed
    );
}

/// The hazards a terminal obeys or a reader cannot see: window title (OSC 0 and 2), screen clear, OSC 52 (writes
/// the clipboard), the one-byte CSI U+009B, a bare BEL.
const TERMINAL_ESCAPES: &str = "\u{1b}]0;pwned\u{7}\u{1b}]2;title\u{1b}\\\u{1b}[2J\u{1b}]52;c;ZXZpbA==\u{7}\u{9b}31m";
/// The same as `escape::message` writes them (an independent spelling: `\xHH` for C0, `\u{…}` above).
const TERMINAL_ESCAPES_SHOWN: &str = r"\x1b]0;pwned\x07\x1b]2;title\x1b\\x1b[2J\x1b]52;c;ZXZpbA==\x07\u{9b}31m";

/// Whether `s` holds a character a terminal would obey rather than show (C0 but tab and newline, DEL, C1).
fn has_raw_controls(s: &str) -> bool {
    s.chars().any(|c| c.is_control() && c != '\n' && c != '\t')
}

/// A GGUF v3 file (ggml's docs/gguf.md: magic, version, tensor count, KV count, KVs, tensor infos, data aligned
/// to 32) with `general.architecture = llama` and one 32×32 tensor named `tensor_name` of ggml type `ggml_type`.
fn gguf_with_tensor(tensor_name: &[u8], ggml_type: u32) -> Vec<u8> {
    let string = |out: &mut Vec<u8>, s: &[u8]| {
        out.extend_from_slice(&(s.len() as u64).to_le_bytes());
        out.extend_from_slice(s);
    };
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&1u64.to_le_bytes());
    out.extend_from_slice(&1u64.to_le_bytes());
    string(&mut out, b"general.architecture");
    out.extend_from_slice(&8u32.to_le_bytes()); // GGUF_TYPE_STRING
    string(&mut out, b"llama");
    string(&mut out, tensor_name);
    out.extend_from_slice(&2u32.to_le_bytes());
    out.extend_from_slice(&32u64.to_le_bytes());
    out.extend_from_slice(&32u64.to_le_bytes());
    out.extend_from_slice(&ggml_type.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.resize(out.len().next_multiple_of(32) + 32 * 32 * 4, 0);
    out
}

#[test]
fn error_messages_show_terminal_escapes_from_a_gguf_name_instead_of_obeying_them() {
    // ggml type 99 does not exist: the error names the tensor, whose name carries the escapes.
    let dir = tempfile::tempdir().unwrap();
    let name = format!("blk.0.attn_q.weight{TERMINAL_ESCAPES}");
    let model = write(dir.path(), "model.gguf", &gguf_with_tensor(name.as_bytes(), 99));
    let args = ["predict", "--arch", "gfx1100", "--prompt-tokens", "8", "--model"];
    let mut argv: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
    argv.push(model.into_os_string());
    let done = bounded::run(&argv, bounds(60));
    done.assert_bounded(&[2], 60, GIB);
    assert!(!has_raw_controls(&done.stderr), "raw control characters on stderr: {:?}", done.stderr);
    assert!(done.stderr.contains(&format!("blk.0.attn_q.weight{TERMINAL_ESCAPES_SHOWN}")), "{}", done.stderr);
    assert!(done.stderr.contains("tensor[0]"), "the error still says where: {}", done.stderr);
}

#[test]
fn error_messages_show_terminal_escapes_and_newlines_from_a_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join(format!("x{TERMINAL_ESCAPES}\nbackscope: all good.log"));
    let done = bounded::run(&["logs".into(), missing.into_os_string()], bounds(60));
    done.assert_bounded(&[2], 60, GIB);
    assert!(!has_raw_controls(&done.stderr), "raw control characters on stderr: {:?}", done.stderr);
    assert_eq!(done.stderr.lines().count(), 1, "a newline in the path forged a line: {:?}", done.stderr);
    assert!(done.stderr.contains(&format!("x{TERMINAL_ESCAPES_SHOWN}\\x0abackscope: all good.log")), "{}", done.stderr);
}

/// Characters that reorder text, break lines or take no column, each in a device name below.
const INVISIBLES: [char; 12] = [
    '\u{200f}', '\u{200e}', '\u{61c}', '\u{202e}', '\u{2067}', '\u{2069}', '\u{2028}', '\u{2029}', '\u{feff}',
    '\u{200b}', '\u{200d}', '\u{2060}',
];

#[test]
fn bidi_and_invisible_characters_in_a_log_cannot_shift_a_table_or_reorder_text() {
    // Vulkan device lines in llama.cpp's format (tests/data/vulkan-17334-device-lost.log), one per hazard, its name
    // and driver carrying it; the Devices table of `logs` must keep every row at the same width.
    let dir = tempfile::tempdir().unwrap();
    let mut log = String::new();
    for (i, c) in INVISIBLES.iter().enumerate() {
        log += &format!(
            "ggml_vulkan: {i} = Radeon{c} RX {i}{c}{c} (RADV{c} NAVI) | uma: 0 | fp16: 1 | bf16: 0 | warp size: 64 | shared memory: 65536 | int dot: 1 | matrix cores: none\n"
        );
    }
    log += "ggml_vulkan: 12 = Radeon RX 12 (RADV NAVI) | uma: 0 | fp16: 1 | bf16: 0 | warp size: 64 | shared memory: 65536 | int dot: 1 | matrix cores: none\n";
    let path = write(dir.path(), "bidi.log", log.as_bytes());
    let columns = Bounds { env: vec![("COLUMNS", "200".to_string())], ..bounds(60) };
    let text = bounded::run(&["logs".into(), path.clone().into_os_string()], columns);
    text.assert_bounded(&[0], 60, GIB);
    let out = &text.stdout;
    for c in INVISIBLES {
        assert!(!out.contains(c), "U+{:04X} reached the terminal", u32::from(c));
        assert!(out.contains(&format!("Radeon\\u{{{:x}}} RX", u32::from(c))), "U+{:04X} not shown", u32::from(c));
    }
    assert!(!has_raw_controls(out));
    // The Devices table: from its heading to the first line that is not part of it.
    let table: Vec<&str> = out
        .lines()
        .skip_while(|l| *l != "Devices")
        .skip(1)
        .take_while(|l| l.starts_with(['┌', '│', '├', '╞', '└']))
        .collect();
    assert_eq!(table.iter().filter(|l| l.contains("Radeon")).count(), INVISIBLES.len() + 1, "{out}");
    let widths: Vec<usize> = table.iter().map(|l| unicode_width::UnicodeWidthStr::width(*l)).collect();
    assert!(widths.iter().all(|w| *w == widths[0]), "rows of different widths {widths:?}:\n{}", table.join("\n"));
    // Markdown and HTML show the same escapes and let none of the characters through.
    for format in ["markdown", "html"] {
        let done =
            bounded::run(&["logs".into(), "--format".into(), format.into(), path.clone().into_os_string()], bounds(60));
        done.assert_bounded(&[0], 60, GIB);
        for c in INVISIBLES {
            assert!(!done.stdout.contains(c), "{format}: U+{:04X} passed", u32::from(c));
        }
        assert!(done.stdout.contains("Radeon\\u{200f} RX"), "{format}: not shown");
        assert!(!has_raw_controls(&done.stdout), "{format}");
    }
}

#[test]
fn a_usage_error_shows_the_bidi_controls_of_the_argument_it_quotes() {
    // clap quotes the wrong value; without colours it strips ANSI sequences, but not an override (U+202E would
    // reverse the rest of the line) nor a one-byte CSI.
    let value = format!("{}html\u{202e}lmth", TERMINAL_ESCAPES);
    let done = bounded::run(&["logs".to_string(), "--format".into(), value, "x.log".into()], bounds(60));
    done.assert_bounded(&[2], 60, GIB);
    assert!(!has_raw_controls(&done.stderr), "{:?}", done.stderr);
    assert!(!done.stderr.contains('\u{202e}'), "{:?}", done.stderr);
    assert!(done.stderr.contains(r"html\u{202e}lmth"), "{}", done.stderr);
    assert!(done.stderr.contains("possible values"), "clap's message is kept: {}", done.stderr);
    // Help is clap's, on standard output, status 0.
    let help = bounded::run(&["logs", "--help"], bounds(60));
    help.assert_bounded(&[0], 60, GIB);
    assert!(help.stdout.contains("Usage: backscope logs"), "{}", help.stdout);
}
