//! The search state and the verdict of a bisect, from its stored rows alone: the search replays these rules to pick
//! its next build, and the report shows the same verdict without running anything.
//!
//! The state starts at the two ends (good, bad) and replays the probes in the order they were taken: a good probe
//! inside the range becomes the last good build, a bad one the first bad build. A skipped or undecided build is
//! excluded, as `git bisect skip` does. When no untested build remains between the last good and the first bad
//! build, the search is over: with nothing between them the first bad build is found; with only excluded builds
//! between them, the first bad build is one of those or the first bad itself.

use std::collections::BTreeSet;

use crate::evidence::{Claim, Confidence, Source};
use crate::run::format::bisect::{BisectRow, Outcome, Role, Step};

/// Where the search stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    /// The last build known good, and the first known bad after it (the ends until probes narrow them).
    pub last_good: u32,
    pub first_bad: u32,
    /// Builds between them that no step has tested yet, ascending.
    pub untested: Vec<u32>,
    /// Builds between them that were skipped or undecided, ascending.
    pub excluded: Vec<u32>,
}

impl State {
    /// The state after `steps` over `candidates` (ascending, both ends included). Only probes move the range: the
    /// ends' own outcomes are checked by [`ends`].
    ///
    /// The range starts at the builds the ends' steps tested, once they are recorded (the row's `good` and `bad`
    /// until then): a verdict rests on what was tested, not on fields beside it.
    pub fn of(candidates: &[u32], good: u32, bad: u32, steps: &[Step]) -> State {
        let end = |role: Role, given: u32| steps.iter().find(|s| s.role == role).map_or(given, |s| s.build);
        let (mut lo, mut hi) = (end(Role::GoodEnd, good), end(Role::BadEnd, bad));
        let mut excluded: BTreeSet<u32> = BTreeSet::new();
        for s in steps.iter().filter(|s| s.role == Role::Probe) {
            match s.outcome {
                Outcome::Good if s.build > lo && s.build < hi => lo = s.build,
                Outcome::Bad if s.build > lo && s.build < hi => hi = s.build,
                Outcome::Skip | Outcome::Undecided => {
                    excluded.insert(s.build);
                }
                _ => {}
            }
        }
        let between = candidates.iter().copied().filter(|b| *b > lo && *b < hi);
        let (excl, untested): (Vec<u32>, Vec<u32>) = between.partition(|b| excluded.contains(b));
        State { last_good: lo, first_bad: hi, untested, excluded: excl }
    }

    /// The next build to test: the untested build nearest the middle of the range (by position among the builds
    /// between the ends, so that excluded builds are stepped around); none when the search is over.
    pub fn next_probe(&self) -> Option<u32> {
        let all: Vec<u32> = {
            let mut v: Vec<u32> = self.untested.iter().chain(&self.excluded).copied().collect();
            v.sort_unstable();
            v
        };
        let mid = all.len().checked_sub(1)? / 2;
        let mid_build = all[mid];
        self.untested.iter().copied().min_by_key(|b| (b.abs_diff(mid_build), *b))
    }

    /// Steps left at most, if every probe decides: ⌈log2(untested + 1)⌉.
    pub fn steps_left(&self) -> u32 {
        let n = self.untested.len() as u64 + 1;
        if n == 1 {
            0
        } else {
            64 - (n - 1).leading_zeros()
        }
    }
}

/// What the ends' steps say: both as expected, or which end contradicts its role.
#[derive(Clone, Debug, PartialEq)]
pub enum Ends<'s> {
    /// Not both tested yet.
    Pending,
    Checked {
        good: &'s Step,
        bad: &'s Step,
    },
    /// The end tested otherwise than its role says: a bad range.
    Contradicted(&'s Step),
}

pub fn ends(steps: &[Step]) -> Ends<'_> {
    let good = steps.iter().find(|s| s.role == Role::GoodEnd);
    let bad = steps.iter().find(|s| s.role == Role::BadEnd);
    if let Some(g) = good.filter(|g| g.outcome != Outcome::Good) {
        return Ends::Contradicted(g);
    }
    if let Some(b) = bad.filter(|b| b.outcome != Outcome::Bad) {
        return Ends::Contradicted(b);
    }
    match (good, bad) {
        (Some(good), Some(bad)) => Ends::Checked { good, bad },
        _ => Ends::Pending,
    }
}

