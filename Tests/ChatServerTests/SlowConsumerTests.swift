import ChatProtocol
import Glibc
import Testing
import TestSupport

/// A member that stops reading, in every mode, against the real `chat-server`: it is cut off as a
/// slow consumer, the members who read get every line, and what it left unread never grows the
/// server by more than a bounded queue — whatever the log behind the room.
@Suite("A member that stops reading, in every mode")
struct SlowConsumerTests {
    @Test(arguments: ServerMode.allCases)
    func aMemberThatStopsReadingIsCutOffWhileTheOthersGetEverything(_ mode: ServerMode) async throws {
        // Without rate limits: a sender fast enough to leave a stalled member behind is the point.
        let server = try await ChatServerProcess(
            mode, arguments: ["--slow-consumer-timeout", "2", "--max-frame-size", "16384", "--no-rate-limits", "--handshake-timeout", "60"])
        defer { server.stop() }
        let alice = try await TestClient.connect(to: server, nick: "alice")
        let bob = try await TestClient.connect(to: server, nick: "bob")
        defer {
            alice.close()
            bob.close()
        }
        try await alice.send(.join(room: "r"))
        try await bob.send(.join(room: "r"))
        for client in [alice, bob] {
            _ = try await client.waitFor("bob in #r") { if case .joined("r", _, _, "bob") = $0 { true } else { nil } }
        }
        // A real stall: a 4 KiB receive buffer that nobody reads, so the kernel pushes back.
        let stalled = try BlockingSocket(port: server.port, receiveBuffer: 4096, tls: server.clientTLS)
        defer { stalled.close() }
        _ = await stalled.send([.hello(version: 1, nick: "stalled", password: nil), .join(room: "r")])
        for client in [alice, bob] {
            _ = try await client.waitFor("stalled in #r") { if case .joined("r", _, _, "stalled") = $0 { true } else { nil } }
        }
        let baseline = try #require(residentBytes(of: server.pid))

        var peak = baseline
        var quits: [String] = []
        let text = String(repeating: "x", count: 15_000)
        let perBatch = 8
        var lines = [0, 0]
        var sent = 0
        // Until both readers saw the stalled member go, and at most 512 × 8 × 15 kB ≈ 61 MB.
        for batch in 1...512 where quits.count < 2 {
            try await alice.send(Array(repeating: Frame.say(room: "r", text: text), count: perBatch))
            sent += perBatch
            // The readers keep in step with the sender, so only the stalled member falls behind.
            for (index, client) in [alice, bob].enumerated() {
                while lines[index] < batch * perBatch {
                    switch try await client.expectFrame("alice's lines") {
                    case .message("r", _, _, "alice", _): lines[index] += 1
                    case .quit("r", _, _, "stalled", let reason): quits.append(reason)
                    case .error(let code, _, let type, let reason): Issue.record("refused: \(code) \(type) \(reason)")
                    default: break
                    }
                }
            }
            peak = max(peak, residentBytes(of: server.pid) ?? 0)
        }
        #expect(lines == [sent, sent], "the readers got every line")
        #expect(quits.count == 2, "alice and bob each saw the stalled member go: \(quits)")
        #expect(quits.allSatisfy { $0.contains("slow consumer") }, "\(quits)")
        // Unbounded, the stalled member's queue would have held what passed until it was cut off,
        // and the quits would not have come.
        #expect(peak - baseline < 40 << 20, "the server grew by \((peak - baseline) >> 20) MiB")
    }

    /// The resident memory of process `pid`, in bytes, from /proc.
    private func residentBytes(of pid: pid_t) -> Int? {
        guard let field = processStatusField("VmRSS", process: "\(pid)"), let kilobytes = Int(field.split(separator: " ")[0])
        else { return nil }
        return kilobytes << 10
    }
}
