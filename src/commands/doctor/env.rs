//! Environment overrides that change which GPU a runtime uses and how: `HSA_OVERRIDE_GFX_VERSION` (ROCm loads
//! code built for another ISA), `*_VISIBLE_DEVICES` (devices hidden), `OLLAMA_*` and `GGML_*` — in this process's
//! environment and in the environment systemd gives `ollama.service`, which is what the service really runs with.

use std::collections::BTreeMap;

use serde::Serialize;

use super::host::{read_small, Host};
use crate::evidence::Source;
use crate::gpu::knowledge::{self, archs::AmdArch};

/// Whether a variable is one the doctor reports.
pub fn relevant(name: &str) -> bool {
    name.starts_with("HSA_OVERRIDE_GFX_VERSION")
        || name.ends_with("_VISIBLE_DEVICES")
        || name == "GPU_DEVICE_ORDINAL"
        || name.starts_with("OLLAMA_")
        || name.starts_with("GGML_")
}

/// The gfx target an `HSA_OVERRIDE_GFX_VERSION` value names: `x.y.z` → `gfx` + x + y and z as one hex digit
/// each (10.3.0 → gfx1030, 9.0.6 → gfx906, 9.0.10 → gfx90a), the mapping ROCr applies and Ollama mirrors for its
/// bookkeeping (ollama discover/amd.go).
pub fn override_target(value: &str) -> Option<String> {
    let mut parts = value.trim().split('.');
    let major: u32 = parts.next()?.trim().parse().ok()?;
    let minor: u32 = parts.next()?.trim().parse().ok()?;
    let stepping: u32 = parts.next()?.trim().parse().ok()?;
    if parts.next().is_some() || major == 0 || minor > 15 || stepping > 15 {
        return None;
    }
    Some(format!("gfx{major}{minor:x}{stepping:x}"))
}

/// The ISA generation of a gfx target: `gfx906` → 9, `gfx1030` → 10 (all but the last two hex digits).
pub fn generation(target: &str) -> Option<u32> {
    let digits = target.strip_prefix("gfx")?.split(':').next()?;
    digits.get(..digits.len().checked_sub(2)?)?.parse().ok()
}

fn arch_row(id: &str) -> Option<&'static AmdArch> {
    knowledge::gpu_archs().amd.iter().find(|a| a.id == id)
}

/// What an override of `card` onto `target` risks, from the arch table: the target's code may use what the card
/// lacks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OverrideRisk {
    pub card: String,
    pub target: String,
    /// `none` (same target), `low` (nothing the card lacks by the data), `crash` (instructions or a wave size the
    /// card lacks), `unknown` (an arch the data does not have).
    pub risk: &'static str,
    pub reasons: Vec<String>,
    /// The arch rows the judgement rests on.
    pub sources: Vec<Source>,
}

pub fn override_risk(card: &str, target: &str) -> OverrideRisk {
    let mut r = OverrideRisk {
        card: card.into(),
        target: target.into(),
        risk: "low",
        reasons: Vec::new(),
        sources: Vec::new(),
    };
    if card == target {
        r.risk = "none";
        r.reasons.push("the override names the card's own target".into());
        return r;
    }
    if let (Some(a), Some(b)) = (generation(card), generation(target)) {
        if a != b {
            r.risk = "crash";
            r.reasons.push(format!(
                "code for {target} is GFX{b} machine code, a different instruction-set generation than the card's GFX{a}"
            ));
        }
    }
    match (arch_row(card), arch_row(target)) {
        (Some(c), Some(t)) => {
            for row in [c, t] {
                r.sources.push(Source::Rule {
                    file: knowledge::GPU_ARCHS_FILE.into(),
                    rule: row.id.clone(),
                    upstream: row.source.clone(),
                });
            }
            if c.wave != t.wave {
                r.reasons.push(format!("{target} code is built for wave{}, the card runs wave{}", t.wave, c.wave));
            }
            if c.int8_dot == "emulated" && t.int8_dot != "emulated" {
                r.reasons.push(format!(
                    "{target} code uses the native int8 dot product ({}), which {card} lacks",
                    t.int8_dot
                ));
            }
            if t.fp16_dot2 && !c.fp16_dot2 {
                r.reasons.push(format!("{target} code uses V_DOT2_F32_F16, which {card} lacks"));
            }
            if t.matrix != "none" && t.matrix != c.matrix {
                r.reasons.push(format!("{target} code uses {} matrix instructions, which {card} lacks", t.matrix));
            }
            if !r.reasons.is_empty() {
                r.risk = "crash";
            } else {
                r.reasons.push(format!(
                    "by backscope's arch data {target} ({}) uses nothing {card} ({}) lacks",
                    t.family, c.family
                ));
            }
        }
        _ if r.risk != "crash" => {
            r.risk = "unknown";
            r.reasons
                .push(format!("backscope's arch data lacks {}", if arch_row(card).is_none() { card } else { target }));
        }
        _ => {}
    }
    r
}

