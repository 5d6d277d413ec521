//! Kernel names: demangling, base names, ggml types and families.
//!
//! Classification works on the mangled name alone (base name from the Itanium `<source-name>`, ggml type
//! from the `L9ggml_typeNE` template literal), so it also covers the names no demangler accepts (recent
//! clang's `Tn` template-parameter mangling in ggml's `k_set_rows_quant`). Demangling is only for display.

use cpp_demangle::{DemangleOptions, ParseOptions, Symbol};
use serde::Serialize;

use crate::gpu::knowledge::{ggml_types, kernel_families};

/// What backscope knows about one kernel name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KernelName {
    /// Demangled without parameters, e.g. `mul_mat_vec_q<(ggml_type)12, 8, false, false>`; falls back to
    /// `base<…>` or the raw name where the demangler fails.
    pub demangled: String,
    /// True when `demangled` came from the demangler rather than the fallback.
    pub demangled_ok: bool,
    pub base: String,
    pub family: &'static str,
    /// The vendor library of a vendor-BLAS kernel (`cuBLASLt`, `rocBLAS/Tensile`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub library: Option<&'static str>,
    /// The first ggml type among the template arguments, by name (`Q4_K`).
    pub ggml_type: Option<&'static str>,
}

/// Name of the family for kernels no rule matches.
pub const OTHER: &str = "other";

/// ggml's own matrix-multiply kernel families on CUDA/HIP (data/kernel_families.toml): which of them ran, or did
/// not, tells which matmul path ggml took.
pub const MATMUL_FAMILIES: &[&str] = &["MMVQ", "MMQ", "MMVF", "MMF"];
/// The same for ggml-vulkan's pipelines (data/vulkan_pipelines.toml).
pub const VULKAN_MATMUL_FAMILIES: &[&str] = &["MMV", "MMVQ", "MM", "MMQ", "MM-coopmat", "MM-coopmat2"];

pub fn describe(raw: &str) -> KernelName {
    let base = base_name(raw).unwrap_or(raw).to_string();
    let rule = rule(&base, raw);
    let family = rule.map_or(OTHER, |r| r.family.as_str());
    let library = rule.and_then(|r| r.library.as_deref());
    let ggml_type = ggml_type_value(raw).and_then(|v| ggml_types().name_static(v));
    let (demangled, demangled_ok) = match demangle_short(raw) {
        Some(d) => (d, true),
        None => (fallback_name(raw), false),
    };
    KernelName { demangled, demangled_ok, base, family, library, ggml_type }
}

/// Most bytes of one demangled name by default (the scan's budget `demangled_bytes_per_name` starts here):
/// back-references let a 236-byte name demangle to 27 MB, while the longest real kernel name demangles to 843 bytes.
pub const MAX_DEMANGLED_BYTES: usize = 1 << 16;

/// [`KernelName::demangled`] alone, without the classification `describe` adds.
pub fn display_name(raw: &str) -> String {
    display_name_bounded(raw, MAX_DEMANGLED_BYTES).0
}

/// [`display_name`] with at most `max_bytes` of demangled text; the flag is true when the name would
/// demangle to more, and the fallback is returned instead.
pub fn display_name_bounded(raw: &str, max_bytes: usize) -> (String, bool) {
    match demangle_bounded(raw, max_bytes) {
        Demangled::Text(d) => (d, false),
        Demangled::Failed => (fallback_name(raw), false),
        Demangled::TooLong => (fallback_name(raw), true),
    }
}

/// What to show for a name the demangler rejects: `base<…>` for Itanium names, else the name itself.
pub fn fallback_name(raw: &str) -> String {
    if raw.starts_with("_Z") {
        format!("{}<…>", base_name(raw).unwrap_or(raw))
    } else {
        raw.to_string()
    }
}

/// Demangle without parameters and return type; `None` if the name is not Itanium, fails to parse, or
/// demangles to more than [`MAX_DEMANGLED_BYTES`].
pub fn demangle_short(raw: &str) -> Option<String> {
    match demangle_bounded(raw, MAX_DEMANGLED_BYTES) {
        Demangled::Text(d) => Some(d),
        Demangled::Failed | Demangled::TooLong => None,
    }
}

/// The outcome of [`demangle_bounded`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Demangled {
    Text(String),
    /// Not an Itanium name, or one the demangler rejects.
    Failed,
    /// The demangled text (or the name itself) is longer than allowed.
    TooLong,
}

