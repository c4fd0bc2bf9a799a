import ChatCore
import ChatProtocol

/// Consecutive events of one room packed into one blob: one row of the `event_chunks` table.
///
/// Why chunks and not a row per event: SQLite's cost is per row (a B-tree insert and its index
/// entries), and the writer stores what a busy room says — tens of thousands of events a second —
/// on the same two cores that fan them out. A commit writes each room's new events as one chunk
/// (split at `maxEvents`/`maxBytes`), so a row carries a whole group commit's worth; reads
/// decode a chunk or two per page; retention deletes whole chunks and rewrites the one it cuts.
///
/// The blob: a format byte (1), then per event its kind (one byte), its `seq` as the varint
/// distance from the previous event's (from `firstSeq` for the first), its time as a varint, and
/// sender and text, each a varint length and UTF-8 bytes.
public struct EventChunk: Sendable, Equatable {
    /// The events, in increasing `seq` order.
    public var events: [HistoryEntry]

    /// Most events in one chunk: retention by count cuts at most one chunk apart, and a page of
    /// history decodes at most a chunk more than it returns.
    public static let maxEvents = 128
    /// About the most bytes of text in one chunk, for the same reasons.
    public static let maxBytes = 32 << 10

    static let format: UInt8 = 1

    /// Wraps events already in increasing `seq` order.
    public init(_ events: [HistoryEntry]) {
        self.events = events
    }

    /// The first event's `seq`; 0 for an empty chunk.
    public var firstSeq: UInt64 { events.first?.seq ?? 0 }
    /// The last event's `seq`; 0 for an empty chunk.
    public var lastSeq: UInt64 { events.last?.seq ?? 0 }
    /// The oldest event's time: what retention by age and by total finds chunks by.
    public var oldestTime: UInt64 { events.lazy.map(\.time).min() ?? 0 }

    /// Splits `events` (increasing `seq`) into chunks within `maxEvents` and `maxBytes`.
    public static func split(_ events: ArraySlice<HistoryEntry>) -> [EventChunk] {
        var chunks: [EventChunk] = []
        var start = events.startIndex
        while start < events.endIndex {
            let end = chunkEnd(of: events, from: start)
            chunks.append(EventChunk(Array(events[start..<end])))
            start = end
        }
        return chunks
    }

    /// Where the chunk of `events` that starts at `start` (before their end) ends: after at
    /// least one event, within `maxEvents` and `maxBytes`. What `split` splits by, for a commit
    /// that writes chunks straight from its batch (`RoomDatabase.commit`).
    static func chunkEnd<Events: Collection>(of events: Events, from start: Events.Index) -> Events.Index
    where Events.Element: ChunkEvent {
        var end = start
        var count = 0
        var bytes = 0
        while end < events.endIndex {
            let size = events[end].sender.utf8.count + events[end].text.utf8.count
            if count > 0, count == maxEvents || bytes + size > maxBytes { break }
            count += 1
            bytes += size
            events.formIndex(after: &end)
        }
        return end
    }

    /// The blob.
    public func encoded() -> [UInt8] { Self.encoded(events) }

    /// The blob of `events` (increasing `seq`, at least one): `encoded()` of a chunk of them.
    static func encoded<Events: Collection>(_ events: Events) -> [UInt8] where Events.Element: ChunkEvent {
        // Sized exactly first, then written through a pointer: every event a busy room stores
        // passes here once, and appending field by field went through the array's growth and
        // uniqueness checks for each (a third of a commit's instructions on the event loop).
        // Each field is read through the collection's subscript, not from a copy of the event
        // (`for event in events` retains and releases every string of it).
        let firstSeq = events.first?.seq ?? 0
        var previous = firstSeq
        var size = 1
        for index in events.indices {
            let senderBytes = events[index].sender.utf8.count
            let textBytes = events[index].text.utf8.count
            let seq = events[index].seq
            size += 1 + Self.varintLength(seq - previous) + Self.varintLength(events[index].time)
                + Self.varintLength(UInt64(senderBytes)) + senderBytes + Self.varintLength(UInt64(textBytes)) + textBytes
            previous = seq
        }
        return [UInt8](unsafeUninitializedCapacity: size) { buffer, initialized in
            var out = buffer.baseAddress!
            out.initialize(to: Self.format)
            out += 1
            var previous = firstSeq
            for index in events.indices {
                let seq = events[index].seq
                out.initialize(to: events[index].kind.rawValue)
                out += 1
                Self.write(varint: seq - previous, to: &out)
                previous = seq
                Self.write(varint: events[index].time, to: &out)
                Self.write(events[index].sender, to: &out)
                Self.write(events[index].text, to: &out)
            }
            initialized = out - buffer.baseAddress!
            precondition(initialized == size, "an event chunk's size was miscounted")
        }
    }

