@testable import ChatCore
import ChatProtocol
import ChatStorage
import Testing

@testable import ChatServer
@testable import RoomLog

/// The `roomState` `actions` send to `id`.
private func roomState(to id: ClientID, in actions: [ChatAction]) -> (epoch: UInt64, firstSeq: UInt64, lastSeq: UInt64)? {
    for case .roomState(_, let epoch, let firstSeq, let lastSeq) in frames(to: id, in: actions) {
        return (epoch, firstSeq, lastSeq)
    }
    return nil
}

/// The `historyPage` `actions` send to `id` (the join's replay, or a `fetchHistory` answer).
private func page(to id: ClientID, in actions: [ChatAction]) -> (seqs: [UInt64], complete: Bool)? {
    for action in actions {
        switch action {
        case .send(.historyPage(_, _, let complete, let entries), let to) where to == id:
            return (entries.map(\.seq), complete)
        case .sendShared(let shared, let to) where to == id:
            for case .historyPage(_, _, let complete, let entries) in shared.frames { return (entries.map(\.seq), complete) }
        default:
            continue
        }
    }
    return nil
}

/// The `seq` of the `joined` `actions` deliver to `id`.
private func joinedSeq(to id: ClientID, in actions: [ChatAction]) -> UInt64? {
    for case .joined(_, let seq, _, _) in frames(to: id, in: actions) { return seq }
    return nil
}

/// The stores the restart tests run on: the in-memory test double, and a real SQLite file
/// committed after every event.
enum RestartStore: String, CaseIterable, Sendable, CustomStringConvertible {
    /// A `MemoryRoomStore`: staging is committing.
    case memoryDouble
    /// A `SQLiteRoomStore` in a temporary directory.
    case sqlite

    var description: String { rawValue }

    /// A new store of this kind, and a way to start chats on it one after the other, as a
    /// server and its restarts.
    func make() throws -> (_ adjust: (inout ChatServerConfiguration) -> Void) -> Harness {
        switch self {
        case .memoryDouble:
            let store = MemoryRoomStore()
            return { adjust in Harness(store: store, adjust) }
        case .sqlite:
            let sqlite = try SQLiteBackend()
            return { adjust in Harness(sqlite: sqlite, adjust) }
        }
    }
}

@Suite("The chat logic with a room store")
struct ChatCoreStorageTests {
    @Test func anEmptyRoomLeavesMemoryButKeepsItsEpochSeqTopicAndHistory() async throws {
        let store = MemoryRoomStore()
        var chat = Harness(store: store)
        let alice = await chat.connect("alice", version: 2)
        await chat.send(.join(room: "general"), from: alice)  // seq 1
        await chat.send(.say(room: "general", text: "one"), from: alice)  // seq 2
        await chat.send(.setTopic(room: "general", text: "sockets"), from: alice)  // seq 3
        await chat.send(.part(room: "general"), from: alice)  // seq 4
        #expect(chat.core.roomNames.isEmpty, "an empty room is no longer listed")
        #expect(chat.core.historyBytes == 0, "nor does its history take memory")
        #expect(store.stored("general")?.record.lastSeq == 4, "its seq is stored, presence events included")

        let bob = await chat.connect("bob", version: 2)
        let actions = await chat.send(.join(room: "general"), from: bob)
        let state = try #require(roomState(to: bob, in: actions))
        #expect(state.epoch == 1, "the same room, not a new one")
        #expect(state.lastSeq == 5 && joinedSeq(to: bob, in: actions) == 5, "seq continues after the part's 4")
        #expect(state.firstSeq == 2)
        #expect(frames(to: bob, in: actions).contains(.topic(room: "general", seq: 3, time: chat.now.wallMillis, setBy: "alice", text: "sockets")))
        #expect(page(to: bob, in: actions)?.seqs == [2, 3], "the stored history is replayed")
    }

    @Test(arguments: RestartStore.allCases) func aRestartedChatContinuesEveryRoomFromTheStore(_ kind: RestartStore) async throws {
        let start = try kind.make()
        var before = start { _ in }
        let alice = await before.connect("alice", version: 2)
        await before.send(.join(room: "general"), from: alice)
        for text in ["a", "b", "c"] { await before.send(.say(room: "general", text: text), from: alice) }
        // The process dies here: members never leave, their quit is never stored.

        var after = start { _ in }
        after.now.wallMillis += 60_000
        let bob = await after.connect("bob", version: 2)
        let actions = await after.send(.join(room: "general"), from: bob)
        let state = try #require(roomState(to: bob, in: actions))
        #expect(state.epoch == 1 && state.lastSeq == 5, "epoch kept, seq continues after the last stored 4")
        let replay = try #require(page(to: bob, in: actions))
        #expect(replay.seqs == [2, 3, 4] && replay.complete)
        let catchUp = await after.send(.fetchHistory(room: "general", direction: .after, seq: 2, limit: 100), from: bob)
        #expect(page(to: bob, in: catchUp)?.seqs == [3, 4], "a client that saw seq 2 gets exactly what it missed")
    }

