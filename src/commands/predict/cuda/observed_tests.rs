//! Unit tests of the CUDA/HIP kernel classification.

use super::*;

#[test]
fn classifies_real_kernel_names() {
    // Names from the H100 trace in docs/validation/gpu-2026-11-21 and the cyllama-rocm HIP library.
    let k = classify("_Z13mul_mat_vec_qIL9ggml_type12ELi8ELb0ELb0ELb0EEvPKvS2_PKi31ggml_cuda_mm_fusion_args_devicePfj5uint3jjjS7_jjjS7_jjjj", 3);
    assert_eq!((k.family.as_str(), k.ggml_type.as_deref(), k.ncols), ("MMVQ", Some("Q4_K"), Some(8)));
    let k = classify(
        "_Z9mul_mat_qIL9ggml_type14ELi16ELb0EL9ggml_prec30EEvPKcPKiS5_S5_PfS6_PKf5uint3iiiiiS9_S9_iiiS9_S9_iiiS9_",
        1,
    );
    assert_eq!((k.family.as_str(), k.ggml_type.as_deref(), k.ncols), ("MMQ", Some("Q6_K"), None));
    let k = classify("_ZL13mul_mat_vec_fI14__hip_bfloat16fLi5ELi32ELb0ELb0EEvPKT_PKfPKi31ggml_cuda_mm_fusion_args_devicePfi15HIP_vector_typeIjLj3EEiiiSB_iiiSB_iiii", 1);
    assert_eq!((k.family.as_str(), k.ggml_type.as_deref(), k.ncols), ("MMVF", Some("BF16"), Some(5)));
    // Conversion kernels of the real cyllama-rocm libggml-hip.
    // An MMF kernel for F16 weights, as observed on an H100 (sm_90) for a 3-token prompt: `mul_mat_f<__half2, 32, 3,
    // 8, false>`.
    let k = classify("_Z9mul_mat_fI7__half2Li32ELi3ELi8ELb0EEvPKT_PKfPKiPfiiiiiiiiiiiiiiii", 151);
    assert_eq!((k.family.as_str(), k.ggml_type.as_deref()), ("MMF", Some("F16")));
    assert_eq!(type_in_name("_ZL21dequantize_block_q4_KI6__halfEvPKvPT_"), Some("Q4_K".into()));
    let generic = "_ZL16dequantize_blockILi32ELi2EXadL_ZL15dequantize_q5_0PKvliR15HIP_vector_typeIfLj2EEEE6__halfEvS1_PT2_lllS2_IjLj3EElll";
    assert_eq!(type_in_name(generic), Some("Q5_0".into()));
    assert_eq!(classify(generic, 1).family, "dequantize");
    assert_eq!(type_in_name("_ZL13convert_unaryI6__half14__hip_bfloat16EvPKvPT0_lll15HIP_vector_typeIjLj3EElll"), None);
    assert_eq!(template_args("f<a, g<b, c>, (t)1>"), vec!["a", "g<b, c>", "(t)1"]);
    assert!(template_args("plain").is_empty());
}
