//! polycorn: multipath networking for high-speed trains.
//!
//! One binary for every role. Today: `demo` (the scheduler deciding in scripted situations)
//! and `schedulers` (the stages and presets a config or bench may name). The relay, proxy,
//! testbed, LinkDB and bench subcommands arrive with their crates.

mod demo;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "polycorn",
    version,
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
    /// List scheduler stages and presets, or check a pipeline spec.
    Schedulers {
        /// A spec to validate, e.g. "hpr,minrtt,tpr,ori+er(k=3)".
        #[arg(long)]
        check: Option<String>,
    },
}

fn main() -> std::process::ExitCode {
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Demo { scenarios } => print!("{}", demo::run(&scenarios)?),
        Command::Schedulers { check: Some(spec) } => {
            let p = polycorn_sched::Pipeline::from_spec(&spec)?;
            println!("ok: {}", p.spec());
        }
        Command::Schedulers { check: None } => {
            println!("stages:");
            for (name, what) in polycorn_sched::STAGES {
                println!("  {name:<10} {what}");
            }
            println!("reinjection (after `+`): er(k=N) extended reinjection (default k=3), rto (MPTCP: oldest chunk per RTO, the default), none");
            println!("presets:");
            for (name, spec) in polycorn_sched::PRESETS {
                println!("  {name:<10} {spec}");
            }
        }
    }
    Ok(())
}
