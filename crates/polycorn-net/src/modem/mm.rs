//! The D-Bus client: ModemManager's modems to [`Radio`] readings, one per path.
//!
//! Each round reads every modem with one `GetManagedObjects` call, the bearers of the modems
//! the paths use with `GetAll`, and each such modem's `GetLocation()` (and `GetCellInfo()` where
//! offered), then sends one [`Radio`] per path. A round runs every `rate` and at once whenever
//! ModemManager emits a signal (a property changed, a modem or bearer came or went), so a
//! bearer that drops is seen without waiting for the next round. The first round that sees a
//! modem object sets its Signal interface's refresh rate (`Setup(rate)`) and, where needed,
//! enables its 3GPP (and, for positions, GNSS) location sources. A modem that vanishes (a USB
//! reset) leaves its path without a cell until a modem matching it is back, under whatever
//! object path; the connection to the bus is re-established when it fails.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use zbus::zvariant::{OwnedObjectPath, OwnedValue};
use zbus::Connection;

use super::*;

/// Longest wait for one D-Bus call.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Most modems looked at in one round.
pub const MAX_MODEMS: usize = 64;

/// What [`follow`] needs.
#[derive(Clone, Debug)]
pub struct MmOptions {
    /// The bus address (`unix:path=…`); None: the system bus (`DBUS_SYSTEM_BUS_ADDRESS`, else
    /// the standard socket).
    pub bus: Option<String>,
    /// The paths and how each names its modem.
    pub paths: Vec<ModemPath>,
    /// Round interval and the Signal interface's refresh rate (whole seconds, at least 1).
    pub rate: Duration,
    /// Enable the modems' GNSS location sources too (positions from ModemManager).
    pub gnss: bool,
}

/// One round's result.
#[derive(Clone, Debug, PartialEq)]
pub struct Round {
    /// Per path, its radio (or why no modem was found for it).
    pub radios: Vec<Result<Radio, MatchError>>,
    /// A GNSS position, from the first path's modem that has one.
    pub gnss: Option<GnssFix>,
}

/// Connects to the bus `address` (None: the system bus).
pub async fn connect(address: Option<&str>) -> zbus::Result<Connection> {
    match address {
        Some(a) => zbus::connection::Builder::address(a)?.build().await,
        None => Connection::system().await,
    }
}

async fn call_raw<B>(
    conn: &Connection,
    path: &str,
    iface: &str,
    method: &str,
    body: &B,
) -> Result<zbus::Message, String>
where
    B: serde::Serialize + zbus::zvariant::DynamicType,
{
    tokio::time::timeout(
        CALL_TIMEOUT,
        conn.call_method(Some(MM_SERVICE), path, Some(iface), method, body),
    )
    .await
    .map_err(|_| format!("{path}: {iface}.{method}: no answer in {CALL_TIMEOUT:?}"))?
    .map_err(|e| format!("{path}: {iface}.{method}: {e}"))
}

async fn call<B, R>(
    conn: &Connection,
    path: &str,
    iface: &str,
    method: &str,
    body: &B,
) -> Result<R, String>
where
    B: serde::Serialize + zbus::zvariant::DynamicType,
    R: for<'d> zbus::zvariant::DynamicDeserialize<'d>,
{
    let reply = call_raw(conn, path, iface, method, body).await?;
    let body = reply.body();
    body.deserialize::<R>()
        .map_err(|e| format!("{path}: {iface}.{method}: unexpected answer: {e}"))
}

