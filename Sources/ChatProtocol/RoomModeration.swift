/// A room setting or a member's role that `setMode` changes and `modeChanged` reports (version 4).
///
/// An open set, like `ErrorCode`: every byte decodes, so a later server can add modes; a server
/// answers a mode it does not know with `invalidArgument`, and a client shows an unknown
/// `modeChanged` by its number. docs/PROTOCOL.md, "Version 4", gives each mode's argument.
public struct RoomMode: RawRepresentable, Hashable, Sendable {
    /// The byte on the wire.
    public var rawValue: UInt8

    /// Wraps a mode byte, known or not.
    @inlinable
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// Only invited members (and those with a role) may join. No argument.
    public static let inviteOnly = RoomMode(rawValue: 0)
    /// Joining needs the key given as the argument; off clears it.
    public static let key = RoomMode(rawValue: 1)
    /// Only ops and voiced members may speak (`say`, `emote`). No argument.
    public static let moderated = RoomMode(rawValue: 2)
    /// Only ops may set the topic. No argument.
    public static let topicLock = RoomMode(rawValue: 3)
    /// At most the argument's number (decimal, 1…1,000,000) of members; off: no limit.
    public static let memberLimit = RoomMode(rawValue: 4)
    /// The member whose nick is the argument is an op (on) or not (off).
    public static let op = RoomMode(rawValue: 5)
    /// The member whose nick is the argument is voiced (on) or not (off).
    public static let voice = RoomMode(rawValue: 6)
    /// The argument, a ban mask (`account:NAME`, `nick:NICK`, `address:IP[/PREFIX]`), is banned
    /// (on) or not (off).
    public static let ban = RoomMode(rawValue: 7)
    /// The room is registered to the setter's account, which becomes its founder (on), or no
    /// longer registered (off, founder only). No argument.
    public static let registered = RoomMode(rawValue: 8)

    /// Every mode this version defines, in numeric order.
    public static let allKnown: [RoomMode] = (0...8).map(RoomMode.init(rawValue:))

    /// The mode's name as used in docs/PROTOCOL.md, or nil if this version does not define it.
    public var name: String? {
        let names = ["inviteOnly", "key", "moderated", "topicLock", "memberLimit", "op", "voice", "ban", "registered"]
        return Int(rawValue) < names.count ? names[Int(rawValue)] : nil
    }
}

extension RoomMode: CustomStringConvertible {
    /// The name and number, e.g. `key (1)`, or just the number for an unknown mode.
    public var description: String {
        name.map { "\($0) (\(rawValue))" } ?? "\(rawValue)"
    }
}

/// A room's settings and roles, as `roomModes` carries them (version 4).
public struct RoomModes: Hashable, Sendable {
    /// The account the room is registered to; empty when it is not registered.
    public var founder: String
    /// Only invited members (and those with a role) may join.
    public var inviteOnly: Bool
    /// Only ops and voiced members may speak.
    public var moderated: Bool
    /// Only ops may set the topic.
    public var topicLock: Bool
    /// The key joining needs; empty when there is none.
    public var key: String
    /// The most members the room takes; 0 when there is no limit.
    public var memberLimit: UInt32
    /// The nicks of the members who are ops (a founder present is one of them).
    public var ops: [String]
    /// The nicks of the members who are voiced.
    public var voices: [String]

    /// Describes a room's settings and roles; by default an open, unregistered room without
    /// ops or voices.
    public init(
        founder: String = "", inviteOnly: Bool = false, moderated: Bool = false, topicLock: Bool = false,
        key: String = "", memberLimit: UInt32 = 0, ops: [String] = [], voices: [String] = []
    ) {
        self.founder = founder
        self.inviteOnly = inviteOnly
        self.moderated = moderated
        self.topicLock = topicLock
        self.key = key
        self.memberLimit = memberLimit
        self.ops = ops
        self.voices = voices
    }
}

/// One ban in a `banList` (version 4).
public struct BanEntry: Hashable, Sendable {
    /// Whom the ban matches, in its canonical form: `account:NAME`, `nick:NICK`,
    /// `address:IP[/PREFIX]`, or (server bans only) `room:NAME`.
    public var mask: String
    /// The nick that set it; empty when set by the server's configuration.
    public var setBy: String
    /// When it was set, in milliseconds since the Unix epoch.
    public var time: UInt64
    /// Why, as the setter gave it; may be empty.
    public var reason: String

    /// Describes one ban.
    public init(mask: String, setBy: String, time: UInt64, reason: String) {
        self.mask = mask
        self.setBy = setBy
        self.time = time
        self.reason = reason
    }
}
