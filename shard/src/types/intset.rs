//! Redis's intset: a sorted array of integers stored at the narrowest width
//! (2, 4 or 8 bytes) that holds every member; the width only grows. Grown
//! one element at a time, so the array is never larger than needed.

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IntSet {
    W16(Vec<i16>),
    W32(Vec<i32>),
    W64(Vec<i64>),
}

impl Default for IntSet {
    fn default() -> Self {
        IntSet::W16(Vec::new())
    }
}

/// Runs `$body` with `$v` bound to the vector, whatever its width.
macro_rules! each_width {
    ($set:expr, $v:ident => $body:expr) => {
        match $set {
            IntSet::W16($v) => $body,
            IntSet::W32($v) => $body,
            IntSet::W64($v) => $body,
        }
    };
}

fn width_of(n: i64) -> u8 {
    if i16::try_from(n).is_ok() {
        2
    } else if i32::try_from(n).is_ok() {
        4
    } else {
        8
    }
}

fn insert_sorted<T: Ord + Copy>(v: &mut Vec<T>, x: T) -> bool {
    match v.binary_search(&x) {
        Ok(_) => false,
        Err(at) => {
            v.reserve_exact(1);
            v.insert(at, x);
            true
        }
    }
}

fn remove_sorted<T: Ord + Copy>(v: &mut Vec<T>, x: T) -> bool {
    match v.binary_search(&x) {
        Ok(at) => {
            v.remove(at);
            if v.capacity() > 8 && v.len() < v.capacity() / 2 {
                v.shrink_to_fit();
            }
            true
        }
        Err(_) => false,
    }
}

impl IntSet {
    pub fn len(&self) -> usize {
        each_width!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn width(&self) -> u8 {
        match self {
            IntSet::W16(_) => 2,
            IntSet::W32(_) => 4,
            IntSet::W64(_) => 8,
        }
    }

    pub fn contains(&self, n: i64) -> bool {
        match self {
            IntSet::W16(v) => i16::try_from(n).is_ok_and(|x| v.binary_search(&x).is_ok()),
            IntSet::W32(v) => i32::try_from(n).is_ok_and(|x| v.binary_search(&x).is_ok()),
            IntSet::W64(v) => v.binary_search(&n).is_ok(),
        }
    }

    /// Adds `n`; false when it was already a member.
    pub fn insert(&mut self, n: i64) -> bool {
        if width_of(n) > self.width() {
            self.upgrade(width_of(n));
        }
        // The width now holds `n`, so the conversions cannot fail.
        match self {
            IntSet::W16(v) => insert_sorted(v, n as i16),
            IntSet::W32(v) => insert_sorted(v, n as i32),
            IntSet::W64(v) => insert_sorted(v, n),
        }
    }

    fn upgrade(&mut self, width: u8) {
        let all: Vec<i64> = self.iter().collect();
        *self = match width {
            4 => IntSet::W32(all.iter().map(|&x| x as i32).collect()),
            _ => IntSet::W64(all),
        };
    }

    pub fn remove(&mut self, n: i64) -> bool {
        match self {
            IntSet::W16(v) => i16::try_from(n).is_ok_and(|x| remove_sorted(v, x)),
            IntSet::W32(v) => i32::try_from(n).is_ok_and(|x| remove_sorted(v, x)),
            IntSet::W64(v) => remove_sorted(v, n),
        }
    }

    /// The member at `i` in ascending order.
    pub fn get(&self, i: usize) -> Option<i64> {
        match self {
            IntSet::W16(v) => v.get(i).map(|&x| x.into()),
            IntSet::W32(v) => v.get(i).map(|&x| x.into()),
            IntSet::W64(v) => v.get(i).copied(),
        }
    }

    /// Removes the member at `i` in ascending order.
    pub fn remove_at(&mut self, i: usize) -> Option<i64> {
        let n = self.get(i)?;
        self.remove(n);
        Some(n)
    }

    /// Members in ascending order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { set: self, i: 0 }
    }

    pub fn heap_size(&self) -> usize {
        each_width!(self, v => v.capacity() * std::mem::size_of_val(&v.first().copied().unwrap_or_default()))
    }
}

pub struct Iter<'a> {
    set: &'a IntSet,
    i: usize,
}

impl Iterator for Iter<'_> {
    type Item = i64;
    fn next(&mut self) -> Option<i64> {
        let n = self.set.get(self.i)?;
        self.i += 1;
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widens_and_stays_sorted() {
        let mut s = IntSet::default();
        assert!(s.insert(5));
        assert!(s.insert(-3));
        assert!(!s.insert(5));
        assert_eq!(s.width(), 2);
        assert!(s.insert(70000));
        assert_eq!(s.width(), 4);
        assert!(s.insert(i64::MIN));
        assert_eq!(s.width(), 8);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![i64::MIN, -3, 5, 70000]);
        assert!(s.contains(-3) && !s.contains(4));
        assert!(s.remove(70000) && !s.remove(70000));
        assert_eq!(s.len(), 3);
        assert_eq!(s.remove_at(0), Some(i64::MIN));
        assert_eq!(s.heap_size() % 8, 0);
    }
}
