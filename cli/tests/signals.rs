//! `pelican consume` at a stop and what it writes: the binary against real servers.

mod support;

use pelican_tests::server::{Flavor, Server};
use support::{wait_until, Pelican};

fn url(server: &Server) -> String {
    format!("redis://{}", server.addr())
}

/// `consume` arguments for stream `s`, group `g`, consumer `c`, creating the group at 0.
fn consume<'a>(url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    consume_as(url, "g", extra)
}

/// [`consume`] in group `group`.
fn consume_as<'a>(url: &'a str, group: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "consume",
        "--url",
        url,
        "--stream",
        "s",
        "--group",
        group,
        "--consumer",
        "c",
        "--create-group",
        "0",
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn the_summary_counts_reconnects() {
    let server = Server::start(Flavor::Valkey81);
    let mut admin = server.admin();
    admin.xadd_n("s", 1, 4);
    let url = url(&server);
    let mut p = Pelican::spawn(&consume(&url, &["--progress"]));
    p.line();
    let clients = |admin: &mut pelican_tests::admin::Admin| {
        let list = admin.call(&["CLIENT", "LIST", "TYPE", "normal"]).as_text().unwrap_or_default();
        list.lines().count()
    };
    wait_until("pelican to be connected", || clients(&mut admin) == 2);
    // Every normal client but the admin's own connection (SKIPME yes): pelican's.
    assert_eq!(admin.call(&["CLIENT", "KILL", "TYPE", "normal"]).as_int(), Some(1));
    wait_until("pelican to reconnect", || clients(&mut admin) == 2);
    admin.xadd_n("s", 1, 4);
    p.line();
    wait_until("XPENDING 0", || admin.xpending_count("s", "g") == 0);
    p.stop();
    let stderr = p.stderr();
    let summary = stderr.lines().find(|l| l.contains(" handled in ")).unwrap_or_default();
    assert!(summary.contains(", 2 acked, 1 reconnect, "), "{stderr}");
}
