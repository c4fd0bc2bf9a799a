import ChatCluster
import ChatCore
import Dispatch
import RedisClient
import RedisProtocol
import Testing
import TestSupport

/// One node's view of the cluster for a test: its own queue, two Redis connections, a `RoomLog`,
/// and every event it was handed, in order (RoomLogTests, RoomModerationTests).
final class Node: @unchecked Sendable {
    let queue: DispatchQueue
    let log: RoomLog
    let commands: RedisConnection
    /// Touched only on `queue`.
    private var delivered: [String: [LoggedEvent]] = [:]

    init(_ name: String, port: Int, maxAdmissionAttempts: Int = 8) async throws {
        let queue = DispatchQueue(label: "node-\(name)")
        self.queue = queue
        let commands = try await Self.connect(port: port, queue: queue)
        let subscriber = try await Self.connect(port: port, queue: queue)
        self.commands = commands
        log = try await withCheckedThrowingContinuation { continuation in
            queue.async {
                RoomLog.open(commands: commands, subscriber: subscriber, maxAdmissionAttempts: maxAdmissionAttempts) {
                    continuation.resume(with: $0)
                }
            }
        }
        queue.sync { log.onEvent = { [self] room, event in delivered[room, default: []].append(event) } }
    }

    private static func connect(port: Int, queue: DispatchQueue) async throws -> RedisConnection {
        try await withCheckedThrowingContinuation { continuation in
            RedisConnection.connect(host: "127.0.0.1", port: port, queue: queue) { continuation.resume(with: $0) }
        }
    }

    func follow(_ room: String) async throws -> UInt64 {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { [log] in log.follow(room) { continuation.resume(with: $0) } }
        }
    }

    /// Appends every payload in one turn; returns the `seq`s Redis gave them, in order of reply.
    func append(_ payloads: [[UInt8]], to room: String) async throws -> [UInt64] {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { [log] in
                var seqs: [UInt64] = []
                var failed = false
                for payload in payloads {
                    log.append(to: room, payload: payload) { result in
                        guard !failed else { return }
                        switch result {
                        case .success(let appended):
                            seqs.append(appended.event.seq)
                            if seqs.count == payloads.count { continuation.resume(returning: seqs) }
                        case .failure(let error):
                            failed = true
                            continuation.resume(throwing: error)
                        }
                    }
                }
            }
        }
    }

    /// Appends one event with `change` and `moderation`; the result as the log gives it.
    func append(
        _ payload: [UInt8], change: RoomChange, moderation: ModerationCheck? = nil, to room: String
    ) async -> Result<AppendedEvent, ClusterError> {
        await withCheckedContinuation { continuation in
            queue.async { [log] in
                log.append(to: room, payload: payload, change: change, moderation: moderation) { continuation.resume(returning: $0) }
            }
        }
    }

    /// Runs `read` against a directory on this node's command connection.
    func directory<T: Sendable>(
        _ read: @escaping @Sendable (ClusterDirectory, @escaping (Result<T, ClusterError>) -> Void) -> Void
    ) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { [commands] in read(ClusterDirectory(commands: commands)) { continuation.resume(with: $0) } }
        }
    }

    func command(_ arguments: [[UInt8]]) async -> RedisConnection.Reply {
        await withCheckedContinuation { continuation in
            queue.async { [commands] in commands.send(arguments) { continuation.resume(returning: $0) } }
        }
    }

    func events(of room: String, after seq: UInt64? = nil, before: UInt64? = nil, limit: Int) async throws -> [LoggedEvent] {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { [log] in
                if let seq {
                    log.events(of: room, after: seq, limit: limit) { continuation.resume(with: $0) }
                } else {
                    log.events(of: room, before: before ?? 0, limit: limit) { continuation.resume(with: $0) }
                }
            }
        }
    }

    func deliveredEvents(in room: String) -> [LoggedEvent] { queue.sync { delivered[room] ?? [] } }

    /// Waits (bounded) until `count` events of `room` were delivered.
    func waitForEvents(_ count: Int, in room: String) async -> [LoggedEvent] {
        _ = await eventually(every: .milliseconds(10)) { deliveredEvents(in: room).count >= count }
        return deliveredEvents(in: room)
    }
}

func payload(_ text: String) -> [UInt8] { Array(text.utf8) + [0, 13, 10, 32] }

