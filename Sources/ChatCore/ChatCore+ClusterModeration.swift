import ChatProtocol

// MARK: - Room moderation in cluster mode
//
// A room's moderation is the cluster's, in Redis (docs/CLUSTER.md, "Moderation"): the append
// script changes it in the step that numbers the event (`ModerationCheck`), so every node
// delivers one order of kicks, mode changes and the joins and lines they decide. A join is
// decided by the room's rules on the node's room log, against the room's state as it last read
// it, and carried out only while that state holds (`ClusterAdmission`); the other checks run in
// the script. Here the node checks only what it can tell alone (the request's argument, the
// requester's place in the room), sends what the rules are matched by, and shows the answer.
// Server bans are Redis's too; every node keeps a copy (`moderation.serverBans`), read again at
// each change it hears, so that it refuses a connection, a hello or a nick at once.

extension ChatCore {
    /// `kick` on a cluster node: appended as `kicked`, if Redis finds the kicker an op (or a
    /// server operator) and the member there, whichever node serves it.
    mutating func clusterKick(
        _ target: String, from room: String, reason: String, id: ClientID, nick: String, size: Int, into actions: inout [ChatAction]
    ) {
        guard clusterMayModerate(room, request: .kick, id: id, into: &actions) else { return }
        let event = Frame.kicked(room: room, seq: 0, time: 0, nick: target, by: nick, reason: reason)
        let check = ModerationCheck.kick(by: nick, account: clients[id.slot]?.account ?? "", admin: isServerOperator(id))
        clusterAppend(event, in: room, from: id, size: size, moderation: check)
    }

    /// `setMode` on a cluster node: the argument checked and put in its canonical form here,
    /// the change appended as `modeChanged` if Redis finds the setter an op (or the founder, or
    /// a server operator, where the mode needs one).
    mutating func clusterSetMode(
        _ mode: RoomMode, on: Bool, argument: String, in room: String, id: ClientID, nick: String, size: Int,
        into actions: inout [ChatAction]
    ) {
        guard clusterMayModerate(room, request: .setMode, id: id, into: &actions) else { return }
        guard let parsed = checkedModeArgument(mode, on: on, argument: argument, for: id, into: &actions) else { return }
        var canonical = parsed.announced
        let account = clients[id.slot]?.account
        if mode == .registered {
            // Redis judges who may (an op, then one logged in), in the order a server on its own
            // does: a guest who is no op hears `notOperator` in every mode.
            canonical = on ? account.map { accounts.name(of: $0) } ?? "" : ""
        }
        let event = Frame.modeChanged(room: room, seq: 0, time: 0, by: nick, mode: mode, on: on, argument: canonical)
        // Redis keeps a ban by its mask, with its reason in the ban's record.
        let stored = mode == .registered ? "" : parsed.mask?.canonical ?? canonical
        let check = ModerationCheck.setMode(
            by: nick, account: account ?? "", admin: isServerOperator(id), mode: mode.rawValue, on: on,
            argument: stored, reason: parsed.reason)
        clusterAppend(event, in: room, from: id, size: size, moderation: check)
    }

    /// `invite` on a cluster node: kept in Redis if the inviter is an op there (or a server
    /// operator), then told to the invitee through the node that serves it → `clusterInvited`.
    mutating func clusterInvite(_ target: String, to room: String, id: ClientID, nick: String, into actions: inout [ChatAction]) {
        guard clusterMayModerate(room, request: .invite, id: id, into: &actions) else { return }
        cluster.awaiting[id] = .read
        ask(.invite(room: room, nick: target, by: nick, admin: isServerOperator(id), asker(id)), owing: id)
    }

    /// `listBans` on a cluster node: a member's (or a server operator's) read of the room's bans
    /// → `clusterBansRead`; the server's bans are this node's copy of them (`listBans`).
    mutating func clusterListBans(of room: String, id: ClientID, into actions: inout [ChatAction]) {
        guard !room.isEmpty else { return listBans(of: room, for: id, into: &actions) }
        guard clusterMayModerate(room, request: .listBans, id: id, into: &actions) else { return }
        cluster.awaiting[id] = .read
        ask(.bans(room: room, asker(id)), owing: id)
    }

