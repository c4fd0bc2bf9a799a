import ChatProtocol

/// The most recent messages and actions of one room, oldest first, in a fixed-size ring.
///
/// Storing a `HistoryEntry` retains the strings the delivery already made, so recording costs no
/// allocation once the ring has filled.
struct RoomHistory: Sendable {
    let capacity: Int
    private var entries: [HistoryEntry] = []
    private var start = 0

    /// An empty history that keeps at most `capacity` entries.
    init(capacity: Int) {
        self.capacity = capacity
    }

    /// How many entries are kept.
    var count: Int { entries.count }

    /// Adds `entry`, forgetting the oldest when full.
    mutating func append(_ entry: HistoryEntry) {
        guard capacity > 0 else { return }
        if entries.count < capacity {
            entries.append(entry)
        } else {
            entries[start] = entry
            start = (start + 1) % capacity
        }
    }

    /// The `limit` most recent entries, oldest first.
    func suffix(_ limit: Int) -> [HistoryEntry] {
        let take = min(limit, entries.count)
        var result: [HistoryEntry] = []
        result.reserveCapacity(take)
        for offset in (entries.count - take)..<entries.count {
            result.append(entries[(start + offset) % entries.count])
        }
        return result
    }
}
