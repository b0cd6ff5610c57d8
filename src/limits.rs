//! At start: the descriptors `maxclients` needs, or `maxclients` lowered
//! to what the process may open (proxy::fd_limit, Redis's
//! adjustOpenFilesLimit); too few for the server itself stops the start.

use proxy::fd_limit::{adjust_open_files_limit as adjust, Adjusted};
use proxy::log;
use shard::Config;

pub fn adjust_open_files_limit(config: &mut Config) {
    match adjust(config.maxclients) {
        Adjusted::Enough => {}
        Adjusted::Lowered(maxclients) => config.maxclients = maxclients,
        Adjusted::TooLow(old, wanted) => {
            log::warning(&format!("Your current 'ulimit -n' of {old} is not enough for the server to start. Please increase your open file limit to at least {wanted}. Exiting."));
            std::process::exit(1);
        }
    }
}
