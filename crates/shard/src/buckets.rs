//! The hash space cut into buckets: which bucket a hash falls in, which hashes a bucket
//! covers, and [`BucketSet`], a set of buckets written in a Lease as `0-3,7,9-12`.
//!
//! The space is the 64-bit FNV-1a hash of an object's shard key (its uid or its namespace),
//! the hash the API server filters list and watch by (KEP-5866). With `count` buckets (a
//! power of two), bucket `b` is every hash whose top `log2(count)` bits are `b`: the
//! contiguous range `[b × 2^64/count, (b+1) × 2^64/count)`. Contiguous buckets therefore
//! merge into contiguous hash ranges, which is what a shard selector expresses.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use kctrl_client::sharding::{HashRange, ShardField, ShardSelector};

/// The bucket count of a [`ShardConfig`](crate::ShardConfig) unless told otherwise.
pub const DEFAULT_BUCKET_COUNT: u32 = 64;

/// The largest bucket count accepted (a Lease's annotations must stay small).
pub const MAX_BUCKET_COUNT: u32 = 4096;

/// One past the largest hash: the end of the whole space, 2^64.
pub const HASH_SPACE_END: u128 = 1 << 64;

/// The bucket of `hash` among `count` buckets (`count` a power of two, at least 1): the
/// hash's top `log2(count)` bits.
///
/// ```
/// use kctrl_shard::bucket_of;
/// assert_eq!(bucket_of(0x0000_0000_0000_0000, 64), 0);
/// assert_eq!(bucket_of(0x03ff_ffff_ffff_ffff, 64), 0);
/// assert_eq!(bucket_of(0x0400_0000_0000_0000, 64), 1);
/// assert_eq!(bucket_of(u64::MAX, 64), 63);
/// assert_eq!(bucket_of(u64::MAX, 1), 0);
/// ```
pub fn bucket_of(hash: u64, count: u32) -> u32 {
    let bits = count.max(1).trailing_zeros();
    if bits == 0 {
        0
    } else {
        // `bits` is at most 31, so the shift is at least 33 and the result fits in u32.
        u32::try_from(hash >> (64 - bits)).unwrap_or(u32::MAX)
    }
}

/// The hashes bucket `bucket` covers among `count`: `(start, end)`, start inclusive, end
/// exclusive (up to [`HASH_SPACE_END`]).
///
/// ```
/// use kctrl_shard::bucket_range;
/// assert_eq!(bucket_range(0, 2), (0, 1 << 63));
/// assert_eq!(bucket_range(1, 2), (1 << 63, 1 << 64));
/// ```
pub fn bucket_range(bucket: u32, count: u32) -> (u64, u128) {
    let width = HASH_SPACE_END / u128::from(count.max(1));
    let start = width * u128::from(bucket);
    // `start < 2^64` for every bucket below `count`.
    (u64::try_from(start).unwrap_or(u64::MAX), start + width)
}

/// A set of buckets, kept sorted. Its text form, as a Lease stores it, lists single buckets
/// and inclusive runs: `0-3,7,9-12`; the empty set is the empty string.
///
/// ```
/// use kctrl_shard::BucketSet;
/// let set: BucketSet = "0-3,7".parse().unwrap();
/// assert_eq!(set.len(), 5);
/// assert!(set.contains(2) && set.contains(7) && !set.contains(4));
/// assert_eq!(set.to_string(), "0-3,7");
/// // Buckets 0-3 and 7 of 8: two ranges of the hash space.
/// assert_eq!(set.ranges(8).len(), 2);
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct BucketSet {
    buckets: BTreeSet<u32>,
}

