//! The AOF's files and the manifest naming them (Redis 7's syntax plus the
//! shard).

use crate::log;
use shard::Config;
use std::path::PathBuf;

/// The AOF found (or created) at start.
#[derive(Clone, Debug)]
pub struct Found {
    pub manifest: Manifest,
    /// Created by this start: the shards write what they loaded (from a
    /// dump) as its first content.
    pub fresh: bool,
}

/// One line of the manifest.
#[derive(Clone, Debug, PartialEq)]
pub struct FileEntry {
    pub name: String,
    pub seq: u64,
    pub kind: Kind,
    pub shard: usize,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Base,
    Incr,
}

/// The files of every shard, as the manifest lists them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Manifest {
    pub files: Vec<FileEntry>,
}

impl Manifest {
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let mut files = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            if !words.len().is_multiple_of(2) {
                return Err(format!("Invalid AOF manifest file format: '{line}'"));
            }
            let (mut name, mut seq, mut kind, mut shard) = (None, None, None, None);
            for pair in words.chunks(2) {
                match pair[0] {
                    "file" => name = Some(pair[1].to_string()),
                    "seq" => seq = pair[1].parse::<u64>().ok(),
                    "type" => {
                        kind = match pair[1] {
                            "b" => Some(Kind::Base),
                            "i" => Some(Kind::Incr),
                            // History files are left for deletion.
                            "h" => None,
                            _ => return Err(format!("Unknown AOF file type '{}' in the manifest", pair[1])),
                        }
                    }
                    "shard" => shard = pair[1].parse::<usize>().ok(),
                    _ => {}
                }
            }
            // Without `shard` (a manifest redis-server wrote): shard 0.
            let (Some(name), Some(seq), Some(shard)) = (name, seq, shard.or(Some(0))) else {
                return Err(format!("Invalid AOF manifest file format: '{line}'"));
            };
            if name.contains('/') {
                return Err(format!("Invalid AOF file name in the manifest: '{name}'"));
            }
            if let Some(kind) = kind {
                files.push(FileEntry { name, seq, kind, shard });
            }
        }
        Ok(Manifest { files })
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        for f in &self.files {
            let kind = if f.kind == Kind::Base { "b" } else { "i" };
            out.push_str(&format!("file {} seq {} type {} shard {}\n", f.name, f.seq, kind, f.shard));
        }
        out
    }

    /// Shard `i`'s base (if any) and incr files, in replay order.
    pub fn of_shard(&self, i: usize) -> Vec<&FileEntry> {
        let mut files: Vec<&FileEntry> = self.files.iter().filter(|f| f.shard == i).collect();
        files.sort_by_key(|f| (f.kind == Kind::Incr, f.seq));
        files
    }

    pub fn shards(&self) -> usize {
        self.files.iter().map(|f| f.shard + 1).max().unwrap_or(0)
    }
}

pub fn incr_name(config: &Config, shard: usize, seq: u64) -> String {
    format!("{}.{shard}.{seq}.incr.aof", config.appendfilename)
}

/// A base is RDB (`.rdb`, with `aof-use-rdb-preamble yes`) or commands.
pub fn base_name(config: &Config, shard: usize, seq: u64) -> String {
    let ext = if config.aof_use_rdb_preamble { "rdb" } else { "aof" };
    format!("{}.{shard}.{seq}.base.{ext}", config.appendfilename)
}

/// `appenddirname` inside `dir`.
pub fn dir(config: &Config) -> PathBuf {
    PathBuf::from(&config.dir).join(&config.appenddirname)
}

pub(super) fn manifest_path(config: &Config) -> PathBuf {
    dir(config).join(format!("{}.manifest", config.appendfilename))
}

/// Writes the manifest atomically: a temp file, fsync, rename, fsync of
/// the folder.
pub fn write_manifest(config: &Config, manifest: &Manifest) -> Result<(), String> {
    use std::io::Write;
    let path = manifest_path(config);
    let tmp = dir(config).join(format!("temp-{}.manifest", config.appendfilename));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(manifest.render().as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(dir(config))?.sync_all()
    };
    write().map_err(|e| format!("Can't write the AOF manifest {}: {e}", path.display()))
}

/// Before the shards start: reads the manifest, or creates the folder,
/// one empty incr file per shard and the manifest naming them. `None`
/// when the AOF is off.
pub fn prepare(config: &Config, shards: usize) -> Result<Option<Found>, String> {
    if !config.appendonly {
        return Ok(None);
    }
    let path = manifest_path(config);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let manifest = Manifest::parse(&text)?;
            if manifest.shards() != shards {
                return Err(format!(
                    "The AOF in {} was written by {} shard(s); this server runs {shards}. Start with --shards {} \
                     (keys live on the shard owning their slots).",
                    config.appenddirname,
                    manifest.shards(),
                    manifest.shards()
                ));
            }
            Ok(Some(Found { manifest, fresh: false }))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir(config))
                .map_err(|e| format!("Can't create the AOF directory {}: {e}", config.appenddirname))?;
            let mut manifest = Manifest::default();
            for shard in 0..shards {
                let name = incr_name(config, shard, 1);
                // A leftover file of that name (no manifest names it) starts over.
                std::fs::File::create(dir(config).join(&name))
                    .map_err(|e| format!("Can't create the AOF file {name}: {e}"))?;
                manifest.files.push(FileEntry { name, seq: 1, kind: Kind::Incr, shard });
            }
            write_manifest(config, &manifest)?;
            log::notice(&format!("Creating AOF incr files in {} ({shards} shard(s))", config.appenddirname));
            Ok(Some(Found { manifest, fresh: true }))
        }
        Err(e) => Err(format!("Can't read the AOF manifest {}: {e}", path.display())),
    }
}
