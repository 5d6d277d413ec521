//! Crash signatures: the few facts of a crash that stay the same when the same bug fires again.
//!
//! Two reports of one crash differ in addresses, goroutine ids, argument values, PIDs, install paths and
//! line numbers of the calling code; they agree on the signal, the assertion or error text, and the
//! functions at the top of the crashing stack. A signature keeps those, normalised:
//! - Go frames: the function name without its module path and arguments
//!   (`github.com/ollama/ollama/llama._Cfunc_llama_decode(0x7f…, {…})` → `llama._Cfunc_llama_decode`),
//!   Go runtime frames (`runtime.*`) dropped;
//! - native frames: `module!symbol` with the module's base name, offsets and addresses dropped, and the
//!   frames of the abort machinery itself (`ggml_abort`, `raise`, `abort`…) skipped;
//! - messages: hexadecimal numbers become `0x?`, paths their base name.
//!
//! Its id is the first 16 hex digits of the SHA-256 of the signature text, stable across runs and hosts.

use sha2::{Digest, Sha256};

/// Most frames a signature keeps.
pub const SIGNATURE_FRAMES: usize = 5;

/// Frames of the crash machinery rather than of the crashing code.
const NATIVE_NOISE: &[&str] = &[
    "ggml_print_backtrace",
    "ggml_print_backtrace_symbols",
    "ggml_abort",
    "ggml_uncaught_exception",
    "abort",
    "raise",
    "gsignal",
    "__GI_raise",
    "__GI_abort",
    "__GI___pthread_kill",
    "__pthread_kill_implementation",
    "__pthread_kill_internal",
    "pthread_kill",
    "__restore_rt",
    "__libc_start_main",
    "__libc_start_call_main",
    "_start",
    "__GI___wait4",
    "waitpid",
    "wait4",
    // libstdc++'s path for an exception nobody caught: the code that threw is below it.
    "_ZSt10unexpectedv",
    "_ZSt9terminatev",
    "std::terminate",
    "__cxa_throw",
    "__cxa_rethrow",
];

/// Windows status codes a crashed process exits with (`exit status 0xc0000409`) or the Go runtime reports
/// (`Exception 0xc0000005 …`), and what each means (ntstatus.h; 0xe06d7363 is the code MSVC's C++ runtime raises
/// for a `throw`). A signature keeps them: each names a different failure.
pub const WINDOWS_STATUS: &[(&str, &str)] = &[
    ("0xc0000005", "STATUS_ACCESS_VIOLATION: an access violation (a segfault)"),
    (
        "0xc0000409",
        "STATUS_STACK_BUFFER_OVERRUN: a fail-fast, what abort() raises in MSVC builds (ggml_abort, an assertion)",
    ),
    ("0xc0000135", "STATUS_DLL_NOT_FOUND: a DLL the program needs was not found"),
    ("0xc0000139", "STATUS_ENTRYPOINT_NOT_FOUND: a DLL lacks a function the program needs (a DLL of another version)"),
    ("0xc0000142", "STATUS_DLL_INIT_FAILED: a DLL failed to initialise"),
    ("0xc000001d", "STATUS_ILLEGAL_INSTRUCTION: an instruction this CPU does not have"),
    ("0xc00000fd", "STATUS_STACK_OVERFLOW: a stack overflow"),
    ("0xc0000374", "STATUS_HEAP_CORRUPTION: heap corruption"),
    ("0xc0000094", "STATUS_INTEGER_DIVIDE_BY_ZERO: an integer division by zero"),
    ("0xc0000096", "STATUS_PRIVILEGED_INSTRUCTION: a privileged instruction"),
    ("0xc0000022", "STATUS_ACCESS_DENIED: access denied"),
    ("0xc000013a", "STATUS_CONTROL_C_EXIT: ended by Ctrl+C or a console close"),
    ("0xe06d7363", "an MSVC C++ exception nobody caught"),
    ("0x80000003", "STATUS_BREAKPOINT: a breakpoint (a debug trap)"),
];

/// The first run of exactly `len` ASCII digits in `text` (a run the bytes before and after it do not lengthen): one
/// step a byte, where splitting the text into words at every other byte called a closure a byte and again a word.
fn digit_run_of(text: &[u8], len: usize) -> Option<&[u8]> {
    let mut at = 0;
    while at < text.len() {
        if !text[at].is_ascii_digit() {
            at += 1;
            continue;
        }
        let start = at;
        while at < text.len() && text[at].is_ascii_digit() {
            at += 1;
        }
        if at - start == len {
            return Some(&text[start..at]);
        }
    }
    None
}

