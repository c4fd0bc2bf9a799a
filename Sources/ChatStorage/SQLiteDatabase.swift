import CSQLite
import Glibc

/// A failed SQLite call: what was being done, SQLite's own message and its extended result code.
public struct SQLiteError: Error, Equatable, CustomStringConvertible {
    /// What failed, e.g. `open /var/lib/chat/rooms.sqlite3` or `commit`.
    public var operation: String
    /// SQLite's extended result code (`SQLITE_FULL` is 13, `SQLITE_IOERR_WRITE` 778 …).
    public var code: Int32
    /// SQLite's message for it (`database or disk is full`).
    public var message: String

    /// Describes a failure.
    public init(operation: String, code: Int32, message: String) {
        self.operation = operation
        self.code = code
        self.message = message
    }

    /// The primary result code: the extended code's low byte.
    public var primaryCode: Int32 { code & 0xFF }

    /// Whether the database or the disk it lives on is full.
    public var isFull: Bool { primaryCode == SQLITE_FULL }

    /// Whether another connection held the lock for longer than the busy timeout.
    public var isBusy: Bool { primaryCode == SQLITE_BUSY }

    /// One line: `commit failed: database or disk is full (SQLite error 13)`.
    public var description: String { "\(operation) failed: \(message) (SQLite error \(code))" }
}

/// One SQLite connection.
///
/// Owns its `sqlite3` handle and closes it in `deinit`; statements prepared on it keep it alive,
/// so it is closed only after the last of them is finalized. A connection is used by one queue at
/// a time: its owner says which.
///
/// `@unchecked Sendable`: it may be created on one queue and handed to the queue that uses it;
/// from then on that queue alone touches it (SQLite's own mutex also serializes calls).
public final class SQLiteDatabase: @unchecked Sendable {
    /// How a connection opens its file.
    public enum Mode: Sendable {
        /// Read and write, creating the file if it is missing.
        case readWriteCreate
        /// Read and write an existing file.
        case readWrite
        /// Read only.
        case readOnly
    }

    let handle: OpaquePointer
    /// The file, for error messages.
    public let path: String

