//! Every compute pipeline ggml-vulkan 11434 can create has an op and a family in `data/vulkan_pipelines.toml`.
//!
//! The expected list does not come from the data file: it is read from ggml-vulkan's own source, the body of
//! `ggml_vk_load_shaders` (ggml/src/ggml-vulkan/ggml-vulkan.cpp of the cached sdist), where every pipeline is created
//! and named. Its macros (`CREATE_BINARY`, `CREATE_UNARY`, the per-type `X_SG`/`X_CM1` lists, `SET_ROWS`, …) are
//! expanded by the C preprocessor (`cpp`), once with every build feature the function tests defined (coopmat,
//! coopmat2, integer dot product, bfloat16, the fp4/fp8 float types, 64-bit indexing) and once with none, so both
//! sides of each `#if` are seen. Then each call of `ggml_vk_create_pipeline[2]` and of the matmul helpers
//! (`create_mm_pipelines` and its `cm1_create*`/`sg_create*` wrappers, which add `_<tile>` and `_aligned_<tile>`)
//! gives its name argument, a C++ expression that this test evaluates: string literals, `+`, `?:` (both sides),
//! `std::string(…)`, `std::to_string(…)` (a loop index: `0`), local variables and arrays assigned string
//! expressions, and `get_suffix`-style helper lambdas that build a string with `s += …`. An expression it cannot
//! evaluate fails the test, naming it, so that an upstream change cannot hide a pipeline.
//!
//! A second, independent list: the shaders embedded in the real `libggml-vulkan.so` of the build (a pipeline
//! without a debug name is named after its shader).

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};

use backscope::observe::vulkan::{describe, OTHER};

/// The build features `ggml_vk_load_shaders` tests with `#if defined(...)`.
const FEATURES: [&str; 10] = [
    "GGML_VULKAN_BFLOAT16_GLSLC_SUPPORT",
    "GGML_VULKAN_COOPMAT2_GLSLC_SUPPORT",
    "GGML_VULKAN_COOPMAT_GLSLC_SUPPORT",
    "GGML_VULKAN_FLOAT_E2M1_GLSLC_SUPPORT",
    "GGML_VULKAN_FLOAT_E4M3_GLSLC_SUPPORT",
    "GGML_VULKAN_INTEGER_DOT_GLSLC_SUPPORT",
    "VK_EXT_shader_64bit_indexing",
    "VK_KHR_cooperative_matrix",
    "VK_KHR_shader_bfloat16",
    "VK_NV_cooperative_matrix2",
];

/// Functions whose third argument names pipelines: ggml_vk_create_pipeline[2] names one; the matmul helpers name a
/// shader that create_mm_pipelines turns into `<name>_<i>` and `<name>_aligned_<i>` (ggml-vulkan.cpp:2241-2248).
const CREATORS: &str = r"\b(ggml_vk_create_pipeline2?|create_mm_pipelines|cm1_create\w*|sg_create\w*)\s*\(";

/// Calls of ggml functions in names, with a value of each (ggml.c `type_traits[].type_name`).
const GGML_CALLS: [(&str, &str); 1] = [("ggml_type_name", "q8_0")];

fn ggml_vulkan_source() -> String {
    let path = backscope::commands::synth::llama_cpp_source().unwrap().join("ggml/src/ggml-vulkan/ggml-vulkan.cpp");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e} (run scripts/fixtures.sh)", path.display()))
}

/// The body of `ggml_vk_load_shaders`: from its definition to the first `}` at the start of a line.
fn load_shaders_body(src: &str) -> &str {
    let start = src.find("\nvoid ggml_vk_load_shaders(").expect("ggml_vk_load_shaders is defined");
    let end = src[start..].find("\n}\n").expect("its closing brace") + start + 3;
    &src[start..end]
}

fn preprocess(body: &str, defines: &[&str]) -> String {
    let mut cmd = Command::new("cpp");
    cmd.args(["-P", "-w", "-x", "c++", "-"]);
    for d in defines {
        cmd.arg(format!("-D{d}"));
    }
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("run cpp");
    let mut stdin = child.stdin.take().unwrap();
    let text = body.to_string();
    let writer = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, text.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "cpp failed");
    String::from_utf8(out.stdout).unwrap()
}

/// C++ tokens, enough for name expressions: string literals (adjacent ones joined), identifiers and numbers,
/// `::`, `->`, and single punctuation characters.
#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Str(String),
    Word(String),
    Punct(String),
}

