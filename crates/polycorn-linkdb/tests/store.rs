//! The store against SQLite and against a real PostgreSQL server.
//!
//! PostgreSQL: `scripts/test.sh` starts a throwaway cluster and exports `POLYCORN_TEST_PG_URL`.
//! Without it the PostgreSQL tests print a skip message — except under `CI=true`, where a
//! missing server fails them.

use polycorn_linkdb::import::sim;
use polycorn_linkdb::record::Source;
use polycorn_linkdb::store::{latest_version, Imported, Store, StoreError, TripFilter};
use polycorn_linkdb::TripData;

fn pg_url() -> Option<String> {
    match std::env::var("POLYCORN_TEST_PG_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("CI=true but POLYCORN_TEST_PG_URL is not set: scripts/test.sh must start PostgreSQL");
            }
            eprintln!("skipping PostgreSQL store test: POLYCORN_TEST_PG_URL is not set (scripts/test.sh sets it)");
            None
        }
    }
}

fn trips() -> Vec<TripData> {
    // KTX trips are 70 s long: quick to generate, still with handovers on both carriers.
    sim::simulate("ktx", 3, 1..4).unwrap()
}

fn roundtrip(url: &str) {
    let mut s = Store::open(url).unwrap();
    s.wipe().unwrap();
    assert_eq!(s.schema_version().unwrap(), latest_version());
    let trips = trips();
    // Failures carry where the source was lost, which must read back too.
    assert!(
        trips
            .iter()
            .flat_map(|t| &t.handovers)
            .any(|h| h.lost.is_some_and(|l| l.t_ms > h.start_ms)),
        "no failure lost after its start in the test trips"
    );
    for t in &trips {
        assert_eq!(s.import(t).unwrap(), Imported::Inserted, "{}", t.meta.key);
    }
    // The same trips again: nothing new.
    for t in &trips {
        assert_eq!(s.import(t).unwrap(), Imported::AlreadyPresent);
    }
    let [n_trips, n_hos, n_fail, n_samples, n_radio] = s.counts().unwrap();
    assert_eq!(n_trips, 3);
    assert_eq!(
        n_hos as usize,
        trips.iter().map(|t| t.handovers.len()).sum::<usize>()
    );
    assert_eq!(
        n_fail as usize,
        trips
            .iter()
            .flat_map(|t| &t.handovers)
            .filter(|h| h.outcome.failed())
            .count()
    );
    assert_eq!(
        n_samples as usize,
        trips.iter().map(|t| t.samples.len()).sum::<usize>()
    );
    assert_eq!(
        n_radio as usize,
        trips.iter().map(|t| t.radio.len()).sum::<usize>()
    );
    // Everything reads back exactly (floats included), in key order.
    let mut want = trips.clone();
    want.sort_by(|a, b| a.meta.key.cmp(&b.meta.key));
    let got = s.load(&TripFilter::default()).unwrap();
    assert_eq!(got, want);
    let filtered = s
        .load(&TripFilter {
            source: Some(Source::Wmnlab),
            route: None,
        })
        .unwrap();
    assert!(filtered.is_empty());
    let by_route = s
        .trips(&TripFilter {
            source: Some(Source::Sim),
            route: Some("ktx/route3".into()),
        })
        .unwrap();
    assert_eq!(by_route.len(), 3);
    assert_eq!(s.delete_source(Source::Sim).unwrap(), 3);
    assert_eq!(s.counts().unwrap(), [0; 5]);
    // Context logs marked imported read back; marking one again records its new size.
    use std::path::PathBuf;
    assert!(s.imported_logs().unwrap().is_empty());
    let a = PathBuf::from("/var/lib/polycorn/context/train-1/context-20261129T060000Z.csv");
    let b = PathBuf::from("/var/lib/polycorn/context/train-2/context-20261129T060000Z.csv");
    s.mark_logs_imported(&[(a.clone(), 10), (b.clone(), 20)])
        .unwrap();
    s.mark_logs_imported(&[(a.clone(), 11)]).unwrap();
    let logs = s.imported_logs().unwrap();
    assert_eq!(logs.into_iter().collect::<Vec<_>>(), [(a, 11), (b, 20)]);
}

