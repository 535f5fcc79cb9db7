//! TLS that cannot work, each failure fatal and named by its cause, on Redis 7.0 and Redis
//! 8.10 (the binaries here that serve TLS, [`Flavor::TLS`]), one thread each. Part of the
//! conformance suite (see the parent module); the stories that work are the whole suite over
//! TLS (see `on_every_target`).

use std::time::Duration;

use pelican::Protocol;

use super::kit::{Seen, Target, Transport};
use crate::certs::ServerCert;
use crate::server::{Endpoint, Flavor, Options, Server, Tls};

/// How long a failing consumer may take to give up: a few reconnects at most.
const GIVE_UP: Duration = Duration::from_secs(20);

fn tls_server(flavor: Flavor, tls: Tls) -> Server {
    Server::start_with(flavor, Options::default().with_tls(tls))
}

/// Runs `story` on every flavor that serves TLS, a thread each; panics naming those that
/// failed.
fn on_tls_flavors(story: fn(Flavor)) {
    let threads: Vec<_> = Flavor::TLS
        .into_iter()
        .map(|flavor| {
            let name = format!("{} on {flavor}", std::thread::current().name().unwrap_or("tls"));
            (flavor, std::thread::Builder::new().name(name).spawn(move || story(flavor)).unwrap())
        })
        .collect();
    let failed: Vec<Flavor> =
        threads.into_iter().filter_map(|(flavor, th)| th.join().is_err().then_some(flavor)).collect();
    assert!(failed.is_empty(), "failed on: {failed:?}");
}

/// The consumer against `to` must fail for good, its error naming `cause`.
fn fails_with<T: Transport>(to: Endpoint, cause: &str) {
    let t = Target { flavor: Flavor::Redis70, protocol: Protocol::Resp3, tls: None };
    let run = T::spawn(to, t.config("c1").create_group("0"), Seen::default().acking());
    match run.join(GIVE_UP) {
        Ok(stats) => panic!("expected a TLS failure ({cause}), got a clean stop: {stats:?}"),
        Err(e) => assert!(e.contains(cause), "expected {cause:?} in {e:?}"),
    }
}

/// Trusting the test CA and, with `client`, presenting the test client certificate.
fn endpoint(server: &Server, ca: std::path::PathBuf, client: bool, host: &str) -> Endpoint {
    let pki = server.pki().expect("a TLS server");
    let mut config = pelican_tls::TlsConfig::new().ca_file(ca);
    if client {
        config = config.client_cert(pki.client_cert(), pki.client_key());
    }
    let tls = config.build().expect("valid TLS settings");
    let addr = server.tls_addr().expect("a TLS port");
    Endpoint {
        tls: Some((tls, host.to_string())),
        connect_timeout: Some(Duration::from_secs(1)),
        ..Endpoint::new(addr)
    }
}

/// A certificate from a CA not trusted; one that names another host; one expired; a
/// server that wants a client certificate and gets none.
pub fn tls_certificates_refused<T: Transport>() {
    on_tls_flavors(|flavor| {
        let server = tls_server(flavor, Tls::default());
        let other_ca = server.pki().unwrap().other_ca();
        fails_with::<T>(endpoint(&server, other_ca, false, "127.0.0.1"), "is not trusted");

        let server = tls_server(flavor, Tls { cert: ServerCert::WrongName, ..Tls::default() });
        let ca = server.pki().unwrap().ca();
        fails_with::<T>(endpoint(&server, ca, false, "127.0.0.1"), "does not name 127.0.0.1");

        let server = tls_server(flavor, Tls { cert: ServerCert::Expired, ..Tls::default() });
        let ca = server.pki().unwrap().ca();
        fails_with::<T>(endpoint(&server, ca, false, "localhost"), "out of its validity period");

        let server = tls_server(flavor, Tls { client_auth: true, ..Tls::default() });
        let ca = server.pki().unwrap().ca();
        fails_with::<T>(endpoint(&server, ca, false, "127.0.0.1"), "requires a client certificate");
        // The same server with the certificate: consumes (and `localhost` is a name it carries).
        let ca = server.pki().unwrap().ca();
        let seen = Seen::default();
        let t = Target { flavor, protocol: Protocol::Resp2, tls: None };
        let run = T::spawn(
            endpoint(&server, ca, true, "localhost"),
            t.config("c1").create_group("0"),
            seen.acking(),
        );
        let mut admin = server.admin();
        assert!(super::kit::wait_until(super::kit::SETTLE, || admin
            .group_exists(super::kit::STREAM, super::kit::GROUP)));
        admin.xadd_n(super::kit::STREAM, 20, 8);
        assert!(
            super::kit::wait_until(super::kit::SETTLE, || seen.len() >= 20),
            "consumed {} of 20",
            seen.len()
        );
        assert_eq!(run.finish().acked, 20);
    });
}

/// TLS to the plaintext port (the server waits forever on the hello: the handshake times
/// out, a few times, then the consumer gives up) and plaintext to the TLS port (reset
/// before a word, a few times): each named, neither retried forever.
pub fn tls_protocol_mismatch<T: Transport>() {
    on_tls_flavors(|flavor| {
        let server = tls_server(flavor, Tls::default());
        let ca = server.pki().unwrap().ca();
        let mut to_plain = endpoint(&server, ca, false, "127.0.0.1");
        to_plain.at = server.addr().into();
        fails_with::<T>(to_plain, "did not answer the TLS handshake");
        let to_tls = Endpoint::new(server.tls_addr().unwrap());
        fails_with::<T>(to_tls, "is it a TLS port?");
    });
}
