//! Geo commands on sorted sets (Redis's geo.c): GEOADD, GEODIST, GEOHASH,
//! GEOPOS and the searches (GEORADIUS[BYMEMBER][_RO], GEOSEARCH[STORE]).
//! Positions are 52-bit geohash scores; `geo/geohash.rs` holds Redis's
//! arithmetic. A search whose STORE destination lives on another shard is
//! run here by the proxy (proxy/src/commands/geo.rs) through [`search`].

pub mod geohash;

use super::prelude::*;
use super::zset::{store, zset_mut, zset_read, WrongType};
use super::Ctx;
use crate::args::{parse_i64, Args};
use crate::db::Ttl;
use crate::numbers::{format_human, parse_double};
use crate::reply::errors::*;
use crate::reply::Reply;
use crate::shard::Shard;
use crate::types::zset::{cmp_key, Limits, ZSet};
use crate::value::Value;
use geohash::{Shape, ShapeKind};

/// GEORADIUS / GEORADIUS_RO: around coordinates.
pub const COORDS: u8 = 1;
/// GEORADIUSBYMEMBER[_RO]: around a member.
pub const MEMBER: u8 = 1 << 1;
/// The _RO forms: no STORE.
pub const NOSTORE: u8 = 1 << 2;
/// GEOSEARCH's arguments.
pub const SEARCH: u8 = 1 << 3;
/// GEOSEARCHSTORE: STOREDIST without a key.
pub const SEARCHSTORE: u8 = 1 << 4;

/// A parse error's text, or a value error found on the way.
type Failed = String;

/// The position of `xy`'s two arguments, checked (extractLongLatOrReply).
fn long_lat(args: &Args, at: usize) -> Result<[f64; 2], Failed> {
    let lon = parse_double(args.get(at)).ok_or(NOT_FLOAT)?;
    let lat = parse_double(args.get(at + 1)).ok_or(NOT_FLOAT)?;
    if !(geohash::LONG_MIN..=geohash::LONG_MAX).contains(&lon) || !(geohash::LAT_MIN..=geohash::LAT_MAX).contains(&lat)
    {
        return Err(format!("ERR invalid longitude,latitude pair {lon:.6},{lat:.6}"));
    }
    Ok([lon, lat])
}

/// Meters per unit (extractUnitOrReply).
fn unit(arg: &[u8]) -> Result<f64, Failed> {
    match arg.to_ascii_lowercase().as_slice() {
        b"m" => Ok(1.0),
        b"km" => Ok(1000.0),
        b"ft" => Ok(0.3048),
        b"mi" => Ok(1609.34),
        _ => Err("ERR unsupported unit provided. please use M, KM, FT, MI".into()),
    }
}

/// `<radius> <unit>`: (radius, conversion).
fn radius(args: &Args, at: usize) -> Result<(f64, f64), Failed> {
    let r = parse_double(args.get(at)).ok_or("ERR need numeric radius")?;
    if r < 0.0 {
        return Err("ERR radius cannot be negative".into());
    }
    Ok((r, unit(args.get(at + 1))?))
}

/// `<width> <height> <unit>`: (width, height, conversion).
fn box_size(args: &Args, at: usize) -> Result<(f64, f64, f64), Failed> {
    let w = parse_double(args.get(at)).ok_or("ERR need numeric width")?;
    let h = parse_double(args.get(at + 1)).ok_or("ERR need numeric height")?;
    if h < 0.0 || w < 0.0 {
        return Err("ERR height or width cannot be negative".into());
    }
    Ok((w, h, unit(args.get(at + 2))?))
}

/// A member's position (longLatFromMember).
fn member_position(z: &ZSet, member: &[u8]) -> Result<[f64; 2], Failed> {
    z.score(member).and_then(geohash::decode_score).ok_or_else(|| "ERR could not decode requested zset member".into())
}

#[derive(Clone, Copy, PartialEq)]
enum Order {
    None,
    Asc,
    Desc,
}

/// A parsed search (georadiusGeneric's options).
pub struct Query {
    shape: Shape,
    withdist: bool,
    withhash: bool,
    withcoord: bool,
    order: Order,
    any: bool,
    count: usize,
    /// The argument naming the destination, if the search stores.
    pub store: Option<usize>,
    storedist: bool,
}

