//! Device profiles for the Vulkan layer's impersonation (`crates/vklayer/src/impersonate`, `docs/vulkan-profiles.md`):
//! the answers to every device query ggml-vulkan makes, as one flat JSON object the layer reads with its own small
//! parser. `backscope trace --impersonate PROFILE` resolves PROFILE here: the id of a profile in
//! `data/vulkan_profiles/`, or a file holding either such a profile or what users can paste — `vulkaninfo --json`
//! output and the Khronos Vulkan Profiles JSON that vulkan.gpuinfo.org exports (the same format: `capabilities` →
//! `extensions`, `features`, `properties` by Vulkan structure name). The result is checked key by key, so the layer
//! only ever sees a profile it can use.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{Map, Value};
// The forms and bounds the layer reads a profile with, defined once for both sides.
use trace_format::profile_form as form;

/// The `format` of a flat profile (the layer's `profile::FORMAT`).
pub const FORMAT: &str = "backscope-vulkan-profile/1";

/// Largest profile or vulkaninfo file read (vulkaninfo's JSON of a desktop GPU is about 300 KB).
const MAX_INPUT_BYTES: u64 = 16 << 20;

/// The profiles shipped in `data/vulkan_profiles/`, by id.
pub const BUILTIN: &[(&str, &str)] = &[
    ("gfx900-radv", include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/vulkan_profiles/gfx900-radv.json"))),
    ("lavapipe", include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/vulkan_profiles/lavapipe.json"))),
    ("h200-nvidia", include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/vulkan_profiles/h200-nvidia.json"))),
];

/// What a key of a flat profile holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Text,
    Number,
    /// A 64-bit size (`VkDeviceSize`).
    Number64,
    Texts,
    Numbers3,
    /// `discrete`, `integrated`, `virtual`, `cpu` or `other`.
    DeviceType,
    /// Cooperative-matrix entries, `MxNxK A B C RESULT SCOPE [saturating]`.
    MatrixShapes,
    /// Flexible-dimensions entries, `MGxNGxKG A B C RESULT SCOPE INVOCATIONS [saturating]`.
    FlexibleShapes,
}

impl Kind {
    /// What a value of this kind is, in the words of docs/vulkan-profiles.md.
    fn expected(self) -> &'static str {
        match self {
            Kind::Text => "a string",
            Kind::Number => "an unsigned integer below 2^32",
            Kind::Number64 => "an unsigned integer below 2^64",
            Kind::Texts => "an array of strings",
            Kind::Numbers3 => "three unsigned integers below 2^32",
            Kind::DeviceType => "one of discrete, integrated, virtual, cpu, other",
            Kind::MatrixShapes => "an array of \"MxNxK A B C RESULT SCOPE [saturating]\" entries",
            Kind::FlexibleShapes => "an array of \"MGxNGxKG A B C RESULT SCOPE INVOCATIONS [saturating]\" entries",
        }
    }
}

/// Every key the layer reads, what it holds, and whether a profile must have it. `source_*` keys (where a group of
/// values came from) are free text and also allowed.
const KEYS: &[(&str, Kind, bool)] = &[
    ("format", Kind::Text, true),
    ("id", Kind::Text, true),
    ("source", Kind::Text, true),
    ("device_name", Kind::Text, true),
    ("vendor_id", Kind::Number, true),
    ("device_id", Kind::Number, true),
    ("device_type", Kind::DeviceType, true),
    ("api_version", Kind::Numbers3, true),
    ("driver_id", Kind::Number, true),
    ("driver_name", Kind::Text, true),
    ("driver_info", Kind::Text, false),
    ("driver_version", Kind::Number, false),
    ("extensions", Kind::Texts, true),
    ("features", Kind::Texts, true),
    ("subgroup_size", Kind::Number, true),
    ("subgroup_supported_stages", Kind::Texts, false),
    ("subgroup_supported_operations", Kind::Texts, false),
    ("subgroup_size_min", Kind::Number, false),
    ("subgroup_size_max", Kind::Number, false),
    ("max_compute_workgroup_subgroups", Kind::Number, false),
    ("required_subgroup_size_stages", Kind::Texts, false),
    ("float_controls", Kind::Texts, false),
    ("integer_dot_properties", Kind::Texts, false),
    ("max_compute_shared_memory_size", Kind::Number, false),
    ("max_storage_buffer_range", Kind::Number, false),
    ("max_uniform_buffer_range", Kind::Number, false),
    ("max_push_constants_size", Kind::Number, false),
    ("max_compute_work_group_count", Kind::Numbers3, false),
    ("max_compute_work_group_size", Kind::Numbers3, false),
    ("max_compute_work_group_invocations", Kind::Number, false),
    ("min_storage_buffer_offset_alignment", Kind::Number64, false),
    ("max_memory_allocation_size", Kind::Number64, false),
    ("max_buffer_size", Kind::Number64, false),
    ("amd_wavefronts_per_simd", Kind::Number, false),
    ("amd_wavefront_size", Kind::Number, false),
    ("amd_active_compute_unit_count", Kind::Number, false),
    ("nv_shader_sm_count", Kind::Number, false),
    ("nv_shader_warps_per_sm", Kind::Number, false),
    ("cooperative_matrix", Kind::MatrixShapes, false),
    ("cooperative_matrix_flexible_dimensions", Kind::FlexibleShapes, false),
    ("nv_cooperative_matrix2_properties", Kind::Numbers3, false),
];

/// A checked flat profile: its id and the JSON text the layer reads.
#[derive(Debug, Clone)]
pub struct Profile {
    pub id: String,
    pub source: String,
    pub device_name: String,
    pub json: String,
}

/// PROFILE of `--impersonate`: a shipped id, else a file (flat profile, vulkaninfo `--json` or Khronos profile).
pub fn resolve(arg: &str) -> Result<Profile> {
    if let Some((_, text)) = BUILTIN.iter().find(|(id, _)| *id == arg) {
        let value: Value = serde_json::from_str(text).with_context(|| format!("data/vulkan_profiles/{arg}.json"))?;
        return check(value).with_context(|| format!("data/vulkan_profiles/{arg}.json"));
    }
    let path = Path::new(arg);
    if !path.exists() {
        let ids: Vec<&str> = BUILTIN.iter().map(|(id, _)| *id).collect();
        bail!("--impersonate {arg}: neither a profile id ({}) nor a file", ids.join(", "));
    }
    let text = crate::host::inputs::read_text_limited(path, MAX_INPUT_BYTES)
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    from_text(&text, path)
}

/// The profile in `text`, the contents of the file at `path`: a flat profile, or a `vulkaninfo --json` / Khronos
/// profile converted to one.
pub fn from_text(text: &str, path: &Path) -> Result<Profile> {
    let value: Value = serde_json::from_str(text).with_context(|| format!("{}: not JSON", path.display()))?;
    let flat = if value.get("format").is_some() { value } else { from_khronos(&value, path)? };
    check(flat).with_context(|| format!("{}", path.display()))
}

/// Checks every key of a flat profile against [`KEYS`] and renders it for the layer.
pub fn check(value: Value) -> Result<Profile> {
    let Value::Object(map) = value else { bail!("a profile is one JSON object") };
    for (key, value) in &map {
        if key.starts_with("source_") {
            if !value.is_string() {
                bail!("key `{key}`: expected a string");
            }
            continue;
        }
        let Some(&(_, kind, _)) = KEYS.iter().find(|(k, _, _)| k == key) else {
            bail!("key `{key}` is not one a profile has (docs/vulkan-profiles.md lists them)");
        };
        let fits = match kind {
            Kind::Text => value.is_string(),
            Kind::Number => value.as_u64().is_some_and(|n| n <= u64::from(u32::MAX)),
            Kind::Number64 => value.as_u64().is_some(),
            Kind::Texts => value.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            Kind::Numbers3 => value.as_array().is_some_and(|a| {
                a.len() == 3 && a.iter().all(|v| v.as_u64().is_some_and(|n| n <= u64::from(u32::MAX)))
            }),
            Kind::DeviceType => value.as_str().is_some_and(|t| form::DEVICE_TYPES.iter().any(|(name, _)| *name == t)),
            Kind::MatrixShapes | Kind::FlexibleShapes => value.as_array().is_some_and(|a| {
                let flexible = kind == Kind::FlexibleShapes;
                a.iter().all(|v| v.as_str().is_some_and(|t| form::shape(t, flexible).is_some()))
            }),
        };
        if !fits {
            bail!("key `{key}`: expected {} ({value})", kind.expected());
        }
    }
    for (key, _, required) in KEYS {
        if *required && !map.contains_key(*key) {
            bail!("key `{key}` is missing (every profile has it)");
        }
    }
    if map["format"] != FORMAT {
        bail!("key `format`: expected {FORMAT}");
    }
    // The layer's own bounds on what it reads.
    if map.len() > form::MAX_ITEMS {
        bail!("{} keys: the layer reads at most {}", map.len(), form::MAX_ITEMS);
    }
    for (key, value) in &map {
        if let Some(a) = value.as_array().filter(|a| a.len() > form::MAX_ITEMS) {
            bail!("key `{key}`: {} items, the layer reads at most {}", a.len(), form::MAX_ITEMS);
        }
    }
    let text = |k: &str| map[k].as_str().unwrap_or_default().to_string();
    let json = serde_json::to_string_pretty(&Value::Object(map.clone()))?;
    if json.len() > form::MAX_BYTES {
        bail!("{} bytes as the layer is given it: the layer reads at most {}", json.len(), form::MAX_BYTES);
    }
    Ok(Profile { id: text("id"), source: text("source"), device_name: text("device_name"), json })
}

/// `VkDriverId` values by their enum names (the Khronos profile and vulkaninfo write the name).
const DRIVER_IDS: &[(&str, u64)] = &[
    ("VK_DRIVER_ID_AMD_PROPRIETARY", 1),
    ("VK_DRIVER_ID_AMD_OPEN_SOURCE", 2),
    ("VK_DRIVER_ID_MESA_RADV", 3),
    ("VK_DRIVER_ID_NVIDIA_PROPRIETARY", 4),
    ("VK_DRIVER_ID_INTEL_PROPRIETARY_WINDOWS", 5),
    ("VK_DRIVER_ID_INTEL_OPEN_SOURCE_MESA", 6),
    ("VK_DRIVER_ID_IMAGINATION_PROPRIETARY", 7),
    ("VK_DRIVER_ID_QUALCOMM_PROPRIETARY", 8),
    ("VK_DRIVER_ID_ARM_PROPRIETARY", 9),
    ("VK_DRIVER_ID_GOOGLE_SWIFTSHADER", 10),
    ("VK_DRIVER_ID_GGP_PROPRIETARY", 11),
    ("VK_DRIVER_ID_BROADCOM_PROPRIETARY", 12),
    ("VK_DRIVER_ID_MESA_LLVMPIPE", 13),
    ("VK_DRIVER_ID_MOLTENVK", 14),
    ("VK_DRIVER_ID_COREAVI_PROPRIETARY", 15),
    ("VK_DRIVER_ID_JUICE_PROPRIETARY", 16),
    ("VK_DRIVER_ID_VERISILICON_PROPRIETARY", 17),
    ("VK_DRIVER_ID_MESA_TURNIP", 18),
    ("VK_DRIVER_ID_MESA_V3DV", 19),
    ("VK_DRIVER_ID_MESA_PANVK", 20),
    ("VK_DRIVER_ID_SAMSUNG_PROPRIETARY", 21),
    ("VK_DRIVER_ID_MESA_VENUS", 22),
    ("VK_DRIVER_ID_MESA_DOZEN", 23),
    ("VK_DRIVER_ID_MESA_NVK", 24),
    ("VK_DRIVER_ID_IMAGINATION_OPEN_SOURCE_MESA", 25),
    ("VK_DRIVER_ID_MESA_HONEYKRISP", 26),
];

/// The float-control members the layer answers (`VkPhysicalDeviceFloatControlsProperties`).
const FLOAT_CONTROL_PREFIXES: [&str; 4] =
    ["shaderSignedZeroInfNanPreserve", "shaderDenorm", "shaderRoundingModeRTE", "shaderRoundingModeRTZ"];

/// The property structures of a Khronos profile's capability blocks, merged (later blocks add to earlier ones).
struct Khronos {
    extensions: Vec<String>,
    features: BTreeMap<String, Map<String, Value>>,
    properties: BTreeMap<String, Map<String, Value>>,
}

impl Khronos {
    /// The first of the named structures that has `field`.
    fn prop(&self, structs: &[&str], field: &str) -> Option<&Value> {
        structs.iter().find_map(|s| self.properties.get(*s)?.get(field))
    }
}

fn capabilities(value: &Value) -> Result<Khronos> {
    let blocks = value
        .get("capabilities")
        .and_then(Value::as_object)
        .ok_or_else(|| anyhow!("neither a backscope profile (`format`) nor a Khronos profile (`capabilities`)"))?;
    let mut k = Khronos { extensions: Vec::new(), features: BTreeMap::new(), properties: BTreeMap::new() };
    for block in blocks.values() {
        if let Some(ext) = block.get("extensions").and_then(Value::as_object) {
            k.extensions.extend(ext.keys().cloned());
        }
        for (key, into) in [("features", &mut k.features), ("properties", &mut k.properties)] {
            for (name, fields) in block.get(key).and_then(Value::as_object).into_iter().flatten() {
                if let Some(fields) = fields.as_object() {
                    into.entry(name.clone()).or_default().extend(fields.clone());
                }
            }
        }
    }
    k.extensions.sort();
    k.extensions.dedup();
    Ok(k)
}

/// A `vulkaninfo --json` / Khronos Vulkan Profiles document as a flat profile. Cooperative matrix shapes are not
/// part of that format (nor of vulkaninfo's): a converted profile has none, so ggml sees no usable matrix cores.
pub fn from_khronos(value: &Value, path: &Path) -> Result<Value> {
    let k = capabilities(value)?;
    const CORE: &str = "VkPhysicalDeviceProperties";
    let core = k.properties.get(CORE).ok_or_else(|| anyhow!("no {CORE} in the profile's properties"))?;
    let limits = core.get("limits").and_then(Value::as_object).cloned().unwrap_or_default();
    let mut out = Map::new();
    let mut put = |key: &str, v: Option<Value>| {
        if let Some(v) = v {
            out.insert(key.to_string(), v);
        }
    };
    let label = value
        .get("profiles")
        .and_then(Value::as_object)
        .and_then(|p| p.keys().next().cloned())
        .unwrap_or_else(|| path.display().to_string());
    put("format", Some(FORMAT.into()));
    put("id", Some(label.clone().into()));
    put(
        "source",
        Some(format!("converted by backscope from the Khronos Vulkan profile {label} in {}", path.display()).into()),
    );
    put("device_name", core.get("deviceName").cloned());
    put("vendor_id", core.get("vendorID").cloned());
    put("device_id", core.get("deviceID").cloned());
    let device_type = core.get("deviceType").and_then(Value::as_str).unwrap_or("");
    let device_type = match device_type {
        "VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU" => "discrete",
        "VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU" => "integrated",
        "VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU" => "virtual",
        "VK_PHYSICAL_DEVICE_TYPE_CPU" => "cpu",
        _ => "other",
    };
    put("device_type", Some(device_type.into()));
    put("api_version", api_version(core.get("apiVersion")));
    put("driver_version", core.get("driverVersion").cloned());
    let driver = ["VkPhysicalDeviceDriverProperties", "VkPhysicalDeviceVulkan12Properties"];
    let driver_id = k.prop(&driver, "driverID").and_then(|v| match v {
        Value::String(name) => DRIVER_IDS.iter().find(|(n, _)| n == name).map(|&(_, id)| Value::from(id)),
        Value::Number(_) => Some(v.clone()),
        _ => None,
    });
    put("driver_id", driver_id);
    put("driver_name", k.prop(&driver, "driverName").cloned());
    put("driver_info", k.prop(&driver, "driverInfo").cloned());
    put("extensions", Some(k.extensions.clone().into()));
    let mut features: Vec<String> = k
        .features
        .values()
        .flat_map(|fields| fields.iter().filter(|(_, v)| v.as_bool() == Some(true)).map(|(n, _)| n.clone()))
        .collect();
    features.sort();
    features.dedup();
    put("features", Some(features.into()));
    let subgroup = ["VkPhysicalDeviceSubgroupProperties", "VkPhysicalDeviceVulkan11Properties"];
    put("subgroup_size", k.prop(&subgroup, "subgroupSize").cloned());
    put(
        "subgroup_supported_stages",
        k.prop(&subgroup, "supportedStages").or(k.prop(&subgroup, "subgroupSupportedStages")).cloned(),
    );
    put(
        "subgroup_supported_operations",
        k.prop(&subgroup, "supportedOperations").or(k.prop(&subgroup, "subgroupSupportedOperations")).cloned(),
    );
    let size_control = [
        "VkPhysicalDeviceSubgroupSizeControlProperties",
        "VkPhysicalDeviceSubgroupSizeControlPropertiesEXT",
        "VkPhysicalDeviceVulkan13Properties",
    ];
    put("subgroup_size_min", k.prop(&size_control, "minSubgroupSize").cloned());
    put("subgroup_size_max", k.prop(&size_control, "maxSubgroupSize").cloned());
    put("max_compute_workgroup_subgroups", k.prop(&size_control, "maxComputeWorkgroupSubgroups").cloned());
    put("required_subgroup_size_stages", k.prop(&size_control, "requiredSubgroupSizeStages").cloned());
    let float_structs = ["VkPhysicalDeviceFloatControlsProperties", "VkPhysicalDeviceVulkan12Properties"];
    put(
        "float_controls",
        true_members(&k, &float_structs, |n| FLOAT_CONTROL_PREFIXES.iter().any(|p| n.starts_with(p))),
    );
    let dot_structs = [
        "VkPhysicalDeviceShaderIntegerDotProductProperties",
        "VkPhysicalDeviceShaderIntegerDotProductPropertiesKHR",
        "VkPhysicalDeviceVulkan13Properties",
    ];
    put("integer_dot_properties", true_members(&k, &dot_structs, |n| n.starts_with("integerDotProduct")));
    for (key, field) in [
        ("max_compute_shared_memory_size", "maxComputeSharedMemorySize"),
        ("max_storage_buffer_range", "maxStorageBufferRange"),
        ("max_uniform_buffer_range", "maxUniformBufferRange"),
        ("max_push_constants_size", "maxPushConstantsSize"),
        ("max_compute_work_group_count", "maxComputeWorkGroupCount"),
        ("max_compute_work_group_size", "maxComputeWorkGroupSize"),
        ("max_compute_work_group_invocations", "maxComputeWorkGroupInvocations"),
        ("min_storage_buffer_offset_alignment", "minStorageBufferOffsetAlignment"),
    ] {
        put(key, limits.get(field).cloned());
    }
    put(
        "max_memory_allocation_size",
        k.prop(
            &["VkPhysicalDeviceMaintenance3Properties", "VkPhysicalDeviceVulkan11Properties"],
            "maxMemoryAllocationSize",
        )
        .cloned(),
    );
    put(
        "max_buffer_size",
        k.prop(&["VkPhysicalDeviceMaintenance4Properties", "VkPhysicalDeviceVulkan13Properties"], "maxBufferSize")
            .cloned(),
    );
    put("amd_wavefronts_per_simd", k.prop(&["VkPhysicalDeviceShaderCorePropertiesAMD"], "wavefrontsPerSimd").cloned());
    put("amd_wavefront_size", k.prop(&["VkPhysicalDeviceShaderCorePropertiesAMD"], "wavefrontSize").cloned());
    put(
        "amd_active_compute_unit_count",
        k.prop(&["VkPhysicalDeviceShaderCoreProperties2AMD"], "activeComputeUnitCount").cloned(),
    );
    put("nv_shader_sm_count", k.prop(&["VkPhysicalDeviceShaderSMBuiltinsPropertiesNV"], "shaderSMCount").cloned());
    put(
        "nv_shader_warps_per_sm",
        k.prop(&["VkPhysicalDeviceShaderSMBuiltinsPropertiesNV"], "shaderWarpsPerSM").cloned(),
    );
    Ok(Value::Object(out))
}

/// The names of the true members (those `wanted` accepts) of the first of `structs` the profile has.
fn true_members(k: &Khronos, structs: &[&str], wanted: impl Fn(&str) -> bool) -> Option<Value> {
    let fields = structs.iter().find_map(|s| k.properties.get(*s))?;
    let names: Vec<Value> = fields
        .iter()
        .filter(|(n, v)| wanted(n) && v.as_bool() == Some(true))
        .map(|(n, _)| Value::from(n.clone()))
        .collect();
    Some(names.into())
}

/// `apiVersion` as `[major, minor, patch]`: vulkaninfo writes the packed number, gpuinfo's export a `1.3.255` text.
fn api_version(v: Option<&Value>) -> Option<Value> {
    let (major, minor, patch) = match v? {
        Value::Number(n) => {
            let n = n.as_u64()?;
            ((n >> 22) & 0x7f, (n >> 12) & 0x3ff, n & 0xfff)
        }
        Value::String(s) => {
            let mut parts = s.split('.').map(|p| p.parse::<u64>().ok());
            (parts.next()??, parts.next()??, parts.next().flatten().unwrap_or(0))
        }
        _ => return None,
    };
    Some(Value::from(vec![major, minor, patch]))
}

/// Writes a profile's JSON for the layer into `dir`; the returned path is what `BACKSCOPE_VK_IMPERSONATE` names.
pub fn write_for_layer(profile: &Profile, dir: &Path) -> Result<tempfile::TempPath> {
    use std::io::Write;
    let mut file = tempfile::Builder::new()
        .prefix("backscope-vulkan-profile-")
        .suffix(".json")
        .tempfile_in(dir)
        .with_context(|| format!("writing the profile in {}", dir.display()))?;
    file.write_all(profile.json.as_bytes())?;
    Ok(file.into_temp_path())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_profiles_pass_the_check() {
        for (id, _) in BUILTIN {
            let p = resolve(id).unwrap();
            assert_eq!(&p.id, id);
            assert!(!p.source.is_empty());
        }
        let gfx900 = resolve("gfx900-radv").unwrap();
        assert_eq!(gfx900.device_name, "AMD Radeon RX Vega (RADV VEGA10)");
    }

    #[test]
    fn a_khronos_profile_becomes_a_flat_one() {
        // Written here in the shape vulkaninfo --json and gpuinfo.org's export use.
        let doc = serde_json::json!({
            "capabilities": {"device": {
                "extensions": {"VK_KHR_16bit_storage": 1, "VK_EXT_subgroup_size_control": 2},
                "features": {
                    "VkPhysicalDeviceFeatures": {"shaderInt64": true, "shaderFloat64": false},
                    "VkPhysicalDeviceVulkan12Features": {"shaderFloat16": true}
                },
                "properties": {
                    "VkPhysicalDeviceProperties": {"deviceName": "Card", "vendorID": 4098, "deviceID": 29772,
                        "deviceType": "VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU", "apiVersion": 4206847,
                        "limits": {"maxComputeSharedMemorySize": 65536, "maxComputeWorkGroupCount": [4294967295u64, 65535, 65535]}},
                    "VkPhysicalDeviceDriverProperties": {"driverID": "VK_DRIVER_ID_MESA_RADV", "driverName": "radv"},
                    "VkPhysicalDeviceSubgroupProperties": {"subgroupSize": 64,
                        "supportedStages": ["VK_SHADER_STAGE_COMPUTE_BIT"], "supportedOperations": ["VK_SUBGROUP_FEATURE_BASIC_BIT"]},
                    "VkPhysicalDeviceVulkan13Properties": {"minSubgroupSize": 32, "maxSubgroupSize": 64,
                        "integerDotProduct4x8BitPackedSignedAccelerated": true, "integerDotProduct8BitUnsignedAccelerated": false}
                }
            }},
            "profiles": {"VP_VULKANINFO_Card": {}}
        });
        let flat = from_khronos(&doc, Path::new("card.json")).unwrap();
        let p = check(flat.clone()).unwrap();
        assert_eq!(p.id, "VP_VULKANINFO_Card");
        assert_eq!(flat["api_version"], serde_json::json!([1, 3, 255]));
        assert_eq!(flat["driver_id"], 3);
        assert_eq!(flat["features"], serde_json::json!(["shaderFloat16", "shaderInt64"]));
        assert_eq!(flat["subgroup_size_min"], 32);
        assert_eq!(
            flat["integer_dot_properties"],
            serde_json::json!(["integerDotProduct4x8BitPackedSignedAccelerated"])
        );
        assert_eq!(flat["max_compute_work_group_count"], serde_json::json!([4294967295u64, 65535, 65535]));
    }

    #[test]
    fn bad_profiles_name_the_key() {
        let mut v: Value = serde_json::from_str(BUILTIN[0].1).unwrap();
        v["vendor_id"] = "AMD".into();
        assert!(format!("{:#}", check(v).unwrap_err()).contains("`vendor_id`"));
        let mut v: Value = serde_json::from_str(BUILTIN[0].1).unwrap();
        v.as_object_mut().unwrap().remove("subgroup_size");
        assert!(format!("{:#}", check(v).unwrap_err()).contains("`subgroup_size` is missing"));
        let mut v: Value = serde_json::from_str(BUILTIN[0].1).unwrap();
        v["subgroup_sise"] = 64.into();
        assert!(format!("{:#}", check(v).unwrap_err()).contains("`subgroup_sise` is not one"));
        assert!(format!("{:#}", resolve("no-such-profile").unwrap_err()).contains("gfx900-radv"));
        let not_profile = from_khronos(&serde_json::json!({"a": 1}), Path::new("x.json")).unwrap_err();
        assert!(format!("{not_profile:#}").contains("capabilities"));
    }

    /// The fuzz target's reproducers (fuzz/seeds/vulkan_profile_input/*.bin: inputs backscope once accepted and the
    /// layer refused) are refused here now; replayed by the loop every decoder's regressions share.
    #[test]
    fn the_fuzz_reproducers_are_refused() {
        fn refused(data: &[u8]) {
            let text = std::str::from_utf8(data).expect("a reproducer is text (the target skips other input)");
            assert!(from_text(text, Path::new("reproducer.json")).is_err());
        }
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/vulkan_profile_input");
        fuzz_replay::replay(&dir, &[("vulkan_profile_input", refused)]);
    }

    /// Values the layer would refuse at `vkCreateInstance` (found by the fuzz target `vulkan_profile_input`) are
    /// refused here, before the traced program starts; the forms the layer reads pass (docs/vulkan-profiles.md).
    #[test]
    fn values_the_layer_refuses_are_refused_here() {
        let with = |key: &str, value: Value| {
            let mut v: Value = serde_json::from_str(BUILTIN[0].1).unwrap();
            v[key] = value;
            check(v)
        };
        for (key, value) in [
            ("device_type", serde_json::json!("gpu")),
            ("cooperative_matrix", serde_json::json!(["16x8x32 u8 u8 u32 u32 subgroupx"])),
            ("cooperative_matrix", serde_json::json!(["16x16 f16 f16 f32 f32 subgroup"])),
            ("cooperative_matrix", serde_json::json!(["16x16x16 f16 f16 f32 f32 subgroup saturated"])),
            ("cooperative_matrix_flexible_dimensions", serde_json::json!(["32x16x16 f16 f16 f32 f32 workgroup"])),
            ("features", serde_json::json!(vec!["shaderInt8"; 8193])),
        ] {
            let err = with(key, value.clone()).unwrap_err();
            assert!(format!("{err:#}").contains(&format!("`{key}`")), "{key} = {value}: {err:#}");
        }
        let err = with("source_notes", "x".repeat(1 << 20).into()).unwrap_err();
        assert!(format!("{err:#}").contains("the layer reads at most 1048576"), "{err:#}");
        for (key, value) in [
            ("device_type", serde_json::json!("integrated")),
            (
                "cooperative_matrix",
                serde_json::json!(["16x16x16 f16 f16 f32 f32 subgroup", "8x8x32 s8 s8 s32 s32 subgroup saturating"]),
            ),
            ("cooperative_matrix_flexible_dimensions", serde_json::json!(["32x16x16 f16 f16 f32 f32 workgroup 128"])),
        ] {
            let p = with(key, value.clone()).unwrap_or_else(|e| panic!("{key} = {value}: {e:#}"));
            let written: Value = serde_json::from_str(&p.json).unwrap();
            assert_eq!(written[key], value, "what the layer is given");
        }
    }
}
