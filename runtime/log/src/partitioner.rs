//! Kafka's default partitioner: keyed records go to `toPositive(murmur2(key)) % partitions`,
//! exactly as the Java client's `BuiltInPartitioner.partitionForKey`, so a key lands in the same
//! partition in Headwater's log as it would in Kafka (and stays in key order there).
//! Records without a key are spread round-robin.

use std::sync::atomic::{AtomicU32, Ordering};

/// Kafka's murmur2 hash (`org.apache.kafka.common.utils.Utils.murmur2`), as a signed 32-bit value.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len();
    let mut h: u32 = SEED ^ (length as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition Kafka's default partitioner picks for a non-null key.
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    assert!(partitions > 0, "a topic has at least one partition");
    ((murmur2(key) & 0x7fff_ffff) as u32) % partitions
}

/// Chooses partitions for records: by key hash, or round-robin when the key is null.
#[derive(Debug, Default)]
pub struct Partitioner {
    next_unkeyed: AtomicU32,
}

impl Partitioner {
    pub fn new() -> Self {
        Self::default()
    }

    /// The partition for a record with this key (`None` = null key). A topic of one
    /// partition needs no hash (nor a turn of the round-robin).
    pub fn partition(&self, key: Option<&[u8]>, partitions: u32) -> u32 {
        if partitions <= 1 {
            return 0;
        }
        match key {
            Some(k) => partition_for_key(k, partitions),
            None => self.next_unkeyed.fetch_add(1, Ordering::Relaxed) % partitions,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's `UtilsTest.testMurmur2` vectors.
    #[test]
    fn murmur2_matches_kafka() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (key, expected) in cases {
            assert_eq!(murmur2(key), expected, "{}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn keyed_records_use_positive_hash_modulo() {
        // toPositive(-790332482) = 1357151166; 1357151166 % 50 = 16.
        assert_eq!(partition_for_key(b"foobar", 50), 16);
        let p = Partitioner::new();
        assert_eq!(p.partition(Some(b"foobar"), 50), 16);
        let spread: Vec<u32> = (0..6).map(|_| p.partition(None, 3)).collect();
        assert_eq!(spread, [0, 1, 2, 0, 1, 2]);
    }
}
