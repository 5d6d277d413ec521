//! `backscope maps` on real running processes: a llama-server (the sweep tests' Vulkan build, on Mesa's lavapipe)
//! and a HIP program built here with Debian's hipcc (it maps libamdhip64 without a GPU). Nothing needs root; every
//! process started here is stopped by its PID.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::sweep::{heavy, llama_bin, tiny_model};
use crate::support::util::*;

/// A child that is killed and reaped when dropped (a failed assertion must not leave it running).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn maps_json(args: &[&str]) -> Value {
    let out = run(backscope().arg("maps").arg("--json").args(args));
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// (class, backend) of the mapped library whose file name starts with `prefix`.
fn class_of<'a>(report: &'a Value, prefix: &str) -> Option<(&'a str, Option<&'a str>)> {
    report["libraries"].as_array().unwrap().iter().find_map(|l| {
        let path = l["path"].as_str().unwrap();
        let name = path.rsplit('/').next().unwrap();
        name.starts_with(prefix).then(|| (l["class"].as_str().unwrap(), l["backend"].as_str()))
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn a_running_llama_server_is_listed_and_classified() {
    let _turn = heavy();
    let bin = llama_bin();
    let model = tiny_model();
    let port = free_port();
    let server = Running(
        Command::new(bin.join("llama-server"))
            .args(["-m"])
            .arg(&model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--device", "Vulkan0", "-ngl", "99"])
            .env("GGML_VK_VISIBLE_DEVICES", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start llama-server"),
    );
    let pid = server.0.id();
    // Ready when /health answers 200: the Vulkan device and the model are loaded by then.
    let started = Instant::now();
    loop {
        let ok = ureq::get(&format!("http://127.0.0.1:{port}/health")).call().is_ok_and(|r| r.status() == 200);
        if ok {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "llama-server did not become ready");
        std::thread::sleep(Duration::from_millis(200));
    }
    let by_name = maps_json(&["--name", "llama-server"]);
    let ours = by_name["processes"].as_array().unwrap().iter().find(|p| p["pid"] == pid);
    assert!(ours.is_some(), "--name llama-server finds pid {pid}: {}", by_name["processes"]);
    let report = maps_json(&[&pid.to_string()]);
    // What the build directory holds (ggml's backends) and what Debian's Vulkan stack installs.
    assert_eq!(class_of(&report, "libggml-vulkan.so"), Some(("ggml", Some("vulkan"))));
    assert_eq!(class_of(&report, "libggml-cpu.so"), Some(("ggml", Some("cpu"))));
    assert_eq!(class_of(&report, "libggml-base.so").map(|c| c.0), Some("ggml"));
    assert_eq!(class_of(&report, "libvulkan.so.1").map(|c| c.0), Some("vulkan-loader"));
    assert_eq!(class_of(&report, "libvulkan_lvp.so").map(|c| c.0), Some("vulkan-icd"), "lavapipe is the device in use");
    assert_eq!(class_of(&report, "libc.so.6").map(|c| c.0), Some("other"));
    // Every library in the report is in /proc/PID/maps, read here independently.
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    for l in report["libraries"].as_array().unwrap() {
        assert!(maps.contains(l["path"].as_str().unwrap()), "{l}");
    }
    let vulkan = report["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["path"].as_str().unwrap().contains("libggml-vulkan"))
        .unwrap();
    assert_eq!(vulkan["soname"], "libggml-vulkan.so.0", "from its ELF dynamic section");
    // Claims: Confirmed for the mapping, and every one says it is no evidence of dispatch.
    let claims = report["claims"].as_array().unwrap();
    assert!(claims.iter().any(|c| c["statement"].as_str().unwrap().contains("libggml-vulkan")));
    for c in claims {
        assert_eq!(c["confidence"], "Confirmed");
        assert!(c["statement"].as_str().unwrap().ends_with("loaded — not evidence of dispatch"), "{c}");
    }
    drop(server);
}

/// A HIP program that asks the runtime for devices, says so, then sleeps for the seconds in argv[1].
const SLEEPER_HIP: &str = r#"
#include <hip/hip_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__global__ void scale(float *x, float a) { x[threadIdx.x] *= a; }
int main(int argc, char **argv) {
    int n = -1;
    hipError_t rc = hipGetDeviceCount(&n);
    printf("ready rc=%d\n", (int)rc);
    fflush(stdout);
    sleep(argc > 1 ? atoi(argv[1]) : 30);
    return 0;
}
"#;

fn hip_sleeper(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("sleeper.hip");
    std::fs::write(&src, SLEEPER_HIP).unwrap();
    let exe = dir.join("hip-sleeper");
    stdout_ok(hipcc().arg("--offload-arch=gfx906").arg(&src).arg("-o").arg(&exe));
    exe
}

/// Wait until the child printed its first line (the HIP runtime is loaded by then).
fn wait_ready(child: &mut Child) {
    use std::io::BufRead;
    let out = child.stdout.take().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(out).read_line(&mut line).unwrap();
    assert!(line.starts_with("ready"), "{line}");
}

#[test]
fn a_hip_program_under_a_shell_is_followed_and_classified() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = hip_sleeper(tmp.path());
    // The shell is the watched process; the HIP program is its child.
    let mut shell =
        Running(Command::new("sh").arg("-c").arg("\"$0\" 30 & wait").arg(&exe).stdout(Stdio::piped()).spawn().unwrap());
    wait_ready(&mut shell.0);
    let report = maps_json(&["--arch", "gfx906", &shell.0.id().to_string()]);
    let procs = report["processes"].as_array().unwrap();
    let child = procs.iter().find(|p| p["exe"] == exe.display().to_string()).expect("the child is followed");
    assert_eq!(child["ppid"], shell.0.id());
    assert_eq!(child["root"], shell.0.id());
    assert_eq!(class_of(&report, "libamdhip64.so").map(|c| c.0), Some("hip-runtime"));
    assert_eq!(class_of(&report, "libhsa-runtime64.so").map(|c| c.0), Some("hip-runtime"));
    // The program itself carries gfx906 code, and the scan's answer for the GPU asked about says it runs.
    let me = report["libraries"].as_array().unwrap().iter().find(|l| l["path"] == exe.display().to_string()).unwrap();
    assert_eq!(me["class"], "executable");
    assert_eq!(me["targets"][0], "gfx906");
    assert_eq!(me["on_gpus"][0]["arch"], "gfx906");
    assert_ne!(me["on_gpus"][0]["verdict"], "nothing");
    // Text: each watched process's summary first, within 120 columns; in Markdown (read by pulldown-cmark) the
    // program's row of its process's table names its class and the verdict for the GPU asked about.
    let args = ["maps", "--arch", "gfx906", &shell.0.id().to_string()];
    let text = stdout_ok(backscope().env("COLUMNS", "120").args(args));
    crate::support::output::assert_fits(&text, 120);
    assert!(text.starts_with(&format!("[Confirmed] sh (pid {}) has ", shell.0.id())), "{text}");
    let markdown = stdout_ok(backscope().args(args).args(["--format", "markdown"]));
    let tables = crate::support::output::html_tables(&crate::support::output::commonmark(&markdown));
    assert_eq!(tables.len(), procs.len(), "a table per process");
    let row = tables.iter().flat_map(|(_, rows)| rows).find(|r| r[0] == exe.display().to_string()).expect("its row");
    let verdict = me["on_gpus"][0]["verdict"].as_str().unwrap();
    assert_eq!((row[1].as_str(), row[4].clone()), ("executable", format!("gfx906; gfx906: {verdict}")));
    // A vanished PID is a clear error: kill the child, reap it, ask again.
    let child_pid = child["pid"].as_u64().unwrap();
    drop(shell);
    let _ = Command::new("kill").arg(child_pid.to_string()).status();
    let started = Instant::now();
    while Path::new(&format!("/proc/{child_pid}")).exists() && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = run(backscope().arg("maps").arg(child_pid.to_string()));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("process {child_pid} does not exist")), "{err}");
}

#[test]
fn watch_ends_when_the_process_exits_and_keeps_what_it_mapped() {
    let tmp = tempfile::tempdir().unwrap();
    let exe = hip_sleeper(tmp.path());
    let mut prog = Running(Command::new(&exe).arg("2").stdout(Stdio::piped()).spawn().unwrap());
    wait_ready(&mut prog.0);
    let started = Instant::now();
    let out = run(backscope().args(["maps", "--json", "--watch", "--interval", "0.2", &prog.0.id().to_string()]));
    assert!(started.elapsed() < Duration::from_secs(30), "watch ended after the exit");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("standard output is the JSON alone");
    // Progress goes to standard error, one line per process read.
    let progress = format!("maps: pid {} (hip-sleeper): reading its mappings", prog.0.id());
    assert_eq!(stderr.lines().collect::<Vec<_>>(), [progress.as_str()], "{stderr}");
    let p = &report["processes"][0];
    assert_eq!(p["exited"], true);
    assert!(report["watch"]["snapshots"].as_u64().unwrap() >= 2);
    assert_eq!(class_of(&report, "libamdhip64.so").map(|c| c.0), Some("hip-runtime"));
}