    /// `serverBan` on a cluster node: kept in Redis, which tells every node (this one too), and
    /// each ends its own sessions that the ban matches → `clusterServerBanSet`.
    mutating func clusterServerBan(_ text: String, on: Bool, reason: String, id: ClientID, nick: String, into actions: inout [ChatAction]) {
        guard let mask = serverBanMask(text, by: id, into: &actions) else { return }
        guard cluster.available else {
            refuse(.serverBan, .unavailable, unavailableText("cannot ban from the server now"), to: id, into: &actions)
            return
        }
        cluster.awaiting[id] = .read
        let kept = Self.prefix(of: reason, bytes: Self.maxBanReasonBytes)
        ask(.serverBan(mask: mask.canonical, on: on, setBy: nick, reason: kept, asker(id)), owing: id)
    }

    /// `kill` of a client of another node: told to that node, which ends the session → `clusterKillSent`.
    mutating func clusterKill(_ target: String, reason: String, id: ClientID, nick: String, into actions: inout [ChatAction]) {
        guard admitsServerOperator(id, for: .kill, "kills a session", into: &actions) else { return }
        guard cluster.available else {
            refuse(.kill, .unavailable, unavailableText("cannot reach \(target) now"), to: id, into: &actions)
            return
        }
        cluster.awaiting[id] = .read
        ask(.kill(nick: target, reason: Self.killReason(by: nick, reason), asker(id)), owing: id)
    }

    /// The server ban of `mask` that `asker` asked for was kept (or lifted), or failed.
    public mutating func clusterServerBanSet(
        mask: String, on: Bool, _ asker: ClusterAsker, _ result: Result<Void, ClusterFailure>, into actions: inout [ChatAction]
    ) {
        guard let id = readAnswered(asker) else { return }
        let firstAction = actions.count
        defer { settleRead(of: id, from: firstAction, into: &actions) }
        switch result {
        case .success:
            let text = on ? "banned \(mask) on every node" : "lifted the ban of \(mask)"
            actions.append(.send(.done(request: .serverBan, text: text), to: id))
        case .failure(let failure):
            refuse(.serverBan, failure.code, failure.reason, to: id, into: &actions)
        }
    }

    /// The kill `asker` asked for reached the node serving its target (`true`), found no one, or failed.
    public mutating func clusterKillSent(nick target: String, _ asker: ClusterAsker, _ result: Result<Bool, ClusterFailure>, into actions: inout [ChatAction]) {
        guard let id = readAnswered(asker) else { return }
        let firstAction = actions.count
        defer { settleRead(of: id, from: firstAction, into: &actions) }
        switch result {
        case .success(true): actions.append(.send(.done(request: .kill, text: "killed \(target)"), to: id))
        case .success(false): refuse(.kill, .noSuchNick, "no one is called \(target)", to: id, into: &actions)
        case .failure(let failure): refuse(.kill, failure.code, "not killed: \(failure.reason)", to: id, into: &actions)
        }
    }

    /// Another node's server operator killed `nickKey`, a client of this node.
    public mutating func clusterKilled(nickKey key: String, reason: String, at now: ServerTime, into actions: inout [ChatAction]) {
        guard let holder = nicks[key], let nick = nick(of: holder), ChatName.nickKey(nick) == key else { return }
        disconnect(holder, Disconnection(code: .killed, frameType: .kill, reason: reason), at: now, into: &actions)
    }

