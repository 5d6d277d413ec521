//! Instruction classes: which broad class (vector ALU, FMA, scalar, LDS, global loads and stores, branches, waits,
//! matrix) and which path-deciding kind (MFMA, WMMA, dot, packed fp16; HMMA, IMMA, DP4A, LDGSTS, TMA, WGMMA) a
//! mnemonic belongs to. The rules live in `data/instruction_classes.toml`, each with its ISA source.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde::Deserialize;

/// Whose instruction set a mnemonic is from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    Amd,
    Nvidia,
}

impl Vendor {
    pub fn as_str(self) -> &'static str {
        match self {
            Vendor::Amd => "amd",
            Vendor::Nvidia => "nvidia",
        }
    }
}

#[derive(Debug, Deserialize)]
struct Rule {
    #[serde(alias = "path")]
    class: String,
    #[serde(default)]
    opcode: Vec<String>,
    #[serde(default)]
    prefix: Vec<String>,
    #[serde(default)]
    contains: Vec<String>,
    /// Required, so that a rule without its source does not load; nothing reads it at run time.
    #[allow(dead_code)]
    source: String,
}

impl Rule {
    fn matches(&self, mnemonic: &str) -> bool {
        let base = mnemonic.split('.').next().unwrap_or(mnemonic);
        let named =
            self.opcode.iter().any(|o| o == base) || self.prefix.iter().any(|p| mnemonic.starts_with(p.as_str()));
        named && (self.contains.is_empty() || self.contains.iter().any(|c| mnemonic.contains(c.as_str())))
    }
}

#[derive(Debug, Deserialize)]
struct VendorRules {
    fallback: String,
    /// Why the fallback is what it is; documentation only.
    #[allow(dead_code)]
    fallback_why: String,
    #[allow(dead_code)]
    source: String,
    class: Vec<Rule>,
    path: Vec<Rule>,
}

#[derive(Debug, Deserialize)]
struct ClassFile {
    amd: VendorRules,
    nvidia: VendorRules,
}

/// The class table, compiled into the binary.
#[derive(Debug)]
pub struct Classes {
    file: ClassFile,
}

/// What one mnemonic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classified<'a> {
    pub class: &'a str,
    pub path: Option<&'a str>,
}

impl Classes {
    fn rules(&self, vendor: Vendor) -> &VendorRules {
        match vendor {
            Vendor::Amd => &self.file.amd,
            Vendor::Nvidia => &self.file.nvidia,
        }
    }

    pub fn classify(&self, vendor: Vendor, mnemonic: &str) -> Classified<'_> {
        let rules = self.rules(vendor);
        let class = rules.class.iter().find(|r| r.matches(mnemonic)).map_or(rules.fallback.as_str(), |r| &r.class);
        let path = rules.path.iter().find(|r| r.matches(mnemonic)).map(|r| r.class.as_str());
        Classified { class, path }
    }

    /// Every path-deciding kind of a vendor, in table order (reports list absent ones as zero).
    pub fn path_kinds(&self, vendor: Vendor) -> impl Iterator<Item = &str> {
        self.rules(vendor).path.iter().map(|r| r.class.as_str())
    }

    /// Every broad class of a vendor, in table order, fallback included once.
    pub fn class_names(&self, vendor: Vendor) -> Vec<&str> {
        let rules = self.rules(vendor);
        let mut out: Vec<&str> = Vec::new();
        for name in rules.class.iter().map(|r| r.class.as_str()).chain([rules.fallback.as_str()]) {
            if !out.contains(&name) {
                out.push(name);
            }
        }
        out
    }
}

pub fn classes() -> &'static Classes {
    static T: OnceLock<Classes> = OnceLock::new();
    // The file is part of the binary and checked by a unit test, so a parse failure is a build defect.
    T.get_or_init(|| Classes {
        file: toml::from_str(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/instruction_classes.toml")))
            .expect("data/instruction_classes.toml parses"),
    })
}

/// Classifies many mnemonics, each distinct one once (a kernel repeats a few hundred mnemonics thousands of times).
pub struct Classifier<'a> {
    classes: &'a Classes,
    vendor: Vendor,
    memo: HashMap<String, Classified<'a>>,
}

