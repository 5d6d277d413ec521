//! The rule of issue 17: a command's module never imports another command's. Shared code lives in ground-floor
//! modules (`proc`, `gpucode`, `observe`, `trace_summary`, `logfacts`, `gguf_file`, `knowledge`, `inputs`, `output`,
//! `support_matrix`, `run` with `run::summary` — the one aggregation of a run's records that `sweep` and `report`
//! both show —, `builds`, …). This reads every file under a command's folder (or the command's own file) for
//! `crate::OTHER` paths and fails on any pair.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Command modules: a folder `src/NAME/` or a file `src/NAME.rs`.
const COMMANDS: &[&str] =
    &["scan", "sweep", "tracecmd", "maps", "predict", "gate", "doctor", "logscmd", "report", "synth", "bisect", "push"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The command a file belongs to, if any.
fn command_of(src: &Path, file: &Path) -> Option<&'static str> {
    let first = file.strip_prefix(src).ok()?.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    COMMANDS.iter().copied().find(|c| *c == name)
}

/// Every `crate::NAME` in `text` (outside `//` comments) whose NAME is a command.
fn commands_named(text: &str) -> BTreeSet<&'static str> {
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            // `crate::{a, b::c}` names several; `crate::a` one.
            let names: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group.split('}').next().unwrap_or("").split(',').collect(),
                None => vec![rest],
            };
            for name in names {
                let name: String = name.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                if let Some(c) = COMMANDS.iter().copied().find(|c| *c == name) {
                    found.insert(c);
                }
            }
        }
    }
    found
}

#[test]
fn no_command_imports_another_commands_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut pairs: BTreeMap<(&str, &str), Vec<String>> = BTreeMap::new();
    for file in &files {
        let Some(from) = command_of(&src, file) else { continue };
        let text = std::fs::read_to_string(file).unwrap();
        for to in commands_named(&text) {
            if to != from {
                pairs.entry((from, to)).or_default().push(file.strip_prefix(&src).unwrap().display().to_string());
            }
        }
    }
    assert!(
        pairs.is_empty(),
        "a command imports another command's module (move the shared code to the ground floor): {pairs:?}"
    );
}

#[test]
fn the_reader_finds_paths_and_skips_comments() {
    let text = "use crate::sweep::record::Record; // crate::gate::x\nlet x = crate::proc::stat::stat(1);\n  crate::predict::run()";
    assert_eq!(commands_named(text), BTreeSet::from(["sweep", "predict"]));
    assert_eq!(commands_named("use crate::{output, maps::proc, synth};"), BTreeSet::from(["maps", "synth"]));
}

/// The ground floor lies under the commands: no shared module (nor its tests) imports a command's module. The binary's
/// `cli/`, `main.rs` and `lib.rs` are above every command and may name them all.
#[test]
fn no_floor_module_imports_a_command() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let top = rel.components().next().unwrap().as_os_str().to_str().unwrap();
        if command_of(&src, file).is_some() || ["cli", "main.rs", "lib.rs"].contains(&top) {
            continue;
        }
        let named = commands_named(&std::fs::read_to_string(file).unwrap());
        if !named.is_empty() {
            found.push(format!("{} → {named:?}", rel.display()));
        }
    }
    assert!(found.is_empty(), "a ground-floor module imports a command (move what it needs down): {found:?}");
}