/// The verdict of a bisect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The last good and the first bad build are neighbours among the builds the source lists.
    Found { last_good: u32, first_bad: u32 },
    /// Only excluded builds separate them: the first bad build is one of `excluded` or `first_bad`.
    Ambiguous { last_good: u32, first_bad: u32, excluded: Vec<u32> },
    /// An end did not test as its role says (or could not be tested): no search.
    BadRange { build: u32, role: Role, outcome: Outcome, reason: String },
    /// Not over yet (interrupted, failed, running).
    Open { last_good: u32, first_bad: u32, untested: usize, excluded: Vec<u32> },
    /// The stored rows contradict each other (a row rewritten, swapped ends): no verdict; `why` says what
    /// contradicts what.
    Inconsistent { why: String },
}

/// What in the stored rows contradicts what, if anything: the row's ends against the builds its end steps tested,
/// an end tested twice, a step outside the range, or a decided step on the wrong side of the range the steps make.
/// A search never records any of these: each probe lies strictly inside the range the earlier steps left.
pub fn contradiction(row: &BisectRow, steps: &[Step]) -> Option<String> {
    if row.good >= row.bad {
        return Some(format!("the row's good end b{} is not older than its bad end b{}", row.good, row.bad));
    }
    for (role, given, name) in [(Role::GoodEnd, row.good, "good"), (Role::BadEnd, row.bad, "bad")] {
        let tested: Vec<&Step> = steps.iter().filter(|s| s.role == role).collect();
        if tested.len() > 1 {
            return Some(format!("the {name} end was tested {} times (steps {})", tested.len(), seqs(&tested)));
        }
        if let Some(s) = tested.first().filter(|s| s.build != given) {
            return Some(format!(
                "the row's {name} end is b{given} but its {name}-end step {} tested b{}",
                s.seq.saturating_add(1),
                s.build
            ));
        }
    }
    if let Some(s) = steps.iter().find(|s| s.build < row.good || s.build > row.bad) {
        return Some(format!(
            "step {} tested b{}, outside b{}..b{}",
            s.seq.saturating_add(1),
            s.build,
            row.good,
            row.bad
        ));
    }
    let st = State::of(&row.candidates, row.good, row.bad, steps);
    // The ends' own outcomes are checked by [`ends`] (an end that tests otherwise is a bad range, not this).
    let wrong_side = |s: &&Step| {
        s.role == Role::Probe
            && match s.outcome {
                Outcome::Good => s.build >= st.first_bad,
                Outcome::Bad => s.build <= st.last_good,
                _ => false,
            }
    };
    steps.iter().find(wrong_side).map(|s| {
        format!(
            "step {} says b{} is {}, but the steps put the last good build at b{} and the first bad at b{}",
            s.seq.saturating_add(1),
            s.build,
            s.outcome.as_str(),
            st.last_good,
            st.first_bad
        )
    })
}

fn seqs(steps: &[&Step]) -> String {
    steps.iter().map(|s| (s.seq.saturating_add(1)).to_string()).collect::<Vec<_>>().join(", ")
}

impl Verdict {
    pub fn of(row: &BisectRow, steps: &[Step]) -> Verdict {
        if let Some(why) = contradiction(row, steps) {
            return Verdict::Inconsistent { why };
        }
        match ends(steps) {
            Ends::Contradicted(s) => {
                return Verdict::BadRange { build: s.build, role: s.role, outcome: s.outcome, reason: s.reason.clone() }
            }
            Ends::Pending => {
                let st = State::of(&row.candidates, row.good, row.bad, steps);
                return Verdict::Open {
                    last_good: st.last_good,
                    first_bad: st.first_bad,
                    untested: st.untested.len(),
                    excluded: st.excluded,
                };
            }
            Ends::Checked { .. } => {}
        }
        let st = State::of(&row.candidates, row.good, row.bad, steps);
        match (st.untested.is_empty(), st.excluded.is_empty()) {
            (true, true) => Verdict::Found { last_good: st.last_good, first_bad: st.first_bad },
            (true, false) => {
                Verdict::Ambiguous { last_good: st.last_good, first_bad: st.first_bad, excluded: st.excluded }
            }
            (false, _) => Verdict::Open {
                last_good: st.last_good,
                first_bad: st.first_bad,
                untested: st.untested.len(),
                excluded: st.excluded,
            },
        }
    }

    /// The range a person reads first: last good and first bad (for a bad range, the offending end twice).
    pub fn range(&self) -> Option<(u32, u32)> {
        match self {
            Verdict::Found { last_good, first_bad }
            | Verdict::Ambiguous { last_good, first_bad, .. }
            | Verdict::Open { last_good, first_bad, .. } => Some((*last_good, *first_bad)),
            Verdict::BadRange { .. } | Verdict::Inconsistent { .. } => None,
        }
    }
}

/// Most sources listed per step under a claim.
const MAX_SOURCES: usize = 8;

