#!/usr/bin/env bash
# Run every check and test of the workspace. This is what CI runs (.ci/run).
source "$(dirname "$0")/lib.sh"

ensure_apt_packages
ensure_rust
ensure_prometheus_tools

say "format"
cargo fmt --all -- --check

say "clippy (warnings are errors)"
cargo clippy --locked --workspace --all-targets -- -D warnings

say "polycorn-sched stays pure: no async runtime, socket or clock crates in its dependency tree"
deps=$(cargo tree --locked -p polycorn-sched -e normal --prefix none | awk '{print $1}' | sort -u)
for banned in tokio mio async-std smol socket2 nix libc chrono rand getrandom; do
  if grep -qx "$banned" <<<"$deps"; then die "polycorn-sched depends on $banned"; fi
done
# The crate is #![no_std]: a clock read or socket call does not even compile. Guard the attribute.
grep -q '^#!\[no_std\]' crates/polycorn-sched/src/lib.rs || die "polycorn-sched lost #![no_std]"

say "tests (with a throwaway PostgreSQL for LinkDB's store)"
trap stop_test_postgres EXIT
start_test_postgres
cargo test --locked --workspace
stop_test_postgres

say "quick bench end to end (polycorn bench --quick: every stage of the pipeline, outputs checked)"
cargo build --release --locked -p polycorn
bench_out=$(mktemp -d /tmp/polycorn-bench-ci.XXXXXX)
as_root ./target/release/polycorn bench --quick --out "$bench_out" --name "bci$$"
for f in flows.csv im.csv results.json report.html; do
  [ -s "$bench_out/$f" ] || die "quick bench: $f missing or empty"
done
rm -rf "$bench_out"

say "benchmarks compile"
cargo bench --locked --workspace --no-run

# ---- fuzzing (scripts/fuzz.sh, docs/fuzzing.md) -------------------------------------------
# A short run of every fuzz target: its seed corpus, then 20,000 executions (at most 20 s)
# each, from a scratch corpus and with a fixed libFuzzer seed so the run is the same
# everywhere; a crash fails the checks. The toolchain cargo already uses, so CI downloads no
# nightly. Longer runs: scripts/fuzz.sh (docs/fuzzing.md).
say "fuzz targets, short run (scripts/fuzz.sh --execs 20000 --max-time 20 --seed 1)"
fuzz_work=$(mktemp -d /tmp/polycorn-fuzz-ci.XXXXXX)
scripts/fuzz.sh --toolchain current --execs 20000 --max-time 20 --seed 1 --work "$fuzz_work"
rm -rf "$fuzz_work"
# ---- end of fuzzing -------------------------------------------------------------------------

say "all checks passed"
