//! The harness's TLS (Redis 7.0 and Redis 8.10, the binaries that serve it), checked with a
//! real TLS client: rustls on a blocking `TcpStream`, with read timeouts.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use pelican_tests::admin::Reply;
use pelican_tests::certs::ServerCert;
use pelican_tests::server::{Flavor, Options, Server, Tls};
use rustls::{
    AlertDescription, CertificateError, ClientConfig, ClientConnection, RootCertStore, StreamOwned,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
const TIMEOUT: Duration = Duration::from_secs(5);

fn start(flavor: Flavor, tls: Tls) -> Server {
    Server::start_with(flavor, Options::default().with_tls(tls))
}

/// Runs `test` on every flavor that serves TLS ([`Flavor::TLS`]), each on its own thread
/// named after the flavor (so a panic says which server failed).
fn each_tls_flavor(test: fn(Flavor)) {
    let handles: Vec<_> = Flavor::TLS
        .into_iter()
        .map(|flavor| {
            let thread = std::thread::Builder::new()
                .name(flavor.name().to_string())
                .spawn(move || test(flavor))
                .expect("spawn a test thread");
            (flavor, thread)
        })
        .collect();
    let failed: Vec<&str> =
        handles.into_iter().filter_map(|(flavor, h)| h.join().is_err().then_some(flavor.name())).collect();
    assert!(failed.is_empty(), "failed on: {failed:?}");
}

/// A client config trusting the CA in `ca`, presenting `client` (cert, key) if given.
fn config(ca: &Path, client: Option<(&Path, &Path)>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    // ring, as pelican-tls uses (deprecated in rustls 0.23.48 for lacking post-quantum kx).
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    Arc::new(match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert).unwrap().map(Result::unwrap).collect();
            builder.with_client_auth_cert(chain, PrivateKeyDer::from_pem_file(key).unwrap()).unwrap()
        }
    })
}

fn connect(addr: SocketAddr, timeout: Duration) -> TcpStream {
    let sock = TcpStream::connect_timeout(&addr, timeout).unwrap();
    sock.set_read_timeout(Some(timeout)).unwrap();
    sock.set_write_timeout(Some(timeout)).unwrap();
    sock
}

/// Connects and completes the handshake, verifying the server as `name`.
fn handshake(
    addr: SocketAddr,
    name: &str,
    config: Arc<ClientConfig>,
    timeout: Duration,
) -> io::Result<StreamOwned<ClientConnection, TcpStream>> {
    let name = ServerName::try_from(name.to_string()).unwrap();
    let mut stream = StreamOwned::new(ClientConnection::new(config, name).unwrap(), connect(addr, timeout));
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock)?;
    }
    Ok(stream)
}

/// Sends `PING`, reads one reply line.
fn ping(stream: &mut (impl Read + Write)) -> io::Result<String> {
    stream.write_all(PING)?;
    let mut reply = Vec::new();
    let mut buf = [0; 64];
    while !reply.ends_with(b"\r\n") {
        match stream.read(&mut buf)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => reply.extend_from_slice(&buf[..n]),
        }
    }
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

/// Handshake, then `PING`: the reply line.
fn tls_ping(addr: SocketAddr, name: &str, config: Arc<ClientConfig>) -> io::Result<String> {
    ping(&mut handshake(addr, name, config, TIMEOUT)?)
}

fn plain_ping(addr: SocketAddr) -> String {
    ping(&mut connect(addr, TIMEOUT)).unwrap()
}

/// The rustls error inside an I/O error, if that is what it is.
fn rustls_error(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref().and_then(|inner| inner.downcast_ref())
}

#[test]
fn tls_port_answers_by_ip_and_by_name_beside_the_plain_port() {
    each_tls_flavor(|flavor| {
        let server = start(flavor, Tls::default());
        let pki = server.pki().unwrap();
        let tls = server.tls_addr().unwrap();
        assert_eq!(Some(tls.port()), server.tls_port());
        assert_ne!(tls.port(), server.port());
        assert!(pki.ca().starts_with(server.dir()));
        for name in ["127.0.0.1", "localhost"] {
            assert_eq!(tls_ping(tls, name, config(&pki.ca(), None)).unwrap(), "+PONG\r\n", "{name}");
        }
        assert_eq!(plain_ping(server.addr()), "+PONG\r\n");
        assert_eq!(server.admin().cmd(&["PING"]), Reply::Simple("PONG".into()));
    });
}

