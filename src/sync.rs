//! Locks that survive a panicking holder.
//!
//! Every `std::sync` lock in the daemon guards data that stays consistent between statements
//! (a map insert, a counter, a buffered writer), so a thread that panics while holding one leaves
//! nothing half-written that a later holder could misread. When that happens the daemon keeps
//! serving with the data as it is rather than turning one panic into a panic on every later
//! lock: these helpers take the guard out of the `PoisonError`. They are the one place that
//! policy is written.

use std::sync::{
    LockResult, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard,
};

/// `Mutex::lock` that ignores poisoning (see the module header for why that is safe here).
pub trait LockExt<T: ?Sized> {
    /// Locks, taking the guard even if a previous holder panicked.
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> LockExt<T> for Mutex<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        unpoisoned(self.lock())
    }
}

/// `RwLock::read`/`write` that ignore poisoning.
pub trait RwLockExt<T: ?Sized> {
    /// Takes a shared guard, even if a previous writer panicked.
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T>;
    /// Takes the exclusive guard, even if a previous writer panicked.
    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockExt<T> for RwLock<T> {
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T> {
        unpoisoned(self.read())
    }

    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T> {
        unpoisoned(self.write())
    }
}

/// The guard of any lock result, poisoned or not: for `Condvar::wait` and friends, which hand
/// the guard back wrapped the same way.
pub fn unpoisoned<G>(result: LockResult<G>) -> G {
    result.unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Condvar};
    use std::thread;
    use std::time::Duration;

    fn poison<L: Send + Sync + 'static>(lock: Arc<L>, hold: fn(&L)) {
        let result = thread::spawn(move || hold(&lock)).join();
        assert!(result.is_err(), "the holder must have panicked");
    }

    #[test]
    fn a_poisoned_mutex_still_hands_out_its_data() {
        let lock = Arc::new(Mutex::new(vec![1]));
        poison(Arc::clone(&lock), |m| {
            let mut guard = m.lock().unwrap();
            guard.push(2);
            panic!("holder dies with the guard");
        });
        assert!(lock.is_poisoned());
        lock.lock_unpoisoned().push(3);
        assert_eq!(*lock.lock_unpoisoned(), vec![1, 2, 3]);
    }

    #[test]
    fn a_poisoned_rwlock_still_reads_and_writes() {
        let lock = Arc::new(RwLock::new(String::from("a")));
        poison(Arc::clone(&lock), |l| {
            let mut guard = l.write().unwrap();
            guard.push('b');
            panic!("writer dies with the guard");
        });
        assert!(lock.is_poisoned());
        lock.write_unpoisoned().push('c');
        assert_eq!(lock.read_unpoisoned().as_str(), "abc");
    }

    #[test]
    fn a_condvar_wait_on_a_poisoned_mutex_returns_its_guard() {
        let lock = Arc::new(Mutex::new(5));
        poison(Arc::clone(&lock), |m| {
            let _guard = m.lock().unwrap();
            panic!("holder dies");
        });
        let wake = Condvar::new();
        let guard = lock.lock_unpoisoned();
        let (guard, _) = unpoisoned(wake.wait_timeout(guard, Duration::from_millis(1)));
        assert_eq!(*guard, 5);
    }
}
