import ChatCore
import ChatProtocol
import ChatServer
import Dispatch
import Foundation
import ChatStorage
import Glibc
import RoomLog
import TestSupport
import Testing

/// A room message as a client saw it.
struct SeenMessage: Hashable, Sendable {
    var seq: UInt64
    var sender: String
    var text: String
}

extension TestClient {
    /// Joins `room` speaking version 2 and returns its `roomState`'s epoch and last `seq`, and
    /// the `seq`s of the join's replay.
    func joinRoom(_ room: String) async throws -> (epoch: UInt64, lastSeq: UInt64, replay: [HistoryEntry]) {
        try await send(.join(room: room))
        let state = try await waitFor("roomState of #\(room)") { frame -> (UInt64, UInt64)? in
            if case .roomState(room, let epoch, _, let lastSeq) = frame { return (epoch, lastSeq) }
            return nil
        }
        let replay = try await waitFor("the replay of #\(room)") { frame -> [HistoryEntry]? in
            if case .historyPage(room, _, _, let entries) = frame { return entries }
            return nil
        }
        return (state.0, state.1, replay)
    }

    /// Fetches `room`'s history after `seq`, page by page until a page is `complete`; checks
    /// that every page fits the protocol's frame limit and continues the one before.
    func fetchAll(_ room: String, after seq: UInt64) async throws -> [HistoryEntry] {
        var entries: [HistoryEntry] = []
        var from = seq
        for _ in 0..<10_000 {
            try await send(.fetchHistory(room: room, direction: .after, seq: from, limit: 1_000))
            let frame = try await waitFor("a history page of #\(room)") { frame -> Frame? in
                if case .historyPage(room, _, _, _) = frame { return frame }
                return nil
            }
            guard case .historyPage(_, _, let complete, let page) = frame else { continue }
            #expect(FrameEncoder.encode(frame).count <= WireProtocol.maxFrameSize + WireProtocol.maxVarintLength)
            if let first = page.first { #expect(first.seq > from, "a page starts after the seq asked for") }
            entries += page
            from = page.last?.seq ?? from
            if complete { return entries }
            #expect(!page.isEmpty, "an incomplete page must carry something")
        }
        Issue.record("history of #\(room) never completed")
        return entries
    }
}

@Suite("Durable rooms, end to end", .serialized)
struct DurabilityTests {
    @Test func aKilledServerKeepsEveryAcknowledgedMessageAndClientsCatchUpExactly() async throws {
        let data = try TemporaryDirectory(prefix: "chat-durability")
        defer { data.remove() }
        let arguments = ["--data-dir", data.path, "--no-rate-limits", "--log-level", "warning"]
        let first = try await ChatServerProcess(arguments: arguments)
        let observer = try await TestClient.connect(port: first.port, nick: "observer", version: 2)
        let (epoch, _, _) = try await observer.joinRoom("load")

        let talkers = 4
        let perTalker = 3_000
        var clients: [TestClient] = []
        for index in 0..<talkers {
            let client = try await TestClient.connect(port: first.port, nick: "talker\(index)", version: 2)
            _ = try await client.joinRoom("load")
            clients.append(client)
        }
        // Each talker reads (every message it sees, its own echoes included) until the server
        // dies, while it sends as fast as the connection takes them.
        var readers: [Task<[SeenMessage], Never>] = []
        var senders: [Task<Void, Never>] = []
        for (index, client) in clients.enumerated() {
            readers.append(Task { await client.messagesUntilClosed(in: "load") })
            senders.append(
                Task {
                    for number in 0..<perTalker {
                        do { try await client.send(.say(room: "load", text: "t\(index)-\(number)")) } catch { return }
                    }
                })
        }
        // Mid-load: once the observer has seen 500 messages, the server is killed.
        let early = try await observer.collect(500, "messages") { frame -> SeenMessage? in
            if case .message("load", let seq, _, let sender, let text) = frame { return SeenMessage(seq: seq, sender: sender, text: text) }
            return nil
        }
        // While this connection holds SQLite's write lock the database takes nothing in: what
        // the server accepts meanwhile is in its journal only, and the kill comes then. The
        // restart must replay the journal for the checks below to pass.
        let blocker = try SQLiteDatabase(path: data.path + "/" + RoomDatabase.fileName, mode: .readWrite)
        try blocker.execute("BEGIN IMMEDIATE")
        let late = try await TestClient.connect(port: first.port, nick: "late", version: 2)
        _ = try await late.joinRoom("load")
        try await late.send((0..<3).map { .say(room: "load", text: "late-\($0)") })
        let lateLines = try await late.collect(3, "the late lines' echoes") { frame -> SeenMessage? in
            if case .message("load", let seq, _, "late", let text) = frame { return SeenMessage(seq: seq, sender: "late", text: text) }
            return nil
        }
        first.child.killNow()
        _ = await first.child.waitForExit(timeout: .seconds(10))
        try blocker.execute("ROLLBACK")
        let journaled = try RoomJournal.files(in: data.path).reduce(0) { $0 + (try RoomJournal.read(RoomJournal.path(of: $1, in: data.path))).records.count }
        #expect(journaled > 0, "the kill left accepted commits in the journal only")
        let observed = early + (await observer.messagesUntilClosed(in: "load"))
        for sender in senders { await sender.value }
        var seen = Set(observed).union(lateLines)
        late.close()
        for reader in readers { seen.formUnion(await reader.value) }
        for client in clients { client.close() }
        observer.close()
        let lastShown = try #require(observed.map(\.seq).max())
        let highestSeen = try #require(seen.map(\.seq).max())

        let second = try await ChatServerProcess(arguments: arguments)
        defer { second.stop() }
        let checker = try await TestClient.connect(port: second.port, nick: "checker", version: 2)
        let (epochAfter, lastSeqAfter, _) = try await checker.joinRoom("load")
        #expect(epochAfter == epoch, "the same room after a restart: the epoch is kept")
        #expect(lastSeqAfter > highestSeen, "seq continues above every seq a client saw (\(lastSeqAfter) vs \(highestSeen))")
        let history = try await checker.fetchAll("load", after: 0)
        let stored = Set(history.map { SeenMessage(seq: $0.seq, sender: $0.sender, text: $0.text) })
        let missing = seen.subtracting(stored)
        #expect(missing.isEmpty, "\(missing.count) of \(seen.count) messages clients saw are not stored, e.g. \(missing.prefix(3))")
        #expect(Set(history.map(\.text)).count == history.count, "no message is stored twice")
        #expect(history.map(\.seq) == history.map(\.seq).sorted(), "history is in seq order")
        #expect(seen.count >= 500)

        // The observer comes back: it showed up to `lastShown` and must get exactly what follows.
        let returning = try await TestClient.connect(port: second.port, nick: "observer", version: 2)
        let (epochSeen, _, _) = try await returning.joinRoom("load")
        #expect(epochSeen == epoch)
        let missed = try await returning.fetchAll("load", after: lastShown)
        #expect(missed == history.filter { $0.seq > lastShown }, "the catch-up is exactly the stored events after the last one shown")
        returning.close()
        checker.close()
    }

