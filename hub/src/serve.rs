//! Serving the hub's HTTP listener with the limits a server exposed to every workload cluster
//! needs, which `axum::serve` does not set:
//!
//! - a **header-read timeout**: a client that opens a connection and sends its request headers
//!   slowly (or never) is disconnected, so idle sockets cannot pile up until the hub runs out of
//!   file descriptors;
//! - a **connection limit**: past it, new connections are closed at once (and counted in a
//!   warning), so a flood degrades into refused connections rather than an exhausted process.
//!
//! With TLS, the handshake is held to the same timeout as the headers.
//!
//! Long-polls are not affected: the timeout covers reading a request's headers, not answering it.
//! On shutdown the listener closes and open connections finish their request (the agents'
//! long-polls end early: see `signals::WorkSignals::close`).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// The limits of one listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest time a client may take to send a request's headers.
    pub header_read_timeout: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            // Two per agent (heartbeats and status, the long-poll) for thousands of clusters,
            // plus operators and scrapers.
            max_connections: 16_384,
        }
    }
}

/// Serves `routes` on `listener` (over TLS with `tls`) until `shutdown`, then waits for the open
/// requests.
pub async fn serve(
    listener: TcpListener,
    routes: Router,
    limits: Limits,
    tls: Option<TlsAcceptor>,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut refused: u64 = 0;
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors, most likely: wait a moment rather than spin.
                warn!(error = %error, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            refused += 1;
            if refused.is_power_of_two() {
                warn!(
                    refused,
                    limit = limits.max_connections,
                    "connection limit reached; closing new connections"
                );
            }
            drop(stream);
            continue;
        };
        let routes = routes.clone();
        let watcher = graceful.watcher();
        let tls = tls.clone();
        tokio::spawn(async move {
            let result = match tls {
                None => serve_connection(stream, routes, limits, watcher).await,
                Some(acceptor) => {
                    match tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => serve_connection(stream, routes, limits, watcher).await,
                        Ok(Err(error)) => Err(format!("TLS handshake: {error}")),
                        Err(_) => Err("TLS handshake timed out".to_owned()),
                    }
                }
            };
            if let Err(error) = result {
                debug!(peer = %peer, error = %error, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

async fn serve_connection<I>(
    io: I,
    routes: Router,
    limits: Limits,
    watcher: hyper_util::server::graceful::Watcher,
) -> Result<(), String>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(routes);
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let connection = builder
        .serve_connection_with_upgrades(TokioIo::new(io), service)
        .into_owned();
    watcher.watch(connection).await.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    async fn start(
        limits: Limits,
    ) -> (
        std::net::SocketAddr,
        CancellationToken,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let routes = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(serve(listener, routes, limits, None, shutdown.clone()));
        (addr, shutdown, task)
    }

    async fn get(addr: std::net::SocketAddr) -> Result<String, String> {
        let mut stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: hub\r\nconnection: close\r\n\r\n")
            .await
            .map_err(|e| e.to_string())?;
        let mut answer = String::new();
        stream
            .read_to_string(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        Ok(answer)
    }

    #[tokio::test]
    async fn clients_that_send_headers_slowly_are_disconnected_and_others_are_served() {
        let (addr, shutdown, task) = start(Limits {
            header_read_timeout: Duration::from_millis(300),
            max_connections: 1000,
        })
        .await;
        let mut slow = Vec::new();
        for _ in 0..50 {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.write_all(b"GET / HTTP/1.1\r\nhost: hu").await.unwrap();
            slow.push(stream);
        }
        let answer = tokio::time::timeout(Duration::from_secs(5), get(addr))
            .await
            .expect("a normal request is answered while slow clients hold connections")
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        for mut stream in slow {
            let mut buf = [0u8; 256];
            let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
                .await
                .expect("the hub closes a connection whose headers do not arrive in time");
            // Closed (0 bytes), reset, or a 408 before closing: anything but waiting forever.
            if let Ok(n) = read {
                let text = String::from_utf8_lossy(&buf[..n]);
                assert!(n == 0 || text.starts_with("HTTP/1.1 408"), "{text}");
            }
        }
        shutdown.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn past_the_connection_limit_new_connections_are_closed_at_once() {
        let (addr, shutdown, task) = start(Limits {
            header_read_timeout: Duration::from_secs(30),
            max_connections: 2,
        })
        .await;
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
            held.push(stream);
        }
        // Give the accept loop the two held connections before the third arrives.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let refused = loop {
            let answer = get(addr).await;
            match answer {
                Ok(text) if text.is_empty() => break true,
                Err(_) => break true,
                Ok(_) if tokio::time::Instant::now() > deadline => break false,
                Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        assert!(refused, "a third connection is closed without an answer");
        drop(held);
        let answer = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if let Ok(text) = get(addr).await
                    && text.starts_with("HTTP/1.1 200")
                {
                    return text;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("once the held connections close, new ones are served again");
        assert!(answer.starts_with("HTTP/1.1 200"));
        shutdown.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn https_serves_the_given_chain_drops_silent_handshakes_and_follows_a_renewed_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let pki = nave_testkit::TestPki::generate(dir.path(), "hub");
        let serving =
            crate::tls::ServingCert::load(&pki.chain_file, &pki.key_file).expect("the test PKI loads");
        assert_eq!(
            serving.ca_sha256(),
            pki.ca_sha256,
            "the chain's last certificate is the CA"
        );
        let acceptor = TlsAcceptor::from(Arc::new(serving.server_config().unwrap()));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let routes = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let shutdown = CancellationToken::new();
        let limits = Limits {
            header_read_timeout: Duration::from_millis(300),
            max_connections: 1000,
        };
        let task = tokio::spawn(serve(listener, routes, limits, Some(acceptor), shutdown.clone()));

        let trusting = |ca: &std::path::Path| {
            let pem = std::fs::read(ca).unwrap();
            reqwest::Client::builder()
                .tls_built_in_root_certs(false)
                .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
                .build()
                .unwrap()
        };
        let url = format!("https://127.0.0.1:{}/", addr.port());
        let body = trusting(&pki.ca_file)
            .get(&url)
            .send()
            .await
            .expect("HTTPS with the CA")
            .text()
            .await
            .unwrap();
        assert_eq!(body, "ok");
        let other = nave_testkit::TestPki::generate(dir.path(), "other");
        assert!(
            trusting(&other.ca_file).get(&url).send().await.is_err(),
            "a client trusting another CA refuses the hub"
        );
        // A client that opens a connection and never says hello is dropped after the timeout.
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let mut buffer = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buffer))
            .await
            .expect("the hub closes a silent connection within the handshake timeout");
        assert_eq!(read.unwrap_or(0), 0, "closed without an answer");

        // Renewed in place (as cert-manager does): the next handshakes get the new chain.
        let renewed = nave_testkit::TestPki::generate(dir.path(), "renewed");
        std::fs::copy(&renewed.chain_file, &pki.chain_file).unwrap();
        std::fs::copy(&renewed.key_file, &pki.key_file).unwrap();
        assert!(serving.reload_if_changed(), "the changed files are read again");
        assert_eq!(serving.ca_sha256(), renewed.ca_sha256);
        let body = trusting(&renewed.ca_file)
            .get(&url)
            .send()
            .await
            .expect("HTTPS with the renewed CA");
        assert_eq!(body.text().await.unwrap(), "ok");
        // A broken renewal keeps the working certificate.
        std::fs::write(&pki.key_file, "not a key").unwrap();
        assert!(!serving.reload_if_changed());
        assert!(
            trusting(&renewed.ca_file).get(&url).send().await.is_ok(),
            "still served"
        );

        shutdown.cancel();
        task.await.unwrap();
    }
}
