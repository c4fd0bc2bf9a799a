import ChatCluster
import Dispatch
import Glibc
import RedisClient
import RedisProtocol
import TestSupport
import Testing

/// A node's `ClusterLink` for a test, with what it delivered and the states it went through.
private final class LinkedNode: @unchecked Sendable {
    let queue: DispatchQueue
    let link: ClusterLink
    /// Touched only on `queue`.
    private var events: [LoggedEvent] = []
    private var states: [ClusterLink.State] = []

    init(_ id: String, port: Int, following room: String, ttlMilliseconds: Int = 5_000) {
        queue = DispatchQueue(label: "link-\(id)")
        link = ClusterLink(host: "127.0.0.1", port: port, nodeID: id, ttlMilliseconds: ttlMilliseconds, queue: queue)
        queue.sync {
            link.onEvent = { [self] _, event in events.append(event) }
            link.onStateChange = { [self] state in states.append(state) }
            link.follow(room)
            link.start()
        }
    }

    var delivered: [LoggedEvent] { queue.sync { events } }
    var history: [ClusterLink.State] { queue.sync { states } }
    var state: ClusterLink.State { queue.sync { link.state } }
    /// Whether the link is up and following `room` is in effect: every later event reaches it.
    func isFollowing(_ room: String) -> Bool { queue.sync { link.state == .up && link.isReady(room) } }

    /// Waits (bounded) until `condition` holds.
    func wait(for what: String, _ condition: @escaping (LinkedNode) -> Bool) async -> Bool {
        let held = await eventually(every: .milliseconds(20)) { condition(self) }
        if !held { Issue.record("timed out waiting for \(what); states \(history)") }
        return held
    }

    /// Appends `payloads` to `room` through the link's log, in one turn; fails if the link is down.
    func append(_ payloads: [[UInt8]], to room: String) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
            queue.async { [link] in
                guard let log = link.roomLog else {
                    continuation.resume(throwing: ClusterError.redis(.closed))
                    return
                }
                var remaining = payloads.count
                var failed = false
                for payload in payloads {
                    log.append(to: room, payload: payload) { result in
                        guard !failed else { return }
                        if case .failure(let error) = result {
                            failed = true
                            continuation.resume(throwing: error)
                            return
                        }
                        remaining -= 1
                        if remaining == 0 { continuation.resume() }
                    }
                }
            }
        }
    }

    func stop() { queue.sync { link.stop() } }
}

/// Runs `arguments` on a fresh connection to the Redis at `port`.
private func redisCommand(port: Int, _ arguments: String...) async throws -> RESPValue {
    let queue = DispatchQueue(label: "redis-command")
    let connection: RedisConnection = try await withCheckedThrowingContinuation { continuation in
        RedisConnection.connect(host: "127.0.0.1", port: port, queue: queue) { continuation.resume(with: $0) }
    }
    defer { queue.async { connection.close() } }
    return try await withCheckedThrowingContinuation { continuation in
        queue.async { connection.send(arguments.map { Array($0.utf8) }) { continuation.resume(with: $0) } }
    }
}

private func payloads(_ prefix: String, _ range: ClosedRange<Int>) -> [[UInt8]] {
    range.map { Array("\(prefix)\($0)".utf8) }
}

/// One test at a time: each starts its own redis-server (see RedisConnectionTests).
@Suite("A node's link to the cluster's Redis", .serialized)
struct ClusterLinkTests {
    @Test func aCutLinkReconnectsAndResumesWithoutLosingAnEvent() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let reader = LinkedNode("reader", port: redis.port, following: "r")
        let writer = LinkedNode("writer", port: redis.port, following: "r")
        defer {
            reader.stop()
            writer.stop()
        }
        // Following takes effect once subscribed and the room's seq read: events appended before
        // that are not the follower's.
        guard await reader.wait(for: "the reader to follow", { $0.isFollowing("r") }),
            await writer.wait(for: "the writer's link", { $0.state == .up })
        else { return }
        try await writer.append(payloads("before ", 1...50), to: "r")
        guard await reader.wait(for: "the first 50", { $0.delivered.count == 50 }) else { return }

