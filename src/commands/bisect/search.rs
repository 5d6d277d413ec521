//! The search: check both ends, then binary-search the builds between them, one committed step at a time.
//!
//! Every step is recorded (one transaction) before the next begins, and the state is always recomputed from the
//! recorded steps ([`crate::run_analysis::bisect::verdict::State`]), so a search that resumes — after Ctrl-C, or
//! after backscope itself was killed — continues exactly where the last committed step left it; a step in progress
//! when it stopped is simply taken again.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};

use super::check::{BuildTest, Interrupted, Target};
use super::progress::Progress;
use crate::builds::{BuildFlags, BuildNumber, Prepared, Provider};
use crate::run::format::bisect::{Attempt, BisectRow, Evidence, Outcome, Role, Step};
use crate::run::format::ids::utc_now;
use crate::run::write::bisect::BisectStore;
use crate::run_analysis::bisect::verdict::{ends, Ends, State, Verdict};

pub struct Search<'a> {
    pub store: &'a mut BisectStore,
    pub row: BisectRow,
    /// The recorded steps (those of an earlier run first, when resuming).
    pub steps: Vec<Step>,
    pub provider: &'a dyn Provider,
    pub tester: &'a mut dyn BuildTest,
    pub flags: BuildFlags,
    /// Tries per build (`--repeat`).
    pub repeat: u32,
    pub stop: Arc<AtomicBool>,
    pub progress: Option<Progress>,
    /// The good end's `bin/`, once prepared (for tests that compare with it).
    reference: Option<PathBuf>,
}

/// What one build's tries came to.
struct Tried {
    outcome: Outcome,
    reason: String,
    attempts: Vec<Attempt>,
}

