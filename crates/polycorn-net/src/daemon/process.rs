//! What every daemon process sets up first: its logging, its async runtime, and the signals
//! that stop it.

use anyhow::{Context, Result};

use crate::config::{LogConfig, LogFormat};

/// Logs to stderr as `[log]` says (`RUST_LOG` overrides its level).
pub(super) fn init_logging(log: &LogConfig) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&log.level))
        .with_context(|| format!("log.level: invalid filter `{}`", log.level))?;
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match log.format {
        LogFormat::Json => b.json().init(),
        LogFormat::Text => b.init(),
    }
    Ok(())
}

/// The daemons' async runtime: two worker threads.
pub(super) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("start the async runtime")
}

/// Wait for SIGINT or SIGTERM.
pub(super) async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
