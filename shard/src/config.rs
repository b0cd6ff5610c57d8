//! Server configuration: one table of parameters shared by the config file,
//! the command line and `CONFIG GET/SET`. Every shard holds its own copy;
//! `CONFIG SET` is applied to each copy over the mesh, so reading a setting on
//! the data path never touches shared memory.

use crate::args::parse_memory;
use crate::glob::glob_match;

mod rewrite;
pub use rewrite::rewrite;

#[derive(Clone, Debug)]
pub struct Config {
    pub port: u16,
    pub bind: Vec<String>,
    /// 0: one shard per CPU in `cpus`.
    pub shards: usize,
    /// CPU list in the kernel's syntax; empty: the process affinity mask.
    pub cpus: String,
    pub databases: usize,
    pub requirepass: String,
    /// Refuse clients from other than 127.0.0.1 / ::1 while the default
    /// user has no password.
    pub protected_mode: bool,
    /// ACL file read at start and by ACL LOAD, written by ACL SAVE.
    pub aclfile: String,
    pub acllog_max_len: u64,
    /// `acl-pubsub-default allchannels` (true) or `resetchannels`.
    pub acl_pubsub_default_all: bool,
    /// Keyspace notification classes (`crate::notify`'s flags).
    pub notify_keyspace_events: u32,
    /// `user <name> <rules...>` lines of the config file.
    pub users: Vec<Vec<String>>,
    /// `rename-command <name> <new name>` (empty: removed), config file only.
    pub rename_commands: Vec<(String, String)>,
    pub maxclients: u64,
    pub proto_max_bulk_len: u64,
    pub client_query_buffer_limit: u64,
    pub hz: u64,
    pub timeout: u64,
    pub tcp_keepalive: u64,
    pub tcp_backlog: u64,
    pub loglevel: String,
    pub logfile: String,
    pub cluster_mode: ClusterMode,
    /// Address advertised to cluster clients; empty: the bind address.
    pub cluster_announce_ip: String,
    /// Per-core mode: shard i listens on base + i; 0: port + 1 + i.
    pub cluster_port_base: u16,
    /// Topology file listing every host's nodes; empty: this host alone.
    pub cluster_config_file: String,
    pub zset_max_listpack_entries: u64,
    pub zset_max_listpack_value: u64,
    /// Largest sparse HyperLogLog before it turns dense.
    pub hll_sparse_max_bytes: u64,
    /// Elements (positive) or node bytes (-1..-5: 4..64 KB) per list node.
    pub list_max_listpack_size: i64,
    /// Nodes left uncompressed at each end of a list made from now on; the
    /// others are kept LZF-compressed (0: none).
    pub list_compress_depth: i64,
    pub hash_max_listpack_entries: u64,
    pub hash_max_listpack_value: u64,
    pub set_max_intset_entries: u64,
    /// Bytes of one stream node (0: no limit).
    pub stream_node_max_bytes: u64,
    /// Entries of one stream node (0: no limit).
    pub stream_node_max_entries: u64,
    /// Save points: snapshot when at least `changes` writes happened within
    /// `seconds` (`save ""`: none).
    pub save: Vec<(u64, u64)>,
    pub dbfilename: String,
    /// Absolute path of the directory for dump files.
    pub dir: String,
    pub rdbcompression: bool,
    pub rdbchecksum: bool,
    pub stop_writes_on_bgsave_error: bool,
    pub rdb_del_sync_files: bool,
    /// Per-shard append-only files (`appendonly`).
    pub appendonly: bool,
    pub appendfsync: AppendFsync,
    /// Folder of the AOF files and manifest (a name, not a path, as Redis).
    pub appenddirname: String,
    /// Base name of the AOF files (`appendonly.aof`).
    pub appendfilename: String,
    /// Load an AOF whose last command is cut short (and truncate it).
    pub aof_load_truncated: bool,
    /// Rewrite bases as RDB (once the codec is in) rather than commands.
    pub aof_use_rdb_preamble: bool,
    /// No fsync of the AOF while a rewrite runs.
    pub no_appendfsync_on_rewrite: bool,
    /// Redis's debugging pause per key a snapshot walk writes: µs, or ns
    /// when negative; the walk sleeps (the shard keeps serving).
    pub rdb_key_save_delay: i64,
    /// Client sockets on corekv's own io_uring per shard (proxy/src/ring/);
    /// `no`: glommio's reactor, as before.
    pub client_ring: bool,
    /// With `client_ring`: a kernel SQPOLL thread per shard that idles after
    /// this many ms (0: off). For hosts with spare cores.
    pub client_ring_sqpoll_ms: u32,
    /// With `client_ring`: the longest a shard waits for more than one
    /// completion under load, µs (0, the default: it wakes at the first).
    pub client_ring_gather_us: u32,
    /// Ms a script runs before SCRIPT KILL / FUNCTION KILL may stop it
    /// (`busy-reply-threshold`, alias `lua-time-limit`; 0: never).
    pub busy_reply_threshold: u64,
    /// `replicaof host port` at start; `None`: a primary.
    pub replicaof: Option<(String, u16)>,
    pub masterauth: String,
    pub masteruser: String,
    pub replica_read_only: bool,
    pub replica_serve_stale_data: bool,
    pub repl_backlog_size: u64,
    pub repl_backlog_ttl: u64,
    pub repl_diskless_sync: bool,
    pub repl_diskless_sync_delay: u64,
    pub repl_ping_replica_period: u64,
    pub repl_timeout: u64,
    pub min_replicas_to_write: u64,
    pub min_replicas_max_lag: u64,
    pub replica_priority: u64,
    /// How a replica's pending stream is held while it waits for its
    /// snapshot: `no`, `lz4` or `zstd` (issue 13, the study's buffers).
    pub replica_output_buffer_compression: ReplCompression,
    /// zstd's level (lz4 has none); 0: zstd's default.
    pub replica_output_buffer_compression_level: i32,
    /// Raw stream bytes per compressed block.
    pub replica_output_buffer_block_size: u64,
    /// `client-output-buffer-limit`: hard, soft, soft seconds per class.
    pub client_output_buffer_limit: OutputBufferLimits,
    /// Used-memory limit in bytes (0: none) and what goes when it is
    /// reached (shard/src/evict.rs).
    pub maxmemory: u64,
    pub maxmemory_policy: crate::evict::Policy,
    pub maxmemory_samples: u64,
    /// Keys the client-side caching table may hold (0: no limit); each
    /// shard keeps its share.
    pub tracking_table_max_keys: u64,
    pub maxmemory_eviction_tenacity: u64,
    pub lfu_log_factor: u64,
    pub lfu_decay_time: u64,
    /// `tls-*`: the TLS listener, certificates, and where TLS is used.
    pub tls: TlsSettings,
    /// Prometheus text exposition on `GET /metrics` (0: off).
    pub metrics_port: u16,
    /// The slow log (µs; negative: off) and its length.
    pub slowlog_log_slower_than: i64,
    pub slowlog_max_len: u64,
    /// The latency monitor's threshold in ms (0: off).
    pub latency_monitor_threshold: u64,
    /// Per-command latency histograms, and the percentiles INFO
    /// latencystats shows.
    pub latency_tracking: bool,
    pub latency_tracking_info_percentiles: Vec<f64>,
    /// Who may run DEBUG and MODULE LOAD/LOADEX/UNLOAD (Redis 7.0's
    /// `enable-debug-command`, `enable-module-command`; default no).
    pub enable_debug_command: Protected,
    pub enable_module_command: Protected,
    /// Who may CONFIG SET `dir` and `dbfilename` (Redis 7.0's
    /// `enable-protected-configs`).
    pub enable_protected_configs: Protected,
    /// Fork into the background at start (`daemonize`), writing `pidfile`
    /// (Redis's default path when empty) and removing it at exit.
    pub daemonize: bool,
    pub pidfile: String,
    /// Show `corekv <addr>` as the process title (`set-proc-title`).
    pub set_proc_title: bool,
    /// No transparent huge pages for the process (`disable-thp`).
    pub disable_thp: bool,
    /// Client memory beyond which the largest clients are evicted
    /// (`maxmemory-clients`): bytes, or a percentage of `maxmemory` held as
    /// its negative (Redis's PERCENT_CONFIG); 0: no eviction.
    pub maxmemory_clients: i64,
    /// Redis's settings that corekv accepts, validates and reports but that
    /// change nothing here (`Param::stored`), by name; absent: the default.
    pub stored: std::collections::BTreeMap<&'static str, String>,
}

