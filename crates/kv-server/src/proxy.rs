//! A userspace TCP proxy for one directed link between two nodes, with a
//! rule that can pass, delay, drop (close the connection, losing what was
//! in flight) or cut (partition) the traffic. Loopback only.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What a link does to its traffic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rule {
    /// Forward everything.
    Pass,
    /// Hold each chunk this long before forwarding it.
    Delay(Duration),
    /// With this probability per chunk, close the connection instead.
    Drop(f64),
    /// Refuse connections and close open ones (a partition).
    Cut,
}

struct LinkState {
    rule: Rule,
    rng: u64,
}

/// One proxy: listens on loopback, forwards to `upstream`.
pub struct Proxy {
    /// Where it listens (`127.0.0.1:port`).
    pub addr: String,
    state: Arc<Mutex<LinkState>>,
    task: JoinHandle<()>,
}

fn next(rng: &mut u64) -> f64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    (*rng >> 11) as f64 / (1u64 << 53) as f64
}

impl Proxy {
    /// Listen on a free loopback port and forward to `upstream`; `seed`
    /// drives the drop decisions.
    pub async fn start(upstream: String, seed: u64) -> io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let state = Arc::new(Mutex::new(LinkState {
            rule: Rule::Pass,
            rng: seed | 1,
        }));
        let st = state.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                while conns.try_join_next().is_some() {}
                let Ok((down, _)) = listener.accept().await else {
                    continue;
                };
                if rule_of(&st) == Rule::Cut {
                    continue;
                }
                let up = upstream.clone();
                let st = st.clone();
                conns.spawn(async move {
                    if let Ok(Ok(up)) =
                        tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(&up)).await
                    {
                        pipe(down, up, st).await;
                    }
                });
            }
        });
        Ok(Proxy { addr, state, task })
    }

    /// Change the rule; open connections see it on their next chunk.
    pub fn set(&self, rule: Rule) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).rule = rule;
    }

    /// The current rule.
    pub fn rule(&self) -> Rule {
        rule_of(&self.state)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn rule_of(st: &Mutex<LinkState>) -> Rule {
    st.lock().unwrap_or_else(|p| p.into_inner()).rule
}

async fn pipe(mut a: TcpStream, mut b: TcpStream, st: Arc<Mutex<LinkState>>) {
    let _ = a.set_nodelay(true);
    let _ = b.set_nodelay(true);
    let (mut ar, mut aw) = a.split();
    let (mut br, mut bw) = b.split();
    let mut abuf = vec![0u8; 64 * 1024];
    let mut bbuf = vec![0u8; 64 * 1024];
    loop {
        let got = tokio::time::timeout(Duration::from_millis(100), async {
            tokio::select! {
                r = ar.read(&mut abuf) => (true, r),
                r = br.read(&mut bbuf) => (false, r),
            }
        })
        .await;
        let (rule, roll) = {
            let mut g = st.lock().unwrap_or_else(|p| p.into_inner());
            let roll = next(&mut g.rng);
            (g.rule, roll)
        };
        if rule == Rule::Cut {
            return;
        }
        let (forward, n) = match got {
            Err(_) => continue,
            Ok((_, Ok(0))) | Ok((_, Err(_))) => return,
            Ok((f, Ok(n))) => (f, n),
        };
        match rule {
            Rule::Drop(p) if roll < p => return,
            Rule::Delay(d) => tokio::time::sleep(d).await,
            _ => {}
        }
        let res = if forward {
            bw.write_all(&abuf[..n]).await
        } else {
            aw.write_all(&bbuf[..n]).await
        };
        if res.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn passes_delays_and_cuts() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let echo_addr = echo.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = echo.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut b = [0u8; 1024];
                    while let Ok(n) = s.read(&mut b).await {
                        if n == 0 || s.write_all(&b[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let p = Proxy::start(echo_addr, 7).await.unwrap();
        let mut c = TcpStream::connect(&p.addr).await.unwrap();
        c.write_all(b"hi").await.unwrap();
        let mut b = [0u8; 2];
        c.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"hi");
        p.set(Rule::Delay(Duration::from_millis(150)));
        let t = std::time::Instant::now();
        c.write_all(b"yo").await.unwrap();
        c.read_exact(&mut b).await.unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(300),
            "delayed both ways: {:?}",
            t.elapsed()
        );
        p.set(Rule::Cut);
        let _ = c.write_all(b"zz").await;
        let n = tokio::time::timeout(Duration::from_secs(2), c.read(&mut b))
            .await
            .unwrap()
            .unwrap_or(0);
        assert_eq!(n, 0, "a cut link closes the connection");
        p.set(Rule::Drop(1.0));
        let mut c = TcpStream::connect(&p.addr).await.unwrap();
        let _ = c.write_all(b"xx").await;
        let n = tokio::time::timeout(Duration::from_secs(2), c.read(&mut b))
            .await
            .unwrap()
            .unwrap_or(0);
        assert_eq!(n, 0, "a dropping link loses the chunk and the connection");
    }
}
