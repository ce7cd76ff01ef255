//! How `deploy`, `trigger`, `advance` and `watch` find a running `up`: each `up` writes one file,
//! `<instance>.json`, with its URL and the control API's credentials, in a directory private to
//! the user: `$XDG_RUNTIME_DIR/triggers-lab/`, else `triggers-lab/` in the user's cache directory.
//!
//! The files hold secrets, so: the directory is created 0700 (and one of ours found looser is
//! tightened; one owned by someone else is refused), files are written 0600 through a new
//! temporary file renamed into place (atomic), and neither a symlinked directory nor a symlink
//! at a file's path is ever followed: both are refused. Each instance has its own file, so a
//! second `up` does not overwrite the first, and stopping one removes its file only.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};

/// What one `up` writes down.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Instance {
    /// Its name (`--instance`, else its pid).
    pub(crate) instance: String,
    pub(crate) pid: u32,
    /// The client URL services connect to.
    pub(crate) url: String,
    /// `nats-server binary (...)`, `docker (...)`, `external (...)`.
    pub(crate) backend: String,
    /// The control account's user and password, when the server has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) password: Option<String>,
    /// The control API's token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) token: Option<String>,
}

/// The directory the files live in (not created).
pub(crate) fn dir() -> Result<PathBuf> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    if let Some(runtime) = absolute("XDG_RUNTIME_DIR") {
        return Ok(runtime.join("triggers-lab"));
    }
    let cache = absolute("XDG_CACHE_HOME").or_else(|| {
        absolute("HOME").map(|home| {
            if cfg!(target_os = "macos") {
                home.join("Library/Caches")
            } else {
                home.join(".cache")
            }
        })
    });
    cache.map(|c| c.join("triggers-lab")).ok_or_else(|| {
        anyhow!(
            "nowhere private to write the discovery file: set XDG_RUNTIME_DIR (or HOME), or pass \
             --nats URL to the commands that talk to `up`"
        )
    })
}

/// `--instance NAME` as the command line reads it: a bad name is a usage error (exit 2).
pub(crate) fn instance_name(name: &str) -> Result<String, String> {
    check_name(name)
        .map(|()| name.to_owned())
        .map_err(|e| e.to_string())
}

/// An instance name is a file name: letters, digits, `-` and `_`.
pub(crate) fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        bail!("--instance {name:?}: use 1 to 64 letters, digits, '-' or '_'")
    }
}

/// The directory, created private if missing, refused if it is a symlink or someone else's.
fn ensure_dir() -> Result<PathBuf> {
    let dir = dir()?;
    match fs::symlink_metadata(&dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent() {
                fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create {}", parent.display()))?;
            }
            let mut builder = fs::DirBuilder::new();
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            match builder.create(&dir) {
                Ok(()) => {}
                // Another `up` made it in between: check it as any existing one.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot create {}", dir.display()));
                }
            }
            check_dir(&dir)?;
        }
        Err(e) => return Err(e).with_context(|| format!("cannot look at {}", dir.display())),
        Ok(_) => check_dir(&dir)?,
    }
    Ok(dir)
}

/// Refuses a symlink, a non-directory, or a directory of another user; tightens our own to 0700.
fn check_dir(dir: &Path) -> Result<()> {
    let meta =
        fs::symlink_metadata(dir).with_context(|| format!("cannot look at {}", dir.display()))?;
    if meta.file_type().is_symlink() {
        bail!(
            "refusing to use {}: it is a symbolic link, and the discovery files hold secrets; \
             remove it (triggers-lab creates the directory itself)",
            dir.display()
        );
    }
    if !meta.is_dir() {
        bail!("{} is not a directory; remove it", dir.display());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let me = rustix::process::getuid().as_raw();
        if meta.uid() != me {
            bail!(
                "refusing to use {}: it belongs to uid {}, not to you (uid {me}); remove it",
                dir.display(),
                meta.uid()
            );
        }
        if meta.mode() & 0o077 != 0 {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
                .with_context(|| format!("cannot make {} private (chmod 700)", dir.display()))?;
        }
    }
    Ok(())
}

/// The most a discovery file may hold: one is a few hundred bytes.
const MAX_FILE_BYTES: u64 = 64 * 1024;

