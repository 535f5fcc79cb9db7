//! A TCP proxy in front of a server that can cut a connection after a command went through
//! and before its answer comes back: the "written, executed, answer lost" failure a client
//! cannot tell from "never arrived".

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// A proxy on a loopback port, forwarding every connection to `upstream`.
pub struct CutProxy {
    addr: SocketAddr,
    trigger: Arc<Mutex<Option<Vec<u8>>>>,
    cuts: Arc<AtomicUsize>,
    closed: Arc<AtomicBool>,
}

impl CutProxy {
    /// Starts the proxy.
    pub fn start(upstream: SocketAddr) -> CutProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a proxy port");
        let addr = listener.local_addr().expect("the proxy's address");
        let trigger: Arc<Mutex<Option<Vec<u8>>>> = Arc::default();
        let (cuts, closed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let (t, c, done) = (trigger.clone(), cuts.clone(), closed.clone());
        thread::spawn(move || {
            for client in listener.incoming() {
                if done.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(upstream) else { continue };
                relay(client, server, t.clone(), c.clone());
            }
        });
        CutProxy { addr, trigger, cuts, closed }
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The next write from a client that contains `needle` goes to the server, and then
    /// nothing more comes back: 200 ms later (the server has long run it) the connection
    /// is cut, its answers dropped. Once.
    pub fn cut_after(&self, needle: &str) {
        *self.trigger.lock().unwrap() = Some(needle.as_bytes().to_vec());
    }

    /// Connections cut so far.
    pub fn cuts(&self) -> usize {
        self.cuts.load(Ordering::SeqCst)
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr); // wakes the accept loop
    }
}

fn relay(
    mut client: TcpStream,
    mut server: TcpStream,
    trigger: Arc<Mutex<Option<Vec<u8>>>>,
    cuts: Arc<AtomicUsize>,
) {
    let muted = Arc::new(AtomicBool::new(false));
    let (mut client_back, mut server_back) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let mute = muted.clone();
    // Server to client, unless muted.
    thread::spawn(move || {
        let mut buf = vec![0; 64 << 10];
        while let Ok(n @ 1..) = server_back.read(&mut buf) {
            if mute.load(Ordering::SeqCst) || client_back.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = client_back.shutdown(Shutdown::Both);
    });
    // Client to server, watching for the trigger.
    thread::spawn(move || {
        let mut buf = vec![0; 64 << 10];
        while let Ok(n @ 1..) = client.read(&mut buf) {
            let chunk = &buf[..n];
            let fire = {
                let mut armed = trigger.lock().unwrap();
                let hit =
                    armed.as_ref().is_some_and(|needle| chunk.windows(needle.len()).any(|w| w == needle));
                if hit {
                    *armed = None;
                }
                hit
            };
            if fire {
                // Muted before it is written: no answer to it can get through.
                muted.store(true, Ordering::SeqCst);
            }
            if server.write_all(chunk).is_err() {
                break;
            }
            if fire {
                thread::sleep(Duration::from_millis(200));
                cuts.fetch_add(1, Ordering::SeqCst);
                break;
            }
        }
        let _ = server.shutdown(Shutdown::Both);
        let _ = client.shutdown(Shutdown::Both);
    });
}
