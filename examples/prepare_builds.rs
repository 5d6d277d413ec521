//! Prepares llama.cpp builds through backscope's own build providers (the same cache directories `bisect`
//! uses), in the order given, and prints one line per build with the time it took: the CI cache warm-up for
//! tests/bisect/pypi_builds.rs (scripts/bisect-builds.sh) and the measurement behind BENCHMARKS.md's "bisect builds".
//!
//!     cargo run --example prepare_builds -- PROVIDER BACKEND[:TARGET,…] JOBS BUILD… [-- CMAKE_ARG…]
//!     cargo run --example prepare_builds -- pypi cpu 2 b11205 b11218 b11223 b11236
//!     cargo run --example prepare_builds -- pypi vulkan:llama-bench 2 b9093
//!
//! Exits 1 if a build is unbuildable (its reason and log are printed).

use std::time::Instant;

use anyhow::{bail, Context, Result};
use backscope::builds::{self, Backend, BuildFlags, BuildNumber, Prepared};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (head, cmake_args) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], args[i + 1..].to_vec()),
        None => (&args[..], Vec::new()),
    };
    let [spec, backend, jobs, builds_wanted @ ..] = head else {
        bail!("usage: prepare_builds PROVIDER BACKEND[:TARGET,…] JOBS BUILD… [-- CMAKE_ARG…]");
    };
    // The targets (default: the provider's, llama-server) follow the backend: `vulkan:llama-bench`.
    let (backend, targets) = backend.split_once(':').unwrap_or((backend, ""));
    let flags = BuildFlags {
        backend: Backend::parse(backend)?,
        cmake_args,
        targets: targets.split(',').filter(|t| !t.is_empty()).map(str::to_string).collect(),
        jobs: jobs.parse().context("JOBS")?,
    };
    let provider = builds::provider_for(spec, &builds::default_cache_dir(), flags.backend)?;
    let mut failed = false;
    for b in builds_wanted {
        let build = BuildNumber::parse(b)?;
        let started = Instant::now();
        match provider.prepare(build, &flags)? {
            Prepared::Ready { bin_dir, build_secs, from_cache } => println!(
                "{build}: ready in {:.0} s (build {build_secs:.0} s, from cache: {from_cache}) {}",
                started.elapsed().as_secs_f64(),
                bin_dir.display()
            ),
            Prepared::Unbuildable { reason, log } => {
                failed = true;
                println!("{build}: unbuildable: {reason} (log: {log:?})");
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
    Ok(())
}
