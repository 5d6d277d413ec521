//! The capability gap between a Vulkan device and a ggml-vulkan build: the device offers integer dot product or
//! cooperative matrix, but the build's shader compiler could not emit the shaders for it, so ggml-vulkan runs its
//! fallback pipelines (`data/vulkan_capabilities.toml` names, per capability, the build define, the shader marker,
//! the pipelines either way and the upstream lines).
//!
//! Device facts come from the Vulkan layer's device record in a trace, or from `vulkaninfo`'s full output (doctor);
//! build facts from the names of the shaders `libggml-vulkan.so` embeds; ggml's own device line
//! (`ggml_vulkan: 0 = … | int dot: 0 | matrix cores: none`), where a log holds it, corroborates the result. Used
//! by `doctor`, `trace` and `report` (a run's traces: `crate::run_analysis::vulkan`), which each turn
//! [`Assessment`]s into claims with [`claims`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::Deserialize;

use crate::evidence::{Claim, Confidence, Source};
use crate::trace::{Device, TraceFile};

pub const CAPABILITIES_FILE: &str = "data/vulkan_capabilities.toml";

/// One vendor on which ggml's own policy may leave a capability off.
#[derive(Clone, Debug, Deserialize)]
pub struct VendorCondition {
    pub vendor_id: u32,
    /// Only on these drivers (`VkPhysicalDeviceDriverProperties::driverName`); empty: every driver.
    #[serde(default)]
    pub drivers: Vec<String>,
    pub says: String,
}

impl VendorCondition {
    fn applies(&self, vendor_id: Option<u32>, driver: Option<&str>) -> bool {
        vendor_id == Some(self.vendor_id)
            && (self.drivers.is_empty() || driver.is_some_and(|d| self.drivers.iter().any(|x| x == d)))
    }
}

/// One row of `data/vulkan_capabilities.toml`.
#[derive(Clone, Debug, Deserialize)]
pub struct Capability {
    pub id: String,
    pub name: String,
    pub device_extension: String,
    pub device_requires: String,
    #[serde(default)]
    pub record_field: Option<String>,
    #[serde(default)]
    pub record_flag: Option<String>,
    #[serde(default)]
    pub record_condition_flag: Option<String>,
    /// The driver property behind `record_condition_flag`.
    #[serde(default)]
    pub condition_property: Option<String>,
    pub vulkaninfo: Vec<String>,
    pub ggml_line_field: String,
    pub ggml_line_used: Vec<String>,
    pub glslc_extension: String,
    pub build_define: String,
    pub cmake_source: String,
    pub shader_marker: String,
    #[serde(default)]
    pub shader_marker_excludes: Vec<String>,
    pub affects_prefixes: Vec<String>,
    #[serde(default)]
    pub affects_types: Vec<String>,
    pub instead: String,
    pub now: String,
    pub source: String,
    #[serde(default)]
    pub vendor_conditions: Vec<VendorCondition>,
}

#[derive(Deserialize)]
struct CapabilitiesText {
    capability: Vec<Capability>,
}

/// The capabilities, in file order.
pub fn capabilities() -> &'static [Capability] {
    static ROWS: OnceLock<Vec<Capability>> = OnceLock::new();
    ROWS.get_or_init(|| {
        // Part of the binary and checked by unit tests: a parse failure is a build defect.
        toml::from_str::<CapabilitiesText>(include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/data/vulkan_capabilities.toml"
        )))
        .expect("data/vulkan_capabilities.toml parses")
        .capability
    })
}

impl Capability {
    /// Whether an embedded shader name is one only a build with [`Capability::build_define`] has.
    pub fn marks(&self, shader: &str) -> bool {
        shader.contains(&self.shader_marker) && !self.shader_marker_excludes.iter().any(|x| shader.starts_with(x))
    }

