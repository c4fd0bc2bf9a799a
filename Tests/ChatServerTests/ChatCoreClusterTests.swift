import ChatCluster
@testable import ChatCore
import ChatProtocol
import Testing

@testable import ChatServer

/// Nodes of a cluster as `ChatCore`s on one thread, and an in-memory stand-in for the cluster's
/// Redis that answers their `ClusterRequest`s at once: one `seq` per room, nicks per node, each
/// event delivered to every node that follows its room. Tests the chat logic's cluster mode without
/// sockets; the end-to-end tests (ClusterTests) run real nodes on a real Redis.
private struct FakeCluster {
    var nodes: [ChatCore]
    /// What each node's clients were sent, by node, in order.
    var sent: [[ChatAction]]
    var available = true
    private var seqs: [String: UInt64] = [:]
    private var logs: [String: [(seq: UInt64, payload: [UInt8])]] = [:]
    private var nickOwners: [String: Int] = [:]
    private var members: [String: [String]] = [:]
    private var nextSlot: [Int]
    let now = ServerTime(wallMillis: 1_767_225_600_000, uptimeMillis: 1_000)

    init(nodes count: Int) {
        var configuration = ChatServerConfiguration()
        configuration.turnOffRateLimits()
        nodes = (0..<count).map { _ in ChatCore(configuration: configuration, log: .cluster) }
        for index in nodes.indices { nodes[index].clusterAvailability(true) }
        sent = Array(repeating: [], count: count)
        nextSlot = Array(repeating: 0, count: count)
    }

    /// Connects a client to `node` and sends `hello`; returns its id.
    mutating func connect(_ nick: String, to node: Int, version: UInt16 = 2) -> ClientID {
        let id = ClientID(nextSlot[node])
        nextSlot[node] += 1
        #expect(nodes[node].clientConnected(id, address: "127.0.0.1", at: now) == nil)
        send(.hello(version: version, nick: nick, password: nil), from: id, on: node)
        return id
    }

    mutating func send(_ frame: Frame, from id: ClientID, on node: Int) {
        var actions: [ChatAction] = []
        nodes[node].received(frame, size: FrameEncoder.encode(frame).count, from: id, at: now, into: &actions)
        sent[node] += actions
        settle()
    }

    mutating func disconnect(_ id: ClientID, on node: Int) {
        var actions: [ChatAction] = []
        nodes[node].disconnect(id, Disconnection(code: nil, reason: "gone"), at: now, into: &actions)
        sent[node] += actions
        settle()
    }

    /// Answers requests until no node has any left.
    mutating func settle() {
        var busy = true
        while busy {
            busy = false
            for node in nodes.indices {
                let requests = nodes[node].takeClusterRequests()
                if !requests.isEmpty { busy = true }
                for request in requests { answer(request, from: node) }
            }
        }
    }

    /// The frames `id` of `node` was sent.
    func frames(of id: ClientID, on node: Int) -> [Frame] {
        sent[node].compactMap { action in
            switch action {
            case .send(let frame, let to) where to == id: frame
            case .broadcast(let frame, let to) where to.contains(id): frame
            default: nil
            }
        }
    }

    private mutating func answer(_ request: ClusterRequest, from node: Int) {
        var actions: [ChatAction] = []
        defer { sent[node] += actions }
        let failure = ClusterFailure(reason: "Redis is down")
        switch request {
        case .claimNick(let asker, let nick, _):
            let key = ChatName.nickKey(nick)
            let outcome: Result<Bool, ClusterFailure>
            if !available {
                outcome = .failure(failure)
            } else if let owner = nickOwners[key], owner != node {
                outcome = .success(false)
            } else {
                nickOwners[key] = node
                outcome = .success(true)
            }
            nodes[node].clusterNickClaimed(asker, nick: nick, outcome, at: now, into: &actions)
        case .releaseNick(let nick):
            if nickOwners[ChatName.nickKey(nick)] == node { nickOwners[ChatName.nickKey(nick)] = nil }
        case .join(let room, let asker, let nick, _, _):
            guard available else { return nodes[node].clusterJoinAppended(asker, room: room, failure: failure, at: now, into: &actions) }
            members[room, default: []].append(nick)
            nodes[node].clusterJoinAppended(asker, room: room, failure: nil, at: now, into: &actions)
            append(.joined(room: room, seq: 0, time: 0, nick: nick), to: room)
        case .append(let room, let event, let change, let sender, _, _):
            guard available else {
                if let sender { nodes[node].clusterAppendFailed(event, in: room, sender: sender, failure: failure, into: &actions) }
                return
            }
            if case .leave(let nick) = change {
                guard members[room, default: []].contains(nick) else { return }
                members[room]!.removeAll { $0 == nick }
            }
            append(event, to: room)
            if let sender { nodes[node].clusterAppended(room: room, seq: seqs[room]!, sender: sender, into: &actions) }
        case .snapshot(let room, let asker, let seq, _):
            let history = (logs[room] ?? []).filter { $0.seq <= seq }.compactMap {
                ChatCore.historyEntry(payload: $0.payload, seq: $0.seq, time: 7)
            }
            let snapshot = ClusterRoomSnapshot(
                epoch: 42, firstSeq: logs[room]?.first?.seq ?? 0, lastSeq: seq, topic: nil, members: members[room] ?? [],
                history: history, complete: true)
            nodes[node].clusterSnapshotRead(room: room, asker, .success(snapshot), into: &actions)
        case .members(let room, let id, _):
            nodes[node].clusterMembersRead(room: room, id, .success(members[room] ?? []), into: &actions)
        case .listRooms(let id):
            let rooms = members.filter { !$0.value.isEmpty }.map { RoomInfo(name: $0.key, memberCount: UInt32($0.value.count), topic: "") }
            nodes[node].clusterRoomsRead(id, .success(rooms), into: &actions)
        case .standings(let rooms, let asker, let check):
            let standings = Dictionary(uniqueKeysWithValues: rooms.map { ($0, ClusterRoomStanding()) })
            nodes[node].clusterStandingsRead(asker, check, available ? .success(standings) : .failure(failure), at: now, into: &actions)
        case .history, .direct, .unfollow, .setAway, .invite, .bans, .serverBan, .kill:
            break
        }
    }

    /// Numbers `event` and delivers it to every node following `room`, the sender's too.
    private mutating func append(_ event: Frame, to room: String) {
        let seq = (seqs[room] ?? 0) + 1
        seqs[room] = seq
        let payload = ChatCore.clusterPayload(of: event)
        logs[room, default: []].append((seq, payload))
        for node in nodes.indices where nodes[node].clusterRooms.contains(room) {
            var actions: [ChatAction] = []
            nodes[node].clusterDeliver(room: room, seq: seq, time: 7, payload: payload, into: &actions)
            sent[node] += actions
        }
    }
}

/// The time of every request in the tests that drive one clustered core by hand.
private let now = ServerTime(wallMillis: 1, uptimeMillis: 1)

/// A clustered core whose cluster is reachable, with rate limits off and then `adjust`.
private func clusteredCore(_ adjust: (inout ChatServerConfiguration) -> Void = { _ in }) -> ChatCore {
    var configuration = ChatServerConfiguration()
    configuration.turnOffRateLimits()
    adjust(&configuration)
    var core = ChatCore(configuration: configuration, log: .cluster)
    core.clusterAvailability(true)
    return core
}

/// Connects `nick` in `slot` of `core` from `address` and welcomes it: its `hello` asks the
/// cluster for the nick, and the claim is granted.
private func welcome(_ nick: String, in slot: ClientID, of core: inout ChatCore, from address: String = "127.0.0.1") {
    var actions: [ChatAction] = []
    #expect(core.clientConnected(slot, address: address, at: now) == nil)
    core.received(.hello(version: 2, nick: nick, password: nil), size: 10, from: slot, at: now, into: &actions)
    #expect(core.takeClusterRequests().last == .claimNick(core.asker(slot), nick: nick))
    core.clusterNickClaimed(core.asker(slot), nick: nick, .success(true), at: now, into: &actions)
}

