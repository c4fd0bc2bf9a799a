/// The framing layer of the protocol on its own: where each frame of a byte stream starts and
/// ends, and its type, without decoding a single field.
///
/// A frame is a varint length prefix, then that many bytes: the type byte and the fields
/// (docs/PROTOCOL.md, "Frames"). The splitter reads the prefix, rejects a length above
/// `maxFrameSize` as soon as the prefix is complete (before any of the body is waited for) and a
/// length of 0 (a frame without its type byte), and says where the frame lies. Everything that
/// splits frames goes through it: `FrameDecoder`, which then decodes the fields, and readers that
/// look at only some frames (the load tester's `MessageScanner`).
public struct FrameSplitter: Sendable {
    /// The largest frame (type byte + fields) accepted, in bytes.
    public let maxFrameSize: Int

    /// Makes a splitter that rejects frames longer than `maxFrameSize` bytes (1 ...
    /// `WireProtocol.maxFrameSize`).
    public init(maxFrameSize: Int = WireProtocol.maxFrameSize) {
        precondition(
            (1...WireProtocol.maxFrameSize).contains(maxFrameSize),
            "maxFrameSize must be 1...\(WireProtocol.maxFrameSize)")
        self.maxFrameSize = maxFrameSize
    }

    /// Where the frame starting at `start` lies, once its length prefix is complete: possibly
    /// reaching past the end of `bytes`. Nil while the prefix itself is incomplete.
    ///
    /// Throws `.frameTooLarge` for a length above `maxFrameSize`, `.truncated(.type)` for a length
    /// of 0, and the varint errors of a malformed prefix.
    public func extent(in bytes: UnsafeRawBufferPointer, at start: Int) throws(FrameError) -> FrameExtent? {
        guard let (length, bodyStart) = try Varint.read(bytes, from: start, field: .length) else { return nil }
        guard length <= UInt64(maxFrameSize) else { throw .frameTooLarge(length: length, limit: maxFrameSize) }
        guard length > 0 else { throw .truncated(.type) }
        return FrameExtent(body: bodyStart..<bodyStart + Int(length))
    }

    /// The complete frame starting at `start`, or nil while any of it is missing from `bytes`.
    /// Throws what `extent(in:at:)` throws.
    public func frame(in bytes: UnsafeRawBufferPointer, at start: Int) throws(FrameError) -> SplitFrame? {
        guard let extent = try extent(in: bytes, at: start), extent.end <= bytes.count else { return nil }
        return SplitFrame(type: FrameType(rawValue: bytes[extent.body.lowerBound]), body: extent.body)
    }
}

/// Where one frame lies in a buffer, known from its length prefix alone.
public struct FrameExtent: Sendable, Hashable {
    /// The type byte and the fields: what the length prefix counts. May reach past the bytes at hand.
    public let body: Range<Int>
    /// The index just after the frame.
    public var end: Int { body.upperBound }
}

/// One complete frame in a buffer: its type and where its bytes are.
public struct SplitFrame: Sendable, Hashable {
    /// The frame's type (its first body byte).
    public let type: FrameType
    /// The type byte and the fields.
    public let body: Range<Int>
    /// The fields alone, after the type byte.
    public var fields: Range<Int> { body.lowerBound + 1..<body.upperBound }
    /// The index just after the frame.
    public var end: Int { body.upperBound }
}
