//! Reading a disassembler's output into per-function mnemonic counts, streaming: the text of a large code object
//! runs to hundreds of MB and is never held whole. Three formats: `llvm-objdump -d` (AMDGPU), `nvdisasm -c` and
//! `cuobjdump -sass` (NVIDIA SASS).

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;

use serde::{Deserialize, Serialize};

/// Longest line kept; longer ones are counted as cut and skipped (no real instruction line comes close).
pub const MAX_LINE: usize = 4096;
/// Longest mnemonic kept; anything longer is not an instruction name.
const MAX_MNEMONIC: usize = 64;
/// Most functions kept from one listing; a code object with more is cut there.
const MAX_FUNCTIONS: usize = 1 << 20;

/// Which output format a listing is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `llvm-objdump -d`: `<name>:` (or `ADDR <name>:`) labels, instructions indented by a tab.
    LlvmObjdump,
    /// `nvdisasm -c`: a `.text.<name>:` label per function section, instructions as `/*ADDR*/ [@P] OPCODE …;`.
    Nvdisasm,
    /// `cuobjdump -sass`: `Function : <name>` headers, instructions as in nvdisasm.
    Cuobjdump,
}

/// One function's instructions by mnemonic.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionMnemonics {
    pub name: String,
    pub mnemonics: BTreeMap<String, u64>,
}

/// A whole listing, as cached: per function, plus instructions before any function label (section padding).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    pub functions: Vec<FunctionMnemonics>,
    pub unattributed: u64,
    /// Lines longer than [`MAX_LINE`], skipped.
    pub long_lines: u64,
    /// The read stopped at the byte budget (or the function cap) before the output ended.
    pub truncated: bool,
}

/// Read a listing from `reader`, at most `budget` bytes.
///
/// Labels that repeat a name (symbols that share one string, or a function split by the disassembler) continue that
/// name's one entry: a listing holds each distinct name once, so its memory follows the distinct names in the code
/// object's string table, not the number of labels printed (300,000 symbols sharing one 4000-byte name printed 1.2
/// GB of labels).
pub fn read(reader: impl BufRead, format: Format, budget: u64) -> std::io::Result<Listing> {
    let mut listing = Listing::default();
    let mut current: Option<usize> = None;
    let mut by_name: HashMap<String, usize> = HashMap::new();
    let mut lines = Lines { reader, budget, line: Vec::new() };
    while let Some(line) = lines.next_line()? {
        let Some(line) = line else {
            listing.long_lines += 1;
            continue;
        };
        match parse_line(line, format) {
            Line::Function(name) => {
                if let Some(&i) = by_name.get(name) {
                    current = Some(i);
                    continue;
                }
                if listing.functions.len() >= MAX_FUNCTIONS {
                    listing.truncated = true;
                    break;
                }
                by_name.insert(name.to_string(), listing.functions.len());
                listing.functions.push(FunctionMnemonics { name: name.to_string(), mnemonics: BTreeMap::new() });
                current = Some(listing.functions.len() - 1);
            }
            Line::EndOfFunctions => current = None,
            Line::Instruction(m) => match current.and_then(|i| listing.functions.get_mut(i)) {
                Some(f) => match f.mnemonics.get_mut(m) {
                    Some(n) => *n += 1,
                    None => {
                        f.mnemonics.insert(m.to_string(), 1);
                    }
                },
                None => listing.unattributed += 1,
            },
            Line::Other => {}
        }
    }
    listing.truncated |= lines.budget == 0;
    Ok(listing)
}

/// Lines of at most [`MAX_LINE`] bytes, at most `budget` bytes in all.
struct Lines<R> {
    reader: R,
    budget: u64,
    line: Vec<u8>,
}

impl<R: BufRead> Lines<R> {
    /// `Ok(None)` at the end (or when the budget is spent), `Ok(Some(None))` for a line that was too long.
    fn next_line(&mut self) -> std::io::Result<Option<Option<&str>>> {
        self.line.clear();
        let mut too_long = false;
        let mut any = false;
        loop {
            if self.budget == 0 {
                // A line cut by the budget is dropped; the listing says it was truncated.
                return Ok(None);
            }
            let buf = self.reader.fill_buf()?;
            if buf.is_empty() {
                break;
            }
            any = true;
            let room = usize::try_from(self.budget).unwrap_or(usize::MAX).min(buf.len());
            let chunk = &buf[..room];
            let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            if !too_long {
                let content = &chunk[..if done { take - 1 } else { take }];
                if self.line.len() + content.len() > MAX_LINE {
                    too_long = true;
                    self.line.clear();
                } else {
                    self.line.extend_from_slice(content);
                }
            }
            self.reader.consume(take);
            self.budget -= take as u64;
            if done {
                break;
            }
        }
        if !any {
            return Ok(None);
        }
        if too_long {
            return Ok(Some(None));
        }
        // Disassemblers print ASCII; anything else is not an instruction line.
        Ok(Some(Some(std::str::from_utf8(&self.line).unwrap_or(""))))
    }
}

