//! The command line, redis-server style: an optional config file, then
//! `--name value [value...]` overrides, applied on top of the file.

use shard::config::Config;

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
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "-h" | "--help" => return Outcome::Print(USAGE.to_string()),
            "-v" | "--version" => {
                return Outcome::Print(format!("corekv v={} (Redis 7.0 protocol)", env!("CARGO_PKG_VERSION")))
            }
            "--check-config" => check_only = true,
            a if a.starts_with("--") => {
                let mut values = Vec::new();
                while let Some(v) = rest.peek() {
                    if v.starts_with("--") && v.len() > 2 {
                        break;
                    }
                    values.push(rest.next().cloned().unwrap_or_default());
                }
                overrides.push((a[2..].to_string(), values));
            }
            a if config_file.is_none() && overrides.is_empty() => config_file = Some(a.to_string()),
            a => return Outcome::Fail(format!("Unexpected argument '{a}'\n\n{USAGE}")),
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
}
