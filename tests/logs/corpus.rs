//! `backscope logs` scored on real logs people pasted in public Ollama, llama.cpp, KoboldCpp and LM Studio issue
//! threads (tests/data/logs-corpus, README there). Each log has a human reading written before the tool ran on it
//! (the commit order shows it); the expected values come from that reading, never from the tool's output. The
//! score table is printed (run scripts/logs-corpus-score.sh) and the thresholds are asserted: crash kind right on
//! ≥95% of logs, phase right on ≥90% of crash logs with every other one Unresolved (never a wrong Inferred phase,
//! never a crash missed), no Confirmed claim that contradicts the reading, every cited line quoted as it stands in
//! the file, and no signature shared by two failures the readings tell apart.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::util::*;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/logs-corpus")
}

/// Crash kinds, most specific first: a log's kind is the first of these that any of its crashes shows.
const KINDS: &[&str] = &[
    "out_of_memory",
    "discovery_failure",
    "illegal_instruction",
    "device_lost",
    "blas_error",
    "gpu_error",
    "assert",
    "abort",
    "segfault",
    "runner_exit",
];
const PHASES: &[&str] = &["discovery", "load", "first_compute", "decode", "unknown", "none"];
const WHERE: &[&str] = &["gpu", "cpu", "partial", "unknown"];

/// Kept out of the corpus, for checks independent of the readings the tool was developed on.
const EXCLUDED_OLLAMA: &[u64] = &[
    1674, 2198, 2823, 2870, 4334, 5629, 7640, 7765, 9500, 10265, 11211, 11380, 12303, 12564, 12634, 12708, 13303,
    13552, 14487, 14550, 15890, 16946, 16970, 17069,
];
const EXCLUDED_LLAMA_CPP: &[u64] = &[8504, 9170, 17389, 20431, 21608, 22013];
const EXCLUDED_KOBOLDCPP: &[u64] = &[1711];
const EXCLUDED_LMSTUDIO: &[u64] = &[297];

struct Reading {
    name: String,
    log: PathBuf,
    kind: String,
    phase: String,
    backends: Option<BTreeSet<String>>,
    devices: Option<Vec<String>>,
    offload: Option<String>,
    /// The reader's name for the failure (crash logs only): different names need different signatures.
    failure: Option<String>,
}

fn str_list(v: Option<&toml::Value>) -> Option<Vec<String>> {
    v.map(|a| {
        a.as_array().expect("a list").iter().map(|s| s.as_str().expect("a list of strings").to_string()).collect()
    })
}

/// Every `NNN-name.toml` with its `.log`, in name order.
fn readings() -> Vec<Reading> {
    let mut names: Vec<String> = std::fs::read_dir(corpus_dir())
        .expect("tests/data/logs-corpus")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".toml").map(str::to_string))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let text = std::fs::read_to_string(corpus_dir().join(format!("{name}.toml"))).unwrap();
            let t: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{name}.toml: {e}"));
            let r = t.get("reading").and_then(|r| r.as_table()).unwrap_or_else(|| panic!("{name}: no [reading]"));
            let field =
                |k: &str| r.get(k).and_then(|v| v.as_str()).unwrap_or_else(|| panic!("{name}: {k}")).to_string();
            let offload = field("offload");
            Reading {
                log: corpus_dir().join(format!("{name}.log")),
                kind: field("kind"),
                phase: field("phase"),
                backends: str_list(r.get("backends")).map(|b| b.into_iter().collect()),
                devices: str_list(r.get("devices")),
                offload: (!offload.is_empty()).then_some(offload),
                failure: r.get("failure").and_then(|v| v.as_str()).map(str::to_string),
                name,
            }
        })
        .collect()
}

