//! Secrets out of an evidence bundle. A bundle is meant to be attached to a public bug report, and what it copies
//! (the run's command line, the environment overrides of its endpoints, server logs) can carry credentials: an
//! `HF_TOKEN` passed to a server, an API key on a command line, a proxy URL with a password.
//!
//! Two passes. In JSON, structure tells: the value of a key (or of a `[name, value]` pair, or the argument after a
//! flag) whose name says secret, and any environment value shaped like a token, is replaced. In every text,
//! shapes tell: the known token formats of the services a model runner talks to (Hugging Face, OpenAI, GitHub,
//! GitLab, Slack, AWS `AKIA`/`ASIA` key ids, Google, Stripe, npm, JWTs, Slack and Discord webhook paths), `NAME=value`
//! with a secret name, `--api-key=value`, `Authorization:` and `Cookie:` headers, signatures (`&sig=`,
//! `X-Hub-Signature-256:`), credentials on command lines whose flags do not say so (curl's `-u user:pw`, the `-p`
//! of sshpass and the MySQL clients), passwords in URLs (up to the last `@`) and passphrases.
//!
//! Which names are secret ([`secret_name`]). A name is cut into words (at `_`, `-`, `.` and camelCase), and the
//! rules differ with how common a fragment is inside ordinary words:
//! - a whole word that is a secret word is secret (`TOKEN`, `KEY`, `PASS`, `PWD`, `AUTH`, `COOKIE`, …):
//!   `REDIS_PASS`, `MYSQL_PWD`, `--db-pass`, `HF_KEY`; the word must be whole, so `n_tokens`, `HOTKEYS`,
//!   `keyboard` and `passthrough` stay;
//! - long fragments that no common word holds count anywhere inside a word (`PASSWORD`, `PASSWD`, `PASSPHRASE`,
//!   `SECRET`, `CREDENTIAL`, `COOKIE`): `PGPASSWORD`, `DBPASSPHRASE`, `clientsecret`;
//! - short fragments count only at the end of a word, where a credential's name puts them (`PASS`, `PWD`,
//!   `TOKEN`, `AUTH`): `SSHPASS`, `PGPASS`, `DBPWD`, `HFTOKEN`, `OAUTH` — while `tokens`, `tokenizer`, `author`
//!   and `authority` stay — and an allow-list keeps the ordinary words that end so (`bypass`, `compass`,
//!   `OLDPWD`). `KEY` ends `monkey`, `hotkey`, `turkey`: as a suffix it counts only after a credential stem
//!   (`APIKEY`, `ACCESSKEY`, `PRIVATEKEY`, …);
//! - `SIG` and `SIGNATURE` are the report's own words (a crash signature is one of its facts, `"signature"` in
//!   report.json), and `signal`, `SIGSEGV`, `design` hold them: they count only in an HTTP extension header
//!   (`X-Hub-Signature-256`, `X-Amz-Signature`) and as the bare name `sig` (an Azure SAS URL's `&sig=`);
//! - a few names with a secret word are not secrets: `cell_key`, `cache_key`, `public_key`, `PWD` (the shell's
//!   working directory).
//!
//! A value a secret name holds is kept when it cannot be a secret: a short number, a boolean, `none`, the scheme
//! word of an `Authorization` header.
//!
//! Speed: redaction reads whole server logs. The regular expressions are the slow part, so they run line by
//! line, and on a line only when a cheap gate opens: one automaton finds the literals each pattern needs (a token
//! prefix, `cookie`, `://`, or one of the fragments every secret name holds) and a byte scan the long runs that
//! key material and token-shaped values need. Most lines of a log open no gate and are copied as they are.

use std::sync::LazyLock;

use aho_corasick::AhoCorasick;
use regex_lite::Regex;
use serde_json::Value;

/// What a redacted value becomes.
pub const REDACTED: &str = "[REDACTED]";

