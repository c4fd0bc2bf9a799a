import ChatAccounts
import Dispatch
import Testing
import TestSupport

/// The hashing pool's fair shares (PasswordHashingPool): a flood from one address prefix holds
/// the queue only until another prefix asks, workers take the prefixes in turn, and a login for a
/// name without an account is checked against the dummy hash and never matches.
@Suite("Password hashing shared fairly")
struct HashingShareTests {
    @Test func aFloodFromOnePrefixGivesUpItsNewestPlacesToAnotherAndTheWorkerTakesThemInTurn() async throws {
        // The worker's queue is held until every job is submitted: what waits, and in what
        // order it runs, then depends on the pool's rules alone, never on how fast a hash is.
        let workerQueue = DispatchQueue(label: "held workers", attributes: .concurrent)
        workerQueue.suspend()
        let pool = PasswordHashingPool(
            workers: 1, queueCapacity: 4, hashing: PasswordHashing(passes: 1, memoryBytes: 64 << 10), workerQueue: workerQueue)
        let log = Log()
        let replies = DispatchQueue(label: "replies")
        func submit(_ name: String, _ share: String) -> Bool {
            pool.submit(.hash(password: name), share: share, replyOn: replies) { outcome in
                log.add(outcome == .refused ? "\(name) refused" : name)
            }
        }
        for index in 0...3 { #expect(submit("a\(index)", "10.0.0.0/24"), "room in the queue for a\(index)") }
        #expect(!submit("a4", "10.0.0.0/24"), "the queue is full and the flood's share is the largest: refused at once")
        #expect(submit("b1", "10.0.1.0/24"), "another prefix takes the flood's newest place")
        #expect(submit("b2", "10.0.1.0/24"), "and another, while the flood holds two more than it")
        #expect(!submit("b3", "10.0.1.0/24"), "two places each: a third would only swap who is refused")
        #expect(pool.waiting(in: "10.0.0.0/24") == 2 && pool.waiting(in: "10.0.1.0/24") == 2)
        workerQueue.resume()
        #expect(await eventually(timeout: .seconds(60)) { log.entries.count == 6 }, "\(log.entries)")
        let entries = log.entries
        #expect(Set(entries.filter { $0.hasSuffix("refused") }) == ["a3 refused", "a2 refused"], "\(entries)")
        #expect(entries.filter { !$0.hasSuffix("refused") } == ["a0", "b1", "a1", "b2"], "the prefixes take turns: \(entries)")
        // A worker sends its last answer before it counts itself idle.
        #expect(await eventually { pool.pending == 0 })
    }

    @Test func aCheckForANameWithoutAnAccountIsAgainstTheDummyHashAndNeverMatches() async throws {
        let pool = PasswordHashingPool(workers: 1, queueCapacity: 1, hashing: PasswordHashing(passes: 1, memoryBytes: 64 << 10))
        #expect(pool.dummyHash.hasPrefix("$argon2id$v=19$m=64,t=1,p=1$"), "made with the pool's own parameters: \(pool.dummyHash)")
        let outcome = await withCheckedContinuation { continuation in
            let queued = pool.submit(.verify(password: "anything", stored: nil), share: "x", replyOn: DispatchQueue(label: "reply")) {
                continuation.resume(returning: $0)
            }
            if !queued { continuation.resume(returning: .refused) }
        }
        #expect(outcome == .verified(false, rehashed: nil))
    }
}

/// Lines gathered on one serial queue, read from the test.
private final class Log: @unchecked Sendable {
    private let queue = DispatchQueue(label: "log")
    private var lines: [String] = []

    func add(_ line: String) { queue.sync { lines.append(line) } }

    var entries: [String] { queue.sync { lines } }
}
