//! What a run dispatched through the Vulkan layer, as one run is held against another — an impersonated run against
//! a real one on the profiled device (issue 29: "dispatch for dispatch"):
//! - per pipeline, named by ggml (its debug name) and by the shader ggml built it from (the layer's SPIR-V hash of
//!   the module ggml created, taken before impersonation swaps it), the dispatches;
//! - the order: the distinct sequences of pipelines the run's command buffers dispatched (the layer's `sequence`
//!   records, in order of first submission; ggml records a graph split into one command buffer, so a decode step
//!   submits the same sequences again), each as pipeline names with the submissions counted.
//!
//! Two records compare pipeline by pipeline and then sequence by sequence; where the order differs the comparison
//! names the first place: the sequence, the dispatch in it, the pipeline expected there and the one found. A trace of
//! a layer that recorded no order (before the `sequence` record, or with `BACKSCOPE_VK_ORDER=0`) compares by
//! pipelines only, and says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::evidence::{Claim, Confidence, Source};
use crate::trace::{Range, TraceFile};

/// Pipelines whose counts differ that a comparison lists (the rest are counted).
const MAX_LISTED: usize = 12;

/// One distinct dispatch sequence of a run, by pipeline names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NamedSequence {
    /// `(pipeline, dispatches in a row)`, in dispatch order.
    pub runs: Vec<(String, u32)>,
    /// How often a command buffer with this sequence was submitted.
    pub submissions: u64,
    /// When it was first submitted (the trace clock), which orders a run's sequences.
    pub first_ns: u64,
}

impl NamedSequence {
    pub fn dispatches(&self) -> u64 {
        self.runs.iter().fold(0u64, |sum, (_, n)| sum.saturating_add(u64::from(*n)))
    }

    /// The pipeline of dispatch `index` (from 0) and the one before it, when it has that many.
    fn at(&self, index: u64) -> (Option<&str>, Option<&str>) {
        let mut start = 0u64;
        let mut before = None;
        for (name, n) in &self.runs {
            let end = start + u64::from(*n);
            if index < end {
                let previous = if index > start { Some(name.as_str()) } else { before };
                return (Some(name), previous);
            }
            before = Some(name.as_str());
            start = end;
        }
        (None, before)
    }
}

/// The order of a run's dispatches, as far as its traces recorded it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "recorded", rename_all = "snake_case")]
pub enum Order {
    /// Every trace that holds dispatches recorded their order.
    Yes {
        sequences: Vec<NamedSequence>,
        /// Submitted command buffers whose sequence the layer did not keep (its bounds, or a buffer that outgrew its
        /// record): their order is not known.
        not_kept: u64,
    },
    /// These trace files hold dispatches but no order (an older layer, or order recording off).
    No { files: Vec<String> },
}

/// What one run dispatched (its trace directory's Vulkan traces).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DispatchRecord {
    pub dir: PathBuf,
    /// Dispatches per (pipeline name, SPIR-V hash of its shader; empty when not recorded).
    pub pipelines: BTreeMap<(String, String), u64>,
    pub order: Order,
}

impl DispatchRecord {
    /// The Vulkan traces of `dir` (`trace-*.jsonl`, as `backscope trace --dir` writes them). A directory without a
    /// trace file, or with one that cannot be read, is refused: there would be nothing (or only part) to hold a run
    /// against. Traces without a dispatch are a record of none (ggml offloads nothing of a short prompt with no
    /// layer on the GPU).
    pub fn read(dir: &Path) -> Result<DispatchRecord> {
        let read =
            crate::trace::read_dir_folded(dir).with_context(|| format!("reading traces in {}", dir.display()))?;
        if let Some(problem) = read.problems.first() {
            bail!("{problem}");
        }
        if read.traces.is_empty() {
            bail!("{}: no trace file (trace-*.jsonl, as `backscope trace --dir` writes them)", dir.display());
        }
        Ok(DispatchRecord::of(dir, &read.traces))
    }

