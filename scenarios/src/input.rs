//! Reading the files users give: scenarios, flows, payloads, manifests, reports, recordings.
//! Every one goes through [`read_input`] (standard input through [`read_stdin`]), so that none
//! can wait forever on a FIFO, read a device until memory runs out, or take in a file of any
//! size: regular files only, of at most [`MAX_INPUT_BYTES`].

use std::io::{self, Read};
use std::path::Path;

use crate::error::{LoadError, utf8_text};

/// The most an input file (or standard input) may hold: 256 MiB. The largest flow release
/// accepts is a few MiB of YAML, so this refuses only what was never meant as an input (a disk
/// image, a log given by mistake), before it is read.
pub const MAX_INPUT_BYTES: u64 = 256 * 1024 * 1024;

/// The bytes of the file at `path` (a symbolic link is followed): a regular file of at most
/// [`MAX_INPUT_BYTES`].
///
/// A FIFO, a socket or a device is refused without being opened for long: opening a FIFO waits
/// for a writer, and `/dev/zero` never ends. The size is checked before reading, and the read
/// stops one byte past the limit, for files whose size says less than they hold.
///
/// # Errors
/// The file cannot be opened or read; it is not a regular file (`is a FIFO, not a regular
/// file`); it is larger than the limit (its size and the limit). The message does not name the
/// path: callers put it in front, `PATH: cannot read: MESSAGE`.
pub fn read_input(path: &Path) -> io::Result<Vec<u8>> {
    // Before opening: opening a device can do something (a tape rewinds), and a FIFO's open
    // waits for a writer.
    regular(&std::fs::metadata(path)?)?;
    let file = open(path)?;
    // Again on what was opened, in case the path changed in between.
    let meta = file.metadata()?;
    regular(&meta)?;
    if meta.len() > MAX_INPUT_BYTES {
        return Err(too_large(Some(meta.len()), MAX_INPUT_BYTES));
    }
    read_capped(file, meta.len(), MAX_INPUT_BYTES)
}

/// Standard input whole, of at most [`MAX_INPUT_BYTES`].
///
/// # Errors
/// It cannot be read, or holds more than the limit.
pub fn read_stdin() -> io::Result<Vec<u8>> {
    read_capped(io::stdin().lock(), 0, MAX_INPUT_BYTES)
}

/// A file users write (a scenario, a flow, payloads), read by [`read_input`], as UTF-8 text. A
/// file that cannot be read, or is not UTF-8, is an error naming the file and, for the latter,
/// the line and column of the first byte that is not.
///
/// # Errors
/// As said.
pub fn read_text_file(path: &Path) -> Result<String, LoadError> {
    let name = path.display().to_string();
    let bytes =
        read_input(path).map_err(|e| LoadError::file(&name, format!("cannot read: {e}")))?;
    utf8_text(&name, bytes)
}

/// Opens for reading without waiting: `O_NONBLOCK` lets a FIFO put there after the check open
/// at once, to be refused by the second check; on a regular file it changes nothing.
#[cfg(unix)]
fn open(path: &Path) -> io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(std::fs::File::from(fd))
}

#[cfg(not(unix))]
fn open(path: &Path) -> io::Result<std::fs::File> {
    std::fs::File::open(path)
}

/// Refuses what is not a regular file, saying what it is.
fn regular(meta: &std::fs::Metadata) -> io::Result<()> {
    let kind = meta.file_type();
    if kind.is_file() {
        return Ok(());
    }
    let what = if kind.is_dir() {
        "a folder"
    } else {
        special_kind(&kind)
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("is {what}, not a regular file; only regular files are read"),
    ))
}

#[cfg(unix)]
fn special_kind(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

#[cfg(not(unix))]
fn special_kind(_: &std::fs::FileType) -> &'static str {
    "not a file"
}

/// All of `reader`, up to `cap` bytes; `size` is what it is expected to hold (0 when unknown).
fn read_capped(reader: impl Read, size: u64, cap: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(usize::try_from(size.min(cap)).unwrap_or(0));
    // One byte past the cap: reaching it tells "more than the cap" from "exactly the cap".
    reader.take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(too_large(None, cap));
    }
    Ok(bytes)
}

/// The refusal of an input over `cap`; `size` when known (else it is "more than").
fn too_large(size: Option<u64>, cap: u64) -> io::Error {
    let limit = mib(cap);
    let message = match size {
        Some(size) => format!(
            "is {} ({size} bytes), more than the {limit} an input may hold",
            mib(size)
        ),
        None => format!("holds more than the {limit} an input may hold"),
    };
    io::Error::new(io::ErrorKind::FileTooLarge, message)
}

/// `n` bytes in MiB, rounded up (so that just over the cap never reads as the cap); a cap
/// under a MiB in bytes.
fn mib(n: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if n < MIB {
        format!("{n} bytes")
    } else {
        format!("{} MiB", n.div_ceil(MIB))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.yaml");
        std::fs::write(&path, "id: f\n").unwrap();
        assert_eq!(read_input(&path).unwrap(), b"id: f\n");
        assert_eq!(read_text_file(&path).unwrap(), "id: f\n");
    }

    #[test]
    fn a_folder_is_refused_as_one() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_text_file(dir.path()).unwrap_err().to_string();
        assert!(
            e.ends_with(
                ": cannot read: is a folder, not a regular file; only regular files are read"
            ),
            "{e}"
        );
    }

    #[test]
    fn a_file_over_the_limit_is_refused_with_its_size_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.yaml");
        // Sparse: its size says 1 MiB over the limit without the disk holding it.
        std::fs::File::create(&path)
            .unwrap()
            .set_len(MAX_INPUT_BYTES + 1024 * 1024)
            .unwrap();
        let e = read_text_file(&path).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{}: cannot read: is 257 MiB ({} bytes), more than the 256 MiB an input may hold",
                path.display(),
                MAX_INPUT_BYTES + 1024 * 1024
            )
        );
    }

    #[test]
    fn a_reader_holding_more_than_it_said_is_cut_at_the_limit() {
        // A file whose size says 0 (as those of /proc do) and that never ends.
        let e = read_capped(io::repeat(b'-'), 0, 4).unwrap_err();
        assert_eq!(
            e.to_string(),
            "holds more than the 4 bytes an input may hold"
        );
        assert_eq!(read_capped(&b"abcd"[..], 0, 4).unwrap(), b"abcd");
    }

    #[cfg(unix)]
    #[test]
    fn devices_and_fifos_are_refused_without_reading() {
        for (path, what) in [("/dev/zero", "a device"), ("/dev/null", "a device")] {
            let e = read_text_file(Path::new(path)).unwrap_err().to_string();
            assert_eq!(
                e,
                format!(
                    "{path}: cannot read: is {what}, not a regular file; only regular files are read"
                )
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f.fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // No writer ever opens it: reading it would wait forever.
        let e = read_text_file(&fifo).unwrap_err().to_string();
        assert!(
            e.ends_with(
                ": cannot read: is a FIFO, not a regular file; only regular files are read"
            ),
            "{e}"
        );
    }
}
