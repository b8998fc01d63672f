//! What the relay's command does besides running: check its paths to the proxy
//! (`--check-paths`) and remove its interception rules (`--remove-interception`).

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::process::runtime;
use crate::config::{RelayConfig, RelayMode, UdpPolicy};
use crate::intercept::{InterceptionLock, TproxyOptions};
use crate::path::RelayPath;
use crate::subflow::HandshakeError;
use crate::tls;
use crate::tuning::Tuning;

/// The nftables table of the relay's interception.
pub(super) const RELAY_NFT_TABLE: &str = "polycorn_relay";

/// The relay's interception rules, when its configuration installs them.
pub(super) fn tproxy_options(cfg: &RelayConfig) -> Result<Option<TproxyOptions>> {
    let ic = &cfg.intercept;
    if !ic.install_nft || (ic.transparent.is_none() && ic.transparent6.is_none()) {
        return Ok(None);
    }
    let lan = ic
        .lan_device
        .clone()
        .context("intercept.lan_device: required with install_nft")?;
    let mut o = TproxyOptions::new(RELAY_NFT_TABLE, lan);
    o.v4_port = ic.transparent.map(|a| a.port());
    o.v6_port = ic.transparent6.map(|a| a.port());
    o.udp_block = ic.udp == UdpPolicy::Block;
    Ok(Some(o))
}

/// How long a starting relay waits for a removal of the interception to finish.
pub(super) const RELAY_LOCK_WAIT: Duration = Duration::from_secs(5);
/// How long `--remove-interception` waits for a running relay to exit (the relay unit's
/// `TimeoutStopSec` is 40 s).
const REMOVE_WAIT: Duration = Duration::from_secs(45);

/// `polycorn relay --config FILE --remove-interception`: remove the interception rules a relay
/// with this configuration installs (nftables table, policy rules and routes), e.g. after the
/// relay's socket unit stopped (a socket-activated relay leaves them for its next start) or
/// after a crash. Idempotent.
pub fn relay_remove_interception(path: &Path) -> Result<()> {
    let cfg = RelayConfig::load(path)?;
    match tproxy_options(&cfg)? {
        Some(o) => {
            // A relay that still runs (or drains, as systemd stops it beside its socket unit)
            // keeps its rules until it has exited.
            let lock = match InterceptionLock::acquire(&o.table, Duration::ZERO)
                .context("take the interception lock")?
            {
                Some(l) => Some(l),
                None => {
                    println!(
                        "a relay still runs in this network namespace: waiting up to {} s for it \
                         to exit before removing its interception",
                        REMOVE_WAIT.as_secs()
                    );
                    InterceptionLock::acquire(&o.table, REMOVE_WAIT)
                        .context("take the interception lock")?
                }
            };
            if lock.is_none() {
                println!(
                    "the relay still runs after {} s: its interception stays (nftables table inet \
                     {RELAY_NFT_TABLE}); stop polycorn-relay.service too, then run this again",
                    REMOVE_WAIT.as_secs()
                );
                return Ok(());
            }
            crate::intercept::remove_leftovers(&o).context("remove the TPROXY rules (nftables)")?;
            println!(
                "removed the relay's interception, if it was installed (nftables table inet \
                 {RELAY_NFT_TABLE}, fwmark rules and local routes)"
            );
        }
        None => println!(
            "{}: the relay installs no interception (intercept.install_nft or no transparent \
             listener); nothing to remove",
            path.display()
        ),
    }
    Ok(())
}

/// The relay's paths as its configuration describes them.
pub(super) fn relay_paths(cfg: &RelayConfig) -> Vec<RelayPath> {
    cfg.paths
        .iter()
        .map(|p| RelayPath {
            name: p.name.clone(),
            device: Some(p.device.clone()),
            source: p.source,
            proxy: cfg.proxy_for(p),
            mtu: p.mtu,
        })
        .collect()
}

