import ChatCore
import ChatProtocol
import RedisClient
import RedisProtocol

/// One event of a room as the cluster keeps it: Redis gave it `seq` and `time`; `payload` is the
/// node's encoding of the rest (kind, sender, text), which this type does not read.
public struct LoggedEvent: Equatable, Sendable {
    /// The room's sequence number, from `INCR`: one order for every node.
    public let seq: UInt64
    /// Milliseconds since the Unix epoch, from Redis's clock, so every node stamps alike.
    public let time: UInt64
    /// The event itself, opaque here.
    public let payload: [UInt8]

    /// An event as Redis numbered it.
    public init(seq: UInt64, time: UInt64, payload: [UInt8]) {
        self.seq = seq
        self.time = time
        self.payload = payload
    }
}

/// An event the append script stored and published, with what it found of the room.
public struct AppendedEvent: Equatable, Sendable {
    /// The event, numbered and stamped.
    public let event: LoggedEvent
    /// How many members the room has once the event's change is made, on all nodes: what the
    /// next event's delivery costs the cluster, and (with the leaver, for a leave) this one's.
    public let memberCount: Int

    /// An appended event and the room's member count after it.
    public init(event: LoggedEvent, memberCount: Int) {
        self.event = event
        self.memberCount = memberCount
    }
}

/// Why the cluster's Redis could not do what was asked.
public enum ClusterError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The connection to Redis failed or closed.
    case redis(RedisError)
    /// Redis answered with an error reply (a script error, out of memory, `NOSCRIPT`).
    case refused(String)
    /// Redis answered with a value of the wrong shape.
    case malformedReply(String)
    /// Redis stopped answering: the connection is up, the replies do not come (a hung or
    /// partitioned server); the text says what was waited for and how long.
    case timedOut(String)

    /// The problem, for a log line.
    public var description: String {
        switch self {
        case .redis(let error): "\(error)"
        case .refused(let text): "Redis refused: \(text)"
        case .malformedReply(let what): "unexpected reply from Redis: \(what)"
        case .timedOut(let what): "Redis stopped answering: \(what)"
        }
    }
}

/// Every room's events in Redis, in one order for the whole cluster (docs/CLUSTER.md).
///
/// `append` runs one Lua script that Redis executes atomically: `INCR` the room's `seq`, `XADD`
/// the event to the room's stream under the ID `seq-1` (so stream IDs are `seq`s, and catch-up is
/// an `XRANGE`), and `PUBLISH` it once to the room's channel, which every node following the room
/// hears. A node delivers an event when the publication arrives — its own too — so all nodes see
/// Redis's order. Publications are at most once (a subscriber that was away misses them): a
/// follower that sees a `seq` jump reads the missing ones from the stream first, so it delivers
/// every event exactly once and in order.
///
/// Threading: confined to the queue of its two connections (the same queue), like them.
public final class RoomLog: @unchecked Sendable {
    /// Called with each event of a followed room, in `seq` order, each once.
    public var onEvent: ((_ room: String, _ event: LoggedEvent) -> Void)?

    private let commands: RedisConnection
    private let subscriber: RedisConnection
    private let scriptSHA: [UInt8]
    /// Most events kept per room (`XADD MAXLEN ~`).
    private let maxEvents: Int
    /// The most decisions one join takes: a room whose admission state changes this many times
    /// between a node's decision and its append is answered `CONTENDED` for now, rather than
    /// tried for ever.
    private let maxAdmissionAttempts: Int
    private var follows: [String: Follow] = [:]
    /// Each followed room's admission state as this node last read it: what its joins are
    /// decided by (`ClusterAdmission`). Read with the first join's answer, and again whenever the
    /// script finds it stale; forgotten with the follow.
    private var admissionStates: [String: ClusterAdmissionState] = [:]
    private var roomsByChannel: [[UInt8]: String] = [:]
    /// Channels that are not rooms' (a node's direct messages), with who hears them.
    private var listeners: [[UInt8]: ([UInt8]) -> Void] = [:]

    private struct Follow {
        /// The last `seq` delivered; nil until the subscription is confirmed and the room's `seq` read.
        var lastDelivered: UInt64?
        /// Events that arrived ahead of a gap or before `lastDelivered` was known, by `seq`.
        var held: [UInt64: LoggedEvent] = [:]
        /// Whether a read of the stream to fill a gap is under way.
        var filling = false
        /// Where to resume once subscribed, if not at the room's current `seq`.
        var resumeAfter: UInt64?
        var ready: ((Result<UInt64, ClusterError>) -> Void)?
    }