/// Parses a search against the source set `z` (`None`: missing), with
/// Redis's checks in Redis's order.
pub fn parse(z: Option<&ZSet>, args: &Args, flags: u8) -> Result<Query, Failed> {
    let mut q = Query {
        shape: Shape { xy: [0.0; 2], conversion: 1.0, kind: ShapeKind::Radius(0.0) },
        withdist: false,
        withhash: false,
        withcoord: false,
        order: Order::None,
        any: false,
        count: 0,
        store: None,
        storedist: false,
    };
    let base = if flags & COORDS != 0 {
        q.shape.xy = long_lat(args, 2)?;
        let (r, conversion) = radius(args, 4)?;
        (q.shape.kind, q.shape.conversion) = (ShapeKind::Radius(r), conversion);
        6
    } else if flags & MEMBER != 0 {
        if let Some(z) = z {
            q.shape.xy = member_position(z, args.get(2))?;
            let (r, conversion) = radius(args, 3)?;
            (q.shape.kind, q.shape.conversion) = (ShapeKind::Radius(r), conversion);
        }
        5
    } else if flags & SEARCHSTORE != 0 {
        q.store = Some(1);
        3
    } else {
        2
    };
    let search = flags & SEARCH != 0;
    let stores = flags & (NOSTORE | SEARCH) == 0;
    let (mut frommember, mut fromloc, mut byradius, mut bybox) = (false, false, false, false);
    let remaining = args.len().saturating_sub(base);
    let mut i = 0;
    while i < remaining {
        let at = base + i;
        let has = |n: usize| i + n < remaining;
        if args.is(at, "withdist") {
            q.withdist = true;
        } else if args.is(at, "withhash") {
            q.withhash = true;
        } else if args.is(at, "withcoord") {
            q.withcoord = true;
        } else if args.is(at, "any") {
            q.any = true;
        } else if args.is(at, "asc") {
            q.order = Order::Asc;
        } else if args.is(at, "desc") {
            q.order = Order::Desc;
        } else if args.is(at, "count") && has(1) {
            let n = parse_i64(args.get(at + 1)).ok_or(NOT_INTEGER)?;
            if n <= 0 {
                return Err("ERR COUNT must be > 0".into());
            }
            q.count = n as usize;
            i += 1;
        } else if (args.is(at, "store") || args.is(at, "storedist")) && has(1) && stores {
            q.storedist = args.is(at, "storedist");
            q.store = Some(at + 1);
            i += 1;
        } else if args.is(at, "storedist") && flags & SEARCHSTORE != 0 {
            q.storedist = true;
        } else if args.is(at, "frommember") && has(1) && search && !fromloc {
            if let Some(z) = z {
                q.shape.xy = member_position(z, args.get(at + 1))?;
            }
            frommember = true;
            i += 1;
        } else if args.is(at, "fromlonlat") && has(2) && search && !frommember {
            q.shape.xy = long_lat(args, at + 1)?;
            fromloc = true;
            i += 2;
        } else if args.is(at, "byradius") && has(2) && search && !bybox {
            let (r, conversion) = radius(args, at + 1)?;
            (q.shape.kind, q.shape.conversion) = (ShapeKind::Radius(r), conversion);
            byradius = true;
            i += 2;
        } else if args.is(at, "bybox") && has(3) && search && !byradius {
            let (width, height, conversion) = box_size(args, at + 1)?;
            (q.shape.kind, q.shape.conversion) = (ShapeKind::Box { width, height }, conversion);
            bybox = true;
            i += 3;
        } else {
            return Err(SYNTAX.into());
        }
        i += 1;
    }
    if q.store.is_some() && (q.withdist || q.withhash || q.withcoord) {
        let which = if flags & SEARCHSTORE != 0 { "GEOSEARCHSTORE" } else { "STORE option in GEORADIUS" };
        return Err(format!("ERR {which} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"));
    }
    let name = || String::from_utf8_lossy(args.get(0)).into_owned();
    if search && !(frommember || fromloc) {
        return Err(format!("ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {}", name()));
    }
    if search && !(byradius || bybox) {
        return Err(format!("ERR exactly one of BYRADIUS and BYBOX can be specified for {}", name()));
    }
    if q.any && q.count == 0 {
        return Err("ERR the ANY argument requires COUNT argument".into());
    }
    // COUNT means the closest ones (not with ANY: the first found).
    if q.count != 0 && q.order == Order::None && !q.any {
        q.order = Order::Asc;
    }
    Ok(q)
}

