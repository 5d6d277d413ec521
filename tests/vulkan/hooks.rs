//! Which device commands the Vulkan layer hooks, asked of the loader on Mesa's lavapipe:
//! `crates/vklayer/tests/c/vkhooks.c` prints, for each command name, the shared object `vkGetDeviceProcAddr`'s
//! pointer lies in (`dladdr`). A command the layer hooks comes from the layer's library; one it leaves to the driver,
//! from lavapipe's. The expectation is the layer's own rule (crates/vklayer/src/api/mod.rs, `recording_hooked`,
//! `barriers_hooked`): a barrier hook only forwards unless the black box puts markers after barriers, and every
//! recording hook only forwards in a process the layer does not observe.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::support::layer_programs::{self, LayerPrograms};
use crate::support::util::*;

fn programs() -> &'static LayerPrograms {
    static P: std::sync::OnceLock<LayerPrograms> = std::sync::OnceLock::new();
    P.get_or_init(|| layer_programs::build("vulkan-hooks", "vkhooks", "noop"))
}

const COMMANDS: [&str; 6] =
    ["vkCmdDispatch", "vkCmdBindPipeline", "vkEndCommandBuffer", "vkCmdPipelineBarrier", "vkQueueSubmit", "vkCmdDraw"];

/// Command name to whether its pointer is in our layer's library, with our layer enabled and `env` set.
fn hooked(trace_dir: Option<&Path>, env: &[(&str, &str)]) -> BTreeMap<String, bool> {
    let p = programs();
    let mut cmd = Command::new(&p.program);
    cmd.args(COMMANDS)
        .env("VK_ADD_LAYER_PATH", &p.ours)
        .env("VK_INSTANCE_LAYERS", "VK_LAYER_BACKSCOPE_dispatch")
        .env_remove("BACKSCOPE_TRACE_DIR")
        .env_remove("BACKSCOPE_VK_MARKERS")
        .envs(env.iter().copied());
    if let Some(dir) = trace_dir {
        std::fs::create_dir_all(dir).unwrap();
        cmd.env("BACKSCOPE_TRACE_DIR", dir);
    }
    let out = stdout_ok(&mut cmd);
    let layer = vklayer_library().file_name().unwrap().to_string_lossy().into_owned();
    let rows: BTreeMap<String, String> = out
        .lines()
        .map(|l| l.split_once(' ').map(|(n, o)| (n.to_string(), o.to_string())).expect("NAME OBJECT"))
        .collect();
    assert_eq!(rows.len(), COMMANDS.len(), "{out}");
    // Every command resolves, to the layer or to lavapipe, never to nothing.
    for (name, object) in &rows {
        assert!(object.contains(&layer) || object.contains("lvp"), "{name} from {object}");
    }
    rows.into_iter().map(|(n, o)| (n, o.contains(&layer))).collect()
}

fn set(pairs: &[(&str, bool)]) -> BTreeMap<String, bool> {
    pairs.iter().map(|&(n, h)| (n.to_string(), h)).collect()
}

#[test]
fn barriers_are_hooked_only_for_markers_after_them_and_recording_only_while_observing() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("vulkan-hooks-trace-{}", std::process::id()));
    // Traced, markers at each command buffer's end (the default): recording hooked, barriers left to the driver.
    assert_eq!(
        hooked(Some(&dir.join("default")), &[]),
        set(&[
            ("vkCmdDispatch", true),
            ("vkCmdBindPipeline", true),
            ("vkEndCommandBuffer", true),
            ("vkCmdPipelineBarrier", false),
            ("vkQueueSubmit", true),
            ("vkCmdDraw", false),
        ])
    );
    // Markers after barriers: the barrier hook writes them.
    for placement in ["barrier", "sync"] {
        let got = hooked(Some(&dir.join(placement)), &[("BACKSCOPE_VK_MARKERS", placement)]);
        assert!(got["vkCmdPipelineBarrier"] && got["vkCmdDispatch"], "{placement}: {got:?}");
    }
    // Loaded without a trace destination: the layer never observes, so nothing recorded goes through it (the
    // submission still does: the layer's queue hooks also follow device loss).
    assert_eq!(
        hooked(None, &[("BACKSCOPE_VK_MARKERS", "barrier")]),
        set(&[
            ("vkCmdDispatch", false),
            ("vkCmdBindPipeline", false),
            ("vkEndCommandBuffer", false),
            ("vkCmdPipelineBarrier", false),
            ("vkQueueSubmit", true),
            ("vkCmdDraw", false),
        ])
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The bind and dispatch hooks read the cache of command buffer states (`commands::RECENT`) at every call of the
/// application's: the layer's code must address it directly, not load its address from a global offset table slot
/// (one more dependent load and cache line per call). Such a slot is a word the dynamic linker fills with the
/// static's address: an `R_X86_64_RELATIVE` relocation whose addend is that address (`readelf -r`), where `nm` gives
/// the address. A lookup inlined into generic code once brought the slot back (BENCHMARKS.md, "A real decode token's
/// layer instructions").
#[test]
fn the_hooks_address_the_cache_of_states_without_a_global_offset_table_slot() {
    let lib = vklayer_library();
    let symbols = stdout_ok(Command::new("nm").arg(&lib));
    let address = symbols
        .lines()
        .find(|l| l.contains("8commands6RECENT"))
        .and_then(|l| l.split_whitespace().next())
        .map(|a| a.trim_start_matches('0').to_string())
        .unwrap_or_else(|| panic!("no commands::RECENT among the layer's symbols:\n{symbols}"));
    let relocations = stdout_ok(Command::new("readelf").arg("-rW").arg(&lib));
    let slots: Vec<&str> = relocations
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() == 4 && f[2] == "R_X86_64_RELATIVE" && f[3].trim_start_matches('0') == address
        })
        .collect();
    assert!(relocations.contains("R_X86_64_RELATIVE"), "readelf listed no relative relocation:\n{relocations}");
    assert!(slots.is_empty(), "a global offset table slot holds commands::RECENT ({address}): {slots:?}");
}