    /// The server is killed with 300 acknowledged lines in its journal only (SQLite's lock held
    /// elsewhere), and the journal is damaged as a power loss or a careless operator would: the
    /// restart keeps what is intact, logs the loss, and moves the room to a new epoch — so no `seq`
    /// a client saw names another event under the epoch it saw it in, and clients see the break.
    @Test(arguments: JournalDamage.allCases)
    func aKilledServerWhoseJournalWasDamagedMovesTheRoomToANewEpochAndLogsTheLoss(_ damage: JournalDamage) async throws {
        let data = try TemporaryDirectory(prefix: "chat-journal-damage")
        defer { data.remove() }
        let arguments = ["--data-dir", data.path, "--no-rate-limits"]
        let first = try await ChatServerProcess(arguments: arguments)
        let alice = try await TestClient.connect(port: first.port, nick: "alice", version: 2)
        let (epoch, _, _) = try await alice.joinRoom("r")
        func say(_ texts: [String]) async throws -> [SeenMessage] {
            try await alice.send(texts.map { .say(room: "r", text: $0) })
            return try await alice.collect(texts.count, "echoes") { frame -> SeenMessage? in
                if case .message("r", let seq, _, "alice", let text) = frame { return SeenMessage(seq: seq, sender: "alice", text: text) }
                return nil
            }
        }
        let stored = try await say((0..<200).map { "stored \($0)" })
        let database = try RoomDatabase(path: data.path + "/" + RoomDatabase.fileName, durability: .off, create: false)
        let inSQLite = await eventually(timeout: .seconds(30)) { (try? database.loadRoom(named: "r", recent: 0)?.record.lastSeq) == stored.last?.seq }
        #expect(inSQLite, "the first 200 lines reached SQLite")
        let blocker = try SQLiteDatabase(path: data.path + "/" + RoomDatabase.fileName, mode: .readWrite)
        try blocker.execute("BEGIN IMMEDIATE")
        let journaled = try await say((0..<300).map { "journaled \($0)" })
        first.child.killNow()
        _ = await first.child.waitForExit(timeout: .seconds(10))
        try blocker.execute("ROLLBACK")
        alice.close()
        try damage.apply(to: data.path)

        let second = try await ChatServerProcess(arguments: arguments)
        defer { second.stop() }
        #expect(await second.child.waitForOutput("the journal may not hold everything the last run acknowledged"), "the loss is logged")
        let bob = try await TestClient.connect(port: second.port, nick: "bob", version: 2)
        defer { bob.close() }
        let (epochAfter, lastSeq, _) = try await bob.joinRoom("r")
        #expect(epochAfter != epoch, "the room moved to a new epoch")
        let history = try await bob.fetchAll("r", after: 0)
        let seen = stored + journaled
        let kept = history.filter { $0.sender == "alice" }.map { SeenMessage(seq: $0.seq, sender: $0.sender, text: $0.text) }
        #expect(kept.count >= stored.count && kept == Array(seen.prefix(kept.count)), "what is kept is what clients saw, from the start: \(kept.count) of \(seen.count)")
        #expect(lastSeq >= stored.last?.seq ?? 0)
        print("journal damaged (\(damage)): \(kept.count) of \(seen.count) acknowledged lines kept; epoch \(epoch) -> \(epochAfter)")
    }

