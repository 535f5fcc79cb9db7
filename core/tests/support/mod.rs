//! A rig that drives a [`Consumer`] through scripted conversations whose replies are the
//! bytes captured from real servers (`tests/fixtures`, see `scripts/capture-fixtures`).
#![allow(dead_code)]

use std::time::{Duration, Instant};

use pelican::{Config, Consumer, Entry, Error, Event, Notice, Protocol, Verdict};

pub const FLAVORS: [&str; 3] = ["redis-6.2", "redis-7.0", "valkey-8.1"];
pub const PROTOCOLS: [Protocol; 2] = [Protocol::Resp2, Protocol::Resp3];

/// Runs `story` once for each captured server flavor and protocol.
pub fn each(mut story: impl FnMut(&'static str, Protocol)) {
    for flavor in FLAVORS {
        for protocol in PROTOCOLS {
            story(flavor, protocol);
        }
    }
}

pub fn proto_dir(p: Protocol) -> &'static str {
    match p {
        Protocol::Resp3 => "resp3",
        _ => "resp2",
    }
}

pub fn fixture(flavor: &str, protocol: Protocol, name: &str) -> Vec<u8> {
    let path =
        format!("{}/tests/fixtures/{flavor}/{}/{name}.resp", env!("CARGO_MANIFEST_DIR"), proto_dir(protocol));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

mod origin;
pub use origin::origin;

/// Splits written bytes into commands (arrays of bulk strings), as strings.
pub fn parse_commands(mut bytes: &[u8]) -> Vec<Vec<String>> {
    fn line<'a>(b: &mut &'a [u8]) -> &'a [u8] {
        let i = b.windows(2).position(|w| w == b"\r\n").expect("CRLF");
        let l = &b[..i];
        *b = &b[i + 2..];
        l
    }
    let num = |l: &[u8]| std::str::from_utf8(&l[1..]).unwrap().parse::<usize>().unwrap();
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let h = line(&mut bytes);
        assert_eq!(h[0], b'*', "commands are arrays");
        let mut args = Vec::new();
        for _ in 0..num(h) {
            let h = line(&mut bytes);
            assert_eq!(h[0], b'$', "arguments are bulk strings");
            let n = num(h);
            args.push(String::from_utf8_lossy(&bytes[..n]).into_owned());
            assert_eq!(&bytes[n..n + 2], b"\r\n");
            bytes = &bytes[n + 2..];
        }
        out.push(args);
    }
    out
}

pub fn cmd(s: &str) -> Vec<String> {
    s.split(' ').map(str::to_string).collect()
}

pub fn cmds(list: &[&str]) -> Vec<Vec<String>> {
    list.iter().map(|s| cmd(s)).collect()
}

pub struct Rig {
    pub consumer: Consumer,
    pub now: Instant,
    pub flavor: &'static str,
    pub protocol: Protocol,
    /// Connected, and no reply read since: the first brings `Notice::Connected`.
    pub fresh: bool,
}

impl Rig {
    pub fn new(config: Config, flavor: &'static str) -> Rig {
        let protocol = config.protocol;
        Rig {
            consumer: Consumer::new(config).expect("valid config"),
            now: origin(),
            flavor,
            protocol,
            fresh: false,
        }
    }

    /// Connects, taking the notice of the connection lost before, if any.
    pub fn connect(&mut self) {
        assert!(self.consumer.connect_due(self.now));
        self.consumer.on_connected(self.now);
        self.skip_link_notices();
        self.fresh = true;
    }

    /// Takes the connection notices waiting (`Connected` comes at the first reply).
    pub fn skip_link_notices(&mut self) {
        while let Some(event) = self.consumer.poll_event() {
            match event {
                Event::Notice(
                    Notice::Connected { .. } | Notice::ConnectionLost { .. } | Notice::ConnectFailed { .. },
                ) => {}
                other => panic!("unexpected {other:?} at a connect"),
            }
        }
    }

