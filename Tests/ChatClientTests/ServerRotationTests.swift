import ChatClient
import ChatProtocol
import SocketCore
import Testing

/// The order servers are tried in, and where the backoff's waits fall.
@Suite struct ServerRotationTests {
    private let a = ServerAddress(host: "127.0.0.1", port: 7001)
    private let b = ServerAddress(host: "127.0.0.1", port: 7002)
    private let c = ServerAddress(host: "::1", port: 7003)
    private let backoff = ReconnectBackoff(initial: .milliseconds(500), maximum: .seconds(30), stableAfter: .seconds(60))

    @Test func triesEachServerOnceThenWaitsForTheRound() {
        var rotation = ServerRotation(servers: [a, b, c], backoff: backoff)
        #expect(rotation.current == a, "the first server given is tried first")
        #expect(rotation.failed(sessionLasted: nil) == .tryNow(b), "a refused server costs no wait")
        #expect(rotation.failed(sessionLasted: nil) == .tryNow(c))
        #expect(rotation.failed(sessionLasted: nil) == .wait(attempt: 1, then: a), "all three failed: one wait, then round robin")
        #expect(rotation.failed(sessionLasted: nil) == .tryNow(b))
        #expect(rotation.failed(sessionLasted: nil) == .tryNow(c))
        #expect(rotation.failed(sessionLasted: nil) == .wait(attempt: 2, then: a), "the delay grows per round, not per server")
    }

    @Test func aLostSessionMovesToTheNextServerAtOnce() {
        var rotation = ServerRotation(servers: [a, b], backoff: backoff)
        #expect(rotation.failed(sessionLasted: .seconds(3600)) == .tryNow(b), "a long session lost: the next server, no wait")
        #expect(rotation.current == b)
        #expect(rotation.failed(sessionLasted: .seconds(3600)) == .tryNow(a), "and again after another long session")
        #expect(rotation.failed(sessionLasted: nil) == .wait(attempt: 1, then: b), "then both failed: the first wait of a fresh round")
    }

    @Test func serversThatWelcomeAndDropAreNotRedialledInATightLoop() {
        var rotation = ServerRotation(servers: [a, b], backoff: backoff)
        var waits: [Int] = []
        for _ in 0..<8 {
            if case .wait(let attempt, _) = rotation.failed(sessionLasted: .milliseconds(5)) { waits.append(attempt) }
        }
        #expect(waits == [1, 2, 3, 4], "short sessions count as failures: a wait per round, growing")
    }

    @Test func aSettledSessionStartsAFreshRoundHoweverShort() {
        var rotation = ServerRotation(servers: [a], backoff: backoff)
        for _ in 0..<5 { _ = rotation.failed(sessionLasted: nil) }
        #expect(rotation.failed(sessionLasted: .milliseconds(300), settled: true) == .wait(attempt: 1, then: a),
                "the server answered the rejoins: the delays start again")
        #expect(rotation.failed(sessionLasted: .milliseconds(300)) == .wait(attempt: 2, then: a), "one that did not, counts on")
    }

    @Test func oneServerWaitsAfterEveryFailureAsBefore() {
        var rotation = ServerRotation(servers: [a], backoff: backoff)
        var previous = 0
        for lasted in [nil, Duration.seconds(1), nil, .seconds(120), nil] as [Duration?] {
            let expected = backoff.nextAttempt(after: previous, sessionLasted: lasted)
            #expect(rotation.failed(sessionLasted: lasted) == .wait(attempt: expected, then: a), "the same attempt as ReconnectBackoff alone")
            previous = expected
        }
    }
}

/// The session when the client moves to a server that is not the same chat.
@Suite struct SessionOnAnotherServerTests {
    private func texts(_ actions: [SessionAction]) -> [String] {
        actions.compactMap { action -> String? in
            guard let event = shownEvent(action) else { return nil }
            switch event {
            case .message(_, _, _, let text, _), .marker(_, _, let text): return text
            default: return nil
            }
        }
    }

    private func message(_ seq: UInt64, _ text: String) -> HistoryEntry {
        HistoryEntry(kind: .message, seq: seq, time: seq, sender: "carol", text: text)
    }