/// Words that mark a value secret when they stand as a whole word of a name (`HF_TOKEN`, `REDIS_PASS`,
/// `MYSQL_PWD`, `--db-pass`, `X-Api-Key`, `apiKey`).
const SECRET_WORDS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "SECRETS",
    "PASSWORD",
    "PASSWD",
    "PASS",
    "PWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "CREDENTIALS",
    "CREDS",
    "APIKEY",
    "KEY",
    "AUTH",
    "AUTHORIZATION",
    "COOKIE",
    "COOKIES",
];

/// Fragments long and rare enough in ordinary words to mark a name secret wherever they stand inside one of its
/// words: `PGPASSWORD`, `DBPASSPHRASE`, `clientsecret`, `sessioncookie`.
const SECRET_INFIXES: &[&str] = &["PASSWORD", "PASSWD", "PASSPHRASE", "SECRET", "CREDENTIAL", "COOKIE"];

/// Fragments that mark a name secret at the end of one of its words, where a credential's name puts them
/// (`SSHPASS`, `PGPASS`, `DBPWD`, `HFTOKEN`, `OAUTH`, `GOOGLEAPIKEY`) while ordinary words put them elsewhere
/// (`passthrough`, `tokens`, `tokenizer`, `author`). `KEY` is a suffix only after these stems: `monkey`, `hotkey`
/// or `turkey` end in it too.
const SECRET_SUFFIXES: &[&str] = &[
    "PASS",
    "PWD",
    "TOKEN",
    "AUTH",
    "APIKEY",
    "ACCESSKEY",
    "SECRETKEY",
    "PRIVATEKEY",
    "SIGNINGKEY",
    "MASTERKEY",
    "SESSIONKEY",
    "AUTHKEY",
    "ENCRYPTIONKEY",
    "LICENSEKEY",
];

/// Ordinary words that end in a secret suffix: `bypass`, `compass`, `OLDPWD` (the shell's previous directory).
const NOT_SECRET_WORDS: &[&str] =
    &["BYPASS", "COMPASS", "ENCOMPASS", "OVERPASS", "UNDERPASS", "TRESPASS", "SURPASS", "MULTIPASS", "OLDPWD"];

/// Words that mark a signature (`sig`, `Signature`). A crash signature is one of the report's own facts
/// (`"signature": "…"` in report.json, a timeline's `signature`), so these mark a secret only in the names where
/// a signature is a credential: an HTTP extension header (`X-Hub-Signature-256`, `X-Amz-Signature`,
/// `X-Slack-Signature`) and the bare name `sig` (an Azure SAS URL's `&sig=`).
const SIGNATURE_WORDS: &[&str] = &["SIG", "SIGNATURE"];

/// Names with a secret word whose values are not secrets: a sweep record's cell address, cache keys, public keys,
/// the shell's working directory.
const NOT_SECRET_NAMES: &[&str] = &["cell_key", "cache_key", "sort_key", "public_key", "pubkey", "PWD", "OLDPWD"];

/// Short flags whose value is a secret although their name does not say so: llama.cpp's `-hft` (`--hf-token`).
const SECRET_SHORT_FLAGS: &[&str] = &["-hft"];

/// The words of a name: split at `_`, `-`, `.` and where a lower-case letter meets an upper-case one
/// (`apiKey`, `hfToken`, `dbPass`).
fn name_words(name: &str) -> impl Iterator<Item = &str> {
    name.split(['_', '-', '.']).flat_map(|part| {
        let bytes = part.as_bytes();
        let mut cuts = vec![0];
        cuts.extend((1..bytes.len()).filter(|&i| bytes[i - 1].is_ascii_lowercase() && bytes[i].is_ascii_uppercase()));
        cuts.push(bytes.len());
        (0..cuts.len() - 1).map(move |i| &part[cuts[i]..cuts[i + 1]])
    })
}

