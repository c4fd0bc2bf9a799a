import ChatProtocol

/// The whole chat — connections, nicks, rooms, history, limits — as a state machine without I/O.
///
/// The server feeds it events (a connection opened, a frame arrived, a connection ended, time
/// passed) and carries out the `ChatAction`s it appends, in order. Every event carries the time,
/// so tests drive it with a made-up clock and no sockets. It stamps every delivery with the
/// sender's registered nick, the server's time and the room's next sequence number; nothing a
/// client sends can change who a delivery claims to be from.
///
/// Requests that fail are answered with a non-fatal `error`; protocol violations, refusals and
/// timeouts remove the client at once (its rooms see `quit`) and end in `.disconnect`.
public struct ChatCore: Sendable {
    /// The limits in force.
    public let configuration: ChatServerConfiguration

    /// Connection state, indexed by `ClientID.slot`; nil for free slots.
    private var clients: [ClientState?] = []
    private var nicks: [String: ClientID] = [:]
    private var rooms: [String: ChatRoom] = [:]
    private var connectionsPerAddress: [String: Int] = [:]
    private var nextPingToken: UInt64 = 1

    /// Connections open, handshaking ones included.
    public private(set) var clientCount = 0

    /// An empty chat with the limits of `configuration`.
    public init(configuration: ChatServerConfiguration) {
        self.configuration = configuration
    }

    // MARK: Events

    /// A connection from `address` opened as `id`. Refuses it (`.disconnect`) when the server or
    /// the address is at its limit.
    public mutating func clientConnected(
        _ id: ClientID, address: String, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        precondition(id.slot >= 0, "slots are non-negative")
        if clientCount >= configuration.maxClients {
            let reason = "the server is full (\(configuration.maxClients) connections)"
            actions.append(.disconnect(id, Disconnection(code: .serverFull, frameType: .hello, reason: reason), nick: nil))
            return
        }
        let fromAddress = connectionsPerAddress[address, default: 0]
        if fromAddress >= configuration.maxClientsPerAddress {
            let reason = "too many connections from \(address) (limit \(configuration.maxClientsPerAddress))"
            let refusal = Disconnection(code: .tooManyConnectionsFromAddress, frameType: .hello, reason: reason)
            actions.append(.disconnect(id, refusal, nick: nil))
            return
        }
        if clients.count <= id.slot { clients.append(contentsOf: repeatElement(nil, count: id.slot - clients.count + 1)) }
        precondition(clients[id.slot] == nil, "slot \(id.slot) reused while in use")
        clients[id.slot] = ClientState(address: address, burst: configuration.messageBurst, now: now.uptimeMillis)
        connectionsPerAddress[address] = fromAddress + 1
        clientCount += 1
    }

