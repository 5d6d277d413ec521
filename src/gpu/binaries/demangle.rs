//! The demangling pass of a scan: every distinct kernel name of the scanned files demangled once, in parallel,
//! within the scan's budgets of demangled bytes, and shared by the records that carry it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use rayon::prelude::*;

use super::limits::ScanLimits;
use super::records::*;
use crate::gpu::kernels;

/// Distinct names demangled side by side; the scan's budget of demangled bytes is checked between groups.
const DEMANGLE_GROUP: usize = 1024;

/// Demangle every distinct kernel name of the scanned files in parallel and fill the records, which share
/// one copy of each demangled name. Each name's text is capped at `limits.demangled_bytes_per_name` and
/// all of them together at `limits.demangled_bytes_total`; a name over either is shown as its fallback
/// (`base<…>`), and each file with such names gets one warning.
pub fn fill_demangled(files: &mut [FileRecord], limits: &ScanLimits, problems: &mut Vec<Problem>) {
    let mut slot_of: HashMap<&str, usize> = HashMap::new();
    let mut distinct: Vec<&str> = Vec::new();
    // For every record in order, the index of its name in `distinct`.
    let slots: Vec<usize> = files
        .iter()
        .flat_map(kernel_records)
        .map(|k| {
            *slot_of.entry(&k.name).or_insert_with(|| {
                distinct.push(&k.name);
                distinct.len() - 1
            })
        })
        .collect();
    let mut demangled: Vec<Arc<str>> = Vec::with_capacity(distinct.len());
    // Per distinct name: over the per-name cap, or left undemangled once the total was spent.
    let mut too_long: Vec<bool> = vec![false; distinct.len()];
    let mut over_total: Vec<bool> = vec![false; distinct.len()];
    let mut total = 0usize;
    for group in distinct.chunks(DEMANGLE_GROUP) {
        let first = demangled.len();
        let spent = total >= limits.demangled_bytes_total;
        let texts: Vec<(String, bool)> = group
            .par_iter()
            .map(|n| match n.starts_with("_Z") && !spent {
                true => kernels::display_name_bounded(n, limits.demangled_bytes_per_name),
                false => (kernels::fallback_name(n), false),
            })
            .collect();
        for (i, (name, (text, cut))) in group.iter().zip(texts).enumerate() {
            too_long[first + i] = cut;
            // Only the demangler's output counts: other names are shown as they are in the file.
            let text = if !name.starts_with("_Z") {
                text
            } else if spent || total.saturating_add(text.len()) > limits.demangled_bytes_total {
                over_total[first + i] = true;
                kernels::fallback_name(name)
            } else {
                total += text.len();
                text
            };
            demangled.push(Arc::from(text));
        }
    }
    // One warning per file that has names over a limit; none to look for in the usual case.
    let mut slots_left = &slots[..];
    let any_cut = too_long.iter().chain(&over_total).any(|&cut| cut);
    for f in files.iter().filter(|_| any_cut) {
        let mut long: HashSet<usize> = HashSet::new();
        let mut skipped: HashSet<usize> = HashSet::new();
        let mut first_at: Option<u64> = None;
        // `kernel_records_at` yields the records in `kernel_records` order, the order of `slots`.
        for (at, _) in kernel_records_at(f) {
            let Some((&slot, rest)) = slots_left.split_first() else { break };
            slots_left = rest;
            if too_long[slot] && long.insert(slot) || over_total[slot] && skipped.insert(slot) {
                first_at.get_or_insert(at);
            }
        }
        if !long.is_empty() {
            problems.push(Problem {
                path: f.path.clone(),
                offset: first_at,
                severity: Severity::Warning,
                message: format!(
                    "{} kernel names demangle to more than {} bytes each (limit per name, \
                     ScanLimits::demangled_bytes_per_name); they are shown as `name<…>`",
                    long.len(),
                    limits.demangled_bytes_per_name
                ),
            });
        }
        if !skipped.is_empty() {
            problems.push(Problem {
                path: f.path.clone(),
                offset: first_at,
                severity: Severity::Warning,
                message: format!(
                    "the scan's demangled kernel names reached {} bytes (limit per scan, \
                     ScanLimits::demangled_bytes_total); {} names of this file are shown as `name<…>`",
                    limits.demangled_bytes_total,
                    skipped.len()
                ),
            });
        }
    }
    drop(slot_of);
    drop(distinct);
    for (k, slot) in files.iter_mut().flat_map(kernel_records_mut).zip(slots) {
        k.demangled = Arc::clone(&demangled[slot]);
    }
}

/// [`kernel_records`] with the file offset of the code object or fatbin entry that holds each (for a code
/// object inside a compressed bundle, the bundle's).
fn kernel_records_at(f: &FileRecord) -> impl Iterator<Item = (u64, &KernelRecord)> {
    let amd = f.amdgpu.iter().flat_map(|a| a.code_objects.iter()).flat_map(|c| {
        let at = if c.in_file { c.offset } else { c.bundle_offset };
        c.kernels.iter().flatten().map(move |k| (at, k))
    });
    let cuda = f
        .cuda
        .iter()
        .flat_map(|c| c.entries.iter())
        .flat_map(|e| e.kernels.iter().flatten().map(move |k| (e.offset, k)));
    amd.chain(cuda)
}

fn kernel_records(f: &FileRecord) -> impl Iterator<Item = &KernelRecord> {
    let amd = f.amdgpu.iter().flat_map(|a| a.code_objects.iter()).flat_map(|c| c.kernels.iter().flatten());
    let cuda = f.cuda.iter().flat_map(|c| c.entries.iter()).flat_map(|e| e.kernels.iter().flatten());
    amd.chain(cuda)
}

/// [`kernel_records`], mutable, in the same order.
fn kernel_records_mut(f: &mut FileRecord) -> impl Iterator<Item = &mut KernelRecord> {
    let amd = f.amdgpu.iter_mut().flat_map(|a| a.code_objects.iter_mut()).flat_map(|c| c.kernels.iter_mut().flatten());
    let cuda = f.cuda.iter_mut().flat_map(|c| c.entries.iter_mut()).flat_map(|e| e.kernels.iter_mut().flatten());
    amd.chain(cuda)
}
