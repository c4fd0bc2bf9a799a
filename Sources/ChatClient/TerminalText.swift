/// Text rules for a terminal: making untrusted text safe to print, and working out where a
/// wrapped input line puts the cursor.
public enum TerminalText {
    /// `text` with every control character replaced by a visible stand-in, so that nothing a
    /// peer sends can move the cursor, clear the screen or change colours.
    ///
    /// C0 controls and DEL become caret notation (`^[`, `^?`), C1 controls U+FFFD; a tab
    /// becomes a space. Everything else, including all other UTF-8, passes through.
    public static func sanitized(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isControl) else { return text }
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
            default:
                result.append(scalar)
            }
        }
        return String(result)
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F..<0xA0).contains(scalar.value)
    }

    /// The row, counted from the prompt's row, that holds the cursor after `cellWidths` (the
    /// display width of each character before the cursor, prompt included) on a terminal
    /// `columns` wide.
    ///
    /// Follows how line editors lay text out: a character that does not fit in what is left of
    /// a row starts the next row, and a cursor that has just filled a row stands at the start
    /// of the next one (libedit forces that wrap rather than leave the cursor in the margin).
    public static func cursorRow(cellWidths: some Sequence<Int>, columns: Int) -> Int {
        guard columns > 0 else { return 0 }
        var row = 0
        var column = 0
        for width in cellWidths where width > 0 {
            if column + width > columns {
                row += 1
                column = 0
            }
            column += width
            if column >= columns {
                row += 1
                column = 0
            }
        }
        return row
    }
}