/// Two writers import the same trip at once: exactly one stores it.
fn race(url: &str) {
    let mut s = Store::open(url).unwrap();
    s.wipe().unwrap();
    drop(s);
    let trip = trips().remove(0);
    let results: Vec<Imported> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let t = &trip;
                sc.spawn(move || Store::open(url).unwrap().import(t).unwrap())
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        results.iter().filter(|r| **r == Imported::Inserted).count(),
        1,
        "{results:?}"
    );
    let mut s = Store::open(url).unwrap();
    assert_eq!(s.counts().unwrap()[0], 1);
}

/// Importers on several machines open a database without `imported_logs` at the same moment:
/// each makes it (or finds it made) and marks its logs; none fails.
fn imported_logs_race(url: &str) {
    let mut s = Store::open(url).unwrap();
    s.wipe().unwrap();
    drop(s);
    at_once(
        8,
        |_| Store::open(url).unwrap(),
        |k, mut s| {
            s.imported_logs()
                .unwrap_or_else(|e| panic!("importer {k}: {e}"));
            let log = std::path::PathBuf::from(format!("/srv/train-{k}/context-x.csv"));
            s.mark_logs_imported(&[(log, k as u64)])
                .unwrap_or_else(|e| panic!("importer {k}: {e}"));
        },
    );
    let mut s = Store::open(url).unwrap();
    assert_eq!(s.imported_logs().unwrap().len(), 8);
}

/// Runs `go` on `n` threads at the same moment, each with what its `prepare` made first.
fn at_once<T: Send>(n: usize, prepare: impl Fn(usize) -> T + Sync, go: impl Fn(usize, T) + Sync) {
    let barrier = std::sync::Barrier::new(n);
    std::thread::scope(|sc| {
        for k in 0..n {
            let (barrier, prepare, go) = (&barrier, &prepare, &go);
            sc.spawn(move || {
                let t = prepare(k);
                barrier.wait();
                go(k, t);
            });
        }
    });
}

/// Relays and importers sharing a new, empty database start at the same moment: each migrates
/// it (or finds it migrated); none fails.
fn fresh_database_race(url: &str) {
    const DROP: &str = "DROP TABLE IF EXISTS radio_samples; DROP TABLE IF EXISTS samples;
        DROP TABLE IF EXISTS handovers; DROP TABLE IF EXISTS trips;
        DROP TABLE IF EXISTS imported_logs; DROP TABLE IF EXISTS schema_version";
    match url.strip_prefix("sqlite:") {
        Some(path) => rusqlite::Connection::open(path)
            .unwrap()
            .execute_batch(DROP)
            .unwrap(),
        None => postgres::Client::connect(url, postgres::NoTls)
            .unwrap()
            .batch_execute(DROP)
            .unwrap(),
    }
    at_once(
        8,
        |_| (),
        |k, ()| {
            let mut s = Store::open(url).unwrap_or_else(|e| panic!("opener {k}: {e}"));
            assert_eq!(s.schema_version().unwrap(), latest_version());
        },
    );
}

