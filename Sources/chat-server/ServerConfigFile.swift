import ConfigFormat
import Glibc

/// `chat-server --config FILE`: the serving flags, written as `key = value` lines of the strict
/// TOML subset the client's config file uses (`ConfigFile`), a key per flag under its own name:
///
/// ```
/// # /etc/chat-server/chat-server.toml
/// host = "::"
/// max-clients = 20000
/// max-memory = "1G"
/// rate-limit = 20.5
/// no-rate-limits = false
/// admin-account = ["root", "ops"]
/// ```
///
/// How it is applied: each entry becomes the flag it names (`max-clients = 20000` is
/// `--max-clients 20000`, `no-persistence = true` is `--no-persistence`, a list repeats its
/// flag), placed before the command line's own flags, so that ArgumentParser — which keeps the
/// last value of a flag given twice — lets the command line win; a list given on the command
/// line replaces the file's. Every value is then checked by the same parser and `validate()` as a
/// flag, so the file can say nothing the command line could not. An error found there names the
/// file's line when a flag it depends on came from the file (`ChatServerTool.entry(behind:…)`).
///
/// Why this way, not a second set of settings with a loader of their own: one definition of
/// each setting (its flag, its help, its default, its check), so the file cannot drift from
/// `--help`; and the client's grammar, so a user learns one file format (docs/ARCHITECTURE.md).
struct ServerConfigFile {
    /// The file's path, as given.
    let path: String
    /// Its entries, in file order.
    let entries: [ConfigFile.Entry]
    /// The keys whose flag is given once per value (a list, or a single value of one).
    private let lists: Set<String>

    /// Why the file cannot be used: the line (0 for the file as a whole) and the reason.
    struct Problem: Error, CustomStringConvertible {
        var path: String
        var line: Int
        var reason: String
        /// `FILE:LINE: reason`, as compilers say it.
        var description: String { line > 0 ? "\(path):\(line): \(reason)" : "\(path): \(reason)" }
    }

    /// What a key of the file sets: a flag with a value, a switch, or a flag given once per value.
    enum Kind {
        case option, flag, list
    }

    /// Keys that make no sense in the file: they say which file, or ask for something other than
    /// serving.
    static let refused: Set<String> = ["config", "check-config", "status", "help", "version"]

    /// Reads and parses `path`; throws a `Problem` naming the line for anything it does not take:
    /// a syntax error, a table, an unknown key, a value of the wrong kind.
    init(path: String, settings: [String: Kind]) throws(Problem) {
        self.path = path
        guard let text = Self.read(path) else {
            throw Problem(path: path, line: 0, reason: "cannot read it: \(String(cString: strerror(errno)))")
        }
        let entries: [ConfigFile.Entry]
        do {
            entries = try ConfigFile.parse(text, tables: [], decimals: true)
        } catch {
            // The grammar's sentence lists the tables a file has; this one has none.
            let reason = error.reason.hasPrefix("unknown table")
                ? String(error.reason.prefix { $0 != "(" }.reversed().drop { $0 == " " }.reversed())
                    + ": the settings are top-level `name = value` lines"
                : error.reason
            throw Problem(path: path, line: error.line, reason: reason)
        }
        for entry in entries {
            guard !Self.refused.contains(entry.key) else {
                throw Problem(path: path, line: entry.line, reason: "\(entry.key) cannot be set in the config file")
            }
            guard let kind = settings[entry.key] else {
                throw Problem(path: path, line: entry.line, reason: "unknown setting \(entry.key) (the settings are the flags of `chat-server --help`, without their dashes)")
            }
            switch (kind, entry.value) {
            case (.flag, .boolean), (.option, .string), (.option, .integer), (.option, .decimal), (.list, .array), (.list, .string):
                break
            case (.flag, _):
                throw Problem(path: path, line: entry.line, reason: "\(entry.key) is true or false")
            case (.list, _):
                throw Problem(path: path, line: entry.line, reason: "\(entry.key) is a list of names, [\"a\", \"b\"]")
            case (.option, _):
                throw Problem(path: path, line: entry.line, reason: "\(entry.key) takes a value: a \"string\" or a number")
            }
            if case .array(let values) = entry.value, values.contains(where: { if case .array = $0 { true } else if case .boolean = $0 { true } else { false } }) {
                throw Problem(path: path, line: entry.line, reason: "\(entry.key) is a list of names or numbers")
            }
        }
        self.entries = entries
        lists = Set(entries.map(\.key).filter { settings[$0] == .list })
    }

