//! Writes a sweep database of N records through backscope's own store, for `bench/report.sh` to time
//! `backscope report` on.
//!
//!     cargo run --release --example report_bench_db -- DB RUN_DIR N
//!
//! The run has 4 endpoints × 5 num_gpu values × 5 prompts (100 groups of cells) and N / 100 repetitions each, in
//! the plan order a sweep uses. Records have the shape real ones have (server argv, backend facts with their log
//! lines, server timings, client times); about 5% of the cells at num_gpu > 0 of one endpoint crash with SIGSEGV.
//! Each server start gets a log and each failed cell a log slice, in the format llama-server writes (lines of a
//! real run), so that the report reads logs the way it does on a real run. Values come from a fixed-seed
//! generator: the same N gives the same database.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use backscope::run::format::ids::{new_run_id, utc_now};
use backscope::run::format::record::{
    Api, BackendFacts, ErrorClass, LogRef, Phase, Record, RunSource, ServerRef, ServerTimings, Status, RECORD_SCHEMA,
};
use backscope::run::format::run_row::{RunRow, RunStatus};
use backscope::run::format::target::DbValue;
use backscope::run::write::store::Store;

/// xorshift64*: a fixed-seed source of numbers, not a statistical tool.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Roughly normal: the sum of four uniforms, centred and scaled.
    fn around(&mut self, mean: f64, sd: f64) -> f64 {
        let s: f64 = (0..4).map(|_| self.next()).sum::<f64>() - 2.0;
        mean + sd * s * 1.732
    }
}

const ENDPOINTS: [(&str, &str, f64); 4] = [
    ("cpu", "CPU", 40.0),
    ("vulkan", "Vulkan0 (AMD Radeon RX Vega (RADV VEGA10))", 95.0),
    ("rocm", "ROCm0 (AMD Radeon RX Vega)", 120.0),
    ("cuda", "CUDA0 (NVIDIA GeForce RTX 3060)", 150.0),
];
const NUM_GPU: [i64; 5] = [0, 1, 8, 16, -1];
const PROMPTS: [&str; 5] = ["short", "medium", "long", "code", "chat"];

/// Lines of a real llama-server log (llama.cpp 11434, -lv 4), with the device as a parameter.
fn server_log(device: &str, offloaded: u32) -> String {
    format!(
        "0.00.126.244 I srv  llama_server: initializing ...\n\
         0.00.126.620 I cmn  common_param:   - {device} (2048 MiB, 2048 MiB free)\n\
         0.00.129.716 I srv    load_model: loading model '/models/qwen3.5-2b.gguf'\n\
         0.00.214.523 I llama_prepare_model_devices: using device {device} (unknown id) - 2048 MiB free\n\
         0.00.238.472 I load_tensors: offloaded {offloaded}/25 layers to GPU\n\
         0.00.238.488 I load_tensors:   CPU_Mapped model buffer size =    20.13 MiB\n\
         0.00.253.134 I cmn  common_init_: warming up the model with an empty run - please wait ... (--no-warmup to disable)\n\
         0.01.333.047 I srv  llama_server: model loaded\n\
         0.01.333.100 I srv  llama_server: server is listening on http://127.0.0.1:8080\n"
    )
}

