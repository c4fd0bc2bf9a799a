import ChatClient
import Testing

@Suite struct KeyDecoderTests {
    /// Decodes `bytes` in chunks of `size` (0 mixes in empty chunks), flushing a pending Escape
    /// at the end, and joins adjacent text keys (chunking may split a run of text).
    private func decode(_ bytes: [UInt8], chunk size: Int = Int.max) -> [Key] {
        var decoder = KeyDecoder(maxPasteBytes: 64)
        var keys: [Key] = []
        var index = 0
        while index < bytes.count {
            let step = size == 0 ? 1 : min(size, bytes.count - index)
            if size == 0 { keys += decoder.feed([]) }
            keys += decoder.feed(bytes[index..<(index + step)])
            index += step
        }
        keys += decoder.flushPendingEscape()
        var joined: [Key] = []
        for key in keys {
            if case .text(let more) = key, case .text(let text)? = joined.last {
                joined[joined.count - 1] = .text(text + more)
            } else {
                joined.append(key)
            }
        }
        return joined
    }

    private let sample: [UInt8] = Array("hé日😀\r\u{1B}[D\u{1B}[1;5C\u{1B}OH\u{17}\u{1B}2\u{1B}\u{7F}\u{1B}[3~\u{1B}[200~a\rb\r\nc\u{1B}[201~\t\u{1B}[15~x".utf8)

    @Test func decodesTextKeysSequencesAndPastes() {
        #expect(decode(sample) == [
            .text("hé日😀"), .enter, .left, .wordRight, .home, .control("w"), .alt("2"), .alt("\u{7F}"), .delete,
            .paste("a\nb\nc"), .tab, .text("x"),
        ], "F5 (ESC [15~) is consumed and ignored")
    }

    @Test(arguments: [0, 1, 2, 5, 8])
    func chunkingChangesNothing(size: Int) {
        #expect(decode(sample, chunk: size) == decode(sample), "chunks of \(size) bytes")
    }

    @Test func aLoneEscapeWaitsUntilFlushed() {
        var decoder = KeyDecoder()
        #expect(decoder.feed([0x1B]) == [])
        #expect(decoder.hasPendingEscape)
        #expect(decoder.flushPendingEscape() == [.escape])
        #expect(decoder.feed(Array("\u{1B}[".utf8)) == [], "the start of a sequence waits too")
        #expect(decoder.feed(Array("A".utf8)) == [.up])
    }

    @Test func pastedEscapesAndCommandsStayText() {
        #expect(decode(Array("\u{1B}[200~/part\u{1B}[2J\u{3}\u{1B}[201~".utf8)) == [.paste("/part\u{1B}[2J\u{3}")],
                "inside a paste nothing is a key")
    }

    @Test func anOversizedPasteIsReportedNotKept() {
        let paste = Array("\u{1B}[200~".utf8) + Array(repeating: UInt8(ascii: "y"), count: 100) + Array("\u{1B}[201~".utf8)
        #expect(decode(paste, chunk: 7) == [.pasteTooLarge(bytes: 100)])
    }

    @Test func malformedUTF8BecomesAReplacementCharacterAndLosesNoKey() {
        #expect(decode([0xE6, 0x41, 0x0D]) == [.text("\u{FFFD}A"), .enter])
    }

    @Test func lineBreaksAndTextInOneReadAreAPaste() {
        #expect(KeyDecoder.pasteHeuristic([.text("one"), .enter, .text("/part"), .enter]) == [.paste("one\n/part\n")],
                "a terminal without bracketed paste: lines arrive in one read")
        #expect(KeyDecoder.pasteHeuristic([.text("typed"), .enter]) == [.text("typed"), .enter], "a line and Enter is typing")
        #expect(KeyDecoder.pasteHeuristic([.text("a"), .enter, .control("r")]) == [.text("a"), .enter, .control("r")],
                "keys other than text and Enter are typing")
    }
}
