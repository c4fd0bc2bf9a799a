import ChatCore
import Glibc
import Testing

/// `IPAddress` against glibc's `inet_pton` and `inet_ntop`, which wrote the ban masks stored
/// before it existed: the same bytes from every text, the same text from every address.
@Suite struct IPAddressTests {
    /// Addresses whose words are zero half the time, so that every arrangement of zero runs
    /// (the `::` choice) and of IPv4-mapped and -compatible forms comes up.
    @Test func writesEveryAddressAsInetNtopDoes() {
        var random = SplitMix64(seed: 0x1b9a_4c3d)
        var addresses: [[UInt8]] = [
            Array(repeating: 0, count: 16), Array(repeating: 0, count: 15) + [1], Array(repeating: 0, count: 10) + [0xff, 0xff, 127, 0, 0, 1],
            Array(repeating: 0, count: 12) + [1, 2, 3, 4], Array(repeating: 0, count: 11) + [1] + [0, 0, 0, 0],
            Array(repeating: 0, count: 10) + [0xff, 0xfe, 1, 2, 3, 4], Array(repeating: 0, count: 10) + [0xff, 0xff, 0, 0, 0, 0],
            [0, 0, 0, 0], [255, 255, 255, 255], [10, 0, 200, 1],
        ]
        for _ in 0..<50_000 {
            var bytes: [UInt8] = []
            for _ in 0..<8 { bytes += random.next() % 2 == 0 ? [0, 0] : [UInt8(truncatingIfNeeded: random.next() % 3 == 0 ? 0 : random.next()), UInt8(truncatingIfNeeded: random.next())] }
            addresses.append(bytes)
            addresses.append(Array(bytes.prefix(4)))
            // IPv4-mapped: the one form whose text ends dotted after a non-zero group.
            addresses.append(Array(repeating: 0, count: 10) + [0xff, 0xff] + bytes.suffix(4))
        }
        for bytes in addresses {
            #expect(IPAddress(bytes: bytes).text == Self.inetNtop(bytes), "\(bytes)")
        }
    }

    /// Texts near valid ones (valid addresses with a character changed, added or removed) and
    /// the edges glibc is strict or lenient about: leading zeros, upper-case hex, a dotted tail,
    /// a zone, one `::` too many, groups too long or too many.
    @Test func readsEveryTextAsInetPtonDoes() {
        var texts = [
            "", ".", ":", "::", ":::", "1.2.3.4", "01.2.3.4", "1.2.3.04", "0.0.0.0", "255.255.255.255", "256.1.1.1", "1.2.3", "1.2.3.4.",
            "1.2.3.4.5", "1..2.3", " 1.2.3.4", "1.2.3.4 ", "+1.2.3.4", "1.2.3.4/8", "::1", "::ffff:1.2.3.4", "::FFFF:1.2.3.4", "::1.2.3.4",
            "::ffff:01.2.3.4", "::ffff:1.2.3", "1::", "1::2::3", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8:9", "1:2:3:4:5:6:7::", "::2:3:4:5:6:7:8",
            "1:2:3:4:5:6:7:8::", "1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:7:1.2.3.4", "12345::", "01234::", "0000::", "fe80::1%eth0", "FE80::ABCD",
            ":1::", "1:", "1:::2", "::ffff:1.2.3.4:5", "1.2.3.4::", "::0.0.0.0", "2001:db8::", "2001:db8:0:0:1:0:0:1", "::ffff:255.255.255.256",
            "1::1.2.3.4", "1:2:3:4:5:6::1.2.3.4", "::1:2:3:4:5:1.2.3.4", "::1:2:3:4:5:6:1.2.3.4", "1.2.3.4::1",
        ]
        var random = SplitMix64(seed: 0x5eed_0042)
        let alphabet = Array("0123456789abcdefABCDEFgx:.%/ ".utf8)
        for _ in 0..<40_000 {
            let family = random.next() % 2 == 0 ? 4 : 16
            var bytes = (0..<family).map { _ in random.next() % 3 == 0 ? UInt8(0) : UInt8(truncatingIfNeeded: random.next()) }
            if family == 16, random.next() % 4 == 0 { bytes.replaceSubrange(0..<12, with: Array(repeating: 0, count: 10) + [0xff, 0xff]) }
            var text = Array(Self.inetNtop(bytes).utf8)
            switch random.next() % 4 {
            case 0: text.insert(alphabet[Int(random.next() % UInt64(alphabet.count))], at: Int(random.next() % UInt64(text.count + 1)))
            case 1: text.remove(at: Int(random.next() % UInt64(text.count)))
            case 2: text[Int(random.next() % UInt64(text.count))] = alphabet[Int(random.next() % UInt64(alphabet.count))]
            default: break
            }
            texts.append(String(decoding: text, as: UTF8.self))
            texts.append(Self.dottedTail(&random))
            let length = Int(random.next() % 12)
            texts.append(String(decoding: (0..<length).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] }, as: UTF8.self))
        }
        for text in texts {
            #expect(IPAddress(text)?.bytes == Self.inetPton(text), "\(text)")
            #expect(IPAddress(ipv4: text)?.bytes == Self.inetPton(text, family: AF_INET), "\(text)")
        }
    }

    /// IPv6 text ending in a dotted IPv4 address after up to seven groups, with or without a
    /// `::` among them: the tails `inet_ntop` never writes, which `inet_pton` takes only where
    /// exactly four bytes are left.
    private static func dottedTail(_ random: inout SplitMix64) -> String {
        var groups = (0..<Int(random.next() % 8)).map { _ in String(random.next() % 0x10000, radix: 16) }
        if random.next() % 2 == 0 { groups.insert("", at: Int(random.next() % UInt64(groups.count + 1))) }
        let quad = (0..<4).map { _ in String(random.next() % 2 == 0 ? random.next() % 256 : random.next() % 300) }.joined(separator: ".")
        var text = groups.joined(separator: ":")
        if text.isEmpty || text.hasSuffix(":") { text += quad } else { text += ":" + quad }
        if text.hasPrefix(":"), !text.hasPrefix("::") { text = ":" + text }
        return text
    }

    /// What `inet_pton` makes of `text`: IPv4 first, then IPv6, as `IPAddress(_:)` tries them.
    private static func inetPton(_ text: String, family: Int32? = nil) -> [UInt8]? {
        var v4 = in_addr()
        if family != AF_INET6, inet_pton(AF_INET, text, &v4) == 1 { return withUnsafeBytes(of: v4) { Array($0) } }
        var v6 = in6_addr()
        if family != AF_INET, inet_pton(AF_INET6, text, &v6) == 1 { return withUnsafeBytes(of: v6) { Array($0) } }
        return nil
    }

    private static func inetNtop(_ bytes: [UInt8]) -> String {
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let written = bytes.withUnsafeBytes { inet_ntop(bytes.count == 4 ? AF_INET : AF_INET6, $0.baseAddress, &text, socklen_t(text.count)) }
        precondition(written != nil, "inet_ntop writes any 4 or 16 bytes")
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// A small seeded generator, so that a failing input can be found again.
private struct SplitMix64 {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
