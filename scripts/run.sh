#!/usr/bin/env bash
# Set up this machine (idempotent) and run polycorn's main job on its built-in defaults: the quick
# bench on the default HSR preset (kernel MPTCP, single path, vanilla, HRSCH on one emulated
# trip), then print where the report is.
# Usage: ./scripts/run.sh [arguments for `polycorn bench`; they replace the default --quick]
source "$(dirname "$0")/lib.sh"

ensure_apt_packages
ensure_rust
say "building polycorn (release)"
cargo build --release --locked -p polycorn
out="results/bench-quick"
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--quick)
say "running: polycorn bench ${args[*]} --out $out (root: namespaces, TUN, kernel MPTCP)"
as_root ./target/release/polycorn bench "${args[@]}" --out "$out"
say "report: $(pwd)/$out/report.html (raw: $out/flows.csv, $out/im.csv, $out/results.json)"
