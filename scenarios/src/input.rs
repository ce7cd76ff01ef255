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
    read_regular(path, MAX_INPUT_BYTES, true)
}

/// As [`read_input`], at most `cap` bytes, and a symbolic link at `path` is refused rather than
/// followed: for the files a program keeps for itself (`up`'s discovery files), where a link
/// or a FIFO can only have been put there to mislead or to hang it.
///
/// # Errors
/// As [`read_input`]; a symbolic link is refused as one.
pub fn read_own_file(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    read_regular(path, cap, false)
}

fn read_regular(path: &Path, cap: u64, follow: bool) -> io::Result<Vec<u8>> {
    // Before opening: opening a device can do something (a tape rewinds), and a FIFO's open
    // waits for a writer.
    let meta = if follow {
        std::fs::metadata(path)?
    } else {
        std::fs::symlink_metadata(path)?
    };
    if meta.file_type().is_symlink() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "is a symbolic link; it is not followed",
        ));
    }
    regular(&meta)?;
    if meta.len() > cap {
        return Err(too_large(Some(meta.len()), cap));
    }
    let file = open(path, follow)?;
    // Again on what was opened, in case the path changed in between.
    let meta = file.metadata()?;
    regular(&meta)?;
    if meta.len() > cap {
        return Err(too_large(Some(meta.len()), cap));
    }
    read_capped(file, meta.len(), cap)
}

/// Creates (or truncates) the file at `path` for writing a report, a recording or a log, with
/// `mode` (before the umask) if it is new; with `append`, opens it to append instead of
/// truncating.
///
/// What is there already must be a regular file: a FIFO would hold `open()` until a reader
/// came (and with it the command, deaf to Ctrl-C), a device can act on being opened or written.
/// Both are refused before they are opened for long: the open does not wait (`O_NONBLOCK`), and
/// what was opened is checked again.
///
/// # Errors
/// The file cannot be created or opened; what is at `path` is not a regular file (`is a FIFO,
/// not a regular file; only regular files are written`). The message does not name the path.
pub fn create_output(path: &Path, mode: u32, append: bool) -> io::Result<std::fs::File> {
    check_output(path)?;
    let file = open_output(path, mode, append)?;
    regular_output(&file.metadata()?)?;
    if !append {
        // Truncated only now that it is known to be a regular file.
        file.set_len(0)?;
    }
    Ok(file)
}

/// Whether [`create_output`] would take `path`, without opening it: nothing is there, or a
/// regular file. For a command to refuse an output before it starts its work, not after.
///
/// # Errors
/// What is at `path` is not a regular file, or cannot be looked at.
pub fn check_output(path: &Path) -> io::Result<()> {
    match std::fs::metadata(path) {
        Ok(meta) => regular_output(&meta),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// [`create_output`] with `text` written whole: a report.
///
/// # Errors
/// As [`create_output`], or the write fails.
pub fn write_output(path: &Path, text: &[u8]) -> io::Result<()> {
    use io::Write;
    let mut file = create_output(path, 0o666, false)?;
    file.write_all(text)?;
    file.flush()
}

#[cfg(unix)]
fn open_output(path: &Path, mode: u32, append: bool) -> io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    let mut flags =
        OFlags::WRONLY | OFlags::CREATE | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    if append {
        flags |= OFlags::APPEND;
    }
    let fd = rustix::fs::open(path, flags, Mode::from_bits_truncate(mode))?;
    // Back to blocking writes: on a regular file the flag means nothing, but it is not kept.
    let kept = rustix::fs::fcntl_getfl(&fd)?;
    rustix::fs::fcntl_setfl(&fd, kept - OFlags::NONBLOCK)?;
    Ok(std::fs::File::from(fd))
}

#[cfg(not(unix))]
fn open_output(path: &Path, _mode: u32, append: bool) -> io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .append(append)
        .open(path)
}

fn regular_output(meta: &std::fs::Metadata) -> io::Result<()> {
    regular(meta).map_err(|_| {
        let kind = meta.file_type();
        let what = if kind.is_dir() {
            "a folder"
        } else {
            special_kind(&kind)
        };
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("is {what}, not a regular file; only regular files are written"),
        )
    })
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
/// A symbolic link at `path` is refused unless `follow`.
#[cfg(unix)]
fn open(path: &Path, follow: bool) -> io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    let mut flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    if !follow {
        flags |= OFlags::NOFOLLOW;
    }
    let fd = rustix::fs::open(path, flags, Mode::empty())?;
    Ok(std::fs::File::from(fd))
}

#[cfg(not(unix))]
fn open(path: &Path, _follow: bool) -> io::Result<std::fs::File> {
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
        Some(size) if size < 1024 * 1024 => {
            format!("is {size} bytes, more than the {limit} it may hold")
        }
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
    fn outputs_are_regular_files_and_a_fifo_or_device_is_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        write_output(&path, b"a long first text").unwrap();
        write_output(&path, b"short").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"short");
        let mut log = create_output(&path, 0o600, true).unwrap();
        io::Write::write_all(&mut log, b"+more").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"short+more");

        let fifo = dir.path().join("out.fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // No reader ever opens the FIFO: an open for writing that waited would hang the test.
        for (path, what) in [
            (fifo.as_path(), "a FIFO"),
            (Path::new("/dev/null"), "a device"),
        ] {
            for append in [false, true] {
                let e = create_output(path, 0o666, append).unwrap_err();
                assert_eq!(
                    e.to_string(),
                    format!("is {what}, not a regular file; only regular files are written")
                );
            }
        }
        let e = write_output(dir.path(), b"x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "is a folder, not a regular file; only regular files are written"
        );
    }

    #[cfg(unix)]
    #[test]
    fn an_own_file_is_bounded_and_no_link_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("i.json");
        std::fs::write(&path, "{}").unwrap();
        assert_eq!(read_own_file(&path, 2).unwrap(), b"{}");
        let e = read_own_file(&path, 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "is 2 bytes, more than the 1 bytes it may hold"
        );
        let link = dir.path().join("l.json");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let e = read_own_file(&link, 100).unwrap_err();
        assert_eq!(e.to_string(), "is a symbolic link; it is not followed");
        assert_eq!(read_input(&link).unwrap(), b"{}");
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