/// One variable where it was found.
#[derive(Clone, Debug, Serialize)]
pub struct Setting {
    pub name: String,
    pub value: String,
    /// `process` (backscope's own environment) or the unit file / command that showed it.
    pub origin: String,
}

/// The `ollama.service` unit as systemd or its unit files describe it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ServiceUnit {
    /// Where the environment was read: `systemctl show ollama.service` or the unit files.
    pub read_from: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Each assignment with the file (or command) it came from; a later drop-in replaces an earlier value.
    pub environment: Vec<Setting>,
    /// `EnvironmentFile=` entries (not read: they may hold secrets).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub environment_files: Vec<String>,
}

/// Split a systemd `Environment=` value into assignments: whitespace-separated, double or single quotes group
/// (systemd.exec(5), "Environment=").
pub fn split_assignments(value: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out.into_iter().filter_map(|a| a.split_once('=').map(|(k, v)| (k.to_string(), v.to_string()))).collect()
}

/// The unit files of ollama.service under the host's root, in systemd's order (the drop-ins after the unit).
pub fn unit_files(host: &Host) -> ServiceUnit {
    let mut unit = ServiceUnit::default();
    let mut files = Vec::new();
    for dir in [
        "/etc/systemd/system",
        "/run/systemd/system",
        "/usr/local/lib/systemd/system",
        "/usr/lib/systemd/system",
        "/lib/systemd/system",
    ] {
        let p = host.path(&format!("{dir}/ollama.service"));
        if p.is_file() {
            files.push(p);
            break;
        }
    }
    let dropins = host.path("/etc/systemd/system/ollama.service.d");
    let mut confs: Vec<_> = std::fs::read_dir(&dropins)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "conf"))
        .take(64)
        .collect();
    confs.sort();
    files.extend(confs);
    for f in files {
        let Some(text) = read_small(&f) else { continue };
        unit.read_from.push(f.display().to_string());
        for line in text.lines().map(str::trim) {
            if let Some(v) = line.strip_prefix("Environment=") {
                for (k, val) in split_assignments(v) {
                    unit.environment.retain(|x| x.name != k);
                    unit.environment.push(Setting { name: k, value: val, origin: f.display().to_string() });
                }
            } else if let Some(v) = line.strip_prefix("User=") {
                unit.user = Some(v.trim().to_string());
            } else if let Some(v) = line.strip_prefix("EnvironmentFile=") {
                unit.environment_files.push(v.trim().to_string());
            }
        }
    }
    unit
}

/// The origin of settings `systemctl show` reported.
pub const SYSTEMCTL_ORIGIN: &str = "command:systemctl show ollama.service";