/// One test at a time: each starts its own redis-server (see RedisConnectionTests).
@Suite("The cluster's room log in a real Redis", .serialized)
struct RoomLogTests {
    @Test func twoNodesAppendingAtOnceSeeOneOrder() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let a = try await Node("a", port: redis.port)
        let b = try await Node("b", port: redis.port)
        #expect(try await a.follow("general") == 0)
        #expect(try await b.follow("general") == 0)
        async let fromA = a.append((0..<500).map { payload("a\($0)") }, to: "general")
        async let fromB = b.append((0..<500).map { payload("b\($0)") }, to: "general")
        let (seqsA, seqsB) = try await (fromA, fromB)
        #expect(seqsA == seqsA.sorted() && seqsB == seqsB.sorted(), "each node's appends keep its order")
        #expect(Set(seqsA + seqsB) == Set(1...1000), "every seq once")
        let seenA = await a.waitForEvents(1000, in: "general")
        let seenB = await b.waitForEvents(1000, in: "general")
        #expect(seenA.map(\.seq) == Array(1...1000), "consecutive, in order, once")
        #expect(seenA == seenB, "the same events in the same order on both nodes")
        let fromNodeA = seenA.filter { $0.payload.starts(with: Array("a".utf8)) }.map(\.payload)
        #expect(fromNodeA == (0..<500).map { payload("a\($0)") }, "payloads arrive intact")
        #expect(seenA.allSatisfy { $0.time > 1_700_000_000_000 }, "stamped by Redis's clock, in milliseconds")
    }

    @Test func aFollowerFillsMissedPublicationsFromTheStream() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let node = try await Node("a", port: redis.port)
        #expect(try await node.follow("r") == 0)
        _ = try await node.append([payload("one")], to: "r")
        // Three events stored as the script stores them, but never published: what a subscriber
        // misses while its connection is away.
        for seq in 2...4 {
            #expect(try await node.command([Array("INCR".utf8), Array("chat:{r}:seq".utf8)]).get() == .integer(Int64(seq)))
            let added = try await node.command([
                Array("XADD".utf8), Array("chat:{r}:log".utf8), Array("\(seq)-1".utf8),
                Array("t".utf8), Array("1767225600000".utf8), Array("p".utf8), payload("missed \(seq)"),
            ]).get()
            #expect(added == .bulk("\(seq)-1"))
        }
        _ = try await node.append([payload("five")], to: "r")
        let seen = await node.waitForEvents(5, in: "r")
        #expect(seen.map(\.seq) == [1, 2, 3, 4, 5])
        #expect(seen.map(\.payload) == [payload("one"), payload("missed 2"), payload("missed 3"), payload("missed 4"), payload("five")])
    }

    @Test func aGapLongerThanOneReadIsFilledPageByPage() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let node = try await Node("a", port: redis.port)
        #expect(try await node.follow("r") == 0)
        _ = try await node.append([payload("one")], to: "r")
        // More missed events than one read takes (ClusterReplies.eventsPerRead): the node reads
        // them in pages, each within what its connections accept, and delivers all in order.
        let missed = 2 * ClusterReplies.eventsPerRead + 10
        for seq in 2...(missed + 1) {
            _ = try await node.command([Array("INCR".utf8), Array("chat:{r}:seq".utf8)]).get()
            _ = try await node.command([
                Array("XADD".utf8), Array("chat:{r}:log".utf8), Array("\(seq)-1".utf8),
                Array("t".utf8), Array("1767225600000".utf8), Array("p".utf8), payload("missed \(seq)"),
            ]).get()
        }
        _ = try await node.append([payload("last")], to: "r")
        let seen = await node.waitForEvents(missed + 2, in: "r")
        #expect(seen.map(\.seq) == Array(1...UInt64(missed + 2)), "every event once, in order")
    }

    @Test func listsLongerThanOneReadAreReadWholeInPages() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let a = try await Node("a", port: redis.port)
        // One room with more members than one read takes, and more rooms than one read takes.
        let members = ClusterReplies.namesPerRead + 200
        let rooms = ClusterReplies.roomsPerRead + 20
        for index in 0..<members {
            _ = try await a.append(payload("join"), change: .join(nick: "m\(index)", node: "a"), to: "big").get()
        }
        for index in 0..<rooms {
            _ = try await a.append(payload("join"), change: .join(nick: "solo", node: "a"), to: "room\(index)").get()
        }
        let read = try await a.directory { $0.members(of: "big", completion: $1) }
        #expect(read == (0..<members).map { "m\($0)" }, "every member once, in joining order")
        let listed = try await a.directory { $0.rooms(completion: $1) }
        #expect(listed.map(\.name) == (["big"] + (0..<rooms).map { "room\($0)" }).sorted(), "every room once, by name")
        let memberships = try await a.directory { directory, done in
            directory.memberships(of: "a") { done($0.map { $0.map { "\($0.room) \($0.nick)" } }) }
        }
        #expect(memberships.count == members + rooms && Set(memberships).count == members + rooms, "every membership of the node once")
        let snapshot = try await a.directory { $0.snapshot(of: "big", newEpoch: 1, completion: $1) }
        #expect(snapshot.members.count == members)
    }

    @Test func aRepeatedOrOldPublicationIsNotDeliveredAgain() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let node = try await Node("a", port: redis.port)
        _ = try await node.follow("r")
        _ = try await node.append([payload("one"), payload("two")], to: "r")
        _ = await node.waitForEvents(2, in: "r")
        // A stale copy of seq 1 on the channel, then a real event.
        _ = await node.command([Array("PUBLISH".utf8), Array("chat:{r}:events".utf8), Array("1 1767225600000 ".utf8) + payload("one")])
        _ = try await node.append([payload("three")], to: "r")
        // The stale copy was published before "three" on the same connection, so Redis delivers it
        // first: once "three" is here, the copy has been handled.
        _ = await node.waitForEvents(3, in: "r")
        #expect(node.deliveredEvents(in: "r").map(\.seq) == [1, 2, 3])
    }

    /// A Redis that publishes or stores `seq` 0 (corrupt, or not ours) gives no event: the
    /// follower's gap arithmetic subtracts 1 from the lowest `seq` it holds.
    @Test func aSeqOfZeroIsNoEvent() {
        #expect(RoomLog.parsePublication(Array("0 1767225600000 x".utf8)) == nil)
        #expect(RoomLog.parsePublication(Array("1 1767225600000 x".utf8))?.seq == 1)
        let fields: RESPValue = .array([.bulkString(Array("t".utf8)), .integer(1), .bulkString(Array("p".utf8)), .bulkString(Array("x".utf8))])
        #expect(RoomLog.parseEntry(.array([.bulkString(Array("0-1".utf8)), fields])) == nil)
        #expect(RoomLog.parseEntry(.array([.bulkString(Array("1-1".utf8)), fields]))?.seq == 1)
    }

    @Test func historyPagesForwardAndBackBySeq() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let node = try await Node("a", port: redis.port)
        _ = try await node.append((1...20).map { payload("m\($0)") }, to: "r")
        #expect(try await node.events(of: "r", after: 15, limit: 10).map(\.seq) == [16, 17, 18, 19, 20])
        #expect(try await node.events(of: "r", after: 0, limit: 3).map(\.seq) == [1, 2, 3])
        #expect(try await node.events(of: "r", before: 0, limit: 3).map(\.seq) == [20, 19, 18])
        #expect(try await node.events(of: "r", before: 5, limit: 10).map(\.seq) == [4, 3, 2, 1])
        #expect(try await node.events(of: "r", before: 1, limit: 10).isEmpty)
        #expect(try await node.events(of: "nothing-here", after: 0, limit: 10).isEmpty)
        let first = try await node.events(of: "r", after: 0, limit: 1)
        #expect(first.first?.payload == payload("m1"))
    }

    @Test func aFollowStartsAfterTheCurrentSeq() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let writer = try await Node("w", port: redis.port)
        _ = try await writer.append((1...7).map { payload("old \($0)") }, to: "r")
        let reader = try await Node("r", port: redis.port)
        #expect(try await reader.follow("r") == 7)
        _ = try await writer.append([payload("new")], to: "r")
        let seen = await reader.waitForEvents(1, in: "r")
        #expect(seen.map(\.seq) == [8], "only what came after the follow")
    }

    @Test func membersAndTopicChangeInTheSameStepAsTheirEvent() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let a = try await Node("a", port: redis.port)
        let b = try await Node("b", port: redis.port)
        #expect(try await a.append(payload("ann joins"), change: .join(nick: "ann", node: "a"), to: "r").get().event.seq == 1)
        #expect(try await b.append(payload("bob joins"), change: .join(nick: "bob", node: "b"), to: "r").get().event.seq == 2)
        let renamed = try await a.append(payload("ann is anna"), change: .rename(old: "ann", new: "anna", node: "a"), to: "r").get()
        #expect(renamed.memberCount == 2, "the room's member count comes with the append")
        #expect(try await a.directory { $0.members(of: "r", completion: $1) } == ["anna", "bob"], "a rename keeps the joining order")

        // Node b cannot take node a's member out: nothing is logged, no seq is used.
        let refused = await b.append(payload("anna quits?"), change: .leave(nick: "anna", node: "b"), to: "r")
        guard case .failure(.refused(let text)) = refused, text.hasPrefix("NOTMEMBER") else {
            Issue.record("expected NOTMEMBER, got \(refused)")
            return
        }
        let left = try await a.append(payload("anna leaves"), change: .leave(nick: "anna", node: "a"), to: "r").get()
        #expect(left.event.seq == 4 && left.memberCount == 1, "counted after the leave")
        #expect(try await a.directory { $0.members(of: "r", completion: $1) } == ["bob"])

        let topic = try await b.append(payload("topic"), change: .topic, to: "r").get().event
        let rooms = try await a.directory { $0.rooms(completion: $1) }
        #expect(rooms.map(\.name) == ["r"] && rooms.map(\.memberCount) == [1] && rooms.map(\.topic) == [topic])
        let snapshot = try await a.directory { $0.snapshot(of: "r", newEpoch: 77, completion: $1) }
        #expect(snapshot.epoch == 77 && snapshot.firstSeq == 1 && snapshot.topic == topic && snapshot.members == ["bob"])
        let again = try await b.directory { $0.snapshot(of: "r", newEpoch: 99, completion: $1) }
        #expect(again.epoch == 77, "the epoch is set once")
        let memberships = try await a.directory { directory, done in
            directory.memberships(of: "b") { done($0.map { $0.map { "\($0.room) \($0.nick)" } }) }
        }
        #expect(memberships == ["r bob"])

        _ = try await b.append(payload("bob leaves"), change: .leave(nick: "bob", node: "b"), to: "r").get()
        #expect(try await a.directory { $0.rooms(completion: $1) }.isEmpty, "a room without members is not listed")
    }
    @Test func aNodesRoomListHoldsOnlyTheRoomsWhereItServesAMember() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let a = try await Node("a", port: redis.port)
        /// The rooms `node`'s list names, sorted.
        func listed(_ node: String) async throws -> [String] {
            let reply = await a.command([Array("SMEMBERS".utf8), Array("chat:node:\(node):rooms".utf8)])
            guard case .success(.array(let items?)) = reply else { throw ClusterError.malformedReply("\(reply)") }
            return items.compactMap(\.text).sorted()
        }
        _ = try await a.append(payload("ann joins"), change: .join(nick: "ann", node: "a"), to: "r").get()
        _ = try await a.append(payload("amy joins"), change: .join(nick: "amy", node: "a"), to: "r").get()
        _ = try await a.append(payload("bob joins"), change: .join(nick: "bob", node: "b"), to: "r").get()
        _ = try await a.append(payload("ann joins s"), change: .join(nick: "ann", node: "a"), to: "s").get()
        #expect(try await listed("a") == ["r", "s"])
        #expect(try await listed("b") == ["r"])

        _ = try await a.append(payload("ann leaves"), change: .leave(nick: "ann", node: "a"), to: "r").get()
        #expect(try await listed("a") == ["r", "s"], "amy is still node a's member of r")
        _ = try await a.append(payload("amy is may"), change: .rename(old: "amy", new: "may", node: "a"), to: "r").get()
        #expect(try await listed("a") == ["r", "s"], "a rename keeps the member on its node")
        _ = try await a.append(payload("may leaves"), change: .leave(nick: "may", node: "a"), to: "r").get()
        #expect(try await listed("a") == ["s"], "the last member of node a left r")
        _ = try await a.append(payload("ann leaves s"), change: .leave(nick: "ann", node: "a"), to: "s").get()
        #expect(try await listed("a").isEmpty)

        // A nick of node b's joins again through node a (b died and a's client took the nick
        // before b was reaped): it is node a's member now, and b serves no one in r.
        _ = try await a.append(payload("bob joins via a"), change: .join(nick: "bob", node: "a"), to: "r").get()
        #expect(try await listed("a") == ["r"])
        #expect(try await listed("b").isEmpty)
        let refused = await a.append(payload("bob quits?"), change: .leave(nick: "bob", node: "b"), to: "r")
        #expect((try? refused.get()) == nil, "node b's reaper finds bob no member of its own")
        #expect(try await listed("a") == ["r"])
    }
}