/// Redis's protected actions: allowed to nobody, to everyone, or to
/// clients on the loopback interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protected {
    No,
    Yes,
    Local,
}

impl Protected {
    pub fn name(self) -> &'static str {
        match self {
            Protected::No => "no",
            Protected::Yes => "yes",
            Protected::Local => "local",
        }
    }

    fn parse(values: &[&str]) -> Result<Protected, String> {
        match one(values)?.to_ascii_lowercase().as_str() {
            "no" => Ok(Protected::No),
            "yes" => Ok(Protected::Yes),
            "local" => Ok(Protected::Local),
            _ => Err("argument(s) must be one of the following: no, yes, local".into()),
        }
    }
}

/// Redis's `tls-*` settings (names and defaults of Redis 7.0); files are
/// read and checked at start (proxy/src/tls/).
#[derive(Clone, Debug)]
pub struct TlsSettings {
    /// A TLS listener on every core (0: none).
    pub port: u16,
    pub cert_file: String,
    pub key_file: String,
    pub key_file_pass: String,
    /// The replication link's own certificate; empty: `cert_file`.
    pub client_cert_file: String,
    pub client_key_file: String,
    pub client_key_file_pass: String,
    pub ca_cert_file: String,
    pub ca_cert_dir: String,
    pub auth_clients: TlsAuthClients,
    /// "TLSv1.2 TLSv1.3" when empty.
    pub protocols: String,
    /// TLSv1.2 cipher list (OpenSSL names); empty: rustls's.
    pub ciphers: String,
    /// TLSv1.3 cipher suites (OpenSSL names); empty: rustls's.
    pub ciphersuites: String,
    pub prefer_server_ciphers: bool,
    pub session_caching: bool,
    pub session_cache_size: u64,
    pub session_cache_timeout: u64,
    /// The link to a primary speaks TLS.
    pub replication: bool,
    /// Cluster modes: the nodes' ports (per-core node ports; the emulated
    /// node's announced port) speak TLS.
    pub cluster: bool,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            port: 0,
            cert_file: String::new(),
            key_file: String::new(),
            key_file_pass: String::new(),
            client_cert_file: String::new(),
            client_key_file: String::new(),
            client_key_file_pass: String::new(),
            ca_cert_file: String::new(),
            ca_cert_dir: String::new(),
            auth_clients: TlsAuthClients::Yes,
            protocols: String::new(),
            ciphers: String::new(),
            ciphersuites: String::new(),
            prefer_server_ciphers: false,
            session_caching: true,
            session_cache_size: 20 * 1024,
            session_cache_timeout: 300,
            replication: false,
            cluster: false,
        }
    }
}

impl TlsSettings {
    /// TLS is needed at all: a listener, the replica link or cluster ports.
    pub fn used(&self) -> bool {
        self.port != 0 || self.replication || self.cluster
    }
}

/// `tls-auth-clients`: whether a client must present a certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsAuthClients {
    No,
    Yes,
    Optional,
}

impl TlsAuthClients {
    pub fn name(self) -> &'static str {
        match self {
            TlsAuthClients::No => "no",
            TlsAuthClients::Yes => "yes",
            TlsAuthClients::Optional => "optional",
        }
    }
}

/// Codec of the replica output buffer's blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplCompression {
    No,
    Lz4,
    Zstd,
}

impl ReplCompression {
    pub fn name(self) -> &'static str {
        match self {
            ReplCompression::No => "no",
            ReplCompression::Lz4 => "lz4",
            ReplCompression::Zstd => "zstd",
        }
    }
}

/// One class's `client-output-buffer-limit` (bytes, bytes, seconds; 0: none).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct OutputBufferLimit {
    pub hard: u64,
    pub soft: u64,
    pub soft_seconds: u64,
}

/// Redis's three client classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputBufferLimits {
    pub normal: OutputBufferLimit,
    pub replica: OutputBufferLimit,
    pub pubsub: OutputBufferLimit,
}

impl Default for OutputBufferLimits {
    fn default() -> Self {
        let mb = 1 << 20;
        OutputBufferLimits {
            normal: OutputBufferLimit::default(),
            replica: OutputBufferLimit { hard: 256 * mb, soft: 64 * mb, soft_seconds: 60 },
            pubsub: OutputBufferLimit { hard: 32 * mb, soft: 8 * mb, soft_seconds: 60 },
        }
    }
}

impl OutputBufferLimits {
    fn show(&self) -> String {
        let one = |name: &str, l: &OutputBufferLimit| format!("{name} {} {} {}", l.hard, l.soft, l.soft_seconds);
        format!("{} {} {}", one("normal", &self.normal), one("slave", &self.replica), one("pubsub", &self.pubsub))
    }

    /// `class hard soft seconds` groups, as Redis parses them: every
    /// group is checked before any is applied.
    fn set(&mut self, values: &[&str]) -> Result<(), String> {
        let words: Vec<&str> = values.iter().flat_map(|v| v.split_whitespace()).collect();
        if words.is_empty() || !words.len().is_multiple_of(4) {
            return Err("Wrong number of arguments in buffer limit configuration.".into());
        }
        let mut next = *self;
        for group in words.chunks(4) {
            let class = match group[0].to_ascii_lowercase().as_str() {
                "normal" => &mut next.normal,
                "slave" | "replica" => &mut next.replica,
                "pubsub" => &mut next.pubsub,
                _ => return Err("Invalid client class specified in buffer limit configuration.".into()),
            };
            let hard = parse_memory(group[1]);
            let soft = parse_memory(group[2]);
            let secs = group[3].parse::<u64>().ok();
            match (hard, soft, secs) {
                (Some(hard), Some(soft), Some(soft_seconds)) => *class = OutputBufferLimit { hard, soft, soft_seconds },
                _ => return Err("Error in hard, soft or soft_seconds setting in buffer limit configuration.".into()),
            }
        }
        *self = next;
        Ok(())
    }
}

/// When the AOF is fsynced (`appendfsync`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendFsync {
    /// Before any reply to a write leaves the server.
    Always,
    /// Once a second, in the background.
    EverySec,
    /// Left to the kernel.
    No,
}

impl AppendFsync {
    pub fn name(self) -> &'static str {
        match self {
            AppendFsync::Always => "always",
            AppendFsync::EverySec => "everysec",
            AppendFsync::No => "no",
        }
    }
}

/// How the process presents itself to Redis Cluster clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterMode {
    /// A plain Redis endpoint.
    No,
    /// One node owning every slot.
    Emulated,
    /// Every shard a node with its own port.
    PerCore,
}

