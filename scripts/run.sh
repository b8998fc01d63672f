#!/usr/bin/env bash
# Set up this machine (idempotent) and run polycorn's main job on its built-in defaults.
# Usage: ./scripts/run.sh [extra arguments for `polycorn demo`]
source "$(dirname "$0")/lib.sh"

ensure_apt_packages
ensure_rust
say "building polycorn (release)"
cargo build --release --locked -p polycorn
say "running: polycorn demo $*"
./target/release/polycorn demo "$@"
