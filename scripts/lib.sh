# Shared helpers for polycorn's scripts. Sourced, not run.
set -euo pipefail

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Run a command as root (directly when we are root, else through sudo).
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else die "need root for: $* (run as root or install sudo)"
  fi
}

# Debian packages every part of polycorn needs (tests create namespaces, veth, nftables rules,
# kernel MPTCP endpoints; `emu bench` uses iperf3; LinkDB's store tests run against a throwaway
# PostgreSQL server; the bench report's render test uses headless chromium; the systemd units
# `config example` prints are checked with systemd-analyze; the ModemManager client is tested
# against a private dbus-daemon with python-dbusmock).
APT_PACKAGES=(
  build-essential pkg-config ca-certificates curl git jq
  iproute2 nftables iptables ethtool iputils-ping iperf3 tcpdump mptcpize
  postgresql chromium systemd systemd-container debootstrap
  dbus python3-dbusmock
)

# Install missing Debian packages; does nothing (and needs no network) when all are present.
ensure_apt_packages() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    say "Debian packages: all present"
    return
  fi
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found: polycorn's scripts target Debian 12; install ${missing[*]} by hand"
  say "installing Debian packages: ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Start a throwaway PostgreSQL cluster for the tests: a fresh data directory under a temp dir,
# listening only on a Unix socket in that dir (no TCP port to collide with anything), owned by
# the `postgres` user when we are root (the server refuses to run as root). Exports
# POLYCORN_TEST_PG_URL. Call stop_test_postgres when done (test.sh traps it). Under CI=true a
# failure is fatal; elsewhere the tests skip PostgreSQL with a message.
PG_TMP=""
start_test_postgres() {
  local bindir
  bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
    pg_unavailable "no PostgreSQL server binaries under /usr/lib/postgresql (Debian package postgresql)"
    return 0
  fi
  PG_TMP=$(mktemp -d /tmp/polycorn-pg.XXXXXX)
  local run=()
  if [ "$(id -u)" -eq 0 ]; then
    chown postgres: "$PG_TMP"
    run=(runuser -u postgres --)
  fi
  if ! "${run[@]}" "$bindir/initdb" -D "$PG_TMP/data" -U postgres -A trust --no-sync >"$PG_TMP/initdb.log" 2>&1; then
    cat "$PG_TMP/initdb.log" >&2
    pg_unavailable "initdb failed"
    return 0
  fi
  if ! "${run[@]}" "$bindir/pg_ctl" -D "$PG_TMP/data" -l "$PG_TMP/server.log" -w -t 60 \
      -o "-c listen_addresses='' -k $PG_TMP -p 5432 -c fsync=off" start >/dev/null; then
    cat "$PG_TMP/server.log" >&2
    pg_unavailable "the PostgreSQL server did not start"
    return 0
  fi
  export POLYCORN_TEST_PG_URL="postgresql:///postgres?user=postgres&host=$PG_TMP&port=5432"
  say "PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') for tests: $POLYCORN_TEST_PG_URL"
}

pg_unavailable() {
  if [ "${CI:-}" = "true" ]; then die "PostgreSQL for the LinkDB tests: $1"; fi
  printf 'warning: PostgreSQL for the LinkDB tests: %s; its tests will skip\n' "$1" >&2
}

stop_test_postgres() {
  [ -n "$PG_TMP" ] || return 0
  local bindir run=()
  bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ "$(id -u)" -eq 0 ] && run=(runuser -u postgres --)
  if [ -f "$PG_TMP/data/postmaster.pid" ]; then
    "${run[@]}" "$bindir/pg_ctl" -D "$PG_TMP/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$PG_TMP"
  PG_TMP=""
}

# Prometheus's own tools, for the tests of the alerting rules polycorn ships (`promtool` checks
# and unit-tests them; the relay/proxy tests run a `prometheus` server against the daemons).
# Taken from Debian's prometheus package without installing it (installing would start a
# Prometheus service on this host): the .deb is downloaded and unpacked under
# target/prometheus/. Exports POLYCORN_PROMETHEUS_BIN, where the tests look for both.
ensure_prometheus_tools() {
  local dir="$PWD/target/prometheus" tmp
  if ! [ -x "$dir/usr/bin/promtool" ] || ! [ -x "$dir/usr/bin/prometheus" ]; then
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found: put Debian 12's promtool and prometheus in $dir/usr/bin by hand"
    say "fetching Debian's prometheus package (promtool and prometheus, unpacked into $dir; not installed)"
    tmp=$(mktemp -d)
    if ! (cd "$tmp" && apt-get download -qq prometheus 2>/dev/null); then
      as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
      (cd "$tmp" && apt-get download -qq prometheus 2>/dev/null) || die "could not download Debian's prometheus package"
    fi
    mkdir -p "$dir"
    dpkg-deb -x "$tmp"/prometheus_*.deb "$dir"
    rm -rf "$tmp"
  fi
  export POLYCORN_PROMETHEUS_BIN="$dir/usr/bin"
  say "Prometheus tools: $("$POLYCORN_PROMETHEUS_BIN/promtool" --version 2>&1 | head -1)"
}

# Make cargo available (rustup's default location is added to PATH when present).
MIN_RUST_MINOR=85
ensure_rust() {
  if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
  if ! command -v cargo >/dev/null 2>&1; then
    say "cargo not found: installing Rust with rustup"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt,clippy \
      || die "could not install Rust; install Rust >= 1.$MIN_RUST_MINOR (rustup.rs) and re-run"
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
  local minor
  minor=$(rustc --version | sed -E 's/^rustc 1\.([0-9]+).*/\1/')
  [ "$minor" -ge "$MIN_RUST_MINOR" ] || die "rustc $(rustc --version) is too old; polycorn needs Rust >= 1.$MIN_RUST_MINOR"
  say "Rust: $(rustc --version)"
}

# mdBook, which builds the manual (docs/): installed once with cargo into ~/.cargo/bin and kept
# there (mdBook is not a Debian package). A few minutes of compiling on the first run only.
MDBOOK_VERSION=0.5.4
ensure_mdbook() {
  if command -v mdbook >/dev/null 2>&1 && [ "$(mdbook --version)" = "mdbook v$MDBOOK_VERSION" ]; then
    return 0
  fi
  say "installing mdbook $MDBOOK_VERSION with cargo (once; kept in ~/.cargo/bin)"
  cargo install mdbook --version "$MDBOOK_VERSION" --locked --no-default-features \
    || die "could not install mdbook $MDBOOK_VERSION with cargo"
  export PATH="$HOME/.cargo/bin:$PATH"
}

cd "$(dirname "${BASH_SOURCE[0]}")/.."
