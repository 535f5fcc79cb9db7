//! Misuse stories: a consumer pointed slightly wrong never floods, hangs or stays silent.
//! Each story misconfigures one thing, counts the connections the real server (or sentinel,
//! or a listener standing for one) accepts over five seconds, holds them to the bound every
//! client keeps ([`crate::misuse::Window::assert_paced`]: a handful a second per address
//! after the first second), and checks that what the consumer tells names the cause. Part of
//! the conformance suite (see the parent module); each story runs on every server at once,
//! Redis 6.2 in RESP2, the others in RESP3.

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use pelican::{Config, HostPort, Notice, Protocol, Sentinels, Verdict};

use super::kit::{Handler, Transport};
use crate::misuse::{refused_port, Connections, Doorman, Lone, Window, SERVICE, WINDOW};
use crate::server::{Endpoint, Flavor, NoticeSink, Options, Server};

/// How long a story waits for a consumer that gives up to return.
const GIVES_UP: Duration = Duration::from_secs(15);

/// Runs `story` on each server, in parallel; fails naming those that failed.
fn on_every_flavor(name: &str, story: fn(Flavor, Protocol)) {
    let threads: Vec<_> = Flavor::ALL
        .iter()
        .map(|&flavor| {
            let label = format!("{name} on {}", flavor.name());
            let protocol = if flavor == Flavor::Redis62 { Protocol::Resp2 } else { Protocol::Resp3 };
            (
                label.clone(),
                thread::Builder::new().name(label).spawn(move || story(flavor, protocol)).unwrap(),
            )
        })
        .collect();
    let failed: Vec<String> =
        threads.into_iter().filter_map(|(label, th)| th.join().is_err().then_some(label)).collect();
    assert!(failed.is_empty(), "{} of {} servers failed: {failed:?}", failed.len(), Flavor::ALL.len());
}

/// A consumer's settings as a user leaves them (the default backoff: 100 ms doubling to 5 s).
fn config(protocol: Protocol) -> Config {
    Config::new("s", "g", "c").protocol(protocol).create_group("0")
}

/// Every notice told, as text, in order.
#[derive(Clone, Default)]
struct Told(Arc<Mutex<Vec<Notice>>>);

impl Told {
    fn sink(&self) -> NoticeSink {
        let all = self.0.clone();
        Arc::new(move |n: &Notice| all.lock().unwrap().push(n.clone()))
    }

    /// The reasons of the failed connects told.
    fn failures(&self) -> Vec<String> {
        let all = self.0.lock().unwrap();
        all.iter()
            .filter_map(|n| match n {
                Notice::ConnectFailed { reason, .. } | Notice::ConnectionLost { reason, .. } => {
                    Some(reason.clone())
                }
                _ => None,
            })
            .collect()
    }

    /// Whether a connection was announced.
    fn connected(&self) -> bool {
        self.0.lock().unwrap().iter().any(|n| matches!(n, Notice::Connected { .. }))
    }
}

fn never() -> Handler {
    Box::new(|_| Verdict::Ack)
}

/// Runs a consumer of `config` against `to` over a window, counting with `count`; returns
/// the window, what it told, and how it ended (`None`: still running at the end, stopped
/// then).
fn watch<T: Transport>(
    to: Endpoint,
    config: Config,
    count: impl FnMut() -> u64,
) -> (Window, Told, Option<Result<pelican::Stats, String>>) {
    let told = Told::default();
    let to = Endpoint { notices: Some(told.sink()), ..to };
    let (window, run) = Window::around(count, || T::spawn(to, config, never()));
    let ended = match run.is_finished() {
        true => Some(run.join(GIVES_UP)),
        false => {
            run.stop();
            let _ = run.join(GIVES_UP);
            None
        }
    };
    (window, told, ended)
}

/// The first failure told, which must name the cause; panics if none was told.
fn first_failure(flavor: Flavor, told: &Told) -> String {
    let failures = told.failures();
    assert!(!told.connected(), "{flavor}: connected, though pointed wrong");
    failures.first().cloned().unwrap_or_else(|| panic!("{flavor}: nothing told"))
}

