//! The read cache's second level ([`crate::segments::SegmentCache`]): whole segment and sidecar
//! objects in a directory on this node's disk, up to a size bound, least recently used out
//! first. It outlives the process: a restarted query node reads the segments it read before
//! from its disk, not from the bucket. Objects never change once written, so a file is never
//! stale; each is written to a temporary name and renamed, so a crash leaves no torn file (the
//! temporaries are removed when the cache opens). The order of use survives a restart as far
//! as file times tell it (the last write or read).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;

use bytes::Bytes;
use object_store::path::Path;

/// Files a cache directory holds that are not finished objects.
const TEMPORARY: &str = ".tmp";
/// Longest file name written (object keys longer than this are not cached on disk).
const MAX_NAME: usize = 200;

/// Least recently used first, by file name.
#[derive(Debug, Default)]
struct Index {
    files: HashMap<String, (u64, u64)>,
    order: BTreeMap<u64, String>,
    bytes: u64,
    clock: u64,
}

impl Index {
    fn touch(&mut self, name: &str) -> bool {
        self.clock += 1;
        let now = self.clock;
        let Some((_, used)) = self.files.get_mut(name) else {
            return false;
        };
        self.order.remove(used);
        *used = now;
        self.order.insert(now, name.to_string());
        true
    }

    fn insert(&mut self, name: String, size: u64) {
        self.remove(&name);
        self.clock += 1;
        self.bytes += size;
        self.order.insert(self.clock, name.clone());
        self.files.insert(name, (size, self.clock));
    }

    fn remove(&mut self, name: &str) -> bool {
        match self.files.remove(name) {
            Some((size, used)) => {
                self.order.remove(&used);
                self.bytes -= size;
                true
            }
            None => false,
        }
    }

    /// The least recently used names to delete so that the rest fit in `capacity`.
    fn over(&mut self, capacity: u64) -> Vec<String> {
        let mut out = Vec::new();
        while self.bytes > capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            if let Some((size, _)) = self.files.remove(&oldest) {
                self.bytes -= size;
            }
            out.push(oldest);
        }
        out
    }
}

/// Whole objects on disk; every method does blocking file IO.
#[derive(Debug)]
pub struct DiskCache {
    dir: PathBuf,
    capacity_bytes: u64,
    index: Mutex<Index>,
}

/// What the disk level holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskCacheStats {
    pub files: u64,
    pub bytes: u64,
    pub capacity_bytes: u64,
}

impl DiskCache {
    /// Opens (creating) the cache in `dir`: removes unfinished files, indexes the others by
    /// their file time, and deletes the oldest beyond `capacity_bytes`.
    pub fn open(dir: impl Into<PathBuf>, capacity_bytes: u64) -> std::io::Result<DiskCache> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let metadata = entry.metadata()?;
            if !metadata.is_file() {
                continue;
            }
            if name.ends_with(TEMPORARY) {
                std::fs::remove_file(entry.path())?;
                continue;
            }
            let used = metadata
                .modified()
                .ok()
                .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
                .unwrap_or_default();
            found.push((used, name, metadata.len()));
        }
        found.sort();
        let mut index = Index::default();
        for (_, name, size) in found {
            index.insert(name, size);
        }
        let cache = DiskCache {
            dir,
            capacity_bytes,
            index: Mutex::new(index),
        };
        cache.evict()?;
        Ok(cache)
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    pub fn stats(&self) -> DiskCacheStats {
        let index = self.lock();
        DiskCacheStats {
            files: index.files.len() as u64,
            bytes: index.bytes,
            capacity_bytes: self.capacity_bytes,
        }
    }

    /// Whether an object of `size` bytes is kept here (a quarter of the capacity at most).
    pub fn fits(&self, size: u64) -> bool {
        size <= self.capacity_bytes / 4
    }

    /// The object at `location`, if this cache has it. A file that cannot be read is dropped.
    pub fn get(&self, location: &Path) -> Option<Bytes> {
        let name = file_name(location)?;
        if !self.lock().touch(&name) {
            return None;
        }
        match std::fs::read(self.dir.join(&name)) {
            Ok(data) => {
                // the file time keeps the order of use for the next start
                if let Ok(file) = std::fs::File::options()
                    .append(true)
                    .open(self.dir.join(&name))
                {
                    let _ = file.set_modified(std::time::SystemTime::now());
                }
                Some(Bytes::from(data))
            }
            Err(error) => {
                tracing::warn!(file = %self.dir.join(&name).display(), %error, "a cached segment could not be read; dropped from the disk cache");
                self.lock().remove(&name);
                None
            }
        }
    }

    /// Keeps `data` as the object at `location` (when it fits), then deletes the least
    /// recently used files beyond the capacity; answers how many it deleted.
    pub fn put(&self, location: &Path, data: &Bytes) -> std::io::Result<u64> {
        let size = data.len() as u64;
        let Some(name) = file_name(location).filter(|_| self.fits(size)) else {
            return Ok(0);
        };
        let path = self.dir.join(&name);
        let temporary = self.dir.join(format!("{name}{TEMPORARY}"));
        std::fs::write(&temporary, data)?;
        std::fs::rename(&temporary, &path)?;
        self.lock().insert(name, size);
        self.evict()
    }

    /// Forgets the object at `location` and deletes its file.
    pub fn remove(&self, location: &Path) {
        let Some(name) = file_name(location) else {
            return;
        };
        if self.lock().remove(&name) {
            let _ = std::fs::remove_file(self.dir.join(&name));
        }
    }

    fn evict(&self) -> std::io::Result<u64> {
        let names = self.lock().over(self.capacity_bytes);
        for name in &names {
            match std::fs::remove_file(self.dir.join(name)) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(error),
            }
        }
        Ok(names.len() as u64)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        // the index is consistent after every call
        self.index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The file an object key is kept in: the key with `%` and `/` escaped; `None` when too long.
