import ChatProtocol

/// What the user asked for with one line of input: a slash command or text for the current room.
///
/// Names are already checked and room names already in wire form (`#General` → `general`), so
/// the session can turn a command into frames without validating again.
public enum ClientCommand: Equatable, Sendable {
    /// Plain text for the current room (a line starting with `//` sends the rest after one `/`).
    case say(String)
    /// `/me text`: an action in the current room.
    case emote(String)
    /// `/join #room`: enter a room and make it the current one.
    case join(room: String)
    /// `/join #room KEY`: enter a room that has a key (version 4); the key is kept for rejoins.
    case joinWithKey(room: String, key: String)
    /// `/part [#room]`: leave a room, the current one when none is given (in a query window:
    /// close it).
    case part(room: String?)
    /// `/switch #room|nick`: talk in another room we are in, or an open query.
    case switchRoom(String)
    /// `/msg nick text`: a direct message.
    case tell(nick: String, text: String)
    /// `/nick new`: change our nick.
    case changeNick(String)
    /// `/who [#room]`: who is in a room, the current one when none is given.
    case who(room: String?)
    /// `/rooms`: list every room on the server.
    case listRooms
    /// `/topic`: show the current room's topic.
    case showTopic
    /// `/topic text`: set the current room's topic; `/topic -clear` sets it to empty.
    case setTopic(String)
    /// `/history [count]`: fetch the current room's most recent messages.
    case history(count: UInt32)
    /// `/query nick`: open (or go to) a direct-message conversation with `nick`.
    case query(String)
    /// `/away [text]`: mark ourselves away with `text`, or back when it is empty.
    case away(String)
    /// `/ignore [nick]`: hide `nick`'s messages, or list who is ignored.
    case ignore(String?)
    /// `/unignore nick`: show `nick`'s messages again.
    case unignore(String)
    /// `/quit [reason]`: leave the server.
    case quit(reason: String)
    /// `/help [command]`: show the command list, or one command's usage.
    case help(topic: String?)
    /// `/switch name`: go to an open room or query window by its name.
    case switchWindow(String)
    /// `/window list|close|N|name|goto active`.
    case window(WindowTarget)
    /// `/clear`: empty the current window.
    case clear
    /// `/lastlog text`: the current window's lines that contain `text`.
    case lastlog(String)
    /// `/set [name [value]]`: list the settings, show one, or change it for this session.
    case set(name: String?, value: String?)
    /// `/save`: write the settings back to the config file.
    case save
    /// `/reconnect`: drop the connection and connect again at once.
    case reconnect
    /// `/server HOST:PORT`: connect to another server.
    case server(String)
    /// `/disconnect`: leave the server and stay offline until `/reconnect`.
    case disconnect
    /// `/whois nick`: which of our rooms `nick` is in.
    case whois(String)
    /// `/register`: make the current nick an account (version 3), with the account password.
    case register
    /// `/login [account]`: log in to an account (version 3) and take its nick.
    case login(account: String?)
    /// `/password`: change the password of the account the client is logged in to (version 3).
    case changePassword
    /// `/unregister`: delete the account the client is logged in to (version 3); the nick stays,
    /// a guest's.
    case dropAccount
    /// A room moderation command (version 4): `/kick`, `/mode`, `/op`, `/kill` …
    /// (ModerationCommands.swift).
    case moderate(ModerationCommand)

    /// What `/window` acts on.
    public enum WindowTarget: Equatable, Sendable {
        /// Every window, one a line.
        case list
        /// Close the current window (leave the room, or close the query).
        case close
        /// Go to window number n (from 1).
        case number(Int)
        /// Go to the window called this (`#dev`, `dev`, `bob`).
        case named(String)
        /// Go to the window with activity, a mention first (`/window goto active`, Alt-A).
        case active
    }
}

/// Why a line of input is not a valid command; the description is shown to the user as is.
public enum CommandError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The line starts with `/` and names no known command.
    case unknownCommand(String)
    /// The command's arguments are missing or malformed; carries the command's usage line.
    case usage(String)
    /// A nick argument breaks the nick rules.
    case invalidNick(String)
    /// A room argument breaks the room rules.
    case invalidRoom(String)

    /// What to tell the user about the line they typed.
    public var description: String {
        switch self {
        case .unknownCommand(let name): return "unknown command /\(name) (try /help)"
        case .usage(let usage): return "usage: \(usage)"
        case .invalidNick(let nick):
            return "\"\(nick)\" is not a valid nick (1–\(ChatName.maxNickLength) of A–Z a–z 0–9 _-[]\\`^{}|, not starting with a digit or -)"
        case .invalidRoom(let room):
            return "\"\(room)\" is not a valid room (1–\(ChatName.maxRoomLength) of a–z 0–9 _ -, after an optional #)"
        }
    }
}

