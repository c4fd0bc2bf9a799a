import ChatClient
import ChatProtocol
import Testing

/// The session against a version 2 server: catch-up by epoch and seq, windows and activity,
/// refused lines named, away and ignore.
@Suite struct SessionVersion2Tests {
    private let epoch: UInt64 = 77

    private func texts(_ actions: [SessionAction]) -> [String] {
        actions.compactMap { action -> String? in
            guard let event = shownEvent(action) else { return nil }
            switch event {
            case .message(_, _, _, let text, _), .marker(_, _, let text), .notice(_, let text), .error(_, let text): return text
            default: return nil
            }
        }
    }

    private func message(_ seq: UInt64, _ text: String) -> HistoryEntry {
        HistoryEntry(kind: .message, seq: seq, time: seq, sender: "bob", text: text)
    }

    /// Connected and in #general, having seen messages up to seq 7.
    private func session() -> ClientSession {
        var session = ClientSession(nick: "alice", rooms: ["general"], clock: { 1000 })
        _ = session.connected(nick: "alice", motd: "", version: 2)
        _ = session.receive(.joined(room: "general", seq: 5, time: 5, nick: "alice"))
        _ = session.receive(.roomState(room: "general", epoch: epoch, firstSeq: 3, lastSeq: 5))
        let replay = session.receive(.historyPage(room: "general", epoch: epoch, complete: true, entries: [message(3, "old"), message(4, "older")]))
        #expect(texts(replay) == ["old", "older", "live from here"], "the first join shows the replay as history, then where live lines start")
        _ = session.receive(.message(room: "general", seq: 6, time: 6, sender: "bob", text: "live 6"))
        _ = session.receive(.message(room: "general", seq: 7, time: 7, sender: "bob", text: "live 7"))
        return session
    }

    private func rejoin(_ session: inout ClientSession, epoch: UInt64, lastSeq: UInt64) {
        session.disconnected()
        #expect(frames(session.connected(nick: "alice", motd: "", version: 2)) == [.join(room: "general"), .listRooms])
        _ = session.receive(.joined(room: "general", seq: lastSeq, time: lastSeq, nick: "alice"))
        _ = session.receive(.roomState(room: "general", epoch: epoch, firstSeq: 1, lastSeq: lastSeq))
    }

    @Test func aRejoinShowsOnlyWhatWasMissed() {
        var session = session()
        rejoin(&session, epoch: epoch, lastSeq: 12)
        let replay = [message(4, "older"), message(6, "live 6"), message(7, "live 7"), message(9, "missed 9"), message(11, "missed 11")]
        let shown = session.receive(.historyPage(room: "general", epoch: epoch, complete: true, entries: replay))
        #expect(texts(shown) == ["2 new since you left", "missed 9", "missed 11", "reconnected to the server: 1 room, 2 new messages"])
        #expect(frames(shown).isEmpty, "the replay reached back: nothing to fetch")
    }