enum Line<'a> {
    Function(&'a str),
    /// A new section starts: instructions until the next function label belong to none.
    EndOfFunctions,
    Instruction(&'a str),
    Other,
}

fn parse_line(line: &str, format: Format) -> Line<'_> {
    match format {
        Format::LlvmObjdump => llvm_line(line),
        Format::Nvdisasm => {
            if let Some(name) = line.strip_prefix(".text.").and_then(|s| s.strip_suffix(':')) {
                return Line::Function(name);
            }
            sass_instruction(line)
        }
        Format::Cuobjdump => {
            if let Some(name) = line.trim_start().strip_prefix("Function : ") {
                return Line::Function(name.trim());
            }
            if line.starts_with("Fatbin ") {
                return Line::EndOfFunctions;
            }
            sass_instruction(line)
        }
    }
}

fn llvm_line(line: &str) -> Line<'_> {
    if line.starts_with("Disassembly of section ") {
        return Line::EndOfFunctions;
    }
    if let Some(rest) = line.strip_prefix('\t') {
        // `\t\t...` marks elided zero bytes; `\t<mnemonic> operands // ADDR: ENCODING` is an instruction.
        if !rest.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return Line::Other;
        }
        let m = rest.split([' ', '\t']).next().unwrap_or("");
        return if m.len() <= MAX_MNEMONIC { Line::Instruction(m) } else { Line::Other };
    }
    // `<name>:` with --no-leading-addr, `0000000000002ed00 <name>:` without.
    if let Some(label) = line.strip_suffix(">:") {
        if let Some((addr, name)) = label.split_once('<') {
            if addr.trim().bytes().all(|b| b.is_ascii_hexdigit()) {
                // A label that is a section name (`<.text>`) marks bytes before the first symbol, not a function.
                return if name.starts_with('.') { Line::EndOfFunctions } else { Line::Function(name) };
            }
        }
    }
    Line::Other
}

