//! Each carrier's radio as its modem reports it: serving cell, access technology, signal,
//! registration and bearer state, read from ModemManager over the system D-Bus
//! (`[context] cells = "modemmanager"`, the shell in [`mm`]).
//!
//! This module is pure: it turns the property values ModemManager exports into [`Radio`]
//! readings and joins those with the train's position fixes ([`CellJoin`]). The D-Bus client in
//! [`mm`] only fetches the values and hands them here.
//!
//! What is read (ModemManager 1.18 or later; 1.20 adds the physical cell id):
//!
//! * `org.freedesktop.ModemManager1.Modem`: `EquipmentIdentifier`, `DeviceIdentifier`,
//!   `Ports` (the network interface a path's `device` names), `State`, `AccessTechnologies`,
//!   `Bearers`; `GetCellInfo()` for the serving cell's physical cell id.
//! * `…Modem.Modem3gpp`: `Imei`, `RegistrationState`, `OperatorCode`.
//! * `…Modem.Location`: `GetLocation()` — source 1 (3GPP) is the string
//!   `MCC,MNC,LAC,CI,TAC` (LAC, CI and TAC in hexadecimal); source 2 (GPS raw) a dictionary
//!   with `latitude`, `longitude` and `utc-time`; source 4 NMEA sentences (`RMC` gives speed
//!   and course).
//! * `…Modem.Signal`: `Lte`, `Nr5g`, `Umts`, `Gsm` dictionaries of doubles (`rsrp`, `rsrq`,
//!   `snr`/`sinr`, `rssi`), refreshed at the rate the relay sets with `Setup(rate)`.
//! * `…Bearer`: `Connected`, `Interface`.
//!
//! A modem that is not registered (home or roaming), or whose bearers are all disconnected, has
//! no cell: its path's [`CellReport`] says `cell = None`, a cell loss, as soon as that is seen.

pub mod at;
pub mod at_port;
pub mod mm;
#[cfg(feature = "mock-modemmanager")]
pub mod mock;

use std::collections::HashMap;
use std::fmt;

use tokio::time::Instant;
use zbus::zvariant::Value;

use crate::context::{CellReport, ContextFix, MAX_CARRIERS};

/// ModemManager's well-known bus name.
pub const MM_SERVICE: &str = "org.freedesktop.ModemManager1";
/// ModemManager's root object (its ObjectManager).
pub const MM_PATH: &str = "/org/freedesktop/ModemManager1";
/// The modem interface.
pub const MODEM_IFACE: &str = "org.freedesktop.ModemManager1.Modem";
/// The 3GPP interface.
pub const MODEM_3GPP_IFACE: &str = "org.freedesktop.ModemManager1.Modem.Modem3gpp";
/// The signal interface.
pub const SIGNAL_IFACE: &str = "org.freedesktop.ModemManager1.Modem.Signal";
/// The location interface.
pub const LOCATION_IFACE: &str = "org.freedesktop.ModemManager1.Modem.Location";
/// The bearer interface.
pub const BEARER_IFACE: &str = "org.freedesktop.ModemManager1.Bearer";

/// `MMModemLocationSource`: 3GPP location area and cell.
pub const LOCATION_3GPP_LAC_CI: u32 = 1 << 0;
/// `MMModemLocationSource`: GNSS position as a dictionary.
pub const LOCATION_GPS_RAW: u32 = 1 << 1;
/// `MMModemLocationSource`: GNSS NMEA sentences.
pub const LOCATION_GPS_NMEA: u32 = 1 << 2;
/// `MMModemPortType` of a network interface.
pub const PORT_TYPE_NET: u32 = 2;
/// `MMModemState` CONNECTED.
pub const STATE_CONNECTED: i32 = 11;
/// `MMModemState` REGISTERED.
pub const STATE_REGISTERED: i32 = 8;

/// A property dictionary of one interface (`a{sv}`).
pub type Props = HashMap<String, zbus::zvariant::OwnedValue>;

/// The access technology a modem is on (the most advanced of ModemManager's
/// `AccessTechnologies` bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tech {
    /// GSM, GPRS or EDGE.
    Gsm,
    /// UMTS, HSPA, HSPA+.
    Umts,
    /// LTE (also Cat-M and NB-IoT).
    Lte,
    /// 5G NR (with or without an LTE anchor).
    Nr,
}

