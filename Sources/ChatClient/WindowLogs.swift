#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes each window's lines to `<directory>/<server>/<window>.log` (mode 0600, directories
/// 0700: they hold private conversations), one plain line each with the date and time in front.
///
/// Rotated by day: the first line of a later day moves the file aside as
/// `<window>.YYYY-MM-DD.log`, under the day of its last line, and no file is moved over another.
///
/// Each line once, in time order, across runs: a line that may have been logged before — a
/// room's backlog, which every start of the client shows again, or a catch-up's missed line —
/// is looked for in the file (the same stamp and text) and left out when it is there; otherwise
/// it is put in its place by time, before the lines stamped after it (the join that brought the
/// backlog). A line of an earlier day goes to that day's file when there is one. Only the last
/// `searchWindow` bytes are searched: an older line is taken to be there, or to predate the log.
/// A directory or file that cannot be written gives one note (the `failure`) and turns logging
/// off for the session, so chat goes on.
public struct WindowLogs {
    /// Where the per-server directories go.
    public let directory: String
    /// Why logging stopped, once it has; the caller shows it once.
    public private(set) var failure: String?
    /// The day each open log was last written on, to rotate when it changes.
    private var days: [String: String] = [:]
    /// The stamp of each open log's newest line: a line stamped after it is new, however it came.
    private var newest: [String: String] = [:]
    /// How much of the end of a file is searched for a line that may be there already: a room's
    /// backlog reaches back over the previous run's last lines, which are here.
    static let searchWindow = 65_536

    /// Logs under `directory` (created when the first line is written).
    public init(directory: String) {
        self.directory = directory
    }

    /// Appends `line` (plain text, no escape codes) stamped `stamp` (`2026-05-12 09:05:33`), to
    /// `window`'s log on `server`; `day` is the stamp's date, for rotation. `mayRepeat` for a
    /// line that may be in the log already (a backlog's or a catch-up's): it is written only if
    /// it is not, in its place by time. Returns false when logging failed now (`failure` says why).
    @discardableResult
    public mutating func write(_ line: String, stamp: String, day: String, window: String, server: String, mayRepeat: Bool = false) -> Bool {
        guard failure == nil else { return false }
        let folder = directory + "/" + Self.fileName(server)
        let path = folder + "/" + Self.fileName(window) + ".log"
        do {
            if days[path] == nil {
                try Self.makeDirectory(directory)
                try Self.makeDirectory(folder)
                let last = Self.lastStamp(of: path)
                days[path] = last.map { String($0.prefix(10)) } ?? day
                newest[path] = last
            }
            // Only a later day moves the file aside. A line of an earlier day (a room's backlog,
            // shown after today's join line) stays out of the way: moving the file aside then
            // would file today's lines under today's date, and the next line of today would move
            // the file back over the earlier day's, which rename replaces.
            if let last = days[path], day > last {
                let aside = folder + "/" + Self.fileName(window) + "." + last + ".log"
                // Never over a file already there (a clock set back): keep writing here instead.
                if access(aside, F_OK) != 0 {
                    _ = rename(path, aside)
                    newest[path] = nil
                }
                days[path] = day
            }
            let entry = stamp + " " + line
            if mayRepeat, let last = newest[path], stamp <= last {
                // An earlier day's line goes to that day's file, if it was moved aside.
                let aside = folder + "/" + Self.fileName(window) + "." + day + ".log"
                let target = day < (days[path] ?? day) && access(aside, F_OK) == 0 ? aside : path
                try Self.place(entry, stamp: stamp, in: target)
            } else {
                try Self.append(entry + "\n", to: path)
                if stamp > newest[path] ?? "" { newest[path] = stamp }
            }
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

    /// The stamp of the last line already in the file: its first nineteen characters.
    private static func lastStamp(of path: String) -> String? {
        guard let (lines, _, _) = tail(of: path, bytes: 65_536), let last = lines.last, last.count >= 19 else { return nil }
        return String(decoding: last.prefix(19), as: UTF8.self)
    }

    /// The whole lines among the last `bytes` bytes of the file, the offset of the first of
    /// them, and whether it is the file's first line; nil when the file is empty or missing.
    private static func tail(of path: String, bytes: Int) -> (lines: [ArraySlice<UInt8>], offset: Int, fromStart: Bool)? {
        var status = stat()
        guard stat(path, &status) == 0, status.st_size > 0 else { return nil }
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        let size = Int(status.st_size)
        let length = min(size, bytes)
        var buffer = [UInt8](repeating: 0, count: length)
        guard pread(descriptor, &buffer, length, off_t(size - length)) == length else { return nil }
        var start = 0
        if length < size {
            // The first line read is cut: it starts after the first line break.
            guard let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) else { return nil }
            start = newline + 1
        }
        let lines = buffer[start...].split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).dropLast(buffer.last == UInt8(ascii: "\n") ? 1 : 0)
        return (Array(lines), size - length + start, length == size)
    }

    /// Puts `entry`, stamped `stamp`, in its place by time in the file at `path`: after the last
    /// line stamped no later, unless the same line is there already. A line older than the part
    /// searched is left out: it is there, or older than the log.
    private static func place(_ entry: String, stamp: String, in path: String) throws(Failure) {
        guard let (lines, offset, fromStart) = tail(of: path, bytes: searchWindow) else {
            return try append(entry + "\n", to: path)
        }
        let wanted = Array(entry.utf8)
        let stampBytes = Array(stamp.utf8)
        if lines.contains(where: { $0.elementsEqual(wanted) }) { return }
        // The last line stamped no later than this one: stamps (`YYYY-MM-DD HH:MM:SS`) sort as text.
        guard let before = lines.lastIndex(where: { !stampBytes.lexicographicallyPrecedes($0.prefix(19)) }) else {
            guard fromStart else { return }
            return try insert(wanted, at: offset, in: path, rest: lines)
        }
        if before == lines.count - 1 { return try append(entry + "\n", to: path) }
        // The bytes after the line it goes behind, which move down to make room.
        let following = Array(lines[(before + 1)...])
        let at = offset + lines[...before].reduce(0) { $0 + $1.count + 1 }
        try insert(wanted, at: at, in: path, rest: following)
    }

    /// Writes `entry` and a line break at byte `at` of the file, then `rest` (the lines that were
    /// there, each with its line break) after it.
    private static func insert(_ entry: [UInt8], at: Int, in path: String, rest: [ArraySlice<UInt8>]) throws(Failure) {
        var bytes = entry + [UInt8(ascii: "\n")]
        for line in rest {
            bytes += line
            bytes.append(UInt8(ascii: "\n"))
        }
        let descriptor = open(path, O_WRONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw Failure("open") }
        defer { close(descriptor) }
        var written = 0
        while written < bytes.count {
            let count = bytes[written...].withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, off_t(at + written)) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { throw Failure("write") }
            written += count
        }
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
