//! `backscope generate man|completions|vulkan-manifest DIR` (hidden): the files a package installs beside the binary,
//! made from the same definitions the binary runs with, so they cannot drift from it: manual pages and shell
//! completions from clap's command tree, the Vulkan layer's manifest from `backscope::observe::manifest_text`.
//! `scripts/package-deb.sh` calls it between the release build and `cargo deb`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, CommandFactory, Subcommand};
use clap_complete::Shell;

#[derive(Debug, Args)]
pub struct GenerateArgs {
    #[command(subcommand)]
    pub what: Generated,
}

#[derive(Debug, Subcommand)]
pub enum Generated {
    /// Manual pages: backscope.1, and backscope-COMMAND.1 for each command.
    Man {
        /// Directory to write them to (created if missing).
        dir: PathBuf,
    },
    /// Shell completions: backscope.bash, _backscope (zsh) and backscope.fish.
    Completions {
        /// Directory to write them to (created if missing).
        dir: PathBuf,
    },
    /// The Vulkan layer's manifest (VkLayer_backscope_dispatch.json), naming the layer library where it will be
    /// installed.
    VulkanManifest {
        /// The layer library's installed path (absolute).
        #[arg(long, value_name = "PATH", default_value = "/usr/lib/backscope/libbackscope_vklayer.so")]
        library: PathBuf,
        /// Directory to write it to (created if missing).
        dir: PathBuf,
    },
}

pub fn run(args: GenerateArgs) -> Result<u8> {
    match args.what {
        Generated::Man { dir } => {
            create(&dir)?;
            clap_mangen::generate_to(super::Cli::command(), &dir)
                .with_context(|| format!("writing manual pages to {}", dir.display()))?;
        }
        Generated::Completions { dir } => {
            create(&dir)?;
            for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
                clap_complete::generate_to(shell, &mut super::Cli::command(), "backscope", &dir)
                    .with_context(|| format!("writing {shell} completions to {}", dir.display()))?;
            }
        }
        Generated::VulkanManifest { library, dir } => {
            anyhow::ensure!(
                library.is_absolute(),
                "--library {}: the loader needs an absolute path",
                library.display()
            );
            create(&dir)?;
            let path = dir.join(trace_format::vulkan::MANIFEST_FILE);
            std::fs::write(&path, backscope::observe::manifest_text(&library))
                .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(backscope::exit::OK)
}

fn create(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    fn generate(args: &[&str]) {
        let cli = super::super::Cli::try_parse_from(["backscope", "generate"].iter().chain(args)).unwrap();
        let super::super::Command::Generate(a) = cli.command else { panic!("not generate") };
        assert_eq!(run(a).unwrap(), backscope::exit::OK);
    }

    #[test]
    fn every_command_gets_a_page_and_every_shell_its_completions() {
        let dir = tempfile::tempdir().unwrap();
        let man = dir.path().join("man");
        generate(&["man", man.to_str().unwrap()]);
        let commands: Vec<String> = super::super::Cli::command()
            .get_subcommands()
            .filter(|c| !c.is_hide_set())
            .map(|c| c.get_name().to_string())
            .collect();
        assert!(commands.len() >= 12 && !commands.contains(&"generate".to_string()), "{commands:?}");
        for name in std::iter::once("backscope".to_string()).chain(commands.iter().map(|c| format!("backscope-{c}"))) {
            let page = std::fs::read_to_string(man.join(format!("{name}.1"))).unwrap();
            assert!(page.starts_with(".ie \\n(.g .ds Aq") || page.contains(".TH"), "{name}: {page}");
        }
        let completions = dir.path().join("completions");
        generate(&["completions", completions.to_str().unwrap()]);
        for (file, flag) in
            [("backscope.bash", "--vklayer"), ("_backscope", "--vklayer"), ("backscope.fish", "-l vklayer")]
        {
            let text = std::fs::read_to_string(completions.join(file)).unwrap();
            assert!(text.contains(flag), "{file} completes trace's flags");
        }
        let layer = "/usr/lib/backscope/libbackscope_vklayer.so";
        generate(&["vulkan-manifest", "--library", layer, dir.path().to_str().unwrap()]);
        let manifest = std::fs::read(dir.path().join(trace_format::vulkan::MANIFEST_FILE)).unwrap();
        assert_eq!(manifest, backscope::observe::manifest_text(Path::new(layer)), "the text trace recognises");
    }
}
