//! The speed test: is the candidate's decode (or prompt) rate slower than the good end's by more than a factor?
//!
//! Each round is one sweep with two managed servers of the same cell, the good end's `llama-server` and the
//! candidate's, interleaved over the cell's epochs (default 3) so that drift favours neither. The rates of all
//! rounds so far are compared with Welch's interval on the log ratio (the report's endpoint-ratio interval,
//! `run_analysis::stats::welch_log_ratio`, 95%): with `r` = candidate ÷ good and the threshold `1/F`, the build is
//! bad when the whole interval lies below `1/F`, good when it lies above, and otherwise another round runs — up to
//! `--repeat` rounds (3 when `--repeat` is 1), after which the step is undecided and excluded like a skipped build.

use anyhow::Result;

use super::cell::Sweeper;
use super::check::{BuildTest, Target};
use super::options::Rate;
use crate::run::format::bisect::{Attempt, Outcome, RunEvidence};
use crate::run::format::record::Record;
use crate::run_analysis::stats::{welch_log_ratio, RatioCi};

/// Confidence level of the interval.
const LEVEL: f64 = 0.95;
/// Epochs per round when the cell names none.
const DEFAULT_EPOCHS: u32 = 3;
/// Rounds when `--repeat` is 1.
const DEFAULT_ROUNDS: u32 = 3;

pub struct SpeedTest {
    pub sweeper: Sweeper,
    pub rate: Rate,
    pub factor: f64,
    pub rounds: u32,
}

impl SpeedTest {
    pub fn new(sweeper: Sweeper, rate: Rate, factor: f64, repeat: u32) -> SpeedTest {
        let rounds = if repeat > 1 { repeat } else { DEFAULT_ROUNDS };
        SpeedTest { sweeper, rate, factor, rounds }
    }
}

/// The rates of one endpoint's successful records.
fn rates(records: &[Record], endpoint: &str, rate: Rate) -> Vec<f64> {
    records
        .iter()
        .filter(|r| r.endpoint == endpoint && r.is_ok())
        .filter_map(|r| match rate {
            Rate::Decode => r.decode_tps,
            Rate::Prompt => r.prompt_tps,
        })
        .collect()
}

/// The decision on an interval of candidate ÷ good: bad below `1/factor`, good above, else none yet.
pub fn decide(ci: &RatioCi, factor: f64) -> Option<Outcome> {
    let threshold = 1.0 / factor;
    if ci.high < threshold {
        Some(Outcome::Bad)
    } else if ci.low > threshold {
        Some(Outcome::Good)
    } else {
        None
    }
}

impl BuildTest for SpeedTest {
    fn repeats_itself(&self) -> bool {
        true
    }

    fn needs_reference(&self) -> bool {
        true
    }

    fn test(&mut self, t: &Target<'_>) -> Result<Attempt> {
        if t.is_good_end {
            return Ok(Attempt {
                outcome: Outcome::Good,
                reason: "the reference every build's speed is compared with".into(),
                runs: vec![],
                command: None,
                measured: Default::default(),
            });
        }
        let good_bin = t.reference.ok_or_else(|| anyhow::anyhow!("the speed test needs the good end's build"))?;
        let epochs = self.sweeper.cell.epochs.unwrap_or(DEFAULT_EPOCHS).max(2);
        let (mut cand, mut good, mut runs) = (Vec::new(), Vec::new(), Vec::new());
        let mut last: Option<RatioCi> = None;
        for round in 1..=self.rounds {
            let argv = self.sweeper.pair(good_bin, t.bin_dir, epochs);
            let run = self.sweeper.run(&argv, &format!("step{:03}-{}-round{round}", t.seq + 1, t.build))?;
            cand.extend(rates(&run.records, "candidate", self.rate));
            good.extend(rates(&run.records, "good", self.rate));
            let failed: Vec<String> = run.records.iter().filter(|r| !r.is_ok()).map(|r| r.outcome()).collect();
            runs.push(RunEvidence {
                run_id: run.run_id,
                run_dir: run.run_dir.display().to_string(),
                records: run.records.iter().take(8).map(|r| r.file.clone()).collect(),
                lines: vec![],
            });
            if !failed.is_empty() {
                let reason = format!("{} cell(s) failed ({}): no speed to compare", failed.len(), failed.join(", "));
                return Ok(attempt(Outcome::Skip, reason, runs, &cand, &good, last));
            }
            last = welch_log_ratio(&cand, &good, LEVEL);
            let Some(ci) = last else { continue };
            if let Some(outcome) = decide(&ci, self.factor) {
                let reason = format!(
                    "{} t/s ratio candidate/good {:.3} [{:.3}, {:.3}] ({:.0}%) vs threshold 1/{} = {:.3}, after {round} round(s)",
                    self.rate.as_str(),
                    ci.ratio,
                    ci.low,
                    ci.high,
                    LEVEL * 100.0,
                    self.factor,
                    1.0 / self.factor
                );
                return Ok(attempt(outcome, reason, runs, &cand, &good, last));
            }
        }
        let reason = match last {
            Some(ci) => format!(
                "undecided after {} round(s): ratio {:.3} [{:.3}, {:.3}] straddles 1/{}",
                self.rounds, ci.ratio, ci.low, ci.high, self.factor
            ),
            None => format!("undecided after {} round(s): too few rates to compare", self.rounds),
        };
        Ok(attempt(Outcome::Undecided, reason, runs, &cand, &good, last))
    }
}

fn attempt(
    outcome: Outcome,
    reason: String,
    runs: Vec<RunEvidence>,
    cand: &[f64],
    good: &[f64],
    ci: Option<RatioCi>,
) -> Attempt {
    let mut measured = serde_json::Map::new();
    measured.insert("candidate_tps".into(), serde_json::json!(cand));
    measured.insert("good_tps".into(), serde_json::json!(good));
    if let Some(ci) = ci {
        measured.insert("ratio".into(), serde_json::json!(ci));
    }
    Attempt { outcome, reason, runs, command: None, measured }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_below_the_threshold_is_bad_above_good_across_undecided() {
        // 30% slower with a tight spread: ratio ≈ 0.7, well below 1/1.2 ≈ 0.833.
        let good = [100.0, 101.0, 99.0, 100.5];
        let slow = [70.0, 70.5, 69.5, 70.2];
        let ci = welch_log_ratio(&slow, &good, LEVEL).unwrap();
        assert_eq!(decide(&ci, 1.2), Some(Outcome::Bad));
        let same = [100.2, 99.8, 100.1, 99.9];
        assert_eq!(decide(&welch_log_ratio(&same, &good, LEVEL).unwrap(), 1.2), Some(Outcome::Good));
        // Two noisy values each around the threshold: the interval spans 1/1.2.
        let noisy = [60.0, 105.0];
        assert_eq!(decide(&welch_log_ratio(&noisy, &good, LEVEL).unwrap(), 1.2), None);
    }
}
