//! The shipped Prometheus alerting rules, evaluated by a real Prometheus on running daemons.

use std::path::Path;
use std::time::{Duration, Instant};

use polycorn_lab::harness;
use tokio::net::TcpStream;

use crate::bed::*;
use crate::prometheus;
use crate::support::*;

/// A Prometheus server (Debian's, see `support/prometheus.rs`) in a namespace of the testbed,
/// scraping the daemon there (`127.0.0.1:9100`) and evaluating the shipped alerting rules, both
/// every second; its API on `127.0.0.1:9190` of that namespace. Stopped on drop
/// ([`harness::Daemon`]).
struct Prometheus {
    ns: String,
    daemon: harness::Daemon,
}

/// An alert as Prometheus's API lists it: name, state (`pending` or `firing`), labels.
type Alert = (String, String, std::collections::BTreeMap<String, String>);
/// An alert expected: name, state, and labels it must carry (among others).
type Expected<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

impl Prometheus {
    fn start(prometheus: &Path, ns: &str, dir: &Path, role: &str) -> Prometheus {
        let cfg = dir.join(format!("prometheus-{role}.yml"));
        std::fs::write(
            &cfg,
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [alerts.yml]\n\
             scrape_configs:\n  - job_name: polycorn\n    static_configs:\n      - targets: [\"127.0.0.1:9100\"]\n",
        )
        .unwrap();
        let daemon = harness::Daemon::start_program(
            ns,
            prometheus,
            &[
                format!("--config.file={}", cfg.display()),
                format!(
                    "--storage.tsdb.path={}",
                    dir.join(format!("tsdb-{role}")).display()
                ),
                "--web.listen-address=127.0.0.1:9190".to_string(),
            ],
            dir.join(format!("prometheus-{role}.log")),
        )
        .unwrap();
        let p = Prometheus {
            ns: ns.to_string(),
            daemon,
        };
        p.wait(30, "Prometheus ready", |p| p.try_get("/-/ready").is_some());
        p
    }

    /// The body of `GET path` on the API, when it answers 200.
    fn try_get(&self, path: &str) -> Option<String> {
        let req = format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n");
        in_ns(&self.ns, move || {
            Box::pin(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut s = TcpStream::connect("127.0.0.1:9190").await.ok()?;
                s.write_all(req.as_bytes()).await.ok()?;
                let mut all = String::new();
                s.read_to_string(&mut all).await.ok()?;
                let (head, body) = all.split_once("\r\n\r\n")?;
                head.starts_with("HTTP/1.0 200").then(|| body.to_string())
            })
        })
    }

