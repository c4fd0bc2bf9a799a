import ChatProtocol

// MARK: - Room moderation commands (protocol version 4)
//
// The commands an op types (`/kick`, `/ban`, `/mode`, `/op` …), a server operator's (`/kill`,
// `/serverban`, `/closeroom` …), parsed into `ModerationCommand`; `/join #room KEY` is a join
// (`ClientCommand.joinWithKey`). Room
// commands act on the current room unless they name one. The session turns them into frames
// (ClientSession+Moderation.swift); the server decides who may do what.

/// A moderation command the user typed, its names checked and its rooms in wire form.
public enum ModerationCommand: Equatable, Sendable {
    /// `/kick nick [reason]`: remove `nick` from the current room.
    case kick(nick: String, reason: String)
    /// `/ban mask|nick [reason]`: ban `mask` (a bare nick becomes `nick:NICK`) from the current
    /// room. `setMode` carries no reason, so a reason goes with a kick of that nick (see
    /// `ClientSession`).
    case ban(mask: String, reason: String)
    /// `/unban mask|nick`: lift a ban of the current room.
    case unban(mask: String)
    /// `/bans`: list the current room's bans.
    case listBans
    /// `/invite nick [#room]`: let `nick` into a room (the current one by default) once.
    case invite(nick: String, room: String?)
    /// `/mode [#room] [changes]`: change modes of a room (the current one by default), in order;
    /// no changes shows the room's modes. `/op`, `/voice`, `/key`, `/moderated` … are short
    /// forms of it.
    case mode(room: String?, changes: [ModeChange])
    /// `/kill nick [reason]`: a server operator ends `nick`'s session.
    case kill(nick: String, reason: String)
    /// `/serverban mask [reason]` (on) and `/serverunban mask` (off); `/closeroom #room` is the
    /// ban of `room:NAME`.
    case serverBan(on: Bool, mask: String, reason: String)
    /// `/serverbans`: list the server's bans.
    case listServerBans
}

/// One change of a room's mode: `+k s3cret`, `-i`, `+o bob`.
public struct ModeChange: Equatable, Sendable, CustomStringConvertible {
    /// Which mode.
    public var mode: RoomMode
    /// On (`+`) or off (`-`).
    public var on: Bool
    /// The mode's argument (a nick, the key, the limit, a ban mask); empty when it takes none.
    public var argument: String

    /// Describes one change.
    public init(_ mode: RoomMode, on: Bool, argument: String = "") {
        self.mode = mode
        self.on = on
        self.argument = argument
    }

    /// The IRC letter of each mode this client knows, as `/mode` takes and shows them.
    public static let letters: [Character: RoomMode] = [
        "i": .inviteOnly, "k": .key, "m": .moderated, "t": .topicLock, "l": .memberLimit,
        "o": .op, "v": .voice, "b": .ban, "r": .registered,
    ]

    /// The letter of `mode`, or nil for a mode this client does not know.
    public static func letter(of mode: RoomMode) -> Character? {
        letters.first { $0.value == mode }?.key
    }

    /// How the change reads, irssi-like: `+o bob`, `-k`; an unknown mode by its number, `+(9)`.
    public var description: String {
        let name = Self.letter(of: mode).map(String.init) ?? "(\(mode.rawValue))"
        return (on ? "+" : "-") + name + (argument.isEmpty ? "" : " " + argument)
    }
}

