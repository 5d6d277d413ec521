//! The filesystem the doctor reads, and how it reads a file and cites one.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::evidence::Source;

/// Bytes read from any one file (sysfs attributes, manifests, unit files are small).
const MAX_FILE: u64 = 1 << 20;

/// The filesystem the doctor reads.
#[derive(Clone, Debug)]
pub struct Host {
    pub root: PathBuf,
}

impl Host {
    /// An absolute path of the host, under the root.
    pub fn path(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    pub(super) fn is_real(&self) -> bool {
        self.root.canonicalize().is_ok_and(|r| r == Path::new("/"))
    }
}

/// The first [`MAX_FILE`] bytes of a small text file, or `None` if it cannot be read. Only a regular file is read:
/// under `--root` anything may be a FIFO (whose open would wait for a writer forever) or a link to a device; such a
/// file is left unread and named on standard error.
pub(crate) fn read_small(path: &Path) -> Option<String> {
    let input = match crate::host::inputs::open_input(path) {
        Ok(input) => input,
        Err(e @ crate::host::inputs::InputError::NotRegular { .. }) => {
            crate::output::messages::note(format_args!("doctor: left unread: {e}"));
            return None;
        }
        Err(_) => return None,
    };
    let mut s = String::new();
    input.file.take(MAX_FILE).read_to_string(&mut s).ok()?;
    Some(s)
}

pub(super) fn file_src(path: impl Into<String>, what: impl Into<String>) -> Source {
    Source::file(path.into(), None, None, what.into())
}

pub(super) fn environment_source(origin: &str) -> Source {
    if origin == "process" {
        file_src("/proc/self/environ", "environment of this backscope process")
    } else if let Some(cmd) = origin.strip_prefix("command:") {
        Source::Command { argv: cmd.split(' ').map(str::to_string).collect(), excerpt: "Environment=".into() }
    } else {
        file_src(origin, "Environment= lines")
    }
}