/// One discovery file. Anything else found under its name (a symbolic link, a FIFO that would
/// hold the read forever, a file of hundreds of megabytes) is refused without being read.
fn read(path: &Path) -> Result<Instance> {
    let bytes = triggers_scenarios::read_own_file(path, MAX_FILE_BYTES)
        .with_context(|| format!("{} is ignored", path.display()))?;
    Ok(serde_json::from_slice(&bytes)?)
}

/// Whether process `pid` still runs.
pub(crate) fn alive(pid: u32) -> bool {
    natsbox::watchdog::process_alive(pid)
}

/// Where one `up` will write its file: checked before the server starts, so a refusal costs
/// nothing. Dropping it after [`Slot::write`] removes the file.
pub(crate) struct Slot {
    path: PathBuf,
    written: bool,
}

impl Slot {
    /// Checks the directory and the file's path for instance `name`.
    pub(crate) fn prepare(name: &str) -> Result<Slot> {
        check_name(name)?;
        let dir = ensure_dir()?;
        let path = dir.join(format!("{name}.json"));
        match fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot look at {}", path.display())),
            Ok(meta) if meta.file_type().is_symlink() => bail!(
                "refusing to write {}: a symbolic link is there, and the file would hold secrets; \
                 remove it",
                path.display()
            ),
            Ok(_) => {
                if let Ok(other) = read(&path)
                    && other.pid != std::process::id()
                    && alive(other.pid)
                {
                    bail!(
                        "a `triggers-lab up` named {name} is already running (pid {}, {}): stop it, \
                         or name this one with --instance",
                        other.pid,
                        other.url
                    );
                }
                // Left by an `up` that was killed: replaced below.
            }
        }
        Ok(Slot {
            path,
            written: false,
        })
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the file: 0600, through a new temporary file renamed into place.
    pub(crate) fn write(&mut self, instance: &Instance) -> Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let tmp = dir.join(format!(
            ".{}.{}.tmp",
            instance.instance,
            triggers_emulator::control::ControlToken::generate()
                .as_str()
                .get(..16)
                .unwrap_or_default()
        ));
        let mut options = OpenOptions::new();
        // create_new: never opens what is there, a symlink included.
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let text = serde_json::to_string_pretty(instance)?;
        let written = options.open(&tmp).and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            f.sync_all()
        });
        if let Err(e) = written.and_then(|()| fs::rename(&tmp, &self.path)) {
            let _ = fs::remove_file(&tmp);
            return Err(e).with_context(|| format!("cannot write {}", self.path.display()));
        }
        self.written = true;
        Ok(())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Only if it is still ours: a later `up` of the same name may have replaced a file we
        // could not remove in time.
        if self.written && read(&self.path).is_ok_and(|i| i.pid == std::process::id()) {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Every running instance, by name; files of instances that are gone are removed.
pub(crate) fn running() -> Result<Vec<Instance>> {
    let dir = dir()?;
    if !dir.exists() {
        return Ok(Vec::new());
    }
    check_dir(&dir)?;
    let mut found = Vec::new();
    for entry in fs::read_dir(&dir)?.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        match read(&path) {
            Ok(instance) if alive(instance.pid) => found.push(instance),
            Ok(_) => {
                let _ = fs::remove_file(&path);
            }
            Err(_) => {}
        }
    }
    found.sort_by(|a, b| a.instance.cmp(&b.instance));
    Ok(found)
}

/// Asks process `pid` to stop, as Ctrl-C would (SIGTERM).
pub(crate) fn terminate(pid: u32) -> Result<()> {
    #[cfg(unix)]
    {
        let raw = i32::try_from(pid).map_err(|_| anyhow!("pid {pid} is out of range"))?;
        let pid = rustix::process::Pid::from_raw(raw).ok_or_else(|| anyhow!("pid {raw} is 0"))?;
        rustix::process::kill_process(pid, rustix::process::Signal::TERM)
            .with_context(|| format!("cannot signal pid {}", pid.as_raw_nonzero()))?;
        Ok(())
    }
    #[cfg(not(unix))]
    {
        bail!("stopping pid {pid} needs a Unix system: stop it with Ctrl-C where it runs")
    }
}

/// Where a detached `up` named `name` writes its log (created private by the caller).
pub(crate) fn log_path(name: &str) -> Result<PathBuf> {
    check_name(name)?;
    Ok(ensure_dir()?.join(format!("{name}.log")))
}
