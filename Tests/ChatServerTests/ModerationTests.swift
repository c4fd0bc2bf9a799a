import ChatProtocol
import Foundation
import Glibc
import SocketCore
import Testing
import TestSupport

/// Room moderation against the real `chat-server`, in every mode: a kick in the middle of a
/// flood, takeover of a registered room across a restart, a server operator's address ban of a
/// live session, key guessing, ban evasion, and what clients of versions 1 to 3 see. The rules one
/// by one are ChatCoreModerationTests'; across the nodes of a cluster, ClusterModerationTests'.
@Suite("Room moderation against the real server", .serialized)
struct ModerationTests {
    /// The modes that keep a registered room across a restart of the server itself (a cluster
    /// keeps it in Redis, across restarts of its nodes: ClusterModerationTests).
    static let modes: [ServerMode] = [.durable, .memory]
    static let everyMode: [ServerMode] = [.durable, .memory, .cluster]

    /// Registers `nick` (a version 4 session), which logs it in.
    private static func registered(_ nick: String, on server: ChatServerProcess) async throws -> TestClient {
        let client = try await TestClient.connect(to: server, nick: nick, version: 4)
        try await client.send(.register(password: "pw-\(nick)"))
        #expect(try await registration(of: client) == .registered(account: nick))
        return client
    }

    /// Makes the server operator's account `name` (password `pw-NAME`, as `registered` gives) as
    /// its operator does, with `chat-server account add NAME` and `place` (`--data-dir` of a
    /// stopped server, or `--cluster`): a client may not register a name in `--admin-account`.
    static func createOperator(_ name: String, _ place: [String]) async throws {
        let directory = try TemporaryDirectory(prefix: "chat-operator")
        defer { directory.remove() }
        try "pw-\(name)\n".write(toFile: directory.path + "/password", atomically: true, encoding: .utf8)
        let created = try await AccountAttackTests.accountCommand(["add", name, "--password-file", directory.path + "/password"] + place)
        #expect(created.status == 0, "chat-server account add \(name): \(created.output)")
    }

    /// Logs a new version 4 session in to `account` (registered earlier with `registered`).
    static func loggedIn(_ account: String, on server: ChatServerProcess) async throws -> TestClient {
        let client = try await TestClient.connect(to: server, nick: "guest\(Int.random(in: 1000...9999))", version: 4)
        try await client.send(.login(account: account, password: "pw-\(account)"))
        _ = try await client.waitFor("logged in as \(account)") { $0 == .loggedIn(account: account) ? true : nil }
        return client
    }

    /// The answer to a request: the next `roomModes`, `done`, `banList`, `modeChanged` or `error`.
    private static func answer(at client: TestClient, _ what: String) async throws -> Frame {
        try await client.waitFor(what) { frame -> Frame? in
            switch frame {
            case .roomModes, .done, .banList, .modeChanged, .error: frame
            default: nil
            }
        }
    }

    /// Joins `client`, of any version, to `room` and reads its join up to the last frame that
    /// lists the members (`roomModes` for version 4).
    private static func join(_ client: TestClient, _ room: String) async throws {
        try await client.send(.join(room: room))
        let version = client.connection.welcome.version
        _ = try await client.waitFor("\(client.nick)'s join of #\(room)") { frame -> Bool? in
            switch frame {
            case .roomModes(room, _): true
            case .membersPage(room, true, _) where version < 4: true
            case .members(room, _) where version == 1: true
            default: nil
            }
        }
    }

