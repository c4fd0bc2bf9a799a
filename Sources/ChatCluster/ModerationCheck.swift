import ChatCore
import ChatProtocol
import RedisClient
import RedisProtocol

extension ModerationCheck {
    /// The script's arguments after the first eight: the check, then its fields. A join's are
    /// its decision's (`admitArguments`): alone, an `admit` names no version, which never
    /// holds, so the script appends nothing for it.
    var arguments: [[UInt8]] {
        func flag(_ value: Bool) -> [UInt8] { value ? [UInt8(ascii: "1")] : [UInt8(ascii: "0")] }
        switch self {
        case .admit:
            return [Array("admit".utf8)]
        case let .speak(nick):
            return [Array("speak".utf8), Array(nick.utf8), flag(false), []]
        case let .setTopic(by, admin):
            return [Array("topic".utf8), Array(by.utf8), flag(admin), []]
        case let .kick(by, account, admin, sparingOps):
            return [Array("kick".utf8), Array(by.utf8), flag(admin), Array(account.utf8), flag(sparingOps)]
        case let .setMode(by, account, admin, mode, on, argument, reason):
            return [
                Array("mode".utf8), Array(by.utf8), flag(admin), Array(account.utf8), Array(String(mode).utf8), flag(on),
                Array(argument.utf8), Array(reason.utf8),
            ]
        }
    }

    /// The script's arguments after the first eight for a join (an `admit`) that `decision`
    /// decided against the room's state at `version` (-1: none read yet, which never holds).
    static func admitArguments(account: String, inviteKey: String, decision: ClusterAdmission, version: Int64) -> [[UInt8]] {
        let refusal = decision.refusal.map { ModerationRefusal(admissionRefusal: $0.code).rawValue + " " + $0.reason } ?? ""
        let highest = decision.counts.upperBound == Int.max ? -1 : decision.counts.upperBound
        return [
            Array("admit".utf8), [], [], Array(account.utf8), Array(String(version).utf8), Array(String(decision.counts.lowerBound).utf8),
            Array(String(highest).utf8), decision.reliesOnInvitation ? Array(inviteKey.utf8) : [], Array(refusal.utf8),
            Array(decision.role.utf8), Array(inviteKey.utf8),
        ]
    }