/// The kind of one crash of the report, from its signal and the kinds and texts of its cause/consequence lines.
fn crash_kind(c: &Value) -> &'static str {
    let mut kinds = BTreeSet::new();
    let mut text = String::new();
    for list in ["causes", "consequences"] {
        for l in c[list].as_array().into_iter().flatten() {
            kinds.insert(l["kind"].as_str().unwrap_or("").to_string());
            text.push_str(&l["text"].as_str().unwrap_or("").to_lowercase());
            text.push('\n');
        }
    }
    let signal = c["signal"]["name"].as_str().unwrap_or("").to_uppercase();
    text.push_str(&signal.to_lowercase());
    text.push('\n');
    text.push_str(&c["signal"]["description"].as_str().unwrap_or("").to_lowercase());
    let aborts_in_stack = c["frames"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|f| f["function"].as_str().is_some_and(|n| n.contains("abort")));
    let has = |k: &str| kinds.contains(k);
    if has("out_of_memory") || text.contains("out of memory") {
        "out_of_memory"
    } else if has("discovery_failure") {
        "discovery_failure"
    } else if signal.contains("SIGILL") || text.contains("illegal instruction") || text.contains("0xc000001d") {
        "illegal_instruction"
    } else if has("device_lost") || has("gpu_driver") {
        // The kernel's GPU driver timed out or faulted the runner's GPU job: its context is lost.
        "device_lost"
    } else if has("blas_error") {
        "blas_error"
    } else if has("gpu_error") {
        "gpu_error"
    } else if has("ggml_assert") || has("cpp_terminate") || text.contains("assertion") {
        "assert"
    } else if has("abort") || signal.contains("SIGABRT") || text.contains("abort") || aborts_in_stack {
        "abort"
    } else if signal.contains("SIGSEGV") || text.contains("segmentation") || text.contains("0xc0000005") {
        "segfault"
    } else {
        "runner_exit"
    }
}

fn norm_backend(name: &str) -> Option<String> {
    let n = name.to_lowercase();
    let n = n.trim();
    match n {
        "" | "cpu" | "blas" => None,
        "hip" | "rocm" => Some("rocm".into()),
        _ if n.starts_with("cuda") => Some("cuda".into()),
        _ if n.starts_with("rocm") => Some("rocm".into()),
        _ if n.starts_with("vulkan") => Some("vulkan".into()),
        _ => Some(n.to_string()),
    }
}