    @Test(arguments: everyMode)
    func aMemberKickedMidFloodReceivesNothingOfTheRoomAfterItsKickAndEveryLineItSawEchoedReachedTheOthers(
        _ mode: ServerMode
    ) async throws {
        let server = try await ChatServerProcess(mode, arguments: ["--no-rate-limits", "--handshake-timeout", "60"])
        defer { server.stop() }
        let alice = try await TestClient.connect(to: server, nick: "alice", version: 4)
        let bob = try await TestClient.connect(to: server, nick: "bob", version: 4)
        let old = try await TestClient.connect(to: server, nick: "old", version: 1)
        defer {
            alice.close()
            bob.close()
            old.close()
        }
        try await Self.join(alice, "r")
        try await Self.join(bob, "r")
        try await Self.join(old, "r")
        // Bob floods in batches until he reads his kick, so the kick lands mid-flood; then one
        // batch more, sent after he read it.
        let batch = 100
        let kickAfter = "line 300"
        let kickRead = Locked(false)
        let sender = Task { () -> Int in
            var sent = 0
            while sent < 20_000, !kickRead.withLock({ $0 }) {
                try await bob.send((sent..<sent + batch).map { Frame.say(room: "r", text: "line \($0)") })
                sent += batch
                // Paces the flood (not a wait for a condition): unpaced, the server serves all
                // the lines before alice has read line 300, and the kick lands after the flood.
                // The bound only ends a test whose kick never comes; under a full suite's load
                // 5,000 lines were once not enough.
                try await Task.sleep(for: .milliseconds(2))
            }
            return sent
        }
        _ = try await alice.waitFor("bob's \(kickAfter)") { if case .message("r", _, _, "bob", kickAfter) = $0 { true } else { nil } }
        try await alice.send(.kick(room: "r", nick: "bob", reason: "flood"))

        var toBob: [Frame] = []
        let kickSeq = try await bob.waitFor("bob's kick") { frame -> UInt64? in
            toBob.append(frame)
            if case .kicked("r", let seq, _, "bob", "alice", "flood") = frame { return seq }
            return nil
        }
        kickRead.withLock { $0 = true }
        let flood = try await sender.value
        let late = batch
        try await bob.send((0..<late).map { Frame.say(room: "r", text: "late \($0)") } + [.ping(token: 77)])
        while true {
            let frame = try await bob.expectFrame("bob's pong")
            if case .pong(77) = frame { break }
            toBob.append(frame)
        }
        let echoed = toBob.compactMap { if case .message("r", _, _, "bob", let text) = $0 { text } else { nil } }
        let refused = toBob.filter { if case .error(.notInRoom, false, .say, _) = $0 { true } else { false } }.count
        let afterKick = toBob.filter { Self.roomSeq(of: $0).map { $0 > kickSeq } ?? false }
        #expect(afterKick.isEmpty, "no event of #r after the kick (seq \(kickSeq)) reached bob: \(afterKick.prefix(3))")
        #expect(echoed.count + refused == flood + late, "every line was echoed or refused: \(echoed.count) + \(refused)")
        #expect(!echoed.contains { $0.hasPrefix("late") })
        #expect(refused >= late, "at least the lines sent after bob read his kick were refused")

        var heard: [String] = []
        let aliceKickSeq = try await alice.waitFor("the kick at alice") { frame -> UInt64? in
            if case .message("r", _, _, "bob", let text) = frame { heard.append(text) }
            if case .kicked("r", let seq, _, "bob", _, _) = frame { return seq }
            return nil
        }
        #expect(aliceKickSeq == kickSeq)
        // Alice read bob's lines up to the kick's trigger before the loop (`waitFor` skipped them).
        let beforeTrigger = (0...300).map { "line \($0)" }
        #expect(beforeTrigger + heard == echoed, "every line bob saw echoed reached alice, in order, before the kick")
        let oldSeq = try await old.waitFor("the kick at a version 1 member") { frame -> UInt64? in
            if case .left("r", let seq, _, "bob") = frame { return seq }
            return nil
        }
        #expect(oldSeq == kickSeq, "a version 1 member sees left with the kick's seq")
        print("kick mid-flood (\(mode)): of \(flood) lines sent before bob read his kick, \(echoed.count) were echoed and \(refused - late) refused")
    }

    private static func roomSeq(of frame: Frame) -> UInt64? {
        switch frame {
        case .message("r", let seq, _, _, _), .action("r", let seq, _, _, _), .joined("r", let seq, _, _), .left("r", let seq, _, _),
            .quit("r", let seq, _, _, _), .topic("r", let seq, _, _, _), .kicked("r", let seq, _, _, _, _),
            .modeChanged("r", let seq, _, _, _, _, _), .nickChanged("r", let seq, _, _, _):
            seq
        default: nil
        }
    }

