//! The replay script (`pelican::dead_letter::REPLAY_SCRIPT`) on the simulator and on each
//! real server, command for command: the same answers (ids it makes masked: the clocks
//! differ) and the same streams after.

mod common;

use common::{encode, sim_options, Remote};
use pelican_sim::Sim;
use pelican_tests::server::{Flavor, Server};

/// Ids made from the clock (ten digits of ms or more) as `<id>`: the server's and the
/// simulator's clocks differ.
fn masked(reply: &[u8]) -> String {
    let text = String::from_utf8_lossy(reply).into_owned();
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let bulk = &rest[at..];
        let (head, body) = bulk.split_once("\r\n").unwrap_or((bulk, ""));
        let value = body.split("\r\n").next().unwrap_or("");
        let is_id = value.split_once('-').is_some_and(|(ms, seq)| {
            ms.len() >= 10
                && ms.bytes().all(|b| b.is_ascii_digit())
                && seq.bytes().all(|b| b.is_ascii_digit())
        });
        match is_id {
            true => {
                out.push_str("<id>");
                rest = &body[value.len()..];
            }
            false => {
                out.push_str(head);
                rest = &bulk[head.len()..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `EVAL REPLAY_SCRIPT 2 dead origin id reason`.
fn replay(dead: &str, origin: &str, id: &str, reason: &str) -> Vec<String> {
    pelican::dead_letter::replay_command(
        dead.as_bytes(),
        origin.as_bytes(),
        id.as_bytes(),
        Some(reason.as_bytes()),
    )
    .iter()
    .map(|a| String::from_utf8_lossy(a).into_owned())
    .collect()
}

fn words(line: &str) -> Vec<String> {
    line.split(' ').map(str::to_string).collect()
}

#[test]
fn the_replay_script_runs_on_the_simulator_as_on_every_server() {
    let dl = "{o}:dead";
    let script: Vec<Vec<String>> = vec![
        words("FLUSHALL"),
        words(&format!(
            "XADD {dl} 1-0 f v pelican-stream {{o}} pelican-group g pelican-consumer c pelican-id 5-0 \
             pelican-deliveries 3 pelican-reason verdict"
        )),
        // Replayed before, moved again: the earlier pelican-replay-of is not copied.
        words(&format!(
            "XADD {dl} 2-0 a b pelican-replay-of 1-1 pelican-stream {{o}} pelican-id 6-0 pelican-reason max-deliveries"
        )),
        words(&format!("XADD {dl} 3-0 x y")),
        words(&format!("XADD {dl} 4-0 x y pelican-stream other pelican-id 7-0")),
        replay(dl, "{o}", "1-0", "max-deliveries"),
        replay(dl, "{o}", "1-0", ""),
        replay(dl, "{o}", "1-0", ""),
        replay(dl, "{o}", "2-0", "max-deliveries"),
        replay(dl, "{o}", "3-0", ""),
        replay(dl, "{o}", "4-0", ""),
        replay(dl, "{o}", "9-0", ""),
        words(&format!("XRANGE {dl} - +")),
        words("XRANGE {o} - +"),
        words("XLEN {o}"),
    ];
    for flavor in Flavor::ALL {
        let server = Server::start(flavor);
        let mut remote = Remote::connect(&server);
        let mut sim = Sim::new(sim_options(flavor));
        let c = sim.connect();
        sim.advance_to(1_000_000_000_000);
        for command in &script {
            let args: Vec<&[u8]> = command.iter().map(|a| a.as_bytes()).collect();
            let bytes = encode(&args);
            let want = masked(&remote.call(&bytes));
            sim.input(c, &bytes);
            let got = masked(&sim.output(c));
            let shown =
                if command[0] == "EVAL" { format!("replay {}", command[5]) } else { command.join(" ") };
            assert_eq!(got, want, "{flavor}: {shown}");
            if shown == "XRANGE {o} - +" {
                // Two entries, their own fields and the id they had, no origin.
                let fields = "$1\r\nf\r\n$1\r\nv\r\n$17\r\npelican-replay-of\r\n$3\r\n5-0\r\n";
                assert!(want.starts_with("*2\r\n") && want.contains(fields), "{flavor}: {want:?}");
                assert!(!want.contains("1-1") && !want.contains("pelican-stream"), "{flavor}: {want:?}");
            }
        }
        // A key of another type: refused by both, the dead letter left in place.
        let bad = encode(&[b"SET", b"str", b"v"]);
        let _ = (remote.call(&bad), sim.input(c, &bad), sim.output(c));
        let add = words(&format!("XADD {dl} 8-0 f v pelican-stream str pelican-id 8-1"));
        let add = encode(&add.iter().map(|a| a.as_bytes()).collect::<Vec<_>>());
        let _ = (remote.call(&add), sim.input(c, &add), sim.output(c));
        let bad = replay(dl, "str", "8-0", "");
        let bad = encode(&bad.iter().map(|a| a.as_bytes()).collect::<Vec<_>>());
        let (want, got) = (remote.call(&bad), {
            sim.input(c, &bad);
            sim.output(c)
        });
        assert!(want.starts_with(b"-") && got.starts_with(b"-"), "{flavor}: {want:?} {got:?}");
        let len = encode(&[b"XLEN", dl.as_bytes()]);
        let want = remote.call(&len);
        sim.input(c, &len);
        assert_eq!((sim.output(c), want), (b":3\r\n".to_vec(), b":3\r\n".to_vec()), "{flavor}");
    }
}
