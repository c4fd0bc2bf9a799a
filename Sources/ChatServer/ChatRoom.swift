import ChatProtocol

/// One room: its members in joining order, its sequence counter, its topic and its history.
struct ChatRoom: Sendable {
    /// A room's current topic and the event that set it.
    struct Topic: Sendable {
        var text: String
        var setBy: String
        var time: UInt64
        var seq: UInt64
    }

    let name: String
    /// Members in the order they joined: the order `members` lists them and fan-out visits them.
    var members: [ClientID] = []
    var topic: Topic?
    var history: RoomHistory
    private(set) var lastSeq: UInt64 = 0

    init(name: String, historySize: Int) {
        self.name = name
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
