//! Splitting a selection of scenarios into N shards (`triggers-lab run --shard K/N`), the same
//! on every machine: by a stable identity of each scenario, never by the order files were found.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// One shard of N: `K/N`, K from 1 to N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// Which one, 1-based.
    pub index: usize,
    /// Of how many (1 or more).
    pub count: usize,
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let usage = "write K/N: shard K of N, both whole numbers, 1 <= K <= N (e.g. 1/4)";
        let Some((k, n)) = text.trim().split_once('/') else {
            return Err(format!("{text:?} is not K/N: {usage}"));
        };
        let (Ok(index), Ok(count)) = (k.trim().parse::<usize>(), n.trim().parse::<usize>()) else {
            return Err(format!("{text:?}: K and N must be whole numbers; {usage}"));
        };
        if count == 0 {
            return Err(format!("{text:?}: 0 shards would run nothing; {usage}"));
        }
        if index == 0 || index > count {
            return Err(format!(
                "{text:?}: there is no shard {index} of {count} (shards are numbered from 1 to {count}); {usage}"
            ));
        }
        Ok(Shard { index, count })
    }
}

/// A scenario as the split sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardItem {
    /// What orders it, the same on every machine (e.g. its name, then its file relative to the
    /// folder it was found in).
    pub key: String,
    /// How long it took last time, when known.
    pub duration: Option<Duration>,
}

/// The shard (0-based) of each item, in the items' order, every item in exactly one.
///
/// When any duration is known: greedy longest processing time first (each scenario, longest
/// first, to the shard with the least time so far; a scenario of unknown duration counts as the
/// mean of the known ones; ties by key, then by lowest shard). Otherwise round-robin over the
/// items sorted by key. Either way the result depends only on the keys and durations, not on
/// the items' order.
#[must_use]
pub fn assign(items: &[ShardItem], count: usize) -> Vec<usize> {
    let count = count.max(1);
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| items[a].key.cmp(&items[b].key).then(a.cmp(&b)));
    let mut shard_of = vec![0; items.len()];
    let known: Vec<Duration> = items.iter().filter_map(|i| i.duration).collect();
    if known.is_empty() {
        for (n, &i) in order.iter().enumerate() {
            shard_of[i] = n % count;
        }
        return shard_of;
    }
    let mean = known.iter().sum::<Duration>() / u32::try_from(known.len()).unwrap_or(u32::MAX);
    let cost = |i: usize| items[i].duration.unwrap_or(mean);
    // Longest first; the sort is stable, so equal durations stay in key order.
    order.sort_by_key(|&i| std::cmp::Reverse(cost(i)));
    let mut load = vec![Duration::ZERO; count];
    for i in order {
        let (lightest, _) = load
            .iter()
            .enumerate()
            .min_by_key(|&(s, l)| (*l, s))
            .unwrap_or((0, &Duration::ZERO));
        load[lightest] += cost(i);
        shard_of[i] = lightest;
    }
    shard_of
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(key: &str, ms: Option<u64>) -> ShardItem {
        ShardItem {
            key: key.into(),
            duration: ms.map(Duration::from_millis),
        }
    }

    #[test]
    fn k_of_n_is_read_and_nonsense_refused() {
        assert_eq!("2/3".parse(), Ok(Shard { index: 2, count: 3 }));
        for bad in ["0/2", "3/2", "1/0", "a/b", "1", "1/2/3", ""] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
        assert!(
            "3/2"
                .parse::<Shard>()
                .unwrap_err()
                .contains("no shard 3 of 2")
        );
    }

    #[test]
    fn without_durations_it_is_round_robin_over_the_keys() {
        let items = [
            item("c", None),
            item("a", None),
            item("b", None),
            item("d", None),
        ];
        // Sorted: a b c d -> 0 1 0 1.
        assert_eq!(assign(&items, 2), [0, 0, 1, 1]);
    }

    #[test]
    fn durations_balance_the_shards_longest_first() {
        // 8, 7, 6, 5, 4 on two shards: 8 -> 0, 7 -> 1, 6 -> 1 (7 < 8), 5 -> 0 (8 < 13),
        // 4 -> 0 (13 = 13, the lower shard): 17 and 13.
        let items = [
            item("e", Some(4)),
            item("a", Some(8)),
            item("d", Some(5)),
            item("b", Some(7)),
            item("c", Some(6)),
        ];
        assert_eq!(assign(&items, 2), [0, 0, 0, 1, 1]);
        // The unknown one counts as the mean (6): it goes where a 6 would.
        let with_new = [item("a", Some(9)), item("b", Some(3)), item("z", None)];
        assert_eq!(assign(&with_new, 2), [0, 1, 1]);
    }

    #[test]
    fn the_split_does_not_depend_on_the_items_order() {
        let items: Vec<_> = (0..17)
            .map(|n| item(&format!("s{n:02}"), Some((n * 37 % 11) * 100)))
            .collect();
        let mut reversed = items.clone();
        reversed.reverse();
        let forward = assign(&items, 3);
        let mut backward = assign(&reversed, 3);
        backward.reverse();
        assert_eq!(forward, backward);
        // Equal durations (ties) too.
        let ties: Vec<_> = (0..6).map(|n| item(&format!("t{n}"), Some(5))).collect();
        let mut rev = ties.clone();
        rev.reverse();
        let mut back = assign(&rev, 4);
        back.reverse();
        assert_eq!(assign(&ties, 4), back);
        assert_eq!(assign(&ties, 4), [0, 1, 2, 3, 0, 1]);
    }
}