impl ClusterMode {
    pub fn name(self) -> &'static str {
        match self {
            ClusterMode::No => "no",
            ClusterMode::Emulated => "emulated",
            ClusterMode::PerCore => "per-core",
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            port: 6379,
            bind: vec!["127.0.0.1".into()],
            shards: 0,
            cpus: String::new(),
            databases: 16,
            requirepass: String::new(),
            protected_mode: true,
            aclfile: String::new(),
            acllog_max_len: 128,
            acl_pubsub_default_all: false,
            notify_keyspace_events: 0,
            users: Vec::new(),
            rename_commands: Vec::new(),
            maxclients: 10000,
            proto_max_bulk_len: 512 << 20,
            client_query_buffer_limit: 1 << 30,
            hz: 10,
            timeout: 0,
            tcp_keepalive: 300,
            tcp_backlog: 511,
            loglevel: "notice".into(),
            logfile: String::new(),
            cluster_mode: ClusterMode::No,
            cluster_announce_ip: String::new(),
            cluster_port_base: 0,
            cluster_config_file: String::new(),
            zset_max_listpack_entries: 128,
            zset_max_listpack_value: 64,
            hll_sparse_max_bytes: 3000,
            list_max_listpack_size: -2,
            list_compress_depth: 0,
            stream_node_max_bytes: 4096,
            stream_node_max_entries: 100,
            hash_max_listpack_entries: 512,
            hash_max_listpack_value: 64,
            set_max_intset_entries: 512,
            save: vec![(3600, 1), (300, 100), (60, 10000)],
            dbfilename: "dump.rdb".into(),
            dir: std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_else(|_| "/".into()),
            rdbcompression: true,
            rdbchecksum: true,
            stop_writes_on_bgsave_error: true,
            rdb_del_sync_files: false,
            appendonly: false,
            appendfsync: AppendFsync::EverySec,
            appenddirname: "appendonlydir".into(),
            appendfilename: "appendonly.aof".into(),
            aof_load_truncated: true,
            aof_use_rdb_preamble: true,
            no_appendfsync_on_rewrite: false,
            rdb_key_save_delay: 0,
            client_ring: true,
            client_ring_sqpoll_ms: 0,
            client_ring_gather_us: 0,
            busy_reply_threshold: 5000,
            replicaof: None,
            masterauth: String::new(),
            masteruser: String::new(),
            replica_read_only: true,
            replica_serve_stale_data: true,
            repl_backlog_size: 1 << 20,
            repl_backlog_ttl: 3600,
            repl_diskless_sync: true,
            repl_diskless_sync_delay: 5,
            repl_ping_replica_period: 10,
            repl_timeout: 60,
            min_replicas_to_write: 0,
            min_replicas_max_lag: 10,
            replica_priority: 100,
            replica_output_buffer_compression: ReplCompression::No,
            replica_output_buffer_compression_level: 0,
            replica_output_buffer_block_size: 16 << 10,
            client_output_buffer_limit: OutputBufferLimits::default(),
            maxmemory: 0,
            maxmemory_policy: crate::evict::Policy::NoEviction,
            maxmemory_samples: 5,
            tracking_table_max_keys: 1_000_000,
            maxmemory_eviction_tenacity: 10,
            lfu_log_factor: 10,
            lfu_decay_time: 1,
            tls: TlsSettings::default(),
            metrics_port: 0,
            slowlog_log_slower_than: 10_000,
            slowlog_max_len: 128,
            latency_monitor_threshold: 0,
            latency_tracking: true,
            latency_tracking_info_percentiles: vec![50.0, 99.0, 99.9],
            enable_debug_command: Protected::No,
            enable_module_command: Protected::No,
            enable_protected_configs: Protected::No,
            daemonize: false,
            pidfile: String::new(),
            set_proc_title: true,
            disable_thp: true,
            maxmemory_clients: 0,
            stored: Default::default(),
        }
    }
}

/// Settings Redis 7.0 refuses to CONFIG SET unless `enable-protected-configs`
/// allows it.
pub const PROTECTED: &[&str] = &["dir", "dbfilename"];

fn yes_no(values: &[&str]) -> Result<bool, String> {
    match one(values)?.to_ascii_lowercase().as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err("argument must be 'yes' or 'no'".into()),
    }
}

fn show_yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

/// `save 3600 1 300 100` as pairs; one empty value for none (Redis's
/// setConfigSaveOption: strtoll's numbers, seconds >= 1, changes >= 0).
fn save_points(values: &[&str]) -> Result<Vec<(u64, u64)>, String> {
    let values = if let [""] = values { &[][..] } else { values };
    if !values.len().is_multiple_of(2) {
        return Err("Invalid save parameters".into());
    }
    values
        .chunks(2)
        .map(|p| match (strtoll(p[0]), strtoll(p[1])) {
            (Some(s), Some(c)) if s >= 1 && c >= 0 => Ok((s as u64, c as u64)),
            _ => Err("Invalid save parameters".into()),
        })
        .collect()
}

/// C's strtoll(s, &end, 10) where the whole text must be read: leading
/// blanks and a sign allowed, "" is 0, out of range saturates.
fn strtoll(s: &str) -> Option<i64> {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (negative, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if !digits.bytes().all(|b| b.is_ascii_digit()) || (digits.is_empty() && !s.is_empty()) {
        return None;
    }
    let magnitude = digits.bytes().fold(0i128, |n, d| (n * 10 + (d - b'0') as i128).min(i64::MAX as i128 + 1));
    let n = if negative { -magnitude } else { magnitude };
    Some(n.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
}

type Getter = fn(&Config) -> String;
type Setter = fn(&mut Config, &[&str]) -> Result<(), String>;

pub struct Param {
    pub name: &'static str,
    /// Settable with CONFIG SET (others only at start).
    pub mutable: bool,
    get: Getter,
    set: Setter,
}

impl Param {
    /// Redis's HIDDEN_CONFIG: answered by CONFIG GET under its exact name,
    /// never matched by a pattern.
    pub fn hidden(&self) -> bool {
        matches!(
            self.name,
            "rdb-key-save-delay"
                | "key-load-delay"
                | "loading-process-events-interval-bytes"
                | "watchdog-period"
                | "use-exit-on-panic"
        )
    }

    /// Redis's MULTI_ARG_CONFIG: several values on a line; one value in a
    /// file or on the command line is split as a line would be, one given
    /// to CONFIG SET at its spaces.
    pub fn multi_arg(&self) -> bool {
        matches!(
            self.name,
            "save"
                | "client-output-buffer-limit"
                | "bind"
                | "replicaof"
                | "slaveof"
                | "latency-tracking-info-percentiles"
        )
    }

    /// A Redis setting kept only as a value (`Config::stored`): its
    /// reason to change nothing in corekv is in `STORED_WHY`.
    pub fn stored(&self) -> bool {
        STORED_WHY.iter().any(|(name, _)| *name == self.name)
    }
}

/// Redis 7.0 settings corekv accepts with Redis's parsing, names, ranges
/// and defaults, answers in CONFIG GET and rewrites, but that have nothing
/// to act on here, and why.
pub const STORED_WHY: &[(&str, &str)] = &[
    ("key-load-delay", "a debugging pause per key loaded; corekv loads without it"),
    ("loading-process-events-interval-bytes", "corekv's shards load before serving any client"),
    ("watchdog-period", "corekv has no software watchdog"),
    ("use-exit-on-panic", "a panic aborts the process"),
    ("always-show-logo", "corekv prints no logo"),
    ("io-threads", "every shard does its own I/O"),
    ("io-threads-do-reads", "every shard does its own I/O"),
    ("syslog-enabled", "corekv logs to stdout or logfile only"),
    ("syslog-ident", "corekv logs to stdout or logfile only"),
    ("syslog-facility", "corekv logs to stdout or logfile only"),
    ("unixsocket", "corekv listens on TCP only"),
    ("unixsocketperm", "corekv listens on TCP only"),
    ("supervised", "no upstart/systemd readiness notification"),
    ("server_cpulist", "shards are placed by `cpus`"),
    ("bio_cpulist", "corekv has no background I/O threads"),
    ("aof_rewrite_cpulist", "AOF rewrites run on the shards"),
    ("bgsave_cpulist", "snapshots run on the shards"),
    ("cluster-port", "corekv has no cluster bus"),
    ("socket-mark-id", "listeners get no SO_MARK"),
];

fn one<'a>(values: &[&'a str]) -> Result<&'a str, String> {
    match values {
        [v] => Ok(v),
        _ => Err("wrong number of arguments".into()),
    }
}

fn int_in(values: &[&str], min: i64, max: i64) -> Result<i64, String> {
    let v: i64 = one(values)?.parse().map_err(|_| "argument couldn't be parsed into an integer".to_string())?;
    if v < min || v > max {
        return Err(format!("argument must be between {min} and {max} inclusive"));
    }
    Ok(v)
}

fn memory_in(values: &[&str], min: u64) -> Result<u64, String> {
    let v = parse_memory(one(values)?).ok_or_else(|| "argument must be a memory value".to_string())?;
    if v < min || v > i64::MAX as u64 {
        return Err(format!("argument must be between {min} and {} inclusive", i64::MAX));
    }
    Ok(v)
}

macro_rules! param {
    ($name:literal, $mutable:expr, |$c:ident| $get:expr, |$cs:ident, $v:ident| $set:expr) => {
        Param {
            name: $name,
            mutable: $mutable,
            get: |$c: &Config| $get,
            set: |$cs: &mut Config, $v: &[&str]| {
                $set;
                Ok(())
            },
        }
    };
}

/// A Redis setting kept as its normalised value (`Param::stored`):
/// `check` turns the values into the text CONFIG GET answers.
macro_rules! stored {
    ($name:literal, $mutable:expr, $default:expr, $check:expr) => {
        Param {
            name: $name,
            mutable: $mutable,
            get: |c: &Config| c.stored.get($name).cloned().unwrap_or_else(|| String::from($default)),
            set: |c: &mut Config, v: &[&str]| {
                let check: fn(&[&str]) -> Result<String, String> = $check;
                let value = check(v)?;
                c.stored.insert($name, value);
                Ok(())
            },
        }
    };
}

fn yes_no_text(values: &[&str]) -> Result<String, String> {
    yes_no(values).map(show_yes_no)
}