    /// A frame arrived from `id`. Frames from clients that are no longer part of the chat are ignored.
    public mutating func received(_ frame: Frame, from id: ClientID, at now: ServerTime, into actions: inout [ChatAction]) {
        guard id.slot < clients.count, clients[id.slot] != nil else { return }
        clients[id.slot]!.lastHeard = now.uptimeMillis
        clients[id.slot]!.pinged = false
        guard let nick = clients[id.slot]!.nick else {
            handshake(frame, from: id, at: now, into: &actions)
            return
        }
        if Self.isRateLimited(frame), !admit(frame, from: id, at: now, into: &actions) { return }
        switch frame {
        case .changeNick(let newNick):
            changeNick(of: id, from: nick, to: newNick, at: now, into: &actions)
        case .join(let room):
            join(room, id: id, nick: nick, at: now, into: &actions)
        case .part(let room):
            part(room, id: id, nick: nick, at: now, into: &actions)
        case .say(let room, let text):
            speak(.message, in: room, text: text, id: id, nick: nick, at: now, into: &actions)
        case .emote(let room, let text):
            speak(.action, in: room, text: text, id: id, nick: nick, at: now, into: &actions)
        case .tell(let recipient, let text):
            tell(recipient, text: text, id: id, nick: nick, at: now, into: &actions)
        case .listRooms:
            actions.append(.send(.roomList(rooms: roomList()), to: id))
        case .who(let room):
            actions.append(.send(.members(room: room, nicks: memberNicks(of: room)), to: id))
        case .setTopic(let room, let text):
            setTopic(of: room, to: text, id: id, nick: nick, at: now, into: &actions)
        case .requestHistory(let room, let count):
            sendHistory(of: room, count: Int(count), id: id, into: &actions)
        case .ping(let token):
            actions.append(.send(.pong(token: token), to: id))
        case .pong, .unknown:
            // A pong has done its job by arriving; unknown skippable frames are ignored by design.
            break
        case .goodbye(let reason):
            disconnect(id, Disconnection(code: nil, reason: reason.isEmpty ? "goodbye" : reason), at: now, into: &actions)
        case .error(let code, let fatal, _, let reason):
            if fatal {
                disconnect(id, Disconnection(code: nil, reason: "client error \(code): \(reason)"), at: now, into: &actions)
            }
        case .hello:
            let violation = Disconnection(code: .unexpectedFrame, frameType: .hello, reason: "the handshake is already done")
            disconnect(id, violation, at: now, into: &actions)
        case .welcome, .message, .action, .direct, .joined, .left, .quit, .nickChanged, .nickAccepted, .roomList,
            .members, .topic, .history:
            let violation = Disconnection(
                code: .unexpectedFrame, frameType: frame.type, reason: "a client may not send \(frame.type)")
            disconnect(id, violation, at: now, into: &actions)
        }
    }

    /// Removes `id` from the chat for `disconnection`: its nick is freed, its rooms see `quit`, and
    /// `.disconnect` is appended. Does nothing if `id` is already gone.
    public mutating func disconnect(
        _ id: ClientID, _ disconnection: Disconnection, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        guard id.slot < clients.count, let client = clients[id.slot] else { return }
        clients[id.slot] = nil
        clientCount -= 1
        let remaining = connectionsPerAddress[client.address, default: 1] - 1
        connectionsPerAddress[client.address] = remaining > 0 ? remaining : nil
        if let nick = client.nick {
            nicks[ChatName.nickKey(nick)] = nil
            for room in client.rooms {
                announceDeparture(from: room, id: id, at: now, into: &actions) { seq in
                    .quit(room: room, seq: seq, time: now.wallMillis, nick: nick, reason: disconnection.reason)
                }
            }
        }
        actions.append(.disconnect(id, disconnection, nick: client.nick))
    }

    /// Time passed: drops connections that did not finish the handshake in time, pings clients
    /// that have been silent, and disconnects those silent for too long.
    public mutating func tick(at now: ServerTime, into actions: inout [ChatAction]) {
        let handshakeTimeout = configuration.handshakeTimeout.milliseconds
        let idlePing = configuration.idlePingInterval.milliseconds
        let idleTimeout = configuration.idleTimeout.milliseconds
        for slot in clients.indices {
            guard let client = clients[slot] else { continue }
            let id = ClientID(slot)
            if client.nick == nil {
                if now.uptimeMillis &- client.connectedAt >= handshakeTimeout {
                    let reason = "no hello within \(configuration.handshakeTimeout)"
                    disconnect(id, Disconnection(code: .handshakeTimeout, reason: reason), at: now, into: &actions)
                }
                continue
            }
            let silence = now.uptimeMillis &- client.lastHeard
            if silence >= idleTimeout {
                let reason = "nothing received for \(configuration.idleTimeout)"
                disconnect(id, Disconnection(code: .idleTimeout, reason: reason), at: now, into: &actions)
            } else if silence >= idlePing, !client.pinged {
                clients[slot]!.pinged = true
                actions.append(.send(.ping(token: nextPingToken), to: id))
                nextPingToken += 1
            }
        }
    }

    // MARK: Queries

    /// The nick `id` holds, or nil before its handshake or after it left.
    public func nick(of id: ClientID) -> String? {
        id.slot < clients.count ? clients[id.slot]?.nick : nil
    }

    /// The names of the rooms that exist (those with members), sorted.
    public var roomNames: [String] { rooms.keys.sorted() }