fn tokens(text: &str) -> Vec<Tok> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i] as char;
        if c.is_whitespace() {
            i += 1;
        } else if c == '"' {
            let mut s = String::new();
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                s.push(b[i] as char);
                i += 1;
            }
            i += 1;
            match out.last_mut() {
                Some(Tok::Str(prev)) => prev.push_str(&s),
                _ => out.push(Tok::Str(s)),
            }
        } else if c.is_ascii_alphanumeric() || c == '_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Word(text[start..i].to_string()));
        } else if text[i..].starts_with("::") || text[i..].starts_with("->") {
            out.push(Tok::Punct(text[i..i + 2].to_string()));
            i += 2;
        } else {
            out.push(Tok::Punct(c.to_string()));
            i += 1;
        }
    }
    out
}

fn is(t: &Tok, p: &str) -> bool {
    matches!(t, Tok::Punct(x) if x == p)
}

/// Splits `toks` at top-level (outside brackets) occurrences of `sep`.
fn split_top(toks: &[Tok], sep: &str) -> Vec<Vec<Tok>> {
    let (mut parts, mut cur, mut depth) = (Vec::new(), Vec::new(), 0i32);
    for t in toks {
        if ["(", "[", "{"].iter().any(|p| is(t, p)) {
            depth += 1;
        } else if [")", "]", "}"].iter().any(|p| is(t, p)) {
            depth -= 1;
        }
        if depth == 0 && is(t, sep) {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(t.clone());
        }
    }
    parts.push(cur);
    parts
}

/// Where a name expression is evaluated: the preprocessed text before the call (for variables) and the whole text
/// (for helper lambdas and arrays).
struct Scope<'a> {
    before: &'a str,
    all: &'a str,
}

/// Every value the expression can take, or why it could not be evaluated.
fn eval(toks: &[Tok], scope: &Scope<'_>) -> Result<BTreeSet<String>, String> {
    // `cond ? a : b`: the condition is not evaluated; both branches are values.
    if let Some(q) = top_position(toks, "?") {
        let rest = &toks[q + 1..];
        let colon = top_position(rest, ":").ok_or("?: without :")?;
        let mut both = eval(&rest[..colon], scope)?;
        both.extend(eval(&rest[colon + 1..], scope)?);
        return Ok(both);
    }
    let parts = split_top(toks, "+");
    let mut acc: BTreeSet<String> = [String::new()].into();
    for part in parts {
        let values = eval_part(&part, scope)?;
        acc = acc.iter().flat_map(|a| values.iter().map(move |v| format!("{a}{v}"))).collect();
    }
    Ok(acc)
}

fn top_position(toks: &[Tok], p: &str) -> Option<usize> {
    let mut depth = 0i32;
    for (i, t) in toks.iter().enumerate() {
        if ["(", "[", "{"].iter().any(|x| is(t, x)) {
            depth += 1;
        } else if [")", "]", "}"].iter().any(|x| is(t, x)) {
            depth -= 1;
        } else if depth == 0 && is(t, p) {
            return Some(i);
        }
    }
    None
}

fn word(t: Option<&Tok>) -> Option<&str> {
    match t {
        Some(Tok::Word(w)) => Some(w),
        _ => None,
    }
}

fn eval_part(toks: &[Tok], scope: &Scope<'_>) -> Result<BTreeSet<String>, String> {
    let mut toks = toks;
    // `X.c_str()`
    if toks.len() > 4 && is(&toks[toks.len() - 4], ".") && word(toks.get(toks.len() - 3)) == Some("c_str") {
        toks = &toks[..toks.len() - 4];
    }
    let shown = || format!("{toks:?}");
    match toks {
        [Tok::Str(s)] => Ok([s.clone()].into()),
        [first, inner @ .., last] if is(first, "(") && is(last, ")") => eval(inner, scope),
        [Tok::Word(ns), colons, Tok::Word(f), open, args @ .., close]
            if ns == "std" && is(colons, "::") && is(open, "(") && is(close, ")") =>
        {
            match f.as_str() {
                "string" => eval(args, scope),
                // A loop index or count.
                "to_string" => Ok(["0".to_string()].into()),
                _ => Err(format!("std::{f} in {}", shown())),
            }
        }
        [Tok::Word(v)] => variable(v, scope),
        [Tok::Word(v), open, ..] if is(open, "[") => array(v, scope),
        [Tok::Word(f), open, .., close] if is(open, "(") && is(close, ")") => call(f, scope),
        _ => Err(format!("cannot evaluate {}", shown())),
    }
}

