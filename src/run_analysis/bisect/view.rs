//! A stored bisect as a result: its JSON (`backscope.bisect/1`, docs/commands.md) and its document — the verdict,
//! the upstream range, both ends' evidence as claims and a table of every step. `backscope bisect` prints it when
//! the search ends; `backscope report DB --bisect ID` prints the same from the database.

use std::io::{self, Write};

use serde::Serialize;

use super::verdict::{claims, Verdict};
use crate::evidence::Claim;
use crate::output::{Column, Document, Render, Table, Text};
use crate::run::format::bisect::{BisectRow, Outcome, Role, Step};

/// JSON schema of a bisect result.
pub const SCHEMA: &str = "backscope.bisect/1";

#[derive(Clone, Debug, Serialize)]
pub struct BisectView {
    pub schema: &'static str,
    pub bisect: BisectRow,
    pub verdict: VerdictJson,
    pub steps: Vec<Step>,
    pub claims: Vec<Claim>,
}

/// The verdict as JSON: `kind` is `found`, `ambiguous`, `bad_range`, `open` or `inconsistent`.
#[derive(Clone, Debug, Serialize)]
pub struct VerdictJson {
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_good: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_bad: Option<u32>,
    /// Builds between them that were skipped or undecided.
    pub excluded: Vec<u32>,
    /// Builds between them not tested yet (an open bisect).
    pub untested: usize,
    pub summary: String,
}

impl BisectView {
    pub fn new(bisect: BisectRow, steps: Vec<Step>) -> BisectView {
        let verdict = Verdict::of(&bisect, &steps);
        let claims = claims(&bisect, &steps, &verdict);
        let verdict = verdict_json(&verdict, &bisect);
        BisectView { schema: SCHEMA, bisect, verdict, steps, claims }
    }
}

fn verdict_json(v: &Verdict, row: &BisectRow) -> VerdictJson {
    let (kind, excluded, untested, summary) = match v {
        Verdict::Found { last_good, first_bad } => {
            ("found", vec![], 0, format!("first bad build b{first_bad} (last good b{last_good})"))
        }
        Verdict::Ambiguous { last_good, first_bad, excluded } => {
            let list: Vec<String> = excluded.iter().map(|b| format!("b{b}")).collect();
            let summary = format!(
                "the first bad build is one of {}, b{first_bad} (last good b{last_good}; the others were skipped)",
                list.join(", ")
            );
            ("ambiguous", excluded.clone(), 0, summary)
        }
        Verdict::BadRange { build, role, outcome, reason } => {
            let end = if *role == Role::GoodEnd { "good" } else { "bad" };
            let summary = format!(
                "a bad range: the {end} end b{build} tests {} ({reason}); nothing was searched",
                outcome.as_str()
            );
            ("bad_range", vec![], 0, summary)
        }
        Verdict::Inconsistent { why } => {
            ("inconsistent", vec![], 0, format!("no verdict: the stored bisect contradicts itself: {why}"))
        }
        Verdict::Open { last_good, first_bad, untested, excluded } => {
            let summary = format!(
                "not finished ({}): between b{last_good} (good) and b{first_bad} (bad) {untested} build(s) are untested; \
                 `backscope bisect --resume {}` continues",
                row.status.as_str(),
                row.bisect_id
            );
            ("open", excluded.clone(), *untested, summary)
        }
    };
    let range = v.range();
    VerdictJson { kind, last_good: range.map(|r| r.0), first_bad: range.map(|r| r.1), excluded, untested, summary }
}

fn secs(v: Option<f64>) -> String {
    v.map(|s| format!("{s:.1}")).unwrap_or_default()
}

/// The evidence of a step in a table cell: run ids, or the command's exit.
fn evidence_cell(s: &Step) -> String {
    let mut parts: Vec<String> = Vec::new();
    for a in &s.evidence.attempts {
        parts.extend(a.runs.iter().map(|r| format!("run {} ({} record(s))", r.run_id, r.records.len())));
        if let Some(c) = &a.command {
            parts.push(match (c.exit_code, &c.signal) {
                (_, Some(sig)) => format!("killed by {sig}"),
                (Some(code), None) => format!("exit {code}"),
                (None, None) => "ended".into(),
            });
        }
    }
    if let Some(log) = &s.evidence.build_log {
        parts.push(format!("build log {log}"));
    }
    parts.join("; ")
}

impl Render for BisectView {
    fn write_json(&self, out: &mut dyn Write) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, self)?;
        writeln!(out)
    }

    fn document(&self) -> Document {
        let b = &self.bisect;
        let mut doc = Document::new(format!("backscope bisect b{}..b{}", b.good, b.bad));
        doc.heading(2, "Verdict");
        doc.paragraph(self.verdict.summary.as_str());
        let mut facts = vec![
            ("bisect".to_string(), Text::code(&b.bisect_id)),
            ("builds".to_string(), Text::code(&b.builds)),
            ("test".to_string(), Text::code(&b.test)),
            (
                "range".to_string(),
                Text::plain(format!("b{}..b{} ({} build(s) listed)", b.good, b.bad, b.candidates.len())),
            ),
            ("status".to_string(), Text::plain(b.status.as_str())),
        ];
        if let Some(u) = &b.upstream {
            facts.push(("upstream".to_string(), Text::code(&u.tags)));
            facts.push(("compare".to_string(), Text::plain(u.compare_url.as_str())));
        }
        doc.push(crate::output::Block::Facts(facts));
        if let Some(u) = b.upstream.as_ref().filter(|u| !u.commits.is_empty()) {
            doc.heading(3, format!("Commits between b{} and b{}", u.last_good, u.first_bad));
            doc.push(crate::output::Block::List(u.commits.iter().map(|c| Text::plain(c.as_str())).collect()));
        }
        if !self.claims.is_empty() {
            doc.heading(2, "Evidence");
            doc.claims(&self.claims);
        }
        doc.heading(2, "Steps");
        let mut t = Table::new(vec![
            Column::number("#"),
            Column::keep("build"),
            Column::keep("role"),
            Column::keep("outcome"),
            Column::text("reason"),
            Column::number("build s"),
            Column::keep("cache"),
            Column::number("test s"),
            Column::text("evidence"),
        ]);
        for s in &self.steps {
            let cache = match s.from_cache {
                Some(true) => "yes",
                Some(false) => "no",
                None => "",
            };
            t.row([
                s.seq.saturating_add(1).to_string(),
                format!("b{}", s.build),
                s.role.as_str().to_string(),
                s.outcome.as_str().to_string(),
                s.reason.clone(),
                secs(s.build_secs),
                cache.to_string(),
                format!("{:.1}", s.test_secs),
                evidence_cell(s),
            ]);
        }
        doc.push(t);
        let skipped = self.steps.iter().filter(|s| !s.outcome.decided()).count();
        let bad = self.steps.iter().filter(|s| s.outcome == Outcome::Bad).count();
        doc.paragraph(format!("{} step(s): {bad} bad, {skipped} skipped or undecided", self.steps.len()));
        doc
    }
}
