//! LOLWUT [VERSION v] [args...]: Redis's computer art, ported from lolwut.c,
//! lolwut5.c (Georg Nees's "Schotter" in Braille dots) and lolwut6.c (a
//! skyline in terminal colours), with the same arithmetic (C's float and
//! double steps) and the C library's rand(), so the same seed draws the
//! same picture. Versions other than 5 and 6 print the version line only,
//! as Redis 7.0 does.

use super::prelude::*;
use super::Ctx;
use crate::args::{parse_i64, Args};
use crate::reply::errors::NOT_INTEGER;
use crate::shard::Shard;

/// The Redis version corekv reports (INFO's redis_version).
pub const REDIS_VERSION: &str = "7.0.15";

struct Canvas {
    width: i32,
    height: i32,
    pixels: Vec<u8>,
}

impl Canvas {
    fn new(width: i32, height: i32, color: u8) -> Canvas {
        Canvas { width, height, pixels: vec![color; width as usize * height as usize] }
    }

    fn draw(&mut self, x: i32, y: i32, color: u8) {
        if x >= 0 && x < self.width && y >= 0 && y < self.height {
            self.pixels[(x + y * self.width) as usize] = color;
        }
    }

    fn get(&self, x: i32, y: i32) -> u8 {
        if x < 0 || x >= self.width || y < 0 || y >= self.height {
            return 0;
        }
        self.pixels[(x + y * self.width) as usize]
    }

    /// Bresenham's line (lwDrawLine).
    fn line(&mut self, mut x1: i32, mut y1: i32, x2: i32, y2: i32, color: u8) {
        let (dx, dy) = ((x2 - x1).abs(), (y2 - y1).abs());
        let (sx, sy) = (if x1 < x2 { 1 } else { -1 }, if y1 < y2 { 1 } else { -1 });
        let mut err = dx - dy;
        loop {
            self.draw(x1, y1, color);
            if x1 == x2 && y1 == y2 {
                break;
            }
            let e2 = err * 2;
            if e2 > -dy {
                err -= dy;
                x1 += sx;
            }
            if e2 < dx {
                err += dx;
                y1 += sy;
            }
        }
    }

    /// lwDrawSquare: a square of side `size` centred at x,y, rotated by
    /// `angle`; C's float/double conversions kept step by step.
    fn square(&mut self, x: i32, y: i32, size: f32, angle: f32, color: u8) {
        // Redis's own digits, not SQRT_2's.
        #[allow(clippy::approx_constant)]
        let size = (size as f64 / 1.4142135623) as f32;
        let size = (size as f64).round() as f32;
        let mut k = (std::f64::consts::FRAC_PI_4 + angle as f64) as f32;
        let (mut px, mut py) = ([0i32; 4], [0i32; 4]);
        for j in 0..4 {
            px[j] = ((k as f64).sin() * size as f64 + x as f64).round() as i32;
            py[j] = ((k as f64).cos() * size as f64 + y as f64).round() as i32;
            k = (k as f64 + std::f64::consts::FRAC_PI_2) as f32;
        }
        for j in 0..4 {
            self.line(px[j], py[j], px[(j + 1) % 4], py[(j + 1) % 4], color);
        }
    }
}

/// The C library's rand(), as Redis draws with it.
fn rand() -> i32 {
    // SAFETY: rand() takes no arguments; glibc's is thread-safe.
    unsafe { libc::rand() }
}

const RAND_MAX: f32 = libc::RAND_MAX as f32;

