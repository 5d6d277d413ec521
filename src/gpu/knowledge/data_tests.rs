//! Checks of the knowledge files themselves: every row cites a source, ids are unique, every name a rule refers
//! to exists, and the values that an upstream file states are the values in that file.

use std::collections::{BTreeMap, BTreeSet};

use super::dispatch::rules::{referenced_names, Dispatch, Rule, Then};
use super::*;

fn all_dispatch() -> Vec<&'static Dispatch> {
    dispatch_versions().into_iter().map(|v| dispatch(v).expect("listed version loads")).collect()
}

fn unique<'a>(what: &str, ids: impl IntoIterator<Item = &'a str>) {
    let mut seen = BTreeSet::new();
    for id in ids {
        assert!(!id.is_empty(), "{what}: empty id");
        assert!(seen.insert(id), "{what}: duplicate id {id}");
    }
}

fn sourced(what: &str, id: &str, source: &str) {
    assert!(source.trim().len() >= 5, "{what} {id}: no source citation");
}

#[test]
fn every_row_has_a_source_and_ids_are_unique() {
    let archs = gpu_archs();
    unique("gpu_archs amd", archs.amd.iter().map(|a| a.id.as_str()));
    let sms: Vec<String> = archs.nvidia.iter().map(|n| n.sm.to_string()).collect();
    unique("gpu_archs nvidia", sms.iter().map(String::as_str));
    for a in &archs.amd {
        sourced("gpu_archs", &a.id, &a.source);
    }
    for n in &archs.nvidia {
        sourced("gpu_archs", &n.sm.to_string(), &n.source);
    }

    let rocm = rocm_support();
    unique("rocm_support versions", rocm.release.iter().flat_map(|r| r.versions.iter().map(String::as_str)));
    for r in &rocm.release {
        sourced("rocm_support", &r.versions.join(","), &r.source);
        assert!(!r.targets.is_empty());
    }

    let ollama = ollama_amdgpu();
    unique("ollama filters", ollama.filter.iter().map(|f| f.id.as_str()));
    unique("ollama presets", ollama.preset.iter().map(|p| p.id.as_str()));
    for f in &ollama.filter {
        sourced("ollama filter", &f.id, &f.source);
        regex_lite::Regex::new(&f.regex).unwrap_or_else(|e| panic!("{}: {e}", f.id));
    }
    for p in &ollama.preset {
        sourced("ollama preset", &p.id, &p.source);
    }
    // Eras are ordered, each first <= last, and consecutive eras do not overlap.
    let eras: Vec<(&str, &str)> = ollama.filter.iter().map(|f| (f.first.as_str(), f.last.as_str())).collect();
    let presets: Vec<(&str, &str)> = ollama.preset.iter().map(|p| (p.first.as_str(), p.last.as_str())).collect();
    for list in [eras, presets] {
        for (first, last) in &list {
            assert!(ollama::parse_release(first).unwrap() <= ollama::parse_release(last).unwrap(), "{first}..{last}");
        }
        for w in list.windows(2) {
            assert!(ollama::parse_release(w[0].1).unwrap() < ollama::parse_release(w[1].0).unwrap(), "{w:?}");
        }
    }

    for d in all_dispatch() {
        unique("constants", d.constant.iter().map(|c| c.name.as_str()));
        unique("classes", d.class.iter().map(|c| c.name.as_str()));
        unique("features", d.feature.iter().map(|c| c.name.as_str()));
        unique("build flags", d.build_flag.iter().map(|c| c.name.as_str()));
        for c in &d.constant {
            sourced(&d.version, &c.name, &c.source);
        }
        for n in d.class.iter().chain(&d.feature) {
            sourced(&d.version, &n.name, &n.source);
        }
        for b in &d.build_flag {
            sourced(&d.version, &b.name, &b.source);
        }
        for (table, rules) in d.tables() {
            unique(&format!("{} {table}", d.version), rules.iter().map(|r| r.id.as_str()));
            for r in rules {
                sourced(&d.version, &r.id, &r.source);
            }
        }
        sourced(&d.version, "fattn.gqa_opt", &d.fattn.gqa_opt_source);
        sourced(&d.version, "fattn.vector_kernel", &d.fattn.vector_kernel_source);
        sourced(&d.version, "fattn.gqa_eff", &d.fattn.gqa_eff_source);
        sourced(&d.version, "mmvq_max_batch", &d.mmvq_max_batch_source);
    }
}

