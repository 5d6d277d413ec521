//! Where `trace` finds the observer and the Vulkan layer: with the layer alone it still traces a Vulkan program,
//! and an install under one prefix finds both libraries with no flag or variable.

use std::process::Command;

use crate::support::util::*;

/// `trace` on a Vulkan-only program once refused to start without the CUDA/HIP observer library beside the
/// binary. A backscope with only the Vulkan layer (here: a hard link of the binary in a directory of its own, the
/// layer named by $BACKSCOPE_VKLAYER_SO) traces vulkaninfo's device and says that CUDA/HIP is not observed; with
/// neither it refuses, saying so.
#[test]
fn trace_starts_with_the_vulkan_layer_alone() {
    let alone = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let exe = alone.path().join("backscope");
    std::fs::hard_link(env!("CARGO_BIN_EXE_backscope"), &exe).unwrap();
    let layer = crate::support::util::vklayer_library();
    let traces = alone.path().join("traces");
    let mut cmd = Command::new(&exe);
    cmd.env_remove("BACKSCOPE_OBSERVER_SO").env("BACKSCOPE_VKLAYER_SO", &layer);
    cmd.args(["trace", "--json", "--dir"]).arg(&traces).args(["--", "vulkaninfo", "--summary"]);
    let out = run(&mut cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("CUDA/HIP launches are not observed: cannot find libbackscope_observer.so"), "{stderr}");
    // Where it looked, all of it: the variable, beside the binary, deps/, and the prefix's lib/backscope.
    let looked = format!(
        "($BACKSCOPE_OBSERVER_SO is not set; looked in {0}, {0}/deps, {1}/lib/backscope, for the backscope at {0}/backscope)",
        alone.path().display(),
        alone.path().parent().unwrap().display()
    );
    assert!(stderr.contains(&looked), "{looked}\n{stderr}");
    let text = String::from_utf8_lossy(&out.stdout);
    let summary: serde_json::Value = serde_json::from_str(text.trim_end().rsplit('\n').next().unwrap()).unwrap();
    assert!(!summary["devices"].as_array().unwrap().is_empty(), "the layer described vulkaninfo's device: {summary}");

    let mut cmd = Command::new(&exe);
    cmd.env_remove("BACKSCOPE_OBSERVER_SO").env_remove("BACKSCOPE_VKLAYER_SO");
    cmd.args(["trace", "--dir"]).arg(alone.path().join("none")).args(["--", "true"]);
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("nothing to observe with: neither the observer library"), "{stderr}");
}

/// An install under one prefix (the Debian package's /usr, or `cargo install`'s ~/.cargo plus the two libraries copied
/// to ~/.cargo/lib/backscope, as the README says) traces with no flag or variable: PREFIX/bin/backscope finds both
/// libraries in PREFIX/lib/backscope, and `trace --env` names them there.
#[test]
fn an_install_under_one_prefix_finds_its_libraries() {
    let prefix = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (bin, lib) = (prefix.path().join("bin"), prefix.path().join("lib/backscope"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&lib).unwrap();
    let exe = bin.join("backscope");
    std::fs::hard_link(env!("CARGO_BIN_EXE_backscope"), &exe).unwrap();
    std::fs::copy(crate::support::util::observer_library(), lib.join("libbackscope_observer.so")).unwrap();
    std::fs::copy(crate::support::util::vklayer_library(), lib.join("libbackscope_vklayer.so")).unwrap();
    let clean = |cmd: &mut Command| {
        cmd.env_remove("BACKSCOPE_OBSERVER_SO").env_remove("BACKSCOPE_VKLAYER_SO");
        cmd.env_remove("VK_ADD_LAYER_PATH").env_remove("VK_LAYER_PATH").env_remove("VK_INSTANCE_LAYERS");
    };
    let mut cmd = Command::new(&exe);
    clean(&mut cmd);
    cmd.args(["trace", "--json", "--dir"]).arg(prefix.path().join("traces")).args(["--", "vulkaninfo", "--summary"]);
    let out = run(&mut cmd);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("not observed"), "both libraries were found: {stderr}");
    let text = String::from_utf8_lossy(&out.stdout);
    let summary: serde_json::Value = serde_json::from_str(text.trim_end().rsplit('\n').next().unwrap()).unwrap();
    assert!(!summary["devices"].as_array().unwrap().is_empty(), "the installed layer described the device: {summary}");

    let mut cmd = Command::new(&exe);
    clean(&mut cmd);
    cmd.args(["trace", "--env", "--dir"]).arg(prefix.path().join("service"));
    let out = run(&mut cmd);
    let text = String::from_utf8_lossy(&out.stdout);
    let lib = lib.canonicalize().unwrap();
    assert!(text.contains(&format!("export LD_PRELOAD={}/libbackscope_observer.so\n", lib.display())), "{text}");
    // VK_ADD_LAYER_PATH, or VK_LAYER_PATH where a package's layer is installed too (src/observe/observers.rs, layer_env).
    assert!(text.contains(&format!("LAYER_PATH={}/vulkan\n", lib.display())), "{text}");
}
