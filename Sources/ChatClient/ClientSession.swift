import ChatProtocol
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What the session asks its driver to do.
public enum SessionAction: Equatable, Sendable {
    /// Send these frames to the server, in order.
    case send([Frame])
    /// Show this event to the user.
    case show(ChatEvent)
    /// Leave the server with this reason (send `goodbye`, wait for the close, exit).
    case quit(reason: String)
}

/// The client's view of the chat, as a value: who we are, which rooms we are in, which room we
/// talk in, and who we have seen. Commands and frames go in; frames to send and events to show
/// come out. It does no I/O, so it is tested without sockets; the driver owns the connection.
public struct ClientSession: Sendable {
    /// Our nick as the server knows it (the requested one until the welcome says otherwise).
    public private(set) var nick: String
    /// The room plain text goes to, if any.
    public private(set) var currentRoom: String?
    /// Rooms the server confirmed we are in, in the order we entered them.
    public private(set) var rooms: [String] = []
    /// Rooms we asked to join and have no answer for yet, oldest first; the server answers
    /// joins in order, so an error about a `join` belongs to the first of these.
    public private(set) var pendingJoins: [String]
    /// Whether a connection is open (between `connected` and `disconnected`).
    public private(set) var isConnected = false

    private var membersByRoom: [String: [String]] = [:]
    private var topics: [String: String] = [:]
    private var serverRooms: Set<String> = []
    private let clock: @Sendable () -> UInt64

    /// A session for `nick` that will join `rooms` (user spelling, e.g. `#General`; invalid
    /// ones are the caller's to reject) once connected; the first becomes the current room.
    /// `clock` stamps the client's own notes, in milliseconds since the Unix epoch.
    public init(nick: String, rooms: [String], clock: @escaping @Sendable () -> UInt64 = ClientClock.now) {
        self.nick = nick
        var wanted: [String] = []
        for room in rooms {
            if let name = try? ChatName.normalizedRoom(room), !wanted.contains(name) { wanted.append(name) }
        }
        self.pendingJoins = wanted
        self.currentRoom = wanted.first
        self.clock = clock
    }

    // MARK: Completion data

    /// Nicks seen in `room`, in the server's order.
    public func members(of room: String) -> [String] { membersByRoom[room] ?? [] }

    /// Every nick we know, the current room's first (those are the likeliest to be addressed).
    public var knownNicks: [String] {
        var result: [String] = []
        var seen: Set<String> = []
        let order = (currentRoom.map { [$0] } ?? []) + rooms.sorted()
        for room in order {
            for nick in membersByRoom[room] ?? [] where seen.insert(ChatName.nickKey(nick)).inserted {
                result.append(nick)
            }
        }
        return result
    }

    /// Every room name we know: ours first, then those `/rooms` listed.
    public var knownRooms: [String] {
        let ours = rooms + pendingJoins
        return ours + serverRooms.subtracting(ours).sorted()
    }

    // MARK: Connection life

    /// The connection is open with this welcome: records our nick and returns the joins for
    /// every room we were in or asked for, so a reconnect puts us back where we were.
    public mutating func connected(nick welcomedNick: String, motd: String) -> [SessionAction] {
        isConnected = true
        nick = welcomedNick
        var actions: [SessionAction] = []
        if !motd.isEmpty { actions.append(.show(.notice(time: clock(), text: motd))) }
        if !pendingJoins.isEmpty { actions.append(.send(pendingJoins.map { .join(room: $0) })) }
        return actions
    }

    /// The connection is gone: every room we were in becomes a room to rejoin.
    public mutating func disconnected() {
        isConnected = false
        for room in rooms.reversed() where !pendingJoins.contains(room) { pendingJoins.insert(room, at: 0) }
        rooms = []
        membersByRoom = [:]
    }

    // MARK: Commands