/// One point found.
pub struct Point {
    xy: [f64; 2],
    dist: f64,
    score: f64,
    member: Vec<u8>,
}

/// The points of `z` inside the query's shape, ordered and cut to COUNT
/// as Redis does (membersOfAllNeighbors, then the sort).
fn find(z: &ZSet, q: &Query) -> Vec<Point> {
    let (center, near) = geohash::areas(&q.shape);
    let boxes = [
        center,
        near.north,
        near.south,
        near.east,
        near.west,
        near.north_east,
        near.north_west,
        near.south_east,
        near.south_west,
    ];
    let limit = if q.any { q.count } else { 0 };
    let full = |found: &Vec<Point>| limit != 0 && found.len() >= limit;
    let mut found = Vec::new();
    let mut last = 0;
    for (i, b) in boxes.iter().enumerate() {
        if b.bits == 0 && b.step == 0 {
            continue;
        }
        // Huge radii make neighbours repeat: each box is scanned once.
        if last != 0 && *b == boxes[last] {
            continue;
        }
        if full(&found) {
            break;
        }
        let (min, max) = geohash::score_range(*b);
        let start = z.count_before(&|s, _| s < min);
        z.walk(start, false, &mut |score, member| {
            if score >= max {
                return false;
            }
            if let Some(xy) = geohash::decode_score(score) {
                if let Some(dist) = q.shape.distance_within(xy) {
                    found.push(Point { xy, dist, score, member: member.to_vec() });
                }
            }
            !full(&found)
        });
        last = i;
    }
    match q.order {
        Order::Asc => found.sort_by(|a, b| a.dist.total_cmp(&b.dist)),
        Order::Desc => found.sort_by(|a, b| b.dist.total_cmp(&a.dist)),
        Order::None => {}
    }
    if q.count != 0 {
        found.truncate(q.count);
    }
    for p in &mut found {
        p.dist /= q.shape.conversion;
    }
    found
}

/// addReplyDoubleDistance: four decimals, rounded as llrint.
fn reply_distance(r: &mut Reply, d: f64) {
    let scaled = (d * 10000.0).round_ties_even() as i64;
    let (int, frac) = (scaled / 10000, (scaled % 10000).abs());
    let sign = if scaled < 0 && int == 0 { "-" } else { "" };
    r.bulk(format!("{sign}{int}.{frac:04}").as_bytes());
}

/// addReplyHumanLongDouble.
fn reply_coordinate(r: &mut Reply, v: f64) {
    let mut buf = [0u8; 64];
    let text = format_human(v, &mut buf);
    if r.resp3 {
        r.raw(b",");
        r.raw(text);
        r.raw(b"\r\n");
    } else {
        r.bulk(text);
    }
}

fn reply_points(r: &mut Reply, q: &Query, points: &[Point]) {
    let options = q.withdist as usize + q.withhash as usize + q.withcoord as usize;
    r.array(points.len());
    for p in points {
        if options != 0 {
            r.array(options + 1);
        }
        r.bulk(&p.member);
        if q.withdist {
            reply_distance(r, p.dist);
        }
        if q.withhash {
            r.int(p.score as i64);
        }
        if q.withcoord {
            r.array(2);
            reply_coordinate(r, p.xy[0]);
            reply_coordinate(r, p.xy[1]);
        }
    }
}

/// What a storing search leaves at its destination: the set to save, empty
/// to delete the key.
pub fn stored_set(q: &Query, points: &[Point], limits: Limits) -> ZSet {
    let mut items: Vec<(f64, &[u8])> =
        points.iter().map(|p| (if q.storedist { p.dist } else { p.score }, p.member.as_slice())).collect();
    items.sort_by(|a, b| cmp_key(a.0, a.1, b.0, b.1));
    super::zset::setop::result_set(&items, limits)
}