/// Whether one word of a name marks it secret: it is a secret word, holds a secret infix, or ends in a secret
/// suffix without being an ordinary word that does.
fn secret_word(word: &str) -> bool {
    if word.len() > 64 {
        return false;
    }
    let upper = word.to_ascii_uppercase();
    SECRET_WORDS.contains(&upper.as_str())
        || SECRET_INFIXES.iter().any(|f| upper.contains(f))
        || (SECRET_SUFFIXES.iter().any(|f| upper.ends_with(f)) && !NOT_SECRET_WORDS.contains(&upper.as_str()))
}

/// Whether a variable, key or flag name marks its value secret (`HF_TOKEN`, `OLLAMA_API_KEY`, `--api-key`,
/// `password`, `X-Api-Key`, `apiKey`, `PGPASSWORD`, `SSHPASS`, `MYSQL_PWD`, `--db-pass`, `Set-Cookie`,
/// `X-Hub-Signature-256`, `sig`): one of its words ([`name_words`]) is secret ([`secret_word`]), or it names a
/// signature where a signature is a credential ([`SIGNATURE_WORDS`]). Counts of tokens (`n_tokens`,
/// `target_tokens`, `maxTokens`), `KEEP_ALIVE`, `HOTKEYS`, `keyboard`, `bypass`, `passthrough`, `signal`,
/// `SIGSEGV`, `design`, `author` and a crash `signature` are not secrets.
pub fn secret_name(name: &str) -> bool {
    let name = name.trim_start_matches('-');
    if NOT_SECRET_NAMES.iter().any(|n| n.eq_ignore_ascii_case(name)) {
        return false;
    }
    if name_words(name).any(secret_word) {
        return true;
    }
    let signature = |w: &str| SIGNATURE_WORDS.iter().any(|s| w.eq_ignore_ascii_case(s));
    name.eq_ignore_ascii_case("sig")
        || (name.get(..2).is_some_and(|x| x.eq_ignore_ascii_case("x-")) && name_words(name).any(signature))
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

/// What a line must hold for a pattern to be tried on it: cheap tests that let the regular expressions (the slow
/// part) run only on the few lines of a server log that can hold a secret.
#[derive(Clone, Copy)]
enum Gate {
    /// One of these literals, in any case.
    Literal(&'static [&'static str]),
    /// A run of at least this many characters of the alphabets tokens use (`A-Za-z0-9_+/=-`).
    Run(usize),
}

/// The literals one of which every name that [`secret_name`] takes holds (and `-hft`, [`SECRET_SHORT_FLAGS`]).
const SECRET_NAME_LITERALS: &[&str] =
    &["token", "secret", "pass", "pwd", "cred", "key", "auth", "cookie", "sig", "-hft"];

