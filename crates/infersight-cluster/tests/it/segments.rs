//! Segment IO: written once (a retried upload of the same bytes is fine, other bytes are a
//! conflict), read through the bounded cache: repeated reads stay local, any range equals the
//! bucket's, the cache never holds more than its capacity and evicts the least recently used,
//! large objects and non-segment keys pass through, a delete drops the cached copy.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures::StreamExt;
use infersight_cluster::ClusterError;
use infersight_cluster::segments::{SegmentCache, write_segment};
use infersight_model::rng::SplitMix64;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayload};

use crate::support::{Fault, Faulty};

const KIB: u64 = 1024;

fn counted() -> (Arc<Faulty>, Arc<dyn ObjectStore>) {
    let remote = Arc::new(Faulty {
        inner: Arc::new(InMemory::new()),
        fault: Fault::CountGets(AtomicU64::new(0)),
    });
    let as_store: Arc<dyn ObjectStore> = remote.clone();
    (remote, as_store)
}

fn gets(remote: &Faulty) -> u64 {
    match &remote.fault {
        Fault::CountGets(count) => count.load(Ordering::SeqCst),
        _ => 0,
    }
}

fn bytes_of(len: usize, seed: u64) -> Bytes {
    let mut rng = SplitMix64::new(seed);
    (0..len)
        .map(|_| rng.next_u64() as u8)
        .collect::<Vec<_>>()
        .into()
}

fn segment_key(n: usize) -> Path {
    Path::from(format!(
        "segments/requests/2026120207/node-a-{n:026}.parquet"
    ))
}

#[tokio::test]
async fn a_segment_is_written_once_and_a_retried_upload_of_the_same_bytes_is_fine() {
    let store = InMemory::new();
    let key = segment_key(1);
    write_segment(&store, &key, bytes_of(100, 1)).await.unwrap();
    write_segment(&store, &key, bytes_of(100, 1)).await.unwrap();
    let other = write_segment(&store, &key, bytes_of(100, 2)).await;
    assert!(matches!(other, Err(ClusterError::Conflict(_))), "{other:?}");
    let kept = store.get(&key).await.unwrap().bytes().await.unwrap();
    assert_eq!(kept, bytes_of(100, 1));
}

#[tokio::test]
async fn cached_reads_stay_local_and_every_range_equals_the_buckets() {
    let (remote, store) = counted();
    let key = segment_key(1);
    let data = bytes_of(10 * KIB as usize, 7);
    store
        .put(&key, PutPayload::from(data.clone()))
        .await
        .unwrap();
    let cache = SegmentCache::new(Arc::clone(&store), 100 * KIB);

    let mut rng = SplitMix64::new(11);
    for _ in 0..200 {
        let start = rng.below(data.len()) as u64;
        let end = start + rng.below(data.len() - start as usize + 1) as u64;
        let range = match rng.below(3) {
            0 => GetRange::Bounded(start..end),
            1 => GetRange::Offset(start),
            _ => GetRange::Suffix(end - start),
        };
        let options = GetOptions {
            range: Some(range.clone()),
            ..GetOptions::default()
        };
        let cached = cache.get_opts(&key, options.clone()).await.unwrap();
        let direct = store.get_opts(&key, options).await.unwrap();
        assert_eq!(cached.range, direct.range, "{range:?}");
        assert_eq!(cached.bytes().await.unwrap(), direct.bytes().await.unwrap());
    }
    let ranges = [0..10, 100..4096, 0..data.len() as u64];
    let cached = cache.get_ranges(&key, &ranges).await.unwrap();
    // one head and one get for the first miss; the 200 direct reads above are the rest
    assert_eq!(gets(&remote), 2 + 200);
    assert_eq!(cached, store.get_ranges(&key, &ranges).await.unwrap());
    let stats = cache.stats();
    assert_eq!((stats.misses, stats.hits), (1, 200));
    assert_eq!(stats.cached_bytes, data.len() as u64);

    // a wrong If-Match is refused from the cache as the bucket would
    let refused = cache
        .get_opts(
            &key,
            GetOptions {
                if_match: Some("\"not-it\"".into()),
                ..GetOptions::default()
            },
        )
        .await;
    assert!(matches!(
        refused,
        Err(object_store::Error::Precondition { .. })
    ));
}

#[tokio::test]
async fn the_cache_stays_within_its_capacity_and_evicts_the_least_recently_used() {
    let (_remote, store) = counted();
    for n in 0..6 {
        let data = bytes_of(10 * KIB as usize, n as u64);
        store
            .put(&segment_key(n), PutPayload::from(data))
            .await
            .unwrap();
    }
    let cache = SegmentCache::new(Arc::clone(&store), 40 * KIB);
    for n in 0..4 {
        cache
            .get(&segment_key(n))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
    }
    assert_eq!(cache.stats().cached_bytes, 40 * KIB);
    // segment 0 read again: now 1 is the least recently used and goes first
    cache.get(&segment_key(0)).await.unwrap();
    cache.get(&segment_key(4)).await.unwrap();
    let stats = cache.stats();
    assert_eq!((stats.evictions, stats.cached_bytes), (1, 40 * KIB));
    let before = cache.stats().misses;
    cache.get(&segment_key(0)).await.unwrap();
    assert_eq!(cache.stats().misses, before, "segment 0 stayed");
    cache.get(&segment_key(1)).await.unwrap();
    assert_eq!(cache.stats().misses, before + 1, "segment 1 was evicted");
    assert!(cache.stats().cached_bytes <= 40 * KIB);
}

