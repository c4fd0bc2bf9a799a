/// One thing the user did at the keyboard, decoded from the bytes a terminal sends.
public enum Key: Equatable, Sendable {
    /// Printable text typed (one key, or a run of keys read at once).
    case text(String)
    /// Text the terminal marked as pasted (bracketed paste); line ends are `\n`.
    case paste(String)
    /// A bracketed paste larger than the decoder keeps; its bytes were dropped.
    case pasteTooLarge(bytes: Int)
    /// Return or Enter.
    case enter
    /// Tab.
    case tab
    /// Backspace (DEL or Ctrl-H).
    case backspace
    /// The Delete key.
    case delete
    /// Arrow keys.
    case up, down, left, right
    /// Home and End.
    case home, end
    /// Ctrl-Left and Ctrl-Right (also Alt-b and Alt-f).
    case wordLeft, wordRight
    /// Page Up and Page Down.
    case pageUp, pageDown
    /// Ctrl with a letter, e.g. `control("w")` for Ctrl-W (except Tab, Enter and Backspace).
    case control(Character)
    /// Alt (Meta) with a character, e.g. `alt("1")`; Alt-Backspace is `alt("\u{7F}")`.
    case alt(Character)
    /// Escape on its own.
    case escape
}

/// Turns the bytes read from a terminal in raw mode into `Key`s: UTF-8 text, control keys,
/// escape sequences (CSI and SS3, as xterm, tmux and the Linux console send them) and
/// bracketed pastes (`ESC [200~` … `ESC [201~`, enabled with `ESC [?2004h`).
///
/// A value type fed chunk by chunk: a sequence or a UTF-8 character split over two reads is
/// kept until the rest arrives. An Escape key and the start of an escape sequence look alike,
/// so a lone `ESC` at the end of a chunk waits: call `flushPendingEscape()` when no more bytes
/// came for a moment. Unknown escape sequences are consumed whole and ignored, so that their
/// bytes never turn into typed text.
public struct KeyDecoder: Sendable {
    /// The largest paste kept; a larger one is reported as `pasteTooLarge` and dropped.
    public let maxPasteBytes: Int
    private var pending: [UInt8] = []
    private var paste: [UInt8]?
    private var pasteDropped = 0

    /// A decoder that keeps pastes of up to `maxPasteBytes` bytes.
    public init(maxPasteBytes: Int = 4 << 20) {
        self.maxPasteBytes = maxPasteBytes
    }

    /// Whether bytes wait for the rest of an escape sequence (see `flushPendingEscape`).
    public var hasPendingEscape: Bool { paste == nil && pending.first == 0x1B }

    /// The keys in `bytes`, following what earlier chunks left pending.
    public mutating func feed(_ bytes: some Sequence<UInt8>) -> [Key] {
        pending.append(contentsOf: bytes)
        var keys: [Key] = []
        var index = 0
        var text: [UInt8] = []
        func flushText() {
            if !text.isEmpty { keys.append(.text(String(decoding: text, as: UTF8.self))) }
            text = []
        }
        while index < pending.count {
            if paste != nil {
                guard let end = pasteEnd(from: index) else {
                    // Keep the last bytes: they may be the start of the end marker.
                    let keep = min(Self.pasteEndMarker.count - 1, pending.count - index)
                    appendToPaste(pending[index..<(pending.count - keep)])
                    index = pending.count - keep
                    break
                }
                appendToPaste(pending[index..<end])
                index = end + Self.pasteEndMarker.count
                keys.append(finishPaste())
                continue
            }
            let byte = pending[index]
            switch byte {
            case 0x1B:
                flushText()
                guard let (sequence, length) = escapeSequence(at: index) else {
                    // Incomplete: wait for more bytes (or for flushPendingEscape).
                    pending.removeFirst(index)
                    return keys
                }
                index += length
                switch sequence {
                case .key(let key):
                    keys.append(key)
                case .pasteStart:
                    paste = []
                    pasteDropped = 0
                case .ignored:
                    break
                }
            case 0x0D, 0x0A:
                flushText()
                keys.append(.enter)
                // A terminal in raw mode sends CR; some send CR LF. Either is one Enter.
                if byte == 0x0D, index + 1 < pending.count, pending[index + 1] == 0x0A { index += 1 }
                index += 1
            case 0x09:
                flushText()
                keys.append(.tab)
                index += 1
            case 0x08, 0x7F:
                flushText()
                keys.append(.backspace)
                index += 1
            case 0x00..<0x20:
                flushText()
                if (0x01...0x1A).contains(byte) {
                    keys.append(.control(Character(Unicode.Scalar(byte + 0x60))))
                }
                index += 1
            default:
                let expected = Self.utf8Length(byte)
                var length = 1
                while length < expected, index + length < pending.count, (0x80...0xBF).contains(pending[index + length]) {
                    length += 1
                }
                if length < expected, index + length == pending.count {
                    // A character split over two reads: keep its first bytes for next time.
                    flushText()
                    pending.removeFirst(index)
                    return keys
                }
                // A malformed sequence decodes as U+FFFD and the byte that broke it is kept.
                text.append(contentsOf: pending[index..<(index + length)])
                index += length
            }
        }
        flushText()
        pending.removeFirst(min(index, pending.count))
        return keys
    }

    /// `keys` read at once, taken as a paste when they can only be one: a terminal without
    /// bracketed paste delivers pasted lines as text and Enter keys, and no one types a line
    /// break and more text between two reads. So text with an Enter followed by more text,
    /// and nothing but text, Enter and Tab, becomes one `.paste`; anything else is returned
    /// as it is.
    public static func pasteHeuristic(_ keys: [Key]) -> [Key] {
        var text = ""
        var sawBreakThenText = false
        var sawBreak = false
        for key in keys {
            switch key {
            case .text(let typed):
                text += typed
                if sawBreak { sawBreakThenText = true }
            case .enter:
                text += "\n"
                sawBreak = true
            case .tab:
                text += "\t"
            default:
                return keys
            }
        }
        return sawBreakThenText ? [.paste(text)] : keys
    }