    /// The flags the file stands for, to be placed before `commandLine` (whose flags win); a
    /// list the command line gives too is left out (the command line's replaces it), and so is
    /// `leftOut`, if given (to tell whether an error depends on it: `ChatServerTool.entry(behind:…)`).
    func arguments(before commandLine: [String], leavingOut leftOut: ConfigFile.Entry? = nil) -> [String] {
        var arguments: [String] = []
        for entry in entries where entry != leftOut {
            let flag = "--" + entry.key
            switch entry.value {
            case .boolean(let on):
                if on { arguments.append(flag) }
            case .array(let values):
                guard !Self.names(flag, in: commandLine) else { continue }
                for value in values { arguments += [flag, Self.text(value)] }
            default:
                // A list's single value is replaced by the command line's, as a whole list is.
                if lists.contains(entry.key), Self.names(flag, in: commandLine) { continue }
                arguments += [flag, Self.text(entry.value)]
            }
        }
        return arguments
    }

    /// The entry an error `message` of ArgumentParser or `validate()` names: the first of the
    /// file's keys the message names as a flag (`'--max-memory <SIZE>'`, `--tls-cert and …`) that
    /// the command line does not give too (then the command line's value was the one refused).
    func blame(_ message: String, commandLine: [String]) -> ConfigFile.Entry? {
        var best: (entry: ConfigFile.Entry, at: String.Index)?
        for entry in entries where !Self.names("--" + entry.key, in: commandLine) {
            guard let found = Self.flagRange("--" + entry.key, in: message) else { continue }
            if best.map({ found.lowerBound < $0.at }) ?? true { best = (entry, found.lowerBound) }
        }
        return best?.entry
    }

    /// Whether `arguments` give `flag` (`--flag value` or `--flag=value`).
    static func names(_ flag: String, in arguments: [String]) -> Bool {
        arguments.contains { $0 == flag || $0.hasPrefix(flag + "=") }
    }

    /// Where `flag` appears in `message` as a whole flag (not the start of a longer one).
    private static func flagRange(_ flag: String, in message: String) -> Range<String.Index>? {
        var start = message.startIndex
        while start < message.endIndex {
            if message[start...].hasPrefix(flag) {
                let end = message.index(start, offsetBy: flag.count)
                let next = end < message.endIndex ? message[end] : " "
                if !(next.isLetter || next.isNumber || next == "-") { return start..<end }
            }
            start = message.index(after: start)
        }
        return nil
    }

    /// A value as its flag's argument.
    private static func text(_ value: ConfigFile.Value) -> String {
        switch value {
        case .string(let text): text
        case .integer(let number): String(number)
        case .decimal(let number): String(number)
        case .boolean(let flag): flag ? "true" : "false"
        case .array: ConfigFile.render(value)
        }
    }

    /// The whole file, or nil if it cannot be read (`errno` says why). No Foundation: chat-server
    /// links none.
    private static func read(_ path: String) -> String? {
        guard let file = fopen(path, "r") else { return nil }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = fread(&chunk, 1, chunk.count, file)
            bytes += chunk[0..<count]
            if count < chunk.count { break }
            // A config file is small; anything this large is a mistake.
            guard bytes.count < 1 << 20 else {
                errno = EFBIG
                return nil
            }
        }
        guard ferror(file) == 0 else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }
}