    @Test func startupRefusesStorageItCannotUseWithOneLineAndAFailingExit() async throws {
        let data = try TemporaryDirectory(prefix: "chat-durability")
        defer { data.remove() }
        let executable = try ChildProcess.builtExecutable(named: "chat-server")

        func refusal(_ arguments: [String]) async throws -> (status: Int32?, output: String) {
            let child = try ChildProcess(executable, ["--port", "0"] + arguments)
            let status = await child.waitForExit(timeout: .seconds(60))
            child.stop()
            return (status, child.output)
        }

        let corrupt = data.path + "/corrupt"
        _ = mkdir(corrupt, 0o700)
        let file = fopen(corrupt + "/" + RoomDatabase.fileName, "w")!
        fputs(String(repeating: "not a database at all ", count: 300), file)
        fclose(file)
        let notADatabase = try await refusal(["--data-dir", corrupt])
        #expect(notADatabase.status != nil && notADatabase.status != 0, "exit status \(String(describing: notADatabase.status))")
        #expect(notADatabase.output.contains("chat-server: cannot use \(corrupt)/rooms.sqlite3: file is not a database"), "\(notADatabase.output)")
        #expect(!notADatabase.output.contains("listening on"))

        let blocker = data.path + "/a-file"
        fclose(fopen(blocker, "w"))
        let unwritable = try await refusal(["--data-dir", blocker + "/data"])
        #expect(unwritable.status != nil && unwritable.status != 0)
        #expect(unwritable.output.contains("chat-server: cannot use data directory \(blocker)/data: Not a directory"), "\(unwritable.output)")

        let newer = data.path + "/newer"
        do {
            _ = mkdir(newer, 0o700)
            let database = try RoomDatabase(path: newer + "/" + RoomDatabase.fileName, durability: .normal, create: true)
            try database.database.execute("PRAGMA user_version = 9")
        }
        let tooNew = try await refusal(["--data-dir", newer])
        #expect(tooNew.status != nil && tooNew.status != 0)
        #expect(tooNew.output.contains("schema version 9, written by a newer chat-server"), "\(tooNew.output)")

        let shared = data.path + "/shared"
        let running = try await ChatServerProcess(arguments: ["--data-dir", shared])
        defer { running.stop() }
        let second = try await refusal(["--data-dir", shared])
        #expect(second.status != nil && second.status != 0)
        #expect(second.output.contains("another chat-server is using it"), "\(second.output)")
    }

