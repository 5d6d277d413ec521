//! Finding what observes a program: the CUDA/HIP observer library (loaded with `LD_PRELOAD`) and the Vulkan layer
//! (enabled through the Vulkan loader's environment). A ground-floor module: `trace` and `sweep --trace` observe
//! alike, so they find and enable both the same way.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use std::io::Write as _;

use trace_format::vulkan::{loader_env, LAYER_NAME, LIBRARY_FILE, MANIFEST_FILE};

use crate::observe::vulkan::GGML_DEBUG_MARKERS;

/// The observer library's file name.
pub const OBSERVER_FILE: &str = "libbackscope_observer.so";

/// Where a package (or any install under one prefix) puts the libraries `trace` loads, relative to the prefix of the
/// `bin/` holding backscope: `/usr/bin/backscope` finds them in `/usr/lib/backscope`. The Debian package's assets
/// (Cargo.toml, `[package.metadata.deb]`) use the same two places.
pub const INSTALLED_LIB_DIR: &str = "lib/backscope";
/// Where the package puts the Vulkan layer's manifest, relative to the same prefix: a directory the Vulkan loader
/// searches for explicit layers (`/usr/share/vulkan/explicit_layer.d`).
pub const INSTALLED_MANIFEST_DIR: &str = "share/vulkan/explicit_layer.d";

/// The observer library: the path given, else `$BACKSCOPE_OBSERVER_SO`, else beside the running executable or where
/// an install puts it ([`library_candidates`]).
pub fn find_observer(explicit: Option<&Path>) -> Result<PathBuf> {
    find_library(explicit, "observer library", "BACKSCOPE_OBSERVER_SO", OBSERVER_FILE, " or pass --observer PATH")
}

/// The places searched for `file` when neither a path nor the environment names it, in order, for an executable in
/// `exe_dir`: beside it (`cargo build`), in `deps/` (a `cargo test` build), and `../lib/backscope` (the package,
/// or any install under one prefix). Lexical: the executable's path is already resolved, so `..` is its parent.
pub fn library_candidates(exe_dir: &Path, file: &str) -> Vec<PathBuf> {
    let mut dirs = vec![exe_dir.to_path_buf(), exe_dir.join("deps")];
    if let Some(prefix) = exe_dir.parent() {
        dirs.push(prefix.join(INSTALLED_LIB_DIR));
    }
    dirs.into_iter().map(|d| d.join(file)).collect()
}