    @Test func aReplayThatDoesNotReachBackIsFilledInFirst() {
        var session = session()
        rejoin(&session, epoch: epoch, lastSeq: 300)
        let replay = (250...260).map { message(UInt64($0), "r\($0)") }
        let first = session.receive(.historyPage(room: "general", epoch: epoch, complete: false, entries: replay))
        #expect(frames(first) == [.fetchHistory(room: "general", direction: .after, seq: 7, limit: 200)])
        #expect(texts(first).isEmpty, "nothing shown before the gap is filled")
        let live = session.receive(.message(room: "general", seq: 301, time: 301, sender: "bob", text: "live 301"))
        #expect(texts(live).isEmpty, "a live message waits for the catch-up")
        let page1 = session.receive(.historyPage(room: "general", epoch: epoch, complete: false, entries: (8...100).map { message(UInt64($0), "f\($0)") }))
        #expect(frames(page1) == [.fetchHistory(room: "general", direction: .after, seq: 100, limit: 200)])
        let page2 = session.receive(.historyPage(room: "general", epoch: epoch, complete: false, entries: (101...255).map { message(UInt64($0), "f\($0)") }))
        let shown = texts(page2)
        #expect(frames(page2).isEmpty, "the pages met the replay")
        #expect(shown.first == "253 new since you left")
        #expect(shown.dropFirst().first == "f8" && shown.contains("f249") && shown.contains("r250") && !shown.contains("f250"),
                "fetched entries below the replay, then the replay, each once")
        #expect(shown.suffix(2) == ["live 301", "reconnected to the server: 1 room, 253 new messages"],
                "the live message follows what it came after; the reconnect's summary ends it")
    }

    @Test func aVersion1RejoinFiltersItsHistoryBySeq() {
        var session = ClientSession(nick: "alice", rooms: ["general"], clock: { 1000 })
        _ = session.connected(nick: "alice", motd: "", version: 1)
        _ = session.receive(.joined(room: "general", seq: 5, time: 5, nick: "alice"))
        #expect(texts(session.receive(.history(room: "general", entries: [message(3, "old")]))) == ["old", "live from here"])
        _ = session.receive(.message(room: "general", seq: 6, time: 6, sender: "bob", text: "live 6"))
        session.disconnected()
        _ = session.connected(nick: "alice", motd: "", version: 1)
        _ = session.receive(.joined(room: "general", seq: 9, time: 9, nick: "alice"))
        let shown = session.receive(.history(room: "general", entries: [message(3, "old"), message(6, "live 6"), message(8, "missed 8")]))
        #expect(texts(shown) == ["1 new since you left", "missed 8", "reconnected to the server: 1 room, 1 new message"])
        #expect(texts(session.receive(.history(room: "general", entries: [message(3, "old")]))) == ["old"],
                "a later /history answer is shown as it is")
    }

    @Test func aNewEpochSaysTheRoomStartedAgain() {
        var session = session()
        session.disconnected()
        _ = session.connected(nick: "alice", motd: "", version: 2)
        _ = session.receive(.joined(room: "general", seq: 1, time: 1, nick: "alice"))
        let state = session.receive(.roomState(room: "general", epoch: epoch + 1, firstSeq: 0, lastSeq: 1))
        #expect(texts(state) == ["started again: the server restarted or forgot the room"])
        let replay = session.receive(.historyPage(room: "general", epoch: epoch + 1, complete: true, entries: []))
        #expect(texts(replay) == ["reconnected to the server: 1 room, nothing new"], "old seq numbers are not compared with the new ones")
    }

    @Test func aDroppedPasteLineIsNamed() {
        var session = session()
        _ = session.sendPasted("first", to: .room("general"), index: 1, total: 3)
        _ = session.sendPasted("second", to: .room("general"), index: 2, total: 3)
        _ = session.receive(.message(room: "general", seq: 8, time: 8, sender: "alice", text: "first"))
        let refused = session.receive(.error(code: .rateLimited, fatal: false, frameType: .say, reason: "slow down"))
        #expect(texts(refused) == ["slow down: line 2 of 3 of the paste (“second”) was not delivered"])
        _ = session.perform(.say("typed"))
        let typed = session.receive(.error(code: .rateLimited, fatal: false, frameType: .say, reason: "slow down"))
        #expect(texts(typed) == ["slow down: your message “typed” was not delivered"])
    }

    @Test func activityMentionsAndDirectMessagesMakeWindows() {
        var session = ClientSession(nick: "alice", rooms: ["general", "dev"], clock: { 1000 })
        _ = session.connected(nick: "alice", motd: "", version: 2)
        _ = session.receive(.joined(room: "general", seq: 1, time: 1, nick: "alice"))
        _ = session.receive(.joined(room: "dev", seq: 1, time: 1, nick: "alice"))
        #expect(!session.receive(.message(room: "dev", seq: 2, time: 2, sender: "bob", text: "hi")).contains(.alert))
        #expect(session.receive(.message(room: "dev", seq: 3, time: 3, sender: "bob", text: "ALICE?")).contains(.alert))
        #expect(session.activity[.room("dev")] == WindowActivity(unread: 2, mentioned: true))
        #expect(session.receive(.message(room: "general", seq: 2, time: 2, sender: "bob", text: "alice!")).contains(.alert),
                "a mention rings in the current room too")
        #expect(session.activity[.room("general")] == nil, "but the current room collects no unread count")
        #expect(session.receive(.direct(sender: "carol", recipient: "alice", time: 4, text: "psst")).contains(.alert))
        #expect(session.windows == [.room("general"), .room("dev"), .query("carol")])
        session.selectWindow(number: 2)
        #expect(session.currentRoom == "dev" && session.activity[.room("dev")] == nil, "looking at a window clears it")
        session.cycleWindow(by: 1)
        #expect(session.currentWindow == .query("carol"))
        #expect(frames(session.perform(.say("hi"))) == [.tell(recipient: "carol", text: "hi")], "text in a query is a direct message")
        session.cycleWindow(by: 1)
        #expect(session.currentWindow == .room("general"), "wraps around")
    }

    @Test func ignoredNicksAreHiddenEverywhere() {
        var session = session()
        _ = session.perform(.ignore("BOB"))
        #expect(texts(session.receive(.message(room: "general", seq: 8, time: 8, sender: "bob", text: "x"))).isEmpty)
        #expect(texts(session.receive(.direct(sender: "bob", recipient: "alice", time: 8, text: "x"))).isEmpty)
        _ = session.perform(.unignore("bob"))
        #expect(texts(session.receive(.message(room: "general", seq: 9, time: 9, sender: "bob", text: "y"))) == ["y"])
    }

    @Test func joinWhileOfflineWaitsForTheConnection() {
        var session = session()
        session.disconnected()
        let actions = session.perform(.join(room: "later"))
        #expect(frames(actions).isEmpty, "nothing is sent while offline")
        #expect(texts(actions) == ["not connected: you will join #later when the client reconnects"])
        #expect(frames(session.connected(nick: "alice", motd: "", version: 2)) == [.join(room: "general"), .join(room: "later"), .listRooms])
    }

    @Test func awayIsSetAgainAfterAReconnect() {
        var session = session()
        #expect(frames(session.perform(.away("lunch"))) == [.setAway(text: "lunch")])
        _ = session.receive(.away(nick: "alice", text: "lunch"))
        #expect(session.awayMessage == "lunch")
        session.disconnected()
        #expect(frames(session.connected(nick: "alice", motd: "", version: 2)).contains(.setAway(text: "lunch")))
    }

    @Test func fallbackNicksStayValid() {
        #expect(ClientSession.fallbackNick(for: "alice", attempt: 1) == "alice_")
        #expect(ClientSession.fallbackNick(for: "alice", attempt: 2) == "alice__")
        #expect(ClientSession.fallbackNick(for: String(repeating: "a", count: 24), attempt: 1) == String(repeating: "a", count: 23) + "_")
        #expect(ClientSession.fallbackNick(for: "alice", attempt: 4) == nil)
    }

    @Test func mentionsAreWholeWords() {
        #expect(ClientSession.mentions("hey Alice, look", nick: "alice"))
        #expect(ClientSession.mentions("alice: hi", nick: "alice"))
        #expect(!ClientSession.mentions("malice", nick: "alice"))
        #expect(!ClientSession.mentions("alice_ is someone else", nick: "alice"))
    }
}