/// Welcomes `nick` in `slot` and has it ask to join `#r`; returns who the join's append was
/// asked for (nil, recorded as an issue, if it was not).
private func welcomedAndAskedToJoin(_ nick: String, in slot: ClientID, of core: inout ChatCore) -> ClusterAsker? {
    var actions: [ChatAction] = []
    welcome(nick, in: slot, of: &core)
    core.received(.join(room: "r"), size: 10, from: slot, at: now, into: &actions)
    guard case .join(_, let joiner, _, _, _)? = core.takeClusterRequests().first else {
        Issue.record("expected \(nick)'s join")
        return nil
    }
    return joiner
}

/// `welcomedAndAskedToJoin`, then the append done and its `joined` delivered at `seq`; returns
/// who the snapshot it is then owed was asked for (nil, recorded as an issue, if none was).
private func joinedAndAskedForSnapshot(_ nick: String, at seq: UInt64, in slot: ClientID, of core: inout ChatCore) -> ClusterAsker? {
    var actions: [ChatAction] = []
    guard let joiner = welcomedAndAskedToJoin(nick, in: slot, of: &core) else { return nil }
    core.clusterJoinAppended(joiner, room: "r", failure: nil, at: now, into: &actions)
    let joined = Frame.joined(room: "r", seq: seq, time: 9, nick: nick)
    core.clusterDeliver(room: "r", seq: seq, time: 9, payload: ChatCore.clusterPayload(of: joined), into: &actions)
    guard case .snapshot(_, let asker, _, _)? = core.takeClusterRequests().first else {
        Issue.record("expected \(nick)'s snapshot")
        return nil
    }
    return asker
}

@Suite("ChatCore in cluster mode, against an in-memory cluster")
struct ChatCoreClusterTests {
    /// What a guest's join from `address` asks Redis to admit it by.
    static func admission(of nick: String, address: String = "127.0.0.1") -> ModerationCheck {
        .admit(account: "", key: "", inviteKey: nick, address: address)
    }

    @Test func aMessageReachesMembersOnEveryNodeWithTheClustersSeq() {
        var cluster = FakeCluster(nodes: 2)
        let ann = cluster.connect("ann", to: 0)
        let bob = cluster.connect("bob", to: 1)
        #expect(cluster.frames(of: ann, on: 0).contains { if case .welcome = $0 { true } else { false } })
        cluster.send(.join(room: "r"), from: ann, on: 0)
        cluster.send(.join(room: "r"), from: bob, on: 1)
        cluster.send(.say(room: "r", text: "hi"), from: ann, on: 0)
        let expected = Frame.message(room: "r", seq: 3, time: 7, sender: "ann", text: "hi")
        #expect(cluster.frames(of: ann, on: 0).last == expected, "the sender's echo is the cluster's event")
        #expect(cluster.frames(of: bob, on: 1).last == expected)
        #expect(cluster.frames(of: bob, on: 1).contains(.roomState(room: "r", epoch: 42, firstSeq: 1, lastSeq: 2)))
        #expect(cluster.frames(of: ann, on: 0).contains(.joined(room: "r", seq: 2, time: 7, nick: "bob")))
    }

    @Test func aNickHeldOnAnotherNodeIsRefused() {
        var cluster = FakeCluster(nodes: 2)
        _ = cluster.connect("ann", to: 0)
        let second = cluster.connect("ANN", to: 1)
        #expect(cluster.sent[1].contains { if case .disconnect(second, let why, _) = $0 { why.code == .nickTaken } else { false } })
    }

    @Test func whileRedisIsDownRoomEventsAreRefusedWithUnavailable() {
        var cluster = FakeCluster(nodes: 1)
        let ann = cluster.connect("ann", to: 0)
        cluster.send(.join(room: "r"), from: ann, on: 0)
        cluster.nodes[0].clusterAvailability(false, reason: "connection refused")
        cluster.send(.say(room: "r", text: "lost?"), from: ann, on: 0)
        guard case .error(.unavailable, false, .say, let reason)? = cluster.frames(of: ann, on: 0).last else {
            Issue.record("expected a non-fatal unavailable, got \(String(describing: cluster.frames(of: ann, on: 0).last))")
            return
        }
        #expect(reason.contains("connection refused"))
        cluster.available = false
        cluster.nodes[0].clusterAvailability(true)
        cluster.send(.say(room: "r", text: "in flight"), from: ann, on: 0)
        #expect(cluster.frames(of: ann, on: 0).last.map { if case .error(.unavailable, false, .say, _) = $0 { true } else { false } } == true)
    }

    @Test func aQuitReachesTheOtherNodesMembers() {
        var cluster = FakeCluster(nodes: 2)
        let ann = cluster.connect("ann", to: 0)
        let bob = cluster.connect("bob", to: 1)
        cluster.send(.join(room: "r"), from: ann, on: 0)
        cluster.send(.join(room: "r"), from: bob, on: 1)
        cluster.disconnect(ann, on: 0)
        #expect(cluster.frames(of: bob, on: 1).last == .quit(room: "r", seq: 3, time: 7, nick: "ann", reason: "gone"))
        #expect(cluster.nodes[0].clusterRooms.isEmpty, "the node follows no room without members")
        let again = cluster.connect("ann", to: 1)
        #expect(cluster.frames(of: again, on: 1).contains { if case .welcome = $0 { true } else { false } }, "the nick is free")
    }

    @Test func anAnswerForAClientThatLeftDoesNotReachANewcomerInItsSlot() {
        var core = clusteredCore()
        let slot = ClientID(0)
        var actions: [ChatAction] = []
        welcome("ann", in: slot, of: &core)
        core.received(.who(room: "r"), size: 10, from: slot, at: now, into: &actions)
        guard case .members(_, let asker, _)? = core.takeClusterRequests().first else {
            Issue.record("expected a members read")
            return
        }
        core.disconnect(slot, Disconnection(code: nil, reason: "gone"), at: now, into: &actions)
        welcome("bob", in: slot, of: &core)
        actions.removeAll()
        core.clusterMembersRead(room: "r", asker, .success(["ann"]), into: &actions)
        #expect(actions.isEmpty, "bob never asked: \(actions)")
    }

    /// A connection that drops while its snapshot is read, and a newcomer in its slot (the
    /// server hands out the slot freed last) who joins the same room: the late answer is the
    /// leaver's, and must not reach the newcomer as its view of the room.
    @Test func aSnapshotForAClientThatLeftDoesNotReachTheNextClientInItsSlot() {
        var core = clusteredCore()
        let slot = ClientID(0)
        var actions: [ChatAction] = []
        let annsSnapshot = joinedAndAskedForSnapshot("ann", at: 5, in: slot, of: &core)
        core.disconnect(slot, Disconnection(code: nil, reason: "gone"), at: now, into: &actions)
        _ = core.takeClusterRequests()
        let bobsSnapshot = joinedAndAskedForSnapshot("bob", at: 7, in: slot, of: &core)
        actions.removeAll()
        let annsView = ClusterRoomSnapshot(epoch: 7, firstSeq: 1, lastSeq: 5, topic: nil, members: ["ann"], history: [], complete: true)
        if let annsSnapshot { core.clusterSnapshotRead(room: "r", annsSnapshot, .success(annsView), into: &actions) }
        #expect(actions.isEmpty, "bob never asked for #r as of seq 5: \(actions)")
        let bobsView = ClusterRoomSnapshot(epoch: 7, firstSeq: 1, lastSeq: 7, topic: nil, members: ["bob"], history: [], complete: true)
        if let bobsSnapshot { core.clusterSnapshotRead(room: "r", bobsSnapshot, .success(bobsView), into: &actions) }
        #expect(actions.first == .send(.roomState(room: "r", epoch: 7, firstSeq: 1, lastSeq: 7), to: slot), "his own: \(actions)")
    }

    /// As above for the append of a `joined`: the leaver's answer, refused by the room, must not
    /// refuse the newcomer's join, which is still under way.
    @Test func aJoinAnswerForAClientThatLeftDoesNotAnswerTheNextClientInItsSlot() {
        var core = clusteredCore()
        let slot = ClientID(0)
        var actions: [ChatAction] = []
        let annsJoin = welcomedAndAskedToJoin("ann", in: slot, of: &core)
        core.disconnect(slot, Disconnection(code: nil, reason: "gone"), at: now, into: &actions)
        _ = core.takeClusterRequests()
        guard let annsJoin, let bobsJoin = welcomedAndAskedToJoin("bob", in: slot, of: &core) else { return }
        actions.removeAll()
        core.clusterJoinAppended(annsJoin, room: "r", failure: ClusterFailure(code: .banned, reason: "ann is banned"), at: now, into: &actions)
        #expect(actions.isEmpty, "ann's refusal is not bob's: \(actions)")
        #expect(core.isAwaitingCluster(slot), "bob's join is still under way")
        core.clusterJoinAppended(bobsJoin, room: "r", failure: nil, at: now, into: &actions)
        #expect(!core.isAwaitingCluster(slot), "until its own answer")
    }

