//! A device profile as the layer reads it (`docs/vulkan-profiles.md`): the answers to the device queries
//! ggml-vulkan makes, one flat JSON object (`flat_json`) that `backscope trace --impersonate` writes. Keys the
//! device must have are required; a limit or property the profile leaves out keeps the real device's answer.

use std::collections::BTreeMap;

use ash::vk;

use format::profile_form;

use super::flat_json::{self, Value};

/// The `format` a profile names.
pub const FORMAT: &str = "backscope-vulkan-profile/1";

#[derive(Default)]
pub struct Profile {
    pub id: String,
    pub source: String,
    pub device_name: String,
    pub vendor_id: u32,
    pub device_id: u32,
    pub device_type: vk::PhysicalDeviceType,
    pub api_version: u32,
    pub driver_version: Option<u32>,
    pub driver_id: vk::DriverId,
    pub driver_name: String,
    pub driver_info: Option<String>,
    pub extensions: Vec<String>,
    /// The names of the `VkBool32` feature members that are true (`feature_table`); every other is false.
    pub features: Vec<String>,
    pub limits: Limits,
    pub subgroup_size: u32,
    pub subgroup_stages: Option<vk::ShaderStageFlags>,
    pub subgroup_operations: Option<vk::SubgroupFeatureFlags>,
    pub subgroup_size_min: Option<u32>,
    pub subgroup_size_max: Option<u32>,
    pub max_compute_workgroup_subgroups: Option<u32>,
    pub required_subgroup_size_stages: Option<vk::ShaderStageFlags>,
    /// True members of the float-controls properties (`shaderRoundingModeRTEFloat16`, …); `None`: the real ones.
    pub float_controls: Option<Vec<String>>,
    /// True members of `VkPhysicalDeviceShaderIntegerDotProductProperties`; `None`: the real ones.
    pub integer_dot_properties: Option<Vec<String>>,
    pub amd_wavefronts_per_simd: Option<u32>,
    pub amd_wavefront_size: Option<u32>,
    pub amd_active_compute_unit_count: Option<u32>,
    pub nv_shader_sm_count: Option<u32>,
    pub nv_shader_warps_per_sm: Option<u32>,
    pub cooperative_matrix: Vec<vk::CooperativeMatrixPropertiesKHR<'static>>,
    /// `vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV`'s entries (none when not given).
    pub flexible_dimensions: Vec<FlexibleShape>,
    /// `VkPhysicalDeviceCooperativeMatrix2PropertiesNV`: workgroup-scope max workgroup size, flexible-dimensions
    /// max dimension, workgroup-scope reserved shared memory; `None`: the real device's answer.
    pub coopmat2_properties: Option<[u32; 3]>,
}

/// One flexible-dimensions entry of VK_NV_cooperative_matrix2 (written
/// `MGxNGxKG A B C RESULT SCOPE INVOCATIONS [saturating]`: granularities, component types, scope, workgroup size).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FlexibleShape {
    pub granularity: [u32; 3],
    pub types: [vk::ComponentTypeKHR; 4],
    pub saturating: bool,
    pub scope: vk::ScopeKHR,
    pub workgroup_invocations: u32,
}

#[derive(Default)]
pub struct Limits {
    pub max_compute_shared_memory_size: Option<u32>,
    pub max_storage_buffer_range: Option<u32>,
    pub max_uniform_buffer_range: Option<u32>,
    pub max_push_constants_size: Option<u32>,
    pub max_compute_work_group_count: Option<[u32; 3]>,
    pub max_compute_work_group_size: Option<[u32; 3]>,
    pub max_compute_work_group_invocations: Option<u32>,
    pub min_storage_buffer_offset_alignment: Option<u64>,
    pub max_memory_allocation_size: Option<u64>,
    pub max_buffer_size: Option<u64>,
}

/// Why a profile cannot be used: the key (or byte offset) and what was expected.
#[derive(Debug)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

struct Keys(BTreeMap<String, Value>);

impl Keys {
    fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    fn fail<T>(key: &str, expected: &str) -> Result<T, Error> {
        Err(Error(format!("key `{key}`: expected {expected}")))
    }