    /// Appends the blob of a chunk whose first event is `firstSeq` to `blob`, the blob of a
    /// chunk of the same room whose last event is `lastSeq` (before `firstSeq`): the blob of the
    /// two chunks as one. Only the first event's `seq` changes, from a distance of 0 to
    /// `firstSeq - lastSeq`, so the events are not decoded. Returns false, changing nothing,
    /// for a blob not as `encoded` writes it.
    static func append(_ next: [UInt8], firstSeq: UInt64, to blob: inout [UInt8], after lastSeq: UInt64) -> Bool {
        // The format byte, the first event's kind, and its distance of 0 (one byte).
        guard firstSeq > lastSeq, next.count > 3, next[0] == format, next[2] == 0, blob.first == format else { return false }
        blob.append(next[1])
        blob.append(varint: firstSeq - lastSeq)
        blob.append(contentsOf: next[3...])
        return true
    }

    private static func write(varint value: UInt64, to out: inout UnsafeMutablePointer<UInt8>) {
        var value = value
        while value >= 0x80 {
            out.initialize(to: UInt8(truncatingIfNeeded: value) | 0x80)
            out += 1
            value >>= 7
        }
        out.initialize(to: UInt8(value))
        out += 1
    }

    private static func write(_ string: String, to out: inout UnsafeMutablePointer<UInt8>) {
        // Through the string's contiguous UTF-8 (a native string's own storage), not its `utf8`
        // view byte by byte; borrowed where it can be, not copied to be made contiguous.
        let written: Void? = string.utf8.withContiguousStorageIfAvailable { bytes in write(bytes, to: &out) }
        guard written == nil else { return }
        var string = string
        string.withUTF8 { bytes in write(bytes, to: &out) }
    }

    private static func write(_ bytes: UnsafeBufferPointer<UInt8>, to out: inout UnsafeMutablePointer<UInt8>) {
        write(varint: UInt64(bytes.count), to: &out)
        guard let base = bytes.baseAddress else { return }
        out.initialize(from: base, count: bytes.count)
        out += bytes.count
    }

    /// How many bytes `value` takes as a varint: 1 to 10.
    private static func varintLength(_ value: UInt64) -> Int {
        (64 - (value | 1).leadingZeroBitCount + 6) / 7
    }

    /// Decodes the blob of the chunk whose first event is `firstSeq`; nil if it is malformed
    /// (the caller reports the corruption).
    public static func decode(_ blob: UnsafeRawBufferPointer, firstSeq: UInt64) -> EventChunk? {
        guard blob.first == format else { return nil }
        var reader = ByteReader(bytes: blob, index: 1)
        var events: [HistoryEntry] = []
        var seq = firstSeq
        while reader.index < blob.count {
            guard let kindByte = reader.byte(), let kind = HistoryEntry.Kind(rawValue: kindByte),
                let delta = reader.varint(), let time = reader.varint(),
                let sender = reader.string(), let text = reader.string()
            else { return nil }
            let (next, overflow) = seq.addingReportingOverflow(delta)
            // Only the first event may sit at firstSeq itself: seqs strictly increase.
            guard !overflow, events.isEmpty ? delta == 0 : delta > 0 else { return nil }
            seq = next
            events.append(HistoryEntry(kind: kind, seq: seq, time: time, sender: sender, text: text))
        }
        return events.isEmpty ? nil : EventChunk(events)
    }
}

/// What a chunk's blob is made of: a `HistoryEntry`, or a commit's `StoredEvent` read in place, so
/// that a commit encodes its batch without first gathering each chunk's entries into an array of
/// their own (retaining every string twice more, and releasing them after).
protocol ChunkEvent {
    /// What happened: a message, an action, a topic …
    var kind: HistoryEntry.Kind { get }
    /// The event's number in its room.
    var seq: UInt64 { get }
    /// When, in wall-clock milliseconds.
    var time: UInt64 { get }
    /// Who.
    var sender: String { get }
    /// What was said.
    var text: String { get }
}

extension HistoryEntry: ChunkEvent {}

/// A batch's event is its entry, for the chunk encoder.
extension StoredEvent: ChunkEvent {
    var kind: HistoryEntry.Kind { entry.kind }
    var seq: UInt64 { entry.seq }
    var time: UInt64 { entry.time }
    var sender: String { entry.sender }
    var text: String { entry.text }
}
