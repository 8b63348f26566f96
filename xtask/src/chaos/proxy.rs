//! A loopback TCP proxy between the controller and the API server that injects faults: it
//! delays what the API server sends, truncates it (forwards part of a chunk, then closes the
//! connection), or severs every open connection at once.
//!
//! It works below TLS (the controller's TLS session runs end to end with the API server, whose
//! certificate is for 127.0.0.1 and so still matches), so a truncation cuts a response or a
//! watch stream at an arbitrary byte, mid-record: the client sees a connection that ends
//! before its answer does, which is what a dying server or a broken network looks like.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// How the proxy treats the bytes the API server sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Forward at once.
    Pass,
    /// Hold each chunk up to `max_delay` (uniformly random), and with probability
    /// `truncate_per_mille`/1000 per chunk forward only part of it and close the connection.
    Slow {
        /// Longest delay of one chunk.
        max_delay: Duration,
        /// Chance of a truncation per chunk, in thousandths.
        truncate_per_mille: u32,
    },
}

/// What the proxy did.
#[derive(Default, Debug)]
pub(crate) struct ProxyStats {
    /// Connections accepted.
    pub(crate) connections: AtomicU64,
    /// Chunks held back.
    pub(crate) delayed: AtomicU64,
    /// Connections cut mid-chunk.
    pub(crate) truncated: AtomicU64,
    /// Connections closed by [`FaultProxy::sever_all`].
    pub(crate) severed: AtomicU64,
}