    fn string(&self, key: &str) -> Result<Option<String>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Str(s)) => Ok(Some(s.clone())),
            Some(_) => Self::fail(key, "a string"),
        }
    }

    fn u64(&self, key: &str) -> Result<Option<u64>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Num(n)) => Ok(Some(*n)),
            Some(_) => Self::fail(key, "an unsigned integer"),
        }
    }

    fn u32(&self, key: &str) -> Result<Option<u32>, Error> {
        match self.u64(key)? {
            None => Ok(None),
            Some(n) => u32::try_from(n).map(Some).or_else(|_| Self::fail(key, "an unsigned integer below 2^32")),
        }
    }

    fn u32x3(&self, key: &str) -> Result<Option<[u32; 3]>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Nums(n)) if n.len() == 3 && n.iter().all(|&v| v <= u64::from(u32::MAX)) => {
                Ok(Some([n[0] as u32, n[1] as u32, n[2] as u32]))
            }
            Some(_) => Self::fail(key, "three unsigned integers below 2^32"),
        }
    }

    fn strings(&self, key: &str) -> Result<Option<Vec<String>>, Error> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Strs(s)) => Ok(Some(s.clone())),
            Some(_) => Self::fail(key, "an array of strings"),
        }
    }

    fn required<T>(key: &str, value: Option<T>) -> Result<T, Error> {
        value.ok_or_else(|| Error(format!("key `{key}` is missing (every profile has it)")))
    }
}

/// The profile in `bytes` (the file's contents).
pub fn parse(bytes: &[u8]) -> Result<Profile, Error> {
    let keys = Keys(flat_json::parse(bytes).map_err(|e| Error(e.to_string()))?);
    let format = Keys::required("format", keys.string("format")?)?;
    if format != FORMAT {
        return Keys::fail("format", FORMAT);
    }
    let api = Keys::required("api_version", keys.u32x3("api_version")?)?;
    let device_type = Keys::required("device_type", keys.string("device_type")?)?;
    let Some(&(_, device_type)) = profile_form::DEVICE_TYPES.iter().find(|(name, _)| *name == device_type) else {
        return Keys::fail("device_type", "discrete, integrated, virtual, cpu or other");
    };
    let device_type = vk::PhysicalDeviceType::from_raw(device_type);
    let driver_id = Keys::required("driver_id", keys.u32("driver_id")?)?;
    let stages = |key| -> Result<Option<vk::ShaderStageFlags>, Error> {
        Ok(keys.strings(key)?.map(|names| vk::ShaderStageFlags::from_raw(bits(&names, STAGE_BITS))))
    };
    let cooperative_matrix = keys
        .strings("cooperative_matrix")?
        .unwrap_or_default()
        .iter()
        .map(|s| cooperative_matrix_shape(s))
        .collect::<Result<Vec<_>, _>>()?;
    let flexible_dimensions = keys
        .strings("cooperative_matrix_flexible_dimensions")?
        .unwrap_or_default()
        .iter()
        .map(|s| flexible_shape(s))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Profile {
        id: Keys::required("id", keys.string("id")?)?,
        source: Keys::required("source", keys.string("source")?)?,
        device_name: Keys::required("device_name", keys.string("device_name")?)?,
        vendor_id: Keys::required("vendor_id", keys.u32("vendor_id")?)?,
        device_id: Keys::required("device_id", keys.u32("device_id")?)?,
        device_type,
        api_version: vk::make_api_version(0, api[0], api[1], api[2]),
        driver_version: keys.u32("driver_version")?,
        driver_id: vk::DriverId::from_raw(driver_id as i32),
        driver_name: Keys::required("driver_name", keys.string("driver_name")?)?,
        driver_info: keys.string("driver_info")?,
        extensions: Keys::required("extensions", keys.strings("extensions")?)?,
        features: Keys::required("features", keys.strings("features")?)?,
        limits: Limits {
            max_compute_shared_memory_size: keys.u32("max_compute_shared_memory_size")?,
            max_storage_buffer_range: keys.u32("max_storage_buffer_range")?,
            max_uniform_buffer_range: keys.u32("max_uniform_buffer_range")?,
            max_push_constants_size: keys.u32("max_push_constants_size")?,
            max_compute_work_group_count: keys.u32x3("max_compute_work_group_count")?,
            max_compute_work_group_size: keys.u32x3("max_compute_work_group_size")?,
            max_compute_work_group_invocations: keys.u32("max_compute_work_group_invocations")?,
            min_storage_buffer_offset_alignment: keys.u64("min_storage_buffer_offset_alignment")?,
            max_memory_allocation_size: keys.u64("max_memory_allocation_size")?,
            max_buffer_size: keys.u64("max_buffer_size")?,
        },
        subgroup_size: Keys::required("subgroup_size", keys.u32("subgroup_size")?)?,
        subgroup_stages: stages("subgroup_supported_stages")?,
        subgroup_operations: keys
            .strings("subgroup_supported_operations")?
            .map(|names| vk::SubgroupFeatureFlags::from_raw(bits(&names, OPERATION_BITS))),
        subgroup_size_min: keys.u32("subgroup_size_min")?,
        subgroup_size_max: keys.u32("subgroup_size_max")?,
        max_compute_workgroup_subgroups: keys.u32("max_compute_workgroup_subgroups")?,
        required_subgroup_size_stages: stages("required_subgroup_size_stages")?,
        float_controls: keys.strings("float_controls")?,
        integer_dot_properties: keys.strings("integer_dot_properties")?,
        amd_wavefronts_per_simd: keys.u32("amd_wavefronts_per_simd")?,
        amd_wavefront_size: keys.u32("amd_wavefront_size")?,
        amd_active_compute_unit_count: keys.u32("amd_active_compute_unit_count")?,
        nv_shader_sm_count: keys.u32("nv_shader_sm_count")?,
        nv_shader_warps_per_sm: keys.u32("nv_shader_warps_per_sm")?,
        cooperative_matrix,
        flexible_dimensions,
        coopmat2_properties: keys.u32x3("nv_cooperative_matrix2_properties")?,
    })
}

