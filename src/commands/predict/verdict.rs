//! The verdict of a prediction against an observation, for either backend (`cuda::compare`, `vulkan::compare`).

use std::fmt;

use serde::Serialize;

/// Verdict of one prediction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Verdict {
    Confirmed,
    Contradicted,
    Unobserved,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Confirmed => "Confirmed",
            Verdict::Contradicted => "Contradicted",
            Verdict::Unobserved => "Unobserved",
        })
    }
}