/// The predictors a proxy or relay builds from the store, one trip at a time, are the ones built
/// from every trip loaded whole; the part of a trip kept for prediction is a small one.
fn predictors_read_trip_by_trip(url: &str) {
    use polycorn_linkdb::ModelKind;
    let mut s = Store::open(url).unwrap();
    s.wipe().unwrap();
    // Two routes, so the filter matters; the relays' view has gaps and failures on both
    // carriers (the risk model fits a carrier only with a failure).
    let mut trips = sim::simulate("hsr", 1, 1..4).unwrap();
    trips.extend(sim::simulate("hsr", 2, 1..2).unwrap());
    for t in &trips {
        let (seen, _) = polycorn_linkdb::import::relay::as_seen_by_relay(t);
        s.import(&seen).unwrap();
    }
    let filter = TripFilter {
        source: None,
        route: Some("hsr/route1".into()),
    };
    let whole = s.load(&filter).unwrap();
    assert_eq!(whole.len(), 3);
    let refs: Vec<&TripData> = whole.iter().collect();
    for kind in ModelKind::ALL {
        let full = kind.build(&refs);
        let (lean, h) = s.predictor(&filter, kind).unwrap();
        assert_eq!(h.rides, 3, "{}", kind.name());
        assert_eq!(h.newest_start_ms, None, "simulated rides have no start");
        assert!(!full.index().cells().is_empty());
        assert!(
            lean.index() == full.index(),
            "{}: index differs",
            kind.name()
        );
        assert!(
            lean.model() == full.model(),
            "{}: model differs",
            kind.name()
        );
        // What a predictor keeps of each trip: every handover, a few of the fixes and radio
        // samples.
        let kept = s.load_for_prediction(&filter, kind).unwrap();
        for (k, w) in kept.iter().zip(&whole) {
            assert_eq!(k.handovers, w.handovers);
            assert!(k.samples.len() <= 2 * w.handovers.len());
            assert!(
                k.samples.len() * 3 < w.samples.len(),
                "{} of {}",
                k.samples.len(),
                w.samples.len()
            );
            match kind.radio_before_ms() {
                None => assert!(k.radio.is_empty()),
                Some(_) => assert!(!k.radio.is_empty() && k.radio.len() < w.radio.len()),
            }
        }
    }
    let (p, _) = s.predictor(&filter, ModelKind::Risk).unwrap();
    let polycorn_linkdb::predict::Model::Risk(m) = p.model() else {
        panic!("not a risk model")
    };
    assert!(
        m.weights(0).is_some() || m.weights(1).is_some(),
        "no carrier fitted"
    );
}