#[derive(Default)]
struct Score {
    name: String,
    kind: (String, String, bool),
    /// (reading, tool, verdict): verdict is "right", "unresolved", "wrong" (another phase Inferred), "missed" (the
    /// tool found no crash) or "-" (no crash in the reading).
    phase: (String, String, &'static str),
    backend: Option<(String, String, bool)>,
    devices: Option<(String, String, bool)>,
    offload: Option<(String, String, bool)>,
    false_confirmed: Vec<String>,
    bad_citations: Vec<String>,
    citations_checked: usize,
    /// (reading's failure name, signature id of the crash that gave the log its kind).
    signature: Option<(String, String)>,
}

fn logs_json(log: &Path) -> Value {
    let out = run(backscope().args(["logs", "--json"]).arg(log));
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "{}: logs exited {:?}: {}",
        log.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{}: JSON: {e}", log.display()))
}

/// Claims whose `sources[]` quote a line that does not hold the quoted text (a trailing `…` clip is allowed), and
/// how many cited lines were checked.
fn bad_citations(v: &Value, log: &Path) -> (Vec<String>, usize) {
    let bytes = std::fs::read(log).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    let mut bad = Vec::new();
    let mut checked = 0;
    for claim in v["claims"].as_array().into_iter().flatten() {
        for s in claim["sources"].as_array().into_iter().flatten().filter(|s| s["kind"] == "log_line") {
            let (Some(n), Some(quote)) = (s["line"].as_u64(), s["text"].as_str()) else { continue };
            checked += 1;
            let quote = quote.strip_suffix('…').unwrap_or(quote);
            let on_line = n >= 1 && lines.get(n as usize - 1).is_some_and(|l| l.contains(quote));
            if !on_line {
                bad.push(format!("{} cites line {n} with {quote:?}", claim["id"].as_str().unwrap_or("?")));
            }
        }
    }
    (bad, checked)
}

/// Confirmed claims that contradict the reading: a crash where the reading has none, "no crash" where it has one,
/// a GPU backend or an offload the reading does not hold.
fn false_confirmed(v: &Value, r: &Reading) -> Vec<String> {
    let mut bad = Vec::new();
    for claim in v["claims"].as_array().into_iter().flatten().filter(|c| c["confidence"] == "Confirmed") {
        let id = claim["id"].as_str().unwrap_or("");
        let statement = claim["statement"].as_str().unwrap_or("");
        let crash_claim = id.starts_with("logs.crash.") && id.matches('.').count() == 2;
        let wrong = if crash_claim {
            r.kind == "none"
        } else if id == "logs.ending" {
            r.kind != "none"
        } else if let Some(name) = id.strip_prefix("logs.backend.") {
            match (&r.backends, norm_backend(name)) {
                (Some(expected), Some(b)) => !expected.contains(&b),
                _ => false,
            }
        } else if id == "logs.offload" {
            r.offload.as_ref().is_some_and(|o| !statement.contains(o.as_str()))
        } else {
            false
        };
        if wrong {
            bad.push(format!("{id}: {statement}"));
        }
    }
    bad
}

fn score(r: &Reading) -> Score {
    let v = logs_json(&r.log);
    let report = &v["report"];
    let crashes = report["crashes"].as_array().cloned().unwrap_or_default();
    let kinds: Vec<&str> = crashes.iter().map(crash_kind).collect();
    let tool_kind = KINDS.iter().find(|k| kinds.contains(k)).copied().unwrap_or("none");
    let mut s = Score { name: r.name.clone(), ..Score::default() };
    s.kind = (r.kind.clone(), tool_kind.to_string(), r.kind == tool_kind);
    // The phase of the crash that gave the log its kind.
    let primary = kinds.iter().position(|k| *k == tool_kind).map(|i| &crashes[i]);
    let tool_phase = primary.and_then(|c| c["phase"].as_str()).unwrap_or("none").to_string();
    let verdict = match (r.phase.as_str(), tool_phase.as_str()) {
        ("none", _) => "-",
        (_, "none") => "missed",
        (want, got) if want == got => "right",
        (_, "unknown") => "unresolved",
        _ => "wrong",
    };
    s.phase = (r.phase.clone(), tool_phase, verdict);
    if let (Some(failure), Some(c)) = (&r.failure, primary) {
        let id = c["signature"]["id"].as_str().unwrap_or("").to_string();
        s.signature = Some((failure.clone(), id));
    }
    let mut tool_backends: BTreeSet<String> = report["facts"]["backends"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| norm_backend(b["name"].as_str().unwrap_or("")))
        .collect();
    for claim in v["claims"].as_array().into_iter().flatten() {
        if let Some(name) = claim["id"].as_str().and_then(|id| id.strip_prefix("logs.backend.")) {
            tool_backends.extend(norm_backend(name));
        }
    }
    if let Some(want) = &r.backends {
        let join = |s: &BTreeSet<String>| s.iter().cloned().collect::<Vec<_>>().join("+");
        s.backend = Some((join(want), join(&tool_backends), *want == tool_backends));
    }
    if let Some(want) = &r.devices {
        s.devices = Some(score_devices(report, want));
    }
    if let Some(want) = &r.offload {
        let got = report["facts"]["offload"]
            .as_object()
            .map(|o| format!("{}/{}", o["offloaded"], o["total"]))
            .unwrap_or_else(|| "-".into());
        s.offload = Some((want.clone(), got.clone(), *want == got));
    }
    s.false_confirmed = false_confirmed(&v, r);
    (s.bad_citations, s.citations_checked) = bad_citations(&v, &r.log);
    s
}

/// Each device the reading names (a substring of the model name) must match its own device of the report.
fn score_devices(report: &Value, want: &[String]) -> (String, String, bool) {
    let mut names: Vec<String> = Vec::new();
    for d in report["facts"]["devices"].as_array().into_iter().flatten() {
        names.push(d["name"].as_str().unwrap_or("").to_string());
    }
    for d in report["facts"]["inference_compute"].as_array().into_iter().flatten() {
        let desc = d.get("description").or_else(|| d.get("name")).and_then(|x| x.as_str()).unwrap_or("");
        names.push(desc.to_string());
    }
    let mut left = names.clone();
    let all = want.iter().all(|w| {
        let i = left.iter().position(|n| n.to_lowercase().contains(&w.to_lowercase()));
        i.map(|i| left.remove(i)).is_some()
    });
    (want.join(", "), names.join(", "), all)
}

fn mark(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "WRONG"
    }
}

fn cell(x: &Option<(String, String, bool)>) -> String {
    x.as_ref().map_or("-".into(), |(w, g, ok)| format!("{} ({w} / {g})", mark(*ok)))
}

