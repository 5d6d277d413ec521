//! The device and build a Vulkan prediction is for: a profile of `data/vulkan_devices.toml` or the device a
//! trace's Vulkan layer recorded, and the shaders the build's `libggml-vulkan.so` embeds.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};

use super::super::options::DeviceSource;
use super::prediction::{VkBuildInfo, VkDeviceInfo, MAX_LIBRARY_BYTES};
use crate::gpu::knowledge::vulkan_dispatch::{self as vkd, build_facts, Fact, Facts};

/// The Vulkan layer's device facts mapped onto the rules' names: the driver name as ggml's driver ids say it.
fn driver_id(driver: &str) -> &'static str {
    let d = driver.to_ascii_lowercase();
    if d.contains("radv") {
        "radv"
    } else if d.contains("amd open-source") || d.contains("amdvlk") {
        "amdvlk"
    } else if d.contains("amd proprietary") {
        "amd_proprietary"
    } else if d.contains("intel open-source") || d.contains("anv") {
        "anv"
    } else if d.contains("intel") {
        "intel_windows"
    } else if d.contains("nvidia") {
        "nvidia"
    } else if d.contains("llvmpipe") {
        "llvmpipe"
    } else if d.contains("honeykrisp") {
        "honeykrisp"
    } else if d.contains("imagination") {
        "imagination_proprietary"
    } else {
        "other"
    }
}

/// The facts a profile does not give and a trace record does not carry, with the value assumed.
const TRACE_ASSUMED: &[(&str, Fact)] = &[("shared_memory", Fact::Int(32768))];

/// ggml-vulkan's shader core count for a traced device: the layer's record (what the driver reported through the
/// extension ggml reads) over a profile; unknown in traces of layers that did not record it, unless a profile gives
/// it. Returns the count, whether it is known, and where it came from.
fn shader_core_count(
    d: &crate::observe::trace_summary::kernels::DeviceSummary,
    profile: Option<&vkd::DeviceProfile>,
    profile_facts: &Facts,
) -> (i64, bool, String) {
    let from_profile = |p: &vkd::DeviceProfile| {
        let n = profile_facts.get("shader_core_count").and_then(Fact::as_int).unwrap_or(0);
        (n, true, format!("profile {}", p.id))
    };
    match (d.shader_core_count, d.shader_core_count_from.as_deref()) {
        (Some(n), Some(ext)) if ext != "none" => {
            (i64::from(n), true, format!("the layer's device record ({ext}, as ggml-vulkan.cpp:4226-4229 reads it)"))
        }
        // Neither extension offered: ggml's count is 0 (4232-4233), except on Intel, where it looks the device
        // id up (4230-4231, ggml_vk_intel_shader_core_count), which only a profile says.
        (Some(_), _) if d.vendor_id != INTEL_VENDOR_ID => (
            0,
            true,
            "the layer's device record (no VK_NV_shader_sm_builtins or VK_AMD_shader_core_properties2: ggml counts \
             0, ggml-vulkan.cpp:4232-4233)"
                .into(),
        ),
        _ => match profile {
            Some(p) => from_profile(p),
            None => (0, false, "not known: the trace's device record does not carry it and no profile matches".into()),
        },
    }
}

const INTEL_VENDOR_ID: u32 = 0x8086;

/// ggml-vulkan's environment switches that turn an offered feature off, as the layer's device record names them,
/// and the fact each one sets for the rules (ggml-vulkan.cpp 4063, 4071, 4079, 4084, 4272).
const GGML_SWITCHES: [(&str, &str); 5] = [
    ("GGML_VK_DISABLE_COOPMAT", "disable_coopmat_env"),
    ("GGML_VK_DISABLE_COOPMAT2", "disable_coopmat2_env"),
    ("GGML_VK_DISABLE_INTEGER_DOT_PRODUCT", "disable_integer_dot_env"),
    ("GGML_VK_DISABLE_BFLOAT16", "disable_bfloat16_env"),
    ("GGML_VK_DISABLE_F16", "disable_f16_env"),
];