    @Test(arguments: RestartStore.allCases) func pagesOlderThanMemoryHoldsAreReadFromTheStore(_ kind: RestartStore) async throws {
        let start = try kind.make()
        var before = start { $0.historySize = 3 }
        let alice = await before.connect("alice", version: 2)
        await before.send(.join(room: "r"), from: alice)  // seq 1
        for index in 1...10 { await before.send(.say(room: "r", text: "m\(index)"), from: alice) }  // seq 2…11

        var after = start { $0.historySize = 3 }
        let bob = await after.connect("bob", version: 2)
        let join = await after.send(.join(room: "r"), from: bob)
        let replay = try #require(page(to: bob, in: join))
        #expect(replay.seqs == [9, 10, 11], "memory holds the newest three")
        #expect(!replay.complete, "older events are stored: the replay must not claim to be all")
        let back = await after.send(.fetchHistory(room: "r", direction: .before, seq: 9, limit: 100), from: bob)
        #expect(page(to: bob, in: back)?.seqs == [6, 7, 8], "scrolling back past memory reads the store (limit 3)")
        #expect(page(to: bob, in: back)?.complete == false)
        let oldest = await after.send(.fetchHistory(room: "r", direction: .before, seq: 3, limit: 100), from: bob)
        #expect(page(to: bob, in: oldest)?.seqs == [2])
        #expect(page(to: bob, in: oldest)?.complete == true)
        let catchUp = await after.send(.fetchHistory(room: "r", direction: .after, seq: 1, limit: 100), from: bob)
        #expect(page(to: bob, in: catchUp)?.seqs == [2, 3, 4])
        #expect(page(to: bob, in: catchUp)?.complete == false, "more follows: the client asks again after 4")
        let fromMemory = await after.send(.fetchHistory(room: "r", direction: .after, seq: 8, limit: 100), from: bob)
        #expect(page(to: bob, in: fromMemory)?.seqs == [9, 10, 11])
        #expect(page(to: bob, in: fromMemory)?.complete == true)
    }

    @Test func aFailedCommitIsNotDeliveredAndRoomEventsAreRefusedUntilOneSucceeds() async throws {
        let store = MemoryRoomStore()
        var chat = Harness(store: store)
        let alice = await chat.connect("alice", version: 2)
        let bob = await chat.connect("bob", version: 2)
        await chat.send(.join(room: "r"), from: alice)
        await chat.send(.join(room: "r"), from: bob)
        await chat.send(.setTopic(room: "r", text: "kept"), from: alice)  // seq 3
        await chat.send(.say(room: "r", text: "lost"), from: alice)  // seq 4
        await chat.send(.setTopic(room: "r", text: "lost topic"), from: bob)  // seq 5
        let failure = CommitFailure(
            error: StorageError("commit failed: database or disk is full"),
            events: [
                StoredEvent(room: "r", entry: HistoryEntry(kind: .message, seq: 4, time: chat.now.wallMillis, sender: "alice", text: "lost")),
                StoredEvent(room: "r", entry: HistoryEntry(kind: .topic, seq: 5, time: chat.now.wallMillis, sender: "bob", text: "lost topic")),
            ])
        // What the memory store holds stands for what SQLite would: only the committed topic.
        store.forget("r", through: 5)
        store.stage(
            RoomRecord(name: "r", epoch: 1, lastSeq: 3, topic: RoomTopic(text: "kept", setBy: "alice", time: chat.now.wallMillis, seq: 3), lastActive: 0),
            event: HistoryEntry(kind: .topic, seq: 3, time: chat.now.wallMillis, sender: "alice", text: "kept"))
        var actions: [ChatAction] = []
        chat.core.storageFailed(failure, into: &actions)
        #expect(
            actions.contains(.send(.error(code: .storageFailed, fatal: false, frameType: .say, reason: "#r: not delivered: commit failed: database or disk is full"), to: alice)),
            "the sender learns its message was not delivered: \(actions)")
        #expect(actions.contains { if case .send(.error(.storageFailed, false, .setTopic, _), bob) = $0 { true } else { false } })