    /// The script `append` runs. KEYS: the room's `seq` key, stream, member set (nick → the `seq`
    /// of its join), member nodes (nick → node), topic, and members per node (node → how many of
    /// the room's members it serves), then its moderation's (`ModerationCheck.checks`). ARGV: the
    /// channel, the payload, the stream's bound, the change (`''`, `join`, `leave`, `kick`,
    /// `rename`, `topic`), the nick and node it concerns, the room's name, for `rename` the new
    /// nick, then the moderation check and its fields. Returns `{seq, time, members}` (the room's
    /// member count after the change, `ZCARD`, which costs nothing), or an error and logs nothing:
    /// `NOTMEMBER` for a `leave` of a nick that is not the node's member of the room (or a `kick`
    /// of one that is nobody's), or the moderation's refusal (`ModerationRefusal`).
    ///
    /// Membership and topic change in the same atomic step as the event is numbered, so a
    /// `members` read and the log never disagree about the order of joins and leaves. The count
    /// of members per node keeps `chat:node:<id>:rooms` to the rooms where that node serves a
    /// member: a room is listed by the step that gives the node its first member there and
    /// unlisted by the one that takes its last, so a join racing a leave on one node cannot
    /// leave the list wrong, and a reaper still finds every member of a dead node.
    static let appendScript = """
        local change = ARGV[4]
        local subject = ARGV[5]
        local now = redis.call('TIME')
        local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
        \(ModerationCheck.checks)
        local function count(node, by)
            local set = 'chat:node:' .. node .. ':rooms'
            if redis.call('HINCRBY', KEYS[6], node, by) > 0 then
                redis.call('SADD', set, ARGV[7])
            else
                redis.call('HDEL', KEYS[6], node)
                redis.call('SREM', set, ARGV[7])
            end
        end
        local function forget(nick)
            local node = redis.call('HGET', KEYS[4], nick)
            if not node then return end
            redis.call('HDEL', KEYS[4], nick)
            count(node, -1)
        end
        local function place(nick, node)
            forget(nick)
            redis.call('HSET', KEYS[4], nick, node)
            count(node, 1)
        end
        if change == 'leave' then
            if redis.call('HGET', KEYS[4], ARGV[5]) ~= ARGV[6] then
                return redis.error_reply('NOTMEMBER ' .. ARGV[5] .. ' is not a member here')
            end
            forget(ARGV[5])
            redis.call('ZREM', KEYS[3], ARGV[5])
            if redis.call('ZCARD', KEYS[3]) == 0 then redis.call('SREM', 'chat:rooms', ARGV[7]) end
        elseif change == 'kick' then
            if not redis.call('ZSCORE', KEYS[3], subject) then
                return redis.error_reply('NOTMEMBER ' .. subject .. ' is not a member here')
            end
            forget(subject)
            redis.call('ZREM', KEYS[3], subject)
            if redis.call('ZCARD', KEYS[3]) == 0 then redis.call('SREM', 'chat:rooms', ARGV[7]) end
        end
        local seq = redis.call('INCR', KEYS[1])
        if change == 'join' then
            place(ARGV[5], ARGV[6])
            redis.call('ZADD', KEYS[3], seq, ARGV[5])
            redis.call('SADD', 'chat:rooms', ARGV[7])
        elseif change == 'rename' and redis.call('HGET', KEYS[4], ARGV[5]) == ARGV[6] then
            local joined = redis.call('ZSCORE', KEYS[3], ARGV[5])
            forget(ARGV[5])
            redis.call('ZREM', KEYS[3], ARGV[5])
            place(ARGV[8], ARGV[6])
            redis.call('ZADD', KEYS[3], joined or seq, ARGV[8])
        elseif change == 'topic' then
            redis.call('SET', KEYS[5], seq .. ' ' .. ms .. ' ' .. ARGV[2])
        end
        \(ModerationCheck.afterChange)
        redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], seq .. '-1', 't', ms, 'p', ARGV[2])
        redis.call('PUBLISH', ARGV[1], seq .. ' ' .. ms .. ' ' .. ARGV[2])
        return {seq, ms, redis.call('ZCARD', KEYS[3])}
        """