    /// The keys held back waiting for the rest of an escape sequence, as they stand: a lone
    /// `ESC` is the Escape key; `ESC` and a character is Alt with it.
    public mutating func flushPendingEscape() -> [Key] {
        guard hasPendingEscape else { return [] }
        let held = pending
        pending = []
        if held.count == 1 { return [.escape] }
        let rest = String(decoding: held.dropFirst(), as: UTF8.self)
        return rest.first.map { [.alt($0)] } ?? [.escape]
    }

    // MARK: Escape sequences

    private static let pasteEndMarker: [UInt8] = Array("\u{1B}[201~".utf8)

    /// What an escape sequence stands for.
    private enum EscapeSequence {
        case key(Key)
        case pasteStart
        /// A sequence that means nothing here (function keys, mouse reports, replies).
        case ignored

        init(_ key: Key?) { self = key.map(EscapeSequence.key) ?? .ignored }
    }

    /// What the escape sequence starting at `start` stands for, and its length; nil when the
    /// sequence is not complete yet.
    private func escapeSequence(at start: Int) -> (EscapeSequence, Int)? {
        let available = pending.count - start
        guard available >= 2 else { return nil }
        let second = pending[start + 1]
        switch second {
        case UInt8(ascii: "["):
            // CSI: parameters 0x30–0x3F, intermediates 0x20–0x2F, one final byte 0x40–0x7E.
            var end = start + 2
            while end < pending.count, (0x20...0x3F).contains(pending[end]) { end += 1 }
            guard end < pending.count else { return nil }
            let final = pending[end]
            guard (0x40...0x7E).contains(final) else {
                // Not a CSI after all: Alt-[ and the byte goes on as typed.
                return (.key(.alt("[")), 2)
            }
            let parameters = String(decoding: pending[(start + 2)..<end], as: UTF8.self)
            if parameters == "200", final == UInt8(ascii: "~") { return (.pasteStart, end - start + 1) }
            return (EscapeSequence(Self.csiKey(parameters: parameters, final: final)), end - start + 1)
        case UInt8(ascii: "O"):
            guard available >= 3 else { return nil }
            let keys: [UInt8: Key] = [
                UInt8(ascii: "A"): .up, UInt8(ascii: "B"): .down, UInt8(ascii: "C"): .right,
                UInt8(ascii: "D"): .left, UInt8(ascii: "H"): .home, UInt8(ascii: "F"): .end,
            ]
            return (EscapeSequence(keys[pending[start + 2]]), 3)
        case 0x7F, 0x08:
            return (.key(.alt("\u{7F}")), 2)
        default:
            // ESC ESC, or ESC and a control key: the Escape key, then that key on its own.
            if second < 0x20 { return (.key(.escape), 1) }
            let length = Self.utf8Length(second)
            guard available >= 1 + length else { return nil }
            let character = String(decoding: pending[(start + 1)..<(start + 1 + length)], as: UTF8.self)
            switch character {
            case "b": return (.key(.wordLeft), 2)
            case "f": return (.key(.wordRight), 2)
            default: return (EscapeSequence(character.first.map(Key.alt)), 1 + length)
            }
        }
    }

    private static func csiKey(parameters: String, final: UInt8) -> Key? {
        let fields = parameters.split(separator: ";", omittingEmptySubsequences: false)
        let modifier = fields.count > 1 ? Int(fields[1]) ?? 1 : 1
        let control = modifier == 5 || modifier == 3  // Ctrl or Alt with an arrow: by word
        switch final {
        case UInt8(ascii: "A"): return .up
        case UInt8(ascii: "B"): return .down
        case UInt8(ascii: "C"): return control ? .wordRight : .right
        case UInt8(ascii: "D"): return control ? .wordLeft : .left
        case UInt8(ascii: "H"): return .home
        case UInt8(ascii: "F"): return .end
        case UInt8(ascii: "~"):
            switch fields.first.flatMap({ Int($0) }) {
            case 1, 7: return .home
            case 4, 8: return .end
            case 3: return .delete
            case 5: return .pageUp
            case 6: return .pageDown
            default: return nil
            }
        default:
            return nil
        }
    }

    // MARK: Pastes

    private func pasteEnd(from start: Int) -> Int? {
        let marker = Self.pasteEndMarker
        guard pending.count - start >= marker.count else { return nil }
        var index = start
        while index + marker.count <= pending.count {
            if pending[index] == 0x1B, pending[index..<(index + marker.count)].elementsEqual(marker) { return index }
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

    private mutating func finishPaste() -> Key {
        let bytes = paste ?? []
        paste = nil
        if pasteDropped > 0 { return .pasteTooLarge(bytes: bytes.count + pasteDropped) }
        // Terminals turn pasted line ends into CR, as if Enter were pressed; they are text here.
        var text = String(decoding: bytes, as: UTF8.self)
        text = text.replacing("\r\n", with: "\n").replacing("\r", with: "\n")
        return .paste(text)
    }

    /// How many bytes the UTF-8 sequence that starts with `byte` has (1 for a stray byte,
    /// which decodes as U+FFFD).
    private static func utf8Length(_ byte: UInt8) -> Int {
        switch byte {
        case 0xC2...0xDF: 2
        case 0xE0...0xEF: 3
        case 0xF0...0xF4: 4
        default: 1
        }
    }
}