/// `polycorn relay --config FILE --check-paths`: over every path, as the relay would, reach the
/// proxy (TCP pinned to the path, TLS with the relay's certificate, Hello) and say how it went;
/// the proxy answers without opening a session, so this may run beside a working relay.
/// Returns the exit status: 0 every path reached the proxy, 1 some did not, 2 none did.
/// With `json`, one JSON object per check instead of the lines.
pub fn relay_check_paths(path: &Path, json: bool) -> Result<u8> {
    let cfg = RelayConfig::load(path)?;
    if cfg.relay.mode != RelayMode::Polycorn {
        bail!(
            "{}: relay.mode is not \"polycorn\": only polycorn's subflows reach a proxy (the \
             baselines' tunnels go to tunnel_port)",
            path.display()
        );
    }
    let t = cfg
        .tls
        .as_ref()
        .with_context(|| format!("{}: [tls] is required in polycorn mode", path.display()))?;
    let relay_name = tls::relay_name_of_file(&t.cert)?;
    let tls_cfg = tls::client_config(&t.ca, &t.cert, &t.key)?;
    let paths = relay_paths(&cfg);
    let c = cfg.relay.congestion.as_deref();
    let sockopts =
        super::settle_congestion("relay.congestion", c, Tuning::of_relay(&cfg))?.subflow_sockopts();
    if !json {
        println!(
            "checking {} path(s) as relay `{relay_name}`: TCP over the path, TLS, Hello",
            paths.len()
        );
    }
    let rt = runtime()?;
    let modems_ok = !cfg.context.cells_from_modemmanager() || rt.block_on(check_modems(&cfg, json));
    let results = rt.block_on(crate::check::check_paths(&paths, tls_cfg, sockopts));
    let ok = results.iter().filter(|r| r.ok()).count();
    let status = match ok {
        n if n == results.len() && modems_ok => 0,
        0 => 2,
        _ => 1,
    };
    if json {
        for r in &results {
            println!("{}", check_json(r));
        }
        return Ok(status);
    }
    for r in &results {
        println!("{}", check_line(r));
    }
    let proxies: std::collections::BTreeSet<_> = results.iter().filter_map(|r| r.addr).collect();
    if results.len() == paths.len() {
        println!("{ok} of {} path(s) reach the proxy", results.len());
    } else {
        println!(
            "{ok} of {} checks passed ({} path(s), {} proxy address(es))",
            results.len(),
            paths.len(),
            proxies.len()
        );
    }
    Ok(status)
}

/// `relay --check-paths` with `[context] cells = "modemmanager"`: each path's modem and its
/// radio now, one line (or JSON object) per path. Returns whether every path has its modem.
async fn check_modems(cfg: &RelayConfig, json: bool) -> bool {
    let opts = super::modem_options(cfg);
    let bus = opts.bus.clone().unwrap_or_else(|| "the system bus".into());
    match crate::modem::mm::check(&opts).await {
        Err(e) => {
            if json {
                println!("{}", serde_json::json!({"modems": false, "error": e}));
            } else {
                println!("modems: FAILED: {e} (ModemManager on {bus})");
            }
            false
        }
        Ok(radios) => {
            let mut all = true;
            for (p, r) in opts.paths.iter().zip(radios) {
                all &= r.is_ok();
                if json {
                    let v = match &r {
                        Ok(r) => serde_json::json!({
                            "path": p.name,
                            "modem": r.modem,
                            "technology": r.tech.map(|t| t.as_str()),
                            "registered": r.registered,
                            "connected": r.connected,
                            "mcc": r.location.as_ref().map(|l| &l.mcc),
                            "mnc": r.location.as_ref().map(|l| &l.mnc),
                            "tac": r.location.as_ref().map(|l| l.tac),
                            "cell": r.location.as_ref().map(|l| l.ci),
                            "pci": r.pci,
                            "rsrp_dbm": r.signal.rsrp_dbm,
                            "rsrq_db": r.signal.rsrq_db,
                            "sinr_db": r.signal.sinr_db,
                            "rssi_dbm": r.signal.rssi_dbm,
                        }),
                        Err(e) => {
                            serde_json::json!({"path": p.name, "modem": null, "error": e.to_string()})
                        }
                    };
                    println!("{v}");
                } else {
                    match &r {
                        Ok(r) => println!("modem of {:?}: {r}", p.name),
                        Err(e) => println!("modem: FAILED: {e}"),
                    }
                }
            }
            all
        }
    }
}