    /// The record of traces already read.
    pub fn of(dir: &Path, traces: &[TraceFile]) -> DispatchRecord {
        let mut pipelines: BTreeMap<(String, String), u64> = BTreeMap::new();
        let mut merged: BTreeMap<Vec<(String, u32)>, (u64, u64)> = BTreeMap::new();
        let mut not_kept = 0u64;
        let mut without = Vec::new();
        for t in traces {
            let vulkan = |id: &u32| t.kernels.get(id).filter(|k| k.api == "vulkan");
            let mut dispatched = false;
            for s in t.kernel_stats(Range::All).into_iter().filter(|s| s.launches > 0) {
                let Some(k) = s.ids.first().and_then(vulkan) else { continue };
                let key = (k.name.clone(), k.spirv_hash.clone().unwrap_or_default());
                let total = pipelines.entry(key).or_insert(0);
                *total = total.saturating_add(s.launches);
                dispatched = true;
            }
            if !dispatched {
                continue;
            }
            if !t.order_recorded() {
                without.push(t.path.as_deref().map_or_else(|| format!("pid {}", t.pid()), |p| p.display().to_string()));
                continue;
            }
            for (id, n) in t.sequence_submissions(Range::All) {
                let Some(s) = t.sequences.get(&id) else {
                    not_kept = not_kept.saturating_add(n);
                    continue;
                };
                let runs = named_runs(t, &s.runs);
                let entry = merged.entry(runs).or_insert((0, u64::MAX));
                entry.0 = entry.0.saturating_add(n);
                entry.1 = entry.1.min(s.first_ns);
            }
        }
        let order = if without.is_empty() {
            let mut sequences: Vec<NamedSequence> = merged
                .into_iter()
                .map(|(runs, (submissions, first_ns))| NamedSequence { runs, submissions, first_ns })
                .collect();
            sequences.sort_by(|a, b| a.first_ns.cmp(&b.first_ns).then_with(|| a.runs.cmp(&b.runs)));
            Order::Yes { sequences, not_kept }
        } else {
            Order::No { files: without }
        };
        DispatchRecord { dir: dir.to_path_buf(), pipelines, order }
    }
}

/// A sequence's runs by pipeline name: two pipelines of one name in a row (the same name on two devices, or in two
/// libraries) are one run, as they would be in a trace that gave them one id.
fn named_runs(t: &TraceFile, runs: &[(u32, u32)]) -> Vec<(String, u32)> {
    let mut out: Vec<(String, u32)> = Vec::with_capacity(runs.len());
    for &(kernel, count) in runs.iter().filter(|(_, n)| *n > 0) {
        let name = t.kernels.get(&kernel).map_or_else(|| format!("kernel {kernel}"), |k| k.name.clone());
        match out.last_mut() {
            Some((last, n)) if *last == name => *n = n.saturating_add(count),
            _ => out.push((name, count)),
        }
    }
    out
}

/// A pipeline dispatched a different number of times by the two runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PipelineDifference {
    pub name: String,
    pub shader: String,
    pub expected: u64,
    pub got: u64,
}

/// Per pipeline and shader, the dispatches of two runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PipelineComparison {
    pub equal: bool,
    /// Pipelines (name and shader) either run dispatched.
    pub pipelines: usize,
    pub expected_dispatches: u64,
    pub got_dispatches: u64,
    /// The first [`MAX_LISTED`] differences, by name.
    pub differences: Vec<PipelineDifference>,
    pub more_differences: usize,
}

/// Where two runs' orders first differ.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FirstDifference {
    /// The sequence, from 1, in order of first submission; 0: the submissions whose order was not kept.
    pub sequence: usize,
    /// The dispatch in it, from 1; none when the sequences are equal and their submissions differ.
    pub position: Option<u64>,
    /// The pipeline at that place in each run; none where the sequence (or the run) ended before it.
    pub expected: Option<String>,
    pub got: Option<String>,
    /// The pipeline dispatched just before that place (the same in both runs), when there is one.
    pub after: Option<String>,
    pub expected_submissions: u64,
    pub got_submissions: u64,
    /// The lengths of the two sequences, in dispatches.
    pub expected_dispatches: u64,
    pub got_dispatches: u64,
}

