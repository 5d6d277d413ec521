//! The llama.cpp build whose ggml made the choices `--verify` compares with, and the note the report carries when it
//! is not the build the rules were written for (`crate::commands::predict::vulkan::verify` obtains it; the report names it).

use std::path::PathBuf;

use crate::builds::BuildNumber;
use crate::evidence::{Claim, Confidence, Source};

/// The build whose llama-bench verified, as the report names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyingBuild {
    pub llama_bench: PathBuf,
    /// Its llama.cpp build number: the one `--build` named, else what `llama-bench --version` prints (none for a
    /// build configured without one, which says `build 0`).
    pub build: Option<BuildNumber>,
    /// Where it came from, in words (the provider and its cache directory, or the path given).
    pub origin: String,
    /// `llama-bench --version`'s first line, when it was asked (a source for the version note).
    pub version_line: Option<String>,
}

/// The note on versions: None when the verifying build is the rules' own (the rules' version names a llama.cpp build,
/// and it is that one); else a Limited claim naming both.
pub fn version_claim(rules_version: &str, rules_name: &str, rules_file: &str, by: &VerifyingBuild) -> Option<Claim> {
    let rules_build = BuildNumber::parse(rules_version).ok();
    if rules_build.is_some() && rules_build == by.build {
        return None;
    }
    let verifying = match by.build {
        Some(b) => format!("llama.cpp {b}"),
        None => "a llama.cpp build of unknown version (its llama-bench --version names no build number)".to_string(),
    };
    let statement = format!(
        "The rules are {rules_name} (--ggml {rules_version}); the pipelines they are compared with were chosen by \
         {verifying}, from {}. ggml-vulkan's choices differ between versions, so a Confirmed or Contradicted item \
         here says how the {rules_version} rules fare against that build's ggml, not against {rules_version}'s own",
        by.origin
    );
    let mut c = Claim::new("predict.vulkan.verify.version", Confidence::Limited, statement).with_source(Source::Rule {
        file: rules_file.to_string(),
        rule: "version".into(),
        upstream: rules_name.to_string(),
    });
    if let Some(line) = &by.version_line {
        c = c.with_source(Source::Command {
            argv: vec![by.llama_bench.display().to_string(), "--version".into()],
            excerpt: line.clone(),
        });
    }
    Some(c)
}
