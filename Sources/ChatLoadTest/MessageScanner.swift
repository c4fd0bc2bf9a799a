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

    /// The largest frame accepted (type and fields), as for `FrameDecoder`.
    public let maxFrameSize: Int
    /// The start of a frame that did not fit in the last chunk.
    private var pending: [UInt8] = []

    /// Makes a scanner that rejects frames longer than `maxFrameSize`.
    public init(maxFrameSize: Int = WireProtocol.maxFrameSize) {
        self.maxFrameSize = maxFrameSize
    }

    /// Bytes held back because the frame they start is not complete yet.
    public var bufferedByteCount: Int { pending.count }

    /// Hands every complete frame in `pending` + `bytes` to `body`, in order, and keeps the rest.
    ///
    /// Throws the first `FrameError` in the stream; the scanner must not be used after that.
    public mutating func scan(_ bytes: UnsafeRawBufferPointer, _ body: (Item) -> Void) throws(FrameError) {
        var input = bytes
        // Finish the frame the last chunk started by moving just its missing bytes, so that the
        // rest of this chunk is scanned in place, uncopied.
        while !pending.isEmpty, !input.isEmpty {
            let take: Int
            // Array's closures rethrow untyped errors; a Result keeps the FrameError typed.
            let header = try pending.withUnsafeBytes { bytes in
                Result { () throws(FrameError) in try frameExtent(bytes, at: 0) }
            }.get()
            if let header {
                take = min(header.end - pending.count, input.count)
            } else {
                take = 1  // the length prefix itself is incomplete: take it byte by byte
            }
            pending.append(contentsOf: UnsafeRawBufferPointer(rebasing: input[..<take]))
            input = UnsafeRawBufferPointer(rebasing: input[take...])
            if let header, pending.count == header.end {
                try pending.withUnsafeBytes { frame in
                    Result { () throws(FrameError) in try emit(frame, bodyStart: header.bodyStart, body) }
                }.get()
                pending.removeAll(keepingCapacity: true)
            }
        }
        var index = 0
        while index < input.count {
            guard let extent = try frameExtent(input, at: index), extent.end <= input.count else { break }
            try emit(UnsafeRawBufferPointer(rebasing: input[index..<extent.end]), bodyStart: extent.bodyStart - index, body)
            index = extent.end
        }
        if index < input.count { pending.append(contentsOf: UnsafeRawBufferPointer(rebasing: input[index...])) }
    }

    /// Where the frame starting at `start` has its body and where it ends (possibly past the end
    /// of `bytes`), or nil when the length prefix is not complete yet.
    private func frameExtent(_ bytes: UnsafeRawBufferPointer, at start: Int) throws(FrameError) -> (bodyStart: Int, end: Int)? {
        var index = start
        guard let length = try Self.varint(bytes, &index, field: .length) else { return nil }
        guard length <= UInt64(maxFrameSize) else { throw .frameTooLarge(length: length, limit: maxFrameSize) }
        guard length > 0 else { throw .truncated(.type) }
        return (index, index + Int(length))
    }

    /// Reads one complete frame (`frame` holds its prefix and body).
    private func emit(_ frame: UnsafeRawBufferPointer, bodyStart: Int, _ body: (Item) -> Void) throws(FrameError) {
        if frame[bodyStart] == FrameType.message.rawValue, let payload = Self.loadPayload(frame, from: bodyStart + 1) {
            body(.load(payload, frameBytes: frame.count))
        } else {
            body(.frame(try Frame(decoding: frame, maxFrameSize: maxFrameSize)))
        }
    }

    /// Reads a `message` body after its type byte: room, seq, time, sender, then the payload text.
    /// Nil when anything is off; the caller then decodes the frame properly to find out what.
    private static func loadPayload(_ frame: UnsafeRawBufferPointer, from start: Int) -> LoadPayload? {
        var index = start
        do throws(FrameError) {
            guard let roomLength = try varint(frame, &index, field: .room), roomLength < frame.count else { return nil }
            index += Int(roomLength)
            guard index < frame.count, try varint(frame, &index, field: .seq) != nil,
                  try varint(frame, &index, field: .time) != nil,
                  let senderLength = try varint(frame, &index, field: .sender), senderLength < frame.count
            else { return nil }
            index += Int(senderLength)
            guard index <= frame.count else { return nil }
        } catch {
            return nil
        }
        return LoadPayload.parse(UnsafeRawBufferPointer(rebasing: frame[index...]))
    }

    /// Reads an unsigned LEB128 varint at `index`, advancing it; nil when `bytes` ends first.
    private static func varint(_ bytes: UnsafeRawBufferPointer, _ index: inout Int, field: Field) throws(FrameError) -> UInt64? {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        var position = index
        while position < bytes.count {
            let byte = bytes[position]
            position += 1
            guard shift < 63 || (shift == 63 && byte <= 1) else { throw .integerOverflow(field) }
            value |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 {
                index = position
                return value
            }
            shift += 7
        }
        return nil
    }
}