/// How two runs' orders compare.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum OrderComparison {
    Equal {
        sequences: usize,
        submissions: u64,
        /// Dispatches of one submission of each sequence, added up.
        dispatches: u64,
    },
    Differ {
        first: FirstDifference,
        expected_sequences: usize,
        got_sequences: usize,
    },
    /// One run (or both) recorded no order; `files` are those without it.
    NotRecorded {
        expected: bool,
        got: bool,
        files: Vec<String>,
    },
}

/// Two runs held against each other.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RecordComparison {
    pub expected: PathBuf,
    pub got: PathBuf,
    pub pipelines: PipelineComparison,
    pub order: OrderComparison,
}

/// `got` held against `expected`: per pipeline and shader the dispatches, then the order.
pub fn compare(expected: &DispatchRecord, got: &DispatchRecord) -> RecordComparison {
    RecordComparison {
        expected: expected.dir.clone(),
        got: got.dir.clone(),
        pipelines: compare_pipelines(&expected.pipelines, &got.pipelines),
        order: compare_order(&expected.order, &got.order),
    }
}

fn compare_pipelines(
    expected: &BTreeMap<(String, String), u64>,
    got: &BTreeMap<(String, String), u64>,
) -> PipelineComparison {
    let keys: std::collections::BTreeSet<&(String, String)> = expected.keys().chain(got.keys()).collect();
    let mut differences: Vec<PipelineDifference> = keys
        .iter()
        .filter_map(|k| {
            let (e, g) = (expected.get(*k).copied().unwrap_or(0), got.get(*k).copied().unwrap_or(0));
            (e != g).then(|| PipelineDifference { name: k.0.clone(), shader: k.1.clone(), expected: e, got: g })
        })
        .collect();
    let more_differences = differences.len().saturating_sub(MAX_LISTED);
    let equal = differences.is_empty();
    differences.truncate(MAX_LISTED);
    let total = |m: &BTreeMap<(String, String), u64>| m.values().fold(0u64, |s, n| s.saturating_add(*n));
    PipelineComparison {
        equal,
        pipelines: keys.len(),
        expected_dispatches: total(expected),
        got_dispatches: total(got),
        differences,
        more_differences,
    }
}

/// The orders compared sequence by sequence, in order of first submission.
pub fn compare_order(expected: &Order, got: &Order) -> OrderComparison {
    let (e, e_lost, g, g_lost) = match (expected, got) {
        (Order::Yes { sequences: e, not_kept: el }, Order::Yes { sequences: g, not_kept: gl }) => (e, *el, g, *gl),
        _ => {
            let files = |o: &Order| match o {
                Order::No { files } => files.clone(),
                Order::Yes { .. } => Vec::new(),
            };
            let mut all = files(expected);
            all.extend(files(got));
            return OrderComparison::NotRecorded {
                expected: matches!(expected, Order::No { .. }),
                got: matches!(got, Order::No { .. }),
                files: all,
            };
        }
    };
    let differ = |first| OrderComparison::Differ { first, expected_sequences: e.len(), got_sequences: g.len() };
    for i in 0..e.len().max(g.len()) {
        let (a, b) = (e.get(i), g.get(i));
        if a.map(|s| &s.runs) != b.map(|s| &s.runs) {
            return differ(first_difference(i + 1, a, b));
        }
        let (a, b) = (a.map_or(0, |s| s.submissions), b.map_or(0, |s| s.submissions));
        if a != b {
            let length = e[i].dispatches();
            return differ(FirstDifference {
                sequence: i + 1,
                position: None,
                expected: None,
                got: None,
                after: None,
                expected_submissions: a,
                got_submissions: b,
                expected_dispatches: length,
                got_dispatches: length,
            });
        }
    }
    if e_lost != g_lost {
        return differ(FirstDifference {
            sequence: 0,
            position: None,
            expected: None,
            got: None,
            after: None,
            expected_submissions: e_lost,
            got_submissions: g_lost,
            expected_dispatches: 0,
            got_dispatches: 0,
        });
    }
    OrderComparison::Equal {
        sequences: e.len(),
        submissions: e.iter().fold(0u64, |s, q| s.saturating_add(q.submissions)),
        dispatches: e.iter().fold(0u64, |s, q| s.saturating_add(q.dispatches())),
    }
}