    /// A `hello` whose nick claim is in flight when its connection drops, and the same user back
    /// at once in the same slot: the first claim's failure is not the second's.
    @Test func aNickClaimForAClientThatLeftDoesNotAnswerTheNextClientInItsSlot() {
        var core = clusteredCore()
        let slot = ClientID(0)
        var actions: [ChatAction] = []
        #expect(core.clientConnected(slot, address: "127.0.0.1", at: now) == nil)
        core.received(.hello(version: 2, nick: "ann", password: nil), size: 10, from: slot, at: now, into: &actions)
        guard case .claimNick(let firstClaim, _, _)? = core.takeClusterRequests().last else { Issue.record("expected a claim"); return }
        core.disconnect(slot, Disconnection(code: nil, reason: "gone"), at: now, into: &actions)
        _ = core.takeClusterRequests()
        #expect(core.clientConnected(slot, address: "127.0.0.1", at: now) == nil)
        core.received(.hello(version: 2, nick: "ann", password: nil), size: 10, from: slot, at: now, into: &actions)
        guard case .claimNick(let secondClaim, _, _)? = core.takeClusterRequests().last else { Issue.record("expected a claim"); return }
        actions.removeAll()
        core.clusterNickClaimed(firstClaim, nick: "ann", .failure(ClusterFailure(reason: "Redis restarted")), at: now, into: &actions)
        #expect(actions.isEmpty, "the first connection's failure does not end the second: \(actions)")
        core.clusterNickClaimed(secondClaim, nick: "ann", .success(true), at: now, into: &actions)
        #expect(actions.contains { if case .send(.welcome, to: slot) = $0 { true } else { false } }, "welcomed by its own claim: \(actions)")
    }

    @Test func clusterAddressesAreRedisURLsAndAnythingElseIsExplained() throws {
        let plain = try ClusterConfiguration(url: "redis://127.0.0.1:6380", nodeID: "n")
        #expect(plain.host == "127.0.0.1" && plain.port == 6380)
        #expect(try ClusterConfiguration(url: "redis://cache", nodeID: "n").port == 6379)
        let v6 = try ClusterConfiguration(url: "redis://[::1]:7000/", nodeID: "n")
        #expect(v6.host == "::1" && v6.port == 7000)
        for bad in ["127.0.0.1:6379", "http://x:1", "redis://", "redis://h:0", "redis://h:port", "redis://user:pw@h:1", "redis://h:1/2", "redis://[::1"] {
            #expect(throws: ClusterURLError.self, "\(bad) is refused") { try ClusterConfiguration(url: bad, nodeID: "n") }
        }
        do {
            _ = try ClusterConfiguration(url: "localhost:6379", nodeID: "n")
        } catch {
            #expect(error.description.contains("redis://HOST:PORT"), "the error shows the form expected: \(error)")
        }
    }

