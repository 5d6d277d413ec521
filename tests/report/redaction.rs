//! The evidence bundle's redaction of a real sweep: the environment a sweep gives its servers
//! (`--env`, a spec's `env`) and what those servers print with it never leave in a bundle. A real `backscope
//! sweep` runs a real server process (python3 that prints its environment and the shapes of credentials, then never
//! becomes ready), so `run.json`, `env.json`, the records and the server logs are the sweep's own; the bundle is
//! written as an archive by `backscope report` under the bounded runner and unpacked by `tar`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::bounded::{run, Bounds, GIB};
use crate::support::sweep::{event_is, Sweep};
use crate::support::util::{files_under, stdout_ok};

/// The secret values, by where the sweep is given them. Each holds `c4n4ry` (any case), which nothing else in
/// the run does.
const BY_FLAG: &[(&str, &str)] = &[
    ("PGPASSWORD", "c4n4ry-pg-01"),
    ("MYSQL_PWD", "c4n4ry-my-02"),
    ("REDIS_PASS", "c4n4ry-rd-03"),
    // A value shaped like a Stripe key under a harmless name: the shape gives it away.
    ("GGML_NOTE", "sk_live_c4n4ry04AbCdEfGhIjKl"),
];
const BY_SPEC: &[(&str, &str)] = &[("SSHPASS", "c4n4ry-ssh-05"), ("DB_PASSPHRASE", "two words c4n4ry-06")];

/// What the server prints: its environment's secrets as logs carry them (assignments, logged JSON, a command line
/// it echoes, a URL), and credentials in the shapes command lines carry them. Then it never serves.
const SERVER: &str = r#"
import json, os, sys, time
e = os.environ
print("env: PGPASSWORD=" + e["PGPASSWORD"] + " MYSQL_PWD=" + e["MYSQL_PWD"], flush=True)
print("config " + json.dumps({"redis_pass": e["REDIS_PASS"], "note": e["GGML_NOTE"]}), flush=True)
print("sshpass -p " + e["SSHPASS"] + " ssh root@gpu-box", flush=True)
print("passphrase: " + e["DB_PASSPHRASE"], flush=True)
print("curl -u admin:c4n4ry-curl-07 https://registry.local/v2/", flush=True)
print("mysql -u root -pc4n4ry-my-08 app", flush=True)
print("fetch https://deploy:c4n4ry@09@git.example.com/o/r.git", flush=True)
print("Cookie: sid=c4n4ry-ck-10; theme=dark", flush=True)
print("GET /m.gguf?sv=2022-11-02&sig=c4n4ry-sig-11&se=2026", flush=True)
print("X-Hub-Signature-256: sha256=c4n4ry12ab", flush=True)
print("posting to https://hooks.slack.com/services/T0C4N4RY13/B0C4N4RY14/c4n4ry15XyZ", flush=True)
print("sts: ASIAC4N4RY16EXAMPLE1", flush=True)
print("load_backend: loaded CPU backend; signal handler installed; n_tokens = 512", flush=True)
time.sleep(60)
"#;

/// Where a text holds a canary (any case), with what surrounds it.
fn canary_in(text: &str) -> Option<String> {
    let at = text.to_ascii_lowercase().find("c4n4ry")?;
    let around = &text.as_bytes()[at.saturating_sub(60)..(at + 40).min(text.len())];
    Some(String::from_utf8_lossy(around).into_owned())
}