impl Tech {
    /// The technology of `AccessTechnologies` (`MMModemAccessTechnology` bits); `None` for
    /// unknown or CDMA-only.
    pub fn from_mm_bits(bits: u32) -> Option<Tech> {
        if bits & (1 << 15) != 0 {
            Some(Tech::Nr)
        } else if bits & ((1 << 14) | (1 << 16) | (1 << 17)) != 0 {
            Some(Tech::Lte)
        } else if bits & ((1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9)) != 0 {
            Some(Tech::Umts)
        } else if bits & ((1 << 1) | (1 << 2) | (1 << 3) | (1 << 4)) != 0 {
            Some(Tech::Gsm)
        } else {
            None
        }
    }

    /// `gsm`, `umts`, `lte` or `nr` (metrics label, status).
    pub fn as_str(self) -> &'static str {
        match self {
            Tech::Gsm => "gsm",
            Tech::Umts => "umts",
            Tech::Lte => "lte",
            Tech::Nr => "nr",
        }
    }
}

impl fmt::Display for Tech {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The 3GPP location ModemManager reports (`MCC,MNC,LAC,CI,TAC`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location3gpp {
    /// Mobile country code (decimal digits as sent).
    pub mcc: String,
    /// Mobile network code (decimal digits as sent, leading zeros kept).
    pub mnc: String,
    /// Location area code (0 when not on a 2G/3G cell).
    pub lac: u32,
    /// Cell identity (E-UTRAN or NR cell identity on LTE/NR); 0: unknown.
    pub ci: u64,
    /// Tracking area code (0 when not on LTE/NR).
    pub tac: u32,
}

/// Parses ModemManager's 3GPP location string, `MCC,MNC,LAC,CI,TAC` with LAC, CI and TAC in
/// hexadecimal (older versions send only the first four fields).
pub fn parse_3gpp_location(s: &str) -> Result<Location3gpp, String> {
    let fields: Vec<&str> = s.trim().split(',').map(str::trim).collect();
    if !(4..=5).contains(&fields.len()) {
        return Err(format!(
            "3GPP location {s:?}: {} fields, expected MCC,MNC,LAC,CI[,TAC]",
            fields.len()
        ));
    }
    let digits = |name: &str, v: &str| {
        if (2..=3).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_digit()) {
            Ok(v.to_string())
        } else {
            Err(format!(
                "3GPP location {s:?}: {name} {v:?} is not 2 or 3 digits"
            ))
        }
    };
    let hex = |name: &str, v: &str, max: u64| -> Result<u64, String> {
        if v.is_empty() {
            return Ok(0);
        }
        match u64::from_str_radix(v, 16) {
            Ok(x) if x <= max => Ok(x),
            _ => Err(format!(
                "3GPP location {s:?}: {name} {v:?} is not a hexadecimal number up to {max:#x}"
            )),
        }
    };
    Ok(Location3gpp {
        mcc: digits("MCC", fields[0])?,
        mnc: digits("MNC", fields[1])?,
        lac: hex("LAC", fields[2], u64::from(u32::MAX))? as u32,
        // NR cell identities have 36 bits.
        ci: hex("CI", fields[3], (1 << 36) - 1)?,
        tac: match fields.get(4) {
            Some(t) => hex("TAC", t, 0xff_ffff)? as u32,
            None => 0,
        },
    })
}

/// Signal of the serving cell, from the `…Modem.Signal` interface. Units: dBm for RSRP and
/// RSSI, dB for RSRQ and SINR.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Signal {
    /// Reference signal received power, dBm.
    pub rsrp_dbm: Option<f64>,
    /// Reference signal received quality, dB.
    pub rsrq_db: Option<f64>,
    /// Signal to interference and noise ratio (LTE `snr`, NR `sinr`), dB.
    pub sinr_db: Option<f64>,
    /// Received signal strength, dBm (LTE, UMTS, GSM).
    pub rssi_dbm: Option<f64>,
}

/// Values ModemManager reports are physical: anything outside these is garbage.
fn plausible(v: f64, lo: f64, hi: f64) -> Option<f64> {
    (v.is_finite() && (lo..=hi).contains(&v)).then_some(v)
}

