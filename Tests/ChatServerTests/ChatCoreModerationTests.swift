import ChatAccounts
@testable import ChatCore
import ChatProtocol
import Dispatch
import Testing

@testable import ChatServer

// Room moderation (ChatCore+Moderation.swift) without sockets, hostile cases first, in every
// mode: memory, SQLite, and a cluster node against a real Redis, whose append script still holds
// its own copy of the rules (ModerationCheck.swift).

/// The non-fatal error code `id` was sent, or the code of its disconnection.
private func errorCode(to id: ClientID, in actions: [ChatAction]) -> ErrorCode? {
    for frame in frames(to: id, in: actions) { if case .error(let code, false, _, _) = frame { return code } }
    for case .disconnect(id, let disconnection, _) in actions { return disconnection.code }
    return nil
}

/// The `roomModes` `id` was sent for `room`.
private func roomModes(to id: ClientID, in actions: [ChatAction], room: String) -> RoomModes? {
    for case .roomModes(room, let modes) in frames(to: id, in: actions) { return modes }
    return nil
}

extension Harness {
    /// Marks `id` as logged in to the account `name`, as a login would, and has its rooms judge
    /// it again (`memberLoggedIn`): the account rules are ChatCoreAccountTests'; here only what
    /// moderation reads of them matters.
    mutating func logIn(_ id: ClientID, as name: String) async {
        core.clients[id.slot]!.account = ChatName.nickKey(name)
        _ = await memberLoggedIn(id)
    }

    /// Connects a version 4 client logged in to the account `name` from the start, and welcomed
    /// with that nick: how a server operator's session looks once its login went through (a
    /// nick listed in `--admin-account` is reserved, so a guest could not take it).
    mutating func connectOperator(_ name: String) async -> ClientID {
        let (id, _) = open()
        await logIn(id, as: name)
        let actions = await send(.hello(version: 4, nick: name, password: nil), from: id)
        precondition(actions.first.map { if case .send(.welcome, _) = $0 { true } else { false } } == true, "expected a welcome for \(name)")
        return id
    }

    /// Connects a version 4 client as `nick` from `address` and joins it to `room`; returns it.
    mutating func member(_ nick: String, of room: String, version: UInt16 = 4, from address: String = "127.0.0.1") async -> ClientID {
        let id = await connect(nick, version: version, from: address)
        let actions = await send(.join(room: room), from: id)
        precondition(errorCode(to: id, in: actions) == nil, "\(nick) joins #\(room): \(actions)")
        return id
    }
}

@Suite("Room moderation without sockets (ChatCore+Moderation)")
struct ChatCoreModerationTests {
    @Test(arguments: CoreBackend.allCases)
    func theCreatorIsOpAndJoinersSeeTheRolesAfterTheMembers(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice", version: 4)
        let joined = await chat.send(.join(room: "r"), from: alice)
        let sent = frames(to: alice, in: joined)
        let membersAt = try #require(sent.firstIndex { if case .membersPage = $0 { true } else { false } })
        let modesAt = try #require(sent.firstIndex { if case .roomModes = $0 { true } else { false } }, "roomModes after members: \(sent)")
        #expect(membersAt < modesAt)
        #expect(roomModes(to: alice, in: joined, room: "r")?.ops == ["alice"])
        let bob = await chat.connect("bob", version: 4)
        #expect(roomModes(to: bob, in: await chat.send(.join(room: "r"), from: bob), room: "r")?.ops == ["alice"])
        #expect(roomModes(to: bob, in: await chat.send(.who(room: "r"), from: bob), room: "r") == RoomModes(ops: ["alice"]))
        // Older clients get no roomModes.
        let old = await chat.connect("old", version: 3)
        #expect(!frames(to: old, in: await chat.send(.join(room: "r"), from: old)).contains { if case .roomModes = $0 { true } else { false } })
    }

