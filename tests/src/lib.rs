//! Real-server test harness for pelican.
//!
//! - [`server`]: starts Redis 6.2, Redis 7.0, Valkey 8.1 and Redis 8.10 (installed into
//!   `<workspace>/.servers/` by `scripts/install-servers`) as child processes, each on its
//!   own loopback port in its own temporary directory; kills and restarts them (with AOF,
//!   data survives a `kill -9`); cleans up on drop.
//! - [`certs`]: a throwaway test PKI (CA, server and client certificates, and broken ones)
//!   for the TLS servers that [`server::Options::tls`] starts (Redis 7.0 and 8.10 only).
//! - [`admin`]: a small blocking RESP2 client to set up and inspect server state (streams,
//!   consumer groups, pending lists, client connections) from tests.
//!
//! ```no_run
//! use pelican_tests::server::{Flavor, Server};
//!
//! for flavor in Flavor::ALL {
//!     let server = Server::start(flavor);
//!     let mut admin = server.admin();
//!     admin.xadd_n("s", 1000, 16);
//!     assert_eq!(admin.xlen("s"), 1000);
//! }
//! ```
//!
//! - [`cluster`]: a cluster of three masters and three replicas of one flavor, formed with
//!   plain commands; slot migration (whole, or in two steps to act while the slot is
//!   half-moved) and manual failover, each waited for until every node agrees.
//!
//! - [`conformance`]: the scenario suite every transport must pass, on every server and
//!   protocol (`conformance_suite!(MyTransport)` instantiates it).
//!
//! - [`misuse`]: what the misuse stories (a client pointed slightly wrong) count with: a
//!   lone sentinel, a refused port, a listener that counts and drops, a server's count of
//!   connections, and the bound they are held to.

pub mod admin;
pub mod certs;
pub mod cluster;
pub mod conformance;
pub mod misuse;
pub mod proxy;
pub mod sentinel;
pub mod server;
