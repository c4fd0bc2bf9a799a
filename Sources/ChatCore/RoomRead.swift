import ChatProtocol

/// A read of a room log that `ChatCore` waits for (`RoomStore.read` in the server).
public enum RoomRead: Sendable {
    /// The stored room with its `recent` newest events: for the first joiner of a room that is
    /// not in memory.
    case room(String, recent: Int)
    /// A page of the room's committed events next to `from`, as `RoomDatabase.page` answers
    /// it: at most `limit` entries whose `cost` adds up to at most `budget`.
    case page(String, HistoryDirection, from: UInt64, limit: Int, budget: Int, cost: @Sendable (HistoryEntry) -> Int)
}

/// What a `RoomRead` found.
public enum RoomReadAnswer: Sendable, Equatable {
    /// The stored room, or nil if none is stored under that name.
    case room(StoredRoom?)
    /// The page's entries, oldest first, and whether they reach the end of the stored history in
    /// the page's direction.
    case page(entries: [HistoryEntry], complete: Bool)
}

extension RoomRead {
    /// The room read.
    package var room: String {
        switch self {
        case .room(let name, _), .page(let name, _, _, _, _, _): name
        }
    }
}

/// Why a room log could not answer a read or keep a commit: what the core tells the clients
/// concerned (`storageFailed`). The backend keeps its own error, with its details, for its log.
public struct LogError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, for people.
    public var message: String

    /// Wraps a message.
    public init(_ message: String) { self.message = message }

    /// The message.
    public var description: String { message }
}