    /// Opens `path`. SQLite reads the file lazily: a file that is not a database is only found
    /// out by the first statement.
    public init(path: String, mode: Mode) throws(SQLiteError) {
        var flags = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE
        switch mode {
        case .readWriteCreate: flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
        case .readWrite: flags |= SQLITE_OPEN_READWRITE
        case .readOnly: flags |= SQLITE_OPEN_READONLY
        }
        var handle: OpaquePointer?
        let result = sqlite3_open_v2(path, &handle, flags, nil)
        guard result == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(result))
            let code = handle.map { sqlite3_extended_errcode($0) } ?? result
            sqlite3_close(handle)
            throw SQLiteError(operation: "open \(path)", code: code, message: message)
        }
        self.handle = handle
        self.path = path
        // Another connection writing makes a writer wait (`busyTimeout`) before SQLite reports
        // SQLITE_BUSY; in WAL mode readers never wait for the writer. sqlite3_busy_timeout sleeps
        // 1, 2, 5, 10 … ms between tries, so a commit behind a lock held for 0.3 ms (a retention
        // step, a checkpoint's restart) would sleep 1–3 ms; the first tries here poll every 100 µs.
        sqlite3_busy_handler(
            handle,
            { context, tries in
                guard tries < Unmanaged<BusyWait>.fromOpaque(context!).takeUnretainedValue().tries else { return 0 }
                usleep(tries < BusyWait.polls ? 100 : 1_000)
                return 1
            }, Unmanaged.passUnretained(busyWait).toOpaque())
    }

    /// How long a write waits for another connection's write lock before it fails with
    /// SQLITE_BUSY: 5 s unless set. Polls every 100 µs for the first 5 ms, then every 1 ms.
    public var busyTimeout: Duration {
        get { busyWait.timeout }
        set { busyWait.timeout = newValue }
    }

    /// The busy handler's limit, read by the handler through SQLite's context pointer.
    private let busyWait = BusyWait()

    deinit {
        sqlite3_close(handle)
    }

    /// Runs `sql`, which may hold several statements and returns no rows that matter.
    public func execute(_ sql: String) throws(SQLiteError) {
        var errorMessage: UnsafeMutablePointer<CChar>?
        let result = sqlite3_exec(handle, sql, nil, nil, &errorMessage)
        guard result == SQLITE_OK else {
            let message = errorMessage.map { String(cString: $0) } ?? lastMessage
            sqlite3_free(errorMessage)
            throw SQLiteError(operation: Self.shortened(sql), code: sqlite3_extended_errcode(handle), message: message)
        }
    }

    /// Compiles `sql` (one statement) for repeated use.
    public func prepare(_ sql: String) throws(SQLiteError) -> SQLiteStatement {
        var statement: OpaquePointer?
        let result = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard result == SQLITE_OK, let statement else {
            throw error(Self.shortened(sql))
        }
        return SQLiteStatement(statement, database: self, sql: sql)
    }

    /// `BEGIN IMMEDIATE` and `COMMIT` prepared once (`prepareTransaction`), for a connection
    /// that commits often: `sqlite3_exec` parses them again each time, about 10,000
    /// instructions each, a tenth of a small commit on the event loop.
    public struct TransactionStatements {
        let begin: SQLiteStatement
        let commit: SQLiteStatement
    }

    /// Prepares `BEGIN IMMEDIATE` and `COMMIT` for `transaction(using:_:)`.
    public func prepareTransaction() throws(SQLiteError) -> TransactionStatements {
        TransactionStatements(begin: try prepare("BEGIN IMMEDIATE"), commit: try prepare("COMMIT"))
    }

    /// Runs `body` in one transaction (`BEGIN IMMEDIATE` … `COMMIT`, through `statements` when
    /// given), rolled back if it throws.
    public func transaction<Result>(
        using statements: TransactionStatements? = nil, _ body: () throws(SQLiteError) -> Result
    ) throws(SQLiteError) -> Result {
        if let statements { try statements.begin.run() } else { try execute("BEGIN IMMEDIATE") }
        do {
            let result = try body()
            if let statements { try statements.commit.run() } else { try execute("COMMIT") }
            return result
        } catch {
            // A failed COMMIT may already have rolled back; a second rollback fails harmlessly.
            sqlite3_exec(handle, "ROLLBACK", nil, nil, nil)
            throw error
        }
    }

    /// The first column of the first row of `sql`, as an integer (nil when there is no row).
    public func integer(_ sql: String) throws(SQLiteError) -> Int64? {
        let statement = try prepare(sql)
        return try statement.step() ? statement.int64(0) : nil
    }

    /// The first column of the first row of `sql`, as text (nil when there is no row).
    public func text(_ sql: String) throws(SQLiteError) -> String? {
        let statement = try prepare(sql)
        return try statement.step() ? statement.text(0) : nil
    }

    /// Rows changed by the last INSERT, UPDATE or DELETE.
    public var changes: Int { Int(sqlite3_changes(handle)) }

    // MARK: The write-ahead log

    /// How far a checkpoint got: the frames in the log when it began, and how many of them are
    /// in the database file now.
    public struct CheckpointProgress: Sendable, Equatable {
        /// Frames in the write-ahead log as the checkpoint saw it.
        public var logFrames: Int
        /// Frames of the log copied into the database file (`nBackfill`), this pass or earlier.
        public var copiedFrames: Int
        /// False when a `.restart` gave up waiting (SQLITE_BUSY): the log was not left ready
        /// to start over.
        public var completed: Bool
    }

    /// Which `sqlite3_wal_checkpoint_v2` mode to run.
    public enum CheckpointMode: Sendable {
        /// Copies what it can without waiting for anyone: commits go on meanwhile.
        case passive
        /// Waits (in the busy handler) for the write lock and holds it while it copies every
        /// frame, then waits for readers to leave the log, so the next commit starts it over.
        case restart
    }

    /// Runs a checkpoint of the main database on this connection.
    public func checkpoint(_ mode: CheckpointMode) throws(SQLiteError) -> CheckpointProgress {
        var logFrames: Int32 = 0
        var copiedFrames: Int32 = 0
        let result = sqlite3_wal_checkpoint_v2(
            handle, "main", mode == .passive ? SQLITE_CHECKPOINT_PASSIVE : SQLITE_CHECKPOINT_RESTART, &logFrames, &copiedFrames)
        // SQLITE_BUSY: another connection was checkpointing, or a restart gave up waiting; what
        // was copied is reported all the same.
        guard result == SQLITE_OK || result == SQLITE_BUSY else {
            throw error(mode == .passive ? "passive checkpoint" : "restart checkpoint")
        }
        return CheckpointProgress(logFrames: Int(logFrames), copiedFrames: Int(copiedFrames), completed: result == SQLITE_OK)
    }

    /// Turns SQLite's own checkpoints off on this connection and calls `observer` after each
    /// of its commits, on the committing thread, with the frames the log holds after it (once
    /// the commit's write lock is released). The call must not use this connection. Set once.
    public func observeCommits(_ observer: @escaping @Sendable (Int) -> Void) {
        let box = CommitObserver(observer)
        commitObserver = box
        // sqlite3_wal_hook replaces the hook that runs automatic checkpoints: no
        // wal_autocheckpoint=0 is needed, and none would survive this call.
        sqlite3_wal_hook(
            handle,
            { context, _, _, frames in
                Unmanaged<CommitObserver>.fromOpaque(context!).takeUnretainedValue().observer(Int(frames))
                return SQLITE_OK
            }, Unmanaged.passUnretained(box).toOpaque())
    }

    /// Kept alive here for the hook `observeCommits` installs, which holds it unretained.
    private var commitObserver: CommitObserver?

    var lastMessage: String { String(cString: sqlite3_errmsg(handle)) }

    /// The connection's last error, for `operation`.
    func error(_ operation: String) -> SQLiteError {
        SQLiteError(operation: operation, code: sqlite3_extended_errcode(handle), message: lastMessage)
    }

    /// The statement's first words, enough to tell which one failed.
    static func shortened(_ sql: String) -> String {
        let words = sql.split(whereSeparator: { $0 == " " || $0 == "\n" }).prefix(4)
        return words.joined(separator: " ")
    }
}

