//! Which nats-server `run`, `demo` and `up` use, decided here rather than left to the
//! environment, and said out loud.
//!
//! Two rules the library's own `Backend::Auto` does not follow, because a command line has a
//! user to answer to: a local `nats-server` binary comes before Docker (it starts in a fraction
//! of the time: 13 s against 23 s for the shipped scenarios), and an exported
//! `TRIGGERS_NATS_URL` is never used unless asked for with `--nats` (it is what `up` tells
//! people to export; `run` on `up`'s server would put two emulators on one server).

use std::path::PathBuf;

use clap::ValueEnum;
use natsbox::survey::Survey;
use natsbox::{ENV_BACKEND, ENV_SERVER_BIN, ENV_URL};
use triggers_emulator::{Backend, NatsConfig};

/// `--backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum BackendArg {
    /// A nats-server binary if there is one (TRIGGERS_NATS_SERVER_BIN, else PATH), else Docker.
    Auto,
    /// Docker (testcontainers), the official image or triggers-lab/nats-server:local.
    Docker,
    /// A nats-server binary on PATH (or TRIGGERS_NATS_SERVER_BIN).
    Binary,
}

/// The decision: the configuration, and a line saying what was chosen and why.
pub(crate) struct Choice {
    pub(crate) config: NatsConfig,
    pub(crate) said: String,
    /// A note for the user about something in the environment that was not used.
    pub(crate) note: Option<String>,
    /// A local nats-server binary was found and chosen: it is there, no need to look further.
    pub(crate) local_binary: bool,
}

impl Choice {
    /// Whether any backend this choice allows can give a server; the survey that says why not
    /// (what was tried, what to do), once, when none can. A chosen local binary or a given URL
    /// is not surveyed (the first is there; the second is tried when connecting).
    pub(crate) async fn nothing_works(&self) -> Option<String> {
        if self.config.backend == Backend::External || self.local_binary {
            return None;
        }
        match natsbox::survey::survey(&self.config).await {
            Ok(found) if found.works() => None,
            Ok(mut found) => {
                external_by_flag(&mut found);
                Some(found.to_string())
            }
            Err(e) => Some(e.to_string()),
        }
    }
}

/// The one rule for a server someone else runs, as `doctor` and a failed start say it: `run`,
/// `demo` and `up` take it from `--nats URL` only; an exported `TRIGGERS_NATS_URL` is what
/// services and the commands that drive an `up` read, never where those three start.
pub(crate) fn external_by_flag(found: &mut Survey) {
    let Some(offer) = found.offers.iter_mut().find(|o| o.name == "external") else {
        return;
    };
    offer.ready = false;
    match var(ENV_URL) {
        Some(url) => {
            offer.detail = format!(
                "{ENV_URL} is set ({url}): services and the commands that drive an `up` use it; \
                 `run`, `demo` and `up` start a server of their own"
            );
            offer.enable = Some(format!("pass --nats {url} to run on that server instead"));
        }
        None => {
            offer.detail = "no --nats URL given".into();
            offer.enable =
                Some("pass --nats nats://host:4222 to use a server you run (with -js)".into());
        }
    }
}

/// A non-empty environment variable.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The nats-server binary `--backend auto` would use.
fn local_binary() -> Option<PathBuf> {
    if let Some(p) = var(ENV_SERVER_BIN) {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("nats-server"))
        .find(|candidate| candidate.is_file())
}

/// Decides for `backend` and an explicit `--nats URL`; `who` names the command in messages.
pub(crate) fn choose(backend: BackendArg, url: Option<&str>, who: &str) -> Choice {
    let mut config = NatsConfig::default();
    let note = match (url, var(ENV_URL)) {
        (None, Some(env_url)) => Some(format!(
            "{ENV_URL} is set ({env_url}{}), but `{who}` starts a nats-server of its own; pass \
             --nats {env_url} to use that server instead",
            if crate::discovery::running()
                .unwrap_or_default()
                .iter()
                .any(|i| i.url == env_url)
            {
                ": a running `triggers-lab up`'s server"
            } else {
                ""
            }
        )),
        _ => None,
    };
    if let Some(url) = url {
        config.backend = Backend::External;
        config.url = Some(url.to_owned());
        return Choice {
            config,
            said: format!("nats-server: the one at {url} (--nats)"),
            note,
            local_binary: false,
        };
    }
    let mut local = false;
    let (backend, said) = match backend {
        BackendArg::Docker => (Backend::Docker, "Docker (--backend docker)".to_owned()),
        BackendArg::Binary => (
            Backend::Binary,
            match local_binary() {
                Some(p) => {
                    local = true;
                    format!("the binary {} (--backend binary)", p.display())
                }
                None => "a nats-server binary (--backend binary)".to_owned(),
            },
        ),
        BackendArg::Auto => match var(ENV_BACKEND).map(|v| v.parse::<Backend>()) {
            Some(Ok(Backend::External)) => (
                Backend::External,
                format!("the server {ENV_URL} names ({ENV_BACKEND}=url)"),
            ),
            Some(Ok(b @ (Backend::Docker | Backend::Binary))) => {
                (b, format!("{b} ({ENV_BACKEND}={b})"))
            }
            // An unknown value: the library refuses it with a message naming the variable.
            Some(Err(_)) => (Backend::Auto, format!("as {ENV_BACKEND} says")),
            _ => match local_binary().inspect(|_| local = true) {
                Some(p) => (
                    Backend::Binary,
                    format!(
                        "the binary {} (--backend auto takes a local binary first; \
                         --backend docker for Docker)",
                        p.display()
                    ),
                ),
                // No local binary: the pinned nats-server (fetched once, cached), else Docker;
                // never the exported URL (the note says why).
                None => (
                    Backend::Auto,
                    "no nats-server on PATH (nor TRIGGERS_NATS_SERVER_BIN): the pinned \
                     nats-server (fetched once and cached; TRIGGERS_NATS_OFFLINE=1 to forbid), \
                     else Docker (`triggers-lab doctor` says which)"
                        .to_owned(),
                ),
            },
        },
    };
    if backend == Backend::External {
        config.url = var(ENV_URL);
    } else {
        config.ignore_env_url = true;
    }
    config.backend = backend;
    Choice {
        config,
        said: format!("nats-server: {said}"),
        note: if backend == Backend::External {
            None
        } else {
            note
        },
        local_binary: local,
    }
}
