//! Fuzz target `vulkan_profile_input`: the input read as the file `backscope trace --impersonate` is given (a flat
//! profile, `vulkaninfo --json` or a Khronos profile), checked and converted by backscope, then read by the Vulkan
//! layer as the traced program would. What backscope accepts and hands the layer, the layer must read: otherwise the
//! traced program fails at `vkCreateInstance`, after backscope started it, instead of backscope naming the fault first.

#![no_main]

use std::path::Path;

use backscope::observe::vulkan::profile;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(p) = profile::from_text(text, Path::new("fuzz.json")) else { return };
    if let Err(e) = backscope_vklayer::fuzzing::parse_profile(p.json.as_bytes()) {
        panic!("backscope accepted a profile the layer refuses: {e}\n{}", p.json);
    }
});