fn int_text(values: &[&str], min: i64, max: i64) -> Result<String, String> {
    int_in(values, min, max).map(|v| v.to_string())
}

/// One of `names` (Redis's enum configs), as Redis spells it.
fn enum_text(values: &[&str], names: &[&str]) -> Result<String, String> {
    let v = one(values)?;
    names
        .iter()
        .find(|n| n.eq_ignore_ascii_case(v))
        .map(|n| n.to_string())
        .ok_or_else(|| format!("argument(s) must be one of the following: {}", names.join(", ")))
}

/// Redis's OCTAL_CONFIG (`unixsocketperm`): octal in, octal out.
fn octal_text(values: &[&str], max: i64) -> Result<String, String> {
    let v = i64::from_str_radix(one(values)?, 8).map_err(|_| "argument couldn't be parsed as an octal number")?;
    if !(0..=max).contains(&v) {
        return Err(format!("argument must be between 0 and {max:o} inclusive"));
    }
    Ok(format!("{v:o}"))
}

/// `maxmemory-clients` (MEMORY_CONFIG | PERCENT_CONFIG, -100..SSIZE_MAX):
/// a memory value, or `N%` held as -N.
fn memory_or_percent(values: &[&str]) -> Result<i64, String> {
    let v = one(values)?;
    let parsed = match memtoull(v) {
        Some(bytes) => Some(bytes as i64),
        None => v
            .strip_suffix('%')
            .filter(|n| !n.is_empty())
            .and_then(|n| crate::args::parse_i64(n.as_bytes()))
            .filter(|n| *n >= 0)
            .map(|n| -n),
    };
    let n = parsed.ok_or("argument must be a memory or percent value")?;
    if n < -100 {
        return Err("percentage argument must be less or equal to 100".into());
    }
    Ok(n)
}

/// Redis's memtoull: digits and an optional unit (b k kb m mb g gb, any
/// case), strtoull's saturation on overflow, the unit's product wrapping.
fn memtoull(s: &str) -> Option<u64> {
    if s.starts_with('-') {
        return None;
    }
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let mul: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    if digits.len() >= 128 {
        return None;
    }
    let value = digits
        .bytes()
        .fold(0u64, |n, d| n.checked_mul(10).and_then(|n| n.checked_add((d - b'0') as u64)).unwrap_or(u64::MAX));
    Some(value.wrapping_mul(mul))
}

fn show_memory_or_percent(v: i64) -> String {
    if v < 0 {
        format!("{}%", -v)
    } else {
        v.to_string()
    }
}

