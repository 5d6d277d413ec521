//! AMDGPU processors, target IDs (`gfx90a:sramecc+:xnack-`) and which code objects run on which device.
//!
//! The processor table lives in `data/amdgpu_processors.tsv` (one row per `EF_AMDGPU_MACH` value, with its
//! generic processor and source), so adding a GPU is a data change.

use std::sync::OnceLock;

/// A target feature's setting in a code object or a device: `xnack` and `sramecc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Feature {
    /// The processor has no such feature.
    Unsupported,
    /// Code that runs in either mode (the feature was left out of the target ID).
    Any,
    On,
    Off,
}

impl Feature {
    pub fn suffix(self, name: &str) -> Option<String> {
        match self {
            Feature::On => Some(format!("{name}+")),
            Feature::Off => Some(format!("{name}-")),
            Feature::Any | Feature::Unsupported => None,
        }
    }
}

/// A parsed target ID: processor plus feature settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TargetId<'a> {
    pub processor: &'a str,
    pub xnack: Feature,
    pub sramecc: Feature,
}

impl<'a> TargetId<'a> {
    /// Parse `processor(:feature(+|-))*`. A feature left out means "any"; unknown features are ignored.
    pub fn parse(s: &'a str) -> TargetId<'a> {
        let mut parts = s.split(':');
        let processor = parts.next().unwrap_or("");
        let mut id = TargetId { processor, xnack: Feature::Any, sramecc: Feature::Any };
        for part in parts {
            let (name, setting) = match part.strip_suffix('+') {
                Some(n) => (n, Feature::On),
                None => match part.strip_suffix('-') {
                    Some(n) => (n, Feature::Off),
                    None => continue,
                },
            };
            match name {
                "xnack" => id.xnack = setting,
                "sramecc" => id.sramecc = setting,
                _ => {}
            }
        }
        id
    }

    /// Canonical spelling: features in alphabetical order, "any" left out.
    pub fn canonical(&self) -> String {
        let mut s = self.processor.to_string();
        for f in [self.sramecc.suffix("sramecc"), self.xnack.suffix("xnack")].into_iter().flatten() {
            s.push(':');
            s.push_str(&f);
        }
        s
    }
}

/// Whether a code object built for one target runs on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compat {
    /// The processor matches (exactly or through a generic target) and every feature is compatible.
    Runs,
    /// The processor matches, but the code object needs `feature` in a mode the device's ID does not
    /// state (e.g. the code is `xnack-` and the user asked about plain `gfx90a`).
    DependsOnMode { feature: &'static str },
    /// Different processor, or a feature mode that contradicts the device's.
    No,
}

/// Can code built for `code` run on a device identified as `device`?
pub fn compat(code: &TargetId<'_>, device: &TargetId<'_>) -> Compat {
    let same = code.processor == device.processor;
    let generic = generic_of(device.processor).is_some_and(|g| g == code.processor);
    if !same && !generic {
        return Compat::No;
    }
    let mut verdict = Compat::Runs;
    for (name, c, d) in [("xnack", code.xnack, device.xnack), ("sramecc", code.sramecc, device.sramecc)] {
        match (c, d) {
            (Feature::Any | Feature::Unsupported, _) => {}
            (Feature::On, Feature::On) | (Feature::Off, Feature::Off) => {}
            (Feature::On | Feature::Off, Feature::Any | Feature::Unsupported) => {
                verdict = Compat::DependsOnMode { feature: name };
            }
            (Feature::On, Feature::Off) | (Feature::Off, Feature::On) => return Compat::No,
        }
    }
    verdict
}

#[derive(Debug)]
struct Row {
    mach: u8,
    processor: &'static str,
    generic: Option<&'static str>,
}

fn table() -> &'static [Row] {
    static TABLE: OnceLock<Vec<Row>> = OnceLock::new();
    TABLE.get_or_init(|| {
        include_str!("../../data/amdgpu_processors.tsv")
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| {
                let mut cols = l.split('\t');
                let mach = u8::from_str_radix(cols.next()?.trim_start_matches("0x"), 16).ok()?;
                let processor = cols.next()?;
                let generic = cols.next().filter(|g| *g != "-");
                Some(Row { mach, processor, generic })
            })
            .collect()
    })
}

/// Processor name for an `EF_AMDGPU_MACH` value, if known.
pub fn processor_for_mach(mach: u8) -> Option<&'static str> {
    table().iter().find(|r| r.mach == mach).map(|r| r.processor)
}

/// The generic processor (e.g. `gfx9-generic`) whose code objects run on `processor`, if any.
pub fn generic_of(processor: &str) -> Option<&'static str> {
    table().iter().find(|r| r.processor == processor).and_then(|r| r.generic)
}

/// Every processor name in the table, in table order.
pub fn known_processors() -> impl Iterator<Item = &'static str> {
    table().iter().map(|r| r.processor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_loads_every_row() {
        // Values cross-checked with formats.md §3.2 (verified against the real cyllama library's e_flags).
        assert_eq!(processor_for_mach(0x2c), Some("gfx900"));
        assert_eq!(processor_for_mach(0x3f), Some("gfx90a"));
        assert_eq!(processor_for_mach(0x4c), Some("gfx942"));
        assert_eq!(processor_for_mach(0x41), Some("gfx1100"));
        assert_eq!(processor_for_mach(0x4e), Some("gfx1201"));
        assert_eq!(processor_for_mach(0x5f), Some("gfx9-4-generic"));
        assert_eq!(processor_for_mach(0xee), None);
        assert_eq!(generic_of("gfx906"), Some("gfx9-generic"));
        assert_eq!(generic_of("gfx90a"), None);
        let rows = include_str!("../../data/amdgpu_processors.tsv").lines().filter(|l| l.starts_with("0x")).count();
        assert_eq!(known_processors().count(), rows, "every data row parses");
    }

    #[test]
    fn feature_aware_compatibility() {
        let t = TargetId::parse;
        assert_eq!(t("gfx90a:sramecc+:xnack-").canonical(), "gfx90a:sramecc+:xnack-");
        assert_eq!(t("gfx90a:xnack-:sramecc+").canonical(), "gfx90a:sramecc+:xnack-");
        assert_eq!(compat(&t("gfx900"), &t("gfx900")), Compat::Runs);
        assert_eq!(compat(&t("gfx906"), &t("gfx900")), Compat::No);
        assert_eq!(compat(&t("gfx9-generic"), &t("gfx900")), Compat::Runs);
        assert_eq!(compat(&t("gfx9-generic"), &t("gfx90a")), Compat::No);
        assert_eq!(compat(&t("gfx90a"), &t("gfx90a:xnack+")), Compat::Runs);
        assert_eq!(compat(&t("gfx90a:xnack-"), &t("gfx90a:xnack+")), Compat::No);
        assert_eq!(compat(&t("gfx90a:xnack-"), &t("gfx90a")), Compat::DependsOnMode { feature: "xnack" });
        assert_eq!(compat(&t("gfx12-generic"), &t("gfx1201")), Compat::Runs);
    }
}
