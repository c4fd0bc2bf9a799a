/// The input history file: one entry per line, in the format libedit's `write_history` uses
/// (a `_HiStOrY_V2_` first line, then each entry with spaces, backslashes and control
/// characters as `\ooo` octal escapes), so a history written by earlier versions of the client,
/// which used libedit, carries over.
public enum HistoryFile {
    private static let header = "_HiStOrY_V2_"

    /// The entries in `contents`, oldest first. Lines without the header are taken as they are.
    public static func decode(_ contents: String) -> [String] {
        var lines = contents.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
        guard lines.first == header else { return lines }
        lines.removeFirst()
        return lines.map(unescape)
    }

    /// `entries` in the file's format, ending in a newline.
    public static func encode(_ entries: [String]) -> String {
        ([header] + entries.map(escape)).joined(separator: "\n") + "\n"
    }

    private static func escape(_ entry: String) -> String {
        var result: [UInt8] = []
        for byte in entry.utf8 {
            if byte <= 0x20 || byte == UInt8(ascii: "\\") || byte == 0x7F {
                result.append(UInt8(ascii: "\\"))
                for shift in [6, 3, 0] { result.append(UInt8(ascii: "0") + (byte >> UInt8(shift)) & 7) }
            } else {
                result.append(byte)
            }
        }
        return String(decoding: result, as: UTF8.self)
    }

    private static func unescape(_ line: String) -> String {
        let bytes = Array(line.utf8)
        var result: [UInt8] = []
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\\"), index + 3 < bytes.count, let value = octal(bytes[(index + 1)...(index + 3)]) {
                result.append(value)
                index += 4
            } else if byte == UInt8(ascii: "\\"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "\\") {
                result.append(byte)
                index += 2
            } else {
                result.append(byte)
                index += 1
            }
        }
        return String(decoding: result, as: UTF8.self)
    }

    private static func octal(_ digits: ArraySlice<UInt8>) -> UInt8? {
        guard digits.count == 3 else { return nil }
        var value = 0
        for digit in digits {
            guard (UInt8(ascii: "0")...UInt8(ascii: "7")).contains(digit) else { return nil }
            value = value * 8 + Int(digit - UInt8(ascii: "0"))
        }
        return value <= 0xFF ? UInt8(value) : nil
    }
}