    /// Whether an observed pipeline (a debug name) is one the capability's pipelines would replace.
    pub fn affects(&self, pipeline: &str) -> bool {
        let Some(rest) = self.affects_prefixes.iter().find_map(|p| pipeline.strip_prefix(p.as_str())) else {
            return false;
        };
        // `mul_mat_vec_id_q4_k_f32`, `matmul_id_subgroup_q4_k_f32_l`: the weight type follows the prefix, after
        // any `id_`/`subgroup_` words.
        let rest = rest.trim_start_matches("id_").trim_start_matches("subgroup_");
        self.affects_types.is_empty()
            || self.affects_types.iter().any(|t| rest.strip_prefix(t.as_str()).is_some_and(|r| r.starts_with('_')))
    }
}

/// Whether a device offers a capability to ggml.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Offer {
    Yes,
    No,
    /// The source cannot say (a property the layer did not record): why.
    Unknown(String),
}

/// What one source says a device offers.
#[derive(Clone, Debug)]
pub struct DeviceFacts {
    pub name: String,
    pub vendor_id: Option<u32>,
    /// The driver's name (`radv`, `NVIDIA`, `AMD proprietary driver`).
    pub driver: Option<String>,
    /// Capability id → offer.
    pub offers: BTreeMap<String, Offer>,
    pub source: Source,
}

impl DeviceFacts {
    /// From the Vulkan layer's device record.
    pub fn from_record(d: &Device, source: Source) -> Self {
        let mut offers = BTreeMap::new();
        for c in capabilities() {
            let base = match (&c.record_field, &c.record_flag) {
                (Some(f), _) if f == "integer_dot" => Some(d.integer_dot),
                (Some(f), _) if f == "cooperative_matrix" => Some(d.cooperative_matrix),
                (_, Some(flag)) => d.flags.get(flag).copied(),
                _ => None,
            };
            let offer = match (base, &c.record_condition_flag) {
                (None, _) => Offer::Unknown(format!("the device record has no {} fact", c.device_extension)),
                (Some(false), _) => Offer::No,
                (Some(true), None) => Offer::Yes,
                (Some(true), Some(flag)) => match d.flags.get(flag) {
                    Some(true) => Offer::Yes,
                    Some(false) => Offer::No,
                    None => Offer::Unknown(format!(
                        "the device record says {} is there but not whether the driver reports {}, which ggml also \
                         needs (backscope's layer records it as flags.{flag}; this record comes from an earlier layer)",
                        c.device_extension,
                        c.condition_property.as_deref().unwrap_or(flag.as_str())
                    )),
                },
            };
            offers.insert(c.id.clone(), offer);
        }
        let driver = Some(d.driver.clone()).filter(|x| !x.is_empty());
        DeviceFacts { name: d.name.clone(), vendor_id: Some(d.vendor_id), driver, offers, source }
    }

    /// From `vulkaninfo`'s full output: one per `GPU<N>:` section.
    pub fn from_vulkaninfo(text: &str, source: &Source) -> Vec<Self> {
        vulkaninfo_sections(text)
            .into_iter()
            .map(|s| {
                let offers = capabilities().iter().map(|c| (c.id.clone(), s.offer(&c.vulkaninfo))).collect();
                DeviceFacts {
                    name: s.name.clone(),
                    vendor_id: s.vendor_id,
                    driver: s.driver.clone(),
                    offers,
                    source: source.clone(),
                }
            })
            .collect()
    }
}

/// One device of `vulkaninfo`'s output.
#[derive(Debug, Default)]
struct VulkaninfoDevice {
    name: String,
    vendor_id: Option<u32>,
    driver: Option<String>,
    extensions: BTreeSet<String>,
    /// Its `Device Extensions` list was printed (an output cut short may end before it).
    saw_extensions: bool,
    /// `NAME = true|false` lines; a name printed several times (features and properties) is true if any is.
    values: BTreeMap<String, bool>,
}