    @Test func aFullDatabaseIsReportedAndNothingUnstoredIsDelivered() async throws {
        let data = try TemporaryDirectory(prefix: "chat-durability")
        defer { data.remove() }
        let store = try SQLiteRoomStore(directory: data.path, durability: .normal, retention: .keepAll)
        defer { store.close() }
        let server = try ChatServer(configuration: testConfiguration(), store: store, logger: quietLogger)
        server.start()
        let alice = try await TestClient.connect(port: server.port, nick: "alice", version: 2)
        let bob = try await TestClient.connect(port: server.port, nick: "bob", version: 2)
        _ = try await alice.joinRoom("r")
        _ = try await bob.joinRoom("r")
        try await alice.send(.say(room: "r", text: "before"))
        _ = try await bob.waitFor("the first message") { frame -> Bool? in
            if case .message("r", _, _, "alice", "before") = frame { return true }
            return nil
        }
        try store.capFileSize(bytes: 0)
        let big = String(repeating: "z", count: 8_000)
        // Every commit needs a new page now: the first message fails, and so does the next.
        for attempt in 0..<2 {
            try await alice.send(.say(room: "r", text: "\(attempt) \(big)"))
            let answer = try await alice.waitFor("the answer to a message the disk has no room for") { frame -> Frame? in
                switch frame {
                case .error(.storageFailed, false, .say, _): return frame
                case .message("r", _, _, "alice", let text) where text.hasPrefix("\(attempt) "): return frame
                default: return nil
                }
            }
            guard case .error(_, _, _, let reason) = answer else {
                Issue.record("a message was echoed although it could not be stored")
                break
            }
            #expect(reason.contains("full") || reason.contains("cannot store"), "\(reason)")
        }
        try store.capFileSize(bytes: 1 << 30)
        // A join is a commit too (the room's seq): once it is echoed, storage works again.
        try await bob.send(.join(room: "other"))
        _ = try await bob.waitFor("the join after the disk has room again") { frame -> Bool? in
            if case .joined("other", _, _, "bob") = frame { return true }
            return nil
        }
        try await alice.send(.say(room: "r", text: "after"))
        let delivered = try await bob.collect(1, "messages") { frame -> String? in
            if case .message("r", _, _, "alice", let text) = frame { return text }
            return nil
        }
        #expect(delivered == ["after"], "bob never sees what was not stored, and sees what is")
        alice.close()
        bob.close()
        await server.shutdown()
    }

