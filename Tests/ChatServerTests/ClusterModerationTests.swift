import ChatProtocol
import Foundation
import Testing
import TestSupport

/// Room moderation across the nodes of a cluster (docs/CLUSTER.md, "Moderation"): a real
/// `redis-server` and two real `chat-server` nodes. A room's bans, modes and roles are Redis's,
/// checked in the step that numbers each event, so they hold on every node: a ban set through one
/// node keeps a joiner of the other out, a kick through one removes a member of the other in the
/// room's one order, a registered room is nobody's to take over on either, and two ops racing
/// on two nodes leave both nodes, and Redis, in one state.
@Suite("Room moderation across cluster nodes", .serialized)
struct ClusterModerationTests {
    /// A version 4 session on `node`, joined to `room` (its join read up to its `roomModes`).
    private static func member(_ nick: String, of room: String, on node: ChatServerProcess) async throws -> TestClient {
        let client = try await TestClient.connect(to: node, nick: nick, version: 4)
        try await client.send(.join(room: room))
        _ = try await client.waitFor("\(nick)'s join of #\(room)") { if case .roomModes(room, _) = $0 { true } else { nil } }
        return client
    }

    /// The code of the next error `client` receives for a request of `type`.
    private static func refusal(at client: TestClient, of type: FrameType) async throws -> ErrorCode {
        try await client.waitFor("the refusal of \(type)") { frame -> ErrorCode? in
            if case .error(let code, false, type, _) = frame { return code }
            return nil
        }
    }

    @Test func aBanThroughOneNodeHoldsOnTheOtherAndAKickThroughOneRemovesAMemberOfTheOther() async throws {
        let cluster = try await ClusterNodes()
        defer { cluster.stop() }
        let (a, b) = (cluster.nodes[0], cluster.nodes[1])
        let alice = try await Self.member("alice", of: "r", on: a)
        let bob = try await Self.member("bob", of: "r", on: b)
        let carol = try await Self.member("carol", of: "r", on: b)
        defer { for client in [alice, bob, carol] { client.close() } }

        // Roles are Redis's: the creator is op, as bob's node shows it.
        try await bob.send(.who(room: "r"))
        let modes = try await bob.waitFor("bob's who") { if case .roomModes("r", let modes) = $0 { modes } else { nil } }
        #expect(modes.ops == ["alice"] && modes.voices.isEmpty)
        try await bob.send(.setMode(room: "r", mode: .moderated, on: true, argument: ""))
        #expect(try await Self.refusal(at: bob, of: .setMode) == .notOperator, "bob, on the other node, is no op")

        // Alice bans carol's nick through node a: carol, a member on node b, is kicked by it.
        try await alice.send(.setMode(room: "r", mode: .ban, on: true, argument: "nick:Carol spam"))
        let banSeq = try await alice.waitFor("the ban") { frame -> UInt64? in
            if case .modeChanged("r", let seq, _, "alice", .ban, true, "nick:carol spam") = frame { return seq }
            return nil
        }
        let kickSeq = try await carol.waitFor("carol's kick") { frame -> UInt64? in
            if case .kicked("r", let seq, _, "carol", "alice", "banned (nick:carol): spam") = frame { return seq }
            return nil
        }
        try await alice.send(.listBans(room: "r"))
        let bans = try await alice.waitFor("the bans") { if case .banList("r", let entries) = $0 { entries } else { nil } }
        #expect(bans.map(\.mask) == ["nick:carol"] && bans.first?.reason == "spam" && bans.first?.setBy == "alice")
        #expect(kickSeq > banSeq)
        // Ban evasion: neither node lets her back in, by reconnecting to the other node either.
        try await carol.send(.join(room: "r"))
        #expect(try await Self.refusal(at: carol, of: .join) == .banned)
        carol.close()
        // Her nick is released once node b has seen her go: until then a hello for it is refused.
        var reconnected: TestClient?
        for _ in 0..<100 where reconnected == nil {
            reconnected = try? await TestClient.connect(to: a, nick: "carol", version: 4)
            if reconnected == nil { try await Task.sleep(for: .milliseconds(50)) }
        }
        let again = try #require(reconnected, "carol could not reconnect through node a")
        defer { again.close() }
        try await again.send(.join(room: "r"))
        #expect(try await Self.refusal(at: again, of: .join) == .banned, "through the other node")

        // A kick through node a removes bob, a member of node b; he gets nothing of #r after it.
        try await alice.send(.kick(room: "r", nick: "BOB", reason: "enough"))
        let bobKick = try await bob.waitFor("bob's kick") { frame -> UInt64? in
            if case .kicked("r", let seq, _, "BOB", "alice", "enough") = frame { return seq }
            return nil
        }
        try await alice.send(.say(room: "r", text: "after the kick"))
        _ = try await alice.waitFor("alice's line") { if case .message("r", _, _, "alice", "after the kick") = $0 { true } else { nil } }
        try await bob.send(.ping(token: 5))
        var afterKick: [Frame] = []
        while true {
            let frame = try await bob.expectFrame("bob's frames up to his pong")
            if case .pong(5) = frame { break }
            afterKick.append(frame)
        }
        #expect(!afterKick.contains { if case .message("r", _, _, _, _) = $0 { true } else { false } }, "\(afterKick)")
        #expect(bobKick > kickSeq)
        #expect(try await cluster.redisCLI("ZRANGE", "chat:{r}:members", "0", "-1") == ["alice"])
    }