impl<'a> Search<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: &'a mut BisectStore,
        row: BisectRow,
        steps: Vec<Step>,
        provider: &'a dyn Provider,
        tester: &'a mut dyn BuildTest,
        flags: BuildFlags,
        repeat: u32,
        stop: Arc<AtomicBool>,
    ) -> Search<'a> {
        Search { store, row, steps, provider, tester, flags, repeat, stop, progress: None, reference: None }
    }

    /// Run the search to its verdict. [`Interrupted`] and other errors leave every step taken so far recorded.
    pub fn run(&mut self) -> Result<Verdict> {
        for (build, role) in [(self.row.good, Role::GoodEnd), (self.row.bad, Role::BadEnd)] {
            if !self.steps.iter().any(|s| s.role == role) {
                self.take_step(build, role)?;
            }
            if matches!(ends(&self.steps), Ends::Contradicted(_)) {
                return Ok(Verdict::of(&self.row, &self.steps));
            }
        }
        loop {
            let state = State::of(&self.row.candidates, self.row.good, self.row.bad, &self.steps);
            let Some(build) = state.next_probe() else { break };
            self.take_step(build, Role::Probe)?;
        }
        Ok(Verdict::of(&self.row, &self.steps))
    }

    fn steps_left(&self) -> u32 {
        let ends_left =
            [Role::GoodEnd, Role::BadEnd].iter().filter(|r| !self.steps.iter().any(|s| s.role == **r)).count();
        State::of(&self.row.candidates, self.row.good, self.row.bad, &self.steps).steps_left() + ends_left as u32
    }

    /// Prepare, test and record one build.
    fn take_step(&mut self, build: u32, role: Role) -> Result<()> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(Interrupted.into());
        }
        let seq = self.steps.len() as u32;
        let what = format!("b{build} ({})", role.as_str().replace('_', " "));
        if let Some(p) = &self.progress {
            p.begin(&format!("building {what}"), self.steps_left());
        }
        // The bad end is fetched while the good end is, as mozregression does; later candidates once a build is
        // ready, while it is tested.
        if role == Role::GoodEnd {
            self.prefetch_next(build, role);
        }
        let prepared = self
            .provider
            .prepare(BuildNumber(build), &self.flags)
            .with_context(|| format!("cannot prepare b{build}"))?;
        // A Ctrl-C during a build reaches the compiler too (it shares the terminal): its failure is not the build's.
        if self.stop.load(Ordering::Relaxed) {
            return Err(Interrupted.into());
        }
        let mut evidence = Evidence::default();
        let t0 = Instant::now();
        let (tried, build_secs, from_cache) = match prepared {
            Prepared::Unbuildable { reason, log } => {
                evidence.build_log = log.map(|l| l.display().to_string());
                let tried =
                    Tried { outcome: Outcome::Skip, reason: format!("cannot be built: {reason}"), attempts: vec![] };
                (tried, None, None)
            }
            Prepared::Ready { bin_dir, build_secs, from_cache } => {
                if role == Role::GoodEnd {
                    self.reference = Some(bin_dir.clone());
                }
                evidence.bin_dir = Some(bin_dir.display().to_string());
                if role != Role::GoodEnd {
                    self.prefetch_next(build, role);
                }
                if let Some(p) = &self.progress {
                    p.begin(&format!("testing {what}"), self.steps_left());
                }
                (self.try_build(build, &bin_dir, seq, role)?, Some(build_secs), Some(from_cache))
            }
        };
        evidence.attempts = tried.attempts;
        let step = Step {
            seq,
            build,
            role,
            outcome: tried.outcome,
            reason: tried.reason,
            evidence,
            build_secs,
            from_cache,
            test_secs: t0.elapsed().as_secs_f64(),
            recorded_at: utc_now(),
        };
        self.store.append_step(&self.row.bisect_id, &step)?;
        let line = format!("b{build} {} ({}): {}", step.outcome.as_str(), role.as_str(), step.reason);
        self.steps.push(step);
        let left = self.steps_left();
        if let Some(p) = &mut self.progress {
            p.done(&line, left);
        }
        Ok(())
    }

    /// The builds that could be tested after `build`, by what its outcome would be (mozregression's order: the bad
    /// end while the good end is tested, the first midpoint while the bad end is, then both possible next probes).
    fn next_candidates(&self, build: u32, role: Role) -> Vec<(u32, &'static str)> {
        let then = |outcome: Outcome| -> Option<u32> {
            let mut steps = self.steps.clone();
            steps.push(Step::supposed(build, role, outcome));
            if !matches!(ends(&steps), Ends::Checked { .. }) {
                return None;
            }
            State::of(&self.row.candidates, self.row.good, self.row.bad, &steps).next_probe()
        };
        match role {
            Role::GoodEnd if !self.steps.iter().any(|s| s.role == Role::BadEnd) => vec![(self.row.bad, "the bad end")],
            Role::GoodEnd | Role::BadEnd => {
                let expected = if role == Role::GoodEnd { Outcome::Good } else { Outcome::Bad };
                then(expected).map(|b| (b, "the first probe")).into_iter().collect()
            }
            Role::Probe => [(Outcome::Good, "next if it is good"), (Outcome::Bad, "next if it is bad")]
                .into_iter()
                .filter_map(|(o, why)| then(o).map(|b| (b, why)))
                .collect(),
        }
    }

    /// Start preparing the next candidates in the background while `build` is tested, and say so in the step log.
    fn prefetch_next(&mut self, build: u32, role: Role) {
        let next = self.next_candidates(build, role);
        let wanted: Vec<BuildNumber> = next.iter().map(|(b, _)| BuildNumber(*b)).collect();
        let started = self.provider.prefetch(&wanted, &self.flags);
        if started.is_empty() {
            return;
        }
        let what: Vec<String> = next
            .iter()
            .filter(|(b, _)| started.contains(&BuildNumber(*b)))
            .map(|(b, why)| format!("b{b} ({why})"))
            .collect();
        let how = if role == Role::GoodEnd { "prepared and tested" } else { "tested" };
        let line = format!("prefetching {} in the background while b{build} is {how}", what.join(" and "));
        match &self.progress {
            Some(p) => p.note(&line),
            None => crate::output::messages::note(line),
        }
    }

    /// The good end's `bin/`, prepared again when a resumed search needs it.
    fn reference(&mut self) -> Result<Option<PathBuf>> {
        if self.reference.is_none() && self.tester.needs_reference() {
            if let Prepared::Ready { bin_dir, .. } = self.provider.prepare(BuildNumber(self.row.good), &self.flags)? {
                self.reference = Some(bin_dir);
            }
        }
        Ok(self.reference.clone())
    }

    /// The tries of one build: any bad try makes it bad (a flaky failure is still the failure); otherwise any
    /// good try makes it good; otherwise it is skipped or undecided as its first try says.
    fn try_build(&mut self, build: u32, bin_dir: &std::path::Path, seq: u32, role: Role) -> Result<Tried> {
        let reference = self.reference()?;
        let tries = if self.tester.repeats_itself() { 1 } else { self.repeat.max(1) };
        let mut attempts: Vec<Attempt> = Vec::new();
        for attempt in 1..=tries {
            if self.stop.load(Ordering::Relaxed) {
                return Err(Interrupted.into());
            }
            let target = Target {
                build: BuildNumber(build),
                seq,
                attempt,
                bin_dir,
                reference: reference.as_deref(),
                is_good_end: role == Role::GoodEnd,
            };
            let a = self.tester.test(&target)?;
            let bad = a.outcome == Outcome::Bad;
            attempts.push(a);
            if bad {
                break;
            }
        }
        let n = attempts.len();
        let pick = |o: Outcome| attempts.iter().position(|a| a.outcome == o);
        let (outcome, at) = match (pick(Outcome::Bad), pick(Outcome::Good)) {
            (Some(i), _) => (Outcome::Bad, i),
            (None, Some(i)) => (Outcome::Good, i),
            (None, None) => (attempts[0].outcome, 0),
        };
        let mut reason = attempts[at].reason.clone();
        if tries > 1 {
            let good = attempts.iter().filter(|a| a.outcome == Outcome::Good).count();
            reason = match outcome {
                Outcome::Bad => format!("try {} of {tries}: {reason}", at + 1),
                _ => format!("{good} of {n} tries good: {reason}"),
            };
        }
        Ok(Tried { outcome, reason, attempts })
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::HashSet;
    use std::path::Path;

    use super::*;
    use crate::builds::Backend;
    use crate::run::format::bisect::Status;

    /// Builds `lo..=hi` as directories that need not exist; `unbuildable` cannot be built.
    struct Builds {
        list: Vec<u32>,
        unbuildable: HashSet<u32>,
        prepared: RefCell<Vec<u32>>,
        /// What each prefetch asked for.
        prefetched: RefCell<Vec<Vec<u32>>>,
        /// Set this flag while preparing that build (a Ctrl-C arriving during a build).
        stop_during: Option<(u32, Arc<AtomicBool>)>,
    }

    impl Builds {
        fn new(range: std::ops::RangeInclusive<u32>, unbuildable: &[u32]) -> Builds {
            Builds {
                list: range.collect(),
                unbuildable: unbuildable.iter().copied().collect(),
                prepared: RefCell::default(),
                prefetched: RefCell::default(),
                stop_during: None,
            }
        }
    }

    impl Provider for Builds {
        fn list(&self) -> Result<Vec<BuildNumber>> {
            Ok(self.list.iter().map(|b| BuildNumber(*b)).collect())
        }
        fn prepare(&self, build: BuildNumber, _: &BuildFlags) -> Result<Prepared> {
            self.prepared.borrow_mut().push(build.0);
            if let Some((b, stop)) = &self.stop_during {
                if *b == build.0 {
                    stop.store(true, Ordering::Relaxed);
                }
            }
            Ok(if self.unbuildable.contains(&build.0) {
                Prepared::Unbuildable { reason: "cmake failed".into(), log: Some(format!("/logs/{build}.log").into()) }
            } else {
                Prepared::Ready { bin_dir: format!("/builds/{build}/bin").into(), build_secs: 2.0, from_cache: false }
            })
        }
        fn prefetch(&self, builds: &[BuildNumber], _: &BuildFlags) -> Vec<BuildNumber> {
            self.prefetched.borrow_mut().push(builds.iter().map(|b| b.0).collect());
            builds.to_vec()
        }
        fn between(&self, _: BuildNumber, _: BuildNumber) -> Result<Vec<String>> {
            Ok(vec![])
        }
    }

    /// A test whose answer is `answer(build, try)`; `interrupt_at`: the call (from 1) that is interrupted instead.
    struct Answers<F: FnMut(u32, u32) -> Outcome> {
        answer: F,
        calls: Vec<(u32, u32)>,
        interrupt_at: Option<usize>,
    }

    impl<F: FnMut(u32, u32) -> Outcome> BuildTest for Answers<F> {
        fn test(&mut self, t: &Target<'_>) -> Result<Attempt> {
            assert_eq!(t.bin_dir, Path::new(&format!("/builds/{}/bin", t.build)));
            self.calls.push((t.build.0, t.attempt));
            if self.interrupt_at == Some(self.calls.len()) {
                return Err(Interrupted.into());
            }
            let outcome = (self.answer)(t.build.0, t.attempt);
            Ok(Attempt {
                outcome,
                reason: format!("said {}", outcome.as_str()),
                runs: vec![],
                command: None,
                measured: Default::default(),
            })
        }
    }

    fn answers<F: FnMut(u32, u32) -> Outcome>(answer: F) -> Answers<F> {
        Answers { answer, calls: vec![], interrupt_at: None }
    }

    fn threshold(first_bad: u32) -> impl FnMut(u32, u32) -> Outcome {
        move |b, _| if b >= first_bad { Outcome::Bad } else { Outcome::Good }
    }

    fn flags() -> BuildFlags {
        BuildFlags { backend: Backend::Cpu, cmake_args: vec![], targets: vec![], jobs: 1 }
    }

    fn row(p: &Builds, good: u32, bad: u32) -> BisectRow {
        BisectRow {
            bisect_id: "t".into(),
            created_at: utc_now(),
            finished_at: None,
            status: Status::Running,
            good,
            bad,
            builds: "double".into(),
            test: "double".into(),
            spec_json: "{}".into(),
            candidates: p.list.iter().copied().filter(|b| (good..=bad).contains(b)).collect(),
            upstream: None,
            backscope_version: "t".into(),
            taken_over: None,
        }
    }

    /// Run a search over `p` from `good` to `bad` in `db`; the verdict and the steps the store holds after it.
    fn search(
        db: &Path,
        p: &Builds,
        (good, bad): (u32, u32),
        t: &mut dyn BuildTest,
        repeat: u32,
    ) -> (Result<Verdict>, Vec<Step>) {
        let db = &crate::run::format::target::DbTarget::Sqlite(db.to_path_buf());
        let mut store = BisectStore::open(db).unwrap();
        let (row, steps) = match store.run("t").unwrap() {
            Some(r) => (r, store.steps("t").unwrap()),
            None => {
                let r = row(p, good, bad);
                store.create(&r).unwrap();
                (r, vec![])
            }
        };
        let stop = p.stop_during.as_ref().map_or_else(|| Arc::new(AtomicBool::new(false)), |(_, s)| Arc::clone(s));
        let v = Search::new(&mut store, row, steps, p, t, flags(), repeat, stop).run();
        (v, BisectStore::open_read_only(db).unwrap().steps("t").unwrap())
    }

    fn db() -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("b.db");
        (d, p)
    }

    #[test]
    fn the_first_bad_build_is_found_in_logarithmic_steps_each_recorded() {
        let (_d, path) = db();
        let p = Builds::new(100..=120, &[]);
        let mut t = answers(threshold(113));
        let (v, steps) = search(&path, &p, (100, 120), &mut t, 1);
        assert_eq!(v.unwrap(), Verdict::Found { last_good: 112, first_bad: 113 });
        // Two ends, then ⌈log2(19 + 1)⌉ = 5 probes at most.
        assert!(steps.len() <= 7, "{} steps", steps.len());
        assert_eq!(steps.iter().map(|s| s.build).collect::<Vec<_>>(), t.calls.iter().map(|c| c.0).collect::<Vec<_>>());
        assert_eq!(
            (steps[0].role, steps[1].role, steps[2].build),
            (Role::GoodEnd, Role::BadEnd, 110),
            "midpoint third"
        );
        assert!(steps.iter().all(|s| s.build_secs == Some(2.0) && s.evidence.bin_dir.is_some()));
    }

    /// mozregression's order: the bad end is asked for while the good end is prepared, the first probe while the
    /// bad end is tested, and both possible next probes while a probe is; every build tested after the ends was
    /// among the candidates prefetched the step before.
    #[test]
    fn the_next_candidates_are_prefetched_while_a_build_is_tested() {
        let (_d, path) = db();
        let p = Builds::new(100..=120, &[]);
        let mut t = answers(threshold(113));
        let (v, steps) = search(&path, &p, (100, 120), &mut t, 1);
        assert_eq!(v.unwrap(), Verdict::Found { last_good: 112, first_bad: 113 });
        let asked = p.prefetched.borrow().clone();
        assert_eq!(asked[0], [120], "the bad end, while the good end is prepared");
        assert_eq!(asked[1], [110], "the first probe (the midpoint), while the bad end is tested");
        // Probe b110 is good: the next is in 111..=119; bad: in 101..=109.
        assert_eq!(asked[2].len(), 2);
        assert!(asked[2][0] > 110 && asked[2][1] < 110, "{:?}", asked[2]);
        for (i, step) in steps.iter().enumerate().skip(2) {
            assert!(asked[i - 1].contains(&step.build), "step {i} (b{}) was not prefetched: {asked:?}", step.build);
        }
    }

    #[test]
    fn unbuildable_builds_are_skipped_and_their_neighbours_tested() {
        let (_d, path) = db();
        let p = Builds::new(100..=120, &[110, 111]);
        let mut t = answers(threshold(115));
        let (v, steps) = search(&path, &p, (100, 120), &mut t, 1);
        assert_eq!(v.unwrap(), Verdict::Found { last_good: 114, first_bad: 115 });
        let skipped: Vec<&Step> = steps.iter().filter(|s| s.outcome == Outcome::Skip).collect();
        assert_eq!(skipped[0].build, 110);
        assert!(
            skipped[0].reason.contains("cmake failed")
                && skipped[0].evidence.build_log.as_deref() == Some("/logs/b110.log")
        );
        assert!(!t.calls.iter().any(|c| c.0 == 110 || c.0 == 111), "an unbuildable build is never tested");
    }

    #[test]
    fn only_skipped_builds_between_the_ends_give_the_range_with_them() {
        let (_d, path) = db();
        let p = Builds::new(100..=104, &[101, 102, 103]);
        let mut t = answers(threshold(104));
        let (v, _) = search(&path, &p, (100, 104), &mut t, 1);
        assert_eq!(v.unwrap(), Verdict::Ambiguous { last_good: 100, first_bad: 104, excluded: vec![101, 102, 103] });
        // An undecided step is excluded the same way.
        let (_d, path) = db();
        let p = Builds::new(100..=104, &[]);
        let mut t = answers(|b, _| match b {
            102 => Outcome::Undecided,
            b if b >= 103 => Outcome::Bad,
            _ => Outcome::Good,
        });
        let (v, _) = search(&path, &p, (100, 104), &mut t, 1);
        assert_eq!(v.unwrap(), Verdict::Ambiguous { last_good: 101, first_bad: 103, excluded: vec![102] });
    }

    #[test]
    fn a_bad_range_stops_before_any_probe() {
        for (answer, build, role) in [(Outcome::Bad, 100, Role::GoodEnd), (Outcome::Good, 108, Role::BadEnd)] {
            let (_d, path) = db();
            let p = Builds::new(100..=108, &[]);
            let mut t = answers(move |_, _| answer);
            let (v, steps) = search(&path, &p, (100, 108), &mut t, 1);
            assert!(matches!(v.unwrap(), Verdict::BadRange { build: b, role: r, .. } if b == build && r == role));
            assert!(steps.iter().all(|s| s.role != Role::Probe), "nothing searched");
        }
        let (_d, path) = db();
        let p = Builds::new(100..=108, &[100]);
        let mut t = answers(threshold(104));
        let (v, _) = search(&path, &p, (100, 108), &mut t, 1);
        assert!(matches!(v.unwrap(), Verdict::BadRange { build: 100, outcome: Outcome::Skip, .. }));
    }

    #[test]
    fn adjacent_ends_need_only_their_own_steps() {
        let (_d, path) = db();
        let p = Builds::new(100..=101, &[]);
        let mut t = answers(threshold(101));
        let (v, steps) = search(&path, &p, (100, 101), &mut t, 1);
        assert_eq!((v.unwrap(), steps.len()), (Verdict::Found { last_good: 100, first_bad: 101 }, 2));
    }

    #[test]
    fn a_flaky_failure_is_caught_with_repeat() {
        // Builds from 113 on fail only on their second try.
        let flaky = |b: u32, attempt: u32| if b >= 113 && attempt == 2 { Outcome::Bad } else { Outcome::Good };
        let (_d, path) = db();
        let p = Builds::new(100..=120, &[]);
        let (v, _) = search(&path, &p, (100, 120), &mut answers(flaky), 1);
        assert!(matches!(v.unwrap(), Verdict::BadRange { build: 120, .. }), "one try misses it");
        let (_d, path) = db();
        let mut t = answers(flaky);
        let (v, steps) = search(&path, &p, (100, 120), &mut t, 3);
        assert_eq!(v.unwrap(), Verdict::Found { last_good: 112, first_bad: 113 });
        let good_end = &steps[0];
        assert_eq!((good_end.evidence.attempts.len(), good_end.reason.as_str()), (3, "3 of 3 tries good: said good"));
        assert_eq!((steps[1].evidence.attempts.len(), steps[1].reason.as_str()), (2, "try 2 of 3: said bad"));
    }

    #[test]
    fn a_resumed_search_keeps_the_recorded_steps_and_ends_where_an_uninterrupted_one_does() {
        let (_d, path) = db();
        let p = Builds::new(100..=140, &[]);
        let mut t = answers(threshold(129));
        t.interrupt_at = Some(4);
        let (v, before) = search(&path, &p, (100, 140), &mut t, 1);
        assert!(v.unwrap_err().is::<Interrupted>());
        assert_eq!(before.len(), 3, "the interrupted fourth step is not recorded");
        let mut again = answers(threshold(129));
        let (v, after) = search(&path, &p, (100, 140), &mut again, 1);
        assert_eq!(v.unwrap(), Verdict::Found { last_good: 128, first_bad: 129 });
        assert_eq!(&after[..3], &before[..], "recorded steps are kept as they were");
        let retested: Vec<u32> =
            again.calls.iter().map(|c| c.0).filter(|b| before.iter().any(|s| s.build == *b)).collect();
        assert!(retested.is_empty(), "already recorded builds were tested again: {retested:?}");
        let (_d2, path2) = db();
        let (_, whole) = search(&path2, &p, (100, 140), &mut answers(threshold(129)), 1);
        let builds = |s: &[Step]| s.iter().map(|s| (s.build, s.outcome)).collect::<Vec<_>>();
        assert_eq!(builds(&after), builds(&whole), "the same steps as a search never interrupted");
    }

    #[test]
    fn a_build_interrupted_by_ctrl_c_is_not_recorded_as_unbuildable() {
        let (_d, path) = db();
        let mut p = Builds::new(100..=108, &[104]);
        p.stop_during = Some((104, Arc::new(AtomicBool::new(false))));
        let (v, steps) = search(&path, &p, (100, 108), &mut answers(threshold(106)), 1);
        assert!(v.unwrap_err().is::<Interrupted>());
        assert_eq!(steps.iter().map(|s| s.build).collect::<Vec<_>>(), [100, 108], "b104's failed build is not a skip");
    }
}
