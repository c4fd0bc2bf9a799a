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
    /// Show this event to the user (and log it with its window).
    case show(ChatEvent)
    /// Show this event, but keep it out of the logs: it is true only at the moment or only of
    /// the screen (a catch-up's marker, "live from here").
    case transient(ChatEvent)
    /// Draw the user's attention (the terminal bell): a mention or a direct message arrived.
    case alert
    /// Leave the server with this reason (send `goodbye`, wait for the close, exit).
    case quit(reason: String)
    /// Something only the display can do: its window buffers and settings.
    case display(DisplayRequest)
    /// Something only the driver can do: the connection itself.
    case connection(ConnectionRequest)
    /// An account request, which needs the password only the driver holds.
    case account(AccountRequest)
}

/// What the session asks of the display (the terminal keeps each window's lines and the settings).
public enum DisplayRequest: Equatable, Sendable {
    /// Empty the current window (`/clear`).
    case clear
    /// Show the current window's lines containing this text (`/lastlog`).
    case lastlog(String)
    /// List the settings, show one, or change one for this session (`/set`).
    case set(name: String?, value: String?)
    /// Write the settings to the config file (`/save`).
    case save
    /// A window changed its name (a query whose nick changed): its lines go with it.
    case renameWindow(from: ChatWindow, to: ChatWindow)
}

/// What the session asks of the driver's connection.
public enum ConnectionRequest: Equatable, Sendable {
    /// Drop the connection and connect again at once (`/reconnect`).
    case reconnect
    /// Move to this server, `HOST:PORT` as typed (`/server`).
    case server(String)
    /// Leave the server and stay offline until `/reconnect` (`/disconnect`).
    case disconnect
}

/// What the session asks of the driver for an account (`/register`, `/login`): the driver holds
/// the password, never the session (AccountCommands.swift).
public enum AccountRequest: Equatable, Sendable {
    /// Register the current nick with the account password.
    case register
    /// Log in to `account` (nil: the account password file's account, else the last one logged
    /// in to, else the nick the client was started with).
    case login(account: String?)
    /// Change the password of the account logged in to.
    case changePassword
    /// Delete the account logged in to.
    case drop
}

/// The client's view of the chat, as a value: who we are, which rooms and direct-message
/// conversations ("windows") we have, which one we talk in, what happened in the others, and
/// how far we have read each room. Commands and frames go in; frames to send and events to
/// show come out. It does no I/O, so it is tested without sockets; the driver owns the
/// connection.
public struct ClientSession: Sendable {
    /// Our nick as the server knows it (the requested one until the welcome says otherwise).
    public private(set) var nick: String
    /// Rooms the server confirmed we are in, in the order we entered them.
    public private(set) var rooms: [String] = []
    /// Rooms we asked to join and have no answer for yet, oldest first; the server answers
    /// joins in order, so an error about a `join` belongs to the first of these.
    public private(set) var pendingJoins: [String]
    /// Whether a connection is open (between `connected` and `disconnected`).
    public private(set) var isConnected = false
    /// How the connection is protected, for the status line: `TLS 1.3` (the server's certificate
    /// verified), `TLS 1.3 UNVERIFIED`, or nil for plain text. Set by whoever connects.
    public var encryption: String?
    /// Which server the session is on (`127.0.0.1:7002`), for the status line when the client
    /// has several to choose from; nil otherwise. Set by whoever connects.
    public var server: String?
    /// The protocol version agreed with the server (1 until a version 2 welcome).
    public private(set) var version: UInt16 = 1
    /// Every window in the order they were opened: rooms we are in or joining, then queries.
    public private(set) var windows: [ChatWindow] = []
    /// The window plain text goes to, if any.
    public private(set) var currentWindow: ChatWindow?
    /// What happened in each window while it was not the current one.
    public private(set) var activity: [ChatWindow: WindowActivity] = [:]
    /// Our away message, nil when we are not away.
    public private(set) var awayMessage: String?
    /// The account the session is logged in as (version 3), nil for a guest.
    public internal(set) var account: String?
    /// The rate limits the server announced (version 2), or nil.
    public private(set) var limits: RateLimits?
    /// The nicks whose messages we do not show (as typed by the user).
    public private(set) var ignored: [String] = []
    /// Words that count as a mention besides our nick (the `highlight` setting).
    public var highlightWords: [String] = []

    /// Set while a room list asked for on connect is coming: it feeds Tab after `/join #`
    /// and is not shown.
    private var roomListIsQuiet = false
    /// Counts for the one line a reconnect shows, until every room is back.
    private var reconnectSummary: ReconnectSummary?
    /// Whether the session was connected before: a later `connected` is a reconnect.
    private var wasConnected = false
    /// Rooms we have been in: rejoining them is summed up, joining the others is shown.
    private var joinedBefore: Set<String> = []
    /// Rooms whose next member list comes with a rejoin, and so is kept, not shown.
    private var quietMembers: Set<String> = []

    private var membersByRoom: [String: [String]] = [:]
    private var membersInProgress: [String: [String]] = [:]
    private var roomListInProgress: [RoomInfo] = []
    private var topics: [String: String] = [:]
    private var serverRooms: Set<String> = []
    /// How far we have seen each room: its epoch and the last `seq` shown.
    private var seen: [String: RoomPosition] = [:]
    /// Rooms being caught up after a (re)join, until their missed messages are shown.
    private var catchUps: [String: CatchUp] = [:]
    /// Requests whose echo or error has not come back yet, oldest first: the server answers
    /// each in order, so an error about a `say` belongs to the oldest `say` here.
    private var unanswered: [SentRequest] = []
    /// Rooms' modes and roles, keys to rejoin with, and rooms not to rejoin (version 4;
    /// ClientSession+Moderation.swift).
    var moderation = ModerationState()
    let clock: @Sendable () -> UInt64

    /// The longest usage `/help` lines its descriptions up after; longer ones get a line of their own.
    static let helpUsageWidth = 26

