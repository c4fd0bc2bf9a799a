import ChatProtocol

/// The most recent messages, actions and topic changes of one room, oldest first, in a
/// fixed-size ring.
///
/// Storing a `HistoryEntry` retains the strings the delivery already made, so recording costs no
/// allocation once the ring has filled. Entries arrive in increasing `seq` order, so the ring is
/// sorted by `seq` and a page next to a `seq` is found by binary search.
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

    /// The `seq` of the oldest entry kept, or nil when there is none.
    var firstSeq: UInt64? { entries.isEmpty ? nil : self[0].seq }

    /// Adds `entry`, whose `seq` is above every kept one, forgetting the oldest when full.
    mutating func append(_ entry: HistoryEntry) {
        guard capacity > 0 else { return }
        if entries.count < capacity {
            entries.append(entry)
        } else {
            entries[start] = entry
            start = (start + 1) % capacity
        }
    }

    /// The entry at `offset` from the oldest.
    private subscript(offset: Int) -> HistoryEntry {
        entries[(start + offset) % entries.count]
    }

    /// The offset of the first entry whose `seq` is above `seq` (`count` when none is).
    private func offset(after seq: UInt64) -> Int {
        var low = 0
        var high = entries.count
        while low < high {
            let middle = (low + high) / 2
            if self[middle].seq <= seq { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// At most `limit` of the most recent entries of the kinds version 1 knows (messages and
    /// actions), oldest first: what a `history` frame may carry.
    func recentMessages(_ limit: Int) -> [HistoryEntry] {
        var result: [HistoryEntry] = []
        var offset = entries.count
        while offset > 0, result.count < limit {
            offset -= 1
            let entry = self[offset]
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
    func page(
        _ direction: HistoryDirection, from seq: UInt64, limit: Int, budget: Int, cost: (HistoryEntry) -> Int
    ) -> (entries: [HistoryEntry], complete: Bool) {
        var taken: [HistoryEntry] = []
        var spent = 0
        switch direction {
        case .before:
            var offset = seq == 0 ? entries.count : self.offset(after: seq - 1)
            while offset > 0, taken.count < limit {
                let entry = self[offset - 1]
                spent += cost(entry)
                if spent > budget, !taken.isEmpty { break }
                taken.append(entry)
                offset -= 1
            }
            return (taken.reversed(), offset == 0)
        case .after:
            var offset = self.offset(after: seq)
            while offset < entries.count, taken.count < limit {
                let entry = self[offset]
                spent += cost(entry)
                if spent > budget, !taken.isEmpty { break }
                taken.append(entry)
                offset += 1
            }
            return (taken, offset == entries.count)
        }
    }
}