    @Test func pagesOfSQLiteHistoryFillFramesToTheLimitWithNoGapOrDuplicate() async throws {
        let data = try TemporaryDirectory(prefix: "chat-durability")
        defer { data.remove() }
        let configuration = testConfiguration { $0.historySize = 1_000 }
        let text = String(repeating: "p", count: 15_000)
        let count = 200
        do {
            let store = try SQLiteRoomStore(directory: data.path, durability: .off, retention: .keepAll)
            let server = try ChatServer(configuration: configuration, store: store, logger: quietLogger)
            server.start()
            let alice = try await TestClient.connect(port: server.port, nick: "alice", version: 2)
            _ = try await alice.joinRoom("big")
            for number in 0..<count { try await alice.send(.say(room: "big", text: "\(number) \(text)")) }
            _ = try await alice.collect(count, "echoes") { frame -> Bool? in
                if case .message("big", _, _, _, _) = frame { return true }
                return nil
            }
            alice.close()
            await server.shutdown()
            store.close()
        }
        // Restarted with a memory budget too small for them, the pages come from SQLite.
        let store = try SQLiteRoomStore(directory: data.path, durability: .off, retention: .keepAll)
        defer { store.close() }
        let small = testConfiguration {
            $0.historySize = 1_000
            $0.maxMemory = 88 << 20
            $0.maxClients = 100
        }
        let server = try ChatServer(configuration: small, store: store, logger: quietLogger)
        server.start()
        let bob = try await TestClient.connect(port: server.port, nick: "bob", version: 2)
        let (_, _, replay) = try await bob.joinRoom("big")
        #expect(replay.count < count, "memory holds only the newest part")
        let all = try await bob.fetchAll("big", after: 0)
        #expect(all.map(\.text) == (0..<count).map { "\($0) \(text)" }, "every message once, in order")
        // Scrolling back from the newest, page by page, reaches the first without a gap.
        var before: UInt64 = 0
        var backwards: [HistoryEntry] = []
        for _ in 0..<count {
            try await bob.send(.fetchHistory(room: "big", direction: .before, seq: before, limit: 1_000))
            let frame = try await bob.waitFor("a page") { frame -> Frame? in
                if case .historyPage("big", _, _, _) = frame { return frame }
                return nil
            }
            guard case .historyPage(_, _, let complete, let page) = frame else { break }
            #expect(FrameEncoder.encode(frame).count <= WireProtocol.maxFrameSize + WireProtocol.maxVarintLength)
            #expect(page.count < count, "a page of 15 KB entries cannot hold them all")
            backwards = page + backwards
            before = page.first?.seq ?? before
            if complete { break }
        }
        #expect(backwards == all)
        bob.close()
        await server.shutdown()
    }
}

extension TestClient {
    /// Every message of `room` that arrives until the connection ends.
    func messagesUntilClosed(in room: String) async -> [SeenMessage] {
        var seen: [SeenMessage] = []
        while let frame = try? await next(waitingFor: "messages until the server goes away") {
            if case .message(room, let seq, _, let sender, let text) = frame { seen.append(SeenMessage(seq: seq, sender: sender, text: text)) }
        }
        return seen
    }
}

/// The real SQLite store with a gate in front of its commits: while the gate is shut, commits
/// wait (a disk that has stopped answering). Its reads have a gate of their own (`shutReads`), and can be made to fail (`failReads`).
///
/// `@unchecked Sendable`: everything it keeps is behind `lock`; `inner` is used on the server's
/// queue, as a store must be.
final class GatedRoomStore: RoomStore, @unchecked Sendable {
    let inner: SQLiteRoomStore
    private let lock = NSLock()
    private var pending: [(DispatchQueue, @Sendable (Result<Void, CommitFailure>) -> Void)] = []
    private var isShut = false
    private var readsShut = false
    private var readFailure: StorageError?
    private var parkedReads: [@Sendable () -> Void] = []
    private var readsAsked = 0

    init(_ inner: SQLiteRoomStore) { self.inner = inner }

    /// Makes the following reads wait until `openReads`.
    func shutReads() { lock.withLock { readsShut = true } }

    /// Lets the waiting reads through, in order, and the following ones at once.
    func openReads() {
        let parked = lock.withLock {
            readsShut = false
            defer { parkedReads.removeAll() }
            return parkedReads
        }
        for read in parked { read() }
    }

    /// Makes the following reads fail with `error` (nil: read again).
    func failReads(with error: StorageError?) { lock.withLock { readFailure = error } }

    /// How many reads were asked for, waiting ones included.
    var readsAskedFor: Int { lock.withLock { readsAsked } }

    /// How many reads wait behind the shut gate.
    var readsWaiting: Int { lock.withLock { parkedReads.count } }

    /// Makes the following commits wait.
    func shut() { lock.withLock { isShut = true } }

    /// Lets the waiting commits through, in order, on the queue each was asked on.
    func open() {
        let waiting = lock.withLock {
            isShut = false
            defer { pending.removeAll() }
            return pending
        }
        for (queue, completion) in waiting {
            queue.async { [inner] in inner.commitStaged(on: queue, completion: completion) }
        }
    }

    func read(
        _ request: RoomRead, on queue: DispatchQueue,
        completion: @escaping @Sendable (Result<RoomReadAnswer, StorageError>) -> Void
    ) {
        let run: @Sendable () -> Void = { [inner] in inner.read(request, on: queue, completion: completion) }
        let (failure, parked) = lock.withLock { () -> (StorageError?, Bool) in
            readsAsked += 1
            if let readFailure { return (readFailure, false) }
            if readsShut { parkedReads.append(run) }
            return (nil, readsShut)
        }
        if let failure {
            queue.async { completion(.failure(failure)) }
        } else if !parked {
            run()
        }
    }

    func stage(_ batch: LogBatch) { inner.stage(batch) }

    var hasStagedChanges: Bool { inner.hasStagedChanges }

