import ChatProtocol
import TestSupport
import Testing

/// The order rule (docs/SERVER.md, "Order"): a client's frames leave in the order the chat
/// produced them — room events, replies, errors and direct messages alike — so a reply follows
/// every event that the client's earlier requests caused, whichever mode holds the rooms and
/// whenever its log makes them durable.
@Suite("Delivery order")
struct DeliveryOrderTests {
    @Test(arguments: ServerMode.allCases)
    func aReplyFollowsTheEventsTheRequestsBeforeItCaused(mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode, arguments: ["--no-rate-limits"])
        defer { server.stop() }
        let alice = try await TestClient.connect(to: server, nick: "alice", version: 2)
        let bob = try await TestClient.connect(to: server, nick: "bob", version: 2)
        for client in [alice, bob] {
            try await client.send(.join(room: "order"))
            _ = try await client.waitFor("the members of #order") { frame -> Bool? in
                if case .membersPage("order", true, _) = frame { return true }
                return nil
            }
        }
        _ = try await alice.waitFor("bob's join") { frame -> Bool? in
            if case .joined("order", _, _, "bob") = frame { return true }
            return nil
        }
        // One write: each request is served before the next is read, and each reply is produced
        // after the events the requests before it caused.
        try await alice.send([
            .say(room: "order", text: "one"), .ping(token: 1), .setTopic(room: "order", text: "two"),
            .tell(recipient: "bob", text: "three"), .say(room: "nowhere", text: "refused"), .emote(room: "order", text: "four"),
            .ping(token: 2),
        ])
        let seenByAlice = try await alice.collect(7, "alice's seven frames") { Self.label($0) }
        let seenByBob = try await bob.collect(4, "bob's four frames") { Self.label($0) }
        // On a cluster node the echoes of the appends come back through Redis, after a ping or a
        // `tell` to a client of the same node could be answered: those wait for them.
        #expect(
            seenByAlice == ["message one", "pong 1", "topic two", "direct three", "error say", "action four", "pong 2"],
            "alice's frames in the order her requests produced them")
        #expect(seenByBob == ["message one", "topic two", "direct three", "action four"], "alice's direct after her events")
        alice.close()
        bob.close()
    }

    /// What a frame is, in a word and its text; nil for frames this test does not count.
    private static func label(_ frame: Frame) -> String? {
        switch frame {
        case .message("order", _, _, _, let text): "message \(text)"
        case .action("order", _, _, _, let text): "action \(text)"
        case .topic("order", _, _, _, let text): "topic \(text)"
        case .direct(_, _, _, let text): "direct \(text)"
        case .pong(let token): "pong \(token)"
        case .error(_, _, .say, _): "error say"
        default: nil
        }
    }
}
