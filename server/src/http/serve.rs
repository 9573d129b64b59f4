//! Accepting connections with limits: at most so many at once (one over gets a plain 503 and is
//! closed, so descriptors stay in reserve for the database, job logs and the history writer),
//! and at most a share of them from one client address (so one client cannot take every
//! slot); request heads that must arrive in time, whole request bodies too (a body dribbled a
//! byte at a time would otherwise hold its connection forever), and connections silent for
//! too long closed. axum's own `serve` has none of these.

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::Service;

/// How connections are bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Open connections at most (websockets included).
    pub max_connections: usize,
    /// A request's head must arrive within this (also the wait for the next request on a
    /// kept-alive connection).
    pub header_timeout: Duration,
    /// A connection with no byte in either direction for this long is closed (websockets ping
    /// more often than this).
    pub idle_timeout: Duration,
    /// A request's body must have arrived whole within this of its head; after it the body
    /// reads as failed (the handler answers 4xx) and the connection is closed.
    pub body_timeout: Duration,
    /// Open connections from one client address at most, as a divisor of `max_connections`
    /// (4: a quarter). Trusted proxies, which carry everyone's requests, are not limited so.
    pub per_address_share: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: 512,
            header_timeout: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(90),
            body_timeout: Duration::from_secs(60),
            per_address_share: 4,
        }
    }
}

impl ConnectionLimits {
    /// Connections one client address may hold open at once.
    pub fn per_address(&self) -> usize {
        (self.max_connections / self.per_address_share.max(1)).max(4)
    }
}

/// Open connections per client address, and each connection's place among them.
#[derive(Clone, Default)]
struct PerAddress(Arc<std::sync::Mutex<std::collections::HashMap<IpAddr, usize>>>);

/// One open connection of an address; dropping it frees its place.
struct AddressSlot {
    counts: PerAddress,
    addr: IpAddr,
}

impl PerAddress {
    fn take(&self, addr: IpAddr, limit: usize) -> Option<AddressSlot> {
        let mut counts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let open = counts.entry(addr).or_default();
        if *open >= limit {
            return None;
        }
        *open += 1;
        Some(AddressSlot {
            counts: self.clone(),
            addr,
        })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(open) = counts.get_mut(&self.addr) {
            *open -= 1;
            if *open == 0 {
                counts.remove(&self.addr);
            }
        }
    }
}

/// A request body that fails once its deadline passes: reading it after that is an error, so
/// a body sent a byte at a time cannot hold a connection longer than the limit allows.
struct TimedBody {
    inner: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl hyper::body::Body for TimedBody {
    type Data = hyper::body::Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(io::Error::other))),
            Poll::Pending if self.deadline.as_mut().poll(cx).is_ready() => {
                Poll::Ready(Some(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the request body did not arrive in time",
                ))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Descriptors kept free for everything but client connections.
const RESERVED_DESCRIPTORS: u64 = 256;

/// Raises this process's descriptor limit to the hard limit and returns how many connections
/// fit beside the reserve: at most `wanted`.
pub fn fit_connections(wanted: usize) -> usize {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let soft = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(_) => soft,
        },
        Ok((soft, _)) => soft,
        Err(_) => 1024,
    };
    let room = soft.saturating_sub(RESERVED_DESCRIPTORS).max(16);
    wanted
        .min(usize::try_from(room).unwrap_or(usize::MAX))
        .max(1)
}

/// What a connection over the limit gets before it is closed.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 5\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: 73\r\n\r\n{\"error\":\"unavailable\",\"message\":\"too many connections; try again soon\"}\n";

/// Serves `app` on `listener` until `shutdown` resolves, then lets open requests finish (for at
/// most 10 s).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    unlimited: Arc<[IpAddr]>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let per_address = PerAddress::default();
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(limits.idle_timeout / 2));
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of descriptors or memory: wait a moment rather than spin.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let address = peer.ip().to_canonical();
        let slot = if unlimited.contains(&address) {
            None
        } else {
            match per_address.take(address, limits.per_address()) {
                Some(slot) => Some(slot),
                None => {
                    tokio::spawn(refuse(stream));
                    continue;
                }
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tokio::spawn(refuse(stream));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(Watched::new(stream, limits.idle_timeout, permit, slot));
        let app = app.clone();
        let body_timeout = limits.body_timeout;
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            let mut app = app.clone();
            let request = request.map(|inner| {
                Body::new(TimedBody {
                    inner,
                    deadline: Box::pin(tokio::time::sleep(body_timeout)),
                })
            });
            async move { app.call(request).await }
        });
        let connection = builder
            .serve_connection_with_upgrades(io, service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(Duration::from_secs(10)) => {
            tracing::warn!("some connections did not close within 10 s of shutdown");
        }
    }
    Ok(())
}

/// Tells a connection over the limit so, and closes it.
async fn refuse(mut stream: TcpStream) {
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(BUSY)).await;
}

/// A connection that fails with `TimedOut` when no byte moved either way for a while, and
/// holds its place among the open connections until it is dropped (upgraded websockets
/// included).
struct Watched {
    inner: TcpStream,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
    _permit: OwnedSemaphorePermit,
    _slot: Option<AddressSlot>,
}

impl Watched {
    fn new(
        inner: TcpStream,
        timeout: Duration,
        permit: OwnedSemaphorePermit,
        slot: Option<AddressSlot>,
    ) -> Self {
        Self {
            inner,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            timeout,
            _permit: permit,
            _slot: slot,
        }
    }

    /// Passes on what the stream did; traffic pushes the deadline back, and while the stream
    /// waits the deadline may end it.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(result) => {
                let next = tokio::time::Instant::now() + self.timeout;
                self.deadline.as_mut().reset(next);
                Poll::Ready(result)
            }
            Poll::Pending if self.deadline.as_mut().poll(cx).is_ready() => Poll::Ready(Err(
                io::Error::new(io::ErrorKind::TimedOut, "connection idle too long"),
            )),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        this.watch(cx, polled)
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.watch(cx, polled)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
