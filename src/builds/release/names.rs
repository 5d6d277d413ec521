//! llama.cpp's release asset names, the URL patterns that name one archive per build, and `SHA256SUMS` files.
//!
//! The names are `llama-bNNNN-bin-<platform>.<ext>` (ggml-org/llama.cpp, `.github/workflows/release.yml`): Linux
//! platforms `ubuntu-x64`, `ubuntu-arm64`, `ubuntu-s390x` (CPU), `ubuntu-vulkan-x64`, `ubuntu-vulkan-arm64`,
//! `ubuntu-rocm-7.2-x64` (the ROCm version is in the name), `ubuntu-openvino-<ver>-x64`; Windows `win-cpu-x64`,
//! `win-vulkan-x64`, `win-cuda-12.4-x64`, `win-hip-radeon-x64`; macOS `macos-arm64`, `macos-x64`. Linux and macOS
//! archives are `.tar.gz` with every entry under `llama-bNNNN/`; until the switch b7312's release notes announced
//! (December 2025) the Linux ones were `.zip` with the binaries under `build/bin/`. Windows archives are `.zip`,
//! flat. llama.cpp publishes no checksum file.

use anyhow::{bail, Context};

use crate::builds::types::{Backend, BuildNumber};
use crate::builds::unpack::Kind;

/// The release page's download URL pattern of llama.cpp's own archives, up to the platform.
pub const GITHUB_DOWNLOADS: &str = "https://github.com/ggml-org/llama.cpp/releases/download/{build}/llama-{build}-bin-";

/// The checksum file looked for beside the archives: `sha256sum`'s output (`<64 hex>  <name>`, or ` *<name>` in
/// binary mode).
pub const SUMS_FILE: &str = "SHA256SUMS";

/// An archive name read back: its build, its platform (`ubuntu-vulkan-x64`) and its kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiveName {
    pub build: BuildNumber,
    pub platform: String,
    pub kind: Kind,
}

/// `llama-b6000-bin-ubuntu-x64.zip` → build b6000, platform `ubuntu-x64`, zip. Other names are none.
pub fn parse_archive_name(name: &str) -> Option<ArchiveName> {
    let kind = Kind::of(name)?;
    let stem =
        name.strip_suffix(".zip").or_else(|| name.strip_suffix(".tar.gz")).or_else(|| name.strip_suffix(".tgz"))?;
    let rest = stem.strip_prefix("llama-b")?;
    let (digits, platform) = rest.split_once("-bin-")?;
    if digits.is_empty() || digits.len() > 9 || !digits.bytes().all(|b| b.is_ascii_digit()) || platform.is_empty() {
        return None;
    }
    if !platform.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) {
        return None;
    }
    Some(ArchiveName { build: BuildNumber(digits.parse().ok()?), platform: platform.to_string(), kind })
}

/// llama.cpp's name for this machine's CPU architecture.
pub fn arch_name() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// How well a platform fits `backend` on `arch` (higher is better; none: not a build of it): `ubuntu-<arch>` for
/// the CPU, `ubuntu-vulkan-<arch>`, `ubuntu-rocm-<ver>-<arch>` for HIP (the newest ROCm first). llama.cpp
/// publishes no Linux CUDA archive.
pub fn platform_rank(platform: &str, backend: Backend, arch: &str) -> Option<u64> {
    let middle = platform.strip_prefix("ubuntu-")?.strip_suffix(arch)?;
    match backend {
        Backend::Cpu => middle.is_empty().then_some(0),
        Backend::Vulkan => (middle == "vulkan-").then_some(0),
        Backend::Hip => {
            let version = middle.strip_prefix("rocm-")?.strip_suffix('-')?;
            let mut parts = version.split('.').map(|p| p.parse::<u64>().ok());
            let (major, minor) = (parts.next()??, parts.next().unwrap_or(Some(0))?);
            Some(major.min(1 << 20) << 20 | minor.min((1 << 20) - 1))
        }
        Backend::Cuda => None,
    }
}

/// What `platform_rank` looks for, in words (for an error that finds nothing).
pub fn platform_wanted(backend: Backend, arch: &str) -> String {
    match backend {
        Backend::Cpu => format!("ubuntu-{arch}"),
        Backend::Vulkan => format!("ubuntu-vulkan-{arch}"),
        Backend::Hip => format!("ubuntu-rocm-<version>-{arch}"),
        Backend::Cuda => "none: llama.cpp publishes CUDA archives for Windows only".into(),
    }
}

