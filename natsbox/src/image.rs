//! The local image without a registry: `FROM scratch` around the pinned binary, built through the
//! Docker API, and the memory of a failed pull.
//!
//! A machine with Docker and no registry has no nats image to run. Pulling fails (after a wait),
//! and would fail again for every scenario; building needs only the binary the pinned backend
//! caches anyway. The image is built for the engine's architecture (a Docker Desktop on an ARM
//! Mac runs linux-aarch64 containers), tagged [`LOCAL_IMAGE`], and labelled with the version.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use testcontainers::bollard::Docker;
use testcontainers::bollard::query_parameters::BuildImageOptionsBuilder;
use tokio::time::timeout;

use crate::config::LOCAL_IMAGE;
use crate::pinned::{Pin, PinnedSettings};

/// Labels the image with the nats-server version inside it, for `doctor`.
pub(crate) const VERSION_LABEL: &str = "org.triggers-lab.nats-server.version";
/// A build of two files takes seconds; a stuck engine must not hold a test run.
const BUILD_TIMEOUT: Duration = Duration::from_secs(120);

/// The Dockerfile of the image; the same as `natsbox/docker/Dockerfile` builds.
const DOCKERFILE: &str = "FROM scratch\n\
COPY nats-server /nats-server\n\
EXPOSE 4222 8222\n\
WORKDIR /data\n\
ENTRYPOINT [\"/nats-server\"]\n\
CMD [\"-js\", \"-m\", \"8222\", \"--store_dir\", \"/data\"]\n";

/// Pulls that failed in this process, by image: a registry that is unreachable now will be so
/// for the next scenario too, and each try costs the pull timeout.
static FAILED_PULLS: Mutex<Option<HashMap<String, String>>> = Mutex::new(None);
/// One build at a time in this process: parallel scenarios would each build the same image.
static BUILDING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Why `image` could not be pulled earlier in this process, if it could not.
pub(crate) fn failed_pull(image: &str) -> Option<String> {
    FAILED_PULLS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .and_then(|map| map.get(image).cloned())
}

/// Remembers that pulling `image` failed, and says so (once per image and process).
pub(crate) fn remember_failed_pull(image: &str, reason: &str) {
    let mut guard = FAILED_PULLS.lock().unwrap_or_else(PoisonError::into_inner);
    let map = guard.get_or_insert_with(HashMap::new);
    if map.insert(image.to_string(), reason.to_string()).is_none() {
        let line = format!(
            "pulling {image} failed ({reason}); not trying again in this process (no registry?)"
        );
        tracing::warn!("{line}");
        eprintln!("{line}");
    }
}

/// The engine's architecture in Rust's words (`x86_64`, `aarch64`), from `docker version`.
pub(crate) async fn engine_arch(docker: &Docker) -> Result<String, String> {
    let version = docker
        .version()
        .await
        .map_err(|e| format!("docker version: {e}"))?;
    let arch = version.arch.unwrap_or_default();
    Ok(match arch.as_str() {
        "amd64" => "x86_64".to_string(),
        "arm64" | "aarch64" => "aarch64".to_string(),
        other => other.to_string(),
    })
}

/// The pin of the binary that goes into the image: linux, the engine's architecture.
pub(crate) async fn image_pin(docker: &Docker, settings: &PinnedSettings) -> Result<Pin, String> {
    let arch = engine_arch(docker).await?;
    settings.pin_for("linux", &arch).map_err(|e| e.to_string())
}

/// Whether `image` is ours to build (a tag of `triggers-lab/nats-server`) rather than to pull.
pub(crate) fn is_ours(image: &str) -> bool {
    image
        .strip_prefix(LOCAL_IMAGE.split(':').next().unwrap_or(LOCAL_IMAGE))
        .is_some_and(|rest| rest.starts_with(':'))
}

