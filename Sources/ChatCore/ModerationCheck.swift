import ChatProtocol

/// What the append script checks, and changes, of a room's moderation along with an event
/// (docs/CLUSTER.md, "Moderation").
///
/// A room's modes, roles, bans and invitations live in Redis beside its members, and every
/// change runs inside the append script, in the same atomic step that numbers the event: two
/// nodes that ban and join, or op and deop, at once are put in one order by Redis, and every node
/// that delivers the log ends in the same state. A join is decided by the node, by the rules
/// every mode uses (`ClusterAdmission`), against the room's state as it last read it; the
/// script carries the decision out only while that state still holds, and otherwise answers
/// with the state as it is, to decide again. The other checks run in the script.
public enum ModerationCheck: Equatable, Sendable {
    /// A join (with `RoomChange.join`) by a client logged in as `account` (empty: a guest) from
    /// `address`, with `key` (empty: none) and invited under `inviteKey`, as `RoomRules.admission`
    /// judges it; the joiner takes the roles `RoomRules.rolesOnJoining` gives. A server operator
    /// (`admin`) is admitted whatever the room's rules.
    case admit(account: String, key: String, inviteKey: String, address: String, admin: Bool = false)
    /// A `say` or `emote` of `nick`: refused unless it is a member (a member kicked while its
    /// line was on the way is one no more), and while the room is moderated unless it is op or
    /// voiced.
    case speak(nick: String)
    /// A topic set by `by`: refused unless it is a member, and while the topic is locked unless
    /// it is op or `admin`.
    case setTopic(by: String, admin: Bool)
    /// A kick (with `RoomChange.kick`) by `by`, logged in as `account`: needs op (or `admin`);
    /// nobody but the founder (or an admin) kicks the founder. `sparingOps`: refused (`ISOP`) if
    /// the member is an op — a kick that a new ban makes, which spares ops.
    case kick(by: String, account: String, admin: Bool, sparingOps: Bool = false)
    /// `by`, logged in as `account`, turns `mode` on or off with `argument` (the canonical form
    /// the node computed); `reason` goes into a ban's record.
    case setMode(by: String, account: String, admin: Bool, mode: UInt8, on: Bool, argument: String, reason: String)
}

/// What a room holds of its members' standing, read for a node that judges a member again when
/// who it is changes (a login, a nick change): the rules are the node's (`ChatCore`), the state
/// Redis's.
public struct ClusterRoomStanding: Equatable, Sendable {
    /// The account the room is registered to; empty when it is not.
    public var founder = ""
    /// Members' roles: nick → `o`, `v` or `ov`.
    public var roles: [String: String] = [:]
    /// The room's bans.
    public var bans: [BanEntry] = []
    /// The roles given to accounts in a registered room: account key → `o`, `v` or `ov`.
    public var accountRoles: [String: String] = [:]

    /// A room with no founder, roles or bans.
    public init() {}
}
