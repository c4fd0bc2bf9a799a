import ChatClient
import ChatProtocol
import ChatServer
import Glibc
import TestSupport
import Testing

/// A real `redis-server` and real `chat-server` nodes joined to it through `--cluster`.
private final class Cluster: Sendable {
    let redis: RedisServerProcess
    let nodes: [ChatServerProcess]

    /// Starts Redis (with `redisArguments`) and `count` nodes; `nodeArguments` go to every node.
    init(nodes count: Int, nodeArguments: [String] = [], redisArguments: [String] = []) async throws {
        redis = try await RedisServerProcess(extraArguments: redisArguments)
        var nodes: [ChatServerProcess] = []
        for _ in 0..<count {
            nodes.append(
                try await ChatServerProcess(arguments: ["--cluster", "redis://127.0.0.1:\(redis.port)", "--no-rate-limits"] + nodeArguments))
        }
        self.nodes = nodes
        for node in nodes {
            let up = await node.child.waitFor(timeout: .seconds(60)) { output, _ in output.contains("cluster link up") }
            #expect(up, "node on port \(node.port) did not connect to Redis:\n\(node.child.output)")
        }
    }

    func stop() {
        for node in nodes { node.stop() }
        redis.stop()
    }

    /// The logs of every node, for failure messages.
    var logs: String { nodes.map { "--- node on port \($0.port):\n\($0.child.output)" }.joined(separator: "\n") }
}

extension TestClient {
    /// Joins `room` (protocol 2) and reads the join sequence through the history page; returns the
    /// `seq` of its own `joined`.
    @discardableResult
    func clusterJoin(_ room: String) async throws -> UInt64 {
        try await send(.join(room: room))
        let seq = try await waitFor("joined #\(room)") { frame -> UInt64? in
            if case .joined(room, let seq, _, nick) = frame { return seq }
            if case .error(let code, _, _, let reason) = frame { Issue.record("join refused: \(code) \(reason)") }
            return nil
        }
        let state = try await waitFor("roomState of #\(room)") { frame -> UInt64? in
            if case .roomState(room, _, _, let lastSeq) = frame { return lastSeq }
            return nil
        }
        #expect(state == seq, "roomState's lastSeq is the joiner's own joined")
        _ = try await waitFor("the history page of #\(room)") { frame -> Bool? in
            if case .historyPage(room, _, _, _) = frame { return true }
            return nil
        }
        return seq
    }
}

/// One line said in a room, as a member received it.
private struct Heard: Hashable, Sendable {
    var seq: UInt64
    var sender: String
    var text: String
}

/// One test at a time: each starts its own Redis and nodes.
@Suite("Cluster mode: real nodes on a real Redis", .serialized)
struct ClusterTests {
    @Test func everyMemberOnEveryNodeHearsEveryMessageOnceInOneOrder() async throws {
        let cluster = try await Cluster(nodes: 3)
        defer { cluster.stop() }
        let perNode = 2
        let messagesEach = 40
        var clients: [TestClient] = []
        for (index, node) in cluster.nodes.enumerated() {
            for member in 0..<perNode {
                let client = try await TestClient.connect(port: node.port, nick: "n\(index)m\(member)", version: 2)
                try await client.clusterJoin("lobby")
                clients.append(client)
            }
        }
        defer { for client in clients { client.close() } }
        let total = clients.count * messagesEach
        // Everyone speaks at once, pipelined.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for client in clients {
                group.addTask {
                    try await client.send((1...messagesEach).map { Frame.say(room: "lobby", text: "\(client.nick) \($0)") })
                }
            }
            try await group.waitForAll()
        }
        let heard = try await withThrowingTaskGroup(of: (String, [Heard]).self) { group in
            for client in clients {
                group.addTask {
                    let lines = try await client.collect(total, "messages") { frame -> Heard? in
                        if case .message("lobby", let seq, _, let sender, let text) = frame { return Heard(seq: seq, sender: sender, text: text) }
                        return nil
                    }
                    return (client.nick, lines)
                }
            }
            var all: [String: [Heard]] = [:]
            for try await (nick, lines) in group { all[nick] = lines }
            return all
        }
        let reference = heard[clients[0].nick]!
        #expect(Set(reference).count == total, "every message once")
        #expect(zip(reference, reference.dropFirst()).allSatisfy { $0.seq < $1.seq }, "in seq order")
        for client in clients {
            #expect(heard[client.nick] == reference, "\(client.nick) heard the same lines in the same order as \(clients[0].nick)")
            // Each sender's lines in the order it sent them.
            let own = reference.filter { $0.sender == client.nick }.map(\.text)
            #expect(own == (1...messagesEach).map { "\(client.nick) \($0)" })
        }
    }
}