    @Test func anotherChatsHistoryIsShownWholeAfterTheMarkerEvenWithLowerSeqs() {
        var session = ClientSession(nick: "alice", rooms: ["general"], clock: { 1000 })
        _ = session.connected(nick: "alice", motd: "", version: 2)
        _ = session.receive(.joined(room: "general", seq: 40, time: 1, nick: "alice"))
        _ = session.receive(.roomState(room: "general", epoch: 11, firstSeq: 1, lastSeq: 40))
        _ = session.receive(.historyPage(room: "general", epoch: 11, complete: true, entries: []))
        _ = session.receive(.message(room: "general", seq: 41, time: 41, sender: "bob", text: "on the first server"))

        // The next server has its own #general, epoch 22, whose seqs are all below 41.
        session.disconnected()
        session.server = "127.0.0.1:7002"
        _ = session.connected(nick: "alice", motd: "", version: 2)
        _ = session.receive(.joined(room: "general", seq: 3, time: 3, nick: "alice"))
        let state = session.receive(.roomState(room: "general", epoch: 22, firstSeq: 1, lastSeq: 3))
        let replay = session.receive(.historyPage(room: "general", epoch: 22, complete: true, entries: [message(1, "other 1"), message(2, "other 2")]))
        #expect(texts(state + replay) == ["started again: the server restarted or forgot the room", "other 1", "other 2", "live from here"],
                "the marker, then the other chat's history as new, not filtered by the first server's seqs")
        let live = session.receive(.message(room: "general", seq: 4, time: 4, sender: "carol", text: "live 4"))
        #expect(texts(live) == ["live 4"], "live messages of the new epoch are shown, not taken for old ones")
        #expect(StatusLine.render(session: session, columns: 80) == "alice | [1:#general] | 127.0.0.1:7002")
    }

    /// Connected and in #general (epoch 9), having seen up to seq 7.
    private func sessionAtSeq7() -> ClientSession {
        var session = ClientSession(nick: "alice", rooms: ["general"], clock: { 1000 })
        _ = session.connected(nick: "alice", motd: "", version: 2)
        _ = session.receive(.joined(room: "general", seq: 5, time: 5, nick: "alice"))
        _ = session.receive(.roomState(room: "general", epoch: 9, firstSeq: 1, lastSeq: 5))
        _ = session.receive(.historyPage(room: "general", epoch: 9, complete: true, entries: []))
        _ = session.receive(.message(room: "general", seq: 7, time: 7, sender: "bob", text: "live 7"))
        return session
    }

    private func rejoin(_ session: inout ClientSession, lastSeq: UInt64) {
        session.disconnected()
        _ = session.connected(nick: "alice", motd: "", version: 2)
        _ = session.receive(.joined(room: "general", seq: lastSeq, time: lastSeq, nick: "alice"))
        _ = session.receive(.roomState(room: "general", epoch: 9, firstSeq: 1, lastSeq: lastSeq))
    }

    @Test func aConnectionLostInTheMiddleOfACatchUpLosesNothing() {
        var session = sessionAtSeq7()
        rejoin(&session, lastSeq: 300)
        let fetch = session.receive(.historyPage(room: "general", epoch: 9, complete: false, entries: (250...260).map { message(UInt64($0), "m\($0)") }))
        #expect(frames(fetch) == [.fetchHistory(room: "general", direction: .after, seq: 7, limit: 200)])
        #expect(texts(session.receive(.message(room: "general", seq: 301, time: 301, sender: "carol", text: "m301"))).isEmpty,
                "a live message waits for the catch-up")

        // The node dies before the fetched page arrives; the next node is the same chat.
        rejoin(&session, lastSeq: 305)
        let again = session.receive(.historyPage(room: "general", epoch: 9, complete: false, entries: (250...305).map { message(UInt64($0), "m\($0)") }))
        #expect(frames(again) == [.fetchHistory(room: "general", direction: .after, seq: 7, limit: 200)],
                "the catch-up starts again from the last seq shown, not from what the lost connection announced")
        let shown = texts(session.receive(.historyPage(room: "general", epoch: 9, complete: false, entries: (8...249).map { message(UInt64($0), "m\($0)") })))
        #expect(shown == ["298 new since you left"] + (8...305).map { "m\($0)" }, "every message from 8 to 305 once, in order")

        rejoin(&session, lastSeq: 305)
        #expect(texts(session.receive(.historyPage(room: "general", epoch: 9, complete: true, entries: (250...305).map { message(UInt64($0), "m\($0)") })))
                .isEmpty, "what was shown counts as seen (the reconnect's one line says there is nothing new)")
    }

    @Test func aServerThatAnswersAFetchWithTheSamePageDoesNotLoopTheClient() {
        var session = sessionAtSeq7()
        rejoin(&session, lastSeq: 300)
        let fetch = session.receive(.historyPage(room: "general", epoch: 9, complete: false, entries: (250...260).map { message(UInt64($0), "m\($0)") }))
        #expect(frames(fetch) == [.fetchHistory(room: "general", direction: .after, seq: 7, limit: 200)])
        let stale = session.receive(.historyPage(room: "general", epoch: 9, complete: false, entries: (3...7).map { message(UInt64($0), "m\($0)") }))
        #expect(frames(stale).isEmpty, "a page that gets nowhere is not asked for again")
        #expect(texts(stale) == ["11 new since you left"] + (250...260).map { "m\($0)" }, "the catch-up ends with what it has, nothing old shown again")
    }

    @Test func aVersion1ServerDoesNotShowTheSameCatchUpTwice() {
        var session = ClientSession(nick: "alice", rooms: ["general"], clock: { 1000 })
        _ = session.connected(nick: "alice", motd: "", version: 1)
        _ = session.receive(.joined(room: "general", seq: 5, time: 5, nick: "alice"))
        #expect(texts(session.receive(.history(room: "general", entries: [message(3, "old")]))) == ["old", "live from here"])
        for expected in [["1 new since you left", "missed 8"], []] {
            session.disconnected()
            _ = session.connected(nick: "alice", motd: "", version: 1)
            _ = session.receive(.joined(room: "general", seq: 9, time: 9, nick: "alice"))
            #expect(texts(session.receive(.history(room: "general", entries: [message(3, "old"), message(8, "missed 8")]))) == expected,
                    "a replay already shown is not shown again")
        }
    }
}
