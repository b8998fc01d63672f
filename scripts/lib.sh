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
# kernel MPTCP endpoints; the bench uses iperf3 and mptcpize).
APT_PACKAGES=(
  build-essential pkg-config ca-certificates curl git
  iproute2 nftables iptables ethtool iputils-ping iperf3 tcpdump mptcpize
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

cd "$(dirname "${BASH_SOURCE[0]}")/.."