/// lwDrawSchotter.
fn schotter(cols: i32, per_row: i32, per_col: i32) -> Canvas {
    let width = cols * 2;
    let padding = if width > 4 { 2 } else { 0 };
    let side = (width - padding * 2) as f32 / per_row as f32;
    let height = (side * per_col as f32 + (padding * 2) as f32) as i32;
    let mut canvas = Canvas::new(width, height, 0);
    for y in 0..per_col {
        for x in 0..per_row {
            let mut sx = (x as f32 * side + side / 2.0 + padding as f32) as i32;
            let mut sy = (y as f32 * side + side / 2.0 + padding as f32) as i32;
            let mut angle = 0.0f32;
            if y > 1 {
                let draw = || rand() as f32 / RAND_MAX / per_col as f32 * y as f32;
                let (mut r1, mut r2, mut r3) = (draw(), draw(), draw());
                if rand() % 2 != 0 {
                    r1 = -r1;
                }
                if rand() % 2 != 0 {
                    r2 = -r2;
                }
                if rand() % 2 != 0 {
                    r3 = -r3;
                }
                angle = r1;
                sx = (sx as f32 + r2 * side / 3.0) as i32;
                sy = (sy as f32 + r3 * side / 3.0) as i32;
            }
            canvas.square(sx, sy, side, angle, 1);
        }
    }
    canvas
}

/// lolwut5's renderCanvas: 2x4 pixels per Braille character.
fn render_braille(c: &Canvas) -> Vec<u8> {
    let mut text = Vec::new();
    let mut y = 0;
    while y < c.height {
        let mut x = 0;
        while x < c.width {
            let bits = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (0, 3), (1, 3)];
            let byte =
                bits.iter().enumerate().fold(0u32, |b, (i, (dx, dy))| b | ((c.get(x + dx, y + dy) != 0) as u32) << i);
            let code = 0x2800 + byte;
            text.extend_from_slice(&[
                0xE0 | (code >> 12) as u8,
                0x80 | ((code >> 6) & 0x3F) as u8,
                0x80 | (code & 0x3F) as u8,
            ]);
            x += 2;
        }
        if y != c.height - 1 {
            text.push(b'\n');
        }
        y += 4;
    }
    text
}

/// lolwut6's skyscraper: `color` walls, random grey windows.
fn skyscraper(c: &mut Canvas, xoff: i32, width: i32, height: i32, windows: bool, color: u8) {
    let starty = c.height - 1;
    let endy = starty - height + 1;
    let mut y = starty;
    while y >= endy {
        for x in xoff..xoff + width {
            // The roof is four pixels narrower.
            if y == endy && (x <= xoff + 1 || x >= xoff + width - 2) {
                continue;
            }
            let mut pixel = color;
            if windows && x > xoff + 1 && x < xoff + width - 2 && y > endy + 1 && y < starty - 1 {
                let (relx, rely) = (x - (xoff + 1), y - (endy + 1));
                if (relx / 2) % 2 != 0 && rely % 2 != 0 {
                    loop {
                        pixel = (1 + rand() % 2) as u8;
                        if pixel != color {
                            break;
                        }
                    }
                    if relx % 2 != 0 {
                        pixel = c.get(x - 1, y);
                    }
                }
            }
            c.draw(x, y, pixel);
        }
        y -= 1;
    }
}

/// lolwut6's generateSkyline.
fn skyline(c: &mut Canvas) {
    for color in [2u8, 1] {
        let mut offset = -10;
        while offset < c.width {
            offset += rand() % 8;
            let width = 10 + rand() % 9;
            let height =
                if color == 2 { c.height / 2 + rand() % c.height / 2 } else { c.height / 2 + rand() % c.height / 3 };
            skyscraper(c, offset, width, height, false, color);
            offset += if color == 2 { width / 2 } else { width + 1 };
        }
    }
    let mut offset = -10;
    while offset < c.width {
        offset += rand() % 8;
        let mut width = 5 + rand() % 14;
        if width % 4 != 0 {
            width += width % 3;
        }
        let height = c.height / 3 + rand() % c.height / 2;
        skyscraper(c, offset, width, height, true, 0);
        offset += width + 5;
    }
}

/// lolwut6's renderCanvas: one coloured space per pixel.
fn render_colors(c: &Canvas) -> Vec<u8> {
    let mut text = Vec::new();
    for y in 0..c.height {
        for x in 0..c.width {
            let escape = match c.get(x, y) {
                1 => "0;90;100m",
                2 => "0;37;47m",
                3 => "0;97;107m",
                _ => "0;30;40m",
            };
            text.extend_from_slice(format!("\x1b[{escape} \x1b[0m").as_bytes());
        }
        if y != c.height - 1 {
            text.push(b'\n');
        }
    }
    text
}

