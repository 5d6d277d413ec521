//! The environment variables that configure an observer, their defaults, and the byte-count syntax
//! of `BACKSCOPE_TRACE_MAX_BYTES`. Every observer (the CUDA/HIP preload library, a Vulkan layer) and
//! every harness that starts one (`backscope trace`, `sweep --trace`) takes the names from here.

use std::ffi::CStr;

/// One environment variable: its name as Rust text and as a C string (for `getenv` in code that
/// must not allocate or take std's environment lock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Var {
    name: &'static str,
    c_name: &'static CStr,
}

impl Var {
    const fn new(c_name: &'static CStr) -> Var {
        match std::str::from_utf8(c_name.to_bytes()) {
            Ok(name) => Var { name, c_name },
            Err(_) => panic!("environment variable names are ASCII"),
        }
    }

    pub const fn name(&self) -> &'static str {
        self.name
    }

    pub const fn c_name(&self) -> &'static CStr {
        self.c_name
    }
}

impl std::fmt::Display for Var {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// Directory for `trace-<pid>.jsonl` files (see [`crate::naming`]).
pub const TRACE_DIR: Var = Var::new(c"BACKSCOPE_TRACE_DIR");
/// Exact trace path (`%p` becomes the pid); overrides [`TRACE_DIR`].
pub const TRACE_FILE: Var = Var::new(c"BACKSCOPE_TRACE_FILE");
/// Window length in milliseconds ([`DEFAULT_INTERVAL_MS`]; 0 = write at exit only).
pub const TRACE_INTERVAL_MS: Var = Var::new(c"BACKSCOPE_TRACE_INTERVAL_MS");
/// Most bytes of one process's trace file ([`DEFAULT_MAX_BYTES`]; `0`: no limit; syntax of
/// [`parse_bytes`]).
pub const TRACE_MAX_BYTES: Var = Var::new(c"BACKSCOPE_TRACE_MAX_BYTES");
/// Segments a trace rotates through (`2` or more; unset, `0` or `1`: one file, cut at the budget): the budget is
/// split into that many segment files, and when one is full the trace goes on in a new one and the oldest is
/// deleted, so that a process traced for days keeps its newest records (see [`crate::sink`]).
pub const TRACE_ROTATE: Var = Var::new(c"BACKSCOPE_TRACE_ROTATE");
/// Most distinct kernels tracked before the overflow kernel 0 is used ([`DEFAULT_MAX_KERNELS`]).
pub const MAX_KERNELS: Var = Var::new(c"BACKSCOPE_MAX_KERNELS");
/// Test only: `1` makes kernel registration panic inside the observer (fault injection).
pub const TEST_INJECT_PANIC: Var = Var::new(c"BACKSCOPE_TEST_INJECT_PANIC");
/// Vulkan layer: `0` keeps it from asking drivers for pipeline statistics
/// (`VK_KHR_pipeline_executable_properties`), which it otherwise enables on devices that offer it.
pub const VK_PIPELINE_STATS: Var = Var::new(c"BACKSCOPE_VK_PIPELINE_STATS");

/// Vulkan layer: a device profile file (`docs/vulkan-profiles.md`) every physical device answers ggml-vulkan's
/// queries from (device impersonation; shaders are replaced by empty ones, so results are meaningless).
pub const VK_IMPERSONATE: Var = Var::new(c"BACKSCOPE_VK_IMPERSONATE");

/// Vulkan layer: the black box (GPU-side progress: buffer markers or the layer's timeline semaphores, and the hang
/// watcher). `0` turns it off; on otherwise.
pub const VK_BLACKBOX: Var = Var::new(c"BACKSCOPE_VK_BLACKBOX");

/// Vulkan layer: milliseconds without GPU progress, while work is pending, after which the hang watcher writes a
/// `hang` record (default 10000; `0` turns the watcher off).
pub const VK_HANG_MS: Var = Var::new(c"BACKSCOPE_VK_HANG_MS");

/// Vulkan layer: where the black box's GPU markers go: `buffer` (command buffers' ends; the default),
/// `barrier` (also after the program's own barriers), `sync` (and a "started" marker before every dispatch),
/// `dispatch` (around every dispatch) or `none` (no marker and no marker extension: progress by submissions). Each
/// marker costs GPU time on some drivers (about 1 µs on NVIDIA's).
pub const VK_MARKERS: Var = Var::new(c"BACKSCOPE_VK_MARKERS");

/// Vulkan layer, for measuring what the black box's markers cost: `device` puts the marker words in device-local,
/// host-visible memory (the PCIe BAR) where the driver offers it; anything else, or unset, in host memory that is not
/// device-local, which stays readable when the GPU is reset after a hang (the default).
pub const VK_MARKER_MEMORY: Var = Var::new(c"BACKSCOPE_VK_MARKER_MEMORY");

/// Vulkan layer: with the `buffer` placement, how many dispatches go unmarked on a device before a command buffer's
/// end is marked (default 100; 1: every buffer with a dispatch). Unmarked buffers are covered by the next marked
/// buffer's marker, and are candidates with it until then.
pub const VK_MARKER_MIN_DISPATCHES: Var = Var::new(c"BACKSCOPE_VK_MARKER_MIN_DISPATCHES");

/// Vulkan layer: `0` keeps it from recording the order of dispatches (the distinct pipeline sequences of submitted
/// command buffers, `sequence` records); on otherwise.
pub const VK_ORDER: Var = Var::new(c"BACKSCOPE_VK_ORDER");

/// Vulkan layer: `0` keeps the black box from enabling `VK_EXT_device_fault` (what the driver says about a device
/// loss) on devices that offer it; on otherwise.
pub const VK_FAULT: Var = Var::new(c"BACKSCOPE_VK_FAULT");

/// Vulkan layer, for measuring what it costs: `1` starts it paused, its hooks installed but only forwarding (nothing
/// followed or counted), as `backscope_vk_set_observing(0)` pauses it inside a process; unset or anything else, it
/// observes. The process-level arm of bench/gpu/blackbox_cost.sh that tells the forwarding's cost from observing's.
pub const VK_PAUSED: Var = Var::new(c"BACKSCOPE_VK_PAUSED");

/// Every variable above, for harnesses that clear an inherited configuration.
pub const ALL: [Var; 17] = [
    TRACE_DIR,
    TRACE_FILE,
    TRACE_INTERVAL_MS,
    TRACE_MAX_BYTES,
    TRACE_ROTATE,
    MAX_KERNELS,
    TEST_INJECT_PANIC,
    VK_PIPELINE_STATS,
    VK_IMPERSONATE,
    VK_BLACKBOX,
    VK_HANG_MS,
    VK_MARKERS,
    VK_MARKER_MEMORY,
    VK_MARKER_MIN_DISPATCHES,
    VK_ORDER,
    VK_FAULT,
    VK_PAUSED,
];

pub const DEFAULT_INTERVAL_MS: u64 = 50;
/// Longest window accepted; longer requests are clamped to it.
pub const MAX_INTERVAL_MS: u64 = 3_600_000;
/// Per-process trace budget: 1 GiB holds about 40 minutes of a busy server with 50 ms windows
/// (≈1.5 GB an hour was measured), and bounds what a forgotten `LD_PRELOAD` can fill.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
pub const DEFAULT_MAX_KERNELS: u32 = 1 << 20;

extern "C" {
    /// The C library's `getenv`: unlike `std::env::var` it takes no lock, which matters in a child
    /// forked while another thread held std's environment lock.
    fn getenv(name: *const std::ffi::c_char) -> *const std::ffi::c_char;
}

/// Whether a switch that is on by default is on: unset, or set to anything but `0`.
pub fn on_unless_zero(var: Var) -> bool {
    get(var).is_none_or(|v| v.trim() != "0")
}

/// The value of `var` (lossily UTF-8), read without locks; `None` when unset.
pub fn get(var: Var) -> Option<String> {
    // SAFETY: getenv reads the environment with a NUL-terminated name; the observers never modify
    // the environment, and the value is copied at once.
    let value = unsafe { getenv(var.c_name().as_ptr()) };
    if value.is_null() {
        return None;
    }
    // SAFETY: getenv returned a NUL-terminated string.
    Some(unsafe { CStr::from_ptr(value) }.to_string_lossy().into_owned())
}

/// Where a trace goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    /// [`TRACE_DIR`]: `trace-<pid>.jsonl` in this directory.
    Dir(String),
    /// [`TRACE_FILE`]: this path, `%p` replaced by the pid.
    File(String),
}