pub static PARAMS: &[Param] = &[
    param!("port", true, |c| c.port.to_string(), |c, v| c.port = int_in(v, 0, 65535)? as u16),
    // Redis's setConfigBindOption: at most CONFIG_BINDADDR_MAX addresses;
    // none (a single empty one) listens on no TCP address.
    param!("bind", true, |c| c.bind.join(" "), |c, v| {
        if v.len() > 16 {
            return Err("Too many bind addresses specified.".into());
        }
        c.bind = match v {
            [""] => Vec::new(),
            v => v.iter().map(|s| s.to_string()).collect(),
        }
    }),
    param!("shards", false, |c| c.shards.to_string(), |c, v| c.shards = int_in(v, 0, 1024)? as usize),
    param!("cpus", false, |c| c.cpus.clone(), |c, v| c.cpus = one(v)?.to_string()),
    param!("databases", false, |c| c.databases.to_string(), |c, v| c.databases =
        int_in(v, 1, i32::MAX as i64)? as usize),
    param!("requirepass", true, |c| c.requirepass.clone(), |c, v| c.requirepass = one(v)?.to_string()),
    param!("protected-mode", true, |c| show_yes_no(c.protected_mode), |c, v| c.protected_mode = yes_no(v)?),
    param!("aclfile", false, |c| c.aclfile.clone(), |c, v| c.aclfile = one(v)?.to_string()),
    param!("acllog-max-len", true, |c| c.acllog_max_len.to_string(), |c, v| c.acllog_max_len =
        int_in(v, 0, i64::MAX)? as u64),
    param!(
        "acl-pubsub-default",
        true,
        |c| if c.acl_pubsub_default_all { "allchannels" } else { "resetchannels" }.to_string(),
        |c, v| c.acl_pubsub_default_all = match one(v)?.to_ascii_lowercase().as_str() {
            "allchannels" => true,
            "resetchannels" => false,
            _ => return Err("argument(s) must be one of the following: allchannels, resetchannels".into()),
        }
    ),
    param!("notify-keyspace-events", true, |c| crate::notify::flags_to_string(c.notify_keyspace_events), |c, v| c
        .notify_keyspace_events =
        crate::notify::parse_flags(one(v)?).ok_or("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.")?),
    param!("maxclients", true, |c| c.maxclients.to_string(), |c, v| c.maxclients =
        int_in(v, 1, u32::MAX as i64)? as u64),
    param!("proto-max-bulk-len", true, |c| c.proto_max_bulk_len.to_string(), |c, v| c.proto_max_bulk_len =
        memory_in(v, 1 << 20)?),
    param!("client-query-buffer-limit", true, |c| c.client_query_buffer_limit.to_string(), |c, v| c
        .client_query_buffer_limit =
        memory_in(v, 1 << 20)?),
    // Redis clamps hz into 1..=500 rather than refusing.
    param!("hz", true, |c| c.hz.to_string(), |c, v| c.hz = int_in(v, 0, i32::MAX as i64)?.clamp(1, 500) as u64),
    param!("timeout", true, |c| c.timeout.to_string(), |c, v| c.timeout = int_in(v, 0, i32::MAX as i64)? as u64),
    param!("tcp-keepalive", true, |c| c.tcp_keepalive.to_string(), |c, v| c.tcp_keepalive =
        int_in(v, 0, i32::MAX as i64)? as u64),
    param!("tcp-backlog", false, |c| c.tcp_backlog.to_string(), |c, v| c.tcp_backlog =
        int_in(v, 0, i32::MAX as i64)? as u64),
    param!("loglevel", true, |c| c.loglevel.clone(), |c, v| {
        let level = one(v)?.to_ascii_lowercase();
        if !["debug", "verbose", "notice", "warning", "nothing"].contains(&level.as_str()) {
            return Err("argument(s) must be one of the following: debug, verbose, notice, warning, nothing".into());
        }
        c.loglevel = level
    }),
    param!("logfile", false, |c| c.logfile.clone(), |c, v| c.logfile = one(v)?.to_string()),
    param!("cluster-mode", false, |c| c.cluster_mode.name().into(), |c, v| {
        c.cluster_mode = match one(v)?.to_ascii_lowercase().as_str() {
            "no" => ClusterMode::No,
            "emulated" => ClusterMode::Emulated,
            "per-core" => ClusterMode::PerCore,
            _ => return Err("argument(s) must be one of the following: no, emulated, per-core".into()),
        }
    }),
    param!("cluster-announce-ip", false, |c| c.cluster_announce_ip.clone(), |c, v| c.cluster_announce_ip =
        one(v)?.to_string()),
    param!("cluster-port-base", false, |c| c.cluster_port_base.to_string(), |c, v| c.cluster_port_base =
        int_in(v, 0, 65535)? as u16),
    param!("cluster-config-file", false, |c| c.cluster_config_file.clone(), |c, v| c.cluster_config_file =
        one(v)?.to_string()),
    param!("hll-sparse-max-bytes", true, |c| c.hll_sparse_max_bytes.to_string(), |c, v| c.hll_sparse_max_bytes =
        memory_in(v, 0)?),
    param!("save", true, |c| c.save.iter().map(|(s, n)| format!("{s} {n}")).collect::<Vec<_>>().join(" "), |c, v| c
        .save =
        save_points(v)?),
    param!("dbfilename", true, |c| c.dbfilename.clone(), |c, v| {
        let name = one(v)?;
        if name.contains('/') {
            return Err("dbfilename can't be a path, just a filename".into());
        }
        c.dbfilename = name.to_string()
    }),
    // Redis chdir()s; corekv keeps the absolute path (the process's working
    // directory is shared by every core).
    param!("dir", true, |c| c.dir.clone(), |c, v| {
        let dir = std::fs::canonicalize(one(v)?).map_err(|e| crate::config::os_reason(&e))?;
        if !dir.is_dir() {
            return Err("Not a directory".into());
        }
        c.dir = dir.display().to_string()
    }),
    param!("rdbcompression", true, |c| show_yes_no(c.rdbcompression), |c, v| c.rdbcompression = yes_no(v)?),
    param!("rdbchecksum", false, |c| show_yes_no(c.rdbchecksum), |c, v| c.rdbchecksum = yes_no(v)?),
    param!("stop-writes-on-bgsave-error", true, |c| show_yes_no(c.stop_writes_on_bgsave_error), |c, v| c
        .stop_writes_on_bgsave_error =
        yes_no(v)?),
    param!("rdb-del-sync-files", true, |c| show_yes_no(c.rdb_del_sync_files), |c, v| c.rdb_del_sync_files = yes_no(v)?),
    // CONFIG SET switches the AOF on (a fresh AOF of the data) or off.
    param!("appendonly", true, |c| show_yes_no(c.appendonly), |c, v| c.appendonly = yes_no(v)?),
    param!("appendfsync", true, |c| c.appendfsync.name().into(), |c, v| {
        c.appendfsync = match one(v)?.to_ascii_lowercase().as_str() {
            "always" => AppendFsync::Always,
            "everysec" => AppendFsync::EverySec,
            "no" => AppendFsync::No,
            _ => return Err("argument(s) must be one of the following: always, everysec, no".into()),
        }
    }),
    param!("appenddirname", false, |c| c.appenddirname.clone(), |c, v| {
        let name = one(v)?;
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err("appenddirname can't be a path, just a dirname".into());
        }
        c.appenddirname = name.to_string()
    }),
    param!("appendfilename", false, |c| c.appendfilename.clone(), |c, v| {
        let name = one(v)?;
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err("appendfilename can't be a path, just a filename".into());
        }
        c.appendfilename = name.to_string()
    }),
    param!("aof-load-truncated", true, |c| show_yes_no(c.aof_load_truncated), |c, v| c.aof_load_truncated = yes_no(v)?),
    param!("aof-use-rdb-preamble", true, |c| show_yes_no(c.aof_use_rdb_preamble), |c, v| c.aof_use_rdb_preamble =
        yes_no(v)?),
    param!("no-appendfsync-on-rewrite", true, |c| show_yes_no(c.no_appendfsync_on_rewrite), |c, v| c
        .no_appendfsync_on_rewrite =
        yes_no(v)?),
    param!("busy-reply-threshold", true, |c| c.busy_reply_threshold.to_string(), |c, v| c.busy_reply_threshold =
        int_in(v, 0, i64::MAX)? as u64),
    param!("lua-time-limit", true, |c| c.busy_reply_threshold.to_string(), |c, v| c.busy_reply_threshold =
        int_in(v, 0, i64::MAX)? as u64),
    param!("rdb-key-save-delay", true, |c| c.rdb_key_save_delay.to_string(), |c, v| c.rdb_key_save_delay =
        int_in(v, i32::MIN as i64, i32::MAX as i64)?),
    // Sorted-set encoding thresholds; the ziplist names are Redis 7.0's aliases.
    param!("zset-max-listpack-entries", true, |c| c.zset_max_listpack_entries.to_string(), |c, v| c
        .zset_max_listpack_entries =
        int_in(v, 0, i64::MAX)? as u64),
    param!("zset-max-ziplist-entries", true, |c| c.zset_max_listpack_entries.to_string(), |c, v| c
        .zset_max_listpack_entries =
        int_in(v, 0, i64::MAX)? as u64),
    param!("zset-max-listpack-value", true, |c| c.zset_max_listpack_value.to_string(), |c, v| c
        .zset_max_listpack_value =
        memory_in(v, 0)?),
    param!("zset-max-ziplist-value", true, |c| c.zset_max_listpack_value.to_string(), |c, v| c
        .zset_max_listpack_value =
        memory_in(v, 0)?),
    param!("stream-node-max-bytes", true, |c| c.stream_node_max_bytes.to_string(), |c, v| c.stream_node_max_bytes =
        memory_in(v, 0)?),
    param!("stream-node-max-entries", true, |c| c.stream_node_max_entries.to_string(), |c, v| c
        .stream_node_max_entries =
        int_in(v, 0, i64::MAX)? as u64),
    // Encoding thresholds; the ziplist names are Redis 7.0's aliases.
    param!("list-max-listpack-size", true, |c| c.list_max_listpack_size.to_string(), |c, v| c.list_max_listpack_size =
        int_in(v, i32::MIN as i64, i32::MAX as i64)?),
    param!("list-max-ziplist-size", true, |c| c.list_max_listpack_size.to_string(), |c, v| c.list_max_listpack_size =
        int_in(v, i32::MIN as i64, i32::MAX as i64)?),
    // Redis 7.0 applies it to lists made after the change, not to existing ones.
    param!("list-compress-depth", true, |c| c.list_compress_depth.to_string(), |c, v| c.list_compress_depth =
        int_in(v, 0, i32::MAX as i64)?),
    param!("hash-max-listpack-entries", true, |c| c.hash_max_listpack_entries.to_string(), |c, v| c
        .hash_max_listpack_entries =
        int_in(v, 0, i64::MAX)? as u64),
    param!("hash-max-ziplist-entries", true, |c| c.hash_max_listpack_entries.to_string(), |c, v| c
        .hash_max_listpack_entries =
        int_in(v, 0, i64::MAX)? as u64),
    param!("hash-max-listpack-value", true, |c| c.hash_max_listpack_value.to_string(), |c, v| c
        .hash_max_listpack_value =
        memory_in(v, 0)?),
    param!("hash-max-ziplist-value", true, |c| c.hash_max_listpack_value.to_string(), |c, v| c
        .hash_max_listpack_value =
        memory_in(v, 0)?),
    param!("set-max-intset-entries", true, |c| c.set_max_intset_entries.to_string(), |c, v| c.set_max_intset_entries =
        int_in(v, 0, i64::MAX)? as u64),
    param!("client-ring", false, |c| if c.client_ring { "yes" } else { "no" }.into(), |c, v| {
        c.client_ring = match one(v)?.to_ascii_lowercase().as_str() {
            "yes" => true,
            "no" => false,
            _ => return Err("argument must be 'yes' or 'no'".into()),
        }
    }),
    // Replication (proxy/src/replication/).
    param!(
        "replicaof",
        false,
        |c| c.replicaof.as_ref().map(|(h, p)| format!("{h} {p}")).unwrap_or_default(),
        |c, v| { c.replicaof = replica_of(v)? }
    ),
    param!("slaveof", false, |c| c.replicaof.as_ref().map(|(h, p)| format!("{h} {p}")).unwrap_or_default(), |c, v| {
        c.replicaof = replica_of(v)?
    }),
    param!("masterauth", true, |c| c.masterauth.clone(), |c, v| c.masterauth = one(v)?.to_string()),
    param!("masteruser", true, |c| c.masteruser.clone(), |c, v| c.masteruser = one(v)?.to_string()),
    param!("replica-read-only", true, |c| show_yes_no(c.replica_read_only), |c, v| c.replica_read_only = yes_no(v)?),
    param!("slave-read-only", true, |c| show_yes_no(c.replica_read_only), |c, v| c.replica_read_only = yes_no(v)?),
    param!("replica-serve-stale-data", true, |c| show_yes_no(c.replica_serve_stale_data), |c, v| c
        .replica_serve_stale_data =
        yes_no(v)?),
    param!("slave-serve-stale-data", true, |c| show_yes_no(c.replica_serve_stale_data), |c, v| c
        .replica_serve_stale_data =
        yes_no(v)?),
    param!("repl-backlog-size", true, |c| c.repl_backlog_size.to_string(), |c, v| c.repl_backlog_size =
        memory_in(v, 1)?),
    param!("repl-backlog-ttl", true, |c| c.repl_backlog_ttl.to_string(), |c, v| c.repl_backlog_ttl =
        int_in(v, 0, i64::MAX)? as u64),
    param!("repl-diskless-sync", true, |c| show_yes_no(c.repl_diskless_sync), |c, v| c.repl_diskless_sync = yes_no(v)?),
    param!("repl-diskless-sync-delay", true, |c| c.repl_diskless_sync_delay.to_string(), |c, v| c
        .repl_diskless_sync_delay =
        int_in(v, 0, i32::MAX as i64)? as u64),
    param!("repl-ping-replica-period", true, |c| c.repl_ping_replica_period.to_string(), |c, v| c
        .repl_ping_replica_period =
        int_in(v, 1, i32::MAX as i64)? as u64),
    param!("repl-ping-slave-period", true, |c| c.repl_ping_replica_period.to_string(), |c, v| c
        .repl_ping_replica_period =
        int_in(v, 1, i32::MAX as i64)? as u64),
    param!("repl-timeout", true, |c| c.repl_timeout.to_string(), |c, v| c.repl_timeout =
        int_in(v, 1, i32::MAX as i64)? as u64),
    param!("min-replicas-to-write", true, |c| c.min_replicas_to_write.to_string(), |c, v| c.min_replicas_to_write =
        int_in(v, 0, i32::MAX as i64)? as u64),
    param!("min-slaves-to-write", true, |c| c.min_replicas_to_write.to_string(), |c, v| c.min_replicas_to_write =
        int_in(v, 0, i32::MAX as i64)? as u64),
    param!("min-replicas-max-lag", true, |c| c.min_replicas_max_lag.to_string(), |c, v| c.min_replicas_max_lag =
        int_in(v, 0, i32::MAX as i64)? as u64),
    param!("min-slaves-max-lag", true, |c| c.min_replicas_max_lag.to_string(), |c, v| c.min_replicas_max_lag =
        int_in(v, 0, i32::MAX as i64)? as u64),
    param!("replica-priority", true, |c| c.replica_priority.to_string(), |c, v| c.replica_priority =
        int_in(v, 0, i32::MAX as i64)? as u64),
    param!("slave-priority", true, |c| c.replica_priority.to_string(), |c, v| c.replica_priority =
        int_in(v, 0, i32::MAX as i64)? as u64),
    param!("replica-output-buffer-compression", true, |c| c.replica_output_buffer_compression.name().into(), |c, v| {
        c.replica_output_buffer_compression = match one(v)?.to_ascii_lowercase().as_str() {
            "no" => ReplCompression::No,
            "lz4" => ReplCompression::Lz4,
            "zstd" => ReplCompression::Zstd,
            _ => return Err("argument(s) must be one of the following: no, lz4, zstd".into()),
        }
    }),
    param!(
        "replica-output-buffer-compression-level",
        true,
        |c| c.replica_output_buffer_compression_level.to_string(),
        |c, v| c.replica_output_buffer_compression_level = int_in(v, -7, 22)? as i32
    ),
    param!("replica-output-buffer-block-size", true, |c| c.replica_output_buffer_block_size.to_string(), |c, v| c
        .replica_output_buffer_block_size =
        memory_in(v, 1024)?.min(64 << 20)),
    param!("client-output-buffer-limit", true, |c| c.client_output_buffer_limit.show(), |c, v| c
        .client_output_buffer_limit
        .set(v)?),
    // Eviction (shard/src/evict.rs), Redis's names, ranges and defaults.
    param!("maxmemory", true, |c| c.maxmemory.to_string(), |c, v| c.maxmemory = memory_in(v, 0)?),
    param!("maxmemory-policy", true, |c| c.maxmemory_policy.name().into(), |c, v| {
        c.maxmemory_policy = crate::evict::Policy::parse(one(v)?).ok_or_else(|| {
            format!("argument(s) must be one of the following: {}", crate::evict::Policy::NAMES.join(", "))
        })?
    }),
    param!("tracking-table-max-keys", true, |c| c.tracking_table_max_keys.to_string(), |c, v| c
        .tracking_table_max_keys =
        int_in(v, 0, i64::MAX)? as u64),
    param!("maxmemory-samples", true, |c| c.maxmemory_samples.to_string(), |c, v| c.maxmemory_samples =
        int_in(v, 1, i32::MAX as i64)? as u64),
    param!("maxmemory-eviction-tenacity", true, |c| c.maxmemory_eviction_tenacity.to_string(), |c, v| c
        .maxmemory_eviction_tenacity =
        int_in(v, 0, 100)? as u64),
    param!("lfu-log-factor", true, |c| c.lfu_log_factor.to_string(), |c, v| c.lfu_log_factor =
        int_in(v, 0, i32::MAX as i64)? as u64),
    param!("lfu-decay-time", true, |c| c.lfu_decay_time.to_string(), |c, v| c.lfu_decay_time =
        int_in(v, 0, i32::MAX as i64)? as u64),
    param!("client-ring-sqpoll", false, |c| c.client_ring_sqpoll_ms.to_string(), |c, v| c.client_ring_sqpoll_ms =
        int_in(v, 0, 60_000)? as u32),
    param!("client-ring-gather-us", false, |c| c.client_ring_gather_us.to_string(), |c, v| c.client_ring_gather_us =
        int_in(v, 0, 1000)? as u32),
    // TLS (proxy/src/tls/): CONFIG SET builds every core's configuration
    // anew (new connections use it); the listeners (tls-port, tls-cluster)
    // are set at start.
    param!("tls-port", false, |c| c.tls.port.to_string(), |c, v| c.tls.port = int_in(v, 0, 65535)? as u16),
    param!("tls-cert-file", true, |c| c.tls.cert_file.clone(), |c, v| c.tls.cert_file = one(v)?.to_string()),
    param!("tls-key-file", true, |c| c.tls.key_file.clone(), |c, v| c.tls.key_file = one(v)?.to_string()),
    param!("tls-key-file-pass", true, |c| c.tls.key_file_pass.clone(), |c, v| c.tls.key_file_pass =
        one(v)?.to_string()),
    param!("tls-client-cert-file", true, |c| c.tls.client_cert_file.clone(), |c, v| c.tls.client_cert_file =
        one(v)?.to_string()),
    param!("tls-client-key-file", true, |c| c.tls.client_key_file.clone(), |c, v| c.tls.client_key_file =
        one(v)?.to_string()),
    param!("tls-client-key-file-pass", true, |c| c.tls.client_key_file_pass.clone(), |c, v| c
        .tls
        .client_key_file_pass =
        one(v)?.to_string()),
    param!("tls-ca-cert-file", true, |c| c.tls.ca_cert_file.clone(), |c, v| c.tls.ca_cert_file = one(v)?.to_string()),
    param!("tls-ca-cert-dir", true, |c| c.tls.ca_cert_dir.clone(), |c, v| c.tls.ca_cert_dir = one(v)?.to_string()),
    param!("tls-auth-clients", true, |c| c.tls.auth_clients.name().into(), |c, v| {
        c.tls.auth_clients = match one(v)?.to_ascii_lowercase().as_str() {
            "no" => TlsAuthClients::No,
            "yes" => TlsAuthClients::Yes,
            "optional" => TlsAuthClients::Optional,
            _ => return Err("argument(s) must be one of the following: no, yes, optional".into()),
        }
    }),
    param!("tls-protocols", true, |c| c.tls.protocols.clone(), |c, v| c.tls.protocols = v.join(" ")),
    param!("tls-ciphers", true, |c| c.tls.ciphers.clone(), |c, v| c.tls.ciphers = one(v)?.to_string()),
    param!("tls-ciphersuites", true, |c| c.tls.ciphersuites.clone(), |c, v| c.tls.ciphersuites = one(v)?.to_string()),
    param!("tls-prefer-server-ciphers", true, |c| show_yes_no(c.tls.prefer_server_ciphers), |c, v| c
        .tls
        .prefer_server_ciphers =
        yes_no(v)?),
    param!("tls-session-caching", true, |c| show_yes_no(c.tls.session_caching), |c, v| c.tls.session_caching =
        yes_no(v)?),
    param!("tls-session-cache-size", true, |c| c.tls.session_cache_size.to_string(), |c, v| c.tls.session_cache_size =
        int_in(v, 0, i32::MAX as i64)? as u64),
    param!("tls-session-cache-timeout", true, |c| c.tls.session_cache_timeout.to_string(), |c, v| c
        .tls
        .session_cache_timeout =
        int_in(v, 0, i32::MAX as i64)? as u64),
    param!("tls-replication", true, |c| show_yes_no(c.tls.replication), |c, v| c.tls.replication = yes_no(v)?),
    param!("tls-cluster", false, |c| show_yes_no(c.tls.cluster), |c, v| c.tls.cluster = yes_no(v)?),
    param!("metrics-port", false, |c| c.metrics_port.to_string(), |c, v| c.metrics_port = int_in(v, 0, 65535)? as u16),
    // The slow log and the latency monitor (shard/src/observe/).
    param!("slowlog-log-slower-than", true, |c| c.slowlog_log_slower_than.to_string(), |c, v| c
        .slowlog_log_slower_than =
        int_in(v, -1, i64::MAX)?),
    param!("slowlog-max-len", true, |c| c.slowlog_max_len.to_string(), |c, v| c.slowlog_max_len =
        int_in(v, 0, i64::MAX)? as u64),
    param!("latency-monitor-threshold", true, |c| c.latency_monitor_threshold.to_string(), |c, v| c
        .latency_monitor_threshold =
        int_in(v, 0, i64::MAX)? as u64),
    param!("latency-tracking", true, |c| show_yes_no(c.latency_tracking), |c, v| c.latency_tracking = yes_no(v)?),
    param!(
        "latency-tracking-info-percentiles",
        true,
        |c| c.latency_tracking_info_percentiles.iter().map(|p| trim_double(*p)).collect::<Vec<_>>().join(" "),
        |c, v| c.latency_tracking_info_percentiles = percentiles(v)?
    ),
    param!("enable-debug-command", false, |c| c.enable_debug_command.name().into(), |c, v| c.enable_debug_command =
        Protected::parse(v)?),
    param!("enable-module-command", false, |c| c.enable_module_command.name().into(), |c, v| c.enable_module_command =
        Protected::parse(v)?),
    param!("enable-protected-configs", false, |c| c.enable_protected_configs.name().into(), |c, v| c
        .enable_protected_configs =
        Protected::parse(v)?),
    // Process start-up (src/main.rs).
    param!("daemonize", false, |c| show_yes_no(c.daemonize), |c, v| c.daemonize = yes_no(v)?),
    param!("pidfile", false, |c| c.pidfile.clone(), |c, v| c.pidfile = one(v)?.to_string()),
    param!("set-proc-title", false, |c| show_yes_no(c.set_proc_title), |c, v| c.set_proc_title = yes_no(v)?),
    param!("disable-thp", false, |c| show_yes_no(c.disable_thp), |c, v| c.disable_thp = yes_no(v)?),
    // Redis's switch for cluster mode: corekv's `cluster-mode` (yes: the
    // one-node emulation unless per-core is set).
    param!("cluster-enabled", false, |c| show_yes_no(c.cluster_mode != ClusterMode::No), |c, v| {
        c.cluster_mode = match (yes_no(v)?, c.cluster_mode) {
            (false, _) => ClusterMode::No,
            (true, ClusterMode::No) => ClusterMode::Emulated,
            (true, mode) => mode,
        }
    }),
    // Client eviction (proxy/src/commands/client.rs).
    param!("maxmemory-clients", true, |c| show_memory_or_percent(c.maxmemory_clients), |c, v| c.maxmemory_clients =
        memory_or_percent(v)?),
    // Redis's hidden settings (Param::hidden) and the rest of its
    // start-only ones: kept as values (STORED_WHY says why).
    stored!("key-load-delay", true, "0", |v| int_text(v, i32::MIN as i64, i32::MAX as i64)),
    stored!("loading-process-events-interval-bytes", true, "2097152", |v| int_text(v, 1024, i32::MAX as i64)),
    stored!("watchdog-period", true, "0", |v| int_text(v, 0, i32::MAX as i64)),
    stored!("use-exit-on-panic", true, "no", yes_no_text),
    stored!("always-show-logo", false, "no", yes_no_text),
    stored!("io-threads", false, "1", |v| int_text(v, 1, 128)),
    stored!("io-threads-do-reads", false, "no", yes_no_text),
    stored!("syslog-enabled", false, "no", yes_no_text),
    stored!("syslog-ident", false, "redis", |v| one(v).map(String::from)),
    stored!("syslog-facility", false, "local0", |v| enum_text(
        v,
        &["user", "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7"]
    )),
    stored!("unixsocket", false, "", |v| one(v).map(String::from)),
    stored!("unixsocketperm", false, "0", |v| octal_text(v, 0o777)),
    stored!("supervised", false, "no", |v| enum_text(v, &["upstart", "systemd", "auto", "no"])),
    stored!("server_cpulist", false, "", |v| one(v).map(String::from)),
    stored!("bio_cpulist", false, "", |v| one(v).map(String::from)),
    stored!("aof_rewrite_cpulist", false, "", |v| one(v).map(String::from)),
    stored!("bgsave_cpulist", false, "", |v| one(v).map(String::from)),
    stored!("cluster-port", false, "0", |v| int_text(v, 0, 65535)),
    stored!("socket-mark-id", false, "0", |v| int_text(v, 0, u32::MAX as i64)),
];