    /// The cluster's server bans as Redis holds them now (read when the node connects and after
    /// each change it hears): this node's copy is replaced, and its sessions that a ban new to
    /// the copy matches are ended, its members of a newly closed room kicked.
    public mutating func clusterServerBansRead(_ entries: [BanEntry], at now: ServerTime, into actions: inout [ChatAction]) {
        let known = Set(moderation.serverBans.map(\.entry.mask))
        moderation.serverBans = entries.compactMap { entry in
            (try? BanMask(parsing: entry.mask, allowsRoom: true)).map { Ban(mask: $0, entry: entry) }
        }
        for ban in moderation.serverBans where !known.contains(ban.entry.mask) {
            if case .room(let name) = ban.mask {
                for member in cluster.rooms[name]?.members ?? [] {
                    guard let memberNick = nick(of: member) else { continue }
                    let kick = Frame.kicked(
                        room: name, seq: 0, time: 0, nick: memberNick, by: ban.entry.setBy, reason: Self.closureReason(of: name, ban.entry.reason))
                    ask(.append(
                        room: name, event: kick, change: .kick(nick: memberNick), sender: nil, charge: nil,
                        moderation: .kick(by: ban.entry.setBy, account: "", admin: true)))
                }
                continue
            }
            // A server operator is never locked out by a server ban: the one who set it may be on
            // another node.
            let operators = Set(clients.indices.map(ClientID.init).filter(isServerOperator))
            _ = endSessions(matching: ban.mask, reason: ban.entry.reason, sparing: operators, at: now, into: &actions)
        }
    }

    /// Whether `id` may ask the cluster for `request` in `room`: the cluster is reachable and
    /// `id` is a member (or a server operator); refused here otherwise.
    private mutating func clusterMayModerate(_ room: String, request: FrameType, id: ClientID, into actions: inout [ChatAction]) -> Bool {
        guard cluster.available else {
            refuse(request, .unavailable, unavailableText("cannot moderate #\(room) now"), to: id, into: &actions)
            return false
        }
        guard isMember(id, of: room) || isServerOperator(id) else {
            refuse(request, .notInRoom, "you are not in #\(room)", to: id, into: &actions)
            return false
        }
        return true
    }

    /// The invitation `asker` sent was kept and told to the invitee's node (`true`), found no
    /// one online (`false`), or failed.
    public mutating func clusterInvited(
        room: String, nick target: String, _ asker: ClusterAsker, _ result: Result<Bool, ClusterFailure>, into actions: inout [ChatAction]
    ) {
        guard let id = readAnswered(asker), let nick = nick(of: id) else { return }
        let firstAction = actions.count
        defer { settleRead(of: id, from: firstAction, into: &actions) }
        switch result {
        case .success(true): actions.append(.send(.invited(room: room, nick: target, by: nick), to: id))
        case .success(false): refuse(.invite, .noSuchNick, "no one is called \(target)", to: id, into: &actions)
        case .failure(let failure): refuse(.invite, failure.code, failure.reason, to: id, into: &actions)
        }
    }

    /// The bans of `room` that `asker` asked for, oldest first, or why they could not be read.
    public mutating func clusterBansRead(
        room: String, _ asker: ClusterAsker, _ result: Result<[BanEntry], ClusterFailure>, into actions: inout [ChatAction]
    ) {
        guard let id = readAnswered(asker) else { return }
        let firstAction = actions.count
        defer { settleRead(of: id, from: firstAction, into: &actions) }
        switch result {
        case .success(let entries): actions.append(.send(.banList(room: room, entries: entries), to: id))
        case .failure(let failure): refuse(.listBans, failure.code, "cannot list the bans of #\(room) now: \(failure.reason)", to: id, into: &actions)
        }
    }

    // MARK: Who a member is, on a node

    /// `id` logged in (or registered) on a node while a member of rooms: their standing is read
    /// from Redis (`clusterStandingsRead` judges it as a server on its own does), and `id` is not
    /// read meanwhile, so its next line cannot overtake a kick its login makes.
    mutating func clusterLoggedInAsMember(_ id: ClientID) {
        guard let client = clients[id.slot], !client.rooms.isEmpty, let nick = client.nick, let account = client.account,
            cluster.awaiting[id] == nil
        else { return }
        cluster.awaiting[id] = .read
        ask(.standings(rooms: client.rooms, asker(id), check: .login(nick: nick, account: account)), owing: id)
    }

    /// `changeNick` to `newNick` on a node by a member of rooms: their standing is read first, and
    /// `clusterStandingsRead` refuses the change where a ban matches it under that nick.
    mutating func clusterCheckNickChange(of id: ClientID, to newNick: String) {
        cluster.awaiting[id] = .read
        ask(.standings(rooms: clients[id.slot]?.rooms ?? [], asker(id), check: .nickChange(newNick)), owing: id)
    }

