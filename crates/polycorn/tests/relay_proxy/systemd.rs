//! The shipped systemd units under systemd as PID 1, in Debian containers in the testbed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::bed::*;
use crate::support::*;

/// A minimal Debian 12 with systemd, for booting under `systemd-nspawn`: built once with
/// debootstrap (from Debian's mirror, `POLYCORN_TEST_DEBIAN_MIRROR` to choose another) and
/// kept under /var/tmp for later runs. `None` (with the reason) where the tools are missing
/// or the mirror cannot be reached.
fn debian_rootfs() -> Result<PathBuf, String> {
    let dir = PathBuf::from("/var/tmp/polycorn-test/rootfs-bookworm");
    if dir.join(".complete").exists() {
        return Ok(dir);
    }
    for tool in ["debootstrap", "systemd-nspawn", "nsenter"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Err(format!(
                "{tool} not found (Debian packages debootstrap, systemd-container)"
            ));
        }
    }
    let mirror = std::env::var("POLYCORN_TEST_DEBIAN_MIRROR")
        .unwrap_or_else(|_| "http://deb.debian.org/debian".into());
    let building = dir.with_extension("building");
    let _ = std::fs::remove_dir_all(&building);
    std::fs::create_dir_all(building.parent().unwrap()).map_err(|e| e.to_string())?;
    let out = Command::new("debootstrap")
        .args([
            "--variant=minbase",
            "--include=systemd,systemd-sysv,dbus,nftables,iproute2",
            "bookworm",
        ])
        .arg(&building)
        .arg(&mirror)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&building);
        return Err(format!(
            "debootstrap from {mirror} failed: {}",
            tail(&String::from_utf8_lossy(&out.stdout))
        ));
    }
    std::fs::write(building.join(".complete"), "").map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&building, &dir).map_err(|e| e.to_string())?;
    Ok(dir)
}

/// A Debian container booted with systemd as its PID 1 inside the network namespace `netns`
/// (`systemd-nspawn -b`, the root file system read-only under a throwaway overlay), with
/// `bin` at /usr/local/bin/polycorn and the directory `etc` at /etc/polycorn. Shut down on drop.
struct Container {
    nspawn: Child,
    leader: u32,
    log: PathBuf,
    /// `relay` or `proxy`: whose units it runs.
    role: String,
}