/// The first dispatch at which sequence `number` of two runs differs (either may be missing).
fn first_difference(number: usize, a: Option<&NamedSequence>, b: Option<&NamedSequence>) -> FirstDifference {
    let (a_len, b_len) = (a.map_or(0, NamedSequence::dispatches), b.map_or(0, NamedSequence::dispatches));
    // Walk both run lists together: the first index where the names differ or one sequence ends.
    let (mut i, mut ai, mut bi, mut a_left, mut b_left) = (0u64, 0usize, 0usize, 0u64, 0u64);
    let (ar, br) = (a.map_or(&[][..], |s| &s.runs[..]), b.map_or(&[][..], |s| &s.runs[..]));
    loop {
        while a_left == 0 && ai < ar.len() {
            a_left = u64::from(ar[ai].1);
            ai += 1;
        }
        while b_left == 0 && bi < br.len() {
            b_left = u64::from(br[bi].1);
            bi += 1;
        }
        let here_a = (a_left > 0).then(|| &ar[ai - 1].0);
        let here_b = (b_left > 0).then(|| &br[bi - 1].0);
        if here_a != here_b || here_a.is_none() {
            break;
        }
        // Equal here: skip as far as both runs go on alike.
        let step = a_left.min(b_left);
        i += step;
        a_left -= step;
        b_left -= step;
    }
    let (expected, after_a) = a.map_or((None, None), |s| s.at(i));
    let (got, _) = b.map_or((None, None), |s| s.at(i));
    FirstDifference {
        sequence: number,
        position: Some(i + 1),
        expected: expected.map(str::to_string),
        got: got.map(str::to_string),
        after: after_a.filter(|_| i > 0).map(str::to_string),
        expected_submissions: a.map_or(0, |s| s.submissions),
        got_submissions: b.map_or(0, |s| s.submissions),
        expected_dispatches: a_len,
        got_dispatches: b_len,
    }
}

impl FirstDifference {
    /// In words, with `expected` and `got` naming the two runs.
    pub fn describe(&self, expected: &str, got: &str) -> String {
        if self.sequence == 0 {
            return format!(
                "{} submitted command buffer(s) of {expected} and {} of {got} had an order the layer did not keep",
                self.expected_submissions, self.got_submissions
            );
        }
        let Some(position) = self.position else {
            return format!(
                "sequence {} ({} dispatches) is the same in both, but {expected} submitted it {} time(s) and {got} {}",
                self.sequence, self.expected_dispatches, self.expected_submissions, self.got_submissions
            );
        };
        let side = |name: &Option<String>, len: u64, run: &str| match name {
            Some(n) => format!("{run} dispatched {n}"),
            None if len == 0 => format!("{run} has no such sequence"),
            None => format!("{run}'s sequence ends after {len} dispatches"),
        };
        format!(
            "sequence {} (in order of first submission), dispatch {position}{}: {}, {}",
            self.sequence,
            self.after.as_deref().map(|a| format!(" (after {a})")).unwrap_or_default(),
            side(&self.expected, self.expected_dispatches, expected),
            side(&self.got, self.got_dispatches, got),
        )
    }
}

/// `text` with its first letter a capital, to begin a statement.
fn sentence(text: String) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => text,
    }
}

