//! `pelican demo`: the recovery tour, as a timeline. Without `--url` it runs against the
//! embedded simulator (`pelican-sim`, on a loopback port), so it works on a fresh machine;
//! with `--url` it runs the same tour against a real server, on keys of its own.
//!
//! Workers are real `pelican-mio` drivers. A crash is a handler that panics mid-batch: the
//! worker's connection drops with its entry in hand and its earned acks unsent, as when a
//! process dies.

use std::net::TcpListener;
use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token};
use pelican::oneshot::{ClientInfo, GroupInfo, PendingEntry, PendingSummary, Reply, Request, Xadd};
use pelican::{Config, Consumer, Entry, GroupGone, Source, Stats, Verdict};
use pelican_mio::{DriveError, Driver, Session, Status};

use crate::failure::Failure;
use crate::help::TEMPLATE;
use crate::server::{tls_message, Server, ServerArgs};

const USAGE: &str = "pelican demo [--url URL [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]]";

const ABOUT: &str = "\
The recovery tour, as a timeline: a cold start; a worker crashing mid-batch and restarting
under its name (its backlog back at once, no idle wait); a worker dying for good and a peer
reclaiming its entries after min_idle; a pending entry deleted under a worker; a clean stop.
It ends by checking that nothing was lost.

Without --url it starts the embedded simulator on a loopback port (nothing to install).
With --url it runs against that server, on keys of its own (pelican-demo:<pid>), which it
deletes at the end: redis://[user[:password]@]host[:port][/db], or rediss://… over TLS,
trusting the CA certificates in --tls-ca FILE (PEM; else the system's root certificates),
presenting --tls-cert FILE and --tls-key FILE (PEM) to a server that requires a client
certificate. $PELICAN_URL is not read: without --url, the tour is the simulator's.";

const AFTER: &str = "Exit status: 0 nothing lost, 1 a step failed (the message says which), 2 bad usage.";

/// `pelican demo`'s flags.
#[derive(clap::Args, Debug)]
#[command(
    override_usage = USAGE,
    before_help = ABOUT,
    after_help = AFTER,
    help_template = TEMPLATE,
    // Neither $PELICAN_URL nor a default: without --url, the tour runs on the simulator.
    mut_arg("url", |url| url.env(None).default_value(None).help(
        "run the tour on this server: redis://[user[:password]@]host[:port][/db],\n\
         or rediss://… for TLS (default: the embedded simulator)"
    ))
)]
pub struct Args {
    #[command(flatten)]
    pub(crate) server: ServerArgs,
}

const GROUP: &str = "demo";
/// The most entries a worker's read asks for (`COUNT`), from its first read on.
const BATCH: u32 = 5;
/// No step of the tour may take longer than this.
const STEP_LIMIT: Duration = Duration::from_secs(15);

/// Runs the tour, on the simulator or the server `--url` names.
pub fn main(args: Args) -> Result<(), Failure> {
    let flags = args.server;
    let (server, stream, _sim) = if flags.has_url() {
        (flags.to_server()?, format!("pelican-demo:{}", std::process::id()), None)
    } else if let Some(flag) = flags.tls_flag() {
        return Err(Failure::Usage(format!("{flag} needs --url rediss://… (the simulator has no TLS)")));
    } else {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| Failure::Failed(format!("bind: {e}")))?;
        let sim = pelican_sim::serve(listener, pelican_sim::SimOptions::valkey81());
        (Server::plain(sim.addr()), "orders".to_string(), Some(sim))
    };
    // The URL, passwords hidden.
    let shown = server.target.to_string();
    let mut admin = server.connect("pelican:demo").map_err(Failure::Failed)?;
    // A write of no consequence (the key is the tour's own, new): a replica, or a server
    // refusing writes, says so now, where the workers would retry until a step timed out.
    // In a cluster, it follows the stream to the node serving it, where the pipelined XADDs
    // of the tour then go (a pipeline does not follow redirects).
    admin
        .call(&Request::del(stream.as_bytes()))
        .map_err(|e| fail(&format!("{shown} refused a write: {}", server.said(e))))?;
    let where_ = if _sim.is_some() { "the embedded simulator".to_string() } else { shown };
    let mut tour = Tour {
        server,
        stream,
        admin,
        start: Instant::now(),
        added: Vec::new(),
        handlings: Vec::new(),
        deleted: Vec::new(),
    };
    println!("pelican demo on {where_}: stream {}, group {GROUP}", tour.stream);
    println!(
        "workers read batches of up to {BATCH} entries (COUNT {BATCH}), the next read sent ahead while entries \
         keep coming,\nand handle one entry at a time, acking it a few ms later or with the next read\n"
    );
    let result = tour.run();
    if _sim.is_none() {
        let _ = tour.admin.call(&Request::del(tour.stream.as_bytes()));
    }
    result
}

