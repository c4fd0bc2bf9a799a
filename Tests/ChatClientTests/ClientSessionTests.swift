import ChatClient
import ChatProtocol
import Testing

@Suite struct ClientSessionTests {
    private func session(_ nick: String = "alice", rooms: [String] = ["#General", "dev"]) -> ClientSession {
        ClientSession(nick: nick, rooms: rooms, clock: { 1000 })
    }

    /// A session that is connected and in `general` and `dev`, with bob in `general`.
    private func joinedSession() -> ClientSession {
        var session = session()
        _ = session.connected(nick: "alice", motd: "")
        _ = session.receive(.joined(room: "general", seq: 1, time: 1, nick: "alice"))
        _ = session.receive(.members(room: "general", nicks: ["alice", "bob"]))
        _ = session.receive(.joined(room: "dev", seq: 1, time: 1, nick: "alice"))
        _ = session.receive(.members(room: "dev", nicks: ["alice", "carol"]))
        return session
    }

    @Test func joinsItsStartRoomsOnConnectAndTalksInTheFirst() {
        var session = session()
        #expect(session.currentRoom == "general", "the first --room is current from the start")
        let actions = session.connected(nick: "alice", motd: "Welcome!")
        #expect(frames(actions) == [.join(room: "general"), .join(room: "dev"), .listRooms], "and asks for the room list, for Tab")
        #expect(events(actions) == [.notice(time: 1000, text: "Welcome!")], "the motd is shown")
        #expect(frames(session.perform(.say("hi"))) == [.say(room: "general", text: "hi")])
    }

    @Test func joinedEchoConfirmsTheRoomAndMembersFeedCompletion() {
        let session = joinedSession()
        #expect(session.rooms == ["general", "dev"])
        #expect(session.pendingJoins.isEmpty)
        #expect(session.knownNicks == ["alice", "bob", "carol"], "current room's nicks first")
        #expect(session.knownRooms == ["general", "dev"])
    }

    @Test func presenceEventsKeepTheMemberListCurrent() {
        var session = joinedSession()
        _ = session.receive(.joined(room: "general", seq: 2, time: 2, nick: "dave"))
        _ = session.receive(.nickChanged(room: "general", seq: 3, time: 3, old: "bob", new: "bobby"))
        _ = session.receive(.quit(room: "general", seq: 4, time: 4, nick: "dave", reason: "bye"))
        #expect(session.members(of: "general") == ["alice", "bobby"])
    }

    @Test func textWithoutARoomIsRefusedLocally() {
        var session = ClientSession(nick: "alice", rooms: [], clock: { 1000 })
        let actions = session.perform(.say("hello?"))
        #expect(frames(actions).isEmpty, "nothing is sent")
        #expect(events(actions) == [.error(time: 1000, text: "you are not in a room; /join #room first")])
    }

    @Test func joinMakesTheRoomCurrentAndSwitchOnlyGoesToJoinedRooms() {
        var session = joinedSession()
        #expect(frames(session.perform(.join(room: "random"))) == [.join(room: "random")])
        #expect(session.currentRoom == "random", "a new room is where we talk next")
        _ = session.perform(.switchRoom("dev"))
        #expect(session.currentRoom == "dev")
        let refused = session.perform(.switchRoom("elsewhere"))
        #expect(session.currentRoom == "dev", "cannot switch to a room we are not in")
        #expect(events(refused).count == 1)
        #expect(frames(session.perform(.join(room: "general"))).isEmpty, "joining a room we are in just switches")
        #expect(session.currentRoom == "general")
    }

    @Test func leavingTheCurrentRoomSwitchesToAnother() {
        var session = joinedSession()
        _ = session.perform(.switchRoom("general"))
        #expect(frames(session.perform(.part(room: nil))) == [.part(room: "general")])
        _ = session.receive(.left(room: "general", seq: 5, time: 5, nick: "alice"))
        #expect(session.rooms == ["dev"])
        #expect(session.currentRoom == "dev")
    }

    @Test func aRefusedJoinIsForgotten() {
        var session = joinedSession()
        _ = session.perform(.join(room: "full"))
        _ = session.receive(.error(code: .tooManyRooms, fatal: false, frameType: .join, reason: "too many rooms"))
        #expect(session.pendingJoins.isEmpty)
        #expect(session.currentRoom == "dev", "back to a room we are in")
    }

    @Test func reconnectingRejoinsEveryRoom() {
        var session = joinedSession()
        _ = session.perform(.join(room: "random"))  // still unanswered when the connection drops
        session.disconnected()
        #expect(!session.isConnected)
        #expect(session.currentRoom == "random", "the current room survives the outage")
        let actions = session.connected(nick: "alice", motd: "")
        #expect(frames(actions) == [.join(room: "general"), .join(room: "dev"), .join(room: "random"), .listRooms])
    }

    @Test func pingIsAnsweredWithPong() {
        var session = joinedSession()
        #expect(frames(session.receive(.ping(token: 42))) == [.pong(token: 42)])
    }