    private init(commands: RedisConnection, subscriber: RedisConnection, scriptSHA: [UInt8], maxEvents: Int, maxAdmissionAttempts: Int) {
        self.commands = commands
        self.subscriber = subscriber
        self.scriptSHA = scriptSHA
        self.maxEvents = maxEvents
        self.maxAdmissionAttempts = maxAdmissionAttempts
    }

    /// Loads the append script into Redis and returns the log, on the connections' queue. The
    /// subscriber connection is used for nothing else from now on. `maxAdmissionAttempts`: the
    /// most decisions one join takes before it is answered `CONTENDED`.
    public static func open(
        commands: RedisConnection, subscriber: RedisConnection, maxEvents: Int = 10_000, maxAdmissionAttempts: Int = 8,
        completion: @escaping (Result<RoomLog, ClusterError>) -> Void
    ) {
        commands.send("SCRIPT", "LOAD", appendScript) { reply in
            switch reply {
            case .success(.bulkString(let sha?)):
                let log = RoomLog(
                    commands: commands, subscriber: subscriber, scriptSHA: sha, maxEvents: maxEvents, maxAdmissionAttempts: maxAdmissionAttempts)
                subscriber.onPush = { [weak log] value in log?.pushed(value) }
                completion(.success(log))
            case .success(let other):
                completion(.failure(ClusterError(.success(other), expecting: "a script hash")))
            case .failure(let error):
                completion(.failure(.redis(error)))
            }
        }
    }

    // MARK: Appending

    /// Appends `payload` to `room`'s log; `completion` gets the `seq` and time Redis gave it once
    /// it is stored and published, and the room's member count after it. Delivery — to this
    /// node too — comes through `onEvent`.
    /// `change` is applied to the room's members or topic in the same atomic step; a `leave` of
    /// a nick that is not `node`'s member of the room fails with `.refused("NOTMEMBER …")` and
    /// logs nothing. `moderation` is checked first, and its refusal
    /// (`ModerationRefusal.parse`) logs nothing either.
    public func append(
        to room: String, payload: [UInt8], change: RoomChange = .none, moderation: ModerationCheck? = nil,
        completion: @escaping (Result<AppendedEvent, ClusterError>) -> Void
    ) {
        if let moderation, case .admit = moderation, case .join(let nick, _) = change {
            let join = Join(room: room, payload: payload, change: change, check: moderation, nick: nick)
            return append(join, decidedOn: admissionStates[room], attempt: 1, completion: completion)
        }
        send(to: room, payload: payload, change: change, moderation: moderation?.arguments ?? [], completion: completion)
    }


    /// A join to append: its `joined` and what it is decided by.
    private struct Join {
        let room: String
        let payload: [UInt8]
        /// `.join`.
        let change: RoomChange
        /// `.admit`.
        let check: ModerationCheck
        let nick: String
    }

    /// Appends `join`, decided by the room's rules against `state` (nil: none read yet); when
    /// Redis finds that state stale, it answers with the current one, which is kept for the
    /// room's next joins, and the join is decided again on it.
    private func append(
        _ join: Join, decidedOn state: ClusterAdmissionState?, attempt: Int, completion: @escaping (Result<AppendedEvent, ClusterError>) -> Void
    ) {
        guard case let .admit(account, _, inviteKey, _, _) = join.check else { return }
        // None read yet: decided against an empty room, at a version that never holds, so that
        // the script answers with the room's state.
        let decision = ClusterAdmission.decide(
            join.check, nick: join.nick, room: join.room, state: state ?? ClusterAdmissionState(version: 0, time: 0, memberCount: 0))
        let arguments = ModerationCheck.admitArguments(
            account: account, inviteKey: inviteKey, decision: decision, version: state.map { Int64($0.version) } ?? -1)
        send(to: join.room, payload: join.payload, change: join.change, moderation: arguments, stale: { current in
            // Kept only while the room is followed: the answer may come after an unfollow.
            if self.follows[join.room] != nil { self.admissionStates[join.room] = current }
            guard attempt < self.maxAdmissionAttempts else {
                let reason = "the settings of #\(join.room) changed under \(attempt) decisions of your join; try again"
                return completion(.failure(.refused(ModerationRefusal.contended.rawValue + " " + reason)))
            }
            self.append(join, decidedOn: current, attempt: attempt + 1, completion: completion)
        }, completion: completion)
    }