/// A running proxy (see the module documentation).
pub(crate) struct FaultProxy {
    addr: SocketAddr,
    mode: Arc<Mutex<Mode>>,
    /// Cut the next chunk of whichever connection forwards one first.
    cut_next: Arc<std::sync::atomic::AtomicBool>,
    sever: tokio::sync::watch::Sender<u64>,
    /// What it did so far.
    pub(crate) stats: Arc<ProxyStats>,
    cancel: CancellationToken,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub(crate) async fn start(upstream: SocketAddr) -> Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the fault proxy")?;
        let addr = listener.local_addr()?;
        let mode = Arc::new(Mutex::new(Mode::Pass));
        let cut_next = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (sever, _) = tokio::sync::watch::channel(0u64);
        let stats = Arc::new(ProxyStats::default());
        let cancel = CancellationToken::new();
        let proxy = FaultProxy {
            addr,
            mode: mode.clone(),
            cut_next: cut_next.clone(),
            sever: sever.clone(),
            stats: stats.clone(),
            cancel: cancel.clone(),
        };
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = cancel.cancelled() => return,
                    a = listener.accept() => a,
                };
                let Ok((client, _)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                stats.connections.fetch_add(1, Ordering::Relaxed);
                let (mode, stats, cancel) = (mode.clone(), stats.clone(), cancel.clone());
                let cut_next = cut_next.clone();
                let severed = sever.subscribe();
                tokio::spawn(async move {
                    let _ =
                        connection(client, upstream, mode, cut_next, stats, severed, cancel).await;
                });
            }
        });
        Ok(proxy)
    }

    /// Where clients connect.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Changes how new chunks are treated (on every connection, open or future).
    pub(crate) fn set_mode(&self, mode: Mode) {
        *self.mode.lock().expect("proxy mode lock") = mode;
    }

    /// Cuts the next chunk the apiserver sends (on any connection) short and closes that
    /// connection: one truncation for certain, whatever the mode.
    pub(crate) fn cut_next(&self) {
        self.cut_next.store(true, Ordering::Relaxed);
    }

    /// Closes every open connection.
    pub(crate) fn sever_all(&self) {
        self.sever.send_modify(|g| *g += 1);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Pumps one connection until either side closes, a fault ends it, or the proxy stops.
async fn connection(
    client: TcpStream,
    upstream: SocketAddr,
    mode: Arc<Mutex<Mode>>,
    cut_next: Arc<std::sync::atomic::AtomicBool>,
    stats: Arc<ProxyStats>,
    mut severed: tokio::sync::watch::Receiver<u64>,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    let server = TcpStream::connect(upstream).await?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = cr.read(&mut buf).await?;
            if n == 0 {
                sw.shutdown().await?;
                return Ok::<(), std::io::Error>(());
            }
            sw.write_all(&buf[..n]).await?;
        }
    };
    let down = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = sr.read(&mut buf).await?;
            if n == 0 {
                cw.shutdown().await?;
                return Ok::<(), std::io::Error>(());
            }
            if cut_next.swap(false, Ordering::Relaxed) {
                stats.truncated.fetch_add(1, Ordering::Relaxed);
                cw.write_all(&buf[..n / 2]).await?;
                return Ok(());
            }
            let current = *mode.lock().expect("proxy mode lock");
            if let Mode::Slow {
                max_delay,
                truncate_per_mille,
            } = current
            {
                let millis = u64::try_from(max_delay.as_millis()).unwrap_or(u64::MAX);
                if millis > 0 {
                    stats.delayed.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(0..=millis))).await;
                }
                if fastrand::u32(0..1000) < truncate_per_mille {
                    stats.truncated.fetch_add(1, Ordering::Relaxed);
                    let keep = fastrand::usize(0..n);
                    cw.write_all(&buf[..keep]).await?;
                    return Ok(());
                }
            }
            cw.write_all(&buf[..n]).await?;
        }
    };
    tokio::select! {
        r = up => r,
        r = down => r,
        _ = severed.changed() => {
            stats.severed.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        () = cancel.cancelled() => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream that sends `payload` to every connection, then closes it.
    async fn upstream(payload: &'static [u8]) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let _ = s.write_all(payload).await;
                    let _ = s.shutdown().await;
                });
            }
        });
        addr
    }

    async fn fetch(addr: SocketAddr) -> Vec<u8> {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        out
    }

    #[tokio::test]
    async fn passes_truncates_and_severs() {
        const BODY: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
        let proxy = FaultProxy::start(upstream(BODY).await).await.unwrap();
        assert_eq!(fetch(proxy.addr()).await, BODY);

        proxy.set_mode(Mode::Slow {
            max_delay: Duration::ZERO,
            truncate_per_mille: 1000,
        });
        let cut = fetch(proxy.addr()).await;
        assert!(cut.len() < BODY.len(), "{cut:?}");
        assert_eq!(cut, BODY[..cut.len()]);
        assert_eq!(proxy.stats.truncated.load(Ordering::Relaxed), 1);

        proxy.set_mode(Mode::Pass);
        proxy.cut_next();
        assert_eq!(fetch(proxy.addr()).await, BODY[..BODY.len() / 2]);
        assert_eq!(fetch(proxy.addr()).await, BODY, "only one chunk is cut");
        assert_eq!(proxy.stats.truncated.load(Ordering::Relaxed), 2);

        proxy.set_mode(Mode::Slow {
            max_delay: Duration::from_millis(5),
            truncate_per_mille: 0,
        });
        assert_eq!(fetch(proxy.addr()).await, BODY);
        assert!(proxy.stats.delayed.load(Ordering::Relaxed) >= 1);
        assert_eq!(proxy.stats.connections.load(Ordering::Relaxed), 5);
    }

    #[tokio::test]
    async fn severing_closes_open_connections() {
        // An upstream that never sends anything: the connection stays open until severed.
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (connected, upstream_accepted) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            let _ = connected.send(());
            // Held open, silent.
            std::future::pending::<()>().await;
            drop(s);
        });
        let proxy = FaultProxy::start(addr).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        // The proxy's connection exists (and listens for the sever signal) once it reached
        // the upstream.
        upstream_accepted.await.unwrap();
        proxy.sever_all();
        let mut buf = [0u8; 8];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("the severed connection is closed")
            .unwrap_or(0);
        assert_eq!(n, 0);
        assert_eq!(proxy.stats.severed.load(Ordering::Relaxed), 1);
    }
}
