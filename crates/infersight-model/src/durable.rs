//! Durable files: the one way every crate publishes a whole file that must survive a crash (the
//! store's catalog, segments and rollup sidecars, the template store, stored incidents).
//!
//! The one rule: the content goes to a temporary file in the same directory, the file is fsynced,
//! it is moved to its real name (a rename, or a no-clobber hard link for [`create_new_atomic`]),
//! and the directory is fsynced. A reader therefore sees the old content or the new, never a
//! torn file, and once a call returns the new content survives power loss. A failed call removes
//! its temporary file and leaves the old content in place.
//!
//! Temporary names: a file with one writer at a time uses `<name>.tmp` ([`temp_path`]; a
//! leftover of a crash is overwritten by the next write, and the store's orphan sweep recognises
//! `.tmp`); a file several processes may write at once uses a hidden name unique to the call,
//! `.<name>.<pid>-<n>.tmp`, so one writer never publishes another's half-written bytes.
//!
//! Appended logs (the WAL, the audit trails) have their own rules and are not written here.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A durable write that failed: the file or directory the failing step touched, and why.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct DurableError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

impl DurableError {
    fn at(path: &Path) -> impl FnOnce(std::io::Error) -> DurableError + '_ {
        move |source| DurableError {
            path: path.to_path_buf(),
            source,
        }
    }
}

impl From<DurableError> for std::io::Error {
    fn from(error: DurableError) -> Self {
        std::io::Error::new(error.source.kind(), error.to_string())
    }
}

/// Replaces `path` with `bytes` atomically and durably; one writer at a time (temporary file
/// [`temp_path`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), DurableError> {
    let temp = temp_path(path);
    write_atomic_with(path, |file| {
        file.write_all(bytes).map_err(DurableError::at(&temp))
    })
}

/// Like [`write_atomic`], with `fill` writing the content into the open temporary file (for
/// content streamed by an encoder, such as a Parquet writer).
pub fn write_atomic_with<E: From<DurableError>>(
    path: &Path,
    fill: impl FnOnce(&mut File) -> Result<(), E>,
) -> Result<(), E> {
    let temp = temp_path(path);
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temp)
        .map_err(DurableError::at(&temp))?;
    publish(path, &temp, file, fill, Publish::Replace).map(drop)
}

/// Replaces `path` with `bytes` atomically and durably when several processes may write it at
/// once (a temporary name unique to this call).
pub fn write_atomic_concurrent(path: &Path, bytes: &[u8]) -> Result<(), DurableError> {
    let (temp, file) = create_unique_temp(path)?;
    publish(
        path,
        &temp,
        file,
        write_bytes(&temp, bytes),
        Publish::Replace,
    )
    .map(drop)
}

/// Creates `path` with `bytes` atomically and durably unless it exists: `Ok(false)` (and nothing
/// written) when it does. A hard link publishes without ever clobbering; where links are not
/// supported, an existence check and a rename do (racy only against another process creating
/// the same name at once).
pub fn create_new_atomic(path: &Path, bytes: &[u8]) -> Result<bool, DurableError> {
    let (temp, file) = create_unique_temp(path)?;
    publish(
        path,
        &temp,
        file,
        write_bytes(&temp, bytes),
        Publish::NoClobber,
    )
}

/// fsyncs a directory so that file creations, renames and deletions in it survive power loss
/// (a no-op where directories cannot be synced).
pub fn sync_dir(dir: &Path) -> Result<(), DurableError> {
    #[cfg(unix)]
    File::open(dir)
        .and_then(|handle| handle.sync_all())
        .map_err(DurableError::at(dir))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// The temporary file of [`write_atomic`]: `<path>.tmp`, next to it.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(".tmp");
    PathBuf::from(name)
}

enum Publish {
    /// rename over whatever is there
    Replace,
    /// hard link, never over an existing file
    NoClobber,
}

fn write_bytes<'a>(
    temp: &'a Path,
    bytes: &'a [u8],
) -> impl FnOnce(&mut File) -> Result<(), DurableError> + 'a {
    move |file| file.write_all(bytes).map_err(DurableError::at(temp))
}