fn then_kind(t: &Then) -> usize {
    [
        t.use_.is_some(),
        t.use_if.is_some(),
        t.ne11_le.is_some() && t.kernel.is_none(),
        t.ne11_lt.is_some(),
        t.kernel.is_some(),
        t.compute.is_some(),
        t.undecided.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count()
}

fn is_catch_all(r: &Rule) -> bool {
    let mut names = BTreeMap::new();
    referenced_names(&r.when, &mut names);
    names.values().all(BTreeSet::is_empty)
        && format!("{:?}", r.when) == format!("{:?}", dispatch::rules::When::default())
}

#[test]
fn dispatch_rules_refer_to_known_names_and_end_in_a_catch_all() {
    let families: BTreeSet<&str> = kernel_families().rule.iter().map(|r| r.family.as_str()).collect();
    for d in all_dispatch() {
        let mut names = BTreeMap::new();
        for n in d.class.iter().chain(&d.feature) {
            referenced_names(&n.when, &mut names);
        }
        referenced_names(&d.fattn.gqa_opt, &mut names);
        referenced_names(&d.fattn.vector_kernel, &mut names);
        for (table, rules) in d.tables() {
            for r in rules {
                referenced_names(&r.when, &mut names);
                if let Some(w) = &r.then.use_if {
                    referenced_names(w, &mut names);
                }
                assert_eq!(then_kind(&r.then), 1, "{} {table} {}: exactly one kind of decision", d.version, r.id);
                for t in r.then.ne11_le_by_type.keys() {
                    assert!(gguf::GgmlType::from_name(t).is_some(), "{} {}: type {t}", d.version, r.id);
                }
                if let Some(k) = &r.then.kernel {
                    assert!(k == "none" || families.contains(k.as_str()), "{} {}: family {k}", d.version, r.id);
                }
            }
            let last = rules.last().unwrap_or_else(|| panic!("{} {table} is empty", d.version));
            assert!(is_catch_all(last), "{} {table}: the last rule ({}) must hold unconditionally", d.version, last.id);
        }
        let known = |kind: &str| -> BTreeSet<String> {
            match kind {
                "constant" => d.constant.iter().map(|c| c.name.clone()).collect(),
                "class" => d.class.iter().map(|c| c.name.clone()).collect(),
                "feature" => d.feature.iter().map(|c| c.name.clone()).collect(),
                "build_flag" => d.build_flag.iter().map(|c| c.name.clone()).collect(),
                "type" => gguf::GgmlType::all().map(|(_, i)| i.name.to_string()).collect(),
                _ => BTreeSet::new(),
            }
        };
        for (kind, used) in &names {
            let have = known(kind);
            for n in used {
                assert!(have.contains(n), "{}: unknown {kind} {n}", d.version);
            }
        }
    }
}

/// gfx rows: the stored ggml_cc is what ggml_cuda_parse_id computes for the name, and the family the row names
/// (from hip.h's macros) is the GGML_CUDA_CC_IS_* class the 11434 range checks (common.cuh) put it in.
#[test]
fn gfx_rows_agree_with_ggml_parse_id_and_range_classes() {
    let d = dispatch("11434").unwrap();
    for a in &gpu_archs().amd {
        assert_eq!(archs::ggml_cc_of_gfx(&a.id), Some(a.ggml_cc), "{}", a.id);
        let device = archs::ArchRow::Amd(a).device();
        let ev = dispatch::Evaluator::new(d, &device, &[]);
        let class = match a.family.as_str() {
            "GCN4" | "GCN5" => "GCN",
            "RDNA3.5" => "RDNA3_5",
            other => other,
        };
        assert_eq!(ev.class(class), Some(true), "{} is {class}", a.id);
        assert_eq!(a.wave, if class == "GCN" || class.starts_with("CDNA") { 64 } else { 32 }, "{}", a.id);
        let matrix = match a.matrix.as_str() {
            "MFMA" => ev.feature("amd_mfma"),
            "WMMA" => ev.feature("amd_wmma"),
            _ => Some(!ev.feature("amd_mfma").unwrap() && !ev.feature("amd_wmma").unwrap()),
        };
        assert_eq!(matrix, Some(true), "{} matrix units", a.id);
    }
    assert_eq!(archs::ggml_cc_of_gfx("gfx90a:xnack-"), Some(0x100090a));
    assert_eq!(archs::ggml_cc_of_gfx("gfx1201"), Some(0x1001201));
    assert_eq!(archs::ggml_cc_of_gfx("gfx9-generic"), None);
    assert_eq!(archs::ggml_cc_of_gfx("sm_86"), None);
}

/// The 11434 constants equal the `#define GGML_CUDA_CC_*` values of common.cuh in the cached llama.cpp sdist
/// (scripts/fixtures.sh unpacks it), which is the file the data cites.
#[test]
fn constants_match_common_cuh() {
    let path = crate::host::cache::llama_cpp_source().unwrap().join("ggml/src/ggml-cuda/common.cuh");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/fixtures.sh first", path.display()));
    let mut defined = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("#define GGML_CUDA_CC_") else { continue };
        let Some((name, value)) = rest.split_once(char::is_whitespace) else { continue };
        let value = value.split("//").next().unwrap().trim();
        let parsed =
            if let Some(hex) = value.strip_prefix("(GGML_CUDA_CC_OFFSET_AMD + 0x").and_then(|v| v.split(')').next()) {
                u64::from_str_radix(hex, 16).ok().map(|v| 0x100_0000 + v)
            } else {
                value.parse::<u64>().ok()
            };
        if let Some(v) = parsed {
            defined.insert(name.to_string(), v);
        }
    }
    let d = dispatch("11434").unwrap();
    for c in &d.constant {
        assert_eq!(defined.get(&c.name), Some(&c.value), "GGML_CUDA_CC_{}", c.name);
    }
    assert!(d.constant.len() >= 20);
}