    @Test(arguments: CoreBackend.allCases)
    func aNonOpTryingEveryOpCommandIsRefusedNotOperatorAndEveryAdminCommandNotAdmin(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        _ = await chat.member("alice", of: "r")
        let mallory = await chat.member("mallory", of: "r")
        let before = chat.core.roomModes(of: "r")
        let requests: [Frame] = [
            .kick(room: "r", nick: "alice", reason: "mine now"),
            .invite(room: "r", nick: "alice"),
        ] + RoomMode.allKnown.flatMap { mode in
            [true, false].map { on in
                let argument = [.key: "k", .memberLimit: "5", .op: "mallory", .voice: "mallory", .ban: "nick:alice"][mode] ?? ""
                return Frame.setMode(room: "r", mode: mode, on: on, argument: argument)
            }
        }
        for request in requests {
            #expect(errorCode(to: mallory, in: await chat.send(request, from: mallory)) == .notOperator, "\(request)")
        }
        for request: Frame in [.serverBan(on: true, mask: "nick:alice", reason: ""), .kill(nick: "alice", reason: ""), .listBans(room: "")] {
            #expect(errorCode(to: mallory, in: await chat.send(request, from: mallory)) == .notAdmin, "\(request)")
        }
        #expect(chat.core.roomModes(of: "r") == before, "nothing changed")
        // A member may read the room's bans; a stranger may not.
        #expect(frames(to: mallory, in: await chat.send(.listBans(room: "r"), from: mallory)) == [.banList(room: "r", entries: [])])
        let stranger = await chat.connect("stranger", version: 4)
        #expect(errorCode(to: stranger, in: await chat.send(.kick(room: "r", nick: "alice", reason: ""), from: stranger)) == .notInRoom)
        #expect(errorCode(to: stranger, in: await chat.send(.listBans(room: "r"), from: stranger)) == .notInRoom)
    }

    @Test(arguments: CoreBackend.allCases)
    func invalidMasksModesAndArgumentsAreRefusedInvalidArgument(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.member("alice", of: "r")
        let invalid: [(RoomMode, String)] = [
            (RoomMode(rawValue: 9), ""), (RoomMode(rawValue: 255), "x"), (.inviteOnly, "yes"), (.key, ""),
            (.key, String(repeating: "k", count: 65)), (.memberLimit, "0"), (.memberLimit, "1000001"), (.memberLimit, "+5"),
            (.memberLimit, "five"), (.memberLimit, ""), (.ban, "alice"), (.ban, "host:1.2.3.4"), (.ban, "address:1.2.3.4/33"),
            (.ban, "address:::1/129"), (.ban, "address:1.2.3"), (.ban, "address:1.2.3.4/-1"), (.ban, "address:1.2.3.4/+8"),
            (.ban, "nick:"), (.ban, "nick:bad!nick"), (.ban, "room:r"), (.registered, "alice"),
        ]
        for (mode, argument) in invalid {
            let refused = await chat.send(.setMode(room: "r", mode: mode, on: true, argument: argument), from: alice)
            #expect(errorCode(to: alice, in: refused) == .invalidArgument, "\(mode) \(argument)")
        }
        #expect(chat.roomModes(of: "r") == RoomModes(ops: ["alice"]))
    }

    @Test(arguments: CoreBackend.allCases)
    func aKickReachesVersion4MembersAsKickedAndOlderOnesAsLeftWithOneSeqAndEndsTheMembership(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.member("alice", of: "r")
        let bob = await chat.member("bob", of: "r")
        let old = await chat.member("old", of: "r", version: 1)
        let kick = await chat.send(.kick(room: "r", nick: "bob", reason: "spam"), from: alice)
        let kicked = frames(to: alice, in: kick)
        guard case .kicked("r", let seq, _, "bob", "alice", "spam")? = kicked.first else {
            Issue.record("alice sees bob kicked: \(kicked)")
            return
        }
        #expect(frames(to: bob, in: kick) == kicked, "bob is told, as the room's last event for him")
        guard case .left("r", seq, _, "bob")? = frames(to: old, in: kick).first else {
            Issue.record("a version 1 member sees left with the kick's seq \(seq): \(frames(to: old, in: kick))")
            return
        }
        // Its requests for the room, sent before it read the kick, find it not a member.
        for request: Frame in [.say(room: "r", text: "still here"), .setTopic(room: "r", text: "x"), .part(room: "r")] {
            let refused = await chat.send(request, from: bob)
            #expect(errorCode(to: bob, in: refused) == .notInRoom, "\(request)")
            #expect(frames(to: alice, in: refused).isEmpty, "the room hears nothing of \(request)")
        }
        #expect(chat.memberNicks(of: "r") == ["alice", "old"])
        // Nobody but the founder kicks the founder: an op of a registered room may not.
        await chat.logIn(alice, as: "alice")
        #expect(frames(to: alice, in: await chat.send(.setMode(room: "r", mode: .registered, on: true, argument: ""), from: alice)).count == 1)
        let carol = await chat.member("carol", of: "r")
        #expect(errorCode(to: carol, in: await chat.send(.kick(room: "r", nick: "alice", reason: ""), from: carol)) == .notOperator)
        _ = await chat.send(.setMode(room: "r", mode: .op, on: true, argument: "carol"), from: alice)
        #expect(errorCode(to: carol, in: await chat.send(.kick(room: "r", nick: "alice", reason: ""), from: carol)) == .notOperator)
        #expect(errorCode(to: carol, in: await chat.send(.setMode(room: "r", mode: .op, on: false, argument: "alice"), from: carol)) == .notOperator)
    }