/// What a search does with its source: the reply (a read), or the set a
/// STORE saves at the key in argument `.0` (`Err`: the error text).
pub enum Outcome {
    Replied,
    Store(usize, ZSet),
}

/// Runs a search against the source set `z` (`None`: missing). A read
/// replies on `r`; a STORE returns its set (to save and count).
pub fn search(z: Option<&ZSet>, args: &Args, flags: u8, limits: Limits, r: &mut Reply) -> Result<Outcome, Failed> {
    let q = parse(z, args, flags)?;
    let Some(z) = z else {
        if let Some(dest) = q.store {
            return Ok(Outcome::Store(dest, ZSet::default()));
        }
        r.array(0);
        return Ok(Outcome::Replied);
    };
    let points = find(z, &q);
    match q.store {
        None => {
            reply_points(r, &q, &points);
            Ok(Outcome::Replied)
        }
        Some(dest) => Ok(Outcome::Store(dest, stored_set(&q, &points, limits))),
    }
}

/// The search flags of a command by name.
pub fn flags_of(name: &str) -> u8 {
    match name {
        "georadius" => COORDS,
        "georadius_ro" => COORDS | NOSTORE,
        "georadiusbymember" => MEMBER,
        "georadiusbymember_ro" => MEMBER | NOSTORE,
        "geosearchstore" => SEARCH | SEARCHSTORE,
        _ => SEARCH,
    }
}

fn search_command(s: &mut Shard, ctx: &mut Ctx, args: Args, flags: u8) {
    let src = if flags & SEARCHSTORE != 0 { 2 } else { 1 };
    let limits = super::zset::limits(s);
    let outcome = match zset_read(s, ctx.db, args.get(src), ctx.now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(z) => search(z.as_deref(), &args, flags, limits, &mut ctx.reply),
    };
    match outcome {
        Err(e) => ctx.reply.error(&e),
        Ok(Outcome::Replied) => {}
        Ok(Outcome::Store(dest, z)) => {
            let key = args.get(dest);
            let event = if flags & SEARCHSTORE != 0 { "geosearchstore" } else { "georadiusstore" };
            store(s, ctx.db, key, z, ctx.now, &mut ctx.reply, event);
            s.log_key_state(ctx.db, key, ctx.now);
        }
    }
}

pub fn georadius(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    search_command(s, ctx, args, COORDS)
}

pub fn georadius_ro(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    search_command(s, ctx, args, COORDS | NOSTORE)
}

pub fn georadiusbymember(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    search_command(s, ctx, args, MEMBER)
}

pub fn georadiusbymember_ro(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    search_command(s, ctx, args, MEMBER | NOSTORE)
}

pub fn geosearch(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    search_command(s, ctx, args, SEARCH)
}

pub fn geosearchstore(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    search_command(s, ctx, args, SEARCH | SEARCHSTORE)
}

/// GEOADD key [NX|XX] [CH] lon lat member...: ZADD of geohash scores.
pub fn geoadd(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let (mut nx, mut xx, mut ch) = (false, false, false);
    let mut first = 2;
    while first < args.len() {
        match () {
            _ if args.is(first, "nx") => nx = true,
            _ if args.is(first, "xx") => xx = true,
            _ if args.is(first, "ch") => ch = true,
            _ => break,
        }
        first += 1;
    }
    let elements = args.len() - first;
    if !elements.is_multiple_of(3) || (xx && nx) || elements == 0 {
        return ctx.reply.error(SYNTAX);
    }
    let mut scored = Vec::with_capacity(elements / 3);
    for at in (first..args.len()).step_by(3) {
        match long_lat(&args, at) {
            Ok([lon, lat]) => scored.push((geohash::encode_score(lon, lat).unwrap_or(0.0), args.get(at + 2))),
            Err(e) => return ctx.reply.error(&e),
        }
    }
    let key = args.get(1);
    let limits = super::zset::limits(s);
    let db = &mut s.dbs[ctx.db];
    let mut fresh = None;
    let z = match zset_mut(db, key, ctx.now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(Some(z)) => z,
        Ok(None) if xx => return ctx.reply.int(0),
        Ok(None) => fresh.insert(ZSet::new(limits, scored[0].1.len())),
    };
    let (mut added, mut updated) = (0, 0);
    for (score, member) in scored {
        match z.score(member) {
            Some(_) if nx => {}
            Some(current) if current != score => {
                z.rescore(member, current, score);
                updated += 1;
            }
            Some(_) => {}
            None if xx => {}
            None => {
                z.insert(score, member, limits);
                added += 1;
            }
        }
    }
    if let Some(z) = fresh.filter(|z| !z.is_empty()) {
        db.set(key, Value::ZSet(Box::new(z)), Ttl::Clear, ctx.now);
    }
    // GEOADD is ZADD underneath in Redis: its event is "zadd".
    if added + updated > 0 {
        s.notify(crate::notify::ZSET, "zadd", ctx.db, key);
    }
    ctx.reply.int(if ch { added + updated } else { added });
}

