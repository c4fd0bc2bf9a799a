import ChatCore
import Testing

/// Ban masks (docs/PROTOCOL.md, "Ban masks"): parsing, the canonical form, and matching.
@Suite("Ban masks")
struct BanMaskTests {
    @Test(arguments: [
        ("account:Alice", "account:alice"), ("NICK:Bob", "nick:bob"), ("address:192.0.2.7", "address:192.0.2.7"),
        ("address:192.0.2.7/32", "address:192.0.2.7"), ("address:192.0.2.77/24", "address:192.0.2.0/24"),
        ("Address:10.1.2.3/0", "address:0.0.0.0/0"), ("address:2001:DB8:0:0:0:0:0:1", "address:2001:db8::1"),
        ("address:2001:db8:aaaa:bbbb::1/32", "address:2001:db8::/32"), ("address:::1/128", "address:::1"),
        ("address:2001:db8::1/63", "address:2001:db8::/63"), ("address:192.0.2.255/25", "address:192.0.2.128/25"),
    ])
    func aMaskIsWrittenBackInCanonicalForm(_ input: String, _ canonical: String) throws {
        #expect(try BanMask(parsing: input, allowsRoom: false).canonical == canonical)
    }

    @Test(arguments: [
        "", "alice", ":alice", "host:1.2.3.4", "account:", "nick:has space", "address:", "address:1.2.3", "address:1.2.3.4/33",
        "address:1.2.3.4/", "address:1.2.3.4/-1", "address:1.2.3.4/+8", "address:1.2.3.4/ 8", "address:::1/129", "address:::1/0128",
        "address:1.2.3.4/08", "address:1.2.3.4/00", "address:::1/064",
        "address:256.1.1.1", "address:example.com", "room:general",
    ])
    func aTextThatIsNotAMaskIsRefusedWithAReason(_ input: String) {
        #expect(throws: BanMaskError.self, "\(input)") { try BanMask(parsing: input, allowsRoom: false) }
    }

    @Test func onlyAServerBanClosesARoom() throws {
        #expect(try BanMask(parsing: "room:general", allowsRoom: true) == .room("general"))
        #expect(throws: BanMaskError.self) { try BanMask(parsing: "room:Not A Room", allowsRoom: true) }
        #expect(try !BanMask(parsing: "room:general", allowsRoom: true).matches(accountKey: "general", nick: "general", address: "127.0.0.1"))
    }

    @Test func namesMatchIgnoringLetterCaseAndAGuestMatchesNoAccountBan() throws {
        let account = try BanMask(parsing: "account:Eve", allowsRoom: false)
        #expect(account.matches(accountKey: "eve", nick: "anything", address: "192.0.2.1"))
        #expect(!account.matches(accountKey: nil, nick: "eve", address: "192.0.2.1"), "a guest called eve is not the account")
        let nick = try BanMask(parsing: "nick:Mallory", allowsRoom: false)
        #expect(nick.matches(accountKey: nil, nick: "MALLORY", address: "192.0.2.1"))
        #expect(!nick.matches(accountKey: "mallory", nick: "mallory2", address: "192.0.2.1"), "a nick ban follows the nick only")
    }

    @Test func addressesMatchByPrefixInTheirOwnFamilyAndMappedIPv4CountsAsIPv4() throws {
        let network = try BanMask(parsing: "address:192.0.2.0/24", allowsRoom: false)
        #expect(network.matches(accountKey: nil, nick: nil, address: "192.0.2.200"))
        #expect(!network.matches(accountKey: nil, nick: nil, address: "192.0.3.1"))
        #expect(network.matches(accountKey: nil, nick: nil, address: "::ffff:192.0.2.9"), "a dual-stack listener's view of an IPv4 client")
        #expect(!network.matches(accountKey: nil, nick: nil, address: "2001:db8::1"))
        #expect(!network.matches(accountKey: nil, nick: nil, address: "not an address"))
        let six = try BanMask(parsing: "address:2001:db8:1::/48", allowsRoom: false)
        #expect(six.matches(accountKey: nil, nick: nil, address: "2001:db8:1:ffff::2"))
        #expect(!six.matches(accountKey: nil, nick: nil, address: "2001:db8:2::2"))
        #expect(!six.matches(accountKey: nil, nick: nil, address: "192.0.2.1"))
        let everyone = try BanMask(parsing: "address:0.0.0.0/0", allowsRoom: false)
        #expect(everyone.matches(accountKey: nil, nick: nil, address: "203.0.113.1"))
        let host = try BanMask(parsing: "address:192.0.2.7", allowsRoom: false)
        #expect(host.matches(accountKey: nil, nick: nil, address: "192.0.2.7"))
        #expect(!host.matches(accountKey: nil, nick: nil, address: "192.0.2.8"))
    }
}
