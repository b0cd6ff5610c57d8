use super::*;

fn get(l: &List, i: usize) -> Option<Vec<u8>> {
    l.get(i, |e| e.to_vec())
}

#[test]
fn deque_operations_across_nodes() {
    for (fill, depth) in [(Fill(3), 0), (Fill(-2), 0), (Fill(3), 1), (Fill(4), 2)] {
        let mut l = List::with_depth(depth);
        let mut model = VecDeque::new();
        for i in 0..50 {
            let v = format!("v{i}").into_bytes();
            if i % 3 == 0 {
                l.push_front(&v, fill);
                model.push_front(v);
            } else {
                l.push_back(&v, fill);
                model.push_back(v);
            }
        }
        assert_eq!(l.to_vecs(), model.iter().cloned().collect::<Vec<_>>());
        assert_eq!(get(&l, 7), model.get(7).cloned());
        assert!(l.set(49, b"last"));
        model[49] = b"last".to_vec();
        assert_eq!(l.pop_back(), model.pop_back());
        assert_eq!(l.pop_front(), model.pop_front());
        assert_eq!(l.len(), model.len());
        assert!(l.insert(b"v4", true, b"x", fill));
        let at = model.iter().position(|e| e == b"v4").unwrap();
        model.insert(at, b"x".to_vec());
        assert_eq!(l.to_vecs(), model.iter().cloned().collect::<Vec<_>>());
        let mut last = None;
        l.walk(l.len() - 1, true, |e| {
            last = Some(e.to_vec());
            false
        });
        assert_eq!(last, model.back().cloned());
        l.check_layout().unwrap();
    }
}

/// 100-byte values that compress well: every node past the depth is
/// compressed, the ends never are.
fn compressible(i: usize) -> Vec<u8> {
    format!("{i:08}-{}", "abcdefgh".repeat(12)).into_bytes()
}

#[test]
fn interior_nodes_are_compressed_and_ends_are_not() {
    for depth in [1usize, 2, 3] {
        let mut l = List::with_depth(depth as i64);
        for i in 0..200 {
            l.push_back(&compressible(i), Fill(4));
        }
        assert_eq!(l.node_count(), 50);
        assert_eq!(l.compressed_nodes(), 50 - 2 * depth);
        l.check_layout().unwrap();
        // Pops at both ends decompress the node crossing the boundary.
        for _ in 0..150 {
            l.pop_front();
            l.check_layout().unwrap();
        }
        assert_eq!(l.to_vecs(), (150..200).map(compressible).collect::<Vec<_>>());
        for i in (0..150).rev() {
            l.push_front(&compressible(i), Fill(4));
            l.check_layout().unwrap();
        }
        assert_eq!(l.compressed_nodes(), 50 - 2 * depth);
        for _ in 0..197 {
            l.pop_back();
            l.check_layout().unwrap();
        }
        assert_eq!(l.compressed_nodes(), 0);
    }
}

#[test]
fn reads_and_writes_in_compressed_nodes() {
    let mut l = List::with_depth(1);
    let mut model: Vec<Vec<u8>> = (0..100).map(compressible).collect();
    for v in &model {
        l.push_back(v, Fill(5));
    }
    let before = l.heap_size();
    for i in [0, 7, 50, 99] {
        assert_eq!(get(&l, i).as_ref(), Some(&model[i]));
    }
    // LSET into a compressed node keeps it compressed.
    assert!(l.set(50, b"short"));
    model[50] = b"short".to_vec();
    assert_eq!(get(&l, 50), Some(b"short".to_vec()));
    l.check_layout().unwrap();
    // Walks in both directions over compressed nodes.
    let mut back = Vec::new();
    l.walk(60, true, |e| {
        back.push(e.to_vec());
        back.len() < 30
    });
    assert_eq!(back, model[31..=60].iter().rev().cloned().collect::<Vec<_>>());
    let mut fwd = Vec::new();
    l.walk(33, false, |e| {
        fwd.push(e.to_vec());
        true
    });
    assert_eq!(fwd, model[33..].to_vec());
    // LINSERT into a full compressed node splits it.
    assert!(l.insert(&compressible(42), false, b"after-42", Fill(5)));
    model.insert(43, b"after-42".to_vec());
    assert_eq!(l.to_vecs(), model);
    l.check_layout().unwrap();
    // LREM from the tail, LTRIM in the middle.
    assert_eq!(l.remove(-2, b"short"), 1);
    model.remove(51);
    assert_eq!(l.to_vecs(), model);
    l.check_layout().unwrap();
    l.trim(Some((13, 80)));
    model = model[13..=80].to_vec();
    assert_eq!(l.to_vecs(), model);
    l.check_layout().unwrap();
    assert!(l.heap_size() < before);
}

#[test]
fn compression_saves_memory() {
    let (mut plain, mut packed) = (List::new(), List::with_depth(1));
    for i in 0..10_000 {
        plain.push_back(&compressible(i), Fill(-2));
        packed.push_back(&compressible(i), Fill(-2));
    }
    assert!(packed.heap_size() * 3 < plain.heap_size(), "{} vs {}", packed.heap_size(), plain.heap_size());
    assert!(packed == plain);
}

#[test]
fn lrem_drops_emptied_nodes() {
    let mut l = List::with_depth(1);
    for i in 0..60 {
        let v = if i % 10 < 5 { b"same-value-that-is-long-enough-to-matter".to_vec() } else { compressible(i) };
        l.push_back(&v, Fill(5));
    }
    assert_eq!(l.remove(0, b"same-value-that-is-long-enough-to-matter"), 30);
    assert_eq!(l.node_count(), 6);
    assert_eq!(l.len(), 30);
    l.check_layout().unwrap();
    assert_eq!(l.remove(3, &compressible(9)), 1);
    assert_eq!(l.remove(0, b"nothing"), 0);
    l.check_layout().unwrap();
}
