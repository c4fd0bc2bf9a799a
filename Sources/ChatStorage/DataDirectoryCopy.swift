import CSQLite
import Glibc

/// An online, consistent copy of a data directory (`chat-server backup`), and the check of one
/// (`chat-server check`).
///
/// What a consistent copy of a running server's directory needs, and how it is had:
/// - Every SQLite file (`rooms.sqlite3`, `accounts.sqlite`, `moderation.sqlite`) through SQLite's
///   online backup API (`sqlite3_backup_*`), one step under one read transaction: a snapshot of
///   each as of one commit, whatever the server writes meanwhile (WAL mode lets it write on).
///   A copy of the files with `cp` could take the database from one moment and its log from
///   another.
/// - The journal's records the database has not taken in yet: they are acknowledged events that
///   only the journal files hold. The files are read *before* the database is copied. A record
///   is in the files until a hand-off has written it to the database (and synced it), so each one
///   is in the files read or in the database copied after; one in both is harmless, because
///   applying a journal record skips the events a room already has (`RoomDatabase.apply`). The
///   records read are applied to the copy (a room's record only where it is newer than the copy's
///   own, so a topic never goes back), which then needs no journal.
///
/// Nothing in the source is written or locked: the server keeps its lock and serves on.
public enum DataDirectoryCopy {
    /// What a backup copied.
    public struct Summary: Sendable {
        /// The SQLite files copied, by name, with their size in bytes.
        public var databases: [(name: String, bytes: Int)] = []
        /// Journal files read, and the records in them.
        public var journalFiles = 0
        public var journalRecords = 0
        /// Journal records whose events or room records the copy did not have yet.
        public var journalRecordsApplied = 0
    }

    /// Copies the data directory at `source` into `destination` (created if missing; it must hold
    /// no data yet, and is locked while the copy is made, so no server starts on it half-made).
    /// Throws a `StorageError` that names the file and the reason.
    public static func backup(from source: String, to destination: String) throws(StorageError) -> Summary {
        var sourceInfo = stat()
        guard stat(source + "/" + RoomDatabase.fileName, &sourceInfo) == 0 else {
            throw StorageError("\(source) is not a chat-server data directory: \(source)/\(RoomDatabase.fileName): \(errnoText())")
        }
        // What others could have changed is not what to keep: refused as a server would refuse it.
        try DataDirectory.checkPermissions(of: source)
        let target = try DataDirectory(path: destination, rootMayUseOthers: true)
        defer { target.unlock() }
        let present = try entries(of: destination).filter { $0 != "lock" }
        guard present.isEmpty else {
            throw StorageError("\(destination) is not empty (\(present.prefix(3).joined(separator: ", "))): back up into a new directory")
        }
        var summary = Summary()
        // The journal first: see the type's comment for why this order loses nothing.
        var records: [RoomJournal.Record] = []
        for number in RoomJournal.files(in: source) {
            let path = RoomJournal.path(of: number, in: source)
            do {
                let read = try RoomJournal.read(path)
                records += read.records
                summary.journalFiles += 1
            } catch {
                // Taken into the database (and deleted) between the listing and the read: the
                // database copied below has its records.
                if access(path, F_OK) != 0 { continue }
                throw error
            }
        }
        summary.journalRecords = records.count
        for name in try databaseFiles(in: source) {
            let bytes = try copyDatabase(from: source + "/" + name, to: destination + "/" + name)
            summary.databases.append((name, bytes))
        }
        summary.journalRecordsApplied = try apply(records, to: destination + "/" + RoomDatabase.fileName)
        for (name, _) in summary.databases { sync(destination + "/" + name) }
        sync(destination)
        return summary
    }

    /// The SQLite files of a data directory: every `*.sqlite` and `*.sqlite3` (not their `-wal`
    /// and `-shm` companions), in name order.
    public static func databaseFiles(in directory: String) throws(StorageError) -> [String] {
        try entries(of: directory).filter { $0.hasSuffix(".sqlite") || $0.hasSuffix(".sqlite3") }.sorted()
    }

    /// The names in `directory` (not `.` and `..`).
    static func entries(of directory: String) throws(StorageError) -> [String] {
        guard let names = DirectoryEntries.names(in: directory) else { throw StorageError("cannot read \(directory): \(errnoText())") }
        return names
    }

    /// Copies the database at `source` into a new file at `destination` with SQLite's online
    /// backup, in one step (one read transaction: a snapshot); returns the copy's size.
    private static func copyDatabase(from source: String, to destination: String) throws(StorageError) -> Int {
        do throws(SQLiteError) {
            let from = try SQLiteDatabase(path: source, mode: .readWrite)
            // The server may stop meanwhile: this connection must not checkpoint its log when it
            // is the last to close. It writes nothing else.
            csqlite_no_checkpoint_on_close(from.handle)
            from.busyTimeout = .seconds(10)
            let to = try SQLiteDatabase(path: destination, mode: .readWriteCreate)
            guard let backup = sqlite3_backup_init(to.handle, "main", from.handle, "main") else {
                throw SQLiteError(operation: "backup of \(source)", code: sqlite3_errcode(to.handle), message: String(cString: sqlite3_errmsg(to.handle)))
            }
            var result = SQLITE_OK
            // Busy or locked: the server holds a lock for a moment (a checkpoint's restart); try
            // again, for up to 10 s in all.
            for _ in 0..<1_000 {
                result = sqlite3_backup_step(backup, -1)
                guard result == SQLITE_BUSY || result == SQLITE_LOCKED else { break }
                usleep(10_000)
            }
            let finished = sqlite3_backup_finish(backup)
            guard result == SQLITE_DONE, finished == SQLITE_OK else {
                let code = result == SQLITE_DONE ? finished : result
                throw SQLiteError(operation: "backup of \(source)", code: code, message: String(cString: sqlite3_errstr(code)))
            }
            // The copy keeps no log of its own: everything in the file itself.
            try to.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        } catch {
            throw StorageError("cannot copy \(source) to \(destination): \(error.message)", sqlite: error)
        }
        var info = stat()
        return stat(destination, &info) == 0 ? Int(info.st_size) : 0
    }

