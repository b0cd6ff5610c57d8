//! Side-by-side benchmark runner: see `corekv_bench::suite` and bench/run.sh.

use clap::Parser;

fn main() -> std::process::ExitCode {
    corekv_bench::suite::main_with(corekv_bench::suite::SuiteArgs::parse())
}
