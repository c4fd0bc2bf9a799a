import SocketCore

/// Where the server encodes room events: each room's events one after another into a segment of
/// the room's own (a `ByteChunk` filled in parts), so that a member's queue, which takes a room's
/// events in order, extends one slot per segment instead of taking a chunk reference per event
/// (`SocketChannel.enqueue(_:bytes:)`).
///
/// A member that stops reading then costs a slot per segment, not one per event; and fan-out
/// costs each member a comparison instead of a reference, a queue slot and a buffer of the
/// gather write. A member whose queue took something else since the room's last event (a reply,
/// another room's event) starts a new slot: the queue keeps the order the chat produced.
///
/// A room's first segment is small, and each next one twice the last, up to `maxCapacity`: a
/// room that spoke once pins a kilobyte, a busy one 64 KiB. `prune()` lets go of the segments
/// no queue holds any more. Segments count against the output meter at their capacity, from
/// their allocation until the last queue lets them go.
struct RoomSegments {
    /// A room's first segment, and one after a prune.
    static let minCapacity = 1 << 10
    /// The largest segment.
    static let maxCapacity = 64 << 10
    /// Frames larger than this get a chunk of their own rather than most of a segment.
    static let largestSegmentFrame = maxCapacity / 4

    private struct Segment {
        var chunk: ByteChunk
        /// Bytes written so far.
        var used: Int
    }

    private var segments: [String: Segment] = [:]

    /// Copies `frame`, an encoded event of `room`, into the room's segment (a new one if it has
    /// no room left) and returns the chunk and where in it the frame is.
    mutating func append(_ frame: UnsafeRawBufferPointer, room: String, meter: MemoryMeter?) -> (ByteChunk, Range<Int>) {
        let count = frame.count
        guard count <= Self.largestSegmentFrame else {
            return (ByteChunk(copying: frame, meter: meter), 0..<count)
        }
        return Self.append(frame, to: &segments[room, default: Segment(chunk: Self.emptyChunk, used: 0)], meter: meter)
    }

    private static func append(_ frame: UnsafeRawBufferPointer, to segment: inout Segment, meter: MemoryMeter?) -> (ByteChunk, Range<Int>) {
        let count = frame.count
        if segment.used + count > segment.chunk.count {
            // Twice the last one (a busy room fills them fast), and at least four such frames.
            var capacity = max(Self.minCapacity, segment.chunk.count * 2)
            while capacity < 4 * count { capacity *= 2 }
            segment = Segment(chunk: ByteChunk(capacity: min(capacity, Self.maxCapacity), meter: meter), used: 0)
        }
        let start = segment.used
        segment.chunk.fill(from: frame, at: start)
        segment.used += count
        return (segment.chunk, start..<segment.used)
    }

    /// Lets go of every segment no queue holds: a quiet room's next event starts a small one.
    mutating func prune() {
        for room in Array(segments.keys) where isKnownUniquelyReferenced(&segments[room]!.chunk) {
            segments[room] = nil
        }
    }

    /// The placeholder of a room that has no segment yet: full at once, so the first event makes one.
    private static let emptyChunk = ByteChunk(capacity: 0)
}
