import RedisProtocol
import Testing

/// Parses all of `bytes` handed over in chunks of `chunkSize`; returns the values in order.
private func parseAll(_ bytes: [UInt8], chunkSize: Int = .max, limits: RESPParser.Limits = .init()) throws -> [RESPValue] {
    var parser = RESPParser(limits: limits)
    var values: [RESPValue] = []
    var offset = 0
    repeat {
        let end = min(bytes.count, offset + chunkSize)
        parser.append(bytes[offset..<end])
        offset = end
        while let value = try parser.next() { values.append(value) }
    } while offset < bytes.count
    #expect(parser.bufferedByteCount == 0, "nothing left over")
    return values
}

private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

@Suite("RESP parsing")
struct RESPParserTests {
    @Test func parsesEveryTypeAsRedisWritesIt() throws {
        let wire = "+OK\r\n-ERR unknown command 'FOO'\r\n:1000\r\n:-42\r\n$5\r\nhello\r\n$0\r\n\r\n$-1\r\n*0\r\n*-1\r\n"
        #expect(try parseAll(bytes(wire)) == [
            .simpleString("OK"), .error("ERR unknown command 'FOO'"), .integer(1000), .integer(-42), .bulk("hello"),
            .bulkString([]), .bulkString(nil), .array([]), .array(nil),
        ])
    }

    @Test func bulkStringsAreBinarySafe() throws {
        let payload: [UInt8] = [0, 13, 10, 255, 13, 10, 36]
        var wire = bytes("$7\r\n")
        wire += payload + bytes("\r\n")
        #expect(try parseAll(wire) == [.bulkString(payload)])
    }

    @Test func nestedArraysAndPubSubMessages() throws {
        let wire = "*3\r\n$7\r\nmessage\r\n$4\r\nroom\r\n$2\r\nhi\r\n*2\r\n*2\r\n:1\r\n:2\r\n*1\r\n$-1\r\n"
        #expect(try parseAll(bytes(wire)) == [
            .array([.bulk("message"), .bulk("room"), .bulk("hi")]),
            .array([.array([.integer(1), .integer(2)]), .array([.bulkString(nil)])]),
        ])
    }

    @Test func theSameValuesWhateverTheChunking() throws {
        var wire: [UInt8] = []
        let values: [RESPValue] = [
            .array([.bulk("XADD"), .array([.integer(7), .bulkString([0, 13, 10])]), .array([])]),
            .simpleString("PONG"), .error("WRONGTYPE Operation against a key"), .integer(Int64.min),
            .bulkString(Array(repeating: 120, count: 300)), .array(nil), .bulkString(nil),
        ]
        for value in values { RESPEncoder.encode(value, into: &wire) }
        for chunkSize in [1, 2, 3, 5, 7, 64, wire.count] {
            #expect(try parseAll(wire, chunkSize: chunkSize) == values, "chunks of \(chunkSize)")
        }
        // And every single split point.
        for split in 1..<wire.count {
            var parser = RESPParser()
            var parsed: [RESPValue] = []
            parser.append(wire[..<split])
            while let value = try parser.next() { parsed.append(value) }
            parser.append(wire[split...])
            while let value = try parser.next() { parsed.append(value) }
            #expect(parsed == values, "split at \(split)")
        }
    }

    @Test func aLargeArrayArrivingInSmallReadsIsParsedOnce() throws {
        let elements = (0..<50_000).map { RESPValue.integer(Int64($0)) }
        var wire: [UInt8] = []
        RESPEncoder.encode(.array(elements), into: &wire)
        #expect(try parseAll(wire, chunkSize: 13) == [.array(elements)])
    }

    @Test func anIncompleteValueWaitsAndConsumesNothing() throws {
        var parser = RESPParser()
        parser.append(bytes("*2\r\n$5\r\nhel"))
        #expect(try parser.next() == nil)
        parser.append(bytes("lo\r\n"))
        #expect(try parser.next() == nil, "the array still lacks an element")
        parser.append(bytes(":5\r"))
        #expect(try parser.next() == nil, "a CR without its LF yet")
        parser.append(bytes("\n"))
        #expect(try parser.next() == .array([.bulk("hello"), .integer(5)]))
        #expect(parser.bufferedByteCount == 0)
    }

    @Test func lengthsOverTheLimitsAreRefusedFromTheHeaderAlone() throws {
        var limits = RESPParser.Limits()
        limits.maxBulkLength = 1024
        limits.maxArrayCount = 10
        limits.maxDepth = 3
        limits.maxLineLength = 16
        #expect(throws: RESPError.bulkTooLong(length: 1025, limit: 1024)) { try parseAll(bytes("$1025\r\n"), limits: limits) }
        #expect(throws: RESPError.arrayTooLong(count: 11, limit: 10)) { try parseAll(bytes("*11\r\n"), limits: limits) }
        #expect(throws: RESPError.nestedTooDeeply(limit: 3)) { try parseAll(bytes("*1\r\n*1\r\n*1\r\n*1\r\n"), limits: limits) }
        #expect(throws: RESPError.lineTooLong(limit: 16)) { try parseAll(bytes("+" + String(repeating: "a", count: 17)), limits: limits) }
        // A line of exactly the limit is fine.
        #expect(try parseAll(bytes("+" + String(repeating: "a", count: 16) + "\r\n"), limits: limits) == [.simpleString(String(repeating: "a", count: 16))])
    }

    @Test func aReplyCostingMoreThanTheLimitIsRefusedWhicheverWayItArrives() throws {
        // Each `:1` costs its 4 bytes and a value's bookkeeping; the header `*10` its 5 and its own.
        let element = 4 + RESPParser.Limits.valueCost
        let header = 5 + RESPParser.Limits.valueCost
        var limits = RESPParser.Limits()
        limits.maxReplyCost = header + 10 * element
        let ten = "*10\r\n" + String(repeating: ":1\r\n", count: 10)
        let eleven = "*11\r\n" + String(repeating: ":1\r\n", count: 11)
        for chunkSize in [1, 2, 5, 8, Int.max] {
            // Within the limit, several replies in a row: each reply is counted on its own.
            let replies = try parseAll(bytes(ten + ten + ten), chunkSize: chunkSize, limits: limits)
            #expect(replies.count == 3, "chunks of \(chunkSize)")
            #expect(throws: RESPError.replyTooLarge(limit: limits.maxReplyCost), "chunks of \(chunkSize)") {
                try parseAll(bytes(eleven), chunkSize: chunkSize, limits: limits)
            }
        }
        // A bulk string is refused from its header when its body would pass the limit, before
        // the body is waited for; the bulk limit itself still speaks first.
        limits.maxReplyCost = 1_000
        limits.maxBulkLength = 2_000
        #expect(throws: RESPError.replyTooLarge(limit: 1_000)) {
            try parseAll(bytes("*2\r\n$10\r\n0123456789\r\n$900\r\n"), limits: limits)
        }
        #expect(throws: RESPError.bulkTooLong(length: 2_001, limit: 2_000)) { try parseAll(bytes("$2001\r\n"), limits: limits) }
    }

    @Test func malformedInputGetsItsOwnError() {
        let cases: [(String, RESPError)] = [
            ("!3\r\n", .unknownType(UInt8(ascii: "!"))),
            ("$abc\r\n", .invalidNumber("abc")),
            ("$-2\r\n", .invalidNumber("-2")),
            ("*-5\r\n", .invalidNumber("-5")),
            (":\r\n", .invalidNumber("")),
            (":-\r\n", .invalidNumber("-")),
            (":9223372036854775808\r\n", .invalidNumber("9223372036854775808")),
            (":12345678901234567890\r\n", .invalidNumber("12345678901234567890")),
            ("+OK\rX", .missingTerminator),
            ("-ERR a\nb\r\n", .missingTerminator),
            ("$2\r\nhiXY", .missingTerminator),
        ]
        for (wire, error) in cases {
            #expect(throws: error, "\(wire.debugDescription)") { try parseAll(bytes(wire)) }
        }
    }

    @Test func theExtremeIntegersParse() throws {
        #expect(try parseAll(bytes(":9223372036854775807\r\n:-9223372036854775808\r\n")) == [.integer(.max), .integer(.min)])
    }
}

@Suite("RESP encoding")
struct RESPEncoderTests {
    @Test func aCommandIsAnArrayOfBulkStrings() {
        #expect(RESPEncoder.command("GET", "key") == bytes("*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n"))
        var out: [UInt8] = []
        RESPEncoder.encodeCommand([bytes("PUBLISH"), bytes("r"), [0, 13, 10]], into: &out)
        #expect(out == bytes("*3\r\n$7\r\nPUBLISH\r\n$1\r\nr\r\n$3\r\n") + [0, 13, 10] + bytes("\r\n"))
    }

    @Test func valuesReadBackAsThemselves() throws {
        let values: [RESPValue] = [.integer(-1), .bulk("é"), .array([.array(nil), .error("ERR x")])]
        var wire: [UInt8] = []
        for value in values { RESPEncoder.encode(value, into: &wire) }
        #expect(try parseAll(wire) == values)
    }

    @Test func textAndIntegerViews() {
        #expect(RESPValue.bulk("42").integer == 42)
        #expect(RESPValue.simpleString("OK").text == "OK")
        #expect(RESPValue.bulkString([0xFF]).text == nil)
        #expect(RESPValue.array([]).integer == nil)
    }
}