/// The sentinel wants a password (its `requirepass`) and none is given: a handful of asks a
/// second at most, each told as a refused login that names `Sentinels::auth`.
pub fn misuse_sentinel_wants_a_password<T: Transport>() {
    on_every_flavor("misuse_sentinel_wants_a_password", |flavor, protocol| {
        let lone = Lone::start(flavor, Some("s3cret"));
        let mut at = Connections::at(&lone.sentinel);
        let to = Endpoint::new(lone.sentinels(SERVICE));
        let (window, told, ended) = watch::<T>(to, config(protocol), || at.total());
        window.assert_paced(&format!("{flavor}: a sentinel that wants a password"));
        assert!(ended.is_none(), "{flavor}: gave up: {ended:?}");
        let why = first_failure(flavor, &told);
        assert!(why.contains("NOAUTH") && why.contains("Sentinels::auth"), "{flavor}: {why}");
        eprintln!("{flavor}: a sentinel that wants a password: {window:?}: {why}");
    });
}

/// A wrong password for the sentinel: paced, told as a refused login naming
/// `Sentinels::auth`.
pub fn misuse_sentinel_wrong_password<T: Transport>() {
    on_every_flavor("misuse_sentinel_wrong_password", |flavor, protocol| {
        let lone = Lone::start(flavor, Some("s3cret"));
        let mut at = Connections::at(&lone.sentinel);
        let to = Endpoint::new(lone.sentinels(SERVICE).auth(None::<&str>, "wrong"));
        let (window, told, ended) = watch::<T>(to, config(protocol), || at.total());
        window.assert_paced(&format!("{flavor}: a wrong sentinel password"));
        assert!(ended.is_none(), "{flavor}: gave up: {ended:?}");
        let why = first_failure(flavor, &told);
        assert!(why.contains("WRONGPASS") && why.contains("Sentinels::auth"), "{flavor}: {why}");
        eprintln!("{flavor}: a wrong sentinel password: {window:?}: {why}");
    });
}

/// Sentinels that name a data node: paced, told as "a data node, not a sentinel".
pub fn misuse_sentinel_at_a_data_node<T: Transport>() {
    on_every_flavor("misuse_sentinel_at_a_data_node", |flavor, protocol| {
        let node = Server::start(flavor);
        let mut at = Connections::at(&node);
        let addr = node.addr();
        let sentinels = Sentinels::new(SERVICE, [HostPort::new(addr.ip().to_string(), addr.port())]);
        let (window, told, ended) = watch::<T>(Endpoint::new(sentinels), config(protocol), || at.total());
        window.assert_paced(&format!("{flavor}: a data node named as a sentinel"));
        assert!(ended.is_none(), "{flavor}: gave up: {ended:?}");
        let why = first_failure(flavor, &told);
        assert!(why.contains("a data node") && why.contains("not a sentinel"), "{flavor}: {why}");
        eprintln!("{flavor}: a data node named as a sentinel: {window:?}: {why}");
    });
}

/// A sentinel's address given as the node's: refused at once (nothing is sent to it as to a
/// data node), the error naming it a sentinel and what to give instead.
pub fn misuse_node_at_a_sentinel<T: Transport>() {
    on_every_flavor("misuse_node_at_a_sentinel", |flavor, protocol| {
        let lone = Lone::start(flavor, None);
        let mut at = Connections::at(&lone.sentinel);
        let (window, told, ended) =
            watch::<T>(Endpoint::new(lone.sentinel.addr()), config(protocol), || at.total());
        window.assert_paced(&format!("{flavor}: a sentinel named as the node"));
        let err = match ended {
            Some(Err(err)) => err,
            other => panic!("{flavor}: not refused: {other:?} (told {:?})", told.failures()),
        };
        assert!(err.contains("is a sentinel") && err.contains("Sentinels"), "{flavor}: {err}");
        assert!(window.total() <= 2, "{flavor}: {window:?}: connected again to a sentinel");
        assert!(!told.connected(), "{flavor}: told connected to a sentinel");
        eprintln!("{flavor}: a sentinel named as the node: {window:?}: {err}");
    });
}

