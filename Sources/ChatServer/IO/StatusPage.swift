/// The status page (`/status`, `chat-server --status`): one screen of plain text that tells an
/// operator whether the server is healthy, and where to look if not. Room names appear here,
/// for people; they are never metric labels.
public enum StatusPage {
    /// The durable mode's file sizes, read at request time.
    public struct Files: Sendable {
        /// `rooms.sqlite3`, in bytes.
        public var database: Int
        /// Its write-ahead log, in bytes.
        public var log: Int
        /// Journal files in the data directory (one while the database keeps up).
        public var journalFiles = 0

        /// The sizes and count read at request time.
        public init(database: Int, log: Int, journalFiles: Int = 0) {
            self.database = database
            self.log = log
            self.journalFiles = journalFiles
        }
    }

    /// The page for `snapshot`, with the process's `statistics` and the store's `files` if known.
    public static func render(_ snapshot: ServerSnapshot, process statistics: ProcessStatistics?, files: Files?) -> String {
        var lines: [String] = []
        func row(_ title: String, _ text: String) { lines.append(title.padding(to: 13) + text) }
        lines.append("chat-server: \(snapshot.mode.rawValue) mode, up \(duration(snapshot.uptimeSeconds))")
        let problems = snapshot.problems
        row("health", problems.isEmpty ? "ok" : "UNHEALTHY: " + problems.joined(separator: "; "))
        let connections = snapshot.connections
        row(
            "connections",
            "\(connections.chatting) chatting, \(connections.hello) before hello, \(connections.tlsHandshake) in TLS handshake, "
                + "\(connections.closing) closing, \(connections.refused) refused and lingering; "
                + "\(snapshot.connectionsAccepted) accepted since start")
        row("rooms", "\(snapshot.rooms) (\(snapshot.memberships) memberships)")
        row(
            "most members",
            snapshot.busiestRooms.isEmpty ? "-" : snapshot.busiestRooms.map { "\($0.name) \($0.members)" }.joined(separator: ", "))
        row(
            "most traffic",
            snapshot.liveliestRooms.isEmpty
                ? "- (no events since the last snapshot)"
                : snapshot.liveliestRooms.map { "\($0.name) \(rate($0.eventsPerSecond))/s" }.joined(separator: ", "))
        let budget = snapshot.budget
        let limits = Dictionary(budget.limits, uniquingKeysWith: { first, _ in first })
        row(
            "memory",
            "budget \(bytes(budget.total)): "
                + budget.used.map { part, used in "\(part) \(bytes(used)) of \(bytes(limits[part] ?? 0))" }.joined(separator: ", "))
        if let storage = snapshot.storage {
            let failing = storage.problems
            var text = failing.isEmpty ? "ok" : "FAILING (\(failing.joined(separator: "; ")))"
            if storage.failure != nil { text += "; room events refused" }
            text += ", \(storage.databasePath)"
            if let files { text += ", database \(bytes(files.database)), log \(bytes(files.log))" }
            row("storage", text)
            let failures = storage.parts.filter { $0.failures > 0 }.map { "\($0.part.rawValue) \($0.failures)" }
            var journal = "\(bytes(storage.journalBacklogBytes)) not yet in the database (\(storage.journalBacklogRecords) records)"
            if let files, storage.journalDirectory != nil { journal += ", \(files.journalFiles) files" }
            row("journal", journal)
            row("write errors", failures.isEmpty ? "none since start" : failures.joined(separator: ", ") + " since start")
        } else if snapshot.mode == .memory {
            row("storage", "none (--no-persistence): rooms live in memory only")
        }
        if let cluster = snapshot.cluster {
            row(
                "cluster",
                "node \(cluster.nodeID), link to Redis "
                    + (cluster.linkUp ? "up" : "DOWN (\(cluster.linkProblem ?? "connecting")); room events refused"))
        }
        if let statistics {
            row(
                "process",
                "RSS \(bytes(statistics.residentBytes)), CPU \(rate(statistics.cpuSeconds)) s, "
                    + "\(statistics.openDescriptors) of \(statistics.maxDescriptors) descriptors")
        }
        return lines.joined(separator: "\n")
    }

    /// `seconds` as `3d 4h 05m 06s`, leaving out leading zero units.
    static func duration(_ seconds: Double) -> String {
        let total = Int(seconds)
        let (days, hours, minutes, secs) = (total / 86_400, total / 3_600 % 24, total / 60 % 60, total % 60)
        if days > 0 { return "\(days)d \(hours)h \(pad(minutes))m \(pad(secs))s" }
        if hours > 0 { return "\(hours)h \(pad(minutes))m \(pad(secs))s" }
        if minutes > 0 { return "\(minutes)m \(pad(secs))s" }
        return "\(secs)s"
    }

    /// A byte count in the largest binary unit that keeps it at 1 or more, one decimal.
    static func bytes(_ count: Int) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(count)
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(count) B" : "\(rate(value)) \(units[unit])"
    }

    /// `value` with one decimal.
    static func rate(_ value: Double) -> String {
        let tenths = Int((value * 10).rounded())
        return "\(tenths / 10).\(tenths % 10)"
    }

    private static func pad(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
}

extension String {
    fileprivate func padding(to width: Int) -> String {
        count >= width ? self + " " : self + String(repeating: " ", count: width - count)
    }
}
