import ChatProtocol
import SocketCore

/// What the config file (`~/.config/chat-client/config.toml`) sets, with its defaults; `/set`
/// changes the session's copy and `/save` writes it back.
///
/// ```toml
/// nick = "alice"                  # default: $USER
/// servers = ["127.0.0.1:7000"]    # tried in order, as --server
/// autojoin = ["#general", "#dev"]
/// timestamp_format = "%H:%M:%S"   # %H %M %S %d %m %Y
/// colours = true
/// buffer_lines = 2000             # lines each window keeps
/// highlight = ["deploy", "oncall"]
/// log = true                      # ~/.local/share/chat-client/logs/<server>/<window>.log
///
/// [tls]
/// mode = "ca"                     # off, system, ca or insecure
/// ca_file = "/etc/chat/ca.pem"
///
/// [aliases]
/// wc = "window close"
/// ```
public struct ClientSettings: Equatable, Sendable {
    /// `nick`: the nick to use when `--nick` is not given (nil: `$USER`).
    public var nick: String?
    /// `servers`: `HOST:PORT`s to try in order when no `--server` is given.
    public var servers: [String] = []
    /// `autojoin`: the rooms to join when no `--room` is given.
    public var autojoin: [String] = []
    /// `timestamp_format`: how `MessageRenderer` writes times.
    public var timestampFormat = "%H:%M"
    /// `colours` (or `colors`): false turns colour off, as `NO_COLOR` does.
    public var colours = true
    /// `buffer_lines`: the most lines each window keeps.
    public var bufferLines = 2000
    /// `highlight`: words that count as mentions besides the nick.
    public var highlight: [String] = []
    /// `merged_window`: a first window with every window's lines, as one stream.
    public var mergedWindow = false
    /// `log`: whether every window is logged (`WindowLogs`).
    public var log = false
    /// `log_directory`: where logs go instead of `~/.local/share/chat-client/logs`.
    public var logDirectory: String?
    /// `password_file`: as `--password-file`.
    public var passwordFile: String?
    /// `account`: as `--account`.
    public var account: String?
    /// `account_password_file`: as `--account-password-file`.
    public var accountPasswordFile: String?
    /// `[tls] mode`.
    public var tlsMode = TLSMode.off
    /// `[tls] ca_file`, for `mode = "ca"`.
    public var tlsCAFile: String?
    /// `[aliases]`: a name and the command line it stands for.
    public var aliases: [String: String] = [:]

    /// How the client speaks TLS, as the flags `--tls`, `--tls-ca` and `--tls-insecure` say.
    public enum TLSMode: String, Sendable, CaseIterable {
        case off, system, ca, insecure
    }

    /// The most lines a window may be set to keep.
    public static let maxBufferLines = 1_000_000

    /// The defaults.
    public init() {}

    /// The settings `/set` shows and changes, by name, in the order it lists them.
    public static let names = [
        "nick", "servers", "autojoin", "timestamp_format", "colours", "buffer_lines", "highlight", "merged_window", "log", "log_directory",
        "password_file", "account", "account_password_file",
    ]

    /// Settings from a config file's text; throws the first line that is wrong.
    public init(parsing text: String) throws(ConfigFile.ParseError) {
        self.init()
        var tlsModeLine = 1
        var colourLine: (key: String, line: Int)?
        for entry in try ConfigFile.parse(text, tables: ["tls", "aliases"]) {
            do throws(SettingError) {
                switch entry.table {
                case "":
                    if entry.key == "colours" || entry.key == "colors" {
                        // One setting by two spellings: both given would be one of them twice.
                        if let other = colourLine { throw SettingError("\(entry.key) is \(other.key) again (line \(other.line)): give one") }
                        colourLine = (entry.key, entry.line)
                    }
                    try set(entry.key, to: entry.value)
                case "tls":
                    switch (entry.key, entry.value) {
                    case ("mode", .string(let mode)):
                        guard let parsed = TLSMode(rawValue: mode) else {
                            throw SettingError("tls mode is one of " + TLSMode.allCases.map(\.rawValue).joined(separator: ", "))
                        }
                        tlsMode = parsed
                        tlsModeLine = entry.line
                    case ("ca_file", .string(let path)):
                        tlsCAFile = path
                    default:
                        throw SettingError("[tls] takes mode = \"off|system|ca|insecure\" and ca_file = \"path\"")
                    }
                case "aliases":
                    guard case .string(let expansion) = entry.value, !expansion.isEmpty else {
                        throw SettingError("an alias is name = \"command and arguments\"")
                    }
                    aliases[entry.key.lowercased()] = expansion
                default:
                    throw SettingError("unknown table [\(entry.table)] (the file has [tls] and [aliases])")
                }
            } catch {
                throw ConfigFile.ParseError(line: entry.line, reason: error.reason)
            }
        }
        if tlsMode == .ca, tlsCAFile == nil { throw ConfigFile.ParseError(line: tlsModeLine, reason: "[tls] mode = \"ca\" needs ca_file") }
    }

    /// Why a setting was refused.
    public struct SettingError: Error, Equatable, Sendable {
        /// What to tell the user.
        public let reason: String
        /// An error saying `reason`.
        public init(_ reason: String) { self.reason = reason }
    }

