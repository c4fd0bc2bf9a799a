@testable import ChatCore
import ChatProtocol
import ChatStorage
import Testing
import TestSupport

@testable import ChatServer
@testable import RoomLog

/// Reads of the room log run off the event loop (ChatCore+Reads.swift): a room that left memory
/// is read back for its joiner, and a page older than memory holds is read for its asker, while
/// everyone else is served; the asker's later requests wait for the answer, so its replies keep
/// the order of its requests.
@Suite("Reads of the room log, off the event loop")
struct LogReadTests {
    // MARK: The core

    @Test func joinersOfARoomNotInMemoryWaitForOneReadAndJoinInTheOrderTheyAsked() {
        var chat = CoreWithStore()
        let alice = chat.connect("alice")
        let bob = chat.connect("bob")
        #expect(chat.send(.join(room: "old"), from: alice).isEmpty, "nothing until the room is read")
        #expect(chat.send(.join(room: "old"), from: bob).isEmpty)
        #expect(chat.core.isAwaitingLog(alice) && chat.core.isAwaitingLog(bob))
        let reads = chat.core.takeLogReads()
        #expect(reads.count == 1, "one read for both joiners: \(reads.map(\.request))")
        guard case .room("old", _)? = reads.first?.request else {
            Issue.record("expected a read of room old, got \(reads.map(\.request))")
            return
        }
        let actions = chat.answer(reads[0], with: .success(.room(CoreWithStore.storedOld)))
        #expect(!chat.core.isAwaitingLog(alice) && !chat.core.isAwaitingLog(bob))
        let joins = actions.compactMap { action -> String? in
            if case .broadcast(.joined("old", let seq, _, let nick), _) = action { return "\(nick) \(seq)" }
            return nil
        }
        #expect(joins == ["alice 8", "bob 9"], "the stored room's numbering goes on, in the joiners' order")
        let replay = actions.contains { action in
            if case .sendShared(let shared, to: alice) = action {
                return shared.frames.contains { frame in
                    if case .historyPage("old", 7, _, let entries) = frame { return entries.map(\.text) == ["kept"] }
                    return false
                }
            }
            return false
        }
        #expect(replay, "the joiner gets the stored history: \(actions)")
    }

    @Test func anAnswerNeverReachesALaterClientInTheSameSlot() {
        var chat = CoreWithStore()
        let alice = chat.connect("alice")
        _ = chat.send(.join(room: "old"), from: alice)
        let aliceRead = chat.core.takeLogReads()
        chat.disconnect(alice)
        #expect(!chat.core.isAwaitingLog(alice), "a client that left waits for nothing")
        let carol = chat.connect("carol")
        #expect(carol == alice, "the slot is reused")
        _ = chat.send(.join(room: "other"), from: carol)
        let carolRead = chat.core.takeLogReads()
        let stale = chat.answer(aliceRead[0], with: .success(.room(CoreWithStore.storedOld)))
        #expect(stale.isEmpty, "alice's answer goes to no one: \(stale)")
        #expect(chat.core.isAwaitingLog(carol), "carol still waits for her own read")
        #expect(!chat.core.roomNames.contains("old"), "a room read for no one stays on disk")
        let actions = chat.answer(carolRead[0], with: .success(.room(nil)))
        #expect(actions.contains { if case .broadcast(.joined("other", 1, _, "carol"), _) = $0 { true } else { false } })
    }

    @Test func aFailedReadRefusesEachJoinerAndTheNextJoinReadsAgain() {
        var chat = CoreWithStore()
        let alice = chat.connect("alice")
        let bob = chat.connect("bob")
        _ = chat.send(.join(room: "old"), from: alice)
        _ = chat.send(.join(room: "old"), from: bob)
        let failed = chat.answer(chat.core.takeLogReads()[0], with: .failure(StorageError("disk I/O error")))
        let refused = failed.compactMap { action -> ClientID? in
            if case .send(.error(.storageFailed, false, .join, let reason), let id) = action, reason.contains("disk I/O error") {
                return id
            }
            return nil
        }
        #expect(refused == [alice, bob], "\(failed)")
        _ = chat.send(.join(room: "old"), from: alice)
        #expect(chat.core.takeLogReads().count == 1, "read again")
    }