    /// The nicks in `room`, in joining order; empty if the room does not exist.
    public func memberNicks(of room: String) -> [String] {
        guard let members = rooms[room]?.members else { return [] }
        return members.compactMap { nick(of: $0) }
    }

    // MARK: Handshake

    private mutating func handshake(_ frame: Frame, from id: ClientID, at now: ServerTime, into actions: inout [ChatAction]) {
        guard case .hello(let version, let nick, let password) = frame else {
            let violation = Disconnection(
                code: .handshakeRequired, frameType: frame.type, reason: "the first frame must be hello, not \(frame.type)")
            disconnect(id, violation, at: now, into: &actions)
            return
        }
        let refusal: Disconnection?
        if version < WireProtocol.version {
            refusal = Disconnection(
                code: .unsupportedVersion, frameType: .hello,
                reason: "this server speaks protocol version \(WireProtocol.version)")
        } else if let expected = configuration.password, password != expected {
            refusal = Disconnection(
                code: .badPassword, frameType: .hello,
                reason: password == nil ? "this server needs a password" : "wrong password")
        } else if nicks[ChatName.nickKey(nick)] != nil {
            refusal = Disconnection(code: .nickTaken, frameType: .hello, reason: "nick \(nick) is taken")
        } else {
            refusal = nil
        }
        if let refusal {
            disconnect(id, refusal, at: now, into: &actions)
            return
        }
        nicks[ChatName.nickKey(nick)] = id
        clients[id.slot]!.nick = nick
        let welcome = Frame.welcome(
            version: min(version, WireProtocol.version), nick: nick, maxFrameSize: UInt32(configuration.maxFrameSize),
            motd: configuration.motd)
        actions.append(.send(welcome, to: id))
    }

    // MARK: Rate limiting

    /// Whether `frame` is a request that counts against the rate limit. Keepalive and session
    /// frames do not: refusing them would only turn a chatty client into a dead one.
    private static func isRateLimited(_ frame: Frame) -> Bool {
        switch frame {
        case .ping, .pong, .goodbye, .error, .unknown: false
        default: true
        }
    }

    /// Takes a token for `frame`; when none is left, answers `rateLimited` (or disconnects a client
    /// that keeps going) and returns false.
    private mutating func admit(_ frame: Frame, from id: ClientID, at now: ServerTime, into actions: inout [ChatAction]) -> Bool {
        let rate = configuration.messageRate
        guard rate > 0 else { return true }
        if clients[id.slot]!.bucket.take(rate: rate, burst: configuration.messageBurst, now: now.uptimeMillis) {
            clients[id.slot]!.refusedInARow = 0
            return true
        }
        clients[id.slot]!.refusedInARow += 1
        if clients[id.slot]!.refusedInARow >= configuration.rateAbuseLimit {
            let reason = "kept sending faster than \(Self.format(rate)) requests per second"
            disconnect(id, Disconnection(code: .rateLimited, frameType: frame.type, reason: reason), at: now, into: &actions)
        } else {
            let reason = "slow down: at most \(Self.format(rate)) requests per second; this \(frame.type) was dropped"
            actions.append(.send(.error(code: .rateLimited, fatal: false, frameType: frame.type, reason: reason), to: id))
        }
        return false
    }

    private static func format(_ rate: Double) -> String {
        rate == rate.rounded() ? String(Int(rate)) : String(rate)
    }

    // MARK: Requests

    private mutating func changeNick(
        of id: ClientID, from oldNick: String, to newNick: String, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        let newKey = ChatName.nickKey(newNick)
        if let holder = nicks[newKey], holder != id {
            refuse(.changeNick, .nickTaken, "nick \(newNick) is taken", to: id, into: &actions)
            return
        }
        nicks[ChatName.nickKey(oldNick)] = nil
        nicks[newKey] = id
        clients[id.slot]!.nick = newNick
        actions.append(.send(.nickAccepted(nick: newNick), to: id))
        guard newNick != oldNick else { return }
        for room in clients[id.slot]!.rooms {
            withRoom(room) { room in
                let frame = Frame.nickChanged(
                    room: room.name, seq: room.nextSeq(), time: now.wallMillis, old: oldNick, new: newNick)
                actions.append(.broadcast(frame, to: room.members))
            }
        }
    }