/// A local variable: every string expression assigned to it before the call (`name = …;`, `const std::string
/// name = …;`); an assignment without a string (`= nullptr`) is no name.
fn variable(v: &str, scope: &Scope<'_>) -> Result<BTreeSet<String>, String> {
    let re = regex_lite::Regex::new(&format!(r"\b{v}\s*=\s*([^=;][^;]*);")).unwrap();
    let mut values = BTreeSet::new();
    for c in re.captures_iter(scope.before) {
        let toks = tokens(&c[1]);
        if toks.iter().any(|t| matches!(t, Tok::Str(_))) {
            values.extend(eval(&toks, scope)?);
        }
    }
    if values.is_empty() {
        return Err(format!("variable {v} is assigned no string"));
    }
    Ok(values)
}

/// An array of names: every string literal of its initializer.
fn array(v: &str, scope: &Scope<'_>) -> Result<BTreeSet<String>, String> {
    let re = regex_lite::Regex::new(&format!(r"\b{v}\s*(\[[^\]]*\]\s*)+=\s*\{{")).unwrap();
    let m = re.find(scope.before).ok_or(format!("array {v} has no initializer"))?;
    let init = &scope.before[m.end()..];
    let end = init.find("};").ok_or("unterminated initializer")?;
    Ok(tokens(&init[..end])
        .into_iter()
        .filter_map(|t| match t {
            Tok::Str(s) => Some(s),
            _ => None,
        })
        .collect())
}

/// A helper lambda that builds its result as `s += EXPR;` (get_suffix), or a ggml function of [`GGML_CALLS`].
fn call(f: &str, scope: &Scope<'_>) -> Result<BTreeSet<String>, String> {
    if let Some((_, v)) = GGML_CALLS.iter().find(|(g, _)| *g == f) {
        return Ok([v.to_string()].into());
    }
    let re = regex_lite::Regex::new(&format!(r"\bauto\s+{f}\s*=\s*\[[^\]]*\]\s*\([^)]*\)\s*\{{")).unwrap();
    let m = re.find(scope.all).ok_or(format!("call of {f}, which is no helper lambda of the function"))?;
    let body = &scope.all[m.end()..];
    let body = &body[..body.find("return").ok_or("helper without return")?];
    let adds = regex_lite::Regex::new(r"\+=\s*([^;]*);").unwrap();
    let mut acc: BTreeSet<String> = [String::new()].into();
    for c in adds.captures_iter(body) {
        let values = eval(&tokens(&c[1]), scope)?;
        acc = acc.iter().flat_map(|a| values.iter().map(move |v| format!("{a}{v}"))).collect();
    }
    Ok(acc)
}

/// The third argument of the call whose `(` is at `open`, as text.
fn name_argument(text: &str, open: usize) -> Option<&str> {
    let b = text.as_bytes();
    let (mut depth, mut arg, mut start, mut in_str) = (0i32, 0, open + 1, false);
    let mut i = open;
    while i < b.len() {
        let c = b[i];
        if in_str {
            if c == b'\\' {
                i += 1;
            } else if c == b'"' {
                in_str = false;
            }
        } else {
            match c {
                b'"' => in_str = true,
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        return (arg == 2).then(|| &text[start..i]);
                    }
                }
                b',' if depth == 1 => {
                    if arg == 2 {
                        return Some(&text[start..i]);
                    }
                    arg += 1;
                    start = i + 1;
                }
                _ => {}
            }
        }
        i += 1;
    }
    None
}

