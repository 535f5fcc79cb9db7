//! Serving a [`Sim`] over loopback TCP, on a background thread, with the wall clock (ms since
//! the server started) as its clock. For tests and demos: it polls non-blocking sockets
//! about once a millisecond when idle.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::conn::ConnId;
use crate::options::SimOptions;
use crate::sim::Sim;

/// A running TCP server; dropping it (or [`stop`](ServerHandle::stop)) stops it and closes
/// every connection.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    sim: Arc<Mutex<Sim>>,
    thread: Option<JoinHandle<()>>,
}

impl ServerHandle {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Runs `f` on the simulator (between two polling rounds), e.g. to inspect pending
    /// entries. Its clock is wall milliseconds since [`serve`] was called.
    pub fn with_sim<R>(&self, f: impl FnOnce(&mut Sim) -> R) -> R {
        f(&mut lock(&self.sim))
    }

    /// Stops the server and waits for its thread to end.
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn lock(sim: &Mutex<Sim>) -> MutexGuard<'_, Sim> {
    sim.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Serves a new [`Sim`] built from `options` on `listener` (bind it to `127.0.0.1:0` for a
/// free port) until the returned handle is dropped. Panics only if the listener cannot be
/// made non-blocking or its address read.
pub fn serve(listener: TcpListener, options: SimOptions) -> ServerHandle {
    let addr = listener.local_addr().expect("the listener has an address");
    listener.set_nonblocking(true).expect("a non-blocking listener");
    let stop = Arc::new(AtomicBool::new(false));
    let sim = Arc::new(Mutex::new(Sim::new(options)));
    let thread = {
        let (stop, sim) = (stop.clone(), sim.clone());
        thread::Builder::new()
            .name(format!("pelican-sim {addr}"))
            .spawn(move || run(listener, &stop, &sim))
            .expect("spawn the pelican-sim server thread")
    };
    ServerHandle { addr, stop, sim, thread: Some(thread) }
}

/// One client socket and the bytes still to write to it.
struct Client {
    stream: TcpStream,
    pending: Vec<u8>,
    eof: bool,
}

fn run(listener: TcpListener, stop: &AtomicBool, sim: &Mutex<Sim>) {
    let start = Instant::now();
    let mut clients: BTreeMap<ConnId, Client> = BTreeMap::new();
    let mut buf = vec![0u8; 64 * 1024];
    while !stop.load(Ordering::SeqCst) {
        let mut busy = false;
        let mut sim = lock(sim);
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    if stream.set_nonblocking(true).is_ok() {
                        let _ = stream.set_nodelay(true);
                        clients.insert(sim.connect(), Client { stream, pending: Vec::new(), eof: false });
                        busy = true;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => break,
            }
        }
        sim.advance_to(start.elapsed().as_millis() as u64);
        for (&c, client) in clients.iter_mut() {
            while !client.eof {
                match client.stream.read(&mut buf) {
                    Ok(0) => client.eof = true,
                    Ok(n) => {
                        sim.input(c, &buf[..n]);
                        busy = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => client.eof = true,
                }
            }
        }
        let mut gone = Vec::new();
        for (&c, client) in clients.iter_mut() {
            client.pending.extend(sim.output(c));
            while !client.pending.is_empty() {
                match client.stream.write(&client.pending) {
                    Ok(0) => {
                        client.eof = true;
                        break;
                    }
                    Ok(n) => {
                        client.pending.drain(..n);
                        busy = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        client.eof = true;
                        break;
                    }
                }
            }
            if client.eof || (sim.is_closed(c) && client.pending.is_empty()) {
                gone.push(c);
            }
        }
        for c in gone {
            sim.disconnect(c);
            clients.remove(&c);
        }
        drop(sim);
        if !busy {
            thread::sleep(Duration::from_millis(1));
        }
    }
}
