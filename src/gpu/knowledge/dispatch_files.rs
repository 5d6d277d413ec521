//! The ggml versions backscope has dispatch rules for, their data files and their other spellings.

/// The ggml versions backscope has dispatch rules for: (version id, data file, file text). The first is the
/// default.
pub(super) const DISPATCH_FILES: &[(&str, &str, &str)] = &[
    (
        "11434",
        "data/ggml_dispatch_11434.toml",
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/ggml_dispatch_11434.toml")),
    ),
    (
        "ollama-v0.24.0",
        "data/ggml_dispatch_ollama_v0.24.0.toml",
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/ggml_dispatch_ollama_v0.24.0.toml")),
    ),
];

/// Other spellings of the versions in [`DISPATCH_FILES`].
const DISPATCH_ALIASES: &[(&str, &str)] = &[
    ("b11434", "11434"),
    ("llama.cpp-11434", "11434"),
    ("o24", "ollama-v0.24.0"),
    ("ollama-0.24.0", "ollama-v0.24.0"),
    ("ollama-0.24", "ollama-v0.24.0"),
    ("v0.24.0", "ollama-v0.24.0"),
];

/// The default ggml version of `predict`: the llama.cpp build backscope's fixtures use.
pub const DEFAULT_GGML_VERSION: &str = "11434";

/// The canonical id of a ggml version name or alias.
pub fn dispatch_version(name: &str) -> Option<&'static str> {
    let n = name.trim().to_ascii_lowercase();
    DISPATCH_FILES
        .iter()
        .map(|(v, _, _)| *v)
        .find(|v| *v == n)
        .or_else(|| DISPATCH_ALIASES.iter().find(|(a, _)| *a == n).map(|(_, v)| *v))
}

/// The data file of a canonical version id.
pub fn dispatch_file(version: &str) -> Option<&'static str> {
    DISPATCH_FILES.iter().find(|(v, _, _)| *v == version).map(|(_, f, _)| *f)
}

/// Every version id, for messages.
pub fn dispatch_versions() -> Vec<&'static str> {
    DISPATCH_FILES.iter().map(|(v, _, _)| *v).collect()
}
