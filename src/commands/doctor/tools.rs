//! The vendor tools, when installed: `rocminfo`, `vulkaninfo --summary`, `nvidia-smi`, plus `systemctl show
//! ollama.service` and `ollama --version`. Each runs in its own process group with a deadline and bounded output,
//! so a hung driver call cannot hang the doctor; what each printed is parsed into typed findings.

use std::time::Duration;

use serde::Serialize;

/// Output kept per stream.
const MAX_OUTPUT: usize = 256 << 10;

/// How a tool run ended.
#[derive(Clone, Debug, Serialize)]
pub struct ToolRun {
    pub argv: Vec<String>,
    /// Exit code; `None` when killed at the deadline or by a signal.
    pub exit: Option<i32>,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
    pub ms: f64,
}

impl ToolRun {
    /// The first non-empty lines of what it printed (stdout, then stderr), without ANSI colours, for a source.
    pub fn excerpt(&self, lines: usize) -> String {
        let text = format!("{}\n{}", self.stdout, self.stderr);
        let mut bytes = Vec::new();
        logs::strip_ansi(text.as_bytes(), &mut bytes);
        let clean = String::from_utf8_lossy(&bytes);
        clean.lines().map(str::trim).filter(|l| !l.is_empty()).take(lines).collect::<Vec<_>>().join(" | ")
    }

    pub fn status(&self) -> String {
        match (self.exit, self.timed_out) {
            (_, true) => format!("killed at the deadline after {:.0} ms", self.ms),
            (Some(c), _) => format!("exit {c}"),
            (None, _) => "killed by a signal".into(),
        }
    }
}

pub use crate::host::proc::which;

/// Run `argv` under the rules of [`crate::host::proc::run`] for at most `limit`, keeping `MAX_OUTPUT` bytes per stream.
pub fn run_bounded(argv: &[String], limit: Duration) -> std::io::Result<ToolRun> {
    let done = crate::host::proc::run::run_bounded(argv, &[], limit, MAX_OUTPUT)?;
    Ok(ToolRun {
        argv: argv.to_vec(),
        exit: done.exit.code,
        timed_out: done.timed_out,
        stdout: String::from_utf8_lossy(&done.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&done.stderr).into_owned(),
        ms: done.exit.after_ms,
    })
}

/// A GPU agent of `rocminfo`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RocmAgent {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub marketing_name: Option<String>,
}

/// GPU agents in rocminfo's output: each `Agent N` block's `Name:` where `Device Type:` is GPU.
pub fn parse_rocminfo(text: &str) -> Vec<RocmAgent> {
    let mut out = Vec::new();
    let mut cur: Option<(Option<String>, Option<String>, bool)> = None;
    let flush = |c: Option<(Option<String>, Option<String>, bool)>, out: &mut Vec<RocmAgent>| {
        if let Some((Some(name), marketing, true)) = c {
            out.push(RocmAgent { name, marketing_name: marketing });
        }
    };
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("Agent ") && t[6..].trim().bytes().all(|b| b.is_ascii_digit()) && t.len() > 6 {
            flush(cur.take(), &mut out);
            cur = Some((None, None, false));
            continue;
        }
        let Some(c) = cur.as_mut() else { continue };
        let Some((k, v)) = t.split_once(':') else { continue };
        let v = v.trim().to_string();
        match k.trim() {
            // The first `Name:` of a block is the agent's (ISA blocks further down repeat the key).
            "Name" if c.0.is_none() => c.0 = Some(v),
            "Marketing Name" if c.1.is_none() => c.1 = Some(v),
            "Device Type" => c.2 = v == "GPU",
            _ => {}
        }
    }
    flush(cur, &mut out);
    out
}

/// A device of `vulkaninfo --summary`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct VkDevice {
    pub index: String,
    pub name: String,
    pub device_type: String,
    pub driver: String,
    pub driver_info: String,
    pub api_version: String,
}

/// The `Devices:` section of `vulkaninfo --summary`: `GPU<N>:` blocks of `key = value` lines.
pub fn parse_vulkaninfo(text: &str) -> Vec<VkDevice> {
    let mut out: Vec<VkDevice> = Vec::new();
    let mut in_devices = false;
    for line in text.lines() {
        let t = line.trim();
        if t == "Devices:" {
            in_devices = true;
            continue;
        }
        if !in_devices {
            continue;
        }
        if let Some(idx) = t.strip_suffix(':').and_then(|s| s.strip_prefix("GPU")) {
            if idx.bytes().all(|b| b.is_ascii_digit()) && !idx.is_empty() {
                out.push(VkDevice { index: idx.to_string(), ..VkDevice::default() });
                continue;
            }
        }
        let (Some(d), Some((k, v))) = (out.last_mut(), t.split_once('=')) else { continue };
        let v = v.trim().to_string();
        match k.trim() {
            "deviceName" => d.name = v,
            "deviceType" => d.device_type = v,
            "driverName" => d.driver = v,
            "driverInfo" => d.driver_info = v,
            "apiVersion" => d.api_version = v,
            _ => {}
        }
    }
    out
}

/// A GPU of `nvidia-smi --query-gpu=index,name,compute_cap,driver_version,pci.bus_id --format=csv,noheader`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NvidiaSmiGpu {
    pub index: String,
    pub name: String,
    pub compute_cap: String,
    pub driver: String,
    pub bus_id: String,
}

pub const NVIDIA_SMI_QUERY: &str = "--query-gpu=index,name,compute_cap,driver_version,pci.bus_id";