impl Container {
    fn boot(
        rootfs: &Path,
        netns: &str,
        bin: &str,
        etc: &Path,
        log: PathBuf,
        role: &str,
    ) -> Container {
        let mut nspawn = Command::new("systemd-nspawn")
            .args([
                "--quiet",
                "--register=no",
                "--keep-unit",
                "--volatile=overlay",
                // systemd's own network powers for the relay (nftables, TPROXY sockets).
                "--capability=CAP_NET_ADMIN",
                "--boot",
            ])
            .arg(format!("--machine=polycorn-test-{role}"))
            .arg(format!("--directory={}", rootfs.display()))
            .arg(format!("--network-namespace-path=/run/netns/{netns}"))
            .arg(format!("--bind-ro={bin}:/usr/local/bin/polycorn"))
            .arg(format!("--bind={}:/etc/polycorn", etc.display()))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::from(
                std::fs::OpenOptions::new().append(true).open(&log).unwrap(),
            ))
            .spawn()
            .unwrap();
        // The container's systemd: the first descendant of systemd-nspawn that runs it (the
        // processes before it are nspawn's own).
        let systemd_below = |pid: u32| -> Option<u32> {
            let mut at = pid;
            for _ in 0..4 {
                let children = std::fs::read_to_string(format!("/proc/{at}/task/{at}/children"))
                    .unwrap_or_default();
                at = children.split_whitespace().next()?.parse().ok()?;
                let comm = std::fs::read_to_string(format!("/proc/{at}/comm")).unwrap_or_default();
                if comm.trim() == "systemd" {
                    return Some(at);
                }
            }
            None
        };
        let t0 = Instant::now();
        let leader = loop {
            if let Some(pid) = systemd_below(nspawn.id()) {
                break pid;
            }
            if let Ok(Some(st)) = nspawn.try_wait() {
                panic!(
                    "systemd-nspawn exited: {st}\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "no container");
            std::thread::sleep(Duration::from_millis(50));
        };
        let c = Container {
            nspawn,
            leader,
            log,
            role: role.to_string(),
        };
        // Until its bus is up, systemctl cannot ask it; until it has made /run/systemd/system
        // (just after its exec), systemctl says `offline`.
        let t0 = Instant::now();
        let mut state = c.sh("systemctl is-system-running --wait");
        while (state.contains("Failed to connect to bus") || state.trim() == "offline")
            && t0.elapsed() < Duration::from_secs(60)
        {
            std::thread::sleep(Duration::from_millis(200));
            state = c.sh("systemctl is-system-running --wait");
        }
        assert!(
            state.contains("running") || state.contains("degraded"),
            "container boot: {state}\n{}",
            c.console()
        );
        c
    }

    /// Runs `script` with `sh -c` inside the container (all of its namespaces); its stdout and
    /// stderr.
    fn sh(&self, script: &str) -> String {
        let out = Command::new("nsenter")
            .args(["-t", &self.leader.to_string(), "-a", "sh", "-c", script])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }

    /// The journal of the role's units, with microsecond times.
    fn journal(&self) -> String {
        let r = &self.role;
        self.sh(&format!(
            "journalctl -o short-precise -u polycorn-{r}.socket -u polycorn-{r} --no-pager"
        ))
    }

    /// Installs the role's service and socket units as the manual says, checks them with
    /// `systemd-analyze verify`, and starts them.
    fn start_units(&self) {
        let r = &self.role;
        let out = self.sh(&format!(
            "set -e
             polycorn config example {r}.service > /etc/systemd/system/polycorn-{r}.service
             polycorn config example {r}.socket --config /etc/polycorn/{r}.toml \
                 > /etc/systemd/system/polycorn-{r}.socket
             systemd-analyze verify /etc/systemd/system/polycorn-{r}.socket \
                 /etc/systemd/system/polycorn-{r}.service
             systemctl daemon-reload
             systemctl enable --now polycorn-{r}.socket
             systemctl restart polycorn-{r}
             echo units-started"
        ));
        assert!(out.contains("units-started"), "{out}\n{}", self.journal());
    }

    fn console(&self) -> String {
        tail(&std::fs::read_to_string(&self.log).unwrap_or_default())
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // SIGTERM asks systemd-nspawn for an orderly shutdown of the container.
        let _ = Command::new("kill")
            .args(["-TERM", &self.nspawn.id().to_string()])
            .status();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(15) {
            if let Ok(Some(_)) = self.nspawn.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.nspawn.kill();
        let _ = self.nspawn.wait();
    }
}

/// The relay's and the proxy's systemd units (`config example relay.service`, `relay.socket`,
/// `proxy.service`, `proxy.socket`) under systemd as PID 1, each in a Debian 12 container in its
/// namespace of the testbed: the relay's socket unit's transparent listeners
/// (`Transparent=yes`) take passengers' connections and start the relay, which installs its
/// interception and carries them; `relay --check-paths` passes beside it; restarts of either
/// service keep the listeners; stopping the relay's two units as the manual says lets a
/// download open at that moment finish within `drain_s` before the socket unit's
/// `--remove-interception` removes the rules, which it leaves in place until the relay has
/// exited (systemd stops the two units side by side), and nothing of the relay stays
/// installed.
#[test]
fn the_relay_and_proxy_units_run_under_systemd_as_pid_1() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let rootfs = match debian_rootfs() {
        Ok(d) => d,
        Err(why) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("no container for the systemd test: {why}")
        }
        Err(why) => {
            eprintln!("skipping the systemd test: {why}");
            return;
        }
    };
    let bed = Bed::constant("sd", 40, 20);
    start_server(&bed);
    let dir = tempfile::tempdir().unwrap();
    generate_credentials(dir.path());
    let (mut relay, mut proxy) = configs("polycorn", "polycorn", 2);
    relay.relay.drain_s = 5;
    // What the nightly LinkDB unit learns from and stores into (below).
    proxy.context.record = Some("/var/lib/polycorn/context".into());
    proxy.linkdb = LinkDbConfig {
        db: Some("sqlite:/var/lib/polycorn/linkdb.sqlite".into()),
        route: Some("north".into()),
        carriers: vec!["A".into(), "B".into()],
        track_origin: Some([39.0, 116.0]),
        track_heading_deg: 0.0,
        ..LinkDbConfig::default()
    };
    let (relay_toml, proxy_toml) = write_configs(dir.path(), &relay, &proxy);
    // A ride north, as a proxy records it, for the LinkDB unit: 30 fixes 78 m apart, B handing
    // over once.
    let mut ride =
        String::from("t_ms,lat,lon,speed_mps,heading_deg,cell_A,rsrp_dbm_A,cell_B,rsrp_dbm_B\n");
    for k in 0..30u32 {
        ride += &format!(
            "{},{:.7},116.0000000,78.00,0.0,1,-90.0,{},-95.0\n",
            k * 1000,
            39.0 + 0.0007 * f64::from(k),
            if k < 15 { 7 } else { 8 }
        );
    }
    std::fs::write(dir.path().join("ride.csv"), ride).unwrap();
    // Both containers see this directory as /etc/polycorn.
    let _ = (relay_toml, proxy_toml);
    let boot = |role: &str| {
        Container::boot(
            &rootfs,
            &bed.ns(role),
            bin(),
            dir.path(),
            dir.path().join(format!("console-{role}.log")),
            role,
        )
    };
    let proxy = boot("proxy");
    proxy.start_units();
    let c = boot("relay");
    c.start_units();
    let up = |n: usize| {
        wait_until(
            30,
            "the relay's subflows under systemd",
            || c.journal(),
            || c.journal().matches("subflow up").count() >= n,
        )
    };
    up(2);
    let pj = proxy.journal();
    assert!(
        pj.contains("socket passed by systemd") && pj.contains("subflow up"),
        "{}",
        tail(&pj)
    );
    let check =
        c.sh("polycorn relay --config /etc/polycorn/relay.toml --check-paths; echo status=$?");
    assert!(
        check.contains("2 of 2 path(s) reach the proxy") && check.contains("status=0"),
        "{check}"
    );
    let fetch = |down: u64, what: &str| fetch_ok_or_show(&bed, KB, down, what, &c.journal());
    fetch(
        4 * MB,
        "a transparent download through the relay under systemd",
    );
    let journal = c.journal();
    assert!(
        journal.contains("transparent (TPROXY) listener, passed by systemd"),
        "{}",
        tail(&journal)
    );