    @Test func aPageOlderThanMemoryIsReadForItsAskerAlone() {
        var chat = CoreWithStore { $0.historySize = 2 }
        let alice = chat.connect("alice")
        _ = chat.send(.join(room: "old"), from: alice)
        _ = chat.answer(chat.core.takeLogReads()[0], with: .success(.room(CoreWithStore.storedOld)))
        for text in ["one", "two", "three"] { _ = chat.send(.say(room: "old", text: text), from: alice) }
        // Memory holds "two" (seq 10) and "three"; before them lies the disk.
        #expect(chat.send(.fetchHistory(room: "old", direction: .before, seq: 10, limit: 10), from: alice).isEmpty)
        let reads = chat.core.takeLogReads()
        guard case .page("old", .before, from: 10, limit: 2, _, _)? = reads.first?.request else {
            Issue.record("expected a page read, got \(reads.map(\.request))")
            return
        }
        #expect(chat.core.isAwaitingLog(alice))
        let stored = [HistoryEntry(kind: .message, seq: 9, time: 1, sender: "alice", text: "one")]
        let actions = chat.answer(reads[0], with: .success(.page(entries: stored, complete: true)))
        #expect(
            actions.contains { if case .send(.historyPage("old", 7, true, stored), alice) = $0 { true } else { false } },
            "\(actions)")
        #expect(!chat.core.isAwaitingLog(alice))
    }

    // MARK: End to end

    @Test func aJoinWaitingForTheDiskHoldsUpNoOneElseAndKeepsItsClientsOrder() async throws {
        try await withRoomOldOnDisk { store, server in
            let bob = try await TestClient.connect(port: server.port, nick: "bob", version: 2)
            _ = try await bob.joinRoom("live")
            let alice = try await TestClient.connect(port: server.port, nick: "alice", version: 2)

            store.shutReads()
            try await alice.send(.join(room: "old"))
            // Served before the join is answered, this would be refused: alice is not in #old yet.
            try await alice.send(.say(room: "old", text: "after the join"))
            #expect(await eventually { store.readsWaiting == 1 }, "alice's join waits for its read")
            for number in 0..<20 { try await bob.send(.say(room: "live", text: "\(number)")) }
            let echoes = try await bob.collect(20, "bob's echoes while alice's read waits") { frame -> String? in
                if case .message("live", _, _, "bob", let text) = frame { return text }
                return nil
            }
            #expect(echoes == (0..<20).map(String.init), "the loop serves bob while the disk keeps alice waiting")
            #expect(store.readsWaiting == 1, "and alice's read is still waiting")

            store.openReads()
            var order: [String] = []
            var replay: [String] = []
            while !order.contains("message") {
                let frame = try await alice.expectFrame("alice's join, history and message, in order")
                switch frame {
                case .joined("old", _, _, "alice"): order.append("joined")
                case .historyPage("old", _, _, let entries):
                    order.append("history")
                    replay = entries.map(\.text)
                case .message("old", _, _, "alice", "after the join"): order.append("message")
                case .error(let code, _, let type, let reason): Issue.record("alice was refused: \(code) \(type) \(reason)")
                default: break
                }
                if order.count > 3 { break }
            }
            #expect(order == ["joined", "history", "message"])
            #expect(replay == ["stored 1", "stored 2"], "the room came back from the disk")
            alice.close()
            bob.close()
            await server.shutdown()
        }
    }

    @Test func aJoinWhoseReadFailsIsRefusedAndTheNextOneSucceeds() async throws {
        try await withRoomOldOnDisk { store, server in
            let alice = try await TestClient.connect(port: server.port, nick: "alice", version: 2)
            store.failReads(with: StorageError("disk I/O error"))
            try await alice.send(.join(room: "old"))
            let reason = try await alice.waitFor("the refused join") { frame -> String? in
                if case .error(.storageFailed, false, .join, let reason) = frame { return reason }
                return nil
            }
            #expect(reason.contains("disk I/O error"), "\(reason)")
            store.failReads(with: nil)
            let (_, lastSeq, replay) = try await alice.joinRoom("old")
            // Seq 1 to 4 stored, 5 her join.
            #expect(replay.map(\.text) == ["stored 1", "stored 2"] && lastSeq == 5, "lastSeq \(lastSeq), replay \(replay)")
            alice.close()
            await server.shutdown()
        }
    }

    /// Runs `body` with a server on a gated real SQLite store that holds room `old` on disk and
    /// not in memory (`storeRoomOld`); removes the data directory afterwards.
    private func withRoomOldOnDisk(_ body: (GatedRoomStore, ChatServer) async throws -> Void) async throws {
        let data = try TemporaryDirectory(prefix: "chat-reads")
        defer { data.remove() }
        try await storeRoomOld(in: data)
        try await withGatedServer(in: data, body)
    }

    /// Stores room `old` (joined, "stored 1", "stored 2", left: seq 1 to 4) in `data` with a
    /// server of its own, so the next server has it on disk and not in memory.
    private func storeRoomOld(in data: TemporaryDirectory) async throws {
        let store = try SQLiteRoomStore(directory: data.path, durability: .off, retention: .keepAll)
        defer { store.close() }
        let server = try ChatServer(configuration: testConfiguration(), store: store, logger: quietLogger)
        server.start()
        let carol = try await TestClient.connect(port: server.port, nick: "carol", version: 2)
        _ = try await carol.joinRoom("old")
        try await carol.send(.say(room: "old", text: "stored 1"))
        try await carol.send(.say(room: "old", text: "stored 2"))
        try await carol.send(.part(room: "old"))
        _ = try await carol.waitFor("carol's part") { frame -> Bool? in
            if case .left("old", _, _, "carol") = frame { return true }
            return nil
        }
        carol.close()
        await server.shutdown()
    }
}

