import ChatProtocol
import Testing
import TestSupport

/// A reconnecting version 2 client that catches up the way `ClientSession` does (docs/PROTOCOL.md,
/// "Catching up after a reconnect"): the join's replay, then `fetchHistory after` its last `seq`
/// with a limit of 200 until a page is `complete`, empty, or reaches the replay — against the
/// durable server, with replays that reach back and replays that do not (pages then read off
/// the event loop from SQLite), and with the rejoin in the middle of a burst of lines.
/// Written for a reported loss of `catch-up 5` to `catch-up 9`, which turned out to be lines
/// never sent (see `ADayInTheClient.say`); it shows the server side and the algorithm lose none.
@Suite("Catch-up after a reconnect, as the client does it", .serialized)
struct CatchUpLossTests {
    @Test(arguments: [[], ["--history-size", "10"], ["--history-size", "25"]])
    func aReconnectingClientSeesEveryMissedLine(_ flags: [String]) async throws {
        let server = try await ChatServerProcess(.durable, arguments: flags + ["--handshake-timeout", "60"])
        defer { server.stop() }
        for round in 0..<4 {
            let room = "r\(round)"
            let alice = try await TestClient.connect(to: server, nick: "alice\(round)", version: 2)
            defer { alice.close() }
            _ = try await alice.joinRoom(room)
            var bob = try await TestClient.connect(to: server, nick: "bob\(round)", version: 2)
            let first = try await bob.joinRoomWithPage(room)
            var lastSeen = first.lastSeq
            try await say((1...20).map { "chatter \($0)" }, in: room, as: alice)
            lastSeen = try await bob.waitFor("chatter 20") { frame -> UInt64? in
                if case .message(room, let seq, _, _, "chatter 20") = frame { return seq }
                return nil
            }
            bob.close()
            _ = try await alice.waitFor("bob's quit") { frame -> Bool? in
                if case .quit(room, _, _, let who, _) = frame, who == "bob\(round)" { return true }
                return nil
            }
            try await say((1...30).map { "catch-up \($0)" }, in: room, as: alice)

            bob = try await TestClient.connect(to: server, nick: "bob\(round)", version: 2)
            defer { bob.close() }
            let again = try await bob.joinRoomWithPage(room)
            #expect(again.epoch == first.epoch)
            var fetched: [HistoryEntry] = []
            let replay = again.replay
            let reachesBack = again.complete || replay.isEmpty || replay[0].seq <= lastSeen + 1
            if !reachesBack {
                let replayStart = replay.first?.seq ?? .max
                var after = lastSeen
                for _ in 0..<100 {
                    try await bob.send(.fetchHistory(room: room, direction: .after, seq: after, limit: 200))
                    let (complete, page) = try await bob.waitFor("a page after \(after)") { frame -> (Bool, [HistoryEntry])? in
                        if case .historyPage(room, _, let complete, let entries) = frame { return (complete, entries) }
                        return nil
                    }
                    fetched += page.filter { $0.seq < replayStart }
                    guard let last = page.last, !complete, last.seq > after, last.seq + 1 < replayStart else { break }
                    after = last.seq
                }
            }
            var seen: Set<UInt64> = []
            let missed = (fetched + replay).filter { $0.seq > lastSeen && seen.insert($0.seq).inserted }.sorted { $0.seq < $1.seq }
            #expect(
                missed.map(\.text) == (1...30).map { "catch-up \($0)" },
                "round \(round) \(flags): replay \(replay.map(\.text)) complete \(again.complete), fetched \(fetched.map(\.text))")
            alice.close()
            bob.close()
        }
    }

    /// The same while alice goes on talking: bob rejoins in the middle of her lines, so pages are
    /// read from the store while newer lines are committed and delivered live.
    @Test(arguments: [["--history-size", "10"], ["--history-size", "3"], []])
    func aClientRejoiningMidBurstSeesEveryLineOnce(_ flags: [String]) async throws {
        let server = try await ChatServerProcess(.durable, arguments: flags + ["--handshake-timeout", "60"])
        defer { server.stop() }
        for round in 0..<4 {
            let room = "m\(round)"
            let alice = try await TestClient.connect(to: server, nick: "alice\(round)", version: 2)
            defer { alice.close() }
            _ = try await alice.joinRoom(room)
            var bob = try await TestClient.connect(to: server, nick: "bob\(round)", version: 2)
            _ = try await bob.joinRoomWithPage(room)
            try await say(["hello"], in: room, as: alice)
            let lastSeen = try await bob.waitFor("hello") { frame -> UInt64? in
                if case .message(room, let seq, _, _, "hello") = frame { return seq }
                return nil
            }
            bob.close()
            _ = try await alice.waitFor("bob's quit") { frame -> Bool? in
                if case .quit(room, _, _, let who, _) = frame, who == "bob\(round)" { return true }
                return nil
            }
            try await say((1...20).map { "catch-up \($0)" }, in: room, as: alice)
            // 40 more, not waited for, while bob rejoins.
            for index in 21...60 { try await alice.send(.say(room: room, text: "catch-up \(index)")) }
            bob = try await TestClient.connect(to: server, nick: "bob\(round)", version: 2)
            defer { bob.close() }
            try await bob.send(.join(room: room))
            var live: [(UInt64, String)] = []
            var replay: [HistoryEntry]? = nil
            var replayComplete = false
            while replay == nil {
                switch try await bob.expectFrame("the replay") {
                case .historyPage(room, _, let complete, let entries): replay = entries; replayComplete = complete
                case .message(room, let seq, _, _, let text): live.append((seq, text))
                default: break
                }
            }
            var fetched: [HistoryEntry] = []
            let replayStart = replay!.first?.seq ?? .max
            if !(replayComplete || replay!.isEmpty || replayStart <= lastSeen + 1) {
                var after = lastSeen
                for _ in 0..<100 {
                    try await bob.send(.fetchHistory(room: room, direction: .after, seq: after, limit: 200))
                    var page: (Bool, [HistoryEntry])? = nil
                    while page == nil {
                        switch try await bob.expectFrame("a page after \(after)") {
                        case .historyPage(room, _, let complete, let entries): page = (complete, entries)
                        case .message(room, let seq, _, _, let text): live.append((seq, text))
                        default: break
                        }
                    }
                    fetched += page!.1.filter { $0.seq < replayStart }
                    guard let last = page!.1.last, !page!.0, last.seq > after, last.seq + 1 < replayStart else { break }
                    after = last.seq
                }
            }
            // The rest arrive live.
            while !(live.map(\.1) + replay!.map(\.text) + fetched.map(\.text)).contains("catch-up 60") {
                if case .message(room, let seq, _, _, let text) = try await bob.expectFrame("catch-up 60") { live.append((seq, text)) }
            }
            var seen: Set<UInt64> = []
            let missed = (fetched + replay!).filter { $0.seq > lastSeen && seen.insert($0.seq).inserted }.sorted { $0.seq < $1.seq }
            let shown = missed.map(\.text) + live.filter { seen.insert($0.0).inserted }.map(\.1)
            #expect(
                shown == (1...60).map { "catch-up \($0)" },
                "round \(round) \(flags): replay \(replay!.map(\.text)) complete \(replayComplete), fetched \(fetched.map(\.text)), live \(live.map(\.1))")
            alice.close()
            bob.close()
        }
    }

    /// Says each of `lines` in `room` as `client`, and waits for the echo of the last.
    private func say(_ lines: [String], in room: String, as client: TestClient) async throws {
        for line in lines { try await client.send(.say(room: room, text: line)) }
        let last = lines.last!
        _ = try await client.waitFor("the echo of \(last)") { frame -> Bool? in
            if case .message(room, _, _, _, last) = frame { return true }
            if case .error(let code, _, _, let reason) = frame { Issue.record("refused: \(code) \(reason)") }
            return nil
        }
    }
}

extension TestClient {
    /// Joins `room` speaking version 2: its `roomState`'s epoch and last `seq`, and the join's
    /// replay page with its `complete` flag.
    func joinRoomWithPage(_ room: String) async throws -> (epoch: UInt64, lastSeq: UInt64, complete: Bool, replay: [HistoryEntry]) {
        try await send(.join(room: room))
        let state = try await waitFor("roomState of #\(room)") { frame -> (UInt64, UInt64)? in
            if case .roomState(room, let epoch, _, let lastSeq) = frame { return (epoch, lastSeq) }
            return nil
        }
        let page = try await waitFor("the replay of #\(room)") { frame -> (Bool, [HistoryEntry])? in
            if case .historyPage(room, _, let complete, let entries) = frame { return (complete, entries) }
            return nil
        }
        return (state.0, state.1, page.0, page.1)
    }
}