impl<'a> Classifier<'a> {
    pub fn new(classes: &'a Classes, vendor: Vendor) -> Self {
        Classifier { classes, vendor, memo: HashMap::new() }
    }

    pub fn classify(&mut self, mnemonic: &str) -> Classified<'a> {
        if let Some(c) = self.memo.get(mnemonic) {
            return *c;
        }
        let c = self.classes.classify(self.vendor, mnemonic);
        self.memo.insert(mnemonic.to_string(), c);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_parses_and_every_rule_names_something() {
        let t = classes();
        for v in [Vendor::Amd, Vendor::Nvidia] {
            let r = t.rules(v);
            assert!(r
                .class
                .iter()
                .chain(&r.path)
                .all(|r| !r.source.is_empty() && (!r.opcode.is_empty() || !r.prefix.is_empty())));
        }
        assert_eq!(t.path_kinds(Vendor::Amd).collect::<Vec<_>>(), ["MFMA", "WMMA", "dot", "packed-fp16"]);
        assert_eq!(
            t.path_kinds(Vendor::Nvidia).collect::<Vec<_>>(),
            ["HMMA", "IMMA", "DP4A", "LDGSTS", "TMA", "WGMMA"]
        );
    }

    /// Mnemonics as llvm-objdump 19 and nvdisasm 13 print them (seen in the cyllama-rocm and cyllama-cuda12 libraries).
    #[test]
    fn real_mnemonics_land_in_their_isa_classes() {
        let t = classes();
        let amd = |m| t.classify(Vendor::Amd, m);
        assert_eq!(amd("v_mfma_i32_16x16x32_i8"), Classified { class: "matrix", path: Some("MFMA") });
        assert_eq!(amd("v_wmma_i32_16x16x16_iu8"), Classified { class: "matrix", path: Some("WMMA") });
        assert_eq!(amd("v_dot4_i32_i8"), Classified { class: "vector-alu", path: Some("dot") });
        assert_eq!(amd("v_pk_fma_f16"), Classified { class: "fma", path: Some("packed-fp16") });
        assert_eq!(amd("v_pk_mov_b32"), Classified { class: "vector-alu", path: None });
        assert_eq!(amd("v_fmac_f32_e32").class, "fma");
        assert_eq!(amd("v_mad_u64_u32").class, "fma");
        assert_eq!(amd("s_waitcnt").class, "wait");
        assert_eq!(amd("s_cbranch_execz").class, "branch");
        assert_eq!(amd("s_load_dwordx8").class, "scalar");
        assert_eq!(amd("ds_read2_b32").class, "lds");
        assert_eq!(amd("global_load_dword").class, "global-load");
        assert_eq!(amd("buffer_store_dword").class, "global-store");
        assert_eq!(amd("global_atomic_cmpswap_x2").class, "global-atomic");
        assert_eq!(amd("buffer_wbl2").class, "other");
        let nv = |m| t.classify(Vendor::Nvidia, m);
        assert_eq!(nv("HMMA.1688.F32"), Classified { class: "matrix", path: Some("HMMA") });
        assert_eq!(nv("IMMA.8816.S8.S8"), Classified { class: "matrix", path: Some("IMMA") });
        assert_eq!(nv("IDP.4A.S8.S8"), Classified { class: "vector-alu", path: Some("DP4A") });
        assert_eq!(nv("IDP.2A.LO.S16.S8"), Classified { class: "vector-alu", path: None });
        assert_eq!(nv("LDGSTS.E.BYPASS.128"), Classified { class: "global-load", path: Some("LDGSTS") });
        assert_eq!(nv("UTMALDG.2D"), Classified { class: "global-load", path: Some("TMA") });
        assert_eq!(nv("HGMMA.64x128x16.F32"), Classified { class: "matrix", path: Some("WGMMA") });
        assert_eq!(nv("FFMA.FTZ").class, "fma");
        assert_eq!(nv("IMAD.MOV.U32").class, "vector-alu");
        assert_eq!(nv("ULDC.64").class, "scalar");
        assert_eq!(nv("LDSM.16.M88.4").class, "lds");
        assert_eq!(nv("BRA").class, "branch");
        assert_eq!(nv("BAR.SYNC.DEFER_BLOCKING").class, "wait");
        assert_eq!(nv("NOP").class, "other");
    }
}