/// The per-log table and the totals, as Markdown.
fn table(scores: &[Score]) -> String {
    let mut t = String::new();
    t.push_str("| log | kind (reading / tool) | phase (reading / tool) | backend | devices | offload | false Confirmed | bad citations |\n");
    t.push_str("|---|---|---|---|---|---|---|---|\n");
    for s in scores {
        let (kw, kg, kok) = &s.kind;
        let (pw, pg, pv) = &s.phase;
        let _ = writeln!(
            t,
            "| {} | {} ({kw} / {kg}) | {pv} ({pw} / {pg}) | {} | {} | {} | {} | {} |",
            s.name,
            mark(*kok),
            cell(&s.backend),
            cell(&s.devices),
            cell(&s.offload),
            s.false_confirmed.join("; ").replace('|', "\\|"),
            s.bad_citations.join("; ").replace('|', "\\|"),
        );
    }
    t
}

struct Totals {
    logs: usize,
    kind_right: usize,
    crash_logs: usize,
    phase_right: usize,
    phase_unresolved: usize,
    phase_wrong: usize,
    phase_missed: usize,
    false_confirmed: usize,
    bad_citations: usize,
    citations_checked: usize,
    /// Signatures that two different failures (by the readings' names) share.
    merged_signatures: Vec<String>,
}

/// Signature ids shared by logs whose readings name different failures, with the logs.
fn merged_signatures(scores: &[Score]) -> Vec<String> {
    let mut by_id: std::collections::BTreeMap<&str, Vec<(&str, &str)>> = Default::default();
    for s in scores {
        if let Some((failure, id)) = &s.signature {
            by_id.entry(id.as_str()).or_default().push((failure.as_str(), s.name.as_str()));
        }
    }
    by_id
        .into_iter()
        .filter(|(_, logs)| logs.iter().any(|(f, _)| *f != logs[0].0))
        .map(|(id, logs)| {
            let logs: Vec<String> = logs.iter().map(|(f, n)| format!("{n} ({f})")).collect();
            format!("{id}: {}", logs.join(", "))
        })
        .collect()
}

fn totals(scores: &[Score]) -> Totals {
    let count = |f: &dyn Fn(&Score) -> bool| scores.iter().filter(|s| f(s)).count();
    Totals {
        logs: scores.len(),
        kind_right: count(&|s| s.kind.2),
        crash_logs: count(&|s| s.phase.2 != "-"),
        phase_right: count(&|s| s.phase.2 == "right"),
        phase_unresolved: count(&|s| s.phase.2 == "unresolved"),
        phase_wrong: count(&|s| s.phase.2 == "wrong"),
        phase_missed: count(&|s| s.phase.2 == "missed"),
        false_confirmed: scores.iter().map(|s| s.false_confirmed.len()).sum(),
        bad_citations: scores.iter().map(|s| s.bad_citations.len()).sum(),
        citations_checked: scores.iter().map(|s| s.citations_checked).sum(),
        merged_signatures: merged_signatures(scores),
    }
}

fn pct(a: usize, b: usize) -> f64 {
    if b == 0 {
        100.0
    } else {
        100.0 * a as f64 / b as f64
    }
}

fn summary(t: &Totals, scores: &[Score]) -> String {
    let scored = |f: &dyn Fn(&Score) -> Option<bool>| {
        let xs: Vec<bool> = scores.iter().filter_map(f).collect();
        format!("{}/{}", xs.iter().filter(|x| **x).count(), xs.len())
    };
    format!(
        "logs: {}\nkind right: {}/{} ({:.1}%)\nphase right: {}/{} crash logs ({:.1}%), unresolved {} ({:.1}%), \
         wrong Inferred {}, crash missed {}\n\
         backend right: {}\ndevices right: {}\noffload right: {}\nfalse Confirmed claims: {}\nbad citations: {} of {} cited lines\n\
         signatures shared by different failures: {}{}\n",
        t.logs,
        t.kind_right,
        t.logs,
        pct(t.kind_right, t.logs),
        t.phase_right,
        t.crash_logs,
        pct(t.phase_right, t.crash_logs),
        t.phase_unresolved,
        pct(t.phase_unresolved, t.crash_logs),
        t.phase_wrong,
        t.phase_missed,
        scored(&|s| s.backend.as_ref().map(|b| b.2)),
        scored(&|s| s.devices.as_ref().map(|b| b.2)),
        scored(&|s| s.offload.as_ref().map(|b| b.2)),
        t.false_confirmed,
        t.bad_citations,
        t.citations_checked,
        t.merged_signatures.len(),
        t.merged_signatures.iter().map(|m| format!("\n  {m}")).collect::<String>(),
    )
}

