//! The note a report carries when the llama.cpp build whose ggml made the choices `--verify` compares with is not the
//! build the rules were written for (`super::verify` obtains the build).

use super::super::options::VerifyingBuild;
use crate::builds::BuildNumber;
use crate::evidence::{Claim, Confidence, Source};

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
