//! What a bad configuration file says: the file, the key, and what is wrong.

use std::io;
use std::path::PathBuf;

/// A configuration that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read: {cause}", file.display())]
    Read {
        /// The configuration file.
        file: PathBuf,
        /// The I/O error (in the message, so not also the error's source).
        cause: io::Error,
    },
    /// The TOML parser refused the file: syntax, a value of the wrong type, an unknown or a
    /// missing key.
    #[error("{origin}:{line}:{column}: {}{message}", key.as_deref().map(|k| format!("{k}: ")).unwrap_or_default())]
    Toml {
        /// The file's name as given.
        origin: String,
        /// 1-based line.
        line: usize,
        /// 1-based column (characters).
        column: usize,
        /// The key the error is about, when it can be told (`path[1].source`).
        key: Option<String>,
        /// What the parser said.
        message: String,
    },
    /// A value parsed but is not acceptable.
    #[error("{origin}: {key}: {message}")]
    Invalid {
        /// The file's name as given.
        origin: String,
        /// The key (`relay.scheduler`, `path[1].device`).
        key: String,
        /// What is wrong.
        message: String,
    },
}

impl ConfigError {
    /// The key the error is about, if known.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Read { .. } => None,
            ConfigError::Toml { key, .. } => key.as_deref(),
            ConfigError::Invalid { key, .. } => Some(key),
        }
    }
}
