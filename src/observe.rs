//! Finding what observes a program: the CUDA/HIP observer library (loaded with `LD_PRELOAD`) and the Vulkan layer
//! (enabled through the Vulkan loader's environment). A ground-floor module: `trace` and `sweep --trace` observe
//! alike, so they find and enable both the same way.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use std::io::Write as _;

use trace_format::vulkan::{loader_env, LAYER_NAME, LIBRARY_FILE, MANIFEST_FILE};

use crate::vulkan::GGML_DEBUG_MARKERS;

/// The observer library's file name.
pub const OBSERVER_FILE: &str = "libbackscope_observer.so";

/// The observer library: the path given, else `$BACKSCOPE_OBSERVER_SO`, else beside the running executable.
pub fn find_observer(explicit: Option<&Path>) -> Result<PathBuf> {
    find_library(explicit, "observer library", "BACKSCOPE_OBSERVER_SO", OBSERVER_FILE, " or pass --observer PATH")
}

/// A library `backscope trace` loads into the traced program (`file`, called `what` in messages): the path given,
/// else `$env_var`, else beside the running executable, in `deps/`, or in `../lib/backscope` (where `cargo build` and
/// an install put it). `hint` ends the not-found message.
pub fn find_library(explicit: Option<&Path>, what: &str, env_var: &str, file: &str, hint: &str) -> Result<PathBuf> {
    // A named library must be a regular file: the dynamic loader of the traced program would block forever on a
    // FIFO and read a device without end.
    let regular = |p: PathBuf, named: String| -> Result<PathBuf> {
        let p = p.canonicalize().with_context(|| named.clone())?;
        crate::inputs::open_input(&p).with_context(|| named)?;
        Ok(p)
    };
    if let Some(p) = explicit {
        return regular(p.to_path_buf(), format!("{what} {}", p.display()));
    }
    if let Some(p) = std::env::var_os(env_var) {
        let p = PathBuf::from(p);
        let named = format!("{env_var}={}", p.display());
        return regular(p, named);
    }
    let exe = std::env::current_exe().context("locating the backscope executable")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    for candidate in [dir.join(file), dir.join("deps").join(file), dir.join("../lib/backscope").join(file)] {
        if candidate.is_file() {
            return Ok(candidate.canonicalize()?);
        }
    }
    bail!(
        "cannot find {file} next to {}; build it with `cargo build --release` (the workspace builds it){hint}",
        exe.display()
    )
}

/// The variables that enable the Vulkan layer (`crate::observe::layer_env`), its manifest written: empty, with a note
/// on stderr, when the layer cannot be found and none was named (CUDA/HIP are still observed); an error when the
/// one named cannot be used.
pub fn vulkan_env(explicit: Option<&Path>, existing: impl Fn(&str) -> Option<String>) -> Result<Vec<(String, String)>> {
    let dir = optional_manifest_dir(explicit).context("writing the Vulkan layer's manifest")?;
    Ok(dir.map(|dir| layer_env(&dir, existing)).unwrap_or_default())
}

/// The Vulkan layer library: explicit path, `$BACKSCOPE_VKLAYER_SO`, or beside the backscope executable (where
/// `cargo build` puts it).
pub fn find_layer(explicit: Option<&Path>) -> Result<PathBuf> {
    find_library(explicit, "Vulkan layer library", "BACKSCOPE_VKLAYER_SO", LIBRARY_FILE, "")
}