fn device_from_trace(dir: &Path) -> Result<(VkDeviceInfo, Facts, Vec<String>)> {
    let read = crate::trace::read_dir_folded(dir).with_context(|| format!("reading traces in {}", dir.display()))?;
    let devices = crate::observe::trace_summary::kernels::DeviceSummary::of(&read.traces);
    let Some(d) = devices.first() else {
        bail!("{}: no Vulkan device record (trace with the Vulkan layer: backscope trace --vklayer …)", dir.display());
    };
    let libraries: Vec<String> = crate::observe::vulkan::capability::trace_libraries(&read.traces)
        .into_iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let profile = vkd::profiles().iter().find(|p| d.name.contains(&p.match_name));
    let mut facts = match profile {
        Some(p) => p.facts()?,
        None => vkd::default_facts(),
    };
    let mut assumed = Vec::new();
    if profile.is_none() {
        for (k, v) in TRACE_ASSUMED {
            facts.insert(k.to_string(), v.clone());
            assumed.push(format!("{k} = {v}"));
        }
    }
    let (cores, cores_known, cores_from) = shader_core_count(d, profile, &facts);
    facts.insert("shader_core_count".into(), Fact::Int(cores));
    facts.insert("shader_core_count_known".into(), Fact::Bool(cores_known));
    if !cores_known {
        assumed.push(format!("shader_core_count = 0 ({}): whether ggml splits K is left undecided", cores_from));
    }
    let flag = |n: &str| d.flags.get(n).copied().unwrap_or(false);
    let int = |v: u32| Fact::Int(i64::from(v));
    for (k, v) in [
        ("vendor_id", int(d.vendor_id)),
        ("driver", Fact::Str(driver_id(&d.driver).into())),
        ("device_type", Fact::Str(d.device_type.clone())),
        ("subgroup_size", int(d.subgroup_size)),
        ("subgroup_min", int(d.subgroup_size_min)),
        ("subgroup_max", int(d.subgroup_size_max)),
        ("subgroup_size_control", Fact::Bool(flag("subgroup_size_control"))),
        ("subgroup_arithmetic", Fact::Bool(flag("subgroup_arithmetic"))),
        ("fp16_offered", Fact::Bool(flag("fp16"))),
        ("integer_dot_offered", Fact::Bool(d.integer_dot)),
        ("coopmat_offered", Fact::Bool(d.cooperative_matrix)),
        ("coopmat2_offered", Fact::Bool(flag("cooperative_matrix2"))),
    ] {
        facts.insert(k.to_string(), v);
    }
    if profile.is_none() {
        // Without a profile, the record's offers stand for their accelerated/fp16-accumulating variants.
        for (k, from) in [
            ("int_dot_accelerated", "integer_dot_offered"),
            ("coopmat_acc_f16_offered", "coopmat_offered"),
            ("coopmat_int_offered", "coopmat_offered"),
        ] {
            let v = facts.get(from).cloned().unwrap_or(Fact::Bool(false));
            assumed.push(format!("{k} = {v} (as {from})"));
            facts.insert(k.to_string(), v);
        }
    }
    // ggml's switches the traced process had set (the layer records each as a flag named like the variable).
    let mut switches = Vec::new();
    for (var, fact) in GGML_SWITCHES {
        facts.insert(fact.to_string(), Fact::Bool(flag(var)));
        if flag(var) {
            switches.push(var);
        }
    }
    let mmvq = if flag("GGML_VK_DISABLE_MMVQ") {
        "disable"
    } else if flag("GGML_VK_FORCE_MMVQ") {
        "force"
    } else {
        ""
    };
    facts.insert("mmvq_mode".into(), Fact::Str(mmvq.into()));
    switches.extend(["GGML_VK_DISABLE_MMVQ", "GGML_VK_FORCE_MMVQ"].into_iter().filter(|v| flag(v)));
    let vendor = vkd::vendor_name(i64::from(d.vendor_id));
    facts.insert("vendor".into(), Fact::Str(vendor));
    let info = VkDeviceInfo {
        label: format!("{} ({})", d.name, d.driver_info),
        from: format!("trace {}", dir.display()),
        profile: profile.map(|p| p.id.clone()),
        source: match profile {
            Some(p) => format!(
                "the layer's device record in {}; other facts from profile {} ({})",
                dir.display(),
                p.id,
                p.source
            ),
            None => format!("the layer's device record in {}", dir.display()),
        },
        facts: BTreeMap::new(),
        assumed,
        shader_core_count_from: cores_from,
        ggml_switches: switches.iter().map(|s| s.to_string()).collect(),
    };
    Ok((info, facts, libraries))
}