/// How long `SQLiteDatabase`'s busy handler keeps trying, counted in its tries.
private final class BusyWait {
    /// Tries 100 µs apart before the tries 1 ms apart.
    static let polls: Int32 = 50
    /// The tries that add up to `timeout`.
    private(set) var tries: Int32 = 0
    var timeout: Duration = .seconds(5) {
        didSet { tries = Self.tries(for: timeout) }
    }

    init() { tries = Self.tries(for: timeout) }

    private static func tries(for timeout: Duration) -> Int32 {
        let micros = timeout / .microseconds(1)
        let polled = min(Double(polls), micros / 100)
        return Int32(polled + max(0, (micros - polled * 100) / 1_000))
    }
}

/// What `SQLiteDatabase.observeCommits` calls, boxed for SQLite's context pointer.
private final class CommitObserver {
    let observer: @Sendable (Int) -> Void
    init(_ observer: @escaping @Sendable (Int) -> Void) { self.observer = observer }
}

/// A prepared statement: bind parameters (1-based), step through rows, read columns (0-based),
/// reset, and run again.
///
/// Owns its `sqlite3_stmt` and finalizes it in `deinit`; keeps its database open. Used on its
/// database's queue only.
public final class SQLiteStatement: @unchecked Sendable {
    private let statement: OpaquePointer
    private let database: SQLiteDatabase
    private let sql: String

    init(_ statement: OpaquePointer, database: SQLiteDatabase, sql: String) {
        self.statement = statement
        self.database = database
        self.sql = sql
    }

    deinit {
        sqlite3_finalize(statement)
    }

    /// Clears the bindings and rewinds, ready to bind and run again.
    public func reset() {
        sqlite3_reset(statement)
        sqlite3_clear_bindings(statement)
    }