struct Tour {
    server: Server,
    stream: String,
    admin: Session,
    start: Instant,
    added: Vec<String>,
    /// Every entry handled and acked by a worker done with, once per handling.
    handlings: Vec<String>,
    deleted: Vec<String>,
}

impl Tour {
    fn say(&self, what: &str) {
        println!("{:>7.3}s  {what}", self.start.elapsed().as_secs_f64());
    }

    fn run(&mut self) -> Result<(), Failure> {
        // 1. Cold start.
        let mut alice = self.worker("alice", Duration::from_secs(30));
        alice.until(Worker::caught_up, |_| Verdict::Ack)?;
        self.say("cold start: alice joins (XGROUP CREATE … MKSTREAM), drains its empty pending list, parks");
        let batch = self.add(5)?;
        // Its acks confirmed: nothing of this batch is left pending.
        alice.until(|w| w.consumer().stats().acked >= batch.len() as u64, |_| Verdict::Ack)?;
        alice.until(Worker::caught_up, |_| Verdict::Ack)?;
        self.say(&format!(
            "{} new entries → alice handled {} ({})",
            batch.len(),
            alice.handled_of(&batch),
            alice.sources()
        ));

        // 2. A crash mid-batch, and a restart under the same name.
        let batch = self.add(10)?;
        let before = alice.seen.len();
        let crashed = alice.crash_after(before + 3)?;
        let handled = alice.handled_of(&batch);
        self.finish(alice)?;
        // What the server holds once the dead connection is gone: every command it sent was
        // served or dropped by then.
        let delivered = self.delivered(&batch)?;
        let held = self.admin_pending_ids("alice")?.iter().filter(|id| batch.contains(id)).count();
        let acked = delivered.saturating_sub(held);
        self.say(&format!(
            "{n} new entries; alice handles {handled} and crashes mid-batch on the next, {crashed}: of the {n}, \
             the server had delivered her {delivered} and counted {}, so {} stay pending on alice ({lost} handled, \
             their acks lost with her)",
            plural(acked, "ack", "acks"),
            held,
            n = batch.len(),
            lost = handled.saturating_sub(acked)
        ));
        let t = Instant::now();
        let mut alice = self.worker("alice", Duration::from_secs(30));
        alice.until(|w| w.seen.len() >= held, |_| Verdict::Ack)?;
        self.say(&format!(
            "alice restarts under its name: its {} are back in {} ms, from its pending list, no idle wait",
            plural(alice.count(Source::Pending), "pending entry", "pending entries"),
            t.elapsed().as_millis()
        ));
        alice.until(Worker::caught_up, |_| Verdict::Ack)?;
        alice.stop()?;
        let fresh = alice.count(Source::New);
        self.finish(alice)?;
        let fresh = match fresh {
            0 => String::new(),
            n => format!(" with the {n} never delivered (new)"),
        };
        self.say(&format!(
            "alice catches up{fresh}: all {} of the {} handled, {} of them twice",
            self.handled_of(&batch),
            batch.len(),
            self.repeats_of(&batch)
        ));

        // 3. A worker dies for good; a peer reclaims its entries after min_idle.
        let min_idle = Duration::from_millis(1500);
        let batch = self.add(4)?;
        let mut bob = self.worker("bob", min_idle);
        bob.crash_after(0)?;
        self.finish(bob)?;
        let held = self.admin_pending_ids("bob")?.len();
        self.say(&format!(
            "{} new entries; bob reads {held} of them and dies for good, holding them",
            batch.len()
        ));
        let t = Instant::now();
        let mut carol = self.worker("carol", min_idle);
        carol.until(|w| w.count(Source::Claimed) >= held, |_| Verdict::Ack)?;
        self.say(&format!(
            "carol reclaims bob's {} once idle past min_idle {} ms (XAUTOCLAIM), {} ms after bob died",
            plural(carol.count(Source::Claimed), "entry", "entries"),
            min_idle.as_millis(),
            t.elapsed().as_millis()
        ));
        carol.until(Worker::caught_up, |_| Verdict::Ack)?;
        carol.stop()?;
        self.tell_new(&carol, "bob never read");
        self.finish(carol)?;

        // 4. A pending entry deleted under a worker.
        let batch = self.add(3)?;
        let mut dave = self.worker("dave", Duration::from_secs(30));
        dave.crash_after(0)?;
        self.finish(dave)?;
        let held = self.admin_pending_ids("dave")?;
        let victim = held.first().cloned().ok_or_else(|| fail("dave holds nothing"))?;
        self.call(&Request::xdel(self.stream.as_bytes(), victim.as_bytes()))?;
        self.deleted.push(victim.clone());
        self.say(&format!(
            "{} new entries; dave reads {} and crashes holding them; {victim} is deleted (XDEL) while pending",
            batch.len(),
            held.len()
        ));
        let mut dave = self.worker("dave", Duration::from_secs(30));
        dave.until(
            |w| w.seen.len() + 1 >= held.len() && w.consumer().stats().deleted_seen >= 1,
            |_| Verdict::Ack,
        )?;
        self.say(&format!(
            "dave restarts: {} back from its pending list; the deleted one comes back as [id, nil] and is \
             acked away, never handed out",
            plural(dave.count(Source::Pending), "entry", "entries")
        ));

        // 5. A clean stop while parked.
        dave.until(Worker::caught_up, |_| Verdict::Ack)?;
        self.tell_new(&dave, "it never read");
        let t = Instant::now();
        let stats = dave.stop()?;
        self.say(&format!(
            "dave stops while parked: {} µs, its acks confirmed ({} acked: {} handled, {} deleted)",
            t.elapsed().as_micros(),
            stats.acked,
            dave.acked.len(),
            stats.deleted_seen
        ));
        self.finish(dave)?;

        // The check.
        let summary = self.call(&Request::xpending(self.stream.as_bytes(), GROUP.as_bytes()))?;
        let pending = PendingSummary::read(&summary).map_or(-1, |s| s.count as i64);
        let handled = self.handled_of(&self.added);
        let lost: Vec<String> = self
            .added
            .iter()
            .filter(|id| !self.handlings.contains(*id) && !self.deleted.contains(id))
            .cloned()
            .collect();
        println!();
        if lost.is_empty() && pending == 0 {
            self.say(&format!(
                "nothing lost: {} entries added = {handled} handled and acked + {} deleted while pending; {} \
                 handlings, {} of them repeats (handled before a crash, the ack lost); {pending} pending",
                self.added.len(),
                self.deleted.len(),
                self.handlings.len(),
                self.handlings.len() - handled,
            ));
            Ok(())
        } else {
            Err(fail(&format!("lost {lost:?}, {pending} still pending")))
        }
    }