/// Optional numeric arguments in order, each Redis's `long` or its error.
fn numbers<const N: usize>(args: &[&[u8]], mut out: [i64; N]) -> Result<[i64; N], &'static str> {
    for (slot, arg) in out.iter_mut().zip(args) {
        *slot = parse_i64(arg).ok_or(NOT_INTEGER)?;
    }
    Ok(out)
}

fn lolwut5(args: &[&[u8]]) -> Result<Vec<u8>, &'static str> {
    let [cols, per_row, per_col] = numbers(args, [66, 8, 12])?;
    let canvas = schotter(cols.clamp(1, 1000) as i32, per_row.clamp(1, 200) as i32, per_col.clamp(1, 200) as i32);
    let mut text = render_braille(&canvas);
    text.extend_from_slice(b"\nGeorg Nees - schotter, plotter on paper, 1968. Redis ver. ");
    text.extend_from_slice(REDIS_VERSION.as_bytes());
    text.push(b'\n');
    Ok(text)
}

fn lolwut6(args: &[&[u8]]) -> Result<Vec<u8>, &'static str> {
    let [cols, rows] = numbers(args, [80, 20])?;
    let mut canvas = Canvas::new(cols.clamp(1, 1000) as i32, rows.clamp(1, 1000) as i32, 3);
    skyline(&mut canvas);
    let mut text = render_colors(&canvas);
    text.extend_from_slice(b"\nDedicated to the 8 bit game developers of past and present.\nOriginal 8 bit image from Plaguemon by hikikomori. Redis ver. ");
    text.extend_from_slice(REDIS_VERSION.as_bytes());
    text.push(b'\n');
    Ok(text)
}

pub fn lolwut(_s: &mut Shard, ctx: &mut Ctx, args: Args) {
    let mut rest: Vec<&[u8]> = args.iter().skip(1).collect();
    let mut version = REDIS_VERSION.to_string();
    if rest.len() >= 2 && rest[0].eq_ignore_ascii_case(b"version") {
        let Some(v) = parse_i64(rest[1]) else { return ctx.reply.error(NOT_INTEGER) };
        // Redis prints the version as "%u.0.0" of the long.
        version = format!("{}.0.0", v as u32);
        rest.drain(..2);
    }
    // "5.x" but 5.9 (and 4.9): Schotter; "6.x" but 6.9 (and 5.9): skyline.
    let v = version.as_bytes();
    let art = match (v[0], v[1] == b'.', v[2] == b'9') {
        (b'5', true, false) | (b'4', true, true) => lolwut5(&rest),
        (b'6', true, false) | (b'5', true, true) => lolwut6(&rest),
        _ => Ok(format!("Redis ver. {REDIS_VERSION}\n").into_bytes()),
    };
    match art {
        Ok(text) => ctx.reply.verbatim(&text),
        Err(e) => ctx.reply.error(e),
    }
}

pub static COMMANDS: &[CommandSpec] = &[cmd!("lolwut", -1, READONLY | FAST, NOKEYS, Local, Some(lolwut))];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_rows_of_schotter_are_fixed() {
        // Rows 0 and 1 draw no random displacement.
        let a = lolwut5(&[b"10", b"2", b"2"]).unwrap();
        let b = lolwut5(&[b"10", b"2", b"2"]).unwrap();
        assert_eq!(a, b);
        assert!(String::from_utf8(a).unwrap().ends_with("Redis ver. 7.0.15\n"));
    }

    #[test]
    fn skyline_fits_its_canvas() {
        let text = lolwut6(&[b"5", b"3"]).unwrap();
        let lines = String::from_utf8(text).unwrap();
        assert_eq!(lines.lines().next().unwrap().matches('\x1b').count(), 10);
    }
}