/// One slash command as listed by `/help` and offered by tab completion.
public struct CommandSpec: Sendable, Equatable {
    /// The name without its slash, e.g. `join`.
    public let name: String
    /// How to call it, e.g. `/join #room`.
    public let usage: String
    /// One sentence on what it does.
    public let summary: String
    /// What its first argument names, which decides what Tab completes there.
    public let argument: ArgumentKind

    /// What a command's first argument is.
    public enum ArgumentKind: Sendable, Equatable {
        /// Free text, or nothing.
        case text
        /// A room name.
        case room
        /// A nick.
        case nick
        /// A command name (for `/help`).
        case command
        /// A window: a room or a nick.
        case window
    }

    /// What `/window` takes before a window's name, for Tab.
    public static let windowWords = ["list", "close", "goto"]

    /// The short forms irssi users type, and what they stand for.
    public static let shortForms = ["j": "join", "q": "query", "w": "window", "win": "window", "list": "rooms", "n": "names", "p": "part"]

    /// Every command, in the order `/help` lists them.
    public static let all: [CommandSpec] = [
        CommandSpec(name: "join", usage: "/join #room [key]", summary: "enter a room (created if new) and talk there; key: the room's key (+k)", argument: .room),
        CommandSpec(name: "part", usage: "/part [#room]", summary: "leave a room, the current one by default (or close a query)", argument: .room),
        CommandSpec(name: "switch", usage: "/switch #room|nick", summary: "talk in another room you are in, or an open query", argument: .room),
        CommandSpec(name: "msg", usage: "/msg nick text", summary: "send a direct message", argument: .nick),
        CommandSpec(name: "query", usage: "/query nick", summary: "talk to nick in private, in a window of its own", argument: .nick),
        CommandSpec(name: "me", usage: "/me text", summary: "describe an action: * you waves", argument: .text),
        CommandSpec(name: "nick", usage: "/nick newnick", summary: "change your nick", argument: .text),
        CommandSpec(name: "who", usage: "/who [#room]", summary: "list who is in a room", argument: .room),
        CommandSpec(name: "names", usage: "/names [#room]", summary: "the nick list of a room (as /who)", argument: .room),
        CommandSpec(name: "whois", usage: "/whois nick", summary: "which of your rooms nick is in", argument: .nick),
        CommandSpec(name: "rooms", usage: "/rooms", summary: "list every room on the server, one a line with its topic", argument: .text),
        CommandSpec(name: "topic", usage: "/topic [text | -clear]", summary: "show, set or clear the current room's topic", argument: .text),
        CommandSpec(name: "history", usage: "/history [count]", summary: "show the current room's recent messages (default 20)", argument: .text),
        CommandSpec(name: "away", usage: "/away [message]", summary: "mark yourself away (no message: back)", argument: .text),
        CommandSpec(name: "ignore", usage: "/ignore [nick]", summary: "hide a nick's messages (no nick: list)", argument: .nick),
        CommandSpec(name: "unignore", usage: "/unignore nick", summary: "show a nick's messages again", argument: .nick),
        CommandSpec(name: "window", usage: "/window N|name|list|close", summary: "go to a window, list them, or close this one; /window goto active (Alt-A) goes to the one with activity, mentions first", argument: .window),
        CommandSpec(name: "clear", usage: "/clear", summary: "empty the current window", argument: .text),
        CommandSpec(name: "lastlog", usage: "/lastlog text", summary: "show the current window's lines containing text", argument: .text),
        CommandSpec(name: "set", usage: "/set [name [value]]", summary: "list, show or change a setting for this session", argument: .text),
        CommandSpec(name: "save", usage: "/save", summary: "write the settings to the config file", argument: .text),
        CommandSpec(name: "register", usage: "/register", summary: "make your nick an account (the password asked twice at a hidden prompt, or from the account password file); logged in again at every reconnect", argument: .text),
        CommandSpec(name: "login", usage: "/login [account]", summary: "log in to an account and take its nick (default: the account password file's, else the last one, else the nick you started with)", argument: .nick),
        CommandSpec(name: "password", usage: "/password", summary: "change your account's password: the current one, then the new one twice, at a hidden prompt (even with a password file)", argument: .text),
        CommandSpec(name: "unregister", usage: "/unregister", summary: "delete your account, after a yes and its password (asked even with a password file); you keep the nick as a guest", argument: .text),
    ] + moderation + [
        CommandSpec(name: "reconnect", usage: "/reconnect", summary: "connect again now", argument: .text),
        CommandSpec(name: "server", usage: "/server HOST:PORT", summary: "move to another server", argument: .text),
        CommandSpec(name: "disconnect", usage: "/disconnect", summary: "leave the server and stay offline (/reconnect)", argument: .text),
        CommandSpec(name: "quit", usage: "/quit [reason]", summary: "leave the server (also Ctrl-D, or Ctrl-C twice)", argument: .text),
        CommandSpec(name: "help", usage: "/help [command]", summary: "show this list, or one command's usage", argument: .command),
    ]

