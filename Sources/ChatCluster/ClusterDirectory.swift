import RedisClient
import RedisProtocol

/// What the cluster knows about rooms and people beyond each room's log, read from Redis: who is
/// in a room, which rooms have members, a room's epoch and topic; and direct messages to the node
/// that serves a nick (docs/CLUSTER.md).
///
/// Membership and topics are written by `RoomLog.append` in the same step as the event that
/// changes them; this type only reads them, except for a room's epoch, set by the first reader.
///
/// Threading: confined to the queue of its connection.
public struct ClusterDirectory: Sendable {
    let commands: RedisConnection

    /// A directory reading through `commands`.
    public init(commands: RedisConnection) {
        self.commands = commands
    }

    /// What a joiner is told about a room besides its history.
    public struct RoomSnapshot: Sendable, Equatable {
        /// The room's epoch (set now if the room had none).
        public var epoch: UInt64
        /// The `seq` of the oldest event in the log; 0 for none.
        public var firstSeq: UInt64
        /// The topic event, as published (its payload is the node's encoding).
        public var topic: LoggedEvent?
        /// Member nicks in joining order.
        public var members: [String]
    }

    /// Reads `room`'s snapshot, giving it the epoch `newEpoch` if it has none yet.
    public func snapshot(of room: String, newEpoch: UInt64, completion: @escaping (Result<RoomSnapshot, ClusterError>) -> Void) {
        let keys = RoomKeys(room)
        var replies: [RESPValue] = []
        var failed = false
        let commandsToSend: [[[UInt8]]] = [
            [Array("SET".utf8), keys.epoch, Array(String(newEpoch).utf8), Array("NX".utf8)],
            [Array("GET".utf8), keys.epoch],
            [Array("GET".utf8), keys.topic],
            [Array("XRANGE".utf8), keys.log, Array("-".utf8), Array("+".utf8), Array("COUNT".utf8), Array("1".utf8)],
        ]
        for command in commandsToSend {
            commands.send(command) { reply in
                guard !failed else { return }
                switch reply {
                case .success(.error(let text)):
                    failed = true
                    completion(.failure(.refused(text)))
                    return
                case .success(let value):
                    replies.append(value)
                case .failure(let error):
                    failed = true
                    completion(.failure(.redis(error)))
                    return
                }
                guard replies.count == commandsToSend.count else { return }
                guard let epoch = replies[1].integer.flatMap({ UInt64(exactly: $0) }) ?? replies[1].text.flatMap({ UInt64($0) }),
                    case .array(let first?) = replies[3]
                else {
                    completion(.failure(.malformedReply("room snapshot \(replies)")))
                    return
                }
                var topic: LoggedEvent?
                if case .bulkString(let body?) = replies[2] { topic = RoomLog.parsePublication(body) }
                let firstSeq = first.first.flatMap(RoomLog.parseEntry)?.seq ?? 0
                members(of: room) { result in
                    completion(result.map { RoomSnapshot(epoch: epoch, firstSeq: firstSeq, topic: topic, members: $0) })
                }
            }
        }
    }

    /// The member nicks of `room`, in joining order, read `ClusterReplies.namesPerRead` at a time.
    /// Each page starts after the last one's score (the `seq` of a join, one per member), so a
    /// join or leave between pages neither repeats nor skips anyone else.
    public func members(of room: String, completion: @escaping (Result<[String], ClusterError>) -> Void) {
        let key = RoomKeys(room).members
        let count = ClusterReplies.namesPerRead
        var nicks: [String] = []
        func read(after score: String) {
            let command = ["ZRANGE", score, "+inf", "BYSCORE", "LIMIT", "0", String(count), "WITHSCORES"].map { Array($0.utf8) }
            commands.send([command[0], key] + command.dropFirst()) { reply in
                guard case .success(.array(let items?)) = reply, items.count.isMultiple(of: 2) else {
                    completion(.failure(ClusterError(reply, expecting: "a list of nicks and scores")))
                    return
                }
                for index in stride(from: 0, to: items.count, by: 2) { if let nick = items[index].text { nicks.append(nick) } }
                guard items.count == 2 * count, let last = items.last?.text else { return completion(.success(nicks)) }
                read(after: "(" + last)
            }
        }
        read(after: "-inf")
    }