    @Test(arguments: CoreBackend.allCases)
    func aMemberMidFloodReceivesNothingOfTheRoomAfterItsKickAndEveryAcceptedLineReachedTheOthers(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.member("alice", of: "r")
        let bob = await chat.member("bob", of: "r")
        var accepted: [String] = []
        var toBob: [Frame] = []
        var toAlice: [Frame] = []
        var kickSeq: UInt64?
        for line in 0..<200 {
            if line == 120 {
                let kick = await chat.send(.kick(room: "r", nick: "bob", reason: "flood"), from: alice)
                toBob += frames(to: bob, in: kick)
                toAlice += frames(to: alice, in: kick)
                if case .kicked(_, let seq, _, "bob", _, _)? = toBob.last { kickSeq = seq }
            }
            let said = await chat.send(.say(room: "r", text: "line \(line)"), from: bob)
            toBob += frames(to: bob, in: said)
            toAlice += frames(to: alice, in: said)
        }
        for case .message("r", _, _, "bob", let text) in toBob { accepted.append(text) }
        let kick = try #require(kickSeq, "bob saw his kick")
        #expect(accepted.count == 120)
        #expect(!toBob.contains { Self.seq(of: $0).map { $0 > kick } ?? false }, "no room event after seq \(kick) reached bob")
        let heard = toAlice.compactMap { if case .message("r", _, _, "bob", let text) = $0 { text } else { nil } }
        #expect(heard == accepted, "every line bob saw echoed reached alice")
        #expect(toBob.filter { if case .error(.notInRoom, false, .say, _) = $0 { true } else { false } }.count == 80)
    }

    private static func seq(of frame: Frame) -> UInt64? {
        switch frame {
        case .message(_, let seq, _, _, _), .action(_, let seq, _, _, _), .joined(_, let seq, _, _), .left(_, let seq, _, _),
            .quit(_, let seq, _, _, _), .topic(_, let seq, _, _, _), .kicked(_, let seq, _, _, _, _), .modeChanged(_, let seq, _, _, _, _, _):
            seq
        default: nil
        }
    }

    @Test(arguments: CoreBackend.allCases)
    func aModeratedRoomRefusesUnvoicedSpeakersOfEveryVersionAndATopicLockRefusesNonOps(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.member("alice", of: "r")
        let bob = await chat.member("bob", of: "r")
        let old = await chat.member("old", of: "r", version: 1)
        let set = await chat.send(.setMode(room: "r", mode: .moderated, on: true, argument: ""), from: alice)
        #expect(frames(to: bob, in: set).contains { if case .modeChanged("r", _, _, "alice", .moderated, true, "") = $0 { true } else { false } })
        #expect(frames(to: old, in: set).isEmpty, "a version 1 member is not sent modeChanged")
        #expect(errorCode(to: old, in: await chat.send(.say(room: "r", text: "hi"), from: old)) == .moderated)
        #expect(errorCode(to: bob, in: await chat.send(.emote(room: "r", text: "waves"), from: bob)) == .moderated)
        #expect(errorCode(to: alice, in: await chat.send(.say(room: "r", text: "ops speak"), from: alice)) == nil)
        _ = await chat.send(.setMode(room: "r", mode: .voice, on: true, argument: "bob"), from: alice)
        #expect(errorCode(to: bob, in: await chat.send(.say(room: "r", text: "voiced"), from: bob)) == nil)
        // The voice follows bob's nick change and ends when he leaves.
        _ = await chat.send(.changeNick(nick: "robert"), from: bob)
        #expect(errorCode(to: bob, in: await chat.send(.say(room: "r", text: "still voiced"), from: bob)) == nil)
        _ = await chat.send(.part(room: "r"), from: bob)
        _ = await chat.send(.join(room: "r"), from: bob)
        #expect(errorCode(to: bob, in: await chat.send(.say(room: "r", text: "no more"), from: bob)) == .moderated)

        _ = await chat.send(.setMode(room: "r", mode: .topicLock, on: true, argument: ""), from: alice)
        #expect(errorCode(to: bob, in: await chat.send(.setTopic(room: "r", text: "mine"), from: bob)) == .notOperator)
        #expect(errorCode(to: old, in: await chat.send(.setTopic(room: "r", text: "mine"), from: old)) == .notOperator)
        #expect(errorCode(to: alice, in: await chat.send(.setTopic(room: "r", text: "ops only"), from: alice)) == nil)
    }