    /// Applies the journal's `records` to the copied rooms database at `path`: every event the
    /// copy lacks, and each room's record where it is newer than the copy's (a later `seq`); then
    /// marks the copy as one (`RoomDatabase.markBackupCopy`). Returns how many records added
    /// something.
    private static func apply(_ records: [RoomJournal.Record], to path: String) throws(StorageError) -> Int {
        let database = try RoomDatabase(path: path, durability: .always, create: false)
        do throws(SQLiteError) {
            var stored: [String: UInt64] = [:]
            let rows = try database.database.prepare("SELECT name, last_seq FROM rooms")
            while try rows.step() { stored[rows.text(0)] = rows.uint64(1) }
            rows.reset()
            var applied = 0
            let filtered = records.map { record in
                let rooms = record.rooms.filter { room in stored[room.name].map { room.lastSeq >= $0 } ?? true }
                let newChunks = record.chunks.filter { chunk in chunk.lastSeq > (stored[chunk.room] ?? 0) }
                if rooms.count > 0 || !newChunks.isEmpty { applied += 1 }
                return RoomJournal.Record(rooms: rooms, chunks: record.chunks)
            }
            if !filtered.isEmpty { try database.apply(filtered) }
            // A server started on the copy gives every room a new epoch: clients may have seen
            // events after this backup, whose seqs the restored rooms will give again.
            try database.markBackupCopy()
            try database.database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return applied
        } catch {
            throw StorageError("cannot apply the journal to \(path): \(error.message)", sqlite: error)
        }
    }

    /// What `check` found in a data directory.
    public struct Report: Sendable {
        /// Each SQLite file: its name and `PRAGMA integrity_check`'s verdict (`ok` when sound).
        public var databases: [(name: String, verdict: String)] = []
        /// Each journal file: its name, its records, and whether its last record is whole.
        public var journalFiles: [(name: String, records: Int, intact: Bool)] = []
        /// Problems found, a sentence each; empty when the directory is sound.
        public var problems: [String] = []
        /// What is worth knowing but not wrong: a journal whose last record was cut short by a
        /// power loss (a commit never acknowledged; the server keeps the records before it), a
        /// directory others may list (`DataDirectory.warning`).
        public var notes: [String] = []
    }

    /// Checks the data directory at `directory`, which no server may be using (it is locked for
    /// the check): each SQLite file's integrity (`PRAGMA integrity_check`, nothing written), the rooms
    /// database's schema version, and that every journal file reads to its end.
    public static func check(_ directory: String) throws(StorageError) -> Report {
        var info = stat()
        guard stat(directory, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
            throw StorageError("\(directory) is not a directory")
        }
        let held = try DataDirectory(path: directory, rootMayUseOthers: true)
        defer { held.unlock() }
        var report = Report()
        if let warning = held.warning { report.notes.append(warning) }
        let names = try databaseFiles(in: directory)
        if !names.contains(RoomDatabase.fileName) { report.problems.append("no \(RoomDatabase.fileName): not a data directory, or an empty one") }
        for name in names {
            let path = directory + "/" + name
            do throws(SQLiteError) {
                // Read-write (nothing is written; the directory is locked): a read-only connection
                // to a log-mode database leaves its -wal and -shm files behind.
                let database = try SQLiteDatabase(path: path, mode: .readWrite)
                let verdict = try database.text("PRAGMA integrity_check") ?? "no answer"
                report.databases.append((name, verdict))
                if verdict != "ok" { report.problems.append("\(name): \(verdict)") }
                if name == RoomDatabase.fileName {
                    let version = try database.integer("PRAGMA user_version") ?? 0
                    if version > RoomDatabase.schemaVersion {
                        report.problems.append("\(name): schema version \(version), written by a newer chat-server")
                    }
                }
            } catch {
                report.databases.append((name, error.message))
                report.problems.append("\(name): \(error.message)")
            }
        }
        for number in RoomJournal.files(in: directory) {
            let path = RoomJournal.path(of: number, in: directory)
            let name = String(path.split(separator: "/").last ?? "")
            do {
                let read = try RoomJournal.read(path)
                report.journalFiles.append((name, read.records.count, read.intact))
                if !read.intact { report.notes.append("\(name): its last record is cut short (never acknowledged; the records before it are kept)") }
            } catch {
                report.problems.append("\(name): \(error.message)")
            }
        }
        return report
    }

    /// fsyncs `path` (a file, or a directory for the names in it).
    private static func sync(_ path: String) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        fsync(descriptor)
        close(descriptor)
    }

    private static func errnoText() -> String {
        let code = errno
        return "\(String(cString: strerror(code))) (errno \(code))"
    }
}