    /// One room with members, as `rooms` lists it.
    public struct ListedRoom: Sendable, Equatable {
        /// The room's name.
        public var name: String
        /// How many members it has, on all nodes.
        public var memberCount: Int
        /// Its topic event as published, if it has one.
        public var topic: LoggedEvent?
    }

    /// ARGV: the name to list after ('' for the first page), how many rooms. Returns name, member
    /// count, topic (or false) for the rooms with members whose names come next, in byte order.
    static let roomListScript = """
        local names = {}
        for _, room in ipairs(redis.call('SMEMBERS', 'chat:rooms')) do
            if room > ARGV[1] then table.insert(names, room) end
        end
        table.sort(names)
        local result = {}
        for _, room in ipairs(names) do
            if #result >= 3 * tonumber(ARGV[2]) then break end
            local count = redis.call('ZCARD', 'chat:{' .. room .. '}:members')
            if count > 0 then
                table.insert(result, room)
                table.insert(result, count)
                table.insert(result, redis.call('GET', 'chat:{' .. room .. '}:topic'))
            end
        end
        return result
        """

    /// Every room with members, by name, read `ClusterReplies.roomsPerRead` at a time (each page
    /// after the last one's name, so a room that comes or goes between pages moves no other).
    public func rooms(completion: @escaping (Result<[ListedRoom], ClusterError>) -> Void) {
        let count = ClusterReplies.roomsPerRead
        var rooms: [ListedRoom] = []
        func read(after name: String) {
            let command = ["EVAL", Self.roomListScript, "0", name, String(count)].map { Array($0.utf8) }
            commands.send(command) { reply in
                guard case .success(.array(let items?)) = reply, items.count.isMultiple(of: 3) else {
                    completion(.failure(ClusterError(reply, expecting: "a room list")))
                    return
                }
                for index in stride(from: 0, to: items.count, by: 3) {
                    guard let name = items[index].text, let members = items[index + 1].integer else { continue }
                    var topic: LoggedEvent?
                    if case .bulkString(let body?) = items[index + 2] { topic = RoomLog.parsePublication(body) }
                    rooms.append(ListedRoom(name: name, memberCount: Int(members), topic: topic))
                }
                guard items.count == 3 * count, let last = rooms.last?.name else { return completion(.success(rooms)) }
                read(after: last)
            }
        }
        read(after: "")
    }

    /// ARGV: the nick's key, the payload. Publishes the payload on the channel of the node holding
    /// the nick; returns how many subscribers heard it (0: no one holds it, or its node is gone)
    /// and the nick's away message as `setAway` stored it ('' for none).
    static let directScript = """
        local owner = redis.call('GET', 'chat:nick:' .. ARGV[1])
        if not owner then return {0, ''} end
        local heard = redis.call('PUBLISH', 'chat:node:' .. owner .. ':direct', ARGV[2])
        return {heard, redis.call('GET', 'chat:away:' .. ARGV[1]) or ''}
        """

    /// What a direct message found.
    public struct Delivery: Sendable, Equatable {
        /// Whether a node heard it: false when no live node holds the nick.
        public var heard: Bool
        /// The recipient's away message, with its nick as it holds it, if it set one.
        public var away: (nick: String, text: String)?

        /// Equal when both parts are.
        public static func == (left: Delivery, right: Delivery) -> Bool {
            left.heard == right.heard && left.away?.nick == right.away?.nick && left.away?.text == right.away?.text
        }
    }

    /// Hands `payload` to the node holding the nick whose registry key is `nickKey`.
    public func direct(toNick nickKey: String, payload: [UInt8], completion: @escaping (Result<Delivery, ClusterError>) -> Void) {
        commands.send([Array("EVAL".utf8), Array(Self.directScript.utf8), Array("0".utf8), Array(nickKey.utf8), payload]) { reply in
            guard case .success(.array(let parts?)) = reply, parts.count == 2, let heard = parts[0].integer else {
                completion(.failure(ClusterError(reply, expecting: "{count, away}")))
                return
            }
            var away: (nick: String, text: String)?
            if let stored = parts[1].text, let space = stored.firstIndex(of: " ") {
                away = (String(stored[..<space]), String(stored[stored.index(after: space)...]))
            }
            completion(.success(Delivery(heard: heard > 0, away: away)))
        }
    }

