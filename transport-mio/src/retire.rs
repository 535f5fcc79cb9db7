//! Retiring a group's idle, empty, unconnected consumers, on a short blocking connection.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use pelican::retire::{ConsumerState, Retirement, Step};
use pelican::Config;

/// Removes the consumers of `config`'s group on its stream that have been idle at least
/// `min_idle`, hold no pending entry **and** have no live connection under their default
/// name (`pelican:<stream>:<group>:<consumer>`: on Redis 7.0 a consumer parked on reads that find
/// nothing looks idle however long it waits). The server is asked `CLIENT LIST` first, then
/// the check and the removal run in one server-side script, so that no pending entry is
/// orphaned by a race (see [`pelican::retire`]). With `dry_run`, removes nothing and reports
/// the same. Returns every consumer of the group with what was decided for it, and why.
///
/// Uses the config's credentials, database and protocol; the connection is named
/// `pelican:retire` (the consumer and client names are not used). A plaintext connection to
/// `addr`, which in a cluster must be the node serving the stream, bounded by `timeout` per
/// step (over TLS, write [`Retirement::request`] on your own connection and feed the
/// replies to [`Retirement::read`]). A refusal by the server (no such group, bad
/// credentials, `CLIENT LIST` not allowed, a cluster redirect) is an [`io::Error`] of kind
/// `Other` wrapping the [`pelican::Error`].
pub fn retire(
    addr: impl ToSocketAddrs,
    config: &Config,
    min_idle: Duration,
    dry_run: bool,
    timeout: Duration,
) -> io::Result<Vec<ConsumerState>> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the address resolved to nothing");
    for addr in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(socket) => return exchange(socket, config, min_idle, dry_run, timeout),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn exchange(
    mut socket: TcpStream,
    config: &Config,
    min_idle: Duration,
    dry_run: bool,
    timeout: Duration,
) -> io::Result<Vec<ConsumerState>> {
    socket.set_read_timeout(Some(timeout))?;
    socket.set_write_timeout(Some(timeout))?;
    let mut retirement = Retirement::new(config, min_idle, dry_run);
    socket.write_all(retirement.request())?;
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = socket.read(&mut chunk)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        match retirement.read(&chunk[..n]) {
            Ok(None) => {}
            Ok(Some(Step::Send(script))) => socket.write_all(&script)?,
            Ok(Some(Step::Done(consumers))) => return Ok(consumers),
            Err(e) => return Err(io::Error::other(e)),
        }
    }
}