/// Redis's `%f` then trimDoubleString: "99.9", "50".
pub fn trim_double(v: f64) -> String {
    let s = format!("{v:.6}");
    match s.contains('.') {
        true => s.trim_end_matches('0').trim_end_matches('.').to_string(),
        false => s,
    }
}

/// latency-tracking-info-percentiles: numbers in [0, 100], space separated
/// (one empty value: none).
fn percentiles(values: &[&str]) -> Result<Vec<f64>, String> {
    if let [""] = values {
        return Ok(Vec::new());
    }
    let words: Vec<&str> = values.iter().flat_map(|v| v.split_whitespace()).collect();
    words
        .iter()
        .map(|w| {
            let p: f64 = w
                .parse()
                .ok()
                .filter(|p: &f64| !p.is_nan())
                .ok_or("Invalid latency-tracking-info-percentiles parameters")?;
            if !(0.0..=100.0).contains(&p) {
                return Err("latency-tracking-info-percentiles parameters should sit between [0.0,100.0]".to_string());
            }
            Ok(p)
        })
        .collect()
}

/// `host port`, or `no one` for none.
fn replica_of(values: &[&str]) -> Result<Option<(String, u16)>, String> {
    let words: Vec<&str> = values.iter().flat_map(|v| v.split_whitespace()).collect();
    match words.as_slice() {
        [no, one] if no.eq_ignore_ascii_case("no") && one.eq_ignore_ascii_case("one") => Ok(None),
        [host, port] => {
            let port = port.parse::<u16>().map_err(|_| "Invalid master port".to_string())?;
            Ok(Some((host.to_string(), port)))
        }
        _ => Err("wrong number of arguments".into()),
    }
}

