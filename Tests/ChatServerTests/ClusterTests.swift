import ChatCore
import ChatClient
import ChatProtocol
import ChatServer
import Foundation
import Glibc
import SocketCore
import TestSupport
import Testing

/// A real `redis-server` and real `chat-server` nodes joined to it through `--cluster`.
private final class Cluster: Sendable {
    let redis: RedisServerProcess
    let nodes: [ChatServerProcess]

    /// Starts Redis (with `redisArguments`, in `redisDirectory` if given) and `count` nodes;
    /// `nodeArguments` go to every node, after `limits` (by default no rate limits: every
    /// client of a test comes from one address).
    init(
        nodes count: Int, nodeArguments: [String] = [], limits: [String] = ["--no-rate-limits"], redisArguments: [String] = [],
        redisDirectory: TemporaryDirectory? = nil
    ) async throws {
        redis = try await RedisServerProcess(directory: redisDirectory, extraArguments: redisArguments)
        var nodes: [ChatServerProcess] = []
        for _ in 0..<count {
            nodes.append(
                try await ChatServerProcess(arguments: ["--cluster", "redis://127.0.0.1:\(redis.port)"] + limits + nodeArguments))
        }
        self.nodes = nodes
        for node in nodes {
            let up = await node.child.waitFor(timeout: .seconds(60)) { output, _ in output.contains("cluster link up") }
            #expect(up, "node on port \(node.port) did not connect to Redis:\n\(node.child.output)")
        }
    }

    func stop() {
        for node in nodes { node.stop() }
        redis.stop()
    }

    /// The logs of every node, for failure messages.
    var logs: String { nodes.map { "--- node on port \($0.port):\n\($0.child.output)" }.joined(separator: "\n") }

    /// Connects a client (protocol 2) for each of `nicks` — the first to node 0, the next to
    /// node 1, and so on round the nodes — then joins each to `room`, in order, unless it is
    /// nil. The caller closes them.
    func clients(_ nicks: String..., joining room: String? = "r") async throws -> [TestClient] {
        var clients: [TestClient] = []
        for (index, nick) in nicks.enumerated() {
            clients.append(try await TestClient.connect(port: nodes[index % nodes.count].port, nick: nick, version: 2))
        }
        if let room { for client in clients { try await client.clusterJoin(room) } }
        return clients
    }

    /// The id the node at `index` has in the cluster, from its "cluster node starting" line.
    func nodeID(_ index: Int) -> String {
        let output = nodes[index].child.output
        guard let range = output.range(of: "cluster.node=") else { return "" }
        return String(output[range.upperBound...].prefix { !$0.isWhitespace && $0 != "]" })
    }

    /// What `redis-cli` prints for one command against the cluster's Redis: a reply's items, one
    /// per line (nothing for an empty list). Read from outside the nodes, as an operator would.
    func redisCLI(_ arguments: String...) async throws -> [String] {
        let child = try ChildProcess(URL(fileURLWithPath: "/usr/bin/redis-cli"), ["-p", "\(redis.port)"] + arguments)
        let status = await child.waitForExit()
        #expect(status == 0, "redis-cli \(arguments) failed: \(child.output)")
        return child.lines.map(String.init)
    }
}

extension TestClient {
    /// Joins `room` (protocol 2) and reads the join sequence through the history page; returns the
    /// `seq` of its own `joined`.
    @discardableResult
    func clusterJoin(_ room: String) async throws -> UInt64 {
        try await send(.join(room: room))
        let seq = try await waitFor("joined #\(room)") { frame -> UInt64? in
            if case .joined(room, let seq, _, nick) = frame { return seq }
            if case .error(let code, _, _, let reason) = frame { Issue.record("join refused: \(code) \(reason)") }
            return nil
        }
        let state = try await waitFor("roomState of #\(room)") { frame -> UInt64? in
            if case .roomState(room, _, _, let lastSeq) = frame { return lastSeq }
            return nil
        }
        #expect(state == seq, "roomState's lastSeq is the joiner's own joined")
        _ = try await waitFor("the history page of #\(room)") { frame -> Bool? in
            if case .historyPage(room, _, _, _) = frame { return true }
            return nil
        }
        return seq
    }
}

extension TestClient {
    /// Sends `ping(token)` and returns the frames that come before its `pong`: on a node as on a
    /// single server, every answer to the requests sent before it (docs/SERVER.md, "Order").
    func upToPong(_ token: UInt64) async throws -> [Frame] {
        try await send(.ping(token: token))
        var frames: [Frame] = []
        _ = try await waitFor("pong \(token)") { frame -> Bool? in
            if case .pong(token) = frame { return true }
            frames.append(frame)
            return nil
        }
        return frames
    }
}

/// One line said in a room, as a member received it.
private struct Heard: Hashable, Sendable {
    var seq: UInt64
    var sender: String
    var text: String
}

/// How a `hello` ended.
private enum Claim: Sendable {
    case welcomed(ChatConnection)
    case refused(ErrorCode)
}

