//! `backscope maps`'s flags, and their conversion into `backscope::commands::maps::MapsOptions`.

use std::time::Duration;

use backscope::commands::maps::MapsOptions;
use clap::Args;

#[derive(Debug, Args)]
pub struct MapsArgs {
    /// Process IDs to read (their children are followed too).
    #[arg(value_name = "PID", required_unless_present = "name")]
    pub pids: Vec<u32>,
    /// Processes whose name (/proc/PID/comm), executable or first argument is NAME: ollama, llama-server, …
    #[arg(long, value_name = "NAME")]
    pub name: Vec<String>,
    /// Re-read until every watched process has exited (or Ctrl-C), keeping everything that was ever mapped:
    /// runners come and go.
    #[arg(long)]
    pub watch: bool,
    /// With --watch: seconds between reads (0.01 to 3600).
    #[arg(long, default_value_t = 0.5, value_name = "SECONDS", requires = "watch",
          value_parser = super::numbers::decimal(0.01, 3600.0))]
    pub interval: f64,
    /// Answer for this GPU too (gfx1201, sm_86, …), besides the AMD GPUs found in the KFD topology.
    #[arg(long, value_name = "ARCH")]
    pub arch: Vec<String>,
    /// Output: text (the default), --json (the processes, libraries and claims; schema backscope.maps/1),
    /// markdown, html.
    #[command(flatten)]
    pub output: super::output::OutputArgs,
}

impl From<MapsArgs> for MapsOptions {
    fn from(a: MapsArgs) -> Self {
        MapsOptions {
            pids: a.pids,
            names: a.name,
            watch: a.watch,
            interval: Duration::from_secs_f64(a.interval),
            archs: a.arch,
            output: a.output.into(),
        }
    }
}
