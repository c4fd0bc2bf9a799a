/// The bounds of what moderation keeps: the same on a server on its own and in a cluster, whose
/// scripts are written with these numbers.
public enum ModerationLimits {
    /// The most bans a room holds.
    public static let maxRoomBans = 100
    /// The most bans the server (or the cluster) holds.
    public static let maxServerBans = 1_000
    /// The most invitations a room holds; the oldest (the closest to expiring) go first.
    public static let maxInvitations = 100
    /// How long an invitation lasts, in milliseconds.
    public static let invitationLifetime: UInt64 = 3_600_000
    /// The most roles by account a registered room remembers.
    public static let maxAccountRoles = 200
    /// The most rooms registered on the server (or in the cluster), and to one account: what a
    /// registered room keeps (bans, roles) outlives its members, so their number is bounded.
    public static let maxRegisteredRooms = 1_000
    /// See `maxRegisteredRooms`.
    public static let maxRegisteredRoomsPerAccount = 10
}
