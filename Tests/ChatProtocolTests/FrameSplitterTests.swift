import ChatProtocol
import Testing

/// The framing layer alone: where frames start and end, and which prefixes are refused.
@Suite("Frame splitting")
struct FrameSplitterTests {
    /// Every sample frame, back to back, with the end and type of each.
    static let stream: (bytes: [UInt8], frames: [(type: FrameType, end: Int)]) = {
        var bytes: [UInt8] = []
        var frames: [(FrameType, Int)] = []
        for frame in SampleFrames.all {
            let encoded = FrameEncoder.encode(frame)
            bytes += encoded
            frames.append((FrameType(rawValue: encoded[Self.prefixLength(encoded)]), bytes.count))
        }
        return (bytes, frames)
    }()

    /// How many bytes the length prefix of the encoded frame `encoded` takes.
    static func prefixLength(_ encoded: [UInt8]) -> Int {
        var length = 1
        while encoded[length - 1] & 0x80 != 0 { length += 1 }
        return length
    }

    @Test func findsEveryFrameWhereTheEncoderEndedIt() throws {
        let splitter = FrameSplitter()
        let (bytes, expected) = Self.stream
        var found: [(FrameType, Int)] = []
        try bytes.withUnsafeBytes { buffer in
            var index = 0
            while let frame = try splitter.frame(in: buffer, at: index) {
                let prefix = Self.prefixLength(Array(buffer[index..<frame.end]))
                #expect(frame.body.lowerBound == index + prefix, "the body starts right after the prefix")
                #expect(frame.fields == frame.body.lowerBound + 1..<frame.end, "the fields follow the type byte")
                found.append((frame.type, frame.end))
                index = frame.end
            }
            #expect(index == buffer.count, "stopped at \(index) of \(buffer.count) bytes")
        }
        #expect(found.map(\.0) == expected.map(\.type))
        #expect(found.map(\.1) == expected.map(\.end))
    }

    @Test func aFrameIsNotSplitUntilItsLastByteIsThere() throws {
        let splitter = FrameSplitter()
        let encoded = FrameEncoder.encode(.say(room: "general", text: "hello"))
        for count in 0..<encoded.count {
            let partial = try Array(encoded[..<count]).withUnsafeBytes { try splitter.frame(in: $0, at: 0) }
            #expect(partial == nil, "a frame cut after \(count) of \(encoded.count) bytes was split")
        }
        let whole = try encoded.withUnsafeBytes { try splitter.frame(in: $0, at: 0) }
        #expect(whole?.type == .say && whole?.end == encoded.count)
    }

    @Test func theExtentIsKnownOnceThePrefixIsComplete() throws {
        let splitter = FrameSplitter(maxFrameSize: 1000)
        let prefixOnly: [UInt8] = [0xC8, 0x01]  // 200, no body yet
        let extent = try prefixOnly.withUnsafeBytes { try splitter.extent(in: $0, at: 0) }
        #expect(extent?.body == 2..<202, "expected the body at 2..<202, reaching past the 2 bytes at hand, got \(String(describing: extent))")
        let halfPrefix = try [UInt8(0xC8)].withUnsafeBytes { try splitter.extent(in: $0, at: 0) }
        #expect(halfPrefix == nil, "a prefix cut in half has no extent yet")
    }

    @Test func refusesBadPrefixesBeforeAnyBodyArrives() {
        let splitter = FrameSplitter(maxFrameSize: 100)
        let cases: [([UInt8], FrameError)] = [
            ([0xC8, 0x01], .frameTooLarge(length: 200, limit: 100)),
            ([0x00], .truncated(.type)),
            ([0x85, 0x00], .nonMinimalInteger(.length)),
            ([0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x02], .integerOverflow(.length)),
        ]
        for (prefix, error) in cases {
            #expect(throws: error, "prefix \(prefix)") {
                try prefix.withUnsafeBytes { _ = try splitter.frame(in: $0, at: 0) }
            }
        }
    }
}
