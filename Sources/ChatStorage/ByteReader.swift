extension Array where Element == UInt8 {
    /// Appends `value` as a LEB128 varint: what `ByteReader.varint()` reads.
    mutating func append(varint value: UInt64) {
        var value = value
        while value >= 0x80 {
            append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        append(UInt8(value))
    }
}

/// Bounds-checked reading of stored bytes (a chunk's blob, a journal record): every accessor
/// returns nil past the end, so a mangled file reads as malformed, never out of bounds.
struct ByteReader {
    /// The bytes read.
    let bytes: UnsafeRawBufferPointer
    /// Where the next read starts.
    var index: Int

    /// The next byte.
    mutating func byte() -> UInt8? {
        guard index < bytes.count else { return nil }
        defer { index += 1 }
        return bytes[index]
    }

    /// The next LEB128 varint; nil past the end or past 64 bits.
    mutating func varint() -> UInt64? {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while let byte = byte() {
            guard shift < 64, shift < 63 || byte <= 1 else { return nil }
            value |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 { return value }
            shift += 7
        }
        return nil
    }

    /// The next varint length and that many bytes, as UTF-8 text.
    mutating func string() -> String? {
        guard let range = lengthPrefixed() else { return nil }
        return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[range]), as: UTF8.self)
    }

    /// The next varint length and that many bytes.
    mutating func blob() -> [UInt8]? {
        guard let range = lengthPrefixed() else { return nil }
        return Array(bytes[range])
    }

    private mutating func lengthPrefixed() -> Range<Int>? {
        guard let length = varint(), length <= UInt64(bytes.count - index) else { return nil }
        let start = index
        index += Int(length)
        return start..<index
    }
}