    /// The append script's moderation: functions, then the checks run before the event is
    /// numbered (a refusal logs nothing). KEYS 7–13: the room's modes (hash: `founder`, `i`, `m`,
    /// `t`, `k`, `l`), member roles (nick → `o`, `v` or `ov`), bans (mask → `time setBy reason`),
    /// invitations (nick key → expiry in ms), account roles of a registered room (account → role),
    /// members' accounts (nick → account), and the version of the first four but roles
    /// (`RoomKeys.version`, counted by `bump`). ARGV 9 on: the check and its fields, as
    /// `arguments` and `admitArguments` write them. `ms` is Redis's time, `change` the membership
    /// change, `subject` the nick it concerns (a kick's, as the member list spells it).
    ///
    /// A join (`admit`) was decided by the node against the room's state at a version
    /// (ClusterAdmission): it is carried out — refused, or the joiner given its role and its
    /// invitation used up — only if that version holds, the member count is within the range
    /// the decision holds for, and an invitation it relies on has not expired. Otherwise the
    /// script answers `{'STALE', version, ms, members, modes, bans, account roles, invitations}`
    /// and logs nothing, and the node decides again.
    static let checks = """
        local check = ARGV[9] or ''
        local by, admin, account = ARGV[10], ARGV[11] == '1', ARGV[12]
        local founder = redis.call('HGET', KEYS[7], 'founder')
        local function refuse(code, text) return redis.error_reply(code .. ' ' .. text) end
        local function bump() redis.call('INCR', KEYS[13]) end
        -- A member by its nick in any letter case (nicks are ASCII and compare ignoring case):
        -- the exact nick is tried first, the list only when a client typed it otherwise.
        local function member(nick)
            if redis.call('ZSCORE', KEYS[3], nick) then return nick end
            local wanted = string.lower(nick)
            for _, name in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
                if string.lower(name) == wanted then return name end
            end
            return nil
        end
        local function roleOf(nick) return redis.call('HGET', KEYS[8], nick) or '' end
        local function isOp(nick) return string.find(roleOf(nick), 'o', 1, true) ~= nil end
        local function isFounder(nick)
            return founder and redis.call('HGET', KEYS[12], nick) == founder
        end
        -- The rooms an account founded, and those where it was given a role, so that dropping the
        -- account forgets both (ClusterAccounts.drop).
        local function accountSet(accountKey, what) return 'chat:account:' .. accountKey .. ':' .. what end
        local function rememberRole(memberAccount, role)
            if role == '' then
                redis.call('HDEL', KEYS[11], memberAccount)
                redis.call('SREM', accountSet(memberAccount, 'roles'), ARGV[7])
            else
                redis.call('HSET', KEYS[11], memberAccount, role)
                redis.call('SADD', accountSet(memberAccount, 'roles'), ARGV[7])
            end
        end
        local function grant(nick, letter, on)
            local role = roleOf(nick):gsub(letter, '')
            if on then role = role .. letter end
            if role == 'vo' then role = 'ov' end
            if role == '' then redis.call('HDEL', KEYS[8], nick) else redis.call('HSET', KEYS[8], nick, role) end
            local memberAccount = founder and redis.call('HGET', KEYS[12], nick)
            if memberAccount then rememberRole(memberAccount, role) end
        end
        local function dropMember(nick)
            redis.call('HDEL', KEYS[8], nick)
            redis.call('HDEL', KEYS[12], nick)
        end
        local function forgetIfEmptyAndUnregistered()
            if redis.call('ZCARD', KEYS[3]) == 0 and not founder then
                if redis.call('DEL', KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12]) > 0 then bump() end
            end
        end
        local granted = ''
        if check == 'admit' then
            local version = tonumber(redis.call('GET', KEYS[13]) or '0')
            local count = redis.call('ZCARD', KEYS[3])
            local highest = tonumber(ARGV[15])
            local invitation = ARGV[16] ~= '' and tonumber(redis.call('HGET', KEYS[10], ARGV[16]) or '0')
            if version ~= tonumber(ARGV[13]) or count < tonumber(ARGV[14]) or (highest >= 0 and count > highest)
                or (invitation and invitation <= ms) then
                return {'STALE', version, ms, count, redis.call('HGETALL', KEYS[7]), redis.call('HGETALL', KEYS[9]),
                    redis.call('HGETALL', KEYS[11]), redis.call('HGETALL', KEYS[10])}
            end
            if ARGV[17] ~= '' then return redis.error_reply(ARGV[17]) end
            granted = ARGV[18]
            if redis.call('HDEL', KEYS[10], ARGV[19]) == 1 then bump() end
        elseif check == 'speak' then
            if not redis.call('ZSCORE', KEYS[3], by) then return refuse('NOTMEMBER', 'you are not in #' .. ARGV[7]) end
            if redis.call('HEXISTS', KEYS[7], 'm') == 1 and roleOf(by) == '' then
                return refuse('MODERATED', '#' .. ARGV[7] .. ' is moderated: only ops and voiced members speak')
            end
        elseif check == 'topic' then
            if not redis.call('ZSCORE', KEYS[3], by) then return refuse('NOTMEMBER', 'you are not in #' .. ARGV[7]) end
            if redis.call('HEXISTS', KEYS[7], 't') == 1 and not admin and not isOp(by) then
                return refuse('NOTOP', 'the topic of #' .. ARGV[7] .. ' is locked: only ops set it')
            end
        elseif check == 'kick' then
            if not admin and not isOp(by) then return refuse('NOTOP', 'you are not an op of #' .. ARGV[7]) end
            subject = member(ARGV[5])
            if not subject then return refuse('NOTMEMBER', ARGV[5] .. ' is not in #' .. ARGV[7]) end
            if ARGV[13] == '1' and isOp(subject) then return refuse('ISOP', subject .. ' is an op of #' .. ARGV[7]) end
            if isFounder(subject) and account ~= founder and not admin then
                return refuse('NOTOP', 'only the founder kicks the founder of #' .. ARGV[7])
            end
        elseif check == 'mode' then
            local mode, on, argument = tonumber(ARGV[13]), ARGV[14] == '1', ARGV[15]
            if not admin and not isOp(by) then return refuse('NOTOP', 'you are not an op of #' .. ARGV[7]) end
            if mode == 8 then
                if on then
                    if account == '' then return refuse('NOTLOGGEDIN', 'log in to register #' .. ARGV[7]) end
                    if founder and founder ~= account then return refuse('REGISTERED', '#' .. ARGV[7] .. ' is registered to ' .. founder) end
                    if not founder then
                        if redis.call('SCARD', 'chat:registered') >= \(ModerationLimits.maxRegisteredRooms) then
                            return refuse('LISTFULL', 'the cluster holds \(ModerationLimits.maxRegisteredRooms) registered rooms, the most allowed')
                        end
                        if redis.call('SCARD', accountSet(account, 'rooms')) >= \(ModerationLimits.maxRegisteredRoomsPerAccount) then
                            return refuse('LISTFULL', 'your account has registered \(ModerationLimits.maxRegisteredRoomsPerAccount) rooms, the most allowed')
                        end
                    end
                    redis.call('HSET', KEYS[7], 'founder', account)
                    redis.call('SADD', 'chat:registered', ARGV[7])
                    redis.call('SADD', accountSet(account, 'rooms'), ARGV[7])
                    founder = account
                    local roles = redis.call('HGETALL', KEYS[8])
                    for i = 1, #roles, 2 do
                        local memberAccount = redis.call('HGET', KEYS[12], roles[i])
                        if memberAccount then rememberRole(memberAccount, roles[i + 1]) end
                    end
                elseif founder then
                    if account ~= founder and not admin then return refuse('NOTOP', 'only the founder unregisters #' .. ARGV[7]) end
                    redis.call('HDEL', KEYS[7], 'founder')
                    redis.call('DEL', KEYS[11])
                    redis.call('SREM', 'chat:registered', ARGV[7])
                    redis.call('SREM', accountSet(founder, 'rooms'), ARGV[7])
                    founder = false
                end
            else
                local flags = { [0] = 'i', [2] = 'm', [3] = 't' }
                if flags[mode] then
                    if on then redis.call('HSET', KEYS[7], flags[mode], '1') else redis.call('HDEL', KEYS[7], flags[mode]) end
                elseif mode == 1 or mode == 4 then
                    local field = mode == 1 and 'k' or 'l'
                    if on then redis.call('HSET', KEYS[7], field, argument) else redis.call('HDEL', KEYS[7], field) end
                elseif mode == 5 or mode == 6 then
                    local target = member(argument)
                    if not target then return refuse('NOTMEMBER', argument .. ' is not in #' .. ARGV[7]) end
                    if mode == 5 and not on and isFounder(target) and account ~= founder and not admin then
                        return refuse('NOTOP', 'only the founder deops the founder of #' .. ARGV[7])
                    end
                    grant(target, mode == 5 and 'o' or 'v', on)
                elseif mode == 7 then
                    if on then
                        if redis.call('HEXISTS', KEYS[9], argument) == 0 and redis.call('HLEN', KEYS[9]) >= \(ModerationLimits.maxRoomBans) then
                            return refuse('LISTFULL', '#' .. ARGV[7] .. ' has \(ModerationLimits.maxRoomBans) bans, the most it holds')
                        end
                        redis.call('HSET', KEYS[9], argument, ms .. ' ' .. by .. ' ' .. ARGV[16])
                    else
                        redis.call('HDEL', KEYS[9], argument)
                    end
                else
                    return refuse('BADMODE', 'no mode ' .. ARGV[13])
                end
            end
            bump()
        end
        """

