#!/usr/bin/env bash
# Fuzz polycorn's wire-frame decoder, sans-IO session, SOCKS5 handshake, config and CSV/trace
# parsers with libFuzzer (cargo-fuzz). Targets, inputs and findings: docs/src/lab/fuzzing.md.
#
#   scripts/fuzz.sh [--execs N] [--max-time S] [--keep-going] [--seed N] [--toolchain TC]
#                   [--asan] [--work DIR] [TARGET...]
#
#   --execs N       executions per target (default 10,000,000; the seed corpus counts)
#   --max-time S    stop each target after S seconds even if N executions are not reached
#   --keep-going    do not stop a target at its first crash (libFuzzer -fork=1
#                   -ignore_crashes=1): fuzz on past a known bug and collect every crash
#   --seed N        libFuzzer's random seed (default: a new one each run); a fixed seed
#                   makes a run repeat the same inputs on the same build and corpus
#   --toolchain TC  rustup toolchain to build with (default: nightly if installed or
#                   installable, else stable; "current": plain `cargo`, no rustup)
#   --asan          build with AddressSanitizer (needs nightly; default: no sanitizer)
#   --work DIR      growing corpus, one directory per target (default fuzz/work); new inputs
#                   go there, the committed seeds in fuzz/corpus/ are only read
#   TARGET...       any of: frame_decode session socks5 config trace linkdb_import
#                   (default: all)
#
# Crashes, panics, timeouts and out-of-memory inputs are saved under fuzz/artifacts/<target>/;
# the script then carries on with the other targets and exits non-zero at the end.
source "$(dirname "$0")/lib.sh"

ALL_TARGETS=(frame_decode session socks5 config trace linkdb_import)
execs=10000000
max_time=0
toolchain=auto
sanitizer=none
work=fuzz/work
keep_going=0
seed=""
targets=()

while [ $# -gt 0 ]; do
  case "$1" in
    --execs) execs=${2:?--execs needs a number}; shift 2 ;;
    --max-time) max_time=${2:?--max-time needs seconds}; shift 2 ;;
    --toolchain) toolchain=${2:?--toolchain needs a name}; shift 2 ;;
    --asan) sanitizer=address; shift ;;
    --keep-going) keep_going=1; shift ;;
    --seed) seed=${2:?--seed needs a number}; shift 2 ;;
    --work) work=${2:?--work needs a directory}; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${ALL_TARGETS[@]}")
for t in "${targets[@]}"; do
  [[ " ${ALL_TARGETS[*]} " == *" $t "* ]] || die "unknown target $t (targets: ${ALL_TARGETS[*]})"
done
[[ "$execs" =~ ^[0-9]+$ ]] && [ "$execs" -gt 0 ] || die "--execs wants a positive number"
[[ "$max_time" =~ ^[0-9]+$ ]] || die "--max-time wants whole seconds"

ensure_rust

# The toolchain. Without a sanitizer cargo-fuzz passes no unstable flag, so stable works as well
# as nightly; AddressSanitizer (-Zsanitizer) needs nightly.
tc=()
if [ "$toolchain" = auto ]; then
  if ! command -v rustup >/dev/null 2>&1; then
    toolchain=current
  elif rustup run nightly rustc --version >/dev/null 2>&1; then
    toolchain=nightly
  elif say "installing the nightly toolchain (rustup, profile minimal)" &&
      rustup toolchain install nightly --profile minimal >/dev/null 2>&1; then
    toolchain=nightly
  else
    [ "$sanitizer" = none ] || die "--asan needs a nightly toolchain, and rustup could not install one"
    say "no nightly toolchain (rustup could not install one): building on stable, no sanitizer"
    toolchain=stable
  fi