    @Test(arguments: modes)
    func nobodyTakesOverARegisteredRoomWhoseFounderIsOfflineAndDurableModeKeepsItAcrossARestart(_ mode: ServerMode) async throws {
        let directory = try TemporaryDirectory(prefix: "chat-moderation")
        defer { directory.remove() }
        let storage = mode == .durable ? ["--data-dir", directory.path] : ["--no-persistence"]
        let arguments = storage + ["--handshake-timeout", "60"]
        do {
            let server = try await ChatServerProcess(mode, arguments: arguments)
            defer { server.stop() }
            let alice = try await Self.registered("alice", on: server)
            try await alice.send(.join(room: "r"))
            #expect(try await Self.answer(at: alice, "alice's roomModes") == .roomModes(room: "r", modes: RoomModes(ops: ["alice"])))
            try await alice.send(.setMode(room: "r", mode: .registered, on: true, argument: ""))
            #expect(try await Self.answer(at: alice, "registered").isModeChange(.registered, "alice"))
            try await alice.send(.setMode(room: "r", mode: .topicLock, on: true, argument: ""))
            #expect(try await Self.answer(at: alice, "topicLock").isModeChange(.topicLock, ""))
            try await alice.send(.setMode(room: "r", mode: .ban, on: true, argument: "nick:Troll"))
            #expect(try await Self.answer(at: alice, "ban").isModeChange(.ban, "nick:troll"))
            alice.close()

            // Founder offline, the room empty: the first to join gets no ops.
            let mallory = try await TestClient.connect(to: server, nick: "mallory", version: 4)
            defer { mallory.close() }
            try await mallory.send(.join(room: "r"))
            #expect(
                try await Self.answer(at: mallory, "mallory's roomModes")
                    == .roomModes(room: "r", modes: RoomModes(founder: "alice", topicLock: true)))
            try await mallory.send(.setMode(room: "r", mode: .registered, on: true, argument: ""))
            #expect(try await Self.answer(at: mallory, "a refusal").errorCode == .notOperator)
        }
        let server = try await ChatServerProcess(mode, arguments: arguments)
        defer { server.stop() }
        let mallory = try await TestClient.connect(to: server, nick: "mallory", version: 4)
        defer { mallory.close() }
        try await mallory.send(.join(room: "r"))
        let modes = try await Self.answer(at: mallory, "mallory's roomModes after the restart")
        if mode == .durable {
            #expect(modes == .roomModes(room: "r", modes: RoomModes(founder: "alice", topicLock: true)), "kept across the restart")
            try await mallory.send(.kick(room: "r", nick: "mallory", reason: ""))
            #expect(try await Self.answer(at: mallory, "a refusal").errorCode == .notOperator)
            let troll = try await TestClient.connect(to: server, nick: "troll", version: 1)
            defer { troll.close() }
            try await troll.send(.join(room: "r"))
            #expect(try await troll.waitFor("a refusal") { frame -> ErrorCode? in if case .error(let code, _, _, _) = frame { code } else { nil } } == .banned)
            let alice = try await Self.loggedIn("alice", on: server)
            defer { alice.close() }
            try await alice.send(.join(room: "r"))
            #expect(
                try await Self.answer(at: alice, "the founder's roomModes")
                    == .roomModes(room: "r", modes: RoomModes(founder: "alice", topicLock: true, ops: ["alice"])))
            // The others learn the role the founder took with a mode change.
            #expect(try await Self.answer(at: mallory, "the founder's op").isModeChange(.op, "alice"))
        } else {
            // Memory mode keeps registered rooms in memory only (docs/SERVER.md): after a restart
            // the room is new and its first joiner is its op.
            #expect(modes == .roomModes(room: "r", modes: RoomModes(ops: ["mallory"])), "memory mode forgets at a restart")
        }
    }

    /// A server operator's account is the operator's to make (`chat-server account add`), which
    /// a server with `--no-persistence` has nowhere to keep: durable and cluster modes only
    /// (AccountAttackTests has the memory mode's warning and refusals).
    @Test(arguments: [ServerMode.durable, .cluster])
    func aServerOperatorsAddressBanEndsALiveSessionAndRefusesItsReconnectsAndKillEndsAnother(_ mode: ServerMode) async throws {
        let data = try TemporaryDirectory(prefix: "chat-moderation")
        defer { data.remove() }
        let storage = mode == .durable ? ["--data-dir", data.path + "/data"] : []
        if mode == .durable { try await Self.createOperator("root", storage) }
        let server = try await ChatServerProcess(mode, arguments: storage + ["--admin-account", "Root", "--handshake-timeout", "60"])
        defer { server.stop() }
        if mode == .cluster { try await Self.createOperator("root", ["--cluster", "redis://127.0.0.1:\(try #require(server.redis).port)"]) }
        let root = try await Self.loggedIn("root", on: server)
        let alice = try await TestClient.connect(to: server, nick: "alice", version: 4)
        defer {
            root.close()
            alice.close()
        }
        try await Self.join(alice, "r")
        let victim = try BlockingSocket(port: server.port, source: "127.0.0.2")
        defer { victim.close() }
        await victim.send([.hello(version: 2, nick: "spammer", password: nil), .join(room: "r")])
        _ = await frames(from: victim, until: { if case .joined("r", _, _, "spammer") = $0 { true } else { false } })
        _ = try await alice.waitFor("the spammer joining") { if case .joined("r", _, _, "spammer") = $0 { true } else { nil } }

        try await root.send(.serverBan(on: true, mask: "address:127.0.0.2", reason: "flood"))
        // A cluster node tells only that every node heard the ban: each ends its own sessions.
        let banned = mode == .cluster ? "banned address:127.0.0.2 on every node" : "banned address:127.0.0.2; ended 1 sessions"
        #expect(try await Self.answer(at: root, "done") == .done(request: .serverBan, text: banned))
        let (ending, ended) = await victim.readFrames()
        #expect(ended, "the banned session is closed")
        #expect(ending.contains { if case .error(.banned, true, _, let reason) = $0 { reason.contains("flood") } else { false } }, "\(ending)")
        _ = try await alice.waitFor("the spammer's quit") { if case .quit("r", _, _, "spammer", _) = $0 { true } else { nil } }

        // Reconnecting from the address, under any nick, is refused; another address is not.
        let again = try BlockingSocket(port: server.port, source: "127.0.0.2")
        defer { again.close() }
        await again.send([.hello(version: 4, nick: "innocent", password: nil)])
        #expect(await errorCode(from: again) == .banned)
        let neighbour = try await TestClient.connect(to: server, host: "127.0.0.1", nick: "neighbour", version: 1)
        neighbour.close()

        try await root.send(.listBans(room: ""))
        guard case .banList("", let entries) = try await Self.answer(at: root, "the server's bans") else {
            Issue.record("a ban list")
            return
        }
        #expect(entries.map(\.mask) == ["address:127.0.0.2"] && entries.first?.setBy == "root")

        let bob = try await TestClient.connect(to: server, nick: "bob", version: 3)
        defer { bob.close() }
        try await Self.join(bob, "r")
        try await root.send(.kill(nick: "bob", reason: "abuse"))
        #expect(try await Self.answer(at: root, "done") == .done(request: .kill, text: "killed bob"))
        let last = try await bob.readUntilClosed()
        #expect(last.contains { if case .error(.killed, true, _, _) = $0 { true } else { false } }, "\(last)")
        _ = try await alice.waitFor("bob's quit") { if case .quit("r", _, _, "bob", let reason) = $0 { reason.contains("abuse") ? true : nil } else { nil } }

        // An account ban ends a login to the account, and a registration of it.
        let carol = try await Self.registered("carol", on: server)
        carol.close()
        for mask in ["account:carol", "account:dave"] {
            try await root.send(.serverBan(on: true, mask: mask, reason: "no"))
            _ = try await Self.answer(at: root, "done")
        }
        let login = try await TestClient.connect(to: server, nick: "guest1", version: 4)
        try await login.send(.login(account: "carol", password: "pw-carol"))
        let refused = try await login.readUntilClosed()
        #expect(fatalError(in: refused)?.0 == .banned, "\(refused)")
        let dave = try await TestClient.connect(to: server, nick: "dave", version: 4)
        try await dave.send(.register(password: "pw-dave"))
        let registered = try await dave.readUntilClosed()
        #expect(fatalError(in: registered)?.0 == .banned, "\(registered)")
    }

    @Test(arguments: everyMode)
    func clientsOfVersions1To3AreRefusedModeratedAndBannedAndSeeAKickAsLeft(_ mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode, arguments: ["--handshake-timeout", "60"])
        defer { server.stop() }
        let op = try await TestClient.connect(to: server, nick: "op", version: 4)
        defer { op.close() }
        try await Self.join(op, "r")
        var olders: [TestClient] = []
        defer { for client in olders { client.close() } }
        for version: UInt16 in 1...3 {
            let client = try await TestClient.connect(to: server, nick: "v\(version)", version: version)
            olders.append(client)
            try await Self.join(client, "r")
        }
        try await op.send(.setMode(room: "r", mode: .moderated, on: true, argument: ""))
        #expect(try await Self.answer(at: op, "moderated").isModeChange(.moderated, ""))
        for client in olders {
            try await client.send(.say(room: "r", text: "may I?"))
            #expect(try await client.waitFor("a refusal") { frame -> ErrorCode? in if case .error(let code, false, .say, _) = frame { code } else { nil } } == .moderated)
        }
        try await op.send(.kick(room: "r", nick: "v3", reason: "bye"))
        for client in olders {
            _ = try await client.waitFor("v3 leaving") { if case .left("r", _, _, "v3") = $0 { true } else { nil } }
        }
        try await op.send(.setMode(room: "r", mode: .ban, on: true, argument: "nick:v3"))
        #expect(try await Self.answer(at: op, "ban").isModeChange(.ban, "nick:v3"))
        try await olders[2].send(.join(room: "r"))
        #expect(try await olders[2].waitFor("a refusal") { frame -> ErrorCode? in if case .error(let code, false, _, _) = frame { code } else { nil } } == .banned)
    }
}