/// An observer's configuration, from the variables above.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub destination: Destination,
    /// 0: no periodic windows, only the final flush at exit.
    pub interval_ms: u64,
    /// At least 1; an observer may lower it to its own hard limit.
    pub max_kernels: u32,
    /// Most bytes of one process's trace file (of all its segments together, when it rotates); 0: no limit.
    pub max_bytes: u64,
    /// [`TRACE_ROTATE`]: segments kept; below 2, the trace does not rotate.
    pub rotate: u32,
}

impl Settings {
    /// The settings `lookup` gives (`get` for the process environment); an error saying why there
    /// is nothing to observe when neither destination is set.
    pub fn from_lookup(lookup: impl Fn(Var) -> Option<String>) -> Result<Settings, &'static str> {
        let destination = match (lookup(TRACE_FILE), lookup(TRACE_DIR)) {
            (Some(file), _) if !file.is_empty() => Destination::File(file),
            (_, Some(dir)) if !dir.is_empty() => Destination::Dir(dir),
            _ => return Err("neither BACKSCOPE_TRACE_DIR nor BACKSCOPE_TRACE_FILE is set; not observing"),
        };
        let interval_ms = lookup(TRACE_INTERVAL_MS)
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(DEFAULT_INTERVAL_MS, |ms| ms.min(MAX_INTERVAL_MS));
        let max_kernels =
            lookup(MAX_KERNELS).and_then(|v| v.trim().parse::<u32>().ok()).map_or(DEFAULT_MAX_KERNELS, |n| n.max(1));
        let max_bytes = lookup(TRACE_MAX_BYTES).and_then(|v| parse_bytes(&v)).unwrap_or(DEFAULT_MAX_BYTES);
        let rotate = lookup(TRACE_ROTATE).and_then(|v| v.trim().parse::<u32>().ok()).unwrap_or(0);
        Ok(Settings { destination, interval_ms, max_kernels, max_bytes, rotate })
    }

    /// The settings of this process's environment.
    pub fn from_env() -> Result<Settings, &'static str> {
        Settings::from_lookup(get)
    }
}

