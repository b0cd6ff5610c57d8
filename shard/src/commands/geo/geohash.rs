//! Redis's geohash arithmetic (geohash.c, geohash_helper.c), step for step,
//! so that scores, the boxes a search scans and every distance come out
//! bit for bit as Redis computes them. Coordinates are `[longitude,
//! latitude]`; a hash interleaves latitude (even bits) and longitude (odd).

use std::f64::consts::PI;

pub const STEP_MAX: u8 = 26;
pub const LAT_MIN: f64 = -85.05112878;
pub const LAT_MAX: f64 = 85.05112878;
pub const LONG_MIN: f64 = -180.0;
pub const LONG_MAX: f64 = 180.0;

const EARTH_RADIUS_IN_METERS: f64 = 6372797.560856;
const MERCATOR_MAX: f64 = 20037726.37;

/// A hash of `step` bits per coordinate; all zero means "no box".
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Bits {
    pub bits: u64,
    pub step: u8,
}

impl Bits {
    fn is_zero(&self) -> bool {
        self.bits == 0 && self.step == 0
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Range {
    pub min: f64,
    pub max: f64,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Area {
    pub longitude: Range,
    pub latitude: Range,
}

/// Redis's coordinate ranges (EPSG:900913): latitude stops short of the poles.
pub const LONG_RANGE: Range = Range { min: LONG_MIN, max: LONG_MAX };
pub const LAT_RANGE: Range = Range { min: LAT_MIN, max: LAT_MAX };

fn interleave64(xlo: u32, ylo: u32) -> u64 {
    const B: [u64; 5] =
        [0x5555555555555555, 0x3333333333333333, 0x0F0F0F0F0F0F0F0F, 0x00FF00FF00FF00FF, 0x0000FFFF0000FFFF];
    const S: [u32; 5] = [1, 2, 4, 8, 16];
    let (mut x, mut y) = (xlo as u64, ylo as u64);
    for i in (0..5).rev() {
        x = (x | (x << S[i])) & B[i];
        y = (y | (y << S[i])) & B[i];
    }
    x | (y << 1)
}

fn deinterleave64(interleaved: u64) -> u64 {
    const B: [u64; 6] = [
        0x5555555555555555,
        0x3333333333333333,
        0x0F0F0F0F0F0F0F0F,
        0x00FF00FF00FF00FF,
        0x0000FFFF0000FFFF,
        0x00000000FFFFFFFF,
    ];
    const S: [u32; 6] = [0, 1, 2, 4, 8, 16];
    let (mut x, mut y) = (interleaved, interleaved >> 1);
    for i in 0..6 {
        x = (x | (x >> S[i])) & B[i];
        y = (y | (y >> S[i])) & B[i];
    }
    x | (y << 32)
}

/// geohashEncode: `None` outside Redis's limits.
pub fn encode(long_range: Range, lat_range: Range, longitude: f64, latitude: f64, step: u8) -> Option<Bits> {
    if step > 32 || step == 0 {
        return None;
    }
    if !(LONG_MIN..=LONG_MAX).contains(&longitude) || !(LAT_MIN..=LAT_MAX).contains(&latitude) {
        return None;
    }
    if latitude < lat_range.min || latitude > lat_range.max || longitude < long_range.min || longitude > long_range.max
    {
        return None;
    }
    let mut lat_offset = (latitude - lat_range.min) / (lat_range.max - lat_range.min);
    let mut long_offset = (longitude - long_range.min) / (long_range.max - long_range.min);
    lat_offset *= (1u64 << step) as f64;
    long_offset *= (1u64 << step) as f64;
    Some(Bits { bits: interleave64(lat_offset as u32, long_offset as u32), step })
}

/// The 52-bit score of a position (GEOADD).
pub fn encode_score(longitude: f64, latitude: f64) -> Option<f64> {
    encode(LONG_RANGE, LAT_RANGE, longitude, latitude, STEP_MAX).map(|h| align52(h) as f64)
}

/// geohashDecode: the box a hash names.
pub fn decode(long_range: Range, lat_range: Range, hash: Bits) -> Option<Area> {
    if hash.is_zero() {
        return None;
    }
    let step = hash.step;
    let sep = deinterleave64(hash.bits);
    let lat_scale = lat_range.max - lat_range.min;
    let long_scale = long_range.max - long_range.min;
    let ilato = sep as u32;
    let ilono = (sep >> 32) as u32;
    let cells = (1u64 << step) as f64;
    Some(Area {
        latitude: Range {
            min: lat_range.min + (ilato as f64 / cells) * lat_scale,
            max: lat_range.min + (ilato.wrapping_add(1) as f64 / cells) * lat_scale,
        },
        longitude: Range {
            min: long_range.min + (ilono as f64 / cells) * long_scale,
            max: long_range.min + (ilono.wrapping_add(1) as f64 / cells) * long_scale,
        },
    })
}

/// The centre of a box, framed to the limits.
fn area_center(area: &Area) -> [f64; 2] {
    let lon = ((area.longitude.min + area.longitude.max) / 2.0).clamp(LONG_MIN, LONG_MAX);
    let lat = ((area.latitude.min + area.latitude.max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    [lon, lat]
}

/// C's `(uint64_t)score` as gcc does it on x86-64 (decodeGeohash): negative
/// scores through a signed conversion, infinities to Intel's "indefinite".
fn score_bits(score: f64) -> u64 {
    if score.is_infinite() {
        return if score > 0.0 { 0 } else { 1 << 63 };
    }
    if score < 0.0 {
        (score as i64) as u64
    } else {
        score as u64
    }
}

/// decodeGeohash: the position a sorted-set score stands for.
pub fn decode_score(score: f64) -> Option<[f64; 2]> {
    let hash = Bits { bits: score_bits(score), step: STEP_MAX };
    decode(LONG_RANGE, LAT_RANGE, hash).map(|a| area_center(&a))
}

fn move_x(hash: &mut Bits, d: i8) {
    if d == 0 {
        return;
    }
    let mut x = hash.bits & 0xaaaaaaaaaaaaaaaa;
    let y = hash.bits & 0x5555555555555555;
    let zz = 0x5555555555555555u64 >> (64 - hash.step as u32 * 2);
    if d > 0 {
        x = x.wrapping_add(zz + 1);
    } else {
        x |= zz;
        x = x.wrapping_sub(zz + 1);
    }
    x &= 0xaaaaaaaaaaaaaaaau64 >> (64 - hash.step as u32 * 2);
    hash.bits = x | y;
}

fn move_y(hash: &mut Bits, d: i8) {
    if d == 0 {
        return;
    }
    let x = hash.bits & 0xaaaaaaaaaaaaaaaa;
    let mut y = hash.bits & 0x5555555555555555;
    let zz = 0xaaaaaaaaaaaaaaaau64 >> (64 - hash.step as u32 * 2);
    if d > 0 {
        y = y.wrapping_add(zz + 1);
    } else {
        y |= zz;
        y = y.wrapping_sub(zz + 1);
    }
    y &= 0x5555555555555555u64 >> (64 - hash.step as u32 * 2);
    hash.bits = x | y;
}

/// The eight boxes around one, in Redis's order of search (after the box
/// itself): north, south, east, west, north-east, north-west, south-east,
/// south-west.
#[derive(Clone, Copy, Debug, Default)]
pub struct Neighbors {
    pub north: Bits,
    pub south: Bits,
    pub east: Bits,
    pub west: Bits,
    pub north_east: Bits,
    pub north_west: Bits,
    pub south_east: Bits,
    pub south_west: Bits,
}

fn neighbors(hash: &Bits) -> Neighbors {
    let moved = |dx: i8, dy: i8| {
        let mut h = *hash;
        move_x(&mut h, dx);
        move_y(&mut h, dy);
        h
    };
    Neighbors {
        east: moved(1, 0),
        west: moved(-1, 0),
        south: moved(0, -1),
        north: moved(0, 1),
        north_west: moved(-1, 1),
        north_east: moved(1, 1),
        south_east: moved(1, -1),
        south_west: moved(-1, -1),
    }
}

fn deg_rad(ang: f64) -> f64 {
    ang * (PI / 180.0)
}

fn rad_deg(ang: f64) -> f64 {
    ang / (PI / 180.0)
}

/// geohashEstimateStepsByRadius.
fn estimate_steps(mut range_meters: f64, lat: f64) -> u8 {
    if range_meters == 0.0 {
        return 26;
    }
    let mut step: i32 = 1;
    while range_meters < MERCATOR_MAX {
        range_meters *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u8
}

/// What a search covers: a circle or a box around a centre, in the
/// command's unit (`conversion` meters each).
#[derive(Clone, Copy, Debug)]
pub enum ShapeKind {
    Radius(f64),
    Box { width: f64, height: f64 },
}

#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub xy: [f64; 2],
    pub conversion: f64,
    pub kind: ShapeKind,
}

impl Shape {
    /// geohashBoundingBox: [min lon, min lat, max lon, max lat].
    fn bounding_box(&self) -> [f64; 4] {
        let [longitude, latitude] = self.xy;
        let (height, width) = match self.kind {
            ShapeKind::Radius(r) => (self.conversion * r, self.conversion * r),
            ShapeKind::Box { width, height } => (self.conversion * (height / 2.0), self.conversion * (width / 2.0)),
        };
        let lat_delta = rad_deg(height / EARTH_RADIUS_IN_METERS);
        let long_delta_top = rad_deg(width / EARTH_RADIUS_IN_METERS / deg_rad(latitude + lat_delta).cos());
        let long_delta_bottom = rad_deg(width / EARTH_RADIUS_IN_METERS / deg_rad(latitude - lat_delta).cos());
        let southern = latitude < 0.0;
        let delta = if southern { long_delta_bottom } else { long_delta_top };
        [longitude - delta, latitude - lat_delta, longitude + delta, latitude + lat_delta]
    }

    /// geoWithinShape for a decoded point: its distance from the centre in
    /// meters when inside.
    pub fn distance_within(&self, xy: [f64; 2]) -> Option<f64> {
        match self.kind {
            ShapeKind::Radius(r) => {
                let d = distance(self.xy[0], self.xy[1], xy[0], xy[1]);
                (d <= r * self.conversion).then_some(d)
            }
            ShapeKind::Box { width, height } => {
                let (width_m, height_m) = (width * self.conversion, height * self.conversion);
                let (x1, y1, x2, y2) = (self.xy[0], self.xy[1], xy[0], xy[1]);
                if lat_distance(y2, y1) > height_m / 2.0 {
                    return None;
                }
                if distance(x2, y2, x1, y2) > width_m / 2.0 {
                    return None;
                }
                Some(distance(x1, y1, x2, y2))
            }
        }
    }
}

/// The boxes a search scans: the centre's box and its neighbours, those
/// the shape cannot reach zeroed (geohashCalculateAreasByShapeWGS84).
pub fn areas(shape: &Shape) -> (Bits, Neighbors) {
    let [min_lon, min_lat, max_lon, max_lat] = shape.bounding_box();
    let [longitude, latitude] = shape.xy;
    let radius_meters = match shape.kind {
        ShapeKind::Radius(r) => r,
        ShapeKind::Box { width, height } => ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt(),
    } * shape.conversion;
    let mut steps = estimate_steps(radius_meters, latitude);
    let locate = |steps: u8| {
        let hash = encode(LONG_RANGE, LAT_RANGE, longitude, latitude, steps).unwrap_or_default();
        let area = decode(LONG_RANGE, LAT_RANGE, hash).unwrap_or_default();
        (hash, neighbors(&hash), area)
    };
    let (mut hash, mut near, mut area) = locate(steps);
    let reach = |b: Bits| decode(LONG_RANGE, LAT_RANGE, b).unwrap_or_default();
    let decrease_step = reach(near.north).latitude.max < max_lat
        || reach(near.south).latitude.min > min_lat
        || reach(near.east).longitude.max < max_lon
        || reach(near.west).longitude.min > min_lon;
    if steps > 1 && decrease_step {
        steps -= 1;
        (hash, near, area) = locate(steps);
    }
    if steps >= 2 {
        let zero = Bits::default();
        if area.latitude.min < min_lat {
            (near.south, near.south_west, near.south_east) = (zero, zero, zero);
        }
        if area.latitude.max > max_lat {
            (near.north, near.north_east, near.north_west) = (zero, zero, zero);
        }
        if area.longitude.min < min_lon {
            (near.west, near.south_west, near.north_west) = (zero, zero, zero);
        }
        if area.longitude.max > max_lon {
            (near.east, near.south_east, near.north_east) = (zero, zero, zero);
        }
    }
    (hash, near)
}

/// geohashAlign52Bits.
pub fn align52(hash: Bits) -> u64 {
    hash.bits << (52 - hash.step as u32 * 2)
}

/// The score range [min, max) of every position inside a box
/// (scoresOfGeoHashBox).
pub fn score_range(hash: Bits) -> (f64, f64) {
    let min = align52(hash);
    let max = align52(Bits { bits: hash.bits.wrapping_add(1), step: hash.step });
    (min as f64, max as f64)
}

fn lat_distance(lat1d: f64, lat2d: f64) -> f64 {
    EARTH_RADIUS_IN_METERS * (deg_rad(lat2d) - deg_rad(lat1d)).abs()
}

/// geohashGetDistance: haversine on Redis's earth radius, in meters.
pub fn distance(lon1d: f64, lat1d: f64, lon2d: f64, lat2d: f64) -> f64 {
    let lon1r = deg_rad(lon1d);
    let lon2r = deg_rad(lon2d);
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1d, lat2d);
    }
    let lat1r = deg_rad(lat1d);
    let lat2r = deg_rad(lat2d);
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_IN_METERS * a.sqrt().asin()
}

/// GEOHASH's 11 characters: the position re-encoded on the standard
/// [-90, 90] latitude range.
pub fn standard_geohash(xy: [f64; 2]) -> [u8; 11] {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let hash = encode(Range { min: -180.0, max: 180.0 }, Range { min: -90.0, max: 90.0 }, xy[0], xy[1], 26)
        .unwrap_or_default();
    let mut out = [b'0'; 11];
    for (i, c) in out.iter_mut().enumerate().take(10) {
        *c = ALPHABET[((hash.bits >> (52 - (i + 1) * 5)) & 0x1f) as usize];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleave_round_trips() {
        for (x, y) in [(0u32, 0u32), (1, 0), (0, 1), (0x3ffffff, 0x1234567), (u32::MAX, 7)] {
            let i = interleave64(x, y);
            let d = deinterleave64(i);
            assert_eq!((d as u32, (d >> 32) as u32), (x, y));
        }
    }

    #[test]
    fn palermo_as_redis_has_it() {
        // GEOADD Sicily 13.361389 38.115556 Palermo: ZSCORE 3479099956230698.
        assert_eq!(encode_score(13.361389, 38.115556), Some(3479099956230698.0));
        let xy = decode_score(3479099956230698.0).unwrap();
        assert_eq!(format!("{:.17}", xy[0]), "13.36138933897018433");
        assert_eq!(&standard_geohash(xy), b"sqc8b49rny0");
        let catania = decode_score(encode_score(15.087269, 37.502669).unwrap()).unwrap();
        let d = distance(xy[0], xy[1], catania[0], catania[1]);
        assert_eq!(format!("{:.4}", d / 1000.0), "166.2742");
    }
}
