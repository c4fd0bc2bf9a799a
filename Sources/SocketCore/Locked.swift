import Glibc

/// A value behind a `pthread_mutex_t`.
///
/// Used where a value crosses from a Dispatch queue to a Swift task. ThreadSanitizer understands
/// pthread mutexes, but on Linux it sees neither `Synchronization.Mutex` nor the continuation
/// resumes of the concurrency runtime, and reports such hand-offs as races. A hand-off through
/// this lock is both correct and visible to TSan as correct. Other targets of this package use it
/// for the same reason (the server's storage writer hands finished commits back through one).
package final class Locked<Value>: @unchecked Sendable {
    // The mutex lives on the heap: a pthread mutex must not move once initialised.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    // Only touched with the mutex held, so no two accesses overlap: a run-time exclusivity check
    // would add a thread-local lookup to every hand-off and catch nothing the mutex lets through.
    @exclusivity(unchecked) private var value: Value

    package init(_ value: Value) {
        self.value = value
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with exclusive access to the value.
    package func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