/// A durable `ChatCore` whose reads the test answers by hand: `takeLogReads` shows what the core
/// asked, `answer` hands back what the test chose. Its rooms' changes count as committed at
/// once, as a log that commits what it is given would have them (`committed`).
private struct CoreWithStore {
    var core: ChatCore
    let now = ServerTime(wallMillis: 1_767_225_600_000, uptimeMillis: 1_000)
    private var nextSlot = 0
    private var freeSlots: [Int] = []

    /// Room `old` as stored: epoch 7, numbered up to 7, one event kept.
    static let storedOld = StoredRoom(
        record: RoomRecord(name: "old", epoch: 7, lastSeq: 7, topic: nil, lastActive: 1), firstSeq: 7,
        recent: [HistoryEntry(kind: .message, seq: 7, time: 1, sender: "carol", text: "kept")])

    init(_ adjust: (inout ChatServerConfiguration) -> Void = { _ in }) {
        var configuration = ChatServerConfiguration()
        configuration.turnOffRateLimits()
        adjust(&configuration)
        core = ChatCore(configuration: configuration, log: .durable)
    }

    /// Connects `nick` (protocol version 2) in the lowest free slot.
    mutating func connect(_ nick: String) -> ClientID {
        let id = ClientID(freeSlots.popLast() ?? nextSlot)
        if id.slot == nextSlot { nextSlot += 1 }
        let refusal = core.clientConnected(id, address: "127.0.0.1", at: now)
        #expect(refusal == nil)
        _ = send(.hello(version: 2, nick: nick, password: nil), from: id)
        return id
    }

    mutating func send(_ frame: Frame, from id: ClientID) -> [ChatAction] {
        var actions: [ChatAction] = []
        core.received(frame, size: FrameEncoder.encode(frame).count, from: id, at: now, into: &actions)
        return committed(actions)
    }

    mutating func disconnect(_ id: ClientID) {
        var actions: [ChatAction] = []
        core.disconnect(id, Disconnection(code: nil, reason: "gone"), at: now, into: &actions)
        _ = committed(actions)
        freeSlots.append(id.slot)
    }

    mutating func answer(_ read: LogRead, with answer: Result<RoomReadAnswer, StorageError>) -> [ChatAction] {
        var actions: [ChatAction] = []
        core.logReadAnswered(read.ticket, answer.mapError(\.logError), at: now, into: &actions)
        return committed(actions)
    }

    /// `actions`, once the core has heard that its rooms' changes are committed.
    private mutating func committed(_ actions: [ChatAction]) -> [ChatAction] {
        core.logCommitted(through: core.takeLogBatch().through)
        return actions
    }
}