/// A byte count: digits with an optional binary suffix (`K`, `M`, `G`, `T`, optionally followed by
/// `iB` or `B`; any case). `None` for anything else or an overflowing value.
pub fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits_end = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, suffix) = text.split_at(digits_end);
    let number: u64 = digits.parse().ok()?;
    let suffix = suffix.trim().to_ascii_lowercase();
    let unit = suffix.strip_suffix("ib").or_else(|| suffix.strip_suffix('b')).unwrap_or(&suffix);
    let shift = match unit {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return None,
    };
    number.checked_mul(1u64 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_take_binary_suffixes() {
        assert_eq!(parse_bytes("0"), Some(0));
        assert_eq!(parse_bytes(" 65536 "), Some(65536));
        assert_eq!(parse_bytes("64k"), Some(65536));
        assert_eq!(parse_bytes("512MiB"), Some(512 << 20));
        assert_eq!(parse_bytes("2G"), Some(2 << 30));
        assert_eq!(parse_bytes("1 GB"), Some(1 << 30));
        assert_eq!(parse_bytes("1.5G"), None);
        assert_eq!(parse_bytes("G"), None);
        assert_eq!(parse_bytes("-1"), None);
        assert_eq!(parse_bytes("99999999999T"), None, "overflow");
    }

    #[test]
    fn names_are_the_documented_ones() {
        // docs/trace-format.md, "Configuration (environment)".
        let names: Vec<&str> = ALL.iter().map(|v| v.name()).collect();
        assert_eq!(
            names,
            [
                "BACKSCOPE_TRACE_DIR",
                "BACKSCOPE_TRACE_FILE",
                "BACKSCOPE_TRACE_INTERVAL_MS",
                "BACKSCOPE_TRACE_MAX_BYTES",
                "BACKSCOPE_TRACE_ROTATE",
                "BACKSCOPE_MAX_KERNELS",
                "BACKSCOPE_TEST_INJECT_PANIC",
                "BACKSCOPE_VK_PIPELINE_STATS",
                "BACKSCOPE_VK_IMPERSONATE",
                "BACKSCOPE_VK_BLACKBOX",
                "BACKSCOPE_VK_HANG_MS",
                "BACKSCOPE_VK_MARKERS",
                "BACKSCOPE_VK_MARKER_MEMORY",
                "BACKSCOPE_VK_MARKER_MIN_DISPATCHES",
                "BACKSCOPE_VK_ORDER",
                "BACKSCOPE_VK_FAULT",
                "BACKSCOPE_VK_PAUSED",
            ]
        );
        for v in ALL {
            assert_eq!(v.c_name().to_str().unwrap(), v.name());
        }
    }

    #[test]
    fn settings_follow_the_documented_defaults_and_precedence() {
        let from = |pairs: &'static [(&'static str, &'static str)]| {
            Settings::from_lookup(|v| pairs.iter().find(|(k, _)| *k == v.name()).map(|(_, x)| x.to_string()))
        };
        assert!(from(&[]).is_err());
        assert!(from(&[("BACKSCOPE_TRACE_DIR", "")]).is_err());
        let s = from(&[("BACKSCOPE_TRACE_DIR", "/t")]).unwrap();
        assert_eq!(s.destination, Destination::Dir("/t".into()));
        assert_eq!((s.interval_ms, s.max_kernels, s.max_bytes, s.rotate), (50, 1 << 20, 1 << 30, 0));
        let s = from(&[
            ("BACKSCOPE_TRACE_DIR", "/t"),
            ("BACKSCOPE_TRACE_FILE", "/f-%p.jsonl"),
            ("BACKSCOPE_TRACE_INTERVAL_MS", "99999999999"),
            ("BACKSCOPE_MAX_KERNELS", "0"),
            ("BACKSCOPE_TRACE_MAX_BYTES", "64k"),
            ("BACKSCOPE_TRACE_ROTATE", " 3 "),
        ])
        .unwrap();
        assert_eq!(s.rotate, 3);
        assert_eq!(s.destination, Destination::File("/f-%p.jsonl".into()), "the file wins over the directory");
        assert_eq!((s.interval_ms, s.max_kernels, s.max_bytes), (MAX_INTERVAL_MS, 1, 65536));
        // The process environment is read through the C library.
        assert_eq!(get(Var::new(c"BACKSCOPE_SURELY_UNSET_VARIABLE")), None);
        assert!(get(Var::new(c"PATH")).is_some());
    }
}