/// Demangle without parameters and return type into at most `max_bytes`. The demangler writes into a sink
/// that refuses to grow past the cap, which stops it there: its time and memory follow its output, so a
/// name built from nested back-references costs no more than the cap.
pub fn demangle_bounded(raw: &str, max_bytes: usize) -> Demangled {
    if !raw.starts_with("_Z") {
        return Demangled::Failed;
    }
    if raw.len() > max_bytes {
        return Demangled::TooLong;
    }
    if let Some(fast) = demangle_simple_template(raw) {
        return if fast.len() > max_bytes { Demangled::TooLong } else { Demangled::Text(fast) };
    }
    // A recursion limit keeps hostile names from exhausting the stack.
    let Ok(sym) = Symbol::new_with_options(raw.as_bytes(), &ParseOptions::default().recursion_limit(256)) else {
        return Demangled::Failed;
    };
    let mut sink = BoundedText { text: String::new(), max_bytes, full: false };
    match sym.structured_demangle(&mut sink, &DemangleOptions::default().no_params().no_return_type()) {
        Ok(()) => Demangled::Text(sink.text),
        Err(_) if sink.full => Demangled::TooLong,
        Err(_) => Demangled::Failed,
    }
}

/// A `fmt::Write` that fails once its text would exceed `max_bytes`.
struct BoundedText {
    text: String,
    max_bytes: usize,
    full: bool,
}

impl std::fmt::Write for BoundedText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.text.len().saturating_add(s.len()) > self.max_bytes {
            self.full = true;
            return Err(std::fmt::Error);
        }
        self.text.push_str(s);
        Ok(())
    }
}

/// The common shapes of ggml kernel names, demangled without a full parser: `_Z[L]<name>` followed either by
/// the parameters (no template), or by template arguments that are each an integer, bool or enum literal, a
/// builtin type or a plain class name (`I14__hip_bfloat16fLi5ELb0EE…` → `mul_mat_vec_f<__hip_bfloat16, float,
/// 5, false>`). Anything else (substitutions, nested or template types, expressions) returns `None` and goes
/// to cpp_demangle. Scanning a ggml library demangles thousands of distinct names and cpp_demangle's parse
/// dominated `scan --kernels`; a test compares this with cpp_demangle on every kernel name of the real
/// fixtures, so the two must agree wherever this one answers.
pub fn demangle_simple_template(raw: &str) -> Option<String> {
    let rest = raw.strip_prefix("_Z")?;
    let rest = rest.strip_prefix('L').unwrap_or(rest);
    let (name, mut rest) = source_name(rest)?;
    // Function parameters must follow (a bare name would be a variable); `Tn`/`X…`/substituted arguments are
    // left to the full demangler.
    let Some(mut args) = rest.strip_prefix('I') else {
        return (!rest.is_empty() && !rest.starts_with(['I', 'E'])).then(|| name.to_string());
    };
    let mut out = String::with_capacity(name.len() + 32);
    out.push_str(name);
    out.push('<');
    let mut first = true;
    loop {
        if let Some(after) = args.strip_prefix('E') {
            rest = after;
            break;
        }
        if !first {
            out.push_str(", ");
        }
        first = false;
        args = template_arg(args, &mut out)?;
    }
    if first || rest.is_empty() {
        return None;
    }
    out.push('>');
    Some(out)
}

/// Print one template argument of the shapes [`demangle_simple_template`] handles to `out`; return what
/// follows it.
fn template_arg<'a>(args: &'a str, out: &mut String) -> Option<&'a str> {
    let Some(lit) = args.strip_prefix('L') else {
        if args.starts_with(|c: char| c.is_ascii_digit()) {
            // A class named by its `<source-name>` alone; one followed by template arguments or ABI tags is
            // left to cpp_demangle, and so is the anonymous namespace, which it spells out.
            let (class, after) = source_name(args)?;
            if class.starts_with("_GLOBAL__N") || after.starts_with(['I', 'B']) {
                return None;
            }
            out.push_str(class);
            return Some(after);
        }
        let (code, after) = args.split_at_checked(1)?;
        out.push_str(builtin_type(code)?);
        return Some(after);
    };
    let end = lit.find('E')?;
    let (body, after) = (lit.get(..end)?, lit.get(end + 1..)?);
    let number = |digits: &str, out: &mut String| -> Option<()> {
        let (neg, d) = match digits.strip_prefix('n') {
            Some(d) => (true, d),
            None => (false, digits),
        };
        if d.is_empty() || !d.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if neg {
            out.push('-');
        }
        out.push_str(d);
        Some(())
    };
    match body.as_bytes().first()? {
        b'i' => number(body.get(1..)?, out)?,
        b'b' => match body.get(1..)? {
            "0" => out.push_str("false"),
            "1" => out.push_str("true"),
            _ => return None,
        },
        b'0'..=b'9' => {
            let (enum_name, value) = source_name(body)?;
            out.push('(');
            out.push_str(enum_name);
            out.push(')');
            number(value, out)?;
        }
        _ => return None,
    }
    Some(after)
}