#[test]
fn client_auth_wants_the_client_cert() {
    each_tls_flavor(|flavor| {
        let server = start(flavor, Tls { client_auth: true, cert: ServerCert::Good });
        let pki = server.pki().unwrap();
        let tls = server.tls_addr().unwrap();
        let mutual = config(&pki.ca(), Some((&pki.client_cert(), &pki.client_key())));
        for name in ["127.0.0.1", "localhost"] {
            assert_eq!(tls_ping(tls, name, mutual.clone()).unwrap(), "+PONG\r\n", "{name}");
        }
        // TLS 1.3: the client finishes its side of the handshake before the server looks at
        // the (missing) certificate; the refusal is an alert, read after the handshake.
        let mut stream = handshake(tls, "127.0.0.1", config(&pki.ca(), None), TIMEOUT).unwrap();
        let refused = ping(&mut stream).unwrap_err();
        assert_eq!(
            rustls_error(&refused),
            Some(&rustls::Error::AlertReceived(AlertDescription::CertificateRequired)),
            "{refused:?}"
        );
        assert_eq!(plain_ping(server.addr()), "+PONG\r\n");
    });
}

#[test]
fn tls_survives_kill9_and_restart() {
    each_tls_flavor(|flavor| {
        let mut server = start(flavor, Tls { client_auth: true, cert: ServerCert::Good });
        let (port, tls) = (server.port(), server.tls_addr().unwrap());
        let ca = std::fs::read(server.pki().unwrap().ca()).unwrap();
        server.kill9();
        server.restart();
        assert_eq!((server.port(), server.tls_addr().unwrap()), (port, tls));
        let pki = server.pki().unwrap();
        assert_eq!(std::fs::read(pki.ca()).unwrap(), ca, "same PKI");
        let mutual = config(&pki.ca(), Some((&pki.client_cert(), &pki.client_key())));
        assert_eq!(tls_ping(tls, "localhost", mutual).unwrap(), "+PONG\r\n");
        assert_eq!(plain_ping(server.addr()), "+PONG\r\n");
    });
}

#[test]
fn bad_server_certs_fail_verification() {
    each_tls_flavor(|flavor| {
        let cert_error = |cert: ServerCert, name: &str, other_ca: bool| {
            let server = start(flavor, Tls { client_auth: false, cert });
            let pki = server.pki().unwrap();
            let ca = if other_ca { pki.other_ca() } else { pki.ca() };
            let err = tls_ping(server.tls_addr().unwrap(), name, config(&ca, None)).unwrap_err();
            match rustls_error(&err) {
                Some(rustls::Error::InvalidCertificate(e)) => e.clone(),
                _ => panic!("{cert:?} as {name}: {err:?}"),
            }
        };
        for name in ["127.0.0.1", "localhost"] {
            let expired = cert_error(ServerCert::Expired, name, false);
            assert!(
                matches!(expired, CertificateError::Expired | CertificateError::ExpiredContext { .. }),
                "{expired:?}"
            );
            let wrong = cert_error(ServerCert::WrongName, name, false);
            assert!(
                matches!(
                    wrong,
                    CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
                ),
                "{wrong:?}"
            );
        }
        assert_eq!(cert_error(ServerCert::Good, "localhost", true), CertificateError::UnknownIssuer);
    });
}

#[test]
fn only_redis_70_and_810_serve_tls() {
    for flavor in [Flavor::Redis62, Flavor::Valkey81] {
        let caught = catch_unwind(AssertUnwindSafe(|| {
            Server::start_with(flavor, Options::default().with_tls(Tls::default()))
        }));
        let message = *caught.expect_err("no TLS here").downcast::<String>().unwrap();
        assert!(message.contains("only redis-7.0 and redis-8.10 serve TLS"), "{message}");
    }
}

/// OpenSSL reads the 5-byte record header, finds no TLS version in it and closes without
/// an alert; the unread rest of the request makes the close a reset.
#[test]
fn plaintext_on_the_tls_port_is_dropped_without_a_reply() {
    each_tls_flavor(|flavor| {
        let server = start(flavor, Tls::default());
        let mut sock = connect(server.tls_addr().unwrap(), TIMEOUT);
        sock.write_all(PING).unwrap();
        let mut buf = [0; 64];
        match sock.read(&mut buf) {
            Ok(0) => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
            other => panic!("expected a close, got {other:?}"),
        }
    });
}

/// Redis reads a ClientHello as an inline command, which never ends (its search for the
/// newline stops at the first NUL byte): no reply, the handshake just times out.
#[test]
fn tls_on_the_plain_port_gets_no_answer() {
    each_tls_flavor(|flavor| {
        let server = start(flavor, Tls::default());
        let pki = server.pki().unwrap();
        let short = Duration::from_millis(300);
        let err =
            handshake(server.addr(), "127.0.0.1", config(&pki.ca(), None), short).map(drop).unwrap_err();
        assert!(matches!(err.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut), "{err:?}");
        // The connection is still open: it is closed by us, not the server.
        let mut sock = connect(server.addr(), short);
        sock.write_all(&[0x16, 0x03, 0x01, 0x00]).unwrap();
        let mut buf = [0; 8];
        assert!(sock.read(&mut buf).is_err(), "no bytes, no close");
    });
}
