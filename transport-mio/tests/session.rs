//! `Session`, the blocking session for one-shot commands, against real servers: it logs in,
//! selects, names itself and pipelines; refuses a replica and a sentinel, naming what they
//! said; finds the master through Sentinel and sees a failover move it; follows a cluster's
//! MOVED and ASK, for commands and for a retirement.

use std::net::SocketAddr;
use std::thread;
use std::time::Duration;

use pelican::oneshot::{
    read_count, ClientInfo, ConsumerInfo, PendingSummary, Request, StreamInfo, StreamScan, Xadd,
};
use pelican::HostPort;
use pelican_mio::{SessionConfig, SessionError};
use pelican_tests::cluster::Cluster;
use pelican_tests::misuse::{Lone, SERVICE};
use pelican_tests::sentinel::Topology;
use pelican_tests::server::{Flavor, Options, Server};

fn node(addr: SocketAddr) -> HostPort {
    HostPort::new(addr.ip().to_string(), addr.port())
}

#[test]
fn one_shot_commands_on_every_server() {
    let threads: Vec<_> = Flavor::ALL
        .into_iter()
        .map(|flavor| {
            thread::spawn(move || {
                let server = Server::start_with(flavor, Options::default().with_requirepass("s3cret"));
                let config =
                    SessionConfig::new(server.addr()).auth(None::<&str>, "s3cret").db(2).name("my-tool");
                let mut session = config.connect().unwrap_or_else(|e| panic!("{flavor:?}: {e}"));
                assert_eq!(session.peer(), server.addr());
                let created = session.call(&Request::xgroup_create(b"s", b"g", b"0", true)).unwrap();
                assert!(created.error().is_none());
                // Three appends in one pipeline, their ids read back in order.
                let (xadd, mut out) = (Xadd::new(b"s"), Vec::new());
                for i in 0..3 {
                    xadd.encode(&mut out, 0, &[(&b"n"[..], i.to_string().as_bytes())]);
                }
                session.send(&[&out]).unwrap();
                for _ in 0..3 {
                    assert!(Xadd::read_id(&session.receive().unwrap()).unwrap().is_some(), "{flavor:?}");
                }
                let info = StreamInfo::read(&session.call(&Request::xinfo_stream(b"s")).unwrap()).unwrap();
                assert_eq!((info.length, info.groups), (3, 1), "{flavor:?}: in db 2");
                let summary =
                    PendingSummary::read(&session.call(&Request::xpending(b"s", b"g")).unwrap()).unwrap();
                assert_eq!(summary.count, 0);
                assert!(ConsumerInfo::read_all(
                    &session.call(&Request::xinfo_consumers(b"s", b"g")).unwrap()
                )
                .unwrap()
                .is_empty());
                let clients = ClientInfo::read_all(&session.call(&Request::client_list()).unwrap()).unwrap();
                assert!(clients.iter().any(|c| &c.name[..] == b"my-tool"), "{flavor:?}: named");
                let mut scan = StreamScan::new(b"*");
                let mut keys = Vec::new();
                while let Some(request) = scan.request() {
                    keys.extend(scan.read(&session.call(&request).unwrap()).unwrap());
                }
                assert_eq!(keys, ["s"]);
                assert_eq!(session.wait(0, Duration::from_millis(10)).unwrap(), 0);
                // A refusal leaves the session usable.
                let e = session.call(&Request::xpending(b"s", b"nosuch")).unwrap_err();
                assert!(e.server_text().is_some_and(|t| t.starts_with("NOGROUP")) && !e.is_link(), "{e}");
                assert_eq!(read_count(&session.call(&Request::xdel(b"s", b"0-1")).unwrap()), Ok(0));
                // Without the password, or a wrong one: the login is named.
                for config in
                    [SessionConfig::new(server.addr()).name("n"), config.auth(None::<&str>, "wrong")]
                {
                    match config.connect().map(|_| ()) {
                        Err(SessionError::Login { peer, text, .. }) => {
                            assert_eq!(peer, server.addr());
                            assert!(text.starts_with("NOAUTH") || text.starts_with("WRONGPASS"), "{text}");
                        }
                        other => panic!("{flavor:?}: {other:?}"),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a flavor's session");
    }
}

#[test]
fn a_replica_and_a_sentinel_are_refused_by_what_they_are() {
    let flavor = Flavor::Valkey81;
    let (master, replica) = (Server::start(flavor), Server::start(flavor));
    replica.admin().call(&["REPLICAOF", "127.0.0.1", &master.port().to_string()]);
    match SessionConfig::new(replica.addr()).connect().map(|_| ()) {
        Err(e @ SessionError::Replica { .. }) => {
            let SessionError::Replica { node: at, master: of, named_by_sentinels } = &e else {
                unreachable!()
            };
            assert_eq!(
                (at, of.as_ref(), named_by_sentinels),
                (&node(replica.addr()), Some(&node(master.addr())), &false)
            );
            assert_eq!(
                e.to_string(),
                format!("{} is a replica (of {}), not a master", replica.addr(), master.addr())
            );
        }
        other => panic!("{other:?}"),
    }
    let lone = Lone::start(flavor, None);
    let config = SessionConfig::new(lone.sentinel.addr());
    match config.connect().map(|_| ()) {
        Err(SessionError::IsSentinel { node: at, services }) => {
            assert_eq!((at, services), (node(lone.sentinel.addr()), Some(vec![SERVICE.to_string()])));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(config.sentinel_services(), Some(vec![SERVICE.to_string()]));
    assert_eq!(SessionConfig::new(master.addr()).sentinel_services(), None, "a data node watches nothing");
}

#[test]
fn the_master_is_found_through_sentinel_and_a_failover_seen() {
    let topology = Topology::start(Flavor::Redis70);
    let mut session = SessionConfig::new(topology.sentinels()).name("tool").connect().expect("the master");
    let old = topology.master();
    assert_eq!((session.peer(), session.master()), (old, Some(&node(old))));
    assert_eq!(session.master_moved().unwrap(), None);
    let new = topology.failover();
    let moved = (0..50)
        .find_map(|_| {
            let moved = session.master_moved().ok().flatten();
            moved.or_else(|| {
                thread::sleep(Duration::from_millis(100));
                None
            })
        })
        .expect("the sentinels name the new master");
    assert_eq!(moved, node(new));
    session.reconnect().expect("the new master");
    assert_eq!((session.peer(), session.master()), (new, Some(&node(new))));
    // Unknown service: every sentinel's account.
    let mut sentinels = topology.sentinels();
    sentinels.service = "nosuch".into();
    match SessionConfig::new(sentinels).connect().map(|_| ()) {
        Err(SessionError::Sentinels(all)) => assert!(all.contains("no service named \"nosuch\""), "{all}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn cluster_redirects_are_followed_for_commands_and_retirements() {
    let cluster = Cluster::start(Flavor::Valkey81);
    let stream = "{t}";
    let owner = cluster.owner_of(stream);
    let other = cluster.masters().into_iter().find(|&m| m != owner).expect("another master");
    let mut session = SessionConfig::new(other).connect().expect("a cluster node");
    session.call(&Request::xgroup_create(stream.as_bytes(), b"g", b"0", true)).expect("MOVED followed");
    assert_eq!(session.peer(), owner, "the node serving the stream is kept");
    session.call(&Xadd::new(stream.as_bytes()).request(0, &[(b"f", b"v")])).unwrap();
    cluster.admin(owner).call(&["XGROUP", "CREATECONSUMER", stream, "g", "gone"]);
    // The slot half-moved to `other`: ASK, followed once per command; the retirement lists
    // the connections of both nodes and runs its script where the stream went.
    let migration = cluster.begin_migration(cluster.slot_of(stream), other);
    assert_eq!(migration.keys_moved(), 1);
    let info = StreamInfo::read(&session.call(&Request::xinfo_stream(stream.as_bytes())).unwrap()).unwrap();
    assert_eq!(info.length, 1, "read after ASKING on the target");
    assert_eq!(session.peer(), owner, "ASK moves nothing for good");
    let retired = session.retire(stream.as_bytes(), b"g", Duration::ZERO, false).expect("retired");
    let names: Vec<_> = retired.iter().map(|c| (&c.name[..], c.retired())).collect();
    assert_eq!(names, [(&b"gone"[..], true)]);
    migration.finish();
    assert!(cluster.admin(other).consumer_names(stream, "g").is_empty(), "removed where the stream is");
}
