/// The type byte of a frame.
///
/// An open set: any byte decodes, so a receiver can name a type it does not know. The ranges
/// carry the forward-compatibility rule (docs/PROTOCOL.md, "Forward compatibility"):
/// 0x00 is never valid, 0x01–0x7F may be skipped when unknown, 0x80–0xFF must be understood.
public struct FrameType: RawRepresentable, Hashable, Sendable {
    /// The byte on the wire.
    public var rawValue: UInt8

    /// Wraps a type byte, known or not.
    @inlinable
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    /// Whether a receiver that does not know this type must reject the frame rather than skip it.
    @inlinable
    public var mustUnderstand: Bool { rawValue == 0 || rawValue >= 0x80 }

    /// "No frame": the `frameType` of an `error` that is not about a particular frame.
    public static let none = FrameType(rawValue: 0x00)

    /// Client → server: opens the session.
    public static let hello = FrameType(rawValue: 0x01)
    /// Client → server: asks for a new nick.
    public static let changeNick = FrameType(rawValue: 0x02)
    /// Client → server: enters a room.
    public static let join = FrameType(rawValue: 0x03)
    /// Client → server: leaves a room.
    public static let part = FrameType(rawValue: 0x04)
    /// Client → server: says something in a room.
    public static let say = FrameType(rawValue: 0x05)
    /// Client → server: an action (`/me`) in a room.
    public static let emote = FrameType(rawValue: 0x06)
    /// Client → server: a direct message to one nick.
    public static let tell = FrameType(rawValue: 0x07)
    /// Client → server: asks for the room list.
    public static let listRooms = FrameType(rawValue: 0x08)
    /// Client → server: asks who is in a room.
    public static let who = FrameType(rawValue: 0x09)
    /// Client → server: sets or clears a room's topic.
    public static let setTopic = FrameType(rawValue: 0x0A)
    /// Client → server: asks for a room's recent messages.
    public static let requestHistory = FrameType(rawValue: 0x0B)
    /// Client → server (version 2): asks for a page of a room's stored events.
    public static let fetchHistory = FrameType(rawValue: 0x0C)
    /// Client → server (version 2): marks the client away or back.
    public static let setAway = FrameType(rawValue: 0x0D)
    /// Client → server (version 3): registers the current nick as an account.
    public static let register = FrameType(rawValue: 0x0E)
    /// Client → server (version 3): logs in to an account.
    public static let login = FrameType(rawValue: 0x0F)
    /// Client → server (version 3): changes the account's password.
    public static let changePassword = FrameType(rawValue: 0x10)
    /// Client → server (version 3): deletes the account.
    public static let dropAccount = FrameType(rawValue: 0x11)
    /// Client → server (version 4): removes a member from a room.
    public static let kick = FrameType(rawValue: 0x12)
    /// Client → server (version 4): changes a room's mode or a member's role.
    public static let setMode = FrameType(rawValue: 0x13)
    /// Client → server (version 4): invites a nick into a room.
    public static let invite = FrameType(rawValue: 0x14)
    /// Client → server (version 4): asks for a room's or the server's bans.
    public static let listBans = FrameType(rawValue: 0x15)
    /// Client → server (version 4): a server operator bans or unbans a mask server-wide.
    public static let serverBan = FrameType(rawValue: 0x16)
    /// Client → server (version 4): a server operator ends a session.
    public static let kill = FrameType(rawValue: 0x17)
    /// Client → server (version 4): enters a room with its key.
    public static let joinWithKey = FrameType(rawValue: 0x18)

    /// Server → client: accepts the session.
    public static let welcome = FrameType(rawValue: 0x20)
    /// Server → client: a room message.
    public static let message = FrameType(rawValue: 0x21)
    /// Server → client: a room action.
    public static let action = FrameType(rawValue: 0x22)
    /// Server → client: a direct message (to its recipient, and echoed to its sender).
    public static let direct = FrameType(rawValue: 0x23)
    /// Server → client: someone entered a room.
    public static let joined = FrameType(rawValue: 0x24)
    /// Server → client: someone left a room.
    public static let left = FrameType(rawValue: 0x25)
    /// Server → client: someone in a room disconnected.
    public static let quit = FrameType(rawValue: 0x26)
    /// Server → client: someone in a room changed nick.
    public static let nickChanged = FrameType(rawValue: 0x27)
    /// Server → client: the receiver's own nick change succeeded.
    public static let nickAccepted = FrameType(rawValue: 0x28)
    /// Server → client: the answer to `listRooms`.
    public static let roomList = FrameType(rawValue: 0x29)
    /// Server → client: who is in a room.
    public static let members = FrameType(rawValue: 0x2A)
    /// Server → client: a room's topic.
    public static let topic = FrameType(rawValue: 0x2B)
    /// Server → client: a batch of a room's past messages.
    public static let history = FrameType(rawValue: 0x2C)
    /// Server → client (version 2): a room's epoch and stored range, for a joiner.
    public static let roomState = FrameType(rawValue: 0x2D)
    /// Server → client (version 2): a page of a room's stored events.
    public static let historyPage = FrameType(rawValue: 0x2E)
    /// Server → client (version 2): a part of the room list.
    public static let roomListPage = FrameType(rawValue: 0x2F)
    /// Server → client (version 2): a part of a room's member list.
    public static let membersPage = FrameType(rawValue: 0x30)
    /// Server → client (version 2): someone is away, or back.
    public static let away = FrameType(rawValue: 0x31)
    /// Server → client (version 2): the rate limits that apply to the receiver.
    public static let limits = FrameType(rawValue: 0x32)
    /// Server → client (version 3): a registration succeeded.
    public static let registered = FrameType(rawValue: 0x33)
    /// Server → client (version 3): a login succeeded.
    public static let loggedIn = FrameType(rawValue: 0x34)
    /// Server → client (version 3): a password change succeeded.
    public static let passwordChanged = FrameType(rawValue: 0x35)
    /// Server → client (version 3): an account was deleted.
    public static let accountDropped = FrameType(rawValue: 0x36)
    /// Server → client (version 4): a member was kicked from a room.
    public static let kicked = FrameType(rawValue: 0x37)
    /// Server → client (version 4): a room's mode or a member's role changed.
    public static let modeChanged = FrameType(rawValue: 0x38)
    /// Server → client (version 4): a nick was invited into a room.
    public static let invited = FrameType(rawValue: 0x39)
    /// Server → client (version 4): a room's settings and roles.
    public static let roomModes = FrameType(rawValue: 0x3A)
    /// Server → client (version 4): a room's or the server's bans.
    public static let banList = FrameType(rawValue: 0x3B)
    /// Server → client (version 4): a server operator's request was carried out.
    public static let done = FrameType(rawValue: 0x3C)