    /// `data` of an API answer.
    fn api(&self, path: &str) -> serde_json::Value {
        let body = self
            .try_get(path)
            .unwrap_or_else(|| panic!("{path}:\n{}", tail(&self.log())));
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "success", "{body}");
        v["data"].clone()
    }

    fn alerts(&self) -> Vec<Alert> {
        let data = self.api("/api/v1/alerts");
        let mut out: Vec<Alert> = data["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                let labels = a["labels"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .filter(|(k, _)| *k != "alertname")
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect();
                (
                    a["labels"]["alertname"].as_str().unwrap().to_string(),
                    a["state"].as_str().unwrap().to_string(),
                    labels,
                )
            })
            .collect();
        out.sort();
        out
    }

    /// Every alerting rule loaded, as (name, health, last error).
    fn rules(&self) -> Vec<(String, String, String)> {
        let data = self.api("/api/v1/rules");
        let mut out = Vec::new();
        for g in data["groups"].as_array().unwrap() {
            for r in g["rules"].as_array().unwrap() {
                out.push((
                    r["name"].as_str().unwrap().to_string(),
                    r["health"].as_str().unwrap().to_string(),
                    r["lastError"].as_str().unwrap_or("").to_string(),
                ));
            }
        }
        out
    }

    /// Waits up to `secs` for `done`, polling every 200 ms.
    fn wait(&self, secs: u64, what: &str, done: impl Fn(&Prometheus) -> bool) {
        wait_until(secs, what, || self.log(), || done(self));
    }

    /// Waits up to `secs` for the active alerts to be exactly `want` (name, state, and the
    /// labels given, which each alert must carry).
    fn wait_alerts(&self, secs: u64, what: &str, want: &[Expected]) {
        let matches = |got: &[Alert]| {
            got.len() == want.len()
                && want.iter().all(|(name, state, labels)| {
                    got.iter().any(|(n, s, l)| {
                        n == name
                            && s == state
                            && labels
                                .iter()
                                .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
                    })
                })
        };
        let t0 = Instant::now();
        loop {
            let got = self.alerts();
            if matches(&got) {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(secs),
                "{what}: within {secs} s on {}, alerts {want:?} expected, got {got:?}",
                self.ns
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn log(&self) -> String {
        self.daemon.log()
    }
}

/// The alerting rules `polycorn config example alerts` ships, loaded by a real Prometheus at
/// each end and evaluated on what the running relay and proxy export: every rule evaluates
/// without error, a healthy pair raises nothing, one carrier dark raises the path alert at both
/// ends (pending: it waits 10 minutes), every carrier dark raises the relay's offline alert and
/// nothing on the proxy (there a train switched off looks the same), and a relay killed and
/// started again raises the proxy's restart alert. (`tests/alerts.rs` runs promtool's unit
/// tests of the same rules, the durations included.)
#[test]
fn the_shipped_alerting_rules_judge_a_running_relay_and_proxy() {
    let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !is_root() {
        return;
    }
    let Some(prometheus) = prometheus::tool("prometheus") else {
        return;
    };
    let bed = Bed::constant("al", 40, 20);
    start_server(&bed);
    let mut stack = start_stack(&bed, "polycorn", "polycorn", 2);
    let rules = prometheus::shipped_rules(bin());
    let alerting_rules = rules.matches("- alert: ").count();
    std::fs::write(stack.dir.path().join("alerts.yml"), &rules).unwrap();
    let ends = [
        (
            "relay",
            Prometheus::start(&prometheus, &bed.ns("relay"), stack.dir.path(), "relay"),
        ),
        (
            "proxy",
            Prometheus::start(&prometheus, &bed.ns("proxy"), stack.dir.path(), "proxy"),
        ),
    ];
    for (role, p) in &ends {
        p.wait(
            30,
            &format!("the {role} scraped and known by its role"),
            |p| {
                let v = p.api(&format!(
                    "/api/v1/query?query=polycorn_build_info%7Brole%3D%22{role}%22%7D"
                ));
                v["result"].as_array().is_some_and(|r| r.len() == 1)
            },
        );
    }
    // A few evaluations on what both daemons export.
    std::thread::sleep(Duration::from_secs(3));
    for (role, p) in &ends {
        let rules = p.rules();
        assert_eq!(rules.len(), alerting_rules, "{role}: {rules:?}");
        for (name, health, error) in &rules {
            assert_eq!(health, "ok", "{role}: {name}: {error}");
        }
        assert!(p.alerts().is_empty(), "{role}, healthy: {:?}", p.alerts());
    }
    // The relay names its paths as configured, and the proxy as the relay's Hellos did.
    let dark = Blackhole::new(&bed.ns("relay"), &["path1"]);
    for ((_, p), path) in ends.iter().zip(["p1", "p1"]) {
        p.wait_alerts(
            30,
            "one carrier dark",
            &[(
                "PolycornPathDown",
                "pending",
                &[("path", path), ("relay", "polycorn-relay")],
            )],
        );
    }
    drop(dark);
    for (_, p) in &ends {
        p.wait_alerts(30, "the carrier back", &[]);
    }
    let dark = Blackhole::new(&bed.ns("relay"), &["path0", "path1"]);
    let (_, relay) = &ends[0];
    let (_, proxy) = &ends[1];
    relay.wait_alerts(
        30,
        "every carrier dark",
        &[(
            "PolycornRelayOffline",
            "pending",
            &[("relay", "polycorn-relay")],
        )],
    );
    std::thread::sleep(Duration::from_secs(3));
    relay.wait_alerts(
        0,
        "every carrier dark, 3 s on",
        &[("PolycornRelayOffline", "pending", &[])],
    );
    proxy.wait_alerts(0, "every carrier dark, on the proxy", &[]);
    drop(dark);
    for (_, p) in &ends {
        p.wait_alerts(30, "the carriers back", &[]);
    }
    stack.relay.crash();
    stack.start_again(&bed, "relay", "relay-after-crash.log");
    stack.relay.wait_for("subflow up", 2);
    proxy.wait_alerts(
        30,
        "the relay killed and started again",
        &[(
            "PolycornRelayRestarted",
            "firing",
            &[("relay", "polycorn-relay"), ("how", "restarted")],
        )],
    );
    relay.wait_alerts(30, "the relay started again", &[]);
}
