#!/usr/bin/env bash
# Run every check and test of the workspace, in tiers, and print how long each took. This is
# what CI runs (.ci/run). `scripts/test.sh --help` lists the tiers; docs/src/lab/testing.md describes
# them.
source "$(dirname "$0")/lib.sh"

usage() {
  cat <<'EOF'
Usage: scripts/test.sh [--tier TIER]... [--list]

Runs every check and test of the workspace, tier by tier, and prints a timing table at the
end. With --tier (repeatable), runs only the tiers named, in the order below.

Tiers:
  fast           fmt, clippy, purity checks, and every test that needs no root, namespace or
                 outside service: unit tests, doc tests, and every integration test target
                 the tiers below do not name (a new test target runs here by default); the
                 benchmarks run once each in test mode
  namespace      end-to-end tests in network namespaces (root): polycorn's relay_proxy and
                 cli, polycorn-emu's testbed, polycorn-net's connect, guard, intercept, sockopt
  integration    outside services: PostgreSQL (polycorn-linkdb's store), Prometheus's
                 promtool (polycorn's alerts), headless Chromium (the bench report's render
                 test)
  bench          polycorn bench --quick end to end (release build, root)
  fuzz           a short run of every fuzz target (scripts/fuzz.sh)
  bench-compile  the benchmarks build optimised (cargo bench --no-run); only when named:
                 the fast tier already builds and runs them unoptimised
  docs           the manual builds with mdBook (installs mdbook once into ~/.cargo/bin);
                 the fast tier's docs test checks its links, pages and wording

Options:
  --tier TIER    run TIER (repeatable; default: every tier but bench-compile)
  --list         print the cargo test commands of the test tiers and exit
  -h, --help     this help

Environment: CI=true makes a test that would skip (no root, no PostgreSQL, no promtool, no
chromium) fail instead.
EOF
}

ALL_TIERS=(fast namespace integration bench fuzz bench-compile docs)
# What runs when no tier is named. bench-compile is left out: it builds the workspace once more
# in the release profile with dev-dependencies, for what the fast tier's run of the benchmarks
# (test mode, the debug build it already has) and clippy's check of every target establish.
DEFAULT_TIERS=(fast namespace integration bench fuzz docs)

# ---- which test runs in which tier -----------------------------------------------------------
# Integration test targets (package:target) of the namespace and integration tiers. Every test
# target of the workspace not named here runs in the fast tier.
NAMESPACE_TARGETS=(
  polycorn:relay_proxy polycorn:cli
  polycorn-emu:testbed
  polycorn-net:connect polycorn-net:guard polycorn-net:intercept polycorn-net:sockopt
)
INTEGRATION_TARGETS=(polycorn-linkdb:store polycorn:alerts polycorn-net:modemmanager)
# Unit tests (package, target, full test name) of the integration tier: the fast tier skips
# exactly these.
CHROMIUM_TEST=(polycorn-lab lib bench::report::tests::report_renders_in_headless_chromium)

# Every target `cargo test` runs, one `package kind name` a line (kind: lib, bin, test, bench,
# example), from cargo's own metadata.
test_targets() {
  cargo metadata --locked --no-deps --format-version 1 | jq -r '
    .packages[] | .name as $p | .targets[] | select(.test)
    | (.kind[0] | if . == "lib" or . == "rlib" or . == "proc-macro" then "lib" else . end) as $k
    | "\($p) \($k) \(.name)"'
}

# The workspace's benchmark targets, one name a line.
bench_targets() {
  cargo metadata --locked --no-deps --format-version 1 | jq -r '
    .packages[] | .targets[] | select(.kind[0] == "bench") | .name'
}

in_list() { # in_list ITEM LIST...
  local x=$1; shift
  local y
  for y in "$@"; do [ "$x" = "$y" ] && return 0; done
  return 1
}

# Every command selects targets across the whole workspace (`--workspace`, targets by name), so
# that dependencies are built with the features `cargo test --workspace` gives them, once for
# all tiers. Target names must therefore be unique in the workspace.
check_target_names() { # check_target_names TARGETS
  local dup
  dup=$(awk '$2 != "lib" {print $2 " " $3}' <<<"$1" | sort | uniq -d)
  [ -z "$dup" ] || die "target names the tiers select by must be unique in the workspace: $dup"
  for t in "${NAMESPACE_TARGETS[@]}" "${INTEGRATION_TARGETS[@]}"; do
    grep -qx "${t%%:*} test ${t#*:}" <<<"$1" || die "tier lists $t, which is not a test target"
  done
}

# The cargo test commands of the fast tier, one a line: every library and binary, every test
# target the other tiers do not name (skipping exactly the unit tests of the integration tier),
# then the doc tests.
fast_test_commands() {
  local targets args="" kind name pkg
  targets=$(test_targets)
  check_target_names "$targets"
  while read -r pkg kind name; do
    case "$kind" in
      lib) [[ "$args" == *" --lib"* ]] || args+=" --lib" ;;
      test)
        in_list "$pkg:$name" "${NAMESPACE_TARGETS[@]}" "${INTEGRATION_TARGETS[@]}" && continue
        args+=" --test $name" ;;
      *) args+=" --$kind $name" ;;
    esac
  done <<<"$targets"
  echo "cargo test --locked --workspace$args -- --exact --skip ${CHROMIUM_TEST[2]}"
  echo "cargo test --locked --workspace --doc"
  # The benchmarks, once each in test mode (criterion runs every benchmark one iteration).
  args=""
  for name in $(bench_targets); do args+=" --bench $name"; done
  [ -z "$args" ] || echo "cargo test --locked --workspace$args"
}

