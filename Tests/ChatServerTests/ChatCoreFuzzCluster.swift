// Compiled with ChatCoreFuzzProperties.swift: into this test target, and by Scripts/fuzz.sh into
// the `chatcore` libFuzzer target.
import ChatProtocol
import Glibc

@testable import ChatCore

/// Redis as one cluster node sees it, for a scenario whose core is that node: the rooms' logs
/// (epoch, numbering, members, topic), the node's follows with the events not yet delivered to
/// it, and the node's requests not yet answered.
///
/// What the input picks, and a real cluster may do: which request is answered next, and whether
/// it succeeds, fails (Redis unreachable) or is refused (another node holds the nick, the room's
/// moderation says no); when each followed room's next event arrives, between any two answers;
/// events of other nodes' clients — joins, lines, leaves, topics, renames, kicks of anyone — and
/// another node ghosting or killing a client of this one; Redis going away and coming back.
/// What it keeps, as ClusterNode, RoomLog and the append script promise the core: each request
/// is answered at most once (a restarted node's never); appends and joins are numbered and
/// answered in the order asked (one connection); a room's events arrive in `seq` order, each
/// once, from when the node starts following it (not an event Redis numbered before, though
/// answered after); an event by, or a kick of, someone who is not a member is refused; a room
/// whose last member goes keeps its epoch, numbering and topic, as the append script keeps them.
struct FuzzRedis {
    struct Room {
        var epoch: UInt64
        var lastSeq: UInt64 = 0
        /// Members in joining order, and whether the node under test serves them.
        var members: [(nick: String, here: Bool)] = []
        var topic: Frame?
    }

    /// An event numbered in a room's log, on its way to the node.
    struct Delivery {
        var seq: UInt64
        var time: UInt64
        var payload: [UInt8]
    }

    var rooms: [String: Room] = [:]
    /// The rooms the node follows, each with its events not delivered yet, oldest first.
    var streams: [String: [Delivery]] = [:]
    /// Requests waiting for their answer, in the order the node asked.
    var pending: [ClusterRequest] = []
    /// By followed room, how many of the node's pending appends to it were asked before the
    /// follow began. Redis numbers them first, on the one connection, and only then reads the
    /// room's `seq` for the follow (`RoomLog.follow`): their events are not this follow's.
    var appendsBeforeFollow: [String: Int] = [:]
    var available = true
    private var nextEpoch: UInt64 = 1

    /// Nicks of clients on other nodes.
    static let elsewhere = ["zed", "yan", "xi"]

    /// Takes the node's new requests: a join follows its room from now on; those that are never
    /// answered are carried out at once.
    mutating func take(_ requests: [ClusterRequest]) {
        for request in requests {
            switch request {
            case .releaseNick, .setAway:
                continue
            case .unfollow(let room):
                streams[room] = nil
                appendsBeforeFollow[room] = nil
                continue
            case .join(let room, _, _, _, _):
                if streams[room] == nil {
                    streams[room] = []
                    appendsBeforeFollow[room] = pending.count { if case .append(room, _, _, _, _, _) = $0 { true } else { false } }
                }
            default:
                break
            }
            pending.append(request)
        }
    }

    /// Whether `request` appends to a room's log, where Redis numbers it.
    static func isNumbered(_ request: ClusterRequest) -> Bool {
        switch request {
        case .join, .append: true
        default: false
        }
    }

    /// The node's process ended: its requests go unanswered, it follows nothing, and Redis reaps
    /// the members it served.
    mutating func nodeRestarted() {
        pending.removeAll()
        streams.removeAll()
        appendsBeforeFollow.removeAll()
        for name in rooms.keys { rooms[name]!.members.removeAll { $0.here } }
        available = true
    }

    /// Whether the node asked for its oldest pending append to `room` before it last began to
    /// follow the room; called as that append is answered, whatever the answer.
    mutating func answeringAppendBeforeFollow(to room: String) -> Bool {
        guard let earlier = appendsBeforeFollow[room], earlier > 0 else { return false }
        appendsBeforeFollow[room] = earlier - 1
        return true
    }

