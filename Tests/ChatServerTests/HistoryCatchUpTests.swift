import ChatProtocol
import Testing
import TestSupport

/// History and catch-up as a version 2 client relies on them (docs/PROTOCOL.md, "History"), the
/// same in every mode, against the real `chat-server`: a joiner's replay, paging back to the
/// first line, and catching up after a reconnect with `fetchHistory after` its last `seq` —
/// every line once, in order, nothing more.
@Suite("History and catch-up, in every mode")
struct HistoryCatchUpTests {
    @Test(arguments: ServerMode.allCases)
    func aReconnectingClientCatchesUpOnExactlyWhatItMissedAndPagesBackToTheFirstLine(_ mode: ServerMode) async throws {
        // A long handshake timeout: under the full suite's load a test task can wait seconds
        // between connecting and sending its hello.
        let server = try await ChatServerProcess(mode, arguments: ["--history-size", "25", "--handshake-timeout", "60"])
        defer { server.stop() }
        let alice = try await TestClient.connect(to: server, nick: "alice", version: 2)
        defer { alice.close() }
        _ = try await alice.joinRoom("r")
        try await say((1...40).map { "early \($0)" }, as: alice)

        var bob = try await TestClient.connect(to: server, nick: "bob", version: 2)
        let (epoch, _, replay) = try await bob.joinRoom("r")
        #expect(replay.map(\.text) == (16...40).map { "early \($0)" }, "the replay is the newest --history-size lines")
        let lastSeen = try #require(replay.last?.seq)
        // Back from the oldest line of the replay, page by page, to the first line.
        var older: [HistoryEntry] = []
        var before = try #require(replay.first?.seq)
        for _ in 0..<40 {
            try await bob.send(.fetchHistory(room: "r", direction: .before, seq: before, limit: 10))
            let (complete, page) = try await bob.waitFor("a page before \(before)") { frame -> (Bool, [HistoryEntry])? in
                if case .historyPage("r", epoch, let complete, let entries) = frame { return (complete, entries) }
                return nil
            }
            older = page + older
            before = page.first?.seq ?? before
            if complete || page.isEmpty { break }
        }
        // Memory mode keeps only --history-size lines; SQLite and Redis keep them all here.
        let kept = mode == .memory ? [] : (1...15).map { "early \($0)" }
        #expect(older.map(\.text) == kept, "every older line kept, once, in order")
        bob.close()

        try await say((1...30).map { "missed \($0)" }, as: alice)
        bob = try await TestClient.connect(to: server, nick: "bob", version: 2)
        defer { bob.close() }
        let (again, _, _) = try await bob.joinRoom("r")
        #expect(again == epoch, "the same room, so catching up by seq is valid")
        let missed = try await bob.fetchAll("r", after: lastSeen).filter { $0.kind == .message }
        // Memory mode has only the newest --history-size of them; the gap shows in their seqs.
        let caughtUp = (mode == .memory ? 6...30 : 1...30).map { "missed \($0)" }
        #expect(missed.map(\.text) == caughtUp, "what bob missed and the mode keeps, once, in order")
        #expect(zip(missed, missed.dropFirst()).allSatisfy { $0.seq < $1.seq })
    }

    /// Says each of `lines` in `r` as `client`, and waits for the echo of the last.
    private func say(_ lines: [String], as client: TestClient) async throws {
        for line in lines { try await client.send(.say(room: "r", text: line)) }
        let last = lines.last!
        _ = try await client.waitFor("the echo of \(last)") { frame -> Bool? in
            if case .message("r", _, _, _, last) = frame { return true }
            if case .error(let code, _, _, let reason) = frame { Issue.record("refused: \(code) \(reason)") }
            return nil
        }
    }
}