extension CommandSpec {
    /// The moderation commands, in the order `/help` lists them.
    static let moderation: [CommandSpec] = [
        CommandSpec(name: "kick", usage: "/kick nick [reason]", summary: "remove nick from the current room (ops)", argument: .nick),
        CommandSpec(name: "ban", usage: "/ban mask|nick [reason]", summary: "ban from the current room: nick:N, account:A, address:IP[/P]; a bare nick is nick:N (ops)", argument: .nick),
        CommandSpec(name: "unban", usage: "/unban mask|nick", summary: "lift a ban of the current room (ops)", argument: .nick),
        CommandSpec(name: "bans", usage: "/bans", summary: "list the current room's bans", argument: .text),
        CommandSpec(name: "invite", usage: "/invite nick [#room]", summary: "let nick join a room once, past +i, +k and +l (ops)", argument: .nick),
        CommandSpec(name: "mode", usage: "/mode [#room] [+i|-i|+k KEY|-k|+m|-m|+t|-t|+l N|-l|+o N|-o N|+v N|-v N|+b MASK|-b MASK|+r|-r …]", summary: "change a room's modes (several at once: +ok KEY bob); none: show them", argument: .room),
        CommandSpec(name: "op", usage: "/op nick", summary: "make nick an op of the current room (/mode +o)", argument: .nick),
        CommandSpec(name: "deop", usage: "/deop nick", summary: "take ops from nick (/mode -o)", argument: .nick),
        CommandSpec(name: "voice", usage: "/voice nick", summary: "let nick speak in a moderated room (/mode +v)", argument: .nick),
        CommandSpec(name: "devoice", usage: "/devoice nick", summary: "take voice from nick (/mode -v)", argument: .nick),
        CommandSpec(name: "key", usage: "/key KEY | -clear", summary: "set the current room's key, or clear it (/mode +k KEY, -k)", argument: .text),
        CommandSpec(name: "moderated", usage: "/moderated on|off", summary: "only ops and voiced members speak (/mode +m, -m)", argument: .text),
        CommandSpec(name: "topiclock", usage: "/topiclock on|off", summary: "only ops set the topic (/mode +t, -t)", argument: .text),
        CommandSpec(name: "kill", usage: "/kill nick [reason]", summary: "end nick's session (server operators)", argument: .nick),
        CommandSpec(name: "serverban", usage: "/serverban mask [reason]", summary: "ban a mask from the whole server (server operators)", argument: .text),
        CommandSpec(name: "serverunban", usage: "/serverunban mask", summary: "lift a server ban (server operators)", argument: .text),
        CommandSpec(name: "closeroom", usage: "/closeroom #room [reason]", summary: "close a room: kick everyone, let nobody in (server operators)", argument: .room),
        CommandSpec(name: "serverbans", usage: "/serverbans", summary: "list the server's bans (server operators)", argument: .text),
    ]
}

extension ModerationCommand {
    /// Parses the arguments `rest` of the command `name` (already resolved by `CommandSpec`);
    /// nil when `name` is not a moderation command. `usage` is the error for bad arguments.
    static func parse(name: String, rest: String, usage: CommandError) throws(CommandError) -> ModerationCommand? {
        let words = rest.split(whereSeparator: \.isWhitespace).map(String.init)
        // The reason of /kick, /ban, /kill …: the text after the first word, spaces inside kept.
        let afterFirst = words.isEmpty ? "" : String(rest.dropFirst(words[0].count).drop { $0.isWhitespace })
        func only(_ count: Int) throws(CommandError) { if words.count != count { throw usage } }
        func onOff() throws(CommandError) -> Bool {
            try only(1)
            switch words[0].lowercased() {
            case "on", "+": return true
            case "off", "-": return false
            default: throw usage
            }
        }

        switch name {
        case "kick":
            guard !words.isEmpty else { throw usage }
            return .kick(nick: try CommandParser.validNick(words[0]), reason: afterFirst)
        case "ban":
            guard !words.isEmpty else { throw usage }
            return .ban(mask: try banMask(words[0], serverWide: false), reason: afterFirst)
        case "unban":
            try only(1)
            return .unban(mask: try banMask(words[0], serverWide: false))
        case "bans":
            try only(0)
            return .listBans
        case "invite":
            guard words.count == 1 || words.count == 2 else { throw usage }
            let room = words.count == 2 ? try CommandParser.normalizedRoom(words[1]) : nil
            return .invite(nick: try CommandParser.validNick(words[0]), room: room)
        case "mode":
            var arguments = words[...]
            var room: String?
            if let first = arguments.first, first.hasPrefix("#") {
                room = try CommandParser.normalizedRoom(first)
                arguments = arguments.dropFirst()
            }
            return .mode(room: room, changes: try modeChanges(Array(arguments), usage: usage))
        case "op", "deop", "voice", "devoice":
            try only(1)
            let mode: RoomMode = name.hasSuffix("op") ? .op : .voice
            return .mode(room: nil, changes: [ModeChange(mode, on: !name.hasPrefix("de"), argument: try CommandParser.validNick(words[0]))])
        case "key":
            try only(1)
            if words[0] == "-clear" { return .mode(room: nil, changes: [ModeChange(.key, on: false)]) }
            return .mode(room: nil, changes: [try change(.key, on: true, argument: words[0], usage: usage)])
        case "moderated":
            return .mode(room: nil, changes: [ModeChange(.moderated, on: try onOff())])
        case "topiclock":
            return .mode(room: nil, changes: [ModeChange(.topicLock, on: try onOff())])
        case "kill":
            guard !words.isEmpty else { throw usage }
            return .kill(nick: try CommandParser.validNick(words[0]), reason: afterFirst)
        case "serverban":
            guard !words.isEmpty else { throw usage }
            return .serverBan(on: true, mask: try banMask(words[0], serverWide: true), reason: afterFirst)
        case "serverunban":
            try only(1)
            return .serverBan(on: false, mask: try banMask(words[0], serverWide: true), reason: "")
        case "closeroom":
            guard !words.isEmpty else { throw usage }
            return .serverBan(on: true, mask: "room:" + (try CommandParser.normalizedRoom(words[0])), reason: afterFirst)
        case "serverbans":
            try only(0)
            return .listServerBans
        default:
            return nil
        }
    }