    /// ARGV: the nick's key, the node, the away message as stored (`nick text`; '' for none).
    /// Changes the away message only while `node` holds the nick: one kept through an outage
    /// must not stick to a nick that was let go meanwhile, or that another node gave out since.
    /// Returns 1 when it changed it, 0 when the node does not hold the nick.
    static let awayScript = """
        if redis.call('GET', 'chat:nick:' .. ARGV[1]) ~= ARGV[2] then return 0 end
        if ARGV[3] == '' then
            redis.call('DEL', 'chat:away:' .. ARGV[1])
        else
            redis.call('SET', 'chat:away:' .. ARGV[1], ARGV[3])
        end
        return 1
        """

    /// Keeps `nick`'s away message (`text`; empty: none) where direct messages to it find it, if
    /// `node` holds the nick; `completion` gets whether it did. The nick's release deletes it.
    public func setAway(
        nick: String, nickKey: String, text: String, node: String, completion: @escaping (Result<Bool, ClusterError>) -> Void = { _ in }
    ) {
        let stored = text.isEmpty ? [] : Array("\(nick) \(text)".utf8)
        commands.send([Array("EVAL".utf8), Array(Self.awayScript.utf8), Array("0".utf8), Array(nickKey.utf8), Array(node.utf8), stored]) {
            reply in
            switch reply {
            case .success(.integer(let changed)): completion(.success(changed == 1))
            default: completion(.failure(ClusterError(reply, expecting: "0 or 1")))
            }
        }
    }

    /// ARGV: the node, the room and nick to list after ('' and '' for the first page), how many
    /// pairs. Returns room, nick, room, nick, … for the node's members, by room then nick.
    static let membershipsScript = """
        local afterRoom, afterNick, limit = ARGV[2], ARGV[3], tonumber(ARGV[4])
        local rooms = {}
        for _, room in ipairs(redis.call('SMEMBERS', 'chat:node:' .. ARGV[1] .. ':rooms')) do
            if room >= afterRoom then table.insert(rooms, room) end
        end
        table.sort(rooms)
        local result = {}
        for _, room in ipairs(rooms) do
            local nicks = {}
            local nodes = redis.call('HGETALL', 'chat:{' .. room .. '}:nodes')
            for index = 1, #nodes, 2 do
                if nodes[index + 1] == ARGV[1] and (room > afterRoom or nodes[index] > afterNick) then
                    table.insert(nicks, nodes[index])
                end
            end
            table.sort(nicks)
            for _, nick in ipairs(nicks) do
                if #result >= 2 * limit then return result end
                table.insert(result, room)
                table.insert(result, nick)
            end
        end
        return result
        """

    /// The members of rooms that `node` served, as (room, nick) pairs: what a reaper announces
    /// as quits once the node is dead. Read `ClusterReplies.namesPerRead` pairs at a time.
    public func memberships(of node: String, completion: @escaping (Result<[(room: String, nick: String)], ClusterError>) -> Void) {
        let count = ClusterReplies.namesPerRead
        var pairs: [(room: String, nick: String)] = []
        func read(afterRoom: String, afterNick: String) {
            let command = ["EVAL", Self.membershipsScript, "0", node, afterRoom, afterNick, String(count)].map { Array($0.utf8) }
            commands.send(command) { reply in
                guard case .success(.array(let items?)) = reply, items.count.isMultiple(of: 2) else {
                    completion(.failure(ClusterError(reply, expecting: "memberships")))
                    return
                }
                for index in stride(from: 0, to: items.count, by: 2) {
                    if let room = items[index].text, let nick = items[index + 1].text { pairs.append((room, nick)) }
                }
                guard items.count == 2 * count, let last = pairs.last else { return completion(.success(pairs)) }
                read(afterRoom: last.room, afterNick: last.nick)
            }
        }
        read(afterRoom: "", afterNick: "")
    }

    /// Forgets which rooms the dead `node` served members of, once their quits are announced.
    public func forgetRooms(of node: String) {
        commands.send([Array("DEL".utf8), Array("chat:node:\(node):rooms".utf8)]) { _ in }
    }
}