    @Test func nobodyTakesOverARegisteredRoomOnEitherNodeWhileItsFounderIsAway() async throws {
        let cluster = try await ClusterNodes()
        defer { cluster.stop() }
        let (a, b) = (cluster.nodes[0], cluster.nodes[1])
        let founder = try await TestClient.connect(to: a, nick: "founder", version: 4)
        try await founder.send(.register(password: "pw-founder"))
        #expect(try await registration(of: founder) == .registered(account: "founder"))
        try await founder.send(.join(room: "home"))
        _ = try await founder.waitFor("the founder's join") { if case .roomModes("home", _) = $0 { true } else { nil } }
        try await founder.send(.setMode(room: "home", mode: .registered, on: true, argument: ""))
        _ = try await founder.waitFor("the registration") { if case .modeChanged("home", _, _, _, .registered, true, _) = $0 { true } else { nil } }
        try await founder.send(.setMode(room: "home", mode: .topicLock, on: true, argument: ""))
        _ = try await founder.waitFor("the topic lock") { if case .modeChanged("home", _, _, _, .topicLock, true, _) = $0 { true } else { nil } }
        founder.close()
        // Its quit reaches Redis a moment after the close: "away" is once the room lists nobody.
        #expect(await eventually { (try? await cluster.redisCLI("ZRANGE", "chat:{home}:members", "0", "-1")) == [] })

        // First in after the founder left, on the other node: no op, and the lock holds.
        let mallory = try await TestClient.connect(to: b, nick: "mallory", version: 4)
        defer { mallory.close() }
        try await mallory.send(.join(room: "home"))
        let modes = try await mallory.waitFor("mallory's join") { if case .roomModes("home", let modes) = $0 { modes } else { nil } }
        #expect(modes.founder == "founder" && modes.ops.isEmpty && modes.topicLock, "\(modes)")
        try await mallory.send(.setTopic(room: "home", text: "mine now"))
        #expect(try await Self.refusal(at: mallory, of: .setTopic) == .notOperator)
        try await mallory.send(.setMode(room: "home", mode: .registered, on: false, argument: ""))
        #expect(try await Self.refusal(at: mallory, of: .setMode) == .notOperator, "no op: refused as a server on its own refuses")

        // The founder, back through the other node, is op again.
        let back = try await TestClient.connect(to: b, nick: "someone", version: 4)
        defer { back.close() }
        try await back.send(.login(account: "founder", password: "pw-founder"))
        _ = try await back.waitFor("the founder's login") { $0 == .loggedIn(account: "founder") ? true : nil }
        try await back.send(.join(room: "home"))
        let again = try await back.waitFor("the founder's join") { if case .roomModes("home", let modes) = $0 { modes } else { nil } }
        #expect(again.ops == ["founder"], "\(again)")
        // The others learn the role the founder took, through the log, as on a server on its own.
        _ = try await mallory.waitFor("the founder's op") { if case .modeChanged("home", _, _, "founder", .op, true, "founder") = $0 { true } else { nil } }
    }