/// Pruning deletes the rides that began before the cut, with every record of theirs, and
/// nothing else: not the newer ones, not those of no known start, not another route's.
fn prune_by_start(url: &str) {
    const DAY: u64 = 86_400_000;
    let now = 1_796_040_000_000; // 2026-11-30 12:00Z
    let mut s = Store::open(url).unwrap();
    s.wipe().unwrap();
    let relay_ride = |t: &TripData, name: &str, started: Option<u64>| {
        let (mut seen, _) = polycorn_linkdb::import::relay::as_seen_by_relay(t);
        seen.meta.name = name.into();
        seen.meta.started_ms = started;
        seen.seal();
        seen
    };
    let sim = sim::simulate("ktx", 3, 1..6).unwrap();
    let mut other = sim::simulate("ktx", 4, 1..2).unwrap();
    let old = relay_ride(
        &sim[0],
        "t1/context-20261001T080000Z-1",
        Some(now - 60 * DAY),
    );
    let new = relay_ride(&sim[1], "t1/context-20261129T080000Z-1", Some(now - DAY));
    // Stored by a release before the start was kept: the log's name says when.
    let old_unkept = relay_ride(&sim[2], "t2/context-20261002T080000Z-1", None);
    // A relay's log of its own name, and a simulated trip: no known start.
    let unnamed = relay_ride(&sim[3], "my-ride-1", None);
    let simulated = sim[4].clone();
    let other_route = relay_ride(
        &other.remove(0),
        "t3/context-20261001T080000Z-1",
        Some(now - 60 * DAY),
    );
    let all = [&old, &new, &old_unkept, &unnamed, &simulated, &other_route];
    for t in all {
        assert_eq!(s.import(t).unwrap(), Imported::Inserted, "{}", t.meta.name);
    }
    let stored = s.trips(&TripFilter::default()).unwrap();
    for t in all {
        let m = stored.iter().find(|m| m.key == t.meta.key).unwrap();
        assert_eq!(m.started_ms, t.meta.started_ms, "{}", t.meta.name);
    }
    assert_eq!(
        stored
            .iter()
            .find(|m| m.key == old_unkept.meta.key)
            .unwrap()
            .start_ms(),
        Some(1_790_928_000_000)
    );
    let route = TripFilter {
        source: None,
        route: Some(old.meta.route.clone()),
    };
    let before = s.counts().unwrap();
    let dry = s.prune(&route, now - 30 * DAY, true).unwrap();
    let mut names: Vec<&str> = dry.deleted.iter().map(|m| m.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "t1/context-20261001T080000Z-1",
            "t2/context-20261002T080000Z-1"
        ]
    );
    assert_eq!((dry.kept, dry.undated), (1, 2));
    assert_eq!(s.counts().unwrap(), before, "a dry run deleted");

    let done = s.prune(&route, now - 30 * DAY, false).unwrap();
    assert_eq!(done, dry);
    let mut left: Vec<String> = s
        .trips(&TripFilter::default())
        .unwrap()
        .into_iter()
        .map(|m| m.key)
        .collect();
    left.sort_unstable();
    let mut want: Vec<String> = [&new, &unnamed, &simulated, &other_route]
        .iter()
        .map(|t| t.meta.key.clone())
        .collect();
    want.sort_unstable();
    assert_eq!(left, want);
    // Every record of the deleted rides went with them.
    let kept = [&new, &unnamed, &simulated, &other_route];
    let [trips, hos, fails, samples, radio] = s.counts().unwrap();
    assert_eq!(trips, 4);
    assert_eq!(
        hos as usize,
        kept.iter().map(|t| t.handovers.len()).sum::<usize>()
    );
    assert_eq!(
        fails as usize,
        kept.iter()
            .flat_map(|t| &t.handovers)
            .filter(|h| h.outcome.failed())
            .count()
    );
    assert_eq!(
        samples as usize,
        kept.iter().map(|t| t.samples.len()).sum::<usize>()
    );
    assert_eq!(
        radio as usize,
        kept.iter().map(|t| t.radio.len()).sum::<usize>()
    );
    // What a predictor is then built from: the route's rides left, the newest dated one.
    let (_, h) = s
        .predictor(&route, polycorn_linkdb::ModelKind::Paper)
        .unwrap();
    assert_eq!((h.rides, h.newest_start_ms), (3, Some(now - DAY)));
    // Nothing more to prune; a deleted ride imported again is whole again, start and all.
    let again = s.prune(&route, now - 30 * DAY, false).unwrap();
    assert!(again.deleted.is_empty());
    assert_eq!(s.import(&old).unwrap(), Imported::Inserted);
    let back = s.load(&route).unwrap();
    let back = back.iter().find(|t| t.meta.key == old.meta.key).unwrap();
    assert_eq!(back.meta.started_ms, old.meta.started_ms);
    assert_eq!(back.handovers, old.handovers);
}

/// A history moved from one database to another (`linkdb import --from-db`) ride by ride reads
/// back the same, started times included, whatever the engines.
fn copy_between(from: &str, to: &str) {
    let mut a = Store::open(from).unwrap();
    a.wipe().unwrap();
    let mut trips = Vec::new();
    for (k, t) in sim::simulate("ktx", 5, 1..4).unwrap().iter().enumerate() {
        let (mut seen, _) = polycorn_linkdb::import::relay::as_seen_by_relay(t);
        seen.meta.started_ms = (k != 1).then_some(1_796_040_000_000 + k as u64 * 3_600_000);
        seen.seal();
        trips.push(seen);
    }
    trips.push(sim::simulate("ktx", 6, 1..2).unwrap().remove(0));
    for t in &trips {
        a.import(t).unwrap();
    }
    let mut b = Store::open(to).unwrap();
    b.wipe().unwrap();
    for meta in a.trips(&TripFilter::default()).unwrap() {
        let t = a.load_one(meta).unwrap();
        assert_eq!(b.import(&t).unwrap(), Imported::Inserted);
    }
    assert_eq!(
        a.load(&TripFilter::default()).unwrap(),
        b.load(&TripFilter::default()).unwrap()
    );
    assert_eq!(a.counts().unwrap(), b.counts().unwrap());
    let starts: Vec<Option<u64>> = b
        .trips(&TripFilter::default())
        .unwrap()
        .iter()
        .map(|m| m.started_ms)
        .collect();
    assert_eq!(
        starts.iter().filter(|s| s.is_some()).count(),
        2,
        "{starts:?}"
    );
}