#[tokio::test]
async fn large_objects_and_other_keys_pass_through_and_deletes_drop_the_copy() {
    let (remote, store) = counted();
    let cache = SegmentCache::new(Arc::clone(&store), 40 * KIB);
    let big = segment_key(9);
    store
        .put(&big, PutPayload::from(bytes_of(11 * KIB as usize, 9)))
        .await
        .unwrap();
    let read = cache.get(&big).await.unwrap().bytes().await.unwrap();
    assert_eq!(read, bytes_of(11 * KIB as usize, 9));
    assert_eq!((cache.stats().bypassed, cache.stats().cached_bytes), (1, 0));

    let lease = Path::from("leases/compact");
    store
        .put(&lease, PutPayload::from_static(b"one"))
        .await
        .unwrap();
    cache.get(&lease).await.unwrap();
    store
        .put(&lease, PutPayload::from_static(b"two"))
        .await
        .unwrap();
    let now = cache.get(&lease).await.unwrap().bytes().await.unwrap();
    assert_eq!(
        now,
        Bytes::from_static(b"two"),
        "non-segment keys are never cached"
    );

    let small = segment_key(1);
    cache
        .put(&small, PutPayload::from(bytes_of(KIB as usize, 1)))
        .await
        .unwrap();
    cache.get(&small).await.unwrap();
    assert_eq!(cache.stats().cached_bytes, KIB);
    let deleted: Vec<_> = cache
        .delete_stream(futures::stream::iter([Ok(small.clone())]).boxed())
        .collect()
        .await;
    assert_eq!(deleted.len(), 1);
    assert_eq!(cache.stats().cached_bytes, 0);
    let gone = cache.get(&small).await;
    assert!(
        matches!(gone, Err(object_store::Error::NotFound { .. })),
        "{gone:?}"
    );
    assert!(gets(&remote) > 0);
}

/// The disk level: an object memory cannot keep is kept on disk; after a restart (a new cache
/// over the same directory) reads come from the disk, not the bucket, and equal its bytes; a
/// delete through the cache removes the file too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disk_level_answers_after_a_restart_without_the_bucket() {
    use infersight_cluster::disk_cache::DiskCache;

    let (remote, store) = counted();
    let dir = tempfile::tempdir().unwrap();
    let (small, large) = (segment_key(1), segment_key(2));
    let small_data = bytes_of(4 * KIB as usize, 1);
    // over a quarter of the memory level (40 KiB), under a quarter of the disk level
    let large_data = bytes_of(20 * KIB as usize, 2);
    store
        .put(&small, PutPayload::from(small_data.clone()))
        .await
        .unwrap();
    store
        .put(&large, PutPayload::from(large_data.clone()))
        .await
        .unwrap();
    let open = || {
        SegmentCache::new(Arc::clone(&store), 40 * KIB)
            .with_disk(DiskCache::open(dir.path(), 200 * KIB).unwrap())
    };

    let first = open();
    for key in [&small, &large] {
        first.get(key).await.unwrap().bytes().await.unwrap();
    }
    let stats = first.stats();
    assert_eq!((stats.misses, stats.bypassed, stats.disk_hits), (2, 0, 0));
    assert_eq!(stats.cached_bytes, 4 * KIB, "only the small one in memory");
    assert_eq!(stats.disk.unwrap().bytes, 24 * KIB);
    // the large one again: from disk
    first.get(&large).await.unwrap();
    assert_eq!(first.stats().disk_hits, 1);
    drop(first);

    let fetched = gets(&remote);
    let restarted = open();
    let ranges = [0..10, 1000..4000];
    assert_eq!(
        restarted.get_ranges(&large, &ranges).await.unwrap(),
        store.get_ranges(&large, &ranges).await.unwrap()
    );
    let whole = restarted.get(&small).await.unwrap().bytes().await.unwrap();
    assert_eq!(whole, small_data);
    // the two direct `get_ranges` above are the only bucket reads since the restart
    assert_eq!(gets(&remote), fetched + 1);
    let stats = restarted.stats();
    assert_eq!((stats.disk_hits, stats.misses), (2, 0));

    let deleted: Vec<_> = restarted
        .delete_stream(futures::stream::iter([Ok(large.clone())]).boxed())
        .collect()
        .await;
    assert_eq!(deleted.len(), 1);
    assert_eq!(restarted.stats().disk.unwrap().bytes, 4 * KIB);
    assert!(matches!(
        restarted.get(&large).await,
        Err(object_store::Error::NotFound { .. })
    ));
}
