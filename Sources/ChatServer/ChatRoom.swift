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
    var history: RoomHistory
    private(set) var lastSeq: UInt64 = 0

    init(name: String, epoch: UInt64, historySize: Int) {
        precondition(epoch != 0, "epoch 0 is reserved")
        self.name = name
        self.epoch = epoch
        history = RoomHistory(capacity: historySize)
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
