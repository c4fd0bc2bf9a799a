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

/// The changes of rooms for their log that the core made since the server last took them
/// (`ChatCore.takeLogBatch()`), in durable mode: the latest record of each room changed, the
/// events kept as history, and which rooms gained their first member or lost their last.
///
/// Kept as one value rather than as an action per change: a `ChatAction` big enough to carry a
/// room's record made every action larger, and copying them cost 57 instructions a delivery
/// (callgrind, docs/BENCHMARKS.md); a busy room's messages here move its record in place.
public struct LogBatch: Sendable, Equatable {
    /// The latest record of each room changed, at most one per room.
    public private(set) var rooms: [RoomRecord] = []
    /// The events kept as history (messages, actions, topics), each room's in `seq` order.
    public private(set) var events: [StoredEvent] = []
    /// Rooms that gained their first member or lost their last, in order: the log's retention
    /// spares an occupied room however long it stays quiet.
    public private(set) var occupancy: [RoomOccupancy] = []
    /// The number of the batch's last change (the core numbers its changes 1, 2, 3 …); 0 when
    /// it holds none. What the commit that holds it reports (`ChatCore.logCommitted(through:)`).
    public private(set) var through: UInt64 = 0
    /// Index of each room's record in `rooms`, once it holds more than one: a batch of one room
    /// (the most common) hashes no name.
    private var index: [String: Int] = [:]
    /// The index in `rooms` of the room changed last: a busy room changes again and again, and
    /// finds itself here without hashing its name.
    private var last = 0

    /// An empty batch.
    public init() {}

    /// A batch of the latest `rooms` (at most one record per room) and `events`, each room's in
    /// `seq` order, numbered 0: what a store's tests commit without a chat.
    public init(rooms: [RoomRecord], events: [StoredEvent] = []) {
        for record in rooms { place(record) }
        self.events = events
    }

    /// Whether it holds nothing for the log.
    @inlinable
    public var isEmpty: Bool { rooms.isEmpty && occupancy.isEmpty }

    /// Whether it holds nothing to write: no record and no event (what a store commits; the
    /// occupancy is the store's upkeep's, told as the batch is staged).
    public var hasNothingToWrite: Bool { rooms.isEmpty && events.isEmpty }

    /// Adds `event`, numbered `number` and `room`'s latest, moving the room's record's `lastSeq`
    /// and `lastActive` to it — if that record is the one changed last. Otherwise adds nothing and
    /// returns false, and the caller adds the whole record (`add`).
    mutating func advance(_ room: String, to event: HistoryEntry, at time: UInt64, number: UInt64) -> Bool {
        guard last < rooms.count, rooms[last].name == room else { return false }
        rooms[last].lastSeq = event.seq
        rooms[last].lastActive = time
        events.append(StoredEvent(room: room, entry: event))
        through = number
        return true
    }

    /// Adds the room's new `record` and, if the change is one kept as history, its `event`.
    mutating func add(_ record: RoomRecord, event: HistoryEntry?, number: UInt64) {
        place(record)
        if let event { events.append(StoredEvent(room: record.name, entry: event)) }
        through = number
    }

    /// Adds what `later`, a batch taken after this one, holds: its records replace this one's of
    /// the same rooms, and its events and occupancy follow. A store stages the batches of one
    /// commit so.
    public mutating func append(contentsOf later: LogBatch) {
        // The first batch of a commit is taken as it is, not copied record by record.
        guard !isEmpty || !events.isEmpty else { return self = later }
        for record in later.rooms { place(record) }
        events.append(contentsOf: later.events)
        occupancy.append(contentsOf: later.occupancy)
        through = max(through, later.through)
    }

    /// Adds `record`, of a batch taken before this one, unless this one holds its room's (newer)
    /// record: a store stages again the records of a commit that failed.
    public mutating func addUnlessNewer(_ record: RoomRecord) {
        if position(of: record.name) == nil { place(record) }
    }

    /// Puts `record` in `rooms`, in place of the room's record there, if any.
    private mutating func place(_ record: RoomRecord) {
        if last < rooms.count, rooms[last].name == record.name {
            rooms[last] = record
        } else if let known = position(of: record.name) {
            rooms[known] = record
            last = known
        } else {
            last = rooms.count
            rooms.append(record)
            if rooms.count == 2 { index[rooms[0].name] = 0 }
            if rooms.count >= 2 { index[record.name] = last }
        }
    }

    /// The index of `room`'s record in `rooms`, if it has one.
    private func position(of room: String) -> Int? {
        switch rooms.count {
        case 0: nil
        case 1: rooms[0].name == room ? 0 : nil
        default: index[room]
        }
    }

    /// Notes that `room` gained its first member (`occupied`) or lost its last.
    mutating func occupancyChanged(of room: String, occupied: Bool) {
        occupancy.append(RoomOccupancy(room: room, occupied: occupied))
    }
}

/// A room that gained its first member (`occupied`) or lost its last.
public struct RoomOccupancy: Sendable, Equatable {
    /// The room's name.
    public var room: String
    /// Whether it has members now.
    public var occupied: Bool

    /// Describes a change of occupancy.
    public init(room: String, occupied: Bool) {
        self.room = room
        self.occupied = occupied
    }
}

/// Where the chat's rooms live beyond memory, which decides when a room event may be delivered.
public enum RoomLogMode: Sendable {
    /// Nowhere: an empty room is forgotten, and an event is delivered as it is numbered.
    case memory
    /// In a log the server commits (journal and SQLite): the server takes the rooms' changes
    /// (`ChatCore.takeLogBatch()`), and an empty room stays in memory until they are committed.
    case durable
    /// In the cluster's Redis, which numbers every event (ChatCore+Cluster.swift).
    case cluster
}
