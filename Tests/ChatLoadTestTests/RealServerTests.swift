import ChatLoadTest
import Foundation
import Testing
import TestSupport

/// Runs against the real `chat-server` and through the real `chat-loadtest`, both built next to
/// the test bundle.
@Suite(.serialized) struct RealServerTests {
    @Test func countsAreExactAgainstTheRealServer() async throws {
        let server = try await Self.startServer()
        defer { server.stop() }
        var configuration = LoadTestConfiguration()
        configuration.port = server.port
        configuration.clients = 20
        configuration.rooms = 2
        configuration.senders = 4
        configuration.messages = 4_000
        configuration.duration = 60
        configuration.serverPID = server.pid
        let result = await (try LoadTest(configuration: configuration)).run()

        #expect(result.joined == 20 && result.failedClients == 0 && result.disconnectedClients == 0, "\(result.textReport())")
        #expect(result.sent == 4_000 && result.refused == 0)
        // Each room has 10 members and gets half of the messages (2 of the 4 senders).
        #expect(result.deliveries == DeliveryTally(expected: 40_000, delivered: 40_000), "got \(result.deliveries)")
        #expect(result.passed, "expected a clean run: \(result.textReport())")
        #expect(result.server != nil, "expected the server's CPU and memory read from /proc")
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

    @Test func commandLineRefusesRemoteHostsWithUsageStatus() async throws {
        let run = try ChildProcess(try ChildProcess.builtExecutable(named: "chat-loadtest"), ["--host", "192.0.2.1"])
        let status = await run.waitForExit(timeout: .seconds(60))
        #expect(status == 64, "expected EX_USAGE")
        #expect(run.output.contains("only targets this machine"), "output:\n\(run.output)")
    }

    /// Starts `chat-server` on a free loopback port with the rate limit off, as load tests need.
    static func startServer() async throws -> ChatServerProcess {
        try await ChatServerProcess(arguments: ["--rate-limit", "0", "--log-level", "warning", "--drain-timeout", "1"])
    }
}