    /// Runs the append script for `payload` with `moderation`'s arguments; a join's stale
    /// decision comes to `stale` with the room's admission state as it is.
    private func send(
        to room: String, payload: [UInt8], change: RoomChange, moderation: [[UInt8]],
        stale: ((ClusterAdmissionState) -> Void)? = nil, completion: @escaping (Result<AppendedEvent, ClusterError>) -> Void
    ) {
        let keys = Self.keys(of: room)
        let (kind, nick, node, newNick): (String, String, String, String) =
            switch change {
            case .none: ("", "", "", "")
            case .join(let nick, let node): ("join", nick, node, "")
            case .leave(let nick, let node): ("leave", nick, node, "")
            case .kick(let nick): ("kick", nick, "", "")
            case .rename(let old, let new, let node): ("rename", old, node, new)
            case .topic: ("topic", "", "", "")
            }
        commands.send([
            Array("EVALSHA".utf8), scriptSHA, Array("13".utf8), keys.seq, keys.log, keys.members, keys.memberNodes, keys.topic,
            keys.membersPerNode, keys.modes, keys.roles, keys.bans, keys.invitations, keys.accountRoles, keys.memberAccounts,
            keys.version, keys.channel, payload, Array(String(maxEvents).utf8), Array(kind.utf8), Array(nick.utf8), Array(node.utf8),
            Array(room.utf8), Array(newNick.utf8),
        ] + moderation) { reply in
            switch reply {
            case .success(.array(let parts?)) where parts.first?.text == "STALE":
                guard let stale, let state = Self.admissionState(parts) else {
                    completion(.failure(.malformedReply("a stale join's answer \(parts)")))
                    return
                }
                stale(state)
            case .success(.array(let parts?)) where parts.count == 3:
                guard let seq = parts[0].integer, let time = parts[1].integer, let members = parts[2].integer, seq > 0, time >= 0,
                    members >= 0
                else {
                    completion(.failure(.malformedReply("append returned \(parts)")))
                    return
                }
                let event = LoggedEvent(seq: UInt64(seq), time: UInt64(time), payload: payload)
                completion(.success(AppendedEvent(event: event, memberCount: Int(members))))
            case .success(let other):
                completion(.failure(ClusterError(.success(other), expecting: "{seq, time, members}")))
            case .failure(let error):
                completion(.failure(.redis(error)))
            }
        }
    }

    // MARK: Following

    /// Starts delivering `room`'s events through `onEvent`: subscribes to its channel and, once
    /// subscribed, reads its current `seq`; `ready` gets that `seq`. Every event after it is
    /// delivered — and with `after`, every event after that `seq` too, read from the stream, so a
    /// node that lost its connection resumes where it stopped. A `ready` seq below `after` means
    /// the room's log was reset (Redis lost it): nothing can be resumed.
    public func follow(_ room: String, after: UInt64? = nil, ready: @escaping (Result<UInt64, ClusterError>) -> Void) {
        guard follows[room] == nil else {
            ready(.failure(.malformedReply("\(room) is already followed")))
            return
        }
        let channel = Self.keys(of: room).channel
        follows[room] = Follow(resumeAfter: after, ready: ready)
        roomsByChannel[channel] = room
        subscriber.subscribe([channel])
    }

    /// Hands every message published on `channel` (not a room's) to `onMessage`, from the
    /// subscription on; at most once, like any publication.
    public func listen(to channel: [UInt8], onMessage: @escaping ([UInt8]) -> Void) {
        listeners[channel] = onMessage
        subscriber.subscribe([channel])
    }

    /// Whether `room` is followed and its subscription is ready.
    public func isReady(_ room: String) -> Bool {
        follows[room]?.lastDelivered != nil
    }

    /// Stops delivering `room`'s events.
    public func unfollow(_ room: String) {
        guard follows.removeValue(forKey: room) != nil else { return }
        admissionStates[room] = nil
        let channel = Self.keys(of: room).channel
        roomsByChannel[channel] = nil
        subscriber.unsubscribe([channel])
    }

    /// Values from the subscriber connection: confirmations and messages.
    private func pushed(_ value: RESPValue) {
        guard case .array(let parts?) = value, parts.count == 3, let kind = parts[0].text,
            case .bulkString(let channel?) = parts[1]
        else { return }
        if kind == "message", let listener = listeners[channel] {
            if case .bulkString(let body?) = parts[2] { listener(body) }
            return
        }
        guard let room = roomsByChannel[channel] else { return }
        switch kind {
        case "subscribe":
            readCurrentSeq(of: room)
        case "message":
            guard case .bulkString(let body?) = parts[2], let event = Self.parsePublication(body) else { return }
            received(event, in: room)
        default:
            break
        }
    }