/// `systemctl show ollama.service -p Environment -p User -p FragmentPath` output (`Key=value` lines).
pub fn parse_systemctl_show(text: &str) -> Option<ServiceUnit> {
    let get = |k: &str| text.lines().find_map(|l| l.strip_prefix(k)?.strip_prefix('=').map(str::to_string));
    let fragment = get("FragmentPath").filter(|f| !f.is_empty())?;
    Some(ServiceUnit {
        read_from: vec![format!("systemctl show ollama.service (unit {fragment})")],
        user: get("User").filter(|u| !u.is_empty()),
        environment: get("Environment")
            .map(|e| split_assignments(&e))
            .unwrap_or_default()
            .into_iter()
            .map(|(name, value)| Setting { name, value, origin: SYSTEMCTL_ORIGIN.to_string() })
            .collect(),
        environment_files: Vec::new(),
    })
}

/// The relevant variables of an environment map.
pub fn settings(env: &BTreeMap<String, String>, origin: &str) -> Vec<Setting> {
    env.iter()
        .filter(|(k, _)| relevant(k))
        .map(|(k, v)| Setting { name: k.clone(), value: v.clone(), origin: origin.to_string() })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn override_values_name_targets() {
        // Values users set in public issues: 10.3.0 (ollama#12111, #12915), 9.0.0 (ROCm/rocBLAS#1398), 11.5.0
        // (llama.cpp#19949); 9.0.6 and 9.0.10 by the same rule.
        assert_eq!(override_target("10.3.0").as_deref(), Some("gfx1030"));
        assert_eq!(override_target("9.0.0").as_deref(), Some("gfx900"));
        assert_eq!(override_target("9.0.6").as_deref(), Some("gfx906"));
        assert_eq!(override_target("9.0.10").as_deref(), Some("gfx90a"));
        assert_eq!(override_target("11.5.0").as_deref(), Some("gfx1150"));
        assert_eq!(override_target("gfx1030"), None);
        assert_eq!(override_target("10.3"), None);
        assert_eq!(
            (generation("gfx906"), generation("gfx1030"), generation("gfx90a:xnack-")),
            (Some(9), Some(10), Some(9))
        );
    }

    #[test]
    fn overrides_onto_targets_with_missing_instructions_are_crash_risks() {
        // ollama#12915: an MI50 (gfx906) with HSA_OVERRIDE_GFX_VERSION=10.3.0 — another ISA generation and wave32.
        let r = override_risk("gfx906", "gfx1030");
        assert_eq!(r.risk, "crash");
        assert!(r.reasons.iter().any(|x| x.contains("GFX10") && x.contains("GFX9")), "{r:?}");
        assert!(r.reasons.iter().any(|x| x.contains("wave32")), "{r:?}");
        // gfx900 onto gfx906: same generation, but sdot4 and V_DOT2 are gfx906-only (data/gpu_archs.toml rows).
        let r = override_risk("gfx900", "gfx906");
        assert_eq!(r.risk, "crash");
        assert!(r.reasons.iter().any(|x| x.contains("sdot4")), "{r:?}");
        // The usual RDNA2 override (ollama#12111's gfx1031 → 10.3.0): nothing the card lacks by the data.
        assert_eq!(override_risk("gfx1031", "gfx1030").risk, "low");
        assert_eq!(override_risk("gfx906", "gfx906").risk, "none");
        assert_eq!(override_risk("gfx90c", "gfx900").risk, "unknown");
    }

    #[test]
    fn systemd_environment_lines_split_like_systemd() {
        // systemd.exec(5): `Environment="VAR1=word1 word2" VAR2=word3 "VAR3=$word 5 6"`.
        let v = split_assignments(r#""VAR1=word1 word2" VAR2=word3 "VAR3=$word 5 6""#);
        assert_eq!(
            v,
            vec![
                ("VAR1".to_string(), "word1 word2".to_string()),
                ("VAR2".to_string(), "word3".to_string()),
                ("VAR3".to_string(), "$word 5 6".to_string())
            ]
        );
        assert_eq!(split_assignments("OLLAMA_HOST=0.0.0.0 HSA_OVERRIDE_GFX_VERSION=10.3.0").len(), 2);
    }
}