    // A restart of the service: the listener stays systemd's, the relay comes back.
    let out = c.sh("systemctl restart polycorn-relay && echo restarted");
    assert!(out.contains("restarted"), "{out}");
    up(4);
    fetch(4 * MB, "a download after the relay's restart");
    // The proxy's restart: its listener stays systemd's too, the relay's paths come back.
    let out = proxy.sh("systemctl restart polycorn-proxy && echo restarted");
    assert!(out.contains("restarted"), "{out}");
    up(6);
    fetch(4 * MB, "a download after the proxy's restart");
    // A reload of each (ExecReload: the file checked, then SIGHUP): nothing restarts, and the
    // TLS files, unchanged, are said to be.
    let main_pid = |c: &Container, unit: &str| {
        c.sh(&format!("systemctl show -p MainPID --value {unit}"))
            .trim()
            .to_string()
    };
    let pids = (
        main_pid(&c, "polycorn-relay"),
        main_pid(&proxy, "polycorn-proxy"),
    );
    for (box_, unit) in [(&c, "polycorn-relay"), (&proxy, "polycorn-proxy")] {
        let out = box_.sh(&format!("systemctl reload {unit} && echo reloaded"));
        assert!(
            out.contains("reloaded"),
            "{unit}: {out}\n{}",
            tail(&box_.journal())
        );
        wait_until(
            20,
            "the reload is applied",
            || box_.journal(),
            || {
                box_.journal()
                    .contains("reload: the TLS files are unchanged")
            },
        );
    }
    assert_eq!(
        (
            main_pid(&c, "polycorn-relay"),
            main_pid(&proxy, "polycorn-proxy")
        ),
        pids,
        "a reload restarted a service"
    );
    fetch(MB, "a download after the reloads");

