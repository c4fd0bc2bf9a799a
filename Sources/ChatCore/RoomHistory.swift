import ChatProtocol
import DequeModule

/// The most recent messages, actions and topic changes of one room, oldest first, bounded by a
/// number of entries and by bytes.
///
/// Storing a `HistoryEntry` retains the strings the delivery already made. Entries arrive in
/// increasing `seq` order, so the queue is sorted by `seq` and a page next to a `seq` is found by
/// binary search.
package struct RoomHistory: Sendable {
    /// The most entries kept.
    package let capacity: Int
    /// The most bytes (by `cost(of:)`) kept.
    package let byteCapacity: Int
    private var entries = Deque<HistoryEntry>()
    /// What the kept entries cost, by `cost(of:)`.
    package private(set) var bytes = 0

    /// An empty history that keeps at most `capacity` entries costing at most `byteCapacity`.
    package init(capacity: Int, byteCapacity: Int) {
        self.capacity = capacity
        self.byteCapacity = byteCapacity
    }

    /// What keeping `entry` costs in memory: its strings and the entry itself (a String's bytes
    /// live in a heap object of their own once they are longer than 15).
    package static func cost(of entry: HistoryEntry) -> Int {
        96 + entry.sender.utf8.count + entry.text.utf8.count
    }

    /// How many entries are kept.
    package var count: Int { entries.count }

    /// The `seq` of the oldest entry kept, or nil when there is none.
    package var firstSeq: UInt64? { entries.first?.seq }

    /// Adds `entry`, whose `seq` is above every kept one, forgetting the oldest entries while
    /// there are more than `capacity` or they cost more than `byteCapacity`. Returns the bytes
    /// forgotten.
    @discardableResult
    package mutating func append(_ entry: HistoryEntry) -> Int {
        guard capacity > 0 else { return 0 }
        entries.append(entry)
        bytes += Self.cost(of: entry)
        var forgotten = 0
        while entries.count > capacity || (bytes > byteCapacity && entries.count > 1) {
            forgotten += removeOldest()
        }
        return forgotten
    }

    /// Forgets the oldest entry and returns what it cost (0 when there is none).
    @discardableResult
    package mutating func removeOldest() -> Int {
        guard let oldest = entries.popFirst() else { return 0 }
        let cost = Self.cost(of: oldest)
        bytes -= cost
        return cost
    }

    /// Forgets the entry whose `seq` is `seq` and returns what it cost (0 when there is none).
    @discardableResult
    package mutating func remove(seq: UInt64) -> Int {
        let offset = self.offset(after: seq - 1)
        guard offset < entries.count, entries[offset].seq == seq else { return 0 }
        let cost = Self.cost(of: entries.remove(at: offset))
        bytes -= cost
        return cost
    }

    /// The `seq` of the newest entry kept, or nil when there is none.
    package var lastSeq: UInt64? { entries.last?.seq }

    /// The offset of the first entry whose `seq` is above `seq` (`count` when none is).
    private func offset(after seq: UInt64) -> Int {
        var low = 0
        var high = entries.count
        while low < high {
            let middle = (low + high) / 2
            if entries[middle].seq <= seq { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// At most `limit` of the most recent entries of the kinds version 1 knows (messages and
    /// actions), oldest first: what a `history` frame may carry.
    package func recentMessages(_ limit: Int) -> [HistoryEntry] {
        var result: [HistoryEntry] = []
        var offset = entries.count
        while offset > 0, result.count < limit {
            offset -= 1
            let entry = entries[offset]
            if entry.kind != .topic { result.append(entry) }
        }
        return result.reversed()
    }

    /// A page of entries next to `seq`, oldest first, holding at most `limit` entries that cost
    /// at most `budget` bytes by `cost` (at least one entry when any qualifies):
    /// - `.before`: the newest entries with a `seq` below `seq` (0 means no bound);
    /// - `.after`: the oldest entries with a `seq` above `seq`.
    ///
    /// `complete` is true when no kept entry lies beyond the page in that direction.
    package func page(
        _ direction: HistoryDirection, from seq: UInt64, limit: Int, budget: Int, cost: (HistoryEntry) -> Int
    ) -> (entries: [HistoryEntry], complete: Bool) {
        var taken: [HistoryEntry] = []
        var spent = 0
        switch direction {
        case .before:
            var offset = seq == 0 ? entries.count : self.offset(after: seq - 1)
            while offset > 0, taken.count < limit {
                let entry = entries[offset - 1]
                spent += cost(entry)
                if spent > budget, !taken.isEmpty { break }
                taken.append(entry)
                offset -= 1
            }
            return (taken.reversed(), offset == 0)
        case .after:
            var offset = self.offset(after: seq)
            while offset < entries.count, taken.count < limit {
                let entry = entries[offset]
                spent += cost(entry)
                if spent > budget, !taken.isEmpty { break }
                taken.append(entry)
                offset += 1
            }
            return (taken, offset == entries.count)
        }
    }
}
