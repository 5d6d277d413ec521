//! Secrets out of an evidence bundle. A bundle is meant to be attached to a public bug report, and what it copies
//! (the run's command line, the environment overrides of its endpoints, server logs) can carry credentials: an
//! `HF_TOKEN` passed to a server, an API key on a command line, a proxy URL with a password.
//!
//! Two passes. In JSON, structure tells: the value of a key (or of a `[name, value]` pair, or the argument after a
//! flag) whose name says secret, and any environment value shaped like a token, is replaced. In every text,
//! shapes tell: the known token formats of the services a model runner talks to, `NAME=value` with a secret name,
//! `--api-key=value`, `Authorization:` headers and passwords in URLs.

use std::sync::LazyLock;

use regex_lite::Regex;
use serde_json::Value;

/// What a redacted value becomes.
pub const REDACTED: &str = "[REDACTED]";

/// Words of a variable, key or flag name that mark its value secret.
const SECRET_WORDS: &[&str] =
    &["TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "APIKEY", "KEY", "AUTH", "AUTHORIZATION"];

/// Names with a secret word whose values are not secrets: a sweep record's cell address, cache keys, public keys.
const NOT_SECRET_NAMES: &[&str] = &["cell_key", "cache_key", "sort_key", "public_key", "pubkey"];

/// Short flags whose value is a secret although their name does not say so: llama.cpp's `-hft` (`--hf-token`).
const SECRET_SHORT_FLAGS: &[&str] = &["-hft"];

/// Whether a variable, key or flag name marks its value secret (`HF_TOKEN`, `OLLAMA_API_KEY`, `--api-key`,
/// `password`, `X-Api-Key`, `apiKey`): one of its words (split at `_`, `-`, `.` and where a lower-case letter meets
/// an upper-case one) is a secret word. Counts of tokens (`n_tokens`, `target_tokens`, `maxTokens`), `KEEP_ALIVE`
/// or `HOTKEYS` are not secrets.
pub fn secret_name(name: &str) -> bool {
    let name = name.trim_start_matches('-');
    if NOT_SECRET_NAMES.iter().any(|n| n.eq_ignore_ascii_case(name)) {
        return false;
    }
    let secret = |w: &str| SECRET_WORDS.iter().any(|s| w.eq_ignore_ascii_case(s));
    name.split(['_', '-', '.']).any(|part| {
        if secret(part) {
            return true;
        }
        // camelCase: `apiKey`, `hfToken`, `clientSecret`.
        let mut start = 0;
        let bytes = part.as_bytes();
        for i in 1..bytes.len() {
            if bytes[i - 1].is_ascii_lowercase() && bytes[i].is_ascii_uppercase() {
                if secret(&part[start..i]) {
                    return true;
                }
                start = i;
            }
        }
        start > 0 && secret(&part[start..])
    })
}

/// Whether a flag (`--api-key`, `-hft`) takes a secret value.
fn secret_flag(flag: &str) -> bool {
    SECRET_SHORT_FLAGS.contains(&flag) || (flag.starts_with("--") && secret_name(flag))
}

/// Values that a secret-named field holds without being secrets: a short number (a count or an id:
/// `eos_token_id=128009`), a boolean or a typed boolean/number (`add_bos_token=bool:false`), none, an empty value,
/// the scheme word of an `Authorization` header, or a value already redacted.
fn harmless_value(v: &str) -> bool {
    let v = v.trim_matches(|c| c == '"' || c == '\'');
    let lower = v.to_ascii_lowercase();
    v.is_empty()
        || (v.len() <= 6 && v.bytes().all(|b| b.is_ascii_digit()))
        || ["true", "false", "yes", "no", "on", "off", "null", "none", "nil", "bearer", "basic", "digest", "token"]
            .contains(&lower.as_str())
        || ["bool:", "int:", "float:"].iter().any(|p| lower.starts_with(p))
        || v == REDACTED
        || v == "REDACTED"
}

fn is_uuid_like(v: &str) -> bool {
    let body = v.strip_prefix("GPU-").or_else(|| v.strip_prefix("MIG-")).unwrap_or(v);
    let groups: Vec<&str> = body.split('-').collect();
    groups.len() == 5
        && groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups.iter().all(|g| g.chars().all(|c| c.is_ascii_hexdigit()))
}

/// Whether an environment value is shaped like a token or key: at least 32 characters of the alphabets tokens
/// use (letters, digits, `_-+/=`), with letters and digits both, and not a path or a device UUID.
pub fn looks_like_token(v: &str) -> bool {
    v.len() >= 32
        && !v.starts_with('/')
        && v.chars().all(|c| c.is_ascii_alphanumeric() || "_-+/=".contains(c))
        && v.chars().any(|c| c.is_ascii_digit())
        && v.chars().any(|c| c.is_ascii_alphabetic())
        && !is_uuid_like(v)
}

/// Whether a run of base64 characters is key material (a line of a PEM or OpenSSH private key, a base64 secret):
/// at least 40 characters mixing upper case, lower case and digits as random bytes do (≥ 6, ≥ 6, ≥ 4), not a
/// path (it does not start with `/`, and has at most one `/` per 16 characters, where a path has one per word).
/// Hex digests (`sha256-6a07…`) have no upper case and stay.
fn looks_like_key_material(v: &str) -> bool {
    let count = |f: fn(&u8) -> bool| v.as_bytes().iter().filter(|b| f(b)).count();
    v.len() >= 40
        && !v.starts_with('/')
        && count(u8::is_ascii_uppercase) >= 6
        && count(u8::is_ascii_lowercase) >= 6
        && count(u8::is_ascii_digit) >= 4
        && count(|b| *b == b'/') * 16 <= v.len()
}

/// Whether a match of a pattern is a secret; by default every match is.
type Test = fn(&regex_lite::Captures<'_>) -> bool;

struct Pattern {
    re: Regex,
    /// The replacement (`$1` keeps what introduces the secret).
    with: &'static str,
    /// A test of the match: it is replaced only when the test holds.
    only_if: Option<Test>,
}

fn group<'a>(c: &regex_lite::Captures<'a>, i: usize) -> &'a str {
    c.get(i).map_or("", |m| m.as_str())
}