extension ModerationTests {
    @Test(arguments: everyMode)
    func keyGuessesAreThrottledPerAddressANickBanIsEvadedByANickChangeAndAnAccountBanHoldsAcrossAReconnect(
        _ mode: ServerMode
    ) async throws {
        let server = try await ChatServerProcess(mode, arguments: ["--login-attempts-per-address", "5", "--handshake-timeout", "60"])
        defer { server.stop() }
        let op = try await TestClient.connect(to: server, nick: "op", version: 4)
        defer { op.close() }
        try await Self.join(op, "r")
        try await op.send(.setMode(room: "r", mode: .key, on: true, argument: "s3cret"))
        #expect(try await Self.answer(at: op, "key").isModeChange(.key, "s3cret"))

        // Eight guesses pipelined from one address: five compared, three throttled unread.
        let guesser = try BlockingSocket(port: server.port, source: "127.0.0.2")
        defer { guesser.close() }
        await guesser.send([.hello(version: 4, nick: "guesser", password: nil)] + (0..<8).map { Frame.joinWithKey(room: "r", key: "guess\($0)") })
        var answers: [ErrorCode] = []
        while answers.count < 8, let frame = await guesser.nextFrame() {
            if case .error(let code, false, .joinWithKey, _) = frame { answers.append(code) }
        }
        #expect(answers == Array(repeating: .badRoomKey, count: 5) + Array(repeating: .throttled, count: 3))
        await guesser.send([.joinWithKey(room: "r", key: "s3cret")])
        #expect(await errorCode(from: guesser) == .throttled, "throttled, even the right key is not compared")
        let friend = try await TestClient.connect(to: server, nick: "friend", version: 4)
        defer { friend.close() }
        try await friend.send(.joinWithKey(room: "r", key: "s3cret"))
        _ = try await friend.waitFor("friend's join") { if case .joined("r", _, _, "friend") = $0 { true } else { nil } }
        try await op.send(.setMode(room: "r", mode: .key, on: false, argument: ""))
        let keyOff = try await Self.answer(at: op, "key off")
        #expect({ if case .modeChanged("r", _, _, "op", .key, false, "") = keyOff { true } else { false } }(), "\(keyOff)")

        // A nick ban is evaded by a nick change, as documented.
        try await op.send(.setMode(room: "r", mode: .ban, on: true, argument: "nick:mallory"))
        _ = try await Self.answer(at: op, "the nick ban")
        let mallory = try await TestClient.connect(to: server, nick: "mallory", version: 4)
        defer { mallory.close() }
        try await mallory.send(.join(room: "r"))
        #expect(try await mallory.waitFor("a refusal") { frame -> ErrorCode? in if case .error(let code, _, _, _) = frame { code } else { nil } } == .banned)
        try await mallory.send([.changeNick(nick: "mallory2"), .join(room: "r")])
        _ = try await mallory.waitFor("the evading join") { if case .joined("r", _, _, "mallory2") = $0 { true } else { nil } }

        // An account ban holds whatever the nick, across a reconnect.
        let eve = try await Self.registered("eve", on: server)
        try await op.send(.setMode(room: "r", mode: .ban, on: true, argument: "account:eve"))
        _ = try await Self.answer(at: op, "the account ban")
        eve.close()
        let eveAgain = try await Self.loggedIn("eve", on: server)
        defer { eveAgain.close() }
        try await eveAgain.send([.changeNick(nick: "notEve"), .join(room: "r")])
        #expect(try await eveAgain.waitFor("a refusal") { frame -> ErrorCode? in if case .error(let code, _, _, _) = frame { code } else { nil } } == .banned)
    }
}