    /// Either direction: asks the peer to answer with `pong`.
    public static let ping = FrameType(rawValue: 0x40)
    /// Either direction: answers `ping`.
    public static let pong = FrameType(rawValue: 0x41)
    /// Either direction: reports a problem; may end the session.
    public static let error = FrameType(rawValue: 0x42)
    /// Either direction: ends the session normally.
    public static let goodbye = FrameType(rawValue: 0x43)

    /// Every type this version of the protocol defines, in wire order.
    public static let allKnown: [FrameType] = [
        .hello, .changeNick, .join, .part, .say, .emote, .tell, .listRooms, .who, .setTopic,
        .requestHistory, .fetchHistory, .setAway, .register, .login, .changePassword, .dropAccount,
        .kick, .setMode, .invite, .listBans, .serverBan, .kill, .joinWithKey, .welcome, .message, .action, .direct, .joined,
        .left, .quit, .nickChanged, .nickAccepted, .roomList, .members, .topic, .history,
        .roomState, .historyPage, .roomListPage, .membersPage, .away, .limits, .registered, .loggedIn,
        .passwordChanged, .accountDropped, .kicked, .modeChanged, .invited, .roomModes, .banList, .done,
        .ping, .pong,
        .error, .goodbye,
    ]

    /// The protocol version that defined this type (1 to 4), or nil if this version does not
    /// define it. A peer that agreed on an earlier version treats the type as unknown: skipped
    /// when skippable, as docs/PROTOCOL.md's forward-compatibility rule says.
    ///
    /// Ranges, not a table: every frame a server decodes asks.
    public var introducedIn: UInt16? {
        switch rawValue {
        case 0x01...0x0B, 0x20...0x2C, 0x40...0x43: 1
        case 0x0C...0x0D, 0x2D...0x32: 2
        case 0x0E...0x11, 0x33...0x36: 3
        case 0x12...0x18, 0x37...0x3C: 4
        default: nil
        }
    }

    /// The type's name as used in docs/PROTOCOL.md, or nil if this version does not define it.
    public var name: String? {
        FrameType.names[rawValue]
    }

    private static let names: [UInt8: String] = [
        0x01: "hello", 0x02: "changeNick", 0x03: "join", 0x04: "part", 0x05: "say",
        0x06: "emote", 0x07: "tell", 0x08: "listRooms", 0x09: "who", 0x0A: "setTopic",
        0x0B: "requestHistory", 0x0C: "fetchHistory", 0x0D: "setAway", 0x0E: "register", 0x0F: "login",
        0x10: "changePassword", 0x11: "dropAccount", 0x12: "kick", 0x13: "setMode", 0x14: "invite",
        0x15: "listBans", 0x16: "serverBan", 0x17: "kill", 0x18: "joinWithKey", 0x20: "welcome",
        0x21: "message", 0x22: "action",
        0x23: "direct", 0x24: "joined", 0x25: "left", 0x26: "quit", 0x27: "nickChanged",
        0x28: "nickAccepted", 0x29: "roomList", 0x2A: "members", 0x2B: "topic",
        0x2C: "history", 0x2D: "roomState", 0x2E: "historyPage", 0x2F: "roomListPage",
        0x30: "membersPage", 0x31: "away", 0x32: "limits", 0x33: "registered", 0x34: "loggedIn",
        0x35: "passwordChanged", 0x36: "accountDropped", 0x37: "kicked", 0x38: "modeChanged",
        0x39: "invited", 0x3A: "roomModes", 0x3B: "banList", 0x3C: "done", 0x40: "ping", 0x41: "pong", 0x42: "error", 0x43: "goodbye",
    ]
}

extension FrameType: CustomStringConvertible {
    /// The name and hex byte, e.g. `say (0x05)`, or just the byte for an unknown type.
    public var description: String {
        let hex = "0x" + (rawValue < 0x10 ? "0" : "") + String(rawValue, radix: 16, uppercase: true)
        return name.map { "\($0) (\(hex))" } ?? hex
    }
}
