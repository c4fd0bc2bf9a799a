import ChatProtocol
import SocketCore
import Testing

@testable import ChatLoadTest

@Suite struct LoadPayloadTests {
    @Test func paddedPayloadParsesBackToItsFields() {
        let payload = LoadPayload(sender: 12, seq: 34_567, sendNanos: 987_654_321_012)
        for size in [0, 10, 40, 200] {
            let text = payload.text(paddedTo: size)
            if size > 30 { #expect(text.utf8.count == size, "expected the text padded to \(size) bytes") }
            let parsed = Array(text.utf8).withUnsafeBytes { LoadPayload.parse($0) }
            #expect(parsed == payload, "expected \(text) to parse back to \(payload)")
        }
    }

    @Test func chatterIsNotMistakenForAPayload() {
        for text in ["hello", "L", "L1:2", "L1:2:", "Lx:2:3", "L1:2:3x", "l1:2:3", "L1:2:3:4:"] {
            let parsed = Array(text.utf8).withUnsafeBytes { LoadPayload.parse($0) }
            if text == "L1:2:3:4:" {
                #expect(parsed == LoadPayload(sender: 1, seq: 2, sendNanos: 3), "padding after a colon is allowed")
            } else {
                #expect(parsed == nil, "expected \(text) not to parse")
            }
        }
    }
}

@Suite struct DeliveryLedgerTests {
    @Test func inOrderStreamsFromSeveralSendersAreClean() {
        var ledger = DeliveryLedger(senderCount: 3)
        for seq in 0..<100 as Range<UInt64> {
            for sender in 0..<3 { #expect(ledger.record(sender: sender, seq: seq) == .inOrder) }
        }
        let tally = ledger.tally { _ in 100 }
        #expect(tally == DeliveryTally(expected: 300, delivered: 300), "got \(tally)")
        #expect(tally.isClean)
    }

    @Test func countsEachFaultExactly() {
        var ledger = DeliveryLedger(senderCount: 1)
        // 0 1 2 4 3 5 5 7 8 9: 3 and 4 swapped (one reordered), 5 duplicated, 6 lost.
        let outcomes = [0, 1, 2, 4, 3, 5, 5, 7, 8, 9].map { ledger.record(sender: 0, seq: UInt64($0)) }
        #expect(outcomes == [.inOrder, .inOrder, .inOrder, .inOrder, .reordered, .inOrder, .duplicate, .inOrder, .inOrder, .inOrder])
        let tally = ledger.tally { _ in 10 }
        #expect(tally.lost == 1 && tally.duplicated == 1 && tally.reordered == 1 && tally.unexpected == 0, "got \(tally)")
        #expect(tally.delivered == 9 && tally.expected == 10)
        #expect(!tally.isClean)
    }

    @Test func aLateMessageIsReorderedNotLost() {
        var ledger = DeliveryLedger(senderCount: 1)
        for seq in [1, 2, 3, 0] as [UInt64] { ledger.record(sender: 0, seq: seq) }
        let tally = ledger.tally { _ in 4 }
        #expect(tally.lost == 0 && tally.reordered == 1 && tally.delivered == 4, "got \(tally)")
    }

    @Test func duplicatesBeyondAGapAreCounted() {
        var ledger = DeliveryLedger(senderCount: 1)
        for seq in [0, 2, 2, 2] as [UInt64] { ledger.record(sender: 0, seq: seq) }
        let tally = ledger.tally { _ in 3 }
        #expect(tally.lost == 1 && tally.duplicated == 2 && tally.reordered == 0, "got \(tally)")
    }

    @Test func messagesNobodyExpectedAreUnexpected() {
        var ledger = DeliveryLedger(senderCount: 2)
        ledger.record(sender: 0, seq: 0)
        ledger.record(sender: 0, seq: 1)  // beyond what sender 0 had sent
        ledger.record(sender: 1, seq: 0)  // from a sender in another room
        #expect(ledger.record(sender: 7, seq: 0) == .foreign)
        let tally = ledger.tally { $0 == 0 ? 1 : 0 }
        #expect(tally.expected == 1 && tally.delivered == 1 && tally.unexpected == 3 && tally.lost == 0, "got \(tally)")
    }

    @Test func nothingReceivedIsAllLost() {
        let tally = DeliveryLedger(senderCount: 2).tally { _ in 5 }
        #expect(tally.lost == 10 && tally.delivered == 0, "got \(tally)")
    }
}

@Suite struct MessageScannerTests {
    static let frames: [Frame] = [
        .welcome(version: 1, nick: "ltx1", maxFrameSize: 16_384, motd: "hi"),
        .joined(room: "lt-0", seq: 1, time: 1_767_225_600_000, nick: "ltx1"),
        .message(room: "lt-0", seq: 2, time: 1_767_225_600_001, sender: "ltx0", text: LoadPayload(sender: 0, seq: 0, sendNanos: 5).text()),
        .message(room: "lt-0", seq: 3, time: 1_767_225_600_002, sender: "bob", text: "just chatting"),
        .ping(token: 9),
        .message(room: "lt-0", seq: 300, time: 1_767_225_600_003, sender: "ltx3",
                 text: LoadPayload(sender: 3, seq: 1_000_000, sendNanos: 123_456_789_012).text(paddedTo: 300)),
    ]