extension ModerationTests {
    /// Logging in changes who a member is, and a nick change what it is called: both meet the
    /// room's bans as a join would. A guest that joins and then logs in to a banned account is
    /// kicked with the ban's reason; a member's change into a banned nick is refused and it keeps
    /// its nick; the founder of a registered room that logs in inside it takes its op.
    @Test(arguments: everyMode)
    func aBanHoldsAgainstAMemberThatLogsInOrChangesNickAfterJoiningAndTheFounderTakesItsRolesAtLogin(
        _ mode: ServerMode
    ) async throws {
        let server = try await ChatServerProcess(mode, arguments: ["--handshake-timeout", "60"])
        defer { server.stop() }
        let alice = try await Self.registered("alice", on: server)
        defer { alice.close() }
        try await Self.join(alice, "r")
        let mal = try await Self.registered("mal", on: server)
        mal.close()
        try await alice.send(.setMode(room: "r", mode: .ban, on: true, argument: "account:mal evading"))
        #expect(try await Self.answer(at: alice, "the account ban").isModeChange(.ban, "account:mal evading"))

        // The guest gets in (no account yet), then logs in to the banned account.
        let guest = try await TestClient.connect(to: server, nick: "guest1", version: 4)
        defer { guest.close() }
        try await Self.join(guest, "r")
        try await guest.send(.login(account: "mal", password: "pw-mal"))
        _ = try await guest.waitFor("logged in as mal") { $0 == .loggedIn(account: "mal") ? true : nil }
        let kick = try await guest.waitFor("mal's kick") { frame -> String? in
            if case .kicked("r", _, _, "mal", _, let reason) = frame { return reason }
            return nil
        }
        #expect(kick.contains("account:mal") && kick.contains("evading"), "kicked with the ban's reason: \(kick)")
        _ = try await alice.waitFor("mal's kick at alice") { if case .kicked("r", _, _, "mal", _, _) = $0 { true } else { nil } }
        try await guest.send(.say(room: "r", text: "still here"))
        #expect(try await guest.waitFor("a refusal") { $0.errorCode } == .notInRoom, "mal is a member no more")
        try await guest.send(.join(room: "r"))
        #expect(try await guest.waitFor("a refusal") { $0.errorCode } == .banned, "and cannot come back")

        // A member changing into a banned nick is refused, and keeps its nick.
        try await alice.send(.setMode(room: "r", mode: .ban, on: true, argument: "nick:eve"))
        #expect(try await Self.answer(at: alice, "the nick ban").isModeChange(.ban, "nick:eve"))
        let bob = try await TestClient.connect(to: server, nick: "bob", version: 4)
        defer { bob.close() }
        try await Self.join(bob, "r")
        try await bob.send(.changeNick(nick: "Eve"))
        let refusal = try await bob.waitFor("the nick change's answer") { frame -> Frame? in
            switch frame {
            case .error, .nickAccepted: frame
            default: nil
            }
        }
        guard case .error(.banned, false, .changeNick, let reason) = refusal else {
            Issue.record("a change into a banned nick is refused banned, got \(refusal)")
            return
        }
        #expect(reason.contains("#r"), "the refusal names the room: \(reason)")
        try await bob.send(.say(room: "r", text: "still bob"))
        _ = try await alice.waitFor("bob's line under his own nick") { if case .message("r", _, _, "bob", "still bob") = $0 { true } else { nil } }

        // The founder of a registered room logs in inside it and takes its op.
        try await alice.send(.setMode(room: "r", mode: .registered, on: true, argument: ""))
        #expect(try await Self.answer(at: alice, "registered").isModeChange(.registered, "alice"))
        alice.close()
        let founder = try await TestClient.connect(to: server, nick: "guest2", version: 4)
        defer { founder.close() }
        try await Self.join(founder, "r")
        try await founder.send(.login(account: "alice", password: "pw-alice"))
        _ = try await founder.waitFor("logged in as alice") { $0 == .loggedIn(account: "alice") ? true : nil }
        _ = try await bob.waitFor("the founder's op") { frame -> Bool? in
            if case .modeChanged("r", _, _, _, .op, true, "alice") = frame { return true }
            return nil
        }
        try await founder.send(.kick(room: "r", nick: "bob", reason: "founder's call"))
        _ = try await bob.waitFor("bob's kick by the founder") { if case .kicked("r", _, _, "bob", "alice", _) = $0 { true } else { nil } }
    }
}

