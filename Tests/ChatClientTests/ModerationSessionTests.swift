import ChatClient
import ChatProtocol
import Foundation
import Testing

/// The session's side of room moderation (version 4), without sockets: commands in, frames out;
/// frames in, lines and state out.
@Suite struct ModerationSessionTests {
    private func texts(_ actions: [SessionAction]) -> [String] {
        events(actions).compactMap { event in
            switch event {
            case .moderation(_, _, let text), .kick(_, _, let text), .notice(_, let text), .error(_, let text): text
            default: nil
            }
        }
    }

    private func command(_ line: String) throws -> ClientCommand {
        try #require(try CommandParser.parse(line), "\(line) parses to a command")
    }

    /// alice, connected with version 4, in `mod` with bob (voiced) and carol, alice an op.
    private func modSession(version: UInt16 = 4) -> ClientSession {
        var session = ClientSession(nick: "alice", rooms: ["#mod"], clock: { 1000 })
        _ = session.connected(nick: "alice", motd: "", version: version)
        _ = session.receive(.joined(room: "mod", seq: 1, time: 1, nick: "alice"))
        _ = session.receive(.members(room: "mod", nicks: ["alice", "bob", "carol"]))
        _ = session.receive(.roomModes(room: "mod", modes: RoomModes(ops: ["alice"], voices: ["bob"])))
        return session
    }

    // MARK: Commands

    @Test func parsesEveryModerationCommand() throws {
        let cases: [(String, ModerationCommand)] = [
            ("/kick bob spam and more", .kick(nick: "bob", reason: "spam and more")),
            ("/kick bob", .kick(nick: "bob", reason: "")),
            ("/ban bob", .ban(mask: "nick:bob", reason: "")),
            ("/ban account:bob flooding", .ban(mask: "account:bob", reason: "flooding")),
            ("/ban address:203.0.113.0/24", .ban(mask: "address:203.0.113.0/24", reason: "")),
            ("/unban bob", .unban(mask: "nick:bob")),
            ("/bans", .listBans),
            ("/invite bob", .invite(nick: "bob", room: nil)),
            ("/invite bob #Dev", .invite(nick: "bob", room: "dev")),
            ("/mode", .mode(room: nil, changes: [])),
            ("/mode #Mod", .mode(room: "mod", changes: [])),
            ("/mode +i", .mode(room: nil, changes: [ModeChange(.inviteOnly, on: true)])),
            ("/mode #mod +k s3cret", .mode(room: "mod", changes: [ModeChange(.key, on: true, argument: "s3cret")])),
            ("/mode -k", .mode(room: nil, changes: [ModeChange(.key, on: false)])),
            ("/mode +l 50", .mode(room: nil, changes: [ModeChange(.memberLimit, on: true, argument: "50")])),
            ("/mode -l", .mode(room: nil, changes: [ModeChange(.memberLimit, on: false)])),
            ("/mode +b bob", .mode(room: nil, changes: [ModeChange(.ban, on: true, argument: "nick:bob")])),
            ("/mode +r", .mode(room: nil, changes: [ModeChange(.registered, on: true)])),
            ("/mode +ov-m alice bob", .mode(room: nil, changes: [
                ModeChange(.op, on: true, argument: "alice"), ModeChange(.voice, on: true, argument: "bob"), ModeChange(.moderated, on: false),
            ])),
            ("/mode +k KEY +o bob", .mode(room: nil, changes: [ModeChange(.key, on: true, argument: "KEY"), ModeChange(.op, on: true, argument: "bob")])),
            ("/op bob", .mode(room: nil, changes: [ModeChange(.op, on: true, argument: "bob")])),
            ("/deop bob", .mode(room: nil, changes: [ModeChange(.op, on: false, argument: "bob")])),
            ("/voice bob", .mode(room: nil, changes: [ModeChange(.voice, on: true, argument: "bob")])),
            ("/devoice bob", .mode(room: nil, changes: [ModeChange(.voice, on: false, argument: "bob")])),
            ("/key s3cret", .mode(room: nil, changes: [ModeChange(.key, on: true, argument: "s3cret")])),
            ("/key -clear", .mode(room: nil, changes: [ModeChange(.key, on: false)])),
            ("/moderated on", .mode(room: nil, changes: [ModeChange(.moderated, on: true)])),
            ("/topiclock off", .mode(room: nil, changes: [ModeChange(.topicLock, on: false)])),
            ("/kill bob abuse", .kill(nick: "bob", reason: "abuse")),
            ("/serverban address:203.0.113.7 flood", .serverBan(on: true, mask: "address:203.0.113.7", reason: "flood")),
            ("/serverunban nick:bob", .serverBan(on: false, mask: "nick:bob", reason: "")),
            ("/closeroom #Spam gone", .serverBan(on: true, mask: "room:spam", reason: "gone")),
            ("/serverbans", .listServerBans),
        ]
        for (line, expected) in cases {
            #expect(try command(line) == .moderate(expected), "\(line) parses to \(expected)")
        }
        #expect(try command("/join #Secret s3cret") == .joinWithKey(room: "secret", key: "s3cret"))
    }

