//! Vulkan drivers (ICD manifests) and implicit layers in the Vulkan loader's standard search paths. An implicit
//! layer is loaded into every Vulkan program without being asked for — llama.cpp's Vulkan backend included — and
//! an injected one (an FPS overlay) has crashed llama.cpp (ggml-org/llama.cpp#8828), so each active one is named.
//!
//! The search order is the loader's on Linux (KhronosGroup/Vulkan-Loader docs/LoaderDriverInterface.md and
//! LoaderLayerInterface.md, "Linux … Discovery"; the same list `VK_LOADER_DEBUG=all vulkaninfo` prints):
//! `$XDG_CONFIG_HOME` (~/.config), `$XDG_CONFIG_DIRS` (/etc/xdg), /etc, `$XDG_DATA_HOME` (~/.local/share),
//! `$XDG_DATA_DIRS` (/usr/local/share:/usr/share), each with `vulkan/icd.d` or `vulkan/implicit_layer.d`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

use super::host::{read_small, Host};
use crate::evidence::{Claim, Confidence, Source};

/// Manifests read per directory.
const MAX_MANIFESTS: usize = 64;

/// One manifest file.
#[derive(Clone, Debug, Serialize)]
pub struct Manifest {
    pub path: String,
    /// The layer's `name`, or the ICD's library.
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub library: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Layers: loaded unless `disable_environment` is set, and only if `enable_environment` (when present) is.
    pub active: bool,
    /// Why active or not, in words.
    pub activity: String,
    /// The variable that turns the layer off (`NODEVICE_SELECT=1`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disable_with: Option<String>,
    /// A Mesa layer (part of the driver stack), not an injected third-party one.
    pub mesa: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct VulkanSetup {
    pub icd_dirs: Vec<String>,
    pub layer_dirs: Vec<String>,
    pub icds: Vec<Manifest>,
    pub implicit_layers: Vec<Manifest>,
    /// `VK_*` variables that change discovery (`VK_ICD_FILENAMES`, `VK_DRIVER_FILES`, `VK_LAYER_PATH`, …).
    pub env: BTreeMap<String, String>,
}

/// The loader's search directories for `kind` (`icd.d`, `implicit_layer.d`), in order, as host paths.
pub fn search_dirs(host: &Host, env: &BTreeMap<String, String>, kind: &str) -> Vec<PathBuf> {
    let home = env.get("HOME").cloned().unwrap_or_else(|| "/root".into());
    let split = |v: Option<&String>, default: &str| -> Vec<String> {
        v.filter(|s| !s.is_empty())
            .map(String::as_str)
            .unwrap_or(default)
            .split(':')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut bases: Vec<String> = Vec::new();
    bases.push(env.get("XDG_CONFIG_HOME").cloned().unwrap_or_else(|| format!("{home}/.config")));
    bases.extend(split(env.get("XDG_CONFIG_DIRS"), "/etc/xdg"));
    bases.push("/etc".into());
    bases.push(env.get("XDG_DATA_HOME").cloned().unwrap_or_else(|| format!("{home}/.local/share")));
    bases.extend(split(env.get("XDG_DATA_DIRS"), "/usr/local/share:/usr/share"));
    let mut out: Vec<PathBuf> = Vec::new();
    for b in bases {
        let p = host.path(&format!("{}/vulkan/{kind}", b.trim_end_matches('/')));
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

fn string(v: &Value, key: &str) -> Option<String> {
    v.get(key)?.as_str().map(str::to_string)
}

/// The first `VAR: value` of a manifest's environment object, as `VAR=value`.
fn env_pair(v: &Value, key: &str) -> Option<(String, String)> {
    let obj = v.get(key)?.as_object()?;
    let (k, val) = obj.iter().next()?;
    Some((k.clone(), val.as_str().unwrap_or("").to_string()))
}

fn layer_manifest(path: &str, layer: &Value, env: &BTreeMap<String, String>) -> Manifest {
    let name = string(layer, "name").unwrap_or_else(|| "(unnamed layer)".into());
    let disable = env_pair(layer, "disable_environment");
    let enable = env_pair(layer, "enable_environment");
    let disabled = disable.as_ref().is_some_and(|(k, _)| env.contains_key(k));
    let enabled = enable.as_ref().is_none_or(|(k, v)| env.get(k).is_some_and(|x| x == v));
    let activity = match (&disable, &enable) {
        (Some((k, _)), _) if disabled => format!("off: {k} is set"),
        (_, Some((k, v))) if !enabled => format!("off unless {k}={v}"),
        (_, Some((k, v))) => format!("on: {k}={v} is set"),
        _ => "on for every Vulkan program".into(),
    };
    Manifest {
        path: path.to_string(),
        mesa: name.starts_with("VK_LAYER_MESA_"),
        name,
        library: string(layer, "library_path"),
        description: string(layer, "description"),
        active: enabled && !disabled,
        activity,
        disable_with: disable.map(|(k, v)| format!("{k}={v}")),
        error: None,
    }
}

fn manifests(host_dirs: &[PathBuf], kind: &str, env: &BTreeMap<String, String>) -> Vec<Manifest> {
    let mut out = Vec::new();
    for dir in host_dirs {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .take(MAX_MANIFESTS)
            .collect();
        files.sort();
        for f in files {
            let path = f.display().to_string();
            let parsed = read_small(&f).map(|t| serde_json::from_str::<Value>(&t));
            let v = match parsed {
                Some(Ok(v)) => v,
                other => {
                    out.push(Manifest {
                        path,
                        name: String::new(),
                        library: None,
                        description: None,
                        active: false,
                        activity: "unreadable".into(),
                        disable_with: None,
                        mesa: false,
                        error: Some(match other {
                            Some(Err(e)) => format!("not JSON: {e}"),
                            _ => "cannot read".into(),
                        }),
                    });
                    continue;
                }
            };
            if kind == "icd.d" {
                let icd = v.get("ICD");
                let library = icd.and_then(|i| string(i, "library_path"));
                out.push(Manifest {
                    path,
                    name: library.clone().unwrap_or_default(),
                    library,
                    description: icd.and_then(|i| string(i, "api_version")).map(|a| format!("API {a}")),
                    active: true,
                    activity: "driver".into(),
                    disable_with: None,
                    mesa: false,
                    error: None,
                });
            } else {
                // File format 1.0.1 and later may list several layers in `layers`.
                let layers: Vec<&Value> = match (v.get("layer"), v.get("layers").and_then(Value::as_array)) {
                    (Some(l), _) => vec![l],
                    (None, Some(ls)) => ls.iter().take(MAX_MANIFESTS).collect(),
                    _ => Vec::new(),
                };
                out.extend(layers.into_iter().map(|l| layer_manifest(&path, l, env)));
            }
        }
    }
    out
}

/// Read the ICD and implicit-layer manifests the loader would find.
pub fn probe(host: &Host, env: &BTreeMap<String, String>) -> VulkanSetup {
    let icd_dirs = search_dirs(host, env, "icd.d");
    let layer_dirs = search_dirs(host, env, "implicit_layer.d");
    VulkanSetup {
        icds: manifests(&icd_dirs, "icd.d", env),
        implicit_layers: manifests(&layer_dirs, "implicit_layer.d", env),
        icd_dirs: icd_dirs.iter().map(|d| d.display().to_string()).collect(),
        layer_dirs: layer_dirs.iter().map(|d| d.display().to_string()).collect(),
        env: env.iter().filter(|(k, _)| k.starts_with("VK_")).map(|(k, v)| (k.clone(), v.clone())).collect(),
    }
}

/// ggml-vulkan libraries looked at per runtime, and directories looked into.
const MAX_VULKAN_LIBRARIES: usize = 8;

/// `libggml-vulkan.so*` files next to the runtimes' programs, in `../lib`, or one directory below (Ollama keeps
/// each backend in a directory of its own), each file once (the soname links lead to one file).
pub fn ggml_vulkan_libraries(runtime_dirs: &[String]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let is_vulkan = |p: &std::path::Path| {
        p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("libggml-vulkan") && n.contains(".so"))
    };
    let entries = |d: &std::path::Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> =
            std::fs::read_dir(d).into_iter().flatten().flatten().take(MAX_MANIFESTS * 8).map(|e| e.path()).collect();
        v.sort();
        v
    };
    for dir in runtime_dirs {
        let dir = PathBuf::from(dir);
        let mut dirs = vec![dir.clone(), dir.join("../lib")];
        dirs.extend(entries(&dir).into_iter().filter(|p| p.is_dir()));
        for d in dirs {
            for f in entries(&d).into_iter().filter(|p| is_vulkan(p) && p.is_file()) {
                let real = f.canonicalize().unwrap_or(f);
                if !out.contains(&real) && out.len() < MAX_VULKAN_LIBRARIES {
                    out.push(real);
                }
            }
        }
    }
    out
}

/// What the ggml-vulkan builds of the runtimes found embed, and where a device `vulkaninfo` lists offers a
/// capability a build lacks (`crate::observe::vulkan::capability`). Nothing without a ggml-vulkan library; without
/// `vulkaninfo` (or with tools off) only the builds are described.
pub fn capability_claims(
    runtime_dirs: &[String],
    env: &BTreeMap<String, String>,
    use_tools: bool,
    timeout: std::time::Duration,
) -> Vec<Claim> {
    use crate::observe::vulkan::capability::{self as cap, BuildFacts, DeviceFacts};
    let libraries = ggml_vulkan_libraries(runtime_dirs);
    if libraries.is_empty() {
        return Vec::new();
    }
    let mut claims = Vec::new();
    let mut builds = Vec::new();
    for (i, lib) in libraries.iter().enumerate() {
        let id = format!("doctor.vulkan.build.{}", i + 1);
        match BuildFacts::read(lib) {
            Ok(b) => {
                let list: Vec<String> = cap::capabilities()
                    .iter()
                    .map(|c| match &b.marker[&c.id] {
                        Some(example) => format!("{}: built ({example})", c.name),
                        None => {
                            format!("{}: not built (no *{}* shader; {} unset)", c.name, c.shader_marker, c.build_define)
                        }
                    })
                    .collect();
                claims.push(
                    Claim::new(
                        id,
                        Confidence::Confirmed,
                        format!("{} embeds {} shaders: {}", lib.display(), b.shaders, list.join("; ")),
                    )
                    .with_source(super::host::file_src(
                        lib.display().to_string(),
                        "embedded shader names (ELF symbol table)",
                    ))
                    .with_source(Source::Rule {
                        file: cap::CAPABILITIES_FILE.into(),
                        rule: "shader_marker".into(),
                        upstream: "ggml/src/ggml-vulkan/vulkan-shaders/vulkan-shaders-gen.cpp:437, 627-630, 815-823"
                            .into(),
                    }),
                );
                builds.push(b);
            }
            Err(why) => claims.push(Claim::new(id, Confidence::Limited, format!("ggml-vulkan build not read: {why}"))),
        }
    }
    let vulkaninfo =
        if use_tools { super::tools::which("vulkaninfo", env.get("PATH").map(String::as_str)) } else { None };
    let Some(program) = vulkaninfo else {
        claims.push(Claim::new(
            "doctor.vulkan.capability",
            Confidence::Limited,
            "No device capabilities were read (vulkaninfo is not installed, or tools are off), so no capability gap \
             between the Vulkan devices and the ggml-vulkan builds is stated",
        ));
        return claims;
    };
    let argv = vec![program.display().to_string()];
    let run = match super::tools::run_bounded(&argv, timeout) {
        Ok(r) if r.exit == Some(0) => r,
        other => {
            let why = match other {
                Ok(r) => r.status(),
                Err(e) => e.to_string(),
            };
            claims.push(Claim::new(
                "doctor.vulkan.capability",
                Confidence::Limited,
                format!("vulkaninfo did not list the devices' capabilities ({why}), so no capability gap is stated"),
            ));
            return claims;
        }
    };
    let source = Source::Command {
        argv,
        excerpt: "device extensions, shaderIntegerDotProduct, integerDotProduct4x8BitPackedSignedAccelerated, \
                  cooperativeMatrix* per GPU"
            .into(),
    };
    let devices = DeviceFacts::from_vulkaninfo(&run.stdout, &source);
    for (i, b) in builds.iter().enumerate() {
        for (j, d) in devices.iter().enumerate() {
            let prefix = match (builds.len(), devices.len()) {
                (1, 1) => "doctor.vulkan.capability".to_string(),
                _ => format!("doctor.vulkan.capability.{}.{}", i + 1, j + 1),
            };
            claims.extend(cap::claims(&prefix, d, b, &cap::assess(d, b, None), &[]));
        }
    }
    claims
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_activity_follows_the_enable_and_disable_variables() {
        // The manifest Debian's mesa-vulkan-drivers installs (/usr/share/vulkan/implicit_layer.d/
        // VkLayer_MESA_device_select.json on this machine): disable_environment NODEVICE_SELECT=1.
        let mesa: Value = serde_json::from_str(
            r#"{"name": "VK_LAYER_MESA_device_select", "type": "GLOBAL",
            "library_path": "libVkLayer_MESA_device_select.so", "disable_environment": {"NODEVICE_SELECT": "1"}}"#,
        )
        .unwrap();
        let mut env = BTreeMap::new();
        let m = layer_manifest("x.json", &mesa, &env);
        assert!(m.active && m.mesa && m.disable_with.as_deref() == Some("NODEVICE_SELECT=1"), "{m:?}");
        env.insert("NODEVICE_SELECT".to_string(), "1".to_string());
        assert!(!layer_manifest("x.json", &mesa, &env).active);
        // A layer that only loads when its variable is set (the enable_environment field of the manifest format).
        let opt: Value =
            serde_json::from_str(r#"{"name": "VK_LAYER_X_overlay", "enable_environment": {"X_OVERLAY": "1"}}"#)
                .unwrap();
        assert!(!layer_manifest("y.json", &opt, &BTreeMap::new()).active);
        let on = BTreeMap::from([("X_OVERLAY".to_string(), "1".to_string())]);
        let m = layer_manifest("y.json", &opt, &on);
        assert!(m.active && !m.mesa);
    }
}