/// Every modem ModemManager exports, with its bearers.
pub async fn modems(conn: &Connection) -> Result<Vec<(ModemInfo, Vec<BearerInfo>)>, String> {
    let objects: HashMap<OwnedObjectPath, HashMap<String, Props>> = call(
        conn,
        MM_PATH,
        "org.freedesktop.DBus.ObjectManager",
        "GetManagedObjects",
        &(),
    )
    .await
    .map_err(|e| format!("ModemManager ({MM_SERVICE}) on the bus: {e}"))?;
    let mut out = Vec::new();
    let mut paths: Vec<_> = objects.keys().collect();
    paths.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    for path in paths.into_iter().take(MAX_MODEMS) {
        let Some(m) = ModemInfo::from_interfaces(path.as_str(), &objects[path]) else {
            continue;
        };
        let mut bearers = Vec::new();
        for b in &m.bearers {
            // A bearer removed between the two calls is simply not there.
            if let Ok(p) = call::<_, Props>(
                conn,
                b,
                "org.freedesktop.DBus.Properties",
                "GetAll",
                &(BEARER_IFACE,),
            )
            .await
            {
                bearers.push(BearerInfo::from_props(&p));
            }
        }
        out.push((m, bearers));
    }
    Ok(out)
}

/// One round: each path's radio. `set_up` holds the modem objects already set up (their
/// Signal rate and location sources; None: set nothing up); `rate_s` is the Signal refresh
/// rate.
pub async fn round(
    conn: &Connection,
    paths: &[ModemPath],
    rate_s: u32,
    gnss: bool,
    mut set_up: Option<&mut HashSet<String>>,
) -> Result<Round, String> {
    let all = modems(conn).await?;
    let mut out = Round {
        radios: Vec::with_capacity(paths.len()),
        gnss: None,
    };
    for p in paths {
        let (m, bearers) = match find_modem(p, &all) {
            Ok(x) => x,
            Err(e) => {
                out.radios.push(Err(e));
                continue;
            }
        };
        if set_up.as_mut().is_some_and(|s| s.insert(m.object.clone())) {
            set_up_modem(conn, m, rate_s, gnss).await;
        }
        let mut location = None;
        if m.has_location {
            match call::<_, HashMap<u32, OwnedValue>>(
                conn,
                &m.object,
                LOCATION_IFACE,
                "GetLocation",
                &(),
            )
            .await
            {
                Ok(map) => {
                    let (reading, warnings) = parse_location(&map);
                    for w in warnings {
                        tracing::debug!(path = %p.name, modem = %m.object, "{w}");
                    }
                    location = reading.cell;
                    if out.gnss.is_none() {
                        out.gnss = reading.gnss;
                    }
                }
                Err(e) => tracing::debug!(path = %p.name, "{e}"),
            }
        }
        // ModemManager 1.20 and later; older ones answer with an error, and no pci is shown.
        let cells: Result<Vec<Props>, String> =
            call(conn, &m.object, MODEM_IFACE, "GetCellInfo", &()).await;
        let pci = cells.ok().and_then(|c| parse_cell_info(&c));
        out.radios
            .push(Ok(Radio::of(p.index, m, bearers, location, pci)));
    }
    Ok(out)
}

async fn set_up_modem(conn: &Connection, m: &ModemInfo, rate_s: u32, gnss: bool) {
    if m.has_signal && m.signal_rate_s != rate_s {
        match call_raw(conn, &m.object, SIGNAL_IFACE, "Setup", &(rate_s,)).await {
            Ok(_) => tracing::info!(modem = %m.object, rate_s, "signal refresh rate set"),
            Err(e) => {
                tracing::warn!(modem = %m.object, "cannot set the signal refresh rate (no RSRP without it): {e}")
            }
        }
    }
    if m.has_location {
        let enabled: u32 = call::<_, OwnedValue>(
            conn,
            &m.object,
            "org.freedesktop.DBus.Properties",
            "Get",
            &(LOCATION_IFACE, "Enabled"),
        )
        .await
        .ok()
        .and_then(|v| u32::try_from(v).ok())
        .unwrap_or(0);
        let mut want = enabled | LOCATION_3GPP_LAC_CI;
        if gnss {
            want |= LOCATION_GPS_RAW | LOCATION_GPS_NMEA;
        }
        if want != enabled {
            match call_raw(conn, &m.object, LOCATION_IFACE, "Setup", &(want, false)).await {
                Ok(_) => {
                    tracing::info!(modem = %m.object, sources = want, "location sources enabled")
                }
                Err(e) => {
                    tracing::warn!(modem = %m.object, "cannot enable the location sources (no serving cell without 3GPP location): {e}")
                }
            }
        }
    }
}