/// The signal of the technology `tech` in the Signal interface's properties (`Lte`, `Nr5g`,
/// `Umts`, `Gsm`, each `a{sv}` of doubles). On NR the `Nr5g` values are taken where present,
/// the LTE anchor's otherwise; a technology's dictionary that is absent or empty gives
/// nothing.
pub fn parse_signal(props: &Props, tech: Option<Tech>) -> Signal {
    let get = |dict: &str, key: &str| -> Option<f64> {
        let v = props.get(dict)?;
        dict_f64(v, key)
    };
    let pick = |dicts: &[&str], key: &str| dicts.iter().find_map(|d| get(d, key));
    let dicts: &[&str] = match tech {
        Some(Tech::Nr) => &["Nr5g", "Lte"],
        Some(Tech::Lte) | None => &["Lte", "Nr5g"],
        Some(Tech::Umts) => &["Umts"],
        Some(Tech::Gsm) => &["Gsm"],
    };
    Signal {
        rsrp_dbm: pick(dicts, "rsrp").and_then(|v| plausible(v, -160.0, -30.0)),
        rsrq_db: pick(dicts, "rsrq").and_then(|v| plausible(v, -40.0, 20.0)),
        sinr_db: dicts
            .iter()
            .find_map(|d| get(d, "sinr").or_else(|| get(d, "snr")))
            .and_then(|v| plausible(v, -30.0, 60.0)),
        rssi_dbm: pick(dicts, "rssi").and_then(|v| plausible(v, -140.0, 0.0)),
    }
}

/// A GNSS position from the Location interface.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GnssFix {
    /// Latitude, degrees.
    pub lat: f64,
    /// Longitude, degrees.
    pub lon: f64,
    /// Ground speed, m/s (NaN: not reported).
    pub speed_mps: f64,
    /// Course, degrees clockwise from north (NaN: not reported).
    pub heading_deg: f64,
}

/// What `GetLocation()` returned (`a{uv}` keyed by `MMModemLocationSource`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LocationReading {
    /// Source 1, when present and valid.
    pub cell: Option<Location3gpp>,
    /// Source 2 or 4, when present with a position.
    pub gnss: Option<GnssFix>,
}

/// Parses `GetLocation()`'s answer. Bad entries are left out and named in the returned
/// warnings.
pub fn parse_location(
    map: &HashMap<u32, zbus::zvariant::OwnedValue>,
) -> (LocationReading, Vec<String>) {
    let mut out = LocationReading::default();
    let mut warnings = Vec::new();
    if let Some(v) = map.get(&LOCATION_3GPP_LAC_CI) {
        match as_str(v) {
            Some(s) => match parse_3gpp_location(s) {
                Ok(l) => out.cell = Some(l),
                Err(e) => warnings.push(e),
            },
            None => warnings.push("3GPP location is not a string".into()),
        }
    }
    let mut speed_heading = (f64::NAN, f64::NAN);
    let mut nmea_pos = None;
    if let Some(v) = map.get(&LOCATION_GPS_NMEA) {
        if let Some(text) = as_str(v) {
            for line in text.lines() {
                if let Some(rmc) = parse_nmea_rmc(line) {
                    speed_heading = (rmc.speed_mps, rmc.heading_deg);
                    nmea_pos = Some(rmc);
                }
            }
        }
    }
    if let Some(v) = map.get(&LOCATION_GPS_RAW) {
        let lat = dict_f64(v, "latitude");
        let lon = dict_f64(v, "longitude");
        match (lat, lon) {
            (Some(lat), Some(lon))
                if (-90.0..=90.0).contains(&lat) && (-180.0..=180.0).contains(&lon) =>
            {
                out.gnss = Some(GnssFix {
                    lat,
                    lon,
                    speed_mps: speed_heading.0,
                    heading_deg: speed_heading.1,
                })
            }
            (None, None) => {}
            _ => warnings.push(format!(
                "GPS raw location without a valid position: {lat:?}, {lon:?}"
            )),
        }
    }
    if out.gnss.is_none() {
        out.gnss = nmea_pos;
    }
    (out, warnings)
}

