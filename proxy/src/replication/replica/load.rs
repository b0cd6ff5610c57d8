//! The RDB received from the primary replaces the dataset: it becomes
//! `dir/dbfilename` (as Redis renames its temp file), then every core
//! flushes its shard and runs the start-up loader over the file in
//! parallel, keeping only the keys it owns. While it runs, every core
//! answers clients with Redis's LOADING error, so no one sees a keyspace
//! half old and half new. With `appendonly yes` the AOF restarts on the
//! new dataset, as Redis's restartAOFAfterSYNC.

use super::publish;
use crate::coordinator::dispatch::call_all;
use crate::core::Core;
use crate::log;
use crate::persistence::aof;
use crate::persistence::load::{load_keys, Dump};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

pub async fn load_received(core: &Rc<Core>, received: &Path) -> Result<(), String> {
    let target = {
        let config = core.config();
        Path::new(&config.dir).join(&config.dbfilename)
    };
    std::fs::rename(received, &target).map_err(|e| {
        format!(
            "Failed trying to rename the temp DB into {} in MASTER <-> REPLICA synchronization: {e}",
            target.display()
        )
    })?;
    let dump = match Dump::open(&target) {
        Ok(Some(d)) => Arc::new(d),
        Ok(None) => return Err(format!("Can't open {}", target.display())),
        Err(e) => return Err(e),
    };
    core.repl.replica.link.borrow_mut().loading = true;
    publish(core).await;
    // As Redis: the AOF stops before the flush and starts again on the
    // loaded dataset (its first content is the new keyspace).
    let aof = core.aof.enabled.get();
    if aof {
        aof::turn_off(core).await;
    }
    log::notice("MASTER <-> REPLICA sync: Flushing old data");
    log::notice("MASTER <-> REPLICA sync: Loading DB in memory");
    let started = std::time::Instant::now();
    let results = call_all(core, move |c| {
        {
            let mut shard = c.shard.borrow_mut();
            for db in &mut shard.dbs {
                db.clear();
            }
        }
        load_keys(c, &dump, false)
    })
    .await;
    core.repl.replica.link.borrow_mut().loading = false;
    for r in results {
        match r {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                log::warning(&e);
                return Err("Failed trying to load the MASTER synchronization DB from disk, check server logs.".into());
            }
            None => return Err("A shard is gone (shutting down)".into()),
        }
    }
    if aof {
        if let Err(e) = aof::turn_on(core).await {
            log::warning(&format!("Failed enabling the AOF after successful master synchronization! {e}"));
        }
    }
    log::notice(&format!(
        "MASTER <-> REPLICA sync: Loaded the RDB in {:.3} seconds, every shard reading the whole file",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}