    /// How many history entries to ask for per `fetchHistory` while catching up.
    static let catchUpPageSize: UInt32 = 200

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
        self.windows = wanted.map(ChatWindow.room)
        self.currentWindow = windows.first
        self.clock = clock
    }

    /// The room plain text goes to, if the current window is a room.
    public var currentRoom: String? {
        if case .room(let name) = currentWindow { return name }
        return nil
    }

    // MARK: Completion data

    /// Nicks seen in `room`, in the server's order.
    public func members(of room: String) -> [String] { membersByRoom[room] ?? [] }

    /// Every nick we know, the current room's first (those are the likeliest to be addressed).
    public var knownNicks: [String] {
        var result: [String] = []
        var seenKeys: Set<String> = []
        let order = (currentRoom.map { [$0] } ?? []) + rooms.sorted()
        for room in order {
            for nick in membersByRoom[room] ?? [] where seenKeys.insert(ChatName.nickKey(nick)).inserted {
                result.append(nick)
            }
        }
        for case .query(let nick) in windows where seenKeys.insert(ChatName.nickKey(nick)).inserted { result.append(nick) }
        return result
    }

    /// Every room name we know: ours first, then those `/rooms` listed.
    public var knownRooms: [String] {
        let ours = rooms + pendingJoins
        return ours + serverRooms.subtracting(ours).sorted()
    }

    // MARK: Connection life

    /// The connection is open with this welcome: records our nick and the protocol version, and
    /// returns the joins for every room we were in or asked for, so a reconnect puts us back
    /// where we were.
    public mutating func connected(nick welcomedNick: String, motd: String, version: UInt16 = 1, server: String = "the server") -> [SessionAction] {
        isConnected = true
        nick = welcomedNick
        self.version = version
        limits = nil
        unanswered = []
        catchUps = [:]
        var actions: [SessionAction] = []
        // A reconnect is summed up in one line once every room is back; the welcome message was
        // shown the first time.
        let rejoining = Set(pendingJoins).intersection(joinedBefore)
        if wasConnected, !rejoining.isEmpty {
            reconnectSummary = ReconnectSummary(server: server, waiting: rejoining)
        } else if wasConnected {
            actions.append(notice("reconnected to \(server)"))
        } else if !motd.isEmpty {
            actions.append(.show(.notice(time: clock(), text: motd)))
        }
        wasConnected = true
        if !pendingJoins.isEmpty { actions.append(.send(pendingJoins.map(joinFrame))) }
        if let awayMessage, version >= 2 { actions.append(.send([.setAway(text: awayMessage)])) }
        roomListIsQuiet = true
        actions.append(.send([.listRooms]))
        return actions
    }

    /// Whether `frame` answers a request of this connection — our own join's echo, or the room
    /// list asked for on connecting: the server did more than welcome us.
    public func isAnswer(_ frame: Frame) -> Bool {
        switch frame {
        case .joined(_, _, _, let who): isSelf(who)
        case .roomList, .roomListPage(true, _): true
        default: false
        }
    }

    /// Whether `room` is being put back after a reconnect: its join, member list and "nothing
    /// new" are not shown; one line sums the reconnect up at the end.
    private func isRejoining(_ room: String) -> Bool { reconnectSummary?.waiting.contains(room) ?? false }

    /// The connection is gone: every room we were in becomes a room to rejoin.
    public mutating func disconnected() {
        isConnected = false
        reconnectSummary = nil
        roomListIsQuiet = false
        quietMembers = []
        for room in rooms.reversed() where !pendingJoins.contains(room) { pendingJoins.insert(room, at: 0) }
        rooms = []
        membersByRoom = [:]
        membersInProgress = [:]
        catchUps = [:]
        unanswered = []
        // Roles come again with each rejoin; keys and the rooms not to rejoin stay.
        moderation.modes = [:]
        moderation.shownWithoutRoles = []
        moderation.quietModes = []
    }

    /// Asks for a different nick before connecting again (after `nickTaken` at the start).
    public mutating func useNick(_ newNick: String) {
        nick = newNick
    }

    /// The nick to try after `nick` was taken at the start, the `attempt`th time (1, 2, 3):
    /// `nick_`, `nick__`, … within the nick length limit; nil when there is none left to try.
    public static func fallbackNick(for nick: String, attempt: Int) -> String? {
        guard attempt >= 1, attempt <= 3 else { return nil }
        let suffix = String(repeating: "_", count: attempt)
        let candidate = String(nick.prefix(ChatName.maxNickLength - suffix.count)) + suffix
        return ChatName.isValidNick(candidate) ? candidate : nil
    }

    // MARK: Windows

    /// Makes `window` (which must be one of ours) the current one; its activity is cleared.
    public mutating func select(_ window: ChatWindow) {
        guard windows.contains(window) else { return }
        currentWindow = window
        activity[window] = nil
    }

    /// Makes window number `number` (from 1, as the status line numbers them) current; false
    /// when there is no such window.
    @discardableResult
    public mutating func selectWindow(number: Int) -> Bool {
        guard number >= 1, number <= windows.count else { return false }
        select(windows[number - 1])
        return true
    }

    /// Moves `offset` windows on from the current one, wrapping around.
    public mutating func cycleWindow(by offset: Int) {
        guard !windows.isEmpty else { return }
        let index = currentWindow.flatMap { windows.firstIndex(of: $0) } ?? 0
        let count = windows.count
        select(windows[((index + offset) % count + count) % count])
    }

    /// Whether `text` mentions `nick`: the nick as a whole word, in any letter case.
    public static func mentions(_ text: String, nick: String) -> Bool {
        let key = ChatName.nickKey(nick)
        guard !key.isEmpty else { return false }
        let isNickCharacter: (Character) -> Bool = { $0.isLetter || $0.isNumber || "_-[]\\`^{}|".contains($0) }
        var word = ""
        for character in text + " " {
            if isNickCharacter(character) {
                word.append(character)
            } else {
                if !word.isEmpty, ChatName.nickKey(word) == key { return true }
                word = ""
            }
        }
        return false
    }

    /// Whether `text` mentions us: our nick, or one of the highlight words, as a whole word in
    /// any letter case.
    public func isMention(_ text: String) -> Bool {
        Self.mentions(text, nick: nick) || highlightWords.contains { Self.mentions(text, word: $0) }
    }

    /// Whether `text` holds `word` (letters, digits and spaces as typed) as a whole word, in any case.
    public static func mentions(_ text: String, word: String) -> Bool {
        let key = word.lowercased()
        guard !key.isEmpty else { return false }
        let lowered = text.lowercased()
        var searchFrom = lowered.startIndex
        while let found = lowered.range(of: key, range: searchFrom..<lowered.endIndex) {
            let before = found.lowerBound == lowered.startIndex ? nil : lowered[lowered.index(before: found.lowerBound)]
            let after = found.upperBound == lowered.endIndex ? nil : lowered[found.upperBound]
            let isBoundary: (Character?) -> Bool = { $0.map { !($0.isLetter || $0.isNumber || $0 == "_") } ?? true }
            if isBoundary(before), isBoundary(after) { return true }
            searchFrom = lowered.index(after: found.lowerBound)
        }
        return false
    }

    /// The window an event belongs in: its room's or its conversation's, when that window is
    /// open; anything else (notices, errors, room lists) goes to the current window.
    public func window(for event: ChatEvent) -> ChatWindow? {
        if case .direct(_, let sender, let recipient, _, let outgoing) = event {
            return queryWindow(with: outgoing ? recipient : sender) ?? currentWindow
        }
        if let room = event.room, windows.contains(.room(room)) { return .room(room) }
        return currentWindow
    }

    private mutating func addWindow(_ window: ChatWindow) {
        if !windows.contains(window) { windows.append(window) }
    }

    private mutating func removeWindow(_ window: ChatWindow) {
        guard let index = windows.firstIndex(of: window) else { return }
        windows.remove(at: index)
        activity[window] = nil
        if currentWindow == window {
            currentWindow = windows.isEmpty ? nil : windows[max(0, index - 1)]
            if let currentWindow { activity[currentWindow] = nil }
        }
    }

    private func queryWindow(with other: String) -> ChatWindow? {
        windows.first { if case .query(let nick) = $0 { ChatName.nickKey(nick) == ChatName.nickKey(other) } else { false } }
    }

    /// The query with `old` follows it to its new nick (seen in any room we share), keeping its
    /// place, its activity and — through the display — its lines; unless a query with `new` is
    /// open already.
    private mutating func renameQuery(from old: String, to new: String) -> [SessionAction] {
        guard let window = queryWindow(with: old), let index = windows.firstIndex(of: window) else { return [] }
        let renamed = ChatWindow.query(new)
        guard window != renamed else { return [] }
        if let other = queryWindow(with: new), other != window { return [] }
        windows[index] = renamed
        if currentWindow == window { currentWindow = renamed }
        activity[renamed] = activity.removeValue(forKey: window)
        return [.display(.renameWindow(from: window, to: renamed))]
    }

    /// The window to go to for Alt-A (`/window goto active`): one with a mention or a direct
    /// message first, else one with unread messages; the lowest numbered among equals, as irssi
    /// goes. Nil when no other window has activity.
    public func mostActiveWindow() -> ChatWindow? {
        let candidates = windows.filter { $0 != currentWindow && (activity[$0]?.unread ?? 0 > 0 || activity[$0]?.mentioned == true) }
        return candidates.first { activity[$0]?.mentioned == true } ?? candidates.first
    }

    /// Counts a live message in `window` unless the user is looking at it; an alert when it
    /// mentions us (or is a direct message).
    private mutating func noteActivity(in window: ChatWindow, mentioned: Bool) -> [SessionAction] {
        // The merged window shows every line, so whoever looks at it has seen them.
        if window != currentWindow, currentWindow != .merged {
            var entry = activity[window] ?? WindowActivity()
            entry.unread += 1
            entry.mentioned = entry.mentioned || mentioned
            activity[window] = entry
        }
        return mentioned ? [.alert] : []
    }

    // MARK: Commands

    /// What to do for a command the user typed.
    public mutating func perform(_ command: ClientCommand) -> [SessionAction] {
        switch command {
        case .say(let text):
            return sayInCurrentWindow(text, label: nil)
        case .emote(let text):
            guard let room = currentRoom else {
                return [currentWindow == nil ? noRoom() : error("/me works in rooms only")]
            }
            if let out = outOfRoom(room) { return [out] }
            return request(.emote(room: room, text: text), label: nil)
        case .join(let room):
            // Joining by hand is what lets a room we were kicked from be rejoined again.
            moderation.removed[room] = nil
            if rooms.contains(room) || pendingJoins.contains(room) { return perform(.switchRoom(room)) }
            pendingJoins.append(room)
            addWindow(.room(room))
            select(.room(room))
            guard isConnected else { return [notice("not connected: you will join #\(room) when the client reconnects")] }
            return [.send([joinFrame(for: room)])]
        case .joinWithKey(let room, let key):
            moderation.keys[room] = key
            return perform(.join(room: room))
        case .part(let room):
            if room == nil, case .query(let other) = currentWindow {
                removeWindow(.query(other))
                return [notice("closed the conversation with \(other)")]
            }
            guard let room = room ?? currentRoom else { return [noRoom()] }
            if moderation.removed[room] != nil, !rooms.contains(room), !pendingJoins.contains(room) {
                // We are out of it already: only its window is left to close.
                moderation.removed[room] = nil
                removeWindow(.room(room))
                return [notice("closed the window of #\(room)")]
            }
            if !isConnected {
                guard let index = pendingJoins.firstIndex(of: room) else { return [error("you are not in #\(room)")] }
                pendingJoins.remove(at: index)
                removeWindow(.room(room))
                return [notice("no longer joining #\(room)")]
            }
            return [.send([.part(room: room)])]
        case .switchRoom(let room):
            guard rooms.contains(room) || pendingJoins.contains(room) else {
                return [error("you are not in #\(room); /join #\(room) first")]
            }
            select(.room(room))
            return [notice("now talking in #\(room)")]
        case .query(let other):
            let window = queryWindow(with: other) ?? .query(other)
            addWindow(window)
            select(window)
            return [notice("talking to \(window.title) in private (/part closes it)")]
        case .tell(let recipient, let text):
            return request(.tell(recipient: recipient, text: text), label: nil)
        case .changeNick(let newNick):
            return [.send([.changeNick(nick: newNick)])]
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
            // The answer is shown as asked for, not taken for a version 1 join's catch-up.
            catchUps[room] = nil
            return [.send([.requestHistory(room: room, count: count)])]
        case .away(let text):
            guard isConnected else { return [error("not connected; /away needs the server")] }
            guard version >= 2 else { return [error("this server speaks protocol version 1, which has no away messages")] }
            return [.send([.setAway(text: text)])]
        case .ignore(let other):
            guard let other else {
                return [notice(ignored.isEmpty ? "you ignore nobody" : "you ignore: " + ignored.joined(separator: " "))]
            }
            if !ignored.contains(where: { ChatName.nickKey($0) == ChatName.nickKey(other) }) { ignored.append(other) }
            return [notice("ignoring \(other): their messages, actions and direct messages are not shown (/unignore \(other))")]
        case .unignore(let other):
            let before = ignored.count
            ignored.removeAll { ChatName.nickKey($0) == ChatName.nickKey(other) }
            return [notice(ignored.count < before ? "no longer ignoring \(other)" : "you were not ignoring \(other)")]
        case .quit(let reason):
            return [.quit(reason: reason)]
        case .help(let topic):
            return help(topic)
        case .switchWindow(let name):
            if let window = queryWindow(with: name) {
                select(window)
                return []
            }
            if let room = try? ChatName.normalizedRoom(name), windows.contains(.room(room)) { return perform(.switchRoom(room)) }
            return [error("no window is called \(name); /query \(name) opens one")]
        case .window(let target):
            return window(target)
        case .clear:
            return [.display(.clear)]
        case .lastlog(let text):
            return [.display(.lastlog(text))]
        case .set(let name, let value):
            return [.display(.set(name: name, value: value))]
        case .save:
            return [.display(.save)]
        case .reconnect:
            return [.connection(.reconnect)]
        case .server(let address):
            return [.connection(.server(address))]
        case .disconnect:
            return [.connection(.disconnect)]
        case .register:
            return [.account(.register)]
        case .login(let account):
            return [.account(.login(account: account))]
        case .changePassword:
            return [.account(.changePassword)]
        case .dropAccount:
            return [.account(.drop)]
        case .moderate(let command):
            return performModeration(command)  // ClientSession+Moderation.swift
        case .whois(let other):
            let shared = rooms.filter { isMember(other, of: $0) }
            let query = queryWindow(with: other).map { _ in "; you have a query window with \(other)" } ?? ""
            if shared.isEmpty { return [notice("\(other) is in none of your rooms\(query) (the server tells no more)")] }
            return [notice("\(other) is in " + shared.map { "#" + $0 }.joined(separator: " ") + query)]
        }
    }

    /// `/window list|close|N|name`.
    private mutating func window(_ target: ClientCommand.WindowTarget) -> [SessionAction] {
        switch target {
        case .list:
            return windows.enumerated().map { index, window in
                var line = "\(index + 1): \(window.title)"
                if window == currentWindow { line += " (current)" }
                if let activity = activity[window], activity.unread > 0 {
                    line += " — \(activity.unread) unread" + (activity.mentioned ? ", mentioned" : "")
                }
                return notice(line)
            }
        case .close:
            switch currentWindow {
            case .query: return perform(.part(room: nil))
            case .room(let room): return perform(.part(room: room))
            case .merged: return [error("the merged window stays while merged_window is on")]
            case nil: return [error("there is no window to close")]
            }
        case .number(let number):
            guard selectWindow(number: number) else { return [error("there is no window \(number) (there are \(windows.count))")] }
            return []
        case .active:
            guard let window = mostActiveWindow() else { return [notice("no window has activity")] }
            select(window)
            return []
        case .named(let name):
            if name.hasPrefix("#") {
                guard let room = try? ChatName.normalizedRoom(name), windows.contains(.room(room)) else {
                    return [error("no window is called \(name)")]
                }
                select(.room(room))
                return []
            }
            return perform(.switchWindow(name))
        }
    }

    /// The events for a line that did not parse.
    public func rejected(_ error: CommandError) -> [SessionAction] {
        [self.error(error.description)]
    }

    /// Sends one pasted line, line `index` of `total`, to `window` as text (never a command).
    /// If the server drops it, the error names the line.
    public mutating func sendPasted(_ text: String, to window: ChatWindow, index: Int, total: Int) -> [SessionAction] {
        let label = "line \(index) of \(total) of the paste"
        switch window {
        case .room(let room): return request(.say(room: room, text: text), label: label)
        case .query(let other): return request(.tell(recipient: other, text: text), label: label)
        case .merged: return [Self.notInMerged(clock())]
        }
    }

    /// Why text typed in the merged window goes nowhere: it holds every window, so it is not
    /// clear which one is meant.
    private static func notInMerged(_ time: UInt64) -> SessionAction {
        .show(.error(time: time, text: "the merged window is for reading; go to a room or query to talk (Alt-2…)"))
    }

    /// Adds the merged window, first, and makes it current (`merged_window = true`).
    public mutating func addMergedWindow() {
        guard !windows.contains(.merged) else { return }
        windows.insert(.merged, at: 0)
        currentWindow = .merged
    }

    private mutating func sayInCurrentWindow(_ text: String, label: String?) -> [SessionAction] {
        switch currentWindow {
        case .room(let room):
            if let out = outOfRoom(room) { return [out] }
            return request(.say(room: room, text: text), label: label)
        case .query(let other): return request(.tell(recipient: other, text: text), label: label)
        case .merged: return [Self.notInMerged(clock())]
        case nil: return [noRoom()]
        }
    }

    /// Why text cannot go to `room`, whose window stayed open after we were kicked from it.
    private func outOfRoom(_ room: String) -> SessionAction? {
        guard let why = moderation.removed[room], !rooms.contains(room), !pendingJoins.contains(room) else { return nil }
        return error("you are not in #\(room) (\(why)); /join #\(room) to go back")
    }

    /// Sends `frame`, remembering it until its echo or error comes back.
    private mutating func request(_ frame: Frame, label: String?) -> [SessionAction] {
        guard isConnected else { return [.send([frame])] }  // the driver says it was not sent
        unanswered.append(SentRequest(type: frame.type, text: Self.text(of: frame), label: label))
        return [.send([frame])]
    }

    private static func text(of frame: Frame) -> String {
        switch frame {
        case .say(_, let text), .emote(_, let text), .tell(_, let text): text
        default: ""
        }
    }

    /// The oldest unanswered request of `type`, taken off the list.
    private mutating func answer(_ type: FrameType) -> SentRequest? {
        guard let index = unanswered.firstIndex(where: { $0.type == type }) else { return nil }
        return unanswered.remove(at: index)
    }

    // MARK: Frames from the server

    /// What to do for a frame from the server: update what we know, say what to show, and
    /// answer `ping` with `pong`.
    public mutating func receive(_ frame: Frame) -> [SessionAction] {
        switch frame {
        case let .message(room, seq, time, sender, text):
            if isSelf(sender) { _ = answer(.say) }
            return live(room: room, seq: seq, .message(room: room, time: time, sender: sender, text: text, replayed: false), from: sender, text: text)
        case let .action(room, seq, time, sender, text):
            if isSelf(sender) { _ = answer(.emote) }
            return live(room: room, seq: seq, .action(room: room, time: time, sender: sender, text: text, replayed: false), from: sender, text: text)
        case let .direct(sender, recipient, time, text):
            return direct(sender: sender, recipient: recipient, time: time, text: text)
        case let .joined(room, seq, time, who):
            if isSelf(who) {
                pendingJoins.removeAll { $0 == room }
                if !rooms.contains(room) { rooms.append(room) }
                addWindow(.room(room))
                if currentWindow == nil { currentWindow = .room(room) }
                catchUps[room] = CatchUp(previous: seen[room])
                if !joinedBefore.insert(room).inserted, isRejoining(room) {
                    quietMembers.insert(room)
                    return []
                }
                return [.show(.joined(room: room, time: time, nick: who))]
            }
            addMember(who, to: room)
            forgetRoles(of: who, in: room)
            return live(room: room, seq: seq, .joined(room: room, time: time, nick: who))
        case let .left(room, seq, time, who):
            if isSelf(who) {
                leave(room)
                var actions: [SessionAction] = [.show(.left(room: room, time: time, nick: who))]
                if let current = currentWindow { actions.append(notice("now talking in \(current.title)")) }
                return actions
            }
            removeMember(who, from: room)
            forgetRoles(of: who, in: room)
            return live(room: room, seq: seq, .left(room: room, time: time, nick: who))
        case let .quit(room, seq, time, who, reason):
            removeMember(who, from: room)
            forgetRoles(of: who, in: room)
            return live(room: room, seq: seq, .quit(room: room, time: time, nick: who, reason: reason))
        case let .nickChanged(room, seq, time, old, new):
            if let index = membersByRoom[room]?.firstIndex(where: { ChatName.nickKey($0) == ChatName.nickKey(old) }) {
                membersByRoom[room]?[index] = new
            }
            renameRoles(from: old, to: new, in: room)
            return renameQuery(from: old, to: new) + live(room: room, seq: seq, .nickChanged(room: room, time: time, old: old, new: new))
        case let .nickAccepted(newNick):
            nick = newNick
            return [notice("you are now known as \(newNick)")]
        case let .members(room, nicks):
            return membersKnown(room: room, nicks: nicks)
        case let .membersPage(room, complete, nicks):
            membersInProgress[room, default: []].append(contentsOf: nicks)
            guard complete else { return [] }
            return membersKnown(room: room, nicks: membersInProgress.removeValue(forKey: room) ?? [])
        case let .topic(room, seq, time, setBy, text):
            let known = topics.updateValue(text, forKey: room)
            // Every join is followed by the room's topic. After a reconnect the window shows it
            // already, unless it changed while we were away; then a version 2 catch-up (an epoch
            // known) shows the change among what was missed, in its place, and marks it seen.
            let changedWhileAway = catchUps[room]?.previous.map { $0.epoch != nil && seq > $0.lastSeq } ?? false
            if isRejoining(room), known == text || changedWhileAway { return [] }
            return live(room: room, seq: seq, .topic(room: room, time: time, setBy: setBy, text: text))
        case let .history(room, entries):
            return historyBatch(room: room, entries: entries)
        case let .roomState(room, epoch, _, lastSeq):
            return roomState(room: room, epoch: epoch, lastSeq: lastSeq)
        case let .historyPage(room, epoch, complete, entries):
            return historyPage(room: room, epoch: epoch, complete: complete, entries: entries)
        case let .roomList(list):
            return roomListKnown(list)
        case let .roomListPage(complete, list):
            roomListInProgress.append(contentsOf: list)
            guard complete else { return [] }
            let all = roomListInProgress
            roomListInProgress = []
            return roomListKnown(all)
        case let .away(who, text):
            if isSelf(who) {
                awayMessage = text.isEmpty ? nil : text
                return [notice(text.isEmpty ? "you are no longer marked away" : "you are marked away: \(text)")]
            }
            return [notice("\(who) is away: \(text)")]
        case let .limits(requestRate, requestBurst, byteRate, byteBurst):
            limits = RateLimits(
                requestsPerSecond: Double(requestRate) / 1000, requestBurst: Int(requestBurst),
                bytesPerSecond: Double(byteRate), byteBurst: Int(byteBurst))
            return []
        case let .ping(token):
            return [.send([.pong(token: token)])]
        case let .error(code, fatal, frameType, reason):
            return serverError(code: code, fatal: fatal, frameType: frameType, reason: reason)
        case .goodbye(let reason):
            return [notice(reason.isEmpty ? "server said goodbye" : "server said goodbye: \(reason)")]
        case .registered, .loggedIn, .passwordChanged, .accountDropped:
            return accountAnswer(frame)  // ClientSession+Accounts.swift
        case .kicked, .modeChanged, .invited, .roomModes, .banList, .done:
            return moderationFrame(frame)  // ClientSession+Moderation.swift
        case .welcome, .pong, .unknown, .hello, .changeNick, .join, .part, .say, .emote, .tell,
            .listRooms, .who, .setTopic, .requestHistory, .fetchHistory, .setAway, .register, .login,
            .changePassword, .dropAccount, .kick, .setMode, .invite, .listBans, .serverBan, .kill, .joinWithKey:
            // Skippable or misdirected frames carry nothing to show.
            return []
        }
    }

    /// A room's nick list: shown when asked for (an unknown room is an error, not an empty
    /// list), kept quietly when it comes with a rejoin.
    private mutating func membersKnown(room: String, nicks: [String]) -> [SessionAction] {
        if nicks.isEmpty, !rooms.contains(room) { return [error("there is no room #\(room)")] }
        membersByRoom[room] = nicks
        let quiet = quietMembers.remove(room) != nil
        membersShown(in: room, quietly: quiet)
        if quiet { return [] }
        let shown = nicks.map { decorated($0, in: room) }
        return deferIfCatchingUp(room, [.show(.members(room: room, time: clock(), nicks: shown))])
    }

    private mutating func roomListKnown(_ list: [RoomInfo]) -> [SessionAction] {
        serverRooms = Set(list.map(\.name))
        if roomListIsQuiet {
            roomListIsQuiet = false
            return []
        }
        return [.show(.roomList(time: clock(), rooms: list.sorted { $0.name < $1.name }))]
    }

    /// A live room event: remembered as seen, counted as activity (messages and actions from
    /// others), hidden when its sender is ignored, and held back while the room catches up so
    /// that it shows after the messages it follows.
    mutating func live(room: String, seq: UInt64, _ event: ChatEvent, from sender: String? = nil, text: String? = nil) -> [SessionAction] {
        let hidden = sender.map(isIgnored) ?? false
        var actions: [SessionAction] = hidden ? [] : [.show(event)]
        if !hidden, let sender, let text, !isSelf(sender) {
            actions += noteActivity(in: .room(room), mentioned: isMention(text))
        }
        return deferIfCatchingUp(room, actions, seq: seq)
    }

    /// Holds `actions` back while `room` fetches what it missed; `seq` (a live event's) counts
    /// as seen only once the event is shown, so a connection lost before then loses nothing.
    mutating func deferIfCatchingUp(_ room: String, _ actions: [SessionAction], seq: UInt64? = nil) -> [SessionAction] {
        guard var catchUp = catchUps[room], catchUp.isFetching else {
            if let seq { markSeen(room, seq) }
            return actions
        }
        catchUp.deferred += actions
        if let seq { catchUp.deferredSeq = max(catchUp.deferredSeq ?? 0, seq) }
        catchUps[room] = catchUp
        return []
    }

    private mutating func direct(sender: String, recipient: String, time: UInt64, text: String) -> [SessionAction] {
        let outgoing = isSelf(sender) && !isSelf(recipient)
        if isSelf(sender) { _ = answer(.tell) }
        if !outgoing, isIgnored(sender) { return [] }
        if outgoing {
            // Your own message opens the query it belongs to, as irssi's autocreate_own_query
            // does, so a later /query shows it; you stay where you are, told where it went.
            let window = queryWindow(with: recipient) ?? .query(recipient)
            addWindow(window)
            var actions: [SessionAction] = [.show(.direct(time: time, sender: sender, recipient: recipient, text: text, outgoing: true))]
            if window != currentWindow, currentWindow != .merged, let number = windows.firstIndex(of: window).map({ $0 + 1 }) {
                let keys = number <= 10 ? "Alt-\(number % 10) or " : ""
                actions.append(.transient(.notice(time: clock(), text: "to \(recipient): in window \(number) (\(keys)/window \(window.title))")))
            }
            return actions
        }
        var actions: [SessionAction] = [.show(.direct(time: time, sender: sender, recipient: recipient, text: text, outgoing: outgoing))]
        if !outgoing {
            let window = queryWindow(with: sender) ?? .query(sender)
            addWindow(window)
            actions += noteActivity(in: window, mentioned: true)
        }
        return actions
    }

    private mutating func serverError(code: ErrorCode, fatal: Bool, frameType: FrameType, reason: String) -> [SessionAction] {
        let text = reason.isEmpty ? "\(code)" : reason
        if fatal {
            guard Self.isFinal(.error(code: code, fatal: fatal, frameType: frameType, reason: reason)) else {
                return [error("server closed the session: \(text)")]
            }
            return [error("server closed the session: \(text); not reconnecting by itself (/reconnect to try again)")]
        }
        switch frameType {
        case .join, .joinWithKey:
            guard !pendingJoins.isEmpty else { break }
            let room = pendingJoins.removeFirst()
            if code == .alreadyInRoom, !rooms.contains(room) {
                rooms.append(room)
            } else if !rooms.contains(room) {
                removeWindow(.room(room))
            }
            if joinRefused(room, code: code) {
                return [error("cannot join #\(room): \(text); not rejoining by itself (/join #\(room) to try again)")] + rejoined(room, newMessages: 0)
            }
            // Named, because a config with many rooms has many joins out at once.
            return [error("cannot join #\(room): \(text)")] + rejoined(room, newMessages: 0)
        case .say, .emote, .tell:
            guard let request = answer(frameType) else { break }
            let what = request.label.map { "\($0) (“\(Self.excerpt(request.text))”)" } ?? "your message “\(Self.excerpt(request.text))”"
            return [error("\(text): \(what) was not delivered")]
        default:
            break
        }
        return [error(text)]
    }

    private static func excerpt(_ text: String) -> String {
        text.count <= 40 ? text : String(text.prefix(39)) + "…"
    }

    // MARK: Catching up (version 2)

    /// Where a room's history stood for us: its epoch (nil from a version 1 server) and the
    /// last `seq` shown.
    private struct RoomPosition: Sendable {
        var epoch: UInt64?
        var lastSeq: UInt64
    }

    /// A room between our own `joined` and the end of its catch-up.
    private struct CatchUp: Sendable {
        /// Where we were before this join; nil the first time.
        var previous: RoomPosition?
        /// Set by `roomState`: the join's replay page is the next `historyPage`.
        var awaitingReplay = false
        /// The join's replay, kept while earlier pages are fetched.
        var replay: [HistoryEntry] = []
        /// Entries fetched `after` our last `seq`, below the replay.
        var fetched: [HistoryEntry] = []
        /// Whether a `fetchHistory` is out.
        var isFetching = false
        /// The `seq` the last `fetchHistory` asked for entries after.
        var fetchedAfter: UInt64 = 0
        /// Events that arrived while fetching, shown after the catch-up.
        var deferred: [SessionAction] = []
        /// The highest `seq` among the deferred events.
        var deferredSeq: UInt64?
    }

    private mutating func markSeen(_ room: String, _ seq: UInt64) {
        if var position = seen[room] {
            position.lastSeq = max(position.lastSeq, seq)
            seen[room] = position
        } else {
            seen[room] = RoomPosition(epoch: nil, lastSeq: seq)
        }
    }

    private mutating func roomState(room: String, epoch: UInt64, lastSeq: UInt64) -> [SessionAction] {
        guard var catchUp = catchUps[room] else { return [] }
        catchUp.awaitingReplay = true
        var actions: [SessionAction] = []
        if let previous = catchUp.previous, let oldEpoch = previous.epoch, oldEpoch != epoch {
            // The earlier messages are gone with the old epoch; what the replay holds is new.
            actions.append(.show(.marker(room: room, time: clock(), text: "started again: the server restarted or forgot the room")))
            catchUp.previous = nil
        }
        catchUps[room] = catchUp
        // Until the catch-up has shown what was missed, the last seq shown stays where it was:
        // if this connection is lost first, the next one catches up from there again.
        seen[room] = RoomPosition(epoch: epoch, lastSeq: catchUp.previous?.lastSeq ?? lastSeq)
        return actions
    }

    private mutating func historyPage(room: String, epoch: UInt64, complete: Bool, entries: [HistoryEntry]) -> [SessionAction] {
        guard var catchUp = catchUps[room] else {
            return entries.compactMap { replayed(room: room, $0) }
        }
        if catchUp.awaitingReplay {
            catchUp.awaitingReplay = false
            guard let previous = catchUp.previous else {
                catchUps[room] = nil
                // A room that started again (or a first join): all of the replay is new to us.
                return backlog(room: room, entries) + rejoined(room, newMessages: entries.filter { $0.kind != .topic }.count)
            }
            catchUp.replay = entries
            let reachesBack = complete || entries.isEmpty || entries[0].seq <= previous.lastSeq + 1
            if reachesBack {
                catchUps[room] = catchUp
                return finishCatchUp(room)
            }
            catchUp.isFetching = true
            catchUp.fetchedAfter = previous.lastSeq
            catchUps[room] = catchUp
            return [.send([.fetchHistory(room: room, direction: .after, seq: previous.lastSeq, limit: Self.catchUpPageSize)])]
        }
        guard catchUp.isFetching else { return entries.compactMap { replayed(room: room, $0) } }
        let replayStart = catchUp.replay.first?.seq ?? UInt64.max
        catchUp.fetched += entries.filter { $0.seq < replayStart }
        // A page that does not get past the last one (a server that lies or loops) ends the
        // catch-up with what it has, rather than asking for the same page forever.
        guard let last = entries.last, !complete, last.seq > catchUp.fetchedAfter, last.seq + 1 < replayStart else {
            catchUps[room] = catchUp
            return finishCatchUp(room)
        }
        catchUp.fetchedAfter = last.seq
        catchUps[room] = catchUp
        return [.send([.fetchHistory(room: room, direction: .after, seq: last.seq, limit: Self.catchUpPageSize)])]
    }

    /// Shows what was missed in `room` since `previous`: a marker with the count, then the
    /// messages, then whatever arrived live meanwhile.
    private mutating func finishCatchUp(_ room: String) -> [SessionAction] {
        guard let catchUp = catchUps.removeValue(forKey: room), let previous = catchUp.previous else { return [] }
        var seenSeqs: Set<UInt64> = []
        let missed = (catchUp.fetched + catchUp.replay)
            .filter { $0.seq > previous.lastSeq && seenSeqs.insert($0.seq).inserted }
            .sorted { $0.seq < $1.seq }
        let count = missed.filter { $0.kind != .topic }.count
        let actions = caughtUp(room: room, missed)
        for entry in missed { markSeen(room, entry.seq) }
        if let deferredSeq = catchUp.deferredSeq { markSeen(room, deferredSeq) }
        return actions + catchUp.deferred + rejoined(room, newMessages: count)
    }

    /// The marker and the missed entries of a catch-up, counted as unread in their window. A
    /// reconnect leaves out the marker of a room where nothing happened: its summary says so.
    private mutating func caughtUp(room: String, _ missed: [HistoryEntry]) -> [SessionAction] {
        let shown = missed.filter { $0.kind == .topic || !isIgnored($0.sender) }
        let count = shown.filter { $0.kind != .topic }.count
        if count == 0, isRejoining(room) { return shown.compactMap { replayed(room: room, $0) } }
        let text = count == 0 ? "nothing new since you left" : "\(count) new since you left"
        // Of the screen, not the log: the log has the missed lines in their place by time.
        var actions: [SessionAction] = [.transient(.marker(room: room, time: clock(), text: text))]
        for entry in shown {
            if let action = replayed(room: room, entry) { actions.append(action) }
            if entry.kind != .topic, !isSelf(entry.sender) {
                actions += noteActivity(in: .room(room), mentioned: isMention(entry.text))
            }
        }
        return actions
    }

    /// A first join's backlog, with a marker where live messages start.
    private func backlog(room: String, _ entries: [HistoryEntry]) -> [SessionAction] {
        let shown = entries.compactMap { replayed(room: room, $0) }
        guard !shown.isEmpty else { return [] }
        return shown + [.transient(.marker(room: room, time: clock(), text: "live from here"))]
    }

    /// `room` is back after a reconnect with `newMessages` missed; once every room is, the one
    /// line that sums the reconnect up.
    private mutating func rejoined(_ room: String, newMessages: Int) -> [SessionAction] {
        guard var summary = reconnectSummary, summary.waiting.remove(room) != nil else { return [] }
        summary.rooms += 1
        summary.newMessages += newMessages
        if newMessages > 0 { summary.roomsWithNews += 1 }
        guard summary.waiting.isEmpty else {
            reconnectSummary = summary
            return []
        }
        reconnectSummary = nil
        let rooms = summary.rooms == 1 ? "1 room" : "\(summary.rooms) rooms"
        var news = summary.newMessages == 0 ? "nothing new" : summary.newMessages == 1 ? "1 new message" : "\(summary.newMessages) new messages"
        if summary.rooms > 1, summary.newMessages > 1 { news += " in \(summary.roomsWithNews) of them" }
        return [notice("reconnected to \(summary.server): \(rooms), \(news)")]
    }

    /// What a reconnect has put back so far.
    private struct ReconnectSummary: Sendable {
        let server: String
        /// Rooms still to rejoin and catch up.
        var waiting: Set<String>
        var rooms = 0
        var newMessages = 0
        var roomsWithNews = 0

        init(server: String, waiting: Set<String>) {
            self.server = server
            self.waiting = waiting
        }
    }

    /// A version 1 history batch: after a rejoin only the entries we have not seen.
    private mutating func historyBatch(room: String, entries: [HistoryEntry]) -> [SessionAction] {
        // What is shown counts as seen, so the next rejoin does not show it again.
        for entry in entries { markSeen(room, entry.seq) }
        guard let catchUp = catchUps.removeValue(forKey: room) else { return entries.compactMap { replayed(room: room, $0) } }
        guard let previous = catchUp.previous else { return backlog(room: room, entries) + rejoined(room, newMessages: 0) }
        let missed = entries.filter { $0.seq > previous.lastSeq }
        return caughtUp(room: room, missed) + rejoined(room, newMessages: missed.filter { $0.kind != .topic }.count)
    }

    private func replayed(room: String, _ entry: HistoryEntry) -> SessionAction? {
        if entry.kind != .topic, isIgnored(entry.sender) { return nil }
        switch entry.kind {
        case .message:
            return .show(.message(room: room, time: entry.time, sender: entry.sender, text: entry.text, replayed: true))
        case .action:
            return .show(.action(room: room, time: entry.time, sender: entry.sender, text: entry.text, replayed: true))
        case .topic:
            return .show(.topic(room: room, time: entry.time, setBy: entry.sender, text: entry.text))
        }
    }

    // MARK: Helpers

    func isSelf(_ other: String) -> Bool { ChatName.nickKey(other) == ChatName.nickKey(nick) }

    private func isIgnored(_ other: String) -> Bool {
        ignored.contains { ChatName.nickKey($0) == ChatName.nickKey(other) }
    }

    private mutating func leave(_ room: String) {
        leaveKeepingWindow(room)
        removeWindow(.room(room))
    }

    /// Forgets what we knew of `room` as a member; its window, if open, stays.
    mutating func leaveKeepingWindow(_ room: String) {
        rooms.removeAll { $0 == room }
        pendingJoins.removeAll { $0 == room }
        membersByRoom[room] = nil
        topics[room] = nil
        catchUps[room] = nil
        moderation.modes[room] = nil
    }

    private mutating func addMember(_ who: String, to room: String) {
        var list = membersByRoom[room] ?? []
        list.removeAll { ChatName.nickKey($0) == ChatName.nickKey(who) }
        list.append(who)
        membersByRoom[room] = list
    }

    mutating func removeMember(_ who: String, from room: String) {
        membersByRoom[room]?.removeAll { ChatName.nickKey($0) == ChatName.nickKey(who) }
    }

    func notice(_ text: String) -> SessionAction { .show(.notice(time: clock(), text: text)) }
    func error(_ text: String) -> SessionAction { .show(.error(time: clock(), text: text)) }
    private func noRoom() -> SessionAction { error("you are not in a room; /join #room first") }

    private func help(_ topic: String?) -> [SessionAction] {
        if let topic {
            guard let spec = CommandSpec.named(topic) else { return [error(CommandError.unknownCommand(topic).description)] }
            return [notice("\(spec.usage) — \(spec.summary)")]
        }
        // The descriptions start in one column, after the usages that fit before it; a longer
        // usage (/mode's) has its description on the line below. The tab marks where a
        // description's continuation rows start when the terminal wraps it (MessageRenderer).
        let width = CommandSpec.all.map(\.usage.count).filter { $0 <= Self.helpUsageWidth }.max() ?? Self.helpUsageWidth
        var lines = ["commands (plain text goes to the current window; Tab completes commands, nicks and rooms):"]
        for spec in CommandSpec.all {
            if spec.usage.count <= width {
                lines.append("  " + spec.usage + String(repeating: " ", count: width - spec.usage.count) + "  \t" + spec.summary)
            } else {
                lines.append("  " + spec.usage)
                lines.append(String(repeating: " ", count: width + 4) + "\t" + spec.summary)
            }
        }
        lines.append("keys: \tAlt-1…9 or Ctrl-N/Ctrl-P switch windows, Alt-A goes to the window with activity (mentions first); Ctrl-C clears the line (twice on an empty line quits); Ctrl-R searches history")
        return lines.map(notice)
    }
}

/// A `say`, `emote` or `tell` sent and not yet answered.
private struct SentRequest: Sendable {
    let type: FrameType
    let text: String
    /// How to name it if it is dropped (`line 3 of 20 of the paste`); nil for a typed line.
    let label: String?
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