impl VulkaninfoDevice {
    fn offer(&self, wanted: &[String]) -> Offer {
        let mut unknown = Vec::new();
        for w in wanted {
            if w.starts_with("VK_") {
                if !self.saw_extensions {
                    return Offer::Unknown("vulkaninfo's output ends before the device's extension list".into());
                }
                if !self.extensions.contains(w) {
                    return Offer::No;
                }
            } else {
                match self.values.get(w) {
                    Some(true) => {}
                    Some(false) => return Offer::No,
                    None => unknown.push(w.as_str()),
                }
            }
        }
        if unknown.is_empty() {
            Offer::Yes
        } else {
            Offer::Unknown(format!("vulkaninfo does not print {}", unknown.join(", ")))
        }
    }
}

/// Most devices read from one `vulkaninfo` output (and most ggml device lines read for one run).
pub const MAX_VULKANINFO_DEVICES: usize = 16;

fn vulkaninfo_sections(text: &str) -> Vec<VulkaninfoDevice> {
    let mut out: Vec<VulkaninfoDevice> = Vec::new();
    for line in text.lines() {
        let is_header = line.starts_with("GPU")
            && line.trim_end().ends_with(':')
            && line[3..line.trim_end().len() - 1].chars().all(|c| c.is_ascii_digit());
        if is_header {
            if out.len() >= MAX_VULKANINFO_DEVICES {
                break;
            }
            out.push(VulkaninfoDevice::default());
            continue;
        }
        let Some(dev) = out.last_mut() else { continue };
        let t = line.trim();
        if t.starts_with("Device Extensions") {
            dev.saw_extensions = true;
            continue;
        }
        if let Some((key, value)) = t.split_once(" = ").or_else(|| t.split_once('=')) {
            let (key, value) = (key.trim(), value.trim());
            match key {
                "deviceName" if dev.name.is_empty() => dev.name = value.to_string(),
                "driverName" if dev.driver.is_none() => dev.driver = Some(value.to_string()),
                "vendorID" if dev.vendor_id.is_none() => {
                    dev.vendor_id = u32::from_str_radix(value.trim_start_matches("0x"), 16).ok();
                }
                _ => match value {
                    "true" => {
                        dev.values.insert(key.to_string(), true);
                    }
                    "false" => {
                        dev.values.entry(key.to_string()).or_insert(false);
                    }
                    _ => {}
                },
            }
        } else if let Some((ext, rest)) = t.split_once(':') {
            if ext.trim_end().starts_with("VK_") && rest.contains("revision") {
                dev.extensions.insert(ext.trim_end().to_string());
            }
        }
    }
    out
}

/// What a build embeds, read from the names of `libggml-vulkan.so`'s shaders.
#[derive(Clone, Debug)]
pub struct BuildFacts {
    pub library: PathBuf,
    pub shaders: usize,
    /// Capability id → the first embedded shader that only a build with its define has.
    pub marker: BTreeMap<String, Option<String>>,
}

/// Largest library read (libggml-vulkan.so of llama.cpp 11434 is 29 MB).
const MAX_LIBRARY_BYTES: u64 = 1 << 30;