    /// Once subscribed: every event after the room's current `seq` will be heard.
    private func readCurrentSeq(of room: String) {
        commands.send([Array("GET".utf8), Self.keys(of: room).seq]) { [self] reply in
            guard follows[room] != nil else { return }
            let seq: UInt64
            switch reply {
            case .success(.bulkString(nil)):
                seq = 0
            case .success(let value):
                guard let number = value.integer, number >= 0 else {
                    follows[room]?.ready?(.failure(ClusterError(.success(value), expecting: "the room's seq")))
                    return
                }
                seq = UInt64(number)
            case .failure(let error):
                follows[room]?.ready?(.failure(.redis(error)))
                return
            }
            let resumeAfter = follows[room]!.resumeAfter
            let ready = follows[room]!.ready
            follows[room]!.ready = nil
            guard let resumeAfter, resumeAfter < seq else {
                follows[room]!.lastDelivered = seq
                ready?(.success(seq))
                deliverHeld(in: room)
                return
            }
            // Resuming: what came after `resumeAfter` up to now is in the stream; later events
            // arrive by publication and wait in `held` meanwhile.
            follows[room]!.lastDelivered = resumeAfter
            follows[room]!.filling = true
            ready?(.success(seq))
            fill(room, from: resumeAfter + 1, upTo: seq)
        }
    }

    /// The last `seq` delivered of each followed room whose subscription is ready.
    public var positions: [String: UInt64] {
        follows.compactMapValues(\.lastDelivered)
    }

    private func received(_ event: LoggedEvent, in room: String) {
        guard follows[room] != nil else { return }
        if let last = follows[room]!.lastDelivered, event.seq <= last { return }
        follows[room]!.held[event.seq] = event
        deliverHeld(in: room)
    }

    /// Delivers the held events that come next, in order; if the next one is missing while later
    /// ones wait, reads the gap from the stream.
    private func deliverHeld(in room: String) {
        guard var follow = follows[room], let last = follow.lastDelivered, !follow.filling else { return }
        var next = last + 1
        var ready: [LoggedEvent] = []
        follow.held = follow.held.filter { $0.key > last }
        while let event = follow.held.removeValue(forKey: next) {
            ready.append(event)
            next += 1
        }
        follow.lastDelivered = next - 1
        let gapEnd = follow.held.keys.min()
        follow.filling = gapEnd != nil
        follows[room] = follow
        for event in ready { onEvent?(room, event) }
        if let gapEnd { fill(room, from: next, upTo: gapEnd - 1) }
    }

    /// Reads the events `first…last` from the stream, a page (`ClusterReplies.eventsPerRead`) at
    /// a time, so that no reply is larger than the node's connections accept, and delivers them.
    private func fill(_ room: String, from first: UInt64, upTo last: UInt64) {
        let count = ClusterReplies.eventsPerRead
        range(of: room, from: "\(first)-1", to: "\(last)-1", count: count, reverse: false) { [self] result in
            guard follows[room] != nil else { return }
            follows[room]!.filling = false
            switch result {
            case .success(let events):
                for event in events where event.seq >= first { follows[room]!.held[event.seq] = event }
                if follows[room]!.held[first] == nil {
                    // Trimmed from the stream before this node read it: skip what is gone rather
                    // than wait for ever, and say so through the gap in `seq`.
                    follows[room]!.lastDelivered = (follows[room]!.held.keys.min() ?? first) - 1
                }
                if events.count == count, let end = events.last?.seq, end < last {
                    deliverHeld(in: room)
                    // Unless delivering started the next read itself (later events wait), read on.
                    guard follows[room] != nil, !follows[room]!.filling, (follows[room]!.lastDelivered ?? 0) < last else { return }
                    follows[room]!.filling = true
                    return fill(room, from: max(end, follows[room]!.lastDelivered ?? end) + 1, upTo: last)
                }
            case .failure:
                // Leave the held events waiting; the next publication retries the fill.
                return
            }
            deliverHeld(in: room)
        }
    }

    // MARK: Reading history

    /// Up to `limit` events of `room` after `seq`, oldest first (catch-up).
    public func events(of room: String, after seq: UInt64, limit: Int, completion: @escaping (Result<[LoggedEvent], ClusterError>) -> Void) {
        // A client names `seq`: none can follow the largest one (and `seq + 1` would trap).
        guard seq < UInt64.max else {
            completion(.success([]))
            return
        }
        range(of: room, from: "\(seq + 1)-1", to: "+", count: limit, reverse: false, completion: completion)
    }