/// Position, speed and course of an NMEA `RMC` sentence with status `A` (valid); the checksum,
/// when present, must match.
pub fn parse_nmea_rmc(line: &str) -> Option<GnssFix> {
    let line = line.trim();
    let body = line.strip_prefix('$')?;
    let body = match body.split_once('*') {
        Some((b, sum)) => {
            let want = u8::from_str_radix(sum.get(..2)?, 16).ok()?;
            if b.bytes().fold(0u8, |a, c| a ^ c) != want {
                return None;
            }
            b
        }
        None => body,
    };
    let f: Vec<&str> = body.split(',').collect();
    if f.len() < 9 || f[0].len() != 5 || !f[0].ends_with("RMC") || f[2] != "A" {
        return None;
    }
    let coord = |v: &str, hemi: &str, deg_digits: usize, max: f64| -> Option<f64> {
        if v.len() < deg_digits + 2 {
            return None;
        }
        let deg: f64 = v.get(..deg_digits)?.parse().ok()?;
        let min: f64 = v.get(deg_digits..)?.parse().ok()?;
        if !(0.0..60.0).contains(&min) {
            return None;
        }
        let x = deg + min / 60.0;
        let x = match hemi {
            "N" | "E" => x,
            "S" | "W" => -x,
            _ => return None,
        };
        (x.abs() <= max).then_some(x)
    };
    let lat = coord(f[3], f[4], 2, 90.0)?;
    let lon = coord(f[5], f[6], 3, 180.0)?;
    let num = |v: &str| -> f64 {
        v.parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .unwrap_or(f64::NAN)
    };
    Some(GnssFix {
        lat,
        lon,
        speed_mps: num(f[7]) * 1852.0 / 3600.0,
        heading_deg: num(f[8]),
    })
}

/// One modem as ModemManager exports it (its interfaces' properties), before its bearers are
/// read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModemInfo {
    /// Its D-Bus object path (changes when the modem is reset and comes back).
    pub object: String,
    /// IMEI (`Modem3gpp.Imei`).
    pub imei: String,
    /// `EquipmentIdentifier` (the IMEI on 3GPP modems).
    pub equipment_id: String,
    /// `DeviceIdentifier` (ModemManager's hash of the device).
    pub device_id: String,
    /// The network interfaces among its ports (`Ports` of type net).
    pub net_ports: Vec<String>,
    /// Bearer object paths.
    pub bearers: Vec<String>,
    /// `MMModemState`.
    pub state: i32,
    /// The access technology.
    pub tech: Option<Tech>,
    /// `MMModem3gppRegistrationState` (None: no 3GPP interface).
    pub registration: Option<u32>,
    /// `MCCMNC` of the operator registered with.
    pub operator: String,
    /// Signal of the current technology.
    pub signal: Signal,
    /// Whether the Signal interface is there.
    pub has_signal: bool,
    /// Whether the Location interface is there.
    pub has_location: bool,
    /// The Signal interface's refresh rate, s (0: off).
    pub signal_rate_s: u32,
}

impl ModemInfo {
    /// The modem at `object` from its interfaces (`GetManagedObjects`' value for it); `None`
    /// when it has no Modem interface.
    pub fn from_interfaces(object: &str, ifaces: &HashMap<String, Props>) -> Option<ModemInfo> {
        let modem = ifaces.get(MODEM_IFACE)?;
        let s = |p: &Props, k: &str| p.get(k).and_then(|v| as_str(v)).unwrap_or("").to_string();
        let mut m = ModemInfo {
            object: object.to_string(),
            equipment_id: s(modem, "EquipmentIdentifier"),
            device_id: s(modem, "DeviceIdentifier"),
            state: modem.get("State").and_then(|v| as_i64(v)).unwrap_or(0) as i32,
            tech: modem
                .get("AccessTechnologies")
                .and_then(|v| as_i64(v))
                .and_then(|b| Tech::from_mm_bits(b as u32)),
            ..ModemInfo::default()
        };
        if let Some(Value::Array(ports)) = modem.get("Ports").map(|v| unwrap(v)) {
            for p in ports.inner() {
                if let Value::Structure(st) = unwrap(p) {
                    if let [name, kind] = st.fields() {
                        if as_i64(kind) == Some(i64::from(PORT_TYPE_NET)) {
                            if let Some(n) = as_str(name) {
                                m.net_ports.push(n.to_string());
                            }
                        }
                    }
                }
            }
        }
        if let Some(Value::Array(b)) = modem.get("Bearers").map(|v| unwrap(v)) {
            m.bearers = b
                .inner()
                .iter()
                .filter_map(|v| as_str(v).map(String::from))
                .collect();
        }
        if let Some(g) = ifaces.get(MODEM_3GPP_IFACE) {
            m.imei = s(g, "Imei");
            m.operator = s(g, "OperatorCode");
            m.registration = g
                .get("RegistrationState")
                .and_then(|v| as_i64(v))
                .map(|x| x as u32);
        }
        if let Some(sig) = ifaces.get(SIGNAL_IFACE) {
            m.has_signal = true;
            m.signal = parse_signal(sig, m.tech);
            m.signal_rate_s = sig.get("Rate").and_then(|v| as_i64(v)).unwrap_or(0) as u32;
        }
        m.has_location = ifaces.contains_key(LOCATION_IFACE);
        Some(m)
    }