fn slice_log() -> &'static str {
    "0.01.367.700 I slot launch_slot_: id  3 | task 0 | processing task\n\
     0.01.367.727 I slot init_sampler: id  3 | task 0 | init sampler, took 0.01 ms, tokens: text = 2, total = 2\n\
     0.01.368.100 I slot update_slots: id  3 | task 0 | prompt processing progress, n_tokens = 2, batch.n_tokens = 2\n"
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [db, run_dir, n] = args.as_slice() else { bail!("usage: report_bench_db DB RUN_DIR N") };
    let n: usize = n.parse().context("N: a number of records")?;
    let run_dir = PathBuf::from(run_dir);
    let reps = n.div_ceil(ENDPOINTS.len() * NUM_GPU.len() * PROMPTS.len()).max(1);
    let mut store = Store::open(DbValue::read(PathBuf::from(db)).target()?)?;
    let run_id = new_run_id();
    std::fs::create_dir_all(run_dir.join("servers"))?;
    store.create_run(&RunRow {
        run_id: run_id.clone(),
        created_at: utc_now(),
        finished_at: None,
        status: RunStatus::Running,
        source: RunSource::Sweep,
        run_dir: std::path::absolute(&run_dir)?.display().to_string(),
        plan_json: "{}".into(),
        cells_total: n as u64,
        backscope_version: env!("CARGO_PKG_VERSION").into(),
        host: None,
        owner: None,
    })?;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut seq = 0u64;
    let mut start_no = 0u32;
    'all: for (ep, device, rate) in ENDPOINTS {
        for num_gpu in NUM_GPU {
            // One server per endpoint and num_gpu, as llama-server takes -ngl at start.
            start_no += 1;
            let log = format!("servers/s{start_no:03}-{ep}.log");
            let offloaded = if num_gpu < 0 { 25 } else { num_gpu.min(25) as u32 };
            let backend = if num_gpu == 0 { "CPU" } else { device };
            std::fs::write(run_dir.join(&log), server_log(device, offloaded))?;
            for prompt in PROMPTS {
                for rep in 1..=reps as u32 {
                    if seq as usize >= n {
                        break 'all;
                    }
                    let crashed = ep == "vulkan" && num_gpu > 0 && rng.next() < 0.05;
                    let dir = format!("cells/{seq:05}-{ep}-ngl{num_gpu}-e1r{rep}");
                    let decode = rng.around(rate * (1.0 + num_gpu.max(0) as f64 / 20.0), rate * 0.03).max(1.0);
                    let prompt_rate = decode * rng.around(12.0, 0.5);
                    let wall = 128.0 / decode * 1000.0 + rng.around(60.0, 5.0);
                    let mut r = Record {
                        schema: RECORD_SCHEMA,
                        run_id: run_id.clone(),
                        cell_key: format!("{ep}|qwen3.5:2b|ngl={num_gpu}|{prompt}|n=128|e1|r{rep}"),
                        seq,
                        source: RunSource::Sweep,
                        file: format!("{dir}/result.json"),
                        endpoint: ep.into(),
                        api: Some(Api::LlamaCpp),
                        managed: true,
                        model: "qwen3.5:2b".into(),
                        num_gpu,
                        prompt: prompt.into(),
                        num_predict: 128,
                        epoch: 1,
                        repetition: rep,
                        stream: true,
                        started_at: utc_now(),
                        status: Status::Ok,
                        http_status: Some(200),
                        wall_ms: Some(wall),
                        ttft_ms: Some(rng.around(45.0, 4.0)),
                        server_timings: ServerTimings {
                            total_ms: Some(wall - 20.0),
                            prompt_ms: Some(24.0 / prompt_rate * 1000.0),
                            prompt_n: Some(24),
                            cache_n: Some(0),
                            decode_ms: Some(128.0 / decode * 1000.0),
                            decode_n: Some(128),
                            stop_reason: Some("limit".into()),
                            ..Default::default()
                        },
                        prompt_tps: Some(prompt_rate),
                        decode_tps: Some(decode),
                        response_chars: 512,
                        body_bytes: 40_000,
                        backend: Some(BackendFacts {
                            backend: backend.into(),
                            devices: vec![device.into()],
                            offloaded: Some((offloaded, 25)),
                            loaded_backends: vec![],
                            evidence: vec![
                                LogRef {
                                    file: log.clone(),
                                    line: 4,
                                    text: format!("0.00.214.523 I llama_prepare_model_devices: using device {device} (unknown id) - 2048 MiB free"),
                                },
                                LogRef {
                                    file: log.clone(),
                                    line: 5,
                                    text: format!("0.00.238.472 I load_tensors: offloaded {offloaded}/25 layers to GPU"),
                                },
                            ],
                        }),
                        server: Some(ServerRef {
                            pid: 40_000 + start_no,
                            port: 8080,
                            argv: [
                                "/opt/llama.cpp/bin/llama-server",
                                "-m",
                                "/models/qwen3.5-2b.gguf",
                                "--host",
                                "127.0.0.1",
                                "--port",
                                "8080",
                                "-ngl",
                                &num_gpu.to_string(),
                                "-lv",
                                "4",
                                "--metrics",
                            ]
                            .map(String::from)
                            .to_vec(),
                            log: log.clone(),
                            start_no,
                        }),
                        log_slice: Some(format!("{dir}/server.log")),
                        ..Default::default()
                    };
                    if crashed {
                        r.status = Status::Fail;
                        r.error_class = Some(ErrorClass::Crash);
                        r.phase = Some(Phase::Request);
                        r.signal = Some("SIGSEGV".into());
                        r.signal_source = Some("wait status".into());
                        r.http_status = None;
                        r.ttf_ms = Some(rng.around(2653.0, 59.0));
                        r.wall_ms = r.ttf_ms;
                        r.decode_tps = None;
                        r.prompt_tps = None;
                        r.server_timings = ServerTimings::default();
                        std::fs::create_dir_all(run_dir.join(&dir))?;
                        std::fs::write(run_dir.join(&dir).join("server.log"), slice_log())?;
                    }
                    store.insert_record(&r)?;
                    seq += 1;
                }
            }
        }
    }
    store.set_run_status(&run_id, RunStatus::Finished)?;
    anyhow::ensure!(seq as usize == n, "wrote {seq} records, not {n}");
    eprintln!("{db}: run {run_id}, {seq} records, run directory {}", run_dir.display());
    Ok(())
}