/// The pipeline names one preprocessed body creates, and the expressions that could not be evaluated.
fn pipeline_names(text: &str) -> (BTreeSet<String>, Vec<String>) {
    let creators = regex_lite::Regex::new(CREATORS).unwrap();
    let (mut names, mut failures) = (BTreeSet::new(), Vec::new());
    for m in creators.find_iter(text) {
        let Some(arg) = name_argument(text, m.end() - 1) else {
            failures.push(format!("{}: no name argument", m.as_str()));
            continue;
        };
        let toks = tokens(arg);
        // Inside a creator's own definition the name is its parameter, passed on (ggml_vk_create_pipeline2,
        // create_mm_pipelines, the cm1_/sg_ wrappers): the calls of the creator are what name pipelines. The
        // parameter is declared just before the call (a wrapper) or, when the value cannot be evaluated, within
        // the creator's body (create_mm_pipelines names from `shader_name` about 1500 bytes below its header).
        let parameter_within = |window: usize| {
            let mut from = m.start().saturating_sub(window);
            while !text.is_char_boundary(from) {
                from += 1;
            }
            toks.iter().any(|t| match t {
                Tok::Word(w) => regex_lite::Regex::new(&format!(r"std::string\s*&\s*{w}\b"))
                    .unwrap()
                    .is_match(&text[from..m.start()]),
                _ => false,
            })
        };
        if parameter_within(600) {
            continue;
        }
        let scope = Scope { before: &text[..m.start()], all: text };
        let evaluated = eval(&toks, &scope);
        if evaluated.is_err() && parameter_within(2500) {
            continue;
        }
        match evaluated {
            Ok(values) => {
                let matmul = !m.as_str().starts_with("ggml_vk_create_pipeline");
                for v in values {
                    if matmul {
                        for i in 0..3 {
                            names.insert(format!("{v}_{i}"));
                            names.insert(format!("{v}_aligned_{i}"));
                        }
                    } else {
                        names.insert(v);
                    }
                }
            }
            Err(e) => failures.push(format!("{}{arg}): {e}", m.as_str())),
        }
    }
    (names, failures)
}