impl BucketSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every bucket of `count`.
    pub fn all(count: u32) -> Self {
        (0..count).collect()
    }

    /// Adds `bucket`; `true` if it was not there.
    pub fn insert(&mut self, bucket: u32) -> bool {
        self.buckets.insert(bucket)
    }

    /// Removes `bucket`; `true` if it was there.
    pub fn remove(&mut self, bucket: u32) -> bool {
        self.buckets.remove(&bucket)
    }

    /// Whether `bucket` is in the set.
    pub fn contains(&self, bucket: u32) -> bool {
        self.buckets.contains(&bucket)
    }

    /// How many buckets.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// The buckets, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.buckets.iter().copied()
    }

    /// The largest bucket, if any.
    pub fn max(&self) -> Option<u32> {
        self.buckets.last().copied()
    }

    /// The share of the hash space these buckets of `count` cover, from 0 to 1.
    pub fn fraction(&self, count: u32) -> f64 {
        f64::from(u32::try_from(self.len()).unwrap_or(u32::MAX)) / f64::from(count.max(1))
    }

    /// The hash ranges these buckets of `count` cover, runs of adjacent buckets merged:
    /// `(start, end)` pairs, start inclusive, end exclusive, ascending.
    pub fn ranges(&self, count: u32) -> Vec<(u64, u128)> {
        let mut out: Vec<(u64, u128)> = Vec::new();
        for b in self.iter().filter(|&b| b < count) {
            let (start, end) = bucket_range(b, count);
            match out.last_mut() {
                Some(last) if last.1 == u128::from(start) => last.1 = end,
                _ => out.push((start, end)),
            }
        }
        out
    }

    /// The shard selector of these buckets of `count` on `field`: the objects whose field
    /// hashes into them. `None` for the empty set (a selector cannot match nothing).
    ///
    /// ```
    /// use kctrl_client::sharding::ShardField;
    /// use kctrl_shard::BucketSet;
    /// let set: BucketSet = "0-31".parse().unwrap();
    /// let selector = set.selector(ShardField::Uid, 64).unwrap();
    /// assert_eq!(
    ///     selector.to_string(),
    ///     "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
    /// );
    /// ```
    pub fn selector(&self, field: ShardField, count: u32) -> Option<ShardSelector> {
        let ranges = self
            .ranges(count)
            .into_iter()
            .filter_map(|(start, end)| HashRange::new(start, end).ok());
        ShardSelector::new(field, ranges).ok()
    }

    /// Whether any bucket of this set (buckets of `count`) covers a hash in `[start, end)`.
    pub fn overlaps_range(&self, count: u32, start: u64, end: u128) -> bool {
        self.ranges(count)
            .iter()
            .any(|&(s, e)| u128::from(s) < end && u128::from(start) < e)
    }
}

impl FromIterator<u32> for BucketSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        Self {
            buckets: iter.into_iter().collect(),
        }
    }
}

impl Extend<u32> for BucketSet {
    fn extend<I: IntoIterator<Item = u32>>(&mut self, iter: I) {
        self.buckets.extend(iter);
    }
}

impl fmt::Display for BucketSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut iter = self.iter().peekable();
        let mut first = true;
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end += 1;
                iter.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for BucketSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BucketSet({self})")
    }
}

/// A bucket list that is not `a,b-c,...` of decimal bucket numbers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid bucket list {text:?}: {why}")]
pub struct ParseBucketsError {
    /// The text.
    pub text: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl FromStr for BucketSet {
    type Err = ParseBucketsError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = |why| ParseBucketsError {
            text: text.to_owned(),
            why,
        };
        let mut set = BucketSet::new();
        if text.trim().is_empty() {
            return Ok(set);
        }
        for part in text.split(',') {
            let part = part.trim();
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (a, b),
                None => (part, part),
            };
            let a: u32 = a.trim().parse().map_err(|_| err("not a bucket number"))?;
            let b: u32 = b.trim().parse().map_err(|_| err("not a bucket number"))?;
            if a > b {
                return Err(err("a run ends before it starts"));
            }
            if b >= MAX_BUCKET_COUNT {
                return Err(err("a bucket number is beyond the largest bucket count"));
            }
            set.extend(a..=b);
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_the_top_bits_and_cover_the_space_in_order() {
        for count in [1u32, 2, 4, 64, 4096] {
            let mut next: u128 = 0;
            for b in 0..count {
                let (start, end) = bucket_range(b, count);
                assert_eq!(u128::from(start), next, "bucket {b} of {count}");
                assert_eq!(bucket_of(start, count), b);
                assert_eq!(bucket_of(u64::try_from(end - 1).unwrap(), count), b);
                next = end;
            }
            assert_eq!(next, HASH_SPACE_END);
        }
    }

    #[test]
    fn text_form_round_trips_and_merges_runs() {
        let set: BucketSet = [9, 0, 1, 2, 3, 7, 10, 11, 12].into_iter().collect();
        assert_eq!(set.to_string(), "0-3,7,9-12");
        assert_eq!("0-3,7,9-12".parse::<BucketSet>().unwrap(), set);
        assert_eq!(" 1 , 2-2 ".parse::<BucketSet>().unwrap().to_string(), "1-2");
        assert_eq!("".parse::<BucketSet>().unwrap(), BucketSet::new());
        assert_eq!(BucketSet::new().to_string(), "");
        for bad in ["x", "3-1", "1,,2", "-1", "5000"] {
            assert!(bad.parse::<BucketSet>().is_err(), "{bad}");
        }
    }

    #[test]
    fn ranges_merge_adjacent_buckets_and_overlap_across_counts() {
        let set: BucketSet = [0, 1, 3].into_iter().collect();
        assert_eq!(set.ranges(4), vec![(0, 1 << 63), (3 << 62, 1 << 64)]);
        assert_eq!(BucketSet::all(8).ranges(8), vec![(0, HASH_SPACE_END)]);
        // Bucket 1 of 2 is buckets 2 and 3 of 4.
        let half: BucketSet = [1].into_iter().collect();
        let (s, e) = bucket_range(2, 4);
        assert!(half.overlaps_range(2, s, e));
        let (s, e) = bucket_range(1, 4);
        assert!(!half.overlaps_range(2, s, e));
        assert_eq!(half.fraction(2), 0.5);
    }
}
