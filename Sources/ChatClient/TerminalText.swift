/// Text rules for a terminal: making untrusted text safe to print, and how many cells a
/// character takes.
public enum TerminalText {
    /// `text` with every character that could change how the terminal shows what follows made
    /// visible, so that nothing a peer sends can move the cursor, clear the screen, change
    /// colours, reverse the direction of the rest of the line or start a new one.
    ///
    /// C0 controls and DEL become caret notation (`^[`, `^?`), C1 controls U+FFFD and a tab a
    /// space. Bidirectional controls (U+202A–202E, U+2066–2069, U+200E/F, U+061C) and the line
    /// and paragraph separators U+2028/2029 become `<U+202E>` and so on. Everything else,
    /// including all other UTF-8, passes through.
    public static func sanitized(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsReplacement) else { return text }
        var result = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            switch scalar.value {
            case 0x09:
                result.append(" ")
            case 0x00..<0x20:
                result.append("^")
                result.append(Unicode.Scalar(UInt8(scalar.value) + 0x40))
            case 0x7F:
                result.append(contentsOf: "^?".unicodeScalars)
            case 0x80..<0xA0:
                result.append("\u{FFFD}")
            case _ where isLayoutControl(scalar):
                result.append(contentsOf: codePointName(scalar).unicodeScalars)
            default:
                result.append(scalar)
            }
        }
        return String(result)
    }

    private static func needsReplacement(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F..<0xA0).contains(scalar.value) || isLayoutControl(scalar)
    }

    /// Bidirectional formatting characters and the Unicode line and paragraph separators:
    /// invisible, yet they reorder or break the rest of the line.
    private static func isLayoutControl(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x061C, 0x200E, 0x200F, 0x2028, 0x2029, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }

    /// `<U+202E>`: the code point in the form people look up.
    private static func codePointName(_ scalar: Unicode.Scalar) -> String {
        let hex = String(scalar.value, radix: 16, uppercase: true)
        return "<U+" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex + ">"
    }

    // MARK: Widths

    /// The cells a terminal gives `scalar`: 0 for combining marks and other zero-width
    /// characters, 2 for East Asian wide and full-width characters and emoji shown as emoji,
    /// 1 for everything else — including characters this table does not know (unassigned code
    /// points, private use), which terminals draw in one cell (tmux draws them as `_`).
    ///
    /// Follows the rules of `wcwidth` implementations (Markus Kuhn's, glibc's), which is what
    /// terminals measure with; controls are never measured, since they are shown sanitized.
    public static func cellWidth(of scalar: Unicode.Scalar) -> Int {
        let value = scalar.value
        if value == 0 { return 0 }
        if value < 0x7F { return 1 }
        switch scalar.properties.generalCategory {
        case .nonspacingMark, .enclosingMark, .format:
            // The soft hyphen is a format character that terminals draw.
            return value == 0x00AD ? 1 : 0
        default:
            break
        }
        if (0x1160...0x11FF).contains(value) || value == 0x200B { return 0 }  // Hangul vowels, zero width space
        // Regional indicators are emoji, but East Asian Width gives them one cell each (a flag
        // is two), and so do wcwidth and the terminals that use it.
        if (0x1F1E6...0x1F1FF).contains(value) { return 1 }
        if isWide(value) || scalar.properties.isEmojiPresentation { return 2 }
        return 1
    }

    /// The cells `character` takes: the sum over its scalars, which is how terminals that
    /// measure code point by code point (tmux, xterm) place a cluster such as a family emoji.
    public static func cellWidth(of character: Character) -> Int {
        character.unicodeScalars.reduce(0) { $0 + cellWidth(of: $1) }
    }

    /// The cells `text` takes on one row.
    public static func cellWidth(of text: some StringProtocol) -> Int {
        text.unicodeScalars.reduce(0) { $0 + cellWidth(of: $1) }
    }

    /// The longest prefix of `text` that fits `columns` cells (whole characters only).
    public static func prefix(of text: String, fitting columns: Int) -> String {
        var used = 0
        var result = ""
        for character in text {
            let width = cellWidth(of: character)
            if used + width > columns { break }
            used += width
            result.append(character)
        }
        return result
    }

    /// East Asian Wide and Fullwidth ranges (Unicode's EastAsianWidth.txt, W and F) other than
    /// emoji, which `isEmojiPresentation` covers.
    private static func isWide(_ value: UInt32) -> Bool {
        switch value {
        case 0x1100...0x115F, 0x2329...0x232A, 0x2E80...0x303E, 0x3041...0x33FF, 0x3400...0x4DBF,
            0x4E00...0x9FFF, 0xA000...0xA4CF, 0xA960...0xA97F, 0xAC00...0xD7A3, 0xF900...0xFAFF,
            0xFE10...0xFE19, 0xFE30...0xFE6F, 0xFF00...0xFF60, 0xFFE0...0xFFE6, 0x16FE0...0x16FE4,
            0x17000...0x18CFF, 0x1AFF0...0x1B2FF, 0x1F200...0x1F202, 0x1F210...0x1F23B,
            0x1F240...0x1F248, 0x1F250...0x1F251, 0x20000...0x2FFFD, 0x30000...0x3FFFD:
            return true
        default:
            return false
        }
    }

    /// Where a line's continuation rows start: an invisible mark `MessageRenderer` puts before a
    /// line's text (after `09:04 <bob> `), as irssi's indent mark. It is a C0 control, which
    /// `sanitized` never lets through from a peer, so only the client can place it; `rows`
    /// measures it as nothing and `plain` drops it.
    public static let indentMark: Unicode.Scalar = "\u{1F}"

    /// `line` cut into the rows of a terminal `columns` cells wide, each at most `columns` cells:
    /// the first rows of a line taller than the screen, or its last, can then be drawn alone.
    ///
    /// Cut at spaces, as irssi cuts: a row ends before the word that would not fit, and the
    /// continuation rows start under the line's text — at the column of its `indentMark`, at
    /// most half the width (a line without the mark, or one whose mark is further right, is
    /// indented less). A word wider than a row is cut where the row ends, code point by code
    /// point as the terminal measures (`cellWidth`): a double-width character that does not fit
    /// starts the next row, and a zero-width one stays with the character before it. The spaces
    /// where a row was cut are not drawn. The colour and style codes `MessageRenderer` puts in
    /// go with the text they style: a row cut inside a style ends with a reset and the next row
    /// starts with the codes in effect, so each row draws alone.
    public static func rows(of line: String, columns: Int) -> [String] {
        var cutter = RowCutter(columns: max(1, columns))
        var escape: String.UnicodeScalarView?
        for scalar in line.unicodeScalars {
            if var sequence = escape {
                sequence.append(scalar)
                if (0x40...0x7E).contains(scalar.value), scalar != "[" {
                    escape = nil
                    cutter.add(.code(sequence))
                } else {
                    escape = sequence
                }
                continue
            }
            if scalar == "\u{1B}" {
                escape = "\u{1B}".unicodeScalars
            } else if scalar == indentMark {
                cutter.markIndent()
            } else {
                cutter.add(.glyph(scalar, cellWidth(of: scalar)))
            }
        }
        if let escape { cutter.add(.code(escape)) }
        return cutter.finish()
    }

    /// Cuts one line into rows as `rows` describes, a piece at a time.
    private struct RowCutter {
        enum Piece {
            /// A colour or style code: no cells.
            case code(String.UnicodeScalarView)
            /// A character and its cells.
            case glyph(Unicode.Scalar, Int)

            var width: Int { if case .glyph(_, let width) = self { width } else { 0 } }
            var isSpace: Bool { if case .glyph(" ", _) = self { true } else { false } }
        }

        let columns: Int
        private var rows: [String] = []
        /// The codes in effect where the current row starts.
        private var startStyle = String.UnicodeScalarView()
        /// The current row's pieces, after its indent.
        private var pieces: [Piece] = []
        /// The cells of the current row: its indent and its pieces.
        private var used = 0
        /// The cells the current row starts with (0 on the first row).
        private var lead = 0
        /// The cells continuation rows start with.
        private var indent = 0

        init(columns: Int) {
            self.columns = columns
        }

        /// The mark of where the text starts: continuation rows go under it.
        mutating func markIndent() {
            if rows.isEmpty, lead == 0 { indent = min(used, columns / 2) }
        }

        mutating func add(_ piece: Piece) {
            let width = piece.width
            if width > 0, used + width > columns, used > lead {
                cut(before: piece)
                // The space where a row ends is not drawn.
                if piece.isSpace { return }
            }
            pieces.append(piece)
            used += width
        }

        /// Ends the current row before `next`, which does not fit: at the last space that has
        /// text before it, when the word after it fits a continuation row with `next`; else
        /// where the row is full.
        private mutating func cut(before next: Piece) {
            var end = pieces.count
            if !next.isSpace, let space = pieces.lastIndex(where: \.isSpace),
                pieces[..<space].contains(where: { $0.width > 0 && !$0.isSpace }),
                indent + pieces[(space + 1)...].reduce(0, { $0 + $1.width }) + next.width <= columns
            {
                end = space
            }
            var carried = end < pieces.count ? Array(pieces[(end + 1)...]) : []
            var kept = Array(pieces[..<end])
            while let last = kept.last, last.isSpace { kept.removeLast() }
            let styleAtCut = Self.style(startStyle, after: pieces[..<min(pieces.count, end + 1)])
            var row = String.UnicodeScalarView(repeating: " ", count: lead)
            row.append(contentsOf: startStyle)
            for piece in kept { row.append(contentsOf: Self.scalars(of: piece)) }
            if !Self.style(startStyle, after: kept[...]).isEmpty { row.append(contentsOf: "\u{1B}[0m".unicodeScalars) }
            rows.append(String(row))
            while let first = carried.first, first.isSpace { carried.removeFirst() }
            startStyle = styleAtCut
            lead = indent
            pieces = carried
            used = lead + carried.reduce(0) { $0 + $1.width }
        }

        /// The rows, the last one included.
        mutating func finish() -> [String] {
            var row = String.UnicodeScalarView(repeating: " ", count: lead)
            row.append(contentsOf: startStyle)
            for piece in pieces { row.append(contentsOf: Self.scalars(of: piece)) }
            rows.append(String(row))
            return rows
        }

        private static func scalars(of piece: Piece) -> String.UnicodeScalarView {
            switch piece {
            case .code(let code): code
            case .glyph(let scalar, _): String.UnicodeScalarView([scalar])
            }
        }

        /// The codes in effect after `pieces`, starting from `style`: a reset clears them.
        private static func style(_ style: String.UnicodeScalarView, after pieces: ArraySlice<Piece>) -> String.UnicodeScalarView {
            var style = style
            for case .code(let code) in pieces {
                let text = String(code)
                if text == "\u{1B}[0m" || text == "\u{1B}[m" { style = String.UnicodeScalarView() } else { style.append(contentsOf: code) }
            }
            return style
        }
    }

    /// `line` without the colour and style codes `MessageRenderer` puts in (CSI sequences):
    /// the text the user sees, for searching and for logs.
    public static func plain(_ line: String) -> String {
        var scalars = String.UnicodeScalarView()
        var inEscape = false
        for scalar in line.unicodeScalars {
            if inEscape {
                if (0x40...0x7E).contains(scalar.value), scalar != "[" { inEscape = false }
            } else if scalar == "\u{1B}" {
                inEscape = true
            } else if scalar != indentMark {
                scalars.append(scalar)
            }
        }
        return String(scalars)
    }
}
