//! `run --metrics-addr`: the lock's metrics in Prometheus text format at
//! `GET /metrics`, from a small HTTP/1 responder on Tokio. The exporter's
//! own listener would bring hyper and its HTTP stack into the build for
//! this one read-only page.

use std::error::Error;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::timeout;

/// The longest request head read; a scraper's is a few hundred bytes.
const MAX_HEAD: usize = 8 * 1024;
/// A client has this long to send its request and take the reply.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// After the reply, how long the client's leftovers are read (see `exchange`).
const LINGER: Duration = Duration::from_secs(1);
/// Connections served at once; further ones are closed unanswered, so a
/// flood cannot take memory or tasks from the lock's renewals.
const MAX_CONNECTIONS: usize = 16;
/// How often histograms are drained, as the exporter's own listener does,
/// so that they do not grow for as long as the command runs.
const UPKEEP: Duration = Duration::from_secs(5);
/// Prometheus's text exposition format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Binds `addr`, installs the Prometheus recorder as the process's metrics
/// recorder, and serves it in the background until redlease exits. Fails
/// if the address cannot be bound, before anything is installed.
pub async fn serve(addr: SocketAddr) -> Result<(), Box<dyn Error + Send + Sync>> {
    let listener = TcpListener::bind(addr).await?;
    let handle = PrometheusBuilder::new().install_recorder()?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(UPKEEP);
        loop {
            ticks.tick().await;
            upkeep.run_upkeep();
        }
    });
    tokio::spawn(serve_on(listener, handle));
    Ok(())
}

/// Answers every connection to `listener` with one reply, then closes it.
async fn serve_on(listener: TcpListener, handle: PrometheusHandle) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors, say: wait instead of spinning.
                tracing::debug!(error = %e, "metrics listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            exchange(stream, &handle).await;
            drop(slot);
        });
    }
}

/// Reads one request, writes its reply and closes the connection, each
/// step bounded in time; errors only end the connection.
async fn exchange(mut stream: TcpStream, handle: &PrometheusHandle) {
    let answered = timeout(IO_TIMEOUT, async {
        let head = read_head(&mut stream).await?;
        let reply = reply_to(head.as_deref(), || handle.render());
        stream.write_all(&reply).await?;
        stream.shutdown().await
    })
    .await;
    if !matches!(answered, Ok(Ok(()))) {
        return;
    }
    // Closing with unread bytes (a body, a pipelined request) would reset
    // the connection, and the client could lose the reply: read them until
    // the client closes, briefly.
    let mut sink = [0u8; 1024];
    let _ = timeout(LINGER, async {
        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// The request head, up to its empty line; `None` if it is longer than
/// [`MAX_HEAD`]. An error if the client closes before the end.
async fn read_head(stream: &mut (impl AsyncRead + Unpin)) -> io::Result<Option<Vec<u8>>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(&buf[..n]);
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            return Ok(Some(head));
        }
        if head.len() > MAX_HEAD {
            return Ok(None);
        }
    }
}

/// The whole response to a request head (`None`: too long); `render` is
/// called only for a scrape.
fn reply_to(head: Option<&[u8]>, render: impl FnOnce() -> String) -> Vec<u8> {
    let Some(head) = head else {
        return response("431 Request Header Fields Too Large", "", "", false);
    };
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let parts: Vec<&str> = line.trim_end_matches('\r').split(' ').collect();
    let [method, target, version] = parts[..] else {
        return response("400 Bad Request", "", "", false);
    };
    if !version.starts_with("HTTP/1.") {
        return response("400 Bad Request", "", "", false);
    }
    // A query string (`?name[]=...` filters, in other exporters) is ignored.
    let path = target.split('?').next().unwrap_or_default();
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => response("200 OK", "", &render(), method == "HEAD"),
        (_, "/metrics") => response(
            "405 Method Not Allowed",
            "Allow: GET, HEAD\r\n",
            "",
            method == "HEAD",
        ),
        _ => response(
            "404 Not Found",
            "",
            "Not found: the metrics are at /metrics\n",
            method == "HEAD",
        ),
    }
}