    func commitStaged(on queue: DispatchQueue, completion: @escaping @Sendable (Result<Void, CommitFailure>) -> Void) {
        let wait = lock.withLock {
            if isShut { pending.append((queue, completion)) }
            return isShut
        }
        if !wait { inner.commitStaged(on: queue, completion: completion) }
    }

    func runFinishedCommits() { inner.runFinishedCommits() }

    func close() { inner.close() }
}

/// Runs `body` with a started server on a `GatedRoomStore` over a real SQLite store in
/// `directory` (a temporary one of its own, removed afterwards, unless given); the store is
/// closed afterwards, and `body` shuts the server down.
func withGatedServer(
    _ configuration: ChatServerConfiguration = testConfiguration(), in directory: TemporaryDirectory? = nil,
    _ body: (GatedRoomStore, ChatServer) async throws -> Void
) async throws {
    let data = try directory ?? TemporaryDirectory(prefix: "chat-durability")
    defer { if directory == nil { data.remove() } }
    let store = GatedRoomStore(try SQLiteRoomStore(directory: data.path, durability: .off, retention: .keepAll))
    defer { store.close() }
    let server = try ChatServer(configuration: configuration, store: store, logger: quietLogger)
    server.start()
    try await body(store, server)
}

extension DurabilityTests {
    /// An emptied room leaves memory once the commit that holds its last change lands, even on
    /// a server with nothing else to commit: a commit that reported the number of the one before
    /// it (`changesThrough` read before the batch was taken) kept the room, its history and
    /// membership bookkeeping in memory until some unrelated commit came.
    @Test func anEmptiedRoomLeavesMemoryOnceItsLastChangeIsCommittedOnAQuietServer() async throws {
        try await withGatedServer { _, server in
            let alice = try await TestClient.connect(port: server.port, nick: "alice", version: 2)
            _ = try await alice.joinRoom("parted")
            try await alice.send(.part(room: "parted"))
            _ = try await alice.waitFor("alice's part") { frame -> Bool? in
                if case .left("parted", _, _, "alice") = frame { return true }
                return nil
            }
            #expect(await eventually(timeout: .seconds(10)) { await server.roomsInMemory() == 0 }, "left by a part")

            let bob = try await TestClient.connect(port: server.port, nick: "bob", version: 2)
            _ = try await bob.joinRoom("quit")
            #expect(await server.roomsInMemory() == 1)
            bob.close()
            #expect(await eventually(timeout: .seconds(10)) { await server.roomsInMemory() == 0 }, "left by a quit")
            alice.close()
            await server.shutdown()
        }
    }
}

extension ChatServer {
    /// How many rooms the server holds in memory, from the status page's snapshot.
    func roomsInMemory() async -> Int {
        await withCheckedContinuation { continuation in
            snapshot { continuation.resume(returning: $0.rooms) }
        }
    }

    /// The `seq` of `room`'s latest event, from the status page's snapshot (0 if it is not
    /// listed): how many of its events the server has read and numbered, committed or not.
    func lastSeq(of room: String) async -> UInt64 {
        await withCheckedContinuation { continuation in
            snapshot { snapshot in
                continuation.resume(returning: snapshot.busiestRooms.first { $0.name == room }?.lastSeq ?? 0)
            }
        }
    }
}

/// How many of this process's descriptors are open read-only on `path`.
private func readOnlyDescriptors(on path: String) -> Int {
    guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return 0 }
    return entries.filter { entry in
        guard (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(entry)")) == path,
            let info = try? String(contentsOfFile: "/proc/self/fdinfo/\(entry)", encoding: .utf8),
            let flags = info.split(separator: "\n").first(where: { $0.hasPrefix("flags:") })?.split(separator: "\t").last,
            let value = Int(flags, radix: 8)
        else { return false }
        return Int32(value) & O_ACCMODE == O_RDONLY
    }.count
}

extension DurabilityTests {
    @Test func withFsyncNormalTheLogIsSyncedInTheBackgroundAndLetGoAtClose() async throws {
        for durability in [Durability.normal, .off] {
            let data = try TemporaryDirectory(prefix: "chat-durability")
            defer { data.remove() }
            let store = try SQLiteRoomStore(directory: data.path, durability: durability, retention: .keepAll)
            let log = store.directory.databasePath + "-wal"
            store.stage(RoomRecord(name: "r", epoch: 1, lastSeq: 1, topic: nil, lastActive: 1), event: HistoryEntry(kind: .message, seq: 1, time: 1, sender: "a", text: "one"))
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                store.commitStaged(on: DispatchQueue(label: "test")) { _ in done.resume() }
            }
            // SQLite's two connections hold the log read-write; the syncer opens it read-only.
            if durability == .normal {
                let synced = await eventually(timeout: .seconds(30)) { readOnlyDescriptors(on: log) == 1 }
                #expect(synced, "a read-only descriptor on the log, for fdatasync every 100 ms")
            } else {
                // Absence cannot be waited for: three sync intervals pass, and still nothing.
                try await Task.sleep(for: .milliseconds(300))
                #expect(readOnlyDescriptors(on: log) == 0, "--fsync off syncs nothing")
            }
            store.close()
            #expect(readOnlyDescriptors(on: log) == 0, "closed with the store")
        }
    }
}