    private mutating func join(_ name: String, id: ClientID, nick: String, at now: ServerTime, into actions: inout [ChatAction]) {
        if clients[id.slot]!.rooms.contains(name) {
            refuse(.join, .alreadyInRoom, "you are already in #\(name)", to: id, into: &actions)
            return
        }
        if clients[id.slot]!.rooms.count >= configuration.maxRoomsPerClient {
            let reason = "you are in \(configuration.maxRoomsPerClient) rooms, the most allowed"
            refuse(.join, .tooManyRooms, reason, to: id, into: &actions)
            return
        }
        clients[id.slot]!.rooms.append(name)
        if rooms[name] == nil { rooms[name] = ChatRoom(name: name, historySize: configuration.historySize) }
        let (topic, history) = withRoom(name) { room in
            room.members.append(id)
            let joined = Frame.joined(room: name, seq: room.nextSeq(), time: now.wallMillis, nick: nick)
            actions.append(.broadcast(joined, to: room.members))
            return (room.topic, room.history.count > 0 ? room.history.suffix(room.history.count) : [])
        }!
        actions.append(.send(.members(room: name, nicks: memberNicks(of: name)), to: id))
        if let topic {
            actions.append(
                .send(.topic(room: name, seq: topic.seq, time: topic.time, setBy: topic.setBy, text: topic.text), to: id))
        }
        if !history.isEmpty { appendHistoryFrames(room: name, entries: history, to: id, into: &actions) }
    }

    private mutating func part(_ name: String, id: ClientID, nick: String, at now: ServerTime, into actions: inout [ChatAction]) {
        guard let index = clients[id.slot]!.rooms.firstIndex(of: name) else {
            refuse(.part, .notInRoom, "you are not in #\(name)", to: id, into: &actions)
            return
        }
        clients[id.slot]!.rooms.remove(at: index)
        withRoom(name) { room in
            // The leaver gets its own `left` as the acknowledgement, so it is removed afterwards.
            let left = Frame.left(room: name, seq: room.nextSeq(), time: now.wallMillis, nick: nick)
            actions.append(.broadcast(left, to: room.members))
            room.removeMember(id)
        }
        if rooms[name]?.members.isEmpty == true { rooms[name] = nil }
    }

    private mutating func speak(
        _ kind: HistoryEntry.Kind, in name: String, text: String, id: ClientID, nick: String, at now: ServerTime,
        into actions: inout [ChatAction]
    ) {
        guard clients[id.slot]!.rooms.contains(name) else {
            refuse(kind == .message ? .say : .emote, .notInRoom, "you are not in #\(name)", to: id, into: &actions)
            return
        }
        withRoom(name) { room in
            let seq = room.nextSeq()
            let time = now.wallMillis
            let frame: Frame =
                kind == .message
                ? .message(room: name, seq: seq, time: time, sender: nick, text: text)
                : .action(room: name, seq: seq, time: time, sender: nick, text: text)
            room.history.append(HistoryEntry(kind: kind, seq: seq, time: time, sender: nick, text: text))
            actions.append(.broadcast(frame, to: room.members))
        }
    }

    private mutating func tell(
        _ recipient: String, text: String, id: ClientID, nick: String, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        guard let target = nicks[ChatName.nickKey(recipient)], let targetNick = self.nick(of: target) else {
            refuse(.tell, .noSuchNick, "no one is called \(recipient)", to: id, into: &actions)
            return
        }
        let frame = Frame.direct(sender: nick, recipient: targetNick, time: now.wallMillis, text: text)
        actions.append(.broadcast(frame, to: target == id ? [id] : [target, id]))
    }

    private mutating func setTopic(
        of name: String, to text: String, id: ClientID, nick: String, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        guard clients[id.slot]!.rooms.contains(name) else {
            refuse(.setTopic, .notInRoom, "you are not in #\(name)", to: id, into: &actions)
            return
        }
        withRoom(name) { room in
            let seq = room.nextSeq()
            room.topic = text.isEmpty ? nil : ChatRoom.Topic(text: text, setBy: nick, time: now.wallMillis, seq: seq)
            let frame = Frame.topic(room: name, seq: seq, time: now.wallMillis, setBy: nick, text: text)
            actions.append(.broadcast(frame, to: room.members))
        }
    }

