//! A full disk: appends, flushes and compactions that hit ENOSPC fail cleanly (an `Unavailable`
//! error the server turns into 503 / UNAVAILABLE), leave no torn or temporary file, lose nothing
//! acknowledged, and the store takes writes again once space returns.
//!
//! The data directory is a 4 MiB tmpfs: mounted directly as root, else inside `unshare -rm` (the
//! test binary runs itself again in a user and mount namespace); skipped with a message only
//! when neither works.

use std::path::{Path, PathBuf};
use std::process::Command;

use infersight_model::{ErrorKind, Table};
use infersight_store::{StorageBackend, Store, StoreError, StoreOptions};

use crate::common::*;

const IN_NAMESPACE: &str = "INFERSIGHT_TEST_IN_MOUNT_NAMESPACE";

/// A tmpfs of `size` mounted on a fresh directory; unmounted on drop.
struct SmallDisk {
    _dir: tempfile::TempDir,
    mount: PathBuf,
}

impl SmallDisk {
    fn mount(size: &str) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().ok()?;
        let mount = dir.path().join("disk");
        std::fs::create_dir(&mount).ok()?;
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&mount)
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?;
        status.success().then_some(SmallDisk { _dir: dir, mount })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
    }
}

/// Runs `body` on a small tmpfs: here when this process may mount, else in this same test run
/// again under `unshare -rm`. `false` when neither is possible.
fn on_small_disk(test: &str, body: impl FnOnce(&Path)) -> bool {
    if let Some(disk) = SmallDisk::mount("4m") {
        body(&disk.mount);
        return true;
    }
    assert!(
        std::env::var_os(IN_NAMESPACE).is_none(),
        "cannot mount a tmpfs even inside `unshare -rm`"
    );
    let probe = Command::new("unshare").args(["-rm", "true"]).status();
    if !probe.is_ok_and(|s| s.success()) {
        return false;
    }
    let exe = std::env::current_exe().unwrap();
    let status = Command::new("unshare")
        .arg("-rm")
        .arg(exe)
        .args([test, "--exact", "--test-threads", "1", "--nocapture"])
        .env(IN_NAMESPACE, "1")
        .status()
        .unwrap();
    assert!(status.success(), "{test} failed inside `unshare -rm`");
    true
}

fn is_full(err: &StoreError) -> bool {
    err.is_out_of_space()
}

/// Every file under `dir` whose name marks a write in progress.
fn temporary_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "tmp") {
                found.push(path);
            }
        }
    }
    found
}

fn small_store_options(data: &Path) -> StoreOptions {
    let mut opts = options(data);
    opts.memtable_max_rows = 1_500;
    opts.compaction_min_segments = 2;
    opts.retired_grace = std::time::Duration::ZERO;
    opts
}

const ROWS: usize = 500;

/// One batch's times; every tenth batch starts a new hour, so compaction has partitions to merge
/// while the disk fills.
fn batch_times(i: usize) -> Vec<i64> {
    let hour = H0 + (i / 10) as i64 * HOUR;
    (0..ROWS)
        .map(|j| hour + ((i % 10) * ROWS + j) as i64 * 1_000_000)
        .collect()
}

#[test]
fn a_full_disk_fails_writes_cleanly_loses_nothing_acknowledged_and_recovers() {
    let ran = on_small_disk(
        "disk_full::a_full_disk_fails_writes_cleanly_loses_nothing_acknowledged_and_recovers",
        |disk| {
            // ballast that stands for "the rest of the disk": removed to give space back
            let ballast = disk.join("ballast");
            std::fs::write(&ballast, vec![1u8; 7 << 19]).unwrap();
            let data = disk.join("data");
            let store = Store::open(small_store_options(&data)).unwrap();
            let mut acked: Vec<String> = Vec::new();
            let (mut append_failures, mut maintenance_failures) = (0, 0);
            let mut i = 0;
            // write until appends have failed for a while, flushing and compacting on the way
            while append_failures < 10 && i < 500 {
                let prefix = format!("r{i}");
                match store.append(&[requests(&prefix, &batch_times(i))]) {
                    Ok(_) => acked.extend(ids(&prefix, ROWS)),
                    Err(err) => {
                        assert!(is_full(&err), "append failed otherwise: {err}");
                        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
                        append_failures += 1;
                    }
                }
                let compact = || match i % 3 {
                    0 => store.compact().map(drop),
                    _ => Ok(()),
                };
                for result in [store.maybe_flush().map(drop), compact()] {
                    if let Err(err) = result {
                        assert!(is_full(&err), "maintenance failed otherwise: {err}");
                        maintenance_failures += 1;
                    }
                }
                i += 1;
            }
            eprintln!(
                "disk full after {} acknowledged rows: {append_failures} appends and \
                 {maintenance_failures} flushes/compactions failed with ENOSPC",
                acked.len()
            );
            assert!(append_failures >= 10, "the disk never filled");
            assert!(
                maintenance_failures > 0,
                "no flush or compaction met the full disk"
            );
            assert!(
                temporary_files(&data).is_empty(),
                "torn temporary files: {:?}",
                temporary_files(&data)
            );
            // what was acknowledged is visible exactly once, even now
            assert_eq!(visible_ids(&store, Table::Requests), sorted(acked.clone()));

            // space returns: writes, flushes and compactions go on
            std::fs::remove_file(&ballast).unwrap();
            for j in 0..5 {
                let prefix = format!("after{j}");
                store
                    .append(&[requests(&prefix, &batch_times(i + j))])
                    .unwrap();
                acked.extend(ids(&prefix, ROWS));
            }
            store.flush().unwrap();
            store.compact().unwrap();
            assert_eq!(visible_ids(&store, Table::Requests), sorted(acked.clone()));
            store.close().unwrap();
            drop(store);

            // nothing torn on disk: every file the catalog names checks out, the log replays
            let store = Store::open(small_store_options(&data)).unwrap();
            let report = store.verify_segments().unwrap();
            assert_eq!(report.segments_quarantined + report.rollups_quarantined, 0);
            assert_eq!(store.stats().quarantine, Default::default());
            assert_eq!(visible_ids(&store, Table::Requests), sorted(acked));
            assert!(temporary_files(&data).is_empty());
        },
    );
    if !ran {
        eprintln!(
            "SKIPPED a_full_disk_fails_writes_cleanly_...: neither `mount -t tmpfs` (not root) nor \
             `unshare -rm` (user namespaces disabled) is available here"
        );
    }
}
