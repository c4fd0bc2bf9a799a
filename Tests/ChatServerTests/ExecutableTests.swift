import ChatClient
import ChatProtocol
import ChatServer
import Glibc
import Testing
import TestSupport

/// Runs the built `chat-server` binary as a child process, as a user would.
@Suite("chat-server executable", .serialized)
struct ExecutableTests {
    @Test(arguments: ServerMode.allCases)
    func sigtermDeliversQueuedMessagesAndGoodbyesThenExitsZeroWithNoSocketLeftOpen(mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode, arguments: ["--no-rate-limits", "--drain-timeout", "10"])
        defer { server.stop() }

        let alice = try await TestClient.connect(to: server, nick: "alice")
        let bob = try await TestClient.connect(to: server, nick: "bob")
        try await alice.join("r")
        try await bob.join("r")
        _ = try await alice.waitFor("bob to join") { if case .joined("r", _, _, "bob") = $0 { true } else { nil } }

        // Bob does not read while alice speaks, so these are queued when the signal arrives.
        let count = 500
        try await alice.send((1...count).map { Frame.say(room: "r", text: "message \($0)") })
        _ = try await alice.collect(count, "echoes") { if case .message = $0 { true } else { nil } }
        server.child.signal(SIGTERM)

        for client in [alice, bob] {
            let frames = try await client.readUntilClosed()
            let texts = frames.compactMap { frame -> String? in
                if case .message(_, _, _, _, let text) = frame { return text }
                return nil
            }
            if client === bob {
                #expect(texts == (1...count).map { "message \($0)" }, "bob receives every queued message, in order")
            }
            guard case .goodbye(let reason)? = frames.last, reason.contains("shutting down") else {
                Issue.record("\(client.nick) expected a goodbye saying the server is shutting down last, got \(String(describing: frames.last))")
                continue
            }
            client.close()
        }

        let status = await server.child.waitForExit()
        #expect(status == 0, "chat-server exits 0 after a graceful shutdown")
        let log = server.child.output
        #expect(log.components(separatedBy: "client connected").count - 1 == 2, "one log line per connect:\n\(log)")
        #expect(log.components(separatedBy: "client disconnected").count - 1 == 2, "one log line per disconnect:\n\(log)")
        // Counted by the server after binding (before any client) and when exiting; sockets the
        // process inherited would show in both. A cluster node's link to Redis is made after the
        // first count, and closed before the second: the node waits for its sockets to close.
        let sockets = log.split(separator: "\n").compactMap { line -> Int? in
            guard let range = line.range(of: "sockets.open=") else { return nil }
            return Int(line[range.upperBound...].prefix { $0.isNumber })
        }
        #expect(
            sockets.count == 2 && sockets[1] == sockets[0] - 1,
            "at exit the listener, every client socket and any link to Redis are closed: \(sockets)\n\(log)")
    }

    @Test func helpDocumentsEveryLimitWithItsDefault() async throws {
        let server = try ChildProcess(try ChildProcess.builtExecutable(named: "chat-server"), ["--help"])
        #expect(await server.waitForExit() == 0)
        let help = server.output
        for flag in [
            "--host", "--port", "--max-clients", "--max-clients-per-address", "--max-frame-size", "--max-rooms-per-client",
            "--rate-limit", "--rate-burst", "--byte-rate", "--byte-burst", "--address-rate-limit", "--address-rate-burst",
            "--address-byte-rate", "--address-byte-burst", "--address-fanout-rate", "--address-fanout-burst",
            "--address-connection-rate", "--address-connection-burst", "--no-rate-limits", "--rate-abuse-limit", "--history-size",
            "--handshake-timeout", "--idle-ping-interval", "--idle-timeout", "--max-memory", "--slow-consumer-timeout",
            "--drain-timeout", "--password-file", "--password-attempts", "--password-lockout", "--log-level",
        ] {
            #expect(help.contains(flag), "--help mentions \(flag)")
        }
        #expect(help.contains("(default: 7000)"))
    }
}