    /// The append script's moderation after the event's membership change: the joiner's role and
    /// account, a leaver's or kicked member's taken away, a renamed member's moved, and an emptied
    /// unregistered room's moderation forgotten.
    static let afterChange = """
        if change == 'join' and check == 'admit' then
            if granted ~= '' then redis.call('HSET', KEYS[8], ARGV[5], granted) end
            if account ~= '' then redis.call('HSET', KEYS[12], ARGV[5], account) end
        elseif change == 'leave' or change == 'kick' then
            dropMember(subject)
            forgetIfEmptyAndUnregistered()
        elseif change == 'rename' then
            local role = redis.call('HGET', KEYS[8], ARGV[5])
            local memberAccount = redis.call('HGET', KEYS[12], ARGV[5])
            dropMember(ARGV[5])
            if role then redis.call('HSET', KEYS[8], ARGV[8], role) end
            if memberAccount then redis.call('HSET', KEYS[12], ARGV[8], memberAccount) end
        end
        """
}

/// Why the append script refused an event for the room's moderation, parsed from its error reply.
public enum ModerationRefusal: String, Equatable, Sendable {
    /// A ban of the room matches the joiner.
    case banned = "BANNED"
    /// The room is invite-only and the joiner was not invited.
    case inviteOnly = "INVITEONLY"
    /// The room has another key.
    case badKey = "BADKEY"
    /// The room is at its member limit.
    case full = "FULL"
    /// The request needs op (or the founder).
    case notOperator = "NOTOP"
    /// The room is moderated and the speaker is neither op nor voiced.
    case moderated = "MODERATED"
    /// The room holds as many bans as it may.
    case listFull = "LISTFULL"
    /// The nick named is not a member of the room.
    case notMember = "NOTMEMBER"
    /// Registering a room needs a login.
    case notLoggedIn = "NOTLOGGEDIN"
    /// The room is registered to another account.
    case registered = "REGISTERED"
    /// A kick that spares ops found an op.
    case isOperator = "ISOP"
    /// The mode is not one the script knows.
    case badMode = "BADMODE"
    /// The invitee is a member already.
    case alreadyMember = "ALREADYIN"
    /// The room's admission state changed under every decision of a join
    /// (`RoomLog.open`'s `maxAdmissionAttempts`): not refused, to be tried again.
    case contended = "CONTENDED"

