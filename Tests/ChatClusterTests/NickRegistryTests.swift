import ChatCluster
import Dispatch
import RedisClient
import TestSupport
import Testing

/// One node's nick registry for a test, on its own queue and connection.
private final class RegistryNode: @unchecked Sendable {
    let queue: DispatchQueue
    let registry: NickRegistry

    /// By default a node lives a minute without beating, so that only the nodes a test lets die
    /// can die, however slowly a busy machine runs it.
    init(_ id: String, port: Int, ttlMilliseconds: Int = 60_000) async throws {
        let queue = DispatchQueue(label: "registry-\(id)")
        self.queue = queue
        let commands: RedisConnection = try await withCheckedThrowingContinuation { continuation in
            RedisConnection.connect(host: "127.0.0.1", port: port, queue: queue) { continuation.resume(with: $0) }
        }
        registry = try await withCheckedThrowingContinuation { continuation in
            queue.async {
                NickRegistry.open(nodeID: id, ttlMilliseconds: ttlMilliseconds, commands: commands) { continuation.resume(with: $0) }
            }
        }
    }

    func claim(_ nick: String) async throws -> Bool {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { [registry] in registry.claim(nick) { continuation.resume(with: $0) } }
        }
    }

    func release(_ nick: String) async throws -> Bool {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { [registry] in registry.release(nick) { continuation.resume(with: $0) } }
        }
    }

    func heartbeat() async throws -> UInt64 {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { [registry] in registry.heartbeat { continuation.resume(with: $0) } }
        }
    }

    func reap(deadAfterMilliseconds: Int) async throws -> [String: [String]] {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { [registry] in registry.reap(deadAfterMilliseconds: deadAfterMilliseconds) { continuation.resume(with: $0) } }
        }
    }
}

@Suite("Cluster-wide nicks in a real Redis")
struct NickRegistryTests {
    @Test func ofManyNodesClaimingOneNickAtOnceExactlyOneWins() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        var nodes: [RegistryNode] = []
        for index in 0..<6 { nodes.append(try await RegistryNode("node\(index)", port: redis.port)) }
        for round in 0..<20 {
            let nick = "alice\(round)"
            let wins = try await withThrowingTaskGroup(of: Bool.self) { group in
                for node in nodes { group.addTask { try await node.claim(nick) } }
                return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            #expect(wins == 1, "\(nick): \(wins) nodes think they hold it")
        }
    }

    @Test func aReleasedNickCanBeClaimedElsewhere() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let a = try await RegistryNode("a", port: redis.port)
        let b = try await RegistryNode("b", port: redis.port)
        #expect(try await a.claim("bob"))
        #expect(try await a.claim("bob"), "claiming again is idempotent for the holder")
        #expect(try await !b.claim("bob"))
        #expect(try await !b.release("bob"), "only the holder can let it go")
        #expect(try await a.release("bob"))
        #expect(try await b.claim("bob"))
    }

    @Test func aSilentNodesNicksFreeUpAndOneReaperAnnouncesThem() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        // A ttl long enough that a busy machine cannot expire the node before the checks below
        // that it is alive; the wait for its death is bounded by the loop, not by the ttl.
        let dying = try await RegistryNode("dying", port: redis.port, ttlMilliseconds: 2_000)
        let a = try await RegistryNode("a", port: redis.port)
        let b = try await RegistryNode("b", port: redis.port)
        #expect(try await dying.claim("carol"))
        #expect(try await dying.claim("dave"))
        #expect(try await !a.claim("carol"), "held while its node lives")
        #expect(try await a.reap(deadAfterMilliseconds: 300).isEmpty, "nobody is dead yet")
        // The node stops beating. Wait for Redis to expire its key (bounded), then reap.
        var reaped: [String: [String]] = [:]
        let deadline = ContinuousClock.now + .seconds(30)
        while reaped.isEmpty, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            reaped = try await a.reap(deadAfterMilliseconds: 300)
        }
        #expect(reaped.keys.sorted() == ["dying"])
        #expect(reaped["dying"]?.sorted() == ["carol", "dave"])
        #expect(try await b.reap(deadAfterMilliseconds: 300).isEmpty, "reported to one reaper only")
        #expect(try await b.claim("carol"))
    }

    @Test func heartbeatsKeepANodesNicks() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let beating = try await RegistryNode("beating", port: redis.port, ttlMilliseconds: 3_000)
        let other = try await RegistryNode("other", port: redis.port)
        #expect(try await beating.claim("erin"))
        // Well past the ttl, beating every 250 ms: the nick stays taken and nobody is reaped.
        for _ in 0..<16 {
            _ = try await beating.heartbeat()
            try await Task.sleep(for: .milliseconds(250))
            #expect(try await !other.claim("erin"))
        }
        #expect(try await other.reap(deadAfterMilliseconds: 3_000)["beating"] == nil)
    }
}
