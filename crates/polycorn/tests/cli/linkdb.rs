//! LinkDB from the command line: imports, validation, and learning from what relays saw.

use polycorn_net::config::{ProxyConfig, TlsFiles};

use crate::support::*;

#[test]
fn linkdb_import_is_idempotent_and_validate_prints_the_categories() {
    let dir = std::env::temp_dir().join(format!("polycorn-cli-linkdb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = format!("sqlite:{}", dir.join("l.sqlite").display());
    let trip = dir.join("trip");
    let out = polycorn(&[
        "trip",
        "generate",
        "--preset",
        "ktx",
        "--route-seed",
        "4",
        "--trip-seed",
        "2",
        "--interruptions",
        "builtin",
        "--out",
        trip.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let out = polycorn(&[
        "linkdb",
        "import",
        "--db",
        &db,
        "--trip-dir",
        trip.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text(&out).contains("1 trips (1 new, 0 already stored)"),
        "{}",
        text(&out)
    );
    // The same trip generated in process has the same key: nothing new.
    let out = polycorn(&[
        "linkdb",
        "import",
        "--db",
        &db,
        "--simulate",
        "3",
        "--preset",
        "ktx",
        "--route-seed",
        "4",
        "--first-trip-seed",
        "1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text(&out).contains("3 trips (2 new, 1 already stored)"),
        "{}",
        text(&out)
    );
    let out = polycorn(&["linkdb", "validate", "--db", &db]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = text(&out);
    for needle in [
        "route ktx/route4: 3 trips in 3 rides",
        "paper",
        "risk",
        "loctable",
        "failures",
        "failures judged at the loss of the source cell",
        "only handovers out of a cell with a failure in the other rides",
    ] {
        assert!(t.contains(needle), "{needle} missing in\n{t}");
    }
    // Both views print a row per predictor and the "all" total.
    assert_eq!(t.matches("\npaper     all").count(), 2, "{t}");
    let out = polycorn(&["linkdb", "validate", "--db", &db, "--truth", "start"]);
    assert!(text(&out).contains("failures judged at their start"));
    let out = polycorn(&["linkdb", "validate", "--db", &db, "--truth", "end"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--truth"));
    let out = polycorn(&["linkdb", "analyze", "--db", &db]);
    assert!(out.status.success());
    assert!(text(&out).contains("Distance to EHP < 200m"));
    let out = polycorn(&["linkdb", "stats", "--db", &db]);
    assert!(text(&out).contains("3 trips"), "{}", text(&out));
    // A broken trip directory names the file.
    std::fs::write(trip.join("handovers.csv"), "carrier,from_cell\nA,1\n").unwrap();
    let out = polycorn(&[
        "linkdb",
        "import",
        "--db",
        &db,
        "--trip-dir",
        trip.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("handovers.csv:1: no `to_cell` column"));
    let out = polycorn(&["linkdb", "stats", "--db", "mysql://nope"]);
    assert!(!out.status.success());
    std::fs::remove_dir_all(dir).unwrap();
}

/// `linkdb validate --train-db`: learning from one database (last month's rides) and testing
/// on another; the same database as both gives the leave-one-ride-out tables.
#[test]
fn linkdb_validate_learns_from_one_database_and_tests_on_another() {
    let dir = std::env::temp_dir().join(format!("polycorn-cli-traindb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let err = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();
    let (last, this) = (dir.join("last.sqlite"), dir.join("this.sqlite"));
    for (db, seed, n) in [(&last, "1", "4"), (&this, "5", "3")] {
        let db = format!("sqlite:{}", db.display());
        let out = polycorn(&[
            "linkdb",
            "import",
            "--db",
            &db,
            "--simulate",
            n,
            "--preset",
            "hsr",
            "--route-seed",
            "2",
            "--first-trip-seed",
            seed,
        ]);
        assert!(out.status.success(), "{}", err(&out));
    }
    let this_db = format!("sqlite:{}", this.display());
    let out = polycorn(&[
        "linkdb",
        "validate",
        "--db",
        &this_db,
        "--train-db",
        last.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", err(&out));
    let t = text(&out);
    for needle in [
        "== route hsr/route2: 3 trips in 3 rides, judged by predictors learned from another set",
        &format!(
            "trained on sqlite:{}, all sources, route hsr/route2: 4 trips in 4 rides",
            last.display()
        ),
        &format!(
            "tested on sqlite:{}, all sources, route hsr/route2: 3 trips in 3 rides",
            this.display()
        ),
        "0 rides in both",
        "only handovers out of a cell with a failure in the other rides",
    ] {
        assert!(t.contains(needle), "{needle} missing in\n{t}");
    }
    assert_eq!(t.matches("\npaper     all").count(), 2, "{t}");
    // The same database to learn from and to test on: the leave-one-ride-out tables.
    let tables = |t: &str| {
        t.lines()
            .filter(|l| {
                l.starts_with("paper ") || l.starts_with("risk ") || l.starts_with("loctable ")
            })
            .map(String::from)
            .collect::<Vec<_>>()
    };
    let alone = polycorn(&["linkdb", "validate", "--db", &this_db]);
    assert!(alone.status.success(), "{}", err(&alone));
    let same = polycorn(&[
        "linkdb",
        "validate",
        "--db",
        &this_db,
        "--train-db",
        &this_db,
    ]);
    assert!(same.status.success(), "{}", err(&same));
    assert!(text(&same).contains("3 rides in both"), "{}", text(&same));
    assert!(!tables(&text(&alone)).is_empty());
    assert_eq!(tables(&text(&alone)), tables(&text(&same)));
    assert_ne!(
        tables(&text(&alone)),
        tables(&t),
        "learning from 4 more rides changes nothing?"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// LinkDB from what relays saw: simulated rides stored as their relays would have recorded
/// them (`--as-seen-by-relay`, with how they compare to the truth), validated against the truth
/// (`--train-source relay`); `--ride-log`'s options checked before anything is stored.
#[test]
fn linkdb_learns_from_what_relays_saw() {
    let dir = std::env::temp_dir().join(format!("polycorn-cli-relaylog-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db = format!("sqlite:{}", dir.join("l.sqlite").display());
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let err = |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).into_owned();
    let sim = ["--simulate", "3", "--preset", "hsr", "--route-seed", "2"];
    let mut args = vec!["linkdb", "import", "--db", &db];
    args.extend(sim);
    args.push("--as-seen-by-relay");
    let out = polycorn(&args);
    assert!(out.status.success(), "{}", err(&out));
    let t = text(&out);
    assert!(t.contains("3 trips (3 new, 0 already stored)"), "{t}");
    assert!(
        t.contains("as the relay saw them: ") && t.contains("failures found within 2 s"),
        "{t}"
    );
    assert!(
        t.contains("handovers inferred") || t.contains("where the loss was placed"),
        "{t}"
    );
    let mut args = vec!["linkdb", "import", "--db", &db];
    args.extend(sim);
    let out = polycorn(&args);
    assert!(out.status.success(), "{}", err(&out));
    let out = polycorn(&["linkdb", "stats", "--db", &db]);
    let t = text(&out);
    assert!(t.contains("relay ") && t.contains("sim "), "{t}");
    let out = polycorn(&[
        "linkdb",
        "validate",
        "--db",
        &db,
        "--source",
        "sim",
        "--train-source",
        "relay",
        "--models",
        "paper",
    ]);
    assert!(out.status.success(), "{}", err(&out));
    let t = text(&out);
    assert!(
        t.contains(", source relay, route hsr/route2: 3 trips in 3 rides")
            && t.contains("; tested on sqlite:")
            && t.contains("3 rides in both, each left out of the training while it is tested")
            && t.contains("route hsr/route2: 3 trips in 3 rides"),
        "{t}"
    );
    // `linkdb <cmd> --db … <args>` fails, saying `want`.
    let refused = |cmd: &str, args: Vec<&str>, want: &str| {
        let mut a = vec!["linkdb", cmd, "--db", &db];
        a.extend(args);
        let out = polycorn(&a);
        assert!(
            !out.status.success() && err(&out).contains(want),
            "{want}: {}",
            err(&out)
        );
    };
    for (args, want) in [
        (
            vec![
                "--ride-log",
                "x.csv",
                "--track-origin",
                "1,2",
                "--track-heading",
                "0",
            ],
            "--ride-log needs --route",
        ),
        (
            vec![
                "--ride-log",
                "x.csv",
                "--route",
                "r",
                "--track-heading",
                "0",
            ],
            "--track-origin",
        ),
        (vec!["--route", "r"], "go with --ride-log"),
        (vec!["--past-days"], "go with --ride-log"),
        (
            vec!["--ucc5g", "x", "--as-seen-by-relay"],
            "--as-seen-by-relay applies to",
        ),
    ] {
        refused("import", args, want);
    }
    for (args, want) in [
        (
            vec!["--train-source", "modem"],
            "source `modem` is not one of",
        ),
        (
            vec!["--train-source", "relay", "--risk-thresholds", "0.1"],
            "do not go together",
        ),
        (
            vec!["--train-route", "nowhere"],
            "route hsr/route2: training set sqlite:",
        ),
        (
            vec!["--train-route", "nowhere"],
            "the training set is empty",
        ),
        (
            vec!["--train-db", "/nonexistent/l.sqlite"],
            "--train-db /nonexistent/l.sqlite: no such database file",
        ),
    ] {
        refused("validate", args, want);
    }
    // A nightly import of a live record directory leaves today's logs for later.
    let logs = dir.join("record").join("train-1");
    std::fs::create_dir_all(&logs).unwrap();
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let today = polycorn_net::context::record_day(secs * 1000);
    let mut log = String::from("t_ms,lat,lon,speed_mps,heading_deg,cell_A,rsrp_dbm_A\n");
    for k in 0..5 {
        log += &format!(
            "{},{:.7},116.0,80.0,0.0,{},-90.0\n",
            k * 1000,
            39.0 + 0.0007 * k as f64,
            1 + k / 3
        );
    }
    for day in ["20200101", today.as_str()] {
        std::fs::write(logs.join(format!("context-{day}T060000Z.csv")), &log).unwrap();
    }
    let record = dir.join("record");
    let out = polycorn(&[
        "linkdb",
        "import",
        "--db",
        &db,
        "--ride-log",
        record.to_str().unwrap(),
        "--route",
        "north",
        "--track-origin",
        "39.0,116.0",
        "--track-heading",
        "0",
        "--direction",
        "up",
        "--past-days",
    ]);
    assert!(out.status.success(), "{}", err(&out));
    let t = text(&out);
    assert!(
        t.contains("1 trips (1 new") && t.contains("1 files left for later"),
        "{t}"
    );

    // What a proxy recorded, learnt from its own configuration (the nightly unit's command).
    let tls = dir.join("tls");
    let out = polycorn(&["tls", "generate", tls.to_str().unwrap()]);
    assert!(out.status.success(), "{}", err(&out));
    let learnt = dir.join("learnt.sqlite");
    let proxy_rec = dir.join("proxy-record");
    let mut config = ProxyConfig::new(TlsFiles::new(
        "tls/ca.pem",
        "tls/proxy.pem",
        "tls/proxy.key",
    ));
    config.context.record = Some("proxy-record".into());
    config.linkdb.db = Some(format!("sqlite:{}", learnt.display()));
    config.linkdb.route = Some("north".into());
    config.linkdb.carriers = vec!["A".into()];
    config.linkdb.track_origin = Some([39.0, 116.0]);
    config.linkdb.track_heading_deg = 0.0;
    let proxy_toml = dir.join("proxy.toml");
    // `config` changed by `edit`, as the proxy's file.
    let write = |edit: &dyn Fn(&mut ProxyConfig)| {
        let mut c = config.clone();
        edit(&mut c);
        std::fs::write(&proxy_toml, c.to_toml()).unwrap();
    };
    write(&|_| {});
    let learn = || {
        polycorn(&[
            "linkdb",
            "import",
            "--proxy-config",
            proxy_toml.to_str().unwrap(),
            "--past-days",
            "--direction",
            "up",
        ])
    };
    // Before the proxy has recorded anything.
    let out = learn();
    assert!(out.status.success(), "{}", err(&out));
    assert!(
        text(&out).contains("nothing recorded yet"),
        "{}",
        text(&out)
    );
    std::fs::create_dir_all(proxy_rec.join("train-1")).unwrap();
    for day in ["20200101", today.as_str()] {
        std::fs::write(
            proxy_rec
                .join("train-1")
                .join(format!("context-{day}T060000Z.csv")),
            &log,
        )
        .unwrap();
    }
    let out = learn();
    assert!(out.status.success(), "{}", err(&out));
    let t = text(&out);
    assert!(
        t.contains(&format!("sqlite:{}", learnt.display()))
            && t.contains("1 trips (1 new")
            && t.contains("1 files left for later"),
        "{t}"
    );
    // The next night: the past day's log is not read again; a new one is.
    let t = text(&learn());
    assert!(
        t.contains("0 trips (0 new, 0 already stored)")
            && t.contains("1 files imported before, not read again"),
        "{t}"
    );
    std::fs::write(
        proxy_rec
            .join("train-1")
            .join("context-20200102T060000Z.csv"),
        &log,
    )
    .unwrap();
    let t = text(&learn());
    assert!(
        t.contains("1 trips (1 new, 0 already stored)")
            && t.contains("1 files imported before, not read again"),
        "{t}"
    );
    // With `[linkdb] keep_days`, the night also deletes the rides of days long past; the
    // ride of yesterday stays.
    let yesterday = polycorn_net::context::record_day(secs * 1000 - 86_400_000);
    std::fs::write(
        proxy_rec
            .join("train-1")
            .join(format!("context-{yesterday}T060000Z.csv")),
        &log,
    )
    .unwrap();
    write(&|c| c.linkdb.keep_days = Some(30));
    let t = text(&learn());
    assert!(
        t.contains("1 trips (1 new, 0 already stored)")
            && t.contains("pruned: deleted 2 rides that began before")
            && t.contains("kept 1 newer and 0 of no known start"),
        "{t}"
    );
    let learnt_db = format!("sqlite:{}", learnt.display());
    let t = text(&polycorn(&["linkdb", "stats", "--db", &learnt_db]));
    let y = format!(
        "{}-{}-{}",
        &yesterday[..4],
        &yesterday[4..6],
        &yesterday[6..]
    );
    assert!(
        t.contains("relay   north")
            && t.contains(&format!(
                "rides began from {y} 06:00:00Z to {y} 06:00:00Z (0 of no known start)"
            )),
        "{t}"
    );
    // The proxy's history moved into another database (a fleet's PostgreSQL in production):
    // the rides with when they began, and the logs already read, so the next night reads none
    // again.
    let moved = dir.join("moved.sqlite");
    let moved_db = format!("sqlite:{}", moved.display());
    let copy = || {
        polycorn(&[
            "linkdb",
            "import",
            "--db",
            &moved_db,
            "--from-db",
            &learnt_db,
        ])
    };
    let out = copy();
    assert!(out.status.success(), "{}", err(&out));
    let t = text(&out);
    assert!(
        t.contains(&format!(
            "from {learnt_db}: 1 trips (1 new, 0 already stored)"
        )) && t.contains("3 context logs marked read"),
        "{t}"
    );
    assert!(text(&copy()).contains("1 trips (0 new, 1 already stored)"));
    let t = text(&polycorn(&["linkdb", "stats", "--db", &moved_db]));
    assert!(
        t.contains(&format!("rides began from {y} 06:00:00Z to {y} 06:00:00Z")),
        "{t}"
    );
    write(&|c| {
        c.linkdb.db = Some(format!("sqlite:{}", moved.display()));
        c.linkdb.keep_days = Some(30);
    });
    let t = text(&learn());
    assert!(
        t.contains("0 trips (0 new, 0 already stored)")
            && t.contains("3 files imported before, not read again"),
        "{t}"
    );
    refused("import", vec!["--from-route", "north"], "--from-db");
    refused(
        "import",
        vec!["--from-db", "mysql://x"],
        "open --from-db mysql://x",
    );
    // By hand: a dry run lists, then the rides go; the simulated ones stay.
    let prune = |extra: &[&str]| {
        let mut a = vec!["linkdb", "prune", "--db", &db, "--older-than-days", "30"];
        a.extend(extra);
        polycorn(&a)
    };
    let out = prune(&["--route", "north", "--dry-run"]);
    assert!(out.status.success(), "{}", err(&out));
    let t = text(&out);
    assert!(
        t.contains("would delete 1 rides")
            && t.contains("north train-1/context-20200101T060000Z-1 2020-01-01 06:00:00Z"),
        "{t}"
    );
    let t = text(&prune(&[]));
    assert!(
        t.contains("deleted 1 rides") && t.contains("kept 0 newer and 6 of no known start"),
        "{t}"
    );
    let t = text(&prune(&[]));
    assert!(t.contains("deleted 0 rides"), "{t}");
    for (args, want) in [
        (vec!["--older-than-days", "0"], "0 is not in 1..=36500"),
        (
            vec!["--older-than-days", "30", "--source", "x"],
            "source `x`",
        ),
        (vec![], "--older-than-days"),
    ] {
        refused("prune", args, want);
    }
    // Nothing to learn without [context] record; --proxy-config takes no --db or --ride-log.
    write(&|c| c.context.record = None);
    let out = learn();
    assert!(
        !out.status.success() && err(&out).contains("no [context] record"),
        "{}",
        err(&out)
    );
    for extra in [
        ["--db", "sqlite:x.sqlite"],
        ["--ride-log", "x"],
        ["--monitor-lag-ms", "500"],
    ] {
        let mut args = vec!["linkdb", "import", "--proxy-config", "p.toml"];
        args.extend(extra);
        let out = polycorn(&args);
        assert!(
            !out.status.success() && err(&out).contains("cannot be used with"),
            "{}",
            err(&out)
        );
    }
    // A monitor's lag is undone where there are cells to move: ride logs, or the relays' view
    // of simulated rides; a simulated lag only on the latter.
    for (args, want) in [
        (
            vec!["--simulate", "1", "--monitor-lag-ms", "500"],
            "--monitor-lag-ms applies with --ride-log or --as-seen-by-relay",
        ),
        (
            vec!["--simulate", "1", "--simulate-monitor-lag-s", "1"],
            "--simulate-monitor-lag-s applies with --as-seen-by-relay",
        ),
        (
            vec![
                "--simulate",
                "1",
                "--as-seen-by-relay",
                "--monitor-lag-ms",
                "60001",
            ],
            "60001",
        ),
    ] {
        let mut all = vec!["linkdb", "import", "--db", "sqlite:x.sqlite"];
        all.extend(args);
        let out = polycorn(&all);
        assert!(
            !out.status.success() && err(&out).contains(want),
            "{}",
            err(&out)
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}
