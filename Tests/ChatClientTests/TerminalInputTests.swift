import ChatClient
import Testing

@Suite struct TerminalInputTests {
    /// Decodes `bytes` in chunks of `size` (0 mixes in empty chunks), flushing what is held at the end.
    private func decode(_ bytes: [UInt8], chunk size: Int = Int.max) -> [TerminalInput.Event] {
        var input = TerminalInput(maxPasteBytes: 64)
        var events: [TerminalInput.Event] = []
        var index = 0
        while index < bytes.count {
            let step = size == 0 ? 1 : min(size, bytes.count - index)
            if size == 0 { events += input.feed([]) }
            events += input.feed(bytes[index..<(index + step)])
            index += step
        }
        return events + input.flush()
    }

    private func characters(_ text: String) -> [TerminalInput.Event] {
        text.unicodeScalars.map { .character($0) }
    }

    private let sample: [UInt8] = Array("hé日😀\u{1B}[D\u{1B}2\u{1B}[200~a\rb\r\nc\u{1B}[201~\u{1B}[2~x".utf8)

    @Test(arguments: [Int.max, 1, 2, 5, 8, 0])
    func charactersAndPastesSurviveAnyChunking(size: Int) {
        let expected = characters("hé日😀\u{1B}[D\u{1B}2") + [.paste("a\nb\nc")] + characters("\u{1B}[2~x")
        #expect(decode(sample, chunk: size) == expected, "chunks of \(size)")
    }

    @Test func malformedUTF8AndC1ControlsBecomeReplacementCharacters() {
        #expect(decode([0x61, 0xFF, 0x62, 0xC3, 0x28, 0xC2, 0x91]) == characters("a\u{FFFD}b\u{FFFD}(\u{FFFD}"))
    }

    @Test func aLoneEscapeIsHeldUntilFlushed() {
        var input = TerminalInput()
        #expect(input.feed([0x1B]).isEmpty)
        #expect(input.isHolding, "ESC may start a paste marker")
        #expect(input.flush() == [.character("\u{1B}")])
        #expect(!input.isHolding)
    }

    @Test func aPasteTooLargeIsDroppedAndCounted() {
        let bytes = Array("\u{1B}[200~".utf8) + [UInt8](repeating: 0x41, count: 100) + Array("\u{1B}[201~z".utf8)
        #expect(decode(bytes, chunk: 7) == [.pasteTooLarge(bytes: 100), .character("z")])
    }

    @Test func linesReadAtOnceWithoutBracketsAreAPaste() {
        var input = TerminalInput()
        #expect(input.feed(Array("one\r/part\rthree".utf8)) == [.paste("one\n/part\nthree")])
        #expect(input.feed(Array("typed\r".utf8)) == characters("typed\r"), "a line and Enter is typing")
    }

    /// Lines typed ahead over a slow link arrive in one read, led by the Enter of the line already
    /// typed: that Enter sends it, and only what follows is taken for a paste (it once swallowed
    /// the Enter, and the line waited in the editor while the next key declined the "paste").
    @Test func theEnterThatLeadsARead() {
        var input = TerminalInput()
        #expect(input.feed(Array("\rchatter 5\rchatter 6\r".utf8)) == [.character("\r"), .paste("chatter 5\nchatter 6\n")])
        #expect(input.feed(Array("\r".utf8)) == [.character("\r")])
    }
}