impl BuildFacts {
    pub fn from_shader_names<'a>(library: &Path, names: impl IntoIterator<Item = &'a str>) -> Self {
        let mut marker: BTreeMap<String, Option<String>> =
            capabilities().iter().map(|c| (c.id.clone(), None)).collect();
        let mut shaders = 0;
        for name in names {
            shaders += 1;
            for c in capabilities() {
                let slot = marker.entry(c.id.clone()).or_default();
                if slot.is_none() && c.marks(name) {
                    *slot = Some(name.to_string());
                }
            }
        }
        BuildFacts { library: library.to_path_buf(), shaders, marker }
    }

    /// Reads the library's embedded shader names; an error names the file and what was wrong.
    pub fn read(library: &Path) -> Result<Self, String> {
        Self::read_within(library, &mut crate::host::inputs::ReadBudget::new(1, MAX_LIBRARY_BYTES))
    }

    /// [`BuildFacts::read`] of a library that a trace names, within the command's budget for such files
    /// ([`crate::host::inputs::ReadBudget::command`]): mapped, so that only the symbol table and the shader names are read.
    pub fn read_named(library: &Path) -> Result<Self, String> {
        Self::read_within(library, &mut crate::host::inputs::ReadBudget::command())
    }

    fn read_within(library: &Path, budget: &mut crate::host::inputs::ReadBudget) -> Result<Self, String> {
        let mapped = budget.map(library, MAX_LIBRARY_BYTES).map_err(|e| e.to_string())?;
        let shaders =
            binfmt::spirv::embedded_shaders(mapped.bytes()).map_err(|e| format!("{}: {e}", library.display()))?;
        if let Some(at) = mapped.cut_at() {
            return Err(format!("{}: cut short at byte {at} while it was read (the file changed)", library.display()));
        }
        if shaders.is_empty() {
            return Err(format!(
                "{}: no embedded shader names (a stripped library has no symbol table)",
                library.display()
            ));
        }
        Ok(Self::from_shader_names(library, shaders.iter().map(|s| s.name)))
    }

    pub fn has(&self, capability: &str) -> bool {
        self.marker.get(capability).is_some_and(Option::is_some)
    }
}

/// ggml-vulkan's device line (ggml-vulkan.cpp:5168): `ggml_vulkan: 0 = NAME (DRIVER) | uma: 0 | … | int dot: 0 |
/// matrix cores: none`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgmlDeviceLine {
    pub index: u32,
    pub name: String,
    pub fields: BTreeMap<String, String>,
    pub line: String,
}

impl GgmlDeviceLine {
    pub fn parse(line: &str) -> Option<Self> {
        let rest = &line[line.find("ggml_vulkan: ")? + "ggml_vulkan: ".len()..];
        let (index, rest) = rest.split_once(" = ")?;
        let index = index.trim().parse().ok()?;
        let mut parts = rest.split(" | ");
        let head = parts.next()?;
        let name = head.rsplit_once(" (").map_or(head, |(n, _)| n).trim().to_string();
        let fields: BTreeMap<String, String> = parts
            .filter_map(|p| p.split_once(": "))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        fields.contains_key("int dot").then(|| GgmlDeviceLine { index, name, fields, line: line.trim().to_string() })
    }

    /// Every device line of a log text, with its 1-based line number.
    pub fn find_all(text: &str) -> Vec<(u64, Self)> {
        text.lines()
            .enumerate()
            .filter_map(|(i, l)| Self::parse(l).map(|d| (i as u64 + 1, d)))
            .take(MAX_VULKANINFO_DEVICES)
            .collect()
    }
}

/// One capability for one device and build.
#[derive(Clone, Debug)]
pub struct Assessment {
    pub capability: &'static Capability,
    pub offer: Offer,
    pub build_has: bool,
    /// What ggml's device line says (value, and where), when a log holds it.
    pub ggml_says: Option<(String, Source)>,
    /// ggml's policy on this vendor may leave the capability off anyway.
    pub vendor_condition: Option<String>,
}

impl Assessment {
    /// The device offers it (or may) and the build lacks it.
    pub fn is_gap(&self) -> bool {
        !self.build_has && self.offer != Offer::No
    }
}

/// Assesses every capability for `device` and `build`. `ggml_line` is ggml's device line for the same device.
pub fn assess(
    device: &DeviceFacts,
    build: &BuildFacts,
    ggml_line: Option<(&GgmlDeviceLine, Source)>,
) -> Vec<Assessment> {
    capabilities()
        .iter()
        .map(|c| Assessment {
            capability: c,
            offer: device.offers.get(&c.id).cloned().unwrap_or(Offer::Unknown("not read".into())),
            build_has: build.has(&c.id),
            ggml_says: ggml_line
                .as_ref()
                .and_then(|(l, s)| l.fields.get(&c.ggml_line_field).map(|v| (v.clone(), s.clone()))),
            vendor_condition: c
                .vendor_conditions
                .iter()
                .find(|x| x.applies(device.vendor_id, device.driver.as_deref()))
                .map(|x| x.says.clone()),
        })
        .collect()
}