/// The layer's manifest directory ([`manifest_dir`]) when the layer is found; `None`, with a note on stderr, when it
/// is not and none was named (the layer is optional: CUDA and HIP are still observed); an error when the one named
/// cannot be used.
pub fn optional_manifest_dir(explicit: Option<&Path>) -> Result<Option<PathBuf>> {
    match find_layer(explicit) {
        Ok(layer) => manifest_dir(&layer).map(Some),
        Err(e) if explicit.is_none() => {
            crate::output::messages::note(format_args!("Vulkan dispatches are not observed: {e:#}"));
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The directory holding the layer's manifest for `layer` (written if missing or different): `vulkan/` beside
/// the library when that can be written, else a directory of this user's under the temp dir. The loader reads
/// every manifest of a directory on `VK_ADD_LAYER_PATH`, so the directory holds nothing else.
pub fn manifest_dir(layer: &Path) -> Result<PathBuf> {
    let mut text = Vec::new();
    // The loader reads `implementation_version` as an integer.
    trace_format::vulkan::manifest(&mut text, layer.as_os_str().as_encoded_bytes(), "1");
    let beside = layer.parent().map(|d| d.join("vulkan"));
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let fallback = std::env::temp_dir().join(format!("backscope-vklayer-{uid}"));
    let mut last_error = None;
    for dir in beside.into_iter().chain([fallback]) {
        let path = dir.join(MANIFEST_FILE);
        // Through the floor's door: the fallback is under the shared temp directory, where another user could have
        // put a FIFO (a plain read would wait on it forever) or a link to /dev/zero; one byte more than the
        // manifest tells a longer file apart.
        if crate::inputs::read_limited(&path, text.len() as u64 + 1).is_ok_and(|t| t == text) {
            return Ok(dir);
        }
        match write_atomically(&dir, &path, &text) {
            Ok(()) => return Ok(dir),
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or_else(|| anyhow::anyhow!("no directory for the Vulkan layer manifest")))
}

/// Writes `path` through a temporary file renamed over it, so that a loader (or another backscope) reading it
/// meanwhile sees the old or the new manifest, never half of one.
fn write_atomically(dir: &Path, path: &Path, text: &[u8]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).with_context(|| format!("writing in {}", dir.display()))?;
    tmp.write_all(text)?;
    use std::os::unix::fs::PermissionsExt;
    tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o644))?;
    tmp.persist(path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The variables that enable the layer in a process: its manifest directory added to `VK_ADD_LAYER_PATH`, its
/// name added to `VK_INSTANCE_LAYERS` (both keep what `existing` gives them), and `GGML_VK_DEBUG_MARKERS=1` unless
/// set, so that ggml-vulkan names its pipelines.
pub fn layer_env(manifest_dir: &Path, existing: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    let join = |first: String, rest: Option<String>| match rest.filter(|r| !r.is_empty()) {
        Some(r) if r.split(':').any(|x| x == first) => r,
        Some(r) => format!("{first}:{r}"),
        None => first,
    };
    let mut vars = vec![
        (
            loader_env::ADD_LAYER_PATH.to_string(),
            join(manifest_dir.display().to_string(), existing(loader_env::ADD_LAYER_PATH)),
        ),
        (loader_env::INSTANCE_LAYERS.to_string(), join(LAYER_NAME.to_string(), existing(loader_env::INSTANCE_LAYERS))),
    ];
    if existing(GGML_DEBUG_MARKERS).is_none() {
        vars.push((GGML_DEBUG_MARKERS.to_string(), "1".to_string()));
    }
    vars
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_adds_to_what_is_there() {
        let none = layer_env(Path::new("/opt/b/vulkan"), |_| None);
        assert_eq!(
            none,
            [
                ("VK_ADD_LAYER_PATH".to_string(), "/opt/b/vulkan".to_string()),
                ("VK_INSTANCE_LAYERS".to_string(), "VK_LAYER_BACKSCOPE_dispatch".to_string()),
                ("GGML_VK_DEBUG_MARKERS".to_string(), "1".to_string()),
            ]
        );
        let some = layer_env(Path::new("/opt/b/vulkan"), |k| match k {
            "VK_ADD_LAYER_PATH" => Some("/x".into()),
            "VK_INSTANCE_LAYERS" => Some("VK_LAYER_KHRONOS_validation".into()),
            "GGML_VK_DEBUG_MARKERS" => Some("0".into()),
            _ => None,
        });
        assert_eq!(some[0].1, "/opt/b/vulkan:/x");
        assert_eq!(some[1].1, "VK_LAYER_BACKSCOPE_dispatch:VK_LAYER_KHRONOS_validation");
        assert_eq!(some.len(), 2, "a GGML_VK_DEBUG_MARKERS the user set is theirs");
        let again = layer_env(Path::new("/opt/b/vulkan"), |k| (k == "VK_INSTANCE_LAYERS").then(|| LAYER_NAME.into()));
        assert_eq!(again[1].1, LAYER_NAME, "not added twice");
    }

    #[test]
    fn the_manifest_is_written_once_and_points_at_the_library() {
        let dir = tempfile::tempdir().unwrap();
        let layer = dir.path().join(LIBRARY_FILE);
        std::fs::write(&layer, b"not really a library").unwrap();
        let at = manifest_dir(&layer).unwrap();
        assert_eq!(at, dir.path().join("vulkan"));
        let text = std::fs::read_to_string(at.join(MANIFEST_FILE)).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json["layer"]["library_path"], layer.display().to_string());
        assert_eq!(json["layer"]["name"], LAYER_NAME);
        let before = std::fs::metadata(at.join(MANIFEST_FILE)).unwrap().modified().unwrap();
        assert_eq!(manifest_dir(&layer).unwrap(), at);
        assert_eq!(std::fs::metadata(at.join(MANIFEST_FILE)).unwrap().modified().unwrap(), before, "not rewritten");
        assert_eq!(std::fs::read_dir(&at).unwrap().count(), 1, "nothing else in the directory");
    }
}
