import Dispatch
import SocketCore

/// Runs password hashing off the event loop, on a fixed number of workers with a bounded queue.
///
/// Argon2id takes tens of milliseconds and `PasswordHashing.memoryBytes` per hash by design, so a
/// login must never hash on the server's queue. Jobs wait in one queue of at most `queueCapacity`;
/// when it is full, `submit` refuses at once and the caller answers `busy`: a flood of logins gets
/// clear refusals, costs at most `workers` hashes' memory (`memoryReserve`) plus the queue, and
/// chat goes on at its own pace on the other core.
public final class PasswordHashingPool: Sendable {
    /// What to compute.
    public enum Job: Sendable {
        /// A new hash of `password` (a registration, a password change).
        case hash(password: String)
        /// Whether `password` matches `stored` (a login); a match made with older parameters is
        /// hashed again with the pool's own.
        case verify(password: String, stored: String)
    }

    /// What a job found.
    public enum Outcome: Sendable, Equatable {
        /// The new hash; nil if libsodium could not allocate its memory.
        case hashed(String?)
        /// Whether the password matched, and — when it did, with older parameters — its hash with
        /// the pool's parameters, to store instead.
        case verified(Bool, rehashed: String?)
    }

    /// How each hash is made.
    public let hashing: PasswordHashing
    /// How many hashes run at once.
    public let workers: Int
    /// How many jobs may wait for a worker.
    public let queueCapacity: Int

    private struct Pending: Sendable {
        var job: Job
        var queue: DispatchQueue
        var completion: @Sendable (Outcome) -> Void
    }

    private struct State {
        var waiting: [Pending] = []
        /// Where the next job is taken from `waiting` (a queue without moving its elements).
        var head = 0
        var running = 0
    }

    private let state = Locked(State())
    private let workerQueue: DispatchQueue

    /// A pool of `workers` (at least one) hashing with `hashing`, holding at most `queueCapacity`
    /// jobs besides the running ones.
    public init(workers: Int, queueCapacity: Int, hashing: PasswordHashing = .standard) {
        precondition(workers > 0 && queueCapacity >= 0)
        self.workers = workers
        self.queueCapacity = queueCapacity
        self.hashing = hashing
        workerQueue = DispatchQueue(label: "ChatAccounts.hashing", attributes: .concurrent)
    }

    /// The memory the workers may use at once while hashing: to be set aside from the server's
    /// memory budget.
    public var memoryReserve: Int { workers * hashing.memoryBytes }

    /// Jobs queued or running.
    public var pending: Int { state.withLock { $0.waiting.count - $0.head + $0.running } }

    /// Queues `job`; its outcome is passed to `completion` on `queue`. Returns false, having
    /// queued nothing, when the queue is full: the caller refuses the request as `busy`.
    public func submit(_ job: Job, replyOn queue: DispatchQueue, _ completion: @escaping @Sendable (Outcome) -> Void) -> Bool {
        let startWorker = state.withLock { state -> Bool? in
            if state.running < workers {
                state.running += 1
                state.waiting.append(Pending(job: job, queue: queue, completion: completion))
                return true
            }
            guard state.waiting.count - state.head < queueCapacity else { return nil }
            state.waiting.append(Pending(job: job, queue: queue, completion: completion))
            return false
        }
        guard let startWorker else { return false }
        if startWorker { workerQueue.async { [self] in work() } }
        return true
    }

    /// One worker: runs jobs until none wait, then stops.
    private func work() {
        while let next = take() {
            let outcome = run(next.job)
            next.queue.async { next.completion(outcome) }
        }
    }

    /// The next waiting job, or nil — the worker then stops, counted out under the same lock.
    private func take() -> Pending? {
        state.withLock { state in
            guard state.head < state.waiting.count else {
                state.running -= 1
                state.waiting.removeAll(keepingCapacity: false)
                state.head = 0
                return nil
            }
            let next = state.waiting[state.head]
            state.head += 1
            if state.head > 64, state.head * 2 > state.waiting.count {
                state.waiting.removeFirst(state.head)
                state.head = 0
            }
            return next
        }
    }

    private func run(_ job: Job) -> Outcome {
        switch job {
        case .hash(let password):
            return .hashed(hashing.hash(password))
        case .verify(let password, let stored):
            guard PasswordHashing.verify(password, against: stored) else { return .verified(false, rehashed: nil) }
            return .verified(true, rehashed: hashing.needsRehash(stored) ? hashing.hash(password) : nil)
        }
    }
}