/// The sources behind one step: the sweep records it read and the log lines that decided, or the external
/// command's run and output.
pub fn step_sources(step: &Step) -> Vec<Source> {
    let mut out = Vec::new();
    for a in &step.evidence.attempts {
        for run in &a.runs {
            out.extend(run.lines.iter().map(|(path, line, text)| Source::LogLine {
                path: path.clone(),
                line: *line,
                text: text.clone(),
            }));
            out.extend(run.records.iter().map(|f| Source::Run { run_id: run.run_id.clone(), file: Some(f.clone()) }));
            if run.records.is_empty() {
                out.push(Source::Run { run_id: run.run_id.clone(), file: None });
            }
        }
        if let Some(c) = &a.command {
            let excerpt = match (c.exit_code, &c.signal) {
                (_, Some(sig)) => format!("killed by {sig}"),
                (Some(code), None) => match last_line(&c.tail) {
                    line if line.is_empty() => format!("exit {code}"),
                    line => format!("exit {code}: {line}"),
                },
                (None, None) => "ended".into(),
            };
            out.push(Source::Command { argv: c.argv.clone(), excerpt });
            out.push(Source::file(c.log.clone(), None, None, "the test's standard output and error"));
        }
    }
    if let Some(log) = &step.evidence.build_log {
        out.push(Source::file(log.clone(), None, None, "the build log"));
    }
    out.truncate(MAX_SOURCES);
    out
}

fn last_line(s: &str) -> String {
    let line = s.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    line.chars().take(200).collect()
}

fn tested(step: &Step, test: &str) -> String {
    let tries = step.evidence.attempts.len();
    let tries = if tries > 1 { format!(" ({tries} tries)") } else { String::new() };
    format!("b{} tests {} under `{test}`{tries}: {}", step.build, step.outcome.as_str(), step.reason)
}