    /// Describes items comparably: load payloads with their frame size, other frames as themselves.
    static func describe(_ item: MessageScanner.Item) -> String {
        switch item {
        case .load(let payload, let bytes): "load \(payload) \(bytes)"
        case .frame(let frame): "frame \(frame)"
        }
    }

    @Test func readsTheSameFramesWhateverTheChunking() throws {
        var stream: [UInt8] = []
        for frame in Self.frames { FrameEncoder.encode(frame, into: &stream) }
        var whole: [String] = []
        var scanner = MessageScanner()
        try stream.withUnsafeBytes { bytes in try scanner.scan(bytes) { whole.append(Self.describe($0)) } }
        #expect(whole.count == Self.frames.count)
        #expect(whole[2].hasPrefix("load") && whole[5].hasPrefix("load") && whole[3].hasPrefix("frame"), "\(whole)")
        #expect(whole[5].hasSuffix(" \(FrameEncoder.encode(Self.frames[5]).count)"), "expected the frame's wire size")

        for chunkSizes in [[1], [2], [5], [8], [0, 3, 0, 64], [311, 1]] {
            var scanner = MessageScanner()
            var items: [String] = []
            var offset = 0
            var turn = 0
            while offset < stream.count {
                let size = min(chunkSizes[turn % chunkSizes.count], stream.count - offset)
                turn += 1
                try stream[offset..<offset + size].withUnsafeBytes { bytes in
                    try scanner.scan(bytes) { items.append(Self.describe($0)) }
                }
                offset += size
            }
            #expect(items == whole, "chunks of \(chunkSizes) gave different frames")
            #expect(scanner.bufferedByteCount == 0)
        }
    }

    @Test func failsOnABrokenStreamExactlyAsTheDecoderDoes() throws {
        // Both split frames with FrameSplitter, so a bad prefix or a bad message fails the same way.
        let streams: [[UInt8]] = [
            [0xC8, 0x01],  // 200 > 100
            [0x00],  // a frame without its type byte
            [0x85, 0x00],  // a needlessly long length
            FrameEncoder.encode(Self.frames[4]) + [0x02, FrameType.message.rawValue, 0x85],  // a message cut short
        ]
        for stream in streams {
            var decoder = FrameDecoder(maxFrameSize: 100)
            decoder.append(contentsOf: stream)
            var decoderError: FrameError?
            do throws(FrameError) { while try decoder.next() != nil {} } catch { decoderError = error }
            var scanner = MessageScanner(maxFrameSize: 100)
            let scanned = stream.withUnsafeBytes { bytes in
                Result { () throws(FrameError) in try scanner.scan(bytes) { _ in } }
            }
            var scannerError: FrameError?
            if case .failure(let error) = scanned { scannerError = error }
            #expect(decoderError != nil, "expected the decoder to refuse \(stream)")
            #expect(scannerError == decoderError, "\(stream): the scanner threw \(String(describing: scannerError)), the decoder \(String(describing: decoderError))")
        }
    }

