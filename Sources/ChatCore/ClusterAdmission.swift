import ChatProtocol

/// What a room's admission depends on, as the cluster's Redis holds it when a node reads it: the
/// node decides a join by the room's rules (`RoomRules.admission`, the rules every mode uses)
/// against this copy, and the append script writes the join only if `version` still holds
/// (docs/CLUSTER.md, "Moderation").
///
/// `version` counts the changes of the room's modes, bans, account roles and invitations, which
/// the script makes and counts in the same step; the member count changes with every join and
/// leave instead, and a decision says which counts it holds for (`ClusterAdmission.counts`).
package struct ClusterAdmissionState: Sendable, Equatable {
    /// How many times the room's admission settings changed; 0 for a room that never had any.
    package var version: UInt64
    /// Redis's clock when it was read, in ms since the epoch: what invitations expire by.
    package var time: UInt64
    /// The room's members on every node.
    package var memberCount: Int
    /// The account the room is registered to; empty when it is not.
    package var founder: String
    package var inviteOnly: Bool
    /// The key; empty when none.
    package var key: String
    /// The member limit; 0 when none.
    package var memberLimit: Int
    /// The room's bans, by canonical mask.
    package var bans: [BanEntry]
    /// The role given to each account in a registered room: `o`, `v` or `ov`.
    package var accountRoles: [String: String]
    /// When each invitation expires (Redis's clock, ms), by the invited nick's key.
    package var invitations: [String: UInt64]

    /// A room's state as read.
    package init(
        version: UInt64, time: UInt64, memberCount: Int, founder: String = "", inviteOnly: Bool = false, key: String = "",
        memberLimit: Int = 0, bans: [BanEntry] = [], accountRoles: [String: String] = [:], invitations: [String: UInt64] = [:]
    ) {
        self.version = version
        self.time = time
        self.memberCount = memberCount
        self.founder = founder
        self.inviteOnly = inviteOnly
        self.key = key
        self.memberLimit = memberLimit
        self.bans = bans
        self.accountRoles = accountRoles
        self.invitations = invitations
    }

    /// The settings the room's rules read, as a server on its own keeps them. A ban whose mask
    /// does not parse is none; an account role `ov` is op (the rules give an account one role).
    var settings: RoomSettings {
        var settings = RoomSettings()
        settings.founder = founder.isEmpty ? nil : founder
        settings.inviteOnly = inviteOnly
        settings.key = key.isEmpty ? nil : key
        settings.memberLimit = memberLimit
        settings.bans = bans.compactMap { entry in (try? BanMask(parsing: entry.mask, allowsRoom: false)).map { Ban(mask: $0, entry: entry) } }
        for (account, role) in accountRoles {
            if role.contains("o") { settings.accountRoles[account] = .op } else if role.contains("v") { settings.accountRoles[account] = .voice }
        }
        return settings
    }
}

/// A node's decision on a join, against a `ClusterAdmissionState`: the append script carries it
/// out while the state's version holds and the member count is within `counts`.
package struct ClusterAdmission: Sendable {
    /// Why the joiner is refused (the code a server on its own gives, and the text); nil when it
    /// is admitted.
    package var refusal: (code: ErrorCode, reason: String)?
    /// The role the joiner takes: `o`, `v`, `ov`, or empty for none.
    package var role: String
    /// The member counts the decision holds for: the member limit, and whether the joiner
    /// creates the room (the first member of a room not registered becomes its op).
    package var counts: ClosedRange<Int>
    /// Whether it relies on the joiner's invitation: then the script checks it has not expired.
    package var reliesOnInvitation: Bool

    /// Decides whether `check` (an `admit`) lets `nick` in, and with which role, against `state`:
    /// the rules of `RoomRules`, as every mode applies them. A server operator is admitted
    /// whatever the room's rules; the roles are everyone's.
    package static func decide(_ check: ModerationCheck, nick: String, room: String, state: ClusterAdmissionState) -> ClusterAdmission {
        guard case let .admit(account, key, inviteKey, address, admin) = check else {
            return ClusterAdmission(refusal: (.invalidArgument, "not a join"), role: "", counts: 0...Int.max, reliesOnInvitation: false)
        }
        let settings = state.settings
        let joiner = RoomActor(nick: nick, account: account.isEmpty ? nil : account, address: address, isServerOperator: admin)
        let invited = state.invitations[inviteKey].map { $0 > state.time } ?? false
        func admission(memberCount: Int, invited: Bool) -> RoomRefusal? {
            RoomRules.admission(
                of: joiner, to: room, settings: settings, memberCount: memberCount, invited: invited, key: key.isEmpty ? nil : key,
                keyThrottle: nil)
        }
        // The member counts the decision holds for: an empty room (whoever creates an unregistered
        // one is its op), and the member limit where the rules apply it to this joiner. Which
        // rules apply is asked of them (at the limit, without the invitation), not worked out
        // again here.
        var counts = 0...Int.max
        if settings.founder == nil { counts = state.memberCount == 0 ? 0...0 : 1...Int.max }
        if let refusal = admission(memberCount: state.memberCount, invited: invited) {
            if refusal.code == .roomFull { counts = settings.memberLimit...Int.max }
            return ClusterAdmission(refusal: refusal, role: "", counts: counts, reliesOnInvitation: false)
        }
        if settings.memberLimit > 0, admission(memberCount: settings.memberLimit, invited: invited)?.code == .roomFull,
            counts.upperBound >= settings.memberLimit
        {
            counts = counts.lowerBound...max(counts.lowerBound, settings.memberLimit - 1)
        }
        let roles = RoomRules.rolesOnJoining(joiner, settings: settings, creates: state.memberCount == 0 && settings.founder == nil)
        return ClusterAdmission(
            refusal: nil, role: (roles.op ? "o" : "") + (roles.voice ? "v" : ""), counts: counts,
            reliesOnInvitation: invited && admission(memberCount: state.memberCount, invited: false) != nil)
    }
}
