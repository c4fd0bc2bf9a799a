/// Splits the bytes a terminal sends into what libedit should see — characters, one at a time —
/// and what it must never see: bracketed pastes (`ESC [200~` … `ESC [201~`), which the client
/// takes whole so that pasted text is never run as keys or commands.
///
/// A value fed read by read. It decodes UTF-8 itself (libedit is handed wide characters through
/// its `EL_GETCFN` function): a character split over two reads is held until the rest comes, a
/// malformed sequence becomes U+FFFD, and C1 controls (U+0080–U+009F), which no keyboard sends
/// and which libedit's key map would take for Meta keys, become U+FFFD too. Bytes that may be
/// the start of a paste marker (`ESC`, `ESC [`, `ESC [2` …) are held as well; when no more bytes
/// follow for a moment, `flush()` gives them up as ordinary characters (an Escape key, an Insert
/// key's `ESC [2~`). Everything else, escape sequences included, passes through for libedit's
/// key bindings to match.
public struct TerminalInput: Sendable {
    /// One thing for the editor.
    public enum Event: Equatable, Sendable {
        /// A character for libedit.
        case character(Unicode.Scalar)
        /// Pasted text, line ends as `\n`: a bracketed paste, or several lines that arrived in
        /// one read (see `feed`).
        case paste(String)
        /// A bracketed paste larger than `maxPasteBytes`; its bytes were dropped.
        case pasteTooLarge(bytes: Int)
    }

    /// The largest paste kept.
    public let maxPasteBytes: Int
    private var pending: [UInt8] = []
    private var paste: [UInt8]?
    private var pasteDropped = 0

    private static let pasteStart = Array("\u{1B}[200~".utf8)
    private static let pasteEnd = Array("\u{1B}[201~".utf8)

    /// A decoder that keeps pastes of up to `maxPasteBytes` bytes.
    public init(maxPasteBytes: Int = 4 << 20) {
        self.maxPasteBytes = maxPasteBytes
    }

    /// Whether bytes are held back, waiting to see if more belong to them; call `flush()` when
    /// none came for a moment. A paste in progress is not held: it waits for its end marker.
    public var isHolding: Bool { paste == nil && !pending.isEmpty }

    /// The events in one read's `bytes`, after what earlier reads left pending.
    ///
    /// A terminal without bracketed paste sends pasted lines as text and Enter keys; nobody
    /// types a line break and more text within one read, so a read that holds only text, line
    /// breaks and tabs, with text after a line break, is taken for a paste. Line breaks at the
    /// start of such a read stay keys: they end the line typed before (lines typed ahead over a
    /// slow link arrive together, and the Enter of the line already in the editor is one).
    public mutating func feed(_ bytes: some Collection<UInt8>) -> [Event] {
        let startedOutsidePaste = paste == nil && pending.isEmpty
        pending.append(contentsOf: bytes)
        let events = decode(final: false)
        guard startedOutsidePaste else { return events }
        let enters = events.prefix { $0 == .character("\r") || $0 == .character("\n") }
        if let paste = Self.unbracketedPaste(events.dropFirst(enters.count)) { return Array(enters) + [paste] }
        return events
    }

    /// Gives up the held bytes as characters (see `isHolding`).
    public mutating func flush() -> [Event] {
        guard isHolding else { return [] }
        return decode(final: true)
    }

    private mutating func decode(final: Bool) -> [Event] {
        var events: [Event] = []
        var index = 0
        while index < pending.count {
            if paste != nil {
                guard let end = Self.find(Self.pasteEnd, in: pending, from: index) else {
                    // Keep the last bytes: they may be the start of the end marker.
                    let keep = min(Self.pasteEnd.count - 1, pending.count - index)
                    appendToPaste(pending[index..<(pending.count - keep)])
                    index = pending.count - keep
                    break
                }
                appendToPaste(pending[index..<end])
                index = end + Self.pasteEnd.count
                events.append(finishPaste())
                continue
            }
            let rest = pending[index...]
            if rest.first == 0x1B {
                if rest.starts(with: Self.pasteStart) {
                    paste = []
                    pasteDropped = 0
                    index += Self.pasteStart.count
                    continue
                }
                if !final, Self.pasteStart.starts(with: rest) { break }  // maybe a paste: wait
            }
            guard let (scalar, length) = Self.scalar(at: rest, final: final) else { break }  // split character
            events.append(.character(scalar))
            index += length
        }
        pending.removeFirst(index)
        return events
    }

    /// The character that starts `bytes` and its length in bytes; nil when it is incomplete and
    /// more may come.
    private static func scalar(at bytes: ArraySlice<UInt8>, final: Bool) -> (Unicode.Scalar, Int)? {
        let first = bytes[bytes.startIndex]
        let expected: Int
        switch first {
        case 0x00..<0x80: return (Unicode.Scalar(first), 1)
        case 0xC2...0xDF: expected = 2
        case 0xE0...0xEF: expected = 3
        case 0xF0...0xF4: expected = 4
        default: return (replacement, 1)
        }
        var length = 1
        var index = bytes.index(after: bytes.startIndex)
        while length < expected, index < bytes.endIndex, (0x80...0xBF).contains(bytes[index]) {
            length += 1
            index += 1
        }
        if length < expected {
            // Cut short by the end of the read: wait for the rest. Cut short by another byte:
            // malformed, and that byte starts over.
            if index == bytes.endIndex, !final { return nil }
            return (replacement, length)
        }
        var decoder = UTF8()
        var iterator = bytes.prefix(length).makeIterator()
        guard case .scalarValue(let scalar) = decoder.decode(&iterator) else { return (replacement, length) }
        return ((0x80...0x9F).contains(scalar.value) ? replacement : scalar, length)
    }

    private static let replacement: Unicode.Scalar = "\u{FFFD}"

    private static func find(_ marker: [UInt8], in bytes: [UInt8], from start: Int) -> Int? {
        guard bytes.count - start >= marker.count else { return nil }
        var index = start
        while index + marker.count <= bytes.count {
            if bytes[index] == marker[0], bytes[index..<(index + marker.count)].elementsEqual(marker) { return index }
            index += 1
        }
        return nil
    }

    private mutating func appendToPaste(_ bytes: ArraySlice<UInt8>) {
        guard var kept = paste else { return }
        paste = nil  // so the append below does not copy
        let room = max(0, maxPasteBytes - kept.count)
        kept.append(contentsOf: bytes.prefix(room))
        pasteDropped += max(0, bytes.count - room)
        paste = kept
    }

    private mutating func finishPaste() -> Event {
        let bytes = paste ?? []
        paste = nil
        if pasteDropped > 0 { return .pasteTooLarge(bytes: bytes.count + pasteDropped) }
        // Terminals turn pasted line ends into CR, as if Enter were pressed; they are text here.
        let text = String(decoding: bytes, as: UTF8.self)
        return .paste(text.replacing("\r\n", with: "\n").replacing("\r", with: "\n"))
    }

    /// `events` as one paste when they can only be one (see `feed`); nil otherwise.
    private static func unbracketedPaste(_ events: ArraySlice<Event>) -> Event? {
        var text = ""
        var sawBreak = false
        var sawBreakThenText = false
        for event in events {
            guard case .character(let scalar) = event else { return nil }
            switch scalar {
            case "\r", "\n":
                text += "\n"
                sawBreak = true
            case "\t":
                text += "\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F:
                return nil
            default:
                text.unicodeScalars.append(scalar)
                if sawBreak { sawBreakThenText = true }
            }
        }
        return sawBreakThenText ? .paste(text) : nil
    }
}
