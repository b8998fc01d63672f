//! Network namespaces and the `ip` command, with errors that say which command failed and why.

use std::fs::File;
use std::os::fd::AsFd;
use std::process::Command;

use nix::sched::{setns, CloneFlags};

/// A failed system operation.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// A command exited non-zero.
    #[error("`{cmd}` failed: {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A command could not be started.
    #[error("cannot run `{cmd}`: {source}")]
    Spawn {
        /// The command line.
        cmd: String,
        /// Why.
        source: std::io::Error,
    },
    /// Entering a namespace failed.
    #[error("cannot enter network namespace `{ns}`: {reason}")]
    Enter {
        /// Namespace name.
        ns: String,
        /// Why.
        reason: String,
    },
    /// Another I/O failure.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Run a program with arguments; error with its stderr if it fails.
pub fn run(program: &str, args: &[&str]) -> Result<String, NetError> {
    let cmd = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|source| NetError::Spawn {
            cmd: cmd.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(NetError::Command {
            cmd,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip ARGS...` in the root namespace.
pub fn ip(args: &[&str]) -> Result<String, NetError> {
    run("ip", args)
}

/// `ip -n NS ARGS...`: an `ip` command inside namespace `ns`.
pub fn ip_in(ns: &str, args: &[&str]) -> Result<String, NetError> {
    let mut full = vec!["-n", ns];
    full.extend_from_slice(args);
    run("ip", &full)
}

/// Run any program inside namespace `ns` (`ip netns exec`).
pub fn exec_in(ns: &str, program: &str, args: &[&str]) -> Result<String, NetError> {
    let mut full = vec!["netns", "exec", ns, program];
    full.extend_from_slice(args);
    run("ip", &full)
}

/// Names of all named network namespaces.
pub fn list_namespaces() -> Result<Vec<String>, NetError> {
    Ok(ip(&["netns", "list"])?
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// Set a sysctl inside a namespace.
pub fn sysctl_in(ns: &str, key: &str, value: &str) -> Result<(), NetError> {
    exec_in(ns, "sysctl", &["-qw", &format!("{key}={value}")]).map(|_| ())
}

/// While alive, the calling thread is inside another network namespace; dropping it returns
/// to the namespace the thread was in before.
#[derive(Debug)]
pub struct InNamespace {
    original: File,
}

impl InNamespace {
    /// Move the calling thread into the named namespace.
    pub fn enter(ns: &str) -> Result<InNamespace, NetError> {
        let original = File::open("/proc/thread-self/ns/net").map_err(|source| NetError::Io {
            what: "open /proc/thread-self/ns/net".into(),
            source,
        })?;
        let target = File::open(format!("/run/netns/{ns}")).map_err(|e| NetError::Enter {
            ns: ns.into(),
            reason: e.to_string(),
        })?;
        setns(target.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|e| NetError::Enter {
            ns: ns.into(),
            reason: e.to_string(),
        })?;
        Ok(InNamespace { original })
    }
}

impl Drop for InNamespace {
    fn drop(&mut self) {
        // Returning to the namespace we came from cannot fail unless the kernel is broken; a
        // thread left in the wrong namespace would be a bug, so say so loudly.
        if let Err(e) = setns(self.original.as_fd(), CloneFlags::CLONE_NEWNET) {
            panic!("cannot return to the original network namespace: {e}");
        }
    }
}