    @Test(arguments: CoreBackend.allCases)
    func banEvasionANickBanIsEvadedByANickChangeWhileAccountAndAddressBansHoldAcrossReconnects(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.member("alice", of: "r")
        // A nick ban stops that nick only: the same session under another nick gets in (documented).
        _ = await chat.send(.setMode(room: "r", mode: .ban, on: true, argument: "NICK:Mallory"), from: alice)
        let mallory = await chat.connect("mallory", version: 1, from: "192.0.2.7")
        #expect(errorCode(to: mallory, in: await chat.send(.join(room: "r"), from: mallory)) == .banned, "banned, shown to a version 1 client")
        _ = await chat.send(.changeNick(nick: "mallory2"), from: mallory)
        #expect(errorCode(to: mallory, in: await chat.send(.join(room: "r"), from: mallory)) == nil, "a nick ban is evaded by a nick change")
        // Bans are listed oldest first: a second passes between them.
        chat.now.wallMillis += 1_000
        let kicked = await chat.send(.setMode(room: "r", mode: .ban, on: true, argument: "address:192.0.2.0/24 a flood"), from: alice)
        #expect(frames(to: alice, in: kicked).contains { if case .modeChanged(_, _, _, _, .ban, true, "address:192.0.2.0/24 a flood") = $0 { true } else { false } })
        #expect(frames(to: alice, in: kicked).contains { if case .kicked("r", _, _, "mallory2", "alice", "banned (address:192.0.2.0/24): a flood") = $0 { true } else { false } })
        #expect(frames(to: mallory, in: kicked).contains { if case .left("r", _, _, "mallory2") = $0 { true } else { false } }, "turning a ban on kicks")

        // Reconnecting from the network under a new nick does not help.
        _ = await chat.disconnect(mallory, reason: "gone")
        let again = await chat.connect("innocent", version: 4, from: "192.0.2.200")
        #expect(errorCode(to: again, in: await chat.send(.join(room: "r"), from: again)) == .banned)
        // An account ban holds whatever the nick or address.
        let eve = await chat.connect("eve", version: 4, from: "198.51.100.1")
        await chat.logIn(eve, as: "eve")
        chat.now.wallMillis += 1_000
        _ = await chat.send(.setMode(room: "r", mode: .ban, on: true, argument: "account:Eve"), from: alice)
        _ = await chat.send(.changeNick(nick: "notEve"), from: eve)
        #expect(errorCode(to: eve, in: await chat.send(.join(room: "r"), from: eve)) == .banned)
        _ = await chat.disconnect(eve, reason: "gone")
        let eveAgain = await chat.connect("eve3", version: 4, from: "203.0.113.9")
        await chat.logIn(eveAgain, as: "eve")
        #expect(errorCode(to: eveAgain, in: await chat.send(.join(room: "r"), from: eveAgain)) == .banned)
        // IPv6 by prefix, in canonical form.
        chat.now.wallMillis += 1_000
        let six = await chat.send(.setMode(room: "r", mode: .ban, on: true, argument: "address:2001:DB8:0:0:1::5/48"), from: alice)
        #expect(frames(to: alice, in: six).contains { if case .modeChanged(_, _, _, _, .ban, true, "address:2001:db8::/48") = $0 { true } else { false } })
        let v6 = await chat.connect("six", version: 4, from: "2001:db8:0:ffff::1")
        #expect(errorCode(to: v6, in: await chat.send(.join(room: "r"), from: v6)) == .banned)
        let listed = frames(to: alice, in: await chat.send(.listBans(room: "r"), from: alice))
        guard case .banList("r", let entries)? = listed.first else {
            Issue.record("a ban list: \(listed)")
            return
        }
        #expect(entries.map(\.mask) == ["nick:mallory", "address:192.0.2.0/24", "account:eve", "address:2001:db8::/48"])
        #expect(entries.allSatisfy { $0.setBy == "alice" })
        #expect(entries.map(\.reason) == ["", "a flood", "", ""], "a ban keeps the reason given after its mask")
    }

