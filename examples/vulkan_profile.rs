//! Prints the flat impersonation profile (docs/vulkan-profiles.md) that `backscope trace --impersonate ARG` would
//! use: a shipped id, a flat profile, or a `vulkaninfo --json` / Khronos Vulkan Profiles file converted and checked by
//! `backscope::observe::vulkan::profile`. How `data/vulkan_profiles/h200-nvidia.json` was made from the H200's vulkaninfo.
//!
//!     cargo run --example vulkan_profile -- docs/validation/gpu-2026-12-02-vulkaninfo/VP_VULKANINFO_….json

use anyhow::{bail, Result};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [arg] = args.as_slice() else { bail!("usage: vulkan_profile PROFILE_OR_VULKANINFO_JSON") };
    let profile = backscope::observe::vulkan::profile::resolve(arg)?;
    let value: serde_json::Value = serde_json::from_str(&profile.json)?;
    println!("{}", serde_json::to_string_pretty(&value)?);
    Ok(())
}