/// A Windows exit status that a supervisor printed as an unsigned 64-bit number rounded through a double (LM Studio:
/// `Exit code: 18446744072635812000`), read back: the status lies within the double's step (2048 there) of the
/// number, and the note names the table's codes in that range. `None` for other numbers.
pub fn rounded_exit_code(text: &str) -> Option<String> {
    // A run of ASCII digits is the same whether the text is split by bytes or by characters.
    let digits = std::str::from_utf8(digit_run_of(text.as_bytes(), 20)?).ok()?;
    // The printed digits are the shortest that read back as the double; the double is the status rounded to a
    // multiple of 2048 (doubles between 2^63 and 2^64 are 2048 apart), so the status is within 1024 of it.
    let double: f64 = digits.parse().ok()?;
    if !(2f64.powi(63)..2f64.powi(64)).contains(&double) {
        return None;
    }
    let value = double as u64;
    let base: u64 = u64::MAX - u64::from(u32::MAX);
    let status = value.checked_sub(base)?;
    let (low, high) = (status.saturating_sub(1024), status + 1024);
    let codes: Vec<&(&str, &str)> = WINDOWS_STATUS
        .iter()
        .filter(|(c, _)| u64::from_str_radix(&c[2..], 16).is_ok_and(|v| (low..high).contains(&v)))
        .collect();
    let range = format!("0x{low:08x}-0x{:08x}", high - 1);
    Some(match codes.as_slice() {
        [] => format!(" (an unsigned 64-bit reading of a Windows status in {range}, rounded through a double)"),
        [(code, name)] => format!(
            " (an unsigned 64-bit reading of Windows status {code}, rounded through a double: {range} holds only {code} of the known codes; {code} is {name})"
        ),
        many => format!(
            " (an unsigned 64-bit reading of a Windows status in {range}, rounded through a double: {})",
            many.iter().map(|(c, n)| format!("{c} is {n}")).collect::<Vec<_>>().join("; ")
        ),
    })
}

/// The first Windows status code of [`WINDOWS_STATUS`] that `text` holds as a word, and its meaning.
pub fn windows_status(text: &str) -> Option<(&'static str, &'static str)> {
    // Split by bytes, as by characters: every byte of a character outside ASCII separates words too.
    text.as_bytes()
        .split(|b| !b.is_ascii_alphanumeric())
        .filter(|w| w.len() == 10)
        .find_map(|w| WINDOWS_STATUS.iter().find(|(code, _)| code.as_bytes().eq_ignore_ascii_case(w)).copied())
}

/// A Go function name without its module path: everything up to the last `/` goes.
pub fn go_function(function: &str) -> String {
    let start = function.rfind('/').map_or(0, |i| i + 1);
    function[start..].to_string()
}

/// Whether a Go frame belongs to the runtime rather than to the program.
pub fn is_go_runtime(function: &str) -> bool {
    let short = &function[function.rfind('/').map_or(0, |i| i + 1)..];
    short.starts_with("runtime.") || short.starts_with("syscall.")
}

/// `module!symbol` for a native frame, or `None` for a frame of the abort machinery.
pub fn native_function(module: Option<&str>, symbol: Option<&str>) -> Option<String> {
    let symbol = symbol.filter(|s| !s.is_empty() && *s != "??");
    if let Some(s) = symbol {
        if NATIVE_NOISE.contains(&s) {
            return None;
        }
    }
    // `MODULE!SYMBOL` written into a string of its size: every native frame of a crash gets one, and `format!` (with a
    // copy of the module's base name first) cost several times the copying.
    let module = module.map(|m| m.rsplit(['/', '\\']).next().unwrap_or(m));
    Some(match (module, symbol) {
        (Some(m), s) => {
            let s = s.unwrap_or("?");
            let mut out = String::with_capacity(m.len() + 1 + s.len());
            out.push_str(m);
            out.push('!');
            out.push_str(s);
            out
        }
        (None, Some(s)) => s.to_string(),
        (None, None) => "?".to_string(),
    })
}

/// Words after which a number counts something that varies between two reports of one crash (a thread, a task, a
/// process, a slot, a progress figure) rather than naming the failure.
const COUNTER_WORDS: &[&str] = &["thread", "threads", "task", "tid", "pid", "id", "slot", "progress", "n_tokens"];

/// Normalise free text for a signature: hex numbers → `0x?` except Windows status codes ([`WINDOWS_STATUS`]), which
/// name the failure; path-like words → their base name; thread, task and process numbers and a `[pid]` → `N`.
pub fn normalise_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut previous = "";
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let counted = COUNTER_WORDS.contains(&previous.trim_end_matches([':', '=']))
            || (word.starts_with('[') && word.ends_with(']') && word.len() > 2);
        if !word.is_empty() {
            previous = word;
        }
        let digits = word.trim_matches(|c: char| !c.is_ascii_alphanumeric());
        if counted && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            out.push_str(&word.replace(digits, "N"));
            continue;
        }
        // The pieces are masked one by one: a hexadecimal number cannot span them (`://`, `/` and the trailing
        // punctuation hold no hex digit).
        // `memchr` on the needle's rarest byte, not the two-way searcher `str::find` builds on every call (every word).
        if let Some(scheme_end) = crate::patterns::find_in(word.as_bytes(), b"://") {
            // A URL: the host and port vary (Ollama's runner port is random), the path does not.
            let after = &word[scheme_end + 3..];
            let path = after.find('/').map_or("", |i| &after[i..]);
            mask_hex(&mut out, &word[..scheme_end]);
            out.push_str("://…");
            mask_hex(&mut out, path);
        } else if word.contains(['/', '\\']) {
            let trimmed = word.trim_end_matches([':', ',', ')', '"', '\'']);
            let tail = &word[trimmed.len()..];
            let base = trimmed.rsplit(['/', '\\']).next().unwrap_or(trimmed);
            mask_hex(&mut out, base);
            out.push_str(tail);
        } else {
            mask_hex(&mut out, word);
        }
    }
    out
}