/// The one-letter builtin types as cpp_demangle prints them (Itanium ABI `<builtin-type>`).
fn builtin_type(code: &str) -> Option<&'static str> {
    Some(match code {
        "v" => "void",
        "w" => "wchar_t",
        "b" => "bool",
        "c" => "char",
        "a" => "signed char",
        "h" => "unsigned char",
        "s" => "short",
        "t" => "unsigned short",
        "i" => "int",
        "j" => "unsigned int",
        "l" => "long",
        "m" => "unsigned long",
        "x" => "long long",
        "y" => "unsigned long long",
        "n" => "__int128",
        "o" => "unsigned __int128",
        "f" => "float",
        "d" => "double",
        "e" => "long double",
        "g" => "__float128",
        _ => return None,
    })
}

/// The function's own name from an Itanium mangled name: `_ZL13mul_mat_vec_qIL9ggml_type12E…` →
/// `mul_mat_vec_q`; for nested names (`_ZN2ns3fooE…`) the last component. Unmangled names (Tensile's
/// `Cijk_…`, C functions) are their own base name, so this returns `None` for them.
pub fn base_name(raw: &str) -> Option<&str> {
    let rest = raw.strip_prefix("_Z")?;
    let rest = rest.strip_prefix('L').unwrap_or(rest);
    if let Some(nested) = rest.strip_prefix('N') {
        let mut s = nested.trim_start_matches(['K', 'V', 'r']);
        let mut last = None;
        while let Some((name, tail)) = source_name(s) {
            last = Some(name);
            s = tail;
        }
        return last;
    }
    source_name(rest).map(|(name, _)| name)
}

/// `<length><identifier>` at the start of `s`.
fn source_name(s: &str) -> Option<(&str, &str)> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 6 {
        return None;
    }
    let len: usize = s.get(..digits)?.parse().ok()?;
    let name = s.get(digits..digits.checked_add(len)?)?;
    Some((name, s.get(digits + len..)?))
}

/// The value `N` of the first `L9ggml_typeNE` template literal in a mangled name.
pub fn ggml_type_value(raw: &str) -> Option<u32> {
    const TAG: &str = "L9ggml_type";
    let at = raw.find(TAG)? + TAG.len();
    let digits: &str = raw.get(at..)?.split('E').next()?;
    digits.parse().ok()
}

/// Family of a kernel from its base name (and raw name for `contains` rules).
pub fn family(base: &str, raw: &str) -> &'static str {
    rule(base, raw).map_or(OTHER, |r| r.family.as_str())
}