static PATTERNS: LazyLock<Vec<Pattern>> = LazyLock::new(|| {
    let p = |re: &str, with: &'static str, only_if: Option<Test>| Pattern {
        re: Regex::new(re).expect("a valid redaction pattern"),
        with,
        only_if,
    };
    vec![
        // PEM and OpenSSH private keys, header to footer, over as many lines as they take (within one JSON string
        // too, where the lines are `\n` escapes: the block never crosses a `"`). A block cut short has its
        // lines caught as key material below.
        p(
            r"(-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----)[^\x22]*?(-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----)",
            "${1}[REDACTED]${2}",
            Some(|c| group(c, 0).len() > group(c, 1).len() + group(c, 2).len() + REDACTED.len()),
        ),
        // Token formats with a fixed prefix: Hugging Face, OpenAI and Anthropic, GitHub, GitLab, Slack, AWS access
        // key ids, Google API keys, JSON Web Tokens.
        p(r"\bhf_[A-Za-z0-9]{20,}", REDACTED, None),
        p(r"\bsk-[A-Za-z0-9_-]{20,}", REDACTED, None),
        p(r"\bgh[pousr]_[A-Za-z0-9]{30,}", REDACTED, None),
        p(r"\bgithub_pat_[A-Za-z0-9_]{30,}", REDACTED, None),
        p(r"\bglpat-[A-Za-z0-9_-]{20,}", REDACTED, None),
        p(r"\bxox[abprs]-[A-Za-z0-9-]{10,}", REDACTED, None),
        p(r"\bAKIA[0-9A-Z]{16}\b", REDACTED, None),
        p(r"\bAIza[0-9A-Za-z_-]{35}", REDACTED, None),
        p(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", REDACTED, None),
        // Key material: a long run of base64 (the lines of a private key, wherever a log or a table puts them).
        p(r"[A-Za-z0-9+/]{40,}={0,2}", REDACTED, Some(|c| looks_like_key_material(group(c, 0)))),
        // Authorization headers, also as Go prints an `http.Header` (`map[Authorization:[Bearer …]]`) and as JSON
        // (`"Authorization": "Bearer …"`): the scheme word stays.
        p(
            r#"(?i)(authorization["']?\s*[:=]\s*\[?\s*["']?\s*(?:(?:bearer|basic|token|digest)\s+)?)[^\s,;\[\]"']+"#,
            "${1}[REDACTED]",
            Some(|c| !harmless_value(group(c, 0).get(group(c, 1).len()..).unwrap_or(""))),
        ),
        p(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/-]{8,}=*", "${1}[REDACTED]", None),
        // A password in a URL: scheme://user:password@host.
        p(r"([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:)[^/\s@]+@", "${1}[REDACTED]@", None),
        // A JSON member with a secret name and a string value, in a log line or a file: `"api_key": "…"`,
        // `"password":"…"`, `"X-Api-Key": ["…"]`.
        p(
            r#"("([A-Za-z0-9_.-]+)"\s*:\s*\[?\s*")((?:[^"\\]|\\.)*)""#,
            "${1}[REDACTED]\"",
            Some(|c| secret_name(group(c, 2)) && !harmless_value(group(c, 3))),
        ),
        // A flag with a secret name and its value, after `=` or a space, or as the next string of a JSON list:
        // `--api-key=…`, `--hf-token …`, `-hft …`, `"--api-key", "…"`.
        p(
            r#"(^|[\s"'\[,(])(--?[A-Za-z][A-Za-z0-9-]*)(=|[ \t]+['"]?|"\s*,\s*")([^\s"',;\[\])-][^\s"',;\])]*)"#,
            "${1}${2}${3}[REDACTED]",
            Some(|c| secret_flag(group(c, 2)) && !harmless_value(group(c, 4))),
        ),
        // NAME=value and NAME: value with a secret name (environment lines, `--env ep:HF_TOKEN=…`, Ollama's
        // `server config` map, Go's `http.Header` map `X-Api-Key:[…]`); the `=` or `:` right after the name, so
        // that prose such as llama.cpp's `BOS token = 1` stays.
        p(
            r"(?i)\b((?:[a-z0-9]+[_.-])*[a-z0-9]*(?:token|secret|passw(?:or)?d|credentials?|key|auth(?:orization)?)[a-z0-9]*(?:[_.-][a-z0-9]+)*)([=:]\s*\[?[\x22']?)([^\s\x22',;\[\]&<>()][^\s\x22',;\]&<>()]*)",
            "${1}${2}[REDACTED]",
            Some(|c| secret_name(group(c, 1)) && !harmless_value(group(c, 3))),
        ),
        // An environment assignment whose value is shaped like a token, whatever the variable's name
        // (`--env ep:SOME_VAR=…` on a command line).
        p(r"\b([A-Z][A-Z0-9_]*=)([A-Za-z0-9_+/=-]{32,})", "${1}[REDACTED]", Some(|c| looks_like_token(group(c, 2)))),
    ]
});