#[test]
fn a_sweeps_secret_environment_and_its_servers_credentials_leave_no_trace_in_the_bundle_archive() {
    let dir = tempfile::tempdir().unwrap();
    let env: String = BY_SPEC.iter().map(|(k, v)| format!("{k} = {v:?}, ")).collect();
    let spec = format!(
        "models = [\"m\"]\nrepetitions = 1\n[timeouts]\ngrace_s = 1\n[[endpoints]]\nname = \"pg\"\n\
         server = \"command\"\nprogram = \"python3\"\nargs = [\"-c\", {SERVER:?}, \"{{port}}\", \"--db-pass\", \
         \"c4n4ry-arg-17\"]\nenv = {{ {}GGML_VK_VISIBLE_DEVICES = \"0\" }}\nready_timeout_s = 2.0\n",
        env
    );
    let spec_path = dir.path().join("s.toml");
    std::fs::write(&spec_path, spec).unwrap();
    let flags: Vec<String> = BY_FLAG.iter().map(|(k, v)| format!("pg:{k}={v}")).collect();
    let mut args = vec!["--spec", spec_path.to_str().unwrap()];
    for f in &flags {
        args.extend(["--env", f.as_str()]);
    }
    let sweep = Sweep::start(&args, &dir.path().join("db"), &dir.path().join("runs"));
    let (status, events, stderr) = sweep.finish(Duration::from_secs(120));
    assert_eq!(status.code(), Some(1), "the never-ready cell fails: {stderr}");
    let started = events.iter().find(|e| event_is(e, "run_started")).expect("run_started");
    let run_dir = Path::new(started["run_dir"].as_str().unwrap()).to_path_buf();

    // The sweep's own files carry the secrets (else this test would prove nothing): run.json the flags' and the
    // spec's, env.json the endpoint's environment, the server log what the server printed.
    let in_run = files_under(&run_dir);
    let holding = |name: &str, value: &str| in_run.iter().any(|(f, t)| f.ends_with(name) && t.contains(value));
    for (_, v) in BY_FLAG.iter().chain(BY_SPEC) {
        assert!(holding("run.json", v), "run.json holds {v}: {:?}", in_run.get("run.json"));
        assert!(holding("env.json", v), "env.json holds {v}");
        assert!(holding(".log", v), "a server log holds {v}");
    }
    assert!(holding(".log", "c4n4ry-curl-07"), "the server ran and printed");

    let archive = dir.path().join("evidence.tar.gz");
    let bounds = Bounds { address_space: 4 * GIB, deadline: Duration::from_secs(60), ..Default::default() };
    let done = run(&["report".as_ref(), run_dir.as_os_str(), "--bundle".as_ref(), archive.as_os_str()], bounds);
    done.assert_bounded(&[0, 1], 60, GIB);
    assert!(canary_in(&done.stderr).is_none() && canary_in(&done.stdout).is_none(), "{}", done.describe());
    let unpacked = dir.path().join("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    stdout_ok(Command::new("tar").arg("-xzf").arg(&archive).arg("-C").arg(&unpacked));
    let files = files_under(&unpacked);
    let root = files.keys().next().and_then(|k| k.split('/').next()).unwrap().to_string();
    let file =
        |name: &str| files.get(&format!("{root}/{name}")).unwrap_or_else(|| panic!("{name}: {:?}", files.keys()));
    for (name, text) in &files {
        if let Some(around) = canary_in(text) {
            panic!("{name} carries a secret: …{around}…");
        }
    }
    // Every place the environment lands, with the names kept and the values replaced; harmless values stay.
    let run_json = file("run.json");
    assert!(run_json.contains("pg:PGPASSWORD=[REDACTED]"), "{run_json}");
    let env_json: serde_json::Value = serde_json::from_str(file("env.json")).unwrap();
    let endpoint_env = &env_json["endpoints"]["pg"]["env"];
    for (k, _) in BY_FLAG.iter().chain(BY_SPEC) {
        assert_eq!(endpoint_env[k], "[REDACTED]", "{k} in env.json: {endpoint_env}");
    }
    assert_eq!(endpoint_env["GGML_VK_VISIBLE_DEVICES"], "0");
    let environment = file("environment.md");
    assert!(environment.contains("PGPASSWORD=[REDACTED]"), "{environment}");
    assert!(environment.contains("GGML_VK_VISIBLE_DEVICES=0"), "{environment}");
    let logs: Vec<&String> = files.iter().filter(|(f, _)| f.ends_with(".log")).map(|(_, t)| t).collect::<Vec<_>>();
    assert!(!logs.is_empty(), "the server's log is in the bundle: {:?}", files.keys());
    for log in logs {
        assert!(log.contains("curl -u admin:[REDACTED] https://registry.local/v2/"), "{log}");
        assert!(log.contains("load_backend: loaded CPU backend; signal handler installed; n_tokens = 512"), "{log}");
    }
}
