//! The forms of a device profile's values (docs/vulkan-profiles.md) that backscope, which checks a profile before it
//! starts the traced program, and the Vulkan layer, which reads it inside that program, must agree on: one definition,
//! as for the SPIR-V hash. Where they disagreed, a profile backscope accepted failed `vkCreateInstance` in the program
//! (found by the fuzz target `vulkan_profile_input`). Values are Vulkan's raw enum values, so this crate needs no
//! Vulkan bindings.

/// Largest profile file the layer reads (a vulkaninfo-derived profile is a few kilobytes).
pub const MAX_BYTES: usize = 1 << 20;
/// Most keys, and most items of one array: bounds what a hostile file can make the layer allocate.
pub const MAX_ITEMS: usize = 8192;

/// `device_type` names and their `VkPhysicalDeviceType` values.
pub const DEVICE_TYPES: [(&str, i32); 5] =
    [("other", 0), ("integrated", 1), ("discrete", 2), ("virtual", 3), ("cpu", 4)];

/// `VkComponentTypeKHR` by the short names a profile uses.
pub const COMPONENT_TYPES: [(&str, i32); 12] = [
    ("f16", 0),
    ("f32", 1),
    ("f64", 2),
    ("s8", 3),
    ("s16", 4),
    ("s32", 5),
    ("s64", 6),
    ("u8", 7),
    ("u16", 8),
    ("u32", 9),
    ("u64", 10),
    ("bf16", 1000141000),
];

/// `VkScopeKHR` by name.
pub const SCOPES: [(&str, i32); 4] = [("device", 1), ("workgroup", 2), ("subgroup", 3), ("queue_family", 5)];

/// One cooperative-matrix entry: `MxNxK A B C RESULT SCOPE [saturating]`, or with `INVOCATIONS` after the scope for
/// a flexible-dimensions entry (`MGxNGxKG …`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub dims: [u32; 3],
    /// A, B, C and RESULT as `VkComponentTypeKHR` values.
    pub types: [i32; 4],
    /// A `VkScopeKHR` value.
    pub scope: i32,
    /// The workgroup invocations of a flexible-dimensions entry.
    pub invocations: Option<u32>,
    pub saturating: bool,
}

/// `text` read as an entry of `cooperative_matrix` (`flexible` false) or of `cooperative_matrix_flexible_dimensions`
/// (`flexible` true); `None` if it is not in that form.
pub fn shape(text: &str, flexible: bool) -> Option<Shape> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let fixed = 6 + usize::from(flexible);
    if !(fixed..=fixed + 1).contains(&words.len()) || words.get(fixed).is_some_and(|w| *w != "saturating") {
        return None;
    }
    let dims: Vec<u32> = words[0].split('x').map(str::parse).collect::<Result<_, _>>().ok()?;
    let [m, n, k] = dims[..] else { return None };
    let named = |table: &[(&str, i32)], w: &str| table.iter().find(|(name, _)| *name == w).map(|&(_, v)| v);
    let component = |w| named(&COMPONENT_TYPES, w);
    Some(Shape {
        dims: [m, n, k],
        types: [component(words[1])?, component(words[2])?, component(words[3])?, component(words[4])?],
        scope: named(&SCOPES, words[5])?,
        invocations: if flexible { Some(words[6].parse().ok()?) } else { None },
        saturating: words.len() > fixed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_entries_docs_vulkan_profiles_md_shows() {
        assert_eq!(
            shape("16x16x16 f16 f16 f32 f32 subgroup", false),
            Some(Shape { dims: [16, 16, 16], types: [0, 0, 1, 1], scope: 3, invocations: None, saturating: false })
        );
        let flexible = shape("32x16x16 f16 f16 f32 f32 workgroup 128 saturating", true).unwrap();
        assert_eq!((flexible.scope, flexible.invocations, flexible.saturating), (2, Some(128), true));
        for bad in [
            "16x16 f16 f16 f32 f32 subgroup",
            "16x16x16 f16 f16 f32 f32 subgroupx",
            "16x16x16 f16 f16 f32 f32 subgroup saturated",
            "16x16x16 f16 f16 f32 f32",
        ] {
            assert_eq!(shape(bad, false), None, "{bad}");
        }
        assert_eq!(shape("32x16x16 f16 f16 f32 f32 workgroup", true), None, "no invocations");
    }
}
