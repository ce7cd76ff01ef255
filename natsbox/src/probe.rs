//! Readiness: a server counts as up when its monitoring port answers `GET /healthz` with 200 and a
//! real client can connect, flush and see JetStream.
//!
//! A log line is not enough: in a container "Server is ready" is printed seconds before the
//! published port accepts connections, and docker-proxy accepts TCP before the server behind it
//! does. `/healthz` answers 200 only once JetStream is up.

use std::time::Duration;

use crate::error::NatsError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, timeout};

/// One attempt may not eat the whole budget: a half-open connection must not stall the loop.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// Short enough to add little to a binary's ~100 ms start, long enough not to spin.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// `/healthz` answers a few dozen bytes; anything larger is not nats-server.
const MAX_RESPONSE_BYTES: u64 = 64 * 1024;

/// A port on 127.0.0.1 that nothing listens on right now.
///
/// Another process may take it before the server binds it; callers retry on "address in use".
#[cfg(test)]
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?
        .local_addr()?
        .port())
}

/// Two distinct free ports, for the client and the monitoring listener.
pub(crate) fn free_port_pair() -> std::io::Result<(u16, u16)> {
    // Both listeners are held until both ports are known, so the kernel cannot hand out one twice.
    let a = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    let b = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    Ok((a.local_addr()?.port(), b.local_addr()?.port()))
}

/// Port races (another process binding a port we found free before the server binds it) are
/// rare; three tries are plenty.
pub(crate) const PORT_ATTEMPTS: usize = 3;

/// How one start on free ports ended, when it did not start.
pub(crate) enum PortAttempt<E, S = ()> {
    /// It lost a port to another process between finding it free and binding it: other ports
    /// may do. What the next attempt starts from comes back with it.
    LostRace(E, S),
    /// Anything else: other ports would not help.
    Failed(E),
}

/// The one port-retry loop of every backend (a binary, a container, a cluster): runs `start`
/// up to `attempts` times while it loses port races, each attempt given what the one before
/// handed back (`first` for the first), and returns its first success, its first other
/// failure, or the last lost race.
pub(crate) async fn on_free_ports<S, T, E, Fut>(
    what: &str,
    attempts: usize,
    first: S,
    mut start: impl FnMut(S) -> Fut,
) -> Result<T, E>
where
    E: std::fmt::Display,
    Fut: Future<Output = Result<T, PortAttempt<E, S>>>,
{
    let mut next = first;
    let mut attempt = 1;
    loop {
        match start(next).await {
            Ok(started) => return Ok(started),
            Err(PortAttempt::LostRace(e, state)) if attempt < attempts => {
                tracing::debug!(%e, "{what} lost a port race; retrying on other ports");
                next = state;
                attempt += 1;
            }
            Err(PortAttempt::LostRace(e, _) | PortAttempt::Failed(e)) => return Err(e),
        }
    }
}

/// `n` distinct free ports, all held until all are known.
pub(crate) fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| std::net::TcpListener::bind(("127.0.0.1", 0)))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}

/// The client and monitoring ports for a server: `fixed` (if free) and a free one, else two
/// free ones.
pub(crate) fn ports(fixed: Option<u16>) -> Result<(u16, u16), NatsError> {
    let io = |source| NatsError::Io {
        action: "find free ports on 127.0.0.1".into(),
        source,
    };
    let Some(port) = fixed else {
        return free_port_pair().map_err(io);
    };
    // Held while the monitoring port is picked, so that it cannot be the same one.
    let _held =
        std::net::TcpListener::bind(("127.0.0.1", port)).map_err(|source| NatsError::Io {
            action: format!(
                "listen on 127.0.0.1:{port} (is another nats-server, or `triggers-lab up`, on it?)"
            ),
            source,
        })?;
    let monitor = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(io)?;
    Ok((port, monitor.local_addr().map_err(io)?.port()))
}

/// `GET /healthz` over plain HTTP/1.0; `Ok` on status 200.
pub(crate) async fn healthz(monitor_url: &str) -> Result<(), String> {
    let response = get(monitor_url, "/healthz").await?;
    let status_line = response.lines().next().unwrap_or("");
    match status_line.split_whitespace().nth(1) {
        Some("200") => Ok(()),
        Some(_) => {
            let body = response.split("\r\n\r\n").nth(1).unwrap_or("").trim();
            Err(format!(
                "GET {monitor_url}/healthz answered {status_line:?} {body}"
            ))
        }
        None => Err(format!(
            "GET {monitor_url}/healthz got no HTTP answer (connection closed)"
        )),
    }
}