    /// Registered with a network that carries data (home or roaming, also the CSFB variants).
    /// A modem without a 3GPP interface counts as registered from its `State`.
    pub fn registered(&self) -> bool {
        match self.registration {
            Some(r) => matches!(r, 1 | 5 | 9 | 10),
            None => self.state >= STATE_REGISTERED,
        }
    }

    /// Does `id` (a path's `modem`) name this modem: its IMEI, equipment or device identifier?
    pub fn is(&self, id: &str) -> bool {
        !id.is_empty()
            && [&self.imei, &self.equipment_id, &self.device_id]
                .iter()
                .any(|x| *x == id)
    }

    /// A short description for logs and errors.
    pub fn describe(&self) -> String {
        let id = if self.imei.is_empty() {
            &self.equipment_id
        } else {
            &self.imei
        };
        format!(
            "{} (IMEI/equipment {id}, interfaces {:?})",
            self.object, self.net_ports
        )
    }
}

/// A bearer's properties.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BearerInfo {
    /// `Connected`.
    pub connected: bool,
    /// `Interface`: the network interface while connected.
    pub interface: String,
}

impl BearerInfo {
    /// From `GetAll` on the Bearer interface.
    pub fn from_props(p: &Props) -> BearerInfo {
        BearerInfo {
            connected: p.get("Connected").and_then(|v| as_bool(v)).unwrap_or(false),
            interface: p
                .get("Interface")
                .and_then(|v| as_str(v))
                .unwrap_or("")
                .to_string(),
        }
    }
}

/// How a path names its modem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModemPath {
    /// Path index (its place in the relay's `[[path]]` list).
    pub index: u8,
    /// Path name.
    pub name: String,
    /// The path's network interface (`device`).
    pub device: String,
    /// The path's `modem`: IMEI, equipment or device identifier. None: matched by `device`.
    pub modem: Option<String>,
}

/// Why no modem was found for a path.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MatchError {
    /// No modem has that identifier.
    #[error("path {path:?}: no modem with IMEI, equipment or device identifier {id:?} (modems: {known})")]
    NoSuchModem {
        /// Path name.
        path: String,
        /// The configured identifier.
        id: String,
        /// The modems there are.
        known: String,
    },
    /// No modem has the path's interface among its ports or bearers.
    #[error("path {path:?}: no modem has the network interface {device:?} (modems: {known}); set the path's `modem` to its IMEI")]
    NoModemForDevice {
        /// Path name.
        path: String,
        /// The path's interface.
        device: String,
        /// The modems there are.
        known: String,
    },
    /// The identifier names a modem whose interfaces do not include the path's device.
    #[error("path {path:?}: modem {id:?} is {object}, whose interfaces {ports:?} do not include the path's device {device:?}")]
    WrongDevice {
        /// Path name.
        path: String,
        /// The configured identifier.
        id: String,
        /// The modem's object.
        object: String,
        /// Its interfaces.
        ports: Vec<String>,
        /// The path's interface.
        device: String,
    },
}