fi
[ "$toolchain" = current ] || tc=("+$toolchain")
rustc_version=$(rustc "${tc[@]}" --version) || die "toolchain $toolchain is not installed"
if [ "$sanitizer" != none ] && [[ "$rustc_version" != *nightly* ]]; then
  die "--asan needs a nightly toolchain ($rustc_version is not)"
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
  say "installing cargo-fuzz (cargo install cargo-fuzz --locked)"
  cargo install cargo-fuzz --locked --quiet || die "could not install cargo-fuzz"
fi

# cargo-fuzz's own directory (fuzz/target) for nightly, so `cargo +nightly fuzz run` reuses the
# build; another toolchain builds beside it instead of over it.
target_dir=fuzz/target
[ "$toolchain" = nightly ] || target_dir=fuzz/target/$toolchain
host=$(rustc "${tc[@]}" -vV | sed -n 's/^host: //p')
say "building ${targets[*]} ($rustc_version, $(cargo fuzz --version), sanitizer $sanitizer)"
build=(cargo "${tc[@]}" fuzz build --release --sanitizer "$sanitizer" --target "$host"
       --target-dir "$target_dir")
if [ ${#targets[@]} -eq 1 ]; then build+=("${targets[0]}"); fi
"${build[@]}" || die "the fuzz targets do not build"

bin_dir=$target_dir/$host/release
mkdir -p "$work"
failed=()
summary=()
for t in "${targets[@]}"; do
  corpus="$work/$t"
  artifacts="fuzz/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  log="$work/$t.log"
  args=(-runs="$execs" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$artifacts/")
  limit="$execs executions"
  if [ "$max_time" -gt 0 ]; then
    args+=(-max_total_time="$max_time")
    limit="$limit or $max_time s"
  fi
  [ ! -f "fuzz/dict/$t.dict" ] || args+=(-dict="fuzz/dict/$t.dict")
  [ -z "$seed" ] || args+=(-seed="$seed")
  [ "$keep_going" -eq 0 ] ||
    args+=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  say "fuzzing $t: up to $limit (log: $log)"
  before=$(ls "$artifacts")
  start=$(date +%s%3N)
  set +e
  "$bin_dir/$t" "$corpus" "fuzz/corpus/$t" "${args[@]}" >"$log" 2>&1
  rc=$?
  set -e
  ms=$(( $(date +%s%3N) - start ))
  secs=$(( (ms + 500) / 1000 ))
  # Executions: libFuzzer's final statistics, or in fork mode its last status line.
  runs=$(sed -n -e 's/^stat::number_of_executed_units: *//p' \
                -e 's/^#\([0-9]*\): cov:.*/\1/p' "$log" | tail -n 1)
  rate="?"
  if [ -n "$runs" ] && [ "$ms" -gt 0 ]; then rate=$(( runs * 1000 / ms )); fi
  new=$(comm -13 <(printf '%s\n' "$before") <(ls "$artifacts") | sed "s|^|$artifacts/|")
  if [ "$rc" -eq 0 ] && [ -z "$new" ]; then
    summary+=("$(printf '%-14s ok      %12s runs %6s s %8s runs/s' "$t" "${runs:-?}" "$secs" "$rate")")
  else
    grep -E "panicked at|^thread '|SUMMARY|ERROR: libFuzzer" -A2 "$log" | head -n 20 >&2 || true
    summary+=("$(printf '%-14s FAILED  %12s runs %6s s %8s runs/s  (exit %s; log %s)' \
      "$t" "${runs:-?}" "$secs" "$rate" "$rc" "$log")")
    while IFS= read -r f; do [ -z "$f" ] || summary+=("               input: $f"); done <<<"$new"
    failed+=("$t")
  fi
done

say "summary"
printf '%s\n' "${summary[@]}" >&2
if [ ${#failed[@]} -gt 0 ]; then
  printf 'reproduce: %s/<target> <input>  (or: cargo fuzz run <target> <input>; docs/src/lab/fuzzing.md)\n' "$bin_dir" >&2
  die "fuzzing found a failure in: ${failed[*]}"
fi
