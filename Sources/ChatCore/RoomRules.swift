import ChatProtocol

/// Why a room's rules refuse a request: the error code, and the text the client is told.
typealias RoomRefusal = (code: ErrorCode, reason: String)

/// Someone a room's rules judge — a joiner, a speaker, a requester or the member a request
/// names — as the room and the server know them now.
///
/// Each mode fills it from where it keeps a room's moderation (a server on its own by session,
/// `RoomModeration`), so that the rules themselves (`RoomRules`) are written once.
struct RoomActor {
    /// The nick as its session spells it.
    var nick: String
    /// The account it is logged in to (its key); nil for a guest.
    var account: String?
    /// The address it connected from.
    var address = ""
    /// Logged in to an account the operator named a server operator.
    var isServerOperator = false
    var isMember = false
    var isOp = false
    var isVoiced = false

    /// Whether it is logged in to the account `settings`' room is registered to.
    func isFounder(of settings: RoomSettings) -> Bool {
        account != nil && account == settings.founder
    }
}

/// What a mode change makes of a room (`RoomRules.modeChange`).
struct ModeChangeOutcome {
    /// The room's settings after the change.
    var settings: RoomSettings
    /// The role the change gives (`on`) or takes from the member it names: op or voice.
    var role: (role: RoomRole, on: Bool)?
    /// The argument `modeChanged` announces: the canonical one, the member's nick as its session
    /// spells it, or the founder's account name.
    var announced: String
    /// A ban set: the members it matches, ops spared, are kicked.
    var banKicks: BanMask?
}

/// The rules of a room, written once: who may join, speak, set the topic, kick, invite and
/// change a mode, and what a mode change makes of the room. Pure functions of what the room
/// holds (`RoomSettings`) and who asks (`RoomActor`); the core finds both, and applies what they
/// decide, in whichever mode it runs.
enum RoomRules {
    /// Why `joiner` may not enter `name`, or nil when it may: a server operator enters any room;
    /// a ban keeps anyone else out; the founder, an account with a role there and the invited
    /// pass invite-only, the key and the member limit. `settings` nil: the room holds none yet.
    /// `keyThrottle`: the refusal a wrong-key guess limit makes of a `key` given, consulted only
    /// where the room has a key (a room without one cannot be guessed at).
    static func admission(
        of joiner: RoomActor, to name: String, settings: RoomSettings?, memberCount: Int, invited: Bool, key: String?,
        keyThrottle: RoomRefusal?
    ) -> RoomRefusal? {
        if joiner.isServerOperator { return nil }
        guard let settings else { return nil }
        if let ban = settings.ban(matching: joiner.account, nick: joiner.nick, address: joiner.address) {
            return (.banned, "you are banned from #\(name) (\(ban.entry.mask))")
        }
        if let account = joiner.account, account == settings.founder || settings.accountRoles[account] != nil { return nil }
        if invited { return nil }
        if settings.inviteOnly { return (.inviteOnly, "#\(name) is invite-only") }
        if let roomKey = settings.key {
            if key != nil, let keyThrottle { return keyThrottle }
            guard let key, ChatCore.constantTimeEquals(key, roomKey) else {
                return (.badRoomKey, key == nil ? "#\(name) needs a key (joinWithKey)" : "wrong key for #\(name)")
            }
        }
        if settings.memberLimit > 0, memberCount >= settings.memberLimit {
            return (.roomFull, "#\(name) is full (\(settings.memberLimit) members)")
        }
        return nil
    }

    /// The roles `joiner` takes on entering a room with `settings`: the founder's op and the role
    /// given to its account in a registered room; op for whoever creates an unregistered one
    /// (`creates`: the room has no members and nothing forbids it).
    static func rolesOnJoining(_ joiner: RoomActor, settings: RoomSettings, creates: Bool) -> (op: Bool, voice: Bool) {
        guard settings.founder != nil else { return (creates, false) }
        guard let account = joiner.account else { return (false, false) }
        return (joiner.isFounder(of: settings) || settings.accountRoles[account] == .op, settings.accountRoles[account] == .voice)
    }

    /// The role `account` takes in a room with `settings`: op for its founder, else the role
    /// given to the account there (none outside a registered room).
    static func accountRole(_ account: String?, in settings: RoomSettings) -> RoomRole? {
        guard let account, let founder = settings.founder else { return nil }
        return account == founder ? .op : settings.accountRoles[account]
    }

    /// The ban of a room with `settings` that `member` meets as it is now — under a new nick,
    /// logged in to an account — or nil: none matches, or it is spared as an op there (a new ban
    /// spares ops too) or as a server operator.
    static func memberBan(_ member: RoomActor, settings: RoomSettings) -> Ban? {
        guard !member.isOp, !member.isServerOperator else { return nil }
        return settings.ban(matching: member.account, nick: member.nick, address: member.address)
    }

    /// Why `speaker`, a member, may not say a line in `name`: the room is moderated and it is
    /// neither op nor voiced.
    static func speaking(_ speaker: RoomActor, in name: String, settings: RoomSettings) -> RoomRefusal? {
        guard settings.moderated, !speaker.isOp, !speaker.isVoiced else { return nil }
        return (.moderated, "#\(name) is moderated: only ops and voiced members speak")
    }

    /// Why `setter`, a member, may not set `name`'s topic: it is locked, and `setter` is neither
    /// op nor a server operator (who acts as an op in every room, `operating`).
    static func settingTopic(_ setter: RoomActor, in name: String, settings: RoomSettings) -> RoomRefusal? {
        guard settings.topicLock, !setter.isOp, !setter.isServerOperator else { return nil }
        return (.notOperator, "#\(name)'s topic is locked: only ops set it")
    }

