//! `locate` against real clusters of each server: the master it names for each key is the
//! one the cluster says serves it; a server that is not a cluster node is an error.

use std::thread;
use std::time::Duration;

use pelican_tests::cluster::Cluster;
use pelican_tests::server::{Flavor, Server};

#[test]
fn locate_names_each_keys_master() {
    let threads: Vec<_> = Flavor::ALL
        .into_iter()
        .map(|flavor| {
            thread::spawn(move || {
                let cluster = Cluster::start(flavor);
                let keys: Vec<String> = (0..30).map(|i| format!("orders-{i}")).collect();
                let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
                // Asked of a replica, which serves nothing itself.
                let seed = cluster.replicas()[0];
                let found = pelican_mio::locate(seed, &refs, Duration::from_secs(5)).expect("a slot map");
                for (key, at) in keys.iter().zip(found) {
                    assert_eq!(at, Some(cluster.owner_of(key)), "{flavor:?} {key}");
                }
                let standalone = Server::start(flavor);
                let err = pelican_mio::locate(standalone.addr(), &refs, Duration::from_secs(5)).unwrap_err();
                assert!(err.to_string().contains("cluster support disabled"), "{flavor:?}: {err}");
            })
        })
        .collect();
    for t in threads {
        t.join().expect("every server");
    }
}
