//! `serve`: the simulator over loopback TCP, on the wall clock.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::{encode, frame_len, words};
use pelican_sim::{serve, SimOptions};

struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    fn connect(addr: std::net::SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        Client { stream, buf: Vec::new() }
    }
    fn send(&mut self, line: &str) {
        self.stream.write_all(&encode(&words(line))).unwrap();
    }
    fn read(&mut self) -> String {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(n) = frame_len(&self.buf) {
                let frame: Vec<u8> = self.buf.drain(..n).collect();
                return String::from_utf8(frame).unwrap();
            }
            let n = self.stream.read(&mut chunk).unwrap();
            assert!(n > 0, "server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
    fn call(&mut self, line: &str) -> String {
        self.send(line);
        self.read()
    }
}

#[test]
fn blocked_read_wakes_on_xadd_from_another_connection() {
    let server = serve(TcpListener::bind("127.0.0.1:0").unwrap(), SimOptions::redis70());
    let mut a = Client::connect(server.addr());
    let mut b = Client::connect(server.addr());
    assert_eq!(a.call("PING"), "+PONG\r\n");
    assert_eq!(a.call("XGROUP CREATE s g $ MKSTREAM"), "+OK\r\n");
    assert_eq!(a.call("XADD s 1-0 f v1"), "$3\r\n1-0\r\n");
    assert!(a.call("XREADGROUP GROUP g A STREAMS s >").contains("v1"));
    a.send("XREADGROUP GROUP g A COUNT 10 BLOCK 5000 STREAMS s >");
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(100));
    assert!(server.with_sim(|sim| sim.pending(b"s", b"g").unwrap().len()) == 1);
    assert_eq!(b.call("XADD s 2-0 f v2"), "$3\r\n2-0\r\n");
    let got = a.read();
    assert_eq!(got, "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n2-0\r\n*2\r\n$1\r\nf\r\n$2\r\nv2\r\n");
    assert!(started.elapsed() < Duration::from_secs(4));
    // A BLOCK with nothing new times out on the wall clock.
    let t = Instant::now();
    assert_eq!(a.call("XREADGROUP GROUP g A BLOCK 50 STREAMS s >"), "*-1\r\n");
    assert!(t.elapsed() >= Duration::from_millis(45));
    assert_eq!(server.with_sim(|sim| sim.pending(b"s", b"g").unwrap().len()), 2);
    server.stop();
    // Stopped: the connection is closed.
    let mut chunk = [0u8; 16];
    assert!(matches!(a.stream.read(&mut chunk), Ok(0) | Err(_)));
}