fn file_name(location: &Path) -> Option<String> {
    let name = location.as_ref().replace('%', "%25").replace('/', "%2F");
    (name.len() <= MAX_NAME && !name.ends_with(TEMPORARY)).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(size: usize, seed: u8) -> Bytes {
        Bytes::from(
            (0..size)
                .map(|i| (i as u8).wrapping_mul(seed))
                .collect::<Vec<u8>>(),
        )
    }

    #[test]
    fn objects_survive_a_restart_within_the_capacity_and_torn_files_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let key = |n: u32| Path::from(format!("p/segments/requests/2026120400/n-{n}.parquet"));
        let cache = DiskCache::open(dir.path(), 4000).unwrap();
        for n in 0..4 {
            assert_eq!(cache.put(&key(n), &object(1000, n as u8 + 1)).unwrap(), 0);
        }
        assert_eq!(cache.stats().bytes, 4000);
        // 0 read again: 1 is now the least recently used and goes first
        assert_eq!(cache.get(&key(0)), Some(object(1000, 1)));
        assert_eq!(cache.put(&key(4), &object(1000, 5)).unwrap(), 1);
        assert_eq!(cache.get(&key(1)), None);
        assert!(!cache.fits(1001), "a quarter of the capacity at most");
        assert_eq!(cache.put(&key(9), &object(1001, 9)).unwrap(), 0);
        assert_eq!(cache.get(&key(9)), None);
        drop(cache);

        std::fs::write(dir.path().join(format!("x{TEMPORARY}")), b"torn").unwrap();
        let reopened = DiskCache::open(dir.path(), 4000).unwrap();
        assert_eq!(
            reopened.stats(),
            DiskCacheStats {
                files: 4,
                bytes: 4000,
                capacity_bytes: 4000
            }
        );
        assert!(!dir.path().join(format!("x{TEMPORARY}")).exists());
        for n in [0, 2, 3, 4] {
            assert_eq!(
                reopened.get(&key(n)),
                Some(object(1000, n as u8 + 1)),
                "{n}"
            );
        }
        reopened.remove(&key(2));
        assert_eq!(reopened.get(&key(2)), None);
        assert_eq!(reopened.stats().files, 3);
        // a smaller capacity at the next start keeps the most recently used
        drop(reopened);
        let smaller = DiskCache::open(dir.path(), 2000).unwrap();
        assert_eq!(smaller.stats().files, 2);
    }

    #[test]
    fn keys_become_file_names_one_to_one() {
        let a = file_name(&Path::from("a/b%2Fc")).unwrap();
        let b = file_name(&Path::from("a%2Fb/c")).unwrap();
        assert_ne!(a, b);
        assert!(!a.contains('/'));
        assert_eq!(file_name(&Path::from("x".repeat(MAX_NAME + 1))), None);
    }
}
