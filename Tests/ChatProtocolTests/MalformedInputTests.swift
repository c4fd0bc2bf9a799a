import ChatProtocol
import Testing

/// Builds a frame of `type` whose body is exactly `body`, valid or not.
func rawFrame(_ type: FrameType, _ body: [UInt8]) -> [UInt8] {
    FrameEncoder.encode(.unknown(type: type, payload: body))
}

/// The bytes of `text` as UTF-8.
func utf8(_ text: String) -> [UInt8] { Array(text.utf8) }

/// The error a decoder with `limit` throws for `bytes`, or nil if it throws none.
func decodingError(_ bytes: [UInt8], limit: Int = WireProtocol.maxFrameSize) -> FrameError? {
    var decoder = FrameDecoder(maxFrameSize: limit)
    decoder.append(contentsOf: bytes)
    do {
        while try decoder.next() != nil {}
        return nil
    } catch {
        return error
    }
}

@Suite("Malformed input gives its exact error")
struct MalformedInputTests {
    static let general = [7] + utf8("general")
    static let alice = [5] + utf8("alice")

    @Test("truncated field", arguments: [
        (rawFrame(.join, [9] + utf8("general")), FrameError.truncated(.room)),
        (rawFrame(.ping, [0x80]), .truncated(.token)),
        (rawFrame(.error, [1, 0]), .truncated(.frameType)),
        (rawFrame(.hello, [1] + alice), .truncated(.password)),
        (rawFrame(.members, general + [3] + alice), .truncated(.nick)),
        (rawFrame(.history, general + [1, 0, 1, 2] + alice), .truncated(.text)),
        (rawFrame(.requestHistory, general), .truncated(.historyCount)),
        ([0x00], .truncated(.type)),
    ])
    func reportsTruncatedFields(bytes: [UInt8], expected: FrameError) {
        #expect(decodingError(bytes) == expected)
    }

    @Test func reportsAStreamThatEndsInsideAFrameOnlyWhenDecodingOneFrame() throws {
        let bytes = FrameEncoder.encode(.say(room: "general", text: "hello"))
        #expect(decodingError(Array(bytes.dropLast())) == nil, "a stream decoder waits for more bytes")
        #expect(throws: FrameError.truncated(.length)) { try Frame(decoding: bytes.dropLast()) }
        #expect(throws: FrameError.truncated(.length)) { try Frame(decoding: [0x80]) }
        #expect(throws: FrameError.trailingBytes(type: .say, count: 1)) { try Frame(decoding: bytes + [0]) }
    }

    @Test("length over the limit", arguments: [
        ([0x81, 0x80, 0x01], 16_384, FrameError.frameTooLarge(length: 16_385, limit: 16_384)),
        ([0x81, 0x80, 0x40], WireProtocol.maxFrameSize, .frameTooLarge(length: (1 << 20) + 1, limit: 1 << 20)),
        ([0x29], 40, .frameTooLarge(length: 41, limit: 40)),
    ])
    func rejectsALengthOverTheLimitBeforeTheBodyArrives(prefix: [UInt8], limit: Int, expected: FrameError) {
        // Only the prefix is fed: the decoder must not wait for the body to decide.
        #expect(decodingError(prefix, limit: limit) == expected)
    }

    @Test func waitsForTheBodyOfAFrameOfExactlyTheLimit() throws {
        var decoder = FrameDecoder(maxFrameSize: WireProtocol.maxFrameSize)
        decoder.append(contentsOf: [0x80, 0x80, 0x40])
        #expect(try decoder.next() == nil, "1 MiB is within the limit, so the decoder waits")
    }