    /// Sets `name` from a value in the file's form.
    public mutating func set(_ name: String, to value: ConfigFile.Value) throws(SettingError) {
        switch (name, value) {
        // Names and addresses are checked here, so a bad one in the file is refused with its line
        // (and by /set), not later with the client half set up.
        case ("nick", .string(let text)):
            guard ChatName.isValidNick(text) else { throw SettingError(CommandError.invalidNick(text).description) }
            nick = text
        case ("servers", .array(let values)):
            let typed = try strings(values, name)
            for server in typed {
                do { _ = try ServerAddress(parsing: server) } catch { throw SettingError("servers: \(server): \(error)") }
            }
            servers = typed
        case ("autojoin", .array(let values)):
            let typed = try strings(values, name)
            for room in typed where (try? ChatName.normalizedRoom(room)) == nil {
                throw SettingError("autojoin: \(CommandError.invalidRoom(room).description)")
            }
            autojoin = typed
        case ("timestamp_format", .string(let text)): timestampFormat = text
        case ("colours", .boolean(let flag)), ("colors", .boolean(let flag)): colours = flag
        case ("buffer_lines", .integer(let count)):
            guard (1...Self.maxBufferLines).contains(count) else { throw SettingError("buffer_lines is 1 to \(Self.maxBufferLines)") }
            bufferLines = count
        case ("highlight", .array(let values)): highlight = try strings(values, name)
        case ("log", .boolean(let flag)): log = flag
        case ("merged_window", .boolean(let flag)): mergedWindow = flag
        case ("log_directory", .string(let path)): logDirectory = path
        case ("password_file", .string(let path)): passwordFile = path
        case ("account", .string(let name)):
            guard ChatName.isValidNick(name) else { throw SettingError("account: \(CommandError.invalidNick(name).description)") }
            account = name
        case ("account_password_file", .string(let path)): accountPasswordFile = path
        default:
            guard Self.names.contains(name) || name == "colors" else {
                throw SettingError("unknown setting \(name) (known: \(Self.names.joined(separator: ", ")))")
            }
            throw SettingError("\(name) takes \(Self.kind(of: name))")
        }
    }

    /// Sets `name` from what the user typed after `/set name`: words for a list, `on`/`off` for a
    /// flag.
    public mutating func set(_ name: String, typed: String) throws(SettingError) {
        let value: ConfigFile.Value
        switch Self.kind(of: name) {
        case "a list": value = .array(typed.split(whereSeparator: { $0 == " " || $0 == "," }).map { .string(String($0)) })
        case "on or off":
            switch typed.lowercased() {
            case "on", "true", "yes": value = .boolean(true)
            case "off", "false", "no": value = .boolean(false)
            default: throw SettingError("\(name) is on or off")
            }
        case "a whole number":
            guard let number = Int(typed) else { throw SettingError("\(name) is a whole number") }
            value = .integer(number)
        default: value = .string(typed)
        }
        try set(name, to: value)
    }

    /// `name`'s value as `/set` shows it.
    public func shown(_ name: String) -> String? {
        value(of: name).map(ConfigFile.render)
    }

    private func value(of name: String) -> ConfigFile.Value? {
        switch name {
        case "nick": nick.map(ConfigFile.Value.string)
        case "servers": .array(servers.map(ConfigFile.Value.string))
        case "autojoin": .array(autojoin.map(ConfigFile.Value.string))
        case "timestamp_format": .string(timestampFormat)
        case "colours", "colors": .boolean(colours)
        case "buffer_lines": .integer(bufferLines)
        case "highlight": .array(highlight.map(ConfigFile.Value.string))
        case "log": .boolean(log)
        case "merged_window": .boolean(mergedWindow)
        case "log_directory": logDirectory.map(ConfigFile.Value.string)
        case "password_file": passwordFile.map(ConfigFile.Value.string)
        case "account": account.map(ConfigFile.Value.string)
        case "account_password_file": accountPasswordFile.map(ConfigFile.Value.string)
        default: nil
        }
    }

    /// The file `/save` writes: every setting that has a value, then [tls] and [aliases].
    public func rendered() -> String {
        var lines = ["# chat-client settings (docs/CLIENT.md); written by /save"]
        for name in Self.names {
            if let value = value(of: name) { lines.append("\(name) = \(ConfigFile.render(value))") }
        }
        if tlsMode != .off {
            lines += ["", "[tls]", "mode = \(ConfigFile.render(.string(tlsMode.rawValue)))"]
            if let tlsCAFile { lines.append("ca_file = \(ConfigFile.render(.string(tlsCAFile)))") }
        }
        if !aliases.isEmpty {
            lines += ["", "[aliases]"]
            for (name, expansion) in aliases.sorted(by: { $0.key < $1.key }) {
                lines.append("\(name) = \(ConfigFile.render(.string(expansion)))")
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    private static func kind(of name: String) -> String {
        switch name {
        case "servers", "autojoin", "highlight": "a list"
        case "colours", "colors", "log", "merged_window": "on or off"
        case "buffer_lines": "a whole number"
        default: "a string"
        }
    }

    private func strings(_ values: [ConfigFile.Value], _ name: String) throws(SettingError) -> [String] {
        try values.map { value throws(SettingError) in
            guard case .string(let text) = value else { throw SettingError("\(name) is a list of strings") }
            return text
        }
    }
}