struct Pattern {
    gate: Gate,
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
    let p = |gate: Gate, re: &str, with: &'static str, only_if: Option<Test>| Pattern {
        gate,
        re: Regex::new(re).expect("a valid redaction pattern"),
        with,
        only_if,
    };
    use Gate::{Literal as L, Run};
    let names = L(SECRET_NAME_LITERALS);
    vec![
        // Token formats with a fixed prefix: Hugging Face (user and organisation), OpenAI and Anthropic, GitHub,
        // GitLab, Slack, AWS access key ids (long-term `AKIA`, temporary `ASIA`), Google API keys and OAuth access
        // tokens, Stripe secret and restricted keys, npm, JSON Web Tokens.
        p(L(&["hf_"]), r"\bhf_[A-Za-z0-9]{20,}", REDACTED, None),
        p(L(&["api_org_"]), r"\bapi_org_[A-Za-z0-9]{20,}", REDACTED, None),
        p(L(&["sk-"]), r"\bsk-[A-Za-z0-9_-]{20,}", REDACTED, None),
        p(L(&["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]), r"\bgh[pousr]_[A-Za-z0-9]{30,}", REDACTED, None),
        p(L(&["github_pat_"]), r"\bgithub_pat_[A-Za-z0-9_]{30,}", REDACTED, None),
        p(L(&["glpat-"]), r"\bglpat-[A-Za-z0-9_-]{20,}", REDACTED, None),
        p(L(&["xox"]), r"\bxox[a-z]-[A-Za-z0-9-]{10,}", REDACTED, None),
        p(L(&["akia", "asia", "abia", "acca"]), r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b", REDACTED, None),
        p(L(&["aiza"]), r"\bAIza[0-9A-Za-z_-]{35}", REDACTED, None),
        p(L(&["ya29."]), r"\bya29\.[A-Za-z0-9_-]{20,}", REDACTED, None),
        p(L(&["_live_", "_test_"]), r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}", REDACTED, None),
        p(L(&["whsec_"]), r"\bwhsec_[A-Za-z0-9]{20,}", REDACTED, None),
        p(L(&["npm_"]), r"\bnpm_[A-Za-z0-9]{30,}", REDACTED, None),
        p(L(&["eyj"]), r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", REDACTED, None),
        // Webhook URLs, whose path is the credential: Slack's `/services/T…/B…/…` (and workflow triggers),
        // Discord's `/api/webhooks/ID/TOKEN`.
        p(
            L(&["hooks.slack.com"]),
            r"(hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9_/-]+",
            "${1}[REDACTED]",
            None,
        ),
        p(L(&["discord"]), r"(discord(?:app)?\.com/api/webhooks/[0-9]+/)[A-Za-z0-9_-]+", "${1}[REDACTED]", None),
        // Key material: a long run of base64 (the lines of a private key, wherever a log or a table puts them).
        p(Run(40), r"[A-Za-z0-9+/]{40,}={0,2}", REDACTED, Some(|c| looks_like_key_material(group(c, 0)))),
        // Authorization headers, also as Go prints an `http.Header` (`map[Authorization:[Bearer …]]`) and as JSON
        // (`"Authorization": "Bearer …"`): the scheme word stays.
        p(
            L(&["authorization"]),
            r#"(?i)(authorization["']?\s*[:=]\s*\[?\s*["']?\s*(?:(?:bearer|basic|token|digest)\s+)?)[^\s,;\[\]"']+"#,
            "${1}[REDACTED]",
            Some(|c| !harmless_value(group(c, 0).get(group(c, 1).len()..).unwrap_or(""))),
        ),
        p(L(&["bearer"]), r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/-]{8,}=*", "${1}[REDACTED]", None),
        // A password in a URL: scheme://user:password@host, the user possibly empty (`redis://:pw@cache`). The
        // password runs to the LAST `@` before the path: an unencoded `@` in it (`u:p@ss@host`) is still its own.
        p(L(&["://"]), r"([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^/\s?#]+@", "${1}[REDACTED]@", None),
        // Cookie headers: the whole value, every `name=value` of it (the `;` that ends a NAME=value below does
        // not end a cookie header), in a log line, a Go `http.Header` map (`Cookie:[…]`) or a JSON member.
        p(
            L(&["cookie"]),
            r#"(?i)(\b(?:set-)?cookie["']?[ \t]*[:=][ \t]*\[?[ \t]*["']?)([^\r\n"'\[\]][^\r\n"'\]]*)"#,
            "${1}[REDACTED]",
            Some(|c| !harmless_value(group(c, 2).trim())),
        ),
        // A passphrase is words with spaces between them: the value runs to the end of the line.
        p(
            L(&["passphrase"]),
            r#"(?i)(\b[a-z0-9_.-]*passphrase["']?[ \t]*[:=][ \t]*["']?)([^\r\n"'\[][^\r\n"']*)"#,
            "${1}[REDACTED]",
            Some(|c| !harmless_value(group(c, 2).trim())),
        ),
        // Credentials on command lines whose flags do not say so: curl's `-u user:pw` and `--user user:pw` (the
        // user stays), and the `-p` of sshpass (`-p pw`) and of the MySQL clients (`-ppw`, `-p pw`): llama.cpp's
        // `-p` is a prompt, so only after those programs' names.
        p(
            L(&["-u"]),
            r#"(^|[\s"'\[,(])(-u[ \t]*|--(?:proxy-)?user(?:=|[ \t]+))(['"]?[^\s:'"/]+:)([^\s'"/\[][^\s'"]*)"#,
            "${1}${2}${3}[REDACTED]",
            Some(|c| !harmless_value(group(c, 4))),
        ),
        p(
            L(&["sshpass", "mysql", "mariadb"]),
            r#"(\b(?:sshpass|mysql|mariadb|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mysqlshow)\b[^\r\n]*?[ \t]-p[ \t]*['"]?)([^\s'"]+)"#,
            "${1}[REDACTED]",
            Some(|c| !harmless_value(group(c, 2))),
        ),
        // A JSON member with a secret name and a string value, in a log line or a file: `"api_key": "…"`,
        // `"password":"…"`, `"X-Api-Key": ["…"]`.
        p(
            names,
            r#"("([A-Za-z0-9_.-]+)"\s*:\s*\[?\s*")((?:[^"\\]|\\.)*)""#,
            "${1}[REDACTED]\"",
            Some(|c| secret_name(group(c, 2)) && !harmless_value(group(c, 3))),
        ),
        // The same member in JSON escaped inside a string (a JSON document logged as a logfmt value:
        // `env="{\"PGPASSWORD\":\"…\"}"`).
        p(
            names,
            r#"(\\"([A-Za-z0-9_.-]+)\\"\s*:\s*\[?\s*\\")((?:[^"\\]|\\[^"])*)\\""#,
            "${1}[REDACTED]\\\"",
            Some(|c| secret_name(group(c, 2)) && !harmless_value(group(c, 3))),
        ),
        // A `[name, value]` pair with a secret name, as a plan's environment overrides are written
        // (`["PGPASSWORD", "…"]`) on one line (pretty-printed JSON files are redacted by their structure first).
        p(
            names,
            r#"(\[\s*"([A-Za-z0-9_.-]+)"\s*,\s*")((?:[^"\\]|\\.)*)""#,
            "${1}[REDACTED]\"",
            Some(|c| secret_name(group(c, 2)) && !harmless_value(group(c, 3))),
        ),
        // A flag with a secret name and its value, after `=` or a space, or as the next string of a JSON list:
        // `--api-key=…`, `--hf-token …`, `-hft …`, `"--api-key", "…"`.
        p(
            names,
            r#"(^|[\s"'\[,(])(--?[A-Za-z][A-Za-z0-9-]*)(=|[ \t]+['"]?|"\s*,\s*")([^\s"',;\[\])-][^\s"',;\])]*)"#,
            "${1}${2}${3}[REDACTED]",
            Some(|c| secret_flag(group(c, 2)) && !harmless_value(group(c, 4))),
        ),
        // NAME=value and NAME: value with a secret name (environment lines, `--env ep:HF_TOKEN=…`, Ollama's
        // `server config` map, Go's `http.Header` map `X-Api-Key:[…]`); the `=` or `:` right after the name, so
        // that prose such as llama.cpp's `BOS token = 1` stays.
        p(
            names,
            r"(?i)\b((?:[a-z0-9]+[_.-])*[a-z0-9]*(?:token|secret|pass|pwd|credential|creds|key|auth|cookie|sig)[a-z0-9]*(?:[_.-][a-z0-9]+)*)([=:][ \t]*\[?[\x22']?)([^\s\x22',;\[\]&<>()][^\s\x22',;\]&<>()]*)",
            "${1}${2}[REDACTED]",
            Some(|c| secret_name(group(c, 1)) && !harmless_value(group(c, 3))),
        ),
        // An environment assignment whose value is shaped like a token, whatever the variable's name
        // (`--env ep:SOME_VAR=…` on a command line).
        p(
            Run(32),
            r"\b([A-Z][A-Z0-9_]*=)([A-Za-z0-9_+/=-]{32,})",
            "${1}[REDACTED]",
            Some(|c| looks_like_token(group(c, 2))),
        ),
    ]
});

/// PEM and OpenSSH private keys, header to footer, over as many lines as they take (within one JSON string too,
/// where the lines are `\n` escapes: the block never crosses a `"`). The one pattern run over the whole text (when
/// it holds `PRIVATE KEY`); a block cut short has its lines caught as key material, line by line.
static PRIVATE_KEY_BLOCK: LazyLock<Pattern> = LazyLock::new(|| Pattern {
    gate: Gate::Literal(&["PRIVATE KEY"]),
    re: Regex::new(
        r"(-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----)[^\x22]*?(-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----)",
    )
    .expect("a valid redaction pattern"),
    with: "${1}[REDACTED]${2}",
    only_if: Some(|c| group(c, 0).len() > group(c, 1).len() + group(c, 2).len() + REDACTED.len()),
});

/// The literals of the line patterns' gates in one automaton (any case), each with the patterns it opens.
static GATES: LazyLock<(AhoCorasick, Vec<Vec<usize>>)> = LazyLock::new(|| {
    let mut literals: Vec<&str> = Vec::new();
    let mut opens: Vec<Vec<usize>> = Vec::new();
    for (i, p) in PATTERNS.iter().enumerate() {
        if let Gate::Literal(ls) = p.gate {
            for l in ls {
                match literals.iter().position(|x| x.eq_ignore_ascii_case(l)) {
                    Some(at) => opens[at].push(i),
                    None => {
                        literals.push(l);
                        opens.push(vec![i]);
                    }
                }
            }
        }
    }
    let ac = AhoCorasick::builder()
        .ascii_case_insensitive(true)
        .build(&literals)
        .expect("the gate literals build an automaton");
    (ac, opens)
});

/// Programs whose `-p` takes a password: sshpass, and the MySQL and MariaDB clients (llama.cpp's `-p` is a prompt).
const PASSWORD_P_PROGRAMS: &[&str] =
    &["sshpass", "mysql", "mariadb", "mysqldump", "mysqladmin", "mysqlimport", "mysqlcheck", "mysqlshow"];

/// The file name of a command line's program (`/usr/bin/mysql` → `mysql`).
fn program_name(argv0: &str) -> &str {
    argv0.rsplit('/').next().unwrap_or(argv0)
}

/// The redacted form of `value`, an argument after `flag` on a command line, when the flag takes a secret:
/// a flag whose name says so (`--api-key`, `-hft`), curl's `-u`/`--user` (`user:pw` keeps its user), and `-p`
/// where `password_p` says the program's `-p` is a password.
fn flag_value(flag: &str, value: &str, password_p: bool) -> Option<String> {
    if value == REDACTED || value.starts_with('-') {
        return None;
    }
    if ["-u", "--user", "--proxy-user"].contains(&flag) {
        let (user, password) = value.split_once(':')?;
        return (!harmless_value(password) && password != REDACTED).then(|| format!("{user}:{REDACTED}"));
    }
    (secret_name(flag) || secret_flag(flag) || (password_p && flag == "-p")).then(|| REDACTED.to_string())
}

/// `text` with every secret the patterns find replaced, and how many were replaced. Private key blocks are
/// found in the whole text; every other pattern is tried line by line, and on a line only when its gate holds.
pub fn text(s: &str) -> (String, usize) {
    let mut n = 0;
    let blocks;
    // A PEM header is upper case: its literal is looked for as it is.
    let has_block = matches!(PRIVATE_KEY_BLOCK.gate, Gate::Literal(marks) if marks.iter().any(|m| s.contains(m)));
    let s = match has_block.then(|| replace(&PRIVATE_KEY_BLOCK, s, &mut n)).flatten() {
        Some(r) => {
            blocks = r;
            blocks.as_str()
        }
        None => s,
    };
    let (ac, opens) = &*GATES;
    let mut out = String::with_capacity(s.len());
    let mut open = vec![false; PATTERNS.len()];
    for line in s.split_inclusive('\n') {
        open.iter_mut().for_each(|o| *o = false);
        let mut any = false;
        for m in ac.find_overlapping_iter(line) {
            for &i in &opens[m.pattern().as_usize()] {
                open[i] = true;
                any = true;
            }
        }
        let run = longest_token_run(line);
        for (i, p) in PATTERNS.iter().enumerate() {
            if matches!(p.gate, Gate::Run(at_least) if run >= at_least) {
                open[i] = true;
                any = true;
            }
        }
        if !any {
            out.push_str(line);
            continue;
        }
        let mut cur = std::borrow::Cow::Borrowed(line);
        for (p, _) in PATTERNS.iter().zip(&open).filter(|(_, o)| **o) {
            if let Some(r) = replace(p, &cur, &mut n) {
                cur = std::borrow::Cow::Owned(r);
            }
        }
        out.push_str(&cur);
    }
    (out, n)
}

/// The longest run of the characters tokens are made of (`A-Za-z0-9_+/=-`) in `line`.
fn longest_token_run(line: &str) -> usize {
    let (mut best, mut cur) = (0, 0);
    for b in line.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'+' | b'/' | b'=' | b'-') {
            cur += 1;
            best = best.max(cur);
        } else {
            cur = 0;
        }
    }
    best
}

/// `s` with the matches of `p` that are secrets replaced, counting them in `n`; `None` when there is none.
fn replace(p: &Pattern, s: &str, n: &mut usize) -> Option<String> {
    let mut found = 0;
    let replaced = p.re.replace_all(s, |c: &regex_lite::Captures<'_>| {
        let whole = group(c, 0);
        if !p.only_if.is_none_or(|test| test(c)) || whole.ends_with(REDACTED) {
            return whole.to_string();
        }
        let mut r = String::new();
        c.expand(p.with, &mut r);
        if r != whole {
            found += 1;
        }
        r
    });
    *n += found;
    (found > 0).then(|| replaced.into_owned())
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
            // A command line: the value after a secret flag (`--api-key SECRET`), the password of curl's
            // `-u user:pw`, the `-p` of sshpass and the MySQL clients.
            let program = items.first().and_then(Value::as_str).map(program_name).unwrap_or_default();
            let password_p = PASSWORD_P_PROGRAMS.contains(&program);
            let mut after: Option<String> = None;
            for item in items.iter_mut() {
                if let (Some(flag), Value::String(s)) = (&after, &mut *item) {
                    if let Some(clean) = flag_value(flag, s, password_p) {
                        *s = clean;
                        n += 1;
                    }
                }
                if let (true, Value::String(s)) = (password_p, &mut *item) {
                    // `-ppw`: the MySQL clients take the password glued to the flag.
                    if s.len() > 2 && s.starts_with("-p") && !s.starts_with("-p=") && &s[2..] != REDACTED {
                        *s = format!("-p{REDACTED}");
                        n += 1;
                    }
                }
                after = item.as_str().filter(|s| s.starts_with('-') && !s.contains('=')).map(str::to_string);
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
            "keyboard",
            "bypass",
            "GGML_BYPASS",
            "compass",
            "passthrough",
            "signal",
            "SIGSEGV",
            "design",
            "author",
            "authority",
            "signature",
            "crash_signature",
            "tokenizer",
            "PWD",
            "OLDPWD",
            "PGPASSFILE",
            "cell_key",
        ] {
            assert!(!secret_name(name), "{name}");
        }
        // Issue 26: secret words glued inside names, short fragments at a word's end, signatures as credentials.
        for name in [
            "PGPASSWORD",
            "SSHPASS",
            "MYSQL_PWD",
            "REDIS_PASS",
            "DB_PASSPHRASE",
            "--db-pass",
            "dbPass",
            "PGPASS",
            "HFTOKEN",
            "clientsecret",
            "Set-Cookie",
            "Cookie",
            "X-Hub-Signature",
            "X-Hub-Signature-256",
            "X-Amz-Signature",
            "sig",
            "OAUTH",
            "GOOGLEAPIKEY",
            "aws_credentials",
        ] {
            assert!(secret_name(name), "{name}");
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
            // What introduces the secret stays, the secret goes, and only the secret.
            ("--env pg:PGPASSWORD=pw1 --env pg:X=1", "--env pg:PGPASSWORD=[REDACTED] --env pg:X=1"),
            ("curl -u admin:pw2 http://h/", "curl -u admin:[REDACTED] http://h/"),
            ("sshpass -p pw3 ssh root@h -p 22", "sshpass -p [REDACTED] ssh root@h -p 22"),
            ("mysql -u root -ppw4 app", "mysql -u root -p[REDACTED] app"),
            ("https://u:p@ss@host/x@y", "https://u:[REDACTED]@host/x@y"),
            ("Cookie: a=1x; b=2y", "Cookie: [REDACTED]"),
            ("GET /b?sv=1&sig=abc%2B&se=2", "GET /b?sv=1&sig=[REDACTED]&se=2"),
            ("X-Hub-Signature-256: sha256=00ff", "X-Hub-Signature-256: [REDACTED]"),
            ("passphrase: two words", "passphrase: [REDACTED]"),
            ("https://hooks.slack.com/services/T01/B02/xyz ok", "https://hooks.slack.com/services/[REDACTED] ok"),
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

    #[test]
    fn json_command_lines_with_credentials_their_flags_do_not_name() {
        let mut v = json!({
            "curl": ["curl", "-u", "admin:pw1", "--user", "bob:pw2", "-u", "1000:1000", "http://h/"],
            "scp": ["/usr/bin/sshpass", "-p", "pw3", "ssh", "root@h"],
            "mysql": ["mysql", "-u", "root", "-ppw4", "app"],
            "llama": ["llama-cli", "-p", "a prompt", "--db-pass", "pw5"],
            "env": {"PGPASSWORD": "pw6", "MYSQL_PWD": "pw7", "PWD": "/home/u"},
        });
        let n = json(&mut v);
        assert_eq!(v["curl"][2], "admin:[REDACTED]");
        assert_eq!(v["curl"][4], "bob:[REDACTED]");
        assert_eq!(v["curl"][6], "1000:1000", "a uid:gid is no password");
        assert_eq!(v["scp"][2], REDACTED);
        assert_eq!(v["scp"][4], "root@h");
        assert_eq!(v["mysql"][3], "-p[REDACTED]");
        assert_eq!(v["mysql"][2], "root");
        assert_eq!(v["llama"][2], "a prompt", "llama.cpp's -p is a prompt");
        assert_eq!(v["llama"][4], REDACTED);
        assert_eq!(v["env"]["PGPASSWORD"], REDACTED);
        assert_eq!(v["env"]["MYSQL_PWD"], REDACTED);
        assert_eq!(v["env"]["PWD"], "/home/u");
        assert_eq!(n, 7);
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

    /// Whether a text holds a planted canary, in any case (an AWS key id plants it in upper case).
    fn canary(text: &str) -> bool {
        text.to_ascii_lowercase().contains("c4n4ry")
    }

    #[test]
    fn no_planted_secret_of_the_corpus_survives_and_no_plain_line_is_touched() {
        let secrets = blocks(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/redaction/secrets.txt")));
        assert!(secrets.len() >= 30, "{}", secrets.len());
        for block in &secrets {
            assert!(canary(block), "each block plants a canary: {block}");
            let (clean, n) = text(block);
            assert!(!canary(&clean), "a secret survives:\n{block}\n→\n{clean}");
            assert!(n >= 1);
            assert_eq!(text(&clean), (clean.clone(), 0), "idempotent: {clean}");
            // Inside JSON strings (as a bundle's records and report.json hold log lines), structurally too.
            let mut v = json!({"log": block, "lines": block.lines().collect::<Vec<_>>()});
            json(&mut v);
            assert!(!canary(&v.to_string()), "in JSON: {v}");
        }
        let all = secrets.join("\n");
        assert!(!canary(&text(&all).0), "all of them in one text");
        for line in include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/redaction/not-secrets.txt"))
            .lines()
            .filter(|l| !l.starts_with('#'))
        {
            assert_eq!(text(line), (line.to_string(), 0), "{line}");
        }
    }
}
