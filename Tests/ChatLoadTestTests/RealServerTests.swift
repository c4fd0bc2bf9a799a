import ChatLoadTest
import Foundation
import SocketCore
import Testing
import TestSupport

/// Runs against the real `chat-server` and through the real `chat-loadtest`, both built next to
/// the test bundle.
@Suite(.serialized) struct RealServerTests {
    @Test func countsAreExactAgainstTheRealServer() async throws {
        let server = try await Self.startServer()
        defer { server.stop() }
        var configuration = LoadTestConfiguration()
        configuration.servers = [ServerAddress(host: "127.0.0.1", port: server.port)]
        configuration.clients = 20
        configuration.rooms = 2
        configuration.senders = 4
        configuration.messages = 4_000
        configuration.duration = 60
        configuration.serverPIDs = [server.pid]
        let result = await (try LoadTest(configuration: configuration)).run()

        #expect(result.joined == 20 && result.failedClients == 0 && result.disconnectedClients == 0, "\(result.textReport())")
        #expect(result.sent == 4_000 && result.refused == 0)
        // Each room has 10 members and gets half of the messages (2 of the 4 senders).
        #expect(result.deliveries == DeliveryTally(expected: 40_000, delivered: 40_000), "got \(result.deliveries)")
        #expect(result.passed, "expected a clean run: \(result.textReport())")
        #expect(result.server != nil, "expected the server's CPU and memory read from /proc")
        #expect(result.latencyByServer == nil, "one server: no split")
    }

    @Test func commandLineWritesJSONAndHgrmAndExitsZeroOnACleanRun() async throws {
        let server = try await Self.startServer()
        defer { server.stop() }
        let hgrm = FileManager.default.temporaryDirectory.appendingPathComponent("chat-loadtest-\(getpid()).hgrm")
        defer { try? FileManager.default.removeItem(at: hgrm) }
        let run = try ChildProcess(try ChildProcess.builtExecutable(named: "chat-loadtest"), [
            "--port", "\(server.port)", "--clients", "10", "--senders", "2", "--messages", "1000",
            "--rate", "2000", "--json", "--hgrm", hgrm.path, "--server-pid", "\(server.pid)",
        ])
        let status = await run.waitForExit(timeout: .seconds(120))
        let output = run.output
        #expect(status == 0, "expected exit 0; output:\n\(output)")
        let line = try #require(output.split(separator: "\n").first { $0.hasPrefix("{") }, "expected a JSON line:\n\(output)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(json["passed"] as? Bool == true)
        #expect(json["sent"] as? Int == 1_000)
        let deliveries = try #require(json["deliveries"] as? [String: Any])
        #expect(deliveries["expected"] as? Int == 10_000 && deliveries["lost"] as? Int == 0, "got \(deliveries)")
        let distribution = try String(contentsOf: hgrm, encoding: .utf8)
        #expect(distribution.contains("Percentile") && distribution.contains("#[Max"), "expected an .hgrm file:\n\(distribution)")
    }

    @Test func spreadsClientsOverSeveralServers() async throws {
        // Two independent servers and two rooms: client i goes to server i mod 2 and room i mod 2,
        // so each room lives on one server and the run passes without a cluster.
        let first = try await ChatServerProcess(arguments: ["--no-rate-limits", "--log-level", "info"])
        let second = try await ChatServerProcess(arguments: ["--no-rate-limits", "--log-level", "info"])
        defer {
            first.stop()
            second.stop()
        }
        let run = try ChildProcess(try ChildProcess.builtExecutable(named: "chat-loadtest"), [
            "--server", "127.0.0.1:\(first.port)", "--server", "127.0.0.1:\(second.port)", "--clients", "10", "--rooms", "2",
            "--senders", "2", "--messages", "200", "--server-pid", "\(first.pid)", "--server-pid", "\(second.pid)", "--json",
        ])
        let status = await run.waitForExit(timeout: .seconds(120))
        #expect(status == 0, "expected a clean run; output:\n\(run.output)")
        for server in [first, second] {
            let connects = server.child.lines.count { $0.contains("client connected") }
            #expect(connects == 5, "each server gets half of the clients; \(server.port) logged \(connects)")
        }
    }

    @Test func splitsLatencyByWhetherTheSenderUsedTheReceiversServer() async throws {
        // A real two-node cluster, one room: client i on node i mod 2, so of the 2 senders'
        // messages, each reaches 5 receivers on its own node and 5 on the other.
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let nodes = [
            try await ChatServerProcess(arguments: ["--cluster", "redis://127.0.0.1:\(redis.port)", "--no-rate-limits"]),
            try await ChatServerProcess(arguments: ["--cluster", "redis://127.0.0.1:\(redis.port)", "--no-rate-limits"]),
        ]
        defer { for node in nodes { node.stop() } }
        for node in nodes {
            let up = await node.child.waitFor(timeout: .seconds(60)) { output, _ in output.contains("cluster link up") }
            try #require(up, "node on port \(node.port) did not connect to Redis:\n\(node.child.output)")
        }
        var configuration = LoadTestConfiguration()
        configuration.servers = nodes.map { ServerAddress(host: "127.0.0.1", port: $0.port) }
        configuration.clients = 10
        configuration.rooms = 1
        configuration.senders = 2
        configuration.messages = 400
        configuration.duration = 60
        let result = await (try LoadTest(configuration: configuration)).run()

        #expect(result.passed, "expected a clean run: \(result.textReport())")
        let split = try #require(result.latencyByServer, "expected the split with two servers")
        #expect(split.sameServer.count == 2_000 && split.otherServer.count == 2_000, "got \(split)")
        #expect(result.latency.count == 4_000)
        #expect(result.textReport().contains("sender on another server"))
    }

    @Test func commandLineRefusesAMalformedServerAddress() async throws {
        let run = try ChildProcess(try ChildProcess.builtExecutable(named: "chat-loadtest"), ["--server", "127.0.0.1"])
        #expect(await run.waitForExit(timeout: .seconds(60)) == 64, "expected EX_USAGE")
        #expect(run.output.contains("expected HOST:PORT"), "output:\n\(run.output)")
    }

    @Test func commandLineRefusesRemoteHostsWithUsageStatus() async throws {
        let run = try ChildProcess(try ChildProcess.builtExecutable(named: "chat-loadtest"), ["--host", "192.0.2.1"])
        let status = await run.waitForExit(timeout: .seconds(60))
        #expect(status == 64, "expected EX_USAGE")
        #expect(run.output.contains("only targets this machine"), "output:\n\(run.output)")
    }

    /// Starts `chat-server` on a free loopback port with the rate limit off, as load tests need.
    static func startServer() async throws -> ChatServerProcess {
        try await ChatServerProcess(arguments: ["--no-rate-limits", "--log-level", "warning", "--drain-timeout", "1"])
    }
}
