use super::*;

/// A path whose link carried nothing in the lead-in may join late; one that had capacity and
/// still did not connect, or no path at all, fails the run with the reason.
#[test]
fn late_subflows_only_where_the_link_carried_nothing() {
    use polycorn_link::trace::{DelaySeries, DeliveryTrace};
    use polycorn_link::trip::TracePath;
    // "busy": one opportunity per ms (12 Mbit/s); "idle": nothing for 10 s, then the same.
    let busy = DeliveryTrace::parse("b", "1\n").unwrap();
    let idle_ms: String = (10_001..=11_000).map(|m| format!("{m}\n")).collect();
    let idle = DeliveryTrace::parse("i", &idle_ms).unwrap();
    let d = DelaySeries::constant(20_000);
    let none = polycorn_link::trace::Outages::none();
    let path = |name: &str, t| TracePath {
        name: name.into(),
        down: t,
        up: t,
        delay: &d,
        outages: &none,
        interruptions: &none,
    };
    let trip = Trip::from_traces(&[path("a", &busy), path("b", &idle)], 20_000);
    let log = "INFO polycorn_net::relay: subflow up path=p0 proxy=x addr=x\n";
    assert_eq!(late_subflows(log, &trip, 6.0), Ok(vec!["b".to_string()]));
    // With a 12 s lead-in path b carried 2 s of data: a real failure to connect.
    let e = late_subflows(log, &trip, 12.0).unwrap_err();
    assert!(e.contains("path b (p1) did not connect although"), "{e}");
    // Path a down, b idle: a failed to connect with capacity, and nothing connected.
    let e = late_subflows("", &trip, 6.0).unwrap_err();
    assert!(
        e.contains("path a (p0)") && e.contains("no path connected"),
        "{e}"
    );
    let trip = Trip::from_traces(&[path("a", &idle), path("b", &idle)], 20_000);
    let e = late_subflows("", &trip, 6.0).unwrap_err();
    assert_eq!(e, "no path connected");
}

#[test]
fn a_system_named_again_runs_again_under_a_numbered_name() {
    let names: Vec<String> = ["hrsch", "vanilla", "hrsch", "polycorn", "hrsch"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let s = systems_named(&names).unwrap();
    let got: Vec<&str> = s.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(got, ["hrsch", "vanilla", "hrsch#2", "polycorn", "hrsch#3"]);
    // The copies run the same thing.
    assert_eq!(
        (s[2].mode.as_str(), s[2].spec.as_str()),
        ("polycorn", "hrsch")
    );
    assert_eq!(s[3].spec, "polycorn");
    // What ran is recorded with the presets expanded, as this build defines them.
    assert_eq!(
        s[1].pipeline().as_deref(),
        Some("minrtt+rto"),
        "vanilla expanded"
    );
    assert_eq!(
        s[3].pipeline(),
        Some(
            polycorn_sched::Pipeline::from_spec("polycorn")
                .unwrap()
                .spec()
                .to_string()
        )
    );
    assert_eq!(system("mptcp").unwrap().pipeline(), None);
    assert_eq!(
        polycorn_sched::spec::label("vanilla", s[1].pipeline().as_deref()),
        "vanilla = minrtt+rto"
    );
    assert_eq!(
        polycorn_sched::spec::label("minrtt+rto", Some("minrtt+rto")),
        "minrtt+rto"
    );
    assert_eq!(polycorn_sched::spec::label("-", None), "-");
    let e = systems_named(&["hrsch".into(), "fastest".into()]).unwrap_err();
    assert!(e.to_string().contains("unknown system `fastest`"), "{e}");
}

#[test]
fn systems_split_on_semicolons_when_a_spec_has_commas() {
    let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        split_systems(&v(&["vanilla,mptcp", "hrsch"])).unwrap(),
        v(&["vanilla", "mptcp", "hrsch"])
    );
    let spec = "polycorn:hpr,minrtt,tpr,ori+er(k=3,oldest=0)";
    assert_eq!(
        split_systems(&v(&[&format!("vanilla; hrsch;{spec}")])).unwrap(),
        v(&["vanilla", "hrsch", spec])
    );
    assert_eq!(
        split_systems(&v(&["vanilla", spec])).unwrap(),
        v(&["vanilla", spec])
    );
    let names = split_systems(&v(&[&format!("hrsch;{spec}")])).unwrap();
    let s = systems_named(&names).unwrap();
    assert_eq!(s[1].spec, "hpr,minrtt,tpr,ori+er(k=3,oldest=0)");
    let e = split_systems(&v(&["vanilla;;hrsch"])).unwrap_err();
    assert!(e.to_string().contains("empty system name"), "{e}");
    // Split on commas, a spec's stages are not systems: the error says what to do.
    let names = split_systems(&v(&["vanilla,polycorn:minrtt,tpr"])).unwrap();
    let e = systems_named(&names).unwrap_err();
    assert!(e.to_string().contains("`;`"), "{e}");
}

