//! A mock ModemManager for tests (feature `mock-modemmanager`): a private `dbus-daemon` and
//! python-dbusmock with the template `mock_modemmanager.py`, which exports ModemManager's root
//! object and, on request, modems with the Modem, Modem3gpp, Signal and Location interfaces and
//! a bearer each. [`MockControl`] adds, changes and removes them as a test needs.
//!
//! The bus listens on a socket file (`unix:path=…`), not an abstract socket, so a daemon in
//! another network namespace (a relay started with `ip netns exec`) reaches it too.
//!
//! Needs `dbus-daemon` (Debian's `dbus`) and `/usr/bin/python3` with `dbusmock` (Debian's
//! `python3-dbusmock`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use zbus::zvariant::{ObjectPath, OwnedObjectPath, OwnedValue};
use zbus::Connection;

use super::{MM_PATH, MM_SERVICE};

/// The python-dbusmock template (see its text for the mock methods).
pub const TEMPLATE: &str = include_str!("mock_modemmanager.py");
/// The interface of the mock's control methods.
pub const MOCK_IFACE: &str = "org.freedesktop.DBus.Mock";
/// `MMModem3gppRegistrationState`: registered on the home network.
pub const REGISTRATION_HOME: u32 = 1;
/// `MMModem3gppRegistrationState`: searching (no network).
pub const REGISTRATION_SEARCHING: u32 = 2;

/// How long [`MockModemManager::control`] waits for python-dbusmock to own ModemManager's name.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A child process killed (by its PID) and reaped on drop.
#[derive(Debug)]
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A private bus with the mock ModemManager on it; both processes are stopped and the
/// directory holding the bus socket and the template is removed on drop.
#[derive(Debug)]
pub struct MockModemManager {
    address: String,
    dir: PathBuf,
    // Dropped in this order: the mock before its bus.
    _mock: Proc,
    _daemon: Proc,
}

impl MockModemManager {
    /// Starts `dbus-daemon` on a socket in a fresh directory under the system's temporary
    /// directory, and python-dbusmock on it. The mock takes a moment to own ModemManager's
    /// name: [`MockModemManager::control`] waits for it.
    pub fn start() -> Result<MockModemManager, String> {
        static COUNT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "polycorn-mock-mm-{}-{}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        match Self::start_in(&dir) {
            Ok((address, mock, daemon)) => Ok(MockModemManager {
                address,
                dir,
                _mock: mock,
                _daemon: daemon,
            }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    fn start_in(dir: &Path) -> Result<(String, Proc, Proc), String> {
        let socket = dir.join("bus");
        let mut daemon = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address=1"])
            .arg(format!("--address=unix:path={}", socket.display()))
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("dbus-daemon (Debian package dbus): {e}"))?;
        let mut line = String::new();
        let out = daemon.stdout.take();
        let daemon = Proc(daemon);
        if let Some(out) = out {
            let _ = BufReader::new(out).read_line(&mut line);
        }
        let address = line.trim().to_string();
        if !address.starts_with("unix:path=") {
            return Err(format!("dbus-daemon printed {line:?}, not a bus address"));
        }
        let template = dir.join("mock_modemmanager.py");
        std::fs::write(&template, TEMPLATE)
            .map_err(|e| format!("write {}: {e}", template.display()))?;
        let mock = Command::new("/usr/bin/python3")
            .args(["-m", "dbusmock", "--template"])
            .arg(&template)
            .env("DBUS_SYSTEM_BUS_ADDRESS", &address)
            .env("DBUS_SESSION_BUS_ADDRESS", &address)
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("/usr/bin/python3 (with python3-dbusmock): {e}"))?;
        Ok((address, Proc(mock), daemon))
    }