/// `        /*0060*/               @P0 EXIT ;` → `EXIT`.
fn sass_instruction(line: &str) -> Line<'_> {
    let t = line.trim_start();
    let Some(rest) = t.strip_prefix("/*") else { return Line::Other };
    let Some((addr, rest)) = rest.split_once("*/") else { return Line::Other };
    if addr.is_empty() || !addr.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Line::Other;
    }
    let mut words = rest.split_whitespace();
    let mut op = words.next().unwrap_or("");
    if op.starts_with('@') {
        op = words.next().unwrap_or("");
    }
    let op = op.trim_end_matches(';');
    if op.is_empty() || op.len() > MAX_MNEMONIC || !op.starts_with(|c: char| c.is_ascii_uppercase()) {
        return Line::Other;
    }
    Line::Instruction(op)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(l: &Listing, f: &str) -> Vec<(String, u64)> {
        let f = l.functions.iter().find(|x| x.name == f).unwrap();
        f.mnemonics.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// Lines as llvm-objdump 19 prints a gfx942 code object of the cyllama-rocm library, both label styles.
    #[test]
    fn llvm_objdump_lines() {
        let text = "\nco/89-3.co:\tfile format elf64-amdgpu\n\nDisassembly of section .text:\n\n\
            0000000000083b00 <.text>:\n\ts_nop 0                                                    // 000000083B00: BF800000\n\
            000000000002ed00 <_ZL9mul_mat_qIL9ggml_type19ELi8ELb0EEvPKc>:\n\
            \ts_load_dwordx8 s[16:23], s[0:1], 0x30                      // 000000083F00: C00E0400 00000030\n\
            \tv_mfma_i32_16x16x32_i8 a[0:3], v[2:3], v[4:5], a[0:3]     // 0000000304D8: D3D60000 04020902\n\
            \tv_mfma_i32_16x16x32_i8 a[0:3], v[2:3], v[4:5], a[0:3]     // 0000000304D8: D3D60000 04020902\n\
            \ts_endpgm                                                   // 0000000304E8: BF810000\n\t\t...\n\n\
            <foo>:\n\tv_dot4_i32_i8 v0, v1, v2, v0\n";
        let l = read(text.as_bytes(), Format::LlvmObjdump, u64::MAX).unwrap();
        assert_eq!(l.unattributed, 1, "the s_nop before the first symbol");
        assert_eq!(l.functions.len(), 2);
        assert_eq!(
            counts(&l, "_ZL9mul_mat_qIL9ggml_type19ELi8ELb0EEvPKc"),
            [("s_endpgm".into(), 1), ("s_load_dwordx8".into(), 1), ("v_mfma_i32_16x16x32_i8".into(), 2)]
        );
        assert_eq!(counts(&l, "foo"), [("v_dot4_i32_i8".into(), 1)]);
        assert!(!l.truncated);
    }

    /// Lines as nvdisasm 13.5 `-c` and cuobjdump 13.5 `-sass` print the same sm_75 cubin of cyllama-cuda12.
    #[test]
    fn sass_lines() {
        let nv = "\t.headerflags\t@\"EF_CUDA_SM75\"\n//--------------------- .text._Z7acc_f32PKf --------------------------\n\
            \t.section\t.text._Z7acc_f32PKf,\"ax\",@progbits\n.text._Z7acc_f32PKf:\n        .type           _Z7acc_f32PKf,@function\n\
            _Z7acc_f32PKf:\n        /*0000*/                   IMAD.MOV.U32 R1, RZ, RZ, c[0x0][0x28] ;\n.L_x_10:\n\
            \x20       /*0060*/               @P0 EXIT ;\n        /*00d0*/              @!P0 BRA `(.L_x_1) ;\n\
            \x20       /*0100*/                   HMMA.1688.F32 R4, R8, R12, R4 ;\n";
        let l = read(nv.as_bytes(), Format::Nvdisasm, u64::MAX).unwrap();
        assert_eq!(
            counts(&l, "_Z7acc_f32PKf"),
            [("BRA".into(), 1), ("EXIT".into(), 1), ("HMMA.1688.F32".into(), 1), ("IMAD.MOV.U32".into(), 1)]
        );
        let cu = "\nFatbin elf code:\n================\narch = sm_75\n\n\tcode for sm_75\n\t\tFunction : _Z7acc_f32PKf\n\
            \t.headerflags\t@\"EF_CUDA_SM75\"\n        /*0000*/                   IMAD.MOV.U32 R1, RZ, RZ, c[0x0][0x28] ;                /* 0x00000a00ff017624 */\n\
            \x20                                                                                         /* 0x000fe400078e00ff */\n\
            \x20       /*0060*/               @P0 EXIT ;                                                 /* 0x000000000000094d */\n";
        let l = read(cu.as_bytes(), Format::Cuobjdump, u64::MAX).unwrap();
        assert_eq!(counts(&l, "_Z7acc_f32PKf"), [("EXIT".into(), 1), ("IMAD.MOV.U32".into(), 1)]);
    }

    #[test]
    fn labels_that_repeat_a_name_continue_its_one_entry() {
        let text = "<k>:\n\ts_nop 0\n<j>:\n\ts_nop 0\n<k>:\n\ts_endpgm\n<k>:\n\ts_endpgm\n";
        let l = read(text.as_bytes(), Format::LlvmObjdump, u64::MAX).unwrap();
        assert_eq!(l.functions.len(), 2);
        assert_eq!(counts(&l, "k"), [("s_endpgm".into(), 2), ("s_nop".into(), 1)]);
        assert_eq!(counts(&l, "j"), [("s_nop".into(), 1)]);
    }

    #[test]
    fn the_budget_and_the_line_cap_hold() {
        let mut text = String::from("<f>:\n");
        for _ in 0..100 {
            text.push_str("\tv_add_f32 v0, v1, v2\n");
        }
        let l = read(text.as_bytes(), Format::LlvmObjdump, 5 + 22 * 10).unwrap();
        assert!(l.truncated);
        assert_eq!(counts(&l, "f"), [("v_add_f32".into(), 10)]);
        let long = format!("<f>:\n\t{}\n\tv_add_f32 v0\n", "x".repeat(MAX_LINE * 3));
        let l = read(long.as_bytes(), Format::LlvmObjdump, u64::MAX).unwrap();
        assert_eq!((l.long_lines, counts(&l, "f")), (1, vec![("v_add_f32".into(), 1)]));
        assert!(!l.truncated);
    }
}
