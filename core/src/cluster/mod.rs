//! What pelican knows about Redis/Valkey Cluster, sans-IO: which slot a key hashes to
//! ([`key_slot`]), which master serves each slot ([`SlotMap`], from `CLUSTER SLOTS` or
//! `CLUSTER SHARDS`: write [`SLOTS_REQUEST`] to any node, pass what it answers to
//! [`read_slot_map`]), and what the cluster's error replies ask for ([`parse_redirect`]; the
//! consumer follows `MOVED` and `ASK` itself: see [`Error::Moved`](crate::Error::Moved)).
//!
//! A lane (one [`Consumer`](crate::Consumer) per stream) may start at any node: a `MOVED`
//! leads it to the master serving its stream. Transports that start many lanes look the
//! masters up first, so that each lane starts where it belongs.
//!
//! Keys that one command touches must share a slot: a stream and its dead-letter stream
//! take a common hash tag, e.g. `{orders}` and `{orders}:dead` (only the part between the
//! first `{` and the next `}` is hashed).

mod redirect;
mod slot;
mod slot_map;

pub(crate) use redirect::{classify, ClusterError};
pub use redirect::{parse_redirect, Redirect, RedirectKind};
pub use slot::key_slot;
pub use slot_map::{read_slot_map, Node, SlotMap, SlotMapError, SLOTS_REQUEST};

/// The cluster replies captured from real 3-master, 3-replica clusters
/// (`scripts/capture-fixtures`); `cluster-myid` is the node the commands were sent to.
#[cfg(test)]
mod fixture_tests {
    use super::*;
    use crate::decode::Value;
    use crate::reply::fixture_tests::each_of;

    const FLAVORS: [&str; 3] = ["redis-6.2", "redis-7.0", "valkey-8.1"];
    /// Every slot has a master, and there are three of them at distinct addresses.
    fn check_full(map: &SlotMap, what: &str) {
        assert_eq!(map.covered(), 16384, "{what}");
        let mut addresses: Vec<_> = map.masters().iter().map(|n| (n.host.as_str(), n.port)).collect();
        addresses.sort();
        addresses.dedup();
        assert_eq!(addresses.len(), 3, "{what}: {:?}", map.masters());
        assert!(map.masters().iter().all(|n| n.host == "127.0.0.1" && n.id.is_some()), "{what}");
    }

    fn slot_map(load: &dyn Fn(&str) -> Value, what: &str) -> SlotMap {
        let map = SlotMap::from_slots(&load("cluster-slots")).unwrap_or_else(|e| panic!("{what}: {e:?}"));
        check_full(&map, &format!("{what} SLOTS"));
        map
    }

    #[test]
    fn slot_maps_from_slots_and_shards() {
        each_of(&FLAVORS, |what, load| {
            let slots = slot_map(load, what);
            match load("cluster-shards") {
                // Redis 6.2 has no CLUSTER SHARDS.
                Value::Error(text) => {
                    assert_eq!(what, "redis-6.2");
                    assert!(text.starts_with(b"ERR Unknown subcommand"), "{what}");
                }
                reply => {
                    let shards = SlotMap::from_shards(&reply).unwrap_or_else(|e| panic!("{what}: {e:?}"));
                    check_full(&shards, &format!("{what} SHARDS"));
                    // Both replies name the same master for every slot (in any order).
                    for slot in 0..16384 {
                        assert_eq!(slots.owner(slot), shards.owner(slot), "{what} slot {slot}");
                    }
                }
            }
        });
    }

    /// The public reader, on the raw RESP2 bytes: nothing until whole, then the same map;
    /// an error reply is the server's text.
    #[test]
    fn read_slot_map_from_raw_replies() {
        for flavor in FLAVORS {
            let raw = |name: &str| {
                let path =
                    format!("{}/tests/fixtures/{flavor}/resp2/{name}.resp", env!("CARGO_MANIFEST_DIR"));
                std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
            };
            let slots = raw("cluster-slots");
            for cut in [0, 1, slots.len() / 2, slots.len() - 1] {
                assert_eq!(read_slot_map(&slots[..cut]), Ok(None), "{flavor} cut at {cut}");
            }
            let map = read_slot_map(&slots).unwrap().unwrap();
            check_full(&map, flavor);
            match read_slot_map(&raw("cluster-shards")) {
                Err(SlotMapError::Server(text)) => {
                    assert!(flavor == "redis-6.2" && text.starts_with("ERR"), "{text}")
                }
                Ok(Some(shards)) => assert_eq!(shards.masters().len(), 3, "{flavor}"),
                other => panic!("{flavor}: {other:?}"),
            }
            assert!(matches!(read_slot_map(b"+OK\r\n"), Err(SlotMapError::Invalid(_))));
        }
    }

    #[test]
    fn redirects_and_cross_slot() {
        each_of(&FLAVORS, |what, load| {
            let map = slot_map(load, what);
            let error = |name: &str| match load(name) {
                Value::Error(text) => text,
                other => panic!("{what} {name}: {other:?}"),
            };
            let Value::Str(asked) = load("cluster-myid") else { panic!("{what}: cluster-myid") };
            let asked = std::str::from_utf8(&asked).unwrap();

            // MOVED names the slot's master in the map.
            let Some(ClusterError::Redirect(moved)) = classify(&error("moved")) else {
                panic!("{what}: moved")
            };
            assert_eq!(moved.kind, RedirectKind::Moved, "{what}");
            let owner = map.owner(moved.slot).unwrap();
            assert_eq!((owner.host.as_str(), owner.port), (moved.host.as_str(), moved.port), "{what}");
            assert_ne!(owner.id.as_deref(), Some(asked), "{what}: MOVED away from the asked node");

            // ASK: the asked node still owns the migrating slot and sends to another master.
            let Some(ClusterError::Redirect(ask)) = classify(&error("ask")) else { panic!("{what}: ask") };
            assert_eq!(ask.kind, RedirectKind::Ask, "{what}");
            assert_eq!(map.owner(ask.slot).unwrap().id.as_deref(), Some(asked), "{what}");
            let target =
                map.masters().iter().find(|n| (n.host.as_str(), n.port) == (ask.host.as_str(), ask.port));
            assert!(target.is_some_and(|n| n.id.as_deref() != Some(asked)), "{what}: {ask:?}");
            assert_eq!(parse_redirect(&error("ask")), Some(ask), "{what}");

            assert_eq!(classify(&error("crossslot")), Some(ClusterError::CrossSlot), "{what}");
        });
    }
}
