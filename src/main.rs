//! The `mcpmux` binary: parse the command line, run it.

use clap::Parser;

fn main() -> std::process::ExitCode {
    mcpmux::cli::Cli::parse().run()
}
