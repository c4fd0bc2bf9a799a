import ChatCluster
import Dispatch
import RedisClient
import RedisProtocol
import TestSupport
import Testing

/// One node's nick registry for a test, on its own queue and connection.
private final class RegistryNode: @unchecked Sendable {
    let queue: DispatchQueue
    let registry: NickRegistry
    private let commands: RedisConnection

    /// By default a node lives a minute without beating, so that only the nodes a test lets die
    /// can die, however slowly a busy machine runs it.
    init(_ id: String, port: Int, ttlMilliseconds: Int = 60_000) async throws {
        let queue = DispatchQueue(label: "registry-\(id)")
        self.queue = queue
        let commands: RedisConnection = try await withCheckedThrowingContinuation { continuation in
            RedisConnection.connect(host: "127.0.0.1", port: port, queue: queue) { continuation.resume(with: $0) }
        }
        self.commands = commands
        registry = try await withCheckedThrowingContinuation { continuation in
            queue.async {
                NickRegistry.open(nodeID: id, ttlMilliseconds: ttlMilliseconds, commands: commands) { continuation.resume(with: $0) }
            }
        }
    }

    /// Runs a raw command on the registry's connection.
    func command(_ arguments: String...) async throws -> RESPValue {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { [commands] in commands.send(arguments.map { Array($0.utf8) }) { continuation.resume(with: $0) } }
        }
    }

    /// Claims `nick` as a guest: true when this node holds it now.
    func claim(_ nick: String) async throws -> Bool {
        try await claim(nick, as: .guest) == .claimed
    }

    func claim(_ nick: String, as claimant: NickRegistry.Claimant) async throws -> NickRegistry.Claim {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { [registry] in registry.claim(nick, as: claimant) { continuation.resume(with: $0) } }
        }
    }

    func release(_ nick: String) async throws -> Bool {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { [registry] in registry.release(nick) { continuation.resume(with: $0) } }
        }
    }

    func heartbeat() async throws -> UInt64 {
        try await beat().time
    }

    func beat() async throws -> NickRegistry.Heartbeat {
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

/// One test at a time: each starts its own redis-server (see RedisConnectionTests).
@Suite("Cluster-wide nicks in a real Redis", .serialized)
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

    @Test func aRegisteredNickIsRefusedToGuestsAndAGhostClaimTakesItFromALiveHolder() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let a = try await RegistryNode("a", port: redis.port)
        let b = try await RegistryNode("b", port: redis.port)
        #expect(try await a.claim("eve", as: .guest) == .claimed)
        _ = try await a.command("HSET", "chat:account:eve", "name", "eve", "hash", "h", "created", "1")
        #expect(try await b.claim("eve", as: .guest) == .reserved, "a guest never gets a registered nick")
        #expect(try await b.claim("eve", as: .ghost) == .claimed, "a ghost claim takes it from the live holder")
        #expect(try await a.command("GET", "chat:nick:eve") == .bulkString(Array("b".utf8)), "node b holds it now")
        #expect(try await a.command("SMEMBERS", "chat:node:a:nicks") == .array([]), "node a no longer lists it")
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

    @Test func aDeadNodesNicksAreFreedAndAnnouncedByOneReaper() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let dying = try await RegistryNode("dying", port: redis.port)
        let a = try await RegistryNode("a", port: redis.port)
        let b = try await RegistryNode("b", port: redis.port)
        #expect(try await dying.claim("carol"))
        #expect(try await dying.claim("dave"))
        #expect(try await !a.claim("carol"), "held while its node lives")
        #expect(try await a.reap(deadAfterMilliseconds: 0).isEmpty, "nobody is dead yet")
        // What the node key's expiry does, without waiting for it: the node is gone.
        #expect(try await a.command("DEL", "chat:node:dying") == .integer(1))
        #expect(try await a.reap(deadAfterMilliseconds: 0).mapValues { $0.sorted() } == ["dying": ["carol", "dave"]])
        #expect(try await b.reap(deadAfterMilliseconds: 0).isEmpty, "reported to one reaper only")
        #expect(try await b.claim("carol"))
        #expect(try await a.claim("dave"))
    }

    @Test func aNodeThatStopsBeatingLosesItsNicksWhenItsTTLRunsOut() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let silent = try await RegistryNode("silent", port: redis.port, ttlMilliseconds: 200)
        let other = try await RegistryNode("other", port: redis.port)
        #expect(try await silent.claim("frank"))
        // Redis expires the node's key by itself; how soon this loop sees it depends on the
        // machine, so it only waits, bounded, for it to happen.
        let claimed = try await eventually { try await other.claim("frank") }
        #expect(claimed, "the nick came free once the silent node's key expired")
    }

    @Test func aHeartbeatRenewsTheNodeAndRevivesAnExpiredOne() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let node = try await RegistryNode("beating", port: redis.port)
        let other = try await RegistryNode("other", port: redis.port)
        #expect(try await node.claim("erin"))
        let before = try await node.command("ZSCORE", "chat:nodes", "beating").integer ?? 0
        try await Task.sleep(for: .milliseconds(20))
        let beat = try await node.heartbeat()
        #expect(Int64(beat) > before, "the beat is recorded with Redis's time")
        #expect(try await node.command("ZSCORE", "chat:nodes", "beating").integer == Int64(beat))
        #expect((try await node.command("PTTL", "chat:node:beating").integer ?? 0) > 50_000, "the key lives another ttl")
        #expect(try await node.beat().wasRegistered, "a beat within the ttl finds the node alive")
        // A node whose key expired while it was busy, but that beats again before anyone reaped it,
        // holds its nicks again — and hears that its registration lapsed: meanwhile another node's
        // client could have claimed any of them, so its own clients must go.
        _ = try await node.command("DEL", "chat:node:beating")
        #expect(try await !node.beat().wasRegistered, "the lapse is reported")
        #expect(try await !other.claim("erin"))
        #expect(try await other.reap(deadAfterMilliseconds: 0).isEmpty)
    }
}
