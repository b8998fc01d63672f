//! `polycorn relay`, `polycorn proxy`, `polycorn tls …`, `polycorn config example`: thin
//! calls into [`polycorn_net::daemon`] and [`polycorn_net::units`].

use std::path::Path;

use anyhow::{bail, Context, Result};
use polycorn_net::config::{ProxyConfig, RelayConfig};
use polycorn_net::daemon;
use polycorn_net::tls;
use polycorn_net::units::{
    linkdb_learn_unit, systemd_proxy_socket_unit, systemd_socket_unit, systemd_unit,
    LINKDB_LEARN_TIMER,
};

pub use polycorn_net::daemon::{relay_check_paths, relay_remove_interception};

/// `polycorn relay --config FILE`.
pub fn relay(path: &Path) -> Result<()> {
    daemon::relay(path, crate::VERSION)
}

/// `polycorn proxy --config FILE`.
pub fn proxy(path: &Path) -> Result<()> {
    daemon::proxy(path, crate::VERSION)
}

pub fn tls_generate(dir: &Path, san: &[String], force: bool) -> Result<()> {
    let g = tls::generate(dir, san, force)?;
    println!("wrote {}", dir.display());
    println!(
        "  proxy: {} {}",
        g.proxy_cert.display(),
        g.proxy_key.display()
    );
    println!(
        "  relay: {} {}",
        g.relay_cert.display(),
        g.relay_key.display()
    );
    println!("  CA:    {} (give to both)", g.ca_cert.display());
    println!(
        "  keep {} off the train and off the proxy: whoever has it can mint relays",
        g.ca_key.display()
    );
    Ok(())
}

/// `polycorn tls relay DIR --name NAME`.
pub fn tls_relay(name: &str, a: &crate::IssueArgs) -> Result<()> {
    let out = a.out.as_deref().unwrap_or(&a.dir);
    let issued = tls::issue_relay_valid_for(&a.dir, name, out, a.force, a.valid_days)?;
    print_issued(&format!("relay `{name}`"), &issued.cert, &issued.key)?;
    println!(
        "  give them and {} to the train, as [tls] cert and key of its relay.toml",
        a.dir.join("ca.pem").display()
    );
    println!(
        "  the proxy names this relay `{name}` in its logs and metrics; to shut it out, add it \
         to proxy.revoked_relays"
    );
    Ok(())
}

/// `polycorn tls proxy DIR`: a new proxy certificate and key from the CA in `dir`.
pub fn tls_proxy(san: &[String], a: &crate::IssueArgs) -> Result<()> {
    let out = a.out.as_deref().unwrap_or(&a.dir);
    let issued = tls::issue_proxy(&a.dir, san, out, a.force, a.valid_days)?;
    print_issued("proxy certificate", &issued.cert, &issued.key)?;
    println!(
        "  put them in place of the proxy's [tls] cert and key, then `systemctl reload \
         polycorn-proxy`: relays' new subflows get it; the trains' files stay as they are"
    );
    Ok(())
}

/// What `tls relay` and `tls proxy` wrote, and how long it is valid.
fn print_issued(what: &str, cert: &Path, key: &Path) -> Result<()> {
    println!("{what}: {} {}", cert.display(), key.display());
    let v = tls::validity_of_file("certificate", cert)?;
    println!("  {}", v.describe(tls::unix_now()));
    Ok(())
}

/// `config check --reload PID`: SIGHUP to the daemon `pid`, after its file passed the check.
pub fn signal_reload(pid: i32) -> Result<()> {
    if pid <= 0 {
        bail!("--reload {pid}: not a process id (is the service running?)");
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGHUP,
    )
    .with_context(|| format!("--reload: cannot signal process {pid}"))
}

/// `polycorn config example relay|proxy|relay.service|proxy.service|relay.socket|proxy.socket`
/// (or `linkdb-learn.service|linkdb-learn.timer`, or `alerts`);
/// `config`: the configuration whose listeners a socket unit binds (default: the example's).
/// `polycorn config reference`: write the reference pages into `out`, or with `check` fail
/// when those there are stale.
pub fn config_reference(out: &Path, check: bool) -> Result<()> {
    use polycorn_net::config::reference;
    if check {
        let stale = reference::stale(out);
        if !stale.is_empty() {
            let names: Vec<String> = stale.iter().map(|p| p.display().to_string()).collect();
            bail!(
                "{} stale: regenerate with `{}`",
                names.join(", "),
                reference::COMMAND
            );
        }
        return Ok(());
    }
    for path in reference::write(out).with_context(|| format!("write {}", out.display()))? {
        println!("wrote {}", path.display());
    }
    Ok(())
}

