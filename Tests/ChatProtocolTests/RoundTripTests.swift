import ChatProtocol
import Testing

@Suite("Encode then decode")
struct RoundTripTests {
    @Test("every frame type has a sample", arguments: FrameType.allKnown)
    func everyFrameTypeHasASample(type: FrameType) {
        #expect(SampleFrames.all.contains { $0.type == type }, "no sample frame of type \(type)")
    }

    @Test("every sample frame survives encode → decode", arguments: SampleFrames.all)
    func roundTripsEveryFrame(frame: Frame) throws {
        let bytes = FrameEncoder.encode(frame)
        #expect(try Frame(decoding: bytes) == frame, "decoding the encoding of \(frame) should give it back")
    }

    @Test func encodesIntoTheEndOfAnExistingBuffer() throws {
        var buffer: [UInt8] = [0xAA, 0xBB]
        let first = FrameEncoder.encode(.say(room: "general", text: "hello"), into: &buffer)
        let second = FrameEncoder.encode(.ping(token: 300), into: &buffer)
        #expect(first == 15 && second == 4, "say should take 15 bytes and ping(300) 4")
        #expect(Array(buffer.prefix(2)) == [0xAA, 0xBB], "existing bytes must be kept")
        var decoder = FrameDecoder()
        decoder.append(contentsOf: buffer.dropFirst(2))
        #expect(try decoder.next() == .say(room: "general", text: "hello"))
        #expect(try decoder.next() == .ping(token: 300))
        #expect(try decoder.next() == nil)
    }

    @Test func encodingIntoAReservedBufferDoesNotReallocateIt() {
        var buffer: [UInt8] = []
        buffer.reserveCapacity(4096)
        let capacity = buffer.capacity
        for frame in SampleFrames.documented.values where FrameEncoder.encode(frame).count < 100 {
            buffer.removeAll(keepingCapacity: true)
            FrameEncoder.encode(frame, into: &buffer)
            #expect(buffer.capacity == capacity, "encoding \(frame) should reuse the buffer's storage")
        }
    }

    @Test("length prefixes grow at 128 and 16 384 bytes", arguments: [
        (126, [0x7E]), (127, [0x7F]), (128, [0x80, 0x01]), (16_383, [0xFF, 0x7F]), (16_384, [0x80, 0x80, 0x01]),
    ])
    func writesMinimalLengthPrefixes(length: Int, prefix: [UInt8]) throws {
        // goodbye's body is its type byte and its text, so the text sets the length exactly.
        let frame = Frame.goodbye(reason: String(repeating: "x", count: length - 1))
        let bytes = FrameEncoder.encode(frame)
        #expect(Array(bytes.prefix(prefix.count)) == prefix, "a \(length)-byte frame needs prefix \(prefix)")
        #expect(bytes.count == prefix.count + length)
        #expect(try Frame(decoding: bytes) == frame)
    }

    @Test func unknownErrorCodesAndFrameTypesDecode() throws {
        let frame = Frame.error(code: ErrorCode(rawValue: 999), fatal: false, frameType: FrameType(rawValue: 0x99), reason: "new")
        let decoded = try Frame(decoding: FrameEncoder.encode(frame))
        #expect(decoded == frame)
        #expect(ErrorCode(rawValue: 999).name == nil && ErrorCode.nickTaken.name == "nickTaken")
    }

    @Test func generatedFramesRoundTripForManyInputs() {
        // A deterministic stand-in for the round-trip fuzzer, so `swift test` covers it too.
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        for _ in 0..<2_000 {
            let input = (0..<Int(state % 300)).map { _ -> UInt8 in
                state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
                return UInt8(truncatingIfNeeded: state >> 56)
            }
            if let violation = FuzzProperties.checkRoundTrip(input) {
                Issue.record("input \(input): \(violation)")
                return
            }
        }
    }
}