    /// Up to `limit` events of `room` before `seq` (0: the newest), newest first (scroll-back).
    public func events(of room: String, before seq: UInt64, limit: Int, completion: @escaping (Result<[LoggedEvent], ClusterError>) -> Void) {
        let end = seq == 0 ? "+" : "\(seq - 1)-1"
        guard seq != 1 else {
            completion(.success([]))
            return
        }
        range(of: room, from: end, to: "-", count: limit, reverse: true, completion: completion)
    }

    private func range(
        of room: String, from start: String, to end: String, count: Int?, reverse: Bool,
        completion: @escaping (Result<[LoggedEvent], ClusterError>) -> Void
    ) {
        var command = [Array((reverse ? "XREVRANGE" : "XRANGE").utf8), Self.keys(of: room).log, Array(start.utf8), Array(end.utf8)]
        if let count { command += [Array("COUNT".utf8), Array(String(count).utf8)] }
        commands.send(command) { reply in
            switch reply {
            case .success(.array(let entries?)):
                var events: [LoggedEvent] = []
                for entry in entries {
                    guard let event = Self.parseEntry(entry) else {
                        completion(.failure(.malformedReply("stream entry \(entry)")))
                        return
                    }
                    events.append(event)
                }
                completion(.success(events))
            case .success(let other):
                completion(.failure(ClusterError(.success(other), expecting: "stream entries")))
            case .failure(let error):
                completion(.failure(.redis(error)))
            }
        }
    }

    // MARK: Wire forms

    /// The keys of `room`. The braces make a Redis Cluster keep a room's keys in one slot.
    static func keys(of room: String) -> RoomKeys { RoomKeys(room) }

    /// The admission state in a stale join's answer: `{'STALE', version, ms, members, modes,
    /// bans, account roles, invitations}`, the last four as `HGETALL` gives them.
    static func admissionState(_ parts: [RESPValue]) -> ClusterAdmissionState? {
        guard parts.count == 8, let version = parts[1].integer, let time = parts[2].integer, let members = parts[3].integer,
            version >= 0, time >= 0, members >= 0, let modes = hash(parts[4]), let bans = hash(parts[5]),
            let accountRoles = hash(parts[6]), let invitations = hash(parts[7])
        else { return nil }
        var entries: [BanEntry] = []
        for (mask, record) in bans {
            guard let entry = BanEntry(mask: mask, record: record) else { return nil }
            entries.append(entry)
        }
        return ClusterAdmissionState(
            version: UInt64(version), time: UInt64(time), memberCount: Int(members), founder: modes["founder"] ?? "",
            inviteOnly: modes["i"] != nil, key: modes["k"] ?? "", memberLimit: modes["l"].flatMap { Int($0) } ?? 0,
            bans: entries.sorted { ($0.time, $0.mask) < ($1.time, $1.mask) }, accountRoles: accountRoles,
            invitations: invitations.compactMapValues { UInt64($0) })
    }

    /// A flat `HGETALL` reply as a dictionary; nil if it is not one.
    private static func hash(_ value: RESPValue) -> [String: String]? {
        guard case .array(let fields?) = value, fields.count.isMultiple(of: 2) else { return nil }
        var hash: [String: String] = [:]
        for index in stride(from: 0, to: fields.count, by: 2) {
            guard let name = fields[index].text, let field = fields[index + 1].text else { return nil }
            hash[name] = field
        }
        return hash
    }

    /// A publication: `seq`, a space, `time`, a space, the payload. A `seq` of 0 is none: the
    /// append script numbers from 1, and the gap arithmetic (`deliverHeld`, `fill`) counts on it.
    public static func parsePublication(_ body: [UInt8]) -> LoggedEvent? {
        guard let firstSpace = body.firstIndex(of: UInt8(ascii: " ")),
            let secondSpace = body[(firstSpace + 1)...].firstIndex(of: UInt8(ascii: " ")),
            let seq = UInt64(String(decoding: body[..<firstSpace], as: UTF8.self)), seq > 0,
            let time = UInt64(String(decoding: body[(firstSpace + 1)..<secondSpace], as: UTF8.self))
        else { return nil }
        return LoggedEvent(seq: seq, time: time, payload: Array(body[(secondSpace + 1)...]))
    }