    /// The refusal a node's decision on a join (`ClusterAdmission`) gives for `code`, the code a
    /// server on its own refuses with: the script answers with it as with its own.
    init(admissionRefusal code: ErrorCode) {
        switch code {
        case .banned: self = .banned
        case .inviteOnly: self = .inviteOnly
        case .badRoomKey: self = .badKey
        case .roomFull: self = .full
        default: self = .notMember
        }
    }

    /// The refusal and its text, if `error` is one of the script's.
    public static func parse(_ error: ClusterError) -> (refusal: ModerationRefusal, text: String)? {
        guard case .refused(let reply) = error, let space = reply.firstIndex(of: " "),
            let refusal = ModerationRefusal(rawValue: String(reply[..<space]))
        else { return nil }
        return (refusal, String(reply[reply.index(after: space)...]))
    }
}

/// A room's moderation as Redis holds it: what a joiner is told (`roomModes`) and what a node
/// checks before it asks.
public struct ClusterRoomModeration: Equatable, Sendable {
    /// The account the room is registered to; empty when it is not.
    public var founder = ""
    /// Only the invited and those with a role by account join.
    public var inviteOnly = false
    /// Only ops and voiced members speak.
    public var moderated = false
    /// Only ops set the topic.
    public var topicLock = false
    /// The key; empty when none.
    public var key = ""
    /// The member limit; 0 when none.
    public var memberLimit = 0
    /// Members' roles: nick → `o`, `v` or `ov`.
    public var roles: [String: String] = [:]

    /// A room without moderation.
    public init() {}
}

