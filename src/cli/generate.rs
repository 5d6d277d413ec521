//! `backscope generate man|completions|vulkan-manifest DIR` (hidden): the files a package installs beside the binary,
//! made from the same definitions the binary runs with, so they cannot drift from it: manual pages and shell
//! completions from clap's command tree, the Vulkan layer's manifest from `backscope::observe::observers::manifest_text`.
//! `scripts/package-deb.sh` calls it between the release build and `cargo deb`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
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

/// Writes what `args` asks for; `cli` is the whole command line's definition (`Cli::command()`), passed in by the
/// module that defines it.
pub fn run(args: GenerateArgs, cli: clap::Command) -> Result<u8> {
    match args.what {
        Generated::Man { dir } => {
            create(&dir)?;
            let mut cli = cli.disable_help_subcommand(true);
            cli.build();
            let source = format!("backscope {}", cli.get_version().unwrap_or_default());
            write_pages(&cli, &source, &dir)?;
        }
        Generated::Completions { dir } => {
            create(&dir)?;
            let mut cli = cli;
            for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
                clap_complete::generate_to(shell, &mut cli, "backscope", &dir)
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
            std::fs::write(&path, backscope::observe::observers::manifest_text(&library))
                .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(backscope::exit::OK)
}

/// The page of `cmd` (its display name, `backscope-trace`, is the file's) and of each visible command under it, all
/// from one source line (`backscope VERSION`): clap_mangen's own walk would give each command's name without the
/// version, which only the top command carries.
fn write_pages(cmd: &clap::Command, source: &str, dir: &Path) -> Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, source, dir)?;
    }
    let page = clap_mangen::Man::new(cmd.clone()).source(source).manual("backscope manual");
    page.generate_to(dir).with_context(|| format!("writing {}", dir.join(page.get_filename()).display()))?;
    Ok(())
}

fn create(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}