/// An I/O error as C's strerror words it ("No such file or directory").
pub fn os_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// Redis's old names for settings (the "-ziplist-" ones, lua-time-limit,
/// slave*): accepted, not listed.
pub fn is_alias(name: &str) -> bool {
    name.contains("-ziplist-")
        || name == "lua-time-limit"
        || name.starts_with("slave")
        || name.starts_with("min-slaves")
        || name == "repl-ping-slave-period"
}

/// The setting an alias stands for (`slave-read-only` ->
/// `replica-read-only`); other names as they are.
pub fn canonical(name: &str) -> String {
    if !is_alias(name) {
        return name.to_string();
    }
    let real = match name {
        "lua-time-limit" => "busy-reply-threshold".to_string(),
        _ => name.replace("ziplist", "listpack").replace("slaveof", "replicaof").replace("slave", "replica"),
    };
    match find_param(&real) {
        Some(p) => p.name.to_string(),
        None => name.to_string(),
    }
}

pub fn find_param(name: &str) -> Option<&'static Param> {
    PARAMS.iter().find(|p| p.name.eq_ignore_ascii_case(name))
}

impl Config {
    /// Applies one setting by name; the error is the reason text Redis puts
    /// after "CONFIG SET failed (possibly related to argument '...') - ".
    pub fn set(&mut self, name: &str, values: &[&str]) -> Result<(), String> {
        let param = find_param(name).ok_or_else(|| format!("Bad directive or wrong number of arguments ({name})"))?;
        (param.set)(self, values)
    }

    pub fn get(&self, name: &str) -> Option<String> {
        find_param(name).map(|p| (p.get)(self))
    }

    /// CONFIG SET's value for one setting (Redis's performInterfaceSet): a
    /// multi-arg setting's value is split at its spaces.
    pub fn set_value(&mut self, name: &str, value: &str) -> Result<(), String> {
        let param = find_param(name).ok_or_else(|| format!("Bad directive or wrong number of arguments ({name})"))?;
        let values: Vec<&str> = match param.multi_arg() {
            true if value.is_empty() => Vec::new(),
            true => value.split(' ').collect(),
            false => vec![value],
        };
        (param.set)(self, &values)
    }

