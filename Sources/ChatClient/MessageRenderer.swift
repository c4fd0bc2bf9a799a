import ChatProtocol
import Foundation

/// Turns a `ChatEvent` into the line the user sees: a timestamp, the room, and the event in a
/// style of its own (a stable colour per nick; presence, errors and direct messages distinct).
///
/// With `colour` off the line is plain text with no escape codes, for `NO_COLOR`, pipes and
/// scripts. Text from the server is passed through `TerminalText.sanitized` either way.
public struct MessageRenderer: Sendable {
    /// Whether to emit ANSI colour and style codes.
    public let colour: Bool
    /// The nick to highlight as our own, and whose mentions are highlighted.
    public var ownNick: String?
    /// The room the user is looking at, when lines from other rooms are to be set apart (they
    /// show their room in brackets, `[#dev]`, and dimmed); nil shows every room alike.
    public var currentRoom: String?
    /// Whether lines from rooms other than `currentRoom` are set apart at all.
    public var marksOtherRooms = false
    /// How times are written: `%H` `%M` `%S` (hour, minute, second), `%d` `%m` `%Y` (day, month,
    /// year), `%%`; anything else as it is.
    public var timestampFormat = "%H:%M"
    /// Words highlighted like our nick (the `highlight` setting).
    public var highlightWords: [String] = []
    /// Whether lines carry `TerminalText.indentMark` where their text starts, so that rows cut
    /// from them (`TerminalText.rows`) continue under the text, as irssi's do. Off for pipes,
    /// whose lines are not cut.
    public var marksIndent = false
    /// The zone times are shown in; nil for the C library's local time.
    private let calendar: Calendar?

    /// A renderer that shows times in `timeZone`, or when it is nil in local time as the C
    /// library has it (`localtime_r`), the time `date` shows in the same shell.
    ///
    /// Local time is the C library's, not Foundation's `TimeZone.current`: Foundation reads only
    /// a zone name from `TZ` and ignores the POSIX forms, so `TZ=:Europe/Paris` and
    /// `TZ=CET-1CEST,M3.5.0,M10.5.0/3` left the client on UTC while the shell was not, and it
    /// reads `TZ=GMT+5` as five hours east where POSIX (and `date`) means five hours west.
    public init(colour: Bool, ownNick: String? = nil, timeZone: TimeZone? = nil) {
        self.colour = colour
        self.ownNick = ownNick
        calendar = timeZone.map { zone in
            var calendar = Calendar(identifier: .gregorian)
            calendar.timeZone = zone
            return calendar
        }
    }

    /// Whether a client should colour its output: only on a terminal, and never when the
    /// `NO_COLOR` environment variable is set to anything non-empty (https://no-color.org).
    public static func wantsColour(isTerminal: Bool, environment: [String: String]) -> Bool {
        isTerminal && (environment["NO_COLOR"] ?? "").isEmpty && environment["TERM"] != "dumb"
    }

