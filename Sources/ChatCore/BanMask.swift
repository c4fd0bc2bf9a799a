import ChatProtocol

/// Whom a ban matches (protocol version 4, docs/PROTOCOL.md "Ban masks"): an account, a nick, an
/// address or a network, or — for a server ban — a room.
///
/// Parsed once, when the ban is set, into the form it is matched in: names by their key (ASCII
/// lower case, as nicks and accounts compare), addresses as bytes with the bits past the prefix
/// cleared, so matching a session is a comparison, not a parse.
public enum BanMask: Hashable, Sendable {
    /// A session logged in as the account with this key.
    case account(String)
    /// A session known by a nick with this key.
    case nick(String)
    /// A session connected from the network `network` (4 bytes for IPv4, 16 for IPv6, the bits
    /// past `prefix` zero).
    case address(network: [UInt8], prefix: Int)
    /// The room of this name (server bans only): closed.
    case room(String)

    /// Parses `text` (`kind:value`, the kind in any letter case); throws why it is not a mask.
    /// `allowsRoom`: a server ban, which may close a room.
    public init(parsing text: String, allowsRoom: Bool) throws(BanMaskError) {
        guard let colon = text.firstIndex(of: ":") else {
            throw BanMaskError("\(text) is not a ban mask: write account:NAME, nick:NICK or address:IP[/PREFIX]")
        }
        let kind = ChatName.nickKey(String(text[..<colon]))
        let value = String(text[text.index(after: colon)...])
        switch kind {
        case "account", "nick":
            guard ChatName.isValidNick(value) else { throw BanMaskError("\(value) is not a valid \(kind) name") }
            self = kind == "account" ? .account(ChatName.nickKey(value)) : .nick(ChatName.nickKey(value))
        case "address":
            self = try Self.parseNetwork(value)
        case "room" where allowsRoom:
            guard ChatName.isValidRoom(value) else { throw BanMaskError("\(value) is not a valid room name") }
            self = .room(value)
        default:
            throw BanMaskError("unknown ban kind \(kind): write account:, nick:, address:\(allowsRoom ? " or room:" : "")")
        }
    }

    /// The mask as the server writes it back: the kind in lower case, a name by its key, an
    /// address as `inet_ntop` writes the network's first address (`IPAddress.text`), and the
    /// prefix only when it does not cover the whole address.
    public var canonical: String {
        switch self {
        case .account(let key): "account:\(key)"
        case .nick(let key): "nick:\(key)"
        case .room(let name): "room:\(name)"
        case .address(let network, let prefix):
            "address:\(IPAddress(bytes: network).text)" + (prefix == network.count * 8 ? "" : "/\(prefix)")
        }
    }

    /// Whether a session logged in as the account `accountKey` (nil: a guest), known by `nick`
    /// and connected from `address` (as the server writes it) matches. A room mask matches no
    /// session.
    public func matches(accountKey: String?, nick: String?, address: String) -> Bool {
        switch self {
        case .account(let key): return accountKey == key
        case .nick(let key): return nick.map(ChatName.nickKey) == key
        case .room: return false
        case .address(let network, let prefix):
            guard let bytes = Self.bytes(ofClientAddress: address, family: network.count) else { return false }
            return Self.masked(bytes, prefix: prefix) == network
        }
    }

    /// `address:IP` or `address:IP/PREFIX`, IPv4 or IPv6.
    private static func parseNetwork(_ value: String) throws(BanMaskError) -> BanMask {
        let parts = value.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        let ip = String(parts[0])
        guard let bytes = IPAddress(ip)?.bytes else { throw BanMaskError("\(ip) is not an IPv4 or IPv6 address") }
        let bits = bytes.count * 8
        var prefix = bits
        if parts.count == 2 {
            // Digits only (`Int("+8")` would take a sign), and no leading zero: `/08` is refused
            // as the address's own `01.2.3.4` is, not read as 8.
            let digits = parts[1].utf8
            guard digits.allSatisfy({ $0 &- 0x30 < 10 }), digits.count <= 3, digits.first != UInt8(ascii: "0") || digits.count == 1,
                let given = Int(parts[1]), given <= bits
            else { throw BanMaskError("/\(parts[1]) is not a prefix length of 0 to \(bits), in decimal without leading zeros") }
            prefix = given
        }
        return .address(network: masked(bytes, prefix: prefix), prefix: prefix)
    }

    /// A client's address as bytes of `family` (4 or 16): an IPv4-mapped IPv6 address (a
    /// dual-stack listener's view of an IPv4 client) counts as the IPv4 address it carries.
    private static func bytes(ofClientAddress address: String, family: Int) -> [UInt8]? {
        guard var ip = IPAddress(address) else { return nil }
        if family == 4, let carried = ip.mappedIPv4 { ip = carried }
        return ip.bytes.count == family ? ip.bytes : nil
    }

    /// `bytes` with every bit past the first `prefix` cleared.
    private static func masked(_ bytes: [UInt8], prefix: Int) -> [UInt8] {
        bytes.enumerated().map { index, byte in
            let kept = min(max(prefix - index * 8, 0), 8)
            return kept == 8 ? byte : byte & ~(0xff >> kept)
        }
    }
}

/// Why a text is not a ban mask: the `invalidArgument` reason.
public struct BanMaskError: Error, Sendable, Equatable {
    /// What is wrong, for the client.
    public var reason: String

    /// Describes a bad mask.
    public init(_ reason: String) { self.reason = reason }
}