/// GEODIST key a b [unit].
pub fn geodist(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let to_meter = match args.len() {
        5 => match unit(args.get(4)) {
            Ok(u) => u,
            Err(e) => return ctx.reply.error(&e),
        },
        n if n > 5 => return ctx.reply.error(SYNTAX),
        _ => 1.0,
    };
    let z = match zset_read(s, ctx.db, args.get(1), ctx.now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(None) => return ctx.reply.null(),
        Ok(Some(z)) => z,
    };
    let position = |m: &[u8]| z.score(m).and_then(geohash::decode_score);
    match (position(args.get(2)), position(args.get(3))) {
        (Some(a), Some(b)) => reply_distance(&mut ctx.reply, geohash::distance(a[0], a[1], b[0], b[1]) / to_meter),
        _ => ctx.reply.null(),
    }
}

/// GEOHASH key member...: standard 11-character geohashes.
pub fn geohash_command(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let z = match zset_read(s, ctx.db, args.get(1), ctx.now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(z) => z,
    };
    ctx.reply.array(args.len() - 2);
    for member in args.iter().skip(2) {
        match z.as_ref().and_then(|z| z.score(member)).and_then(geohash::decode_score) {
            Some(xy) => ctx.reply.bulk(&geohash::standard_geohash(xy)),
            None => ctx.reply.null(),
        }
    }
}

/// GEOPOS key member...
pub fn geopos(s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let z = match zset_read(s, ctx.db, args.get(1), ctx.now) {
        Err(WrongType) => return ctx.reply.error(WRONGTYPE),
        Ok(z) => z,
    };
    ctx.reply.array(args.len() - 2);
    for member in args.iter().skip(2) {
        match z.as_ref().and_then(|z| z.score(member)).and_then(geohash::decode_score) {
            Some([lon, lat]) => {
                ctx.reply.array(2);
                reply_coordinate(&mut ctx.reply, lon);
                reply_coordinate(&mut ctx.reply, lat);
            }
            None => ctx.reply.null_array(),
        }
    }
}

/// The geo commands. A search storing on another shard than its source's
/// runs in the proxy (the STORE key is a keyword key).
pub static COMMANDS: &[CommandSpec] = &[
    cmd!("geoadd", -5, WRITE | DENYOOM, KEY1, Keyed, Some(geoadd)),
    cmd!("geodist", -4, READONLY, KEY1, Keyed, Some(geodist)),
    cmd!("geohash", -2, READONLY, KEY1, Keyed, Some(geohash_command)),
    cmd!("geopos", -2, READONLY, KEY1, Keyed, Some(geopos)),
    cmd!("georadius", -6, WRITE | DENYOOM, KEY1, Keyed, Some(georadius)).with_store_key(StoreKey::Geo(5)),
    cmd!("georadius_ro", -6, READONLY, KEY1, Keyed, Some(georadius_ro)),
    cmd!("georadiusbymember", -5, WRITE | DENYOOM, KEY1, Keyed, Some(georadiusbymember))
        .with_store_key(StoreKey::Geo(5)),
    cmd!("georadiusbymember_ro", -5, READONLY, KEY1, Keyed, Some(georadiusbymember_ro)),
    cmd!("geosearch", -7, READONLY, KEY1, Keyed, Some(geosearch)),
    cmd!("geosearchstore", -8, WRITE | DENYOOM, KEYS12, Keyed, Some(geosearchstore)),
];
