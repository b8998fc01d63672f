use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use zbus::zvariant::{Dict, ObjectPath, OwnedValue, Signature, Value};

use super::*;

fn ov(v: Value<'_>) -> OwnedValue {
    v.try_to_owned().unwrap()
}

fn dict(entries: &[(&str, Value<'static>)]) -> Value<'static> {
    let mut d = Dict::new(&Signature::Str, &Signature::Variant);
    for (k, v) in entries {
        d.append(
            Value::from(k.to_string()),
            Value::Value(Box::new(v.clone())),
        )
        .unwrap();
    }
    Value::Dict(d)
}

fn props(entries: Vec<(&str, Value<'static>)>) -> Props {
    entries
        .into_iter()
        .map(|(k, v)| (k.to_string(), ov(v)))
        .collect()
}

#[test]
fn location_strings() {
    let l = parse_3gpp_location("262,01,0,1A2B3C4,7D").unwrap();
    assert_eq!(
        l,
        Location3gpp {
            mcc: "262".into(),
            mnc: "01".into(),
            lac: 0,
            ci: 0x1A2B3C4,
            tac: 0x7D
        }
    );
    // Four fields (older ModemManager), a 36-bit NR cell id.
    assert_eq!(parse_3gpp_location("460,00,1F,ABCDE").unwrap().tac, 0);
    assert_eq!(
        parse_3gpp_location("460,11,,FFFFFFFFF,1").unwrap().ci,
        0xF_FFFF_FFFF
    );
    for bad in [
        "",
        "262,01",
        "262,01,0,1,2,3",
        "26x,01,0,1,2",
        "262,1,0,1,2",
        "262,01,0,G,2",
        "262,01,0,1FFFFFFFFF,2",
        "262,01,0,1,1000000",
    ] {
        assert!(parse_3gpp_location(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn technologies() {
    assert_eq!(Tech::from_mm_bits(1 << 14), Some(Tech::Lte));
    assert_eq!(Tech::from_mm_bits((1 << 14) | (1 << 15)), Some(Tech::Nr));
    assert_eq!(Tech::from_mm_bits(1 << 9), Some(Tech::Umts));
    assert_eq!(Tech::from_mm_bits(1 << 4), Some(Tech::Gsm));
    assert_eq!(Tech::from_mm_bits(0), None);
    assert_eq!(Tech::from_mm_bits(1 << 10), None);
}

#[test]
fn signal_dicts() {
    let p = props(vec![
        (
            "Lte",
            dict(&[
                ("rsrp", Value::F64(-97.5)),
                ("rsrq", Value::F64(-11.0)),
                ("snr", Value::F64(7.5)),
                ("rssi", Value::F64(-70.0)),
            ]),
        ),
        (
            "Nr5g",
            dict(&[("rsrp", Value::F64(-88.0)), ("sinr", Value::F64(12.0))]),
        ),
        ("Umts", dict(&[])),
        ("Rate", Value::U32(1)),
    ]);
    let lte = parse_signal(&p, Some(Tech::Lte));
    assert_eq!(lte.rsrp_dbm, Some(-97.5));
    assert_eq!(lte.rsrq_db, Some(-11.0));
    assert_eq!(lte.sinr_db, Some(7.5));
    assert_eq!(lte.rssi_dbm, Some(-70.0));
    let nr = parse_signal(&p, Some(Tech::Nr));
    assert_eq!(nr.rsrp_dbm, Some(-88.0));
    assert_eq!(nr.sinr_db, Some(12.0));
    // The NR dictionary has no RSRQ: the LTE anchor's.
    assert_eq!(nr.rsrq_db, Some(-11.0));
    assert_eq!(parse_signal(&p, Some(Tech::Umts)), Signal::default());
    // Garbage and impossible values are dropped.
    let bad = props(vec![(
        "Lte",
        dict(&[
            ("rsrp", Value::F64(f64::NAN)),
            ("rsrq", Value::from("x")),
            ("snr", Value::F64(1e9)),
        ]),
    )]);
    assert_eq!(parse_signal(&bad, Some(Tech::Lte)), Signal::default());
    assert_eq!(
        parse_signal(&props(vec![("Lte", Value::U32(3))]), None),
        Signal::default()
    );
}

#[test]
fn location_dicts() {
    let mut map = HashMap::new();
    map.insert(
        LOCATION_3GPP_LAC_CI,
        ov(Value::from("262,02,0,00ABCDEF,1F4")),
    );
    map.insert(
        LOCATION_GPS_RAW,
        ov(dict(&[
            ("latitude", Value::F64(52.5)),
            ("longitude", Value::F64(13.4)),
            ("utc-time", Value::from("120000.00")),
        ])),
    );
    map.insert(
        LOCATION_GPS_NMEA,
        ov(Value::from(
            "$GPGGA,whatever\r\n$GPRMC,123519,A,4807.038,N,01131.000,E,022.4,084.4,230394,003.1,W*6A",
        )),
    );
    let (r, warnings) = parse_location(&map);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(r.cell.unwrap().ci, 0xABCDEF);
    let g = r.gnss.unwrap();
    assert_eq!((g.lat, g.lon), (52.5, 13.4));
    assert!((g.speed_mps - 22.4 * 1852.0 / 3600.0).abs() < 1e-9);
    assert_eq!(g.heading_deg, 84.4);
    // NMEA alone gives the position too; a wrong checksum or a void fix none.
    let mut nmea = HashMap::new();
    nmea.insert(
        LOCATION_GPS_NMEA,
        ov(Value::from(
            "$GPRMC,123519,A,4807.038,S,01131.000,W,0,0,230394,003.1,W*69",
        )),
    );
    let g = parse_location(&nmea).0.gnss.unwrap();
    assert!((g.lat + 48.1173).abs() < 1e-4 && (g.lon + 11.516_666).abs() < 1e-4);
    assert!(
        parse_nmea_rmc("$GPRMC,123519,A,4807.038,N,01131.000,E,022.4,084.4,230394,003.1,W*00")
            .is_none()
    );
    assert!(
        parse_nmea_rmc("$GPRMC,123519,V,4807.038,N,01131.000,E,022.4,084.4,230394,003.1,W")
            .is_none()
    );
    // A bad 3GPP string is a warning, not a cell.
    let mut bad = HashMap::new();
    bad.insert(LOCATION_3GPP_LAC_CI, ov(Value::from("nonsense")));
    bad.insert(
        LOCATION_GPS_RAW,
        ov(dict(&[
            ("latitude", Value::F64(95.0)),
            ("longitude", Value::F64(0.0)),
        ])),
    );
    let (r, w) = parse_location(&bad);
    assert_eq!(r, LocationReading::default());
    assert_eq!(w.len(), 2, "{w:?}");
}

fn modem_ifaces(imei: &str, net: &str, reg: u32, tech_bits: u32) -> HashMap<String, Props> {
    let ports = Value::from(vec![
        ("cdc-wdm0".to_string(), 6u32),
        (net.to_string(), PORT_TYPE_NET),
    ]);
    let bearers = Value::from(vec![ObjectPath::try_from(
        "/org/freedesktop/ModemManager1/Bearer/0",
    )
    .unwrap()]);
    let mut m = HashMap::new();
    m.insert(
        MODEM_IFACE.to_string(),
        props(vec![
            ("EquipmentIdentifier", Value::from(imei.to_string())),
            ("DeviceIdentifier", Value::from("d3adb33f")),
            ("State", Value::I32(STATE_CONNECTED)),
            ("AccessTechnologies", Value::U32(tech_bits)),
            ("Ports", ports),
            ("Bearers", bearers),
        ]),
    );
    m.insert(
        MODEM_3GPP_IFACE.to_string(),
        props(vec![
            ("Imei", Value::from(imei.to_string())),
            ("RegistrationState", Value::U32(reg)),
            ("OperatorCode", Value::from("26201")),
        ]),
    );
    m.insert(
        SIGNAL_IFACE.to_string(),
        props(vec![
            ("Rate", Value::U32(0)),
            ("Lte", dict(&[("rsrp", Value::F64(-101.0))])),
        ]),
    );
    m.insert(
        LOCATION_IFACE.to_string(),
        props(vec![("Enabled", Value::U32(1))]),
    );
    m
}

#[test]
fn modems_from_properties_and_matching() {
    let a = ModemInfo::from_interfaces(
        "/m/0",
        &modem_ifaces("350000000000001", "wwan0", 1, 1 << 14),
    )
    .unwrap();
    assert_eq!(a.net_ports, vec!["wwan0".to_string()]);
    assert_eq!(
        a.bearers,
        vec!["/org/freedesktop/ModemManager1/Bearer/0".to_string()]
    );
    assert_eq!(a.tech, Some(Tech::Lte));
    assert!(a.registered() && a.has_signal && a.has_location);
    assert_eq!(a.signal.rsrp_dbm, Some(-101.0));
    let b = ModemInfo::from_interfaces(
        "/m/1",
        &modem_ifaces("350000000000002", "wwan1", 3, 1 << 15),
    )
    .unwrap();
    assert!(!b.registered());
    assert!(ModemInfo::from_interfaces("/x", &HashMap::new()).is_none());

    let bearer_b = BearerInfo {
        connected: true,
        interface: "usb7".into(),
    };
    let all = vec![(a.clone(), vec![]), (b.clone(), vec![bearer_b])];
    let path = |device: &str, modem: Option<&str>| ModemPath {
        index: 0,
        name: "A".into(),
        device: device.into(),
        modem: modem.map(String::from),
    };
    assert_eq!(
        find_modem(&path("wwan0", None), &all).unwrap().0.object,
        "/m/0"
    );
    // A bearer's interface names the modem too.
    assert_eq!(
        find_modem(&path("usb7", None), &all).unwrap().0.object,
        "/m/1"
    );
    assert_eq!(
        find_modem(&path("wwan1", Some("350000000000002")), &all)
            .unwrap()
            .0
            .object,
        "/m/1"
    );
    assert_eq!(
        find_modem(&path("wwan0", Some("d3adb33f")), &all)
            .unwrap()
            .0
            .object,
        "/m/0"
    );
    let e = find_modem(&path("wwan9", None), &all)
        .unwrap_err()
        .to_string();
    assert!(e.contains("path \"A\"") && e.contains("wwan9"), "{e}");
    let e = find_modem(&path("wwan0", Some("999")), &all)
        .unwrap_err()
        .to_string();
    assert!(e.contains("path \"A\"") && e.contains("999"), "{e}");
    let e = find_modem(&path("wwan0", Some("350000000000002")), &all).unwrap_err();
    assert!(matches!(e, MatchError::WrongDevice { .. }), "{e}");
    let e = find_modem(&path("wwan0", None), &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("modems: none"), "{e}");
}

#[test]
fn radio_reports_loss_on_registration_or_bearer() {
    let m = ModemInfo::from_interfaces("/m/0", &modem_ifaces("1", "wwan0", 5, 1 << 14)).unwrap();
    let loc = parse_3gpp_location("262,01,0,ABC,1").ok();
    let up = BearerInfo {
        connected: true,
        interface: "wwan0".into(),
    };
    let r = Radio::of(2, &m, std::slice::from_ref(&up), loc.clone(), Some(7));
    assert_eq!(
        r.report(),
        CellReport {
            path: 2,
            cell: Some(0xABC),
            rsrp_dbm: Some(-101.0)
        }
    );
    assert!(r.to_string().contains("lte registered, connected"), "{r}");
    // The bearer drops: no cell, even though the modem still camps on it.
    let mut m2 = m.clone();
    m2.state = STATE_REGISTERED;
    let down = BearerInfo {
        connected: false,
        ..up.clone()
    };
    assert_eq!(
        Radio::of(2, &m2, &[down], loc.clone(), None).report().cell,
        None
    );
    // Registration lost.
    let mut m3 = m.clone();
    m3.registration = Some(2);
    assert_eq!(Radio::of(2, &m3, &[up], loc, None).report().cell, None);
    assert_eq!(Radio::absent(2).report().cell, None);
    assert_eq!(Radio::absent(2).to_string(), "no modem");
}

#[test]
fn cell_info_pci() {
    let serving = props(vec![
        ("serving", Value::Bool(true)),
        ("physical-ci", Value::from("1F")),
    ]);
    let neighbour = props(vec![
        ("serving", Value::Bool(false)),
        ("physical-ci", Value::from("2")),
    ]);
    assert_eq!(parse_cell_info(&[neighbour.clone(), serving]), Some(31));
    assert_eq!(parse_cell_info(&[neighbour]), None);
    let garbage = props(vec![
        ("serving", Value::Bool(true)),
        ("physical-ci", Value::from("zz")),
    ]);
    assert_eq!(parse_cell_info(&[garbage]), None);
}

fn fix(t: u64) -> ContextFix {
    ContextFix {
        unix_ms: t,
        lat: 1.0,
        lon: 2.0,
        speed_mps: 3.0,
        heading_deg: 4.0,
        cells: Vec::new(),
    }
}

fn rep(path: u8, cell: Option<u64>) -> CellReport {
    CellReport {
        path,
        cell,
        rsrp_dbm: cell.map(|_| -90.0),
    }
}

#[test]
fn join_attaches_cells_and_sends_losses_at_once() {
    let t0 = Instant::now();
    let mut j = CellJoin::new(2);
    // No fix yet: a loss has nothing to ride on.
    assert_eq!(j.on_report(rep(0, Some(5)), t0), None);
    assert_eq!(j.on_report(rep(0, None), t0), None);
    assert_eq!(j.on_report(rep(0, Some(5)), t0), None);
    assert_eq!(j.on_report(rep(1, Some(9)), t0), None);
    // Paths beyond the configured ones are ignored.
    assert_eq!(j.on_report(rep(7, Some(1)), t0), None);
    let f = j.on_fix(fix(1000), t0);
    assert_eq!(f.cells, vec![rep(0, Some(5)), rep(1, Some(9))]);
    // A handover is not a loss: it waits for the next fix.
    assert_eq!(j.on_report(rep(0, Some(6)), t0), None);
    // The loss goes out at once, the fix moved on by the time since.
    let lost = j
        .on_report(rep(1, None), t0 + Duration::from_millis(300))
        .unwrap();
    assert_eq!(lost.unix_ms, 1300);
    assert_eq!(lost.cells, vec![rep(0, Some(6)), rep(1, None)]);
    // Still lost: nothing new.
    assert_eq!(
        j.on_report(rep(1, None), t0 + Duration::from_millis(400)),
        None
    );
    // A second loss in the same instant still moves time forward.
    let again = j
        .on_report(rep(0, None), t0 + Duration::from_millis(300))
        .unwrap();
    assert_eq!(again.unix_ms, 1301);
}

proptest! {
    #[test]
    fn location_parser_never_panics(s in "\\PC{0,40}") {
        let _ = parse_3gpp_location(&s);
        let _ = parse_nmea_rmc(&s);
    }

    #[test]
    fn location_roundtrip(mcc in 100u16..999, mnc in 0u16..99, lac in any::<u16>(), ci in 0u64..(1 << 36), tac in 0u32..0xff_ffff) {
        let s = format!("{mcc},{mnc:02},{lac:X},{ci:X},{tac:X}");
        let l = parse_3gpp_location(&s).unwrap();
        prop_assert_eq!((l.lac, l.ci, l.tac), (u32::from(lac), ci, tac));
        prop_assert_eq!(l.mnc, format!("{mnc:02}"));
    }
}