    /// Appends `event` to its room's log as the append script does: numbers it, applies its
    /// change to the members and topic, and sends it to the node if it follows the room (unless
    /// `beforeFollow`: see `appendsBeforeFollow`). Returns its `seq` and the room's member count
    /// after it; nil when the script refuses it: an event other than a `joined` of someone who
    /// is not a member (a member kicked meanwhile).
    mutating func append(_ event: Frame, here: Bool, beforeFollow: Bool = false, at time: UInt64) -> (seq: UInt64, memberCount: Int)? {
        guard let name = ChatCore.room(of: event) else { return nil }
        if let concerned = Self.member(concerned: event) {
            guard let room = rooms[name], room.members.contains(where: { ChatName.nickKey($0.nick) == ChatName.nickKey(concerned) })
            else { return nil }
        }
        if rooms[name] == nil {
            rooms[name] = Room(epoch: nextEpoch)
            nextEpoch += 1
        }
        var room = rooms[name]!
        room.lastSeq += 1
        guard let stamped = ChatCore.stamped(event, seq: room.lastSeq, time: time) else { return nil }
        func remove(_ nick: String) { room.members.removeAll { ChatName.nickKey($0.nick) == ChatName.nickKey(nick) } }
        switch stamped {
        case .joined(_, _, _, let nick):
            remove(nick)
            room.members.append((nick, here))
        case .left(_, _, _, let nick), .quit(_, _, _, let nick, _), .kicked(_, _, _, let nick, _, _):
            remove(nick)
        case .nickChanged(_, _, _, let old, let new):
            if let index = room.members.firstIndex(where: { ChatName.nickKey($0.nick) == ChatName.nickKey(old) }) {
                room.members[index].nick = new
            }
        case .topic:
            room.topic = stamped
        default:
            break
        }
        if !beforeFollow { streams[name]?.append(Delivery(seq: room.lastSeq, time: time, payload: ChatCore.clusterPayload(of: event))) }
        rooms[name] = room
        return (room.lastSeq, room.members.count)
    }

    /// The member an event other than a `joined` is by or, for a kick, about.
    static func member(concerned event: Frame) -> String? {
        switch event {
        case .message(_, _, _, let nick, _), .action(_, _, _, let nick, _), .topic(_, _, _, let nick, _), .left(_, _, _, let nick),
            .quit(_, _, _, let nick, _), .nickChanged(_, _, _, let nick, _), .kicked(_, _, _, let nick, _, _),
            .modeChanged(_, _, _, let nick, _, _, _):
            nick
        default:
            nil
        }
    }

    /// The snapshot a joiner's read finds: the room as it is, cut at its `joined`.
    func snapshot(of name: String, upTo seq: UInt64) -> ClusterRoomSnapshot? {
        guard let room = rooms[name] else { return nil }
        // A topic set after the `joined` comes to the joiner as an event of its own.
        let topic = room.topic.flatMap { topic in Scenario.roomEvent(topic).map { $0.1 <= seq } == true ? topic : nil }
        return ClusterRoomSnapshot(
            epoch: room.epoch, firstSeq: 1, lastSeq: seq, topic: topic, members: room.members.map(\.nick), history: [], complete: true)
    }
}

extension Scenario {
    static let down = ClusterFailure(reason: "the cluster is unavailable: connection refused")

    /// One of the cluster's events, in place of a commit's: `kind` 0 and 1 answer a request, 2
    /// delivers a followed room's next event, 3 is another node's doing.
    mutating func clusterStep(_ kind: UInt8, _ bytes: inout FuzzBytes) -> String {
        let outcome =
            switch kind {
            case 0, 1: answer(bytes.byte(), outcome: bytes.byte())
            case 2: deliverNext(bytes.byte())
            default: elsewhere(bytes.byte(), bytes.byte())
            }
        serveWaitingClients()
        return outcome
    }