    /// The standing of `asker`'s rooms, read for `check`: the rules of a server on its own
    /// (`memberBan`, `accountRole`) applied to what Redis holds. After a login, a ban that matches
    /// now is appended as a kick (sparing ops, as a new ban's kicks do: Redis checks that in the
    /// step that numbers it) and an account's role as a mode change; a nick change goes on to
    /// its claim unless a ban matches under the new nick. When Redis could not be read, a login
    /// stands unjudged (its rooms' next ban, or its next join, judges it) and a nick change is
    /// refused `unavailable`.
    public mutating func clusterStandingsRead(
        _ asker: ClusterAsker, _ check: StandingCheck, _ result: Result<[String: ClusterRoomStanding], ClusterFailure>,
        at now: ServerTime, into actions: inout [ChatAction]
    ) {
        guard let id = readAnswered(asker), let client = clients[id.slot], let nick = client.nick else { return }
        let firstAction = actions.count
        defer { settleRead(of: id, from: firstAction, into: &actions) }
        guard case .success(let standings) = result else {
            if case .nickChange = check, case .failure(let failure) = result {
                refuse(.changeNick, .unavailable, "cannot change your nick now: \(failure.reason); try again", to: id, into: &actions)
            }
            return
        }
        switch check {
        case .nickChange(let newNick):
            for room in client.rooms {
                guard let standing = standings[room] else { continue }
                let settings = RoomSettings(standing)
                if let ban = memberBan(of: settings, isOp: standing.roles[nick]?.contains("o") == true, for: id, nick: newNick) {
                    refuse(.changeNick, .banned, Self.bannedNickReason(in: room, as: newNick, ban), to: id, into: &actions)
                    return
                }
            }
            changeNick(of: id, from: nick, to: newNick, standingChecked: true, at: now, into: &actions)
        case .login:
            for room in client.rooms {
                guard let standing = standings[room] else { continue }
                let settings = RoomSettings(standing)
                let role = standing.roles[nick] ?? ""
                if let ban = memberBan(of: settings, isOp: role.contains("o"), for: id, nick: nick) {
                    let kick = Frame.kicked(
                        room: room, seq: 0, time: 0, nick: nick, by: ban.entry.setBy, reason: Self.banKickReason(ban.mask, reason: ban.entry.reason))
                    ask(.append(
                        room: room, event: kick, change: .kick(nick: nick), sender: nil, charge: nil,
                        moderation: .kick(by: ban.entry.setBy, account: "", admin: true, sparingOps: true)))
                    continue
                }
                guard let taken = RoomRules.accountRole(client.account, in: settings) else { continue }
                let mode: RoomMode = taken == .op ? .op : .voice
                guard !role.contains(taken == .op ? "o" : "v") else { continue }
                let event = Frame.modeChanged(room: room, seq: 0, time: 0, by: nick, mode: mode, on: true, argument: nick)
                ask(.append(
                    room: room, event: event, change: .none, sender: nil, charge: nil,
                    moderation: .setMode(
                        by: nick, account: client.account ?? "", admin: true, mode: mode.rawValue, on: true, argument: nick, reason: "")))
            }
        }
    }

    /// Tells `name`'s members, through its log, the roles `id` took by its account as it joined a
    /// registered room (Redis gave them in the join's step; its snapshot, `modes`, names them), as
    /// a server on its own does (`announceRolesTaken`).
    mutating func clusterAnnounceRolesTaken(in name: String, by id: ClientID, modes: RoomModes?) {
        guard let modes, !modes.founder.isEmpty, let nick = nick(of: id) else { return }
        for (mode, holds) in [(RoomMode.op, modes.ops.contains(nick)), (RoomMode.voice, modes.voices.contains(nick))] where holds {
            let event = Frame.modeChanged(room: name, seq: 0, time: 0, by: nick, mode: mode, on: true, argument: nick)
            // Given already: the change confirms it, with a server operator's authority.
            let check = ModerationCheck.setMode(
                by: nick, account: clients[id.slot]?.account ?? "", admin: true, mode: mode.rawValue, on: true, argument: nick, reason: "")
            ask(.append(room: name, event: event, change: .none, sender: nil, charge: nil, moderation: check))
        }
    }

}