extension ModerationTests {
    /// A restart must not hand an unregistered room to whoever rejoins first (issue 37): the ops
    /// and voices of the stop take their roles back when they rejoin — a guest by its nick, a
    /// member logged in by its account — and nobody else takes op by being first.
    @Test func aRestartGivesEachRoomsOpsTheirRolesBackAndNotToWhoeverRejoinsFirst() async throws {
        let directory = try TemporaryDirectory(prefix: "chat-rejoin-roles")
        defer { directory.remove() }
        let arguments = ["--data-dir", directory.path, "--handshake-timeout", "60"]
        do {
            let server = try await ChatServerProcess(arguments: arguments)
            let alice = try await TestClient.connect(to: server, nick: "alice", version: 4)
            try await alice.send(.join(room: "general"))
            #expect(try await Self.answer(at: alice, "alice's roomModes") == .roomModes(room: "general", modes: RoomModes(ops: ["alice"])))
            let carol = try await Self.registered("carol", on: server)
            try await carol.send(.join(room: "accounts"))
            #expect(try await Self.answer(at: carol, "carol's roomModes") == .roomModes(room: "accounts", modes: RoomModes(ops: ["carol"])))
            let bob = try await TestClient.connect(to: server, nick: "bob", version: 4)
            try await Self.join(bob, "general")
            server.child.signal(SIGTERM)
            #expect(await server.child.waitForExit(timeout: .seconds(30)) == 0)
            alice.close()
            bob.close()
            carol.close()
        }
        let server = try await ChatServerProcess(arguments: arguments)
        defer { server.stop() }
        // bob (a bot, say) rejoins first: no op for him.
        let bob = try await TestClient.connect(to: server, nick: "bob", version: 4)
        defer { bob.close() }
        try await bob.send(.join(room: "general"))
        #expect(try await Self.answer(at: bob, "bob's roomModes") == .roomModes(room: "general", modes: RoomModes()), "not op")
        let alice = try await TestClient.connect(to: server, nick: "alice", version: 4)
        defer { alice.close() }
        try await alice.send(.join(room: "general"))
        #expect(
            try await Self.answer(at: alice, "alice's roomModes after the restart")
                == .roomModes(room: "general", modes: RoomModes(ops: ["alice"])), "alice takes her op back")
        #expect(try await Self.answer(at: bob, "alice's op").isModeChange(.op, "alice"), "and bob is told")
        try await alice.send(.kick(room: "general", nick: "bob", reason: "mine"))
        _ = try await bob.waitFor("bob's kick") { if case .kicked("general", _, _, "bob", "alice", _) = $0 { true } else { nil } }

        // A guest called carol rejoins #accounts first; carol logs in, rejoins, and is its op.
        let impostor = try await TestClient.connect(to: server, nick: "guest7", version: 4)
        defer { impostor.close() }
        try await impostor.send(.join(room: "accounts"))
        #expect(try await Self.answer(at: impostor, "the guest's roomModes") == .roomModes(room: "accounts", modes: RoomModes()))
        let carol = try await Self.loggedIn("carol", on: server)
        defer { carol.close() }
        try await carol.send(.join(room: "accounts"))
        #expect(
            try await Self.answer(at: carol, "carol's roomModes after the restart")
                == .roomModes(room: "accounts", modes: RoomModes(ops: ["carol"])), "carol's account takes its op back")
    }
}

extension Frame {
    /// Whether this is a `modeChanged` of `mode` turned on with `argument`.
    fileprivate func isModeChange(_ mode: RoomMode, _ argument: String) -> Bool {
        if case .modeChanged(_, _, _, _, mode, true, argument) = self { return true }
        return false
    }

    /// The code of this `error`, or nil.
    fileprivate var errorCode: ErrorCode? {
        if case .error(let code, _, _, _) = self { return code }
        return nil
    }
}