    @Test func rejectsAFrameLongerThanTheLimitFromItsPrefix() {
        var scanner = MessageScanner(maxFrameSize: 100)
        let prefix: [UInt8] = [0xC8, 0x01]  // 200
        #expect(throws: FrameError.frameTooLarge(length: 200, limit: 100)) {
            try prefix.withUnsafeBytes { bytes in try scanner.scan(bytes) { _ in } }
        }
    }
}

@Suite struct LoadTestConfigurationTests {
    @Test func refusesHostsOtherThanLoopback() {
        for host in ["10.0.0.1", "example.com", "0.0.0.0", ""] {
            var configuration = LoadTestConfiguration()
            configuration.servers = [ServerAddress(host: "127.0.0.1", port: 7000), ServerAddress(host: host, port: 7001)]
            #expect(configuration.problems.contains { $0.hasPrefix("host must be") }, "expected \(host) refused")
            #expect(throws: LoadTestConfigurationError.self) { try LoadTest(configuration: configuration) }
        }
        for host in ["127.0.0.1", "::1", "localhost"] {
            var configuration = LoadTestConfiguration()
            configuration.servers = [ServerAddress(host: host, port: 7000)]
            #expect(configuration.problems.isEmpty, "expected \(host) accepted, got \(configuration.problems)")
        }
        var none = LoadTestConfiguration()
        none.servers = []
        #expect(none.problems == ["at least one server is needed"])
    }

    @Test func parsesServerAddressesAndSpreadsClientsOverThem() {
        #expect((try? ServerAddress(parsing: "127.0.0.1:7001")) == ServerAddress(host: "127.0.0.1", port: 7001))
        #expect((try? ServerAddress(parsing: "[::1]:7002")) == ServerAddress(host: "::1", port: 7002))
        #expect((try? ServerAddress(parsing: "localhost:80"))?.description == "localhost:80")
        #expect(ServerAddress(host: "::1", port: 7002).description == "[::1]:7002")
        for bad in ["7000", "::1:7000", "[::1]7000", ":7000", "host:", "host:x"] {
            #expect((try? ServerAddress(parsing: bad)) == nil, "expected \(bad) refused")
        }
        var configuration = LoadTestConfiguration()
        configuration.servers = [ServerAddress(host: "127.0.0.1", port: 1), ServerAddress(host: "127.0.0.1", port: 2)]
        configuration.rooms = 3
        #expect((0..<6).map { configuration.server(ofClient: $0).port } == [1, 2, 1, 2, 1, 2])
        // Every room has members on both servers, so its deliveries cross from one to the other.
        for room in 0..<3 {
            let ports = Set((0..<6).filter { configuration.room(ofClient: $0) == room }.map { configuration.server(ofClient: $0).port })
            #expect(ports == [1, 2], "room \(room)")
        }
    }

    @Test func boundsDurationMessagesAndClients() {
        var configuration = LoadTestConfiguration()
        configuration.duration = 601
        configuration.messages = 100_000_001
        configuration.clients = 20_001
        #expect(configuration.problems.count == 3, "got \(configuration.problems)")
    }

    @Test func quotasAddUpToTheMessageCount() {
        var configuration = LoadTestConfiguration()
        configuration.messages = 1_003
        configuration.senders = 7
        configuration.clients = 10
        let total = (0..<7).reduce(UInt64(0)) { $0 + configuration.quota(ofSender: $1) }
        #expect(total == 1_003)
    }
}
