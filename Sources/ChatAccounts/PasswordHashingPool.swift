import ChatCore
import DequeModule
import Dispatch
import SocketCore

/// Runs password hashing off the event loop, on a fixed number of workers with a bounded queue
/// shared fairly between the addresses that ask.
///
/// Argon2id takes tens of milliseconds and `PasswordHashing.memoryBytes` per hash by design, so a
/// login must never hash on the server's queue. Jobs wait in at most `queueCapacity` places;
/// past them `submit` refuses at once and the caller answers `busy`: a flood of logins gets
/// clear refusals, costs at most `workers` hashes' memory (`memoryReserve`) plus the queue, and
/// chat goes on at its own pace on the other core.
///
/// **Fair shares.** Every job names the share it counts against — the asking address's prefix
/// (an IPv4 /24, an IPv6 /64: what one host or one small network holds) — and each share waits
/// in a queue of its own. Workers take the shares' jobs in turn (round robin), so a share with
/// one job waits behind at most one job of every other share, however many the others queued.
/// The queue's places are shared max-min fairly: while there is room anyone takes one, but when
/// it is full, a job whose share holds at least two places fewer than the largest share takes
/// the newest place of that largest share, whose job is answered `Outcome.refused` (`busy`).
/// So a flood from one network fills the queue only until someone else asks, and an owner
/// logging in from elsewhere always gets a place — unless every waiting job already comes from
/// a share of its own, when each holds one place and the newcomer is refused like anyone.
public final class PasswordHashingPool: Sendable {
    /// What to compute.
    public enum Job: Sendable {
        /// A new hash of `password` (a registration, a password change).
        case hash(password: String)
        /// Whether `password` matches `stored` (a login); a match made with older parameters is
        /// hashed again with the pool's own. A nil `stored` — no such account — is checked
        /// against the pool's `dummyHash`, which costs what a real check costs, and never matches:
        /// a login for a name that has no account takes as long as a wrong password.
        case verify(password: String, stored: String?)
    }

    /// What a job found (`PasswordHashingOutcome`).
    public typealias Outcome = PasswordHashingOutcome

    /// How each hash is made.
    public let hashing: PasswordHashing
    /// How many hashes run at once.
    public let workers: Int
    /// How many jobs may wait for a worker.
    public let queueCapacity: Int
    /// A hash of a random password made with `hashing`, which a login for an account that does
    /// not exist is checked against (`Job.verify` with no `stored`). Made on first use — by the
    /// pool's first job of any kind, so that the one extra hash it costs tells nobody what that
    /// job was — rather than when the pool is made: a server starts without it, and a test
    /// process that starts hundreds of servers does not hash once for each.
    public var dummyHash: String {
        dummy.withLock { made in
            if let made { return made }
            let hash = hashing.hash(PasswordHashing.randomPassword()) ?? ""
            made = hash
            return hash
        }
    }
    private let dummy = Locked<String?>(nil)

    private struct Pending: Sendable {
        var job: Job
        var share: String
        var queue: DispatchQueue
        var completion: @Sendable (Outcome) -> Void
    }

    private struct State {
        /// The waiting jobs of each share that has any, oldest first.
        var shares: [String: Deque<Pending>] = [:]
        /// The shares with waiting jobs, in the order workers take from them.
        var turns: Deque<String> = []
        var waiting = 0
        var running = 0
    }

    private let state = Locked(State())
    private let workerQueue: DispatchQueue

    /// A pool of `workers` (at least one) hashing with `hashing`, holding at most `queueCapacity`
    /// jobs besides the running ones. Workers run on `workerQueue`, a concurrent queue of the
    /// pool's own unless one is given (a test suspends its own to hold jobs in the queue).
    public init(workers: Int, queueCapacity: Int, hashing: PasswordHashing = .standard, workerQueue: DispatchQueue? = nil) {
        precondition(workers > 0 && queueCapacity >= 0)
        self.workers = workers
        self.queueCapacity = queueCapacity
        self.hashing = hashing
        self.workerQueue = workerQueue ?? DispatchQueue(label: "ChatAccounts.hashing", attributes: .concurrent)
    }