    @Test func refusesMalformedModerationCommands() {
        for line in ["/kick", "/ban", "/mode +k", "/mode +l many", "/mode +l 0", "/mode +x", "/mode +o", "/mode -i extra",
            "/op", "/op 1bad", "/moderated maybe", "/key", "/ban 1bad", "/ban room:general", "/closeroom", "/bans now"] {
            #expect(throws: CommandError.self, "\(line) is refused") { try CommandParser.parse(line) }
        }
    }

    @Test func banOfABareNickSendsANickMask() throws {
        var session = modSession()
        #expect(frames(session.perform(try command("/ban bob"))) == [.setMode(room: "mod", mode: .ban, on: true, argument: "nick:bob")])
        #expect(frames(session.perform(try command("/unban bob"))) == [.setMode(room: "mod", mode: .ban, on: false, argument: "nick:bob")])
    }

    @Test func aBansReasonFollowsItsMask() throws {
        var session = modSession()
        #expect(frames(session.perform(try command("/ban carol spam and more"))) == [
            .setMode(room: "mod", mode: .ban, on: true, argument: "nick:carol spam and more")
        ])
        #expect(frames(session.perform(try command("/ban address:10.0.0.0/8"))) == [
            .setMode(room: "mod", mode: .ban, on: true, argument: "address:10.0.0.0/8")
        ])
    }

    @Test func roomCommandsActOnTheCurrentRoomOrTheNamedOne() throws {
        var session = modSession()
        #expect(frames(session.perform(try command("/kick bob spam"))) == [.kick(room: "mod", nick: "bob", reason: "spam")])
        #expect(frames(session.perform(try command("/op bob"))) == [.setMode(room: "mod", mode: .op, on: true, argument: "bob")])
        #expect(frames(session.perform(try command("/mode #other +im"))) == [
            .setMode(room: "other", mode: .inviteOnly, on: true, argument: ""), .setMode(room: "other", mode: .moderated, on: true, argument: ""),
        ])
        #expect(frames(session.perform(try command("/invite dave"))) == [.invite(room: "mod", nick: "dave")])
        #expect(frames(session.perform(try command("/invite dave #dev"))) == [.invite(room: "dev", nick: "dave")])
        #expect(frames(session.perform(try command("/bans"))) == [.listBans(room: "mod")])
        #expect(frames(session.perform(try command("/serverbans"))) == [.listBans(room: "")])
        #expect(frames(session.perform(try command("/kill bob abuse"))) == [.kill(nick: "bob", reason: "abuse")])
        #expect(frames(session.perform(try command("/closeroom #spam"))) == [.serverBan(on: true, mask: "room:spam", reason: "")])
    }

    @Test func moderationNeedsVersion4() throws {
        var session = modSession(version: 3)
        let actions = session.perform(try command("/kick bob"))
        #expect(frames(actions).isEmpty, "nothing is sent to a server without moderation")
        #expect(texts(actions) == ["this server speaks protocol version 3, which has no room moderation"])
    }

    @Test func modeWithoutChangesShowsTheRoomsModes() throws {
        var session = modSession()
        _ = session.receive(.roomModes(room: "mod", modes: RoomModes(founder: "alice", moderated: true, key: "s3cret", memberLimit: 50, ops: ["alice"], voices: ["bob"])))
        let actions = session.perform(try command("/mode"))
        #expect(frames(actions).isEmpty)
        #expect(texts(actions) == ["modes of #mod: +kmlr s3cret 50, registered to alice; ops: alice; voiced: bob"])
    }

    @Test func joinWithAKeySendsJoinWithKeyAndRejoinsWithIt() throws {
        var session = modSession()
        #expect(frames(session.perform(try command("/join #secret s3cret"))) == [.joinWithKey(room: "secret", key: "s3cret")])
        _ = session.receive(.joined(room: "secret", seq: 1, time: 1, nick: "alice"))
        session.disconnected()
        let rejoin = frames(session.connected(nick: "alice", motd: "", version: 4))
        #expect(rejoin.contains(.joinWithKey(room: "secret", key: "s3cret")), "the key goes with the rejoin: \(rejoin)")
        #expect(rejoin.contains(.join(room: "mod")))
    }

    // MARK: Frames

    @Test func showsAKickOfSomeoneElseAndForgetsTheirRoles() {
        var session = modSession()
        let actions = session.receive(.kicked(room: "mod", seq: 5, time: 2, nick: "bob", by: "alice", reason: "spam"))
        #expect(events(actions) == [.kick(room: "mod", time: 2, text: "bob was kicked by alice (spam)")])
        #expect(session.members(of: "mod") == ["alice", "carol"])
        #expect(session.modes(of: "mod")?.voices == [], "bob's voice ended with the kick")
        #expect(session.removal(from: "mod") == nil, "we are still in")
    }

    @Test func aKickWithoutASetterIsTheServers() {
        var session = modSession()
        let actions = session.receive(.kicked(room: "mod", seq: 5, time: 2, nick: "bob", by: "", reason: "room closed"))
        #expect(texts(actions) == ["bob was kicked by the server (room closed)"])
    }

    @Test func kickedSelfStaysOutAcrossAReconnect() {
        var session = ClientSession(nick: "bob", rooms: ["#mod", "#dev"], clock: { 1000 })
        _ = session.connected(nick: "bob", motd: "", version: 4)
        _ = session.receive(.joined(room: "mod", seq: 1, time: 1, nick: "bob"))
        _ = session.receive(.joined(room: "dev", seq: 1, time: 1, nick: "bob"))
        let actions = session.receive(.kicked(room: "mod", seq: 7, time: 3, nick: "bob", by: "alice", reason: "spam"))
        #expect(events(actions) == [.kick(room: "mod", time: 3, text:
            "you were kicked from #mod by alice (spam); you will not rejoin by yourself (/join #mod to go back)")])
        #expect(actions.contains(.alert))
        #expect(!session.rooms.contains("mod"))
        #expect(session.windows.contains(.room("mod")), "the window stays, with the kick in it")
        #expect(session.removal(from: "mod") == "kicked by alice")
        #expect(StatusLine.render(session: session, columns: 80).contains("#mod(out)"), "the status line says we are out")

        session.disconnected()
        let rejoins = frames(session.connected(nick: "bob", motd: "", version: 4))
        #expect(rejoins.contains(.join(room: "dev")))
        #expect(!rejoins.contains(.join(room: "mod")), "no rejoin of a room we were kicked from: \(rejoins)")

        // Text typed in its window is not sent; joining by hand goes back.
        _ = session.receive(.joined(room: "dev", seq: 2, time: 4, nick: "bob"))
        session.select(.room("mod"))
        let said = session.perform(.say("hello?"))
        #expect(frames(said).isEmpty)
        #expect(texts(said) == ["you are not in #mod (kicked by alice); /join #mod to go back"])
        #expect(frames(session.perform(.join(room: "mod"))) == [.join(room: "mod")])
        #expect(session.removal(from: "mod") == nil)
    }

    @Test func partClosesTheWindowOfARoomWeWereKickedFrom() {
        var session = modSession()
        _ = session.receive(.kicked(room: "mod", seq: 5, time: 2, nick: "alice", by: "carol", reason: ""))
        let actions = session.perform(.part(room: nil))
        #expect(frames(actions).isEmpty, "no part for a room we are not in")
        #expect(!session.windows.contains(.room("mod")))
    }

    @Test func joinRefusalsThatLastAreNotRetried() {
        for code in [ErrorCode.banned, .inviteOnly, .badRoomKey, .roomFull] {
            var session = ClientSession(nick: "bob", rooms: ["#mod", "#dev"], clock: { 1000 })
            _ = session.connected(nick: "bob", motd: "", version: 4)
            let actions = session.receive(.error(code: code, fatal: false, frameType: .join, reason: "no entry"))
            #expect(texts(actions) == ["cannot join #mod: no entry; not rejoining by itself (/join #mod to try again)"])
            _ = session.receive(.joined(room: "dev", seq: 1, time: 1, nick: "bob"))
            session.disconnected()
            let rejoins = frames(session.connected(nick: "bob", motd: "", version: 4))
            #expect(!rejoins.contains(.join(room: "mod")), "\(code): not rejoined after a reconnect: \(rejoins)")
            #expect(session.removal(from: "mod") != nil)
        }
    }

    @Test func aJoinWithKeyRefusalBelongsToItsRoom() {
        var session = modSession()
        _ = session.perform(.joinWithKey(room: "secret", key: "wrong"))
        let actions = session.receive(.error(code: .badRoomKey, fatal: false, frameType: .joinWithKey, reason: "wrong key"))
        #expect(texts(actions) == ["cannot join #secret: wrong key; not rejoining by itself (/join #secret to try again)"])
        #expect(!session.windows.contains(.room("secret")))
    }

    @Test func modeChangesAreShownIrssiLikeAndUpdateRoles() {
        var session = modSession()
        var actions = session.receive(.modeChanged(room: "mod", seq: 5, time: 2, by: "alice", mode: .op, on: true, argument: "carol"))
        #expect(events(actions) == [.moderation(room: "mod", time: 2, text: "mode #mod +o carol by alice")])
        #expect(session.decorated("carol", in: "mod") == "@carol")
        actions = session.receive(.modeChanged(room: "mod", seq: 6, time: 2, by: "alice", mode: .voice, on: false, argument: "bob"))
        #expect(texts(actions) == ["mode #mod -v bob by alice"])
        #expect(session.decorated("bob", in: "mod") == "bob")
        actions = session.receive(.modeChanged(room: "mod", seq: 7, time: 2, by: "alice", mode: .moderated, on: true, argument: ""))
        #expect(texts(actions) == ["mode #mod +m by alice"])
        #expect(session.modes(of: "mod")?.moderated == true)
        actions = session.receive(.modeChanged(room: "mod", seq: 8, time: 2, by: "alice", mode: RoomMode(rawValue: 42), on: true, argument: "x"))
        #expect(texts(actions) == ["mode #mod +(42) x by alice"], "an unknown mode by its number")
    }

    @Test func rolesFollowNickChangesAndEndWithLeavingKicksAndQuits() {
        var session = modSession()
        _ = session.receive(.nickChanged(room: "mod", seq: 5, time: 2, old: "bob", new: "robert"))
        #expect(session.decorated("robert", in: "mod") == "+robert", "the voice follows the nick")
        _ = session.receive(.modeChanged(room: "mod", seq: 6, time: 2, by: "alice", mode: .op, on: true, argument: "carol"))
        _ = session.receive(.kicked(room: "mod", seq: 7, time: 2, nick: "carol", by: "alice", reason: ""))
        _ = session.receive(.joined(room: "mod", seq: 8, time: 2, nick: "carol"))
        #expect(session.decorated("carol", in: "mod") == "carol", "a kick ends ops; joining again does not bring them back")
        _ = session.receive(.quit(room: "mod", seq: 9, time: 2, nick: "robert", reason: ""))
        _ = session.receive(.joined(room: "mod", seq: 10, time: 2, nick: "robert"))
        #expect(session.decorated("robert", in: "mod") == "robert")
        _ = session.receive(.nickChanged(room: "mod", seq: 11, time: 2, old: "alice", new: "alicia"))
        let list = events(session.receive(.members(room: "mod", nicks: ["alicia", "robert", "carol"])))
        #expect(list == [.members(room: "mod", time: 1000, nicks: ["@alicia", "robert", "carol"])], "/who marks the op: \(list)")
        #expect(session.members(of: "mod") == ["alicia", "robert", "carol"], "completion keeps bare nicks")
    }

    @Test func roomModesOnAFirstJoinNameTheOps() {
        var session = ClientSession(nick: "alice", rooms: ["#mod"], clock: { 1000 })
        _ = session.connected(nick: "alice", motd: "", version: 4)
        _ = session.receive(.joined(room: "mod", seq: 1, time: 1, nick: "alice"))
        _ = session.receive(.members(room: "mod", nicks: ["alice"]))
        let actions = session.receive(.roomModes(room: "mod", modes: RoomModes(topicLock: true, ops: ["alice"])))
        #expect(texts(actions) == ["modes of #mod: +t; ops: alice"])
        // Asked again with /who, the roles are in the member list and the modes line is short.
        let list = session.receive(.members(room: "mod", nicks: ["alice"]))
        #expect(events(list) == [.members(room: "mod", time: 1000, nicks: ["@alice"])])
        #expect(texts(session.receive(.roomModes(room: "mod", modes: RoomModes(topicLock: true, ops: ["alice"])))) == ["modes of #mod: +t"])
        #expect(texts(session.receive(.roomModes(room: "mod", modes: RoomModes(ops: ["alice"])))).isEmpty, "nothing to say of an open room")
    }

    @Test func invitationsAreShownToBothSides() {
        var session = modSession()
        var actions = session.receive(.invited(room: "mod", nick: "dave", by: "alice"))
        #expect(texts(actions) == ["invited dave to #mod"])
        actions = session.receive(.invited(room: "secret", nick: "alice", by: "carol"))
        #expect(texts(actions) == ["carol invites you to #secret — /join #secret"])
        #expect(actions.contains(.alert))
        #expect(session.window(for: events(actions)[0]) == session.currentWindow, "an invitation to a room we are not in shows where we are")
    }

    @Test func banListsAndDoneAreShown() {
        var session = modSession()
        let list = session.receive(.banList(room: "mod", entries: [
            BanEntry(mask: "nick:bob", setBy: "alice", time: 1_767_225_600_000, reason: "spam"),
            BanEntry(mask: "address:203.0.113.0/24", setBy: "", time: 1_767_225_660_000, reason: ""),
        ]))
        #expect(texts(list) == [
            "bans of #mod (2):",
            "  nick:bob by alice, 2026-01-01 00:00 UTC: spam",
            "  address:203.0.113.0/24 by the server's configuration, 2026-01-01 00:01 UTC",
        ])
        #expect(texts(session.receive(.banList(room: "", entries: []))) == ["the server has no bans"])
        #expect(texts(session.receive(.done(request: .kill, text: "killed bob"))) == ["killed bob"])
    }

    @Test func moderationErrorsAreShownByTheirReason() {
        var session = modSession()
        let actions = session.receive(.error(code: .notOperator, fatal: false, frameType: .kick, reason: "you are not an op of #mod"))
        #expect(texts(actions) == ["you are not an op of #mod"])
        #expect(session.rooms == ["mod"], "a refused kick changes nothing")
    }

    @Test func killedAndServerBannedAreFinal() {
        var session = modSession()
        let killed = Frame.error(code: .killed, fatal: true, frameType: FrameType(rawValue: 0), reason: "abuse")
        #expect(ClientSession.isFinal(killed), "killed: the driver stays offline")
        #expect(ClientSession.isFinal(.error(code: .banned, fatal: true, frameType: FrameType(rawValue: 0), reason: "banned")))
        #expect(ClientSession.isFinal(.error(code: .ghosted, fatal: true, frameType: FrameType(rawValue: 0), reason: "")))
        #expect(!ClientSession.isFinal(.error(code: .banned, fatal: false, frameType: .join, reason: "")), "a room ban refuses a join only")
        #expect(!ClientSession.isFinal(.error(code: .unavailable, fatal: true, frameType: FrameType(rawValue: 0), reason: "")), "a node going away is not final")
        #expect(texts(session.receive(killed)) == ["server closed the session: abuse; not reconnecting by itself (/reconnect to try again)"])
    }

    @Test func rendersModerationLinesAndRoleMarks() {
        let renderer = MessageRenderer(colour: false, timeZone: TimeZone(identifier: "UTC"))
        #expect(renderer.render(.kick(room: "mod", time: 0, text: "bob was kicked by alice (spam)")) == "00:00 #mod -!- bob was kicked by alice (spam)")
        #expect(renderer.render(.members(room: "mod", time: 0, nicks: ["@alice", "+bob", "carol"])) == "00:00 #mod -!- members (3): @alice +bob carol")
    }

    @Test func completesNicksAfterModerationCommands() {
        for command in ["/kick ", "/op ", "/deop ", "/voice ", "/invite "] {
            #expect(CompletionCandidates.candidates(for: "b", lineBefore: command, nicks: ["bob", "carol"], rooms: []) == ["bob"], "\(command)")
        }
        #expect(CompletionCandidates.candidates(for: "/mod", lineBefore: "", nicks: [], rooms: []) == ["/mode", "/moderated"])
    }
}
