import ChatClient
import ChatProtocol
import ChatServer
import Testing

/// Chat features over real loopback connections to an in-process server.
@Suite("Chat sessions over loopback")
struct ServerSessionTests {
    @Test func refusesATakenNickAndAcceptsItOnceFree() async throws {
        try await withServer { server in
            let alice = try await TestClient.connect(server, nick: "alice")
            #expect(await refusal { try await TestClient.connect(server, nick: "ALICE") } == .nickTaken)
            try await alice.send(.goodbye(reason: "bye"))
            _ = try await alice.readUntilClosed()
            let again = try await TestClient.connect(server, nick: "Alice")
            #expect(again.nick == "Alice")
            again.close()
        }
    }

    @Test func requiresTheServerPassword() async throws {
        try await withServer(testConfiguration { $0.password = "s3cret" }) { server in
            #expect(await refusal { try await TestClient.connect(server, nick: "a") } == .badPassword)
            #expect(await refusal { try await TestClient.connect(server, nick: "a", password: "nope") } == .badPassword)
            let client = try await TestClient.connect(server, nick: "a", password: "s3cret")
            client.close()
        }
    }

    @Test func roomsCanBeJoinedListedQueriedGivenATopicAndLeft() async throws {
        try await withServer { server in
            let alice = try await TestClient.connect(server, nick: "alice")
            let bob = try await TestClient.connect(server, nick: "bob")
            try await alice.join("general")
            try await alice.send(.setTopic(room: "general", text: "welcome all"))
            _ = try await alice.waitFor("topic echo") { if case .topic("general", _, _, "alice", "welcome all") = $0 { true } else { nil } }

            try await bob.send(.join(room: "general"))
            let bobJoin = [try await bob.expectFrame(), try await bob.expectFrame(), try await bob.expectFrame()]
            guard case .joined("general", let joinSeq, _, "bob") = bobJoin[0] else {
                Issue.record("expected joined first, got \(bobJoin)")
                return
            }
            #expect(bobJoin[1] == .members(room: "general", nicks: ["alice", "bob"]))
            guard case .topic("general", let topicSeq, _, "alice", "welcome all") = bobJoin[2] else {
                Issue.record("expected the topic third, got \(bobJoin)")
                return
            }
            #expect(topicSeq < joinSeq)
            _ = try await alice.waitFor("bob's join") { if case .joined("general", joinSeq, _, "bob") = $0 { true } else { nil } }

            try await bob.send(.listRooms)
            #expect(try await bob.expectFrame("room list") == .roomList(rooms: [RoomInfo(name: "general", memberCount: 2, topic: "welcome all")]))
            try await bob.send(.who(room: "general"))
            #expect(try await bob.expectFrame("members") == .members(room: "general", nicks: ["alice", "bob"]))

            try await bob.send(.part(room: "general"))
            for client in [alice, bob] {
                _ = try await client.waitFor("bob's part") { if case .left("general", joinSeq + 1, _, "bob") = $0 { true } else { nil } }
            }
            alice.close()
            bob.close()
        }
    }

    @Test func deliversMessagesAndActionsStampedByTheServerToEveryMember() async throws {
        try await withServer { server in
            let alice = try await TestClient.connect(server, nick: "alice")
            let bob = try await TestClient.connect(server, nick: "bob")
            try await alice.join("r")
            try await bob.join("r")
            _ = try await alice.waitFor("bob joined") { if case .joined("r", _, _, "bob") = $0 { true } else { nil } }
            try await bob.send([.say(room: "r", text: "hello"), .emote(room: "r", text: "waves")])
            for client in [alice, bob] {
                #expect(try await client.expectFrame().isEvent(.message, seq: 3, sender: "bob", text: "hello"))
                #expect(try await client.expectFrame().isEvent(.action, seq: 4, sender: "bob", text: "waves"))
            }
            alice.close()
            bob.close()
        }
    }

    @Test func deliversDirectMessagesAndRefusesUnknownRecipients() async throws {
        try await withServer { server in
            let alice = try await TestClient.connect(server, nick: "alice")
            let bob = try await TestClient.connect(server, nick: "Bob")
            try await alice.send(.tell(recipient: "bob", text: "psst"))
            for client in [bob, alice] {
                guard case .direct("alice", "Bob", _, "psst") = try await client.expectFrame("the direct message") else {
                    Issue.record("expected the direct message at \(client.nick)")
                    return
                }
            }
            try await alice.send(.tell(recipient: "nobody", text: "?"))
            guard case .error(.noSuchNick, false, .tell, _) = try await alice.expectFrame("noSuchNick") else {
                Issue.record("expected noSuchNick")
                return
            }
            alice.close()
            bob.close()
        }
    }

