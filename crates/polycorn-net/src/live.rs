//! Configurations replaced while the daemons run (`systemctl reload`).

use std::sync::Arc;

/// A configuration that a reload replaces while it is in use (TLS credentials, the proxy's
/// destination policy): each use takes the latest ([`Live::current`]); what was made with an
/// earlier one keeps it. Each replacement counts up a generation, so a holder can tell whether
/// something was made with the latest. Clones share one configuration.
#[derive(Debug)]
pub struct Live<C> {
    tx: Arc<tokio::sync::watch::Sender<(u64, Arc<C>)>>,
}

impl<C> Clone for Live<C> {
    fn clone(&self) -> Self {
        Live {
            tx: self.tx.clone(),
        }
    }
}

impl<C> Live<C> {
    /// Generation 0: `config`.
    pub fn new(config: Arc<C>) -> Live<C> {
        Live {
            tx: Arc::new(tokio::sync::watch::Sender::new((0, config))),
        }
    }

    /// The latest configuration and its generation.
    pub fn current(&self) -> (u64, Arc<C>) {
        let b = self.tx.borrow();
        (b.0, b.1.clone())
    }

    /// The latest generation.
    pub fn generation(&self) -> u64 {
        self.tx.borrow().0
    }

    /// Puts `config` in use for every later use; returns its generation.
    pub fn replace(&self, config: Arc<C>) -> u64 {
        let mut generation = 0;
        self.tx.send_modify(|(g, c)| {
            *g += 1;
            *c = config;
            generation = *g;
        });
        generation
    }

    /// Waits until the generation is above `seen` (at once when it already is).
    pub async fn newer_than(&self, seen: u64) {
        let mut rx = self.tx.subscribe();
        // The sender lives as long as `self`: `wait_for` cannot fail while we hold it.
        let _ = rx.wait_for(|(g, _)| *g > seen).await;
    }
}

impl<C> From<Arc<C>> for Live<C> {
    fn from(config: Arc<C>) -> Live<C> {
        Live::new(config)
    }
}