    /// The bus address (`unix:path=…`), what `[context] dbus` takes.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// A connection to the bus once the mock owns ModemManager's name (within
    /// [`START_TIMEOUT`]), to drive the mock with.
    pub async fn control(&self) -> Result<MockControl, String> {
        let conn = super::mm::connect(Some(&self.address))
            .await
            .map_err(|e| format!("connect to {}: {e}", self.address))?;
        let dbus = zbus::fdo::DBusProxy::new(&conn)
            .await
            .map_err(|e| e.to_string())?;
        let name = zbus::names::BusName::try_from(MM_SERVICE).map_err(|e| e.to_string())?;
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        while !dbus
            .name_has_owner(name.clone())
            .await
            .map_err(|e| e.to_string())?
        {
            if tokio::time::Instant::now() > deadline {
                return Err(format!(
                    "python-dbusmock did not take {MM_SERVICE} within {START_TIMEOUT:?} (is \
                     python3-dbusmock installed?)"
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(MockControl { conn })
    }
}

impl Drop for MockModemManager {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A connection to the mock's bus that changes its modems. Each method returns when the mock
/// has made the change (and emitted its signals).
#[derive(Clone, Debug)]
pub struct MockControl {
    conn: Connection,
}

fn path(s: &str) -> Result<ObjectPath<'_>, String> {
    ObjectPath::try_from(s).map_err(|e| format!("{s:?}: {e}"))
}

impl MockControl {
    /// The connection (to read what the client set, e.g. a modem's Signal rate).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    async fn call<B>(&self, method: &str, body: &B) -> Result<zbus::Message, String>
    where
        B: serde::Serialize + zbus::zvariant::DynamicType,
    {
        self.conn
            .call_method(Some(MM_SERVICE), MM_PATH, Some(MOCK_IFACE), method, body)
            .await
            .map_err(|e| format!("mock {method}: {e}"))
    }

    /// A modem `/org/freedesktop/ModemManager1/Modem/{index}` with IMEI (and equipment
    /// identifier) `imei`, device identifier `dev-{imei}`, network interface `iface`, one
    /// connected bearer, registered on LTE at RSRP −90 dBm; returns its object path.
    pub async fn add_modem(&self, index: u32, imei: &str, iface: &str) -> Result<String, String> {
        let reply = self.call("AddModem", &(index, imei, iface)).await?;
        let p: OwnedObjectPath = reply
            .body()
            .deserialize()
            .map_err(|e| format!("mock AddModem: {e}"))?;
        Ok(p.as_str().to_string())
    }

    /// The modem's 3GPP location, `MCC,MNC,LAC,CI,TAC` (hexadecimal LAC, CI, TAC).
    pub async fn set_cell(&self, modem: &str, location: &str) -> Result<(), String> {
        self.call("SetCell", &(path(modem)?, location))
            .await
            .map(drop)
    }

    /// The modem's LTE signal.
    pub async fn set_signal(
        &self,
        modem: &str,
        rsrp_dbm: f64,
        rsrq_db: f64,
        snr_db: f64,
    ) -> Result<(), String> {
        self.call("SetSignal", &(path(modem)?, rsrp_dbm, rsrq_db, snr_db))
            .await
            .map(drop)
    }

    /// The modem's GNSS position.
    pub async fn set_gnss(&self, modem: &str, lat: f64, lon: f64) -> Result<(), String> {
        self.call("SetGnss", &(path(modem)?, lat, lon))
            .await
            .map(drop)
    }

    /// The modem's bearer connected or not (and its state connected or registered).
    pub async fn set_bearer(&self, modem: &str, connected: bool) -> Result<(), String> {
        self.call("SetBearer", &(path(modem)?, connected))
            .await
            .map(drop)
    }

    /// The modem's 3GPP registration state ([`REGISTRATION_HOME`], [`REGISTRATION_SEARCHING`],
    /// …).
    pub async fn set_registration(&self, modem: &str, state: u32) -> Result<(), String> {
        self.call("SetRegistration", &(path(modem)?, state))
            .await
            .map(drop)
    }

    /// The modem and its bearers vanish (a USB reset).
    pub async fn remove_modem(&self, modem: &str) -> Result<(), String> {
        self.call("RemoveModem", &(path(modem)?,)).await.map(drop)
    }

    /// A property of a modem (`iface`, `name`), as the mock holds it.
    pub async fn property(
        &self,
        modem: &str,
        iface: &str,
        name: &str,
    ) -> Result<OwnedValue, String> {
        let reply = self
            .conn
            .call_method(
                Some(MM_SERVICE),
                modem,
                Some("org.freedesktop.DBus.Properties"),
                "Get",
                &(iface, name),
            )
            .await
            .map_err(|e| format!("{modem}: Get {iface}.{name}: {e}"))?;
        reply
            .body()
            .deserialize()
            .map_err(|e| format!("{modem}: Get {iface}.{name}: {e}"))
    }
}

/// A trip's serving cell as the mock's 3GPP location: `cell` as the cell identity, on a
/// made-up MCC/MNC and TAC (the relay reports the cell identity only).
pub fn location_of_cell(cell: u64) -> String {
    format!("460,00,0,{cell:X},1")
}