        let refused = await chat.send(.say(room: "r", text: "more"), from: bob)
        #expect(refused.count == 1)
        #expect(refused.first.map { if case .send(.error(.storageFailed, false, .say, _), bob) = $0 { true } else { false } } == true,
            "room events are refused while storage fails: \(refused)")

        let carol = await chat.connect("carol", version: 2)
        let join = await chat.send(.join(room: "r"), from: carol)
        #expect(page(to: carol, in: join)?.seqs == [3], "what was not stored is not in the history either")
        #expect(
            join.contains { if case .broadcast(.joined("r", 4, _, "carol"), _) = $0 { true } else { false } },
            "the seqs of what was not stored are given back: carol's join takes 4, no member sees a gap: \(join)")
        #expect(frames(to: carol, in: join).contains { if case .topic(_, 3, _, _, "kept") = $0 { true } else { false } },
            "the topic is the stored one")

        chat.core.storageRecovered()
        let said = await chat.send(.say(room: "r", text: "again"), from: bob)
        #expect(said.contains { if case .broadcast(.message(_, 5, _, "bob", "again"), _) = $0 { true } else { false } })
    }

    /// A failed commit whose events are followed by one delivered (a join numbered after them in
    /// the same commit) cannot give their seqs back: the gap stays, as a presence event a
    /// member does not receive leaves one, and nothing is numbered twice.
    @Test func seqsAFailedCommitCannotGiveBackStayGiven() async throws {
        let store = MemoryRoomStore()
        var chat = Harness(store: store)
        let alice = await chat.connect("alice", version: 2)
        let bob = await chat.connect("bob", version: 2)
        await chat.send(.join(room: "r"), from: alice)  // seq 1
        await chat.send(.say(room: "r", text: "lost"), from: alice)  // seq 2
        await chat.send(.join(room: "r"), from: bob)  // seq 3
        let failure = CommitFailure(
            error: StorageError("commit failed: database or disk is full"),
            events: [StoredEvent(room: "r", entry: HistoryEntry(kind: .message, seq: 2, time: chat.now.wallMillis, sender: "alice", text: "lost"))])
        var actions: [ChatAction] = []
        chat.core.storageFailed(failure, into: &actions)
        chat.core.storageRecovered()
        let said = await chat.send(.say(room: "r", text: "next"), from: bob)
        #expect(said.contains { if case .broadcast(.message(_, 4, _, "bob", "next"), _) = $0 { true } else { false } }, "\(said)")
    }

    @Test func manyRoomsVisitedOnceLeaveNothingInMemory() async {
        let store = MemoryRoomStore()
        var chat = Harness(store: store) { $0.maxRoomsPerClient = 2 }
        let alice = await chat.connect("alice", version: 2)
        for index in 0..<500 {
            await chat.send(.join(room: "room\(index)"), from: alice)
            await chat.send(.say(room: "room\(index)", text: String(repeating: "x", count: 200)), from: alice)
            await chat.send(.part(room: "room\(index)"), from: alice)
        }
        #expect(chat.core.roomNames.isEmpty)
        #expect(chat.core.historyBytes == 0, "stored rooms cost no memory once empty")
        #expect(store.stored("room499")?.events.count == 1)
    }

    /// An emptied room comes back as it was wherever it is kept — SQLite and Redis: its epoch,
    /// `seq` continuing, its topic and history — and starts again where it is not: memory
    /// (docs/PROTOCOL.md, "Rooms"; docs/SERVER.md, "Restart continuity"; docs/CLUSTER.md).
    @Test(arguments: CoreBackend.allCases) func anEmptiedRoomComesBackAsItWasWhereverItIsKept(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice", version: 2)
        await chat.send(.join(room: "general"), from: alice)  // seq 1
        await chat.send(.say(room: "general", text: "one"), from: alice)  // seq 2
        await chat.send(.setTopic(room: "general", text: "sockets"), from: alice)  // seq 3
        await chat.send(.part(room: "general"), from: alice)  // seq 4
        let then = chat.now.wallMillis
        // The server's timer ticks: a stored room whose changes are committed leaves memory.
        _ = await chat.tick(advancingBy: 1_000)
        let bob = await chat.connect("bob", version: 2)
        let actions = await chat.send(.join(room: "general"), from: bob)
        let state = try #require(roomState(to: bob, in: actions))
        guard backend.keepsEmptyRooms else {
            #expect(state == (epoch: 2, firstSeq: 0, lastSeq: 1), "a new room: \(state)")
            #expect(!frames(to: bob, in: actions).contains { $0.type == .topic }, "and no topic")
            #expect(page(to: bob, in: actions)?.seqs == [], "nor history")
            return
        }
        // Redis's oldest stored event is alice's joined; SQLite stores only history.
        #expect(state == (epoch: 1, firstSeq: backend == .cluster ? 1 : 2, lastSeq: 5), "\(backend): the same room, seq continuing: \(state)")
        #expect(frames(to: bob, in: actions).contains(.topic(room: "general", seq: 3, time: then, setBy: "alice", text: "sockets")))
        let replay = try #require(page(to: bob, in: actions))
        #expect(replay.seqs == [2, 3] && replay.complete, "\(backend): the kept history is replayed: \(replay)")
    }

    @Test func withoutAStoreAnEmptyRoomStartsAgain() async throws {
        var chat = try await Harness(.memory)
        let alice = await chat.connect("alice", version: 2)
        await chat.send(.join(room: "r"), from: alice)
        await chat.send(.say(room: "r", text: "gone"), from: alice)
        await chat.send(.part(room: "r"), from: alice)
        let actions = await chat.send(.join(room: "r"), from: alice)
        let state = try #require(roomState(to: alice, in: actions))
        #expect(state.epoch == 2 && state.lastSeq == 1, "a new epoch: the room started again")
    }
}