extension DurabilityTests {
    @Test func aWriterThatLagsStopsTheServerReadingAndLosesNothing() async throws {
        let configuration = testConfiguration {
            $0.maxClients = 10
            $0.maxMemory = 84 << 20
        }
        try await withGatedServer(configuration) { store, server in
            let flooder = try await TestClient.connect(port: server.port, nick: "flood", version: 2)
            let reader = try await TestClient.connect(port: server.port, nick: "reader", version: 2)
            _ = try await flooder.joinRoom("r")
            _ = try await reader.joinRoom("r")
            store.shut()
            let before = await server.lastSeq(of: "r")

            // A message of 1,000 bytes to a room of two costs about 1.1 KB held until its commit;
            // the server may hold an eighth of its output share, then must stop reading.
            let count = 8_000
            let bound = server.budget.output / 8 / 1_000
            let texts = (0..<count).map { number in "\(number) " + String(repeating: "f", count: 1_000) }
            // The flooder reads its echoes, or its own unread replies would stop it first.
            let echoes = Task {
                try await flooder.collect(count, "echoes", limit: .seconds(120)) { frame -> Bool? in
                    if case .message("r", _, _, "flood", _) = frame { return true }
                    return nil
                }.count
            }
            let sender = Task {
                for text in texts {
                    do { try await flooder.send(.say(room: "r", text: text)) } catch { return }
                }
            }
            #expect(await eventually { await server.lastSeq(of: "r") >= before + UInt64(bound / 2) }, "half the bound read")
            // The pause gives a server that kept reading the time to read far more; one that stops
            // reads nothing more however long it lasts, so the test cannot fail for being slow.
            try await Task.sleep(for: .seconds(1))
            let read = Int(await server.lastSeq(of: "r")) - Int(before)
            #expect(read <= bound + 200, "the server stopped reading once it held its share: \(read) read, bound about \(bound)")
            #expect(read < count, "it did not read the whole flood")
            store.open()

            let received = try await reader.collect(count, "the flood", limit: .seconds(120)) { frame -> String? in
                if case .message("r", _, _, "flood", let text) = frame { return text }
                return nil
            }
            #expect(received == texts, "every message, once, in order, after the writer caught up")
            await sender.value
            #expect(try await echoes.value == count, "the flooder saw every echo")
            flooder.close()
            reader.close()
            await server.shutdown()
        }
    }
}