pub fn parse_nvidia_smi(text: &str) -> Vec<NvidiaSmiGpu> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            let [index, name, cc, driver, bus] = f.as_slice() else { return None };
            index.parse::<u32>().ok()?;
            Some(NvidiaSmiGpu {
                index: index.to_string(),
                name: name.to_string(),
                compute_cap: cc.to_string(),
                driver: driver.to_string(),
                bus_id: bus.to_string(),
            })
        })
        .collect()
}

/// nvidia-smi writes bus ids with an 8-digit domain (`00000000:01:00.0`), sysfs with 4 (`0000:01:00.0`).
pub fn same_bus(a: &str, b: &str) -> bool {
    let tail = |s: &str| {
        let s = s.to_ascii_lowercase();
        let n = s.len();
        s[n.saturating_sub(7)..].to_string()
    };
    !a.is_empty() && tail(a) == tail(b)
}

/// `ollama --version`: `ollama version is 0.12.5` (a client without a server also prints a warning line).
pub fn parse_ollama_version(text: &str) -> Option<String> {
    text.lines().find_map(|l| l.trim().strip_prefix("ollama version is ").map(|v| v.trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vulkaninfo_summary_of_this_machine() {
        // `vulkaninfo --summary` here (Debian 12, Mesa 22.3.6): one lavapipe device of CPU type.
        let text = "==========\nVULKANINFO\n==========\n\nVulkan Instance Version: 1.3.239\n\n\nDevices:\n========\nGPU0:\n\tapiVersion         = 1.3.230\n\tdriverVersion      = 0.0.1\n\tvendorID           = 0x10005\n\tdeviceID           = 0x0000\n\tdeviceType         = PHYSICAL_DEVICE_TYPE_CPU\n\tdeviceName         = llvmpipe (LLVM 15.0.6, 256 bits)\n\tdriverID           = DRIVER_ID_MESA_LLVMPIPE\n\tdriverName         = llvmpipe\n\tdriverInfo         = Mesa 22.3.6 (LLVM 15.0.6)\n";
        let d = parse_vulkaninfo(text);
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].name.as_str(), d[0].device_type.as_str(), d[0].driver.as_str()),
            ("llvmpipe (LLVM 15.0.6, 256 bits)", "PHYSICAL_DEVICE_TYPE_CPU", "llvmpipe")
        );
    }

    #[test]
    fn rocminfo_gpu_agents_only() {
        // rocminfo's layout (ROCm/rocminfo rocminfo.cc: "Agent N", then "  Name:", "  Marketing Name:",
        // "  Device Type:"), a CPU agent then a GPU agent whose ISA block repeats `Name:`.
        let text = "*******\nAgent 1\n*******\n  Name:                    AMD Ryzen 7\n  Marketing Name:          AMD Ryzen 7\n  Device Type:             CPU\n*******\nAgent 2\n*******\n  Name:                    gfx906\n  Marketing Name:          AMD Radeon VII\n  Device Type:             GPU\n  ISA Info:\n    ISA 1\n      Name:                    amdgcn-amd-amdhsa--gfx906:sramecc-:xnack-\n";
        assert_eq!(
            parse_rocminfo(text),
            vec![RocmAgent { name: "gfx906".into(), marketing_name: Some("AMD Radeon VII".into()) }]
        );
    }

    #[test]
    fn nvidia_smi_csv_and_bus_ids() {
        // nvidia-smi --help-query-gpu: csv fields in the order asked; pci.bus_id is "domain:bus:device.function"
        // with the 8-digit domain nvidia-smi prints (00000000:01:00.0 in its tables).
        let g = parse_nvidia_smi("0, NVIDIA H100 80GB HBM3, 9.0, 550.54.15, 00000000:19:00.0\n");
        assert_eq!(g.len(), 1);
        assert_eq!((g[0].compute_cap.as_str(), g[0].bus_id.as_str()), ("9.0", "00000000:19:00.0"));
        assert!(same_bus("00000000:19:00.0", "0000:19:00.0"));
        assert!(!same_bus("00000000:19:00.0", "0000:1a:00.0"));
        // ollama cmd/cmd.go versionHandler: the warnings without a server, then `ollama version is X`.
        assert_eq!(parse_ollama_version("Warning: could not connect to a running Ollama instance\nWarning: client version is 0.12.5\nollama version is 0.12.5\n").as_deref(), Some("0.12.5"));
    }

    #[test]
    fn bounded_runs_end_at_the_deadline() {
        let r = run_bounded(&["sleep".to_string(), "5".to_string()], Duration::from_millis(100)).unwrap();
        assert!(r.timed_out && r.exit.is_none(), "{r:?}");
        assert!(r.ms < 4000.0, "killed before sleep 5 ended: {r:?}");
        let r = run_bounded(
            &["sh".to_string(), "-c".to_string(), "echo out; echo err >&2; exit 3".to_string()],
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!((r.exit, r.stdout.trim(), r.stderr.trim()), (Some(3), "out", "err"));
    }

    /// A vendor tool that prints and exits but leaves a daemon holding its stdout (as a driver helper can) used to
    /// hold the doctor until the daemon ended: now it returns once the tool has exited.
    #[test]
    fn a_tool_whose_daemon_keeps_its_pipe_does_not_hold_the_doctor() {
        let argv = ["sh", "-c", "echo 'GPU 0'; setsid sleep 30 & echo $! >&2"].map(String::from);
        let r = run_bounded(&argv, Duration::from_secs(20)).unwrap();
        if let Ok(daemon) = r.stderr.trim().parse::<i32>() {
            // SAFETY: the sleeper this test started (setsid in a non-leader execs in place, keeping the pid).
            unsafe { libc::kill(daemon, libc::SIGKILL) };
        }
        assert_eq!((r.exit, r.timed_out, r.stdout.trim()), (Some(0), false, "GPU 0"));
        assert!(r.ms < 5000.0, "returned after {} ms", r.ms);
    }
}