    @Test func eventsThatComeWhileAJoinersSnapshotIsReadWaitForIt() {
        var core = clusteredCore()
        let ann = ClientID(0)
        var actions: [ChatAction] = []
        welcome("ann", in: ann, of: &core)
        core.received(.join(room: "r"), size: 10, from: ann, at: now, into: &actions)
        #expect(core.takeClusterRequests() == [.join(room: "r", core.asker(ann), nick: "ann", charge: nil, admission: Self.admission(of: "ann"))])
        #expect(core.isAwaitingCluster(ann), "its next requests wait for the join")
        core.clusterJoinAppended(core.asker(ann), room: "r", failure: nil, at: now, into: &actions)
        #expect(!core.isAwaitingCluster(ann))
        actions.removeAll()

        let joined = Frame.joined(room: "r", seq: 5, time: 9, nick: "ann")
        core.clusterDeliver(room: "r", seq: 5, time: 9, payload: ChatCore.clusterPayload(of: joined), into: &actions)
        #expect(actions == [.broadcast(joined, to: [ann])], "its own joined first")
        #expect(core.takeClusterRequests() == [.snapshot(room: "r", core.asker(ann), seq: 5, history: .page(.before, from: 5, limit: 100))])
        actions.removeAll()
        let line = Frame.message(room: "r", seq: 6, time: 10, sender: "bob", text: "hi")
        core.clusterDeliver(room: "r", seq: 6, time: 10, payload: ChatCore.clusterPayload(of: line), into: &actions)
        #expect(actions.isEmpty, "a line that comes before its snapshot waits: \(actions)")

        let old = HistoryEntry(kind: .message, seq: 3, time: 2, sender: "bob", text: "earlier")
        let snapshot = ClusterRoomSnapshot(
            epoch: 7, firstSeq: 1, lastSeq: 5, topic: nil, members: ["bob", "ann"], history: [old], complete: true)
        core.clusterSnapshotRead(room: "r", core.asker(ann), .success(snapshot), into: &actions)
        #expect(actions == [
            .send(.roomState(room: "r", epoch: 7, firstSeq: 1, lastSeq: 5), to: ann),
            .send(.membersPage(room: "r", complete: true, nicks: ["bob", "ann"]), to: ann),
            .send(.historyPage(room: "r", epoch: 7, complete: true, entries: [old]), to: ann),
            .send(line, to: ann),
        ], "the room as of its join, then what happened since, in order")
    }

    @Test func aPartIsAcknowledgedByItsOwnLeftAndTheLeaverThenHearsNoMore() {
        var cluster = FakeCluster(nodes: 1)
        let ann = cluster.connect("ann", to: 0)
        let bob = cluster.connect("bob", to: 0)
        cluster.send(.join(room: "r"), from: ann, on: 0)
        cluster.send(.join(room: "r"), from: bob, on: 0)
        cluster.send(.part(room: "r"), from: ann, on: 0)
        #expect(cluster.frames(of: ann, on: 0).last == .left(room: "r", seq: 3, time: 7, nick: "ann"))
        cluster.send(.say(room: "r", text: "gone?"), from: bob, on: 0)
        #expect(cluster.frames(of: ann, on: 0).last == .left(room: "r", seq: 3, time: 7, nick: "ann"), "nothing after its left")
        cluster.send(.say(room: "r", text: "still here?"), from: ann, on: 0)
        #expect(cluster.frames(of: ann, on: 0).last.map { if case .error(.notInRoom, false, .say, _) = $0 { true } else { false } } == true)
    }
    @Test func aClientThatLeavesBeforeItsSnapshotGetsItThenItsLeft() {
        var core = clusteredCore()
        let ann = ClientID(0)
        var actions: [ChatAction] = []
        welcome("ann", in: ann, of: &core)
        core.received(.join(room: "r"), size: 10, from: ann, at: now, into: &actions)
        _ = core.takeClusterRequests()
        core.clusterJoinAppended(core.asker(ann), room: "r", failure: nil, at: now, into: &actions)
        let joined = Frame.joined(room: "r", seq: 5, time: 9, nick: "ann")
        core.clusterDeliver(room: "r", seq: 5, time: 9, payload: ChatCore.clusterPayload(of: joined), into: &actions)
        #expect(core.takeClusterRequests() == [.snapshot(room: "r", core.asker(ann), seq: 5, history: .page(.before, from: 5, limit: 100))])
        // Its part, pipelined behind the join, is appended and delivered before the snapshot is read.
        core.received(.part(room: "r"), size: 10, from: ann, at: now, into: &actions)
        _ = core.takeClusterRequests()
        actions.removeAll()
        let left = Frame.left(room: "r", seq: 6, time: 10, nick: "ann")
        core.clusterDeliver(room: "r", seq: 6, time: 10, payload: ChatCore.clusterPayload(of: left), into: &actions)
        #expect(actions.isEmpty, "its left waits for its snapshot: \(actions)")
        #expect(core.takeClusterRequests().isEmpty, "the room is still followed for it")

        let snapshot = ClusterRoomSnapshot(epoch: 7, firstSeq: 1, lastSeq: 5, topic: nil, members: ["ann"], history: [], complete: true)
        core.clusterSnapshotRead(room: "r", core.asker(ann), .success(snapshot), into: &actions)
        #expect(actions == [
            .send(.roomState(room: "r", epoch: 7, firstSeq: 1, lastSeq: 5), to: ann),
            .send(.membersPage(room: "r", complete: true, nicks: ["ann"]), to: ann),
            .send(.historyPage(room: "r", epoch: 7, complete: true, entries: []), to: ann),
            .send(left, to: ann),
        ], "the join sequence, then its left")
        #expect(core.takeClusterRequests() == [.unfollow(room: "r")], "and then the room is let go")
    }

    @Test func aLinesFanOutIsChargedToItsAddressByTheClustersMemberCount() {
        var core = clusteredCore {
            $0.addressFanoutRate = 1_000
            $0.addressFanoutBurst = 100_000
        }
        let ann = ClientID(0)
        var actions: [ChatAction] = []
        welcome("ann", in: ann, of: &core, from: "10.0.0.1")

        // Joining a room this node knows nothing of: charged for the joiner's own joined, then
        // for the 49 others the append found (50 members after it).
        core.received(.join(room: "r"), size: 10, from: ann, at: now, into: &actions)
        let joinCharge = FanoutCharge(address: "10.0.0.1", bytesPerDelivery: 34, deliveries: 1, memberCount: 0)
        #expect(
            core.takeClusterRequests()
                == [.join(room: "r", core.asker(ann), nick: "ann", charge: joinCharge, admission: Self.admission(of: "ann", address: "10.0.0.1"))])
        core.clusterFanoutCounted(room: "r", memberCount: 50, audience: 50, charge: joinCharge)
        core.clusterJoinAppended(core.asker(ann), room: "r", failure: nil, at: now, into: &actions)
        let joined = Frame.joined(room: "r", seq: 5, time: 9, nick: "ann")
        core.clusterDeliver(room: "r", seq: 5, time: 9, payload: ChatCore.clusterPayload(of: joined), into: &actions)
        _ = core.takeClusterRequests()
        // 50 × 34 spent of 100,000. A line of 100 bytes costs 50 × 124 = 6,200: fifteen fit.
        for line in 1...15 {
            core.received(.say(room: "r", text: "x"), size: 100, from: ann, at: now, into: &actions)
            let requests = core.takeClusterRequests()
            guard case .append(_, _, _, _, let charge?, _) = requests.first else {
                Issue.record("line \(line): expected an append with a charge, got \(requests)")
                return
            }
            #expect(charge.deliveries == 50, "line \(line) is charged for every member on every node")
            #expect(core.addressWait(for: ann, at: now) == 0, "line \(line) is within the burst")
        }
        core.received(.say(room: "r", text: "x"), size: 100, from: ann, at: now, into: &actions)
        #expect(core.addressWait(for: ann, at: now) > 0, "the sixteenth puts the address in debt: its next frame waits")
    }

    // MARK: A session ends after the answers to what it sent

    /// ann, welcomed on a core of its own, joins `r` (its `joined` is `seq` 5) and reads its
    /// snapshot; what it was sent meanwhile is left out.
    private static func member(of core: inout ChatCore) -> ClientID {
        let ann = ClientID(0)
        var actions: [ChatAction] = []
        welcome("ann", in: ann, of: &core)
        core.received(.join(room: "r"), size: 10, from: ann, at: now, into: &actions)
        core.clusterJoinAppended(core.asker(ann), room: "r", failure: nil, at: now, into: &actions)
        let joined = Frame.joined(room: "r", seq: 5, time: 9, nick: "ann")
        core.clusterDeliver(room: "r", seq: 5, time: 9, payload: ChatCore.clusterPayload(of: joined), into: &actions)
        let snapshot = ClusterRoomSnapshot(epoch: 7, firstSeq: 1, lastSeq: 5, topic: nil, members: ["ann"], history: [], complete: true)
        core.clusterSnapshotRead(room: "r", core.asker(ann), .success(snapshot), into: &actions)
        _ = core.takeClusterRequests()
        return ann
    }

    /// The sender of the one append among `requests`.
    private static func appendAsker(_ requests: [ClusterRequest]) -> ClusterAppender? {
        for case .append(_, _, _, let sender?, _, _) in requests { return sender }
        return nil
    }

    @Test func aClientLetGoGetsTheEchoOfItsLastLineBeforeItsDisconnection() {
        for replyFirst in [true, false] {
            var core = clusteredCore()
            let ann = Self.member(of: &core)
            var actions: [ChatAction] = []
            core.received(.say(room: "r", text: "bye now"), size: 20, from: ann, at: now, into: &actions)
            guard let asker = Self.appendAsker(core.takeClusterRequests()) else {
                Issue.record("expected the line's append")
                return
            }
            // Its input ends (or it says goodbye) while the line is on its way through Redis.
            core.endSession(ann, Disconnection(code: nil, reason: "connection closed by the client"), at: now, into: &actions)
            #expect(actions.isEmpty, "nothing ends before the echo: \(actions)")
            #expect(core.isAwaitingCluster(ann), "a client let go is read no more")
            #expect(core.nick(of: ann) == "ann", "and is still in the chat, to get its echo")
            core.received(.say(room: "r", text: "more"), size: 20, from: ann, at: now, into: &actions)
            #expect(core.takeClusterRequests().isEmpty && actions.isEmpty, "what it sends after is not served")

            let echo = Frame.message(room: "r", seq: 6, time: 10, sender: "ann", text: "bye now")
            let deliver = { (core: inout ChatCore, actions: inout [ChatAction]) in
                core.clusterDeliver(room: "r", seq: 6, time: 10, payload: ChatCore.clusterPayload(of: echo), into: &actions)
            }
            // The append's reply and the publication come on two connections, in either order.
            if replyFirst {
                core.clusterAppended(room: "r", seq: 6, sender: asker, into: &actions)
                #expect(actions.isEmpty, "numbered, not yet delivered: \(actions)")
                deliver(&core, &actions)
            } else {
                deliver(&core, &actions)
                #expect(actions == [.broadcast(echo, to: [ann])], "delivered, but Redis has not answered the append yet")
                core.clusterAppended(room: "r", seq: 6, sender: asker, into: &actions)
            }
            let disconnection = Disconnection(code: nil, reason: "connection closed by the client")
            #expect(actions == [.broadcast(echo, to: [ann]), .disconnect(ann, disconnection, nick: "ann")],
                    "the echo, then the end (reply first: \(replyFirst))")
            #expect(core.takeClusterRequests() == [
                .append(room: "r", event: .quit(room: "r", seq: 0, time: 0, nick: "ann", reason: disconnection.reason),
                        change: .leave(nick: "ann"), sender: nil, charge: nil, moderation: nil),
                .releaseNick("ann"), .unfollow(room: "r"),
            ], "then its room hears it quit")
        }
    }

    @Test func anAppendAnsweredAfterItsRoomWasFollowedAnewOwesNoEcho() {
        // The reply to an append and the event's publication come on two connections. ann's
        // line and part are published first: her `left` empties the room here, and the node
        // stops following it; bob joins it, and the node follows it anew. Only then do the
        // replies come. Redis answers one connection in order, so it numbered both before the
        // new follow read the room's `seq`: the new follow never delivers them again.
        var core = clusteredCore()
        let (ann, bob) = (Self.member(of: &core), ClientID(1))
        welcome("bob", in: bob, of: &core)
        var actions: [ChatAction] = []
        core.received(.say(room: "r", text: "last"), size: 20, from: ann, at: now, into: &actions)
        core.received(.part(room: "r"), size: 10, from: ann, at: now, into: &actions)
        var senders: [ClusterAppender] = []
        for case .append(_, _, _, let sender?, _, _) in core.takeClusterRequests() { senders.append(sender) }
        #expect(senders.count == 2, "the line and the part are appended")
        _ = Self.deliver(.message(room: "r", seq: 6, time: 9, sender: "ann", text: "last"), seq: 6, to: &core)
        _ = Self.deliver(.left(room: "r", seq: 7, time: 9, nick: "ann"), seq: 7, to: &core)
        #expect(core.takeClusterRequests() == [.unfollow(room: "r")], "no one is left in #r here")

        core.received(.join(room: "r"), size: 10, from: bob, at: now, into: &actions)
        #expect(core.takeClusterRequests().count == 1, "bob's join follows #r anew")
        for (seq, sender) in zip([UInt64(6), 7], senders) { core.clusterAppended(room: "r", seq: seq, sender: sender, into: &actions) }
        actions.removeAll()
        let disconnection = Disconnection(code: nil, reason: "connection closed by the client")
        core.endSession(ann, disconnection, at: now, into: &actions)
        #expect(actions == [.disconnect(ann, disconnection, nick: "ann")], "nothing is owed her: she goes at once")
    }

    @Test func aLineThatFailsAmongLinesAlikeTakesItsOwnPlaceInItsSendersOrder() {
        // ann says "hi", "yo", "hi"; Redis refuses the second "hi". Its error goes after the
        // echoes of the lines before it, and the echoes of those take their own places: the
        // failure must not take the first "hi"'s place, or the first echo would find "yo"
        // first on the list, and the pong would wait behind an echo that never comes.
        var core = clusteredCore()
        let ann = Self.member(of: &core)
        var actions: [ChatAction] = []
        var senders: [ClusterAppender] = []
        for text in ["hi", "yo", "hi"] {
            core.received(.say(room: "r", text: text), size: 20, from: ann, at: now, into: &actions)
            for case .append(_, _, _, let sender?, _, _) in core.takeClusterRequests() { senders.append(sender) }
        }
        core.received(.ping(token: 1), size: 8, from: ann, at: now, into: &actions)
        #expect(senders.count == 3 && actions.isEmpty, "three lines appended, the pong waits: \(actions)")
        core.clusterAppended(room: "r", seq: 6, sender: senders[0], into: &actions)
        core.clusterAppended(room: "r", seq: 7, sender: senders[1], into: &actions)
        let failure = ClusterFailure(code: .moderated, reason: "refused")
        core.clusterAppendFailed(
            .message(room: "r", seq: 0, time: 0, sender: "ann", text: "hi"), in: "r", sender: senders[2], failure: failure, into: &actions)
        let hi = Frame.message(room: "r", seq: 6, time: 9, sender: "ann", text: "hi")
        let yo = Frame.message(room: "r", seq: 7, time: 9, sender: "ann", text: "yo")
        actions += Self.deliver(hi, seq: 6, to: &core)
        actions += Self.deliver(yo, seq: 7, to: &core)
        let refusal = Frame.error(code: .moderated, fatal: false, frameType: .say, reason: "#r: not done: refused")
        #expect(frames(to: ann, in: actions) == [hi, yo, refusal, .pong(token: 1)], "each in the order ann asked")
        #expect(!core.isAwaitingCluster(ann) && core.heldReplyBytes(for: ann) == 0, "nothing waits")
    }

    @Test func aJoinedOfASessionThatLeftIsNotTakenForTheNextSessionOfItsNick() {
        // ann's join is on its way when her session ends (another node's login ghosts it); bob
        // keeps #r followed here. A next session called ann must not be taken for the one that
        // left: its join waits until the first one's `joined` has come, which makes no one a
        // member, and then the next `joined` of ann is its own.
        var core = clusteredCore()
        let (bob, ann, next) = (ClientID(0), ClientID(1), ClientID(2))
        welcome("bob", in: bob, of: &core)
        Self.join(bob, "bob", to: "r", seq: 1, members: ["bob"], of: &core)
        welcome("ann", in: ann, of: &core)
        var actions: [ChatAction] = []
        core.received(.join(room: "r"), size: 10, from: ann, at: now, into: &actions)
        let first = core.asker(ann)
        core.clusterGhost(nickKey: "ann", at: now, into: &actions)
        _ = core.takeClusterRequests()

        welcome("ann", in: next, of: &core)
        actions.removeAll()
        core.received(.join(room: "r"), size: 10, from: next, at: now, into: &actions)
        #expect(core.takeClusterRequests().isEmpty, "no join is asked yet")
        guard case .error(.unavailable, false, .join, _)? = frames(to: next, in: actions).first else {
            Issue.record("expected a refusal, try again: \(actions)")
            return
        }
        core.clusterJoinAppended(first, room: "r", failure: nil, at: now, into: &actions)
        actions.removeAll()
        let gone = Frame.joined(room: "r", seq: 2, time: 9, nick: "ann")
        #expect(Self.deliver(gone, seq: 2, to: &core) == [.broadcast(gone, to: [bob])], "the first ann's joined goes to bob alone")
        let quit = Frame.quit(room: "r", seq: 3, time: 9, nick: "ann", reason: "ghosted")
        #expect(Self.deliver(quit, seq: 3, to: &core) == [.broadcast(quit, to: [bob])])

        core.received(.join(room: "r"), size: 10, from: next, at: now, into: &actions)
        guard case .join(_, let asker, "ann", _, _)? = core.takeClusterRequests().first else {
            Issue.record("expected the next ann's join now")
            return
        }
        core.clusterJoinAppended(asker, room: "r", failure: nil, at: now, into: &actions)
        let own = Frame.joined(room: "r", seq: 4, time: 9, nick: "ann")
        #expect(Self.deliver(own, seq: 4, to: &core) == [.broadcast(own, to: [bob, next])], "its own joined makes the next ann a member")
    }

    @Test func aHalfClosedJoinerGetsItsJoinSequenceAndEchoBeforeItsDisconnection() {
        var core = clusteredCore()
        let ann = ClientID(0)
        var actions: [ChatAction] = []
        welcome("ann", in: ann, of: &core)
        core.received(.join(room: "r"), size: 10, from: ann, at: now, into: &actions)
        core.clusterJoinAppended(core.asker(ann), room: "r", failure: nil, at: now, into: &actions)
        core.received(.say(room: "r", text: "bye now"), size: 20, from: ann, at: now, into: &actions)
        guard let asker = Self.appendAsker(core.takeClusterRequests()) else {
            Issue.record("expected the line's append")
            return
        }
        core.endSession(ann, Disconnection(code: nil, reason: "connection closed by the client"), at: now, into: &actions)
        core.clusterAppended(room: "r", seq: 6, sender: asker, into: &actions)
        actions.removeAll()
        let joined = Frame.joined(room: "r", seq: 5, time: 9, nick: "ann")
        core.clusterDeliver(room: "r", seq: 5, time: 9, payload: ChatCore.clusterPayload(of: joined), into: &actions)
        let echo = Frame.message(room: "r", seq: 6, time: 10, sender: "ann", text: "bye now")
        core.clusterDeliver(room: "r", seq: 6, time: 10, payload: ChatCore.clusterPayload(of: echo), into: &actions)
        #expect(actions == [.broadcast(joined, to: [ann])], "its echo waits for its snapshot, and so does its end: \(actions)")
        let snapshot = ClusterRoomSnapshot(epoch: 7, firstSeq: 1, lastSeq: 5, topic: nil, members: ["ann"], history: [], complete: true)
        core.clusterSnapshotRead(room: "r", core.asker(ann), .success(snapshot), into: &actions)
        #expect(Array(actions.suffix(2)) == [
            .send(echo, to: ann), .disconnect(ann, Disconnection(code: nil, reason: "connection closed by the client"), nick: "ann"),
        ], "the snapshot, the echo, then the end: \(actions)")
    }

    @Test func aFloodersFatalErrorComesAfterTheEchoesOfTheLinesAcceptedBeforeIt() {
        var core = clusteredCore {
            $0.messageRate = 0.1
            $0.messageBurst = 3
            $0.rateAbuseLimit = 2
        }
        let ann = Self.member(of: &core)
        var actions: [ChatAction] = []
        var askers: [ClusterAppender] = []
        for number in 0..<4 {
            core.received(.say(room: "r", text: "spam \(number)"), size: 20, from: ann, at: now, into: &actions)
            if let asker = Self.appendAsker(core.takeClusterRequests()) { askers.append(asker) }
        }
        #expect(askers.count == 2, "the join took one token of three")
        #expect(!actions.contains { if case .disconnect = $0 { true } else { false } }, "not before the echoes: \(actions)")
        actions.removeAll()
        for (offset, asker) in askers.enumerated() {
            let seq = UInt64(6 + offset)
            core.clusterAppended(room: "r", seq: seq, sender: asker, into: &actions)
            let echo = Frame.message(room: "r", seq: seq, time: 10, sender: "ann", text: "spam \(offset)")
            core.clusterDeliver(room: "r", seq: seq, time: 10, payload: ChatCore.clusterPayload(of: echo), into: &actions)
        }
        // The refusal of the third line is a reply like any other: after the echoes of the lines
        // before it.
        guard actions.count == 4, case .send(.error(.rateLimited, false, .say, _), ann) = actions[2],
            case .disconnect(ann, let why, _) = actions[3]
        else {
            Issue.record("expected both echoes, the third line's refusal, then the disconnection, got \(actions)")
            return
        }
        #expect(why.code == .rateLimited)
    }

    @Test func aClientLetGoWaitsForRedisNoLongerThanTheLingerTimeout() {
        var core = clusteredCore { $0.lingerTimeout = .seconds(2) }
        let ann = Self.member(of: &core)
        var actions: [ChatAction] = []
        core.received(.say(room: "r", text: "into the void"), size: 20, from: ann, at: now, into: &actions)
        core.received(.goodbye(reason: "bye"), size: 8, from: ann, at: now, into: &actions)
        #expect(actions.isEmpty)
        let later = ServerTime(wallMillis: now.wallMillis + 1_999, uptimeMillis: now.uptimeMillis + 1_999)
        core.tick(at: later, into: &actions)
        #expect(actions.isEmpty, "still within the linger timeout: \(actions)")
        let deadline = ServerTime(wallMillis: now.wallMillis + 2_000, uptimeMillis: now.uptimeMillis + 2_000)
        core.tick(at: deadline, into: &actions)
        #expect(actions == [.disconnect(ann, Disconnection(code: nil, reason: "bye"), nick: "ann")], "let go without its echo")
    }

    @Test func aClientOwedNothingIsDisconnectedAtOnce() {
        var core = clusteredCore()
        let ann = Self.member(of: &core)
        var actions: [ChatAction] = []
        core.received(.say(room: "r", text: "hi"), size: 20, from: ann, at: now, into: &actions)
        guard let asker = Self.appendAsker(core.takeClusterRequests()) else {
            Issue.record("expected the line's append")
            return
        }
        let echo = Frame.message(room: "r", seq: 6, time: 10, sender: "ann", text: "hi")
        core.clusterAppended(room: "r", seq: 6, sender: asker, into: &actions)
        core.clusterDeliver(room: "r", seq: 6, time: 10, payload: ChatCore.clusterPayload(of: echo), into: &actions)
        actions.removeAll()
        core.received(.goodbye(reason: "bye"), size: 8, from: ann, at: now, into: &actions)
        #expect(actions == [.disconnect(ann, Disconnection(code: nil, reason: "bye"), nick: "ann")])
    }

    @Test func aClientsReadsAreAnsweredOneAtATime() {
        var core = clusteredCore()
        let ann = Self.member(of: &core)
        var actions: [ChatAction] = []
        for read in [Frame.who(room: "r"), .listRooms, .requestHistory(room: "r", count: 100), .fetchHistory(room: "r", direction: .before, seq: 0, limit: 100)] {
            core.received(read, size: 10, from: ann, at: now, into: &actions)
            let requests = core.takeClusterRequests()
            #expect(requests.count == 1, "\(read) is asked of the cluster: \(requests)")
            #expect(core.isAwaitingCluster(ann), "the next request waits for the answer to \(read)")
            switch requests.first {
            case .members(let room, let asker, _)?: core.clusterMembersRead(room: room, asker, .success(["ann"]), into: &actions)
            case .listRooms(let asker)?: core.clusterRoomsRead(asker, .success([]), into: &actions)
            case .history(let room, let asker, _, let request)?:
                core.clusterHistoryRead(room: room, asker, request: request, .success((epoch: 7, entries: [], complete: true)), into: &actions)
            default: Issue.record("expected a read, got \(requests)")
            }
            #expect(!core.isAwaitingCluster(ann), "answered: \(read)")
        }
    }

    // MARK: Order (docs/SERVER.md): a reply follows the events the requests before it caused

    /// Joins `id` (called `nick`) to `room` by hand: its `joined` is `seq`, and it is told the
    /// room has `members`.
    private static func join(_ id: ClientID, _ nick: String, to room: String, seq: UInt64, members: [String], of core: inout ChatCore) {
        var actions: [ChatAction] = []
        core.received(.join(room: room), size: 10, from: id, at: now, into: &actions)
        _ = core.takeClusterRequests()
        core.clusterJoinAppended(core.asker(id), room: room, failure: nil, at: now, into: &actions)
        let joined = Frame.joined(room: room, seq: seq, time: 9, nick: nick)
        core.clusterDeliver(room: room, seq: seq, time: 9, payload: ChatCore.clusterPayload(of: joined), into: &actions)
        _ = core.takeClusterRequests()
        let snapshot = ClusterRoomSnapshot(epoch: 7, firstSeq: 1, lastSeq: seq, topic: nil, members: members, history: [], complete: true)
        core.clusterSnapshotRead(room: room, core.asker(id), .success(snapshot), into: &actions)
    }

    /// Delivers `event` of its room with `seq`, as Redis publishes it; returns what the core did.
    private static func deliver(_ event: Frame, seq: UInt64, to core: inout ChatCore) -> [ChatAction] {
        var actions: [ChatAction] = []
        let room = ChatCore.room(of: event)!
        core.clusterDeliver(room: room, seq: seq, time: 9, payload: ChatCore.clusterPayload(of: event), into: &actions)
        return actions
    }

    @Test func repliesWaitForTheEchoesOfEarlierAppendsWhicheverRoomResolvesFirstAndAFailureTakesItsPlace() {
        var core = clusteredCore()
        let (ann, bob) = (ClientID(0), ClientID(1))
        welcome("ann", in: ann, of: &core)
        welcome("bob", in: bob, of: &core)
        Self.join(ann, "ann", to: "r", seq: 1, members: ["ann"], of: &core)
        Self.join(bob, "bob", to: "r", seq: 2, members: ["ann", "bob"], of: &core)
        Self.join(ann, "ann", to: "s", seq: 1, members: ["ann"], of: &core)
        Self.join(bob, "bob", to: "s", seq: 2, members: ["ann", "bob"], of: &core)
        _ = core.takeClusterRequests()

        var actions: [ChatAction] = []
        let requests: [Frame] = [
            .say(room: "r", text: "one"), .say(room: "s", text: "two"), .ping(token: 1), .say(room: "r", text: "three"), .ping(token: 2),
            .tell(recipient: "bob", text: "psst"), .say(room: "nowhere", text: "refused"),
        ]
        for request in requests { core.received(request, size: 20, from: ann, at: now, into: &actions) }
        #expect(actions.isEmpty, "nothing goes before the echo of ann's first line: \(actions)")
        #expect(core.heldReplyBytes(for: ann) > 0, "what waits is counted")
        var askers: [String: ClusterAppender] = [:]
        for case .append(_, .message(_, _, _, _, let text), _, let sender?, _, _) in core.takeClusterRequests() { askers[text] = sender }
        #expect(askers.count == 3, "three lines are appended: \(askers.keys)")

        // Room s numbers its line first: bob hears it now, ann's copy waits behind "one".
        let two = Frame.message(room: "s", seq: 3, time: 9, sender: "ann", text: "two")
        #expect(Self.deliver(two, seq: 3, to: &core) == [.broadcast(two, to: [bob])], "only bob's copy goes before ann's first echo")
        // "three" fails before "one" comes back: its error waits in its place, after pong 1.
        core.clusterAppendFailed(
            .message(room: "r", seq: 0, time: 0, sender: "ann", text: "three"), in: "r", sender: askers["three"]!,
            failure: ClusterFailure(reason: "Redis is down"), into: &actions)
        #expect(actions.isEmpty, "the failure waits for the echo of \"one\" too: \(actions)")

        let one = Frame.message(room: "r", seq: 3, time: 9, sender: "ann", text: "one")
        let released = Self.deliver(one, seq: 3, to: &core)
        let direct = Frame.direct(sender: "ann", recipient: "bob", time: now.wallMillis, text: "psst")
        #expect(released.count == 7, "\(released)")
        #expect(
            Array(released.prefix(3)) == [.broadcast(one, to: [ann, bob]), .send(two, to: ann), .send(.pong(token: 1), to: ann)],
            "one, then ann's copy of two, then pong 1")
        guard released.count == 7, case .send(.error(.unavailable, false, .say, let reason), ann) = released[3] else {
            Issue.record("expected the failed line's error after pong 1: \(released)")
            return
        }
        #expect(reason.contains("not done"))
        #expect(released[4] == .send(.pong(token: 2), to: ann), "pong 2 after the error of the line sent before it")
        #expect(released[5] == .broadcast(direct, to: [bob, ann]), "bob's direct after ann's events before it")
        guard case .send(.error(.notInRoom, false, .say, _), ann) = released[6] else {
            Issue.record("the refusal last: \(released)")
            return
        }
        #expect(core.heldReplyBytes(for: ann) == 0, "nothing is held once the echoes came")
        #expect(Self.deliver(.message(room: "r", seq: 4, time: 9, sender: "bob", text: "later"), seq: 4, to: &core).count == 1)
    }

    @Test func aFailedJoinAndATellThroughAnotherNodeTakeTheirPlaceInOrder() {
        var core = clusteredCore()
        let ann = ClientID(0)
        welcome("ann", in: ann, of: &core)
        Self.join(ann, "ann", to: "r", seq: 1, members: ["ann"], of: &core)
        _ = core.takeClusterRequests()
        var actions: [ChatAction] = []
        core.received(.say(room: "r", text: "one"), size: 20, from: ann, at: now, into: &actions)
        core.received(.tell(recipient: "carol", text: "hi"), size: 20, from: ann, at: now, into: &actions)
        core.received(.ping(token: 1), size: 8, from: ann, at: now, into: &actions)
        core.received(.join(room: "t"), size: 10, from: ann, at: now, into: &actions)
        var directAsker: ClusterAsker?
        for case .direct(_, let sender) in core.takeClusterRequests() { directAsker = sender }
        #expect(actions.isEmpty, "\(actions)")
        // carol's node heard it before "one" came back: ann's copy waits for "one".
        let direct = Frame.direct(sender: "ann", recipient: "carol", time: now.wallMillis, text: "hi")
        core.clusterDirectSent(direct, sender: directAsker!, .success(true), into: &actions)
        core.clusterJoinAppended(core.asker(ann), room: "t", failure: ClusterFailure(reason: "Redis is down"), at: now, into: &actions)
        #expect(actions.isEmpty, "\(actions)")
        let one = Frame.message(room: "r", seq: 2, time: 9, sender: "ann", text: "one")
        let released = Self.deliver(one, seq: 2, to: &core)
        #expect(
            Array(released.prefix(3)) == [.broadcast(one, to: [ann]), .send(direct, to: ann), .send(.pong(token: 1), to: ann)],
            "one, then the copy of the tell, then the pong: \(released)")
        guard released.count == 4, case .send(.error(.unavailable, false, .join, _), ann) = released[3] else {
            Issue.record("the join's refusal last: \(released)")
            return
        }
    }

    @Test func framesHeldForAClientStopItsRequestsPastTheReplyHighWaterMark() {
        var core = clusteredCore()
        let (ann, bob) = (ClientID(0), ClientID(1))
        welcome("ann", in: ann, of: &core)
        welcome("bob", in: bob, of: &core)
        Self.join(ann, "ann", to: "r", seq: 1, members: ["ann"], of: &core)
        _ = core.takeClusterRequests()
        var actions: [ChatAction] = []
        core.received(.say(room: "r", text: "one"), size: 20, from: ann, at: now, into: &actions)
        let text = String(repeating: "x", count: 4_000)
        var told = 0
        while !core.isAwaitingCluster(ann), told < 1_000 {
            core.received(.tell(recipient: "bob", text: text), size: 4_020, from: ann, at: now, into: &actions)
            told += 1
        }
        let highWater = core.budget.replyHighWater
        #expect(core.isAwaitingCluster(ann), "a client whose held frames pass the high-water mark is read no more")
        #expect(core.heldReplyBytes(for: ann) > highWater && core.heldReplyBytes(for: ann) < highWater + 8_000,
            "it stops within a frame of the mark: \(core.heldReplyBytes(for: ann)) after \(told) tells")
        #expect(actions.isEmpty)
        let released = Self.deliver(.message(room: "r", seq: 2, time: 9, sender: "ann", text: "one"), seq: 2, to: &core)
        #expect(released.count == told + 1, "the echo, then every direct message")
        #expect(!core.isAwaitingCluster(ann) && core.heldReplyBytes(for: ann) == 0, "read again once they went")
    }

    /// On a single server `changeNick` is answered with `nickAccepted` and then the `nickChanged`
    /// of each of the client's rooms, before its next request is read: a reply to a later request
    /// follows them on a node too, and a `nickChanged` that could not be appended (it is tried
    /// again once Redis is back) holds nothing up.
    @Test func aNickChangesEventsComeBeforeTheRepliesToTheRequestsAfterIt() {
        var core = clusteredCore()
        let (ann, bob) = (ClientID(0), ClientID(1))
        welcome("ann", in: ann, of: &core)
        welcome("bob", in: bob, of: &core)
        Self.join(ann, "ann", to: "r", seq: 1, members: ["ann"], of: &core)
        Self.join(bob, "bob", to: "r", seq: 2, members: ["ann", "bob"], of: &core)
        Self.join(ann, "ann", to: "s", seq: 1, members: ["ann"], of: &core)
        _ = core.takeClusterRequests()
        var actions: [ChatAction] = []
        core.received(.changeNick(nick: "anna"), size: 10, from: ann, at: now, into: &actions)
        // A member's change reads its rooms' bans first (none here), then claims the nick.
        let standings = core.takeClusterRequests()
        #expect(standings == [.standings(rooms: ["r", "s"], core.asker(ann), check: .nickChange("anna"))])
        #expect(core.isAwaitingCluster(ann), "not read while its rooms' bans are read")
        core.clusterStandingsRead(
            core.asker(ann), .nickChange("anna"), .success(["r": ClusterRoomStanding(), "s": ClusterRoomStanding()]), at: now,
            into: &actions)
        #expect(core.takeClusterRequests() == [.claimNick(core.asker(ann), nick: "anna")])
        core.clusterNickClaimed(core.asker(ann), nick: "anna", .success(true), at: now, into: &actions)
        #expect(actions == [.send(.nickAccepted(nick: "anna"), to: ann)], "accepted at once, before its events")
        var askers: [String: ClusterAppender] = [:]
        for case .append(let room, .nickChanged, _, let sender?, _, _) in core.takeClusterRequests() { askers[room] = sender }
        #expect(askers.keys.sorted() == ["r", "s"], "one nickChanged per room, each answered to ann")
        actions.removeAll()
        core.received(.ping(token: 1), size: 8, from: ann, at: now, into: &actions)
        #expect(actions.isEmpty, "the pong waits for the nick change's events: \(actions)")
        let inR = Frame.nickChanged(room: "r", seq: 3, time: 9, old: "ann", new: "anna")
        #expect(Self.deliver(inR, seq: 3, to: &core) == [.broadcast(inR, to: [ann, bob])], "s's event has not come yet")
        core.clusterAppendFailed(
            .nickChanged(room: "s", seq: 0, time: 0, old: "ann", new: "anna"), in: "s", sender: askers["s"]!,
            failure: ClusterFailure(reason: "Redis is down"), into: &actions)
        #expect(actions == [.send(.pong(token: 1), to: ann)], "no error: the node appends it again once Redis is back")
    }

    /// A `tell` to a client of this node waits, in its sender's order, for the echoes of the lines
    /// its sender said before it. A single server had delivered it when it read it, so it still
    /// goes if the sender's connection is lost meanwhile — after those lines, as it would have.
    /// A member's change into a nick that a ban of one of its rooms names is refused `banned`
    /// from the bans Redis holds, as on a server on its own; nothing is claimed.
    @Test func aMembersNickChangeIntoABannedNickIsRefusedFromTheRoomsStandingInRedis() {
        var core = clusteredCore()
        let ann = ClientID(0)
        welcome("ann", in: ann, of: &core)
        Self.join(ann, "ann", to: "r", seq: 1, members: ["ann"], of: &core)
        _ = core.takeClusterRequests()
        var actions: [ChatAction] = []
        core.received(.changeNick(nick: "Eve"), size: 10, from: ann, at: now, into: &actions)
        _ = core.takeClusterRequests()
        var standing = ClusterRoomStanding()
        standing.bans = [BanEntry(mask: "nick:eve", setBy: "op", time: 1, reason: "")]
        core.clusterStandingsRead(core.asker(ann), .nickChange("Eve"), .success(["r": standing]), at: now, into: &actions)
        #expect(core.takeClusterRequests().isEmpty, "nothing claimed")
        guard case .send(.error(.banned, false, .changeNick, let reason), to: ann)? = actions.first else {
            Issue.record("refused banned: \(actions)")
            return
        }
        #expect(reason.contains("#r"))
        #expect(!core.isAwaitingCluster(ann))
    }

    @Test func aTellHeldBehindItsSendersLinesReachesItsRecipientThoughTheSenderLeft() {
        var core = clusteredCore()
        let (ann, bob) = (ClientID(0), ClientID(1))
        welcome("ann", in: ann, of: &core)
        welcome("bob", in: bob, of: &core)
        Self.join(ann, "ann", to: "r", seq: 1, members: ["ann"], of: &core)
        Self.join(bob, "bob", to: "r", seq: 2, members: ["ann", "bob"], of: &core)
        _ = core.takeClusterRequests()
        var actions: [ChatAction] = []
        core.received(.say(room: "r", text: "one"), size: 20, from: ann, at: now, into: &actions)
        core.received(.tell(recipient: "bob", text: "psst"), size: 20, from: ann, at: now, into: &actions)
        #expect(actions.isEmpty, "the tell waits for ann's line: \(actions)")
        core.disconnect(ann, Disconnection(code: nil, reason: "connection lost"), at: now, into: &actions)
        #expect(frames(to: bob, in: actions).isEmpty, "still after ann's line: \(actions)")
        let one = Frame.message(room: "r", seq: 3, time: 9, sender: "ann", text: "one")
        let released = Self.deliver(one, seq: 3, to: &core)
        let direct = Frame.direct(sender: "ann", recipient: "bob", time: now.wallMillis, text: "psst")
        #expect(frames(to: bob, in: released) == [one, direct], "bob gets ann's line, then her direct message")
        #expect(frames(to: ann, in: released).isEmpty, "nothing for the client that left: \(released)")
    }

    /// The other requests a `tell` can wait behind resolve its place after its sender left too:
    /// a join (whose snapshot it will never be sent), a `tell` through another node, and a line
    /// in a room the node no longer follows once the sender was its last member here.
    @Test func aTellHeldBehindAJoinATellOrAnUnfollowedRoomGoesOnceItsSenderLeft() {
        let direct = Frame.direct(sender: "ann", recipient: "bob", time: now.wallMillis, text: "psst")
        for behind in ["join", "tell", "unfollowed"] {
            var core = clusteredCore()
            let (ann, bob) = (ClientID(0), ClientID(1))
            welcome("ann", in: ann, of: &core)
            welcome("bob", in: bob, of: &core)
            Self.join(ann, "ann", to: "r", seq: 1, members: ["ann"], of: &core)
            _ = core.takeClusterRequests()
            var actions: [ChatAction] = []
            let first: Frame =
                switch behind {
                case "join": .join(room: "t")
                case "tell": .tell(recipient: "carol", text: "hi")
                default: .say(room: "r", text: "one")
                }
            core.received(first, size: 20, from: ann, at: now, into: &actions)
            if behind == "join" { core.clusterJoinAppended(core.asker(ann), room: "t", failure: nil, at: now, into: &actions) }
            var directAsker: ClusterAsker?
            for case .direct(_, let sender) in core.takeClusterRequests() { directAsker = sender }
            core.received(.tell(recipient: "bob", text: "psst"), size: 20, from: ann, at: now, into: &actions)
            #expect(actions.isEmpty, "\(behind): the tell waits: \(actions)")
            core.disconnect(ann, Disconnection(code: nil, reason: "connection lost"), at: now, into: &actions)
            if behind == "tell" {
                #expect(frames(to: bob, in: actions).isEmpty, "tell: it still waits for the tell before it")
                let toCarol = Frame.direct(sender: "ann", recipient: "carol", time: now.wallMillis, text: "hi")
                core.clusterDirectSent(toCarol, sender: directAsker!, .success(true), into: &actions)
            }
            #expect(frames(to: bob, in: actions) == [direct], "\(behind): bob gets ann's direct message: \(actions)")
            #expect(frames(to: ann, in: actions).isEmpty, "\(behind): nothing for ann, who left: \(actions)")
        }
    }

    /// What waits in a sender's order for another client of this node is meant for that client
    /// only: if it leaves meanwhile and a newcomer takes its slot, the newcomer gets none of it.
    @Test func framesHeldForARecipientThatLeftDoNotReachTheNextClientInItsSlot() {
        var core = clusteredCore()
        let (ann, bob) = (ClientID(0), ClientID(1))
        welcome("ann", in: ann, of: &core)
        welcome("bob", in: bob, of: &core)
        Self.join(ann, "ann", to: "r", seq: 1, members: ["ann"], of: &core)
        _ = core.takeClusterRequests()
        var actions: [ChatAction] = []
        core.received(.say(room: "r", text: "one"), size: 20, from: ann, at: now, into: &actions)
        core.received(.tell(recipient: "bob", text: "for bob only"), size: 30, from: ann, at: now, into: &actions)
        core.disconnect(bob, Disconnection(code: nil, reason: "connection lost"), at: now, into: &actions)
        welcome("carol", in: bob, of: &core)
        _ = core.takeClusterRequests()
        let one = Frame.message(room: "r", seq: 2, time: 9, sender: "ann", text: "one")
        let released = Self.deliver(one, seq: 2, to: &core)
        let direct = Frame.direct(sender: "ann", recipient: "bob", time: now.wallMillis, text: "for bob only")
        #expect(frames(to: ann, in: released) == [one, direct], "ann's echo, then her copy of the tell")
        #expect(frames(to: bob, in: released).isEmpty, "carol, in bob's slot, gets nothing of bob's: \(released)")
    }

    @Test func aNicksNextHolderDoesNotWaitForTheLinesOfOneThatLeft() {
        var core = clusteredCore()
        let (first, second) = (ClientID(0), ClientID(1))
        welcome("ann", in: first, of: &core)
        Self.join(first, "ann", to: "r", seq: 1, members: ["ann"], of: &core)
        _ = core.takeClusterRequests()
        var actions: [ChatAction] = []
        core.received(.say(room: "r", text: "lost"), size: 20, from: first, at: now, into: &actions)
        let asker = Self.appendAsker(core.takeClusterRequests())!
        core.disconnect(first, Disconnection(code: nil, reason: "gone"), at: now, into: &actions)
        // Its line fails after it left; a new ann joins and speaks.
        core.clusterAppendFailed(
            .message(room: "r", seq: 0, time: 0, sender: "ann", text: "lost"), in: "r", sender: asker,
            failure: ClusterFailure(reason: "Redis is down"), into: &actions)
        welcome("ann", in: second, of: &core)
        Self.join(second, "ann", to: "r", seq: 2, members: ["ann"], of: &core)
        _ = core.takeClusterRequests()
        actions.removeAll()
        core.received(.say(room: "r", text: "found"), size: 20, from: second, at: now, into: &actions)
        core.received(.ping(token: 1), size: 8, from: second, at: now, into: &actions)
        let found = Frame.message(room: "r", seq: 3, time: 9, sender: "ann", text: "found")
        #expect(Self.deliver(found, seq: 3, to: &core) == [.broadcast(found, to: [second]), .send(.pong(token: 1), to: second)],
            "the pong follows the new ann's own line, not one that will never come")
    }
}