/// `.<name>.<pid>-<n>.tmp` next to `path`, created new.
fn create_unique_temp(path: &Path) -> Result<(PathBuf, File), DurableError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = path.with_file_name(format!(
        ".{name}.{}-{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)
        .map_err(DurableError::at(&temp))?;
    Ok((temp, file))
}

/// Fills and fsyncs the open temporary file, moves it to `path`, fsyncs the directory; the
/// temporary file is removed on every failure. `Ok(false)`: `path` existed (no-clobber only).
fn publish<E: From<DurableError>>(
    path: &Path,
    temp: &Path,
    mut file: File,
    fill: impl FnOnce(&mut File) -> Result<(), E>,
    how: Publish,
) -> Result<bool, E> {
    let written = fill(&mut file).and_then(|()| {
        file.sync_all().map_err(DurableError::at(temp))?;
        drop(file);
        match how {
            Publish::Replace => std::fs::rename(temp, path)
                .map(|()| true)
                .map_err(DurableError::at(path)),
            Publish::NoClobber => link_new(temp, path).map_err(DurableError::at(path)),
        }
        .map_err(E::from)
    });
    // after a link (or a failure) the temporary name is still there; after a rename it is gone
    if written.is_err() || temp.exists() {
        let _ = std::fs::remove_file(temp);
    }
    if written? {
        let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty());
        sync_dir(dir.unwrap_or(Path::new(".")))?;
        return Ok(true);
    }
    Ok(false)
}

fn link_new(temp: &Path, path: &Path) -> std::io::Result<bool> {
    match std::fs::hard_link(temp, path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(_) if path.exists() => Ok(false),
        Err(_) => std::fs::rename(temp, path).map(|()| true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn write_atomic_replaces_the_content_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.json");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two, longer").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two, longer");
        assert_eq!(names(dir.path()), ["catalog.json"]);
    }

    #[test]
    fn a_stale_temporary_file_is_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("templates.json");
        std::fs::write(
            temp_path(&path),
            b"left by a crash, much longer than the content",
        )
        .unwrap();
        write_atomic(&path, b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(names(dir.path()), ["templates.json"]);
    }

    #[test]
    fn a_failed_fill_leaves_the_old_content_and_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.parquet");
        write_atomic(&path, b"old").unwrap();
        let result: Result<(), std::io::Error> = write_atomic_with(&path, |file| {
            file.write_all(b"half of the new")?;
            Err(std::io::Error::other("encoder failed"))
        });
        assert_eq!(result.unwrap_err().to_string(), "encoder failed");
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(names(dir.path()), ["1.parquet"]);
    }

    #[test]
    fn a_failed_rename_leaves_the_old_content_and_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        // a non-empty directory under the target name: the rename fails
        let path = dir.path().join("occupied");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("old"), b"old").unwrap();
        let error = write_atomic(&path, b"new").unwrap_err();
        assert_eq!(error.path, path);
        assert_eq!(std::fs::read(path.join("old")).unwrap(), b"old");
        assert_eq!(names(dir.path()), ["occupied"]);
        let error = write_atomic_concurrent(&path, b"new").unwrap_err();
        assert_eq!(error.path, path);
        assert_eq!(names(dir.path()), ["occupied"]);
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_the_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing/x.json");
        let error = write_atomic(&path, b"x").unwrap_err();
        assert_eq!(error.path, temp_path(&path));
        assert_eq!(error.source.kind(), std::io::ErrorKind::NotFound);
        let error = create_new_atomic(&path, b"x").unwrap_err();
        assert_eq!(error.source.kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn create_new_never_clobbers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inc-1.json");
        assert!(create_new_atomic(&path, b"first").unwrap());
        assert!(!create_new_atomic(&path, b"second").unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        assert_eq!(names(dir.path()), ["inc-1.json"]);
    }

    #[test]
    fn concurrent_writers_publish_whole_contents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inc-2.json");
        let contents: Vec<Vec<u8>> = (0..8u8).map(|i| vec![b'a' + i; 4096]).collect();
        std::thread::scope(|scope| {
            for content in &contents {
                let path = &path;
                scope.spawn(move || {
                    for _ in 0..20 {
                        write_atomic_concurrent(path, content).unwrap();
                    }
                });
            }
        });
        let published = std::fs::read(&path).unwrap();
        assert!(contents.contains(&published));
        assert_eq!(names(dir.path()), ["inc-2.json"]);
    }

    #[test]
    fn io_errors_keep_their_kind_and_name_the_path() {
        let error = DurableError {
            path: PathBuf::from("/data/catalog.json"),
            source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied"),
        };
        let io: std::io::Error = error.into();
        assert_eq!(io.kind(), std::io::ErrorKind::PermissionDenied);
        assert_eq!(io.to_string(), "/data/catalog.json: denied");
    }
}