/// Shader stage bit names (Vulkan's, as vulkaninfo and the Khronos profiles write them); names not listed
/// (ray tracing, mesh stages) do not concern compute and are left out of the mask.
const STAGE_BITS: &[(&str, u32)] = &[
    ("VK_SHADER_STAGE_VERTEX_BIT", 0x1),
    ("VK_SHADER_STAGE_TESSELLATION_CONTROL_BIT", 0x2),
    ("VK_SHADER_STAGE_TESSELLATION_EVALUATION_BIT", 0x4),
    ("VK_SHADER_STAGE_GEOMETRY_BIT", 0x8),
    ("VK_SHADER_STAGE_FRAGMENT_BIT", 0x10),
    ("VK_SHADER_STAGE_COMPUTE_BIT", 0x20),
];

/// `VkSubgroupFeatureFlagBits` names.
const OPERATION_BITS: &[(&str, u32)] = &[
    ("VK_SUBGROUP_FEATURE_BASIC_BIT", 0x1),
    ("VK_SUBGROUP_FEATURE_VOTE_BIT", 0x2),
    ("VK_SUBGROUP_FEATURE_ARITHMETIC_BIT", 0x4),
    ("VK_SUBGROUP_FEATURE_BALLOT_BIT", 0x8),
    ("VK_SUBGROUP_FEATURE_SHUFFLE_BIT", 0x10),
    ("VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT", 0x20),
    ("VK_SUBGROUP_FEATURE_CLUSTERED_BIT", 0x40),
    ("VK_SUBGROUP_FEATURE_QUAD_BIT", 0x80),
    ("VK_SUBGROUP_FEATURE_PARTITIONED_BIT_NV", 0x100),
    ("VK_SUBGROUP_FEATURE_ROTATE_BIT", 0x200),
    ("VK_SUBGROUP_FEATURE_ROTATE_CLUSTERED_BIT", 0x400),
];

fn bits(names: &[String], table: &[(&str, u32)]) -> u32 {
    names.iter().filter_map(|n| table.iter().find(|(name, _)| name == n)).fold(0, |acc, (_, bit)| acc | bit)
}

/// One `vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR` entry, written `MxNxK A B C RESULT SCOPE` with an
/// optional trailing `saturating` (`16x16x16 f16 f16 f32 f32 subgroup`).
fn cooperative_matrix_shape(text: &str) -> Result<vk::CooperativeMatrixPropertiesKHR<'static>, Error> {
    let bad = || Error(format!("key `cooperative_matrix`: `{text}` is not `MxNxK A B C RESULT SCOPE [saturating]`"));
    let shape = profile_form::shape(text, false).ok_or_else(bad)?;
    let [m, n, k] = shape.dims;
    let [a, b, c, r] = shape.types.map(vk::ComponentTypeKHR::from_raw);
    Ok(vk::CooperativeMatrixPropertiesKHR {
        m_size: m,
        n_size: n,
        k_size: k,
        a_type: a,
        b_type: b,
        c_type: c,
        result_type: r,
        saturating_accumulation: vk::Bool32::from(shape.saturating),
        scope: vk::ScopeKHR::from_raw(shape.scope),
        ..Default::default()
    })
}

