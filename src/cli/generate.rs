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