/// The op names GGML_VK_PERF_LOGGER can print for a node: ggml.c's GGML_OP_NAME, GGML_UNARY_OP_NAME (unary nodes
/// are named by their unary op, vk_perf_logger::get_node_fusion_name) and the `_VEC` forms it gives MUL_MAT and
/// MUL_MAT_ID nodes with one column or one token; plus the fusion names ggml-vulkan's graph compute gives a fused
/// group (`fusion_string = "…"`) that the data file uses as the op of a pipeline only fused groups dispatch.
fn node_names() -> BTreeSet<String> {
    let ggml_c =
        std::fs::read_to_string(backscope::commands::synth::llama_cpp_source().unwrap().join("ggml/src/ggml.c"))
            .unwrap();
    let mut names = BTreeSet::new();
    for table in ["GGML_OP_NAME[", "GGML_UNARY_OP_NAME["] {
        let at = ggml_c.find(&format!("static const char * {table}")).expect(table);
        let body = &ggml_c[at..at + ggml_c[at..].find("};").unwrap()];
        names.extend(tokens(body).into_iter().filter_map(|t| match t {
            Tok::Str(s) => Some(s),
            _ => None,
        }));
    }
    names.extend(["MUL_MAT_VEC".to_string(), "MUL_MAT_ID_VEC".to_string()]);
    let fusion = regex_lite::Regex::new(r#"fusion_string = "([A-Z_]+)""#).unwrap();
    let fusions: Vec<String> = fusion.captures_iter(&ggml_vulkan_source()).map(|c| c[1].to_string()).collect();
    // A family of fusions (`TOPK_MOE_EARLY_SOFTMAX`, `TOPK_MOE_LATE_SOFTMAX`, …) by its common prefix.
    for f in &fusions {
        let mut prefix = f.as_str();
        while let Some((head, _)) = prefix.rsplit_once('_') {
            if fusions.iter().filter(|g| g.starts_with(&format!("{head}_"))).count() > 1 {
                names.insert(head.to_string());
            }
            prefix = head;
        }
    }
    names.extend(fusions);
    names
}

#[test]
fn every_pipeline_ggml_vulkan_creates_has_an_op() {
    let src = ggml_vulkan_source();
    let body = load_shaders_body(&src);
    let mut names = BTreeSet::new();
    let mut failures = Vec::new();
    for defines in [&FEATURES[..], &[]] {
        let (n, f) = pipeline_names(&preprocess(body, defines));
        names.extend(n);
        failures.extend(f);
    }
    assert!(failures.is_empty(), "name expressions this test cannot evaluate:\n{}", failures.join("\n"));
    // The reading found what the source plainly names (each a literal or a loop at the cited line).
    for known in [
        "count_experts",                         // :3593
        "topk_moe_f32_0",                        // :3966, i from 0
        "mul_mat_vec_id_q4_k_q8_1_f32",          // :3067
        "matmul_id_subgroup_quant_f16_f16acc_1", // :2355 through create_mm_pipelines
        "matmul_iq4_xs_f32_aligned_2",           // X_SG over FOR_EACH_LUT_TYPE at :2633-2636
        "add_f16_f32_f16_norepeat",              // CREATE_BINARY(add, _norepeat, …) with get_suffix(1, 0, 1)
        "silu_mul_b_f16_norepeat",               // CREATE_UNARY_MUL(silu, 2)
        "gated_delta_net_f32_d128_kda",          // gdn_names at :3724
        "flash_attn_f32_f16_aligned_f16acc_cm2", // :2147
        "set_rows_f16_iq4_nl_i64",               // SET_ROWS(1, f16, _i64)
        "lightning_indexer_q8_0_k_f32",          // :3658
    ] {
        assert!(names.contains(known), "{known} not among the {} names read", names.len());
    }
    assert!(names.len() > 1000, "{} names", names.len());

    let ops = node_names();
    let mut unmapped = Vec::new();
    let mut by_family: BTreeMap<&str, usize> = BTreeMap::new();
    for name in &names {
        let d = describe(name, None);
        match d.op {
            Some(op) if d.family != OTHER && ops.contains(op) => *by_family.entry(d.family).or_default() += 1,
            Some(op) if d.family != OTHER => unmapped.push(format!("{name}: op {op} is no node name")),
            _ => unmapped.push(format!("{name}: family {}, op {:?}", d.family, d.op)),
        }
    }
    assert!(unmapped.is_empty(), "{} of {} pipelines unmapped:\n{}", unmapped.len(), names.len(), unmapped.join("\n"));
    eprintln!("{} pipelines by family: {by_family:?}", names.len());
}

/// The MoE pipelines, each as the source creates and uses it.
#[test]
fn moe_pipelines_are_mul_mat_id_and_its_helpers() {
    use backscope::observe::vulkan::Dispatches;
    // ggml_vk_mul_mat_id_q_f16 runs the matmul_id pipelines (get_mul_mat_mat_pipeline with mul_mat_id) after one
    // count_experts dispatch (:7587); ggml_vk_mul_mat_vec_id_q_f16 dispatches mul_mat_vec_id once per token (:7887).
    for name in [
        "matmul_id_subgroup_quant_f32_f16acc_aligned_1",
        "matmul_id_subgroup_quant_f16_1",
        "matmul_id_quant_f32_f16acc_aligned_1",
        "matmul_id_subgroup_q4_k_q8_1_0",
        "matmul_id_q4_0_q8_1_2",
        "matmul_id_subgroup_f16_f32_f16acc_aligned_0",
        "matmul_id_bf16_1",
    ] {
        let d = describe(name, None);
        assert_eq!((d.op, d.dispatches), (Some("MUL_MAT_ID"), Dispatches::Node), "{name}: {d:?}");
    }
    for (name, shader) in [
        ("matmul_id_subgroup_quant_f16_1", "matmul_id_subgroup_quant_f16_cm2"),
        ("matmul_id_subgroup_f16_aligned_0", "matmul_id_subgroup_f16_cm1"),
    ] {
        assert_eq!(describe(name, Some(shader)).op, Some("MUL_MAT_ID"), "{name} running {shader}");
    }
    for name in ["mul_mat_vec_id_q4_k_f32", "mul_mat_vec_id_q4_k_q8_1_f32", "mul_mat_vec_id_f16_f32"] {
        let d = describe(name, None);
        assert_eq!((d.op, d.dispatches), (Some("MUL_MAT_ID"), Dispatches::Token), "{name}");
    }
    let count = describe("count_experts", None);
    assert_eq!((count.op, count.dispatches, count.helper), (Some("MUL_MAT_ID"), Dispatches::MatrixNode, true));
    let topk = describe("topk_moe_f32_3", None);
    assert_eq!((topk.family, topk.op), ("MoE-routing", Some("TOPK_MOE")));
}

/// The second list: every shader embedded in the real library falls in a family with an op.
#[test]
fn every_shader_embedded_in_libggml_vulkan_has_an_op() {
    let lib = crate::support::sweep::llama_bin().join("libggml-vulkan.so");
    let bytes = std::fs::read(lib.canonicalize().unwrap()).unwrap();
    let shaders = binfmt::spirv::embedded_shaders(&bytes).unwrap();
    assert!(shaders.len() > 1000, "{}", shaders.len());
    let ops = node_names();
    let unmapped: Vec<String> = shaders
        .iter()
        .map(|s| (s.name, describe(s.name, Some(s.name))))
        .filter(|(_, d)| d.family == OTHER || !d.op.is_some_and(|op| ops.contains(op)))
        .map(|(n, d)| format!("{n}: family {}, op {:?}", d.family, d.op))
        .collect();
    assert!(unmapped.is_empty(), "{} of {} shaders unmapped:\n{}", unmapped.len(), shaders.len(), unmapped.join("\n"));
}
