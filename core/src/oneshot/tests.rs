//! The one-shot readers on the replies captured from the real servers
//! (`scripts/capture-fixtures`, `core/tests/fixtures/README.md`), in both protocols.

use std::time::Duration;

use super::*;
use crate::config::{Limits, Protocol};

const FLAVORS: [&str; 4] = ["redis-6.2", "redis-7.0", "valkey-8.1", "redis-8.10"];

/// The captured reply `name` of `flavor` in `proto`, through [`Replies`].
fn load(flavor: &str, proto: Protocol, name: &str) -> Reply {
    let dir = match proto {
        Protocol::Resp3 => "resp3",
        _ => "resp2",
    };
    let path = format!("{}/tests/fixtures/{flavor}/{dir}/{name}.resp", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut replies = Replies::with(proto, Limits::default());
    // In pieces, as a socket may give it.
    for part in bytes.chunks(7) {
        replies.extend(part);
    }
    let reply =
        replies.next_reply().unwrap_or_else(|e| panic!("{path}: {e}")).unwrap_or_else(|| panic!("{path}"));
    assert!(replies.next_reply().unwrap().is_none(), "{path}: one reply");
    if proto == Protocol::Resp2 || reply.error().is_none() {
        assert_eq!(reply.as_bytes(), &bytes[..], "{path}: kept as it came");
    }
    reply
}

/// Runs `check` for every flavor of `flavors` in both protocols.
fn each(flavors: &[&str], mut check: impl FnMut(&str, &dyn Fn(&str) -> Reply)) {
    for &flavor in flavors {
        for proto in [Protocol::Resp2, Protocol::Resp3] {
            check(flavor, &|name| load(flavor, proto, name));
        }
    }
}

#[test]
fn pending_summaries() {
    each(&FLAVORS, |flavor, load| {
        let summary = PendingSummary::read(&load("xpending_summary")).unwrap();
        if flavor == "redis-6.2" {
            // The deleted 2-0 stays in B's list; a consumer's count is a bulk string.
            assert_eq!(summary.count, 1);
            assert_eq!(
                (summary.first.as_deref(), summary.last.as_deref()),
                (Some(&b"2-0"[..]), Some(&b"2-0"[..]))
            );
            assert_eq!(summary.consumers, [(bytes::Bytes::from("B"), 1)]);
        } else {
            assert_eq!((summary.count, summary.first, summary.last), (0, None, None), "{flavor}");
            assert!(summary.consumers.is_empty());
        }
        let e = PendingSummary::read(&load("nogroup_read")).unwrap_err();
        assert!(matches!(&e, ReplyError::Server(text) if text.starts_with("NOGROUP")), "{flavor}: {e:?}");
    });
}

#[test]
fn pending_entries() {
    each(&FLAVORS, |flavor, load| {
        let oldest = PendingEntry::read_all(&load("xpending_extended")).unwrap();
        match flavor {
            "redis-6.2" => {
                let [e] = &oldest[..] else { panic!("{oldest:?}") };
                assert_eq!(
                    (&e.id[..], e.consumer.as_deref(), e.deliveries),
                    (&b"2-0"[..], Some(&b"B"[..]), 3)
                );
                assert!(e.idle.is_some() && !e.released());
            }
            _ => assert!(oldest.is_empty(), "{flavor}"),
        }
        let page = PendingEntry::read_all(&load("pending_counts_page")).unwrap();
        let seen: Vec<_> = page.iter().map(|e| (&e.id[..], e.consumer.as_deref(), e.deliveries)).collect();
        assert_eq!(seen, [(&b"1-0"[..], Some(&b"A"[..]), 2), (&b"2-0"[..], Some(&b"A"[..]), 2)], "{flavor}");
        assert!(PendingEntry::read_all(&load("pending_counts_empty")).unwrap().is_empty());
    });
    // Redis 8.10 after `XNACK s8 g8 FAIL IDS 1 1-0`: 1-0 released, 2-0 and 3-0 B's.
    each(&["redis-8.10"], |_, load| {
        let rows = PendingEntry::read_all(&load("pending_released")).unwrap();
        assert!(rows[0].released() && rows[0].idle.is_none() && &rows[0].id[..] == b"1-0");
        assert_eq!(rows[1].consumer.as_deref(), Some(&b"B"[..]));
        assert!(!rows[1].released() && rows[1].idle.is_some());
        assert_eq!(rows.iter().map(|e| e.deliveries).collect::<Vec<_>>(), [2, 2, 1]);
    });
}

#[test]
fn groups_and_their_lag() {
    each(&FLAVORS, |flavor, load| {
        let reply = load("xinfo_groups");
        let g = GroupInfo::read_named(&reply, b"g").unwrap().unwrap();
        assert_eq!((&g.name[..], g.consumers), (&b"g"[..], 2), "{flavor}");
        assert!(g.last_delivered_id.is_some());
        match flavor {
            // No lag before 7.0.
            "redis-6.2" => assert_eq!((g.pending, g.lag), (1, None)),
            _ => assert_eq!((g.pending, g.lag), (0, Some(0)), "{flavor}"),
        }
        assert_eq!(g.lag_check(b"s"), None, "a lag of 0 (or none) needs no check");
        assert_eq!(GroupInfo::read_named(&reply, b"other"), Ok(None));
    });
    // Redis 7.0's wrong count (PROTOCOL.md 20): lag 3 with nothing past 5-0.
    each(&["redis-7.0"], |_, load| {
        let g = GroupInfo::read_named(&load("xinfo_groups_lag_wrong"), b"g").unwrap().unwrap();
        assert_eq!((g.lag, g.last_delivered_id.as_deref()), (Some(3), Some(&b"5-0"[..])));
        assert_eq!(g.lag_check(b"s"), Some(Request::xrange_after(b"s", b"5-0", 1)));
        let nothing = load("xrange_nothing_beyond");
        assert_eq!(read_entry_ids(&nothing), Ok(vec![]));
        assert_eq!(g.checked_lag(&nothing), Ok(None));
    });
}

#[test]
fn appends_counts_and_oks() {
    each(&FLAVORS, |flavor, load| {
        assert_eq!(read_count(&load("xdel")), Ok(1), "{flavor}");
        assert_eq!(read_count(&load("wait_0")), Ok(0));
        assert_eq!(read_count(&load("wait_1")), Ok(1));
        for ok in ["group_create", "select", "setname", "ping"] {
            assert!(load(ok).refused().is_ok(), "{flavor} {ok}");
        }
        let busy = load("busygroup").refused().unwrap_err();
        assert!(busy.to_string().starts_with("BUSYGROUP"), "{busy}");
        assert!(load("wrongpass").error().is_some_and(|e| e.starts_with("WRONGPASS")));
        assert!(matches!(read_count(&load("ping")), Err(ReplyError::Shape { .. })));
    });
    each(&["redis-8.10"], |_, load| {
        let first = Xadd::read_id(&load("xadd_idmp")).unwrap().unwrap();
        assert_eq!(Xadd::read_id(&load("xadd_idmp_again")), Ok(Some(first)), "a repeat: the first id");
        assert_eq!(Xadd::read_id(&load("xadd_idmp_nokey")), Ok(None));
    });
}

#[test]
fn hellos_tell_the_server() {
    each(&FLAVORS, |flavor, load| {
        let hello = Hello::read(&load("hello_info")).unwrap();
        let (server, version) = match flavor {
            "redis-6.2" => ("redis", "6.2.14"),
            "redis-7.0" => ("redis", "7.0.15"),
            "valkey-8.1" => ("valkey", "8.1.8"),
            _ => ("redis", "8.10.2"),
        };
        assert_eq!((hello.server.as_deref(), hello.version.as_deref()), (Some(server), Some(version)));
        assert_eq!((hello.role.as_deref(), hello.mode.as_deref()), (Some("master"), Some("standalone")));
        assert_eq!(hello.has_idmp(), flavor == "redis-8.10", "{flavor}");
        let replica = Hello::read(&load("hello_replica")).unwrap();
        assert_eq!(replica.role.as_deref(), Some("replica"), "{flavor}");
        let sentinel = Hello::read(&load("sentinel_hello")).unwrap();
        assert_eq!(sentinel.mode.as_deref(), Some("sentinel"), "{flavor}");
    });
    let old = Hello { server: Some("redis".into()), version: Some("8.4.0".into()), ..Hello::default() };
    assert!(!old.has_idmp() && old.version_number() == Some((8, 4)));
}

#[test]
fn clients_and_redirects() {
    each(&FLAVORS, |flavor, load| {
        let clients = ClientInfo::read_all(&load("client_list")).unwrap();
        assert_eq!(clients.iter().filter(|c| &c.name[..] == b"pelican:g:A").count(), 1, "{flavor}");
        assert!(clients.iter().all(|c| c.id > 0 && !c.addr.is_empty() && c.idle < Duration::from_secs(60)));
    });
    each(&["redis-6.2", "redis-7.0", "valkey-8.1"], |flavor, load| {
        let moved = load("moved").redirect().unwrap();
        assert_eq!(moved.kind, crate::cluster::RedirectKind::Moved, "{flavor}");
        let ask = load("ask").redirect().unwrap();
        assert_eq!(ask.kind, crate::cluster::RedirectKind::Ask, "{flavor}");
        assert_eq!(load("crossslot").redirect(), None);
    });
    // The slot map's reader takes RESP2 bytes, as a one-shot session speaks.
    for flavor in ["redis-6.2", "redis-7.0", "valkey-8.1"] {
        let slots = load(flavor, Protocol::Resp2, "cluster-slots");
        let map = crate::cluster::read_slot_map(slots.as_bytes()).unwrap().unwrap();
        assert_eq!(map.covered(), 16384, "{flavor}");
    }
}

#[test]
fn a_groups_consumers() {
    each(&FLAVORS, |flavor, load| {
        // s7/g7 after the retirement: A holds 1-0; C and `E\xff x` hold nothing.
        let summary = PendingSummary::read(&load("xpending_summary_owned")).unwrap();
        assert_eq!((summary.count, summary.first.as_deref()), (1, Some(&b"1-0"[..])), "{flavor}");
        assert_eq!(summary.consumers, [(bytes::Bytes::from("A"), 1)], "{flavor}");
        let consumers = ConsumerInfo::read_all(&load("xinfo_consumers")).unwrap();
        let seen: Vec<_> = consumers.iter().map(|c| (&c.name[..], c.pending)).collect();
        assert_eq!(seen, [(&b"A"[..], 1), (&b"C"[..], 0), (&b"E\xff x"[..], 0)], "{flavor}");
        assert!(consumers.iter().all(|c| c.idle.is_some_and(|idle| idle < Duration::from_secs(60))));
        // `inactive` from 7.2 on; never active: -1, told as none.
        let inactive: Vec<_> = consumers.iter().map(|c| c.inactive.is_some()).collect();
        match flavor {
            "redis-6.2" | "redis-7.0" => assert_eq!(inactive, [false, false, false], "{flavor}"),
            _ => assert_eq!(inactive, [true, false, false], "{flavor}"),
        }
        assert_eq!(read_count(&load("xgroup_delconsumer")), Ok(0), "C held nothing");
    });
}

#[test]
fn streams_ranges_and_scans() {
    each(&FLAVORS, |flavor, load| {
        // s holds 1-0 and 3-0 (2-0 deleted) and the group g.
        let info = StreamInfo::read(&load("xinfo_stream")).unwrap();
        assert_eq!((info.length, info.groups), (2, 1), "{flavor}");
        // 8.10 tells every stream's IDMP window, the older servers none.
        let window = (flavor == "redis-8.10").then_some(IdmpWindow::DEFAULT);
        assert_eq!(info.idmp, window, "{flavor}");
        assert_eq!(info.last_generated_id.as_deref(), Some(&b"3-0"[..]));
        for missing in ["xinfo_stream_nokey", "xinfo_groups_nokey"] {
            let e = StreamInfo::read(&load(missing)).unwrap_err();
            assert_eq!(e, ReplyError::Server("ERR no such key".into()), "{flavor} {missing}");
        }
        assert_eq!(read_entry_ids(&load("xrange_after")), Ok(vec![bytes::Bytes::from("3-0")]));
        let entries = read_entries(&load("xrange_after")).unwrap();
        assert_eq!(entries, vec![("3-0".into(), vec![("f".into(), "v3".into())])], "{flavor}");
        let now = read_time(&load("time")).unwrap();
        assert!(now > Duration::from_secs(1_700_000_000), "{flavor}: {now:?}");
        assert!(read_time(&load("xrange_after")).is_err(), "{flavor}: not a TIME");
        assert!(read_entries(&load("time")).is_err(), "{flavor}: not entries");
        let mut scan = StreamScan::new(b"s[0-9]");
        let mut keys = scan.read(&load("scan_streams")).unwrap();
        keys.sort();
        assert_eq!(keys, ["s2", "s4", "s5", "s6", "s7"], "{flavor}: streams only, in one call");
        assert!(scan.request().is_none(), "cursor 0: done");
        for name in ["xadd", "xadd_maxlen"] {
            let id = Xadd::read_id(&load(name)).unwrap().unwrap();
            assert!(id.contains(&b'-'), "{flavor} {name}: {id:?}");
        }
    });
    // Redis 8.10 tells a stream's IDMP window (the defaults here) and takes IDMP before
    // MAXLEN, as Xadd sends them.
    each(&["redis-8.10"], |_, load| {
        let info = StreamInfo::read(&load("xinfo_stream_idmp")).unwrap();
        assert_eq!(info.idmp, Some(IdmpWindow::DEFAULT));
        assert!(Xadd::read_id(&load("xadd_idmp_maxlen")).unwrap().is_some());
    });
}
