//! The error a command ends with, and the exit status it maps to.

use std::fmt;
use std::io::Write;

use crate::target::TargetError;

/// What kind of failure ended a command, as far as the exit status is
/// concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The program to run does not exist (exit status 127, as a shell's).
    TargetNotFound,
    /// The program to run exists but cannot be run (126, as a shell's).
    TargetNotExecutable,
    /// The command line asks for something that cannot be done as asked
    /// (exit status 2, as clap's own refusals): [`usage`].
    Usage,
    /// Standard output was closed (`allocmux report x | head`): not an
    /// error, so status 0 and nothing on stderr.
    BrokenPipe,
    /// Anything else (1).
    Failed,
}

/// A command's failure: its kind and what was being done, with the cause.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    source: anyhow::Error,
}

impl Error {
    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The exit status the `allocmux` process ends with.
    pub fn exit_code(&self) -> i32 {
        match self.kind {
            ErrorKind::TargetNotFound => 127,
            ErrorKind::TargetNotExecutable => 126,
            ErrorKind::Usage => 2,
            ErrorKind::BrokenPipe => 0,
            ErrorKind::Failed => 1,
        }
    }
}

impl From<anyhow::Error> for Error {
    fn from(source: anyhow::Error) -> Error {
        let broken_pipe = source.chain().any(|c| {
            c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        });
        let kind = if broken_pipe {
            ErrorKind::BrokenPipe
        } else {
            match source.downcast_ref::<TargetError>() {
                Some(TargetError::NotFound(_)) => ErrorKind::TargetNotFound,
                Some(TargetError::NotExecutable(_) | TargetError::IsDirectory(_)) => {
                    ErrorKind::TargetNotExecutable
                }
                Some(TargetError::Empty) => ErrorKind::Usage,
                None if source.downcast_ref::<UsageError>().is_some() => ErrorKind::Usage,
                None => ErrorKind::Failed,
            }
        };
        Error { kind, source }
    }
}

/// A refusal of the command line itself, past what clap checks (a value
/// given twice, an empty command, an option that does not fit another):
/// exit status 2, as for clap's own refusals.
#[derive(Debug)]
pub struct UsageError(String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A [`UsageError`] saying `what`, ready for `return Err(...)`.
pub fn usage(what: impl fmt::Display) -> anyhow::Error {
    UsageError(what.to_string()).into()
}

/// The whole chain of causes on one line (a library's multi-line message
/// too), as `allocmux: ` then this is what stderr shows.
impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = format!("{:#}", self.source);
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        f.write_str(&lines.join(" "))
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.source.as_ref())
    }
}

/// Writes `allocmux: ` and `line` on stderr. A stderr that cannot take it
/// (closed, full) is no reason to fail or panic: the line is dropped, and
/// whatever the command ends with (a program's exit status above all)
/// stands.
pub fn say(line: impl fmt::Display) {
    let _ = writeln!(std::io::stderr(), "allocmux: {line}");
}

/// What a run command ends with once its program has run: the program's
/// exit status, whatever became of the report. A report that could not be
/// written is said on stderr if it can be (a closed stream, as in
/// `allocmux run -- prog 2>&1 | head`, is not worth a word).
pub fn after_run(status: i32, report: anyhow::Result<()>) -> i32 {
    if let Err(e) = report {
        let e = Error::from(e);
        if e.kind() != ErrorKind::BrokenPipe {
            say(format_args!("the program ran, but {e}"));
        }
    }
    status
}
