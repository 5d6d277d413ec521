//! What a resume would run, shown before it runs: arguments written as a POSIX shell would need them, and the
//! refusal a resume gives when its stored row (data anyone with write access to the store could have changed)
//! would start a program this command line does not name. Shared by `bisect --resume` and `sweep --resume`.

use std::fmt::Display;

use super::messages;

/// An argument as a POSIX shell would need it written: as it is when it is plain, else in single quotes.
pub fn shell_quoted(a: &str) -> String {
    let plain = !a.is_empty() && a.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}

/// A whole argument vector, each argument [`shell_quoted`], space-separated.
pub fn shell_line<S: AsRef<str>>(argv: &[S]) -> String {
    argv.iter().map(|a| shell_quoted(a.as_ref())).collect::<Vec<_>>().join(" ")
}

/// Show `intro`, then each `(what, value)` line of what would run (through the message escaper, so a stored
/// argument can neither drive the terminal nor forge a line), and return the refusal naming `retry`, the command
/// line that confirms. The caller returns the error, which exits 2.
pub fn refuse_unconfirmed<W: Display>(
    intro: impl Display,
    what_runs: &[(W, String)],
    retry: impl Display,
) -> anyhow::Error {
    messages::note(intro);
    for (what, value) in what_runs {
        messages::line(format_args!("  {what}: {value}"));
    }
    anyhow::anyhow!("refused to run a stored command without confirmation: check it, then `{retry}`")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quoted_argument_reads_back_as_itself_in_sh() {
        for arg in ["plain", "", "two words", "it's", "$(touch x)", "a\nb", "*", "--flag=v"] {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf %s {}", shell_quoted(arg)))
                .output()
                .unwrap();
            assert_eq!(String::from_utf8(out.stdout).unwrap(), arg);
        }
        assert_eq!(shell_line(&["a b", "c"]), "'a b' c");
    }
}