/// One check of `relay --check-paths --json`.
fn check_json(r: &crate::check::PathCheck) -> serde_json::Value {
    use crate::check::Answer;
    let ms = |d: Duration| (d.as_secs_f64() * 1e4).round() / 10.0;
    let mut v = serde_json::json!({
        "path": r.path,
        "device": r.device,
        "proxy": r.proxy,
        "addr": r.addr.map(|a| a.to_string()),
        "ok": r.ok(),
    });
    match &r.outcome {
        Ok(ok) => {
            let (answer, says) = match &ok.answer {
                Answer::Checked(w) => ("checked", Some(w)),
                Answer::ProbeLost(w) => ("probe_lost", Some(w)),
                Answer::AnswerLost => ("answer_lost", None),
                Answer::Older => ("older_proxy", None),
            };
            v["source"] = serde_json::json!(ok.local.map(|a| a.ip().to_string()));
            v["setup_ms"] = serde_json::json!(ms(ok.setup));
            v["rtt_ms"] = serde_json::json!(ok.rtt.map(ms));
            v["mss"] = serde_json::json!(ok.mss);
            v["proxy_cert_not_after"] = serde_json::json!(ok.proxy_cert_not_after);
            v["answer"] = serde_json::json!(answer);
            v["proxy_says"] = serde_json::json!(says);
        }
        Err(e) => v["error"] = serde_json::json!(e.to_string()),
    }
    v
}

/// One path's line of `relay --check-paths`.
fn check_line(r: &crate::check::PathCheck) -> String {
    use crate::check::{Answer, ANSWER_WAIT, PROBE_BYTES};
    let device = r.device.as_deref().unwrap_or("-");
    let kib = PROBE_BYTES / 1024;
    let black_hole = "full-size packets are lost on this path (a path-MTU black hole: set the \
                      path's `mtu`, e.g. 1400)";
    match &r.outcome {
        Ok(ok) => {
            let source = ok.local.map_or_else(|| "-".into(), |a| a.ip().to_string());
            let ms = |d: Duration| match d.as_secs_f64() * 1e3 {
                ms if ms < 10.0 => format!("{ms:.1} ms"),
                ms => format!("{ms:.0} ms"),
            };
            let mut facts = format!("proxy {} reached in {}", ok.proxy, ms(ok.setup));
            if let Some(rtt) = ok.rtt {
                facts.push_str(&format!(", RTT {}", ms(rtt)));
            }
            if let Some(mss) = ok.mss {
                facts.push_str(&format!(", MSS {mss}"));
            }
            let head = format!("{} ({device}, {source})", r.path);
            // The proxy's certificate only when it ends soon.
            let now = tls::unix_now();
            let cert = ok
                .proxy_cert_not_after
                .map(|not_after| tls::Validity {
                    key: "the proxy's certificate",
                    file: ok.proxy.to_string().into(),
                    not_after,
                })
                .filter(|v| v.needs_warning(now))
                .map(|v| format!("; {}", v.describe(now)))
                .unwrap_or_default();
            let line = match &ok.answer {
                Answer::Checked(words) => {
                    format!("{head}: ok, {facts}, {kib} KiB each way; {words}")
                }
                Answer::Older => format!(
                    "{head}: ok, {facts}; the proxy is of an earlier build without path checks \
                     (no data sent; it opened a session for the check, which the check closed)"
                ),
                Answer::ProbeLost(words) => format!(
                    "{head}: FAILED: {facts}, but the {kib} KiB sent to it did not arrive: \
                     {black_hole}; {words}"
                ),
                Answer::AnswerLost => format!(
                    "{head}: FAILED: {facts}, but its {kib} KiB answer did not arrive within {} \
                     s: {black_hole}, or the path lost coverage just then",
                    ANSWER_WAIT.as_secs()
                ),
            };
            line + &cert
        }
        Err(e) => {
            let target = r.addr.map_or_else(|| r.proxy.clone(), |a| a.to_string());
            let mut line = format!("{} ({device}): FAILED to reach {target}: {e}", r.path);
            if e.is_setup() {
                line.push_str(
                    " (configuration or credentials: the relay's attempts fail the same way \
                     until that is fixed)",
                );
            } else if e.is_refused() {
                line.push_str(" (the proxy's host answered, but no proxy listens there)");
            } else if matches!(e, HandshakeError::Timeout(_)) {
                line.push_str(
                    " (nothing came back over this path: no coverage, a carrier or firewall \
                     dropping the port, or the proxy's host is down)",
                );
            }
            line
        }
    }
}