/// One test at a time: each starts its own Redis and nodes.
@Suite("Cluster mode: real nodes on a real Redis", .serialized)
struct ClusterTests {
    @Test func everyMemberOnEveryNodeHearsEveryMessageOnceInOneOrder() async throws {
        let cluster = try await Cluster(nodes: 3)
        defer { cluster.stop() }
        let perNode = 2
        let messagesEach = 40
        var clients: [TestClient] = []
        for (index, node) in cluster.nodes.enumerated() {
            for member in 0..<perNode {
                let client = try await TestClient.connect(port: node.port, nick: "n\(index)m\(member)", version: 2)
                try await client.clusterJoin("lobby")
                clients.append(client)
            }
        }
        defer { for client in clients { client.close() } }
        let total = clients.count * messagesEach
        // Everyone speaks at once, pipelined.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for client in clients {
                group.addTask {
                    try await client.send((1...messagesEach).map { Frame.say(room: "lobby", text: "\(client.nick) \($0)") })
                }
            }
            try await group.waitForAll()
        }
        let heard = try await withThrowingTaskGroup(of: (String, [Heard]).self) { group in
            for client in clients {
                group.addTask {
                    let lines = try await client.collect(total, "messages") { frame -> Heard? in
                        if case .message("lobby", let seq, _, let sender, let text) = frame { return Heard(seq: seq, sender: sender, text: text) }
                        return nil
                    }
                    return (client.nick, lines)
                }
            }
            var all: [String: [Heard]] = [:]
            for try await (nick, lines) in group { all[nick] = lines }
            return all
        }
        let reference = heard[clients[0].nick]!
        #expect(Set(reference).count == total, "every message once")
        #expect(zip(reference, reference.dropFirst()).allSatisfy { $0.seq < $1.seq }, "in seq order")
        for client in clients {
            #expect(heard[client.nick] == reference, "\(client.nick) heard the same lines in the same order as \(clients[0].nick)")
            // Each sender's lines in the order it sent them.
            let own = reference.filter { $0.sender == client.nick }.map(\.text)
            #expect(own == (1...messagesEach).map { "\(client.nick) \($0)" })
        }
    }

    @Test func ofClientsOnAllNodesClaimingOneNickAtOnceExactlyOneIsWelcomed() async throws {
        let cluster = try await Cluster(nodes: 3)
        defer { cluster.stop() }
        for round in 1...5 {
            let outcomes = try await withThrowingTaskGroup(of: Claim.self) { group in
                for node in cluster.nodes {
                    for _ in 0..<4 {
                        group.addTask {
                            do {
                                return .welcomed(try await ChatConnection.connect(host: "127.0.0.1", port: node.port, nick: "racer", version: 2))
                            } catch let ChatConnection.HandshakeError.refused(code, _) {
                                return .refused(code)
                            }
                        }
                    }
                }
                var outcomes: [Claim] = []
                for try await outcome in group { outcomes.append(outcome) }
                return outcomes
            }
            let winners = outcomes.compactMap { if case .welcomed(let connection) = $0 { connection } else { nil } }
            let refusals = outcomes.compactMap { if case .refused(let code) = $0 { code } else { nil } }
            #expect(winners.count == 1, "round \(round): exactly one of 12 is welcomed")
            #expect(refusals.allSatisfy { $0 == .nickTaken } && refusals.count == 11, "round \(round): the others get nickTaken: \(refusals)")
            for winner in winners {
                // Said goodbye and gone: the nick is free for the next round once its node let it go.
                try await winner.send(Frame.goodbye(reason: "next round"))
                winner.close()
            }
            let free = try await eventually(timeout: .seconds(30)) {
                do {
                    let probe = try await ChatConnection.connect(host: "127.0.0.1", port: cluster.nodes[round % 3].port, nick: "racer", version: 2)
                    try await probe.send(Frame.goodbye(reason: "probe"))
                    probe.close()
                    return true
                } catch ChatConnection.HandshakeError.refused(ErrorCode.nickTaken, _) {
                    return false
                }
            }
            #expect(free, "round \(round): the nick is free again after its holder left")
            guard free else { return }
        }
    }

    @Test func whoListRoomsTopicsAndHistoryAreTheClustersOnEveryNode() async throws {
        let cluster = try await Cluster(nodes: 2)
        defer { cluster.stop() }
        let clients = try await cluster.clients("ann", "bob", joining: nil)
        defer { for client in clients { client.close() } }
        let (ann, bob) = (clients[0], clients[1])
        try await ann.clusterJoin("r")
        try await ann.send(.setTopic(room: "r", text: "plans"))
        for line in 1...5 { try await ann.send(.say(room: "r", text: "line \(line)")) }
        _ = try await ann.waitFor("ann's last echo") { if case .message("r", _, _, "ann", "line 5") = $0 { true } else { nil } }

        // Bob, on the other node, joins and is told the room as the cluster has it.
        try await bob.send(.join(room: "r"))
        var topic: String?
        var members: [String] = []
        var history: [String] = []
        while true {
            let frame = try await bob.expectFrame("bob's join sequence")
            if case .topic("r", _, _, "ann", let text) = frame { topic = text }
            if case .membersPage("r", _, let nicks) = frame { members += nicks }
            if case .historyPage("r", _, _, let entries) = frame {
                history = entries.map(\.text)
                break
            }
        }
        #expect(topic == "plans")
        #expect(members == ["ann", "bob"])
        #expect(history == ["plans"] + (1...5).map { "line \($0)" }, "the topic change and the lines, oldest first")

        try await bob.send(.who(room: "r"))
        let who = try await bob.waitFor("who") { if case .membersPage("r", true, let nicks) = $0 { nicks } else { nil } }
        #expect(who == ["ann", "bob"])
        try await ann.send(.listRooms)
        let rooms = try await ann.waitFor("the room list") { if case .roomListPage(true, let rooms) = $0 { rooms } else { nil } }
        #expect(rooms == [RoomInfo(name: "r", memberCount: 2, topic: "plans")])

        // A client that moves node catches up with fetchHistory after the last seq it saw.
        // seq 1 is ann's joined, 2 the topic, 3 to 7 the lines, 8 bob's joined.
        try await bob.send(.fetchHistory(room: "r", direction: .after, seq: 4, limit: 100))
        let page = try await bob.waitFor("the page after seq 4") { if case .historyPage("r", _, let complete, let entries) = $0 { (complete, entries) } else { nil } }
        #expect(page.0)
        #expect(page.1.map(\.text) == (3...5).map { "line \($0)" })
        #expect(page.1.map(\.seq) == [5, 6, 7])
    }

    /// A history longer than one frame reaches a version 1 client whole, over several `history`
    /// frames, as on a single server (docs/PROTOCOL.md, "History"): when it joins on another node
    /// and when it asks with `requestHistory`; the newest `count` messages when it asks for fewer.
    @Test func aVersion1ClientGetsAHistoryLongerThanAFrameWholeOverSeveralFrames() async throws {
        // Few connections leave a room's share of the memory budget room for 70 long lines.
        let cluster = try await Cluster(nodes: 2, nodeArguments: ["--max-clients", "100"])
        defer { cluster.stop() }
        let ann = try await TestClient.connect(port: cluster.nodes[0].port, nick: "ann", version: 2)
        defer { ann.close() }
        try await ann.clusterJoin("r")  // seq 1
        // 70 lines of 16 kB: 1.1 MB, more than one frame (1 MiB) holds.
        let lines = (1...70).map { "line \($0) " + String(repeating: "x", count: 16_000) }
        try await ann.send(lines.map { .say(room: "r", text: $0) })  // seq 2…71
        _ = try await ann.collect(lines.count, "ann's echoes") { if case .message("r", _, _, "ann", _) = $0 { true } else { nil } }

        let bob = try await TestClient.connect(port: cluster.nodes[1].port, nick: "bob", version: 1)
        defer { bob.close() }
        try await bob.send(.join(room: "r"))  // seq 72
        let joinSequence = try await bob.upToPong(1)
        let ownJoined = if case .joined("r", 72, _, "bob")? = joinSequence.first { true } else { false }
        #expect(ownJoined, "its own joined first: \(joinSequence.first.map { "\($0.type)" } ?? "nothing")")
        let replay = Self.historyFrames(in: joinSequence)
        #expect(replay.count > 1, "the replay is more than one frame: \(replay.count)")
        #expect(replay.flatMap { $0 }.map(\.seq) == Array(2...71), "every line, once, in order")
        #expect(replay.flatMap { $0 }.map(\.text) == lines)

        try await bob.send(.requestHistory(room: "r", count: 200))
        let asked = Self.historyFrames(in: try await bob.upToPong(2))
        #expect(asked.count > 1, "the answer is more than one frame: \(asked.count)")
        #expect(asked.flatMap { $0 }.map(\.seq) == Array(2...71), "every line, once, in order")

        try await bob.send(.requestHistory(room: "r", count: 3))
        let newest = Self.historyFrames(in: try await bob.upToPong(3))
        #expect(newest.map { $0.map(\.seq) } == [[69, 70, 71]], "the newest three, in one frame")
    }

    /// A history page that holds the room's last history entry in its direction is `complete`,
    /// though joins and leaves lie beyond it in Redis's stream — more of them than a node reads
    /// at once — and one that does not hold it is not (docs/PROTOCOL.md, "Paging history").
    @Test func aHistoryPageIsCompleteWhenOnlyPresenceEventsLieBeyondIt() async throws {
        let cluster = try await Cluster(nodes: 2)
        defer { cluster.stop() }
        let clients = try await cluster.clients("ann", "bob", joining: nil)
        defer { for client in clients { client.close() } }
        let (ann, bob) = (clients[0], clients[1])
        try await ann.clusterJoin("r")  // seq 1
        for line in 1...3 { try await ann.send(.say(room: "r", text: "m\(line)")) }  // seq 2…4
        _ = try await ann.waitFor("ann's last echo") { if case .message("r", _, _, "ann", "m3") = $0 { true } else { nil } }
        // Bob joins on the other node and is replayed the whole history, told it is complete.
        try await bob.send(.join(room: "r"))  // seq 5
        let replay = try await bob.waitFor("bob's replay") { if case .historyPage("r", _, let complete, let entries) = $0 { (complete, entries) } else { nil } }
        #expect(replay.0, "the replay holds the oldest history entry: complete")
        #expect(replay.1.map(\.seq) == [2, 3, 4])
        // 100 presence events: more than one read of the stream (64 events).
        for _ in 1...50 {  // seq 6…105
            try await bob.send(.part(room: "r"))
            _ = try await bob.waitFor("bob's left") { if case .left("r", _, _, "bob") = $0 { true } else { nil } }
            try await bob.clusterJoin("r")
        }
        func page(_ direction: HistoryDirection, _ seq: UInt64, limit: UInt32 = 3) async throws -> (seqs: [UInt64], complete: Bool) {
            try await ann.send(.fetchHistory(room: "r", direction: direction, seq: seq, limit: limit))
            return try await ann.waitFor("a page \(direction) \(seq)") { frame in
                if case .historyPage("r", _, let complete, let entries) = frame { (entries.map(\.seq), complete) } else { nil }
            }
        }
        #expect(try await page(.after, 0) == ([2, 3, 4], true), "only presence events after m3")
        #expect(try await page(.before, 0) == ([2, 3, 4], true), "only ann's joined before m1")
        #expect(try await page(.after, 0, limit: 2) == ([2, 3], false), "m3 lies beyond")
        try await ann.send(.say(room: "r", text: "m4"))  // seq 106
        _ = try await ann.waitFor("ann's echo") { if case .message("r", _, _, "ann", "m4") = $0 { true } else { nil } }
        #expect(try await page(.after, 0) == ([2, 3, 4], false), "m4 lies beyond the presence events")
        #expect(try await page(.after, 4) == ([106], true))
        #expect(try await page(.before, 106) == ([2, 3, 4], true), "back over the presence events to the oldest")
    }

    /// The entries of each `history` frame among `frames`, in order.
    private static func historyFrames(in frames: [Frame]) -> [[HistoryEntry]] {
        frames.compactMap { if case .history(_, let entries) = $0 { entries } else { nil } }
    }

    @Test func aDirectMessageReachesANickOnAnotherNode() async throws {
        let cluster = try await Cluster(nodes: 2)
        defer { cluster.stop() }
        let clients = try await cluster.clients("ann", "bob", joining: nil)
        defer { for client in clients { client.close() } }
        let (ann, bob) = (clients[0], clients[1])
        try await ann.send(.tell(recipient: "BOB", text: "psst"))
        let received = try await bob.waitFor("the direct message") { if case .direct("ann", _, _, let text) = $0 { text } else { nil } }
        #expect(received == "psst")
        let echo = try await ann.waitFor("ann's copy") { if case .direct("ann", let to, _, let text) = $0 { (to, text) } else { nil } }
        #expect(echo == ("BOB", "psst"))
        // Bob's away message reaches a sender on another node, as on a single server.
        try await bob.send(.setAway(text: "at lunch"))
        _ = try await bob.waitFor("bob's away echo") { if case .away("bob", "at lunch") = $0 { true } else { nil } }
        // A read through bob's node after it: Redis answered it, so it has the away message too.
        try await bob.send(.listRooms)
        _ = try await bob.waitFor("a room list") { if case .roomListPage(true, _) = $0 { true } else { nil } }
        try await ann.send(.tell(recipient: "bob", text: "back soon?"))
        let away = try await ann.waitFor("bob's away message") { if case .away(let nick, let text) = $0 { (nick, text) } else { nil } }
        #expect(away == ("bob", "at lunch"))
        try await bob.send(.setAway(text: ""))
        _ = try await bob.waitFor("bob's return echo") { if case .away("bob", "") = $0 { true } else { nil } }
        try await bob.send(.listRooms)
        _ = try await bob.waitFor("a room list") { if case .roomListPage(true, _) = $0 { true } else { nil } }
        try await ann.send(.tell(recipient: "bob", text: "welcome back"))
        _ = try await ann.waitFor("ann's copy") { frame -> Bool? in
            if case .away = frame { Issue.record("no away message once bob is back") }
            if case .direct("ann", _, _, "welcome back") = frame { return true }
            return nil
        }
        try await ann.send(.tell(recipient: "nobody", text: "hello?"))
        let refusal = try await ann.waitFor("the refusal") { if case .error(let code, false, .tell, _) = $0 { code } else { nil } }
        #expect(refusal == .noSuchNick)
    }

    @Test func aDirectMessageToAnotherNodeFollowsTheSendersEarlierEventsOnBothNodes() async throws {
        let cluster = try await Cluster(nodes: 2)
        defer { cluster.stop() }
        let clients = try await cluster.clients("ann", "bob")
        defer { for client in clients { client.close() } }
        let (ann, bob) = (clients[0], clients[1])
        /// A frame of this test in a word and its text; nil for the others.
        @Sendable func label(_ frame: Frame) -> String? {
            switch frame {
            case .message("r", _, _, "ann", let text): "message \(text)"
            case .direct("ann", _, _, let text): "direct \(text)"
            case .pong(let token): "pong \(token)"
            default: nil
            }
        }
        // Rounds, because the echoes and the direct message's answer come back to ann's node on
        // two connections to Redis, in either order.
        for round in 1...10 {
            try await ann.send([
                .say(room: "r", text: "\(round)a"), .tell(recipient: "bob", text: "\(round)b"), .ping(token: UInt64(round)),
                .say(room: "r", text: "\(round)c"), .ping(token: UInt64(100 + round)),
            ])
            let seenByAnn = try await ann.collect(5, "ann's frames of round \(round)", label)
            let seenByBob = try await bob.collect(3, "bob's frames of round \(round)", label)
            #expect(
                seenByAnn == ["message \(round)a", "direct \(round)b", "pong \(round)", "message \(round)c", "pong \(100 + round)"],
                "ann's frames in the order her requests produced them")
            #expect(
                seenByBob == ["message \(round)a", "direct \(round)b", "message \(round)c"],
                "bob, on the other node, gets ann's direct message after her line before it and before her line after it")
        }
    }

    @Test func framesHeldBehindAStalledAppendStopTheirClientRatherThanGrowTheNode() async throws {
        // A node timeout longer than the test: the link does not fail, Redis just stops answering.
        let cluster = try await Cluster(nodes: 1, nodeArguments: ["--cluster-node-timeout", "600"])
        defer {
            cluster.redis.child.signal(SIGCONT)
            cluster.stop()
        }
        let node = cluster.nodes[0]
        let bob = try await TestClient.connect(port: node.port, nick: "bob", version: 2)
        defer { bob.close() }
        let flooder = try BlockingSocket(port: node.port)
        defer { flooder.close() }
        await joinAsFlooder(flooder)
        let before = node.child.residentBytes ?? 0
        cluster.redis.child.signal(SIGSTOP)
        // One line that Redis does not answer; behind its echo wait 64 MiB of direct messages to a
        // client of the same node, each with a ping, which the flooder never reads the answers to.
        let text = String(repeating: "x", count: 8_000)
        var bytes: [UInt8] = []
        FrameEncoder.encode(.say(room: "r", text: "stalled"), into: &bytes)
        for token in 0..<8_192 {
            FrameEncoder.encode(.tell(recipient: "bob", text: text), into: &bytes)
            FrameEncoder.encode(.ping(token: UInt64(token)), into: &bytes)
        }
        let sent = await flooder.send(bytes, timeout: .seconds(3))
        #expect(sent < bytes.count, "the node stopped reading the flooder once what waited passed its high-water mark (took \(sent) bytes)")
        let peak = node.child.peakResidentBytes ?? Int.max
        // Held: the reply high-water mark (256 KiB) and a frame; the rest is the kernel's and the
        // decoder's.
        #expect(peak - before < 24 << 20, "the node grew by \(peak - before) bytes while the flooder's frames waited")

        cluster.redis.child.signal(SIGCONT)
        _ = try await bob.waitFor("the flooder's direct messages, once its line came back") { frame -> Bool? in
            if case .direct("flood", "bob", _, text) = frame { return true }
            return nil
        }
    }

    @Test func aKilledNodesNicksAreFreedAndTheOthersSeeItsMembersQuit() async throws {
        let cluster = try await Cluster(nodes: 3, nodeArguments: ["--cluster-node-timeout", "2"])
        defer { cluster.stop() }
        let clients = try await cluster.clients("ann", "bob", "cat")
        defer { for client in clients { client.close() } }
        let (ann, bob) = (clients[0], clients[1])
        cluster.nodes[2].child.killNow()
        // Stated bound: the node timeout (2 s here) and a reap interval, once the others' links have
        // been up for the node timeout plus 5 s; the wait is for the event, with room to spare.
        for client in [ann, bob] {
            let quit = try await client.collect(1, "cat's quit", limit: .seconds(90)) { frame -> String? in
                if case .quit("r", _, _, "cat", let reason) = frame { return reason }
                return nil
            }
            #expect(quit.first?.isEmpty == false)
        }
        let again = try await TestClient.connect(port: cluster.nodes[0].port, nick: "cat", version: 2)
        defer { again.close() }
        try await ann.send(.who(room: "r"))
        let who = try await ann.waitFor("who") { if case .membersPage("r", true, let nicks) = $0 { nicks } else { nil } }
        #expect(who == ["ann", "bob"], "the dead node's member is gone from the room")
        let reapLogged = await eventually { cluster.nodes.prefix(2).contains { $0.child.output.contains("cluster node gone") } }
        #expect(reapLogged, "a node logged the reap:\n\(cluster.logs)")
    }

    @Test func aNodeListsOnlyTheRoomsItHasMembersInAndIsStillReapedWhole() async throws {
        let cluster = try await Cluster(nodes: 2, nodeArguments: ["--cluster-node-timeout", "2"])
        defer { cluster.stop() }
        let node = cluster.nodeID(0)
        #expect(!node.isEmpty, "the node's id is in its log:\n\(cluster.logs)")
        let ann = try await TestClient.connect(port: cluster.nodes[0].port, nick: "ann", version: 2)
        let amy = try await TestClient.connect(port: cluster.nodes[0].port, nick: "amy", version: 2)
        let bob = try await TestClient.connect(port: cluster.nodes[1].port, nick: "bob", version: 2)
        defer {
            ann.close()
            amy.close()
            bob.close()
        }
        for room in ["k1", "k2", "k3"] { try await bob.clusterJoin(room) }
        try await ann.clusterJoin("k1")
        try await ann.clusterJoin("k2")
        try await amy.clusterJoin("k2")
        try await amy.clusterJoin("k3")

        // A long-lived node sees many short-lived rooms: 200 of them, joined and left, pipelined.
        // Each gets its whole join sequence, then its `left`, even when it left before the node
        // had read what a joiner is told.
        try await ann.send((1...200).flatMap { [Frame.join(room: "c\($0)"), .part(room: "c\($0)")] })
        var told: Set<String> = []
        var acknowledged: [String] = []
        while acknowledged.last != "c200" {
            let frame = try await ann.expectFrame("ann's join sequences and lefts")
            if case .error(let code, _, _, let reason) = frame { Issue.record("\(code): \(reason)") }
            if case .historyPage(let room, _, _, _) = frame { told.insert(room) }
            if case .left(let room, _, _, "ann") = frame {
                #expect(told.contains(room), "\(room): its history page came before its left")
                acknowledged.append(room)
            }
        }
        #expect(acknowledged == (1...200).map { "c\($0)" }, "one left per room, in order")
        // The `left` is published by the step that unlisted the room: Redis has done it.
        #expect(try await cluster.redisCLI("SMEMBERS", "chat:node:\(node):rooms").sorted() == ["k1", "k2", "k3"])
        try await ann.send(.part(room: "k2"))
        _ = try await ann.waitFor("ann's left of k2") { if case .left("k2", _, _, "ann") = $0 { true } else { nil } }
        #expect(
            try await cluster.redisCLI("SMEMBERS", "chat:node:\(node):rooms").sorted() == ["k1", "k2", "k3"],
            "amy still serves the node in k2")

        // Killed, the node is still reaped whole: every member it had quits, no one else.
        cluster.nodes[0].child.killNow()
        let quits = try await bob.collect(3, "the dead node's members' quits", limit: .seconds(90)) { frame -> String? in
            if case .quit(let room, _, _, let nick, _) = frame { return "\(room) \(nick)" }
            return nil
        }
        #expect(Set(quits) == ["k1 ann", "k2 amy", "k3 amy"], "\(quits)")
        for room in ["k1", "k2", "k3"] {
            try await bob.send(.who(room: room))
            let who = try await bob.waitFor("who in \(room)") { if case .membersPage(room, true, let nicks) = $0 { nicks } else { nil } }
            #expect(who == ["bob"], "\(room): only bob is left")
        }
        #expect(try await cluster.redisCLI("EXISTS", "chat:node:\(node):rooms") == ["0"], "the dead node's list is gone")
    }

    @Test func redisKilledAndRestartedRefusesClearlyMeanwhileAndLosesNothingAccepted() async throws {
        let directory = try TemporaryDirectory(prefix: "redis-aof")
        defer { directory.remove() }
        let durable = ["--appendonly", "yes", "--appendfsync", "always"]
        // A node timeout longer than any restart here, so the nodes' registrations outlive the
        // outage and their clients stay (past it they must go: the next test).
        let cluster = try await Cluster(
            nodes: 2, nodeArguments: ["--cluster-node-timeout", "60"], redisArguments: durable, redisDirectory: directory)
        defer { cluster.stop() }
        let clients = try await cluster.clients("sender", "listener")
        defer { for client in clients { client.close() } }
        let (sender, listener) = (clients[0], clients[1])

        var heardBySender: [Heard] = []
        var accepted: [String] = []
        var refused: [String] = []
        var number = 0
        /// Says the next line and waits for its fate: its echo (accepted) or `unavailable`.
        func sayNext() async throws -> Bool {
            number += 1
            let text = "m\(number)"
            try await sender.send(.say(room: "r", text: text))
            while true {
                let frame = try await sender.expectFrame("the echo of \(text) or an error")
                if case .message("r", let seq, _, "sender", let echoed) = frame {
                    heardBySender.append(Heard(seq: seq, sender: "sender", text: echoed))
                    if echoed == text {
                        accepted.append(text)
                        return true
                    }
                } else if case .error(let code, let fatal, .say, let reason) = frame {
                    #expect(code == .unavailable && !fatal, "a non-fatal unavailable, got \(code): \(reason)")
                    #expect(reason.contains("unavailable"), "the reason says the cluster is unavailable: \(reason)")
                    refused.append(text)
                    return false
                }
            }
        }
        for _ in 1...10 { #expect(try await sayNext(), "accepted while Redis is up") }

        cluster.redis.kill()
        var sawRefusal = false
        for _ in 1...200 where !sawRefusal {
            if try await !sayNext() { sawRefusal = true }
        }
        #expect(sawRefusal, "lines said while Redis is gone are refused with unavailable")
        #expect(await cluster.nodes[0].child.waitForOutput("cluster link down"), "the node says the link is down")

        let restarted = try await RedisServerProcess(port: cluster.redis.port, directory: directory, extraArguments: durable)
        defer { restarted.stop() }
        for node in cluster.nodes {
            let back = await node.child.waitFor(timeout: .seconds(60)) { output, _ in
                output.components(separatedBy: "cluster link up").count >= 3
            }
            #expect(back, "node on port \(node.port) reconnected:\n\(node.child.output)")
        }
        for _ in 1...10 { #expect(try await sayNext(), "accepted once Redis is back") }
        #expect(!refused.isEmpty && accepted.count == 20)

        let last = accepted.last!
        var heardByListener: [Heard] = []
        while heardByListener.last?.text != last {
            let frame = try await listener.expectFrame("the listener's lines up to \(last)")
            if case .message("r", let seq, _, let from, let text) = frame { heardByListener.append(Heard(seq: seq, sender: from, text: text)) }
        }
        #expect(heardByListener == heardBySender, "both members heard the same lines in the same order")
        #expect(Set(heardByListener).count == heardByListener.count, "none twice")
        #expect(zip(heardByListener, heardByListener.dropFirst()).allSatisfy { $0.seq < $1.seq })
        let heardTexts = Set(heardByListener.map(\.text))
        #expect(accepted.allSatisfy { heardTexts.contains($0) }, "every accepted line reached the other node")
    }

    @Test func anAwaySetWhileRedisIsDownReachesTheClusterWhenItIsBackAndTheLatestWins() async throws {
        let directory = try TemporaryDirectory(prefix: "redis-aof")
        defer { directory.remove() }
        // Durable, so an away message Redis had before an outage is still there after it: only
        // the node can bring the later one.
        let durable = ["--appendonly", "yes", "--appendfsync", "always"]
        let cluster = try await Cluster(
            nodes: 2, nodeArguments: ["--cluster-node-timeout", "60"], redisArguments: durable, redisDirectory: directory)
        defer { cluster.stop() }
        let clients = try await cluster.clients("ann", "bob", joining: nil)
        defer { for client in clients { client.close() } }
        let (ann, bob) = (clients[0], clients[1])
        var restarted: [RedisServerProcess] = []
        defer { for redis in restarted { redis.stop() } }
        /// Kills Redis, then runs `meanwhile` while it is down, then starts it again on its port.
        func outage(_ number: Int, meanwhile: () async throws -> Void) async throws {
            (restarted.last ?? cluster.redis).kill()
            for node in cluster.nodes {
                let down = await node.child.waitFor(timeout: .seconds(60)) { output, _ in
                    output.components(separatedBy: "cluster link down").count > number
                }
                #expect(down, "node on port \(node.port) noticed outage \(number):\n\(node.child.output)")
            }
            try await meanwhile()
            restarted.append(try await RedisServerProcess(port: cluster.redis.port, directory: directory, extraArguments: durable))
            for node in cluster.nodes {
                let up = await node.child.waitFor(timeout: .seconds(60)) { output, _ in
                    output.components(separatedBy: "cluster link up").count > number + 1
                }
                #expect(up, "node on port \(node.port) reconnected after outage \(number):\n\(node.child.output)")
            }
            // What bob's node kept went to Redis first thing at link-up: a read through it that
            // is answered was answered after it.
            try await untilServed(bob, .listRooms) { if case .roomListPage(true, _) = $0 { true } else { nil } }
        }
        /// Sends `request` until it is not refused with `unavailable` (a node's link may come up
        /// a moment after the log says so); returns what `match` takes from the answer.
        @discardableResult
        func untilServed<T>(_ client: TestClient, _ request: Frame, _ match: (Frame) -> T?) async throws -> T {
            while true {
                try await client.send(request)
                let answer = try await client.waitFor("the answer to \(request.type)") { frame -> Result<T, ClusterFailure>? in
                    if case .error(.unavailable, false, _, let reason) = frame { return .failure(ClusterFailure(reason: reason)) }
                    return match(frame).map { .success($0) }
                }
                if case .success(let value) = answer { return value }
            }
        }
        /// What ann is told when she tells bob something: the away message she got with it, if any.
        func awayToldToAnn(saying text: String) async throws -> String? {
            var away: String?
            try await untilServed(ann, .tell(recipient: "bob", text: text)) { frame -> Bool? in
                if case .away("bob", let message) = frame { away = message }
                if case .direct("ann", "bob", _, text) = frame { return true }
                return nil
            }
            // The away message comes right after the copy of the direct message.
            try await ann.send(.ping(token: 7))
            _ = try await ann.waitFor("the pong after the copy") { frame -> Bool? in
                if case .away("bob", let message) = frame { away = message }
                if case .pong(7) = frame { return true }
                return nil
            }
            return away
        }

        try await outage(1) {
            try await bob.send(.setAway(text: "at lunch"))
            _ = try await bob.waitFor("bob's away echo") { if case .away("bob", "at lunch") = $0 { true } else { nil } }
        }
        #expect(try await awayToldToAnn(saying: "lunch?") == "at lunch", "the away message set during the outage reached the cluster")

        // Set while Redis is up (and kept in its file), then changed twice during an outage: the
        // last change wins, though Redis comes back with the first.
        try await bob.send(.setAway(text: "in a meeting"))
        _ = try await bob.waitFor("bob's away echo") { if case .away("bob", "in a meeting") = $0 { true } else { nil } }
        // The echo is bob's node's, at once; ann's node reads the message from Redis, which bob's
        // node tells a moment later.
        let stored = try await eventually { try await cluster.redisCLI("GET", "chat:away:bob") == ["bob in a meeting"] }
        #expect(stored, "bob's node stored his away message in Redis")
        #expect(try await awayToldToAnn(saying: "meeting?") == "in a meeting")
        try await outage(2) {
            try await bob.send(.setAway(text: "back in 5"))
            try await bob.send(.setAway(text: ""))
            _ = try await bob.waitFor("bob's return echo") { if case .away("bob", "") = $0 { true } else { nil } }
        }
        #expect(try await awayToldToAnn(saying: "back?") == nil, "bob's return, the latest, won")
        #expect(try await cluster.redisCLI("EXISTS", "chat:away:bob") == ["0"])
    }

    @Test func aBadClusterAddressStopsTheServerWithAClearMessage() async throws {
        let executable = try ChildProcess.builtExecutable(named: "chat-server")
        let child = try ChildProcess(executable, ["--port", "0", "--cluster", "127.0.0.1:6379"])
        let status = await child.waitForExit()
        #expect(status != 0 && status != nil)
        #expect(child.output.contains("--cluster: \"127.0.0.1:6379\" is not a redis://HOST:PORT address"), "\(child.output)")
        let fromEnvironment = try ChildProcess(executable, ["--port", "0"], environment: ["CHAT_CLUSTER": "redis://h:99999"])
        #expect(await fromEnvironment.waitForExit() != 0)
        #expect(fromEnvironment.output.contains("CHAT_CLUSTER: "), "\(fromEnvironment.output)")
    }

    @Test func aNodesMemoryBudgetReservesItsRedisLink() async throws {
        var configuration = ChatServerConfiguration()
        let plain = configuration.memoryBudget
        configuration.isClusterNode = true
        let node = configuration.memoryBudget
        #expect(node.clusterLink == configuration.clusterLinkBytes)
        #expect(node.clusterLink > 1024 * configuration.maxFrameSize, "every command that may wait, a frame each")
        #expect(plain.remainder - node.remainder == node.clusterLink, "taken from what history and output share")
        #expect(node.description.contains("cluster link"), "\(node.description)")
        #expect(!plain.description.contains("cluster link"))

        // A --max-memory that a plain server fits in but a node does not: refused at start, saying why.
        let total = plain.total - plain.remainder + MemoryBudget.minimumRemainder + node.clusterLink / 2
        let executable = try ChildProcess.builtExecutable(named: "chat-server")
        let arguments = ["--port", "0", "--no-persistence", "--max-memory", "\(total >> 20)M"]
        let child = try ChildProcess(executable, arguments + ["--cluster", "redis://127.0.0.1:1"])
        #expect(await child.waitForExit() != 0)
        #expect(child.output.contains("cluster link"), "\(child.output)")
        let plainServer = try ChildProcess(executable, arguments)
        defer { plainServer.stop() }
        #expect(await plainServer.waitFor(timeout: .seconds(60)) { output, _ in output.contains("listening on") }, "\(plainServer.output)")
    }

    @Test func aRedisValueBeyondTheNodesLimitsFailsTheConnectionClearlyAndTheNodeReconnects() async throws {
        let cluster = try await Cluster(nodes: 1)
        defer { cluster.stop() }
        let node = cluster.nodes[0]
        // A log entry no node of this cluster could have written (its frames are at most 16 KiB),
        // planted by hand: 100 kB, where the node accepts a frame and what the script adds.
        let oversized = String(repeating: "x", count: 100_000)
        #expect(try await cluster.redisCLI("XADD", "chat:{poisoned}:log", "1-1", "t", "0", "p", oversized) == ["1-1"])
        #expect(try await cluster.redisCLI("SET", "chat:{poisoned}:seq", "1") == ["OK"])
        let ann = try await TestClient.connect(port: node.port, nick: "ann", version: 2)
        defer { ann.close() }
        try await ann.clusterJoin("calm")

        // Joining reads the room's history: the reply is refused, not parsed.
        let bob = try await TestClient.connect(port: node.port, nick: "bob", version: 2)
        defer { bob.close() }
        try await bob.send(.join(room: "poisoned"))
        let refusal = try await bob.waitFor("the refusal of the room's state") { frame -> String? in
            if case .error(.unavailable, false, _, let reason) = frame { return reason }
            return nil
        }
        #expect(refusal.contains("unavailable"), "\(refusal)")
        let logged = await node.child.waitFor(timeout: .seconds(30)) { output, _ in
            output.contains("cluster link down") && output.contains("RESP bulk string of 100000 bytes, more than")
        }
        #expect(logged, "the node says why its link went down:\n\(node.child.output)")
        let back = await node.child.waitFor(timeout: .seconds(60)) { output, _ in
            output.components(separatedBy: "cluster link up").count >= 3
        }
        #expect(back, "the node reconnected:\n\(node.child.output)")
        #expect(node.child.exitStatus == nil, "the node is still running")

        // And it keeps serving: a line in another room, heard by its members.
        try await untilEchoed(ann, "still here", in: "calm")
    }

    @Test func whileRedisIsUnreachableAHelloIsRefusedWithUnavailable() async throws {
        let redis = try await RedisServerProcess()
        let port = redis.port
        redis.stop()
        let node = try await ChatServerProcess(arguments: ["--cluster", "redis://127.0.0.1:\(port)"])
        defer { node.stop() }
        #expect(await node.child.waitForOutput("cluster link down"), "\(node.child.output)")
        let code = await refusalCode { try await ChatConnection.connect(host: "127.0.0.1", port: node.port, nick: "ann", version: 2) }
        #expect(code == .unavailable)
    }

    @Test func aNodeStoppedGracefullyLetsItsMembersQuitAtOnce() async throws {
        // A node timeout no test waits for: the quit must come from the node itself, not a reaper.
        let cluster = try await Cluster(nodes: 2, nodeArguments: ["--cluster-node-timeout", "600"])
        defer { cluster.stop() }
        let clients = try await cluster.clients("ann", "bob")
        defer { for client in clients { client.close() } }
        let ann = clients[0]
        cluster.nodes[1].stop()
        let reason = try await ann.waitFor("bob's quit") { if case .quit("r", _, _, "bob", let reason) = $0 { reason } else { nil } }
        #expect(reason == "their server shut down")
        let again = try await TestClient.connect(port: cluster.nodes[0].port, nick: "bob", version: 2)
        again.close()
    }

    @Test func aClientThatPipelinesHelloJoinAndLinesInOneWriteIsServedInOrder() async throws {
        let cluster = try await Cluster(nodes: 2)
        defer { cluster.stop() }
        let bob = try await TestClient.connect(port: cluster.nodes[1].port, nick: "bob", version: 2)
        defer { bob.close() }
        try await bob.clusterJoin("r")
        let pipe = try BlockingSocket(port: cluster.nodes[0].port)
        defer { pipe.close() }
        let lines = (1...100).map { "line \($0)" }
        let sent = await pipe.send(
            [.hello(version: 2, nick: "pipe", password: nil), .join(room: "r")] + lines.map { Frame.say(room: "r", text: $0) })
        #expect(sent > 0)
        let heard = try await bob.collect(lines.count, "pipe's lines") { frame -> String? in
            if case .message("r", _, _, "pipe", let text) = frame { return text }
            return nil
        }
        #expect(heard == lines, "every line, in the order sent, after the join it was sent behind")
        var echoes: [String] = []
        var frames: [Frame] = []
        while echoes.count < lines.count {
            let (more, ended) = await pipe.readFrames(timeout: .seconds(5))
            frames += more
            echoes += more.compactMap { if case .message("r", _, _, "pipe", let text) = $0 { text } else { nil } }
            if ended || more.isEmpty { break }
        }
        #expect(echoes == lines, "the sender's echoes")
        #expect(!frames.contains { if case .error = $0 { true } else { false } }, "no errors: \(frames.filter { if case .error = $0 { true } else { false } })")
    }

    @Test func aClientThatVanishesMidJoinLeavesNoMemberBehind() async throws {
        let cluster = try await Cluster(nodes: 2)
        defer { cluster.stop() }
        let bob = try await TestClient.connect(port: cluster.nodes[1].port, nick: "bob", version: 2)
        defer { bob.close() }
        try await bob.clusterJoin("r")
        for round in 1...5 {
            let ghost = try BlockingSocket(port: cluster.nodes[0].port)
            await ghost.send([.hello(version: 2, nick: "ghost", password: nil), .join(room: "r"), .say(room: "r", text: "boo \(round)")])
            ghost.close()
            // Its nick is free once its node has let it go, and its quits went first.
            let free = await eventually {
                guard let again = try? await ChatConnection.connect(host: "127.0.0.1", port: cluster.nodes[1].port, nick: "ghost", version: 2)
                else { return false }
                try? await again.send(Frame.goodbye(reason: "checked"))
                again.close()
                return true
            }
            #expect(free, "round \(round): the ghost's nick is free")
            try await bob.send(.who(room: "r"))
            let who = try await bob.waitFor("who") { if case .membersPage("r", true, let nicks) = $0 { nicks } else { nil } }
            #expect(who == ["bob"], "round \(round): no ghost member")
        }
    }

    @Test func aRedisThatStopsAnsweringIsNoticedAndRefusedRatherThanWaitedFor() async throws {
        // The outage must stay shorter than the node timeout (after it, the clients must go:
        // the next test). That Redis stopped answering is noticed after half of it and up to two
        // heartbeats (a fifth of it each), and the outage lasts until the node has reconnected:
        // the margin is about a fifth of the timeout. At 10 s, a loaded machine's stall of two
        // seconds made the node's registration lapse; 30 s leaves six.
        let cluster = try await Cluster(nodes: 2, nodeArguments: ["--cluster-node-timeout", "30"])
        defer {
            cluster.redis.child.signal(SIGCONT)
            cluster.stop()
        }
        let clients = try await cluster.clients("ann", "bob")
        defer { for client in clients { client.close() } }
        let (ann, bob) = (clients[0], clients[1])
        // The connection stays up; no reply comes. The line must be refused, not left hanging.
        cluster.redis.child.signal(SIGSTOP)
        try await ann.send(.say(room: "r", text: "during"))
        var annHeard: [String] = []
        let refusal = try await ann.waitFor("a refusal of the line said while Redis is stopped") { frame -> String? in
            if case .message("r", _, _, _, let text) = frame { annHeard.append(text) }
            if case .error(.unavailable, false, .say, let reason) = frame { return reason }
            return nil
        }
        #expect(refusal.contains("stopped answering"), "the reason says Redis stopped answering: \(refusal)")
        // The log line and the refusal leave the node in either order, through different pipes.
        #expect(await cluster.nodes[0].child.waitForOutput("cluster link down"), "the node logged its link down")

        cluster.redis.child.signal(SIGCONT)
        for node in cluster.nodes {
            // A node whose heartbeat was not yet overdue never went down: its link is up all along.
            let back = await node.child.waitFor(timeout: .seconds(90)) { output, _ in
                guard let down = output.range(of: "cluster link down", options: .backwards) else { return true }
                return output.range(of: "cluster link up", options: .backwards).map { $0.lowerBound > down.lowerBound } ?? false
            }
            #expect(back, "node on port \(node.port) reconnected:\n\(node.child.output)")
        }
        try await ann.send(.say(room: "r", text: "after"))
        _ = try await ann.waitFor("ann's echo of after") { frame -> Bool? in
            if case .error(let code, _, _, let reason) = frame { Issue.record("after: \(code) \(reason)") }
            guard case .message("r", _, _, _, let text) = frame else { return nil }
            annHeard.append(text)
            return text == "after" ? true : nil
        }
        var bobHeard: [String] = []
        _ = try await bob.waitFor("bob hears after") { frame -> Bool? in
            guard case .message("r", _, _, _, let text) = frame else { return nil }
            bobHeard.append(text)
            return text == "after" ? true : nil
        }
        // "during" was written to the stopped server before the node gave up on it, and Redis may
        // carry it out once it runs again: then both hear it, as the echo says. Never one alone.
        #expect(bobHeard == annHeard && annHeard.last == "after", "ann heard \(annHeard), bob \(bobHeard)")
    }

    @Test func aNodeOutOfTouchForLongerThanTheNodeTimeoutLetsItsClientsGoWhenBack() async throws {
        let cluster = try await Cluster(nodes: 2, nodeArguments: ["--cluster-node-timeout", "2"])
        defer {
            cluster.redis.child.signal(SIGCONT)
            cluster.stop()
        }
        let clients = try await cluster.clients("ann")
        defer { for client in clients { client.close() } }
        let ann = clients[0]
        // Redis stops answering for longer than the node timeout: the node's key expires, and
        // once Redis runs again another node's client could claim "ann" before her node beats.
        // Wall time must pass for that, so this waits: 3 s against a 2 s timeout.
        cluster.redis.child.signal(SIGSTOP)
        try await Task.sleep(for: .seconds(3))
        cluster.redis.child.signal(SIGCONT)
        let letGo = try await ann.waitFor("ann let go once her node is back") { frame -> String? in
            if case .error(.unavailable, true, _, let reason) = frame { return reason }
            return nil
        }
        #expect(letGo.contains("connect again"), "\(letGo)")
        #expect(await cluster.nodes[0].child.waitForOutput("registration lapsed"), "\(cluster.logs)")
        // Her nick is free for whoever comes next, on any node, once her node has released it.
        let free = await eventually(timeout: .seconds(30), every: .milliseconds(200)) {
            guard let again = try? await TestClient.connect(port: cluster.nodes[1].port, nick: "ann", version: 2) else { return false }
            again.close()
            return true
        }
        #expect(free, "ann welcomed on the other node: \(cluster.logs)")
    }

    @Test func aFloodWhileRedisIsStalledIsPushedBackNotQueued() async throws {
        // A node timeout longer than the test: the link does not fail, Redis just stops answering.
        let cluster = try await Cluster(nodes: 1, nodeArguments: ["--cluster-node-timeout", "600"])
        defer {
            cluster.redis.child.signal(SIGCONT)
            cluster.stop()
        }
        let node = cluster.nodes[0]
        let flooder = try BlockingSocket(port: node.port)
        defer { flooder.close() }
        await joinAsFlooder(flooder)
        let before = node.child.residentBytes ?? 0
        cluster.redis.child.signal(SIGSTOP)
        // 64 MiB of lines that no Redis answers.
        let line = String(repeating: "x", count: 8_000)
        var bytes: [UInt8] = []
        for _ in 0..<8_192 { FrameEncoder.encode(.say(room: "r", text: line), into: &bytes) }
        let sent = await flooder.send(bytes, timeout: .seconds(3))
        #expect(sent < bytes.count, "the node stopped reading once its commands to Redis were backlogged (took \(sent) bytes)")
        let peak = node.child.peakResidentBytes ?? Int.max
        // In flight at most 1024 commands of 8 KB, plus what the kernel and the decoder hold.
        #expect(peak - before < 48 << 20, "the node grew by \(peak - before) bytes while Redis was stalled")

        cluster.redis.child.signal(SIGCONT)
        let ann = try await TestClient.connect(port: node.port, nick: "ann", version: 2)
        defer { ann.close() }
        try await ann.clusterJoin("calm")
        try await ann.send(.say(room: "calm", text: "still here"))
        _ = try await ann.waitFor("ann's echo") { if case .message("calm", _, _, "ann", "still here") = $0 { true } else { nil } }
    }

    @Test func anAddressFloodingARoomOnTwoNodesIsPacedByItsClusterWideFanOut() async throws {
        // Only the fan-out limit: 200 kB/s, and a burst of one line (the smallest the server takes:
        // a frame). A line of 8 kB to the room's three members (on two nodes) costs about 24 kB:
        // about 8 lines a second. Read that slowly from the start, the node's socket keeps a small
        // receive window, so what the kernel holds when the flood stops is read soon after.
        let rate = 200_000
        let burst = 30_000
        let limits = [
            "--rate-limit", "0", "--byte-rate", "0", "--address-rate-limit", "0", "--address-byte-rate", "0",
            "--address-connection-rate", "0", "--address-fanout-rate", "\(rate)", "--address-fanout-burst", "\(burst)",
        ]
        let cluster = try await Cluster(nodes: 2, limits: limits)
        defer { cluster.stop() }
        let near = try await TestClient.connect(port: cluster.nodes[0].port, nick: "near", version: 2)
        let far = try await TestClient.connect(port: cluster.nodes[1].port, nick: "far", version: 2)
        defer {
            near.close()
            far.close()
        }
        try await near.clusterJoin("r")
        try await far.clusterJoin("r")
        // Room for its echoes, so that its own unread replies do not stop the node reading it
        // first; little room for what it sends, so what waits in the kernel is soon read.
        let flooder = try BlockingSocket(port: cluster.nodes[0].port, receiveBuffer: 4 << 20)
        defer { flooder.close() }
        var sendBuffer: Int32 = 64 << 10
        setsockopt(flooder.descriptor, SOL_SOCKET, SO_SNDBUF, &sendBuffer, socklen_t(MemoryLayout<Int32>.size))
        await joinAsFlooder(flooder)

        // 64 MiB of numbered lines, far more than the kernel's buffers hold.
        let text = String(repeating: "x", count: 8_000)
        var bytes: [UInt8] = []
        var ends: [Int] = []
        for number in 1...8_192 {
            FrameEncoder.encode(.say(room: "r", text: "\(number) \(text)"), into: &bytes)
            ends.append(bytes.count)
        }
        // The members read all along, as members that keep up do.
        async let nearHeard = linesOfFlood(heardBy: near)
        async let farHeard = linesOfFlood(heardBy: far)
        // For 3 s, in pieces: a paced node keeps taking a little, so one blocking send would
        // go on until the whole flood is read.
        let started = ContinuousClock.now
        var sent = 0
        while sent < bytes.count, started.duration(to: .now) < .seconds(3) {
            let piece = Array(bytes[sent..<min(sent + 65_536, bytes.count)])
            let taken = await flooder.send(piece, timeout: .seconds(1))
            sent += taken
            if taken < piece.count { break }
        }
        #expect(sent < bytes.count, "the node read the flooder slowly and TCP pushed back (took \(sent) of \(bytes.count) bytes)")
        // It ends its input: the node serves every whole line it sent, then it quits.
        flooder.shutdownWrite()
        let whole = ends.prefix { $0 <= sent }.count
        let heard = ["near": try await nearHeard, "far": try await farHeard]
        let elapsed = started.duration(to: .now)
        let (nearCount, farCount) = (heard["near"]?.count ?? 0, heard["far"]?.count ?? 0)
        let everyLineOnceInOrder = heard["near"] == Array(1...whole)
        #expect(everyLineOnceInOrder, "every whole line sent (\(whole)), once each, in order: none dropped; heard \(nearCount)")
        let sameOnBothNodes = heard["far"] == heard["near"]
        #expect(sameOnBothNodes, "the other node's member heard the same \(nearCount) lines, not \(farCount)")
        let (answers, _) = await flooder.readFrames(timeout: .seconds(5))
        let errors = answers.filter { if case .error = $0 { true } else { false } }
        #expect(errors.isEmpty, "paced, never refused: \(errors)")
        // What the rate allowed while the flood lasted: the burst, the rate, and one frame into
        // debt. A bound no node may exceed, however slow the machine (slow only lowers the count).
        // A line costs at least its frame (the shortest, line 1's) and what a delivery adds (24
        // bytes, ChatCore.deliveryOverhead), for each of the room's three members.
        let perLine = (FrameEncoder.encode(.say(room: "r", text: "1 \(text)")).count + 24) * 3
        let allowed = (burst + Int(Double(rate) * (elapsed / .seconds(1)))) / perLine + 1
        #expect(whole <= allowed, "\(whole) lines accepted in \(elapsed), at most \(allowed) allowed by the fan-out rate")
    }

    /// The numbers of the flooder's lines that `member` hears, up to the flooder's quit.
    private func linesOfFlood(heardBy member: TestClient) async throws -> [Int] {
        var numbers: [Int] = []
        while true {
            let frame = try await member.expectFrame("the flooder's lines and quit at \(member.nick)")
            if case .message("r", _, _, "flood", let line) = frame { numbers.append(Int(line.prefix { $0 != " " }) ?? -1) }
            if case .quit("r", _, _, "flood", _) = frame { return numbers }
        }
    }

    @Test func aNodeThatWasTakenForDeadLetsItsClientsGoWhenItWakes() async throws {
        let cluster = try await Cluster(nodes: 2, nodeArguments: ["--cluster-node-timeout", "2"])
        defer {
            cluster.nodes[1].child.signal(SIGCONT)
            cluster.stop()
        }
        let clients = try await cluster.clients("ann", "bob")
        defer { for client in clients { client.close() } }
        let (ann, bob) = (clients[0], clients[1])
        // Bob's node stalls (as in a long pause or a partition): the cluster takes it for dead.
        cluster.nodes[1].child.signal(SIGSTOP)
        _ = try await ann.collect(1, "bob's quit", limit: .seconds(90)) { frame -> Bool? in
            if case .quit("r", _, _, "bob", _) = frame { return true }
            return nil
        }
        cluster.nodes[1].child.signal(SIGCONT)
        // When it wakes, its clients are no longer in the cluster: it tells them and lets them go,
        // rather than serve them as members of rooms that no longer list them.
        let frames = try await bob.readUntilClosed()
        guard let (code, reason) = fatalError(in: frames) else {
            Issue.record("expected a fatal error before the close, got \(frames.suffix(3))")
            return
        }
        #expect(code == .unavailable && reason.contains("connect again"), "\(code): \(reason)")
        let again = try await TestClient.connect(port: cluster.nodes[1].port, nick: "bob", version: 2)
        defer { again.close() }
        try await again.clusterJoin("r")
        _ = try await ann.waitFor("bob's return") { if case .joined("r", _, _, "bob") = $0 { true } else { nil } }
    }

    @Test func aNickChangeIsClaimedInTheClusterAndAnnouncedOnEveryNode() async throws {
        let cluster = try await Cluster(nodes: 2)
        defer { cluster.stop() }
        let clients = try await cluster.clients("ann", "bob")
        defer { for client in clients { client.close() } }
        let (ann, bob) = (clients[0], clients[1])
        try await ann.send(.changeNick(nick: "anna"))
        _ = try await ann.waitFor("nickAccepted") { if case .nickAccepted("anna") = $0 { true } else { nil } }
        _ = try await bob.waitFor("the nick change") { if case .nickChanged("r", _, _, "ann", "anna") = $0 { true } else { nil } }
        try await bob.send(.who(room: "r"))
        let who = try await bob.waitFor("who") { if case .membersPage("r", true, let nicks) = $0 { nicks } else { nil } }
        #expect(who == ["anna", "bob"], "the member renamed in its place")
        try await bob.send(.changeNick(nick: "ANNA"))
        let refusal = try await bob.waitFor("the refusal") { if case .error(let code, false, .changeNick, _) = $0 { code } else { nil } }
        #expect(refusal == .nickTaken)
        let newAnn = try await TestClient.connect(port: cluster.nodes[1].port, nick: "ann", version: 2)
        newAnn.close()
    }

    /// The order rule (docs/SERVER.md, "Order") for a nick change: `changeNick, ping` in one
    /// write gets `nickAccepted`, the `nickChanged` of each of its rooms, then `pong`, as on a
    /// single server — though the events come back through Redis after the pong could be sent.
    @Test func aNickChangesEventsComeBeforeTheReplyToTheNextRequest() async throws {
        let cluster = try await Cluster(nodes: 2)
        defer { cluster.stop() }
        let clients = try await cluster.clients("ann", "bob")
        defer { for client in clients { client.close() } }
        let (ann, bob) = (clients[0], clients[1])
        try await ann.clusterJoin("s")
        for round in 1...5 {
            let (old, new) = round.isMultiple(of: 2) ? ("anna", "ann") : ("ann", "anna")
            try await ann.send([.changeNick(nick: new), .ping(token: UInt64(round))])
            let seen = try await ann.collect(4, "ann's frames of round \(round)") { frame -> String? in
                switch frame {
                case .nickAccepted(let nick): "accepted \(nick)"
                case .nickChanged(let room, _, _, old, new): "changed in \(room)"
                case .pong(let token): "pong \(token)"
                default: nil
                }
            }
            #expect(seen.first == "accepted \(new)" && seen.last == "pong \(round)", "round \(round): \(seen)")
            #expect(Set(seen.dropFirst().dropLast()) == ["changed in r", "changed in s"], "round \(round): \(seen)")
            _ = try await bob.waitFor("the nick change on the other node") { if case .nickChanged("r", _, _, old, new) = $0 { true } else { nil } }
        }
    }

    @Test func clusterScriptRunsNodesToChatOnAndStopsEverythingItStarted() async throws {
        let script = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Scripts/cluster.sh")
        let server = try ChildProcess.builtExecutable(named: "chat-server")
        // Two consecutive free ports are not promised: a taken one makes the script fail, so try again.
        var failures: [String] = []
        for _ in 0..<5 {
            let port = try freeLoopbackPorts(count: 2)
            var redisPort = try freeLoopbackPorts(count: 1)
            while (port...port + 1).contains(redisPort) { redisPort = try freeLoopbackPorts(count: 1) }
            let cluster = try ChildProcess(
                script, ["--nodes", "2", "--port", "\(port)", "--redis-port", "\(redisPort)", "--", "--no-rate-limits"],
                environment: ["CHAT_SERVER": server.path])
            let started = await cluster.waitFor(timeout: .seconds(60)) { output, status in
                status != nil || output.contains("Ctrl-C stops the cluster")
            }
            guard started, cluster.exitStatus == nil else {
                #expect(cluster.output.contains("did not"), "cluster.sh failed for another reason than a port: \(cluster.output)")
                failures.append(cluster.output)
                continue
            }
            let pids = cluster.output.split(separator: "\n").compactMap { line -> pid_t? in
                guard let range = line.range(of: "(pid ") else { return nil }
                return pid_t(line[range.upperBound...].prefix { $0.isNumber })
            }
            #expect(pids.count == 3, "Redis and two nodes: \(cluster.output)")
            let ann = try await TestClient.connect(port: port, nick: "ann", version: 2)
            let bob = try await TestClient.connect(port: port + 1, nick: "bob", version: 2)
            defer {
                ann.close()
                bob.close()
            }
            try await ann.clusterJoin("r")
            try await bob.clusterJoin("r")
            try await ann.send(.say(room: "r", text: "across nodes"))
            _ = try await bob.waitFor("ann's line") { if case .message("r", _, _, "ann", "across nodes") = $0 { true } else { nil } }

            cluster.signal(SIGINT)
            #expect(await cluster.waitForExit(timeout: .seconds(60)) != nil, "cluster.sh exits on SIGINT")
            for pid in pids { #expect(kill(pid, 0) != 0, "process \(pid) it started is gone") }
            let directory = cluster.output.split(separator: " ").last { $0.hasPrefix("/tmp/chat-cluster-") }.map { String($0.prefix { !$0.isWhitespace }) }
            #expect(directory.map { access($0, F_OK) != 0 } == true, "its directory \(String(describing: directory)) is removed")
            return
        }
        Issue.record("cluster.sh did not start in five tries:\n\(failures.joined(separator: "\n---\n"))")
    }
}

/// The first of `count` consecutive loopback ports no one listens on now (each was bound and let go).
private func freeLoopbackPorts(count: Int) throws -> Int {
    while true {
        let first = try Socket(family: AF_INET, label: "port finder")
        defer { first.close() }
        try first.bind(to: SocketAddress(ip: "127.0.0.1", port: 0)!)
        let port = try first.localAddress().port
        guard port + count - 1 <= 65_535 else { continue }
        var others: [Socket] = []
        defer { for socket in others { socket.close() } }
        var free = true
        for next in (port + 1)..<(port + count) {
            let socket = try Socket(family: AF_INET, label: "port finder")
            others.append(socket)
            do { try socket.bind(to: SocketAddress(ip: "127.0.0.1", port: next)!) } catch {
                free = false
                break
            }
        }
        if free { return port }
    }
}

/// The code a `hello` was refused with, or nil if it was welcomed.
private func refusalCode(_ connect: () async throws -> ChatConnection) async -> ErrorCode? {
    do {
        try await connect().close()
        return nil
    } catch let ChatConnection.HandshakeError.refused(code, _) {
        return code
    } catch {
        Issue.record("expected a refusal, got \(error)")
        return nil
    }
}

/// Greets as `flood` on `flooder` and joins `r`, reading until the room's history page arrives
/// (at most 20 reads of 2 s each); expects that it did.
private func joinAsFlooder(_ flooder: BlockingSocket) async {
    await flooder.send([.hello(version: 2, nick: "flood", password: nil), .join(room: "r")])
    var joined = false
    for _ in 0..<20 where !joined {
        let (frames, ended) = await flooder.readFrames(timeout: .seconds(2))
        joined = frames.contains { if case .historyPage("r", _, _, _) = $0 { true } else { false } }
        if ended { break }
    }
    #expect(joined, "the flooder joined")
}

/// Says `text` in `room` until it is echoed (a node whose link is coming back refuses it with
/// `unavailable` meanwhile).
private func untilEchoed(_ client: TestClient, _ text: String, in room: String) async throws {
    while true {
        try await client.send(.say(room: room, text: text))
        let echoed = try await client.waitFor("the echo of \(text) or a refusal") { frame -> Bool? in
            if case .message(room, _, _, client.nick, text) = frame { return true }
            if case .error(.unavailable, false, .say, _) = frame { return false }
            return nil
        }
        if echoed { return }
    }
}
