import ChatProtocol
import Testing

@Suite("Incremental decoding")
struct ChunkingTests {
    /// Every sample frame, back to back.
    static let stream: [UInt8] = {
        var bytes: [UInt8] = []
        for frame in SampleFrames.all { FrameEncoder.encode(frame, into: &bytes) }
        return bytes
    }()

    @Test func decodesEveryFrameFromOneChunk() {
        let result = FuzzProperties.decodeStream(Self.stream, limit: WireProtocol.maxFrameSize, chunkSizes: [Self.stream.count])
        #expect(result.frames == SampleFrames.all && result.error == nil && result.buffered == 0)
    }

    @Test func decodesTheSameFramesAtEverySplitWithAnEmptyChunkBetween() throws {
        let bytes = Self.stream
        for split in 0...bytes.count {
            var decoder = FrameDecoder()
            var frames: [Frame] = []
            for chunk in [bytes[..<split], [], bytes[split...]] {
                decoder.append(contentsOf: chunk)
                while let frame = try decoder.next() { frames.append(frame) }
            }
            #expect(frames == SampleFrames.all, "split at byte \(split) changed the frames")
            #expect(decoder.bufferedByteCount == 0)
        }
    }

    @Test("decodes the same frames in chunks of", arguments: [1, 2, 3, 5, 8, 13, 64, 1000])
    func decodesInFixedChunkSizesWithEmptyChunksMixedIn(size: Int) {
        // A zero in the plan appends an empty chunk before the next byte.
        let result = FuzzProperties.decodeStream(Self.stream, limit: WireProtocol.maxFrameSize, chunkSizes: [size, 0])
        #expect(result.violation == nil, "\(result.violation ?? "")")
        #expect(result.frames == SampleFrames.all && result.error == nil && result.buffered == 0)
    }

    @Test func keepsAPartialFrameUntilItCompletes() throws {
        let bytes = FrameEncoder.encode(.say(room: "general", text: "hello"))
        var decoder = FrameDecoder()
        decoder.append(contentsOf: bytes.dropLast())
        #expect(try decoder.next() == nil, "a frame missing its last byte is not complete")
        #expect(decoder.bufferedByteCount == bytes.count - 1)
        decoder.append(contentsOf: bytes.suffix(1))
        #expect(try decoder.next() == .say(room: "general", text: "hello"))
        #expect(try decoder.next() == nil)
    }

    @Test func decodesManyFramesAppendedAtOnce() throws {
        var bytes: [UInt8] = []
        for index in 0..<100_000 { FrameEncoder.encode(.ping(token: UInt64(index)), into: &bytes) }
        var decoder = FrameDecoder()
        bytes.withUnsafeBytes { decoder.append($0) }
        var count: UInt64 = 0
        while let frame = try decoder.next() {
            #expect(frame == .ping(token: count))
            count += 1
        }
        #expect(count == 100_000 && decoder.bufferedByteCount == 0)
    }

    @Test func compactsConsumedBytesWhileStreaming() throws {
        // Half a frame stays behind after every chunk, so the decoder must move it down
        // rather than grow; its buffer must stay bounded by one chunk plus one frame.
        let frame = Frame.say(room: "general", text: String(repeating: "z", count: 1000))
        var stream: [UInt8] = []
        for _ in 0..<200 { FrameEncoder.encode(frame, into: &stream) }
        var decoder = FrameDecoder(maxFrameSize: 2048)
        var decoded = 0
        var offset = 0
        while offset < stream.count {
            let end = min(offset + 1500, stream.count)
            decoder.append(contentsOf: stream[offset..<end])
            offset = end
            while let next = try decoder.next() {
                #expect(next == frame)
                decoded += 1
            }
            #expect(decoder.bufferedByteCount < 2048 + WireProtocol.maxVarintLength)
        }
        #expect(decoded == 200)
    }
}
