//! Batch calls done in parts: the items sorted (so each part reads its rows in key order,
//! with good locality in the B-tree), split into one part per thread, and the answers put
//! back in input order. `get_many`, the reads by name and the remote's fetch share it.

/// The indexes of `items` sorted by `compare`, in parts of at least `min` items, one per
/// thread of `threads` when there are enough.
pub(crate) fn sorted_parts<I>(
    items: &[I],
    compare: impl Fn(&I, &I) -> std::cmp::Ordering,
    threads: usize,
    min: usize,
) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_unstable_by(|&a, &b| compare(&items[a], &items[b]));
    let size = items.len().div_ceil(threads.max(1)).max(min).max(1);
    order.chunks(size).map(<[usize]>::to_vec).collect()
}

/// Answers given with the index of their item, back in input order: every index below
/// `len` comes exactly once.
pub(crate) fn scatter<T>(len: usize, answers: impl IntoIterator<Item = (usize, T)>) -> Vec<T> {
    let mut placed: Vec<Option<T>> = (0..len).map(|_| None).collect();
    for (i, answer) in answers {
        placed[i] = Some(answer);
    }
    placed.into_iter().map(|a| a.expect("every index is answered once")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_every_index_in_order_and_answers_go_back() {
        let items: [u8; 7] = [5, 3, 9, 1, 7, 2, 8];
        let parts = sorted_parts(&items, u8::cmp, 2, 2);
        assert_eq!(parts, [vec![3, 5, 1, 0], vec![4, 6, 2]]);
        let answers = parts.iter().flatten().map(|&i| (i, items[i] * 10));
        assert_eq!(scatter(items.len(), answers), [50, 30, 90, 10, 70, 20, 80]);
        assert_eq!(sorted_parts(&items, u8::cmp, 4, 100).len(), 1);
        assert!(sorted_parts::<u8>(&[], u8::cmp, 2, 1).is_empty());
    }
}