        // Cut the reader's subscription connection, as a network fault would (publications sent
        // while it is away are lost to it), and go on writing.
        let subscription = try await clientID(port: redis.port, name: "chat-reader-events")
        #expect(try await redisCommand(port: redis.port, "CLIENT", "KILL", "ID", subscription) == .integer(1))
        try await writer.append(payloads("during ", 51...100), to: "r")
        guard await reader.wait(for: "all 100 events", { $0.delivered.count >= 100 }) else { return }
        #expect(reader.delivered.map(\.seq) == Array(1...100), "once each, in order, across the cut")
        #expect(reader.delivered.map(\.payload) == payloads("before ", 1...50) + payloads("during ", 51...100))
        #expect(reader.history.contains { if case .down = $0 { true } else { false } }, "the link said it was down")
        #expect(reader.state == .up)
    }

    /// A node whose own queue stalls (a flood keeps the chat's loop busy) while Redis answers its
    /// heartbeat in time: the answer waits in the socket, and the link must count it rather than
    /// take Redis for gone and refuse every room event.
    @Test func aHeartbeatAnsweredWhileTheNodesQueueWasStalledKeepsTheLinkUp() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        // A heartbeat every 600 ms, unanswered after 1.5 s, a lapse after 3 s without one.
        let node = LinkedNode("stalled", port: redis.port, following: "r", ttlMilliseconds: 3_000)
        defer { node.stop() }
        guard await node.wait(for: "the link", { $0.state == .up }) else { return }
        for _ in 0..<5 {
            // Redis holds every command for 900 ms, so a heartbeat the node sends meanwhile is
            // still unanswered when the node's queue stalls 700 ms in; Redis answers it within
            // 1.5 s of its sending, while the queue is still stalled.
            #expect(try await redisCommand(port: redis.port, "CLIENT", "PAUSE", "900", "ALL") == .simpleString("OK"))
            try await Task.sleep(for: .milliseconds(700))
            node.queue.sync { _ = usleep(2_000_000) }
            try await Task.sleep(for: .milliseconds(500))
        }
        #expect(node.state == .up)
        #expect(!node.history.contains { if case .down = $0 { true } else { false } }, "the link went down: \(node.history)")
    }

    @Test func redisGoneThenBackOnItsPortTheLinkSaysSoAndRecovers() async throws {
        let redis = try await RedisServerProcess()
        let port = redis.port
        let node = LinkedNode("n", port: port, following: "r")
        defer { node.stop() }
        guard await node.wait(for: "the link", { $0.state == .up }) else { return }
        redis.kill()
        guard await node.wait(for: "the link to go down", { if case .down = $0.state { true } else { false } }) else { return }
        await #expect(throws: ClusterError.self) { try await node.append(payloads("x", 1...1), to: "r") }
        let restarted = try await RedisServerProcess(port: port)
        defer {
            restarted.stop()
            redis.stop()
        }
        guard await node.wait(for: "the link to come back and follow again", { $0.isFollowing("r") }) else { return }
        try await node.append(payloads("after ", 1...3), to: "r")
        guard await node.wait(for: "the new events", { $0.delivered.count == 3 }) else { return }
        // This Redis kept nothing: the room's log starts again at seq 1 (the epoch of issue 11's
        // rooms is what tells clients so).
        #expect(node.delivered.map(\.seq) == [1, 2, 3])
    }
}

/// The id Redis gives the client connection named `name` (CLIENT LIST).
private func clientID(port: Int, name: String) async throws -> String {
    let list = try await redisCommand(port: port, "CLIENT", "LIST").text ?? ""
    for line in list.split(separator: "\n") where line.contains(" name=\(name) ") {
        if let id = line.split(separator: " ").first(where: { $0.hasPrefix("id=") }) { return String(id.dropFirst(3)) }
    }
    Issue.record("no client named \(name) in\n\(list)")
    return "0"
}
