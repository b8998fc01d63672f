use super::*;
use crate::bench::system;

/// A `[linkdb]` table as the testbed's LinkDB builder writes it.
const LINKDB: &str = "\n[linkdb]\ndb = \"sqlite:/tmp/pc/linkdb.db\"\nmodel = \"paper\"\n\
    route = \"ice/route3\"\ncarriers = [\"A\", \"B\", \"C\"]\ntrack_origin = [52.5, 13]\n\
    track_heading_deg = 90\n";

/// The relay and proxy files of `sys`, written out key by key: what the typed configurations
/// must mean to the daemons.
fn by_hand(sys: &System, paths: usize, linkdb: Option<(&str, bool)>) -> (String, String) {
    let spec = if sys.mode == "polycorn" {
        sys.spec.as_str()
    } else {
        "minrtt"
    };
    let cc = sys.congestion;
    let mut relay = format!(
        "[relay]\nmode = \"{}\"\nscheduler = \"{spec}\"\nproxy = \"10.100.0.2:7700\"\ncongestion = \"{cc}\"\n",
        sys.mode
    );
    if let Some(r) = sys.idle_refresh {
        relay += &format!("idle_refresh = \"{r}\"\n");
    }
    let warm = if sys.warm {
        "slow_start_after_idle = false\n"
    } else {
        ""
    };
    relay += warm;
    let mut both = match sys.rto_max_ms {
        Some(ms) => format!("rto_max_ms = {ms}\n"),
        None => String::new(),
    };
    if let Some(s) = sys.idle_probe_s {
        both += &format!("idle_probe_s = {s}\n");
    }
    if let Some(g) = sys.window_gain {
        both += &format!("window_gain = {g:?}\n");
    }
    relay += &both;
    relay.push('\n');
    for i in 0..paths {
        relay += &format!(
            "[[path]]\nname = \"p{i}\"\ndevice = \"path{i}\"\nsource = \"10.100.{i}.1\"\nproxy = \"10.100.{i}.2:7700\"\n\n"
        );
    }
    relay += "[intercept]\ntransparent = \"0.0.0.0:7070\"\ninstall_nft = true\nlan_device = \"lan0\"\n\n";
    if sys.mode == "polycorn" {
        relay += &format!("[context]\nsource = \"gpsd\"\ngpsd = \"127.0.0.1:{GPSD_PORT}\"\n\n");
    }
    relay += "[tls]\nca = \"ca.pem\"\ncert = \"relay.pem\"\nkey = \"relay.key\"\n";
    relay += &format!("\n[metrics]\nlisten = \"{METRICS_ADDR}\"\n");
    if let (Some((l, true)), "polycorn") = (linkdb, sys.mode.as_str()) {
        relay += l;
    }
    let ask = if sys.ask_refresh {
        ""
    } else {
        "ask_refresh = false\n"
    };
    let mut proxy = format!(
        "[proxy]\nlisten = \"0.0.0.0:7700\"\ntunnel_listen = \"0.0.0.0:7701\"\ntunnel_peers = [\"10.100.0.0/16\"]\nscheduler = \"{spec}\"\ncongestion = \"{cc}\"\n{warm}{both}{ask}\n[tls]\nca = \"ca.pem\"\ncert = \"proxy.pem\"\nkey = \"proxy.key\"\n\n[policy]\nallow = [\"10.0.2.0/24\"]\n"
    );
    proxy += &format!("\n[metrics]\nlisten = \"{METRICS_ADDR}\"\n");
    if let (Some((l, _)), "polycorn") = (linkdb, sys.mode.as_str()) {
        proxy += l;
    }
    (relay, proxy)
}

#[test]
fn every_system_writes_configurations_that_read_as_written_by_hand() {
    let names = [
        "mptcp",
        "single",
        "mptcp+bbr",
        "vanilla",
        "hrsch",
        "polycorn",
        "hrsch-er",
        "polycorn:minrtt,tpr",
        "vanilla+probe200",
        "vanilla+nocap",
        "hrsch+probe200+rto1s",
        "hrsch+nocap+probe200",
        "polycorn+nocap",
        "polycorn+probe200",
        "hrsch+fresh+warm+bbr",
        "polycorn+cubic",
        "vanilla+noask+nocap",
        "polycorn+rto1s+warm+noask",
    ];
    let dir = std::env::temp_dir().join(format!("pc-configs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in names {
        let sys = system(name).unwrap();
        for paths in [1, 3] {
            for linkdb in [None, Some((LINKDB, true)), Some((LINKDB, false))] {
                let what = format!("{name}, {paths} paths, linkdb {:?}", linkdb.map(|l| l.1));
                let (relay, proxy) = by_hand(&sys, paths, linkdb);
                let typed = linkdb.map(|(text, at_relay)| {
                    let db = LinkDbConfig::from_toml(text, "LINKDB").expect(text);
                    (db, at_relay)
                });
                let typed = typed.as_ref().map(|(db, at_relay)| (db, *at_relay));
                let (r, p) = write_configs(&dir, &sys, paths, typed).unwrap();
                let written = (
                    std::fs::read_to_string(r).unwrap(),
                    std::fs::read_to_string(p).unwrap(),
                );
                let want = RelayConfig::from_toml(&relay, "by hand").expect(&relay);
                let got = RelayConfig::from_toml(&written.0, "written").expect(&written.0);
                assert_eq!(got, want, "{what}\n{}", written.0);
                let want = ProxyConfig::from_toml(&proxy, "by hand").expect(&proxy);
                let got = ProxyConfig::from_toml(&written.1, "written").expect(&written.1);
                assert_eq!(got, want, "{what}\n{}", written.1);
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_window_gain_of_a_system_is_its_configurations() {
    let gains = |name| {
        let (relay, proxy) = configs(&system(name).unwrap(), 2, None).unwrap();
        (relay.relay.window_gain(), proxy.proxy.window_gain())
    };
    assert_eq!(gains("vanilla+nocap"), (None, None));
    assert_eq!(gains("vanilla"), (Some(2.0), Some(2.0)));
}