#[test]
fn version_names_and_aliases() {
    assert_eq!(dispatch_version("11434"), Some("11434"));
    assert_eq!(dispatch_version("O24"), Some("ollama-v0.24.0"));
    assert_eq!(dispatch_version("0.99"), None);
    assert_eq!(dispatch("o24").unwrap().version, "ollama-v0.24.0");
    assert_eq!(dispatch_file("11434"), Some("data/ggml_dispatch_11434.toml"));
}

/// The preset lists that CMakePresets.json spells out agree with what the regex of the same release keeps from
/// them, where both mechanisms exist: a preset never builds a gfx9xx/gfx10xx/gfx11xx/gfx12xx base target the
/// regex era has dropped (gfx900 from v0.12.4 on), which is how the two were changed together upstream.
#[test]
fn presets_follow_the_regex_of_their_release() {
    let o = ollama_amdgpu();
    for p in &o.preset {
        let Some(f) = o.filter_at(&p.first) else { continue };
        let re = regex_lite::Regex::new(&f.regex).unwrap();
        let dropped_gfx900 = !re.is_match("gfx900");
        assert_eq!(p.builds("gfx900"), !dropped_gfx900, "{} vs {}", p.id, f.id);
    }
    assert!(o.preset_at("v0.24.0").unwrap().builds("gfx1201"));
    assert!(!o.preset_at("v0.24.0").unwrap().builds("gfx906"));
    assert!(o.preset_at("v0.12.3").unwrap().builds("gfx906"));
    assert!(o.preset_at("v0.5.7").is_none());
}

#[test]
fn rocm_support_lists() {
    let r = rocm_support();
    assert!(matches!(r.support("7.2.1", "gfx900"), rocm::Support::NotListed { .. }));
    assert!(matches!(r.support("7.2.1", "gfx90a:xnack-"), rocm::Support::Listed { .. }));
    assert!(matches!(r.support("6.4.0", "gfx1201"), rocm::Support::NotListed { .. }));
    assert!(matches!(r.support("6.4.1", "gfx1201"), rocm::Support::Listed { .. }));
    assert_eq!(r.support("5.7.0", "gfx906"), rocm::Support::NoData);
    assert!(r.releases_listing("gfx906").is_empty());
}
