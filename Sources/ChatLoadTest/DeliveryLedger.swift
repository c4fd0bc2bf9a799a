/// What one received message was, for the receiver that got it.
public enum DeliveryOutcome: Hashable, Sendable {
    /// The next message of its sender's stream, or one past a gap: the normal case.
    case inOrder
    /// New, but a later message of the same sender had arrived before it.
    case reordered
    /// Already received once.
    case duplicate
    /// From a sender ordinal outside the run: nobody in this run sent it.
    case foreign
}

/// Counts of what receivers got, against what they should have got.
///
/// A run is clean when `lost`, `duplicated`, `reordered` and `unexpected` are all zero, which
/// is the case exactly when every receiver got every message it expected, once and in order.
public struct DeliveryTally: Hashable, Sendable, Codable {
    /// Deliveries that should have happened: for every receiver, the messages accepted from every
    /// sender in its room.
    public var expected: UInt64
    /// Expected deliveries that happened (each counted once).
    public var delivered: UInt64
    /// Expected deliveries that never arrived: `expected - delivered`.
    public var lost: UInt64
    /// Messages a receiver got more than once (every extra copy counts).
    public var duplicated: UInt64
    /// Messages that arrived after a later message of the same sender.
    public var reordered: UInt64
    /// Messages nobody should have got: a sequence number the sender never had accepted, or a
    /// sender from another room or outside the run.
    public var unexpected: UInt64

    /// A tally with the given counts; zero where not given.
    public init(
        expected: UInt64 = 0, delivered: UInt64 = 0, lost: UInt64 = 0, duplicated: UInt64 = 0,
        reordered: UInt64 = 0, unexpected: UInt64 = 0
    ) {
        self.expected = expected
        self.delivered = delivered
        self.lost = lost
        self.duplicated = duplicated
        self.reordered = reordered
        self.unexpected = unexpected
    }

    /// Whether nothing was lost, duplicated, reordered or unexpected.
    public var isClean: Bool { lost == 0 && duplicated == 0 && reordered == 0 && unexpected == 0 }

    /// Adds `other`'s counts to this tally's.
    public mutating func add(_ other: DeliveryTally) {
        expected += other.expected
        delivered += other.delivered
        lost += other.lost
        duplicated += other.duplicated
        reordered += other.reordered
        unexpected += other.unexpected
    }
}

/// One receiver's record of the messages it got from each sender: the exact accounting behind a
/// load test's "lost, duplicated, reordered: 0".
///
/// Senders number their messages 0, 1, 2, … so a receiver only needs, per sender, how far the
/// stream has arrived without a gap (`contiguous`) and the few sequence numbers that arrived
/// beyond a gap. On a healthy server that set stays empty and recording is a compare and an
/// increment; memory grows only with faults. What was *expected* is known only at the end (how
/// many messages each sender had accepted), so `tally(expected:)` takes it then.
public struct DeliveryLedger: Sendable {
    /// Per-sender state, indexed by sender ordinal.
    private struct Stream: Sendable {
        /// Every sequence number below this arrived.
        var contiguous: UInt64 = 0
        /// Sequence numbers at or above `contiguous + 1` that arrived beyond a gap.
        var ahead: Set<UInt64> = []
        /// The highest sequence number seen plus one (0: nothing yet).
        var highestPlusOne: UInt64 = 0
        var duplicated: UInt64 = 0
        var reordered: UInt64 = 0
    }

    private var streams: [Stream]
    private var foreign: UInt64 = 0

    /// Makes an empty ledger for a run with `senderCount` senders.
    public init(senderCount: Int) {
        streams = Array(repeating: Stream(), count: senderCount)
    }

    /// Records that message `seq` of sender `sender` arrived and says what it was.
    @discardableResult
    public mutating func record(sender: Int, seq: UInt64) -> DeliveryOutcome {
        guard streams.indices.contains(sender) else {
            foreign += 1
            return .foreign
        }
        return streams.withUnsafeMutableBufferPointer { streams in
            Self.record(seq, in: &streams[sender])
        }
    }

    private static func record(_ seq: UInt64, in stream: inout Stream) -> DeliveryOutcome {
        if seq == stream.contiguous {
            stream.contiguous += 1
            if !stream.ahead.isEmpty {
                while stream.ahead.remove(stream.contiguous) != nil { stream.contiguous += 1 }
            }
            let wasBehind = seq + 1 < stream.highestPlusOne
            stream.highestPlusOne = max(stream.highestPlusOne, seq + 1)
            if wasBehind {
                stream.reordered += 1
                return .reordered
            }
            return .inOrder
        }
        if seq < stream.contiguous || stream.ahead.contains(seq) {
            stream.duplicated += 1
            return .duplicate
        }
        stream.ahead.insert(seq)
        if seq + 1 < stream.highestPlusOne {
            stream.reordered += 1
            return .reordered
        }
        stream.highestPlusOne = seq + 1
        return .inOrder
    }

    /// Compares what arrived with what should have: `expected(sender)` is how many messages
    /// (sequence numbers 0 ..< n) this receiver should have got from `sender`.
    public func tally(expected: (Int) -> UInt64) -> DeliveryTally {
        var tally = DeliveryTally()
        tally.unexpected = foreign
        for (sender, stream) in streams.enumerated() {
            let wanted = expected(sender)
            let uniqueBelow = min(stream.contiguous, wanted) + UInt64(stream.ahead.count { $0 < wanted })
            let unique = stream.contiguous + UInt64(stream.ahead.count)
            tally.expected += wanted
            tally.delivered += uniqueBelow
            tally.lost += wanted - uniqueBelow
            tally.unexpected += unique - uniqueBelow
            tally.duplicated += stream.duplicated
            tally.reordered += stream.reordered
        }
        return tally
    }
}
