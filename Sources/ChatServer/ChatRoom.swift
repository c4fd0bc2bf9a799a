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

    init(name: String, epoch: UInt64, historySize: Int, historyBytes: Int) {
        precondition(epoch != 0, "epoch 0 is reserved")
        self.name = name
        self.epoch = epoch
        history = RoomHistory(capacity: historySize, byteCapacity: historyBytes)
    }

    /// Adds `entry` to the history; returns the bytes the history forgot to stay in its bounds.
    mutating func record(_ entry: HistoryEntry) -> Int {
        replayV1 = nil
        replayV2 = nil
        return history.append(entry)
    }

    /// Forgets the oldest history entry if its `seq` is `seq`; returns what it cost (0 if the
    /// oldest is another entry, or there is none).
    mutating func forgetOldest(ifSeq seq: UInt64) -> Int {
        guard history.firstSeq == seq else { return 0 }
        replayV1 = nil
        replayV2 = nil
        return history.removeOldest()
    }

    /// Takes the sequence number for the room's next event.
    mutating func nextSeq() -> UInt64 {
        lastSeq += 1
        return lastSeq
    }

    /// Removes `id` from the members; does nothing if it is not one.
    mutating func removeMember(_ id: ClientID) {
        if let index = members.firstIndex(of: id) { members.remove(at: index) }
    }
}
