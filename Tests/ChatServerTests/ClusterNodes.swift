import Foundation
import Testing
import TestSupport

/// A real `redis-server` and real `chat-server` nodes on it, started with `arguments`; each test
/// stops them (ClusterAccountTests, ClusterModerationTests).
final class ClusterNodes: Sendable {
    let redis: RedisServerProcess
    let nodes: [ChatServerProcess]

    init(_ count: Int = 2, arguments: [String] = []) async throws {
        redis = try await RedisServerProcess()
        var nodes: [ChatServerProcess] = []
        for _ in 0..<count { nodes.append(try await Self.node(on: redis, arguments: arguments)) }
        self.nodes = nodes
    }

    /// A node on `redis`, once its link is up.
    static func node(on redis: RedisServerProcess, arguments: [String]) async throws -> ChatServerProcess {
        let node = try await ChatServerProcess(
            arguments: ["--cluster", "redis://127.0.0.1:\(redis.port)", "--handshake-timeout", "60"] + arguments)
        let up = await node.child.waitFor(timeout: .seconds(60)) { output, _ in output.contains("cluster link up") }
        #expect(up, "node on port \(node.port) did not connect to Redis:\n\(node.child.output)")
        return node
    }

    func stop() {
        for node in nodes { node.stop() }
        redis.stop()
    }

    /// What `redis-cli` prints for one command, one line per item.
    func redisCLI(_ arguments: String...) async throws -> [String] {
        let child = try ChildProcess(URL(fileURLWithPath: "/usr/bin/redis-cli"), ["-p", "\(redis.port)"] + arguments)
        _ = await child.waitForExit()
        return child.lines.map(String.init)
    }
}