/// The modem of `path` among `modems` (each with its bearers' interfaces): by `path.modem` if
/// set, else the one whose network ports or bearers' interfaces include `path.device`.
pub fn find_modem<'a>(
    path: &ModemPath,
    modems: &'a [(ModemInfo, Vec<BearerInfo>)],
) -> Result<&'a (ModemInfo, Vec<BearerInfo>), MatchError> {
    let known = || {
        if modems.is_empty() {
            "none".to_string()
        } else {
            modems
                .iter()
                .map(|(m, _)| m.describe())
                .collect::<Vec<_>>()
                .join("; ")
        }
    };
    let has_device = |(m, b): &(ModemInfo, Vec<BearerInfo>)| {
        m.net_ports.contains(&path.device) || b.iter().any(|b| b.interface == path.device)
    };
    match &path.modem {
        Some(id) => {
            let found =
                modems
                    .iter()
                    .find(|(m, _)| m.is(id))
                    .ok_or_else(|| MatchError::NoSuchModem {
                        path: path.name.clone(),
                        id: id.clone(),
                        known: known(),
                    })?;
            // A modem with no net port listed yet (still initialising) is taken on its word.
            if found.0.net_ports.is_empty() || has_device(found) {
                Ok(found)
            } else {
                Err(MatchError::WrongDevice {
                    path: path.name.clone(),
                    id: id.clone(),
                    object: found.0.object.clone(),
                    ports: found.0.net_ports.clone(),
                    device: path.device.clone(),
                })
            }
        }
        None => modems
            .iter()
            .find(|m| has_device(m))
            .ok_or_else(|| MatchError::NoModemForDevice {
                path: path.name.clone(),
                device: path.device.clone(),
                known: known(),
            }),
    }
}

/// One path's radio at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct Radio {
    /// Path index.
    pub path: u8,
    /// The modem's object path (None: no modem found for the path now).
    pub modem: Option<String>,
    /// Access technology.
    pub tech: Option<Tech>,
    /// Registered with a network that carries data.
    pub registered: bool,
    /// A bearer is connected.
    pub connected: bool,
    /// The serving cell's location (MCC, MNC, LAC/TAC, CI).
    pub location: Option<Location3gpp>,
    /// The serving cell's physical cell id, where the modem reports it.
    pub pci: Option<u32>,
    /// Signal.
    pub signal: Signal,
}

impl Radio {
    /// A path whose modem is not there.
    pub fn absent(path: u8) -> Radio {
        Radio {
            path,
            modem: None,
            tech: None,
            registered: false,
            connected: false,
            location: None,
            pci: None,
            signal: Signal::default(),
        }
    }

    /// The path's radio from its modem's state, bearers, location and physical cell id.
    pub fn of(
        path: u8,
        modem: &ModemInfo,
        bearers: &[BearerInfo],
        location: Option<Location3gpp>,
        pci: Option<u32>,
    ) -> Radio {
        Radio {
            path,
            modem: Some(modem.object.clone()),
            tech: modem.tech,
            registered: modem.registered(),
            connected: bearers.iter().any(|b| b.connected) || modem.state == STATE_CONNECTED,
            location,
            pci,
            signal: modem.signal,
        }
    }

    /// The serving cell, when the path can carry data on one: registered, a bearer connected
    /// and a cell identity known.
    pub fn cell(&self) -> Option<u64> {
        if !(self.registered && self.connected) {
            return None;
        }
        self.location.as_ref().map(|l| l.ci).filter(|&ci| ci != 0)
    }

    /// The path's [`CellReport`]: its cell and RSRP, or no cell.
    pub fn report(&self) -> CellReport {
        let cell = self.cell();
        CellReport {
            path: self.path,
            cell,
            rsrp_dbm: cell.and(self.signal.rsrp_dbm).map(|r| r as f32),
        }
    }
}

impl fmt::Display for Radio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(modem) = &self.modem else {
            return f.write_str("no modem");
        };
        write!(f, "{modem}")?;
        match self.tech {
            Some(t) => write!(f, " {t}")?,
            None => f.write_str(" (no technology)")?,
        }
        f.write_str(if self.registered {
            " registered"
        } else {
            " not registered"
        })?;
        f.write_str(if self.connected {
            ", connected"
        } else {
            ", no bearer connected"
        })?;
        if let Some(l) = &self.location {
            write!(
                f,
                ", cell {}-{} tac {:#x} ci {:#x} ({})",
                l.mcc, l.mnc, l.tac, l.ci, l.ci
            )?;
        }
        if let Some(p) = self.pci {
            write!(f, " pci {p}")?;
        }
        let s = &self.signal;
        for (name, v, unit) in [
            ("RSRP", s.rsrp_dbm, "dBm"),
            ("RSRQ", s.rsrq_db, "dB"),
            ("SINR", s.sinr_db, "dB"),
            ("RSSI", s.rssi_dbm, "dBm"),
        ] {
            if let Some(v) = v {
                write!(f, ", {name} {v:.1} {unit}")?;
            }
        }
        Ok(())
    }
}