/// One `vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV` entry, written
/// `MGxNGxKG A B C RESULT SCOPE INVOCATIONS [saturating]` (`32x16x16 f16 f16 f32 f32 workgroup 128`).
fn flexible_shape(text: &str) -> Result<FlexibleShape, Error> {
    let bad = || {
        Error(format!(
            "key `cooperative_matrix_flexible_dimensions`: `{text}` is not \
             `MGxNGxKG A B C RESULT SCOPE INVOCATIONS [saturating]`"
        ))
    };
    let shape = profile_form::shape(text, true).ok_or_else(bad)?;
    Ok(FlexibleShape {
        granularity: shape.dims,
        types: shape.types.map(vk::ComponentTypeKHR::from_raw),
        saturating: shape.saturating,
        scope: vk::ScopeKHR::from_raw(shape.scope),
        workgroup_invocations: shape.invocations.ok_or_else(bad)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"{"format": "backscope-vulkan-profile/1", "id": "t", "source": "test",
        "device_name": "Dev", "vendor_id": 4098, "device_id": 26751, "device_type": "discrete",
        "api_version": [1, 3, 278], "driver_id": 3, "driver_name": "radv", "subgroup_size": 64,
        "extensions": ["VK_KHR_16bit_storage"], "features": ["storageBuffer16BitAccess"],
        "subgroup_supported_stages": ["VK_SHADER_STAGE_COMPUTE_BIT", "VK_SHADER_STAGE_RAYGEN_BIT_KHR"],
        "cooperative_matrix": ["16x16x16 f16 f16 f32 f32 subgroup"]}"#;

    #[test]
    fn reads_a_minimal_profile() {
        let p = parse(MINIMAL.as_bytes()).unwrap();
        assert_eq!((p.vendor_id, p.device_id, p.subgroup_size), (0x1002, 0x687f, 64));
        assert_eq!(p.api_version, vk::make_api_version(0, 1, 3, 278));
        assert_eq!(p.driver_id.as_raw(), vk::DriverId::MESA_RADV.as_raw());
        assert_eq!(p.subgroup_stages.map(|s| s.as_raw()), Some(vk::ShaderStageFlags::COMPUTE.as_raw()));
        assert_eq!(p.limits.max_compute_shared_memory_size, None);
        let shape = p.cooperative_matrix[0];
        assert_eq!((shape.m_size, shape.c_type.as_raw(), shape.scope.as_raw()), (16, 1, 3));
        assert!(p.flexible_dimensions.is_empty() && p.coopmat2_properties.is_none());
    }

    #[test]
    fn reads_the_cooperative_matrix_2_answers() {
        let text = MINIMAL.replace(
            r#""cooperative_matrix": ["#,
            r#""nv_cooperative_matrix2_properties": [256, 65535, 0],
            "cooperative_matrix_flexible_dimensions": ["32x16x16 f16 f16 f32 f32 workgroup 128",
                "16x8x16 s8 s8 s32 s32 workgroup 256 saturating"], "cooperative_matrix": ["#,
        );
        let p = parse(text.as_bytes()).unwrap();
        assert_eq!(p.coopmat2_properties, Some([256, 65535, 0]));
        let [f16, s8] = p.flexible_dimensions[..] else { panic!("{} entries", p.flexible_dimensions.len()) };
        assert_eq!((f16.granularity, f16.workgroup_invocations, f16.saturating), ([32, 16, 16], 128, false));
        // Vulkan's numbers: VK_COMPONENT_TYPE_FLOAT32_KHR 1, SINT8 3, SINT32 5; VK_SCOPE_WORKGROUP_KHR 2.
        assert_eq!((f16.types[2].as_raw(), f16.scope.as_raw()), (1, 2));
        assert_eq!((s8.types[0].as_raw(), s8.types[3].as_raw(), s8.saturating), (3, 5, true));
    }

    #[test]
    fn names_the_key_that_is_wrong() {
        let missing = MINIMAL.replace(r#""subgroup_size": 64,"#, "");
        assert!(parse(missing.as_bytes()).err().unwrap().0.contains("`subgroup_size` is missing"));
        let wrong = MINIMAL.replace(r#""vendor_id": 4098"#, r#""vendor_id": "AMD""#);
        assert!(parse(wrong.as_bytes()).err().unwrap().0.contains("`vendor_id`"));
        let big = MINIMAL.replace(r#""device_id": 26751"#, r#""device_id": 4294967296"#);
        assert!(parse(big.as_bytes()).err().unwrap().0.contains("below 2^32"));
        let shape = MINIMAL.replace("16x16x16 f16", "16x16 f16");
        assert!(parse(shape.as_bytes()).err().unwrap().0.contains("cooperative_matrix"));
        let flexible = MINIMAL.replace(r#""cooperative_matrix": ["#, r#""cooperative_matrix_flexible_dimensions": ["#);
        assert!(parse(flexible.as_bytes()).err().unwrap().0.contains("INVOCATIONS"));
        let format = MINIMAL.replace("profile/1", "profile/2");
        assert!(parse(format.as_bytes()).err().unwrap().0.contains("`format`"));
    }
}