    /// Serves the frames of clients that waited for the cluster, as `ChatServer` does once
    /// their answers came (`ClusterNode.releaseAnswered`).
    private mutating func serveWaitingClients() {
        for slot in connections.keys.sorted() { serve(slot) }
    }

    /// Answers the pending request `pick` picks. `outcome` % 4: 0 and 1 as Redis would, 2 Redis
    /// unreachable, 3 a refusal (another node holds the nick, the room's moderation says no).
    /// Appends and joins are the exception: the node sends them all on one connection, so
    /// Redis numbers and answers them in the order they were asked, and the oldest goes first.
    private mutating func answer(_ pick: UInt8, outcome: UInt8) -> String {
        guard let count = redis?.pending.count, count > 0 else { return "no request to answer" }
        var index = Int(pick) % count
        if FuzzRedis.isNumbered(redis!.pending[index]), let oldest = redis!.pending.firstIndex(where: FuzzRedis.isNumbered) {
            index = oldest
        }
        let request = redis!.pending.remove(at: index)
        return answer(request, outcome: outcome % 4, refusalByte: outcome >> 2)
    }

    private mutating func answer(_ request: ClusterRequest, outcome: UInt8, refusalByte: UInt8) -> String {
        let failure: ClusterFailure? =
            switch outcome {
            case 2: Self.down
            case 3: ClusterFailure(code: [.banned, .inviteOnly, .notOperator, .moderated][Int(refusalByte) % 4], reason: "refused")
            default: nil
            }
        let said = failure.map { "fails (\($0.code.rawValue))" } ?? "succeeds"
        var actions: [ChatAction] = []
        let what: String
        switch request {
        case .claimNick(let asker, let nick, _):
            what = "claim of \(nick)"
            if outcome == 3 {
                if refusalByte & 1 == 0 {
                    core.clusterNickClaimed(asker, nick: nick, .success(false), at: now, into: &actions)
                } else {
                    core.clusterNickReserved(asker, nick: nick, at: now, into: &actions)
                }
            } else {
                core.clusterNickClaimed(asker, nick: nick, failure.map { .failure($0) } ?? .success(true), at: now, into: &actions)
            }
        case .join(let room, let asker, let nick, let charge, _):
            what = "join of \(nick) to #\(room)"
            if failure == nil, let appended = redis!.append(.joined(room: room, seq: 0, time: 0, nick: nick), here: true, at: now.wallMillis) {
                if let charge { core.clusterFanoutCounted(room: room, memberCount: appended.memberCount, audience: appended.memberCount, charge: charge) }
                core.clusterJoinAppended(asker, room: room, failure: nil, at: now, into: &actions)
            } else {
                core.clusterJoinAppended(asker, room: room, failure: failure ?? Self.down, at: now, into: &actions)
            }
        case .append(let room, let event, _, let sender, let charge, _):
            what = "append of \(Self.describe(event))"
            // What no client waits for (a quit, a ban's kick) the node appends again until Redis
            // takes it, and drops when the script refuses it.
            let refused = ClusterFailure(code: .notInRoom, reason: "not a member")
            let beforeFollow = redis!.answeringAppendBeforeFollow(to: room)
            if failure == nil || sender == nil, let appended = redis!.append(event, here: true, beforeFollow: beforeFollow, at: now.wallMillis) {
                if let charge { core.clusterFanoutCounted(room: room, memberCount: appended.memberCount, audience: appended.memberCount, charge: charge) }
                if let sender { core.clusterAppended(room: room, seq: appended.seq, sender: sender, into: &actions) }
            } else if let sender {
                core.clusterAppendFailed(event, in: room, sender: sender, failure: failure ?? refused, into: &actions)
            }
        case .snapshot(let room, let asker, let seq, _):
            what = "snapshot of #\(room)"
            if failure == nil, let snapshot = redis!.snapshot(of: room, upTo: seq) {
                core.clusterSnapshotRead(room: room, asker, .success(snapshot), into: &actions)
            } else {
                core.clusterSnapshotRead(room: room, asker, .failure(failure ?? Self.down), into: &actions)
            }
        case .members(let room, let asker, _):
            what = "members of #\(room)"
            let members = redis!.rooms[room]?.members.map(\.nick) ?? []
            core.clusterMembersRead(room: room, asker, failure.map { .failure($0) } ?? .success(members), into: &actions)
        case .invite(let room, let nick, _, _, let asker):
            what = "invitation of \(nick) to #\(room)"
            core.clusterInvited(room: room, nick: nick, asker, failure.map { .failure($0) } ?? .success(outcome == 0), into: &actions)
        case .bans(let room, let asker):
            what = "bans of #\(room)"
            core.clusterBansRead(room: room, asker, failure.map { .failure($0) } ?? .success([]), into: &actions)
        case .standings(let rooms, let asker, let check):
            what = "standings in \(rooms.count) rooms"
            let standings = Dictionary(uniqueKeysWithValues: rooms.map { ($0, ClusterRoomStanding()) })
            core.clusterStandingsRead(asker, check, failure.map { .failure($0) } ?? .success(standings), at: now, into: &actions)
        case .serverBan(let mask, let on, _, _, let asker):
            what = "server ban of \(mask)"
            core.clusterServerBanSet(mask: mask, on: on, asker, failure.map { .failure($0) } ?? .success(()), into: &actions)
        case .kill(let nick, _, let asker):
            what = "kill of \(nick)"
            core.clusterKillSent(nick: nick, asker, failure.map { .failure($0) } ?? .success(outcome == 0), into: &actions)
        case .listRooms(let asker):
            what = "room list"
            let rooms = redis!.rooms.map { RoomInfo(name: $0.key, memberCount: UInt32($0.value.members.count), topic: "") }
            core.clusterRoomsRead(asker, failure.map { .failure($0) } ?? .success(rooms), into: &actions)
        case .history(let room, let asker, _, let frameType):
            what = "history of #\(room)"
            let epoch = redis!.rooms[room]?.epoch ?? 0
            core.clusterHistoryRead(room: room, asker, request: frameType, failure.map { .failure($0) } ?? .success((epoch, [], true)), into: &actions)
        case .direct(let message, let sender):
            what = "direct message"
            core.clusterDirectSent(message, sender: sender, failure.map { .failure($0) } ?? .success(outcome == 0), into: &actions)
        case .releaseNick, .unfollow, .setAway:
            return "nothing to answer"
        }
        carryOut(actions)
        return "Redis: \(what) \(said)"
    }