pub fn config_example(role: &str, config: Option<&Path>) -> Result<()> {
    if config.is_some() && !role.ends_with(".socket") {
        bail!(
            "--config goes with `relay.socket` or `proxy.socket` only (the unit binds that \
             file's listeners)"
        );
    }
    match role {
        "relay" => print!("{}", RelayConfig::example()),
        "proxy" => print!("{}", ProxyConfig::example()),
        "relay.service" | "proxy.service" => {
            let bin = std::env::current_exe().context("find this program's path")?;
            let daemon = role.trim_end_matches(".service");
            print!("{}", systemd_unit(daemon, &bin)?);
        }
        "relay.socket" => {
            let bin = std::env::current_exe().context("find this program's path")?;
            let cfg = match config {
                Some(p) => RelayConfig::load(p)?,
                None => RelayConfig::example_settings(),
            };
            print!("{}", systemd_socket_unit(&cfg, &bin)?);
        }
        "linkdb-learn.service" => {
            let bin = std::env::current_exe().context("find this program's path")?;
            print!("{}", linkdb_learn_unit(&bin)?);
        }
        "linkdb-learn.timer" => print!("{LINKDB_LEARN_TIMER}"),
        "alerts" => print!("{ALERTS}"),
        "proxy.socket" => {
            let cfg = match config {
                Some(p) => ProxyConfig::load(p)?,
                None => ProxyConfig::example_settings(),
            };
            print!("{}", systemd_proxy_socket_unit(&cfg));
        }
        other => bail!(
            "unknown example `{other}`: expected `relay`, `proxy` (configuration files) or \
             `relay.service`, `proxy.service`, `relay.socket`, `proxy.socket`, \
             `linkdb-learn.service`, `linkdb-learn.timer` (systemd units) or `alerts` \
             (Prometheus alerting rules)"
        ),
    }
    Ok(())
}

/// Prometheus alerting rules for relays and proxies (`polycorn config example alerts`), written
/// against the metrics of `polycorn_net::metrics`.
pub(crate) const ALERTS: &str = include_str!("alerts.yml");

#[cfg(test)]
mod tests {
    use super::*;
    use polycorn_net::metrics::Metrics;

    /// Every series the shipped alerting rules name is one the daemons export (a renamed metric
    /// would leave its alert silent for good), and each end says which it is.
    #[test]
    fn the_alerting_rules_name_only_exported_series() {
        let text = Metrics::with_build("relay", "0.1.0 (abc1234)").encode();
        assert!(
            text.contains("polycorn_build_info{role=\"relay\",version=\"0.1.0 (abc1234)\"} 1"),
            "{text}"
        );
        // The sample names each family's `# TYPE` line stands for.
        let mut exported = std::collections::BTreeSet::new();
        for l in text.lines() {
            let mut w = l.split_whitespace();
            let (Some("#"), Some("TYPE"), Some(name), Some(kind)) =
                (w.next(), w.next(), w.next(), w.next())
            else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                "info" => &["_info"],
                _ => &[""],
            };
            for s in suffixes {
                exported.insert(format!("{name}{s}"));
            }
        }
        let mut named = std::collections::BTreeSet::new();
        let mut rest = ALERTS;
        while let Some(i) = rest.find("polycorn_") {
            let name: String = rest[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[i + name.len()..];
            named.insert(name);
        }
        assert!(named.len() >= 10, "{named:?}");
        let unknown: Vec<_> = named.difference(&exported).collect();
        assert!(unknown.is_empty(), "not exported: {unknown:?}\n{text}");
        // Every alert has a severity and a summary.
        let alerts = ALERTS.matches("- alert: ").count();
        assert_eq!(ALERTS.matches("severity: ").count(), alerts);
        assert_eq!(ALERTS.matches("summary: ").count(), alerts);
    }
}
