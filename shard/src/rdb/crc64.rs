//! Redis's CRC-64 ("Jones" polynomial 0xad93d23594c935a9, reflected, init 0,
//! no final xor): the RDB file trailer and the DUMP payload footer.
//! Slicing-by-8 tables, built at compile time.

/// The reflected polynomial.
const POLY: u64 = 0x95ac_9329_ac4b_c9b5;

const fn tables() -> [[u64; 256]; 8] {
    let mut t = [[0u64; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u64;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ POLY } else { crc >> 1 };
            bit += 1;
        }
        t[0][i] = crc;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

static TABLES: [[u64; 256]; 8] = tables();

/// A running CRC-64 over bytes fed in any number of pieces.
#[derive(Clone, Copy, Debug, Default)]
pub struct Crc64(u64);

impl Crc64 {
    pub fn new() -> Crc64 {
        Crc64(0)
    }

    /// Continues from a CRC computed earlier.
    pub fn resume(crc: u64) -> Crc64 {
        Crc64(crc)
    }

    pub fn update(&mut self, bytes: &[u8]) {
        let t = &TABLES;
        let mut crc = self.0;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(c);
            let v = crc ^ u64::from_le_bytes(word);
            crc = t[7][(v & 0xff) as usize]
                ^ t[6][((v >> 8) & 0xff) as usize]
                ^ t[5][((v >> 16) & 0xff) as usize]
                ^ t[4][((v >> 24) & 0xff) as usize]
                ^ t[3][((v >> 32) & 0xff) as usize]
                ^ t[2][((v >> 40) & 0xff) as usize]
                ^ t[1][((v >> 48) & 0xff) as usize]
                ^ t[0][(v >> 56) as usize];
        }
        for &b in chunks.remainder() {
            crc = t[0][((crc ^ b as u64) & 0xff) as usize] ^ (crc >> 8);
        }
        self.0 = crc;
    }

    pub fn value(&self) -> u64 {
        self.0
    }
}

/// The CRC of one buffer.
pub fn crc64(bytes: &[u8]) -> u64 {
    let mut c = Crc64::new();
    c.update(bytes);
    c.value()
}

fn gf2_times(mat: &[u64; 64], mut vec: u64) -> u64 {
    let mut sum = 0;
    let mut i = 0;
    while vec != 0 {
        if vec & 1 == 1 {
            sum ^= mat[i];
        }
        vec >>= 1;
        i += 1;
    }
    sum
}

fn gf2_square(mat: &[u64; 64]) -> [u64; 64] {
    let mut sq = [0u64; 64];
    for (n, row) in sq.iter_mut().enumerate() {
        *row = gf2_times(mat, mat[n]);
    }
    sq
}

/// The CRC of `a ++ b` from `crc(a)`, `crc(b)` and `b`'s length (zlib's
/// method: multiply `crc_a` by x^(8·len_b) with repeated squaring), so
/// parts of a file serialized on different cores combine into one trailer.
pub fn crc64_combine(crc_a: u64, crc_b: u64, mut len_b: u64) -> u64 {
    if len_b == 0 {
        return crc_a;
    }
    // The operator for one zero bit, then squared to two and four bits.
    let mut odd = [0u64; 64];
    odd[0] = POLY;
    for (n, row) in odd.iter_mut().enumerate().skip(1) {
        *row = 1 << (n - 1);
    }
    let mut even = gf2_square(&odd);
    odd = gf2_square(&even);
    let mut crc = crc_a;
    loop {
        even = gf2_square(&odd);
        if len_b & 1 == 1 {
            crc = gf2_times(&even, crc);
        }
        len_b >>= 1;
        if len_b == 0 {
            break;
        }
        odd = gf2_square(&even);
        if len_b & 1 == 1 {
            crc = gf2_times(&odd, crc);
        }
        len_b >>= 1;
        if len_b == 0 {
            break;
        }
    }
    crc ^ crc_b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_test_vectors() {
        // crc64.c's own tests.
        assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
        let lorem = concat!(
            "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut ",
            "labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco ",
            "laboris nisi ut aliquip ex ea commodo consequat. Duis aute irure dolor in reprehenderit in ",
            "voluptate velit esse cillum dolore eu fugiat nulla pariatur. Excepteur sint occaecat cupidatat ",
            "non proident, sunt in culpa qui officia deserunt mollit anim id est laborum.\0"
        );
        assert_eq!(crc64(lorem.as_bytes()), 0xc779_4709_e696_83b3);
        let mut split = Crc64::new();
        split.update(b"1234");
        split.update(b"56789");
        assert_eq!(split.value(), 0xe9c6_d914_c4b8_d9ca);
    }

    #[test]
    fn combine_matches_whole() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 31 % 251) as u8).collect();
        for cut in [0, 1, 7, 8, 9, 500, 999, 1000] {
            let (a, b) = data.split_at(cut);
            assert_eq!(crc64_combine(crc64(a), crc64(b), b.len() as u64), crc64(&data), "cut {cut}");
        }
    }
}