    fn worker(&self, name: &str, min_idle: Duration) -> Worker {
        let config = self.server.target.apply(
            Config::new(&self.stream, GROUP, name)
                .count(BATCH)
                .start_count(BATCH)
                .beat(Duration::from_millis(200))
                .min_idle(min_idle)
                .create_group("0")
                .on_group_gone(GroupGone::Recreate),
        );
        let consumer = Consumer::new(config).expect("the demo's settings are valid");
        let mut driver = Driver::new(self.server.endpoint().clone(), consumer, Token(0));
        if let Some((tls, host)) = self.server.tls_for() {
            driver = driver.tls(tls, host);
        }
        Worker::new(name, driver)
    }

    /// A worker done with (stopped, or crashed): its handlings are counted, and the tour
    /// goes on once the server has seen its connection close (until then, a stopped worker's
    /// parked read could be handed the next entries, and a crashed one's last commands could
    /// still be served).
    fn finish(&mut self, w: Worker) -> Result<(), Failure> {
        self.handlings.extend(w.acked.iter().cloned());
        let name = format!("pelican:{GROUP}:{}", w.name);
        let end = Instant::now() + STEP_LIMIT;
        loop {
            let list = self.call(&Request::client_list())?;
            let clients = ClientInfo::read_all(&list).unwrap_or_default();
            if !clients.iter().any(|c| c.name == name.as_bytes()) {
                return Ok(());
            }
            if Instant::now() > end {
                return Err(fail(&format!("the server still lists {}'s connection", w.name)));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Tells the new entries `w` was handed, if any (the ones of a batch `what`).
    fn tell_new(&self, w: &Worker, what: &str) {
        let fresh = w.count(Source::New);
        if fresh > 0 {
            self.say(&format!("{} then reads the {fresh} {what}, new", w.name));
        }
    }

    /// How many of `ids` were handled (and acked) by any worker done with.
    fn handled_of(&self, ids: &[String]) -> usize {
        ids.iter().filter(|id| self.handlings.contains(id)).count()
    }

    /// How many handlings of `ids` were repeats.
    fn repeats_of(&self, ids: &[String]) -> usize {
        let handlings = self.handlings.iter().filter(|id| ids.contains(id)).count();
        handlings - self.handled_of(ids)
    }

    /// How many of `ids` the group has delivered: those up to its `last-delivered-id`.
    fn delivered(&mut self, ids: &[String]) -> Result<usize, Failure> {
        let groups = self.call(&Request::xinfo_groups(self.stream.as_bytes()))?;
        let last = GroupInfo::read_named(&groups, GROUP.as_bytes())
            .ok()
            .flatten()
            .and_then(|g| g.last_delivered_id)
            .and_then(|id| id_key(&String::from_utf8_lossy(&id)))
            .ok_or_else(|| fail(&format!("XINFO GROUPS answered {groups:?}")))?;
        Ok(ids.iter().filter(|id| id_key(id).is_some_and(|k| k <= last)).count())
    }

    /// Adds `n` entries in one pipelined write, so that they arrive together; their ids.
    fn add(&mut self, n: usize) -> Result<Vec<String>, Failure> {
        let (xadd, mut out) = (Xadd::new(self.stream.as_bytes()), Vec::new());
        for i in 0..n {
            let order = format!("order-{}", self.added.len() + i + 1);
            xadd.encode(&mut out, 0, &[(&b"order"[..], order.as_bytes())]);
        }
        self.admin.send(&[&out]).map_err(|e| Failure::Failed(self.server.said(e)))?;
        let mut ids = Vec::with_capacity(n);
        for _ in 0..n {
            let reply = self.admin.receive().map_err(|e| Failure::Failed(self.server.said(e)))?;
            let id = Xadd::read_id(&reply).ok().flatten();
            let id = id.ok_or_else(|| fail(&format!("XADD answered {reply:?}")))?;
            ids.push(String::from_utf8_lossy(&id).into_owned());
        }
        self.added.extend(ids.iter().cloned());
        Ok(ids)
    }

    fn call(&mut self, request: &Request) -> Result<Reply, Failure> {
        self.admin.call(request).map_err(|e| Failure::Failed(self.server.said(e)))
    }

    fn admin_pending_ids(&mut self, consumer: &str) -> Result<Vec<String>, Failure> {
        let (stream, group) = (self.stream.as_bytes(), GROUP.as_bytes());
        let reply = self.call(&Request::xpending_oldest(stream, group, 100, Some(consumer.as_bytes())))?;
        Ok(PendingEntry::read_all(&reply)
            .unwrap_or_default()
            .iter()
            .map(|e| String::from_utf8_lossy(&e.id).into_owned())
            .collect())
    }
}

/// `n` and the noun, singular or plural.
fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// An entry id as a pair of numbers, to compare.
fn id_key(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

fn fail(what: &str) -> Failure {
    Failure::Failed(format!("demo: {what}"))
}

/// Why a worker's driver gave up; a TLS failure names the flag that fixes it.
fn drive_failure(e: DriveError) -> Failure {
    match e {
        DriveError::Tls(e) => fail(&tls_message(&e)),
        e => fail(&e.to_string()),
    }
}

/// One worker: a `pelican-mio` driver on a poll of its own, stepped by the tour.
struct Worker {
    name: String,
    poll: Poll,
    events: Events,
    driver: Option<Driver>,
    seen: Vec<(String, Source)>,
    acked: Vec<String>,
    parked_since: Option<Instant>,
}

impl Worker {
    fn new(name: &str, driver: Driver) -> Worker {
        Worker {
            name: name.to_string(),
            poll: Poll::new().expect("a mio Poll"),
            events: Events::with_capacity(16),
            driver: Some(driver),
            seen: Vec::new(),
            acked: Vec::new(),
            parked_since: None,
        }
    }

    fn consumer(&self) -> &Consumer {
        self.driver.as_ref().expect("a live worker").consumer()
    }

    /// Caught up: parked on the blocking read for a while, so the read is blocked on the
    /// server, not about to bring back entries that were already there.
    fn caught_up(&self) -> bool {
        self.parked_since.is_some_and(|t| t.elapsed() >= Duration::from_millis(100))
    }

    /// Drives until `done` holds, handling entries with `verdict`.
    fn until(
        &mut self,
        done: impl Fn(&Worker) -> bool,
        mut verdict: impl FnMut(&Entry) -> Verdict,
    ) -> Result<(), Failure> {
        let end = Instant::now() + STEP_LIMIT;
        while !done(self) {
            if Instant::now() > end {
                return Err(fail(&self.stuck()));
            }
            let (seen, acked) = (&mut self.seen, &mut self.acked);
            let driver = self.driver.as_mut().expect("a live worker");
            let status = driver
                .drive(self.poll.registry(), &mut |e: &Entry| {
                    let id = String::from_utf8_lossy(e.id()).into_owned();
                    seen.push((id.clone(), e.source));
                    let v = verdict(e);
                    if v == Verdict::Ack {
                        acked.push(id);
                    }
                    v
                })
                .map_err(drive_failure)?;
            if status == Status::Stopped {
                return Err(fail("a worker stopped unasked"));
            }
            let parked = driver.consumer().is_parked();
            self.parked_since =
                if parked { self.parked_since.or_else(|| Some(Instant::now())) } else { None };
            let timeout = driver.next_deadline().map(|t| t.saturating_duration_since(Instant::now()));
            let timeout = timeout.unwrap_or(Duration::from_millis(50)).min(Duration::from_millis(50));
            self.poll.poll(&mut self.events, Some(timeout)).map_err(|e| fail(&e.to_string()))?;
        }
        Ok(())
    }

    /// What held the worker up, in words, when a step took too long.
    fn stuck(&self) -> String {
        let (name, limit) = (&self.name, STEP_LIMIT.as_secs());
        let Some(driver) = &self.driver else { return format!("{name} is gone") };
        let consumer = driver.consumer();
        let addr = driver.peer().map_or_else(|| driver.endpoint().to_string(), |peer| peer.to_string());
        let (errors, reconnects) = (consumer.stats().errors, consumer.stats().reconnects);
        let why = match (consumer.is_connected(), errors) {
            (false, 0) => format!("it could not connect to {addr}"),
            (true, 0) => format!("connected to {addr}, it handled {} entries, too few", self.seen.len()),
            (_, errors) => format!(
                "{addr} failed or refused its commands {errors} times ({reconnects} reconnects; a replica? a \
                 server still loading?)"
            ),
        };
        format!("{name} got nowhere within {limit} s: {why}")
    }

    /// Handles entries until `n` have been seen, then crashes on the next one: the handler
    /// panics, the worker is dropped with its connection, nothing more is acked. Returns the
    /// id it was handling.
    fn crash_after(&mut self, n: usize) -> Result<String, Failure> {
        let quiet = panic::take_hook();
        panic::set_hook(Box::new(|_| {}));
        let mut count = self.seen.len();
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
            self.until(
                |_| false,
                |_| {
                    count += 1;
                    if count > n {
                        panic!("crash");
                    }
                    Verdict::Ack
                },
            )
        }));
        panic::set_hook(quiet);
        match outcome {
            Err(_) => {
                // The crash: the process is gone, its socket with it.
                self.driver = None;
                let (id, _) = self.seen.last().cloned().ok_or_else(|| fail("crashed before any entry"))?;
                self.acked.retain(|a| *a != id);
                Ok(id)
            }
            Ok(Err(e)) => Err(e),
            Ok(Ok(())) => unreachable!("`until` with a never-true condition only ends by error"),
        }
    }

    /// Stops the worker (its connection closes at once when parked).
    fn stop(&mut self) -> Result<Stats, Failure> {
        let driver = self.driver.as_mut().expect("a live worker");
        driver.stop();
        let end = Instant::now() + STEP_LIMIT;
        loop {
            let status =
                driver.drive(self.poll.registry(), &mut |_: &Entry| Verdict::Retry).map_err(drive_failure)?;
            if status == Status::Stopped {
                return Ok(driver.consumer().stats().clone());
            }
            if Instant::now() > end {
                return Err(fail("a stop took too long"));
            }
            self.poll
                .poll(&mut self.events, Some(Duration::from_millis(20)))
                .map_err(|e| fail(&e.to_string()))?;
        }
    }

    /// How many entries it was handed from `source`.
    fn count(&self, source: Source) -> usize {
        self.seen.iter().filter(|(_, s)| *s == source).count()
    }

    /// How many of `ids` it handled and acked.
    fn handled_of(&self, ids: &[String]) -> usize {
        ids.iter().filter(|id| self.acked.contains(id)).count()
    }

    fn sources(&self) -> String {
        let count = |s| self.count(s);
        let parts: Vec<String> = [
            (Source::Pending, "from its pending list"),
            (Source::Claimed, "reclaimed"),
            (Source::New, "new"),
        ]
        .iter()
        .filter(|(s, _)| count(*s) > 0)
        .map(|(s, what)| format!("{} {what}", count(*s)))
        .collect();
        parts.join(", ")
    }
}
