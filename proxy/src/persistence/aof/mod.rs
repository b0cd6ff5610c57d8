//! The append-only file, one per shard, in Redis 7's multi-part layout.
//!
//! Every shard appends the effects of its writes (`shard::propagate`) to its
//! own incr file, through glommio's io_uring file API, once per event-loop
//! batch. The files live in `appenddirname`; one manifest names every
//! shard's files with Redis's syntax plus the shard:
//!
//! ```text
//! file appendonly.aof.0.1.base.aof seq 1 type b shard 0
//! file appendonly.aof.0.1.incr.aof seq 1 type i shard 0
//! file appendonly.aof.1.1.incr.aof seq 1 type i shard 1
//! ```
//!
//! (`<appendfilename>.<shard>.<seq>.{base,incr}.aof`). At start each shard
//! replays its base then its incr files, in parallel with the others.
//! `appendfsync always`: a reply leaves only once the effects logged before
//! it are written and fdatasync'ed ([`durable`]); `everysec`: a background
//! fdatasync once a second; `no`: the kernel decides.

pub mod durable;
mod health;
pub mod manifest;
mod replay;
mod rewrite;
pub mod state;
mod writer;

pub use durable::{durable, flush_at_exit, must_wait};
pub use health::misconf;
pub use manifest::*;
pub use replay::*;
pub use rewrite::*;
pub use state::{Aof, AofStats, Health, Refusals};
pub use writer::*;

#[cfg(test)]
mod tests {
    use super::*;
    use shard::{Config, Shard};

    #[test]
    fn manifest_round_trip() {
        let text = "file appendonly.aof.0.2.base.aof seq 2 type b shard 0\n\
                    file appendonly.aof.0.2.incr.aof seq 2 type i shard 0\n\
                    file appendonly.aof.1.1.incr.aof seq 1 type i shard 1\n";
        let m = Manifest::parse(text).unwrap();
        assert_eq!(m.shards(), 2);
        assert_eq!(m.render(), text);
        assert_eq!(m.of_shard(0)[0].kind, Kind::Base);
        assert!(Manifest::parse("file a seq 1 type x shard 0\n").is_err());
        assert!(Manifest::parse("file a seq\n").is_err());
        let redis = Manifest::parse("file appendonly.aof.1.base.rdb seq 1 type b\n").unwrap();
        assert_eq!((redis.shards(), redis.files[0].shard), (1, 0));
        assert!(Manifest::parse("file ../a seq 1 type i shard 0\n").is_err());
        assert_eq!(Manifest::parse("# c\nfile h seq 1 type h shard 0\n").unwrap().files.len(), 0);
    }

    #[test]
    fn commands_and_torn_tails() {
        let mut ranges = Vec::new();
        let cmd = b"*2\r\n$3\r\nDEL\r\n$1\r\na\r\n";
        assert_eq!(next_command(cmd, &mut ranges).ok(), Some(cmd.len()));
        assert_eq!(ranges, vec![(8, 11), (17, 18)]);
        for cut in 0..cmd.len() {
            assert!(matches!(next_command(&cmd[..cut], &mut ranges), Err(Parse::Incomplete)), "cut {cut}");
        }
        assert!(matches!(next_command(b"*1\r\n$3\r\nDELxx", &mut ranges), Err(Parse::Bad)));
        assert!(matches!(next_command(b"+OK\r\n", &mut ranges), Err(Parse::Bad)));
        assert!(matches!(next_command(b"*-1\r\n", &mut ranges), Err(Parse::Bad)));
        assert!(matches!(next_command(b"*1\r\n$99999999999\r\n", &mut ranges), Err(Parse::Bad)));
    }

    #[test]
    fn replay_rebuilds_the_shard() {
        let table = crate::core::CommandTable::new();
        let mut shard = Shard::new(0, 1, Config::default());
        let mut log = Vec::new();
        shard::propagate::put_command(&mut log, &[b"SELECT", b"2"]);
        shard::propagate::put_command(&mut log, &[b"RPUSH", b"l", b"a", b"b"]);
        shard::propagate::put_command(&mut log, &[b"SET", b"k", b"v", b"PXAT", b"99999999999999"]);
        replay(&mut shard, &table, &log).unwrap();
        assert_eq!(shard.dbs[2].len(), 2);
        let text = render_keyspace(&shard, 0);
        let mut other = Shard::new(0, 1, Config::default());
        replay(&mut other, &table, &text).unwrap();
        assert_eq!(render_keyspace(&other, 0), text);
        let torn = &log[..log.len() - 3];
        let mut third = Shard::new(0, 1, Config::default());
        let valid = (log.len()
            - b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$4\r\nPXAT\r\n$14\r\n99999999999999\r\n".len())
            as u64;
        assert_eq!(replay(&mut third, &table, torn), Err(Replay::Truncated(valid)));
        assert_eq!(replay(&mut third, &table, b"*1\r\n$4\r\nNOPE\r\n"), Err(Replay::Unknown("NOPE".into())));
    }

    proptest::proptest! {
        /// Any bytes, any cut or flipped bit of a valid log: an error or a
        /// load, never a panic; a whole log replays to what it wrote.
        #[test]
        fn hostile_logs_never_panic(
            cmds in proptest::collection::vec(
                proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12), 1..5),
                0..20,
            ),
            cut in 0usize..400,
            flip in 0usize..400,
            noise in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            let table = crate::core::CommandTable::new();
            let mut log = Vec::new();
            for (i, parts) in cmds.iter().enumerate() {
                let key = format!("k{i}");
                let mut line: Vec<&[u8]> = vec![b"RPUSH", key.as_bytes()];
                line.extend(parts.iter().map(Vec::as_slice));
                shard::propagate::put_command(&mut log, &line);
            }
            let mut shard = Shard::new(0, 1, Config::default());
            proptest::prop_assert_eq!(replay(&mut shard, &table, &log), Ok(()));
            proptest::prop_assert_eq!(shard.dbs[0].len(), cmds.len());
            let mut cut_log = log.clone();
            cut_log.truncate(cut.min(log.len()));
            let _ = replay(&mut Shard::new(0, 1, Config::default()), &table, &cut_log);
            let mut flipped = log.clone();
            if !flipped.is_empty() {
                let at = flip % flipped.len();
                flipped[at] ^= 1 << (flip % 8);
            }
            let _ = replay(&mut Shard::new(0, 1, Config::default()), &table, &flipped);
            let _ = replay(&mut Shard::new(0, 1, Config::default()), &table, &noise);
            let _ = Manifest::parse(&String::from_utf8_lossy(&noise));
        }
    }
}
