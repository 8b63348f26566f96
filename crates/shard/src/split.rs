//! The split: which member each bucket belongs to, by rendezvous (highest-random-weight)
//! hashing. Pure functions of the member identities and the bucket count, so every member
//! that sees the same members computes the same split, without talking to the others.
//!
//! Each (member, bucket) pair gets a pseudo-random weight; a bucket belongs to the member
//! with the highest weight for it. When a member joins, it takes exactly the buckets for
//! which its weight beats the current owner's, and nothing else moves; when a member
//! leaves, exactly its buckets move, each to the member with the next highest weight. No
//! split moves fewer buckets with no memory of the previous one. The load is balanced only
//! in expectation: with `n` members each holds `count / n` buckets on average, spread
//! binomially (more buckets, tighter spread).

use kctrl_client::sharding::hash_field;

use crate::buckets::BucketSet;

/// SplitMix64's finaliser: spreads the bits of `z` over the whole word.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The weight of `member` (its name's FNV-1a 64 hash) for `bucket`.
fn weight(member: u64, bucket: u32) -> u64 {
    mix(member ^ mix(u64::from(bucket)))
}

/// The owner of every bucket: `owners[b]` is the index in `members` of the member bucket
/// `b` of `count` belongs to. Empty when there are no members. Identities must be distinct;
/// their order does not matter.
///
/// ```
/// use kctrl_shard::split::assign;
/// let owners = assign(&["a", "b", "c"], 64);
/// assert_eq!(owners.len(), 64);
/// // The same members in another order: the same split.
/// let again = assign(&["c", "a", "b"], 64);
/// let names = |o: &[usize], m: &[&str]| o.iter().map(|&i| m[i].to_owned()).collect::<Vec<_>>();
/// assert_eq!(names(&owners, &["a", "b", "c"]), names(&again, &["c", "a", "b"]));
/// ```
pub fn assign<S: AsRef<str>>(members: &[S], count: u32) -> Vec<usize> {
    if members.is_empty() {
        return Vec::new();
    }
    let hashes: Vec<u64> = members.iter().map(|m| hash_field(m.as_ref())).collect();
    (0..count)
        .map(|bucket| {
            let mut best = 0;
            for i in 1..members.len() {
                let (wi, wb) = (weight(hashes[i], bucket), weight(hashes[best], bucket));
                // Equal weights (all but impossible) go to the smaller identity, so the
                // answer never depends on the order of `members`.
                if wi > wb || (wi == wb && members[i].as_ref() < members[best].as_ref()) {
                    best = i;
                }
            }
            best
        })
        .collect()
}

/// The buckets of `count` that `member` gets among `members` (which should include it; if
/// it does not, the answer is empty).
///
/// ```
/// use kctrl_shard::split::buckets_of;
/// let a = buckets_of("a", &["a", "b"], 8);
/// let b = buckets_of("b", &["a", "b"], 8);
/// assert_eq!(a.len() + b.len(), 8);
/// assert!(a.iter().all(|x| !b.contains(x)));
/// ```
pub fn buckets_of<S: AsRef<str>>(member: &str, members: &[S], count: u32) -> BucketSet {
    let Some(me) = members.iter().position(|m| m.as_ref() == member) else {
        return BucketSet::new();
    };
    assign(members, count)
        .into_iter()
        .enumerate()
        .filter(|&(_, owner)| owner == me)
        .filter_map(|(b, _)| u32::try_from(b).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owners(members: &[String], count: u32) -> Vec<String> {
        assign(members, count)
            .into_iter()
            .map(|i| members[i].clone())
            .collect()
    }

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}-{i}")).collect()
    }

    #[test]
    fn member_weights_use_fnv1a_64() {
        assert_eq!(hash_field(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(hash_field("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(hash_field("foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn every_bucket_has_exactly_one_owner_among_the_members() {
        for n in 1..=9 {
            let members = names("replica", n);
            let split = assign(&members, 64);
            assert_eq!(split.len(), 64);
            assert!(split.iter().all(|&i| i < n));
            let total: usize = members
                .iter()
                .map(|m| buckets_of(m, &members, 64).len())
                .sum();
            assert_eq!(total, 64, "{n} members");
        }
        assert!(assign::<&str>(&[], 64).is_empty());
        assert!(buckets_of("stranger", &["a"], 64).is_empty());
    }

    #[test]
    fn a_join_moves_only_what_the_newcomer_takes_and_a_leave_only_what_the_leaver_had() {
        for trial in 0..50 {
            let n = 2 + trial % 7;
            let members = names(&format!("pod{trial}"), n);
            let before = owners(&members, 64);

            let mut joined = members.clone();
            joined.push(format!("new{trial}"));
            let after = owners(&joined, 64);
            for b in 0..64 {
                if before[b] != after[b] {
                    assert_eq!(after[b], format!("new{trial}"), "trial {trial} bucket {b}");
                }
            }

            let left: Vec<String> = members[1..].to_vec();
            let after = owners(&left, 64);
            for b in 0..64 {
                if before[b] != after[b] {
                    assert_eq!(before[b], members[0], "trial {trial} bucket {b}");
                }
            }
        }
    }

    #[test]
    fn loads_stay_within_a_bound_of_the_mean() {
        // 64 buckets: each member's share is binomial around 64/n; over these member sets no
        // member gets less than a quarter or more than 2.5 times its fair share, and the
        // average member of a set is within one bucket of it.
        for trial in 0..200 {
            let n = 2 + trial % 7;
            let members = names(&format!("controller-{trial}"), n);
            let fair = 64.0 / n as f64;
            for m in &members {
                let load = buckets_of(m, &members, 64).len() as f64;
                assert!(
                    load >= fair / 4.0 && load <= fair * 2.5,
                    "trial {trial}: {m} holds {load} of 64 with {n} members"
                );
            }
        }
        // With more buckets the spread narrows: 1024 buckets, 4 members, within 25 %.
        let members = names("wide", 4);
        for m in &members {
            let load = buckets_of(m, &members, 1024).len() as f64;
            assert!((load - 256.0).abs() <= 64.0, "{m}: {load}");
        }
    }
}