pub(super) fn device_facts(src: &DeviceSource) -> Result<(VkDeviceInfo, Facts, Vec<String>)> {
    match src {
        DeviceSource::TraceDir(dir) => device_from_trace(dir),
        DeviceSource::Profile(id) => {
            let p = vkd::profile(id).ok_or_else(|| {
                let known: Vec<&str> = vkd::profiles().iter().map(|p| p.id.as_str()).collect();
                anyhow!(
                    "no Vulkan device profile `{id}` ({} knows {}); or give a trace directory",
                    vkd::DEVICES_FILE,
                    known.join(", ")
                )
            })?;
            let info = VkDeviceInfo {
                label: p.label.clone(),
                from: format!("profile {}", p.id),
                profile: Some(p.id.clone()),
                source: p.source.clone(),
                facts: BTreeMap::new(),
                assumed: Vec::new(),
                shader_core_count_from: format!("profile {}", p.id),
                ggml_switches: Vec::new(),
            };
            Ok((info, p.facts()?, Vec::new()))
        }
        DeviceSource::EachRecord => {
            bail!("--backend vulkan needs --device: a profile of data/vulkan_devices.toml or a trace directory")
        }
    }
}

/// The build facts from a library's embedded shader names: `given` (`--vulkan-lib`), else `traced` (the library a
/// trace's pipelines came from); all set (a current glslc) when no library is known. A library the user names must
/// be read; one a trace names is only a record's say-so (any path: a device, a FIFO, a sparse file), so when it
/// cannot be read the prediction goes on with the assumed build and a note naming it and why.
pub(super) fn build_info(given: Option<&Path>, traced: Option<&Path>) -> Result<VkBuildInfo> {
    let assumed = |why: String| -> Result<VkBuildInfo> {
        let facts = build_facts(["matmul_q4_0_q8_1", "matmul_f16_cm1", "matmul_f16_cm2", "matmul_bf16_cm1"])?;
        Ok(VkBuildInfo {
            library: None,
            embedded_shaders: 0,
            facts,
            note: format!("{why}: assumed a build whose glslc supports integer dot, coopmat, coopmat2 and bfloat16"),
        })
    };
    match (given, traced) {
        (Some(lib), _) => library_build_info(lib).with_context(|| {
            format!(
                "reading the build's libggml-vulkan ({}) for its embedded shaders; name the library the traced \
                 program loaded with --vulkan-lib",
                lib.display()
            )
        }),
        (None, Some(lib)) => match library_build_info(lib) {
            Ok(info) => Ok(info),
            Err(e) => assumed(format!(
                "the libggml-vulkan the trace names ({}) was not read ({e:#}); name the library the traced program \
                 loaded with --vulkan-lib",
                lib.display()
            )),
        },
        (None, None) => assumed("no libggml-vulkan.so given (--vulkan-lib) or named by a trace".into()),
    }
}

/// The build facts of one library, mapped within the command's read budget (only its symbol table and shader names
/// are read).
fn library_build_info(lib: &Path) -> Result<VkBuildInfo> {
    let mapped = crate::host::inputs::ReadBudget::command().map(lib, MAX_LIBRARY_BYTES)?;
    let shaders = binfmt::spirv::embedded_shaders(mapped.bytes()).map_err(|e| anyhow!("{}: {e}", lib.display()))?;
    if let Some(at) = mapped.cut_at() {
        bail!("{}: cut short at byte {at} while it was read (the file changed)", lib.display());
    }
    if shaders.is_empty() {
        bail!("{}: no embedded shader names (a stripped library): its glslc support cannot be read", lib.display());
    }
    let facts = build_facts(shaders.iter().map(|s| s.name))?;
    Ok(VkBuildInfo {
        library: Some(lib.display().to_string()),
        embedded_shaders: shaders.len(),
        facts,
        note: "from the shader names the library embeds (data/ggml_vulkan_11434.toml build_flag)".into(),
    })
}
