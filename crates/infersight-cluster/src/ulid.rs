//! Names that no two nodes can pick alike without talking to each other: ULIDs (48-bit millisecond
//! time + 80 random bits, 26 Crockford base-32 characters that sort by time), node ids, and segment
//! ids (`<node>-<ulid>`), so ingest nodes name segments and commits independently.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Mutex, OnceLock};

use infersight_model::rng::SplitMix64;
use serde::{Deserialize, Serialize};

use crate::clock::{Clock, SystemClock};
use crate::error::ClusterError;

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
const RANDOM_BITS: u32 = 80;
const RANDOM_MASK: u128 = (1 << RANDOM_BITS) - 1;

/// A 128-bit ULID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ulid(u128);

impl Ulid {
    pub fn from_parts(time_ms: u64, random: u128) -> Self {
        Self((u128::from(time_ms & 0xFFFF_FFFF_FFFF) << RANDOM_BITS) | (random & RANDOM_MASK))
    }

    /// A new ULID, strictly greater than every other this process made.
    pub fn generate() -> Self {
        static GENERATOR: OnceLock<Mutex<Generator>> = OnceLock::new();
        let generator = GENERATOR.get_or_init(|| Mutex::new(Generator::from_os_seed()));
        let now_ms = u64::try_from(SystemClock.now_ms()).unwrap_or(0);
        match generator.lock() {
            Ok(mut generator) => generator.next(now_ms),
            // a panic elsewhere while holding the lock left a valid generator behind
            Err(poisoned) => poisoned.into_inner().next(now_ms),
        }
    }

    pub fn time_ms(self) -> u64 {
        (self.0 >> RANDOM_BITS) as u64
    }

    pub fn parse(text: &str) -> Result<Self, ClusterError> {
        let invalid = |reason| ClusterError::Invalid {
            what: "ulid",
            value: text.to_string(),
            reason,
        };
        if text.len() != 26 {
            return Err(invalid("not 26 characters"));
        }
        let mut value: u128 = 0;
        for (i, byte) in text.bytes().enumerate() {
            let digit = CROCKFORD
                .iter()
                .position(|&c| c == byte.to_ascii_uppercase())
                .ok_or_else(|| invalid("not a Crockford base-32 character"))?;
            if i == 0 && digit > 7 {
                return Err(invalid("overflows 128 bits"));
            }
            value = (value << 5) | digit as u128;
        }
        Ok(Self(value))
    }
}

impl std::fmt::Display for Ulid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut text = [0_u8; 26];
        for (i, slot) in text.iter_mut().enumerate() {
            let shift = 5 * (25 - i);
            *slot = CROCKFORD[((self.0 >> shift) & 0x1F) as usize];
        }
        f.write_str(std::str::from_utf8(&text).map_err(|_| std::fmt::Error)?)
    }
}

/// Monotonic within the process: a second ULID in the same millisecond is the first plus one.
#[derive(Debug)]
struct Generator {
    last: Option<Ulid>,
    rng: SplitMix64,
}

impl Generator {
    fn from_os_seed() -> Self {
        // the standard library seeds RandomState from the operating system's randomness
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        Self {
            last: None,
            rng: SplitMix64::new(hasher.finish()),
        }
    }

    fn next(&mut self, now_ms: u64) -> Ulid {
        let fresh = {
            let random = (u128::from(self.rng.next_u64()) << 16) | u128::from(self.rng.next_u64());
            Ulid::from_parts(now_ms, random)
        };
        let next = match self.last {
            Some(last) if fresh <= last => Ulid(last.0.wrapping_add(1)),
            _ => fresh,
        };
        self.last = Some(next);
        next
    }
}

/// A node's name in the cluster: 1–64 characters of `[A-Za-z0-9._-]`, not starting with `.` or
/// `-`; it prefixes the node's segment ids and names it in leases and log entries.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NodeId(String);

impl NodeId {
    pub fn new(name: &str) -> Result<Self, ClusterError> {
        let invalid = |reason| ClusterError::Invalid {
            what: "node id",
            value: name.to_string(),
            reason,
        };
        if name.is_empty() || name.len() > 64 {
            return Err(invalid("must be 1 to 64 characters"));
        }
        if name.starts_with(['.', '-']) {
            return Err(invalid("must not start with `.` or `-`"));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Err(invalid("may hold only letters, digits, `.`, `_` and `-`"));
        }
        Ok(Self(name.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for NodeId {
    type Error = ClusterError;
    fn try_from(value: String) -> Result<Self, ClusterError> {
        Self::new(&value)
    }
}

impl From<NodeId> for String {
    fn from(value: NodeId) -> String {
        value.0
    }
}

/// `<node>-<ulid>`: unique across the cluster without coordination, and sorted by time per node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SegmentId {
    node: NodeId,
    ulid: Ulid,
}

impl SegmentId {
    pub fn new(node: &NodeId) -> Self {
        Self {
            node: node.clone(),
            ulid: Ulid::generate(),
        }
    }

    pub fn from_parts(node: NodeId, ulid: Ulid) -> Self {
        Self { node, ulid }
    }

    pub fn node(&self) -> &NodeId {
        &self.node
    }

    pub fn ulid(&self) -> Ulid {
        self.ulid
    }

    pub fn parse(text: &str) -> Result<Self, ClusterError> {
        // a ULID has no `-`, so the last one separates it from the node (which may hold `-`)
        let (node, ulid) = text.rsplit_once('-').ok_or_else(|| ClusterError::Invalid {
            what: "segment id",
            value: text.to_string(),
            reason: "expected `<node>-<ulid>`",
        })?;
        Ok(Self {
            node: NodeId::new(node)?,
            ulid: Ulid::parse(ulid)?,
        })
    }
}

impl std::fmt::Display for SegmentId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.node, self.ulid)
    }
}

impl TryFrom<String> for SegmentId {
    type Error = ClusterError;
    fn try_from(value: String) -> Result<Self, ClusterError> {
        Self::parse(&value)
    }
}

impl From<SegmentId> for String {
    fn from(value: SegmentId) -> String {
        value.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulids_round_trip_and_sort_by_time() {
        let early = Ulid::from_parts(1_700_000_000_000, 0xFFFF_FFFF);
        let late = Ulid::from_parts(1_700_000_000_001, 0);
        assert!(early < late);
        assert!(early.to_string() < late.to_string());
        assert_eq!(Ulid::parse(&early.to_string()).unwrap(), early);
        assert_eq!(early.time_ms(), 1_700_000_000_000);
        assert!(Ulid::parse("8ZZZZZZZZZZZZZZZZZZZZZZZZZ").is_err());
        assert!(Ulid::parse("0000000000000000000000000I").is_err());
    }

    #[test]
    fn generated_ulids_are_strictly_increasing_within_a_millisecond() {
        let mut generator = Generator::from_os_seed();
        let first = generator.next(5);
        let second = generator.next(5);
        let after_clock_went_back = generator.next(4);
        assert!(first < second && second < after_clock_went_back);
        let ids: Vec<Ulid> = (0..1000).map(|_| Ulid::generate()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn segment_ids_keep_dashes_in_node_names() {
        let node = NodeId::new("ingest-eu-1").unwrap();
        let id = SegmentId::new(&node);
        let parsed = SegmentId::parse(&id.to_string()).unwrap();
        assert_eq!(parsed, id);
        assert_eq!(parsed.node().as_str(), "ingest-eu-1");
        assert!(NodeId::new("").is_err());
        assert!(NodeId::new("a/b").is_err());
        assert!(NodeId::new("..").is_err());
        assert!(SegmentId::parse("nodash").is_err());
    }
}