    /// The memory the workers may use at once while hashing: to be set aside from the server's
    /// memory budget.
    public var memoryReserve: Int { workers * hashing.memoryBytes }

    /// Jobs queued or running.
    public var pending: Int { state.withLock { $0.waiting + $0.running } }

    /// Jobs waiting (not running) for `share`.
    public func waiting(in share: String) -> Int { state.withLock { $0.shares[share]?.count ?? 0 } }

    /// Queues `job` in `share` (the asking address's prefix); its outcome is passed to
    /// `completion` on `queue`. Returns false, having queued nothing, when the queue is full and
    /// `share` holds no fewer places than the others allow it: the caller refuses the request as
    /// `busy`. A job accepted here may still be answered `.refused` later, when it gives its
    /// place to a smaller share.
    public func submit(
        _ job: Job, share: String = "", replyOn queue: DispatchQueue, _ completion: @escaping @Sendable (Outcome) -> Void
    ) -> Bool {
        let pending = Pending(job: job, share: share, queue: queue, completion: completion)
        let decision = state.withLock { state -> (queued: Bool, startWorker: Bool, displaced: Pending?) in
            if state.running < workers {
                state.running += 1
                Self.enqueue(pending, in: &state)
                return (true, true, nil)
            }
            if state.waiting < queueCapacity {
                Self.enqueue(pending, in: &state)
                return (true, false, nil)
            }
            guard let displaced = Self.displace(for: share, in: &state) else { return (false, false, nil) }
            Self.enqueue(pending, in: &state)
            return (true, false, displaced)
        }
        if let displaced = decision.displaced { displaced.queue.async { displaced.completion(.refused) } }
        if decision.startWorker { workerQueue.async { [self] in work() } }
        return decision.queued
    }

    private static func enqueue(_ pending: Pending, in state: inout State) {
        if state.shares[pending.share] == nil {
            state.shares[pending.share] = []
            state.turns.append(pending.share)
        }
        state.shares[pending.share]!.append(pending)
        state.waiting += 1
    }

    /// Takes the newest place of the largest share for `share`, when that share holds at least
    /// two places more than `share` does (fewer would only swap who is refused); nil otherwise.
    /// Of equally large shares, the one served last gives its place.
    private static func displace(for share: String, in state: inout State) -> Pending? {
        let own = state.shares[share]?.count ?? 0
        var largest: String?
        var largestCount = own + 1
        for key in state.turns.reversed() {
            let count = state.shares[key]?.count ?? 0
            if count > largestCount {
                largest = key
                largestCount = count
            }
        }
        guard let largest, let displaced = state.shares[largest]?.popLast() else { return nil }
        state.waiting -= 1
        if state.shares[largest]!.isEmpty {
            state.shares[largest] = nil
            state.turns.removeAll { $0 == largest }
        }
        return displaced
    }

    /// One worker: runs jobs until none wait, then stops.
    private func work() {
        while let next = take() {
            let outcome = run(next.job)
            next.queue.async { next.completion(outcome) }
        }
    }

    /// The next waiting job, the shares taking turns, or nil — the worker then stops, counted out
    /// under the same lock.
    private func take() -> Pending? {
        state.withLock { state in
            guard let share = state.turns.popFirst() else {
                state.running -= 1
                return nil
            }
            let next = state.shares[share]!.removeFirst()
            state.waiting -= 1
            if state.shares[share]!.isEmpty {
                state.shares[share] = nil
            } else {
                state.turns.append(share)
            }
            return next
        }
    }

    private func run(_ job: Job) -> Outcome {
        // The dummy's password is thrown away: nobody can log in with it, whatever it is, since a
        // check against the dummy is answered false even when it matches.
        let dummyHash = self.dummyHash
        switch job {
        case .hash(let password):
            return .hashed(hashing.hash(password))
        case .verify(let password, nil):
            // The same work as a real check, and never a match.
            _ = PasswordHashing.verify(password, against: dummyHash)
            return .verified(false, rehashed: nil)
        case .verify(let password, let stored?):
            guard PasswordHashing.verify(password, against: stored) else { return .verified(false, rehashed: nil) }
            return .verified(true, rehashed: hashing.needsRehash(stored) ? hashing.hash(password) : nil)
        }
    }
}
