import ChatProtocol
import ChatWireComparison
import Foundation
import Testing

@Suite("Size targets and the comparison builders")
struct WireComparisonTests {
    static let hello = WireComparison.representativeOperations()[0]

    @Test func helloToGeneralIsAtMostSixteenBytes() {
        #expect(Self.hello.frame == .say(room: "general", text: "hello"))
        #expect(Self.hello.frameByteCount <= 16, "the issue's target for \"hello\" to \"general\"")
        #expect(Self.hello.frameByteCount == 15)
    }

    @Test func helloIsAtLeastThirtyTimesSmallerThanSoap11() {
        let soap = Self.hello.soap11.utf8.count
        #expect(soap >= 30 * Self.hello.frameByteCount, "SOAP 1.1 is \(soap) bytes, ours \(Self.hello.frameByteCount)")
        #expect(Self.hello.soap11.hasPrefix("POST /ChatService.asmx HTTP/1.1\r\nHost: localhost\r\n"))
        #expect(Self.hello.soap11.contains("SOAPAction: \"http://tempuri.org/SendMessage\"\r\n"))
    }

    @Test("chat frames carry at most 4 bytes of framing", arguments: [
        Frame.say(room: "general", text: "hello"), .emote(room: "general", text: "waves"),
        .tell(recipient: "alice", text: "hi"), .say(room: String(repeating: "r", count: 32), text: String(repeating: "t", count: 16_000)),
    ])
    func chatFramesHaveAtMostFourBytesOfOverhead(frame: Frame) {
        let overhead = FrameEncoder.encode(frame).count - WireComparison.contentByteCount(of: frame)
        #expect(overhead <= 4, "\(frame.type) spends \(overhead) bytes on framing")
    }

    @Test("every HTTP message declares its true Content-Length", arguments: WireComparison.representativeOperations())
    func contentLengthsAreExact(operation: WireComparison.Operation) throws {
        for message in [operation.soap11, operation.soap12, operation.jsonHTTP] {
            let parts = message.split(separator: "\r\n\r\n", maxSplits: 1, omittingEmptySubsequences: false)
            let declared = parts[0].split(separator: "\r\n").first { $0.hasPrefix("Content-Length: ") }
            #expect(declared == "Content-Length: \(parts[1].utf8.count)", "in \(operation.name)")
        }
    }

    @Test func representativeMessagesAreWhatTheIssueAsks() {
        #expect(WireComparison.hundredByteText.utf8.count == 100)
        let history = WireComparison.representativeOperations().last!
        guard case let .history(_, entries) = history.frame else {
            Issue.record("the last operation should be the history replay")
            return
        }
        #expect(entries.count == 50)
    }

    @Test func escapesMarkupInXMLAndJSON() {
        #expect(WireComparison.XML.leaf("t", "a<b&c>").rendered == "<t>a&lt;b&amp;c&gt;</t>")
        #expect(WireComparison.JSON.string("q\"\\\n\u{1}").rendered == "\"q\\\"\\\\\\n\\u0001\"")
    }

    /// docs/PROTOCOL.md, whose size table `chat-wire sizes --markdown` produced.
    static let protocolDocument = try! String(
        contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/PROTOCOL.md"),
        encoding: .utf8)

    @Test("the size table shows what chat-wire sizes measures", arguments: WireComparison.representativeOperations())
    func sizeTableMatchesTheMeasurement(operation: WireComparison.Operation) throws {
        let row = try #require(
            Self.protocolDocument.split(separator: "\n").first { $0.hasPrefix("| \(operation.name) |") },
            "no row for \(operation.name); paste `chat-wire sizes --markdown` into the document")
        #expect(row.contains("| \(operation.frameByteCount) | \(operation.frameOverhead) |"), "\(row)")
        for rival in [operation.soap11, operation.soap12, operation.jsonHTTP, operation.irc] {
            #expect(row.contains("| \(rival.utf8.count) ("), "\(row) should show \(rival.utf8.count)")
        }
    }
}

extension WireComparison.Operation: CustomTestStringConvertible {
    public var testDescription: String { name }
}
