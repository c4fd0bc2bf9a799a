import ChatProtocol

/// One room: its identity, its members in joining order, its sequence counter, its topic and its
/// history.
struct ChatRoom: Sendable {
    /// A room's current topic and the event that set it.
    struct Topic: Sendable {
        var text: String
        var setBy: String
        var time: UInt64
        var seq: UInt64
    }

    let name: String
    /// Chosen when the room is created and never 0: a client that sees another epoch for a room
    /// knows that its history and `seq` started again.
    let epoch: UInt64
    /// Members in the order they joined: the order `members` lists them and fan-out visits them.
    var members: [ClientID] = []
    var topic: Topic?
    /// The history; change it through `record` and `forgetOldest`, which keep the replays true.
    private(set) var history: RoomHistory
    private(set) var lastSeq: UInt64 = 0
    /// The history replay a version 1 joiner gets, built (and encoded by the server) once and
    /// shared by every joiner until the history changes.
    var replayV1: SharedFrames?
    /// The same for version 2 joiners.
    var replayV2: SharedFrames?
    /// With a store: the `seq` of the oldest stored event as far as the room knows (0 for none).
    /// Retention may since have deleted it; a page asked for from there simply starts later.
    var storedFirstSeq: UInt64 = 0
    /// With a store: whether older events may be stored than the history in memory holds, so a
    /// page that reaches past memory must be read from the store.
    var olderStored = false
    /// Modes, bans, roles and invitations (protocol version 4, ChatCore+Moderation.swift).
    var moderation = RoomModeration()
    /// In durable mode: the number of the room's latest change for the log (`LogBatch.through`;
    /// 0 for none). The room may leave memory once a commit holds it.
    var lastLogAppend: UInt64 = 0

    init(name: String, epoch: UInt64, historySize: Int, historyBytes: Int) {
        precondition(epoch != 0, "epoch 0 is reserved")
        self.name = name
        self.epoch = epoch
        history = RoomHistory(capacity: historySize, byteCapacity: historyBytes)
    }

    /// A room read back from a store, with no members yet and no history in memory (the caller
    /// records `stored.recent`).
    init(stored: StoredRoom, historySize: Int, historyBytes: Int) {
        self.init(name: stored.record.name, epoch: stored.record.epoch, historySize: historySize, historyBytes: historyBytes)
        lastSeq = stored.record.lastSeq
        topic = stored.record.topic.map { Topic(text: $0.text, setBy: $0.setBy, time: $0.time, seq: $0.seq) }
        storedFirstSeq = stored.firstSeq
        olderStored = stored.firstSeq != 0 && stored.firstSeq < (stored.recent.first?.seq ?? .max)
    }

    /// The room's record for its log, as it stands at `time`.
    func record(at time: UInt64) -> RoomRecord {
        RoomRecord(
            name: name, epoch: epoch, lastSeq: lastSeq,
            topic: topic.map { RoomTopic(text: $0.text, setBy: $0.setBy, time: $0.time, seq: $0.seq) }, lastActive: time)
    }

    /// Adds `entry` to the history; returns the bytes the history forgot to stay in its bounds.
    mutating func record(_ entry: HistoryEntry) -> Int {
        replayV1 = nil
        replayV2 = nil
        if storedFirstSeq == 0 { storedFirstSeq = entry.seq }
        let forgotten = history.append(entry)
        if forgotten > 0 { olderStored = true }
        return forgotten
    }

    /// Forgets the entry whose `seq` is `seq` (one that could not be stored); returns what it
    /// cost, 0 if there is none.
    mutating func forget(seq: UInt64) -> Int {
        replayV1 = nil
        replayV2 = nil
        return history.remove(seq: seq)
    }

    /// Takes back the `seq`s of `failed`, events numbered here that could not be stored and were
    /// never delivered, when they are the last the room gave: the next event takes the first of
    /// them, and members see no gap. When something delivered took a `seq` after them (a join in
    /// the same commit, a later commit in flight), they stay given, a gap as a presence event a
    /// member does not receive leaves one (PROTOCOL.md).
    mutating func giveBack(seqs failed: Set<UInt64>) {
        guard let first = failed.min(), first > 0, failed.count == lastSeq &- first &+ 1, failed.contains(lastSeq) else { return }
        lastSeq = first - 1
        if storedFirstSeq >= first { storedFirstSeq = 0 }
    }

    /// Forgets the oldest history entry if its `seq` is `seq`; returns what it cost (0 if the
    /// oldest is another entry, or there is none).
    mutating func forgetOldest(ifSeq seq: UInt64) -> Int {
        guard history.firstSeq == seq else { return 0 }
        replayV1 = nil
        replayV2 = nil
        olderStored = true
        return history.removeOldest()
    }

    /// Takes the sequence number for the room's next event.
    mutating func nextSeq() -> UInt64 {
        lastSeq += 1
        return lastSeq
    }

    /// Removes `id` from the members, and its roles with it; does nothing if it is not one.
    mutating func removeMember(_ id: ClientID) {
        if let index = members.firstIndex(of: id) { members.remove(at: index) }
        moderation.forget(id)
    }
}
