//! `[context] cells = "modemmanager"` against a real `dbus-daemon` (a private bus this test
//! starts) with python-dbusmock playing ModemManager (`tests/data/modemmanager_template.py`):
//! two modems matched to their paths, a handover, a signal fade, a bearer drop, and a modem
//! that vanishes and comes back under a new object path, all without restarting the client.
//!
//! Needs `dbus-daemon` and python3 with `dbusmock` (apt `dbus`, `python3-dbusmock`):
//! integration tier.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use polycorn_net::context::{CellReport, ContextFix};
use polycorn_net::modem::mm::{self, MmOptions};
use polycorn_net::modem::{MatchError, ModemPath, Radio, MM_PATH, MM_SERVICE, SIGNAL_IFACE};
use tokio::sync::mpsc;
use zbus::zvariant::OwnedObjectPath;

/// A child process killed (by its PID) and reaped on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A private bus and the mock ModemManager on it.
struct Bus {
    address: String,
    _daemon: Proc,
    _mock: Proc,
}

fn start_bus() -> Bus {
    let mut daemon = Command::new("dbus-daemon")
        .args(["--session", "--nofork", "--print-address=1"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("dbus-daemon (apt package dbus) must be installed for this test");
    let mut line = String::new();
    BufReader::new(daemon.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let address = line.trim().to_string();
    assert!(address.starts_with("unix:"), "dbus-daemon printed {line:?}");
    let daemon = Proc(daemon);
    let template = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/modemmanager_template.py"
    );
    let mock = Command::new("/usr/bin/python3")
        .args(["-m", "dbusmock", "--template", template])
        .env("DBUS_SYSTEM_BUS_ADDRESS", &address)
        .env("DBUS_SESSION_BUS_ADDRESS", &address)
        .stdout(Stdio::null())
        .spawn()
        .expect("python3 must be installed");
    Bus {
        address,
        _daemon: daemon,
        _mock: Proc(mock),
    }
}

async fn client(bus: &Bus) -> zbus::Connection {
    let conn = mm::connect(Some(&bus.address)).await.unwrap();
    let dbus = zbus::fdo::DBusProxy::new(&conn).await.unwrap();
    // The mock takes a moment to start (python3, dbusmock): wait until it owns the name.
    for _ in 0..600 {
        if dbus
            .name_has_owner(MM_SERVICE.try_into().unwrap())
            .await
            .unwrap()
        {
            return conn;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("python-dbusmock did not take {MM_SERVICE} (is python3-dbusmock installed?)");
}

async fn mock<B>(conn: &zbus::Connection, method: &str, body: &B) -> zbus::Message
where
    B: serde::Serialize + zbus::zvariant::DynamicType,
{
    conn.call_method(
        Some(MM_SERVICE),
        MM_PATH,
        Some("org.freedesktop.DBus.Mock"),
        method,
        body,
    )
    .await
    .unwrap_or_else(|e| panic!("mock {method}: {e}"))
}

async fn add_modem(conn: &zbus::Connection, index: u32, imei: &str, iface: &str) -> String {
    let reply = mock(conn, "AddModem", &(index, imei, iface)).await;
    let path: OwnedObjectPath = reply.body().deserialize().unwrap();
    path.as_str().to_string()
}

fn op(s: &str) -> zbus::zvariant::ObjectPath<'_> {
    zbus::zvariant::ObjectPath::try_from(s).unwrap()
}

async fn signal_rate(conn: &zbus::Connection, modem: &str) -> u32 {
    let reply = conn
        .call_method(
            Some(MM_SERVICE),
            modem,
            Some("org.freedesktop.DBus.Properties"),
            "Get",
            &(SIGNAL_IFACE, "Rate"),
        )
        .await
        .unwrap();
    let v: zbus::zvariant::OwnedValue = reply.body().deserialize().unwrap();
    u32::try_from(v).unwrap()
}

/// The next radio of `path` that satisfies `want` (the client reports every path every round).
async fn radio_until(
    radios: &mut mpsc::UnboundedReceiver<Radio>,
    path: u8,
    what: &str,
    want: impl Fn(&Radio) -> bool,
) -> Radio {
    let wait = async {
        loop {
            let r = radios.recv().await.expect("the client stopped");
            if r.path == path && want(&r) {
                return r;
            }
        }
    };
    // A bound on a hang, not a measurement: rounds run every second.
    tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .unwrap_or_else(|_| panic!("path {path}: never saw {what}"))
}

fn fix(t: u64) -> ContextFix {
    ContextFix {
        unix_ms: t,
        lat: 52.5,
        lon: 13.4,
        speed_mps: 80.0,
        heading_deg: 90.0,
        cells: Vec::new(),
    }
}

fn cell_of(f: &ContextFix, path: u8) -> Option<CellReport> {
    f.cells.iter().find(|c| c.path == path).copied()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modems_through_handover_fade_bearer_drop_and_reset() {
    let bus = start_bus();
    let conn = client(&bus).await;
    let m0 = add_modem(&conn, 0, "350000000000001", "wwan0").await;
    let m1 = add_modem(&conn, 1, "350000000000002", "wwan1").await;
    mock(&conn, "SetCell", &(op(&m0), "262,01,0,1A2B,7")).await;
    mock(&conn, "SetCell", &(op(&m1), "262,02,0,BEEF,9")).await;

    let paths = vec![
        // Matched by its network interface.
        ModemPath {
            index: 0,
            name: "A".into(),
            device: "wwan0".into(),
            modem: None,
        },
        // Matched by its device identifier.
        ModemPath {
            index: 1,
            name: "B".into(),
            device: "wwan1".into(),
            modem: Some("dev-350000000000002".into()),
        },
    ];
    let opts = MmOptions {
        bus: Some(bus.address.clone()),
        paths: paths.clone(),
        rate: Duration::from_secs(1),
        gnss: false,
    };

    // The check the relay's start and `--check-paths` make; then a wrong identifier.
    let now = mm::check(&opts).await.unwrap();
    assert_eq!(now[0].as_ref().unwrap().cell(), Some(0x1A2B));
    assert_eq!(now[0].as_ref().unwrap().pci, Some(0x2A));
    assert_eq!(now[1].as_ref().unwrap().cell(), Some(0xBEEF));
    let mut wrong = opts.clone();
    wrong.paths[1].modem = Some("123".into());
    wrong.paths[0].device = "wwan7".into();
    let bad = mm::check(&wrong).await.unwrap();
    let e0 = bad[0].as_ref().unwrap_err();
    assert!(matches!(e0, MatchError::NoModemForDevice { .. }), "{e0}");
    assert!(e0.to_string().contains("path \"A\""), "{e0}");
    let e1 = bad[1].as_ref().unwrap_err();
    assert!(
        e1.to_string().contains("path \"B\"") && e1.to_string().contains("123"),
        "{e1}"
    );
    let mut swapped = opts.clone();
    swapped.paths[1].device = "wwan0".into();
    let bad = mm::check(&swapped).await.unwrap();
    assert!(
        matches!(bad[1], Err(MatchError::WrongDevice { .. })),
        "{:?}",
        bad[1]
    );

    let (fix_tx, fix_rx) = mpsc::channel(8);
    let (out_tx, mut out) = mpsc::channel(64);
    let (radio_tx, mut radios) = mpsc::unbounded_channel();
    let client = tokio::spawn(mm::run(opts, Some(fix_rx), out_tx, move |r: &Radio| {
        let _ = radio_tx.send(r.clone());
    }));

    let a = radio_until(&mut radios, 0, "cell 1A2B", |r| r.cell() == Some(0x1A2B)).await;
    assert_eq!(a.signal.rsrp_dbm, Some(-90.0));
    assert_eq!(a.tech.map(|t| t.as_str()), Some("lte"));
    radio_until(&mut radios, 1, "cell BEEF", |r| r.cell() == Some(0xBEEF)).await;
    // The client set the modems' signal refresh rate.
    assert_eq!(signal_rate(&conn, &m0).await, 1);
    assert_eq!(signal_rate(&conn, &m1).await, 1);

    // A position goes out with both cells.
    fix_tx.send(fix(1_000)).await.unwrap();
    let f = out.recv().await.unwrap();
    assert_eq!(f.unix_ms, 1_000);
    assert_eq!(
        cell_of(&f, 0),
        Some(CellReport {
            path: 0,
            cell: Some(0x1A2B),
            rsrp_dbm: Some(-90.0)
        })
    );
    assert_eq!(cell_of(&f, 1).unwrap().cell, Some(0xBEEF));

    // Handover on A: the next fix carries the new cell.
    mock(&conn, "SetCell", &(op(&m0), "262,01,0,1A2C,7")).await;
    radio_until(&mut radios, 0, "cell 1A2C", |r| r.cell() == Some(0x1A2C)).await;
    fix_tx.send(fix(2_000)).await.unwrap();
    let f = out.recv().await.unwrap();
    assert_eq!(cell_of(&f, 0).unwrap().cell, Some(0x1A2C));

    // Signal fade on A.
    mock(&conn, "SetSignal", &(op(&m0), -118.0f64, -19.0f64, -5.0f64)).await;
    let faded = radio_until(&mut radios, 0, "RSRP -118", |r| {
        r.signal.rsrp_dbm == Some(-118.0)
    })
    .await;
    assert_eq!(faded.signal.sinr_db, Some(-5.0));
    fix_tx.send(fix(3_000)).await.unwrap();
    let f = out.recv().await.unwrap();
    assert_eq!(cell_of(&f, 0).unwrap().rsrp_dbm, Some(-118.0));

    // A's bearer drops: a fix with A's loss goes out without waiting for a position.
    mock(&conn, "SetBearer", &(op(&m0), false)).await;
    let lost = out.recv().await.unwrap();
    assert!(lost.unix_ms > 3_000, "{lost}");
    assert_eq!(cell_of(&lost, 0).unwrap().cell, None);
    assert_eq!(cell_of(&lost, 1).unwrap().cell, Some(0xBEEF));
    mock(&conn, "SetBearer", &(op(&m0), true)).await;
    radio_until(&mut radios, 0, "A connected again", |r| {
        r.cell() == Some(0x1A2C)
    })
    .await;

    // B loses its registration: a loss too.
    mock(&conn, "SetRegistration", &(op(&m1), 2u32)).await;
    let lost = out.recv().await.unwrap();
    assert_eq!(cell_of(&lost, 1).unwrap().cell, None);
    mock(&conn, "SetRegistration", &(op(&m1), 1u32)).await;
    radio_until(&mut radios, 1, "B registered again", |r| {
        r.cell() == Some(0xBEEF)
    })
    .await;

    // A's modem vanishes (a USB reset): a loss, and no modem for A.
    mock(&conn, "RemoveModem", &(op(&m0),)).await;
    let lost = out.recv().await.unwrap();
    assert_eq!(cell_of(&lost, 0).unwrap().cell, None);
    radio_until(&mut radios, 0, "no modem", |r| r.modem.is_none()).await;
    // It comes back under another object path: A resumes, no restart.
    let m0b = add_modem(&conn, 5, "350000000000001", "wwan0").await;
    assert_ne!(m0b, m0);
    mock(&conn, "SetCell", &(op(&m0b), "262,01,0,1A2D,7")).await;
    let back = radio_until(&mut radios, 0, "cell 1A2D", |r| r.cell() == Some(0x1A2D)).await;
    assert_eq!(back.modem.as_deref(), Some(m0b.as_str()));
    assert_eq!(signal_rate(&conn, &m0b).await, 1);
    fix_tx.send(fix(9_000)).await.unwrap();
    // (Loss fixes of the rounds in between may come first.)
    loop {
        let f = out.recv().await.unwrap();
        if f.unix_ms == 9_000 {
            assert_eq!(cell_of(&f, 0).unwrap().cell, Some(0x1A2D));
            break;
        }
    }

    drop(out);
    client.await.unwrap();
}

/// Without gpsd (`source = "modemmanager"`), the modems' GNSS positions are the fixes, with
/// the paths' cells; the client enables the GNSS location sources.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gnss_positions_from_the_modems_without_gpsd() {
    let bus = start_bus();
    let conn = client(&bus).await;
    let m0 = add_modem(&conn, 0, "350000000000001", "wwan0").await;
    mock(&conn, "SetCell", &(op(&m0), "262,01,0,1A2B,7")).await;
    mock(&conn, "SetGnss", &(op(&m0), 52.5f64, 13.4f64)).await;
    let opts = MmOptions {
        bus: Some(bus.address.clone()),
        paths: vec![ModemPath {
            index: 0,
            name: "A".into(),
            device: "wwan0".into(),
            modem: None,
        }],
        rate: Duration::from_secs(1),
        gnss: true,
    };
    let (out_tx, mut out) = mpsc::channel(64);
    let client = tokio::spawn(mm::run(opts, None, out_tx, |_: &Radio| {}));
    let f = loop {
        let f = out.recv().await.unwrap();
        if cell_of(&f, 0).is_some_and(|c| c.cell == Some(0x1A2B)) {
            break f;
        }
    };
    assert_eq!((f.lat, f.lon), (52.5, 13.4));
    assert!(f.unix_ms > 1_700_000_000_000, "{f}");
    // GPS raw and NMEA enabled beside 3GPP.
    let reply = conn
        .call_method(
            Some(MM_SERVICE),
            m0.as_str(),
            Some("org.freedesktop.DBus.Properties"),
            "Get",
            &(polycorn_net::modem::LOCATION_IFACE, "Enabled"),
        )
        .await
        .unwrap();
    let v: zbus::zvariant::OwnedValue = reply.body().deserialize().unwrap();
    assert_eq!(u32::try_from(v).unwrap(), 7);
    drop(out);
    client.await.unwrap();
}
