//! `--dry-run`: the builds in range and the first planned steps (both ends, then the midpoint if the ends test as
//! given), building and recording nothing.

use std::io::{self, Write};

use serde::Serialize;

use super::options::BisectSpec;
use crate::output::{Document, Render, Text};
use crate::run_analysis::bisect::verdict::State;

#[derive(Debug, Serialize)]
pub struct Plan {
    pub schema: &'static str,
    pub good: u32,
    pub bad: u32,
    pub builds: String,
    pub test: String,
    /// Every build listed from good to bad, both included.
    pub candidates: Vec<u32>,
    /// The first steps: (build, why).
    pub planned: Vec<(u32, &'static str)>,
    /// Steps at most if every build can be built and tested: the two ends and ⌈log2⌉ of those between.
    pub steps_at_most: u32,
}

impl Plan {
    pub fn new(spec: &BisectSpec, candidates: Vec<u32>) -> Plan {
        let state = State::of(&candidates, spec.good, spec.bad, &[]);
        let mut planned = vec![(spec.good, "good end: must test good"), (spec.bad, "bad end: must test bad")];
        if let Some(mid) = state.next_probe() {
            planned.push((mid, "midpoint, once both ends test as given"));
        }
        Plan {
            schema: "backscope.bisect.plan/1",
            good: spec.good,
            bad: spec.bad,
            builds: spec.builds.clone(),
            test: spec.test.describe(),
            steps_at_most: 2 + state.steps_left(),
            candidates,
            planned,
        }
    }
}

impl Render for Plan {
    fn write_json(&self, out: &mut dyn Write) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, self)?;
        writeln!(out)
    }

    fn document(&self) -> Document {
        let mut doc = Document::new(format!("backscope bisect --dry-run b{}..b{}", self.good, self.bad));
        let list: Vec<String> = self.candidates.iter().map(|b| format!("b{b}")).collect();
        doc.paragraph(format!(
            "{} build(s) from {} between b{} and b{} (both included): {}",
            self.candidates.len(),
            self.builds,
            self.good,
            self.bad,
            list.join(" ")
        ));
        doc.paragraph(Text::plain("test: ").and_code(&self.test));
        doc.heading(2, "Planned steps");
        let steps: Vec<Text> = self.planned.iter().map(|(b, why)| Text::plain(format!("b{b}: {why}"))).collect();
        doc.push(crate::output::Block::List(steps));
        doc.paragraph(format!("at most {} step(s) if every build can be built and tested", self.steps_at_most));
        doc
    }
}