    /// A ban mask as typed: `account:`, `nick:`, `address:` (and for server bans `room:`)
    /// pass through for the server to check; a bare nick becomes `nick:NICK`.
    static func banMask(_ typed: String, serverWide: Bool) throws(CommandError) -> String {
        let kinds = ["account:", "nick:", "address:"] + (serverWide ? ["room:"] : [])
        if let kind = kinds.first(where: { typed.lowercased().hasPrefix($0) }), typed.count > kind.count { return typed }
        guard ChatName.isValidNick(typed) else {
            throw .usage("a ban mask is nick:NICK, account:NAME, address:IP[/PREFIX]\(serverWide ? ", room:NAME" : ""), or a bare nick")
        }
        return "nick:" + typed
    }

    /// `+ok KEY bob`, `+k KEY +o bob`, `-i`: the letters in order, each taking its argument, if
    /// it has one, from the arguments in order (as IRC reads them).
    static func modeChanges(_ words: [String], usage: CommandError) throws(CommandError) -> [ModeChange] {
        var flags: [(Character, Bool)] = []
        var arguments: [String] = []
        for word in words {
            guard let sign = word.first, sign == "+" || sign == "-", word.count > 1 else {
                arguments.append(word)
                continue
            }
            var on = sign == "+"
            for character in word.dropFirst() {
                if character == "+" || character == "-" {
                    on = character == "+"
                } else {
                    flags.append((character, on))
                }
            }
        }
        var changes: [ModeChange] = []
        var nextArgument = arguments.makeIterator()
        for (letter, on) in flags {
            guard let mode = ModeChange.letters[letter] else { throw .usage("unknown mode \(letter): /mode takes i k m t l o v b r") }
            let takesArgument = [.op, .voice, .ban].contains(mode) || (on && (mode == .key || mode == .memberLimit))
            if !takesArgument {
                changes.append(ModeChange(mode, on: on))
                continue
            }
            guard let argument = nextArgument.next() else { throw usage }
            changes.append(try change(mode, on: on, argument: argument, usage: usage))
        }
        guard nextArgument.next() == nil else { throw usage }
        return changes
    }

    /// One change with its argument checked as far as the client can: nicks, a key's length, a
    /// limit's range; ban masks are checked by the server.
    private static func change(_ mode: RoomMode, on: Bool, argument: String, usage: CommandError) throws(CommandError) -> ModeChange {
        switch mode {
        case .op, .voice:
            return ModeChange(mode, on: on, argument: try CommandParser.validNick(argument))
        case .ban:
            return ModeChange(mode, on: on, argument: try banMask(argument, serverWide: false))
        case .key:
            guard (1...64).contains(argument.utf8.count) else { throw .usage("a room key is 1–64 bytes") }
            return ModeChange(mode, on: on, argument: argument)
        default:  // .memberLimit
            guard let limit = Int(argument), (1...1_000_000).contains(limit) else { throw .usage("a member limit is a number from 1 to 1000000") }
            return ModeChange(mode, on: on, argument: String(limit))
        }
    }
}
