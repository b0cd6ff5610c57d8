//! A block of the replication stream: whole commands of one shard, held
//! raw or compressed (lz4, zstd).
