//! A small blocking RESP client that follows `-REDIRECT` (for the fault
//! tests, the cluster launcher and the benchmark client).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::resp::{command, parse_value, Value};

/// A connection to one server address.
pub struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

fn resolve(addr: &str) -> io::Result<SocketAddr> {
    addr.to_socket_addrs()?.next().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("address {addr} resolves to nothing"),
        )
    })
}

impl Conn {
    /// Connect to `addr`; every read and write times out after `timeout`.
    pub fn connect(addr: &str, timeout: Duration) -> io::Result<Conn> {
        let s = TcpStream::connect_timeout(&resolve(addr)?, timeout)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        Ok(Conn {
            reader: BufReader::new(s.try_clone()?),
            writer: s,
        })
    }

    /// Send one command and read its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> io::Result<Value> {
        self.writer.write_all(&command(args))?;
        self.read_reply()
    }

    /// Read one reply.
    pub fn read_reply(&mut self) -> io::Result<Value> {
        let mut buf = Vec::new();
        loop {
            match parse_value(&buf) {
                Ok(Some((v, _))) => return Ok(v),
                Ok(None) => {}
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.0)),
            }
            let avail = self.reader.fill_buf()?;
            if avail.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed the connection",
                ));
            }
            let n = avail.len();
            buf.extend_from_slice(avail);
            self.reader.consume(n);
        }
    }

    /// Send raw bytes (for malformed-input tests) and read what comes back
    /// until the server closes or `limit` bytes arrive.
    pub fn raw(&mut self, bytes: &[u8], limit: usize) -> io::Result<Vec<u8>> {
        self.writer.write_all(bytes)?;
        let mut out = Vec::new();
        let mut chunk = [0u8; 4096];
        while out.len() < limit {
            match self.reader.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&chunk[..n]),
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut =>
                {
                    break
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

/// A client of a whole cluster: sends to the node it believes leads and
/// follows redirects.
pub struct Client {
    addrs: Vec<String>,
    cur: usize,
    conn: Option<Conn>,
    timeout: Duration,
}

impl Client {
    /// A client of the nodes at `addrs` (client RESP addresses).
    pub fn new(addrs: Vec<String>, timeout: Duration) -> Client {
        Client {
            addrs,
            cur: 0,
            conn: None,
            timeout,
        }
    }

    /// Start with the node at index `i` of the address list.
    pub fn prefer(&mut self, i: usize) {
        self.cur = i % self.addrs.len();
        self.conn = None;
    }

    /// Send once to the current node. An I/O error drops the connection
    /// and moves on to the next node; `-REDIRECT host:port` switches to
    /// that node for the next call and is returned as is.
    pub fn call_once(&mut self, args: &[&[u8]]) -> io::Result<Value> {
        if self.conn.is_none() {
            match Conn::connect(&self.addrs[self.cur], self.timeout) {
                Ok(c) => self.conn = Some(c),
                Err(e) => {
                    self.cur = (self.cur + 1) % self.addrs.len();
                    return Err(e);
                }
            }
        }
        let res = self.conn.as_mut().unwrap().call(args);
        match &res {
            Err(_) => {
                self.conn = None;
                self.cur = (self.cur + 1) % self.addrs.len();
            }
            Ok(Value::Error(e)) => {
                if let Some(addr) = e.strip_prefix("REDIRECT ") {
                    if let Some(i) = self.addrs.iter().position(|a| a == addr) {
                        self.cur = i;
                        self.conn = None;
                    }
                } else if e.starts_with("TRYAGAIN") || e.starts_with("TIMEOUT") {
                    self.conn = None;
                    self.cur = (self.cur + 1) % self.addrs.len();
                }
            }
            Ok(_) => {}
        }
        res
    }

    /// Send until a reply that is not a redirect or a retryable error, at
    /// most `tries` times, sleeping a little between attempts.
    pub fn call(&mut self, args: &[&[u8]], tries: usize) -> io::Result<Value> {
        let mut last = Err(io::Error::other("no attempt"));
        for i in 0..tries.max(1) {
            last = self.call_once(args);
            match &last {
                Ok(Value::Error(e)) if e.starts_with("REDIRECT") || e.starts_with("TRYAGAIN") => {}
                Ok(_) => return last,
                Err(_) => {}
            }
            if i > 0 {
                std::thread::sleep(Duration::from_millis(20 * (i as u64).min(10)));
            }
        }
        last
    }
}

/// The leader's client address as node `addr` reports it (`RAFTINFO`).
pub fn leader_of(addr: &str, timeout: Duration) -> Option<String> {
    let mut c = Conn::connect(addr, timeout).ok()?;
    match c.call(&[b"RAFTINFO"]).ok()? {
        Value::Array(v) if v.len() >= 4 => match &v[3] {
            Value::Bulk(b) if !b.is_empty() => String::from_utf8(b.clone()).ok(),
            _ => None,
        },
        _ => None,
    }
}

/// What a node reports about itself (`RAFTINFO`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftInfo {
    /// The node's id.
    pub id: u64,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub state: String,
    /// The leader's client address as the node knows it (empty: none).
    pub leader: String,
    /// The current term.
    pub term: u64,
    /// The last applied log index (`None`: nothing applied yet).
    pub applied: Option<u64>,
}

impl RaftInfo {
    /// Parse a `RAFTINFO` reply.
    pub fn from_value(v: &Value) -> Option<RaftInfo> {
        let Value::Array(v) = v else { return None };
        if v.len() < 6 {
            return None;
        }
        let int = |x: &Value| match x {
            Value::Int(i) => Some(*i),
            _ => None,
        };
        let text = |x: &Value| match x {
            Value::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
            Value::Simple(s) => Some(s.clone()),
            _ => None,
        };
        Some(RaftInfo {
            id: int(&v[0])?.max(0) as u64,
            state: text(&v[1])?,
            leader: text(&v[3])?,
            term: int(&v[4])?.max(0) as u64,
            applied: int(&v[5]).filter(|a| *a >= 0).map(|a| a as u64),
        })
    }
}

/// Ask the node at `addr` for its [`RaftInfo`] (`None`: not answering).
pub fn raft_info(addr: &str, timeout: Duration) -> Option<RaftInfo> {
    let mut c = Conn::connect(addr, timeout).ok()?;
    RaftInfo::from_value(&c.call(&[b"RAFTINFO"]).ok()?)
}