/// The claims of a bisect: both ends' evidence (Confirmed: observed outcomes), and the verdict.
pub fn claims(row: &BisectRow, steps: &[Step], verdict: &Verdict) -> Vec<Claim> {
    let step_of = |build: u32| steps.iter().rev().find(|s| s.build == build && s.outcome.decided());
    let mut out = Vec::new();
    match verdict {
        Verdict::Found { last_good, first_bad } => {
            let (Some(g), Some(b)) = (step_of(*last_good), step_of(*first_bad)) else { return out };
            out.push(
                Claim::new(
                    "bisect.first_bad",
                    Confidence::Confirmed,
                    format!(
                        "b{first_bad} is the first bad build: b{last_good} tests good and b{first_bad} tests bad, and \
                         the build source lists no build between them"
                    ),
                )
                .with_sources(step_sources(b)),
            );
            out.push(
                Claim::new("bisect.last_good", Confidence::Confirmed, tested(g, &row.test))
                    .with_sources(step_sources(g)),
            );
            out.push(
                Claim::new("bisect.first_bad.test", Confidence::Confirmed, tested(b, &row.test))
                    .with_sources(step_sources(b)),
            );
        }
        Verdict::Ambiguous { last_good, first_bad, excluded } => {
            let list: Vec<String> = excluded.iter().map(|b| format!("b{b}")).collect();
            out.push(Claim::new(
                "bisect.first_bad",
                Confidence::Unresolved,
                format!(
                    "the first bad build is one of {}, b{first_bad}: only builds that were skipped or undecided ({}) lie \
                     between the last good b{last_good} and the first bad b{first_bad} tested",
                    list.join(", "),
                    list.join(", ")
                ),
            ));
            for b in [last_good, first_bad] {
                if let Some(s) = step_of(*b) {
                    out.push(
                        Claim::new(format!("bisect.b{b}"), Confidence::Confirmed, tested(s, &row.test))
                            .with_sources(step_sources(s)),
                    );
                }
            }
        }
        Verdict::BadRange { build, role, .. } => {
            if let Some(s) = steps.iter().find(|s| s.role == *role) {
                let end = if *role == Role::GoodEnd { "good" } else { "bad" };
                out.push(
                    Claim::new(
                        "bisect.bad_range",
                        if s.outcome.decided() { Confidence::Confirmed } else { Confidence::Unresolved },
                        format!("a bad range: the {end} end b{build} was given as {end}, but {}", tested(s, &row.test)),
                    )
                    .with_sources(step_sources(s)),
                );
            }
        }
        Verdict::Inconsistent { why } => out.push(Claim::new(
            "bisect.inconsistent",
            Confidence::Unresolved,
            format!("no verdict: the stored bisect contradicts itself: {why}"),
        )),
        Verdict::Open { .. } => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(build: u32, role: Role, outcome: Outcome) -> Step {
        Step { seq: 0, ..Step::supposed(build, role, outcome) }
    }

    #[test]
    fn probes_narrow_the_range_and_skips_are_stepped_around() {
        let c: Vec<u32> = (100..=110).collect();
        let s = State::of(&c, 100, 110, &[]);
        assert_eq!((s.untested.len(), s.next_probe()), (9, Some(105)));
        assert_eq!(s.steps_left(), 4, "⌈log2(10)⌉");
        let steps = [step(105, Role::Probe, Outcome::Skip)];
        let s = State::of(&c, 100, 110, &steps);
        assert_eq!(
            (s.excluded.as_slice(), s.next_probe()),
            (&[105][..], Some(104)),
            "the nearer neighbour, lower first"
        );
        let steps = [step(105, Role::Probe, Outcome::Good), step(108, Role::Probe, Outcome::Bad)];
        let s = State::of(&c, 100, 110, &steps);
        assert_eq!((s.last_good, s.first_bad, s.untested.as_slice()), (105, 108, &[106, 107][..]));
        assert_eq!(State::of(&[7, 8], 7, 8, &[]).next_probe(), None, "adjacent ends: nothing to probe");
        assert_eq!(State::of(&[7, 8], 7, 8, &[]).steps_left(), 0);
        assert_eq!(State::of(&[1, 2, 3], 1, 3, &[]).steps_left(), 1);
    }

    #[test]
    fn the_verdict_names_a_bad_range_an_ambiguity_or_the_first_bad_build() {
        let row = crate::run::format::bisect::test_rows::row("b");
        let ends = [step(100, Role::GoodEnd, Outcome::Good), step(104, Role::BadEnd, Outcome::Bad)];
        let mut steps = ends.to_vec();
        assert!(matches!(Verdict::of(&row, &steps), Verdict::Open { untested: 3, .. }));
        steps.push(step(102, Role::Probe, Outcome::Bad));
        steps.push(step(101, Role::Probe, Outcome::Skip));
        assert_eq!(
            Verdict::of(&row, &steps),
            Verdict::Ambiguous { last_good: 100, first_bad: 102, excluded: vec![101] }
        );
        let steps =
            [ends.to_vec(), vec![step(102, Role::Probe, Outcome::Good), step(103, Role::Probe, Outcome::Bad)]].concat();
        assert_eq!(Verdict::of(&row, &steps), Verdict::Found { last_good: 102, first_bad: 103 });
        let c = claims(&row, &steps, &Verdict::of(&row, &steps));
        assert_eq!(c[0].id, "bisect.first_bad");
        assert!(c[0].statement.starts_with("b103 is the first bad build"), "{}", c[0].statement);
        let bad = [step(100, Role::GoodEnd, Outcome::Bad)];
        assert!(matches!(Verdict::of(&row, &bad), Verdict::BadRange { build: 100, role: Role::GoodEnd, .. }));
        assert_eq!(claims(&row, &bad, &Verdict::of(&row, &bad))[0].id, "bisect.bad_range");
    }

    #[test]
    fn ends_come_from_the_steps_and_a_row_that_contradicts_them_has_no_verdict() {
        let steps = [
            step(100, Role::GoodEnd, Outcome::Good),
            step(104, Role::BadEnd, Outcome::Bad),
            step(102, Role::Probe, Outcome::Good),
            step(103, Role::Probe, Outcome::Bad),
        ];
        let mut swapped = crate::run::format::bisect::test_rows::row("b");
        (swapped.good, swapped.bad) = (104, 100);
        let v = Verdict::of(&swapped, &steps);
        assert!(matches!(&v, Verdict::Inconsistent { why } if why.contains("not older")), "{v:?}");
        let c = claims(&swapped, &steps, &v);
        assert!(c.iter().all(|c| c.confidence != Confidence::Confirmed), "{c:?}");
        let mut moved = crate::run::format::bisect::test_rows::row("b");
        moved.good = 101;
        let v = Verdict::of(&moved, &steps);
        assert!(matches!(&v, Verdict::Inconsistent { why } if why.contains("good-end step 1 tested b100")), "{v:?}");
        // A good probe above a bad one: the steps contradict each other.
        let row = crate::run::format::bisect::test_rows::row("b");
        let flipped = [
            steps[0].clone(),
            steps[1].clone(),
            step(101, Role::Probe, Outcome::Bad),
            step(103, Role::Probe, Outcome::Good),
        ];
        assert!(matches!(Verdict::of(&row, &flipped), Verdict::Inconsistent { .. }));
        assert_eq!(Verdict::of(&row, &steps), Verdict::Found { last_good: 102, first_bad: 103 });
    }
}
