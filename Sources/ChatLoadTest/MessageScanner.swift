import ChatProtocol

/// Splits a received byte stream into frames, reading load-test messages without building them.
///
/// A receiver in a busy room gets hundreds of thousands of `message` frames a second, and the load
/// generator shares the machine with the server it measures, so every nanosecond it spends per
/// delivery is taken from the server. `FrameDecoder` builds a full `Frame` with its `String`s;
/// for the one frame that matters here, a `message` whose text is a `LoadPayload`, this scanner
/// reads only the fields the accounting needs, in place. The shortcut: such a frame's room and
/// sender names are skipped, not validated. Every other frame, and any `message` it cannot read,
/// goes through `Frame(decoding:)`, which validates everything and throws on a bad stream.
public struct MessageScanner: Sendable {
    /// One frame of the stream.
    public enum Item: Sendable {
        /// A `message` carrying a load-test payload; `frameBytes` is its size on the wire.
        case load(LoadPayload, frameBytes: Int)
        /// Any other frame, decoded in full.
        case frame(Frame)
    }

    /// Finds the frames, with the same rules and limit as `FrameDecoder`.
    private let splitter: FrameSplitter
    /// The start of a frame that did not fit in the last chunk.
    private var pending: [UInt8] = []

    /// The largest frame accepted (type and fields), as for `FrameDecoder`.
    public var maxFrameSize: Int { splitter.maxFrameSize }

    /// Makes a scanner that rejects frames longer than `maxFrameSize`.
    public init(maxFrameSize: Int = WireProtocol.maxFrameSize) {
        splitter = FrameSplitter(maxFrameSize: maxFrameSize)
    }

    /// Bytes held back because the frame they start is not complete yet.
    public var bufferedByteCount: Int { pending.count }

    /// Hands every complete frame in `pending` + `bytes` to `body`, in order, and keeps the rest.
    ///
    /// Throws the first `FrameError` in the stream; the scanner must not be used after that.
    public mutating func scan(_ bytes: UnsafeRawBufferPointer, _ body: (Item) -> Void) throws(FrameError) {
        var input = bytes
        let splitter = splitter
        // Finish the frame the last chunk started by moving just its missing bytes, so that the
        // rest of this chunk is scanned in place, uncopied.
        while !pending.isEmpty, !input.isEmpty {
            // Array's closures rethrow untyped errors; a Result keeps the FrameError typed.
            let extent = try pending.withUnsafeBytes { bytes in
                Result { () throws(FrameError) in try splitter.extent(in: bytes, at: 0) }
            }.get()
            // Until the length prefix is complete, take it byte by byte.
            let take = extent.map { min($0.end - pending.count, input.count) } ?? 1
            pending.append(contentsOf: UnsafeRawBufferPointer(rebasing: input[..<take]))
            input = UnsafeRawBufferPointer(rebasing: input[take...])
            if let extent, pending.count == extent.end {
                try pending.withUnsafeBytes { bytes in
                    Result { () throws(FrameError) in
                        if let frame = try splitter.frame(in: bytes, at: 0) { try emit(bytes, from: 0, frame, body) }
                    }
                }.get()
                pending.removeAll(keepingCapacity: true)
            }
        }
        var index = 0
        while index < input.count, let frame = try splitter.frame(in: input, at: index) {
            try emit(input, from: index, frame, body)
            index = frame.end
        }
        if index < input.count { pending.append(contentsOf: UnsafeRawBufferPointer(rebasing: input[index...])) }
    }

    /// Reads one complete frame: its prefix starts at `start` in `bytes`, `frame` says where its
    /// body lies.
    private func emit(
        _ bytes: UnsafeRawBufferPointer, from start: Int, _ frame: SplitFrame, _ body: (Item) -> Void
    ) throws(FrameError) {
        let wire = UnsafeRawBufferPointer(rebasing: bytes[start..<frame.end])
        if frame.type == .message, let payload = Self.loadPayload(bytes, fields: frame.fields) {
            body(.load(payload, frameBytes: wire.count))
        } else {
            body(.frame(try Frame(decoding: wire, maxFrameSize: maxFrameSize)))
        }
    }

    /// Reads a `message`'s fields: room, seq, time, sender, then the payload text. Nil when
    /// anything is off; the caller then decodes the frame properly to find out what.
    private static func loadPayload(_ bytes: UnsafeRawBufferPointer, fields: Range<Int>) -> LoadPayload? {
        let frame = UnsafeRawBufferPointer(rebasing: bytes[..<fields.upperBound])
        var index = fields.lowerBound
        // Steps over one varint; with `andThatManyBytes`, over the string it is the length of too.
        func skip(_ field: Field, andThatManyBytes: Bool = false) throws(FrameError) -> Bool {
            guard let (value, next) = try Varint.read(frame, from: index, field: field) else { return false }
            index = next
            guard andThatManyBytes else { return true }
            guard value <= UInt64(frame.count - index) else { return false }
            index += Int(value)
            return true
        }
        do throws(FrameError) {
            // Room and sender are skipped unread (the shortcut this type admits to).
            guard try skip(.room, andThatManyBytes: true), try skip(.seq), try skip(.time),
                  try skip(.sender, andThatManyBytes: true)
            else { return nil }
        } catch {
            return nil
        }
        return LoadPayload.parse(UnsafeRawBufferPointer(rebasing: frame[index...]))
    }
}