    /// What to do for a command the user typed.
    public mutating func perform(_ command: ClientCommand) -> [SessionAction] {
        switch command {
        case .say(let text):
            guard let room = currentRoom else { return [noRoom()] }
            return [.send([.say(room: room, text: text)])]
        case .emote(let text):
            guard let room = currentRoom else { return [noRoom()] }
            return [.send([.emote(room: room, text: text)])]
        case .join(let room):
            if rooms.contains(room) || pendingJoins.contains(room) { return perform(.switchRoom(room)) }
            pendingJoins.append(room)
            currentRoom = room
            return [.send([.join(room: room)])]
        case .part(let room):
            guard let room = room ?? currentRoom else { return [noRoom()] }
            if let index = pendingJoins.firstIndex(of: room), !rooms.contains(room), !isConnected {
                pendingJoins.remove(at: index)
                if currentRoom == room { currentRoom = rooms.last ?? pendingJoins.last }
                return [notice("no longer joining #\(room)")]
            }
            return [.send([.part(room: room)])]
        case .switchRoom(let room):
            guard rooms.contains(room) || pendingJoins.contains(room) else {
                return [error("you are not in #\(room); /join #\(room) first")]
            }
            currentRoom = room
            return [notice("now talking in #\(room)")]
        case .tell(let nick, let text):
            return [.send([.tell(recipient: nick, text: text)])]
        case .changeNick(let nick):
            return [.send([.changeNick(nick: nick)])]
        case .who(let room):
            guard let room = room ?? currentRoom else { return [noRoom()] }
            return [.send([.who(room: room)])]
        case .listRooms:
            return [.send([.listRooms])]
        case .showTopic:
            guard let room = currentRoom else { return [noRoom()] }
            let topic = topics[room] ?? ""
            return [notice(topic.isEmpty ? "#\(room) has no topic" : "topic of #\(room): \(topic)")]
        case .setTopic(let text):
            guard let room = currentRoom else { return [noRoom()] }
            return [.send([.setTopic(room: room, text: text)])]
        case .history(let count):
            guard let room = currentRoom else { return [noRoom()] }
            return [.send([.requestHistory(room: room, count: count)])]
        case .quit(let reason):
            return [.quit(reason: reason)]
        case .help(let topic):
            return help(topic)
        }
    }

    /// The events for a line that did not parse.
    public func rejected(_ error: CommandError) -> [SessionAction] {
        [self.error(error.description)]
    }

    // MARK: Frames from the server

    /// What to do for a frame from the server: update what we know, say what to show, and
    /// answer `ping` with `pong`.
    public mutating func receive(_ frame: Frame) -> [SessionAction] {
        switch frame {
        case let .message(room, _, time, sender, text):
            return [.show(.message(room: room, time: time, sender: sender, text: text, replayed: false))]
        case let .action(room, _, time, sender, text):
            return [.show(.action(room: room, time: time, sender: sender, text: text, replayed: false))]
        case let .direct(sender, recipient, time, text):
            let outgoing = ChatName.nickKey(sender) == ChatName.nickKey(nick)
                && ChatName.nickKey(recipient) != ChatName.nickKey(nick)
            return [.show(.direct(time: time, sender: sender, recipient: recipient, text: text, outgoing: outgoing))]
        case let .joined(room, _, time, who):
            if isSelf(who) {
                pendingJoins.removeAll { $0 == room }
                if !rooms.contains(room) { rooms.append(room) }
                if currentRoom == nil { currentRoom = room }
            } else {
                addMember(who, to: room)
            }
            return [.show(.joined(room: room, time: time, nick: who))]
        case let .left(room, _, time, who):
            if isSelf(who) { leave(room) } else { removeMember(who, from: room) }
            var actions: [SessionAction] = [.show(.left(room: room, time: time, nick: who))]
            if isSelf(who), let current = currentRoom, current != room || !rooms.contains(current) {
                actions.append(notice("now talking in #\(current)"))
            }
            return actions
        case let .quit(room, _, time, who, reason):
            removeMember(who, from: room)
            return [.show(.quit(room: room, time: time, nick: who, reason: reason))]
        case let .nickChanged(room, _, time, old, new):
            if let index = membersByRoom[room]?.firstIndex(where: { ChatName.nickKey($0) == ChatName.nickKey(old) }) {
                membersByRoom[room]?[index] = new
            }
            return [.show(.nickChanged(room: room, time: time, old: old, new: new))]
        case let .nickAccepted(newNick):
            nick = newNick
            return [notice("you are now known as \(newNick)")]
        case let .members(room, nicks):
            membersByRoom[room] = nicks
            return [.show(.members(room: room, time: clock(), nicks: nicks))]
        case let .topic(room, _, time, setBy, text):
            topics[room] = text
            return [.show(.topic(room: room, time: time, setBy: setBy, text: text))]
        case let .history(room, entries):
            return entries.map { entry in
                switch entry.kind {
                case .message:
                    .show(.message(room: room, time: entry.time, sender: entry.sender, text: entry.text, replayed: true))
                case .action:
                    .show(.action(room: room, time: entry.time, sender: entry.sender, text: entry.text, replayed: true))
                case .topic:
                    // `history` never carries topic changes (only `historyPage` does).
                    .show(.topic(room: room, time: entry.time, setBy: entry.sender, text: entry.text))
                }
            }
        case let .roomList(list):
            serverRooms = Set(list.map(\.name))
            return [.show(.roomList(time: clock(), rooms: list.sorted { $0.name < $1.name }))]
        case let .ping(token):
            return [.send([.pong(token: token)])]
        case let .error(code, fatal, frameType, reason):
            if !fatal, frameType == .join, !pendingJoins.isEmpty {
                let room = pendingJoins.removeFirst()
                if code == .alreadyInRoom, !rooms.contains(room) { rooms.append(room) }
                if currentRoom == room, !rooms.contains(room) { currentRoom = rooms.last ?? pendingJoins.last }
            }
            let text = reason.isEmpty ? "\(code)" : reason
            return [error(fatal ? "server closed the session: \(text)" : text)]
        case .goodbye(let reason):
            return [notice(reason.isEmpty ? "server said goodbye" : "server said goodbye: \(reason)")]
        case .welcome, .pong, .unknown, .hello, .changeNick, .join, .part, .say, .emote, .tell,
            .listRooms, .who, .setTopic, .requestHistory, .fetchHistory, .setAway:
            // Skippable or misdirected frames carry nothing to show.
            return []
        case .roomState, .historyPage, .roomListPage, .membersPage, .away, .limits:
            // Version 2 frames; the session says hello with version 1, so a server sends none.
            return []
        }
    }