    @Test(arguments: CoreBackend.allCases)
    func floodingBansAndInvitationsCannotGrowARoomPastItsCaps(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.member("alice", of: "r")
        var full = 0
        for index in 0..<150 {
            let set = await chat.send(.setMode(room: "r", mode: .ban, on: true, argument: "nick:spam\(index)"), from: alice)
            if errorCode(to: alice, in: set) == .listFull { full += 1 }
        }
        #expect(full == 50, "the 101st to 150th bans are refused listFull")
        #expect(chat.banCount(of: "r") == ModerationLimits.maxRoomBans)
        // Lifting one makes room for one.
        _ = await chat.send(.setMode(room: "r", mode: .ban, on: false, argument: "nick:spam0"), from: alice)
        #expect(errorCode(to: alice, in: await chat.send(.setMode(room: "r", mode: .ban, on: true, argument: "nick:late"), from: alice)) == nil)

        var invited: [ClientID] = []
        for index in 0..<130 { invited.append(await chat.connect("guest\(index)", version: 4)) }
        for index in 0..<130 {
            let sent = await chat.send(.invite(room: "r", nick: "guest\(index)"), from: alice)
            #expect(frames(to: invited[index], in: sent) == [.invited(room: "r", nick: "guest\(index)", by: "alice")])
        }
        #expect(chat.invitationCount(of: "r") == ModerationLimits.maxInvitations, "the oldest invitations went")
        _ = await chat.send(.setMode(room: "r", mode: .inviteOnly, on: true, argument: ""), from: alice)
        #expect(errorCode(to: invited[0], in: await chat.send(.join(room: "r"), from: invited[0])) == .inviteOnly, "an invitation pushed out")
        #expect(errorCode(to: invited[129], in: await chat.send(.join(room: "r"), from: invited[129])) == nil)
        // An invitation is good for one join.
        _ = await chat.send(.part(room: "r"), from: invited[129])
        #expect(errorCode(to: invited[129], in: await chat.send(.join(room: "r"), from: invited[129])) == .inviteOnly)
        // And for an hour (no tick: it would let the idle guests go). A server on its own counts
        // it on its uptime, a cluster on Redis's clock: both move.
        chat.now.uptimeMillis += ModerationLimits.invitationLifetime
        chat.now.wallMillis += ModerationLimits.invitationLifetime
        #expect(errorCode(to: invited[128], in: await chat.send(.join(room: "r"), from: invited[128])) == .inviteOnly)
    }

    @Test(arguments: CoreBackend.allCases)
    func guessingARoomKeyIsThrottledPerAddressAndAMemberLimitRefusesRoomFull(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) { $0.accounts.loginAttemptsPerAddress = 5 }
        let alice = await chat.member("alice", of: "r")
        _ = await chat.send(.setMode(room: "r", mode: .key, on: true, argument: "s3cret"), from: alice)
        let guesser = await chat.connect("guesser", version: 4, from: "198.51.100.7")
        #expect(errorCode(to: guesser, in: await chat.send(.join(room: "r"), from: guesser)) == .badRoomKey)
        var answers: [ErrorCode?] = []
        for guess in 0..<8 {
            answers.append(errorCode(to: guesser, in: await chat.send(.joinWithKey(room: "r", key: "guess\(guess)"), from: guesser)))
        }
        #expect(answers == Array(repeating: .badRoomKey, count: 5) + Array(repeating: .throttled, count: 3))
        // Throttled, the right key is not even compared; from another address it works.
        #expect(errorCode(to: guesser, in: await chat.send(.joinWithKey(room: "r", key: "s3cret"), from: guesser)) == .throttled)
        let friend = await chat.connect("friend", version: 4, from: "198.51.100.8")
        #expect(errorCode(to: friend, in: await chat.send(.joinWithKey(room: "r", key: "s3cret"), from: friend)) == nil)
        // `who` shows the key to members only: to anyone else it would be a free pass.
        let keyOf = { (answer: [Frame]) in answer.compactMap { if case .roomModes(_, let modes) = $0 { modes.key } else { nil } }.first }
        #expect(keyOf(frames(to: guesser, in: await chat.send(.who(room: "r"), from: guesser))) == "")
        #expect(keyOf(frames(to: friend, in: await chat.send(.who(room: "r"), from: friend))) == "s3cret")
        // The window ends and the guesser's address may try again.
        _ = await chat.tick(advancingBy: 60_000)
        #expect(errorCode(to: guesser, in: await chat.send(.joinWithKey(room: "r", key: "s3cret"), from: guesser)) == nil)