/// Why a mode's argument is not valid: the `invalidArgument` reason.
struct InvalidModeArgument: Error, Equatable {
    var reason: String
}

/// A mode's argument, checked: what the change is announced with, and what it sets.
struct ModeArgument: Equatable {
    /// The argument as `modeChanged` carries it: the canonical form (a ban's mask, then its
    /// reason after a space), empty for the flags and for a key or limit turned off.
    var announced = ""
    /// A limit turned on.
    var limit: Int?
    /// A ban's mask, and its reason (cut to `maxBanReasonBytes`; may be empty).
    var mask: BanMask?
    var reason = ""
}

extension ChatCore {
    /// `argument` of `mode`, checked, or why it is not valid for the mode: none for the flags and
    /// registration, a key of 1 to `maxRoomKeyBytes` bytes, a limit in decimal from 1 to
    /// 1,000,000, a nick, a ban mask (with an optional reason after a space). A key or a limit
    /// turned off takes whatever it is given, and is announced without it. One check for every
    /// mode of the server (`setMode`, `clusterSetMode`).
    static func modeArgument(_ mode: RoomMode, on: Bool, argument: String) -> Result<ModeArgument, InvalidModeArgument> {
        switch mode {
        case .inviteOnly, .moderated, .topicLock, .registered:
            return argument.isEmpty ? .success(ModeArgument()) : .failure(InvalidModeArgument(reason: "mode \(mode) takes no argument"))
        case .key:
            guard on else { return .success(ModeArgument()) }
            guard (1...maxRoomKeyBytes).contains(argument.utf8.count) else {
                return .failure(InvalidModeArgument(reason: "a room key is 1 to \(maxRoomKeyBytes) bytes"))
            }
            return .success(ModeArgument(announced: argument))
        case .memberLimit:
            guard on else { return .success(ModeArgument()) }
            guard let limit = decimal(argument), (1...1_000_000).contains(limit) else {
                return .failure(InvalidModeArgument(reason: "a member limit is a decimal number from 1 to 1000000, not \(argument)"))
            }
            return .success(ModeArgument(announced: String(limit), limit: limit))
        case .op, .voice:
            guard ChatName.isValidNick(argument) else { return .failure(InvalidModeArgument(reason: "\(argument) is not a nick")) }
            return .success(ModeArgument(announced: argument))
        case .ban:
            let parts = argument.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: false)
            let mask: BanMask
            do {
                mask = try BanMask(parsing: String(parts[0]), allowsRoom: false)
            } catch {
                return .failure(InvalidModeArgument(reason: error.reason))
            }
            let reason = parts.count > 1 ? prefix(of: String(parts[1]), bytes: maxBanReasonBytes) : ""
            return .success(ModeArgument(announced: mask.canonical + (reason.isEmpty ? "" : " \(reason)"), mask: mask, reason: reason))
        default:
            return .failure(InvalidModeArgument(reason: "this server does not know mode \(mode.rawValue)"))
        }
    }

    /// `modeArgument`, or nil once `id`'s `setMode` is refused `invalidArgument` with why.
    func checkedModeArgument(
        _ mode: RoomMode, on: Bool, argument: String, for id: ClientID, into actions: inout [ChatAction]
    ) -> ModeArgument? {
        switch Self.modeArgument(mode, on: on, argument: argument) {
        case .success(let parsed):
            return parsed
        case .failure(let invalid):
            refuse(.setMode, .invalidArgument, invalid.reason, to: id, into: &actions)
            return nil
        }
    }
}

extension RoomSettings {
    /// What a room's standing in Redis amounts to for the rules a member meets: its founder, its
    /// bans (a mask Redis holds that does not parse is left out: the node set it, canonical) and
    /// the roles given to accounts.
    init(_ standing: ClusterRoomStanding) {
        self.init()
        founder = standing.founder.isEmpty ? nil : standing.founder
        bans = standing.bans.compactMap { entry in (try? BanMask(parsing: entry.mask, allowsRoom: false)).map { Ban(mask: $0, entry: entry) } }
        accountRoles = standing.accountRoles.compactMapValues { role in
            role.contains("o") ? .op : role.contains("v") ? .voice : nil
        }
    }
}