# The cargo test commands of the namespace and integration tiers.
targets_command() { # targets_command PACKAGE:TARGET...
  local args="" t
  for t in "$@"; do args+=" --test ${t#*:}"; done
  # Every target runs even after one fails, so that a run names all its failures.
  echo "cargo test --locked --workspace --no-fail-fast$args"
}
namespace_test_commands() { targets_command "${NAMESPACE_TARGETS[@]}"; }
integration_test_commands() {
  targets_command "${INTEGRATION_TARGETS[@]}"
  echo "cargo test --locked --workspace --lib -- --exact ${CHROMIUM_TEST[2]}"
}

run_commands() { # run each line of stdin as a command
  local cmd
  while read -r cmd; do
    say "$cmd"
    $cmd </dev/null
  done
}

# ---- the tiers --------------------------------------------------------------------------------
tier_fast() {
  say "format"
  cargo fmt --all -- --check

  say "clippy (warnings are errors)"
  cargo clippy --locked --workspace --all-targets -- -D warnings

  say "polycorn-sched stays pure: no async runtime, socket or clock crates in its dependency tree"
  local deps banned
  deps=$(cargo tree --locked -p polycorn-sched -e normal --prefix none | awk '{print $1}' | sort -u)
  for banned in tokio mio async-std smol socket2 nix libc chrono rand getrandom; do
    if grep -qx "$banned" <<<"$deps"; then die "polycorn-sched depends on $banned"; fi
  done
  # The crate is #![no_std]: a clock read or socket call does not even compile. Guard the attribute.
  grep -q '^#!\[no_std\]' crates/polycorn-sched/src/lib.rs || die "polycorn-sched lost #![no_std]"

  say "polycorn-sim stays deterministic: no async runtime, socket or clock crates in its dependency tree"
  deps=$(cargo tree --locked -p polycorn-sim -e normal --prefix none | awk '{print $1}' | sort -u)
  for banned in tokio mio async-std smol socket2 nix chrono getrandom; do
    if grep -qx "$banned" <<<"$deps"; then die "polycorn-sim depends on $banned"; fi
  done

  say "tests that need no root, namespace or outside service"
  fast_test_commands | run_commands
}

tier_namespace() {
  # The relay_proxy tests run a Prometheus server against the daemons.
  ensure_prometheus_tools
  say "end-to-end tests in network namespaces"
  namespace_test_commands | run_commands
}

tier_integration() {
  ensure_prometheus_tools
  say "tests against outside services (a throwaway PostgreSQL for LinkDB's store, promtool, chromium)"
  # The Chromium test is named by its path: stop if it moved (the fast tier would then run it).
  # (The list is read whole before it is searched: a grep that stops at the first match would
  # cut the pipe while cargo still writes the next test binary's list.)
  local listed
  listed=$(cargo test --locked --workspace --lib -- --list --exact "${CHROMIUM_TEST[2]}" 2>/dev/null)
  grep -qx "${CHROMIUM_TEST[2]}: test" <<<"$listed" \
    || die "no unit test ${CHROMIUM_TEST[2]} in ${CHROMIUM_TEST[0]}: update CHROMIUM_TEST in scripts/test.sh"
  start_test_postgres
  integration_test_commands | run_commands
  stop_test_postgres
}