    @Test func replaysRecentHistoryToAJoinerAndOnRequest() async throws {
        try await withServer(testConfiguration { $0.historySize = 3 }) { server in
            let alice = try await TestClient.connect(server, nick: "alice")
            try await alice.join("r")
            try await alice.send((1...5).map { Frame.say(room: "r", text: "m\($0)") })
            _ = try await alice.waitFor("the last echo") { if case .message(_, _, _, _, "m5") = $0 { true } else { nil } }

            let bob = try await TestClient.connect(server, nick: "bob")
            try await bob.send(.join(room: "r"))
            guard case .joined("r", let joinSeq, _, "bob") = try await bob.expectFrame("joined") else {
                Issue.record("expected joined first")
                return
            }
            #expect(try await bob.expectFrame("members") == .members(room: "r", nicks: ["alice", "bob"]))
            guard case .history("r", let entries) = try await bob.expectFrame("history") else {
                Issue.record("expected history after members (the room has no topic)")
                return
            }
            #expect(entries.map(\.text) == ["m3", "m4", "m5"])
            #expect(entries.allSatisfy { $0.seq < joinSeq && $0.sender == "alice" })

            try await bob.send(.requestHistory(room: "r", count: 2))
            guard case .history("r", let requested) = try await bob.expectFrame("requested history") else {
                Issue.record("expected a history answer")
                return
            }
            #expect(requested.map(\.text) == ["m4", "m5"])
            alice.close()
            bob.close()
        }
    }

    @Test func announcesNickChangesAndQuitsWithTheirReason() async throws {
        try await withServer { server in
            let alice = try await TestClient.connect(server, nick: "alice")
            let bob = try await TestClient.connect(server, nick: "bob")
            try await alice.join("r")
            try await bob.join("r")
            try await bob.send(.changeNick(nick: "robert"))
            #expect(try await bob.expectFrame("nickAccepted") == .nickAccepted(nick: "robert"))
            _ = try await alice.waitFor("nickChanged") { if case .nickChanged("r", _, _, "bob", "robert") = $0 { true } else { nil } }
            try await bob.send(.goodbye(reason: "see you"))
            _ = try await alice.waitFor("quit") { if case .quit("r", _, _, "robert", "see you") = $0 { true } else { nil } }
            _ = try await bob.readUntilClosed()

            // A connection that just drops is announced too, with the server's reason.
            let carol = try await TestClient.connect(server, nick: "carol")
            try await carol.join("r")
            carol.close()
            let reason = try await alice.waitFor("carol's quit") { frame -> String? in
                if case .quit("r", _, _, "carol", let reason) = frame { return reason }
                return nil
            }
            #expect(reason.contains("connection"))
            alice.close()
        }
    }

    @Test func answersPingsAndDisconnectsClientsThatStaySilent() async throws {
        let configuration = testConfiguration {
            // Pings come quickly; the timeout leaves room for a loaded machine's scheduling delays
            // (a full run under load once starved this test for more than 4 s). The silent phase
            // below waits the whole timeout, alongside the other suites.
            $0.idlePingInterval = .milliseconds(250)
            $0.idleTimeout = .seconds(15)
        }
        try await withServer(configuration) { server in
            let alice = try await TestClient.connect(server, nick: "alice")
            try await alice.send(.ping(token: 77))
            // On a loaded machine the server's first ping can come before the answer.
            let answer = try await alice.waitFor("pong") { frame -> Frame? in
                if case .ping = frame { return nil }
                return frame
            }
            #expect(answer == .pong(token: 77))
            // Answer the server's pings for a while: a client that answers stays connected.
            for _ in 0..<3 {
                guard case .ping(let token) = try await alice.expectFrame("a server ping") else {
                    Issue.record("expected a ping from the server")
                    return
                }
                try await alice.send(.pong(token: token))
            }
            // Then go silent: a ping, and then the idle timeout.
            let frames = try await alice.readUntilClosed()
            #expect(fatalError(in: frames)?.0 == .idleTimeout, "expected idleTimeout, got \(frames)")
        }
    }

    @Test func shutdownSendsQueuedFramesThenAGoodbye() async throws {
        let server = try ChatServer(configuration: testConfiguration(), logger: quietLogger)
        server.start()
        let alice = try await TestClient.connect(server, nick: "alice")
        try await alice.join("r")
        try await alice.send((1...100).map { Frame.say(room: "r", text: "m\($0)") })
        let stopped = Task { await server.shutdown() }
        let frames = try await alice.readUntilClosed()
        alice.close()
        await stopped.value
        let texts = frames.compactMap { frame -> String? in
            if case .message(_, _, _, _, let text) = frame { return text }
            return nil
        }
        guard case .goodbye(let reason)? = frames.last, reason.contains("shutting down") else {
            Issue.record("expected a goodbye saying the server is shutting down as the last frame, got \(String(describing: frames.last))")
            return
        }
        // Everything the server accepted before stopping arrives, in order, before the goodbye.
        #expect(texts == (0..<texts.count).map { "m\($0 + 1)" })
        #expect(server.connectionCount == 0)
    }
}

extension Frame {
    enum EventKind { case message, action }

    /// Whether this is a room message or action with these stamps.
    func isEvent(_ kind: EventKind, seq: UInt64, sender: String, text: String) -> Bool {
        switch (kind, self) {
        case (.message, .message(_, seq, let time, sender, text)), (.action, .action(_, seq, let time, sender, text)):
            time > 1_700_000_000_000
        default:
            false
        }
    }
}
