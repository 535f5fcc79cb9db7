//! A lane: one stream's consumer, with its own connection and its own handler. `consume`
//! runs one lane per `--stream`, all in one process; the transports ([`super::mio_lanes`],
//! [`super::smol_lanes`]) run them and say how each ended.

use std::net::SocketAddr;
use std::sync::Arc;

use pelican::{Config, Notice, Stats};
use pelican_tls::Tls;

use super::handler::Handler;
use super::screen::Screen;

/// Where every lane connects: the URL's addresses (a failed connect tries the next) and TLS
/// with the host its certificate must name. In a cluster this is any node: each lane
/// follows `MOVED` to the node serving its stream.
pub struct Net {
    /// The URL host's addresses.
    pub addrs: Vec<SocketAddr>,
    /// `rediss://`: the TLS settings and the URL's host.
    pub tls: Option<(Tls, String)>,
    /// In a cluster, the master serving each stream (see [`Net::locate`]).
    pub homes: Vec<(Vec<u8>, SocketAddr)>,
}

impl Net {
    /// Where the lane for `stream` connects first: the master serving it, when the URL's
    /// node is a cluster node that says so (plaintext: `pelican_mio::locate`), then the URL's
    /// addresses. Without that answer, the URL's node: the lane follows `MOVED` from there.
    pub fn addrs_for(&self, stream: &[u8]) -> Vec<SocketAddr> {
        let home = self.homes.iter().find(|(s, _)| s == stream).map(|(_, at)| *at);
        home.into_iter().chain(self.addrs.iter().copied()).collect()
    }

    /// Asks the URL's node once where each of `streams` is served (nothing if it is not a
    /// cluster node, wants TLS or a password first, or does not answer in 2 s).
    pub fn locate(mut self, streams: &[&[u8]]) -> Net {
        let (Some(seed), None) = (self.addrs.first(), &self.tls) else { return self };
        if let Ok(found) = pelican_mio::locate(*seed, streams, std::time::Duration::from_secs(2)) {
            self.homes =
                streams.iter().zip(found).filter_map(|(stream, at)| Some((stream.to_vec(), at?))).collect();
        }
        self
    }
}

/// One stream's consumer, ready to run.
pub struct Lane {
    /// The consumer's settings (the stream, its dead-letter stream…).
    pub config: Config,
    /// The lane's handler (its stream, counters and running command).
    pub handler: Arc<Handler>,
}

impl Lane {
    /// The lane's stream.
    pub fn stream(&self) -> &str {
        &self.handler.stream
    }
}

/// How a lane failed for good.
#[derive(Debug)]
pub struct LaneFailure {
    /// What to tell, TLS failures worded in terms of the flags.
    pub message: String,
    /// The consumer's error, if that is what it was (for hints: a missing group, keys in
    /// two cluster slots).
    pub error: Option<pelican::Error>,
}

/// How a lane ended: stopped (its counters), or failed for good.
pub type Outcome = Result<Stats, LaneFailure>;

/// Prints a lane's notices on stderr, one line each, clearing the progress line on a
/// terminal. With several lanes each line names its stream, as failures do.
pub fn teller(stream: &str, several: bool, screen: Arc<Screen>) -> impl FnMut(&Notice) + Send + 'static {
    let prefix = if several { format!("stream {stream}: ") } else { String::new() };
    move |notice| screen.tell(format_args!("pelican: {prefix}{notice}"))
}