#[test]
fn logs_corpus_is_well_formed() {
    let readings = readings();
    assert!(readings.len() >= 90, "the corpus is kept at 90 logs or more; it has {}", readings.len());
    for r in &readings {
        let text = std::fs::read_to_string(&r.log).unwrap_or_else(|e| panic!("{}: {e}", r.log.display()));
        assert!(text.lines().count() >= 3 && text.ends_with('\n'), "{}: a log of whole lines", r.name);
        assert!(r.kind == "none" || KINDS.contains(&r.kind.as_str()), "{}: kind {}", r.name, r.kind);
        assert!(PHASES.contains(&r.phase.as_str()), "{}: phase {}", r.name, r.phase);
        assert_eq!(r.kind == "none", r.phase == "none", "{}: a phase exactly when there is a crash", r.name);
        assert_eq!(r.kind != "none", r.failure.is_some(), "{}: a failure name exactly when there is a crash", r.name);
        if let Some(o) = &r.offload {
            let (a, b) = o.split_once('/').unwrap_or_else(|| panic!("{}: offload {o}", r.name));
            assert!(a.parse::<u32>().unwrap() <= b.parse::<u32>().unwrap(), "{}: offload {o}", r.name);
        }
        let meta: toml::Table =
            toml::from_str(&std::fs::read_to_string(r.log.with_extension("toml")).unwrap()).unwrap();
        let source = meta["source"].as_str().unwrap();
        let issue = meta["issue"].as_integer().unwrap() as u64;
        let excluded = match meta["repo"].as_str().unwrap() {
            "ollama/ollama" => EXCLUDED_OLLAMA,
            "ggml-org/llama.cpp" => EXCLUDED_LLAMA_CPP,
            "LostRuins/koboldcpp" => EXCLUDED_KOBOLDCPP,
            "lmstudio-ai/lmstudio-bug-tracker" => EXCLUDED_LMSTUDIO,
            other => panic!("{}: repo {other} is not one of the four runtimes' trackers", r.name),
        };
        assert!(!excluded.contains(&issue), "{}: issue {issue} is kept out for independent checks", r.name);
        let repo = meta["repo"].as_str().unwrap();
        assert!(
            source.starts_with(&format!("https://github.com/{repo}/")) && source.contains(&issue.to_string()),
            "{}",
            r.name
        );
        let where_ran = meta["reading"]["where"].as_str().unwrap();
        assert!(WHERE.contains(&where_ran), "{}: where {where_ran}", r.name);
    }
}

#[test]
fn logs_corpus_meets_its_scoring_thresholds() {
    let scores: Vec<Score> = readings().iter().map(score).collect();
    let t = totals(&scores);
    let report = format!("{}\n{}", table(&scores), summary(&t, &scores));
    println!("{report}");
    if let Some(path) = std::env::var_os("LOGS_CORPUS_TABLE") {
        std::fs::write(path, &report).expect("LOGS_CORPUS_TABLE is writable");
    }
    assert!(pct(t.kind_right, t.logs) >= 95.0, "crash kind right on {}/{} logs (≥95%)", t.kind_right, t.logs);
    assert!(
        pct(t.phase_right, t.crash_logs) >= 90.0,
        "phase right on {}/{} crash logs (≥90%)",
        t.phase_right,
        t.crash_logs
    );
    assert_eq!(t.phase_wrong, 0, "a phase Inferred that the reading contradicts");
    assert_eq!(t.phase_missed, 0, "crashes not found, so their phase is neither right nor Unresolved");
    assert_eq!(t.false_confirmed, 0, "Confirmed claims that contradict a reading");
    assert!(t.citations_checked > 0, "no claim cited a log line");
    assert_eq!(t.bad_citations, 0, "cited lines whose quoted text is not on that line");
    assert!(t.merged_signatures.is_empty(), "one signature for different failures: {:?}", t.merged_signatures);
}