    /// Connects and answers the RESP3 `HELLO` or RESP2's `HELLO` without arguments that asks
    /// the server's version and role (captured replies: a master), which opens the write;
    /// returns the other commands written, those of the handshake and those that follow
    /// once the node is known to be a master.
    pub fn start(&mut self) -> Vec<Vec<String>> {
        self.connect();
        let mut sent = self.sent();
        // With `ack_wait`, the master's replicas are counted last (`WAIT 0 0`): one, as the
        // captured `wait_1` says.
        let count = sent.last().filter(|c| c[0] == "WAIT" || c[0] == "WAITAOF").cloned();
        if count.is_some() {
            sent.pop();
        }
        match self.protocol {
            Protocol::Resp3 => {
                assert_eq!(sent.remove(0)[..2], ["HELLO", "3"]);
                let mut replies = self.fixture("hello");
                for _select in &sent {
                    replies.extend(self.fixture("select"));
                }
                self.raw(&replies).expect("HELLO reply");
            }
            _ => {
                assert_eq!(sent.pop(), Some(cmd("HELLO")), "the handshake ends with HELLO");
                let mut replies = Vec::new();
                for command in &sent {
                    let ok = if command[0] == "SELECT" { "select" } else { "setname" };
                    replies.extend(self.fixture(ok));
                }
                replies.extend(self.fixture("hello_info"));
                self.raw(&replies).expect("HELLO reply");
            }
        }
        let mut opening = count.into_iter().collect::<Vec<_>>();
        opening.extend(self.sent());
        sent.extend(opening);
        sent
    }

    /// Everything written since the last call, as one write, parsed.
    pub fn sent(&mut self) -> Vec<Vec<String>> {
        let Some(bytes) = self.consumer.poll_transmit() else { return Vec::new() };
        let bytes = bytes.to_vec();
        self.consumer.advance_transmit(bytes.len());
        parse_commands(&bytes)
    }

    pub fn fixture(&self, name: &str) -> Vec<u8> {
        fixture(self.flavor, self.protocol, name)
    }

    /// Feeds a captured reply.
    pub fn reply(&mut self, name: &str) -> Result<(), Error> {
        let bytes = self.fixture(name);
        self.raw(&bytes)
    }

    /// Feeds a captured drain page and the captured `XPENDING` reply that goes with it.
    pub fn drain_reply(&mut self, name: &str) -> Result<(), Error> {
        let counts = match name {
            "read_pending_empty" => "pending_counts_empty",
            "read_pending_page" => "pending_counts_page",
            "read_pending_deleted" => "pending_counts_deleted",
            "read_pending_after_claim" => "pending_counts_after_claim",
            other => panic!("no counts fixture for {other}"),
        };
        let mut bytes = self.fixture(name);
        bytes.extend(self.fixture(counts));
        self.raw(&bytes)
    }

    /// Feeds bytes read; the `Connected` notice the first reply brings is checked and taken.
    pub fn raw(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let outcome = self.consumer.handle_input(bytes, self.now);
        if self.fresh && outcome.is_err() {
            self.fresh = false; // the notices of the failure are the test's to read
        } else if self.fresh {
            match self.consumer.poll_event() {
                None => {} // no whole reply yet
                Some(Event::Notice(Notice::Connected { .. })) => self.fresh = false,
                Some(other) => panic!("the first reply's first event is {other:?}, not Connected"),
            }
        }
        outcome
    }

    pub fn advance(&mut self, d: Duration) {
        self.now += d;
    }

    /// The next event, which must be a notice.
    pub fn notice(&mut self) -> Notice {
        match self.consumer.poll_event() {
            Some(Event::Notice(n)) => n,
            other => panic!("expected a notice, got {other:?}"),
        }
    }

    /// The next event, which must be an entry.
    pub fn entry(&mut self) -> Entry {
        match self.consumer.poll_event() {
            Some(Event::Entry(e)) => e,
            other => panic!("expected an entry, got {other:?}"),
        }
    }

    /// Takes every entry the consumer hands out, one at a time, settling each with `verdict`.
    pub fn handle_all(&mut self, verdict: Verdict) -> Vec<Entry> {
        let mut seen = Vec::new();
        while let Some(event) = self.consumer.poll_event() {
            let Event::Entry(e) = event else { panic!("unexpected {event:?}") };
            assert_eq!(self.consumer.poll_event(), None, "a second entry while one is in hand");
            self.consumer.settle(e.id(), verdict.clone(), self.now);
            seen.push(e);
        }
        seen
    }

    /// Settles the one entry in hand.
    pub fn settle(&mut self, verdict: Verdict) {
        let ids: Vec<Vec<u8>> = self.consumer.in_hand().map(<[u8]>::to_vec).collect();
        assert!(ids.len() <= 1, "settle() with {} entries in hand", ids.len());
        if let Some(id) = ids.first() {
            assert!(self.consumer.settle(id, verdict, self.now));
        }
    }

    /// Settles the entry in hand with this id.
    pub fn settle_id(&mut self, id: &[u8], verdict: Verdict) {
        assert!(self.consumer.settle(id, verdict, self.now), "{} not in hand", String::from_utf8_lossy(id));
    }
}

pub fn ids(entries: &[Entry]) -> Vec<String> {
    entries.iter().map(|e| String::from_utf8_lossy(e.id()).into_owned()).collect()
}