impl RecordComparison {
    /// The claims: `{id}.dispatches` (per pipeline and shader) and `{id}.order`. `expected`, `got`: the two runs in
    /// words ("the real run", "the impersonated run").
    pub fn claims(&self, id: &str, expected: &str, got: &str) -> Vec<Claim> {
        let sources = || {
            [&self.expected, &self.got]
                .map(|d| Source::file(d.display().to_string(), None, None, "Vulkan layer traces"))
        };
        let p = &self.pipelines;
        let statement = if p.equal {
            format!(
                "{got} dispatched what {expected} dispatched: {} pipelines (by name and shader), {} dispatches",
                p.pipelines, p.expected_dispatches
            )
        } else {
            let listed: Vec<String> = p
                .differences
                .iter()
                .map(|d| format!("{} [{}]: {} in {expected}, {} in {got}", d.name, d.shader, d.expected, d.got))
                .collect();
            format!(
                "{got} did not dispatch what {expected} dispatched: {} of {} pipelines differ ({} dispatches against \
                 {}): {}{}",
                p.differences.len() + p.more_differences,
                p.pipelines,
                p.got_dispatches,
                p.expected_dispatches,
                listed.join("; "),
                if p.more_differences > 0 { format!("; {} more", p.more_differences) } else { String::new() }
            )
        };
        let mut out = vec![Claim::new(format!("{id}.dispatches"), Confidence::Confirmed, sentence(statement))];
        let (confidence, statement) = match &self.order {
            OrderComparison::Equal { sequences, submissions, dispatches } => (
                Confidence::Confirmed,
                format!(
                    "{got} dispatched in the order {expected} did: the same {sequences} distinct sequence(s) of \
                     pipelines ({dispatches} dispatches between them), each dispatch for dispatch, submitted \
                     {submissions} time(s) in all"
                ),
            ),
            OrderComparison::Differ { first, expected_sequences, got_sequences } => (
                Confidence::Confirmed,
                format!(
                    "{got} did not dispatch in the order {expected} did ({got_sequences} against {expected_sequences} \
                     distinct sequences of pipelines); they first differ at {}",
                    first.describe(expected, got)
                ),
            ),
            OrderComparison::NotRecorded { expected: e, got: g, files } => (
                Confidence::Limited,
                format!(
                    "Order not recorded in {}: its Vulkan layer wrote no dispatch sequences (a layer before the \
                     `sequence` record, or BACKSCOPE_VK_ORDER=0; {}), so the runs are compared by pipelines and counts \
                     only, not dispatch for dispatch",
                    match (e, g) {
                        (true, true) => format!("{expected} nor in {got}"),
                        (true, false) => expected.to_string(),
                        _ => got.to_string(),
                    },
                    files.iter().take(4).cloned().collect::<Vec<_>>().join(", ")
                ),
            ),
        };
        out.push(Claim::new(format!("{id}.order"), confidence, sentence(statement)));
        for c in &mut out {
            for s in sources() {
                c.sources.push(s);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(runs: &[(&str, u32)], submissions: u64, first_ns: u64) -> NamedSequence {
        NamedSequence { runs: runs.iter().map(|(n, c)| (n.to_string(), *c)).collect(), submissions, first_ns }
    }

    fn order(sequences: Vec<NamedSequence>) -> Order {
        Order::Yes { sequences, not_kept: 0 }
    }

    #[test]
    fn equal_orders_are_equal_and_the_first_differing_dispatch_is_named() {
        let decode = seq(&[("rms_norm", 1), ("mul_mat_vec", 3), ("rope", 2)], 16, 10);
        let prompt = seq(&[("rms_norm", 1), ("matmul_aligned_2", 3)], 1, 5);
        let a = order(vec![prompt.clone(), decode.clone()]);
        assert_eq!(compare_order(&a, &a), OrderComparison::Equal { sequences: 2, submissions: 17, dispatches: 4 + 6 });
        // The tile differs in the prompt's third dispatch (the second of a run of three).
        let other = seq(&[("rms_norm", 1), ("matmul_aligned_2", 1), ("matmul_aligned_1", 2)], 1, 5);
        let OrderComparison::Differ { first, .. } = compare_order(&a, &order(vec![other, decode.clone()])) else {
            panic!()
        };
        assert_eq!((first.sequence, first.position), (1, Some(3)));
        assert_eq!(
            (first.expected.as_deref(), first.got.as_deref()),
            (Some("matmul_aligned_2"), Some("matmul_aligned_1"))
        );
        assert_eq!(first.after.as_deref(), Some("matmul_aligned_2"));
        let text = first.describe("the real run", "the impersonated run");
        assert!(
            text.ends_with(
                "dispatch 3 (after matmul_aligned_2): the real run dispatched matmul_aligned_2, the impersonated run \
                 dispatched matmul_aligned_1"
            ),
            "{text}"
        );
        // A sequence cut short, a missing sequence, and equal sequences submitted a different number of times.
        let short = seq(&[("rms_norm", 1), ("mul_mat_vec", 2)], 16, 10);
        let OrderComparison::Differ { first, .. } = compare_order(&a, &order(vec![prompt.clone(), short])) else {
            panic!()
        };
        assert_eq!((first.sequence, first.position, first.got.clone()), (2, Some(4), None));
        assert!(first.describe("e", "g").ends_with("e dispatched mul_mat_vec, g's sequence ends after 3 dispatches"));
        let OrderComparison::Differ { first, got_sequences, .. } = compare_order(&a, &order(vec![prompt.clone()]))
        else {
            panic!()
        };
        assert_eq!((first.sequence, first.position, got_sequences), (2, Some(1), 1));
        assert!(first.describe("e", "g").ends_with("g has no such sequence"), "{}", first.describe("e", "g"));
        let fewer = seq(&[("rms_norm", 1), ("mul_mat_vec", 3), ("rope", 2)], 15, 10);
        let OrderComparison::Differ { first, .. } = compare_order(&a, &order(vec![prompt.clone(), fewer])) else {
            panic!()
        };
        assert_eq!(
            (first.sequence, first.position, first.expected_submissions, first.got_submissions),
            (2, None, 16, 15)
        );
        // Submissions whose order was not kept must agree too.
        let lost = Order::Yes { sequences: vec![prompt, decode], not_kept: 3 };
        assert!(matches!(
            compare_order(&a, &lost),
            OrderComparison::Differ { first: FirstDifference { sequence: 0, .. }, .. }
        ));
    }

    #[test]
    fn a_run_without_order_compares_by_pipelines_only_and_says_so() {
        let real = Order::No { files: vec!["h200.traces".into()] };
        let imp = order(vec![seq(&[("a", 1)], 1, 1)]);
        let c = compare_order(&real, &imp);
        assert_eq!(c, OrderComparison::NotRecorded { expected: true, got: false, files: vec!["h200.traces".into()] });
        let r = RecordComparison {
            expected: "real".into(),
            got: "imp".into(),
            pipelines: compare_pipelines(&BTreeMap::new(), &BTreeMap::new()),
            order: c,
        };
        let claims = r.claims("x", "the real run", "the impersonated run");
        assert_eq!(claims[1].confidence, Confidence::Limited);
        assert!(claims[1].statement.starts_with("Order not recorded in the real run"), "{}", claims[1].statement);
    }

    #[test]
    fn pipelines_differ_by_name_shader_or_count() {
        let key = |n: &str, h: &str| (n.to_string(), h.to_string());
        let a = BTreeMap::from([(key("p", "1"), 4), (key("q", "2"), 1)]);
        let same = compare_pipelines(&a, &a);
        assert!(same.equal && same.pipelines == 2 && same.expected_dispatches == 5);
        let b = BTreeMap::from([(key("p", "9"), 4), (key("q", "2"), 2)]);
        let c = compare_pipelines(&a, &b);
        assert!(!c.equal);
        assert_eq!(c.differences.len(), 3, "{c:?}");
        assert_eq!(c.differences[0], PipelineDifference { name: "p".into(), shader: "1".into(), expected: 4, got: 0 });
    }
}