#[test]
fn fresh_suffix_sets_the_relays_idle_refresh_and_only_for_polycorn() {
    let s = system("hrsch+fresh").unwrap();
    assert_eq!(
        (s.name.as_str(), s.spec.as_str(), s.idle_refresh),
        ("hrsch+fresh", "hrsch", Some("used"))
    );
    assert_eq!(system("hrsch").unwrap().idle_refresh, None);
    let dir = std::env::temp_dir().join(format!("pc-fresh-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (relay, _) = write_configs(&dir, &s, 2, None).unwrap();
    let text = std::fs::read_to_string(relay).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(text.contains("idle_refresh = \"used\""), "{text}");
    let e = system("mptcp+fresh").unwrap_err();
    assert!(e.to_string().contains("polycorn systems only"), "{e}");
}

#[test]
fn warm_suffix_turns_slow_start_after_idle_off_on_both_ends_and_only_for_polycorn() {
    let s = system("hrsch+fresh+warm").unwrap();
    assert_eq!(
        (s.name.as_str(), s.spec.as_str(), s.idle_refresh, s.warm),
        ("hrsch+fresh+warm", "hrsch", Some("used"), true)
    );
    assert!(!system("hrsch").unwrap().warm);
    let dir = std::env::temp_dir().join(format!("pc-warm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["ca.pem", "relay.pem", "relay.key", "proxy.pem", "proxy.key"] {
        std::fs::write(dir.join(f), "").unwrap();
    }
    let (relay, proxy) = write_configs(&dir, &s, 2, None).unwrap();
    let relay = polycorn_net::config::RelayConfig::load(&relay);
    let proxy = polycorn_net::config::ProxyConfig::load(&proxy);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(relay.unwrap().relay.slow_start_after_idle, Some(false));
    assert_eq!(proxy.unwrap().proxy.slow_start_after_idle, Some(false));
    let e = system("single+warm").unwrap_err();
    assert!(e.to_string().contains("polycorn systems only"), "{e}");
}

#[test]
fn polycorn_systems_run_the_daemons_default_congestion_control_and_suffixes_choose() {
    // Polycorn systems run what relay and proxy run when their configuration names none; the
    // baselines Linux's default.
    assert_eq!(
        system("hrsch").unwrap().congestion,
        polycorn_net::config::DEFAULT_CONGESTION
    );
    assert_eq!(system("polycorn").unwrap().congestion, "bbr");
    assert_eq!(system("mptcp").unwrap().congestion, "cubic");
    assert_eq!(system("single").unwrap().congestion, "cubic");
    let dir = std::env::temp_dir().join(format!("pc-bbr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["ca.pem", "relay.pem", "relay.key", "proxy.pem", "proxy.key"] {
        std::fs::write(dir.join(f), "").unwrap();
    }
    for (name, cc) in [
        ("mptcp+bbr", "bbr"),
        ("single+bbr", "bbr"),
        ("hrsch+warm+bbr", "bbr"),
        ("polycorn+cubic", "cubic"),
        ("hrsch+warm+cubic", "cubic"),
        ("polycorn", "bbr"),
    ] {
        let s = system(name).unwrap();
        assert_eq!((s.name.as_str(), s.congestion), (name, cc));
        let (relay, proxy) = write_configs(&dir, &s, 2, None).unwrap();
        let relay = polycorn_net::config::RelayConfig::load(&relay).unwrap();
        let proxy = polycorn_net::config::ProxyConfig::load(&proxy).unwrap();
        assert_eq!(relay.relay.congestion.as_deref(), Some(cc), "{name}");
        assert_eq!(proxy.proxy.congestion.as_deref(), Some(cc), "{name}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(system("hrsch+warm+bbr").unwrap().warm);
}

#[test]
fn rto1s_suffix_caps_both_ends_subflow_timeouts_and_is_polycorn_only() {
    assert_eq!(system("polycorn").unwrap().rto_max_ms, None);
    let s = system("polycorn+rto1s+bbr").unwrap();
    assert_eq!((s.rto_max_ms, s.congestion), (Some(1000), "bbr"));
    let dir = std::env::temp_dir().join(format!("pc-rto-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["ca.pem", "relay.pem", "relay.key", "proxy.pem", "proxy.key"] {
        std::fs::write(dir.join(f), "").unwrap();
    }
    let written = write_configs(&dir, &s, 2, None).map(|(r, p)| {
        (
            polycorn_net::config::RelayConfig::load(&r).map(|c| c.relay.rto_max_ms),
            polycorn_net::config::ProxyConfig::load(&p).map(|c| c.proxy.rto_max_ms),
        )
    });
    let plain = write_configs(&dir, &system("polycorn").unwrap(), 2, None)
        .map(|(r, _)| polycorn_net::config::RelayConfig::load(&r).map(|c| c.relay.rto_max_ms));
    std::fs::remove_dir_all(&dir).unwrap();
    let (relay, proxy) = written.unwrap();
    assert_eq!((relay.unwrap(), proxy.unwrap()), (Some(1000), Some(1000)));
    assert_eq!(plain.unwrap().unwrap(), None);
    let e = system("mptcp+rto1s").unwrap_err();
    assert!(e.to_string().contains("polycorn systems only"), "{e}");
}

/// What `relay` and `proxy` read from the configuration files `write_configs` writes for
/// system `name` (two paths, placeholder credentials in a scratch directory).
fn read_back<T>(
    name: &str,
    relay: fn(&polycorn_net::config::RelayConfig) -> T,
    proxy: fn(&polycorn_net::config::ProxyConfig) -> T,
) -> (T, T) {
    let tag = name.replace(['+', ':', ';', ','], "-");
    let dir = std::env::temp_dir().join(format!("pc-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["ca.pem", "relay.pem", "relay.key", "proxy.pem", "proxy.key"] {
        std::fs::write(dir.join(f), "").unwrap();
    }
    let written = write_configs(&dir, &system(name).unwrap(), 2, None);
    let read = written.map(|(r, p)| {
        (
            polycorn_net::config::RelayConfig::load(&r).map(|c| relay(&c)),
            polycorn_net::config::ProxyConfig::load(&p).map(|c| proxy(&c)),
        )
    });
    std::fs::remove_dir_all(&dir).unwrap();
    let (r, p) = read.unwrap();
    (r.unwrap(), p.unwrap())
}

#[test]
fn probe200_suffix_keeps_both_ends_probing_every_200_ms_and_is_polycorn_only() {
    let s = system("hrsch+probe200+rto1s").unwrap();
    assert_eq!((s.idle_probe_s, s.rto_max_ms), (Some(0), Some(1000)));
    let idle = |name| read_back(name, |c| c.relay.idle_probe(), |c| c.proxy.idle_probe());
    assert_eq!(idle("hrsch+probe200+rto1s"), (None, None));
    let five = Some(std::time::Duration::from_secs(5));
    assert_eq!(idle("hrsch"), (five, five));
    let e = system("single+probe200").unwrap_err();
    assert!(e.to_string().contains("polycorn systems only"), "{e}");
}

#[test]
fn nocap_suffix_gives_both_schedulers_the_kernels_window_and_is_polycorn_only() {
    assert_eq!(system("vanilla+nocap").unwrap().window_gain, Some(0.0));
    let gain = |name| read_back(name, |c| c.relay.window_gain(), |c| c.proxy.window_gain());
    assert_eq!(gain("vanilla+nocap"), (None, None));
    assert_eq!(gain("vanilla"), (Some(2.0), Some(2.0)));
    let e = system("mptcp+nocap").unwrap_err();
    assert!(e.to_string().contains("polycorn systems only"), "{e}");
}

#[test]
fn noask_suffix_stops_the_proxy_asking_for_fresh_subflows_and_is_polycorn_only() {
    assert!(!system("vanilla+noask").unwrap().ask_refresh);
    let ask = |name| read_back(name, |_| true, |c| c.proxy.ask_refresh);
    assert!(!ask("vanilla+noask+nocap").1);
    assert!(ask("vanilla").1);
    let e = system("single+noask").unwrap_err();
    assert!(e.to_string().contains("polycorn systems only"), "{e}");
}

#[test]
fn workloads_choose_the_plan_and_bulk_flows_count_downloads_and_uploads() {
    let apply = |w: &[Workload], n: Option<usize>| {
        let mut p = PlanParams::full();
        apply_workloads(&mut p, w, n).map(|()| (p.bulk_flows, p.im, p.uploads))
    };
    use Workload::*;
    // The default: downloads and IM, no uploads.
    assert_eq!(apply(&[Bulk, Im], None).unwrap(), (12, true, 0));
    assert_eq!(apply(&[Upload], None).unwrap(), (0, false, 12));
    assert_eq!(apply(&[Bulk, Im, Upload], Some(3)).unwrap(), (3, true, 3));
    assert_eq!(apply(&[Im, Upload], Some(6)).unwrap(), (0, true, 6));
    let err = |w: &[Workload], n| apply(w, n).unwrap_err().to_string();
    assert!(err(&[], None).contains("bulk, im, upload"));
    assert!(err(&[Im], Some(3)).contains("--bulk-flows needs the bulk or the upload"));
    assert!(err(&[Upload], Some(0)).contains("at least 1"));
}

#[test]
fn rides_rotate_the_run_order_so_every_system_runs_in_every_position() {
    assert_eq!(run_order(3, 0), [0, 1, 2]);
    assert_eq!(run_order(3, 1), [1, 2, 0]);
    assert_eq!(run_order(3, 5), [2, 0, 1]);
    for pos in 0..4 {
        let mut seen: Vec<usize> = (0..4).map(|ride| run_order(4, ride)[pos]).collect();
        seen.sort_unstable();
        assert_eq!(seen, [0, 1, 2, 3], "position {pos}");
    }
    assert!(run_order(0, 3).is_empty());
}