    /// Delivers the next event of the followed room `pick` picks among those with one waiting.
    private mutating func deliverNext(_ pick: UInt8) -> String {
        let waiting = (redis?.streams ?? [:]).filter { !$0.value.isEmpty }.keys.sorted()
        guard !waiting.isEmpty else { return "no event to deliver" }
        let room = waiting[Int(pick) % waiting.count]
        let delivery = redis!.streams[room]!.removeFirst()
        var actions: [ChatAction] = []
        core.clusterDeliver(room: room, seq: delivery.seq, time: delivery.time, payload: delivery.payload, into: &actions)
        carryOut(actions)
        return "Redis delivers #\(room) seq \(delivery.seq)"
    }

    /// Another node's doing: `kind` picks what, `pick` the room or client it concerns.
    private mutating func elsewhere(_ kind: UInt8, _ pick: UInt8) -> String {
        let time = now.wallMillis
        var actions: [ChatAction] = []
        defer { carryOut(actions) }
        switch kind % 8 {
        case 6:
            let nicks = connections.keys.sorted().compactMap { connections[$0]?.nick }
            guard !nicks.isEmpty else { return "no client to ghost or kill" }
            let nick = nicks[Int(pick >> 1) % nicks.count]
            if pick & 1 == 0 {
                core.clusterGhost(nickKey: ChatName.nickKey(nick), at: now, into: &actions)
                return "another node ghosts \(nick)"
            }
            core.clusterKilled(nickKey: ChatName.nickKey(nick), reason: "elsewhere", at: now, into: &actions)
            return "another node kills \(nick)"
        case 7:
            redis!.available.toggle()
            core.clusterAvailability(redis!.available, reason: "connection refused")
            return redis!.available ? "Redis is back" : "Redis is unreachable"
        default:
            break
        }
        let followed = (redis?.streams ?? [:]).keys.sorted()
        guard !followed.isEmpty else { return "no followed room for another node's event" }
        let room = followed[Int(pick) % followed.count]
        let members = redis!.rooms[room]?.members ?? []
        let theirs = members.filter { !$0.here }.map(\.nick)
        let stranger = FuzzRedis.elsewhere.first { name in !members.contains { $0.nick == name } }
        let event: Frame?
        switch kind % 8 {
        case 0: event = stranger.map { .joined(room: room, seq: 0, time: 0, nick: $0) }
        case 1: event = theirs.first.map { .message(room: room, seq: 0, time: 0, sender: $0, text: "from afar") }
        case 2: event = theirs.last.map { .left(room: room, seq: 0, time: 0, nick: $0) }
        case 3: event = theirs.first.map { .topic(room: room, seq: 0, time: 0, setBy: $0, text: "set afar") }
        case 4:
            // An op elsewhere kicks anyone, a member of this node too.
            event = members.isEmpty ? nil : .kicked(room: room, seq: 0, time: 0, nick: members[Int(pick) % members.count].nick, by: "zed", reason: "afar")
        default:
            if let old = theirs.first, let new = stranger {
                event = .nickChanged(room: room, seq: 0, time: 0, old: old, new: new)
            } else {
                event = nil
            }
        }
        guard let event, redis!.append(event, here: false, at: time) != nil else { return "no event of another node in #\(room)" }
        return "another node appends \(Self.describe(event))"
    }

