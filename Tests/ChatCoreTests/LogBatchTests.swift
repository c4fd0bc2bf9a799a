@testable import ChatCore
import ChatProtocol
import Testing

/// The core's one seam to a durable room log: every room event goes into the log batch the
/// server takes when a commit starts (`takeLogBatch()`), with the room's record as it stands after
/// the event, and an emptied room stays in memory until the server reports its changes committed
/// (`logCommitted(through:)`). Tested on the core alone, with no store: what the server does
/// with the batch is `ChatServerTests`' business.
@Suite("The room log's batch")
struct LogBatchTests {
    @Test func everyRoomEventGoesIntoTheBatchWithItsRoomAsItStandsAfterIt() {
        var chat = CoreDriver(.durable)
        let steps = chat.playScript()
        var through: UInt64 = 0
        var storedBroadcast: [HistoryEntry] = []
        var storedLogged: [HistoryEntry] = []
        for (actions, batch) in steps {
            let numbered = Set(actions.compactMap { action -> UInt64? in
                guard case .broadcast(let frame, _) = action else { return nil }
                return Self.roomEvent(frame)?.seq
            })
            storedBroadcast += actions.compactMap { action in
                guard case .broadcast(let frame, _) = action else { return nil }
                return Self.roomEvent(frame)?.stored
            }
            storedLogged += batch.events.map(\.entry)
            #expect(batch.events.allSatisfy { $0.room == "r" })
            // The last step, the quit that empties the room, numbers nothing (below).
            guard let seq = numbered.max() else { continue }
            #expect(batch.through == through + UInt64(numbered.count), "one change per event: \(batch.through) after \(through) for \(numbered.sorted())")
            through = batch.through
            #expect(batch.rooms.count == 1)
            let record = batch.rooms.first
            #expect(record?.name == "r" && record?.epoch == 7 && record?.lastSeq == seq && record?.lastActive == chat.now.wallMillis, "\(batch)")
            #expect(record?.topic?.text == (seq >= 6 ? "today" : nil))
        }
        #expect(through == 10, "three joins, a line, an action, a topic, a nick, a mode, a kick and a part")
        #expect(storedLogged == storedBroadcast && storedLogged.map(\.kind) == [.message, .action, .topic])
        let quit = steps.last?.batch
        #expect(
            quit?.through == 11 && quit?.events == [] && quit?.rooms.map(\.lastSeq) == [10]
                && quit?.occupancy == [RoomOccupancy(room: "r", occupied: false)],
            "the room's last member quit: \(String(describing: quit))")
    }

    @Test func aBusyRoomsLinesMoveItsRecordInPlaceAndAnotherRoomGetsItsOwn() {
        var chat = CoreDriver(.durable)
        let alice = chat.connect("alice")
        chat.send(.join(room: "a"), from: alice)
        chat.send(.join(room: "b"), from: alice)
        _ = chat.core.takeLogBatch()
        var actions: [ChatAction] = []
        for (room, text) in [("a", "1"), ("a", "2"), ("b", "3"), ("a", "4")] {
            chat.core.received(.say(room: room, text: text), size: 8, from: alice, at: chat.now, into: &actions)
        }
        let batch = chat.core.takeLogBatch()
        #expect(batch.rooms.map(\.name) == ["a", "b"] && batch.rooms.map(\.lastSeq) == [4, 2], "\(batch.rooms)")
        #expect(batch.events.map { "\($0.room) \($0.entry.seq) \($0.entry.text)" } == ["a 2 1", "a 3 2", "b 2 3", "a 4 4"])
        #expect(batch.through == 6)
        #expect(chat.core.takeLogBatch() == LogBatch(), "taken once")
    }

    @Test func aStoreStagesTheBatchesOfOneCommitAsOneTheLaterRecordWinning() {
        var chat = CoreDriver(.durable)
        let alice = chat.connect("alice")
        var taken: [LogBatch] = []
        for (room, text) in [("a", "join"), ("b", "join"), ("a", "1"), ("b", "2")] {
            chat.send(text == "join" ? .join(room: room) : .say(room: room, text: text), from: alice)
            taken.append(chat.core.takeLogBatch())
        }
        var staged = LogBatch()
        for batch in taken { staged.append(contentsOf: batch) }
        #expect(staged.rooms.map(\.name) == ["a", "b"] && staged.rooms.map(\.lastSeq) == [2, 2], "the latest record of each: \(staged.rooms)")
        #expect(staged.events.map { "\($0.room) \($0.entry.text)" } == ["a 1", "b 2"])
        #expect(staged.occupancy.map(\.room) == ["a", "b"] && staged.through == taken.last?.through)

        // A failed commit's records are staged again behind newer ones, which win.
        var next = LogBatch()
        next.addUnlessNewer(RoomRecord(name: "b", epoch: 7, lastSeq: 9, topic: nil, lastActive: 0))
        for record in staged.rooms { next.addUnlessNewer(record) }
        #expect(next.rooms.map(\.name) == ["b", "a"] && next.rooms.map(\.lastSeq) == [9, 2], "\(next.rooms)")
        #expect(!next.hasNothingToWrite && LogBatch().hasNothingToWrite)
    }

    @Test func theClientsSeeTheSameInEveryModeAndOnlyTheDurableOneLogs() {
        var memory = CoreDriver(.memory)
        var durable = CoreDriver(.durable)
        let inMemory = memory.playScript()
        let inDurable = durable.playScript()
        #expect(inMemory.allSatisfy { $0.batch.isEmpty }, "memory mode has no log")
        #expect(inDurable.contains { !$0.batch.isEmpty })
        #expect(inMemory.map(\.actions) == inDurable.map(\.actions))
    }

    @Test func anEmptiedRoomLeavesMemoryOnlyOnceACommitHoldsItsLastChange() {
        var chat = CoreDriver(.durable)
        let alice = chat.connect("alice")
        chat.send(.join(room: "r"), from: alice)  // change 1, seq 1
        chat.send(.say(room: "r", text: "kept"), from: alice)  // change 2, seq 2
        chat.send(.part(room: "r"), from: alice)  // change 3, seq 3
        let batch = chat.core.takeLogBatch()
        #expect(batch.through == 3 && batch.occupancy.map(\.occupied) == [true, false], "\(batch)")
        #expect(chat.core.knowsRoom("r"), "kept until its changes are committed: read back now, the log would give an older seq")
        chat.core.logCommitted(through: 2)
        #expect(chat.core.knowsRoom("r"), "its part is not committed yet")
        chat.core.logCommitted(through: 3)
        #expect(!chat.core.knowsRoom("r"))
        chat.core.logCommitted(through: 1)

        // Rejoined before its part is committed, the room is the one in memory, numbered on.
        chat.send(.join(room: "s"), from: alice)  // change 4
        chat.send(.part(room: "s"), from: alice)  // change 5
        let rejoin = chat.send(.join(room: "s"), from: alice)  // change 6
        #expect(chat.roomsRead == ["r", "s"], "no read of a room still in memory")
        #expect(rejoin.contains(.broadcast(.joined(room: "s", seq: 3, time: chat.now.wallMillis, nick: "alice"), to: [alice])), "\(rejoin)")
        #expect(chat.core.takeLogBatch().occupancy.map(\.occupied) == [true, false, true])

        // A failed commit reports nothing: the room waits for the next commit that succeeds.
        chat.send(.part(room: "s"), from: alice)  // change 7
        chat.core.logCommitted(through: 6)
        #expect(chat.core.knowsRoom("s"))
        chat.core.logCommitted(through: 7)
        #expect(!chat.core.knowsRoom("s"))
        let reread = chat.send(.join(room: "s"), from: alice)
        #expect(chat.roomsRead == ["r", "s", "s"], "gone from memory, it is read back: \(reread)")
    }

    @Test func aRoomEmptiedByAQuitChangesWithoutASeqAndInMemoryModeLeavesAtOnce() {
        var durable = CoreDriver(.durable)
        let alice = durable.connect("alice")
        durable.send(.join(room: "r"), from: alice)
        _ = durable.core.takeLogBatch()
        durable.now.wallMillis += 5_000
        _ = durable.disconnect(alice)
        let quit = durable.core.takeLogBatch()
        #expect(quit.rooms.map(\.lastSeq) == [1] && quit.events.isEmpty && quit.through == 2, "\(quit)")
        #expect(quit.rooms.first?.lastActive == durable.now.wallMillis, "retention counts the idle time from the quit")
        #expect(durable.core.knowsRoom("r"))

        var memory = CoreDriver(.memory)
        let bob = memory.connect("bob")
        memory.send(.join(room: "r"), from: bob)
        memory.send(.part(room: "r"), from: bob)
        #expect(!memory.core.knowsRoom("r"), "nothing to wait for")
    }

    /// The room, `seq` and stored entry (nil for events not kept as history) of a room event.
    private static func roomEvent(_ frame: Frame) -> (room: String, seq: UInt64, stored: HistoryEntry?)? {
        switch frame {
        case .message(let room, let seq, let time, let sender, let text):
            (room, seq, HistoryEntry(kind: .message, seq: seq, time: time, sender: sender, text: text))
        case .action(let room, let seq, let time, let sender, let text):
            (room, seq, HistoryEntry(kind: .action, seq: seq, time: time, sender: sender, text: text))
        case .topic(let room, let seq, let time, let setBy, let text):
            (room, seq, HistoryEntry(kind: .topic, seq: seq, time: time, sender: setBy, text: text))
        case .joined(let room, let seq, _, _), .left(let room, let seq, _, _), .quit(let room, let seq, _, _, _),
            .nickChanged(let room, let seq, _, _, _), .kicked(let room, let seq, _, _, _, _), .modeChanged(let room, let seq, _, _, _, _, _):
            (room, seq, nil)
        default:
            nil
        }
    }
}

