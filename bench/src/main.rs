use clap::Parser;

fn main() -> std::process::ExitCode {
    corekv_bench::main_with(corekv_bench::cli::Args::parse())
}