/// The URL pattern of `release:github` for `backend` on this machine: llama.cpp's release downloads, `{ext}` for
/// either era's archive.
pub fn github_pattern(backend: Backend, arch: &str) -> anyhow::Result<String> {
    let platform = match backend {
        Backend::Cpu => format!("ubuntu-{arch}"),
        Backend::Vulkan => format!("ubuntu-vulkan-{arch}"),
        Backend::Hip => bail!(
            "release:github: llama.cpp's ROCm archives name their ROCm version (llama-bNNNN-bin-ubuntu-rocm-7.2-x64.tar.gz); \
             give the URL: --builds 'release:{GITHUB_DOWNLOADS}ubuntu-rocm-7.2-{arch}.tar.gz'"
        ),
        Backend::Cuda => bail!("release:github: llama.cpp publishes CUDA archives for Windows only; build them: --builds pypi"),
    };
    Ok(format!("{GITHUB_DOWNLOADS}{platform}.{{ext}}"))
}

/// A checked URL pattern: `{build}` somewhere (it becomes `bNNNN`), and a last path segment that names an archive
/// (`.zip`, `.tar.gz`, `.tgz`, or `.{ext}` for whichever of `.tar.gz` and `.zip` the server has).
pub fn check_pattern(pattern: &str) -> anyhow::Result<()> {
    crate::builds::http::check_url(pattern, "release URL")?;
    if !pattern.contains("{build}") {
        bail!("release URL {pattern:?}: no {{build}} in it (it becomes bNNNN for each build)");
    }
    let last = pattern.rsplit('/').next().unwrap_or("");
    if Kind::of(last).is_none() && !last.ends_with(".{ext}") {
        bail!("release URL {pattern:?}: its file name must end in .zip, .tar.gz, .tgz or .{{ext}}");
    }
    if pattern.contains(['?', '#']) {
        bail!("release URL {pattern:?}: a query or fragment is not part of an archive's name");
    }
    Ok(())
}

/// The URLs `pattern` gives for `build`, in the order they are tried.
pub fn urls_for(pattern: &str, build: BuildNumber) -> Vec<String> {
    let named = pattern.replace("{build}", &build.to_string());
    if named.contains("{ext}") {
        ["tar.gz", "zip"].iter().map(|ext| named.replace("{ext}", ext)).collect()
    } else {
        vec![named]
    }
}

/// `(directory URL with its slash, file name)` of an archive URL.
pub fn split_url(url: &str) -> (&str, &str) {
    match url.rfind('/') {
        Some(i) => (&url[..=i], &url[i + 1..]),
        None => ("", url),
    }
}

/// The digests of a `SHA256SUMS` file by file name. A line that is not `<64 hex> <space or *><name>` is an error
/// naming it (a checksum file that cannot be read must not pass as one that lists nothing).
pub fn parse_sums(text: &[u8], what: &str) -> anyhow::Result<Vec<(String, String)>> {
    let text = std::str::from_utf8(text).with_context(|| format!("{what}: not UTF-8 text"))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || anyhow::anyhow!("{what}:{}: expected `<sha256 hex>  <file name>`, found {line:?}", i + 1);
        let (hex, rest) = line.split_once(' ').ok_or_else(bad)?;
        let name = rest.strip_prefix(' ').or_else(|| rest.strip_prefix('*')).ok_or_else(bad)?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) || name.is_empty() {
            return Err(bad());
        }
        out.push((name.to_string(), hex.to_ascii_lowercase()));
    }
    Ok(out)
}

