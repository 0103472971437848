//! Accepting connections: HTTP/1.1 through hyper with a read timeout on every connection,
//! and a graceful shutdown that ends within a bound.
//!
//! `axum::serve` sets no timer on its connections, so a client that sends half a request
//! line (or nothing, on a kept-alive connection) holds its connection, and with it a
//! graceful shutdown, for as long as it likes. Here each connection gets hyper's header
//! read timeout: the request head must arrive within `read_timeout`, and a kept-alive
//! connection that waits longer than that for its next request is closed (hyper starts the
//! same timer while it waits). The body is bounded by the handler (see [`super::http`]).
//!
//! On shutdown the listener is closed, idle connections are closed at once, requests in
//! flight are finished, and whatever is still open after `grace` is dropped.

use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Serves `app` on `listener` until `stop` resolves, then shuts down within `grace`.
pub(crate) async fn serve_connections(
    listener: TcpListener,
    app: Router,
    read_timeout: Duration,
    grace: Duration,
    stop: impl std::future::Future<Output = ()>,
) {
    let (closing_tx, closing_rx) = watch::channel(false);
    let mut conns: JoinSet<()> = JoinSet::new();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors and the like: wait instead of spinning.
                        tracing::warn!("accepting a connection: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                conns.spawn(connection(stream, app.clone(), read_timeout, closing_rx.clone()));
            }
            // Reap finished connections so the set does not grow with every client.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    let _ = closing_tx.send(true);
    let open = conns.len();
    if open > 0 {
        tracing::info!("shutting down: {open} connection(s) open; waiting up to {grace:?}");
    }
    let drained =
        tokio::time::timeout(grace, async { while conns.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(
            "shutting down: {} connection(s) still open after {grace:?}; closing them",
            conns.len()
        );
        conns.abort_all();
        while conns.join_next().await.is_some() {}
    }
}

async fn connection(
    stream: tokio::net::TcpStream,
    app: Router,
    read_timeout: Duration,
    mut closing: watch::Receiver<bool>,
) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(read_timeout)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!("connection ended: {e}");
            }
            return;
        }
        _ = closing.wait_for(|c| *c) => conn.as_mut().graceful_shutdown(),
    }
    // Idle: closed now; in flight: its answer is written, then it closes.
    if let Err(e) = conn.await {
        tracing::debug!("connection ended during shutdown: {e}");
    }
}