fn tmp_sqlite(name: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("polycorn-linkdb-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite:{}", dir.join("db.sqlite").display());
    (dir, url)
}

#[test]
fn sqlite_roundtrip_idempotent_import_and_race() {
    let (dir, url) = tmp_sqlite("rt");
    roundtrip(&url);
    race(&url);
    imported_logs_race(&url);
    fresh_database_race(&url);
    predictors_read_trip_by_trip(&url);
    prune_by_start(&url);
    let (other, other_url) = tmp_sqlite("copy");
    copy_between(&url, &other_url);
    std::fs::remove_dir_all(other).unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn postgres_roundtrip_idempotent_import_and_race() {
    let Some(url) = pg_url() else { return };
    roundtrip(&url);
    race(&url);
    for _ in 0..5 {
        imported_logs_race(&url);
        fresh_database_race(&url);
    }
    predictors_read_trip_by_trip(&url);
    prune_by_start(&url);
    // A train's SQLite history into the fleet's PostgreSQL, and back.
    let (dir, sqlite) = tmp_sqlite("pgcopy");
    copy_between(&sqlite, &url);
    copy_between(&url, &sqlite);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn migrations_are_versioned_and_a_newer_database_is_refused() {
    let (dir, url) = tmp_sqlite("mig");
    let path = url.strip_prefix("sqlite:").unwrap().to_string();
    {
        // A database at version 1 (as an older polycorn left it) is migrated forward.
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("CREATE TABLE schema_version (version BIGINT PRIMARY KEY);")
            .unwrap();
        c.execute_batch(polycorn_linkdb::store::MIGRATIONS[0].1)
            .unwrap();
        c.execute_batch("INSERT INTO schema_version VALUES (1)")
            .unwrap();
        // A failure recorded before the loss of the source had columns of its own.
        c.execute_batch(
            "INSERT INTO trips VALUES ('sim:old:1', 'sim', 'old', 'r', 'up', 'A', 1000);
             INSERT INTO handovers VALUES ('sim:old:1', 0, 'A', '7', NULL, 'up', 500, 10.0,
                 NULL, NULL, -101.0, 'failure', 2000)",
        )
        .unwrap();
    }
    let mut s = Store::open(&url).unwrap();
    assert_eq!(s.schema_version().unwrap(), latest_version());
    // Its rows survive the migrations: lost at the start, as it was recorded.
    let old = s.load(&TripFilter::default()).unwrap();
    assert_eq!(old.len(), 1);
    let h = &old[0].handovers[0];
    assert_eq!((h.start_ms, h.rsrp_dbm, h.lost), (500, Some(-101.0), None));
    assert_eq!(h.disruption_ms(), 500);
    drop(s);
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("INSERT INTO schema_version VALUES (99)")
            .unwrap();
    }
    match Store::open(&url) {
        Err(StoreError::TooNew { found: 99, .. }) => {}
        other => panic!("expected TooNew, got {other:?}"),
    }
    assert!(matches!(
        Store::open("mysql://x"),
        Err(StoreError::BadUrl(_))
    ));
    std::fs::remove_dir_all(dir).unwrap();
}