tier_bench() {
  say "quick bench end to end (polycorn bench --quick: every stage of the pipeline, outputs checked)"
  cargo build --release --locked -p polycorn
  local bench_out f
  bench_out=$(mktemp -d /tmp/polycorn-bench-ci.XXXXXX)
  as_root ./target/release/polycorn bench --quick --out "$bench_out" --name "bci$$"
  for f in flows.csv im.csv results.json report.html; do
    [ -s "$bench_out/$f" ] || die "quick bench: $f missing or empty"
  done
  rm -rf "$bench_out"
}

# A short run of every fuzz target: its seed corpus, then 20,000 executions (at most 20 s)
# each, from a scratch corpus and with a fixed libFuzzer seed so the run is the same
# everywhere; a crash fails the checks. The toolchain cargo already uses, so CI downloads no
# nightly. Longer runs: scripts/fuzz.sh (docs/src/lab/fuzzing.md).
tier_fuzz() {
  say "fuzz targets, short run (scripts/fuzz.sh --execs 20000 --max-time 20 --seed 1)"
  local fuzz_work
  fuzz_work=$(mktemp -d /tmp/polycorn-fuzz-ci.XXXXXX)
  scripts/fuzz.sh --toolchain current --execs 20000 --max-time 20 --seed 1 --work "$fuzz_work"
  rm -rf "$fuzz_work"
}

tier_bench-compile() {
  say "benchmarks compile"
  cargo bench --locked --workspace --no-run
}

tier_docs() {
  ensure_mdbook
  say "the manual builds (mdbook build docs)"
  local book_out
  book_out=$(mktemp -d /tmp/polycorn-book.XXXXXX)
  mdbook build docs --dest-dir "$book_out"
  [ -s "$book_out/index.html" ] || die "mdbook build docs wrote no index.html"
  rm -rf "$book_out"
}

# ---- command line -------------------------------------------------------------------------------
tiers=()
list=false
while [ $# -gt 0 ]; do
  case "$1" in
    --tier)
      [ $# -ge 2 ] || die "--tier needs a tier name (${ALL_TIERS[*]})"
      in_list "$2" "${ALL_TIERS[@]}" || die "unknown tier '$2' (tiers: ${ALL_TIERS[*]})"
      tiers+=("$2"); shift 2 ;;
    --tier=*)
      in_list "${1#--tier=}" "${ALL_TIERS[@]}" || die "unknown tier '${1#--tier=}' (tiers: ${ALL_TIERS[*]})"
      tiers+=("${1#--tier=}"); shift ;;
    --list) list=true; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done
# The tiers named, in the order of ALL_TIERS; DEFAULT_TIERS when none is named.
selected=()
for t in "${ALL_TIERS[@]}"; do
  if { [ ${#tiers[@]} -eq 0 ] && in_list "$t" "${DEFAULT_TIERS[@]}"; } ||
    { [ ${#tiers[@]} -gt 0 ] && in_list "$t" "${tiers[@]}"; }; then
    selected+=("$t")
  fi
done

ensure_apt_packages
ensure_rust

if $list; then
  echo "# fast";        fast_test_commands
  echo "# namespace";   namespace_test_commands
  echo "# integration"; integration_test_commands
  exit 0
fi

# ---- timing table ------------------------------------------------------------------------------
timings=()      # "tier seconds status"
current=""
current_start=0
total_start=$SECONDS
print_timings() {
  local status=$? row
  stop_test_postgres
  if [ -n "$current" ]; then timings+=("$current $((SECONDS - current_start)) FAILED"); fi
  {
    printf '\n%-15s %8s  %s\n' tier seconds status
    for row in "${timings[@]}"; do
      # shellcheck disable=SC2086
      printf '%-15s %8s  %s\n' $row
    done
    printf '%-15s %8s\n' total $((SECONDS - total_start))
  } >&2
  return $status
}
trap print_timings EXIT

for t in "${selected[@]}"; do
  current=$t
  current_start=$SECONDS
  "tier_$t"
  timings+=("$t $((SECONDS - current_start)) ok")
  current=""
done

say "all checks passed (tiers: ${selected[*]})"
