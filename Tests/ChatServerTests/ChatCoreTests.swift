import ChatProtocol
import Testing

@testable import ChatCore
@testable import ChatServer

/// The frames `actions` deliver to `id`, in order.
func frames(to id: ClientID, in actions: [ChatAction]) -> [Frame] {
    actions.flatMap { action -> [Frame] in
        switch action {
        case .send(let frame, id): [frame]
        case .sendShared(let shared, id): shared.frames
        case .broadcast(let frame, let recipients) where recipients.contains(id): [frame]
        default: []
        }
    }
}

private func disconnection(of id: ClientID, in actions: [ChatAction]) -> Disconnection? {
    for case .disconnect(id, let disconnection, _) in actions { return disconnection }
    return nil
}

/// The chat's behaviour, the same in every mode unless a test says otherwise: each runs on
/// every `CoreBackend` (memory, SQLite, a cluster), through `Harness`.
@Suite("Chat logic without sockets, in every mode")
struct ChatCoreTests {
    @Test(arguments: CoreBackend.allCases) func welcomesHelloWithTheNickAndLimits(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) { $0.motd = "hi" }
        let (id, _) = chat.open()
        let actions = await chat.send(.hello(version: 1, nick: "Alice", password: nil), from: id)
        #expect(actions == [.send(.welcome(version: 1, nick: "Alice", maxFrameSize: 16_384, motd: "hi"), to: id)])
        #expect(chat.core.nick(of: id) == "Alice")
    }

    @Test(arguments: CoreBackend.allCases) func refusesANickTakenInAnyLetterCase(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        _ = await chat.connect("Alice")
        let (id, _) = chat.open()
        let actions = await chat.send(.hello(version: 1, nick: "aLICE", password: nil), from: id)
        #expect(disconnection(of: id, in: actions)?.code == .nickTaken)
        #expect(chat.core.clientCount == 1, "the refused connection is no longer counted")
    }

    @Test(arguments: CoreBackend.allCases) func refusesAMissingOrWrongPasswordAndAcceptsTheRightOne(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) { $0.password = "s3cret" }
        let (missing, _) = chat.open()
        #expect(disconnection(of: missing, in: await chat.send(.hello(version: 1, nick: "alice", password: nil), from: missing))?.code == .badPassword)
        let (wrong, _) = chat.open()
        #expect(await chat.send(.hello(version: 1, nick: "alice", password: "wrong"), from: wrong).isEmpty, "a wrong password is answered later")
        #expect(disconnection(of: wrong, in: await chat.tick(advancingBy: 1_000))?.code == .badPassword)
        let (id, _) = chat.open()
        let actions = await chat.send(.hello(version: 1, nick: "alice", password: "s3cret"), from: id)
        #expect(disconnection(of: id, in: actions) == nil)
    }

    @Test(arguments: CoreBackend.allCases) func refusesVersionZero(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let (id, _) = chat.open()
        #expect(disconnection(of: id, in: await chat.send(.hello(version: 0, nick: "a", password: nil), from: id))?.code == .unsupportedVersion)
    }

    @Test(arguments: CoreBackend.allCases) func requiresHelloBeforeAnythingElse(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let (id, _) = chat.open()
        let refusal = disconnection(of: id, in: await chat.send(.join(room: "general"), from: id))
        #expect(refusal?.code == .handshakeRequired)
        #expect(refusal?.frameType == .join)
    }

    @Test(arguments: CoreBackend.allCases) func refusesConnectionsBeyondTheTotalAndPerAddressLimits(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) {
            $0.maxClients = 3
            $0.maxClientsPerAddress = 2
        }
        #expect(chat.open(from: "10.0.0.1").1.isEmpty)
        #expect(chat.open(from: "10.0.0.1").1.isEmpty)
        let (third, actions) = chat.open(from: "10.0.0.1")
        #expect(disconnection(of: third, in: actions)?.code == .tooManyConnectionsFromAddress)
        #expect(chat.open(from: "10.0.0.2").1.isEmpty)
        let (fourth, full) = chat.open(from: "10.0.0.3")
        #expect(disconnection(of: fourth, in: full)?.code == .serverFull)
    }

    @Test(arguments: CoreBackend.allCases) func joinSendsJoinedToAllThenMembersTopicAndHistoryToTheJoiner(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice")
        let bob = await chat.connect("bob")
        let t = chat.now.wallMillis
        #expect(frames(to: alice, in: await chat.send(.join(room: "general"), from: alice)) == [
            .joined(room: "general", seq: 1, time: t, nick: "alice"), .members(room: "general", nicks: ["alice"]),
        ])
        await chat.send(.setTopic(room: "general", text: "news"), from: alice)
        await chat.send(.say(room: "general", text: "hello"), from: alice)
        await chat.send(.emote(room: "general", text: "waves"), from: alice)
        let actions = await chat.send(.join(room: "general"), from: bob)
        #expect(frames(to: alice, in: actions) == [.joined(room: "general", seq: 5, time: t, nick: "bob")])
        #expect(frames(to: bob, in: actions) == [
            .joined(room: "general", seq: 5, time: t, nick: "bob"),
            .members(room: "general", nicks: ["alice", "bob"]),
            .topic(room: "general", seq: 2, time: t, setBy: "alice", text: "news"),
            .history(room: "general", entries: [
                HistoryEntry(kind: .message, seq: 3, time: t, sender: "alice", text: "hello"),
                HistoryEntry(kind: .action, seq: 4, time: t, sender: "alice", text: "waves"),
            ]),
        ])
    }

    @Test(arguments: CoreBackend.allCases) func stampsMessagesWithTheRegisteredNickTimeAndNextSeq(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice")
        let bob = await chat.connect("bob")
        await chat.send(.join(room: "r"), from: alice)
        await chat.send(.join(room: "r"), from: bob)
        chat.now.wallMillis += 1234
        let actions = await chat.send(.say(room: "r", text: "hi"), from: bob)
        let message = Frame.message(room: "r", seq: 3, time: chat.now.wallMillis, sender: "bob", text: "hi")
        #expect(actions == [.broadcast(message, to: [alice, bob])], "one broadcast, so the frame is encoded once")
    }

    @Test(arguments: CoreBackend.allCases) func keepsOnlyTheMostRecentHistoryAndCapsRequests(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) { $0.historySize = 3 }
        let alice = await chat.connect("alice")
        await chat.send(.join(room: "r"), from: alice)
        for index in 1...5 { await chat.send(.say(room: "r", text: "m\(index)"), from: alice) }
        let answer = frames(to: alice, in: await chat.send(.requestHistory(room: "r", count: 100), from: alice))
        guard case .history("r", let entries)? = answer.first else {
            Issue.record("expected a history frame, got \(answer)")
            return
        }
        #expect(entries.map(\.text) == ["m3", "m4", "m5"])
        #expect(entries.map(\.seq) == [4, 5, 6])
        let two = frames(to: alice, in: await chat.send(.requestHistory(room: "r", count: 2), from: alice))
        #expect(two == [.history(room: "r", entries: Array(entries.suffix(2)))])
    }

    /// `--history-size` bounds a room's history, topic changes included: a version 1 client,
    /// which is sent no topic changes as history, gets the messages among the newest
    /// `--history-size` events of history — the same ones in every mode.
    @Test(arguments: CoreBackend.allCases) func aTopicChangeCountsAgainstTheHistorySize(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) { $0.historySize = 3 }
        let alice = await chat.connect("alice")
        await chat.send(.join(room: "r"), from: alice)  // seq 1
        await chat.send(.say(room: "r", text: "m1"), from: alice)  // seq 2
        await chat.send(.setTopic(room: "r", text: "t"), from: alice)  // seq 3
        await chat.send(.say(room: "r", text: "m2"), from: alice)  // seq 4
        await chat.send(.say(room: "r", text: "m3"), from: alice)  // seq 5
        let newest = [4, 5].map { HistoryEntry(kind: .message, seq: $0, time: chat.now.wallMillis, sender: "alice", text: "m\($0 - 2)") }
        let asked = frames(to: alice, in: await chat.send(.requestHistory(room: "r", count: 3), from: alice))
        let bob = await chat.connect("bob")
        let replay = frames(to: bob, in: await chat.send(.join(room: "r"), from: bob)).filter { $0.type == .history }
        #expect(asked == [.history(room: "r", entries: newest)], "\(backend): \(asked)")
        #expect(replay == [.history(room: "r", entries: newest)], "\(backend): \(replay)")
    }

    /// A chat whose room `r` holds 30 lines of 100 KB that alice said: more history than one
    /// frame carries.
    private static func roomWithLongHistory(_ backend: CoreBackend) async throws -> (Harness, ClientID) {
        var chat = try await Harness(backend) {
            $0.historySize = 100
            $0.maxFrameSize = ChatServerConfiguration.maxFrameSizeCeiling
            // Few connections, so that 1 MiB frames leave the memory budget room for history.
            $0.maxClients = 10
        }
        let alice = await chat.connect("alice")
        await chat.send(.join(room: "r"), from: alice)
        let text = String(repeating: "x", count: 100_000)
        for _ in 0..<30 { await chat.send(.say(room: "r", text: text), from: alice) }
        return (chat, alice)
    }

    @Test(arguments: CoreBackend.allCases) func splitsLongHistoryIntoFramesThatFitTheLimit(_ backend: CoreBackend) async throws {
        let (harness, alice) = try await Self.roomWithLongHistory(backend)
        var chat = harness
        let batches = frames(to: alice, in: await chat.send(.requestHistory(room: "r", count: 30), from: alice))
        var seqs: [UInt64] = []
        for batch in batches {
            #expect(FrameEncoder.encode(batch).count <= WireProtocol.maxFrameSize)
            if case .history(_, let entries) = batch { seqs += entries.map(\.seq) }
        }
        #expect(batches.count > 1, "\(backend): more than one frame holds")
        #expect(seqs == Array(2...31), "\(backend): every message, once, in order")
    }

    /// A version 1 joiner is sent the room's messages, at most `--history-size`, in as many
    /// `history` frames as they take (docs/PROTOCOL.md, "History").
    @Test(arguments: CoreBackend.allCases) func aVersion1JoinerGetsTheWholeHistoryOverSeveralFrames(_ backend: CoreBackend) async throws {
        let (harness, _) = try await Self.roomWithLongHistory(backend)
        var chat = harness
        let bob = await chat.connect("bob")
        var seqs: [UInt64] = []
        var batches = 0
        for case .history(_, let entries) in frames(to: bob, in: await chat.send(.join(room: "r"), from: bob)) {
            seqs += entries.map(\.seq)
            batches += 1
        }
        #expect(batches > 1, "\(backend): more than one frame holds")
        #expect(seqs == Array(2...31), "\(backend): every message, once, in order")
    }

    @Test(arguments: CoreBackend.allCases) func announcesPartQuitAndNickChangesToRoomMembers(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice")
        let bob = await chat.connect("bob")
        await chat.send(.join(room: "r"), from: alice)
        await chat.send(.join(room: "r"), from: bob)
        let t = chat.now.wallMillis
        var actions = await chat.send(.changeNick(nick: "Bobby"), from: bob)
        #expect(frames(to: bob, in: actions) == [.nickAccepted(nick: "Bobby"), .nickChanged(room: "r", seq: 3, time: t, old: "bob", new: "Bobby")])
        #expect(frames(to: alice, in: actions) == [.nickChanged(room: "r", seq: 3, time: t, old: "bob", new: "Bobby")])
        actions = await chat.send(.part(room: "r"), from: bob)
        #expect(frames(to: alice, in: actions) == [.left(room: "r", seq: 4, time: t, nick: "Bobby")])
        #expect(frames(to: bob, in: actions) == [.left(room: "r", seq: 4, time: t, nick: "Bobby")])
        await chat.send(.join(room: "r"), from: bob)
        actions = await chat.send(.goodbye(reason: "off to lunch"), from: bob)
        #expect(frames(to: alice, in: actions) == [.quit(room: "r", seq: 6, time: t, nick: "Bobby", reason: "off to lunch")])
        #expect(disconnection(of: bob, in: actions) == Disconnection(code: nil, reason: "off to lunch"))
        #expect(chat.memberNicks(of: "r") == ["alice"])
    }

    @Test(arguments: CoreBackend.allCases) func refusesANickChangeToATakenNickButAllowsACaseChange(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice")
        _ = await chat.connect("bob")
        let taken = frames(to: alice, in: await chat.send(.changeNick(nick: "BOB"), from: alice))
        guard case .error(.nickTaken, false, .changeNick, _)? = taken.first else {
            Issue.record("expected a non-fatal nickTaken, got \(taken)")
            return
        }
        #expect(frames(to: alice, in: await chat.send(.changeNick(nick: "Alice"), from: alice)) == [.nickAccepted(nick: "Alice")])
    }

    @Test(arguments: CoreBackend.allCases) func deliversDirectMessagesToTheRecipientAndEchoesToTheSender(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice")
        let bob = await chat.connect("Bob")
        let actions = await chat.send(.tell(recipient: "bob", text: "psst"), from: alice)
        #expect(actions == [.broadcast(.direct(sender: "alice", recipient: "Bob", time: chat.now.wallMillis, text: "psst"), to: [bob, alice])])
        let missing = frames(to: alice, in: await chat.send(.tell(recipient: "carol", text: "?"), from: alice))
        guard case .error(.noSuchNick, false, .tell, _)? = missing.first else {
            Issue.record("expected noSuchNick, got \(missing)")
            return
        }
    }

    @Test(arguments: CoreBackend.allCases) func listsRoomsWithMemberCountsAndAnswersWho(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice")
        let bob = await chat.connect("bob")
        await chat.send(.join(room: "b"), from: alice)
        await chat.send(.join(room: "a"), from: alice)
        await chat.send(.join(room: "a"), from: bob)
        await chat.send(.setTopic(room: "a", text: "topic a"), from: bob)
        #expect(frames(to: bob, in: await chat.send(.listRooms, from: bob)) == [
            .roomList(rooms: [RoomInfo(name: "a", memberCount: 2, topic: "topic a"), RoomInfo(name: "b", memberCount: 1, topic: "")])
        ])
        #expect(frames(to: bob, in: await chat.send(.who(room: "b"), from: bob)) == [.members(room: "b", nicks: ["alice"])])
        #expect(frames(to: bob, in: await chat.send(.who(room: "none"), from: bob)) == [.members(room: "none", nicks: [])])
    }

    /// An empty room is no longer listed in any mode; memory forgets it, so it starts again at
    /// `seq` 1, while SQLite and Redis keep it, so its `seq` continues (docs/PROTOCOL.md, "Rooms").
    @Test(arguments: CoreBackend.allCases) func anEmptiedRoomIsUnlistedAndStartsAgainOnlyInMemory(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice")
        await chat.send(.join(room: "r"), from: alice)  // seq 1
        await chat.send(.say(room: "r", text: "x"), from: alice)  // seq 2
        await chat.send(.part(room: "r"), from: alice)  // seq 3
        #expect(chat.roomNames.isEmpty)
        // The server's timer ticks: a stored room whose changes are committed leaves memory, so
        // the next joiner reads it back from the store.
        _ = await chat.tick(advancingBy: 1_000)
        let seq: UInt64 = backend.keepsEmptyRooms ? 4 : 1
        #expect(
            frames(to: alice, in: await chat.send(.join(room: "r"), from: alice)).first == .joined(room: "r", seq: seq, time: chat.now.wallMillis, nick: "alice"),
            "\(backend): the join takes seq \(seq)")
    }

    @Test(arguments: CoreBackend.allCases) func refusesRequestsForRoomsTheClientIsNotInAndJoinsBeyondTheLimit(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) { $0.maxRoomsPerClient = 2 }
        let alice = await chat.connect("alice")
        func errorCode(_ actions: [ChatAction]) -> ErrorCode? {
            if case .error(let code, false, _, _)? = frames(to: alice, in: actions).first { return code }
            return nil
        }
        #expect(errorCode(await chat.send(.say(room: "r", text: "x"), from: alice)) == .notInRoom)
        #expect(errorCode(await chat.send(.part(room: "r"), from: alice)) == .notInRoom)
        #expect(errorCode(await chat.send(.setTopic(room: "r", text: "x"), from: alice)) == .notInRoom)
        #expect(errorCode(await chat.send(.requestHistory(room: "r", count: 1), from: alice)) == .notInRoom)
        await chat.send(.join(room: "r"), from: alice)
        #expect(errorCode(await chat.send(.join(room: "r"), from: alice)) == .alreadyInRoom)
        await chat.send(.join(room: "s"), from: alice)
        #expect(errorCode(await chat.send(.join(room: "t"), from: alice)) == .tooManyRooms)
    }

    @Test(arguments: CoreBackend.allCases) func answersPingAndRejectsServerFramesAndASecondHello(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice")
        #expect(await chat.send(.ping(token: 9), from: alice) == [.send(.pong(token: 9), to: alice)])
        #expect(await chat.send(.unknown(type: FrameType(rawValue: 0x70), payload: [1]), from: alice).isEmpty)
        let bob = await chat.connect("bob")
        #expect(disconnection(of: bob, in: await chat.send(.hello(version: 1, nick: "x", password: nil), from: bob))?.code == .unexpectedFrame)
        let carol = await chat.connect("carol")
        #expect(disconnection(of: carol, in: await chat.send(.nickAccepted(nick: "x"), from: carol))?.code == .unexpectedFrame)
    }

    @Test(arguments: CoreBackend.allCases) func rateLimitRefusesBeyondTheBurstThenDisconnectsSustainedAbuse(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) {
            $0.messageRate = 10
            $0.messageBurst = 3
            $0.rateAbuseLimit = 4
        }
        let alice = await chat.connect("alice")
        await chat.send(.join(room: "r"), from: alice)
        var codes: [ErrorCode?] = []
        for _ in 0..<6 {
            let actions = await chat.send(.say(room: "r", text: "x"), from: alice)
            if let gone = disconnection(of: alice, in: actions) {
                codes.append(gone.code)
                break
            }
            if case .error(let code, false, .say, _)? = frames(to: alice, in: actions).first { codes.append(code) } else { codes.append(nil) }
        }
        // Burst 3: the join and two says pass; then refusals; the fourth refusal in a row disconnects.
        #expect(codes == [nil, nil, .rateLimited, .rateLimited, .rateLimited, .rateLimited])
        #expect(chat.core.nick(of: alice) == nil)
    }

    @Test(arguments: CoreBackend.allCases) func connectionsFromOneAddressShareItsBucketsAndOtherAddressesDoNot(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) {
            $0.addressMessageRate = 10
            $0.addressMessageBurst = 4
            $0.addressByteRate = 1_000
            $0.addressByteBurst = 100_000
        }
        // The handshakes (two frames) spend from the address too.
        let first = await chat.connect("first", from: "10.0.0.1")
        let second = await chat.connect("second", from: "10.0.0.1")
        let other = await chat.connect("other", from: "10.0.0.2")
        func wait(_ id: ClientID) -> UInt64 { chat.core.addressWait(for: id, at: chat.now) }
        #expect(wait(first) == 0 && wait(second) == 0)
        // Frames are never refused for the address: they spend, into debt, and the address waits.
        for id in [first, second, first] {
            #expect(frames(to: id, in: await chat.send(.ping(token: 1), from: id)) == [.pong(token: 1)])
        }
        // Five frames of a burst of four: one token of debt, 100 ms at 10 per second.
        #expect(wait(first) == 101 && wait(second) == 101, "the address's connections share its debt")
        #expect(wait(other) == 0, "another address has buckets of its own")
        _ = await chat.tick(advancingBy: 101)
        #expect(wait(first) == 0)
        await chat.send(.join(room: "r"), from: first)
        #expect(wait(second) > 0, "out of request tokens again")
        // Reconnecting does not refill the buckets; an address is forgotten only once they are full.
        for id in [first, second] { await chat.disconnect(id, reason: "bye") }
        let later = await chat.connect("later", from: "10.0.0.1")
        #expect(wait(later) > 0, "the debt outlives the connections")
    }

    @Test(arguments: CoreBackend.allCases) func anAddressThatConnectsTooFastIsRefusedUntilItsBucketRefills(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) {
            $0.addressConnectionRate = 2
            $0.addressConnectionBurst = 3
        }
        func refusal(from address: String) async -> Disconnection? {
            let (id, actions) = chat.open(from: address)
            await chat.disconnect(id, reason: "bye")
            return disconnection(of: id, in: actions)
        }
        func threeLetIn(from address: String) async -> Bool {
            for _ in 0..<3 where await refusal(from: address) != nil { return false }
            return true
        }
        // Open and closed at once, as a reconnect loop does: the count never grows, the rate does.
        #expect(await threeLetIn(from: "10.0.0.1"))
        let refused = await refusal(from: "10.0.0.1")
        #expect(refused?.code == .tooManyConnectionsFromAddress)
        #expect(refused?.reason.contains("too fast") == true, "\(String(describing: refused))")
        #expect(await refusal(from: "10.0.0.2") == nil, "another address is not affected")
        _ = await chat.tick(advancingBy: 500)
        #expect(await refusal(from: "10.0.0.1") == nil, "half a second refills one connection at 2 per second")
        #expect(await refusal(from: "10.0.0.1") != nil)
        // Once its buckets are full again, the address is forgotten; a new one starts full.
        _ = await chat.tick(advancingBy: 2_000)
        #expect(await threeLetIn(from: "10.0.0.1"))
    }

    @Test(arguments: CoreBackend.allCases) func anAddressPaysForItsFanOutToEveryRecipient(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) {
            $0.addressFanoutRate = 10_000
            $0.addressFanoutBurst = 20_000
        }
        let speaker = await chat.connect("speaker", from: "10.0.0.1")
        var listeners: [ClientID] = []
        for index in 0..<9 { listeners.append(await chat.connect("listener\(index)", from: "10.0.0.2")) }
        for id in [speaker] + listeners { await chat.send(.join(room: "r"), from: id) }
        #expect(chat.core.addressWait(for: speaker, at: chat.now) == 0)
        // 1,000 bytes to ten members: about 10 kB of fan-out, within the burst.
        let line = Frame.say(room: "r", text: String(repeating: "x", count: 1_000))
        await chat.send(line, from: speaker)
        #expect(chat.core.addressWait(for: speaker, at: chat.now) == 0)
        await chat.send(line, from: speaker)
        await chat.send(line, from: speaker)
        // About 30 kB spent of 20 kB: about a second of debt at 10 kB/s, for the speaker's address only.
        let wait = chat.core.addressWait(for: speaker, at: chat.now)
        #expect((900...1_400).contains(wait), "waits out its fan-out: \(wait) ms")
        #expect(chat.core.addressWait(for: listeners[0], at: chat.now) == 0, "the listeners' address paid only for its joins")
    }

    @Test(arguments: CoreBackend.allCases) func anAddressInByteDebtWaitsItOut(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) {
            $0.addressByteRate = 1_000
            $0.addressByteBurst = 20_000
        }
        let alice = await chat.connect("alice", from: "10.0.0.1")
        await chat.send(.join(room: "r"), from: alice)
        let text = String(repeating: "x", count: 16_000)
        #expect(frames(to: alice, in: await chat.send(.say(room: "r", text: text), from: alice)).count == 1)
        #expect(chat.core.addressWait(for: alice, at: chat.now) == 0, "still within the burst")
        #expect(frames(to: alice, in: await chat.send(.say(room: "r", text: text), from: alice)).count == 1, "delivered, not refused")
        let wait = chat.core.addressWait(for: alice, at: chat.now)
        // About 12 kB of debt at 1 kB per second.
        #expect((12_000...13_000).contains(wait), "waits out its debt: \(wait) ms")
    }

    @Test(arguments: CoreBackend.allCases) func rateLimitRefillsOverTime(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) {
            $0.messageRate = 10
            $0.messageBurst = 1
        }
        let alice = await chat.connect("alice")
        await chat.send(.join(room: "r"), from: alice)
        if case .error(.rateLimited, _, _, _)? = frames(to: alice, in: await chat.send(.say(room: "r", text: "x"), from: alice)).first {
        } else {
            Issue.record("expected the second request in a burst of 1 to be refused")
        }
        _ = await chat.tick(advancingBy: 100)
        #expect(frames(to: alice, in: await chat.send(.say(room: "r", text: "y"), from: alice)).count == 1)
    }

    @Test(arguments: CoreBackend.allCases) func dropsConnectionsThatDoNotCompleteTheHandshakeInTime(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) { $0.handshakeTimeout = .seconds(5) }
        let (id, _) = chat.open()
        #expect(await chat.tick(advancingBy: 4_999).isEmpty)
        #expect(disconnection(of: id, in: await chat.tick(advancingBy: 1))?.code == .handshakeTimeout)
    }

    @Test(arguments: CoreBackend.allCases) func pingsASilentClientThenDisconnectsItWhenItStaysSilent(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) {
            $0.idlePingInterval = .seconds(30)
            $0.idleTimeout = .seconds(90)
        }
        let alice = await chat.connect("alice")
        let bob = await chat.connect("bob")
        await chat.send(.join(room: "r"), from: alice)
        await chat.send(.join(room: "r"), from: bob)
        let pings = await chat.tick(advancingBy: 30_000)
        #expect(pings.count == 2)
        #expect(await chat.tick(advancingBy: 1_000).isEmpty, "one ping per silence")
        await chat.send(.pong(token: 1), from: bob)
        let actions = await chat.tick(advancingBy: 59_000)
        #expect(disconnection(of: alice, in: actions)?.code == .idleTimeout)
        #expect(disconnection(of: bob, in: actions) == nil)
        // Bob's pong was 59 s ago, so the tick pings him too. Memory and SQLite announce alice's
        // quit as the tick lets her go, before that ping; a cluster once Redis publishes it, after
        // what the tick sent (a ping is no room event: no room's order is broken).
        let toBob = frames(to: bob, in: actions)
        #expect(toBob.map(\.type) == (backend == .cluster ? [.ping, .quit] : [.quit, .ping]), "\(backend): \(toBob)")
        guard case .quit("r", _, _, "alice", _)? = backend == .cluster ? toBob.last : toBob.first else {
            Issue.record("expected bob to see alice quit, got \(actions)")
            return
        }
    }

    @Test(arguments: CoreBackend.allCases) func freesTheNickAndAddressSlotWhenAClientLeaves(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) { $0.maxClientsPerAddress = 1 }
        let alice = await chat.connect("alice")
        #expect(disconnection(of: alice, in: await chat.disconnect(alice, reason: "gone"))?.reason == "gone")
        _ = await chat.connect("alice")
        #expect(chat.core.clientCount == 1)
    }

    /// A topic set to "" clears it: the room has none, so a joiner is sent no `topic`
    /// (docs/PROTOCOL.md: "`topic` (if the room has one)") and the room list shows none.
    @Test(arguments: CoreBackend.allCases) func aClearedTopicIsNotSentToAJoiner(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice")
        await chat.send(.join(room: "r"), from: alice)
        await chat.send(.setTopic(room: "r", text: "news"), from: alice)
        await chat.send(.setTopic(room: "r", text: ""), from: alice)
        let bob = await chat.connect("bob")
        let received = frames(to: bob, in: await chat.send(.join(room: "r"), from: bob))
        #expect(!received.contains { if case .topic = $0 { true } else { false } }, "no topic: \(received)")
        #expect(frames(to: bob, in: await chat.send(.listRooms, from: bob)) == [.roomList(rooms: [RoomInfo(name: "r", memberCount: 2, topic: "")])])
    }

    /// `ChatCore.roomNames` and `memberNicks(of:)` say which rooms exist and who is in them, as
    /// their doc comments promise, whatever keeps the rooms (a cluster node: as far as its own
    /// clients go, which on one node is everyone).
    @Test(arguments: CoreBackend.allCases) func theCoreAnswersWhichRoomsExistAndWhoIsInThem(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice")
        let bob = await chat.connect("bob")
        await chat.send(.join(room: "b"), from: alice)
        await chat.send(.join(room: "a"), from: bob)
        await chat.send(.join(room: "a"), from: alice)
        #expect(chat.roomNames == ["a", "b"], "the mode's own record: \(chat.roomNames)")
        #expect(chat.memberNicks(of: "a") == ["bob", "alice"])
        #expect(chat.core.roomNames == ["a", "b"], "\(backend): \(chat.core.roomNames)")
        #expect(chat.core.memberNicks(of: "a") == ["bob", "alice"], "\(backend): \(chat.core.memberNicks(of: "a"))")
    }

    /// The ring itself, not a mode: a room's history in memory (a cluster node keeps none).
    @Test func historyRingKeepsTheNewestEntriesInOrder() async {
        var history = RoomHistory(capacity: 3, byteCapacity: 1 << 20)
        for seq in 1...7 as ClosedRange<UInt64> {
            history.append(HistoryEntry(kind: .message, seq: seq, time: 0, sender: "a", text: ""))
        }
        #expect(history.recentMessages(10).map(\.seq) == [5, 6, 7])
        #expect(history.recentMessages(1).map(\.seq) == [7])
        #expect(history.firstSeq == 5)
    }
}