    /// Why `actor` may not act as an op in `name` (kick, invite, set a mode): it must be an op
    /// among its members, or a server operator while the room has members.
    static func operating(_ actor: RoomActor, in name: String, hasMembers: Bool) -> RoomRefusal? {
        if actor.isServerOperator { return hasMembers ? nil : (.notInRoom, "#\(name) has no members") }
        guard actor.isMember, hasMembers else { return (.notInRoom, "you are not in #\(name)") }
        guard actor.isOp else { return (.notOperator, "you are not an op of #\(name)") }
        return nil
    }

    /// Why `kicker`, who may act as an op (`operating`), may not kick `target` (asked for as
    /// `named`) out of `name`: it is not a member, or it is the founder and `kicker` neither the
    /// founder nor a server operator.
    static func kicking(_ target: RoomActor?, named: String, by kicker: RoomActor, in name: String, settings: RoomSettings) -> RoomRefusal? {
        guard let target, target.isMember else { return (.notInRoom, "\(named) is not in #\(name)") }
        if target.isFounder(of: settings), !kicker.isFounder(of: settings), !kicker.isServerOperator {
            return (.notOperator, "\(target.nick) founded #\(name): only the founder kicks the founder")
        }
        return nil
    }

    /// Why an op may not invite `target` (asked for as `named`) into `name`: nobody has that
    /// nick, or it is a member already.
    static func inviting(_ target: RoomActor?, named: String, in name: String) -> RoomRefusal? {
        guard let target else { return (.noSuchNick, "no one is called \(named)") }
        if target.isMember { return (.alreadyInRoom, "\(target.nick) is in #\(name)") }
        return nil
    }

    /// What `setter`, who may act as an op (`operating`), turning `mode` on or off with
    /// `argument` (checked: `ChatCore.modeArgument`) makes of `name`, whose settings are
    /// `settings`; or why not. `target`: the member an op or voice change names, nil when nobody
    /// by that nick is a member. `registrationLimit`: why the account may not register another
    /// room, if so. `accountName`: an account's name as shown, by its key. A ban set at
    /// `wallMillis` is recorded with it.
    static func modeChange(
        _ mode: RoomMode, on: Bool, argument: ModeArgument, target: RoomActor?, by setter: RoomActor, in name: String,
        settings: RoomSettings, wallMillis: UInt64, registrationLimit: (String) -> String?, accountName: (String) -> String
    ) -> ModeChangeDecision {
        var outcome = ModeChangeOutcome(settings: settings, announced: argument.announced)
        switch mode {
        case .inviteOnly:
            outcome.settings.inviteOnly = on
        case .moderated:
            outcome.settings.moderated = on
        case .topicLock:
            outcome.settings.topicLock = on
        case .key:
            outcome.settings.key = on ? argument.announced : nil
        case .memberLimit:
            outcome.settings.memberLimit = argument.limit ?? 0
        case .op, .voice:
            guard let target, target.isMember else {
                return .refused((.notInRoom, "\(argument.announced) is not in #\(name)"))
            }
            if mode == .op, !on, target.isFounder(of: settings), !setter.isFounder(of: settings), !setter.isServerOperator {
                return .refused((.notOperator, "\(target.nick) founded #\(name): only the founder deops the founder"))
            }
            let role: RoomRole = mode == .op ? .op : .voice
            outcome.role = (role, on)
            if settings.founder != nil, let account = target.account {
                // A registered room remembers the role for the account, up to a bound.
                if on, settings.accountRoles[account] != nil || settings.accountRoles.count < ModerationLimits.maxAccountRoles {
                    outcome.settings.accountRoles[account] = role
                } else if !on, settings.accountRoles[account] == role {
                    outcome.settings.accountRoles[account] = nil
                }
            }
            outcome.announced = target.nick
        case .ban:
            guard let mask = argument.mask else { return .refused((.invalidArgument, "a ban needs a mask")) }
            let existing = settings.bans.firstIndex { $0.mask == mask }
            if on, existing == nil {
                guard settings.bans.count < ModerationLimits.maxRoomBans else {
                    return .refused((.listFull, "#\(name) holds \(ModerationLimits.maxRoomBans) bans, the most allowed"))
                }
                let entry = BanEntry(mask: mask.canonical, setBy: setter.nick, time: wallMillis, reason: argument.reason)
                outcome.settings.bans.append(Ban(mask: mask, entry: entry))
            } else if !on, let existing {
                outcome.settings.bans.remove(at: existing)
            }
            if on { outcome.banKicks = mask }
        case .registered:
            if on {
                guard let account = setter.account else {
                    return .refused((.notLoggedIn, "log in to register #\(name) to your account"))
                }
                if let founder = settings.founder, founder != account {
                    return .refused((.notOperator, "#\(name) is registered to \(accountName(founder))"))
                }
                if settings.founder == nil, let full = registrationLimit(account) {
                    return .refused((.listFull, full))
                }
                outcome.settings.founder = account
                outcome.announced = accountName(account)
            } else if let founder = settings.founder {
                guard founder == setter.account || setter.isServerOperator else {
                    return .refused((.notOperator, "only the founder unregisters #\(name)"))
                }
                outcome.announced = accountName(founder)
                outcome.settings.founder = nil
                outcome.settings.accountRoles = [:]
            }
        default:
            return .refused((.invalidArgument, "this server does not know mode \(mode.rawValue)"))
        }
        return .changed(outcome)
    }
}

/// What a mode change comes to (`RoomRules.modeChange`).
enum ModeChangeDecision {
    case refused(RoomRefusal)
    case changed(ModeChangeOutcome)
}