async fn next_signal(
    signals: &mut Option<zbus::MessageStream>,
) -> Option<zbus::Result<zbus::Message>> {
    signals.as_mut()?.next().await
}

async fn next_fix(fixes: &mut Option<mpsc::Receiver<ContextFix>>) -> Option<ContextFix> {
    fixes.as_mut()?.recv().await
}

/// What [`follow`] sends: each path's radio every round, and GNSS positions.
#[derive(Clone, Debug, PartialEq)]
pub enum Update {
    /// A path's radio.
    Radio(Radio),
    /// A GNSS position from a modem.
    Gnss(GnssFix),
}

/// Follows ModemManager until `tx` is closed, sending each path's [`Radio`] every round (and
/// [`Update::Gnss`] when `opts.gnss`). Paths without a modem are sent as [`Radio::absent`] and
/// logged when that starts; a bus that cannot be reached is retried every `rate`.
pub async fn follow(opts: MmOptions, tx: mpsc::Sender<Update>) {
    let rate = opts.rate.max(Duration::from_secs(1));
    let rate_s = rate.as_secs().min(u64::from(u32::MAX)) as u32;
    let mut problems: Vec<Option<String>> = vec![None; opts.paths.len()];
    let bus = opts.bus.as_deref().unwrap_or("the system bus");
    loop {
        let conn = tokio::select! {
            _ = tx.closed() => return,
            c = connect(opts.bus.as_deref()) => c,
        };
        let conn = match conn {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(
                    bus,
                    "context.cells = \"modemmanager\": cannot connect to D-Bus: {e}"
                );
                for p in &opts.paths {
                    if tx
                        .send(Update::Radio(Radio::absent(p.index)))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                tokio::select! {
                    _ = tx.closed() => return,
                    _ = tokio::time::sleep(rate) => continue,
                }
            }
        };
        let rule = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .sender(MM_SERVICE)
            .map(|b| b.build());
        let mut signals = match rule {
            Ok(r) => zbus::MessageStream::for_match_rule(r, &conn, Some(256))
                .await
                .ok(),
            Err(_) => None,
        };
        let mut set_up = HashSet::new();
        let mut tick = tokio::time::interval(rate);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let woke_by_signal = tokio::select! {
                _ = tx.closed() => return,
                _ = tick.tick() => None,
                m = next_signal(&mut signals), if signals.is_some() => Some(m.is_some()),
            };
            if let Some(alive) = woke_by_signal {
                if !alive {
                    signals = None;
                }
                // A burst of signals (a modem's properties all change at once): one round.
                while let Some(s) = signals.as_mut() {
                    match futures_util::FutureExt::now_or_never(s.next()) {
                        Some(Some(_)) => continue,
                        Some(None) => signals = None,
                        None => break,
                    }
                }
            }
            let r = match round(&conn, &opts.paths, rate_s, opts.gnss, Some(&mut set_up)).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(bus, "{e}");
                    // ModemManager restarted or is gone: every object path is new when it is back.
                    set_up.clear();
                    Round {
                        radios: opts
                            .paths
                            .iter()
                            .map(|p| Ok(Radio::absent(p.index)))
                            .collect(),
                        gnss: None,
                    }
                }
            };
            for (k, radio) in r.radios.into_iter().enumerate() {
                let radio = match radio {
                    Ok(radio) => {
                        if problems[k].take().is_some() {
                            tracing::info!(path = %opts.paths[k].name, "modem found: {radio}");
                        }
                        radio
                    }
                    Err(e) => {
                        let text = e.to_string();
                        if problems[k].as_deref() != Some(text.as_str()) {
                            tracing::error!("context.cells = \"modemmanager\": {text}");
                            problems[k] = Some(text);
                        }
                        Radio::absent(opts.paths[k].index)
                    }
                };
                if tx.send(Update::Radio(radio)).await.is_err() {
                    return;
                }
            }
            if let Some(g) = r.gnss.filter(|_| opts.gnss) {
                if tx.send(Update::Gnss(g)).await.is_err() {
                    return;
                }
            }
        }
    }
}

fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The relay's context with cells from ModemManager: follows the modems ([`follow`]) and joins
/// their radios with the positions of `fixes` (gpsd's), or, when `fixes` is None, with the
/// modems' own GNSS positions, into `out` ([`join`]). `on_radio` sees every radio reading (the
/// relay's metrics). Ends when `out` is closed.
pub async fn run(
    opts: MmOptions,
    fixes: Option<mpsc::Receiver<ContextFix>>,
    out: mpsc::Sender<ContextFix>,
    on_radio: impl FnMut(&Radio) + Send + 'static,
) {
    let (tx, updates) = mpsc::channel(64);
    let gnss = fixes.is_none();
    let paths = opts.paths.len();
    let follower = tokio::spawn(follow(MmOptions { gnss, ..opts }, tx));
    join(paths, fixes, updates, out, on_radio).await;
    follower.abort();
}

/// Joins radio readings (`updates`) of `paths` paths with position fixes ([`CellJoin`]: every
/// fix leaves with the paths' cells, a cell loss at once) into `out`. Without `fixes`, the
/// GNSS positions among `updates` are the fixes. Ends when `out` is closed or `updates` ends.
pub async fn join(
    paths: usize,
    mut fixes: Option<mpsc::Receiver<ContextFix>>,
    mut updates: mpsc::Receiver<Update>,
    out: mpsc::Sender<ContextFix>,
    mut on_radio: impl FnMut(&Radio) + Send + 'static,
) {
    let mut join = CellJoin::new(paths);
    let gnss = fixes.is_none();
    loop {
        let got = tokio::select! {
            _ = out.closed() => break,
            f = next_fix(&mut fixes), if fixes.is_some() => Ok(f),
            u = updates.recv() => Err(u),
        };
        let ready = match got {
            Ok(Some(f)) => Some(join.on_fix(f, Instant::now())),
            Ok(None) => {
                fixes = None;
                tracing::warn!("the position source ended; cells are no longer sent");
                None
            }
            Err(u) => match u {
                None => break,
                Some(Update::Radio(r)) => {
                    on_radio(&r);
                    join.on_report(r.report(), Instant::now())
                }
                Some(Update::Gnss(g)) if gnss => Some(join.on_fix(
                    ContextFix {
                        unix_ms: now_unix_ms(),
                        lat: g.lat,
                        lon: g.lon,
                        speed_mps: g.speed_mps,
                        heading_deg: g.heading_deg,
                        cells: Vec::new(),
                    },
                    Instant::now(),
                )),
                Some(Update::Gnss(_)) => None,
            },
        };
        if let Some(f) = ready {
            if out.send(f).await.is_err() {
                break;
            }
        }
    }
}

/// Each path's modem and radio now, for `relay --check-paths` and the relay's start: one round
/// on a fresh connection that changes nothing on the modems. `Err`: the bus or ModemManager
/// cannot be reached.
pub async fn check(opts: &MmOptions) -> Result<Vec<Result<Radio, MatchError>>, String> {
    let bus = opts.bus.as_deref().unwrap_or("the system bus");
    let conn = tokio::time::timeout(CALL_TIMEOUT, connect(opts.bus.as_deref()))
        .await
        .map_err(|_| format!("D-Bus at {bus}: no answer in {CALL_TIMEOUT:?}"))?
        .map_err(|e| format!("D-Bus at {bus}: {e}"))?;
    Ok(round(&conn, &opts.paths, 0, false, None).await?.radios)
}
