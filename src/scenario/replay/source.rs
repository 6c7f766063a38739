//! Where a replay reads its trace from, twice: a regular file, or standard input (`-`) spooled
//! to an unnamed temporary file on its first read.
//!
//! Kernel counterpart: none.
//!
//! What it does: a file is read twice and must not change in between (its length and
//! modification time, [`Stamp`]); a pipe, a device or a tracefs file is refused, as it cannot be
//! read twice and may never end. Standard input is the exception a pipeline needs
//! (`trace-cmd report | dmasim replay -`): its first read copies every byte it consumes into a
//! spool, and every later read (the run's, and each variant's of a comparison) reads the spool.
//! The first read is [`crate::trace::read`], bounded by line, so the spool holds no more than
//! it read: input without a newline in its first MiB (`/dev/zero`) stops it there.
//!
//! Invariants: standard input is read once per process; every read after the first reads the
//! bytes the first read and no more; the spool has no name, so nothing else can change it and
//! nothing is left behind.

use crate::input::InputError;
use std::io::{BufRead, BufReader, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// How a trace read from standard input is named in reports and messages.
pub const STDIN_NAME: &str = "<stdin>";

/// Read buffer of every trace read.
const BUFFER: usize = 1 << 16;

/// Standard input as the first read spooled it: the spool and how many bytes it holds.
static SPOOL: Mutex<Option<(Arc<std::fs::File>, u64)>> = Mutex::new(None);

/// What tells whether a trace changed between its two reads: its length and modification
/// time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub bytes: u64,
    modified: Option<std::time::SystemTime>,
}

/// Where a trace is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    Stdin,
}

/// An open trace.
pub enum Reader {
    File(BufReader<std::fs::File>),
    /// Standard input, each byte read also written to the spool.
    Tee(Tee),
    Spool(BufReader<std::io::Take<std::fs::File>>),
}

impl Source {
    /// The trace a scenario names (`-`: standard input), relative to its directory.
    pub fn of(dir: &Path, trace: &str) -> Source {
        if trace == "-" {
            Source::Stdin
        } else {
            Source::File(dir.join(trace))
        }
    }

    /// The trace as messages name it.
    pub fn shown(&self) -> String {
        match self {
            Source::File(p) => p.display().to_string(),
            Source::Stdin => STDIN_NAME.to_string(),
        }
    }

    /// Open the trace for its first read, with its stamp as opened. A file is only a regular
    /// one of some size: a pipe or a device (`/dev/zero`) cannot be read twice and may never
    /// end; a file of size 0 is empty or of tracefs or procfs (whose size is not known, whose
    /// reads may differ, and whose `trace_pipe` never ends).
    pub fn open(&self) -> std::io::Result<(Reader, Stamp)> {
        let path = match self {
            Source::Stdin => return open_stdin(),
            Source::File(p) => p,
        };
        let f = std::fs::File::open(path)?;
        let meta = f.metadata()?;
        if !meta.is_file() {
            return Err(std::io::Error::other(
                "not a regular file: a trace is read twice (its devices, then its calls), so save it to a file first, or pipe it to `dmasim replay -`",
            ));
        }
        if meta.len() == 0 {
            return Err(std::io::Error::other(
                "empty, or of tracefs or procfs (which give no size): save the trace to a file first",
            ));
        }
        let stamp = Stamp {
            bytes: meta.len(),
            modified: meta.modified().ok(),
        };
        Ok((Reader::File(BufReader::with_capacity(BUFFER, f)), stamp))
    }

    /// The first read is over, having read `bytes` bytes through `r`: the stamp a later read
    /// is held to. A file must be as it was opened; standard input's spool is kept.
    pub fn first_read_done(
        &self,
        r: Reader,
        opened: Stamp,
        bytes: u64,
    ) -> Result<Stamp, InputError> {
        let stamp = Stamp { bytes, ..opened };
        if let Reader::Tee(t) = r {
            t.keep(bytes)
                .map_err(|e| InputError::new(STDIN_NAME, format!("cannot spool the trace: {e}")))?;
        }
        self.unchanged(stamp)?;
        Ok(stamp)
    }

    /// Open the trace again, for the bytes its first read took (`was`), refused if it changed.
    pub fn reopen(&self, was: Stamp) -> Result<impl BufRead, InputError> {
        self.unchanged(was)?;
        let again = |e: std::io::Error| {
            InputError::new(&self.shown(), format!("cannot read the trace again: {e}"))
        };
        let (r, _) = self.open().map_err(again)?;
        Ok(BufReader::with_capacity(BUFFER, r).take(was.bytes))
    }

