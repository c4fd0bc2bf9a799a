import ChatProtocol

/// What the core asks of a room log that commits a turn's changes at once (the durable mode's
/// `RoomStore` in the server): it stages each change of a room as it happens, asks whether a
/// room has changes not yet committed, and says when a room gains its first member or loses its
/// last. The commit itself, and the reads, are the server's.
///
/// Called only on the queue the core is used on (the server's).
public protocol StagingRoomLog: AnyObject, Sendable {
    /// Adds to the next commit the room's new record and, if the change is a stored event, the event.
    func stage(_ record: RoomRecord, event: HistoryEntry?)

    /// Adds `event`, a message or an action numbered `room`'s latest, to the next commit, moving
    /// the room's staged record's `lastSeq` to it and `lastActive` to `time` — if that record is
    /// the one staged last. Otherwise stages nothing and returns false, and the caller stages the
    /// whole record (`stage(_:event:)`).
    func stage(_ event: HistoryEntry, advancing room: String, at time: UInt64) -> Bool

    /// Whether `room` has changes staged or not yet committed.
    func hasUncommittedWrites(in room: String) -> Bool

    /// Says that `room` has members now (`occupied`) or has none left. Retention never deletes
    /// an occupied room, however long its members stay quiet; an empty one is deleted once it
    /// has been idle for the store's empty-room time. Call when a room gains its first member
    /// and when it loses its last.
    func occupancyChanged(of room: String, occupied: Bool)
}