/// `text` with every secret the patterns find replaced, and how many were replaced.
pub fn text(s: &str) -> (String, usize) {
    let mut out = s.to_string();
    let mut n = 0;
    for p in PATTERNS.iter() {
        if !p.re.is_match(&out) {
            continue;
        }
        let replaced = p.re.replace_all(&out, |c: &regex_lite::Captures<'_>| {
            let whole = group(c, 0);
            if !p.only_if.is_none_or(|test| test(c)) || whole.ends_with(REDACTED) {
                return whole.to_string();
            }
            let mut r = String::new();
            c.expand(p.with, &mut r);
            if r != whole {
                n += 1;
            }
            r
        });
        out = replaced.into_owned();
    }
    (out, n)
}

/// A JSON value with secrets replaced, structurally then by shape; returns how many were replaced.
pub fn json(v: &mut Value) -> usize {
    walk(v, false)
}

/// `env`: inside an environment map or list, where values shaped like tokens are redacted too.
fn walk(v: &mut Value, env: bool) -> usize {
    let mut n = 0;
    match v {
        Value::Object(map) => {
            for (k, val) in map.iter_mut() {
                let secret = (secret_name(k) && !matches!(val, Value::Null) && val.as_str() != Some(REDACTED))
                    || (env && val.as_str().is_some_and(looks_like_token));
                if secret {
                    *val = Value::String(REDACTED.into());
                    n += 1;
                } else {
                    n += walk(val, env || k == "env");
                }
            }
        }
        Value::Array(items) => {
            // A `[name, value]` pair (the plan's environment overrides).
            if let [Value::String(k), Value::String(val)] = items.as_mut_slice() {
                if val != REDACTED && (secret_name(k) || (env && looks_like_token(val))) {
                    *val = REDACTED.into();
                    return 1;
                }
            }
            // A command line: the value after a secret flag (`--api-key SECRET`).
            let mut after_flag = false;
            for item in items.iter_mut() {
                if after_flag {
                    if let Value::String(s) = item {
                        if s != REDACTED && !s.starts_with('-') {
                            *s = REDACTED.into();
                            n += 1;
                        }
                    }
                }
                after_flag = item
                    .as_str()
                    .is_some_and(|s| s.starts_with('-') && !s.contains('=') && (secret_name(s) || secret_flag(s)));
                n += walk(item, env);
            }
        }
        Value::String(s) => {
            let (clean, k) = text(s);
            if k > 0 {
                *s = clean;
                n += k;
            }
        }
        _ => {}
    }
    n
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn secret_names_and_token_shapes() {
        for name in
            ["HF_TOKEN", "OLLAMA_API_KEY", "--api-key", "--hf-token", "password", "AWS_SECRET_ACCESS_KEY", "HF_KEY"]
        {
            assert!(secret_name(name), "{name}");
        }
        for name in [
            "OLLAMA_KEEP_ALIVE",
            "GGML_VK_VISIBLE_DEVICES",
            "HOTKEYS",
            "PATH",
            "--model",
            "monkey",
            "target_tokens",
            "n_tokens",
        ] {
            assert!(!secret_name(name), "{name}");
        }
        assert!(looks_like_token("Zq3xT9vB2mL8kR4wY7nP1sD6fH0jC5aE"));
        assert!(!looks_like_token("GPU-6b8d0a61-7d7b-8b39-3c5e-1d2e3f4a5b6c"), "a device UUID");
        assert!(!looks_like_token("/usr/lib/x86_64-linux-gnu/libvulkan1234567890.so"), "a path");
        assert!(!looks_like_token("0"), "short");
        assert!(!looks_like_token("abcdefghijklmnopqrstuvwxyzabcdefgh"), "letters only: a word, not a key");
    }

    #[test]
    fn text_patterns_replace_the_secret_and_keep_what_introduces_it() {
        // Token formats as their services document them (made-up values of the documented shape).
        let cases = [
            ("export HF_TOKEN=hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345", "export HF_TOKEN=[REDACTED]"),
            ("--env vk:HF_TOKEN=whatever-it-is", "--env vk:HF_TOKEN=[REDACTED]"),
            ("key sk-proj-AbCdEfGhIjKlMnOpQrStUv in a line", "key [REDACTED] in a line"),
            ("Authorization: Bearer abcdefghijklmnop.qrs", "Authorization: Bearer [REDACTED]"),
            ("HTTPS_PROXY:http://user:hunter2@proxy:3128", "HTTPS_PROXY:http://user:[REDACTED]@proxy:3128"),
            ("llama-server --api-key=s3cr3t --port 1", "llama-server --api-key=[REDACTED] --port 1"),
            ("OLLAMA_API_KEY: abc123]", "OLLAMA_API_KEY: [REDACTED]]"),
            ("ghp_0123456789abcdefghijABCDEFGHIJ0123", "[REDACTED]"),
            ("--env cpu:GGML_NOTE=Zq3xT9vB2mL8kR4wY7nP1sD6fH0jC5aE x", "--env cpu:GGML_NOTE=[REDACTED] x"),
        ];
        for (input, want) in cases {
            let (got, n) = text(input);
            assert_eq!(got, want, "{input}");
            assert!(n >= 1, "{input}");
        }
        // Nothing secret: unchanged, nothing counted; a second pass finds nothing more.
        let plain = "load_backend: loaded Vulkan backend from /opt/llama/libggml-vulkan.so OLLAMA_KEEP_ALIVE=5m \
                     n_tokens = 2, prompt_tokens: 24 tokenizer: llama hotkey=1 --max-tokens=5 \
                     print_info: BOS token             = 1 '<s>' \
                     CUDA_VISIBLE_DEVICES=GPU-6b8d0a61-7d7b-8b39-3c5e-1d2e3f4a5b6c HOME=/root/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        assert_eq!(text(plain), (plain.to_string(), 0));
        let (once, _) = text(cases[0].0);
        assert_eq!(text(&once).1, 0, "redaction is idempotent");
    }

    #[test]
    fn json_by_key_pair_flag_and_environment_shape() {
        let mut v = json!({
            "argv": ["backscope", "sweep", "--env", "vk:HF_TOKEN=hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345", "--api-key", "plainsecret", "--model", "m.gguf"],
            "env": {"GGML_VK_VISIBLE_DEVICES": "0", "OLLAMA_NOPRUNE": "Zq3xT9vB2mL8kR4wY7nP1sD6fH0jC5aE", "CUDA_VISIBLE_DEVICES": "GPU-6b8d0a61-7d7b-8b39-3c5e-1d2e3f4a5b6c"},
            "plan": {"endpoints": [{"kind": {"env": [["HF_TOKEN", "abc"], ["GGML_VK_VISIBLE_DEVICES", "0"]]}}]},
            "password": "x",
            "prompts": [{"name": "p", "target_tokens": 512}],
        });
        let n = json(&mut v);
        assert_eq!(v["argv"][3], "vk:HF_TOKEN=[REDACTED]");
        assert_eq!(v["argv"][5], REDACTED);
        assert_eq!(v["argv"][7], "m.gguf", "the value after a harmless flag stays");
        assert_eq!(v["env"]["GGML_VK_VISIBLE_DEVICES"], "0");
        assert_eq!(v["env"]["OLLAMA_NOPRUNE"], REDACTED, "a token-shaped environment value");
        assert_eq!(v["env"]["CUDA_VISIBLE_DEVICES"], "GPU-6b8d0a61-7d7b-8b39-3c5e-1d2e3f4a5b6c");
        assert_eq!(v["plan"]["endpoints"][0]["kind"]["env"][0][1], REDACTED);
        assert_eq!(v["plan"]["endpoints"][0]["kind"]["env"][1][1], "0");
        assert_eq!(v["password"], REDACTED);
        assert_eq!(v["prompts"][0]["target_tokens"], 512, "a count of tokens is no token");
        assert_eq!(n, 5);
        assert_eq!(json(&mut v), 0, "idempotent");
    }

    /// The blocks of a corpus file: separated by `%%` lines, `#` lines dropped.
    fn blocks(corpus: &str) -> Vec<String> {
        corpus
            .split("\n%%\n")
            .map(|b| b.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n"))
            .filter(|b| !b.trim().is_empty())
            .collect()
    }

    #[test]
    fn no_planted_secret_of_the_corpus_survives_and_no_plain_line_is_touched() {
        let secrets = blocks(include_str!("../../tests/data/redaction/secrets.txt"));
        assert!(secrets.len() >= 30, "{}", secrets.len());
        for block in &secrets {
            assert!(block.contains("c4n4ry"), "each block plants a canary: {block}");
            let (clean, n) = text(block);
            assert!(!clean.contains("c4n4ry"), "a secret survives:\n{block}\n→\n{clean}");
            assert!(n >= 1);
            assert_eq!(text(&clean), (clean.clone(), 0), "idempotent: {clean}");
            // Inside JSON strings (as a bundle's records and report.json hold log lines), structurally too.
            let mut v = json!({"log": block, "lines": block.lines().collect::<Vec<_>>()});
            json(&mut v);
            assert!(!v.to_string().contains("c4n4ry"), "in JSON: {v}");
        }
        let all = secrets.join("\n");
        assert!(!text(&all).0.contains("c4n4ry"), "all of them in one text");
        for line in include_str!("../../tests/data/redaction/not-secrets.txt").lines().filter(|l| !l.starts_with('#')) {
            assert_eq!(text(line), (line.to_string(), 0), "{line}");
        }
    }
}
