//! polycorn: multipath networking for high-speed trains.
//!
//! One binary for every role: relay, proxy, testbed, trip, LinkDB, bench, demo, schedulers.

mod linkdb_cmd;
mod net_cmd;
mod status;

use anyhow::Result;
use clap::{Parser, Subcommand};
pub(crate) use polycorn_lab::{bench, emit};
use polycorn_lab::{calibrate, demo, netbench, realdata, soak, testbed_cmd, tripgen};

/// `polycorn --version`: the crate version and the commit the binary was built from.
pub(crate) const VERSION: &str = polycorn_lab::VERSION;

#[derive(Parser, Debug)]
#[command(
    name = "polycorn",
    version = VERSION,
    about = "Multipath networking for high-speed trains"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show HRSCH's stages deciding next to the baseline they improve on (scripted, deterministic).
    Demo {
        /// Scenarios to run (default: all). One of: tail, handover, blackout, idle.
        scenarios: Vec<String>,
    },
    /// Create or remove the HSR testbed (namespaces + emulated paths).
    Testbed {
        #[command(subcommand)]
        action: TestbedAction,
    },
    /// Run the path emulator of an existing testbed in the foreground (used by `testbed up`).
    Emu {
        #[command(subcommand)]
        action: EmuAction,
    },
    /// Synthetic HSR trips: generate and export.
    Trip {
        #[command(subcommand)]
        action: TripAction,
    },
    /// LinkDB: handover history, analyses, failure-predictor validation.
    Linkdb {
        #[command(subcommand)]
        action: linkdb_cmd::LinkdbAction,
    },
    /// Run the on-train relay (passengers' TCP over every path to the proxy).
    Relay {
        /// relay.toml (`polycorn config example relay` prints a commented one).
        #[arg(long)]
        config: std::path::PathBuf,
        /// Remove the interception rules this configuration installs (nftables table, policy
        /// rules and routes) and exit, without starting: a socket-activated relay leaves them
        /// for its next start, and its socket unit runs this when it stops.
        #[arg(long)]
        remove_interception: bool,
        /// Check every path and exit, without starting: over each, as the relay would, look
        /// the proxy up, connect (pinned to the path's interface), TLS with the relay's
        /// certificate, Hello. One line per path; exit status 0 when every path reached the
        /// proxy, 1 when some did not, 2 when none did. The proxy opens no session for it, so
        /// it may run beside a working relay. With `[context] cells = "modemmanager"` it first
        /// shows each path's modem and its radio (technology, cell, signal); a path without
        /// its modem makes the status 1.
        #[arg(long, conflicts_with = "remove_interception")]
        check_paths: bool,
        /// With --check-paths: one JSON object per check on stdout instead of the lines (`path`,
        /// `device`, `proxy`, `addr`, `ok`, `source`, `setup_ms`, `rtt_ms`, `mss`,
        /// `proxy_cert_not_after` (seconds since 1970), `answer`: `checked`, `probe_lost`,
        /// `answer_lost` or `older_proxy`, `proxy_says`, `error`), after one per path's modem
        /// (`path`, `modem`, `technology`, `registered`, `connected`, `mcc`, `mnc`, `tac`,
        /// `cell`, `pci`, `rsrp_dbm`, `rsrq_db`, `sinr_db`, `rssi_dbm`, or `error`).
        #[arg(long, requires = "check_paths")]
        json: bool,
    },
    /// Run the cloud proxy (terminates relays' subflows, connects to servers).
    Proxy {
        /// proxy.toml (`polycorn config example proxy` prints a commented one).
        #[arg(long)]
        config: std::path::PathBuf,
    },
    /// Credentials for relay and proxy (mutual TLS).
    Tls {
        #[command(subcommand)]
        action: TlsAction,
    },
    /// Relay + proxy benchmarks.
    Net {
        #[command(subcommand)]
        action: NetAction,
    },
    /// Configuration files.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// The paper's evaluation side by side (kernel MPTCP, single path, polycorn schedulers) on
    /// one emulated trip; writes CSV/JSON and an HTML report. Root.
    #[command(
        args_conflicts_with_subcommands = true,
        after_long_help = "Relay and proxy log at `info` into OUT/logs/SYSTEM/ (OUT/trip-N/logs/SYSTEM/ with \
            several trips). Set \
            POLYCORN_BENCH_LOG to another RUST_LOG filter to change that, e.g. \
            POLYCORN_BENCH_LOG='info,polycorn::paths=debug' for every path's RTT, window and \
            queue every 100 ms, or 'info,polycorn_net::engine=debug' for each reinjection."
    )]
    Bench {
        #[command(flatten)]
        args: bench::BenchArgs,
        #[command(subcommand)]
        action: Option<BenchAction>,
    },
    /// The bench in the deterministic simulator: the production relay and proxy logic over
    /// modelled links and TCP subflows, in virtual time (no root, no testbed).
    Sim {
        #[command(subcommand)]
        action: SimAction,
    },
    /// What a running relay or proxy is doing, from its metrics endpoint: every path (up,
    /// RTT, window, throughput, retransmissions, reconnections) and the passengers' flows.
    #[command(
        after_long_help = "Examples:\n  polycorn status relay /etc/polycorn/relay.toml\n  \
        polycorn status proxy /etc/polycorn/proxy.toml --watch --interval 2\n  \
        polycorn status --metrics 127.0.0.1:9100 --interval 0"
    )]
    Status(status::StatusArgs),
    /// List scheduler stages and presets, or check a pipeline spec.
    Schedulers {
        /// A spec to validate, e.g. "hpr,minrtt,tpr,ori+er(k=3)".
        #[arg(long)]
        check: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
enum SimAction {
    /// `polycorn bench`'s rides, simulated: the same trip windows, plan, systems and
    /// configurations, the same outputs (results.json, CSVs, report.html; pooled.* over
    /// several rides), rides spread over every core. Kernel MPTCP (`mptcp`) is not simulated.
    Bench(bench::sim::SimArgs),
    /// The simulator against the emulator: the same rides (trip seeds, windows, workload) of
    /// single, vanilla and hrsch on the emulated testbed (root; or rides already run,
    /// `--emulated-from`) and in the simulator, side by side: per system the median FCT per
    /// size and the IM mean per segment, and per path the bytes carried, retransmissions per
    /// megabyte, reinjected bytes and reconnects; each with simulated / emulated and a mark
    /// against ±15%, a row that misses with what the model is known to lack. Writes
    /// validate.json and validate.md.
    Validate(bench::sim::validate::ValidateArgs),
    /// Sweeps of what the emulator cannot afford to vary: ER's k, ORI's alpha, beta and tau,
    /// HPR's E_GPS, TPR's eta, 2 to 8 carriers, 10 to 300 IM users, the predictor from the
    /// trip's ground truth to none. Each variant runs on the same simulated rides beside
    /// vanilla; per variant the goodput over vanilla with its interval over rides, the median
    /// FCT over the oracle, the IM mean against its bound. Writes sweeps.summary.json (for
    /// `polycorn bench summarize`) and sweeps.md.
    Sweep(bench::sim::sweep::SweepArgs),
}

#[derive(Subcommand, Debug)]
enum BenchAction {
    /// Pool the rides of earlier bench runs (other trip seeds, other invocations) into one
    /// table: per-flow ratios with intervals over all rides, FCT / oracle, IM. Runs nothing;
    /// no root needed.
    Pool(bench::pool::PoolArgs),
    /// Write the results pages (docs/src/results/) and the README's results table from the
    /// compact results committed under results/ (`*.summary.json`, copies of the
    /// `summary.json` a bench or pool writes). Runs nothing; no root needed.
    Summarize(bench::summarize::SummarizeArgs),
}

#[derive(Subcommand, Debug)]
enum TestbedAction {
    /// Build namespaces {name}-client/-relay/-proxy/-server and start the emulator.
    Up {
        /// Testbed name (namespace prefix).
        #[arg(long, default_value = "pc")]
        name: String,
        #[command(flatten)]
        model: testbed_cmd::ModelArgs,
    },
    /// Stop the emulator and remove everything the testbed created.
    Down {
        /// Testbed name.
        #[arg(long, default_value = "pc")]
        name: String,
    },
    /// Measure TCP over each emulated carrier of a preset and compare with published HSR statistics.
    Calibrate(calibrate::CalibrateArgs),
    /// Real HSR MPTCP downloads (the hsr-mptcp packet traces) beside a bench run's flows:
    /// flow completion times per size. Runs nothing; no root needed.
    CompareReal(realdata::CompareRealArgs),
}

#[derive(Subcommand, Debug)]
enum EmuAction {
    /// Attach to the testbed's paths and forward until SIGINT/SIGTERM.
    Run {
        /// Testbed name.
        #[arg(long, default_value = "pc")]
        name: String,
        #[command(flatten)]
        model: testbed_cmd::ModelArgs,
    },
    /// Throughput of the forwarder itself: one unshaped path, bulk TCP through it.
    Bench {
        /// Seconds of traffic.
        #[arg(long, default_value_t = 5)]
        secs: u32,
        /// Testbed name used for the run (created and removed).
        #[arg(long, default_value = "pcbench")]
        name: String,
    },
}

#[derive(Subcommand, Debug)]
enum TlsAction {
    /// Create a private CA and certificates for one proxy and its relays in DIR.
    Generate {
        /// Output directory (created if missing).
        dir: std::path::PathBuf,
        /// Extra names or addresses for the proxy certificate (relays always verify the name
        /// `polycorn-proxy`).
        #[arg(long)]
        san: Vec<String>,
        /// Overwrite existing files.
        #[arg(long)]
        force: bool,
    },
    /// Sign a certificate for one more relay (one per train) with the CA in DIR, so the proxy
    /// can tell trains apart and refuse one (`proxy.revoked_relays`) without re-keying the rest.
    Relay {
        /// The relay's name: 1-63 of a-z, 0-9 and '-', e.g. `train-042` (files NAME.pem and
        /// NAME.key).
        #[arg(long)]
        name: String,
        #[command(flatten)]
        issue: IssueArgs,
    },
    /// Sign a new proxy certificate and key with the CA in DIR (proxy.pem, proxy.key): to renew
    /// the proxy's certificate without a new CA, so the trains keep their files. Put them in
    /// place and `systemctl reload polycorn-proxy`.
    Proxy {
        /// Extra names or addresses for the certificate, as with `tls generate` (relays always
        /// verify the name `polycorn-proxy`).
        #[arg(long)]
        san: Vec<String>,
        #[command(flatten)]
        issue: IssueArgs,
    },
}

/// Where `tls relay` and `tls proxy` find the CA and write what they issue.
#[derive(clap::Args, Debug)]
pub struct IssueArgs {
    /// Directory holding `ca.pem` and `ca.key` (as `tls generate` wrote them).
    pub dir: std::path::PathBuf,
    /// Where to write the certificate and its key (default: DIR).
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// Overwrite the certificate and key if they exist.
    #[arg(long)]
    pub force: bool,
    /// Valid until this many days from today (UTC midnight), instead of until 1 January ten
    /// years on: for fleets that renew certificates on a schedule.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=36_500))]
    pub valid_days: Option<u32>,
}

#[derive(Subcommand, Debug)]
enum NetAction {
    /// One bulk download over two unshaped veth paths: polycorn (TLS) vs kernel MPTCP (root).
    Bench {
        /// Seconds measured per system and direction (after 1 s warm-up).
        #[arg(long, default_value_t = 10.0)]
        secs: f64,
        /// Namespace prefix (created and removed).
        #[arg(long, default_value = "pcnb")]
        name: String,
        /// Which way the bulk transfer goes: `down` (server to passenger), `up`, or `both`.
        #[arg(long, value_enum, default_value = "both")]
        direction: netbench::Direction,
    },
    /// Relay and proxy under connection churn for a while, then checked for failed or wrong
    /// bytes, flows left open and leaked file descriptors; memory reported over time (root).
    Soak(Box<soak::SoakArgs>),
}

#[derive(Subcommand, Debug)]
enum ConfigAction {
    /// Print a commented example configuration for `relay` or `proxy`, a systemd unit that
    /// runs one (`relay.service`, `proxy.service`), or the socket unit that holds its
    /// listeners across its restarts (`relay.socket`: the passengers'; `proxy.socket`: the
    /// relays' subflows), or the nightly unit and timer by which LinkDB learns the rides the
    /// proxy recorded (`linkdb-learn.service`, `linkdb-learn.timer`), or Prometheus alerting
    /// rules for both ends (`alerts`).
    Example {
        /// relay, proxy, relay.service, proxy.service, relay.socket, proxy.socket,
        /// linkdb-learn.service, linkdb-learn.timer or alerts.
        role: String,
        /// With relay.socket or proxy.socket: the relay.toml or proxy.toml whose listeners the
        /// unit binds (default: those of `config example relay` or `proxy`).
        #[arg(long)]
        config: Option<std::path::PathBuf>,
    },
    /// Validate a configuration file without starting anything. For a relay it also warns
    /// (on stderr, still exiting 0) about interfaces and source addresses this host lacks.
    Check {
        /// relay or proxy.
        role: String,
        /// The file.
        file: std::path::PathBuf,
        /// When the file passes, tell the running relay or proxy with this process id to
        /// reload it (SIGHUP; the units' ExecReload, so no `kill` program is needed).
        #[arg(long, value_name = "PID")]
        reload: Option<i32>,
    },
    /// Write the configuration reference (`relay-config.md`, `proxy-config.md`): every
    /// section and key of relay.toml and proxy.toml with its type, default, allowed values and
    /// description, generated from the configuration types' doc comments.
    Reference {
        /// Directory the pages are written to (created if missing).
        #[arg(long, default_value = "docs/src/reference")]
        out: std::path::PathBuf,
        /// Write nothing; fail, naming each page, when a page there differs from what would
        /// be written.
        #[arg(long)]
        check: bool,
    },
}

#[derive(Subcommand, Debug)]
enum TripAction {
    /// Generate a trip and write its traces, context log and ground truth to a directory.
    Generate(tripgen::GenerateArgs),
}

fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {}", polycorn_net::daemon::error_text(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// `config check`: how long the TLS files stay valid (on stdout; a warning on stderr as well
/// when that ends within 30 days or has ended).
fn print_validity(cert: &std::path::Path, ca: &std::path::Path) -> anyhow::Result<()> {
    use polycorn_net::tls;
    let now = tls::unix_now();
    for v in tls::validity_of(cert, ca)? {
        println!("{}", v.describe(now));
        if v.needs_warning(now) {
            eprintln!("warning: {}", v.describe(now));
        }
    }
    Ok(())
}

/// Runs a command; the exit status it asks for (0 but for `status --check`).
fn run(cli: Cli) -> Result<u8> {
    match cli.command {
        Command::Demo { scenarios } => emit(&demo::run(&scenarios)?)?,
        Command::Testbed {
            action: TestbedAction::Up { name, model },
        } => testbed_cmd::up(&name, &model)?,
        Command::Testbed {
            action: TestbedAction::Down { name },
        } => testbed_cmd::down(&name)?,
        Command::Emu {
            action: EmuAction::Run { name, model },
        } => testbed_cmd::run(&name, &model)?,
        Command::Emu {
            action: EmuAction::Bench { secs, name },
        } => testbed_cmd::bench(&name, secs)?,
        Command::Testbed {
            action: TestbedAction::Calibrate(args),
        } => calibrate::run(&args)?,
        Command::Testbed {
            action: TestbedAction::CompareReal(args),
        } => realdata::run(&args)?,
        Command::Trip {
            action: TripAction::Generate(args),
        } => tripgen::run(&args)?,
        Command::Linkdb { action } => linkdb_cmd::run(action)?,
        Command::Net {
            action:
                NetAction::Bench {
                    secs,
                    name,
                    direction,
                },
        } => drop(netbench::run(&name, secs, direction)?),
        Command::Net {
            action: NetAction::Soak(args),
        } => soak::run(&args)?,
        Command::Status(args) => return status::run(&args),
        Command::Relay {
            config,
            remove_interception,
            check_paths,
            json,
        } => {
            if check_paths {
                return net_cmd::relay_check_paths(&config, json);
            } else if remove_interception {
                net_cmd::relay_remove_interception(&config)?
            } else {
                net_cmd::relay(&config)?
            }
        }
        Command::Proxy { config } => net_cmd::proxy(&config)?,
        Command::Tls {
            action: TlsAction::Generate { dir, san, force },
        } => net_cmd::tls_generate(&dir, &san, force)?,
        Command::Tls {
            action: TlsAction::Relay { name, issue },
        } => net_cmd::tls_relay(&name, &issue)?,
        Command::Tls {
            action: TlsAction::Proxy { san, issue },
        } => net_cmd::tls_proxy(&san, &issue)?,
        Command::Config {
            action: ConfigAction::Example { role, config },
        } => net_cmd::config_example(&role, config.as_deref())?,
        Command::Config {
            action: ConfigAction::Reference { out, check },
        } => net_cmd::config_reference(&out, check)?,
        Command::Config {
            action: ConfigAction::Check { role, file, reload },
        } => {
            match role.as_str() {
                "relay" => {
                    let cfg = polycorn_net::config::RelayConfig::load(&file)?;
                    if let Some(t) = &cfg.tls {
                        // What the relay builds at start (and at a reload): a key that is not the
                        // certificate's fails here.
                        polycorn_net::tls::client_config(&t.ca, &t.cert, &t.key)?;
                    }
                    for w in cfg.host_warnings(&file.display().to_string()) {
                        eprintln!("warning: {w}");
                    }
                    println!("ok: {}", file.display());
                    for note in cfg.proxy_notes() {
                        println!("{note}");
                    }
                    if let Some(t) = &cfg.tls {
                        let name = polycorn_net::tls::relay_name_of_file(&t.cert)?;
                        println!("relay name (tls.cert): {name}");
                        print_validity(&t.cert, &t.ca)?;
                    }
                }
                "proxy" => {
                    let cfg = polycorn_net::config::ProxyConfig::load(&file)?;
                    let t = &cfg.tls;
                    // What the proxy builds at start (and at a reload).
                    polycorn_net::tls::server_config(&t.ca, &t.cert, &t.key)?;
                    println!("ok: {}", file.display());
                    if !cfg.proxy.revoked_relays.is_empty() {
                        println!("revoked relays: {}", cfg.proxy.revoked_relays.join(", "));
                    }
                    print_validity(&cfg.tls.cert, &cfg.tls.ca)?;
                }
                other => anyhow::bail!("unknown role `{other}`: expected `relay` or `proxy`"),
            }
            if let Some(pid) = reload {
                net_cmd::signal_reload(pid)?;
                println!("reload: sent to process {pid}");
            }
        }
        Command::Bench {
            action: Some(BenchAction::Pool(args)),
            ..
        } => bench::pool::run(&args)?,
        Command::Bench {
            action: Some(BenchAction::Summarize(args)),
            ..
        } => bench::summarize::run(&args)?,
        Command::Bench { args, action: None } => drop(bench::run(&args)?),
        Command::Sim {
            action: SimAction::Bench(args),
        } => bench::sim::run(&args)?,
        Command::Sim {
            action: SimAction::Validate(args),
        } => bench::sim::validate::run(&args)?,
        Command::Sim {
            action: SimAction::Sweep(args),
        } => bench::sim::sweep::run(&args)?,
        Command::Schedulers { check: Some(spec) } => {
            let p = polycorn_sched::Pipeline::from_spec(&spec)?;
            println!("ok: {}", p.spec());
        }
        Command::Schedulers { check: None } => {
            println!("stages:");
            for (name, what) in polycorn_sched::STAGES {
                println!("  {name:<10} {what}");
            }
            println!("reinjection (after `+`): rto (MPTCP: oldest chunk per RTO, the default), er(k=N) extended reinjection (rto below the k-th RTO, all unacknowledged chunks at it; default k=3; oldest=0: the batch alone; cell_loss=1: also on a reported cell loss), none");
            println!("presets:");
            for (name, spec) in polycorn_sched::PRESETS {
                println!("  {name:<10} {spec}");
            }
        }
    }
    Ok(0)
}