    /// Binds `value` to parameter `index`.
    public func bind(_ value: Int64, at index: Int32) throws(SQLiteError) {
        try check(sqlite3_bind_int64(statement, index, value))
    }

    /// Binds an unsigned number by its bit pattern (epochs use all 64 bits).
    public func bind(_ value: UInt64, at index: Int32) throws(SQLiteError) {
        try bind(Int64(bitPattern: value), at: index)
    }

    /// Binds `value` as text, or NULL when it is nil; SQLite copies the bytes.
    public func bind(_ value: String?, at index: Int32) throws(SQLiteError) {
        guard let value else {
            try check(sqlite3_bind_null(statement, index))
            return
        }
        // An empty buffer may have no address, and a NULL pointer would bind NULL, not "".
        guard !value.isEmpty else {
            try check(csqlite_bind_text_copy(statement, index, "", 0))
            return
        }
        var text = value
        let result = text.withUTF8 { bytes in
            bytes.withMemoryRebound(to: CChar.self) { chars in
                csqlite_bind_text_copy(statement, index, chars.baseAddress!, Int32(chars.count))
            }
        }
        try check(result)
    }

    /// Binds `bytes` as a blob; SQLite copies them.
    public func bind(_ bytes: [UInt8], at index: Int32) throws(SQLiteError) {
        let result = bytes.withUnsafeBytes { buffer in
            // An empty array may have no address, and a NULL pointer would bind NULL, not a blob.
            csqlite_bind_blob_copy(statement, index, buffer.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!, Int32(buffer.count))
        }
        try check(result)
    }

    /// Binds every value in turn from parameter 1.
    public func bind(_ values: SQLiteValue...) throws(SQLiteError) {
        try bind(values)
    }

    /// Binds every value in turn from parameter 1.
    public func bind(_ values: [SQLiteValue]) throws(SQLiteError) {
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            switch value {
            case .integer(let number): try bind(number, at: index)
            case .text(let text): try bind(text, at: index)
            case .blob(let bytes): try bind(bytes, at: index)
            }
        }
    }

    /// Runs to the next row: true when a row is ready to read, false when the statement is done.
    public func step() throws(SQLiteError) -> Bool {
        switch sqlite3_step(statement) {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default:
            let error = database.error(SQLiteDatabase.shortened(sql))
            sqlite3_reset(statement)
            throw error
        }
    }

    /// Runs a statement that returns no rows, then resets it.
    public func run() throws(SQLiteError) {
        defer { reset() }
        while try step() {}
    }

    /// Column `index` of the current row as an integer.
    public func int64(_ index: Int32) -> Int64 { sqlite3_column_int64(statement, index) }

    /// Column `index` of the current row as an unsigned number (by bit pattern).
    public func uint64(_ index: Int32) -> UInt64 { UInt64(bitPattern: int64(index)) }

    /// Whether column `index` of the current row is NULL.
    public func isNull(_ index: Int32) -> Bool { sqlite3_column_type(statement, index) == SQLITE_NULL }

    /// Column `index` of the current row as text ("" for NULL).
    public func text(_ index: Int32) -> String {
        guard let bytes = sqlite3_column_text(statement, index) else { return "" }
        let count = Int(sqlite3_column_bytes(statement, index))
        return String(decoding: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self)
    }

    /// Calls `body` with the bytes of column `index` of the current row (empty for NULL); they
    /// are valid only during the call.
    public func withBlob<Result>(_ index: Int32, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        let bytes = sqlite3_column_blob(statement, index)
        let count = Int(sqlite3_column_bytes(statement, index))
        return body(UnsafeRawBufferPointer(start: bytes, count: bytes == nil ? 0 : count))
    }

    private func check(_ result: Int32) throws(SQLiteError) {
        guard result == SQLITE_OK else { throw database.error("bind for \(SQLiteDatabase.shortened(sql))") }
    }
}

/// A parameter value for `SQLiteStatement.bind(_:)`.
public enum SQLiteValue: Sendable {
    /// An integer.
    case integer(Int64)
    /// Text, or NULL when nil.
    case text(String?)
    /// A blob.
    case blob([UInt8])
}
