//! The command line, redis-server style: an optional config file, then
//! `--name value [value...]` overrides, applied on top of the file.

use shard::config::{split_args, Config};

pub struct Cli {
    pub config: Config,
    pub config_file: Option<String>,
    pub check_only: bool,
}

pub const USAGE: &str = "Usage: corekv [/path/to/corekv.conf] [options] [--check-config]
       corekv -v or --version
       corekv -h or --help

Options are any configuration directive as --name value, e.g.:
       corekv --port 7777 --shards 4 --cpus 0-3
       corekv /etc/corekv/corekv.conf --loglevel verbose
       corekv --check-config /etc/corekv/corekv.conf   (parse, print, exit)";

pub enum Outcome {
    Run(Box<Cli>),
    /// Print this and exit successfully (help, version).
    Print(String),
    /// Print this and exit with an error.
    Fail(String),
}

pub fn parse(args: &[String]) -> Outcome {
    let mut rest = args.iter().skip(1).peekable();
    let mut config = Config::default();
    let mut config_file = None;
    let mut check_only = false;
    let mut overrides: Vec<(String, Vec<String>)> = Vec::new();
    // Redis's main(): `--name` starts a directive (`--name value` in one
    // argument too); the arguments after it are its values, each kept
    // whole; right after a bare `--name` the next argument is a value even
    // if it starts with `--` (but `--save` then means `save ""`).
    let mut wants_value = false;
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "-h" | "--help" if !wants_value => return Outcome::Print(USAGE.to_string()),
            "-v" | "--version" if !wants_value => {
                return Outcome::Print(format!("corekv v={} (Redis 7.0 protocol)", env!("CARGO_PKG_VERSION")))
            }
            "--check-config" if !wants_value => check_only = true,
            a if !wants_value && a.starts_with("--") => {
                let Some(words) = split_args(&a.as_bytes()[2..]) else {
                    return Outcome::Fail(format!("Unbalanced quotes in the command line option '{a}'"));
                };
                let mut words = words.into_iter().map(|w| String::from_utf8_lossy(&w).into_owned());
                let name = words.next().unwrap_or_default();
                let values: Vec<String> = words.collect();
                wants_value = values.is_empty();
                if wants_value && name.eq_ignore_ascii_case("save") && rest.peek().is_none_or(|n| n.starts_with("--")) {
                    overrides.push((name, vec![String::new()]));
                    wants_value = false;
                    continue;
                }
                overrides.push((name, values));
            }
            a if config_file.is_none() && overrides.is_empty() => config_file = Some(a.to_string()),
            a => match overrides.last_mut() {
                Some((_, values)) => {
                    values.push(a.to_string());
                    wants_value = false;
                }
                None => return Outcome::Fail(format!("Unexpected argument '{a}'\n\n{USAGE}")),
            },
        }
    }
    if let Some(path) = &config_file {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => return Outcome::Fail(format!("Fatal error, can't open config file '{path}': {e}")),
        };
        if let Err(e) = config.load_text(&text) {
            return Outcome::Fail(e.to_string());
        }
    }
    for (name, values) in overrides {
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        if let Err(reason) = config.apply_directive(&name, &values) {
            // The values of a secret never reach the terminal or a log.
            let shown = if matches!(name.as_str(), "requirepass" | "masterauth" | "user") {
                "(redacted)".to_string()
            } else {
                values.join(" ")
            };
            return Outcome::Fail(format!(
                "\n*** FATAL CONFIG ERROR (corekv {}) ***\nIn the command line option '--{name} {shown}'\n{reason}",
                env!("CARGO_PKG_VERSION"),
            ));
        }
    }
    Outcome::Run(Box::new(Cli { config, config_file, check_only }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Cli {
        let args: Vec<String> = std::iter::once("corekv").chain(args.iter().copied()).map(String::from).collect();
        match parse(&args) {
            Outcome::Run(cli) => *cli,
            _ => panic!("expected a runnable config"),
        }
    }

    #[test]
    fn overrides_and_multi_values() {
        let cli = run(&["--port", "7000", "--bind", "127.0.0.1", "::1", "--save", "", "--shards", "2"]);
        assert_eq!(cli.config.port, 7000);
        assert_eq!(cli.config.bind, vec!["127.0.0.1", "::1"]);
        assert_eq!(cli.config.shards, 2);
        let args: Vec<String> = ["corekv", "--port", "x"].iter().map(|s| s.to_string()).collect();
        assert!(matches!(parse(&args), Outcome::Fail(_)));
    }

    #[test]
    fn redis_server_argument_forms() {
        // A multi-value setting's values in one argument, split as a line.
        let cli = run(&["--bind", "127.0.0.1 ::1", "--save", "60 1 30 5"]);
        assert_eq!(cli.config.bind, vec!["127.0.0.1", "::1"]);
        assert_eq!(cli.config.save, vec![(60, 1), (30, 5)]);
        // A name and its value in one argument; a value that looks like an
        // option right after a bare name; `--save` alone.
        let cli = run(&["--port 7001", "--requirepass", "--x", "--save", "--shards", "2"]);
        assert_eq!((cli.config.port, cli.config.requirepass.as_str(), cli.config.shards), (7001, "--x", 2));
        assert!(cli.config.save.is_empty());
        assert!(run(&["--save"]).config.save.is_empty());
        // One value per single-value setting.
        let args: Vec<String> = ["corekv", "--port", "1", "2"].iter().map(|s| s.to_string()).collect();
        assert!(matches!(parse(&args), Outcome::Fail(_)));
    }
}