    @Test("a frame of exactly the limit passes and one byte more fails", arguments: [16_384, WireProtocol.maxFrameSize])
    func acceptsExactlyTheLimit(limit: Int) throws {
        // say's body: type (1) + room length (1) + "general" (7) + text.
        let atLimit = Frame.say(room: "general", text: String(repeating: "a", count: limit - 9))
        let overLimit = Frame.say(room: "general", text: String(repeating: "a", count: limit - 8))
        #expect(try Frame(decoding: FrameEncoder.encode(atLimit), maxFrameSize: limit) == atLimit)
        #expect(throws: FrameError.frameTooLarge(length: UInt64(limit + 1), limit: limit)) {
            try Frame(decoding: FrameEncoder.encode(overLimit), maxFrameSize: limit)
        }
    }

    @Test("unknown type where not allowed", arguments: [0x00, 0x80, 0xC3, 0xFF] as [UInt8])
    func rejectsMustUnderstandTypes(type: UInt8) {
        #expect(decodingError(rawFrame(FrameType(rawValue: type), [1, 2])) == .unknownType(FrameType(rawValue: type)))
    }

    @Test func skipsUnknownSkippableTypesAndCarriesOn() throws {
        var decoder = FrameDecoder()
        decoder.append(contentsOf: rawFrame(FrameType(rawValue: 0x50), [1, 2, 3]) + FrameEncoder.encode(.listRooms))
        #expect(try decoder.next() == .unknown(type: FrameType(rawValue: 0x50), payload: [1, 2, 3]))
        #expect(try decoder.next() == .listRooms)
    }

    @Test("invalid UTF-8", arguments: [
        (rawFrame(.say, general + [0xFF]), FrameError.invalidUTF8(.text)),
        (rawFrame(.say, general + [0xC0, 0x80]), .invalidUTF8(.text)),
        (rawFrame(.say, general + [0xED, 0xA0, 0x80]), .invalidUTF8(.text)),
        (rawFrame(.say, general + [0xE2, 0x82]), .invalidUTF8(.text)),
        (rawFrame(.hello, [1] + alice + [2, 0xFF]), .invalidUTF8(.password)),
        (rawFrame(.roomList, [1] + general + [1, 1, 0x80]), .invalidUTF8(.topic)),
    ])
    func rejectsInvalidUTF8(bytes: [UInt8], expected: FrameError) {
        #expect(decodingError(bytes) == expected)
    }

    @Test("bad name", arguments: [
        (rawFrame(.join, [0]), FrameError.badName(.room, .empty)),
        (rawFrame(.join, [33] + Array(repeating: 0x61, count: 33)), .badName(.room, .tooLong)),
        (rawFrame(.join, [2, 0x61, 0x41]), .badName(.room, .invalidCharacter)),
        (rawFrame(.changeNick, [25] + Array(repeating: 0x61, count: 25)), .badName(.nick, .tooLong)),
        (rawFrame(.changeNick, [3] + utf8("a b")), .badName(.nick, .invalidCharacter)),
        (rawFrame(.changeNick, [2] + utf8("9a")), .badName(.nick, .invalidFirstCharacter)),
        (rawFrame(.changeNick, [2] + utf8("-a")), .badName(.nick, .invalidFirstCharacter)),
        (rawFrame(.tell, [2] + utf8("é") + utf8("hi")), .badName(.recipient, .invalidCharacter)),
        (rawFrame(.message, general + [1, 1, 0]), .badName(.sender, .empty)),
        (rawFrame(.nickChanged, general + [1, 1] + alice + [1] + utf8("#")), .badName(.newNick, .invalidCharacter)),
        (rawFrame(.nickChanged, general + [1, 1, 0]), .badName(.oldNick, .empty)),
        (rawFrame(.topic, general + [1, 1, 1] + utf8("1")), .badName(.setBy, .invalidFirstCharacter)),
    ])
    func rejectsBadNames(bytes: [UInt8], expected: FrameError) {
        #expect(decodingError(bytes) == expected)
    }

    @Test("trailing bytes", arguments: [
        (rawFrame(.listRooms, [0]), FrameError.trailingBytes(type: .listRooms, count: 1)),
        (rawFrame(.join, general + [1, 2]), .trailingBytes(type: .join, count: 2)),
        (rawFrame(.ping, [42, 0]), .trailingBytes(type: .ping, count: 1)),
        (rawFrame(.history, general + [0, 9]), .trailingBytes(type: .history, count: 1)),
    ])
    func rejectsTrailingBytes(bytes: [UInt8], expected: FrameError) {
        #expect(decodingError(bytes) == expected)
    }

    @Test("integer overflow", arguments: [
        (rawFrame(.ping, Array(repeating: 0xFF, count: 9) + [0x02]), FrameError.integerOverflow(.token)),
        (rawFrame(.ping, Array(repeating: 0xFF, count: 10) + [0x01]), .integerOverflow(.token)),
        (Array(repeating: 0x80, count: 9) + [0x7F], .integerOverflow(.length)),
        (rawFrame(.hello, [0x80, 0x80, 0x04] + alice + [0]), .integerOverflow(.version)),
        (rawFrame(.requestHistory, general + [0x80, 0x80, 0x80, 0x80, 0x10]), .integerOverflow(.historyCount)),
        (rawFrame(.error, [0x80, 0x80, 0x04, 0, 0]), .integerOverflow(.code)),
        (rawFrame(.history, general + [2, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, 0] + alice + [0]
            + [0, 1, 0] + alice + [0]), .integerOverflow(.seq)),
    ])
    func rejectsIntegerOverflow(bytes: [UInt8], expected: FrameError) {
        #expect(decodingError(bytes) == expected)
    }

    @Test("non-minimal integer", arguments: [
        ([0x80, 0x00], FrameError.nonMinimalInteger(.length)),
        (rawFrame(.ping, [0x80, 0x00]), .nonMinimalInteger(.token)),
        (rawFrame(.ping, [0xAA, 0x80, 0x00]), .nonMinimalInteger(.token)),
        (rawFrame(.join, [0x87, 0x00] + utf8("general")), .nonMinimalInteger(.room)),
    ])
    func rejectsNonMinimalIntegers(bytes: [UInt8], expected: FrameError) {
        #expect(decodingError(bytes) == expected)
    }

    @Test("invalid value", arguments: [
        (rawFrame(.error, [1, 2, 0]), FrameError.invalidValue(.fatal)),
        (rawFrame(.message, general + [0, 1] + alice), .invalidValue(.seq)),
        (rawFrame(.history, general + [1, 2, 1, 0] + alice + [0]), .invalidValue(.entryKind)),
        (rawFrame(.history, general + [2, 0, 5, 0] + alice + [0] + [0, 0, 0] + alice + [0]), .invalidValue(.seq)),
        (rawFrame(.history, general + [1, 2, 1, 0] + alice + [0]), .invalidValue(.entryKind)),
        (rawFrame(.historyPage, general + [1, 1, 1, 3, 1, 0] + alice + [0]), .invalidValue(.entryKind)),
        (rawFrame(.fetchHistory, general + [2, 0, 5]), .invalidValue(.direction)),
        (rawFrame(.roomState, general + [0, 0, 0]), .invalidValue(.epoch)),
        (rawFrame(.historyPage, general + [1, 2, 0]), .invalidValue(.complete)),
    ])
    func rejectsValuesOutsideTheirSet(bytes: [UInt8], expected: FrameError) {
        #expect(decodingError(bytes) == expected)
    }

    @Test func yieldsTheFramesBeforeAnErrorThenStaysPoisoned() throws {
        var decoder = FrameDecoder()
        decoder.append(contentsOf: FrameEncoder.encode(.ping(token: 1)) + [0x00])
        #expect(try decoder.next() == .ping(token: 1))
        #expect(throws: FrameError.truncated(.type)) { try decoder.next() }
        decoder.append(contentsOf: FrameEncoder.encode(.ping(token: 2)))
        #expect(throws: FrameError.truncated(.type), "a poisoned decoder repeats its error") { try decoder.next() }
    }

    @Test func namesTheTypeOfTheFrameItFailedOnOnceItsTypeByteArrived() {
        for (bytes, type) in [
            (rawFrame(.say, [7] + utf8("General") + utf8("hi")), FrameType.say),
            (rawFrame(.hello, [1, 5] + utf8("9lice") + [0]), .hello),
            (rawFrame(.ping, [0x80, 0x00]), .ping),
            (rawFrame(FrameType(rawValue: 0x80), [1]), FrameType(rawValue: 0x80)),
            ([0x00], .none),
            ([0x81, 0x80, 0x01], .none),
        ] {
            var decoder = FrameDecoder(maxFrameSize: 16_384)
            decoder.append(contentsOf: FrameEncoder.encode(.ping(token: 1)) + bytes)
            #expect(throws: FrameError.self) { while try decoder.next() != nil {} }
            #expect(decoder.failedFrameType == type, "for \(bytes)")
        }
    }

    @Test func describesErrorsForHumans() {
        #expect(FrameError.truncated(.room).description == "frame ends inside field 'room'")
        #expect(FrameError.trailingBytes(type: .ping, count: 1).description
            == "1 unexpected bytes after the last field of a ping (0x40) frame")
    }
}

@Suite("Mapping decode errors to error frames")
struct ErrorCodeMappingTests {
    @Test("a server reports each decode error with the documented code", arguments: [
        (FrameError.frameTooLarge(length: 20_000, limit: 16_384), ErrorCode.frameTooLarge),
        (.badName(.room, .tooLong), .invalidRoom),
        (.badName(.nick, .empty), .invalidNick),
        (.badName(.recipient, .invalidCharacter), .invalidNick),
        (.truncated(.text), .malformedFrame),
        (.unknownType(FrameType(rawValue: 0x80)), .malformedFrame),
    ])
    func mapsDecodeErrorsToErrorCodes(error: FrameError, code: ErrorCode) {
        #expect(error.errorCode == code)
    }
}
