import ChatProtocol

/// A ban of a room or of the server: the mask it matches by, and the entry `banList` shows.
struct Ban: Sendable, Equatable {
    var mask: BanMask
    var entry: BanEntry

}

/// A room's settings that a registered room keeps while empty and across restarts (where the
/// server keeps rooms): its founder, modes, bans and the roles given to accounts.
struct RoomSettings: Sendable, Equatable {
    /// The founder's account key; nil while the room is not registered.
    var founder: String?
    var inviteOnly = false
    var moderated = false
    var topicLock = false
    /// The key joining needs; nil for none.
    var key: String?
    /// The most members; 0 for no limit.
    var memberLimit = 0
    /// Oldest first; at most `ModerationLimits.maxRoomBans`.
    var bans: [Ban] = []
    /// Roles by account key, given in a registered room: a member logged in as one takes it on
    /// joining. At most `ModerationLimits.maxAccountRoles`.
    var accountRoles: [String: RoomRole] = [:]

    /// The ban `mask` matches a session with these traits, if any.
    func ban(matching accountKey: String?, nick: String?, address: String) -> Ban? {
        bans.first { $0.mask.matches(accountKey: accountKey, nick: nick, address: address) }
    }
}

/// A role a member holds in a room.
enum RoomRole: String, Sendable {
    case op
    case voice
}

/// An invitation: the invited nick may join once before `expires` (uptime milliseconds).
struct Invitation: Sendable, Equatable {
    var nickKey: String
    var expires: UInt64
}

/// What a room knows of moderation while it has members: its settings, who holds a role, and
/// the invitations it gave.
///
/// Roles are kept by session (`ClientID`), not by nick, so they follow a nick change and end
/// when the session leaves the room (`ChatRoom.removeMember`). The moderated check on the
/// message path is a flag, and two set lookups in a moderated room (`RoomRules.speaking`).
struct RoomModeration: Sendable {
    var settings: RoomSettings
    var ops: Set<ClientID> = []
    var voices: Set<ClientID> = []
    /// Oldest first; at most `ModerationLimits.maxInvitations`.
    var invitations: [Invitation] = []

    /// A room with `settings` (a registered room's, or the defaults) and nobody in a role.
    init(settings: RoomSettings = RoomSettings()) {
        self.settings = settings
    }

    /// Takes `id`'s roles away (it left the room).
    mutating func forget(_ id: ClientID) {
        ops.remove(id)
        voices.remove(id)
    }
}
