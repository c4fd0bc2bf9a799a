/// Reads the fields of one complete frame body, checking each against docs/PROTOCOL.md.
///
/// Works on borrowed memory: the caller keeps the bytes alive for the reader's lifetime.
struct FrameReader {
    private let bytes: UnsafeBufferPointer<UInt8>
    private var index: Int

    /// Reads `bytes` from the first field (the type byte already consumed) to the end.
    init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
        self.index = 0
    }

    /// Bytes not yet read.
    var remaining: Int { bytes.count - index }

    /// Reads an unsigned LEB128 varint; the frame may not end inside it.
    mutating func varint(_ field: Field) throws(FrameError) -> UInt64 {
        guard let (value, next) = try Varint.read(UnsafeRawBufferPointer(bytes), from: index, field: field) else {
            throw .truncated(field)
        }
        index = next
        return value
    }

    /// Reads a varint that must fit in UInt32.
    mutating func uint32(_ field: Field) throws(FrameError) -> UInt32 {
        let value = try varint(field)
        guard let narrow = UInt32(exactly: value) else { throw .integerOverflow(field) }
        return narrow
    }

    /// Reads a varint that must fit in UInt16.
    mutating func uint16(_ field: Field) throws(FrameError) -> UInt16 {
        let value = try varint(field)
        guard let narrow = UInt16(exactly: value) else { throw .integerOverflow(field) }
        return narrow
    }

    /// Reads a varint that must fit in UInt8.
    mutating func uint8(_ field: Field) throws(FrameError) -> UInt8 {
        let value = try varint(field)
        guard let narrow = UInt8(exactly: value) else { throw .integerOverflow(field) }
        return narrow
    }

    /// Reads a room sequence number, which starts at 1.
    mutating func seq() throws(FrameError) -> UInt64 {
        let value = try varint(.seq)
        guard value != 0 else { throw .invalidValue(.seq) }
        return value
    }

    /// Reads a room epoch, which is never 0.
    mutating func epoch() throws(FrameError) -> UInt64 {
        let value = try varint(.epoch)
        guard value != 0 else { throw .invalidValue(.epoch) }
        return value
    }

    /// Reads one raw byte.
    mutating func byte(_ field: Field) throws(FrameError) -> UInt8 {
        guard index < bytes.count else { throw .truncated(field) }
        defer { index += 1 }
        return bytes[index]
    }

    /// Reads a bool byte: 0 or 1, nothing else.
    mutating func bool(_ field: Field) throws(FrameError) -> Bool {
        switch try byte(field) {
        case 0: return false
        case 1: return true
        default: throw .invalidValue(field)
        }
    }

    /// Reads a length-prefixed UTF-8 string.
    mutating func string(_ field: Field) throws(FrameError) -> String {
        try utf8(take(count: try varint(field), field), field)
    }

    /// Reads an optional string: varint 0 for absent, else byte count + 1 and the bytes.
    mutating func optionalString(_ field: Field) throws(FrameError) -> String? {
        let marker = try varint(field)
        guard marker != 0 else { return nil }
        return try utf8(take(count: marker - 1, field), field)
    }

    /// Reads a text field: every byte left in the frame.
    mutating func text(_ field: Field) throws(FrameError) -> String {
        try utf8(take(count: UInt64(remaining), field), field)
    }

    /// Reads a length-prefixed nick and checks the nick rules.
    mutating func nick(_ field: Field) throws(FrameError) -> String {
        let raw = try take(count: try varint(field), field)
        if let problem = ChatName.nickProblem(raw) { throw .badName(field, problem) }
        return String(decoding: raw, as: UTF8.self)
    }

    /// Reads a length-prefixed room name and checks the room rules.
    mutating func room(_ field: Field = .room) throws(FrameError) -> String {
        let raw = try take(count: try varint(field), field)
        if let problem = ChatName.roomProblem(raw) { throw .badName(field, problem) }
        return String(decoding: raw, as: UTF8.self)
    }

    /// Reads a length-prefixed room name, or an empty string (version 4's "the whole server").
    mutating func roomOrEmpty(_ field: Field = .room) throws(FrameError) -> String {
        let raw = try take(count: try varint(field), field)
        if !raw.isEmpty, let problem = ChatName.roomProblem(raw) { throw .badName(field, problem) }
        return String(decoding: raw, as: UTF8.self)
    }

    /// Reads a length-prefixed nick, or an empty string (none).
    mutating func nickOrEmpty(_ field: Field) throws(FrameError) -> String {
        let raw = try take(count: try varint(field), field)
        if !raw.isEmpty, let problem = ChatName.nickProblem(raw) { throw .badName(field, problem) }
        return String(decoding: raw, as: UTF8.self)
    }

    /// Reads every byte left, uninterpreted.
    mutating func rest() -> [UInt8] {
        defer { index = bytes.count }
        return Array(bytes[index...])
    }

    /// Throws unless every byte of the frame was read: known frames have no spare room.
    func finish(_ type: FrameType) throws(FrameError) {
        if remaining != 0 { throw .trailingBytes(type: type, count: remaining) }
    }

    private mutating func take(count: UInt64, _ field: Field) throws(FrameError) -> UnsafeBufferPointer<UInt8> {
        guard count <= UInt64(remaining) else { throw .truncated(field) }
        let slice = UnsafeBufferPointer(rebasing: bytes[index..<index + Int(count)])
        index += Int(count)
        return slice
    }

    private func utf8(_ raw: UnsafeBufferPointer<UInt8>, _ field: Field) throws(FrameError) -> String {
        // Chat text is mostly ASCII, and String(decoding:) takes a faster path than
        // String(validating:); for ASCII the two agree, as there is nothing to repair.
        if raw.allSatisfy({ $0 < 0x80 }) { return String(decoding: raw, as: UTF8.self) }
        guard let string = String(validating: raw, as: UTF8.self) else { throw .invalidUTF8(field) }
        return string
    }
}

/// Unsigned LEB128 varints as the protocol allows them: at most 64 bits, minimally encoded.
public enum Varint {
    /// Reads the varint at `start`, returning its value and the index after it, or nil if
    /// `bytes` ends before the varint does.
    ///
    /// Throws `.integerOverflow(field)` past 64 bits and `.nonMinimalInteger(field)` for a
    /// needlessly long encoding (one that ends in a zero byte).
    public static func read(
        _ bytes: UnsafeRawBufferPointer, from start: Int, field: Field
    ) throws(FrameError) -> (value: UInt64, next: Int)? {
        guard start < bytes.count else { return nil }
        let first = bytes[start]
        if first < 0x80 { return (UInt64(first), start + 1) }
        var value = UInt64(first & 0x7F)
        var shift: UInt64 = 7
        var index = start + 1
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            // The tenth byte holds bit 63 alone; anything more does not fit 64 bits.
            if shift == 63 && byte > 1 { throw .integerOverflow(field) }
            value |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 {
                if byte == 0 { throw .nonMinimalInteger(field) }
                return (value, index)
            }
            shift += 7
        }
        return nil
    }
}