    /// Answers every request as Redis would and delivers every event, until nothing is left (or a
    /// bound on rounds is reached, itself a violation: answers that never stop asking).
    mutating func settleCluster() {
        guard redis != nil else { return }
        if !redis!.available {
            redis!.available = true
            core.clusterAvailability(true)
        }
        let tracing = ChatCoreFuzzProperties.tracing
        var rounds = 0
        while rounds < 10_000 {
            rounds += 1
            let outcome: String
            if !redis!.pending.isEmpty {
                outcome = answer(redis!.pending.removeFirst(), outcome: 0, refusalByte: 0)
            } else if redis!.streams.values.contains(where: { !$0.isEmpty }) {
                outcome = deliverNext(0)
            } else {
                break
            }
            if tracing { _ = "settling: \(outcome)\n".withCString { write(STDERR_FILENO, $0, strlen($0)) } }
            serveWaitingClients()
        }
        if rounds == 10_000 { note("the cluster's answers still bring requests after 10,000 rounds") }
        for slot in connections.keys.sorted() {
            let id = ClientID(slot)
            if core.isAwaitingCluster(id) {
                let why = "let go: \(core.cluster.departures[id] != nil), awaiting \(String(describing: core.cluster.awaiting[id])), owed \(String(describing: core.cluster.owed[id])), ordinals unresolved \(Array(core.cluster.gates[id]?.unresolved ?? []))"
                note("client \(slot) still waits for the cluster once everything is answered: \(why)")
            }
            if let gate = core.cluster.gates[id], !gate.held.isEmpty {
                let held = gate.held.map { "\($0.action) after \($0.after)" }.joined(separator: "; ")
                note("client \(slot) has \(gate.heldBytes) bytes held once everything is answered, ordinals \(Array(gate.unresolved)) unresolved of \(gate.issued): \(held)")
            }
        }
        if !core.cluster.orphanedGates.isEmpty { note("\(core.cluster.orphanedGates.count) orphaned gates hold frames once everything is answered") }
        guard !core.cluster.departures.isEmpty else { return }
        // Past every linger deadline, no client let go is left.
        tick(advancingBy: limits.lingerTimeout.milliseconds)
        for id in core.cluster.departures.keys { note("client \(id.slot) was let go and is still here past its linger deadline") }
    }
}
