/// An IPv4 or IPv6 address as its bytes, read and written exactly as glibc's `inet_pton` and
/// `inet_ntop` read and write it.
///
/// Exactly, because the text is data: ban masks are stored and, in a cluster, looked up in Redis
/// by their canonical text, which the server wrote with `inet_ntop` before this type existed. A
/// test holds the two to the same answers on random and edge-case input. Written here rather than
/// called from Glibc so that the chat rules import no operating system. One difference, on
/// purpose: a text with a NUL byte is refused, where `inet_pton` would read the part before it.
package struct IPAddress: Hashable, Sendable {
    /// 4 bytes for IPv4, 16 for IPv6, in network order.
    package let bytes: [UInt8]

    /// Wraps 4 (IPv4) or 16 (IPv6) bytes in network order.
    package init(bytes: [UInt8]) {
        precondition(bytes.count == 4 || bytes.count == 16, "an IP address is 4 or 16 bytes")
        self.bytes = bytes
    }

    /// Reads `text` as `inet_pton(AF_INET, …)` does, or else as `inet_pton(AF_INET6, …)` does;
    /// nil when neither takes it.
    package init?(_ text: some StringProtocol) {
        let utf8 = Array(text.utf8)
        if let bytes = Self.ipv4(utf8[...]) ?? Self.ipv6(utf8) {
            self.bytes = bytes
        } else {
            return nil
        }
    }

    /// Reads `text` as `inet_pton(AF_INET, …)` does: exactly four decimal parts of 0 to 255,
    /// without leading zeros; nil otherwise.
    package init?(ipv4 text: some StringProtocol) {
        guard let bytes = Self.ipv4(Array(text.utf8)[...]) else { return nil }
        self.bytes = bytes
    }

    /// Whether this is an IPv4 address (4 bytes).
    package var isIPv4: Bool { bytes.count == 4 }

    /// The IPv4 address an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, a dual-stack listener's
    /// view of an IPv4 client) carries; nil for any other address.
    package var mappedIPv4: IPAddress? {
        guard bytes.count == 16, bytes.prefix(10).allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF else { return nil }
        return IPAddress(bytes: Array(bytes.suffix(4)))
    }

    /// The address as `inet_ntop` writes it: IPv4 dotted; IPv6 in lower-case hex, the first
    /// longest run of two or more zero groups as `::`, and an address whose first 96 bits are
    /// zero (but for `::` and `::1`'s kind) or IPv4-mapped with its last four bytes dotted.
    package var text: String {
        bytes.count == 4 ? Self.dotted(bytes[...]) : ipv6Text
    }

    private var ipv6Text: String {
        let words = (0..<8).map { UInt16(bytes[2 * $0]) << 8 | UInt16(bytes[2 * $0 + 1]) }
        // The longest run of zero words, the first of equal ones (glibc's `cur.len > best.len`).
        var best: (base: Int, count: Int)?
        var current: (base: Int, count: Int)?
        for (index, word) in words.enumerated() {
            if word == 0 {
                current = current.map { ($0.base, $0.count + 1) } ?? (index, 1)
            } else if let run = current {
                if run.count > best?.count ?? 0 { best = run }
                current = nil
            }
        }
        if let run = current, run.count > best?.count ?? 0 { best = run }
        if let run = best, run.count < 2 { best = nil }

        var text = ""
        var index = 0
        while index < 8 {
            if let run = best, index == run.base {
                text += ":"
                index += run.count
                continue
            }
            if index != 0 { text += ":" }
            if index == 6, let run = best, run.base == 0, run.count == 6 || (run.count == 5 && words[5] == 0xFFFF) {
                text += Self.dotted(bytes[12...])
                return text
            }
            text += String(words[index], radix: 16)
            index += 1
        }
        if let run = best, run.base + run.count == 8 { text += ":" }
        return text
    }

    private static func dotted(_ bytes: ArraySlice<UInt8>) -> String {
        bytes.map { String($0) }.joined(separator: ".")
    }

    /// glibc's `inet_pton4`: four parts, each 1 to 3 digits without a leading zero, at most 255.
    private static func ipv4(_ text: ArraySlice<UInt8>) -> [UInt8]? {
        var parts: [UInt8] = [0]
        var sawDigit = false
        for character in text {
            if character &- UInt8(ascii: "0") < 10 {
                let digit = Int(character &- UInt8(ascii: "0"))
                if sawDigit && parts[parts.count - 1] == 0 { return nil }
                let value = Int(parts[parts.count - 1]) * 10 + digit
                if value > 255 { return nil }
                parts[parts.count - 1] = UInt8(value)
                sawDigit = true
            } else if character == UInt8(ascii: "."), sawDigit {
                if parts.count == 4 { return nil }
                parts.append(0)
                sawDigit = false
            } else {
                return nil
            }
        }
        return parts.count == 4 && sawDigit ? parts : nil
    }

    /// glibc's `inet_pton6`: up to eight groups of 1 to 4 hex digits, one `::` for a run of zero
    /// groups, and a dotted IPv4 address in place of the last two groups.
    private static func ipv6(_ text: [UInt8]) -> [UInt8]? {
        guard !text.isEmpty else { return nil }
        var position = 0
        if text[0] == UInt8(ascii: ":") {
            guard text.count > 1, text[1] == UInt8(ascii: ":") else { return nil }
            position = 1
        }
        var bytes: [UInt8] = []
        var gap: Int?  // where `::` stands, as a count of bytes before it
        var token = position
        var digits = 0
        var value = 0
        while position < text.count {
            let character = text[position]
            position += 1
            if let digit = hexValue(character) {
                if digits == 4 { return nil }
                value = value << 4 | digit
                digits += 1
                continue
            }
            if character == UInt8(ascii: ":") {
                token = position
                if digits == 0 {
                    if gap != nil { return nil }
                    gap = bytes.count
                    continue
                } else if position == text.count {
                    return nil
                }
                if bytes.count + 2 > 16 { return nil }
                bytes += [UInt8(value >> 8), UInt8(value & 0xFF)]
                digits = 0
                value = 0
                continue
            }
            if character == UInt8(ascii: "."), bytes.count + 4 <= 16, let ipv4 = ipv4(text[token...]) {
                bytes += ipv4
                digits = 0
                break
            }
            return nil
        }
        if digits > 0 {
            if bytes.count + 2 > 16 { return nil }
            bytes += [UInt8(value >> 8), UInt8(value & 0xFF)]
        }
        if let gap {
            if bytes.count == 16 { return nil }
            bytes.insert(contentsOf: repeatElement(0, count: 16 - bytes.count), at: gap)
        }
        return bytes.count == 16 ? bytes : nil
    }

    private static func hexValue(_ character: UInt8) -> Int? {
        switch character {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): Int(character - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): Int(character - UInt8(ascii: "a")) + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): Int(character - UInt8(ascii: "A")) + 10
        default: nil
        }
    }
}
