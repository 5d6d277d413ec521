//! GGUF files: reader (architecture, block count, tensor types and shapes) and writer (for `synth`).
//! Owned by the synth work (issue 3).