    private func sendHistory(of name: String, count: Int, id: ClientID, into actions: inout [ChatAction]) {
        guard clients[id.slot]!.rooms.contains(name), let room = rooms[name] else {
            refuse(.requestHistory, .notInRoom, "you are not in #\(name)", to: id, into: &actions)
            return
        }
        let entries = room.history.suffix(min(count, configuration.historySize))
        if entries.isEmpty {
            actions.append(.send(.history(room: name, entries: []), to: id))
        } else {
            appendHistoryFrames(room: name, entries: entries, to: id, into: &actions)
        }
    }

    private func refuse(
        _ request: FrameType, _ code: ErrorCode, _ reason: String, to id: ClientID, into actions: inout [ChatAction]
    ) {
        actions.append(.send(.error(code: code, fatal: false, frameType: request, reason: reason), to: id))
    }

    // MARK: Helpers

    /// Runs `body` on the room named `name` in place (one hash lookup, no copy of its members).
    @discardableResult
    private mutating func withRoom<Result>(_ name: String, _ body: (inout ChatRoom) -> Result) -> Result? {
        guard let index = rooms.index(forKey: name) else { return nil }
        return body(&rooms.values[index])
    }

    /// Takes `id` out of `room`, announces it to those who remain with the frame `event` makes from
    /// the next sequence number, and forgets the room when it is empty.
    private mutating func announceDeparture(
        from name: String, id: ClientID, at now: ServerTime, into actions: inout [ChatAction], event: (UInt64) -> Frame
    ) {
        let isEmpty = withRoom(name) { room in
            room.removeMember(id)
            if !room.members.isEmpty { actions.append(.broadcast(event(room.nextSeq()), to: room.members)) }
            return room.members.isEmpty
        }
        if isEmpty == true { rooms[name] = nil }
    }

    /// Every room with its member count and topic, sorted by name; as many as fit one frame.
    private func roomList() -> [RoomInfo] {
        var budget = Self.listFrameBudget
        var list: [RoomInfo] = []
        for name in rooms.keys.sorted() {
            let room = rooms[name]!
            let topic = room.topic?.text ?? ""
            budget -= name.utf8.count + topic.utf8.count + 16
            if budget < 0 { break }
            list.append(RoomInfo(name: name, memberCount: UInt32(room.members.count), topic: topic))
        }
        return list
    }

    /// Splits `entries` into `history` frames that each fit the protocol's frame limit.
    private func appendHistoryFrames(room: String, entries: [HistoryEntry], to id: ClientID, into actions: inout [ChatAction]) {
        var batch: [HistoryEntry] = []
        var budget = Self.listFrameBudget
        for entry in entries {
            let cost = 32 + entry.sender.utf8.count + entry.text.utf8.count
            if cost > budget, !batch.isEmpty {
                actions.append(.send(.history(room: room, entries: batch), to: id))
                batch.removeAll()
                budget = Self.listFrameBudget
            }
            batch.append(entry)
            budget -= cost
        }
        actions.append(.send(.history(room: room, entries: batch), to: id))
    }

    /// Bytes available for the list in a `roomList` or `history` frame: the protocol's limit less
    /// room for the type, room name and counts.
    private static let listFrameBudget = WireProtocol.maxFrameSize - 128
}

/// What the chat knows about one connection.
private struct ClientState: Sendable {
    let address: String
    /// nil until the handshake completes.
    var nick: String?
    /// The rooms the client is in, in joining order; short (at most `maxRoomsPerClient`).
    var rooms: [String] = []
    let connectedAt: UInt64
    var lastHeard: UInt64
    var pinged = false
    var bucket: TokenBucket
    var refusedInARow = 0

    init(address: String, burst: Int, now: UInt64) {
        self.address = address
        connectedAt = now
        lastHeard = now
        bucket = TokenBucket(burst: burst, now: now)
    }
}
