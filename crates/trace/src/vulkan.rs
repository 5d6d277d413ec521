//! The Vulkan layer's identity, shared by the layer (`crates/vklayer`) and the harnesses that enable it
//! (`backscope trace`, `sweep --trace`): its name, its library's file name and its manifest.
//!
//! The Vulkan loader finds a layer through a JSON manifest (the loader's "Layer Manifest File
//! Format"). An explicit layer is enabled without touching the application by putting the
//! manifest's directory on `VK_ADD_LAYER_PATH` and the layer's name on `VK_INSTANCE_LAYERS`; both
//! are read by every loader since 1.3.2xx, Debian bookworm's 1.3.239 included. (An implicit layer
//! with an `enable_environment` key would need its manifest in a system directory on such loaders:
//! `VK_IMPLICIT_LAYER_PATH` only arrived in loader 1.3.296.)

use crate::json::{put_str, Obj, Out};

/// The layer's name, as `VK_INSTANCE_LAYERS` and `vkEnumerateInstanceLayerProperties` give it.
pub const LAYER_NAME: &str = "VK_LAYER_BACKSCOPE_dispatch";
/// The layer library's file name (the cdylib of `crates/vklayer`).
pub const LIBRARY_FILE: &str = "libbackscope_vklayer.so";
/// The manifest's file name.
pub const MANIFEST_FILE: &str = "VkLayer_backscope_dispatch.json";
/// The header's `writer` for traces the layer writes.
pub const WRITER_NAME: &str = "backscope-vklayer";
/// The Vulkan version the layer is written against (the manifest's `api_version`).
pub const API_VERSION: &str = "1.3.0";
/// Manifest file format: 1.1.0 and later let the loader call `vkNegotiateLoaderLayerInterfaceVersion`.
pub const MANIFEST_FORMAT: &str = "1.1.2";

/// Loader environment variables.
pub mod loader_env {
    /// Directories (`:`-separated) searched for explicit layer manifests, besides the system ones.
    pub const ADD_LAYER_PATH: &str = "VK_ADD_LAYER_PATH";
    /// Directories (`:`-separated) searched for explicit layer manifests *instead of* the system ones.
    pub const LAYER_PATH: &str = "VK_LAYER_PATH";
    /// Layers (`:`-separated) the loader enables in every instance, before those the application asks for.
    pub const INSTANCE_LAYERS: &str = "VK_INSTANCE_LAYERS";
}

/// The manifest for the layer library at `library_path` (absolute, so the manifest may live anywhere).
pub fn manifest(out: &mut (impl Out + ?Sized), library_path: &[u8], implementation_version: &str) {
    let mut o = Obj::begin(out);
    o.str("file_format_version", MANIFEST_FORMAT);
    let layer = o.key("layer");
    let mut l = Obj::begin(&mut *layer);
    l.str("name", LAYER_NAME).str("type", "GLOBAL").bytes("library_path", library_path);
    l.str("api_version", API_VERSION).str("implementation_version", implementation_version);
    l.str("description", "backscope: counts compute dispatches per pipeline into a backscope trace");
    let functions = l.key("functions");
    functions.put(b"{");
    put_str(functions, b"vkNegotiateLoaderLayerInterfaceVersion");
    functions.put(b":");
    put_str(functions, b"vkNegotiateLoaderLayerInterfaceVersion");
    functions.put(b"}");
    l.end();
    o.end_line();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_names_the_library_and_the_negotiation_entry_point() {
        let mut out = Vec::new();
        manifest(&mut out, b"/opt/backscope/lib \"x\"/libbackscope_vklayer.so", "1");
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "{\"file_format_version\":\"1.1.2\",\"layer\":{\"name\":\"VK_LAYER_BACKSCOPE_dispatch\",\"type\":\"GLOBAL\",\
             \"library_path\":\"/opt/backscope/lib \\\"x\\\"/libbackscope_vklayer.so\",\"api_version\":\"1.3.0\",\
             \"implementation_version\":\"1\",\"description\":\"backscope: counts compute dispatches per pipeline into \
             a backscope trace\",\"functions\":{\"vkNegotiateLoaderLayerInterfaceVersion\":\
             \"vkNegotiateLoaderLayerInterfaceVersion\"}}}\n"
        );
    }
}
