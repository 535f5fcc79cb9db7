//! `/metrics`, `/livez`, `/readyz` and `/healthz` over HTTP: `tiny_http` reads requests on its own threads and
//! hands them to one thread of ours, which answers each from the snapshots.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use tiny_http::{Header, Method, Request, Response, StatusCode};

use crate::encode::CONTENT_TYPE;
use crate::exporter::Metrics;

impl Metrics {
    /// Serves [`encode`](Self::encode) at `GET /metrics`, [`live`](Self::live) at `GET
    /// /livez` and [`ready`](Self::ready) at `GET /readyz` and `GET /healthz` (each 200 `ok`,
    /// or 503 with why, one line) on `addr` (port 0: any free port; [`Serving::addr`] tells
    /// which), from a thread of its own, until the
    /// [`Serving`] is stopped or dropped. Other paths are 404, other methods 405; a request
    /// that is not HTTP gets a 400 or a closed connection, and the server goes on.
    pub fn serve(&self, addr: impl ToSocketAddrs) -> std::io::Result<Serving> {
        Serving::start(self.clone(), addr)
    }
}

/// The HTTP server started by [`Metrics::serve`]. Stops when [`stop`](Self::stop)ped or
/// dropped: the port is closed and its thread ended.
pub struct Serving {
    addr: SocketAddr,
    http: Arc<tiny_http::Server>,
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Serving {
    /// Binds `addr` and starts the answering thread.
    pub(crate) fn start(metrics: Metrics, addr: impl ToSocketAddrs) -> io::Result<Serving> {
        let http = tiny_http::Server::http(addr).map_err(|e| match e.downcast::<io::Error>() {
            Ok(e) => *e,
            Err(e) => io::Error::other(e),
        })?;
        let addr = http.server_addr().to_ip().ok_or_else(|| io::Error::other("not an IP address"))?;
        let (http, done) = (Arc::new(http), Arc::new(AtomicBool::new(false)));
        let (h, d) = (http.clone(), done.clone());
        let thread =
            thread::Builder::new().name("pelican-metrics".into()).spawn(move || answer(&h, &d, &metrics))?;
        Ok(Serving { addr, http, done, thread: Some(thread) })
    }

    /// The address it listens on (with the port chosen, if 0 was asked).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving: closes the port and waits for the thread to end (after the request
    /// it is answering, if any).
    pub fn stop(mut self) {
        self.end();
    }

    fn end(&mut self) {
        let Some(thread) = self.thread.take() else { return };
        self.done.store(true, Relaxed);
        self.http.unblock();
        let _ = thread.join();
    }
}

impl std::fmt::Debug for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serving").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.end();
    }
}

/// The answering thread: one request at a time until told to stop.
fn answer(http: &tiny_http::Server, done: &AtomicBool, metrics: &Metrics) {
    while !done.load(Relaxed) {
        match http.recv() {
            Ok(request) => respond(request, metrics),
            // A connection that failed (or the unblock at a stop): go on, or end. A failing
            // accept (out of descriptors) is not spun on.
            Err(_) => thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Answers one request (an answer that cannot be written is dropped: the client left).
fn respond(request: Request, metrics: &Metrics) {
    let path = request.url().split('?').next().unwrap_or_default();
    let (status, content_type, body) = match (request.method(), path) {
        (Method::Get | Method::Head, "/metrics") => match caught(|| metrics.encode()) {
            Ok(text) => (200, CONTENT_TYPE, text),
            Err(why) => (500, TEXT, why),
        },
        (Method::Get | Method::Head, "/livez") => verdict(|| metrics.live()),
        // /healthz is /readyz by its first name.
        (Method::Get | Method::Head, "/readyz" | "/healthz") => verdict(|| metrics.ready()),
        (Method::Get | Method::Head, _) => {
            (404, TEXT, "not found: /metrics, /livez, /readyz or /healthz\n".to_string())
        }
        _ => (405, TEXT, "only GET and HEAD\n".to_string()),
    };
    let mut response = Response::from_string(body).with_status_code(StatusCode(status));
    if let Ok(header) = Header::from_bytes("Content-Type", content_type) {
        response.add_header(header);
    }
    if status == 405 {
        if let Ok(header) = Header::from_bytes("Allow", "GET, HEAD") {
            response.add_header(header);
        }
    }
    let _ = request.respond(response);
}

/// A health verdict as an answer: 200 `ok`, or 503 and why (a panic too: the check failed).
fn verdict(ask: impl FnOnce() -> Result<(), String>) -> (u16, &'static str, String) {
    match caught(ask).and_then(|r| r) {
        Ok(()) => (200, TEXT, "ok\n".to_string()),
        Err(why) => (503, TEXT, format!("{}\n", one_line(&why))),
    }
}

/// The body's content type for plain answers.
const TEXT: &str = "text/plain; charset=utf-8";

/// What `f` returns, or a line saying it panicked (a snapshot function of the
/// application's): the request gets a 500, and the server goes on.
fn caught<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    panic::catch_unwind(AssertUnwindSafe(f)).map_err(|_| "reading the consumers' snapshots panicked\n".into())
}

/// `why` on one line (a health check's text could hold line breaks).
fn one_line(why: &str) -> String {
    why.split_whitespace().collect::<Vec<_>>().join(" ")
}