    /// An error unless the trace is still as `was` says: a file that grew or was rewritten
    /// since the first read would replay calls the first read did not pair. A spool cannot
    /// change.
    pub fn unchanged(&self, was: Stamp) -> Result<(), InputError> {
        let Source::File(path) = self else {
            return Ok(());
        };
        let shown = self.shown();
        let now = std::fs::metadata(path).map(|m| Stamp {
            bytes: m.len(),
            modified: m.modified().ok(),
        });
        match now {
            Ok(now) if now == was => Ok(()),
            Ok(now) => Err(InputError::new(
                &shown,
                format!(
                    "the trace changed while it was read ({} bytes, now {}): replay it once it is whole",
                    was.bytes, now.bytes
                ),
            )),
            Err(e) => Err(InputError::new(
                &shown,
                format!("cannot read the trace again: {e}"),
            )),
        }
    }
}

/// Standard input: its spool when an earlier read made one, else standard input itself, teed
/// into a new spool.
fn open_stdin() -> std::io::Result<(Reader, Stamp)> {
    let spool = SPOOL
        .lock()
        .map_err(|_| std::io::Error::other("the spool's lock"))?;
    if let Some((file, bytes)) = spool.as_ref() {
        let mut f = file.try_clone()?;
        f.rewind()?;
        let stamp = Stamp {
            bytes: *bytes,
            modified: None,
        };
        let r = BufReader::with_capacity(BUFFER, f.take(*bytes));
        return Ok((Reader::Spool(r), stamp));
    }
    let tee = Tee {
        input: BufReader::with_capacity(BUFFER, std::io::stdin()),
        spool: unnamed_file()?,
        pending: Vec::with_capacity(BUFFER),
        error: None,
    };
    let stamp = Stamp {
        bytes: 0,
        modified: None,
    };
    Ok((Reader::Tee(tee), stamp))
}

/// A new file in the temporary directory that no name reaches once it is open (on Unix; where
/// an open file cannot be removed it stays until removed by hand).
fn unnamed_file() -> std::io::Result<std::fs::File> {
    let dir = std::env::temp_dir();
    for n in 0..100u32 {
        let path = dir.join(format!("dmasim-stdin-{}-{n}", std::process::id()));
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(f) => {
                let _ = std::fs::remove_file(&path);
                return Ok(f);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(
        "no free name for a spool in the temporary directory",
    ))
}

/// Standard input, every byte consumed also written to the spool (in blocks).
pub struct Tee {
    input: BufReader<std::io::Stdin>,
    spool: std::fs::File,
    pending: Vec<u8>,
    /// The first write that failed: the read goes on, and keeping the spool reports it.
    error: Option<std::io::Error>,
}

impl Tee {
    fn flush_pending(&mut self) {
        if self.error.is_none()
            && let Err(e) = self.spool.write_all(&self.pending)
        {
            self.error = Some(e);
        }
        self.pending.clear();
    }

    /// The spool, `bytes` long, is every later read's.
    fn keep(mut self, bytes: u64) -> std::io::Result<()> {
        self.flush_pending();
        if let Some(e) = self.error {
            return Err(e);
        }
        let mut spool = SPOOL
            .lock()
            .map_err(|_| std::io::Error::other("the spool's lock"))?;
        *spool = Some((Arc::new(self.spool), bytes));
        Ok(())
    }
}

impl Read for Tee {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = {
            let have = self.fill_buf()?;
            let n = have.len().min(buf.len());
            buf[..n].copy_from_slice(&have[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for Tee {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.input.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        // The bytes just handed out are still the buffer's: filling it again reads nothing.
        if let Ok(b) = self.input.fill_buf() {
            let n = amt.min(b.len());
            self.pending.extend_from_slice(&b[..n]);
        }
        self.input.consume(amt);
        if self.pending.len() >= BUFFER {
            self.flush_pending();
        }
    }
}

impl Read for Reader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Reader::File(r) => r.read(buf),
            Reader::Tee(r) => r.read(buf),
            Reader::Spool(r) => r.read(buf),
        }
    }
}

impl BufRead for Reader {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        match self {
            Reader::File(r) => r.fill_buf(),
            Reader::Tee(r) => r.fill_buf(),
            Reader::Spool(r) => r.fill_buf(),
        }
    }

    fn consume(&mut self, amt: usize) {
        match self {
            Reader::File(r) => r.consume(amt),
            Reader::Tee(r) => r.consume(amt),
            Reader::Spool(r) => r.consume(amt),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dash_is_standard_input_and_anything_else_a_file() {
        let dir = Path::new("traces");
        assert_eq!(Source::of(dir, "-"), Source::Stdin);
        assert_eq!(Source::of(dir, "-").shown(), STDIN_NAME);
        assert_eq!(
            Source::of(dir, "a.txt"),
            Source::File(PathBuf::from("traces/a.txt"))
        );
    }

    #[test]
    fn the_spool_has_no_name_and_reads_back_what_was_written() {
        let mut f = unnamed_file().unwrap();
        f.write_all(b"line one\nline two\n").unwrap();
        f.rewind().unwrap();
        let mut back = String::new();
        f.take(9).read_to_string(&mut back).unwrap();
        assert_eq!(back, "line one\n");
        let left = std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .filter_map(Result::ok)
            .any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("dmasim-stdin-{}-", std::process::id()))
            });
        assert!(!left, "the spool's name is gone once it is open");
    }
}