/// Observed pipelines (debug name, dispatches) a capability's pipelines would replace, most dispatched first.
fn affected<'a>(c: &Capability, observed: &'a [(String, u64)]) -> Vec<&'a (String, u64)> {
    let mut rows: Vec<&(String, u64)> = observed.iter().filter(|(n, _)| c.affects(n)).collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    rows
}

/// Claims for the gaps among `assessments`: Inferred where the device offers the capability, Unresolved where the
/// source cannot say whether it does or ggml's vendor policy may leave it off. `id_prefix` is the command's
/// (`trace.vulkan.capability`); `observed` the pipelines a trace saw, with their dispatches (empty for doctor).
pub fn claims(
    id_prefix: &str,
    device: &DeviceFacts,
    build: &BuildFacts,
    assessments: &[Assessment],
    observed: &[(String, u64)],
) -> Vec<Claim> {
    let total: u64 = observed.iter().map(|(_, n)| n).sum();
    let mut out = Vec::new();
    for a in assessments.iter().filter(|a| a.is_gap()) {
        let c = a.capability;
        let (confidence, offered) = match (&a.offer, &a.vendor_condition) {
            (Offer::Yes, None) => (Confidence::Inferred, format!("offers {} ({})", c.name, c.device_extension)),
            (Offer::Yes, Some(cond)) => {
                (Confidence::Unresolved, format!("offers {} ({}), though {cond}", c.name, c.device_extension))
            }
            (Offer::Unknown(why), _) => (Confidence::Unresolved, format!("may offer {}: {why}", c.name)),
            (Offer::No, _) => continue,
        };
        let mut statement = format!(
            "{} {offered}, but {} embeds no *{}* shader among its {} (its glslc lacked {}, so {} was not defined): \
             ggml-vulkan runs {} where it would have chosen {}",
            device.name,
            build.library.display(),
            c.shader_marker,
            build.shaders,
            c.glslc_extension,
            c.build_define,
            c.now,
            c.instead
        );
        let hit = affected(c, observed);
        if !hit.is_empty() {
            let n: u64 = hit.iter().map(|(_, d)| d).sum();
            let names: Vec<String> = hit.iter().take(4).map(|(p, d)| format!("{p} ×{d}")).collect();
            statement.push_str(&format!(
                "; in this trace {n} of {total} dispatches ran pipelines it would replace ({}{})",
                names.join(", "),
                if hit.len() > 4 { ", …" } else { "" }
            ));
        }
        if let Some((value, _)) = &a.ggml_says {
            statement.push_str(&format!("; ggml's own device line says {}: {value}", c.ggml_line_field));
        }
        let mut sources = vec![
            device.source.clone(),
            Source::file(
                build.library.display().to_string(),
                None,
                None,
                format!("{} embedded shaders, none named *{}*", build.shaders, c.shader_marker),
            ),
            Source::Rule { file: CAPABILITIES_FILE.into(), rule: c.id.clone(), upstream: c.source.clone() },
            Source::Rule {
                file: CAPABILITIES_FILE.into(),
                rule: format!("{}.build", c.id),
                upstream: format!(
                    "ggml/src/ggml-vulkan/{} ({} → {})",
                    c.cmake_source, c.glslc_extension, c.build_define
                ),
            },
        ];
        sources.extend(a.ggml_says.as_ref().map(|(_, s)| s.clone()));
        out.push(Claim::new(format!("{id_prefix}.{}", c.id), confidence, statement).with_sources(sources));
    }
    out
}

/// The libraries the Vulkan pipelines of `traces` came from (`spirv_object`), in order.
pub fn trace_libraries(traces: &[TraceFile]) -> Vec<PathBuf> {
    let mut seen = std::collections::BTreeSet::new();
    traces.iter().flat_map(|t| t.named_files()).filter(|o| seen.insert(*o)).map(PathBuf::from).collect()
}