/// A service the sentinel does not watch: paced, told with the services it does watch.
pub fn misuse_unknown_service<T: Transport>() {
    on_every_flavor("misuse_unknown_service", |flavor, protocol| {
        let lone = Lone::start(flavor, None);
        let mut at = Connections::at(&lone.sentinel);
        let to = Endpoint::new(lone.sentinels("nosuch"));
        let (window, told, ended) = watch::<T>(to, config(protocol), || at.total());
        window.assert_paced(&format!("{flavor}: an unknown service"));
        assert!(ended.is_none(), "{flavor}: gave up: {ended:?}");
        let why = first_failure(flavor, &told);
        assert!(
            why.contains("no service named \"nosuch\"") && why.contains(&format!("\"{SERVICE}\"")),
            "{flavor}: {why}"
        );
        eprintln!("{flavor}: an unknown service: {window:?}: {why}");
    });
}

/// Every sentinel down: one refuses connections, one accepts and closes at once. Paced (the
/// one that accepts counts), each address named once in what is told.
pub fn misuse_sentinels_down<T: Transport>() {
    on_every_flavor("misuse_sentinels_down", |_flavor, protocol| {
        let (refused, doorman) = (refused_port(), Doorman::start());
        let nodes = [refused, doorman.addr()].map(|a| HostPort::new(a.ip().to_string(), a.port()));
        let to = Endpoint::new(Sentinels::new(SERVICE, nodes));
        let (window, told, ended) = watch::<T>(to, config(protocol), || doorman.accepted());
        window.assert_paced("every sentinel down");
        assert!(ended.is_none(), "gave up: {ended:?}");
        let why = first_failure(Flavor::Redis70, &told);
        for addr in [refused, doorman.addr()] {
            assert_eq!(why.matches(&addr.to_string()).count(), 1, "{addr} once: {why}");
        }
        eprintln!("every sentinel down: {window:?}: {why}");
    });
}

/// A node that wants a password, given none, and one given a wrong one: refused at once,
/// the error naming the server's refusal.
pub fn misuse_node_refuses_the_login<T: Transport>() {
    on_every_flavor("misuse_node_refuses_the_login", |flavor, protocol| {
        let node = Server::start_with(flavor, Options::default().with_requirepass("s3cret"));
        for (config, said) in
            [(config(protocol), "NOAUTH"), (config(protocol).auth(None::<&str>, "wrong"), "WRONGPASS")]
        {
            let mut at = Connections::at(&node);
            let (window, _told, ended) = watch::<T>(Endpoint::new(node.addr()), config, || at.total());
            window.assert_paced(&format!("{flavor}: a node that refuses the login"));
            let err = match ended {
                Some(Err(err)) => err,
                other => panic!("{flavor}: not refused: {other:?}"),
            };
            // A server before 6.2's AUTH with a user (the RESP3 HELLO's) says WRONGPASS too.
            assert!(err.contains(said) || err.contains("WRONGPASS"), "{flavor}: {err}");
            assert!(window.total() <= 2, "{flavor}: {window:?}: tried again after a refused login");
        }
    });
}

/// The smallest backoff a configuration allows (1 ms) against a sentinel that refuses the
/// login: the ceiling holds where the backoff does not.
pub fn misuse_no_backoff_still_paced<T: Transport>() {
    on_every_flavor("misuse_no_backoff_still_paced", |flavor, protocol| {
        let lone = Lone::start(flavor, Some("s3cret"));
        let mut at = Connections::at(&lone.sentinel);
        let config = config(protocol).backoff(Duration::from_millis(1), Duration::from_millis(1));
        let to = Endpoint::new(lone.sentinels(SERVICE));
        let (window, _told, ended) = watch::<T>(to, config, || at.total());
        window.assert_paced(&format!("{flavor}: a 1 ms backoff"));
        assert!(ended.is_none(), "{flavor}: gave up: {ended:?}");
        eprintln!("{flavor}: a 1 ms backoff: {window:?} in {WINDOW:?}");
    });
}
