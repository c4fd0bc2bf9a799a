import ChatProtocol

/// A registered room's settings as a store keeps them: what lasts while it has no members.
public struct RegisteredRoomRecord: Sendable, Equatable {
    /// The room's name.
    public var name: String
    /// The founder's account key.
    public var founder: String
    /// Mode `inviteOnly`.
    public var inviteOnly: Bool
    /// Mode `moderated`.
    public var moderated: Bool
    /// Mode `topicLock`.
    public var topicLock: Bool
    /// The key joining needs; empty for none.
    public var key: String
    /// The most members; 0 for no limit.
    public var memberLimit: Int
    /// The room's bans, oldest first.
    public var bans: [BanEntry]
    /// Roles given to accounts (`op` or `voice`), by account key.
    public var roles: [String: String]

    /// Describes a registered room.
    public init(
        name: String, founder: String, inviteOnly: Bool, moderated: Bool, topicLock: Bool, key: String, memberLimit: Int,
        bans: [BanEntry], roles: [String: String]
    ) {
        self.name = name
        self.founder = founder
        self.inviteOnly = inviteOnly
        self.moderated = moderated
        self.topicLock = topicLock
        self.key = key
        self.memberLimit = memberLimit
        self.bans = bans
        self.roles = roles
    }
}

/// A role a member held in an unregistered room when the server stopped, for it to take back
/// when it rejoins after the restart (docs/SERVER.md, "Moderation").
public struct RememberedRole: Sendable, Equatable {
    /// The room.
    public var room: String
    /// Who held it: `account:KEY` for a member logged in, `nick:KEY` for a guest.
    public var holder: String
    /// `op` or `voice`.
    public var role: String

    /// Describes a role held at a stop.
    public init(room: String, holder: String, role: String) {
        self.room = room
        self.holder = holder
        self.role = role
    }
}

/// Everything a moderation store holds, read once at start-up.
public struct ModerationSnapshot: Sendable, Equatable {
    /// Every registered room.
    public var rooms: [RegisteredRoomRecord]
    /// The server's bans, oldest first.
    public var serverBans: [BanEntry]
    /// The roles members held in unregistered rooms when the server last stopped cleanly.
    public var rememberedRoles: [RememberedRole]

    /// Describes what a store holds.
    public init(rooms: [RegisteredRoomRecord] = [], serverBans: [BanEntry] = [], rememberedRoles: [RememberedRole] = []) {
        self.rooms = rooms
        self.serverBans = serverBans
        self.rememberedRoles = rememberedRoles
    }
}

/// One change for a moderation store.
public enum ModerationWrite: Sendable, Equatable {
    /// The room's settings are now these; nil: it is no longer registered.
    case room(String, RegisteredRoomRecord?)
    /// The server's bans are now these (at most 1,000, so written whole).
    case serverBans([BanEntry])
    /// The roles held in unregistered rooms are now these (written whole at a stop; emptied once
    /// read back, so that a later crash does not bring back stale ones).
    case rememberedRoles([RememberedRole])
}