/// Appends `word` with each hexadecimal number (`0x…`) written as `0x?`, unless it is a Windows status code.
fn mask_hex(out: &mut String, word: &str) {
    let bytes = word.as_bytes();
    if crate::patterns::find_in(bytes, b"0x").is_none() {
        out.push_str(word);
        return;
    }
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'0' && bytes.get(i + 1) == Some(&b'x') && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit) {
            let start = i;
            i += 2;
            while bytes.get(i).is_some_and(u8::is_ascii_hexdigit) {
                i += 1;
            }
            let number = word[start..i].to_ascii_lowercase();
            if WINDOWS_STATUS.iter().any(|(code, _)| *code == number) {
                out.push_str(&number);
            } else {
                out.push_str("0x?");
            }
        } else {
            let c = word[i..].chars().next().unwrap_or('?');
            out.push(c);
            i += c.len_utf8();
        }
    }
}

/// The signature id of a text.
pub fn id_of(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_names_lose_module_paths() {
        assert_eq!(
            go_function("github.com/ollama/ollama/llama.(*Context).Decode.func1"),
            "llama.(*Context).Decode.func1"
        );
        assert_eq!(go_function("main.main"), "main.main");
        assert!(is_go_runtime("runtime.cgocall"));
        assert!(!is_go_runtime("github.com/ollama/ollama/runner/llamarunner.(*Server).run"));
    }

    #[test]
    fn native_names() {
        assert_eq!(native_function(Some("/usr/bin/ollama"), None).unwrap(), "ollama!?");
        assert_eq!(native_function(Some("/x/libggml-base.so"), Some("ggml_abort")), None);
        assert_eq!(native_function(None, Some("llama_decode")).unwrap(), "llama_decode");
    }

    #[test]
    fn exit_codes_rounded_through_a_double() {
        // LM Studio's `Exit code: 18446744072635812000` (lmstudio-ai/lmstudio-bug-tracker issues 1347, 471): JavaScript
        // prints the u64 reading of a negative status as the shortest decimal of its double, 2^64 - 2^32 + 0x800.
        let note = rounded_exit_code("Exit code: 18446744072635812000").unwrap();
        assert!(note.contains("0xc0000409") && note.contains("0xc0000400-0xc0000bff"), "{note}");
        // 0xc0000005 (and 0xc000001d, 0xc0000135) round to 2^64 - 2^32 + 0: another number, another range.
        let note = rounded_exit_code("Exit code: 18446744072635810000").unwrap();
        assert!(note.contains("0xc0000005") && note.contains("0xc000001d") && !note.contains("0xc0000409"), "{note}");
        assert_eq!(rounded_exit_code("exit status 2"), None);
        // The run is found as splitting at every byte other than a digit found it.
        fn before(t: &[u8]) -> Option<&[u8]> {
            t.split(|b| !b.is_ascii_digit()).find(|w| w.len() == 20)
        }
        let twenty = "18446744072635812000";
        for text in [
            String::new(),
            twenty.to_string(),
            format!("{twenty}1"),
            format!("1{twenty}"),
            format!("x{twenty}y"),
            format!("9{twenty} {twenty}"),
            format!("é{twenty}é"),
            format!("{} {twenty}", &twenty[..19]),
            format!("{}x{}", &twenty[..10], &twenty[10..]),
            "Exit code: 18446744072635812000.".to_string(),
        ] {
            assert_eq!(digit_run_of(text.as_bytes(), 20), before(text.as_bytes()), "{text}");
        }
        assert_eq!(rounded_exit_code("Exit code: 99999999999999999999"), None);
    }

    #[test]
    fn text_normalisation_and_ids() {
        assert_eq!(
            normalise_text("Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: Illegal seek at 0x7f12ab"),
            "Cannot read TensileLibrary.dat: Illegal seek at 0x?"
        );
        assert_eq!(
            normalise_text(r#"Post "http://127.0.0.1:49576/completion": EOF"#),
            r#"Post "http://…/completion": EOF"#
        );
        // SHA-256("abc") begins ba7816bf8f01cfea (FIPS 180-2, appendix B.1).
        assert_eq!(id_of("abc"), "ba7816bf8f01cfea");
    }
}