    /// One line of a config file or the command line (Redis's
    /// loadServerConfigFromString): one value per setting, except for
    /// multi-arg ones, whose single non-empty value is split as a line
    /// would be (`--bind "127.0.0.1 ::1"`).
    fn set_line(&mut self, param: &Param, values: &[&str]) -> Result<(), String> {
        if !param.multi_arg() {
            if values.len() != 1 {
                return Err("wrong number of arguments".into());
            }
            return (param.set)(self, values);
        }
        match values {
            [value] if !value.is_empty() => {
                let words = split_args(value.as_bytes()).ok_or("Unbalanced quotes in configuration line")?;
                let words: Vec<String> = words.into_iter().map(|w| String::from_utf8_lossy(&w).into_owned()).collect();
                let words: Vec<&str> = words.iter().map(String::as_str).collect();
                (param.set)(self, &words)
            }
            _ => (param.set)(self, values),
        }
    }

    /// A config file or command line directive: the settings, plus `user`
    /// and `rename-command`, which CONFIG SET does not know.
    pub fn apply_directive(&mut self, name: &str, values: &[&str]) -> Result<(), String> {
        match name.to_ascii_lowercase().as_str() {
            "user" if !values.is_empty() => {
                if self.users.iter().any(|u| u[0] == values[0]) {
                    return Err("Duplicate user found. A user can only be defined once in config files".into());
                }
                self.users.push(values.iter().map(|v| v.to_string()).collect());
                Ok(())
            }
            "rename-command" => match values {
                [from, to] => {
                    self.rename_commands.push((from.to_ascii_lowercase(), to.to_string()));
                    Ok(())
                }
                _ => Err("wrong number of arguments".into()),
            },
            // Redis 7.0's deprecatedConfig: accepted and ignored.
            "list-max-ziplist-entries" | "list-max-ziplist-value" | "lua-replicate-commands" if values.len() == 1 => {
                Ok(())
            }
            _ => match find_param(name) {
                Some(param) => self.set_line(param, values),
                None => Err("Bad directive or wrong number of arguments".into()),
            },
        }
    }

    /// The value a dump shows: passwords hidden.
    pub fn shown(&self, name: &str) -> Option<String> {
        match name {
            "requirepass" | "masterauth" if !self.get(name)?.is_empty() => Some("(redacted)".into()),
            _ => self.get(name),
        }
    }

    /// `(name, value)` of every parameter matching a CONFIG GET glob
    /// (hidden ones only by their exact name).
    pub fn matching(&self, pattern: &[u8]) -> Vec<(&'static str, String)> {
        PARAMS
            .iter()
            .filter(|p| !p.hidden() && glob_match(pattern, p.name.as_bytes(), true))
            .map(|p| (p.name, (p.get)(self)))
            .collect()
    }

    /// Parses a file in redis.conf syntax (`name value...`, `#` comments,
    /// quoted values), applying each line on top of `self`.
    pub fn load_text(&mut self, text: &str) -> Result<(), ConfigError> {
        // Save points accumulate over `save` lines, the first replacing the
        // default, as in redis.conf ("save 900 1" / "save 300 10").
        let mut save_points: Option<Vec<(u64, u64)>> = None;
        for (i, line) in text.lines().enumerate() {
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let err = |reason: String| ConfigError { line: i + 1, text: trimmed.to_string(), reason };
            let words =
                split_args(trimmed.as_bytes()).ok_or_else(|| err("Unbalanced quotes in configuration line".into()))?;
            let words: Vec<String> = words.into_iter().map(|w| String::from_utf8_lossy(&w).into_owned()).collect();
            let (name, values) = words.split_first().ok_or_else(|| err("empty line".into()))?;
            let values: Vec<&str> = values.iter().map(String::as_str).collect();
            self.apply_directive(name, &values).map_err(err)?;
            if name.eq_ignore_ascii_case("save") {
                let points = save_points.get_or_insert_with(Vec::new);
                points.append(&mut self.save);
                self.save = points.clone();
            }
        }
        Ok(())
    }
}

#[derive(Debug)]
pub struct ConfigError {
    pub line: usize,
    pub text: String,
    pub reason: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "\n*** FATAL CONFIG FILE ERROR (corekv {}) ***\nReading the configuration file, at line {}\n>>> '{}'\n{}",
            env!("CARGO_PKG_VERSION"),
            self.line,
            self.text,
            self.reason
        )
    }
}

/// Redis's `sdscatrepr`, the inverse of `split_args`: double-quoted, with C
/// escapes for the unprintable (config files, MONITOR, log lines).
pub fn repr_into(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            7 => out.push_str("\\a"),
            8 => out.push_str("\\b"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out.push('"');
}

/// `repr_into` as a new string.
pub fn repr(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() + 2);
    repr_into(&mut s, bytes);
    s
}

/// Redis's `sdssplitargs`: splits on whitespace, honouring "double quotes"
/// with \n \r \t \b \a \\ \" \xHH escapes and 'single quotes' with \'.
/// `None` on unbalanced quotes or a closing quote not followed by a space.
pub fn split_args(b: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= b.len() {
            return Some(out);
        }
        let mut cur = Vec::new();
        let (mut inq, mut insq) = (false, false);
        loop {
            if inq {
                if i >= b.len() {
                    return None;
                }
                if b[i] == b'\\' && i + 3 < b.len() && b[i + 1] == b'x' && is_hex(b[i + 2]) && is_hex(b[i + 3]) {
                    cur.push(hex(b[i + 2]) * 16 + hex(b[i + 3]));
                    i += 3;
                } else if b[i] == b'\\' && i + 1 < b.len() {
                    i += 1;
                    cur.push(match b[i] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        c => c,
                    });
                } else if b[i] == b'"' {
                    if i + 1 < b.len() && !b[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    i += 1;
                    break;
                } else {
                    cur.push(b[i]);
                }
            } else if insq {
                if i >= b.len() {
                    return None;
                }
                if b[i] == b'\\' && i + 1 < b.len() && b[i + 1] == b'\'' {
                    i += 1;
                    cur.push(b'\'');
                } else if b[i] == b'\'' {
                    if i + 1 < b.len() && !b[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    i += 1;
                    break;
                } else {
                    cur.push(b[i]);
                }
            } else {
                if i >= b.len() {
                    break;
                }
                match b[i] {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => {
                        i += 1;
                        break;
                    }
                    b'"' => inq = true,
                    b'\'' => insq = true,
                    c => cur.push(c),
                }
            }
            i += 1;
        }
        out.push(cur);
    }
}

fn is_hex(c: u8) -> bool {
    c.is_ascii_hexdigit()
}

fn hex(c: u8) -> u8 {
    (c as char).to_digit(16).unwrap_or(0) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_and_errors() {
        let mut c = Config::default();
        c.load_text("# comment\nport 7000\nbind 127.0.0.1 ::1\nproto-max-bulk-len 2mb\nrequirepass \"a b\"\n").unwrap();
        assert_eq!(c.port, 7000);
        assert_eq!(c.bind, vec!["127.0.0.1", "::1"]);
        assert_eq!(c.proto_max_bulk_len, 2 << 20);
        assert_eq!(c.requirepass, "a b");
        let e = c.load_text("port 1\nnope 3\n").unwrap_err();
        assert_eq!(e.line, 2);
        let e = c.load_text("maxclients 0\n").unwrap_err();
        assert!(e.reason.contains("between 1 and"), "{}", e.reason);
    }

    #[test]
    fn save_lines_accumulate_in_a_file() {
        let mut c = Config::default();
        c.load_text("save 900 1\nsave 300 10\n").unwrap();
        assert_eq!(c.save, vec![(900, 1), (300, 10)]);
        assert_eq!(c.get("save").unwrap(), "900 1 300 10");
        c.load_text("save \"\"\n").unwrap();
        assert!(c.save.is_empty());
        c.set_value("save", "60 5").unwrap();
        assert_eq!(c.save, vec![(60, 5)]);
        assert!(c.set_value("save", "60").is_err());
        // CONFIG SET splits at each space, as Redis (an empty value between
        // two spaces makes the count odd).
        assert!(c.set_value("save", "100 10  200 20").is_err());
        c.set_value("save", "").unwrap();
        assert!(c.save.is_empty());
    }

    #[test]
    fn split_args_like_redis() {
        assert_eq!(split_args(b"set a \"b c\"").unwrap(), vec![b"set".to_vec(), b"a".to_vec(), b"b c".to_vec()]);
        assert_eq!(split_args(b"'it\\'s'").unwrap(), vec![b"it's".to_vec()]);
        assert_eq!(split_args(b"\"\\x41\\n\"").unwrap(), vec![b"A\n".to_vec()]);
        assert!(split_args(b"\"abc").is_none());
        assert!(split_args(b"\"a\"b").is_none());
        assert_eq!(split_args(b"   ").unwrap().len(), 0);
    }
}
