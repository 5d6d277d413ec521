//! The kernel's side of a GPU failure during a traced run: what the GPU driver (amdgpu, NVIDIA's NVRM, i915, xe) wrote
//! into the kernel log while `backscope trace` or `sweep --trace` ran, kept beside the trace and joined to its crash,
//! device-lost and hang records. A ground-floor module: `trace` and `sweep` capture with it, `trace_summary` and the
//! report's run summary join with it.
//!
//! - [`record`]: a kept line ([`record::KernelLine`]): the record's sequence number, kernel time and text, and what the
//!   logs crate's classifier reads in it (a ring timeout, the process it names, a reset, a coredump, a page fault, an
//!   Xid, an Intel hang).
//! - [`capture`]: reads `/dev/kmsg` from the moment the run starts (opened non-blocking, positioned at the end), keeps
//!   only GPU-driver lines of the kernel's own (facility 0) records, bounded in lines and bytes, and appends them to
//!   the stored file as they come. Records overwritten before they were read are counted, never an error; a kernel
//!   log that cannot be read (not root and `kernel.dmesg_restrict=1`) is said once and the run goes on.
//! - [`stored`]: the stored file, `kernel-log.jsonl` (docs/trace-format.md): one JSON object a line — a header, the
//!   kept records, the end with the counts — written by [`capture`] and read back (bounded) by the summaries.
//! - [`join`]: groups lines into incidents (a timeout with the process it names and the reset after it) and states
//!   each as a claim, joined to the traced process the kernel names and to that process's failure records by time.
//! - [`after_the_fact`]: the lines of traces written while backscope did not run (`trace --env`), read by
//!   `trace --read` for the traces' span from `/dev/kmsg`, else the journal, kept as [`capture`] keeps them.

pub mod after_the_fact;
pub mod capture;
pub mod join;
pub mod record;
pub mod stored;
