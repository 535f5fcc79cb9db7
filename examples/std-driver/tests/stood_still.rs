//! A consumer whose process stands still (a paused container, a stopped process) right after
//! it wrote an ack and its next parked read, on every real server: an entry the server
//! delivered to that read meanwhile, and a peer reclaimed once it was idle `min_idle`, is not
//! handed out when the process wakes and reads both late replies at once. It is renewed
//! first, the renewal finds it the peer's, and it is told as lost: handled once, by the peer.
//!
//! The driver here is the std driver's loop cut to what the story needs, with the pause put
//! exactly where it must fall (between writing and reading), which a signal to a whole
//! process could not.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use pelican::{Config, Consumer, Event, Notice, Verdict};
use pelican_tests::server::{Flavor, Server};

const MIN_IDLE: Duration = Duration::from_millis(2000);

fn story(flavor: Flavor) {
    let server = Server::start(flavor);
    let mut admin = server.admin();
    admin.call(&["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]);
    let first = admin.xadd("s", &[("n", "1")]);
    // Reads of 10 that bring fewer say the stream is caught up: after its ack the consumer
    // parks, in the same write (no read ahead in between).
    let config = Config::new("s", "g", "a")
        .count(10)
        .start_count(10)
        .beat(Duration::from_millis(1000))
        .min_idle(MIN_IDLE)
        .no_client_name()
        .leave_on_stop(false);
    let mut consumer = Consumer::new(config).expect("a consumer");
    let mut socket = TcpStream::connect(server.addr()).expect("a connection");
    socket.set_nodelay(true).unwrap();
    consumer.on_connected(Instant::now());
    let (mut handled, mut lost, mut stood_still) = (Vec::new(), Vec::new(), None);
    let mut last_write = String::new();
    let mut buf = vec![0u8; 64 * 1024];
    let end = Instant::now() + Duration::from_secs(20);
    while Instant::now() < end && lost.is_empty() && handled.len() < 2 {
        if let Some(bytes) = consumer.poll_transmit() {
            let n = bytes.len();
            last_write = String::from_utf8_lossy(bytes).into_owned();
            socket.write_all(bytes).expect("written");
            consumer.advance_transmit(n);
        }
        while let Some(event) = consumer.poll_event() {
            match event {
                Event::Entry(entry) => {
                    handled.push(String::from_utf8_lossy(entry.id()).into_owned());
                    consumer.settle_entry(&entry, Verdict::Ack, Instant::now());
                }
                Event::Notice(Notice::LeaseLost { id, .. }) => {
                    lost.push(String::from_utf8_lossy(&id).into_owned())
                }
                _ => {}
            }
        }
        if consumer.poll_transmit().is_some() {
            continue;
        }
        if handled == [first.clone()] && stood_still.is_none() {
            // The ack and the next parked read are written: the process stands still now.
            let (ack, park) = (last_write.find("XACK"), last_write.find("BLOCK"));
            assert!(ack.is_some() && ack < park, "{flavor:?}: the ack, then the park: {last_write:?}");
            thread::sleep(Duration::from_millis(100));
            let second = admin.xadd("s", &[("n", "2")]);
            // Delivered to the parked read at once; a peer takes it once idle `min_idle`.
            thread::sleep(MIN_IDLE + Duration::from_millis(200));
            let claimed = admin.call(&["XAUTOCLAIM", "s", "g", "b", "2000", "0-0"]);
            assert!(format!("{claimed:?}").contains(&second), "{flavor:?}: the peer took it: {claimed:?}");
            thread::sleep(Duration::from_millis(200));
            stood_still = Some(second);
        }
        let wait =
            consumer.timeout_from(Instant::now()).unwrap_or(Duration::MAX).min(Duration::from_millis(100));
        socket.set_read_timeout(Some(wait.max(Duration::from_millis(1)))).unwrap();
        match socket.read(&mut buf) {
            Ok(n) if n > 0 => consumer.handle_input(&buf[..n], Instant::now()).expect("a good reply"),
            Ok(_) => panic!("{flavor:?}: the server closed the connection"),
            Err(_) => consumer.handle_timeout(Instant::now()).expect("no failure"),
        }
    }
    let second = stood_still.expect("it stood still");
    assert_eq!(handled, [first], "{flavor:?}: the peer's entry was not handed out again");
    assert_eq!(lost, [second], "{flavor:?}: told lost, to the peer");
    let held = admin.xpending_consumer("s", "g", "b");
    assert_eq!(held.len(), 1, "{flavor:?}: still the peer's: {held:?}");
}

#[test]
fn a_process_that_stood_still_behind_an_ack_hands_out_nothing_a_peer_took() {
    let runs: Vec<_> = Flavor::ALL.into_iter().map(|f| (f, thread::spawn(move || story(f)))).collect();
    let failed: Vec<Flavor> = runs.into_iter().filter_map(|(f, t)| t.join().is_err().then_some(f)).collect();
    assert!(failed.is_empty(), "failed on {failed:?}");
}
