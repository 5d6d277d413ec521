//! `backscope doctor`'s flags, and their conversion into `backscope::commands::doctor::DoctorCommand`.

use std::path::PathBuf;
use std::time::Duration;

use backscope::commands::doctor::{DoctorCommand, DoctorOptions};
use clap::Args;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Also check whether this user can open the GPU device nodes (e.g. ollama, the service user).
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// Read the system below this directory instead of / (a copy of sysfs/proc/dev/etc); tools are not run then.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Do not run rocminfo, vulkaninfo, nvidia-smi, systemctl or ollama.
    #[arg(long)]
    pub no_tools: bool,
    /// Deadline of each tool, in seconds (0.1 to 600).
    #[arg(long, value_name = "S", default_value_t = 5.0, value_parser = super::numbers::decimal(0.1, 600.0))]
    pub tool_timeout: f64,
    /// Do not scan the installed runtimes' GPU libraries.
    #[arg(long)]
    pub no_scan: bool,
    /// Output: text (the default), --json (schema backscope.doctor/1), markdown, html.
    #[command(flatten)]
    pub output: super::output::OutputArgs,
}

impl From<DoctorArgs> for DoctorCommand {
    fn from(a: DoctorArgs) -> Self {
        DoctorCommand {
            options: DoctorOptions {
                root: a.root,
                user: a.user,
                env: None,
                tools: a.no_tools.then_some(false),
                tool_timeout: Duration::from_secs_f64(a.tool_timeout),
                scan: !a.no_scan,
            },
            output: a.output.into(),
        }
    }
}