/// A `ChatCore` in one `RoomLogMode`, its rooms all of epoch 7, driven by hand with no store: a
/// room the core asks the log for is not stored.
private struct CoreDriver {
    var core: ChatCore
    var now = ServerTime(wallMillis: 1_767_225_600_000, uptimeMillis: 1_000)
    private var nextSlot = 0
    /// The rooms the core asked the log for, in order.
    private(set) var roomsRead: [String] = []

    init(_ mode: RoomLogMode) {
        var limits = ChatLimits()
        limits.turnOffRateLimits()
        let budget = MemoryBudget(total: 256 << 20, maxClients: limits.maxClients, maxFrameSize: limits.maxFrameSize)
        core = ChatCore(limits: limits, budget: budget, log: mode, epochs: .sequential(from: 7))
    }

    /// Connects `nick`, speaking `version`, in the next slot.
    mutating func connect(_ nick: String, version: UInt16 = WireProtocol.version) -> ClientID {
        let id = ClientID(nextSlot)
        nextSlot += 1
        #expect(core.clientConnected(id, address: "127.0.0.1", at: now) == nil)
        send(.hello(version: version, nick: nick, password: nil), from: id)
        return id
    }

    @discardableResult
    mutating func send(_ frame: Frame, from id: ClientID) -> [ChatAction] {
        var actions: [ChatAction] = []
        core.received(frame, size: FrameEncoder.encode(frame).count, from: id, at: now, into: &actions)
        for read in core.takeLogReads() {
            guard case .room(let name, _) = read.request else { continue }
            roomsRead.append(name)
            core.logReadAnswered(read.ticket, .success(.room(nil)), at: now, into: &actions)
        }
        return actions
    }