/// Capability claims for the devices the traces recorded, against the libraries their pipelines came from.
/// A library that cannot be read gives one Limited claim saying so. `observed`: (pipeline, dispatches).
/// `ggml_lines`: ggml's device lines from the log of the same processes, with where they were read.
pub fn trace_claims(
    id_prefix: &str,
    traces: &[TraceFile],
    observed: &[(String, u64)],
    ggml_lines: &[(GgmlDeviceLine, Source)],
) -> Vec<Claim> {
    let mut devices: Vec<(&Device, Option<&Path>)> = Vec::new();
    for t in traces {
        for d in t.devices.values().filter(|d| d.api == "vulkan") {
            if !devices.iter().any(|(x, _)| x.name == d.name && x.driver_info == d.driver_info) {
                devices.push((d, t.path.as_deref()));
            }
        }
    }
    if devices.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for library in trace_libraries(traces).iter().take(4) {
        let build = match BuildFacts::read_named(library) {
            Ok(b) => b,
            Err(why) => {
                out.push(Claim::new(
                    format!("{id_prefix}.build"),
                    Confidence::Limited,
                    format!("The build's capabilities could not be read, so no capability gap is stated: {why}"),
                ));
                continue;
            }
        };
        for (i, (d, path)) in devices.iter().enumerate() {
            let source = Source::file(
                path.map(|p| p.display().to_string()).unwrap_or_default(),
                None,
                None,
                "backscope-trace device record (the Vulkan layer asked the driver)",
            );
            let facts = DeviceFacts::from_record(d, source);
            let prefix = if devices.len() == 1 { id_prefix.to_string() } else { format!("{id_prefix}.{}", i + 1) };
            let line = ggml_lines.iter().find(|(l, _)| l.name == d.name).map(|(l, src)| (l, src.clone()));
            out.extend(claims(&prefix, &facts, &build, &assess(&facts, &build, line), observed));
        }
    }
    out
}

/// Bytes of a server log searched for ggml's device lines (printed while the backend starts).
const LOG_HEAD_BYTES: u64 = 4 << 20;