    /// A stream entry: `[ID, [field, value, …]]` with ID `seq-1` and fields `t` and `p`; as for
    /// a publication, `seq` 0 is none.
    public static func parseEntry(_ entry: RESPValue) -> LoggedEvent? {
        guard case .array(let parts?) = entry, parts.count == 2, let id = parts[0].text,
            let seq = id.split(separator: "-").first.flatMap({ UInt64($0) }), seq > 0,
            case .array(let fields?) = parts[1], fields.count.isMultiple(of: 2)
        else { return nil }
        var time: UInt64?
        var payload: [UInt8]?
        for index in stride(from: 0, to: fields.count, by: 2) {
            switch fields[index].text {
            case "t": time = fields[index + 1].integer.flatMap { UInt64(exactly: $0) }
            case "p": if case .bulkString(let bytes?) = fields[index + 1] { payload = bytes }
            default: break
            }
        }
        guard let time, let payload else { return nil }
        return LoggedEvent(seq: seq, time: time, payload: payload)
    }

}

/// What an appended event changes besides the log (docs/CLUSTER.md).
public enum RoomChange: Equatable, Sendable {
    /// Nothing else.
    case none
    /// `nick`, served by `node`, is a member from this event on.
    case join(nick: String, node: String)
    /// `nick` is no longer a member, if `node` served it; otherwise nothing is appended.
    case leave(nick: String, node: String)
    /// `nick` is no longer a member, whichever node served it: a kick. Nothing is appended if it
    /// is nobody's member.
    case kick(nick: String)
    /// The member `old`, served by `node`, is called `new` from now on (same place in the list).
    case rename(old: String, new: String, node: String)
    /// The event is the room's topic from now on (kept with its `seq` and time).
    case topic
}

/// The Redis keys of one room. The braces make a Redis Cluster keep a room's keys in one slot.
public struct RoomKeys: Sendable {
    /// `INCR`ed for each event.
    public let seq: [UInt8]
    /// The stream of events, by `seq`.
    public let log: [UInt8]
    /// The channel events are published on.
    public let channel: [UInt8]
    /// Sorted set: member nicks, scored by the `seq` of their join (so in joining order).
    public let members: [UInt8]
    /// Hash: member nick → the node that serves it.
    public let memberNodes: [UInt8]
    /// The topic event, as a publication (`seq time payload`).
    public let topic: [UInt8]
    /// Hash: node → how many members it serves here (what keeps `chat:node:<id>:rooms` exact).
    public let membersPerNode: [UInt8]
    /// The room's epoch, set once.
    public let epoch: [UInt8]
    /// Hash: the room's modes (`founder`, `i`, `m`, `t`, `k`, `l`; ModerationCheck.swift).
    public let modes: [UInt8]
    /// Hash: member nick → its role (`o`, `v` or `ov`).
    public let roles: [UInt8]
    /// Hash: ban mask → `time setBy reason`.
    public let bans: [UInt8]
    /// Hash: invited nick key → when the invitation expires, in ms.
    public let invitations: [UInt8]
    /// Hash: account → its role, while the room is registered.
    public let accountRoles: [UInt8]
    /// Hash: member nick → the account it is logged in as.
    public let memberAccounts: [UInt8]
    /// How many times the room's modes, bans, account roles or invitations changed
    /// (`ClusterAdmissionState.version`): `INCR`ed with each change, never deleted, so that a
    /// count once read is never read again for another state.
    public let version: [UInt8]

    /// The keys of `room`.
    public init(_ room: String) {
        let prefix = "chat:{\(room)}:"
        seq = Array((prefix + "seq").utf8)
        log = Array((prefix + "log").utf8)
        channel = Array((prefix + "events").utf8)
        members = Array((prefix + "members").utf8)
        memberNodes = Array((prefix + "nodes").utf8)
        topic = Array((prefix + "topic").utf8)
        membersPerNode = Array((prefix + "pernode").utf8)
        epoch = Array((prefix + "epoch").utf8)
        modes = Array((prefix + "modes").utf8)
        roles = Array((prefix + "roles").utf8)
        bans = Array((prefix + "bans").utf8)
        invitations = Array((prefix + "invites").utf8)
        accountRoles = Array((prefix + "accountroles").utf8)
        memberAccounts = Array((prefix + "accounts").utf8)
        version = Array((prefix + "version").utf8)
    }
}