/// A library `backscope trace` loads into the traced program (`file`, called `what` in messages): the path given,
/// else `$env_var`, else the first of [`library_candidates`] that is a file. When none is, the error names every
/// place looked in. `hint` ends the not-found message.
pub fn find_library(explicit: Option<&Path>, what: &str, env_var: &str, file: &str, hint: &str) -> Result<PathBuf> {
    // A named library must be a regular file: the dynamic loader of the traced program would block forever on a
    // FIFO and read a device without end.
    let regular = |p: PathBuf, named: String| -> Result<PathBuf> {
        let p = p.canonicalize().with_context(|| named.clone())?;
        crate::host::inputs::open_input(&p).with_context(|| named)?;
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
    let candidates = library_candidates(exe.parent().unwrap_or(Path::new(".")), file);
    if let Some(found) = candidates.iter().find(|c| c.is_file()) {
        return Ok(found.canonicalize()?);
    }
    let looked: Vec<String> = candidates.iter().filter_map(|c| c.parent()).map(|d| d.display().to_string()).collect();
    bail!(
        "cannot find {file} (${env_var} is not set; looked in {}, for the backscope at {}); install the Debian \
         package, or build it with `cargo build --release` (the workspace builds it){hint}",
        looked.join(", "),
        exe.display()
    )
}

/// The variables that enable the Vulkan layer (`crate::observe::observers::layer_env`), its manifest written: empty, with a note
/// on stderr, when the layer cannot be found and none was named (CUDA/HIP are still observed); an error when the
/// one named cannot be used.
pub fn vulkan_env(explicit: Option<&Path>, existing: impl Fn(&str) -> Option<String>) -> Result<Vec<(String, String)>> {
    let dir = optional_manifest_dir(explicit).context("writing the Vulkan layer's manifest")?;
    Ok(dir.map(|dir| layer_env(&dir, existing)).unwrap_or_default())
}

/// The Vulkan layer library: explicit path, `$BACKSCOPE_VKLAYER_SO`, else beside the backscope executable (where
/// `cargo build` puts it) or where an install puts it ([`library_candidates`]).
pub fn find_layer(explicit: Option<&Path>) -> Result<PathBuf> {
    find_library(explicit, "Vulkan layer library", "BACKSCOPE_VKLAYER_SO", LIBRARY_FILE, " or pass --vklayer PATH")
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

/// The manifest that names the layer library at `layer` (the loader reads `implementation_version` as an integer).
/// `backscope generate vulkan-manifest` writes the package's with it, so that [`manifest_dir`] recognises it.
pub fn manifest_text(layer: &Path) -> Vec<u8> {
    let mut text = Vec::new();
    trace_format::vulkan::manifest(&mut text, layer.as_os_str().as_encoded_bytes(), "1");
    text
}

/// The directory holding the layer's manifest for `layer`: the installed one ([`INSTALLED_MANIFEST_DIR`] under the
/// prefix of a layer in [`INSTALLED_LIB_DIR`]) when it holds this very manifest; else `vulkan/` beside the library,
/// written if missing or different, when that can be written; else a directory of this user's under the temp dir.
/// The loader reads every manifest of a directory on `VK_ADD_LAYER_PATH`, so the written directories hold nothing
/// else.
pub fn manifest_dir(layer: &Path) -> Result<PathBuf> {
    let text = manifest_text(layer);
    // Read through the floor's door, one byte more than the manifest to tell a longer file apart: the fallback is
    // under the shared temp directory, where another user could have put a FIFO (a plain read would wait on it
    // forever) or a link to /dev/zero.
    let holds_it = |dir: &Path| {
        crate::host::inputs::read_limited(&dir.join(MANIFEST_FILE), text.len() as u64 + 1).is_ok_and(|t| t == text)
    };
    if let Some(installed) = installed_manifest_dir(layer).filter(|d| holds_it(d)) {
        return Ok(installed);
    }
    let beside = layer.parent().map(|d| d.join("vulkan"));
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let fallback = std::env::temp_dir().join(format!("backscope-vklayer-{uid}"));
    let mut last_error = None;
    for dir in beside.into_iter().chain([fallback]) {
        if holds_it(&dir) {
            return Ok(dir);
        }
        match write_atomically(&dir, &dir.join(MANIFEST_FILE), &text) {
            Ok(()) => return Ok(dir),
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or_else(|| anyhow::anyhow!("no directory for the Vulkan layer manifest")))
}

/// Where an install puts the manifest of a layer installed at `PREFIX/lib/backscope/FILE`: `PREFIX/share/vulkan/
/// explicit_layer.d`; `None` for a layer elsewhere.
fn installed_manifest_dir(layer: &Path) -> Option<PathBuf> {
    let lib_dir = layer.parent()?;
    let prefix = lib_dir.parent()?.parent()?;
    (lib_dir == prefix.join(INSTALLED_LIB_DIR)).then(|| prefix.join(INSTALLED_MANIFEST_DIR))
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
///
/// When another backscope layer's manifest is installed where the loader looks by itself ([`installed_elsewhere`]:
/// a build tree's backscope on a machine with the package), the directory goes on `VK_LAYER_PATH` instead, which
/// replaces those places for explicit layers: of two layers of one name, loader 1.3.239 (Debian 12's) loads the one
/// it found last, the installed one, and this build's would silently not be the one tracing.
pub fn layer_env(manifest_dir: &Path, existing: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    let join = |first: String, rest: Option<String>| match rest.filter(|r| !r.is_empty()) {
        Some(r) if r.split(':').any(|x| x == first) => r,
        Some(r) => format!("{first}:{r}"),
        None => first,
    };
    let path_var = match installed_elsewhere(manifest_dir, &existing) {
        Some(_) => loader_env::LAYER_PATH,
        None => loader_env::ADD_LAYER_PATH,
    };
    let mut vars = vec![
        (path_var.to_string(), join(manifest_dir.display().to_string(), existing(path_var))),
        (loader_env::INSTANCE_LAYERS.to_string(), join(LAYER_NAME.to_string(), existing(loader_env::INSTANCE_LAYERS))),
    ];
    if existing(GGML_DEBUG_MARKERS).is_none() {
        vars.push((GGML_DEBUG_MARKERS.to_string(), "1".to_string()));
    }
    vars
}

/// A manifest of backscope's layer, other than the one in `manifest_dir`, in a data directory where the Vulkan loader
/// finds explicit layers by itself: `vulkan/explicit_layer.d` under each of `$XDG_DATA_DIRS` (as `existing` gives
/// it; by default /usr/local/share and /usr/share), where a package installs it.
fn installed_elsewhere(manifest_dir: &Path, existing: &impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let data_dirs = existing("XDG_DATA_DIRS").filter(|d| !d.is_empty());
    let data_dirs = data_dirs.as_deref().unwrap_or("/usr/local/share:/usr/share");
    data_dirs
        .split(':')
        .filter(|d| Path::new(d).is_absolute())
        .map(|d| Path::new(d).join("vulkan/explicit_layer.d"))
        .filter(|d| d != manifest_dir)
        .find(|d| d.join(MANIFEST_FILE).is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_adds_to_what_is_there() {
        // No data directory with an installed layer: this host's /usr/share is not part of the test.
        let nowhere = |k: &str| (k == "XDG_DATA_DIRS").then(|| "/nonexistent".to_string());
        let none = layer_env(Path::new("/opt/b/vulkan"), nowhere);
        assert_eq!(
            none,
            [
                ("VK_ADD_LAYER_PATH".to_string(), "/opt/b/vulkan".to_string()),
                ("VK_INSTANCE_LAYERS".to_string(), "VK_LAYER_BACKSCOPE_dispatch".to_string()),
                ("GGML_VK_DEBUG_MARKERS".to_string(), "1".to_string()),
            ]
        );
        let some = layer_env(Path::new("/opt/b/vulkan"), |k| match k {
            "XDG_DATA_DIRS" => Some("/nonexistent".into()),
            "VK_ADD_LAYER_PATH" => Some("/x".into()),
            "VK_INSTANCE_LAYERS" => Some("VK_LAYER_KHRONOS_validation".into()),
            "GGML_VK_DEBUG_MARKERS" => Some("0".into()),
            _ => None,
        });
        assert_eq!(some[0].1, "/opt/b/vulkan:/x");
        assert_eq!(some[1].1, "VK_LAYER_BACKSCOPE_dispatch:VK_LAYER_KHRONOS_validation");
        assert_eq!(some.len(), 2, "a GGML_VK_DEBUG_MARKERS the user set is theirs");
        let again = layer_env(Path::new("/opt/b/vulkan"), |k| match k {
            "XDG_DATA_DIRS" => Some("/nonexistent".into()),
            "VK_INSTANCE_LAYERS" => Some(LAYER_NAME.into()),
            _ => None,
        });
        assert_eq!(again[1].1, LAYER_NAME, "not added twice");
    }

    /// A build tree's layer on a machine where a package installed another: the installed one must not be loaded
    /// in its place, so the loader's own explicit-layer directories are replaced (VK_LAYER_PATH), not added to.
    /// The installed layer itself keeps VK_ADD_LAYER_PATH.
    #[test]
    fn an_installed_layer_does_not_shadow_a_build_trees() {
        let data = tempfile::tempdir().unwrap();
        let installed = data.path().join("vulkan/explicit_layer.d");
        std::fs::create_dir_all(&installed).unwrap();
        std::fs::write(installed.join(MANIFEST_FILE), b"{}").unwrap();
        let data_dirs = format!("/nonexistent:{}", data.path().display());
        let env = |k: &str| (k == "XDG_DATA_DIRS").then(|| data_dirs.clone());
        let build = layer_env(Path::new("/x/target/release/vulkan"), env);
        assert_eq!(build[0], ("VK_LAYER_PATH".to_string(), "/x/target/release/vulkan".to_string()));
        let own = layer_env(&installed, env);
        assert_eq!(own[0], ("VK_ADD_LAYER_PATH".to_string(), installed.display().to_string()));
    }

    #[test]
    fn an_installed_backscope_looks_in_its_prefix() {
        let found = library_candidates(Path::new("/usr/bin"), OBSERVER_FILE);
        assert_eq!(
            found,
            [
                PathBuf::from("/usr/bin/libbackscope_observer.so"),
                PathBuf::from("/usr/bin/deps/libbackscope_observer.so"),
                PathBuf::from("/usr/lib/backscope/libbackscope_observer.so"),
            ]
        );
        assert_eq!(
            installed_manifest_dir(Path::new("/usr/lib/backscope/libbackscope_vklayer.so")),
            Some(PathBuf::from("/usr/share/vulkan/explicit_layer.d"))
        );
        assert_eq!(installed_manifest_dir(Path::new("/x/target/release/libbackscope_vklayer.so")), None);
    }

    /// The package's manifest (written by `generate vulkan-manifest` with [`manifest_text`]) is used where it is, and
    /// nothing is written beside an installed library (`dpkg -r` would leave it behind); a manifest there that names
    /// another library is not taken.
    #[test]
    fn an_installed_manifest_is_used_as_it_is() {
        let prefix = tempfile::tempdir().unwrap();
        let lib = prefix.path().join(INSTALLED_LIB_DIR);
        let manifests = prefix.path().join(INSTALLED_MANIFEST_DIR);
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::create_dir_all(&manifests).unwrap();
        let layer = lib.join(LIBRARY_FILE);
        std::fs::write(&layer, b"not really a library").unwrap();
        std::fs::write(manifests.join(MANIFEST_FILE), manifest_text(&layer)).unwrap();
        assert_eq!(manifest_dir(&layer).unwrap(), manifests);
        assert!(!lib.join("vulkan").exists(), "nothing written beside the installed library");

        std::fs::write(manifests.join(MANIFEST_FILE), manifest_text(Path::new("/elsewhere/lib.so"))).unwrap();
        assert_eq!(manifest_dir(&layer).unwrap(), lib.join("vulkan"), "another library's manifest is not ours");
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