/// The serving cell's physical cell id from `GetCellInfo()` (`aa{sv}`; ModemManager 1.20):
/// the entry with `serving` true, its `physical-ci` (hexadecimal string).
pub fn parse_cell_info(cells: &[Props]) -> Option<u32> {
    cells
        .iter()
        .find(|c| c.get("serving").and_then(|v| as_bool(v)) == Some(true))
        .and_then(|c| c.get("physical-ci"))
        .and_then(|v| as_str(v))
        .and_then(|s| u32::from_str_radix(s.trim(), 16).ok())
        .filter(|&p| p <= 1007)
}

/// Joins position fixes with each path's latest cell report: every fix leaves with the cells
/// known at that moment, and a path losing its cell (or its modem) sends the last fix again at
/// once, moved forward by the time elapsed since, so the loss reaches the proxy without waiting
/// for the next position.
#[derive(Debug)]
pub struct CellJoin {
    paths: usize,
    cells: [Option<CellReport>; MAX_CARRIERS],
    last_fix: Option<(ContextFix, Instant)>,
}

impl CellJoin {
    /// A join for `paths` paths (at most [`MAX_CARRIERS`]).
    pub fn new(paths: usize) -> CellJoin {
        CellJoin {
            paths: paths.min(MAX_CARRIERS),
            cells: [None; MAX_CARRIERS],
            last_fix: None,
        }
    }

    fn cells(&self) -> Vec<CellReport> {
        self.cells[..self.paths].iter().flatten().copied().collect()
    }

    /// A position fix; returns it with the paths' cells.
    pub fn on_fix(&mut self, mut fix: ContextFix, now: Instant) -> ContextFix {
        fix.cells = self.cells();
        self.last_fix = Some((fix.clone(), now));
        fix
    }

    /// A path's cell report; returns a fix to send at once when the path lost its cell (and a
    /// fix was seen before).
    pub fn on_report(&mut self, report: CellReport, now: Instant) -> Option<ContextFix> {
        let slot = self
            .cells
            .get_mut(usize::from(report.path))
            .filter(|_| usize::from(report.path) < self.paths)?;
        let before = slot.replace(report);
        let lost = before.is_some_and(|b| b.cell.is_some()) && report.cell.is_none();
        if !lost {
            return None;
        }
        let cells = self.cells();
        let (fix, at) = self.last_fix.as_mut()?;
        let elapsed = now.saturating_duration_since(*at).as_millis() as u64;
        let mut out = fix.clone();
        out.unix_ms += elapsed.max(1);
        out.cells = cells;
        *fix = out.clone();
        *at = now;
        Some(out)
    }
}

// ---------------------------------------------------------------------------------------------
// Value helpers (a property may come wrapped in a variant)

fn unwrap<'a, 'v>(v: &'a Value<'v>) -> &'a Value<'v> {
    match v {
        Value::Value(inner) => unwrap(inner),
        other => other,
    }
}

fn as_str<'a>(v: &'a Value<'_>) -> Option<&'a str> {
    match unwrap(v) {
        Value::Str(s) => Some(s.as_str()),
        Value::ObjectPath(p) => Some(p.as_str()),
        _ => None,
    }
}

fn as_bool(v: &Value<'_>) -> Option<bool> {
    match unwrap(v) {
        Value::Bool(b) => Some(*b),
        _ => None,
    }
}

fn as_i64(v: &Value<'_>) -> Option<i64> {
    Some(match unwrap(v) {
        Value::U8(x) => i64::from(*x),
        Value::I16(x) => i64::from(*x),
        Value::U16(x) => i64::from(*x),
        Value::I32(x) => i64::from(*x),
        Value::U32(x) => i64::from(*x),
        Value::I64(x) => *x,
        Value::U64(x) => i64::try_from(*x).ok()?,
        _ => return None,
    })
}

fn as_f64(v: &Value<'_>) -> Option<f64> {
    match unwrap(v) {
        Value::F64(x) => Some(*x),
        other => as_i64(other).map(|x| x as f64),
    }
}

/// `key` of an `a{sv}` dictionary, as a number.
fn dict_f64(v: &Value<'_>, key: &str) -> Option<f64> {
    let Value::Dict(d) = unwrap(v) else {
        return None;
    };
    d.iter()
        .find(|(k, _)| as_str(k) == Some(key))
        .and_then(|(_, v)| as_f64(v))
}

#[cfg(test)]
mod tests;