/// The digest `sums` gives `name`, if it lists it (a name listed twice with two digests lists neither).
pub fn sum_of<'s>(sums: &'s [(String, String)], name: &str) -> Option<&'s str> {
    let mut found = sums.iter().filter(|(n, _)| n == name).map(|(_, h)| h.as_str());
    let first = found.next()?;
    found.all(|h| h == first).then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_names_parse_in_both_eras_and_the_rest_is_refused() {
        let n = parse_archive_name("llama-b6000-bin-ubuntu-x64.zip").unwrap();
        assert_eq!((n.build, n.platform.as_str(), n.kind), (BuildNumber(6000), "ubuntu-x64", Kind::Zip));
        let n = parse_archive_name("llama-b7400-bin-ubuntu-rocm-7.2-x64.tar.gz").unwrap();
        assert_eq!((n.build, n.platform.as_str(), n.kind), (BuildNumber(7400), "ubuntu-rocm-7.2-x64", Kind::TarGz));
        for bad in [
            "llama-b6000-bin-ubuntu-x64.7z",
            "cudart-llama-bin-win-cuda-12.4-x64.zip",
            "llama-bx-bin-ubuntu-x64.zip",
            "llama-b6000-ubuntu-x64.zip",
            "llama-b6000-bin-.zip",
            "llama-b6000-bin-a/b.zip",
            "llama-b6000-xcframework.zip",
        ] {
            assert_eq!(parse_archive_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn platforms_are_picked_by_backend_and_architecture() {
        assert_eq!(platform_rank("ubuntu-x64", Backend::Cpu, "x64"), Some(0));
        assert_eq!(platform_rank("ubuntu-x64", Backend::Vulkan, "x64"), None);
        assert_eq!(platform_rank("ubuntu-vulkan-x64", Backend::Vulkan, "x64"), Some(0));
        assert_eq!(platform_rank("ubuntu-vulkan-arm64", Backend::Vulkan, "x64"), None);
        assert_eq!(platform_rank("ubuntu-x64", Backend::Cpu, "arm64"), None);
        let (old, new) = (
            platform_rank("ubuntu-rocm-6.4-x64", Backend::Hip, "x64").unwrap(),
            platform_rank("ubuntu-rocm-7.2-x64", Backend::Hip, "x64").unwrap(),
        );
        assert!(new > old);
        assert_eq!(platform_rank("ubuntu-rocm-x-x64", Backend::Hip, "x64"), None);
        assert_eq!(platform_rank("win-cuda-12.4-x64", Backend::Cuda, "x64"), None);
        assert_eq!(platform_rank("ubuntu-openvino-2026.0-x64", Backend::Cpu, "x64"), None);
    }

    #[test]
    fn patterns_are_checked_and_expand_per_build() {
        let gh = github_pattern(Backend::Vulkan, "x64").unwrap();
        assert_eq!(
            urls_for(&gh, BuildNumber(7400)),
            [
                "https://github.com/ggml-org/llama.cpp/releases/download/b7400/llama-b7400-bin-ubuntu-vulkan-x64.tar.gz",
                "https://github.com/ggml-org/llama.cpp/releases/download/b7400/llama-b7400-bin-ubuntu-vulkan-x64.zip"
            ]
        );
        check_pattern(&gh).unwrap();
        assert!(github_pattern(Backend::Cuda, "x64").is_err() && github_pattern(Backend::Hip, "x64").is_err());
        check_pattern("http://127.0.0.1:9/{build}/llama-{build}-bin-ubuntu-x64.zip").unwrap();
        for bad in [
            "http://example.org/{build}/x.zip",
            "https://x/llama-b1-bin-ubuntu-x64.zip",
            "https://x/{build}/index.html",
            "https://x/{build}.zip?token=1",
        ] {
            assert!(check_pattern(bad).is_err(), "{bad}");
        }
        assert_eq!(split_url("https://h/d/b1/a.zip"), ("https://h/d/b1/", "a.zip"));
    }

    #[test]
    fn sums_files_are_read_strictly() {
        let a = "a".repeat(64);
        let b = "B".repeat(64);
        let text = format!("{a}  llama-b1-bin-ubuntu-x64.tar.gz\n{b} *llama-b2-bin-ubuntu-x64.zip\n\n# note\n");
        let sums = parse_sums(text.as_bytes(), "SHA256SUMS").unwrap();
        assert_eq!(sum_of(&sums, "llama-b1-bin-ubuntu-x64.tar.gz"), Some(a.as_str()));
        assert_eq!(sum_of(&sums, "llama-b2-bin-ubuntu-x64.zip"), Some("b".repeat(64).as_str()));
        assert_eq!(sum_of(&sums, "other"), None);
        let twice = parse_sums(format!("{a}  x\n{}  x\n", "c".repeat(64)).as_bytes(), "S").unwrap();
        assert_eq!(sum_of(&twice, "x"), None, "two digests for one name: neither is believed");
        for bad in ["abc  x", &format!("{a}x"), &format!("{a}  "), "\u{0}"] {
            assert!(parse_sums(bad.as_bytes(), "SHA256SUMS").is_err(), "{bad:?}");
        }
        assert!(parse_sums(b"\xff\xfe", "S").is_err());
    }
}
