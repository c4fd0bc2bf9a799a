import ChatProtocol
import ChatStorage
import Glibc
import TestSupport
import Testing

/// An attacker who opens idle connections until the server has no descriptor left (issue 40): the
/// server keeps a reserve for itself (`ChatServer.descriptorReserve`), refuses connections
/// `serverFull` before touching it, and its members go on chatting — in durable mode too, where
/// every commit opens the journal's next file — with no `seq` gap.
@Suite("Descriptor exhaustion against the real server", .serialized)
struct DescriptorExhaustionTests {
    /// The open-file limit the server runs under: a few dozen descriptors of its own, the reserve,
    /// and room for a dozen clients.
    static let limit = 80

    @Test(arguments: [ServerMode.durable, .memory])
    func membersKeepChattingWithNoSeqGapWhileAnAttackerHoldsEveryDescriptorItCan(_ mode: ServerMode) async throws {
        let server = try await ChatServerProcess(
            mode, arguments: ["--handshake-timeout", "60", "--no-rate-limits"], descriptorLimit: Self.limit)
        defer { server.stop() }
        #expect(
            await server.child.waitForOutput("the descriptor limit holds fewer clients than --max-clients"),
            "the start warns that the limit cannot hold --max-clients and the reserve")
        let alice = try await TestClient.connect(port: server.port, nick: "alice", version: 2)
        let bob = try await TestClient.connect(port: server.port, nick: "bob", version: 2)
        defer {
            alice.close()
            bob.close()
        }
        _ = try await alice.joinRoom("r")
        _ = try await bob.joinRoom("r")

        // Idle connections until the server refuses one serverFull: its descriptors for clients
        // are spent. Bounded: the limit is far below 200.
        var attacker: [BlockingSocket] = []
        defer { for socket in attacker { socket.close() } }
        var refusal: ErrorCode?
        for _ in 0..<200 {
            let socket = try BlockingSocket(port: server.port)
            attacker.append(socket)
            if attacker.count % 8 == 0, let code = await errorCode(from: socket, within: .milliseconds(500)) {
                refusal = code
                break
            }
        }
        #expect(refusal == .serverFull, "a connection past the clients' share is refused serverFull")

        // One line at a time, each after the journal handed the last one to SQLite and started its
        // next file, which needs a descriptor.
        var seqs: [UInt64] = []
        for index in 0..<10 {
            let journal = server.dataDirectory.map { RoomJournal.files(in: $0.path) }
            seqs += try await lines(1, "during \(index)", from: alice, to: bob)
            if let journal, let directory = server.dataDirectory?.path {
                let handedOff = await eventually(timeout: .seconds(10)) { RoomJournal.files(in: directory) != journal }
                #expect(handedOff, "the journal moved on to its next file")
            }
        }
        for socket in attacker { socket.close() }
        attacker.removeAll()
        seqs += try await lines(20, "after", from: alice, to: bob)
        #expect(seqs == Array(seqs[0]..<(seqs[0] + 30)), "30 of 30 delivered with no seq gap: \(seqs)")
    }

    /// Alice says `count` lines; the seqs bob receives them with, in order. A refusal (the
    /// `storageFailed` of a commit that could not open the journal) fails the test.
    private func lines(_ count: Int, _ label: String, from alice: TestClient, to bob: TestClient) async throws -> [UInt64] {
        try await alice.send((0..<count).map { .say(room: "r", text: "\(label) \($0)") })
        let echoed = try await alice.collect(count, "\(label) echoes or refusals") { frame -> Bool? in
            switch frame {
            case .message("r", _, _, "alice", _): return true
            case .error(let code, _, _, _):
                Issue.record("alice's line refused: \(code)")
                return false
            default: return nil
            }
        }
        #expect(echoed.allSatisfy { $0 }, "every \(label) line echoed")
        return try await bob.collect(count, "\(label) lines at bob") { frame -> UInt64? in
            if case .message("r", let seq, _, "alice", _) = frame { return seq }
            return nil
        }
    }
}

/// The code of the first `error` `socket` reads within `limit`, nil if none comes.
private func errorCode(from socket: BlockingSocket, within limit: Duration) async -> ErrorCode? {
    guard let frame = await socket.nextFrame(timeout: limit) else { return nil }
    if case .error(let code, _, _, _) = frame { return code }
    return nil
}
