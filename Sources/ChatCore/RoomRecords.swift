import ChatProtocol

/// A room's topic and the event that set it.
public struct RoomTopic: Sendable, Equatable {
    /// The topic.
    public var text: String
    /// Who set it.
    public var setBy: String
    /// When, in milliseconds since the Unix epoch.
    public var time: UInt64
    /// The `seq` of the `topic` event that set it.
    public var seq: UInt64

    /// Describes a topic.
    public init(text: String, setBy: String, time: UInt64, seq: UInt64) {
        self.text = text
        self.setBy = setBy
        self.time = time
        self.seq = seq
    }
}

/// What identifies a room and where its numbering stands: one row of the `rooms` table.
public struct RoomRecord: Sendable, Equatable {
    /// The room's name.
    public var name: String
    /// The room's epoch (never 0): the same as long as its history and `seq` numbering go on.
    public var epoch: UInt64
    /// The `seq` of the room's latest event, stored or not (presence events take a `seq` too, so
    /// it may be above the last stored event's).
    public var lastSeq: UInt64
    /// The current topic; nil when there is none.
    public var topic: RoomTopic?
    /// When the room last had an event, in milliseconds since the Unix epoch (or, stored, when
    /// retention last found it occupied): what retention measures an empty room's idle time by.
    public var lastActive: UInt64

    /// Describes a room.
    public init(name: String, epoch: UInt64, lastSeq: UInt64, topic: RoomTopic?, lastActive: UInt64) {
        self.name = name
        self.epoch = epoch
        self.lastSeq = lastSeq
        self.topic = topic
        self.lastActive = lastActive
    }
}

/// A room as stored: its record, where its stored history begins, and its most recent events.
public struct StoredRoom: Sendable, Equatable {
    /// The room's identity and numbering.
    public var record: RoomRecord
    /// The `seq` of the oldest stored event; 0 when none is stored.
    public var firstSeq: UInt64
    /// The most recent stored events, oldest first.
    public var recent: [HistoryEntry]

    /// Describes a stored room.
    public init(record: RoomRecord, firstSeq: UInt64, recent: [HistoryEntry]) {
        self.record = record
        self.firstSeq = firstSeq
        self.recent = recent
    }
}

/// One stored event: a history entry of a room.
public struct StoredEvent: Sendable, Equatable {
    /// The room's name.
    public var room: String
    /// The event.
    public var entry: HistoryEntry

    /// Pairs an entry with its room.
    public init(room: String, entry: HistoryEntry) {
        self.room = room
        self.entry = entry
    }
}
