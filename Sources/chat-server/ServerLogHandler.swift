import ArgumentParser
import Glibc
import Logging
import SocketCore

/// chat-server's log lines, on standard error: one `write(2)` each, so lines from several
/// threads never interleave.
///
/// - `text` (the default): `2026-11-20T12:00:01.234Z info client connected connection.id=7
///   client.nick=alice disconnect.reason="slow consumer: …"` — UTC with milliseconds, then
///   `key=value` pairs (logfmt), a value quoted when it holds a space, a quote, `=` or nothing.
/// - `json`: one object per line, `{"time":…,"level":…,"message":…,"connection.id":"7",…}`, for
///   log shippers.
///
/// Under systemd (stderr is the journal's stream, `JOURNAL_STREAM`), each line starts with its
/// syslog priority (`<6>` for info), which journald turns into the entry's priority
/// (`journalctl -p warning` then works), and the text format leaves out the time, which the
/// journal records itself.
///
/// The level is shared by every logger of the process and can change while it runs (SIGHUP
/// with `--config`): `setLevel(_:)`.
struct ServerLogHandler: LogHandler {
    /// How lines are written.
    enum Format: String, ExpressibleByArgument, CaseIterable, Sendable {
        /// `time level message key=value …`.
        case text
        /// One JSON object per line.
        case json
    }

    /// The level every handler logs at; changed by `setLevel(_:)`.
    private static let sharedLevel = Locked(Logger.Level.info)

    /// Sets the level of every logger in the process (the `--log-level` of a reload).
    static func setLevel(_ level: Logger.Level) { sharedLevel.withLock { $0 = level } }

    /// The level in force.
    static var level: Logger.Level { sharedLevel.withLock { $0 } }

    private let format: Format
    /// Whether standard error is the journal's stream: priority prefixes, no time in text.
    private let journald: Bool
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    /// A handler writing `format` lines; `journald` as `underJournald()` says.
    init(format: Format, journald: Bool) {
        self.format = format
        self.journald = journald
    }

    var logLevel: Logger.Level {
        get { Self.level }
        set { Self.setLevel(newValue) }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var fields = metadata
        if let provided = metadataProvider?.get() { fields.merge(provided) { _, new in new } }
        if let extra = event.metadata { fields.merge(extra) { _, new in new } }
        if let error = event.error { fields["error"] = "\(error)" }
        var line = journald ? "<\(Self.priority(event.level))>" : ""
        switch format {
        case .text:
            if !journald { line += Self.timestamp() + " " }
            line += "\(event.level) \(event.message)"
            for key in fields.keys.sorted() { line += " \(key)=\(Self.logfmt(Self.flatten(fields[key]!)))" }
        case .json:
            line += "{\"time\":\(Self.json(Self.timestamp())),\"level\":\(Self.json("\(event.level)")),\"message\":\(Self.json("\(event.message)"))"
            for key in fields.keys.sorted() { line += ",\(Self.json(key)):\(Self.json(Self.flatten(fields[key]!)))" }
            line += "}"
        }
        line += "\n"
        var bytes = Array(line.utf8)
        bytes.withUnsafeMutableBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = write(2, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0, errno == EINTR { continue }
                // A closed terminal or pipe: the line is lost, the server goes on.
                guard written > 0 else { return }
                offset += written
            }
        }
    }

    /// Whether standard error is connected to the journal (systemd sets `JOURNAL_STREAM` to the
    /// stream's `device:inode`; a child that inherited the variable but not the stream is not).
    static func underJournald() -> Bool {
        guard let value = getenv("JOURNAL_STREAM").map({ String(cString: $0) }) else { return false }
        let parts = value.split(separator: ":")
        var info = stat()
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]), fstat(2, &info) == 0 else { return false }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
    }

    /// syslog's priority for `level`, as journald reads it from a `<N>` prefix.
    static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    /// Now, in UTC, to the millisecond: `2026-11-20T12:00:01.234Z`.
    static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var seconds = now.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let millis = Int(now.tv_nsec / 1_000_000)
        let fraction = millis < 10 ? "00\(millis)" : millis < 100 ? "0\(millis)" : "\(millis)"
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)).\(fraction)Z"
    }

    /// A metadata value as one string (lists and dictionaries in swift-log's own rendering).
    static func flatten(_ value: Logger.Metadata.Value) -> String {
        switch value {
        case .string(let text): text
        case .stringConvertible(let convertible): convertible.description
        default: value.description
        }
    }

    /// `value` as logfmt writes it: bare when it is a plain word, else quoted with `"` and `\`
    /// escaped and control characters written as escapes, so that one entry stays one line.
    static func logfmt(_ value: String) -> String {
        let plain = !value.isEmpty && value.unicodeScalars.allSatisfy { $0.value > 0x20 && $0 != "\"" && $0 != "=" && $0 != "\\" && $0.value != 0x7F }
        return plain ? value : json(value)
    }

    /// `value` as a JSON string literal.
    static func json(_ value: String) -> String {
        var out = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 || scalar.value == 0x7F {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }
}