extension DurabilityTests {
    @Test func aSlotWhoseDeliveriesWaitForACommitIsNotGivenToANewcomer() async throws {
        try await withGatedServer { store, server in
            let bob = try await TestClient.connect(port: server.port, nick: "bob", version: 2)
            _ = try await bob.joinRoom("r")
            let alice = try await Self.rawMember("alice", of: "r", port: server.port, seenBy: bob)
            defer { alice.close() }
            store.shut()
            let before = await server.lastSeq(of: "r")

            // bob's line to bob and alice waits for its commit; then alice's connection is reset.
            // The server closes it at once (no goodbye to wait for), and alice's slot — the lowest
            // free one — would be the next newcomer's if it were free before that commit.
            try await bob.send(.say(room: "r", text: "for alice and bob"))
            #expect(await eventually { await server.lastSeq(of: "r") == before + 1 }, "the line read")
            var reset = linger(l_onoff: 1, l_linger: 0)
            setsockopt(alice.descriptor, SOL_SOCKET, SO_LINGER, &reset, socklen_t(MemoryLayout<linger>.size))
            alice.close()
            #expect(await eventually { server.connectionCount == 1 }, "the server saw alice's connection reset")
            let carol = try await RawClient(port: server.port)
            defer { carol.close() }
            try await carol.write(.hello(version: 2, nick: "carol", password: nil))
            #expect(await eventually { server.connectionCount == 2 }, "the server took carol's connection")
            store.open()

            let line = try await bob.waitFor("bob's line") { frame -> String? in
                if case .message("r", _, _, "bob", let text) = frame { return text }
                return nil
            }
            #expect(line == "for alice and bob")
            var beforeWelcome: [Frame] = []
            while true {
                let frame = try #require(try await carol.next(waitingFor: "carol's welcome"), "carol's connection ended first")
                if case .welcome = frame { break }
                beforeWelcome.append(frame)
            }
            #expect(beforeWelcome.isEmpty, "carol got what was meant for the client before her: \(beforeWelcome)")
            bob.close()
            await server.shutdown()
        }
    }
}

extension DurabilityTests {
    /// The durable mark in a member's queue: a member whose socket filled up has its queue sent
    /// as the kernel makes room (when its socket turns writable, not at a turn's end), and it
    /// still gets nothing that waits for a commit until the commit lands — then all of it, once,
    /// in order.
    @Test func aMemberGetsNoLineBeforeItsCommitEvenWhileItsSocketDrains() async throws {
        try await withGatedServer { store, server in
            let sender = try await TestClient.connect(port: server.port, nick: "sender", version: 2)
            _ = try await sender.joinRoom("r")
            let member = try await Self.rawMember("member", of: "r", port: server.port, seenBy: sender)
            defer { member.close() }

            // Committed lines, more than the member's socket takes while it reads nothing: the rest
            // waits in its queue.
            let committed = (0..<300).map { "committed \($0) " + String(repeating: "c", count: 1_000) }
            for text in committed { try await sender.send(.say(room: "r", text: text)) }
            _ = try await sender.collect(committed.count, "the committed lines' echoes", limit: .seconds(60)) { frame -> Bool? in
                if case .message("r", _, _, "sender", _) = frame { return true }
                return nil
            }
            // Lines whose commit does not land yet: queued behind the committed ones, and held.
            store.shut()
            let seqBefore = await server.lastSeq(of: "r")
            let held = (0..<20).map { "held \($0)" }
            for text in held { try await sender.send(.say(room: "r", text: text)) }
            #expect(await eventually { await server.lastSeq(of: "r") == seqBefore + UInt64(held.count) }, "the held lines read")

            func lines(in frames: [Frame]) -> [String] {
                frames.compactMap { frame in
                    if case .message("r", _, _, "sender", let text) = frame { return text }
                    return nil
                }
            }
            // The member reads now: its socket drains, and its queue follows — up to the mark.
            let before = lines(in: await member.readFrames(timeout: .seconds(1)).frames)
            // Compared as one truth, so a failure names the lines by number, not by their kilobytes.
            let onlyCommitted = before == committed
            #expect(onlyCommitted, "every committed line, in order, and none held: got \(before.count), the last \(before.last?.prefix(14) ?? "none")")
            store.open()
            let after = lines(in: await member.readFrames(timeout: .seconds(1)).frames)
            #expect(after == held, "the held lines once their commit landed, in order")
            sender.close()
            await server.shutdown()
        }
    }
}

extension DurabilityTests {
    /// A member `nick` of `room` on a raw socket, which reads only when the test says so; returns
    /// once `witness`, a member already, saw it join.
    static func rawMember(_ nick: String, of room: String, port: Int, seenBy witness: TestClient) async throws -> BlockingSocket {
        let member = try BlockingSocket(port: port)
        #expect(await member.send([.hello(version: 2, nick: nick, password: nil), .join(room: room)]) > 0)
        _ = try await witness.waitFor("\(nick)'s join") { frame -> Bool? in
            if case .joined(room, _, _, nick) = frame { return true }
            return nil
        }
        return member
    }
}