        _ = await chat.send(.setMode(room: "r", mode: .memberLimit, on: true, argument: "3"), from: alice)
        let fourth = await chat.connect("fourth", version: 4)
        #expect(errorCode(to: fourth, in: await chat.send(.joinWithKey(room: "r", key: "s3cret"), from: fourth)) == .roomFull)
        _ = await chat.send(.invite(room: "r", nick: "fourth"), from: alice)
        #expect(errorCode(to: fourth, in: await chat.send(.join(room: "r"), from: fourth)) == nil, "an invitation passes the key and the limit")
    }

    @Test(arguments: CoreBackend.allCases)
    func nobodyTakesOverARegisteredRoomByJoiningItFirstWhileItsFounderIsAway(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice", version: 4)
        await chat.logIn(alice, as: "alice")
        _ = await chat.send(.join(room: "r"), from: alice)
        #expect(errorCode(to: alice, in: await chat.send(.setMode(room: "r", mode: .registered, on: true, argument: ""), from: alice)) == nil)
        _ = await chat.send(.setMode(room: "r", mode: .topicLock, on: true, argument: ""), from: alice)
        _ = await chat.send(.setMode(room: "r", mode: .ban, on: true, argument: "nick:troll"), from: alice)
        let bob = await chat.member("bob", of: "r")
        await chat.logIn(bob, as: "bob")
        _ = await chat.send(.setMode(room: "r", mode: .voice, on: true, argument: "bob"), from: alice)
        _ = await chat.disconnect(alice, reason: "gone")
        _ = await chat.disconnect(bob, reason: "gone")
        #expect(chat.memberNicks(of: "r").isEmpty)

        let mallory = await chat.connect("mallory", version: 4)
        let joined = await chat.send(.join(room: "r"), from: mallory)
        let modes = try #require(roomModes(to: mallory, in: joined, room: "r"))
        #expect(modes.ops.isEmpty, "joining an empty registered room first gives no ops")
        #expect(modes.founder == "alice" && modes.topicLock, "the registered room kept its settings while empty")
        #expect(errorCode(to: mallory, in: await chat.send(.setMode(room: "r", mode: .registered, on: true, argument: ""), from: mallory)) == .notOperator)
        #expect(errorCode(to: mallory, in: await chat.send(.setTopic(room: "r", text: "mine"), from: mallory)) == .notOperator)
        let troll = await chat.connect("troll", version: 4)
        #expect(errorCode(to: troll, in: await chat.send(.join(room: "r"), from: troll)) == .banned)
        // The founder comes back and is op; bob's voice was given to his account.
        let founder = await chat.connect("alice", version: 4)
        await chat.logIn(founder, as: "alice")
        #expect(roomModes(to: founder, in: await chat.send(.join(room: "r"), from: founder), room: "r")?.ops == ["alice"])
        let bobAgain = await chat.connect("bob", version: 4)
        await chat.logIn(bobAgain, as: "bob")
        // Bob logged in after he joined: his account's voice is kept all the same.
        #expect(roomModes(to: bobAgain, in: await chat.send(.join(room: "r"), from: bobAgain), room: "r")?.voices == ["bob"])
        // Only the founder unregisters.
        _ = await chat.send(.setMode(room: "r", mode: .op, on: true, argument: "mallory"), from: founder)
        #expect(errorCode(to: mallory, in: await chat.send(.setMode(room: "r", mode: .registered, on: false, argument: ""), from: mallory)) == .notOperator)
        #expect(errorCode(to: founder, in: await chat.send(.setMode(room: "r", mode: .registered, on: false, argument: ""), from: founder)) == nil)
    }

    @Test(arguments: CoreBackend.allCases)
    func oneAccountCannotRegisterRoomsWithoutBound(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice", version: 4)
        await chat.logIn(alice, as: "alice")
        var answers: [ErrorCode?] = []
        for index in 0..<12 {
            _ = await chat.send(.join(room: "r\(index)"), from: alice)
            answers.append(errorCode(to: alice, in: await chat.send(.setMode(room: "r\(index)", mode: .registered, on: true, argument: ""), from: alice)))
        }
        #expect(answers == Array(repeating: nil, count: ModerationLimits.maxRegisteredRoomsPerAccount) + [.listFull, .listFull])
        #expect(chat.registeredRoomCount == ModerationLimits.maxRegisteredRoomsPerAccount)
        // Unregistering one makes room for another.
        _ = await chat.send(.setMode(room: "r0", mode: .registered, on: false, argument: ""), from: alice)
        #expect(errorCode(to: alice, in: await chat.send(.setMode(room: "r10", mode: .registered, on: true, argument: ""), from: alice)) == nil)
    }

    /// Memory and SQLite: a cluster drops an account in Redis (RoomModerationTests'
    /// `aDroppedAccountLeavesNoRoomsNorRolesAndRegistrationsAreBounded`, against a real Redis).
    @Test(arguments: [CoreBackend.memory, .sqlite])
    func whoeverRegistersADroppedAccountsNickInheritsNeitherItsRoomsNorItsRoles(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice", version: 4)
        await chat.logIn(alice, as: "alice")
        let bob = await chat.connect("bob", version: 4)
        await chat.logIn(bob, as: "bob")
        for room in ["empty", "busy"] {
            _ = await chat.send(.join(room: room), from: alice)
            _ = await chat.send(.setMode(room: room, mode: .registered, on: true, argument: ""), from: alice)
        }
        _ = await chat.send(.join(room: "carols"), from: bob)
        _ = await chat.send(.setMode(room: "carols", mode: .registered, on: true, argument: ""), from: bob)
        _ = await chat.send(.join(room: "carols"), from: alice)
        _ = await chat.send(.setMode(room: "carols", mode: .op, on: true, argument: "alice"), from: bob)
        _ = await chat.send(.part(room: "empty"), from: alice)
        _ = await chat.send(.part(room: "carols"), from: alice)
        chat.core.accountDropped("alice")
        #expect(chat.core.moderation.registered.keys.sorted() == ["carols"])
        #expect(chat.core.moderation.registered["carols"]?.accountRoles["alice"] == nil)
        #expect(chat.core.rooms["busy"]?.moderation.settings.founder == nil)
        // The nick registered anew: no founder's ops in "empty", no op in "carols".
        let heir = await chat.connect("heir", version: 4)
        await chat.logIn(heir, as: "alice")
        _ = await chat.send(.join(room: "carols"), from: heir)
        #expect(chat.core.rooms["carols"]?.moderation.ops.contains(heir) == false)
        #expect(chat.core.moderation.writes.contains(.room("empty", nil)), "the store forgets the room too")
    }

    @Test func registeredRoomsAndServerBansComeBackFromTheStoreInANewCore() async throws {
        var chat = try await Harness(.memory) { $0.accounts.setAdminAccounts(["root"]) }
        let alice = await chat.connect("alice", version: 4)
        await chat.logIn(alice, as: "alice")
        _ = await chat.send(.join(room: "r"), from: alice)
        _ = await chat.send(.setMode(room: "r", mode: .registered, on: true, argument: ""), from: alice)
        _ = await chat.send(.setMode(room: "r", mode: .inviteOnly, on: true, argument: ""), from: alice)
        let root = await chat.connectOperator("root")
        _ = await chat.send(.serverBan(on: true, mask: "address:203.0.113.0/24", reason: "flood"), from: root)
        let store = MemoryModerationStore()
        let done = DispatchSemaphoreBox()
        store.apply(chat.core.takeModerationWrites(), replyOn: done.queue) { _ in done.signal() }
        done.wait()

        var restarted = try await Harness(.memory)
        restarted.core.loadModeration(try store.loadAll())
        let mallory = await restarted.connect("mallory", version: 4)
        #expect(errorCode(to: mallory, in: await restarted.send(.join(room: "r"), from: mallory)) == .inviteOnly)
        let (banned, refusal) = restarted.open(from: "203.0.113.50")
        guard case .disconnect(banned, let disconnection, _)? = refusal.first else {
            Issue.record("a banned address is refused at connect: \(refusal)")
            return
        }
        #expect(disconnection.code == .banned && disconnection.reason.contains("flood"))
    }

    @Test(arguments: CoreBackend.allCases)
    func aServerOperatorBansAnAddressKillsClosesARoomAndActsAsOpWithoutBeingAMember(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) { $0.accounts.setAdminAccounts(["Root"]) }
        let root = await chat.connectOperator("root")
        let alice = await chat.member("alice", of: "r")
        let spammer = await chat.member("spammer", of: "r", version: 2, from: "203.0.113.5")
        let neighbour = await chat.connect("neighbour", version: 1, from: "203.0.113.77")
        // Op powers in a room it is not in.
        _ = await chat.send(.setMode(room: "r", mode: .moderated, on: true, argument: ""), from: root)
        #expect(chat.roomModes(of: "r")?.moderated == true)

        let ban = await chat.send(.serverBan(on: true, mask: "address:203.0.113.0/24", reason: "flood"), from: root)
        // A node cannot count the sessions other nodes end.
        let told = backend == .cluster ? "banned address:203.0.113.0/24 on every node" : "banned address:203.0.113.0/24; ended 2 sessions"
        #expect(frames(to: root, in: ban) == [.done(request: .serverBan, text: told)])
        for id in [spammer, neighbour] {
            guard case .disconnect(id, let disconnection, _)? = ban.first(where: { if case .disconnect(id, _, _) = $0 { true } else { false } }) else {
                Issue.record("\(id) is let go")
                continue
            }
            #expect(disconnection.code == .banned)
        }
        #expect(frames(to: alice, in: ban).contains { if case .quit("r", _, _, "spammer", _) = $0 { true } else { false } })
        #expect(chat.open(from: "203.0.113.8").1.first.map { if case .disconnect(_, let d, _) = $0 { d.code == .banned } else { false } } == true)

        // A nick ban at hello and at a nick change; an account ban at login.
        _ = await chat.send(.serverBan(on: true, mask: "nick:villain", reason: ""), from: root)
        let (villain, _) = chat.open()
        #expect(errorCode(to: villain, in: await chat.send(.hello(version: 4, nick: "Villain", password: nil), from: villain)) == .banned)
        let sly = await chat.connect("sly", version: 4)
        #expect(errorCode(to: sly, in: await chat.send(.changeNick(nick: "villain"), from: sly)) == .banned)

        let listed = frames(to: root, in: await chat.send(.listBans(room: ""), from: root))
        guard case .banList("", let entries)? = listed.first else {
            Issue.record("the server's bans: \(listed)")
            return
        }
        #expect(entries.map(\.mask) == ["address:203.0.113.0/24", "nick:villain"])

        let bob = await chat.member("bob", of: "r", version: 1)
        let killed = await chat.send(.kill(nick: "bob", reason: "abuse"), from: root)
        #expect(frames(to: root, in: killed) == [.done(request: .kill, text: "killed bob")])
        #expect(killed.contains { if case .disconnect(bob, let d, _) = $0 { d.code == .killed } else { false } })
        #expect(frames(to: alice, in: killed).contains { if case .quit("r", _, _, "bob", let reason) = $0 { reason.contains("abuse") } else { false } })

        // A server operator enters a room that would refuse anyone else.
        _ = await chat.send(.setMode(room: "r", mode: .inviteOnly, on: true, argument: ""), from: root)
        _ = await chat.send(.setMode(room: "r", mode: .ban, on: true, argument: "account:root"), from: root)
        #expect(errorCode(to: root, in: await chat.send(.join(room: "r"), from: root)) == nil)
        // A member that is a server operator but no op there sets a locked topic, as it sets modes.
        _ = await chat.send(.setMode(room: "r", mode: .topicLock, on: true, argument: ""), from: root)
        #expect(errorCode(to: root, in: await chat.send(.setTopic(room: "r", text: "the operator's"), from: root)) == nil)
        _ = await chat.send(.part(room: "r"), from: root)
        let closed = await chat.send(.serverBan(on: true, mask: "room:r", reason: "closed"), from: root)
        #expect(frames(to: alice, in: closed).contains { if case .kicked("r", _, _, "alice", "root", _) = $0 { true } else { false } })
        #expect(errorCode(to: alice, in: await chat.send(.join(room: "r"), from: alice)) == .banned)
        _ = await chat.send(.serverBan(on: false, mask: "room:r", reason: ""), from: root)
        #expect(errorCode(to: alice, in: await chat.send(.join(room: "r"), from: alice)) == nil)
    }

    @Test func aClusterNodeChecksWhatItCanAloneAndLeavesTheRoomsRulesToRedis() async throws {
        // The in-memory cluster does not run the append script's checks (RoomModerationTests and
        // ClusterModerationTests run them in a real Redis): this is what the node does itself.
        var chat = try await Harness(.cluster)
        let alice = await chat.connect("alice", version: 4)
        let bob = await chat.connect("bob", version: 1)
        _ = await chat.send(.join(room: "r"), from: alice)
        _ = await chat.send(.join(room: "r"), from: bob)
        let invalid = await chat.send(.setMode(room: "r", mode: .memberLimit, on: true, argument: "lots"), from: alice)
        #expect(errorCode(to: alice, in: invalid) == .invalidArgument, "an argument is checked on the node")
        #expect(errorCode(to: alice, in: await chat.send(.kick(room: "elsewhere", nick: "bob", reason: ""), from: alice)) == .notInRoom)
        let moderated = await chat.send(.setMode(room: "r", mode: .moderated, on: true, argument: ""), from: alice)
        #expect(frames(to: alice, in: moderated).contains { if case .modeChanged("r", _, _, "alice", .moderated, true, "") = $0 { true } else { false } })
        #expect(frames(to: bob, in: moderated).isEmpty, "a version 1 member does not know the frame")
        let kicked = await chat.send(.kick(room: "r", nick: "bob", reason: "spam"), from: alice)
        #expect(frames(to: alice, in: kicked).contains { if case .kicked("r", _, _, "bob", "alice", "spam") = $0 { true } else { false } })
        #expect(frames(to: bob, in: kicked).contains { if case .left("r", _, _, "bob") = $0 { true } else { false } }, "a kick is left to version 1")
        #expect(errorCode(to: bob, in: await chat.send(.say(room: "r", text: "still here?"), from: bob)) == .notInRoom, "bob is out of the room")
        for request: Frame in [.serverBan(on: true, mask: "nick:x", reason: ""), .kill(nick: "bob", reason: ""), .listBans(room: "")] {
            #expect(errorCode(to: alice, in: await chat.send(request, from: alice)) == .notAdmin, "\(request)")
        }
    }
}

/// A semaphore and a queue for a store's completion, in a test that waits for it.
private final class DispatchSemaphoreBox: Sendable {
    let queue = DispatchQueue(label: "ChatCoreModerationTests")
    private let semaphore = DispatchSemaphore(value: 0)
    func signal() { semaphore.signal() }
    func wait() { semaphore.wait() }
}
