//! Vulkan programs of `crates/vklayer/tests/c` built here (gcc, glslc) to run under our layer, with the test layer
//! `lost_layer.c` enabled below it (it loses the device at its `LOST_AFTER`-th wait and swallows submissions from
//! its `STALL_FROM`-th), and the one trace file the layer writes for such a run.

use std::path::{Path, PathBuf};
use std::process::Command;

use backscope::trace::TraceFile;

use crate::support::util::{stdout_ok, vklayer_library};

/// The test layer's name in its manifest.
pub const LOST_LAYER: &str = "VK_LAYER_TEST_lost";

/// A program built with its shader, and a directory with one layer manifest each for `VK_ADD_LAYER_PATH`: ours,
/// and the test layer.
pub struct LayerPrograms {
    pub program: PathBuf,
    pub spirv: PathBuf,
    pub ours: PathBuf,
    pub lost: PathBuf,
}

/// `crates/vklayer/tests/c/{name}.c` and `bench/vklayer/{shader}.comp` built into a fresh
/// `CARGO_TARGET_TMPDIR/{tag}-PID`, with the layer manifests beside them.
pub fn build(tag: &str, name: &str, shader: &str) -> LayerPrograms {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("crates/vklayer/tests/c");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (ours, lost) = (dir.join("ours"), dir.join("lost"));
    std::fs::create_dir_all(&ours).unwrap();
    std::fs::create_dir_all(&lost).unwrap();
    let spirv = dir.join(format!("{shader}.spv"));
    let program = dir.join(name);
    stdout_ok(
        Command::new("gcc")
            .args(["-O2", "-Wall", "-Werror", "-o"])
            .arg(&program)
            .arg(src.join(format!("{name}.c")))
            .arg("-lvulkan"),
    );
    stdout_ok(Command::new("glslc").arg(root.join(format!("bench/vklayer/{shader}.comp"))).arg("-o").arg(&spirv));
    let lost_lib = build_test_layer(&dir);
    write_layer_manifest(&ours, "ours.json", "VK_LAYER_BACKSCOPE_dispatch", &vklayer_library());
    write_layer_manifest(&lost, "lost.json", LOST_LAYER, &lost_lib);
    LayerPrograms { program, spirv, ours, lost }
}

/// The one trace file the layer wrote into `dir`.
pub fn the_trace(dir: &Path) -> TraceFile {
    let files: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    TraceFile::parse(&std::fs::read_to_string(&files[0]).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", files[0].display()))
}

/// The test layer below ours (`crates/vklayer/tests/c/lost_layer.c`: loses the device at its LOST_AFTER-th wait,
/// swallows submissions from its STALL_FROM-th), built into `dir`; the library's path.
fn build_test_layer(dir: &Path) -> PathBuf {
    let lib = dir.join("liblost_layer.so");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/vklayer/tests/c/lost_layer.c");
    stdout_ok(Command::new("gcc").args(["-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-o"]).arg(&lib).arg(src));
    lib
}

/// Writes a Vulkan explicit-layer manifest naming layer `name` in `library` into `dir` (as `FILE`), for
/// `VK_ADD_LAYER_PATH`.
fn write_layer_manifest(dir: &Path, file: &str, name: &str, library: &Path) {
    let manifest = serde_json::json!({
        "file_format_version": "1.1.2",
        "layer": {
            "name": name, "type": "GLOBAL", "library_path": library, "api_version": "1.3.0",
            "implementation_version": "1", "description": "test",
            "functions": {"vkNegotiateLoaderLayerInterfaceVersion": "vkNegotiateLoaderLayerInterfaceVersion"}
        }
    });
    std::fs::write(dir.join(file), manifest.to_string()).unwrap();
}
