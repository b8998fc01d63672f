//! The relay's and the proxy's configurations for a bench system, built as typed values and
//! written with `to_toml`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use polycorn_emu::context::GPSD_PORT;
use polycorn_net::config::{
    ContextSource, IdleRefresh, LinkDbConfig, PathConfig, ProxyConfig, RelayConfig, RelayMode,
    TlsFiles,
};

use polycorn_net::proxy_addr::ProxyAddr;

use super::System;
use crate::harness::METRICS_ADDR;

/// The proxy's subflow port on the testbed.
const PROXY_PORT: u16 = 7700;

/// The proxy's subflow address on the testbed's path `i`.
pub(crate) fn proxy_addr(i: usize) -> Result<ProxyAddr> {
    let addr: std::net::SocketAddr = format!("10.100.{i}.2:{PROXY_PORT}").parse()?;
    Ok(addr.into())
}

/// The relay mode named `mode` (`polycorn`, `mptcp`, `single`).
pub(crate) fn relay_mode(mode: &str) -> Result<RelayMode> {
    Ok(match mode {
        "polycorn" => RelayMode::Polycorn,
        "mptcp" => RelayMode::Mptcp,
        "single" => RelayMode::Single,
        other => bail!("unknown relay mode `{other}`"),
    })
}

fn idle_refresh(name: &str) -> Result<IdleRefresh> {
    Ok(match name {
        "collapsed" => IdleRefresh::Collapsed,
        "used" => IdleRefresh::Used,
        "off" => IdleRefresh::Off,
        other => bail!("unknown idle_refresh `{other}`"),
    })
}

/// Relay and proxy configurations of `sys` on a testbed of `paths` paths: the relay reaches the
/// proxy at `10.100.{i}.2` over device `path{i}`, both serve metrics on [`METRICS_ADDR`], and
/// polycorn systems read the testbed's gpsd and, given `linkdb` (and, for the relay, its flag
/// set), predict handovers with it.
pub(crate) fn configs(
    sys: &System,
    paths: usize,
    linkdb: Option<(&LinkDbConfig, bool)>,
) -> Result<(RelayConfig, ProxyConfig)> {
    let polycorn = sys.mode == "polycorn";
    let spec = if polycorn {
        sys.spec.as_str()
    } else {
        "minrtt"
    };
    let metrics = Some(METRICS_ADDR.parse().context("metrics address")?);
    let mut relay = RelayConfig::new(proxy_addr(0)?);
    let r = &mut relay.relay;
    r.mode = relay_mode(&sys.mode)?;
    r.scheduler = spec.into();
    r.congestion = Some(sys.congestion.into());
    if let Some(name) = sys.idle_refresh {
        r.idle_refresh = idle_refresh(name)?;
    }
    if sys.warm {
        r.slow_start_after_idle = Some(false);
    }
    r.rto_max_ms = sys.rto_max_ms;
    if let Some(s) = sys.idle_probe_s {
        r.idle_probe_s = s;
    }
    if let Some(g) = sys.window_gain {
        r.window_gain = g;
    }
    relay.paths = (0..paths)
        .map(|i| -> Result<PathConfig> {
            Ok(PathConfig {
                name: format!("p{i}"),
                device: format!("path{i}"),
                source: Some(format!("10.100.{i}.1").parse()?),
                proxy: Some(proxy_addr(i)?),
                mtu: None,
                modem: None,
                at_port: None,
            })
        })
        .collect::<Result<_>>()?;
    relay.intercept.transparent = Some("0.0.0.0:7070".parse()?);
    relay.intercept.install_nft = true;
    relay.intercept.lan_device = Some("lan0".into());
    if polycorn {
        relay.context.source = ContextSource::Gpsd;
        relay.context.gpsd = std::net::SocketAddr::from(([127, 0, 0, 1], GPSD_PORT));
    }
    relay.tls = Some(TlsFiles::new("ca.pem", "relay.pem", "relay.key"));
    relay.metrics.listen = metrics;

    let mut proxy = ProxyConfig::new(TlsFiles::new("ca.pem", "proxy.pem", "proxy.key"));
    let p = &mut proxy.proxy;
    p.listen = vec![format!("0.0.0.0:{PROXY_PORT}").parse()?];
    p.tunnel_listen = Some("0.0.0.0:7701".parse()?);
    p.tunnel_peers = vec!["10.100.0.0/16".parse()?];
    p.scheduler = spec.into();
    p.congestion = Some(sys.congestion.into());
    if sys.warm {
        p.slow_start_after_idle = Some(false);
    }
    p.rto_max_ms = sys.rto_max_ms;
    if let Some(s) = sys.idle_probe_s {
        p.idle_probe_s = s;
    }
    if let Some(g) = sys.window_gain {
        p.window_gain = g;
    }
    p.ask_refresh = sys.ask_refresh;
    proxy.policy.allow = vec!["10.0.2.0/24".parse()?];
    proxy.metrics.listen = metrics;
    if let (Some((db, at_relay)), true) = (linkdb, polycorn) {
        if at_relay {
            relay.linkdb = db.clone();
        }
        proxy.linkdb = db.clone();
    }
    Ok((relay, proxy))
}

/// Writes `relay` to `dir/relay_file` and `proxy` to `dir/proxy.toml`; returns both paths.
pub(crate) fn write_pair(
    dir: &Path,
    relay_file: &str,
    relay: &RelayConfig,
    proxy: &ProxyConfig,
) -> Result<(PathBuf, PathBuf)> {
    let (r, p) = (dir.join(relay_file), dir.join("proxy.toml"));
    std::fs::write(&r, relay.to_toml()).with_context(|| format!("write {}", r.display()))?;
    std::fs::write(&p, proxy.to_toml()).with_context(|| format!("write {}", p.display()))?;
    Ok((r, p))
}

/// Writes the configurations of `sys` ([`configs`], `linkdb` as there) to `dir/relay.toml` and
/// `dir/proxy.toml`.
pub(crate) fn write_configs(
    dir: &Path,
    sys: &System,
    paths: usize,
    linkdb: Option<(&LinkDbConfig, bool)>,
) -> Result<(PathBuf, PathBuf)> {
    let (relay, proxy) = configs(sys, paths, linkdb)?;
    write_pair(dir, "relay.toml", &relay, &proxy)
}

#[cfg(test)]
mod tests;