/// Builds `tag` (a tag of ours, [`LOCAL_IMAGE`] by default) from the pinned binary (fetched if
/// need be and allowed), unless another task of this process built it meanwhile. Returns a reason
/// a user can act on when it cannot.
pub(crate) async fn build_local(
    docker: &Docker,
    settings: &PinnedSettings,
    tag: &str,
) -> Result<(), String> {
    let _one_at_a_time = BUILDING.lock().await;
    if docker.inspect_image(tag).await.is_ok() {
        return Ok(());
    }
    let pin = image_pin(docker, settings).await?;
    let fetch_settings = settings.clone();
    let fetch_pin = pin.clone();
    let binary = tokio::task::spawn_blocking(move || {
        let say = |line: &str| {
            tracing::info!("{line}");
            eprintln!("{line}");
        };
        crate::pinned::ensure(&fetch_settings, &fetch_pin, &say)
    })
    .await
    .map_err(|e| format!("the fetch task failed: {e}"))?
    .map_err(|e| e.to_string())?;
    let line = format!(
        "building the Docker image {tag} (FROM scratch, nats-server {}) from {}",
        pin.version,
        binary.path.display()
    );
    tracing::info!("{line}");
    eprintln!("{line}");
    let path = binary.path.clone();
    let sha256 = pin.sha256.clone();
    let context = tokio::task::spawn_blocking(move || context_tar(&path, &sha256))
        .await
        .map_err(|e| format!("the build-context task failed: {e}"))?
        .map_err(|e| format!("could not pack the build context: {e}"))?;
    let labels = HashMap::from([(VERSION_LABEL, pin.version.as_str())]);
    let options = BuildImageOptionsBuilder::new()
        .t(tag)
        .rm(true)
        .forcerm(true)
        .labels(&labels)
        .build();
    let build = async {
        let mut stream = docker.build_image(
            options,
            None,
            Some(testcontainers::bollard::body_full(context.into())),
        );
        while let Some(step) = stream.next().await {
            let step = step.map_err(|e| format!("the engine refused the build: {e}"))?;
            if let Some(detail) = step.error_detail {
                return Err(format!(
                    "the build failed: {}",
                    detail.message.unwrap_or_default()
                ));
            }
        }
        Ok(())
    };
    match timeout(BUILD_TIMEOUT, build).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err(format!("the build did not finish within {BUILD_TIMEOUT:?}")),
    }
    docker
        .inspect_image(tag)
        .await
        .map(|_| ())
        .map_err(|e| format!("the build ended but {tag} is not there: {e}"))
}

/// A tar of the Dockerfile and the binary (mode 0755), whose bytes must have the SHA-256 `sha256`.
fn context_tar(binary: &std::path::Path, sha256: &str) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(DOCKERFILE.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    builder.append_data(&mut header, "Dockerfile", DOCKERFILE.as_bytes())?;
    let bytes = std::fs::read(binary)?;
    let actual = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
    if actual != sha256 {
        return Err(std::io::Error::other(format!(
            "{} has SHA-256 {actual}, not the pinned {sha256}",
            binary.display()
        )));
    }
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(0o755);
    header.set_cksum();
    builder.append_data(&mut header, "nats-server", bytes.as_slice())?;
    builder.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_own_repository_is_built() {
        assert!(is_ours(LOCAL_IMAGE));
        assert!(is_ours("triggers-lab/nats-server:2.15.1"));
        assert!(!is_ours("triggers-lab/nats-serverx:1"));
        assert!(!is_ours("nats:latest"));
    }

    #[test]
    fn a_failed_pull_is_remembered() {
        assert_eq!(failed_pull("example.invalid/nats:1"), None);
        remember_failed_pull("example.invalid/nats:1", "no registry");
        assert_eq!(
            failed_pull("example.invalid/nats:1").as_deref(),
            Some("no registry")
        );
    }

    #[test]
    fn the_context_holds_the_dockerfile_and_an_executable_binary() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("nats-server");
        std::fs::write(&binary, b"ELF").unwrap();
        let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"ELF"));
        assert!(context_tar(&binary, &"0".repeat(64)).is_err());
        let tar = context_tar(&binary, &sha).unwrap();
        let mut archive = tar::Archive::new(tar.as_slice());
        let entries: Vec<(String, u32)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.path().unwrap().to_string_lossy().into_owned(),
                    e.header().mode().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            entries,
            vec![("Dockerfile".into(), 0o644), ("nats-server".into(), 0o755)]
        );
    }
}
