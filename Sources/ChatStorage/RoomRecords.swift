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

    /// What the room's row counts for against the retention bounds, besides its events: its
    /// strings and its fixed part. See `storedBytes(name:topic:)`.
    public var storedBytes: Int { Self.storedBytes(name: name, topic: topic) }

    /// `storedBytes` of a room named `name` with `topic`: `rowOverhead`, the name twice (the
    /// row's key and its entry in the activity index), and the topic's text and setter.
    public static func storedBytes(name: String, topic: RoomTopic?) -> Int {
        rowOverhead + 2 * name.utf8.count + (topic.map { $0.text.utf8.count + $0.setBy.utf8.count } ?? 0)
    }

    /// The fixed part of a room's row and of its index entry: numbers, record headers, cell
    /// pointers (about 90 bytes in SQLite's format, rounded up).
    public static let rowOverhead = 96
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

    /// What the event counts for against the retention bounds: its strings and its row's fixed
    /// part (key, kind, time, lengths). SQLite's pages and index add to it; docs/SERVER.md says
    /// how much the file holds per counted byte.
    public var storedBytes: Int { Self.storedBytes(room: room, entry: entry) }

    /// `storedBytes` of `entry` in `room`.
    public static func storedBytes(room: String, entry: HistoryEntry) -> Int {
        storedBytes(room: room, sender: entry.sender, text: entry.text)
    }

    /// `storedBytes` of an event of `room` from `sender` that says `text`.
    static func storedBytes(room: String, sender: String, text: String) -> Int {
        32 + room.utf8.count + sender.utf8.count + text.utf8.count
    }
}

/// What one commit writes: the new state of every room touched, and the events to add.
///
/// Every room an event belongs to must be among `rooms`.
public struct RoomBatch: Sendable, Equatable {
    /// The latest record of each room touched, at most one per room.
    public var rooms: [RoomRecord]
    /// New events, each in its room's `seq` order.
    public var events: [StoredEvent]

    /// Describes a batch.
    public init(rooms: [RoomRecord] = [], events: [StoredEvent] = []) {
        self.rooms = rooms
        self.events = events
    }

    /// Whether there is nothing to write.
    public var isEmpty: Bool { rooms.isEmpty && events.isEmpty }
}

/// How much the database keeps: each bound applies when it is above 0.
///
/// What counts is what a room stores: each event's `StoredEvent.storedBytes` and the room's row,
/// `RoomRecord.storedBytes` (its name and its topic included), so no part of the file grows
/// outside the bounds.
public struct RetentionPolicy: Sendable, Equatable {
    /// The most events kept per room; the oldest go first.
    public var maxEventsPerRoom: Int
    /// The most bytes kept per room: its row and its events; the oldest events go first.
    public var maxBytesPerRoom: Int
    /// How long, in milliseconds, an event is kept.
    public var maxAgeMillis: UInt64
    /// The most bytes kept in all rooms together, rows and events. Over it the oldest goes first:
    /// the globally oldest events, or a room without members whose last activity is older than
    /// every event left (it is deleted with anything it holds).
    public var maxTotalBytes: Int
    /// How long, in milliseconds, a room without members and without new events is kept: then it
    /// is deleted with its events and topic, and a room of that name starts again with a new epoch.
    public var maxEmptyRoomMillis: UInt64

    /// Describes a policy.
    public init(
        maxEventsPerRoom: Int, maxBytesPerRoom: Int, maxAgeMillis: UInt64, maxTotalBytes: Int, maxEmptyRoomMillis: UInt64 = 0
    ) {
        self.maxEventsPerRoom = maxEventsPerRoom
        self.maxBytesPerRoom = maxBytesPerRoom
        self.maxAgeMillis = maxAgeMillis
        self.maxTotalBytes = maxTotalBytes
        self.maxEmptyRoomMillis = maxEmptyRoomMillis
    }

    /// Keeps everything.
    public static let keepAll = RetentionPolicy(maxEventsPerRoom: 0, maxBytesPerRoom: 0, maxAgeMillis: 0, maxTotalBytes: 0)
}

/// How hard a commit pushes its bytes to the disk: SQLite's `synchronous` setting in WAL mode.
public enum Durability: String, Sendable, CaseIterable {
    /// `synchronous=FULL`: every commit is fsynced before it is acknowledged; a power loss loses
    /// nothing acknowledged.
    case always
    /// `synchronous=NORMAL`: a commit is in the write-ahead log (the OS has it) before it is
    /// acknowledged, and SQLite fsyncs the log at each checkpoint. A killed process loses nothing
    /// acknowledged; a power loss or OS crash can lose the commits since the log's last sync
    /// (chat-server syncs it every 100 ms besides).
    case normal
    /// `synchronous=OFF`: no fsync at all. A killed process loses nothing acknowledged; a power
    /// loss can lose recent commits and may leave the database corrupt.
    case off

    var pragmaValue: String {
        switch self {
        case .always: "FULL"
        case .normal: "NORMAL"
        case .off: "OFF"
        }
    }
}