    mutating func disconnect(_ id: ClientID) -> [ChatAction] {
        var actions: [ChatAction] = []
        core.disconnect(id, Disconnection(code: nil, reason: "gone"), at: now, into: &actions)
        return actions
    }

    /// Every room event kind in one room, with a version 1 member that sees a kick as `left`, and
    /// the quit of its last member; returns what the core did at each step, and the log batch
    /// taken after it. Nothing is ever committed.
    mutating func playScript() -> [(actions: [ChatAction], batch: LogBatch)] {
        let alice = connect("alice")
        let bob = connect("bob")
        let old = connect("old", version: 1)
        _ = core.takeLogBatch()
        var steps: [(actions: [ChatAction], batch: LogBatch)] = []
        for (frame, id) in [
            (Frame.join(room: "r"), alice), (.join(room: "r"), bob), (.join(room: "r"), old),
            (.say(room: "r", text: "hello"), bob), (.emote(room: "r", text: "waves"), alice),
            (.setTopic(room: "r", text: "today"), alice), (.changeNick(nick: "robert"), bob),
            (.setMode(room: "r", mode: .moderated, on: true, argument: ""), alice),
            (.kick(room: "r", nick: "old", reason: "bye"), alice), (.part(room: "r"), alice),
        ] {
            steps.append((send(frame, from: id), core.takeLogBatch()))
        }
        steps.append((disconnect(bob), core.takeLogBatch()))
        return steps
    }
}