    // LinkDB's nightly round on the proxy's host, as the manual installs it: the timer enabled,
    // the service run once now: it learns the past day's ride the proxy recorded, then reloads
    // the proxy, which rebuilds its predictor without a restart.
    let out = proxy.sh(
        "set -e
         mkdir -p /var/lib/polycorn/context/train-1
         cp /etc/polycorn/ride.csv /var/lib/polycorn/context/train-1/context-20200101T060000Z.csv
         polycorn config example linkdb-learn.service \
             > /etc/systemd/system/polycorn-linkdb-learn.service
         polycorn config example linkdb-learn.timer > /etc/systemd/system/polycorn-linkdb-learn.timer
         systemd-analyze verify /etc/systemd/system/polycorn-linkdb-learn.service \
             /etc/systemd/system/polycorn-linkdb-learn.timer
         systemctl daemon-reload
         systemctl enable --now polycorn-linkdb-learn.timer
         systemctl start polycorn-linkdb-learn
         journalctl -u polycorn-linkdb-learn --no-pager
         systemctl list-timers --all --no-pager
         echo learnt",
    );
    assert!(
        out.contains("learnt")
            && out.contains("1 trips (1 new, 0 already stored), 1 handovers")
            && out.contains("polycorn-linkdb-learn.timer"),
        "{out}"
    );
    wait_until(
        20,
        "the proxy rebuilds LinkDB after the nightly import",
        || proxy.journal(),
        || proxy.journal().contains("LinkDB predictor rebuilt"),
    );
    assert!(
        proxy.journal().contains("rides=1"),
        "{}",
        tail(&proxy.journal())
    );
    assert_eq!(
        main_pid(&proxy, "polycorn-proxy"),
        pids.1,
        "the nightly round restarted the proxy"
    );
    // The timer itself starts the service: its calendar moved to every 10 s for a moment (a
    // drop-in), one run it starts is awaited, then the nightly calendar is back.
    let out = proxy.sh(
        "set -e
         mkdir -p /etc/systemd/system/polycorn-linkdb-learn.timer.d
         printf '[Timer]\nOnCalendar=\nOnCalendar=*:*:0/10\nRandomizedDelaySec=0\nAccuracySec=1s\n' \
             > /etc/systemd/system/polycorn-linkdb-learn.timer.d/soon.conf
         systemctl daemon-reload
         systemctl restart polycorn-linkdb-learn.timer
         echo armed",
    );
    assert!(out.contains("armed"), "{out}");
    let runs = || {
        proxy
            .sh("journalctl -u polycorn-linkdb-learn --no-pager")
            .matches("1 files imported before, not read again")
            .count()
    };
    wait_until(
        30,
        "the timer starts the nightly import",
        || {
            proxy.sh("systemctl list-timers --all --no-pager; journalctl -u polycorn-linkdb-learn --no-pager")
        },
        || runs() >= 1,
    );
    let out = proxy.sh("set -e
         rm -r /etc/systemd/system/polycorn-linkdb-learn.timer.d
         systemctl daemon-reload
         systemctl restart polycorn-linkdb-learn.timer
         while [ \"$(systemctl show -p ActiveState --value polycorn-linkdb-learn)\" = activating ]
         do sleep 0.2; done
         systemctl show polycorn-linkdb-learn.timer -p TimersCalendar --no-pager");
    assert!(
        out.contains("OnCalendar=*-*-* 00:30:00 UTC"),
        "the nightly calendar is not back: {out}"
    );

    // Stop both units, as the manual says (docs/src/operate/deploy.md), while a download runs.
    let download = download_in_background(&bed, 24 * MB, 60);
    wait_until(
        20,
        "the proxy connects to the server",
        || format!("{}\n--- proxy ---\n{}", c.journal(), tail(&proxy.journal())),
        || established_to(&bed.ns("proxy"), "10.0.2.2") > 0 || download.is_finished(),
    );
    assert!(
        !download.is_finished(),
        "the download ended before the stop: {:?}\n{}\n--- proxy ---\n{}",
        download.join(),
        tail(&c.journal()),
        tail(&proxy.journal())
    );
    let out = c.sh("systemctl stop polycorn-relay.socket polycorn-relay && echo stopped");
    assert!(out.contains("stopped"), "{out}");
    let r = download.join().unwrap();
    let journal = c.journal();
    assert!(
        matches!(r, Ok(Ok(()))),
        "the download open at the stop finishes within drain_s: {r:?}\n{}",
        tail(&journal)
    );
    eprintln!("{}", tail(&journal));
    // The last of each (the restart drained too).
    let at = |what: &str| {
        journal
            .lines()
            .enumerate()
            .filter(|(_, l)| l.contains(what))
            .map(|(i, _)| i)
            .last()
            .unwrap_or_else(|| panic!("no `{what}` in:\n{journal}"))
    };
    assert!(
        at("drained") < at("removed the relay's interception"),
        "the rules stayed until the relay had drained:\n{journal}"
    );
    let tables = Command::new("ip")
        .args(["netns", "exec", &bed.ns("relay"), "nft", "list", "tables"])
        .output()
        .unwrap();
    let tables = String::from_utf8_lossy(&tables.stdout);
    assert!(!tables.contains("polycorn_relay"), "{tables}");
    drop(c);
}