/// ggml's device lines in the first [`LOG_HEAD_BYTES`] of a log, each with its line as the source.
pub fn log_device_lines(log: &Path) -> Vec<(GgmlDeviceLine, Source)> {
    use std::io::Read as _;
    let Ok(input) = crate::host::inputs::open_input(log) else { return Vec::new() };
    let mut head = Vec::new();
    if input.file.take(LOG_HEAD_BYTES).read_to_end(&mut head).is_err() {
        return Vec::new();
    }
    GgmlDeviceLine::find_all(&String::from_utf8_lossy(&head))
        .into_iter()
        .map(|(n, l)| {
            let src = Source::LogLine { path: log.display().to_string(), line: n, text: l.line.clone() };
            (l, src)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_has_a_source_and_markers_that_are_not_empty() {
        assert_eq!(capabilities().len(), 3);
        for c in capabilities() {
            assert!(c.source.contains("ggml-vulkan.cpp:"), "{}", c.id);
            assert!(!c.shader_marker.is_empty() && !c.affects_prefixes.is_empty(), "{}", c.id);
            assert!(c.record_field.is_some() || c.record_flag.is_some(), "{}", c.id);
        }
    }

    #[test]
    fn shader_markers_follow_vulkan_shaders_gen_names() {
        let by = |id: &str| capabilities().iter().find(|c| c.id == id).unwrap();
        // vulkan-shaders-gen.cpp:437 appends _cm1/_cm2; 627-629 and 815-823 name the integer-dot shaders _q8_1;
        // 940-944 build quantize_q8_1 in every build.
        assert!(by("integer_dot").marks("matmul_q4_k_q8_1_f32"));
        assert!(by("integer_dot").marks("arr_dmmv_q4_0_q8_1_f32"));
        assert!(!by("integer_dot").marks("quantize_q8_1_x4_subgroup"));
        assert!(by("cooperative_matrix").marks("matmul_f16_f16acc_cm1"));
        assert!(!by("cooperative_matrix").marks("matmul_f16_f16acc_cm2"));
        assert!(by("cooperative_matrix2").marks("flash_attn_f32_f16_cm2"));
        // Pipelines replaced: quantized-weight matmuls for integer dot, every matmul and flash attention for coopmat.
        assert!(by("integer_dot").affects("mul_mat_vec_q4_k_f32_f32"));
        assert!(by("integer_dot").affects("matmul_id_subgroup_q4_k_f32_l"));
        assert!(!by("integer_dot").affects("mul_mat_vec_f16_f32_f32"));
        assert!(!by("integer_dot").affects("mul_mat_vec_q4_kx_f32"));
        assert!(by("cooperative_matrix2").affects("flash_attn_f32_f16_aligned"));
        assert!(!by("cooperative_matrix2").affects("rms_norm_mul_f32"));
    }

    #[test]
    fn ggml_s_vendor_policy_applies_to_amd_s_own_drivers_only() {
        // ggml-vulkan.cpp:16257-16262: AMD's proprietary and open-source (AMDVLK) drivers get KHR_coopmat only on
        // RDNA3/RDNA4; RADV (Mesa) is not restricted.
        let coop = capabilities().iter().find(|c| c.id == "cooperative_matrix").unwrap();
        let amd = |driver: &str| coop.vendor_conditions.iter().any(|x| x.applies(Some(0x1002), Some(driver)));
        assert!(amd("AMD proprietary driver") && amd("AMD open-source driver"));
        assert!(!amd("radv"));
        assert!(!coop.vendor_conditions.iter().any(|x| x.applies(Some(0x10de), Some("NVIDIA"))));
    }

    #[test]
    fn ggml_device_lines_parse() {
        // docs/validation/gpu-2026-11-23/vulkan/summary.txt: ggml-vulkan.cpp:5168's line on the H100.
        let l = GgmlDeviceLine::parse(
            "ggml_vulkan: 0 = NVIDIA H100 80GB HBM3 (NVIDIA) | uma: 0 | fp16: 1 | bf16: 0 | fp4: 0 | warp size: 32 \
             | shared memory: 49152 | int dot: 0 | matrix cores: none",
        )
        .unwrap();
        assert_eq!((l.index, l.name.as_str()), (0, "NVIDIA H100 80GB HBM3"));
        assert_eq!(l.fields["int dot"], "0");
        assert_eq!(l.fields["matrix cores"], "none");
        assert_eq!(l.fields["shared memory"], "49152");
        assert!(GgmlDeviceLine::parse("ggml_vulkan: Found 1 Vulkan devices:").is_none());
    }

    #[test]
    fn vulkaninfo_output_gives_offers_per_device() {
        // Shaped as `vulkaninfo` 1.3.239 prints lavapipe on this machine (Mesa 22.3.6): the feature is there, the
        // acceleration property is false.
        let text = "Devices:\n========\nGPU0:\n\tvendorID = 0x10005\n\tdeviceName = llvmpipe (LLVM 15.0.6, 256 bits)\n\
                    \tintegerDotProduct4x8BitPackedSignedAccelerated = false\nDevice Extensions: count = 2\n\
                    \tVK_KHR_shader_integer_dot_product : extension revision 1\n\tVK_KHR_16bit_storage : extension revision 1\n\
                    \tshaderIntegerDotProduct = true\n";
        let src = Source::Command { argv: vec!["vulkaninfo".into()], excerpt: String::new() };
        let d = DeviceFacts::from_vulkaninfo(text, &src);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].vendor_id, Some(0x10005));
        assert_eq!(d[0].offers["integer_dot"], Offer::No);
        assert_eq!(d[0].offers["cooperative_matrix"], Offer::No);
        let accelerated = text.replace("SignedAccelerated = false", "SignedAccelerated = true");
        assert_eq!(DeviceFacts::from_vulkaninfo(&accelerated, &src)[0].offers["integer_dot"], Offer::Yes);
    }
}
