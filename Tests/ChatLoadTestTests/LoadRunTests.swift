import ChatLoadTest
import SocketCore
import Testing

/// Whole runs against the scripted in-test server: correct, and deliberately faulty.
@Suite(.serialized) struct ScriptedServerRunTests {
    /// A small run: 6 clients in 2 rooms, 2 senders (client 0 in room 0, client 1 in room 1).
    static func configuration(port: Int, messages: Int = 400) -> LoadTestConfiguration {
        var configuration = LoadTestConfiguration()
        configuration.servers = [ServerAddress(host: "127.0.0.1", port: port)]
        configuration.clients = 6
        configuration.rooms = 2
        configuration.senders = 2
        configuration.messages = messages
        configuration.duration = 60
        configuration.drainTimeout = 2
        configuration.connectTimeout = 30
        return configuration
    }

    @Test func countsAreExactAtMaximumRate() async throws {
        let server = try ScriptedChatServer()
        server.start()
        defer { server.stop() }
        var configuration = Self.configuration(port: server.port)
        configuration.pacing = .maximum(window: 16)
        let result = try await LoadTest(configuration: configuration).run()

        #expect(result.joined == 6 && result.failedClients == 0, "expected all 6 clients joined: \(result.textReport())")
        #expect(result.sent == 400)
        // Each message reaches the 3 members of its room, the sender's own echo included.
        #expect(result.deliveries == DeliveryTally(expected: 1_200, delivered: 1_200), "got \(result.deliveries)")
        #expect(result.latency.count == 1_200)
        #expect(result.passed, "expected a clean run: \(result.textReport())")
        #expect(result.allClosed)
    }

    @Test func countsAreExactAtAFixedRate() async throws {
        let server = try ScriptedChatServer()
        server.start()
        defer { server.stop() }
        var configuration = Self.configuration(port: server.port, messages: 100)
        configuration.pacing = .fixedRate(messagesPerSecond: 500)
        let result = try await LoadTest(configuration: configuration).run()

        #expect(result.sent == 100)
        #expect(result.deliveries == DeliveryTally(expected: 300, delivered: 300), "got \(result.deliveries)")
        #expect(result.passed, "expected a clean run: \(result.textReport())")
    }

    @Test func reportsExactlyTheFaultsAServerInjects() async throws {
        // Client 2 is in room 0 and hears only sender 0, so its message ordinals are sender 0's seqs.
        let faults = DeliveryFaults(victim: 2, drop: [10], duplicate: [20], swapWithNext: [30])
        let server = try ScriptedChatServer(faults: faults)
        server.start()
        defer { server.stop() }
        var configuration = Self.configuration(port: server.port)
        configuration.pacing = .maximum(window: 8)
        let result = try await LoadTest(configuration: configuration).run()

        #expect(result.sent == 400)
        #expect(result.deliveries.expected == 1_200)
        #expect(result.deliveries.lost == 1, "expected the dropped frame reported lost: \(result.deliveries)")
        #expect(result.deliveries.duplicated == 1, "expected the doubled frame reported duplicated: \(result.deliveries)")
        #expect(result.deliveries.reordered == 1, "expected the swapped pair reported as one reordered: \(result.deliveries)")
        #expect(result.deliveries.unexpected == 0)
        #expect(result.deliveries.delivered == 1_199)
        #expect(!result.passed, "a run with faults must fail")
        #expect(result.textReport().contains("FAIL"))
        #expect(result.jsonLine().contains("\"passed\":false"))
    }

    @Test func clientsThatCannotConnectFailTheRun() async throws {
        // Bind a port, then close it, so nothing listens there.
        let port = try {
            let server = try ScriptedChatServer()
            defer { server.stop() }
            return server.port
        }()
        var configuration = Self.configuration(port: port)
        configuration.connectTimeout = 10
        let result = try await LoadTest(configuration: configuration).run()
        #expect(result.failedClients == 6 && result.joined == 0, "got \(result.textReport())")
        #expect(result.sent == 0)
        #expect(!result.passed)
        #expect(result.firstProblem?.contains("connect failed") == true, "got \(String(describing: result.firstProblem))")
    }
}
