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

    /// Whether the object at `location`, of `size` bytes, is kept here: a quarter of the
    /// capacity at most, and a key short enough for a file name.
    pub fn accepts(&self, location: &Path, size: u64) -> bool {
        size <= self.capacity_bytes / 4 && file_name(location).is_some()
    }

    /// The size of the object at `location`, if this cache has it (marks it used).
    pub fn size(&self, location: &Path) -> Option<u64> {
        let name = file_name(location)?;
        let mut index = self.lock();
        index
            .touch(&name)
            .then(|| index.files.get(&name).map(|(size, _)| *size))?
    }

    /// The object at `location`, if this cache has it whole. A file that cannot be read, or
    /// whose length is not the one it was kept with, is dropped.
    pub fn get(&self, location: &Path) -> Option<Bytes> {
        let size = self.size(location)?;
        let name = file_name(location)?;
        let read = std::fs::read(self.dir.join(&name)).and_then(|data| {
            if data.len() as u64 == size {
                Ok(data)
            } else {
                Err(std::io::Error::other(format!(
                    "{} bytes, kept with {size}",
                    data.len()
                )))
            }
        });
        self.used(&name, read).map(Bytes::from)
    }

    /// Bytes `range` of the object at `location`, if this cache has it (read at their offset,
    /// not the whole file); dropped like [`DiskCache::get`] when the file is wrong.
    pub fn get_range(&self, location: &Path, range: std::ops::Range<u64>) -> Option<Bytes> {
        use std::os::unix::fs::FileExt as _;
        let size = self.size(location)?;
        if range.end > size || range.start > range.end {
            return None;
        }
        let name = file_name(location)?;
        let read = std::fs::File::open(self.dir.join(&name)).and_then(|file| {
            let length = file.metadata()?.len();
            if length != size {
                return Err(std::io::Error::other(format!(
                    "{length} bytes, kept with {size}"
                )));
            }
            let mut data = vec![0; (range.end - range.start) as usize];
            file.read_exact_at(&mut data, range.start)?;
            Ok(data)
        });
        self.used(&name, read).map(Bytes::from)
    }

    /// The answer of a read of file `name`: its time set (the order of use for the next start),
    /// or, when it failed, the file dropped with a warning.
    fn used(&self, name: &str, read: std::io::Result<Vec<u8>>) -> Option<Vec<u8>> {
        let path = self.dir.join(name);
        match read {
            Ok(data) => {
                if let Ok(file) = std::fs::File::options().append(true).open(&path) {
                    let _ = file.set_modified(std::time::SystemTime::now());
                }
                Some(data)
            }
            Err(error) => {
                tracing::warn!(file = %path.display(), %error, "a cached segment could not be read; dropped from the disk cache");
                if self.lock().remove(name) {
                    let _ = std::fs::remove_file(&path);
                }
                None
            }
        }
    }

    /// Keeps `data` as the object at `location` (when [`DiskCache::accepts`] it), then deletes
    /// the least recently used files beyond the capacity; answers how many it deleted. Every
    /// write has a temporary file of its own, renamed when whole, so two writers of one object
    /// never mix their bytes.
    pub fn put(&self, location: &Path, data: &Bytes) -> std::io::Result<u64> {
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let size = data.len() as u64;
        if !self.accepts(location, size) {
            return Ok(0);
        }
        let Some(name) = file_name(location) else {
            return Ok(0);
        };
        let path = self.dir.join(&name);
        let write = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let temporary = self
            .dir
            .join(format!("{name}.{}-{write}{TEMPORARY}", std::process::id()));
        let written =
            std::fs::write(&temporary, data).and_then(|()| std::fs::rename(&temporary, &path));
        if let Err(error) = written {
            let _ = std::fs::remove_file(&temporary);
            return Err(error);
        }
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
        assert!(
            !cache.accepts(&key(9), 1001),
            "a quarter of the capacity at most"
        );
        assert!(!cache.accepts(&Path::from("x".repeat(MAX_NAME + 1)), 10));
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
        assert_eq!(
            reopened.get_range(&key(3), 10..20),
            Some(object(1000, 4).slice(10..20))
        );
        assert_eq!(reopened.get_range(&key(3), 990..1001), None, "past the end");
        assert_eq!(reopened.stats().files, 3, "a bad range drops nothing");
        // a file that is not what was kept (here: cut short) is dropped, not served
        let name = file_name(&key(4)).unwrap();
        std::fs::write(dir.path().join(&name), b"short").unwrap();
        assert_eq!(reopened.get(&key(4)), None);
        assert!(!dir.path().join(&name).exists());
        // a smaller capacity at the next start keeps the most recently used
        drop(reopened);
        let smaller = DiskCache::open(dir.path(), 1000).unwrap();
        assert_eq!(smaller.stats().files, 1);
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
