//! The floors of `src/`, read off the folder tree: every command is a folder or file under `src/commands/`, and
//! everything else in `src/` (except the binary's `cli/`, `main.rs` and `lib.rs`, which sit above every command)
//! is floor. Two rules, with no exceptions: a command never names another command (`crate::commands::OTHER`), and
//! no floor module names a command at all. Shared code lives on the floor.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

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

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The command a file belongs to (`src/commands/NAME/…` or `src/commands/NAME.rs`), if any.
fn command_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src.join("commands")).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    (first != "mod.rs").then(|| first.strip_suffix(".rs").unwrap_or(first).to_string())
}

/// Every command NAME in `crate::commands::NAME` paths of `text` (outside `//` comments), also inside
/// `crate::commands::{a, b::c}` groups.
fn commands_named(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::commands::") {
            rest = &rest[at + "crate::commands::".len()..];
            let names: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group.split('}').next().unwrap_or("").split(',').collect(),
                None => vec![rest],
            };
            for name in names {
                let name: String = name.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                if !name.is_empty() && name != "self" {
                    found.insert(name);
                }
            }
        }
    }
    found
}

#[test]
fn every_command_is_under_src_commands_and_src_has_no_other_command() {
    let src = src();
    let mut commands: Vec<String> = std::fs::read_dir(src.join("commands"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(|n| n.trim_end_matches(".rs").to_string()))
        .filter(|n| n != "mod")
        .collect();
    commands.sort();
    // The subcommands the binary offers, as `backscope --help` lists them (less `help` and the hidden `generate`).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_backscope")).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let mut listed: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // A command's name starts a line at two spaces; its wrapped description goes on further in.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|n| n != "help")
        .collect();
    listed.sort();
    assert_eq!(commands, listed, "src/commands/ holds exactly the subcommands `backscope --help` lists");
}

#[test]
fn no_command_imports_another_commands_module() {
    let src = src();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut pairs: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for file in &files {
        let Some(from) = command_of(&src, file) else { continue };
        let text = std::fs::read_to_string(file).unwrap();
        for to in commands_named(&text) {
            if to != from {
                pairs
                    .entry((from.clone(), to))
                    .or_default()
                    .push(file.strip_prefix(&src).unwrap().display().to_string());
            }
        }
    }
    assert!(
        pairs.is_empty(),
        "a command imports another command's module (move the shared code to the floor): {pairs:?}"
    );
}

#[test]
fn the_reader_finds_paths_and_skips_comments() {
    let text = "use crate::commands::sweep::record::Record; // crate::commands::gate::x\nlet x = crate::host::proc::stat::stat(1);\n  crate::commands::predict::run()";
    assert_eq!(commands_named(text), BTreeSet::from(["sweep".to_string(), "predict".to_string()]));
    assert_eq!(
        commands_named("use crate::commands::{self, maps::proc, synth};"),
        BTreeSet::from(["maps".to_string(), "synth".to_string()])
    );
}

/// The floor lies under the commands: no floor module (nor its tests) names a command. The binary's `cli/`,
/// `main.rs` and `lib.rs` are above every command and may name them all.
#[test]
fn no_floor_module_imports_a_command() {
    let src = src();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let top = rel.components().next().unwrap().as_os_str().to_str().unwrap();
        if ["commands", "cli", "main.rs", "lib.rs"].contains(&top) {
            continue;
        }
        let named = commands_named(&std::fs::read_to_string(file).unwrap());
        if !named.is_empty() {
            found.push(format!("{} → {named:?}", rel.display()));
        }
    }
    assert!(found.is_empty(), "a floor module imports a command (move what it needs down): {found:?}");
}