    // MARK: Helpers

    private func isSelf(_ other: String) -> Bool { ChatName.nickKey(other) == ChatName.nickKey(nick) }

    private mutating func leave(_ room: String) {
        rooms.removeAll { $0 == room }
        pendingJoins.removeAll { $0 == room }
        membersByRoom[room] = nil
        topics[room] = nil
        if currentRoom == room { currentRoom = rooms.last ?? pendingJoins.last }
    }

    private mutating func addMember(_ who: String, to room: String) {
        var list = membersByRoom[room] ?? []
        list.removeAll { ChatName.nickKey($0) == ChatName.nickKey(who) }
        list.append(who)
        membersByRoom[room] = list
    }

    private mutating func removeMember(_ who: String, from room: String) {
        membersByRoom[room]?.removeAll { ChatName.nickKey($0) == ChatName.nickKey(who) }
    }

    private func notice(_ text: String) -> SessionAction { .show(.notice(time: clock(), text: text)) }
    private func error(_ text: String) -> SessionAction { .show(.error(time: clock(), text: text)) }
    private func noRoom() -> SessionAction { error("you are not in a room; /join #room first") }

    private func help(_ topic: String?) -> [SessionAction] {
        if let topic {
            guard let spec = CommandSpec.named(topic) else { return [error(CommandError.unknownCommand(topic).description)] }
            return [notice("\(spec.usage) — \(spec.summary)")]
        }
        let width = CommandSpec.all.map(\.usage.count).max() ?? 0
        var lines = ["commands (plain text goes to the current room; Tab completes commands, nicks and rooms):"]
        for spec in CommandSpec.all {
            lines.append("  " + spec.usage + String(repeating: " ", count: width - spec.usage.count) + "  " + spec.summary)
        }
        return lines.map(notice)
    }
}

/// The client's wall clock, in milliseconds since the Unix epoch, for stamping its own notes.
public enum ClientClock {
    /// Now, from the system's realtime clock.
    @Sendable public static func now() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return UInt64(spec.tv_sec) * 1000 + UInt64(spec.tv_nsec) / 1_000_000
    }
}