/// `GET path` over plain HTTP/1.0: the whole response (status line, headers, body), at most
/// 64 KiB of it.
pub(crate) async fn get(monitor_url: &str, path: &str) -> Result<String, String> {
    let authority = authority(monitor_url)?;
    let mut stream = TcpStream::connect(&authority)
        .await
        .map_err(|e| format!("connect to {authority}: {e}"))?;
    // HTTP/1.0 so the server closes the connection after answering and read_to_end terminates.
    let request = format!("GET {path} HTTP/1.0\r\nHost: {authority}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("send GET {path} to {authority}: {e}"))?;
    let mut response = Vec::new();
    stream
        .take(MAX_RESPONSE_BYTES)
        .read_to_end(&mut response)
        .await
        .map_err(|e| format!("read {path} from {authority}: {e}"))?;
    Ok(String::from_utf8_lossy(&response).into_owned())
}

/// `host:port` of an `http://` URL, for a raw TCP connection.
fn authority(url: &str) -> Result<String, String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        format!("monitoring URL {url:?} must start with http:// (https is not supported here)")
    })?;
    let authority = rest.split('/').next().unwrap_or("");
    if authority.is_empty() {
        return Err(format!("monitoring URL {url:?} has no host"));
    }
    // A bracketed IPv6 literal contains colons; only a colon after the bracket is a port.
    let has_port = match authority.rfind(']') {
        Some(bracket) => authority[bracket..].contains(':'),
        None => authority.contains(':'),
    };
    Ok(if has_port {
        authority.to_string()
    } else {
        format!("{authority}:80")
    })
}

/// Connects a real client, flushes (a round trip to the server) and asks for JetStream account
/// info, so a server without `-js` is caught here rather than in the first test that needs it.
pub(crate) async fn client_answers(url: &str, login: Option<&Login>) -> Result<(), String> {
    let mut options = async_nats::ConnectOptions::new();
    if let Some((user, password)) = login {
        options = options.user_and_password(user.clone(), password.clone());
    }
    let client = options
        .connection_timeout(ATTEMPT_TIMEOUT)
        // The probe wants one honest answer, not the client's reconnect loop.
        .max_reconnects(Some(1))
        .connect(url)
        .await
        .map_err(|e| format!("connect to {url}: {e}"))?;
    client
        .flush()
        .await
        .map_err(|e| format!("flush to {url}: {e}"))?;
    async_nats::jetstream::new(client)
        .query_account()
        .await
        .map_err(|e| {
            format!("JetStream on {url} does not answer (is the server run with -js?): {e}")
        })?;
    Ok(())
}

/// A user and its password, for a server that admits no client without them.
pub(crate) type Login = (String, String);

/// What a readiness wait asks before each attempt: `Some(how)` when the server is gone.
pub(crate) type Exited<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Option<String>> + Send + 'a>>;

/// Never gone: for a server that is not ours to watch.
pub(crate) fn never_exits<'a>() -> Exited<'a> {
    Box::pin(std::future::ready(None))
}

/// Polls until `/healthz` (when a monitoring URL is known) and a client connection both succeed.
///
/// `exited` is asked before every attempt; `Some(how)` means the server is gone and waiting longer
/// is pointless. On failure the error is the last thing that went wrong.
///
/// `exited` returns a boxed `Send` future rather than being an async closure: an async closure's
/// future borrows the closure for every lifetime, and the compiler then cannot prove the whole
/// wait `Send`, which would keep provisioning out of spawned tasks.
pub(crate) async fn wait_ready<'a>(
    client_url: &str,
    monitor_url: Option<&str>,
    login: Option<&Login>,
    budget: Duration,
    mut exited: impl FnMut() -> Exited<'a>,
) -> Result<(), String> {
    let deadline = Instant::now() + budget;
    loop {
        if let Some(how) = exited().await {
            return Err(how);
        }
        let attempt = async {
            if let Some(monitor_url) = monitor_url {
                healthz(monitor_url).await?;
            }
            client_answers(client_url, login).await
        };
        let last = match timeout(ATTEMPT_TIMEOUT * 2, attempt).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => e,
            Err(_) => format!(
                "no answer from {client_url} within {:?}",
                ATTEMPT_TIMEOUT * 2
            ),
        };
        if Instant::now() >= deadline {
            return Err(last);
        }
        sleep(POLL_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authority_adds_the_default_port_and_drops_the_path() {
        assert_eq!(
            authority("http://127.0.0.1:8222").unwrap(),
            "127.0.0.1:8222"
        );
        assert_eq!(authority("http://nats:8222/varz").unwrap(), "nats:8222");
        assert_eq!(authority("http://nats").unwrap(), "nats:80");
        assert_eq!(authority("http://[::1]:8222/").unwrap(), "[::1]:8222");
        assert_eq!(authority("http://[::1]").unwrap(), "[::1]:80");
        assert!(authority("https://nats:8222").is_err());
        assert!(authority("http:///healthz").is_err());
    }

    #[test]
    fn free_port_pair_gives_two_ports() {
        let (a, b) = free_port_pair().unwrap();
        assert_ne!(a, b);
    }

    #[tokio::test]
    async fn healthz_reports_a_closed_port() {
        let port = free_port().unwrap();
        let err = healthz(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_err();
        assert!(err.contains("connect to 127.0.0.1"), "{err}");
    }

    #[tokio::test]
    async fn healthz_reads_the_status_line() {
        use tokio::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            for answer in [
                "HTTP/1.1 200 OK\r\n\r\n{}",
                "HTTP/1.1 503 Unavailable\r\n\r\nJS down",
            ] {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut request = [0u8; 256];
                let n = socket.read(&mut request).await.unwrap();
                assert!(request[..n].starts_with(b"GET /healthz HTTP/1.0\r\n"));
                socket.write_all(answer.as_bytes()).await.unwrap();
            }
        });
        assert_eq!(healthz(&url).await, Ok(()));
        let err = healthz(&url).await.unwrap_err();
        assert!(err.contains("503") && err.contains("JS down"), "{err}");
        server.await.unwrap();
    }
}
