#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes each window's lines to `<directory>/<server>/<window>.log` (mode 0600, directories
/// 0700: they hold private conversations), one plain line each with the date and time in front.
///
/// Rotated by day: the first line of a later day moves the file aside as
/// `<window>.YYYY-MM-DD.log`, under the day of its last line; a line of an earlier day (a
/// backlog) is written to the file at hand with its own date, and no file is moved over another. A directory or file that cannot be written gives one note (the
/// `failure`) and turns logging off for the session, so chat goes on.
public struct WindowLogs {
    /// Where the per-server directories go.
    public let directory: String
    /// Why logging stopped, once it has; the caller shows it once.
    public private(set) var failure: String?
    /// The day each open log was last written on, to rotate when it changes.
    private var days: [String: String] = [:]

    /// Logs under `directory` (created when the first line is written).
    public init(directory: String) {
        self.directory = directory
    }

    /// Appends `line` (plain text, no escape codes) stamped `stamp` (`2026-05-12 09:05:33`), to
    /// `window`'s log on `server`; `day` is the stamp's date, for rotation. Returns false when
    /// logging failed now (`failure` says why).
    @discardableResult
    public mutating func write(_ line: String, stamp: String, day: String, window: String, server: String) -> Bool {
        guard failure == nil else { return false }
        let folder = directory + "/" + Self.fileName(server)
        let path = folder + "/" + Self.fileName(window) + ".log"
        do {
            if days[path] == nil {
                try Self.makeDirectory(directory)
                try Self.makeDirectory(folder)
                days[path] = Self.lastDay(of: path) ?? day
            }
            // Only a later day moves the file aside. A line of an earlier day (a room's backlog,
            // shown after today's join line) goes into the file at hand with its own stamp: moving
            // the file aside then would file today's lines under today's date, and the next line
            // of today would move the file back over the earlier day's, which rename replaces.
            if let last = days[path], day > last {
                let aside = folder + "/" + Self.fileName(window) + "." + last + ".log"
                // Never over a file already there (a clock set back): keep writing here instead.
                if access(aside, F_OK) != 0 { _ = rename(path, aside) }
                days[path] = day
            }
            try Self.append(stamp + " " + line + "\n", to: path)
            return true
        } catch {
            failure = "cannot write the log \(path): \(error.reason); logging is off for this session"
            return false
        }
    }

    private struct Failure: Error {
        let reason: String
        init(_ call: String) { reason = "\(call): " + String(cString: strerror(errno)) }
    }

    /// A file name for a server or window: `/` and leading dots cannot escape the directory.
    static func fileName(_ name: String) -> String {
        let safe = String(name.map { $0 == "/" || $0 == "\0" ? "_" : $0 })
        return safe.hasPrefix(".") ? "_" + safe.dropFirst() : safe
    }

    /// Creates `path` and the directories above it that are missing (`mkdir -p`).
    private static func makeDirectory(_ path: String) throws(Failure) {
        var prefix = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            prefix += "/" + component
            if mkdir(prefix, 0o700) != 0, errno != EEXIST { throw Failure("mkdir") }
        }
    }

    /// The day of the last line already in the file: its first ten characters.
    private static func lastDay(of path: String) -> String? {
        var status = stat()
        guard stat(path, &status) == 0, status.st_size > 0 else { return nil }
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        // The last line is at most one message; 64 KiB holds it.
        let length = min(Int(status.st_size), 65_536)
        var bytes = [UInt8](repeating: 0, count: length)
        guard pread(descriptor, &bytes, length, off_t(Int(status.st_size) - length)) == length else { return nil }
        let lines = bytes.split(separator: UInt8(ascii: "\n"))
        guard let last = lines.last, last.count >= 10 else { return nil }
        return String(decoding: last.prefix(10), as: UTF8.self)
    }

    private static func append(_ text: String, to path: String) throws(Failure) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw Failure("open") }
        defer { close(descriptor) }
        _ = fchmod(descriptor, 0o600)
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
            if written < 0, errno == EINTR { continue }
            guard written > 0 else { throw Failure("write") }
            bytes = bytes.dropFirst(written)
        }
    }
}