/// The first rule of data/kernel_families.toml that matches.
fn rule(base: &str, raw: &str) -> Option<&'static crate::gpu::knowledge::FamilyRule> {
    kernel_families().rule.iter().find(|rule| {
        rule.name.iter().any(|n| n == base)
            || rule.prefix.iter().any(|p| base.starts_with(p.as_str()))
            || rule.contains.iter().any(|c| raw.contains(c.as_str()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Names from the real cyllama-rocm libggml-hip (formats.md §6).
    const MMVQ: &str = "_ZL13mul_mat_vec_qIL9ggml_type10ELi1ELb0ELb0EEvPKvS2_PKi31ggml_cuda_mm_fusion_args_devicePfj15HIP_vector_typeIjLj3EEjjjS8_jjjS8_jjjj";

    #[test]
    fn describes_a_real_mmvq_kernel() {
        let k = describe(MMVQ);
        assert_eq!(k.base, "mul_mat_vec_q");
        assert_eq!(k.family, "MMVQ");
        assert_eq!(k.ggml_type, Some("Q2_K"));
        // What GNU c++filt prints for this name, parameters cut (formats.md §6).
        assert_eq!(k.demangled, "mul_mat_vec_q<(ggml_type)10, 1, false, false>");
        assert!(k.demangled_ok);
    }

    #[test]
    fn fast_path_takes_builtin_and_class_type_arguments() {
        // What cpp_demangle prints for these (the real-fixture test checks every name).
        let bf16 = "_ZL13mul_mat_vec_fI14__hip_bfloat16fLi5ELi32ELb0ELb0EEvPKT_PKfPKi31ggml_cuda_mm_fusion_args_devicePfi15HIP_vector_typeIjLj3EEiiiSB_iiiSB_iiii";
        assert_eq!(
            demangle_simple_template(bf16).as_deref(),
            Some("mul_mat_vec_f<__hip_bfloat16, float, 5, 32, false, false>")
        );
        assert_eq!(display_name(bf16), "mul_mat_vec_f<__hip_bfloat16, float, 5, 32, false, false>");
        // A substitution (`S0_`), a class template and ABI tags are the full demangler's.
        for raw in [
            "_ZL13mul_mat_vec_fI6__halfS0_Li2ELi224ELb0ELb0EEvPKT_PKfPKi",
            "_ZL3fooI3BarIiEEvv",
            "_ZL3fooI6__halfB5cxx11Evv",
            "_ZL3fooIDhEvv",
        ] {
            assert_eq!(demangle_simple_template(raw), None, "{raw}");
        }
        assert_eq!(display_name("_ZL3fooI6__halfS0_Evv"), "foo<__half, __half>");
    }

    #[test]
    fn falls_back_when_the_demangler_fails() {
        // The `Tn` mangling cpp_demangle 0.5 rejects (formats.md §6).
        let raw = "_ZL16k_set_rows_quantIlL9ggml_type2ELi32ETnPFvPKfPT0_EXadL_ZL23quantize_f32_q4_0_blockS2_PS0_EEEvS2_PKT_S4_lllllllllllllll";
        let k = describe(raw);
        assert_eq!(k.base, "k_set_rows_quant");
        assert_eq!(k.family, "quantize");
        assert_eq!(k.ggml_type, Some("Q4_0"));
        if !k.demangled_ok {
            assert_eq!(k.demangled, "k_set_rows_quant<…>");
        }
    }

    #[test]
    fn names_that_demangle_past_the_cap_fall_back() {
        // Each `S0_I Sn_ Sn_ E` is A<X, X> of the previous type X: the text doubles per level.
        let mut bomb = String::from("_Z1fI1AI1B1BE");
        for sub in ["S3_", "S4_", "S5_", "S6_", "S7_", "S8_", "S9_", "SA_", "SB_", "SC_", "SD_", "SE_", "SF_", "SG_"] {
            bomb.push_str(&format!("S0_I{sub}{sub}E"));
        }
        bomb.push_str("Evv");
        let Demangled::Text(full) = demangle_bounded(&bomb, 1 << 20) else { panic!("demangles under 1 MiB") };
        assert!(full.len() > 200_000 && full.starts_with("f<A<B, B>, A<A<B, B>, A<B, B> >"), "{}", full.len());
        assert_eq!(demangle_bounded(&bomb, full.len()), Demangled::Text(full.clone()));
        assert_eq!(demangle_bounded(&bomb, full.len() - 1), Demangled::TooLong);
        assert_eq!(display_name_bounded(&bomb, 4096), ("f<…>".to_string(), true));
        assert!(!display_name_bounded(MMVQ, 4096).1);
        assert_eq!(demangle_bounded(MMVQ, 10), Demangled::TooLong, "the fast path is capped too");
        assert_eq!(demangle_bounded("Cijk_x", 10), Demangled::Failed);
    }

    #[test]
    fn vendor_blas_kernels_name_their_library() {
        // Kernel names as Nsight Compute lists them for llama-bench on an H100, and Tensile's.
        for (raw, library) in [
            ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "cuBLASLt"),
            ("cutlass_80_tensorop_f16_s16816gemm_relu_f16_64x64_32x6_tn_align8", "CUTLASS"),
            ("_ZN8cublasLt19splitKreduce_kernelILi32ELi16EiffffLb0ELb1ELb0ELb0EEEvNS_18cublasSplitKParamsIT3_EEPKT1_PKT2_PS7_PKT4_PKS9_PS9_PS7_", "cuBLASLt"),
            ("_Z17gemv2T_kernel_valIiiLi128ELi16ELi4ELi4ELb0ELb0EfffEvv", "cuBLAS"),
            ("Cijk_Ailk_Bljk_HHS_BH_MT64x64x32_MI32x32x8x1_SN_1LDSB0", "rocBLAS/Tensile"),
        ] {
            let k = describe(raw);
            assert_eq!((k.family, k.library), ("vendor-BLAS", Some(library)), "{raw}");
        }
        let ggml = describe(MMVQ);
        assert_eq!((ggml.family, ggml.library), ("MMVQ", None));
    }

    #[test]
    fn unmangled_and_nested_names() {
        let k = describe("Cijk_Ailk_Bljk_HHS_BH_MT64x64x32_MI32x32x8x1_SN_1LDSB0");
        assert_eq!(
            (k.base.as_str(), k.family),
            ("Cijk_Ailk_Bljk_HHS_BH_MT64x64x32_MI32x32x8x1_SN_1LDSB0", "vendor-BLAS")
        );
        assert_eq!(base_name("_ZN2ns8soft_maxE"), Some("soft_max"));
        assert_eq!(family("soft_max_f32", ""), "softmax");
        assert_eq!(family("something_else", "x"), OTHER);
        for junk in ["_Z", "_Z999999999x", "_ZL", "_ZN", "_Z3ab", "L9ggml_type", "L9ggml_type99999999999E"] {
            let _ = describe(junk);
        }
    }
}