    @Test func twoOpsOnTwoNodesBanningAndUnbanningAtOnceLeaveEveryNodeInOneState() async throws {
        let cluster = try await ClusterNodes(arguments: ["--no-rate-limits"])
        defer { cluster.stop() }
        let (a, b) = (cluster.nodes[0], cluster.nodes[1])
        let alice = try await Self.member("alice", of: "r", on: a)
        let bob = try await Self.member("bob", of: "r", on: b)
        defer {
            alice.close()
            bob.close()
        }
        try await alice.send(.setMode(room: "r", mode: .op, on: true, argument: "bob"))
        _ = try await bob.waitFor("bob's op") { if case .modeChanged("r", _, _, "alice", .op, true, "bob") = $0 { true } else { nil } }

        // Each sends 50 bans and 50 unbans of the same mask, interleaved, without waiting.
        let changes = 100
        let flips = (0..<changes).map { Frame.setMode(room: "r", mode: .ban, on: $0.isMultiple(of: 2), argument: "nick:mallory") }
        async let fromA: Void = alice.send(flips)
        async let fromB: Void = bob.send(flips)
        _ = try await (fromA, fromB)
        func changesSeen(by client: TestClient) async throws -> [String] {
            var seen: [String] = []
            while seen.count < 2 * changes {
                let frame = try await client.expectFrame("ban changes")
                if case .modeChanged("r", let seq, _, let by, .ban, let on, _) = frame { seen.append("\(seq) \(by) \(on)") }
            }
            return seen
        }
        let seenA = try await changesSeen(by: alice)
        let seenB = try await changesSeen(by: bob)
        #expect(seenA == seenB, "both nodes deliver the same changes in the same order")
        let lastOn = seenA.last?.hasSuffix("true") == true
        for client in [alice, bob] {
            try await client.send(.listBans(room: "r"))
            let bans = try await client.waitFor("the ban list") { if case .banList("r", let entries) = $0 { entries } else { nil } }
            #expect(bans.map(\.mask) == (lastOn ? ["nick:mallory"] : []), "every node reads the state the last change says")
        }
    }

    @Test func aServerOperatorOnOneNodeBansKillsAndClosesOnTheOther() async throws {
        let cluster = try await ClusterNodes(arguments: ["--admin-account", "root"])
        defer { cluster.stop() }
        let (a, b) = (cluster.nodes[0], cluster.nodes[1])
        // The operator makes the account in the cluster's Redis: a client may not register it.
        try await ModerationTests.createOperator("root", ["--cluster", "redis://127.0.0.1:\(cluster.redis.port)"])
        let root = try await ModerationTests.loggedIn("root", on: a)
        let mallory = try await TestClient.connect(to: b, nick: "mallory", version: 4)
        let bob = try await Self.member("bob", of: "spam", on: b)
        defer { for client in [root, mallory, bob] { client.close() } }

        // A ban through node a ends mallory's session on node b, and node b refuses her hello.
        try await root.send(.serverBan(on: true, mask: "nick:Mallory", reason: "spam"))
        let done = try await root.waitFor("the ban's answer") { if case .done(.serverBan, let text) = $0 { text } else { nil } }
        #expect(done.contains("nick:mallory"))
        let ended = try await mallory.waitFor("mallory's end") { frame -> ErrorCode? in
            if case .error(let code, true, _, _) = frame { return code }
            return nil
        }
        #expect(ended == .banned)
        do {
            _ = try await TestClient.connect(to: b, nick: "mallory", version: 4)
            Issue.record("node b welcomed a banned nick")
        } catch {
            #expect("\(error)".contains("banned"), "\(error)")
        }

        // Closing a room through node a kicks its members on node b; a kill reaches bob there.
        try await root.send(.serverBan(on: true, mask: "room:spam", reason: "closed"))
        _ = try await bob.waitFor("bob's kick") { if case .kicked("spam", _, _, "bob", "root", _) = $0 { true } else { nil } }
        try await bob.send(.join(room: "spam"))
        #expect(try await Self.refusal(at: bob, of: .join) == .banned)
        try await root.send(.kill(nick: "bob", reason: "abuse"))
        #expect(try await root.waitFor("the kill's answer") { if case .done(.kill, let text) = $0 { text } else { nil } } == "killed bob")
        let killed = try await bob.waitFor("bob's end") { frame -> String? in
            if case .error(.killed, true, _, let reason) = frame { return reason }
            return nil
        }
        #expect(killed.contains("abuse"))
        try await root.send(.listBans(room: ""))
        let bans = try await root.waitFor("the server's bans") { if case .banList("", let entries) = $0 { entries } else { nil } }
        #expect(bans.map(\.mask) == ["nick:mallory", "room:spam"])
    }
}
