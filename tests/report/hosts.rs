//! `report --hosts` across hosts that keep the same GGUF file at different paths: the pivot keys a model by the
//! file's identity (name, size, header digest), not by the path each host recorded.

use std::time::Duration;

use serde_json::Value;

use crate::support::sweep::{heavy, llama_bin, tiny_model, Sweep};
use crate::support::util::{backscope, stdout_ok};

#[test]
fn the_same_gguf_at_two_paths_on_two_hosts_is_one_row_of_the_host_pivot() {
    let _turn = heavy();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fleet.db");
    // The same blob where two hosts' Ollama installs keep it: under the service's home and under a user's.
    let blob = "sha256-6a0746a1ec1aef3e7ec53868f220ff6e389f6f8ef87a01d77c96807de94ca2aa";
    let paths =
        [dir.path().join("usr/share/ollama/.ollama/models/blobs"), dir.path().join("home/u/.ollama/models/blobs")];
    for (host, p) in ["host-a", "host-b"].iter().zip(&paths) {
        std::fs::create_dir_all(p).unwrap();
        std::fs::copy(tiny_model(), p.join(blob)).unwrap();
        let mut cmd = backscope();
        cmd.env("BACKSCOPE_HOST_ID", host).arg("sweep").arg("--json").arg("--db").arg(&db);
        cmd.arg("--runs-dir").arg(dir.path().join("runs")).args(["--server", "cpu=llama-server:--device,none"]);
        cmd.arg("--llama-bin").arg(llama_bin()).arg("--model").arg(p.join(blob));
        cmd.args(["--num-gpu", "0", "--repetitions", "2", "--num-predict", "4", "--prompt", "Hello"]);
        let (status, _, err) = Sweep::spawn(cmd).finish(Duration::from_secs(300));
        assert!(status.success(), "{err}");
    }
    let report: Value =
        serde_json::from_str(&stdout_ok(backscope().args(["report", "--hosts", "--json"]).arg(&db))).unwrap();
    let points = report["points"].as_array().unwrap();
    assert_eq!(points.len(), 1, "one model, not one per path: {points:?}");
    let p = &points[0];
    let hosts: Vec<(&str, u64)> = p["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["host_id"].as_str().unwrap(), h["cells"].as_u64().unwrap()))
        .collect();
    assert_eq!(hosts, [("host-a", 2), ("host-b", 2)]);
    assert_eq!(p["model"], blob);
    let size = std::fs::metadata(tiny_model()).unwrap().len();
    assert_eq!((p["model_file"]["name"].as_str(), p["model_file"]["size"].as_u64()), (Some(blob), Some(size)));
    assert_eq!(p["model_file"]["header_sha256"].as_str().map(str::len), Some(64));
    let mut recorded: Vec<String> = paths.iter().map(|d| d.join(blob).display().to_string()).collect();
    recorded.sort();
    assert_eq!(p["recorded_as"], serde_json::json!(recorded));
}
