//! One helper for the store's CPU-bound fan-outs (encoding a flush's segments, checking every
//! segment's footer at open, verifying whole files): a function over a slice on up to one
//! thread per core, results in the slice's order.

use std::sync::atomic::Ordering;

/// `f` of every item, in the items' order, computed on up to one thread per core. A panic in `f`
/// is passed on, as if it had run on the calling thread.
pub(crate) fn map_in_parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut slots: Vec<Option<R>> = items.iter().map(|_| None).collect();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(index) else {
                            return done;
                        };
                        done.push((index, f(item)));
                    }
                })
            })
            .collect();
        for worker in workers {
            match worker.join() {
                Ok(done) => {
                    for (index, result) in done {
                        slots[index] = Some(result);
                    }
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    // every index below `items.len()` was taken by exactly one worker
    slots.into_iter().flatten().collect()
}
