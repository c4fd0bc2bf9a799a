import ChatCore
import ChatProtocol

extension RoomRecord {
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

extension StoredEvent {
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
