//! The replication study's data sets (bench/replication.sh): random bytes,
//! one repeated character, and text-like records. Each value is a pure
//! function of (seed, length), so runs repeat exactly; none of them can be
//! checked by a GET the way the default pattern can.

use std::fmt::Write;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DataSet {
    /// `"<key id>:<length>|"` and a fixed filler: GETs verify it.
    Pattern,
    /// Uniformly random bytes: incompressible.
    Random,
    /// One character repeated: compresses to almost nothing.
    Repeat,
    /// ~700-byte JSON-like 5G session records: compressible about as the
    /// study's real data (16 KB blocks of SETs: zstd 3.8x, lz4 2.2x; the
    /// study: 3.58x, 2.19x).
    Text,
}

/// Appends `len` bytes of `set` (not `Pattern`) drawn from `seed`.
pub fn fill(out: &mut Vec<u8>, set: DataSet, seed: u64, len: usize) {
    let start = out.len();
    match set {
        DataSet::Pattern => unreachable!("the pattern is Values' own"),
        DataSet::Repeat => out.resize(start + len, b'x'),
        DataSet::Random => {
            let mut rng = SplitMix(seed);
            while out.len() < start + len {
                let take = (start + len - out.len()).min(8);
                out.extend_from_slice(&rng.next_u64().to_le_bytes()[..take]);
            }
        }
        DataSet::Text => {
            let record = text_record(&mut SplitMix(seed), len);
            out.extend_from_slice(&record.as_bytes()[..len]);
        }
    }
}

/// SplitMix64.
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        words[self.below(words.len() as u64) as usize]
    }

    fn hex(&mut self, digits: usize) -> String {
        (0..digits).map(|_| char::from_digit(self.below(16) as u32, 16).expect("below 16")).collect()
    }
}

const WORDS: [&str; 64] = [
    "the",
    "session",
    "was",
    "released",
    "after",
    "handover",
    "to",
    "cell",
    "with",
    "low",
    "signal",
    "quality",
    "and",
    "the",
    "user",
    "plane",
    "function",
    "reported",
    "no",
    "loss",
    "during",
    "idle",
    "mode",
    "paging",
    "timer",
    "expired",
    "before",
    "registration",
    "update",
    "policy",
    "control",
    "applied",
    "new",
    "rules",
    "for",
    "video",
    "streaming",
    "traffic",
    "on",
    "this",
    "slice",
    "charging",
    "record",
    "closed",
    "at",
    "volume",
    "threshold",
    "roaming",
    "partner",
    "network",
    "accepted",
    "request",
    "from",
    "subscriber",
    "device",
    "moved",
    "between",
    "tracking",
    "areas",
    "while",
    "downlink",
    "data",
    "buffered",
    "queued",
];

/// A JSON-like 5G session record of at least `len` bytes (free text pads
/// it): field names and enumerations repeat record to record; ids, tokens,
/// counters, addresses and the text differ. The same generator as
/// proxy/src/replication/block.rs's tests, so the ratios there hold here.
pub fn text_record(rng: &mut SplitMix, len: usize) -> String {
    let ts = 1_700_000_000_000 + rng.below(100_000_000);
    let mut r = String::with_capacity(len.max(800));
    let _ = write!(
        r,
        concat!(
            r#"{{"id":"sess:{:08}","supi":"imsi-24099{:010}","ts":{},"correlationId":"{}-{}-4{}-{}","#,
            r#""state":"{}","apn":"{}","rat":"{}","qos":{{"5qi":{},"arp":{{"level":{},"#,
            r#""preemptCap":"NOT_PREEMPT"}},"ambr":{{"ul":"{} Mbps","dl":"{} Mbps"}}}},"#,
            r#""tai":{{"mcc":"240","mnc":"99","tac":"{}"}},"nrCellId":"{}","#,
            r#""counters":{{"ulBytes":{},"dlBytes":{},"ulPackets":{},"dlPackets":{}}},"#,
            r#""upf":"upf-{}.core.example.net","ipv4":"10.{}.{}.{}","ipv6":"2001:db8:{}:{}::1","#,
            r#""imei":"35{:013}","token":"{}","key":"{}","events":["#
        ),
        rng.below(100_000_000),
        rng.below(10_000_000_000),
        ts,
        rng.hex(8),
        rng.hex(4),
        rng.hex(3),
        rng.hex(12),
        rng.pick(&["ACTIVE", "IDLE", "SUSPENDED", "RELEASED"]),
        rng.pick(&["internet", "ims", "mms.operator.example"]),
        rng.pick(&["NR", "EUTRA"]),
        rng.pick(&["1", "5", "8", "9"]),
        rng.below(15) + 1,
        rng.below(1000),
        rng.below(1000),
        rng.hex(6),
        rng.hex(9),
        rng.below(100_000_000),
        rng.below(1_000_000_000),
        rng.below(100_000),
        rng.below(1_000_000),
        rng.below(8),
        rng.below(256),
        rng.below(256),
        rng.below(256),
        rng.hex(4),
        rng.hex(4),
        rng.below(10_000_000_000_000),
        rng.hex(32),
        rng.hex(32),
    );
    for i in 0..rng.below(3) + 2 {
        let _ = write!(
            r,
            r#"{}{{"type":"{}","at":{},"cause":"{}"}}"#,
            if i == 0 { "" } else { "," },
            rng.pick(&["ATTACH", "HANDOVER", "PAGING", "TAU", "DETACH", "QOS_CHANGE"]),
            ts + rng.below(1_000_000),
            rng.pick(&["NORMAL", "TIMEOUT", "RADIO_LOST", "USER_REQUEST", "OVERLOAD"]),
        );
    }
    r.push_str(r#"],"note":""#);
    while r.len() + 2 < len {
        r.push_str(rng.pick(&WORDS));
        r.push(' ');
    }
    r.push_str(r#""}"#);
    r
}