extension ClusterDirectory {
    /// The script `invite` runs. KEYS: the room's roles, invitations, members and version (an
    /// invitation changes what a join is decided by: ModerationCheck.checks). ARGV: the
    /// inviter's nick, `1` for a server operator, the invitee's nick key, the invitation's
    /// lifetime in ms, the most invitations kept, the room's name, the invitee's nick.
    static let inviteScript = """
        if ARGV[2] ~= '1' and not string.find(redis.call('HGET', KEYS[1], ARGV[1]) or '', 'o', 1, true) then
            return redis.error_reply('NOTOP you are not an op of #' .. ARGV[6])
        end
        if redis.call('ZSCORE', KEYS[3], ARGV[7]) then
            return redis.error_reply('ALREADYIN ' .. ARGV[7] .. ' is already in #' .. ARGV[6])
        end
        local now = redis.call('TIME')
        local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
        redis.call('HSET', KEYS[2], ARGV[3], ms + tonumber(ARGV[4]))
        redis.call('PEXPIRE', KEYS[2], ARGV[4])
        redis.call('INCR', KEYS[4])
        if redis.call('HLEN', KEYS[2]) > tonumber(ARGV[5]) then
            local all = redis.call('HGETALL', KEYS[2])
            local soonest, soonestKey
            for i = 1, #all, 2 do
                local expiry = tonumber(all[i + 1])
                if expiry < ms then
                    redis.call('HDEL', KEYS[2], all[i])
                elseif not soonest or expiry < soonest then
                    soonest, soonestKey = expiry, all[i]
                end
            end
            if redis.call('HLEN', KEYS[2]) > tonumber(ARGV[5]) then redis.call('HDEL', KEYS[2], soonestKey) end
        end
        return 1
        """

    /// Invites `nick` (its key `nickKey`) into `room` for `lifetimeMillis`, if `by` is an op
    /// there or `admin`: its next join passes invite-only, the key and the limit, once. Fails
    /// with `.refused("NOTOP …")` or `.refused("ALREADYIN …")` (`ModerationRefusal.parse`).
    public func invite(
        _ nick: String, nickKey: String, into room: String, by: String, admin: Bool, lifetimeMillis: Int,
        completion: @escaping (Result<Void, ClusterError>) -> Void
    ) {
        let keys = RoomKeys(room)
        commands.send([
            Array("EVAL".utf8), Array(Self.inviteScript.utf8), Array("4".utf8), keys.roles, keys.invitations, keys.members, keys.version,
            Array(by.utf8), Array((admin ? "1" : "0").utf8), Array(nickKey.utf8), Array(String(lifetimeMillis).utf8),
            Array(String(ModerationLimits.maxInvitations).utf8), Array(room.utf8), Array(nick.utf8),
        ]) { reply in completion(Self.done(reply)) }
    }

    /// A script's answer that it did what was asked (`1`), or why not.
    static func done(_ reply: RedisConnection.Reply) -> Result<Void, ClusterError> {
        switch reply {
        case .success(.integer): .success(())
        case .success(.error(let text)): .failure(.refused(text))
        case .success(let other): .failure(ClusterError(.success(other), expecting: "1"))
        case .failure(let error): .failure(.redis(error))
        }
    }
}

extension BanEntry {
    /// Parses `time setBy reason` (setBy `-` for none), as the scripts write a ban of `mask`.
    init?(mask: String, record: String) {
        let parts = record.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 2, let time = UInt64(parts[0]) else { return nil }
        self.init(mask: mask, setBy: parts[1] == "-" ? "" : String(parts[1]), time: time, reason: parts.count > 2 ? String(parts[2]) : "")
    }
}

extension ClusterDirectory {
    /// KEYS: the room's members, its members' accounts. ARGV: the nick, the account.
    static let recordAccountScript = """
        if redis.call('ZSCORE', KEYS[1], ARGV[1]) then redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) end
        return 1
        """

    /// Tells Redis that `room`'s member `nick` is logged in to `account`, if it is still a member:
    /// the join of a member that logged in after joining recorded no account, and the append
    /// script's founder and role rules read it (ModerationCheck.checks). Nothing is answered.
    public func recordAccount(_ account: String, ofMember nick: String, in room: String) {
        let keys = RoomKeys(room)
        commands.send([
            Array("EVAL".utf8), Array(Self.recordAccountScript.utf8), Array("2".utf8), keys.members, keys.memberAccounts,
            Array(nick.utf8), Array(account.utf8),
        ]) { _ in }
    }