/// A complete HTTP/1.1 response that closes the connection; a HEAD
/// request's leaves the body out but keeps its length.
fn response(status: &str, headers: &str, body: &str, head_only: bool) -> Vec<u8> {
    let content_type = if status.starts_with("200") {
        CONTENT_TYPE
    } else {
        "text/plain; charset=utf-8"
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         {headers}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(request: &str) -> String {
        let body = || "redlease_leases_held 1\n".to_string();
        String::from_utf8(reply_to(Some(request.as_bytes()), body)).unwrap()
    }

    #[test]
    fn a_scrape_gets_the_text_format() {
        for request in [
            "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\n\r\n",
            "GET /metrics?name[]=x HTTP/1.0\r\n\r\n",
            "GET /metrics HTTP/1.0\n\n",
        ] {
            let text = reply(request);
            assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
            assert!(
                text.contains("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
                "{text}"
            );
            assert!(text.contains("\r\nContent-Length: 23\r\n"), "{text}");
            assert!(text.contains("\r\nConnection: close\r\n"), "{text}");
            assert!(text.ends_with("\r\n\r\nredlease_leases_held 1\n"), "{text}");
        }
        let head = reply("HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.ends_with("Content-Length: 23\r\nConnection: close\r\n\r\n"));
    }

    #[test]
    fn anything_else_is_refused_without_rendering() {
        let no_render = || -> String { panic!("rendered for a request that is no scrape") };
        let status = |request: &str| {
            let text = String::from_utf8(reply_to(Some(request.as_bytes()), no_render)).unwrap();
            text.lines().next().unwrap().to_string()
        };
        assert_eq!(status("GET / HTTP/1.1\r\n\r\n"), "HTTP/1.1 404 Not Found");
        assert_eq!(
            status("GET /metricsx HTTP/1.1\r\n\r\n"),
            "HTTP/1.1 404 Not Found"
        );
        assert_eq!(
            status("POST /metrics HTTP/1.1\r\n\r\n"),
            "HTTP/1.1 405 Method Not Allowed"
        );
        assert_eq!(status("GET /metrics\r\n\r\n"), "HTTP/1.1 400 Bad Request");
        assert_eq!(
            status("GET /metrics SPDY/3\r\n\r\n"),
            "HTTP/1.1 400 Bad Request"
        );
        assert_eq!(status("\u{1}\u{2}\r\n\r\n"), "HTTP/1.1 400 Bad Request");
        let text = String::from_utf8(reply_to(None, no_render)).unwrap();
        assert!(text.starts_with("HTTP/1.1 431 "), "{text}");
    }

    #[tokio::test]
    async fn heads_are_read_to_their_end_and_bounded() {
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        client
            .write_all(b"GET /metrics HTTP/1.1\r\n")
            .await
            .unwrap();
        client.write_all(b"Host: x\r\n\r\n").await.unwrap();
        let head = read_head(&mut server).await.unwrap().unwrap();
        assert!(head.ends_with(b"Host: x\r\n\r\n"));

        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        client.write_all(&[b'a'; MAX_HEAD + 2048]).await.unwrap();
        assert!(read_head(&mut server).await.unwrap().is_none());

        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        client
            .write_all(b"GET /metrics HTTP/1.1\r\n")
            .await
            .unwrap();
        drop(client);
        assert!(read_head(&mut server).await.is_err());
    }

    #[tokio::test]
    async fn serves_over_tcp_and_closes_the_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Not installed: other tests in this process may record too.
        let handle = PrometheusBuilder::new().build_recorder().handle();
        tokio::spawn(serve_on(listener, handle));
        for (path, status) in [("/metrics", "200 OK"), ("/", "404 Not Found")] {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut text = String::new();
            // Ends only because the server closes the connection.
            timeout(Duration::from_secs(5), stream.read_to_string(&mut text))
                .await
                .expect("the server closes the connection")
                .unwrap();
            assert!(
                text.starts_with(&format!("HTTP/1.1 {status}\r\n")),
                "{text}"
            );
        }
    }
}