    /// The line for `event`, without a trailing newline. `showingRoom` false leaves out the
    /// room's name, for lines drawn in the room's own window, where it would be said on every
    /// line; the merged window, pipes and lines shown elsewhere name it.
    public func render(_ event: ChatEvent, showingRoom: Bool = true) -> String {
        let room: (String) -> String? = { showingRoom ? $0 : nil }
        switch event {
        case let .message(name, time, sender, text, _):
            return line(time, room: room(name), "<\(nick(sender))> " + mark + body(text, from: sender))
        case let .action(name, time, sender, text, _):
            return line(time, room: room(name), "\(style(.bold, "*")) \(nick(sender)) " + mark + body(text, from: sender))
        case let .direct(time, sender, recipient, text, outgoing):
            let marker = outgoing ? "-> *\(clean(recipient))*" : "*\(clean(sender))*"
            return line(time, room: nil, "\(style(.direct, marker)) " + mark + (outgoing ? clean(text) : style(.mention, clean(text))))
        case let .marker(name, time, text):
            return line(time, room: room(name), style(.notice, "— " + mark + "\(clean(text)) —"))
        case let .joined(name, time, who):
            return line(time, room: room(name), style(.presence, "-!- " + mark + "\(clean(who)) joined"))
        case let .left(name, time, who):
            return line(time, room: room(name), style(.presence, "-!- " + mark + "\(clean(who)) left"))
        case let .quit(name, time, who, reason):
            let why = reason.isEmpty ? "" : " (\(clean(reason)))"
            return line(time, room: room(name), style(.presence, "-!- " + mark + "\(clean(who)) quit\(why)"))
        case let .nickChanged(name, time, old, new):
            return line(time, room: room(name), style(.presence, "-!- " + mark + "\(clean(old)) is now known as \(clean(new))"))
        case let .topic(name, time, setBy, text):
            let body = text.isEmpty ? "\(clean(setBy)) cleared the topic" : "topic: \(clean(text)) (set by \(clean(setBy)))"
            return line(time, room: room(name), style(.presence, "-!- " + mark + body))
        case let .members(name, time, nicks):
            let names = nicks.map(roleNick).joined(separator: " ")
            return line(time, room: room(name), "\(style(.presence, "-!- " + mark + "members (\(nicks.count)):")) \(names)")
        case let .moderation(name, time, text):
            return line(time, room: room(name), style(.presence, "-!- " + mark + clean(text)))
        case let .kick(name, time, text):
            // A kick is news, not presence: it stands out where joins and parts are dim.
            return line(time, room: room(name), style(.kick, "-!- " + mark + clean(text)))
        case let .roomList(time, rooms):
            if rooms.isEmpty { return line(time, room: nil, style(.notice, "-- no rooms yet; /join #room creates one")) }
            // One room a line, so a long list and long topics stay readable; the display splits
            // the text at the line breaks.
            let width = rooms.map { $0.name.count }.max() ?? 0
            let list = rooms.map { info in
                let name = "#" + info.name + String(repeating: " ", count: width - info.name.count)
                // "1 member" is padded to line its topic up with the others', not at a line's end.
                let members = info.memberCount == 1 ? (info.topic.isEmpty ? "1 member" : "1 member ") : "\(info.memberCount) members"
                return line(time, room: nil, style(.notice, "-- \(name)  \(members)") + (info.topic.isEmpty ? "" : "  \(clean(info.topic))"))
            }
            let count = rooms.count == 1 ? "1 room" : "\(rooms.count) rooms"
            return ([line(time, room: nil, style(.notice, "-- \(count):"))] + list).joined(separator: "\n")
        case let .notice(time, text):
            return line(time, room: nil, style(.notice, "-- " + mark + indented(text)))
        case let .error(time, text):
            return line(time, room: nil, style(.error, "!! " + mark + clean(text)))
        }
    }

    /// A nick from a member list, in its own colour, after its role mark (`@` op, `+` voiced),
    /// which is not part of the nick and so does not change its colour.
    private func roleNick(_ entry: String) -> String {
        guard let mark = entry.first, mark == "@" || mark == "+" else { return nick(entry) }
        return String(mark) + nick(String(entry.dropFirst()))
    }

    /// `nick`, sanitized, in its own colour; our own nick is bold as well.
    public func nick(_ nick: String) -> String {
        let name = clean(nick)
        guard colour else { return name }
        let own = ownNick.map { ChatName.nickKey($0) == ChatName.nickKey(nick) } ?? false
        return "\u{1B}[\(own ? "1;" : "")\(Self.colourCode(for: nick))m\(name)\u{1B}[0m"
    }

    /// The ANSI foreground code for `nick`: the same for every run and every client, and the
    /// same for nicks that differ only in letter case.
    public static func colourCode(for nick: String) -> Int {
        // FNV-1a, because Swift's Hasher is seeded per process and colours must not change.
        var hash: UInt32 = 2_166_136_261
        for byte in ChatName.nickKey(nick).utf8 {
            hash = (hash ^ UInt32(byte)) &* 16_777_619
        }
        return nickPalette[Int(hash % UInt32(nickPalette.count))]
    }

    // Red is kept for errors and magenta for direct messages; the rest read well on dark and
    // light backgrounds.
    private static let nickPalette = [32, 33, 34, 36, 92, 93, 94, 96]

    private enum Style: String {
        case bold = "1"
        case dim = "2"
        case presence = "2;37"
        case direct = "1;35"
        case kick = "1;91"
        case mention = "1;33"
        case notice = "36"
        case error = "1;31"
        case time = "90"
    }

    private func style(_ style: Style, _ text: String) -> String {
        colour ? "\u{1B}[\(style.rawValue)m\(text)\u{1B}[0m" : text
    }

    private func clean(_ text: String) -> String { TerminalText.sanitized(text) }