    /// The command called `name` (without slash, any letter case, or a short form), if there is one.
    public static func named(_ name: String) -> CommandSpec? {
        let key = shortForms[name.lowercased()] ?? name.lowercased()
        return all.first { $0.name == key }
    }
}

/// Turns one line of user input into a `ClientCommand`.
public enum CommandParser {
    /// The number of messages `/history` asks for when no count is given.
    public static let defaultHistoryCount: UInt32 = 20
    /// The reason `/quit` sends when none is given.
    public static let defaultQuitReason = "leaving"

    /// Whether `line` may hold a password typed where it should not be — `/register secret`,
    /// `/login alice secret` — so the editor keeps it out of the history file (the command itself
    /// refuses it). Passwords are typed at the hidden prompt those commands open instead.
    public static func holdsSecret(_ line: String) -> Bool {
        let words = line.split(whereSeparator: \.isWhitespace)
        guard let first = words.first, first.hasPrefix("/"), !first.hasPrefix("//") else { return false }
        switch first.dropFirst().lowercased() {
        case "register", "password", "unregister": return words.count > 1
        case "login": return words.count > 2
        default: return false
        }
    }

    /// Parses `line`; returns nil for a blank line, which does nothing. `aliases` are the
    /// user's own commands (`wc = "window close"`): `/wc args` is read as `/window close args`.
    public static func parse(_ line: String, aliases: [String: String] = [:]) throws(CommandError) -> ClientCommand? {
        if line.allSatisfy(\.isWhitespace) { return nil }
        guard line.hasPrefix("/") else { return .say(line) }
        // "//" escapes a leading slash, as in irssi, so "//etc" can be said.
        if line.hasPrefix("//") { return .say(String(line.dropFirst())) }

        var body = line.dropFirst()
        var name = String(body.prefix { !$0.isWhitespace })
        if let expansion = aliases[name.lowercased()] {
            // One level only, so an alias that names itself cannot loop.
            let expanded = (expansion.hasPrefix("/") ? String(expansion.dropFirst()) : expansion) + body.dropFirst(name.count)
            body = Substring(expanded)
            name = String(body.prefix { !$0.isWhitespace })
        }
        let rest = trimmed(body.dropFirst(name.count))
        guard let spec = CommandSpec.named(name) else { throw .unknownCommand(name) }
        let usage = CommandError.usage(spec.usage)
        if let command = try ModerationCommand.parse(name: spec.name, rest: rest, usage: usage) { return .moderate(command) }

        switch spec.name {
        case "join":
            let words = rest.split(whereSeparator: \.isWhitespace).map(String.init)
            if words.count == 2 { return .joinWithKey(room: try normalizedRoom(words[0]), key: words[1]) }
            guard let room = singleWord(rest) else { throw usage }
            return .join(room: try normalizedRoom(room))
        case "part":
            if rest.isEmpty { return .part(room: nil) }
            guard let room = singleWord(rest) else { throw usage }
            return .part(room: try normalizedRoom(room))
        case "switch":
            guard let target = singleWord(rest) else { throw usage }
            if !target.hasPrefix("#"), ChatName.isValidNick(target) { return .switchWindow(target) }
            return .switchRoom(try normalizedRoom(target))
        case "msg":
            let nick = String(rest.prefix { !$0.isWhitespace })
            let text = trimmedLeading(rest.dropFirst(nick.count))
            guard !nick.isEmpty, !text.isEmpty else { throw usage }
            return .tell(nick: try validNick(nick), text: text)
        case "me":
            guard !rest.isEmpty else { throw usage }
            return .emote(rest)
        case "nick":
            guard let nick = singleWord(rest) else { throw usage }
            return .changeNick(try validNick(nick))
        case "who":
            if rest.isEmpty { return .who(room: nil) }
            guard let room = singleWord(rest) else { throw usage }
            return .who(room: try normalizedRoom(room))
        case "names":
            if rest.isEmpty { return .who(room: nil) }
            guard let room = singleWord(rest) else { throw usage }
            return .who(room: try normalizedRoom(room))
        case "whois":
            guard let nick = singleWord(rest) else { throw usage }
            return .whois(try validNick(nick))
        case "rooms":
            guard rest.isEmpty else { throw usage }
            return .listRooms
        case "window":
            let words = rest.split(whereSeparator: \.isWhitespace).map(String.init)
            // irssi's `/window goto N|name|active` is `/window N|name` and Alt-A.
            let target = words.count == 2 && words[0].lowercased() == "goto" ? words[1] : rest
            guard let word = singleWord(target) else { throw usage }
            if target != rest, word.lowercased() == "active" { return .window(.active) }
            switch word.lowercased() {
            case "list": return .window(.list)
            case "close": return .window(.close)
            default:
                if let number = Int(word) {
                    guard number >= 1 else { throw usage }
                    return .window(.number(number))
                }
                return .window(.named(word))
            }
        case "clear":
            return .clear
        case "lastlog":
            guard !rest.isEmpty else { throw usage }
            return .lastlog(rest)
        case "set":
            if rest.isEmpty { return .set(name: nil, value: nil) }
            let setting = String(rest.prefix { !$0.isWhitespace })
            let value = trimmedLeading(rest.dropFirst(setting.count))
            return .set(name: setting, value: value.isEmpty ? nil : value)
        case "save":
            return .save
        case "register":
            guard rest.isEmpty else { throw usage }
            return .register
        case "password":
            guard rest.isEmpty else { throw usage }
            return .changePassword
        case "unregister":
            guard rest.isEmpty else { throw usage }
            return .dropAccount
        case "login":
            if rest.isEmpty { return .login(account: nil) }
            guard let account = singleWord(rest) else { throw usage }
            return .login(account: try validNick(account))
        case "reconnect":
            return .reconnect
        case "server":
            guard let address = singleWord(rest) else { throw usage }
            return .server(address)
        case "disconnect":
            return .disconnect
        case "topic":
            if rest.isEmpty { return .showTopic }
            return .setTopic(rest == "-clear" ? "" : rest)
        case "history":
            if rest.isEmpty { return .history(count: defaultHistoryCount) }
            guard let count = UInt32(rest), count > 0 else { throw usage }
            return .history(count: count)
        case "query":
            guard let nick = singleWord(rest) else { throw usage }
            return .query(try validNick(nick))
        case "away":
            return .away(rest)
        case "ignore":
            if rest.isEmpty { return .ignore(nil) }
            guard let nick = singleWord(rest) else { throw usage }
            return .ignore(try validNick(nick))
        case "unignore":
            guard let nick = singleWord(rest) else { throw usage }
            return .unignore(try validNick(nick))
        case "quit":
            return .quit(reason: rest.isEmpty ? defaultQuitReason : rest)
        default:  // "help"
            if rest.isEmpty { return .help(topic: nil) }
            guard let topic = singleWord(rest) else { throw usage }
            return .help(topic: topic.hasPrefix("/") ? String(topic.dropFirst()) : topic)
        }
    }

    private static func trimmed(_ text: Substring) -> String {
        String(text.drop { $0.isWhitespace }.reversed().drop { $0.isWhitespace }.reversed())
    }

    private static func trimmedLeading(_ text: Substring) -> String {
        String(text.drop { $0.isWhitespace })
    }

    /// `text` if it is one non-empty word, else nil.
    private static func singleWord(_ text: String) -> String? {
        text.isEmpty || text.contains(where: \.isWhitespace) ? nil : text
    }

    static func normalizedRoom(_ input: String) throws(CommandError) -> String {
        do { return try ChatName.normalizedRoom(input) } catch { throw .invalidRoom(input) }
    }

    static func validNick(_ nick: String) throws(CommandError) -> String {
        guard ChatName.isValidNick(nick) else { throw .invalidNick(nick) }
        return nick
    }
}