    @Test func directMessagesKnowTheirDirection() {
        var session = joinedSession()
        let incoming = events(session.receive(.direct(sender: "bob", recipient: "alice", time: 7, text: "hi")))
        let echo = events(session.receive(.direct(sender: "alice", recipient: "bob", time: 8, text: "yo")))
        #expect(incoming == [.direct(time: 7, sender: "bob", recipient: "alice", text: "hi", outgoing: false)])
        #expect(echo.first == .direct(time: 8, sender: "alice", recipient: "bob", text: "yo", outgoing: true))
    }

    @Test func yourOwnMessageOpensItsQueryWithoutGoingThere() {
        var session = joinedSession()
        let actions = session.receive(.direct(sender: "alice", recipient: "carol", time: 8, text: "psst"))
        #expect(session.windows.contains(.query("carol")), "the query is open: \(session.windows)")
        #expect(session.currentWindow == .room("general"), "and you stay where you are")
        #expect(session.window(for: .direct(time: 8, sender: "alice", recipient: "carol", text: "psst", outgoing: true)) == .query("carol"))
        #expect(actions.contains { if case .transient(.notice(_, let text)) = $0 { text.hasPrefix("to carol: in window") } else { false } },
                "a note where you are, not logged: \(actions)")
    }

    @Test func aQueryFollowsItsNickChangeWithItsLinesAndActivity() {
        var session = joinedSession()
        _ = session.receive(.direct(sender: "carol", recipient: "alice", time: 7, text: "hi"))
        let actions = session.receive(.nickChanged(room: "general", seq: 9, time: 9, old: "carol", new: "carol2"))
        #expect(actions.contains(.display(.renameWindow(from: .query("carol"), to: .query("carol2")))), "\(actions)")
        #expect(session.windows.contains(.query("carol2")) && !session.windows.contains(.query("carol")))
        #expect(session.activity[.query("carol2")]?.unread == 1, "its unread count goes with it")
        // A second room seeing the same change renames nothing more.
        #expect(!session.receive(.nickChanged(room: "dev", seq: 3, time: 9, old: "carol", new: "carol2")).contains {
            if case .display = $0 { true } else { false }
        })
    }

    @Test func theMostActiveWindowIsAMentionFirstThenTheLowestNumbered() {
        var session = joinedSession()
        #expect(session.mostActiveWindow() == nil)
        _ = session.receive(.message(room: "dev", seq: 1, time: 1, sender: "bob", text: "chatter"))
        _ = session.receive(.direct(sender: "carol", recipient: "alice", time: 2, text: "psst"))
        #expect(session.mostActiveWindow() == .query("carol"), "a direct message counts as a mention")
        _ = session.perform(.window(.active))
        #expect(session.currentWindow == .query("carol"))
        _ = session.perform(.window(.active))
        #expect(session.currentWindow == .room("dev"))
        #expect(events(session.perform(.window(.active))) == [.notice(time: 1000, text: "no window has activity")])
    }

    @Test func nickAcceptedChangesOurNick() {
        var session = joinedSession()
        #expect(frames(session.perform(.changeNick("alice_"))) == [.changeNick(nick: "alice_")])
        _ = session.receive(.nickAccepted(nick: "alice_"))
        #expect(session.nick == "alice_")
        _ = session.receive(.left(room: "dev", seq: 9, time: 9, nick: "Alice_"))
        #expect(session.rooms == ["general"], "our own events are recognised whatever the case")
    }

    @Test func historyIsShownAsReplayedMessages() {
        var session = joinedSession()
        let entries = [
            HistoryEntry(kind: .message, seq: 3, time: 30, sender: "bob", text: "earlier"),
            HistoryEntry(kind: .action, seq: 4, time: 40, sender: "bob", text: "yawns"),
        ]
        #expect(frames(session.perform(.history(count: 5))) == [.requestHistory(room: "general", count: 5)])
        #expect(events(session.receive(.history(room: "general", entries: entries))) == [
            .message(room: "general", time: 30, sender: "bob", text: "earlier", replayed: true),
            .action(room: "general", time: 40, sender: "bob", text: "yawns", replayed: true),
        ])
    }

    @Test func topicIsRememberedForShowTopic() {
        var session = joinedSession()
        _ = session.receive(.topic(room: "general", seq: 2, time: 2, setBy: "bob", text: "Swift"))
        #expect(events(session.perform(.showTopic)) == [.notice(time: 1000, text: "topic of #general: Swift")])
        #expect(frames(session.perform(.setTopic("Sockets"))) == [.setTopic(room: "general", text: "Sockets")])
    }

    @Test func roomListFeedsRoomCompletion() {
        var session = joinedSession()
        _ = session.receive(.roomList(rooms: [RoomInfo(name: "zoo", memberCount: 1, topic: ""), RoomInfo(name: "general", memberCount: 2, topic: "")]))
        #expect(session.knownRooms == ["general", "dev", "zoo"])
    }

    @Test func quitAndHelpAreLocal() {
        var session = joinedSession()
        #expect(session.perform(.quit(reason: "bye")) == [.quit(reason: "bye")])
        let help = events(session.perform(.help(topic: nil)))
        let long = CommandSpec.all.filter { $0.usage.count > 26 }.count
        #expect(help.count == CommandSpec.all.count + long + 2,
                "a heading, one line per command (two for a usage too long to line up after) and one on keys")
    }
}