    /// The indent mark, when lines carry one.
    private var mark: String { marksIndent ? String(TerminalText.indentMark) : "" }

    /// A notice of the client's own, sanitized; a tab in it marks where its continuation rows
    /// start instead (`/help` lines its descriptions up that way), after the first tab only.
    private func indented(_ text: String) -> String {
        guard let tab = text.firstIndex(of: "\t") else { return clean(text) }
        let rest = text[text.index(after: tab)...]
        guard marksIndent else { return clean(String(text[..<tab]) + rest) }
        // The mark placed before the line's text gives way to this later one (`TerminalText.rows`
        // indents under the last mark of a line's first row).
        return clean(String(text[..<tab])) + String(TerminalText.indentMark) + clean(String(rest))
    }

    /// A message's text, highlighted when it mentions our nick (and someone else wrote it).
    private func body(_ text: String, from sender: String) -> String {
        guard let ownNick, ChatName.nickKey(sender) != ChatName.nickKey(ownNick),
            ClientSession.mentions(text, nick: ownNick) || highlightWords.contains(where: { ClientSession.mentions(text, word: $0) })
        else { return clean(text) }
        return style(.mention, clean(text))
    }

    private func line(_ time: UInt64, room: String?, _ body: String) -> String {
        let stamp = style(.time, timestamp(time))
        guard let room else { return "\(stamp) \(body)" }
        if marksOtherRooms, room != currentRoom {
            return "\(stamp) \(style(.dim, "[#" + clean(room) + "]")) \(body)"
        }
        return "\(stamp) \(style(.dim, "#" + clean(room))) \(body)"
    }

    /// `time` in `timestampFormat` (`HH:MM` by default), in the renderer's time zone.
    public func timestamp(_ time: UInt64) -> String {
        format(time, timestampFormat)
    }

    /// `time` written in `pattern`: `%H` `%M` `%S` `%d` `%m` `%Y` and `%%`.
    public func format(_ time: UInt64, _ pattern: String) -> String {
        let parts = civilTime(time)
        func two(_ value: Int) -> String { (value < 10 ? "0" : "") + String(value) }
        var out = ""
        var percent = false
        for character in pattern {
            if percent {
                percent = false
                switch character {
                case "H": out += two(parts.hour)
                case "M": out += two(parts.minute)
                case "S": out += two(parts.second)
                case "d": out += two(parts.day)
                case "m": out += two(parts.month)
                case "Y": out += String(parts.year)
                case "%": out += "%"
                default: out += "%" + String(character)
                }
            } else if character == "%" {
                percent = true
            } else {
                out.append(character)
            }
        }
        return out
    }

    /// The calendar day `time` falls on, as a number that grows by one a day.
    public func day(of time: UInt64) -> Int {
        let parts = civilTime(time)
        return Self.daysSinceEpoch(year: parts.year, month: parts.month, day: parts.day)
    }

    /// The date and time of `time` (milliseconds since 1970) on the wall clock of the zone.
    private func civilTime(_ time: UInt64) -> (year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) {
        if let calendar {
            let parts = calendar.dateComponents(
                [.year, .month, .day, .hour, .minute, .second], from: Date(timeIntervalSince1970: Double(time) / 1000))
            return (parts.year ?? 0, parts.month ?? 0, parts.day ?? 0, parts.hour ?? 0, parts.minute ?? 0, parts.second ?? 0)
        }
        var seconds = time_t(time / 1000)
        var parts = tm()
        guard localtime_r(&seconds, &parts) != nil else { return (1970, 1, 1, 0, 0, 0) }
        return (Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec))
    }

    /// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (Howard Hinnant's
    /// `days_from_civil`), so days are counted the same in any zone.
    static func daysSinceEpoch(year: Int, month: Int, day: Int) -> Int {
        let year = month <= 2 ? year - 1 : year
        let era = (year >= 0 ? year : year - 399) / 400
        let yearOfEra = year - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The line that marks a new day in a window: `-- day changed to 2026-05-12 (Tuesday)`.
    public func dayChange(_ time: UInt64) -> String {
        // 1970-01-01 was a Thursday. English names whatever the locale, as the rest of the
        // client's text is.
        let weekday = ["Thursday", "Friday", "Saturday", "Sunday", "Monday", "Tuesday", "Wednesday"][((day(of: time) % 7) + 7) % 7]
        return style(.notice, "-- day changed to \(format(time, "%Y-%m-%d")) (\(weekday))")
    }
}