    /// Reads `room`'s standing: its founder, members' roles, bans and account roles, in one round
    /// trip.
    public func standing(of room: String, completion: @escaping (Result<ClusterRoomStanding, ClusterError>) -> Void) {
        let keys = RoomKeys(room)
        hashes([keys.modes, keys.roles, keys.bans, keys.accountRoles]) { result in
            completion(result.flatMap { hashes in
                var standing = ClusterRoomStanding()
                standing.founder = hashes[0]["founder"] ?? ""
                standing.roles = hashes[1]
                for (mask, record) in hashes[2] {
                    guard let ban = BanEntry(mask: mask, record: record) else { return .failure(.malformedReply("ban record \(record)")) }
                    standing.bans.append(ban)
                }
                standing.bans.sort { ($0.time, $0.mask) < ($1.time, $1.mask) }
                standing.accountRoles = hashes[3]
                return .success(standing)
            })
        }
    }

    /// Reads `room`'s modes and roles.
    public func moderation(of room: String, completion: @escaping (Result<ClusterRoomModeration, ClusterError>) -> Void) {
        let keys = RoomKeys(room)
        hashes([keys.modes, keys.roles]) { result in
            completion(result.map { hashes in
                var moderation = ClusterRoomModeration()
                let modes = hashes[0]
                moderation.founder = modes["founder"] ?? ""
                moderation.inviteOnly = modes["i"] != nil
                moderation.moderated = modes["m"] != nil
                moderation.topicLock = modes["t"] != nil
                moderation.key = modes["k"] ?? ""
                moderation.memberLimit = modes["l"].flatMap { Int($0) } ?? 0
                moderation.roles = hashes[1]
                return moderation
            })
        }
    }

    /// Reads `room`'s bans, oldest first.
    public func bans(of room: String, completion: @escaping (Result<[BanEntry], ClusterError>) -> Void) {
        bans(in: RoomKeys(room).bans, completion: completion)
    }

    /// Reads the bans of the hash `key` (a room's, or the server's), oldest first.
    func bans(in key: [UInt8], completion: @escaping (Result<[BanEntry], ClusterError>) -> Void) {
        hashes([key]) { result in
            completion(result.flatMap { hashes in
                var bans: [BanEntry] = []
                for (mask, record) in hashes[0] {
                    guard let ban = BanEntry(mask: mask, record: record) else {
                        return .failure(.malformedReply("ban record \(record)"))
                    }
                    bans.append(ban)
                }
                return .success(bans.sorted { ($0.time, $0.mask) < ($1.time, $1.mask) })
            })
        }
    }

    /// `HGETALL` of each of `keys`, small hashes all (a room's moderation is bounded).
    func hashes(_ keys: [[UInt8]], completion: @escaping (Result<[[String: String]], ClusterError>) -> Void) {
        var replies: [[String: String]?] = Array(repeating: nil, count: keys.count)
        var failed = false
        for (index, key) in keys.enumerated() {
            commands.send([Array("HGETALL".utf8), key]) { reply in
                guard !failed else { return }
                switch reply {
                case .success(.array(let fields?)) where fields.count.isMultiple(of: 2):
                    var hash: [String: String] = [:]
                    for field in stride(from: 0, to: fields.count, by: 2) {
                        guard let name = fields[field].text, let value = fields[field + 1].text else {
                            failed = true
                            return completion(.failure(.malformedReply("hash field \(fields[field])")))
                        }
                        hash[name] = value
                    }
                    replies[index] = hash
                case .success(let other):
                    failed = true
                    return completion(.failure(ClusterError(.success(other), expecting: "a hash")))
                case .failure(let error):
                    failed = true
                    return completion(.failure(.redis(error)))
                }
                if replies.allSatisfy({ $0 != nil }) { completion(.success(replies.map { $0! })) }
            }
        }
    }
}
