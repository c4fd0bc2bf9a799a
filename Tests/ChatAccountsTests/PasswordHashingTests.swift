import ChatAccounts
import ChatCore
import Dispatch
import Testing
import TestSupport

/// Argon2id through libsodium, and the pool that keeps it off the event loop.
@Suite("Password hashing")
struct PasswordHashingTests {
    /// Cheap parameters, so the tests run fast; the format and checks are the same.
    static let fast = PasswordHashing(passes: 1, memoryBytes: 64 << 10)

    @Test func aHashVerifiesItsPasswordAndNoOtherAndCarriesItsParameters() throws {
        let stored = try #require(Self.fast.hash("correct horse"))
        #expect(stored.hasPrefix("$argon2id$v=19$m=64,t=1,p=1$"), "libsodium's encoded form, parameters included: \(stored)")
        #expect(PasswordHashing.verify("correct horse", against: stored))
        #expect(!PasswordHashing.verify("correct horsE", against: stored))
        #expect(!PasswordHashing.verify("", against: stored))
        #expect(!PasswordHashing.verify("correct horse", against: "not a hash"))
        let again = try #require(Self.fast.hash("correct horse"))
        #expect(again != stored, "each hash has its own salt")
    }

    @Test func raisedParametersAskForARehashAndTheOldHashStillVerifies() throws {
        let old = try #require(Self.fast.hash("pw"))
        let raised = PasswordHashing(passes: 2, memoryBytes: 128 << 10)
        #expect(!Self.fast.needsRehash(old))
        #expect(raised.needsRehash(old))
        #expect(PasswordHashing.verify("pw", against: old), "raising the parameters locks nobody out")
    }

    @Test func aLoginWithAnOldHashComesBackWithANewOne() async throws {
        let old = try #require(Self.fast.hash("pw"))
        let pool = PasswordHashingPool(workers: 1, queueCapacity: 4, hashing: PasswordHashing(passes: 2, memoryBytes: 128 << 10))
        let outcome = await Self.run(.verify(password: "pw", stored: old), on: pool)
        guard case .verified(true, let rehashed?) = outcome else {
            Issue.record("expected a match with a new hash, got \(String(describing: outcome))")
            return
        }
        #expect(rehashed.hasPrefix("$argon2id$v=19$m=128,t=2,p=1$") && PasswordHashing.verify("pw", against: rehashed))
        #expect(await Self.run(.verify(password: "wrong", stored: old), on: pool) == .verified(false, rehashed: nil))
    }

    /// The hostile case: a flood of logins far beyond what the pool holds is refused at once, past
    /// the workers and the queue, and everything accepted is answered.
    @Test func aFloodIsRefusedPastTheQueueAndEveryAcceptedJobIsAnswered() async throws {
        // Hashes of a few milliseconds each: 1,000 submissions arrive far faster than they are done.
        let slow = PasswordHashing(passes: 2, memoryBytes: 4 << 20)
        let pool = PasswordHashingPool(workers: 2, queueCapacity: 8, hashing: slow)
        let stored = try #require(slow.hash("pw"))
        let answers = DispatchQueue(label: "answers")
        let outcomes = Outcomes()
        var accepted = 0
        var refused = 0
        for number in 0..<1_000 {
            let ok = pool.submit(.verify(password: number.isMultiple(of: 2) ? "pw" : "guess \(number)", stored: stored), replyOn: answers) {
                outcomes.add($0)
            }
            if ok { accepted += 1 } else { refused += 1 }
            #expect(pool.pending <= 10, "at most the workers and the queue: \(pool.pending)")
        }
        // A job handed to a worker that has not yet started still holds its place in the queue,
        // so under load as few as `queueCapacity` are taken.
        #expect(accepted >= pool.queueCapacity, "accepted \(accepted)")
        #expect(accepted < 1_000 && refused == 1_000 - accepted, "accepted \(accepted), refused \(refused)")
        var answered = 0
        for _ in 0..<600 where answered < accepted {
            try await Task.sleep(for: .milliseconds(50))
            answered = outcomes.count
        }
        #expect(answered == accepted, "every accepted job is answered")
        // A worker sends its last answer before it counts itself idle.
        #expect(await eventually { pool.pending == 0 })
        #expect(pool.submit(.hash(password: "after"), replyOn: answers) { _ in }, "the pool takes work again")
    }

    @Test func theMemoryReserveIsTheWorkersHashesAtOnce() {
        let pool = PasswordHashingPool(workers: 3, queueCapacity: 0)
        #expect(pool.memoryReserve == 3 * PasswordHashing.standard.memoryBytes)
    }

    /// `job`'s outcome on `pool`.
    private static func run(_ job: PasswordHashingPool.Job, on pool: PasswordHashingPool) async -> PasswordHashingPool.Outcome? {
        await withCheckedContinuation { continuation in
            let queued = pool.submit(job, replyOn: DispatchQueue(label: "reply")) { continuation.resume(returning: $0) }
            if !queued { continuation.resume(returning: nil) }
        }
    }
}

/// Outcomes gathered on one serial queue, counted from the test.
private final class Outcomes: @unchecked Sendable {
    private let lock = DispatchQueue(label: "outcomes")
    private var outcomes: [PasswordHashingPool.Outcome] = []

    func add(_ outcome: PasswordHashingPool.Outcome) { lock.sync { outcomes.append(outcome) } }

    var count: Int { lock.sync { outcomes.count } }
}
