import ChatProtocol

// MARK: - Moderation
//
// Room moderation (protocol version 4, docs/PROTOCOL.md "Version 4"): ops and voiced members,
// modes, kicks, invitations and bans of a room; server operators (`--admin-account`), server
// bans and kills.
//
// A room's moderation lives in the room (`ChatRoom.moderation`) while it has members. A
// registered room's settings — founder, modes, bans, roles by account — also live in
// `ModerationDirectory.registered`, so they outlast its members; with a `ModerationStore` they
// outlast the process too: every change is handed to the server as a `ModerationWrite`, which
// it writes off the event loop (the changes are rare, and nobody waits for them).
//
// The rules that decide whether a client may enter a room sit with the other join rules
// (`joinRefusal` in ChatCore.swift), and those that decide whether it may speak or set the
// topic with the other room-event rules (`roomEventRefusal`), so every mode applies them. A
// clustered core keeps no moderation of its own: a room's is in Redis, checked and changed by the
// append script (ChatCore+ClusterModeration.swift).

/// The moderation the core keeps beyond the rooms in memory: registered rooms' settings, the
/// server's bans, and the writes for the store.
struct ModerationDirectory: Sendable {
    /// Registered rooms' settings, by room name, whether or not the room has members.
    var registered: [String: RoomSettings] = [:]
    /// The server's bans, oldest first; at most `ModerationLimits.maxServerBans`.
    var serverBans: [Ban] = []
    /// Changes for the store, oldest first (`ChatCore.takeModerationWrites()`).
    var writes: [ModerationWrite] = []
    /// Keys given with a `joinWithKey` whose room is being read from the store, by joiner: the
    /// join is checked again when the room is in memory.
    var pendingKeys: [ClientID: String] = [:]
    /// The roles members held in unregistered rooms when the server last stopped, by room and
    /// holder (`RememberedRole.holder`): each is given back to its holder when it rejoins, and
    /// meanwhile nobody takes op by rejoining first. Forgotten at `rememberedUntil`, or for a room
    /// once it empties.
    var remembered: [String: [String: RoomRole]] = [:]
    /// When `remembered` is forgotten (uptime, ms); nil until the first tick after loading.
    var rememberedUntil: UInt64?

    /// The server ban of `room`, if the room is closed.
    func closure(of room: String) -> Ban? {
        serverBans.first { $0.mask == .room(room) }
    }
}

extension ChatCore {
    /// Kept of a ban's reason, in bytes: bans are kept for good and listed in one frame.
    static let maxBanReasonBytes = 200
    /// The longest room key, in bytes.
    static let maxRoomKeyBytes = 64

    // MARK: Requests

    /// Serves `frame` if it is a moderation request from `id`, known as `nick`; returns whether
    /// it was one.
    mutating func moderationRequest(
        _ frame: Frame, size: Int, from id: ClientID, nick: String, at now: ServerTime, into actions: inout [ChatAction]
    ) -> Bool {
        switch frame {
        case .kick(let room, let target, let reason):
            kick(target, from: room, by: id, nick: nick, reason: reason, at: now, into: &actions)
        case .setMode(let room, let mode, let on, let argument):
            setMode(mode, on: on, argument: argument, in: room, by: id, nick: nick, at: now, into: &actions)
        case .invite(let room, let target):
            invite(target, to: room, by: id, nick: nick, at: now, into: &actions)
        case .listBans(let room):
            listBans(of: room, for: id, into: &actions)
        case .serverBan(let on, let mask, let reason):
            serverBan(mask, on: on, reason: reason, by: id, nick: nick, at: now, into: &actions)
        case .kill(let target, let reason):
            kill(target, reason: reason, by: id, nick: nick, at: now, into: &actions)
        case .joinWithKey(let room, let key):
            join(room, id: id, nick: nick, size: size, key: key, at: now, into: &actions)
        default:
            return false
        }
        return true
    }

    /// Whether `id` is logged in as an account the operator named a server operator.
    func isServerOperator(_ id: ClientID) -> Bool {
        guard let account = clients[id.slot]?.account else { return false }
        return limits.accounts.adminAccounts.contains(account)
    }

    /// `id` as `name`'s rules see it (`RoomRules`): its nick, account and address, and its place
    /// in the room; nil for a client gone or without a nick.
    func actor(_ id: ClientID, in name: String) -> RoomActor? {
        guard let client = clients[id.slot], let nick = client.nick else { return nil }
        var actor = RoomActor(
            nick: nick, account: client.account, address: client.address, isServerOperator: isServerOperator(id),
            isMember: client.rooms.contains(name))
        if let index = rooms.index(forKey: name) {
            actor.isOp = rooms.values[index].moderation.ops.contains(id)
            actor.isVoiced = rooms.values[index].moderation.voices.contains(id)
        }
        return actor
    }

    /// The member of `name` called `nick` (in any letter case), as the room's rules see it; nil
    /// when nobody by that nick is online (`isMember` says whether it is in the room).
    private func actor(named nick: String, in name: String) -> (id: ClientID, actor: RoomActor)? {
        guard let id = nicks[ChatName.nickKey(nick)], let actor = actor(id, in: name) else { return nil }
        return (id, actor)
    }

    /// Why `id` may not act as an op in `name`, or nil when it may (`RoomRules.operating`).
    func operatorRefusal(in name: String, for id: ClientID) -> RoomRefusal? {
        guard let actor = actor(id, in: name) else { return (.notInRoom, "you are not in #\(name)") }
        return RoomRules.operating(actor, in: name, hasMembers: rooms[name] != nil)
    }

    private mutating func kick(
        _ target: String, from name: String, by id: ClientID, nick: String, reason: String, at now: ServerTime,
        into actions: inout [ChatAction]
    ) {
        if let refusal = operatorRefusal(in: name, for: id) {
            refuse(.kick, refusal.code, refusal.reason, to: id, into: &actions)
            return
        }
        let named = actor(named: target, in: name)
        if let kicker = actor(id, in: name), let settings = rooms[name]?.moderation.settings,
            let refusal = RoomRules.kicking(named?.actor, named: target, by: kicker, in: name, settings: settings)
        {
            refuse(.kick, refusal.code, refusal.reason, to: id, into: &actions)
            return
        }
        guard let targetID = named?.id else { return }
        remove(targetID, from: name, by: nick, reason: reason, at: now, into: &actions)
    }

    /// Takes `id` out of `name` as kicked by `by`: the room's next event, `kicked` to version 4
    /// members and `left` to older ones, is the last of the room `id` receives, and from now on
    /// its requests for the room are answered `notInRoom`.
    mutating func remove(_ id: ClientID, from name: String, by: String, reason: String, at now: ServerTime, into actions: inout [ChatAction]) {
        guard let nick = nick(of: id), rooms[name] != nil else { return }
        clients[id.slot]?.rooms.removeAll { $0 == name }
        let kick = Frame.kicked(room: name, seq: 0, time: 0, nick: nick, by: by, reason: reason)
        appendRoomEvent(kick, in: name, from: id, size: 0, departure: .afterHearingIt, at: now, into: &actions)
    }

    /// Announces the change of `mode` in `name` by `setter`, called `by`, as the room's next
    /// event, to its version 4 members (older ones do not know the frame; their `seq`s skip it).
    private mutating func announceMode(
        _ mode: RoomMode, on: Bool, argument: String, in name: String, by: String, setter: ClientID, except: ClientID? = nil,
        at now: ServerTime, into actions: inout [ChatAction]
    ) {
        let event = Frame.modeChanged(room: name, seq: 0, time: 0, by: by, mode: mode, on: on, argument: argument)
        appendRoomEvent(event, in: name, from: setter, size: 0, except: except, at: now, into: &actions)
    }

    private mutating func setMode(
        _ mode: RoomMode, on: Bool, argument: String, in name: String, by id: ClientID, nick: String, at now: ServerTime,
        into actions: inout [ChatAction]
    ) {
        if let refusal = operatorRefusal(in: name, for: id) {
            refuse(.setMode, refusal.code, refusal.reason, to: id, into: &actions)
            return
        }
        guard let parsed = checkedModeArgument(mode, on: on, argument: argument, for: id, into: &actions),
            let setter = actor(id, in: name), var moderation = rooms[name]?.moderation
        else { return }
        let target = mode == .op || mode == .voice ? actor(named: argument, in: name) : nil
        let change = RoomRules.modeChange(
            mode, on: on, argument: parsed, target: target?.actor, by: setter, in: name, settings: moderation.settings,
            wallMillis: now.wallMillis, registrationLimit: registrationLimit(for:), accountName: accounts.name(of:))
        let outcome: ModeChangeOutcome
        switch change {
        case .refused(let refusal):
            refuse(.setMode, refusal.code, refusal.reason, to: id, into: &actions)
            return
        case .changed(let changed):
            outcome = changed
        }
        let wasRegistered = moderation.settings.founder != nil
        moderation.settings = outcome.settings
        if let (role, grant) = outcome.role, let targetID = target?.id {
            switch (role, grant) {
            case (.op, true): moderation.ops.insert(targetID)
            case (.op, false): moderation.ops.remove(targetID)
            case (.voice, true): moderation.voices.insert(targetID)
            case (.voice, false): moderation.voices.remove(targetID)
            }
        }
        withRoom(name) { $0.moderation = moderation }
        if moderation.settings.founder != nil || wasRegistered { settingsChanged(of: name) }
        announceMode(mode, on: on, argument: outcome.announced, in: name, by: nick, setter: id, at: now, into: &actions)
        if let banKicks = outcome.banKicks {
            kickMembers(of: name, matching: banKicks, reason: parsed.reason, by: nick, at: now, into: &actions)
        }
    }

    /// Why `account` may not register another room — the server or the account holds as many
    /// as allowed — or nil when it may.
    private func registrationLimit(for account: String) -> String? {
        if moderation.registered.count >= ModerationLimits.maxRegisteredRooms {
            return "the server holds \(ModerationLimits.maxRegisteredRooms) registered rooms, the most allowed"
        }
        let own = moderation.registered.values.lazy.filter { $0.founder == account }.count
        if own >= ModerationLimits.maxRegisteredRoomsPerAccount {
            return "your account has registered \(ModerationLimits.maxRegisteredRoomsPerAccount) rooms, the most allowed"
        }
        return nil
    }

    /// The reason of a kick that a ban of `mask` for `reason` makes.
    static func banKickReason(_ mask: BanMask, reason: String) -> String {
        "banned (\(mask.canonical))" + (reason.isEmpty ? "" : ": \(reason)")
    }

    /// Kicks the members of `name` that `mask` matches and who are not ops, for `reason`.
    private mutating func kickMembers(
        of name: String, matching mask: BanMask, reason: String, by: String, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        guard let room = rooms[name] else { return }
        for member in room.members where !room.moderation.ops.contains(member) {
            guard let client = clients[member.slot], mask.matches(accountKey: client.account, nick: client.nick, address: client.address)
            else { continue }
            remove(member, from: name, by: by, reason: Self.banKickReason(mask, reason: reason), at: now, into: &actions)
        }
    }

    /// A registered room's settings changed (or it stopped being registered): the directory and
    /// the store follow.
    private mutating func settingsChanged(of name: String) {
        let settings = rooms[name]?.moderation.settings
        if let settings, settings.founder != nil {
            moderation.registered[name] = settings
            moderation.writes.append(.room(name, settings.record(name: name)))
        } else {
            moderation.registered[name] = nil
            moderation.writes.append(.room(name, nil))
        }
    }

    private mutating func invite(_ target: String, to name: String, by id: ClientID, nick: String, at now: ServerTime, into actions: inout [ChatAction]) {
        let named = actor(named: target, in: name)
        if let refusal = operatorRefusal(in: name, for: id) ?? RoomRules.inviting(named?.actor, named: target, in: name) {
            refuse(.invite, refusal.code, refusal.reason, to: id, into: &actions)
            return
        }
        guard let (targetID, invitee) = named else { return }
        let targetNick = invitee.nick
        let key = ChatName.nickKey(targetNick)
        let expires = now.uptimeMillis + ModerationLimits.invitationLifetime
        withRoom(name) { room in
            room.moderation.invitations.removeAll { $0.nickKey == key || $0.expires <= now.uptimeMillis }
            if room.moderation.invitations.count >= ModerationLimits.maxInvitations { room.moderation.invitations.removeFirst() }
            room.moderation.invitations.append(Invitation(nickKey: key, expires: expires))
        }
        let frame = Frame.invited(room: name, nick: targetNick, by: nick)
        actions.append(.broadcast(frame, to: targetID == id ? [id] : [id, targetID]))
    }

    func listBans(of name: String, for id: ClientID, into actions: inout [ChatAction]) {
        if name.isEmpty {
            guard admitsServerOperator(id, for: .listBans, "lists the server's bans", into: &actions) else { return }
            actions.append(.send(.banList(room: "", entries: moderation.serverBans.map(\.entry)), to: id))
            return
        }
        let isMember = isMember(id, of: name)
        guard isMember || isServerOperator(id), let room = rooms[name] else {
            refuse(.listBans, .notInRoom, "you are not in #\(name)", to: id, into: &actions)
            return
        }
        actions.append(.send(.banList(room: name, entries: room.moderation.settings.bans.map(\.entry)), to: id))
    }

    // MARK: Server operators

    /// Whether `id` is a server operator; if not, its `request` is refused `notAdmin` ("only a
    /// server operator `what`"). Every mode asks it first for every server operator's request.
    func admitsServerOperator(_ id: ClientID, for request: FrameType, _ what: String, into actions: inout [ChatAction]) -> Bool {
        guard isServerOperator(id) else {
            refuse(request, .notAdmin, "only a server operator \(what)", to: id, into: &actions)
            return false
        }
        return true
    }

    /// The reason a `kill` by `nick` for `reason` ends a session with.
    static func killReason(by nick: String, _ reason: String) -> String {
        "killed by \(nick)" + (reason.isEmpty ? "" : ": \(reason)")
    }

    /// The reason of the kicks that close `room` for `reason`.
    static func closureReason(of room: String, _ reason: String) -> String {
        "#\(room) is closed: \(reason)"
    }

    /// Ends the sessions that `mask` matches, other than those `spared`, as banned from the
    /// server for `reason`; returns how many.
    mutating func endSessions(
        matching mask: BanMask, reason: String, sparing spared: Set<ClientID>, at now: ServerTime, into actions: inout [ChatAction]
    ) -> Int {
        var ended = 0
        for slot in clients.indices {
            let id = ClientID(slot)
            guard let client = clients[slot], client.nick != nil, !spared.contains(id),
                mask.matches(accountKey: client.account, nick: client.nick, address: client.address)
            else { continue }
            disconnect(id, Disconnection(code: .banned, frameType: .serverBan, reason: Self.bannedReason(reason)), at: now, into: &actions)
            ended += 1
        }
        return ended
    }

    /// The mask of `id`'s `serverBan` of `text`, or nil once `id` is refused: it is no server
    /// operator, or `text` no mask. Every mode asks it first.
    mutating func serverBanMask(_ text: String, by id: ClientID, into actions: inout [ChatAction]) -> BanMask? {
        guard admitsServerOperator(id, for: .serverBan, "bans from the server", into: &actions) else { return nil }
        do {
            return try BanMask(parsing: text, allowsRoom: true)
        } catch {
            refuse(.serverBan, .invalidArgument, error.reason, to: id, into: &actions)
            return nil
        }
    }

    private mutating func serverBan(
        _ text: String, on: Bool, reason: String, by id: ClientID, nick: String, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        guard let mask = serverBanMask(text, by: id, into: &actions) else { return }
        let existing = moderation.serverBans.firstIndex { $0.mask == mask }
        guard on else {
            if let existing { moderation.serverBans.remove(at: existing) }
            moderation.writes.append(.serverBans(moderation.serverBans.map(\.entry)))
            actions.append(.send(.done(request: .serverBan, text: "lifted the ban of \(mask.canonical)"), to: id))
            return
        }
        if existing == nil {
            guard moderation.serverBans.count < ModerationLimits.maxServerBans else {
                refuse(.serverBan, .listFull, "the server holds \(ModerationLimits.maxServerBans) bans, the most allowed", to: id, into: &actions)
                return
            }
            let entry = BanEntry(
                mask: mask.canonical, setBy: nick, time: now.wallMillis, reason: Self.prefix(of: reason, bytes: Self.maxBanReasonBytes))
            moderation.serverBans.append(Ban(mask: mask, entry: entry))
            moderation.writes.append(.serverBans(moderation.serverBans.map(\.entry)))
        }
        var ended = 0
        if case .room(let name) = mask, let members = rooms[name]?.members {
            for member in members { remove(member, from: name, by: nick, reason: Self.closureReason(of: name, reason), at: now, into: &actions) }
            ended = members.count
        } else {
            ended = endSessions(matching: mask, reason: reason, sparing: [id], at: now, into: &actions)
        }
        let what = if case .room = mask { "kicked \(ended) members" } else { "ended \(ended) sessions" }
        actions.append(.send(.done(request: .serverBan, text: "banned \(mask.canonical); \(what)"), to: id))
    }

    private mutating func kill(_ target: String, reason: String, by id: ClientID, nick: String, at now: ServerTime, into actions: inout [ChatAction]) {
        guard admitsServerOperator(id, for: .kill, "kills a session", into: &actions) else { return }
        guard let targetID = nicks[ChatName.nickKey(target)], let targetNick = self.nick(of: targetID) else {
            refuse(.kill, .noSuchNick, "no one is called \(target)", to: id, into: &actions)
            return
        }
        let text = Self.killReason(by: nick, reason)
        disconnect(targetID, Disconnection(code: .killed, frameType: .kill, reason: text), at: now, into: &actions)
        actions.append(.send(.done(request: .kill, text: "killed \(targetNick)"), to: id))
    }

    /// The reason a banned session or `hello` is refused with.
    static func bannedReason(_ reason: String) -> String {
        "you are banned from this server" + (reason.isEmpty ? "" : ": \(reason)")
    }

    /// The server ban that matches a session with these traits, if any.
    func serverBan(matching accountKey: String?, nick: String?, address: String) -> Ban? {
        moderation.serverBans.first { $0.mask.matches(accountKey: accountKey, nick: nick, address: address) }
    }

    /// The fatal refusal of a connection, `hello`, login or nick change that a server ban
    /// matches, or nil.
    func serverBanRefusal(accountKey: String?, nick: String?, address: String, request: FrameType) -> Disconnection? {
        guard let ban = serverBan(matching: accountKey, nick: nick, address: address) else { return nil }
        return Disconnection(code: .banned, frameType: request, reason: Self.bannedReason(ban.entry.reason))
    }

    /// Ends `id`'s session if its account, nick or address is banned from the server (after a
    /// login or a nick change); returns whether it did.
    mutating func endIfServerBanned(_ id: ClientID, nick: String?, request: FrameType, at now: ServerTime, into actions: inout [ChatAction]) -> Bool {
        guard let client = clients[id.slot],
            let refusal = serverBanRefusal(accountKey: client.account, nick: nick ?? client.nick, address: client.address, request: request)
        else { return false }
        disconnect(id, refusal, at: now, into: &actions)
        return true
    }

    /// The account `key` is gone, and its nick anyone's to register: the rooms it founded stop
    /// being registered, and the roles given to it are forgotten, so whoever registers the nick
    /// next inherits neither.
    mutating func accountDropped(_ key: String) {
        let touched = moderation.registered.filter { $0.value.founder == key || $0.value.accountRoles[key] != nil }.keys
        for name in touched {
            if rooms[name] != nil {
                withRoom(name) { room in
                    if room.moderation.settings.founder == key {
                        room.moderation.settings.founder = nil
                        room.moderation.settings.accountRoles = [:]
                    }
                    room.moderation.settings.accountRoles[key] = nil
                }
                settingsChanged(of: name)
            } else if moderation.registered[name]!.founder == key {
                moderation.registered[name] = nil
                moderation.writes.append(.room(name, nil))
            } else {
                moderation.registered[name]!.accountRoles[key] = nil
                moderation.writes.append(.room(name, moderation.registered[name]!.record(name: name)))
            }
        }
    }

    // MARK: Joining

    /// Why `id` may not enter `name` by moderation — a ban, the room's closure, invite-only, a
    /// wrong or missing key, the member limit — or nil when it may. `key`: given with
    /// `joinWithKey`. Part of `joinRefusal`: one rule for every mode.
    func moderationJoinRefusal(of name: String, for id: ClientID, key: String?, at now: ServerTime) -> (code: ErrorCode, reason: String)? {
        // A client gone joins nothing.
        guard clients[id.slot] != nil else { return (.notInRoom, "the connection is gone") }
        if let closure = moderation.closure(of: name) {
            return (.banned, "#\(name) is closed" + (closure.entry.reason.isEmpty ? "" : ": \(closure.entry.reason)"))
        }
        guard let joiner = actor(id, in: name) else { return (.notInRoom, "the connection is gone") }
        let inMemory = rooms.index(forKey: name)
        let nickKey = ChatName.nickKey(joiner.nick)
        let invited = inMemory.map { rooms.values[$0].moderation.invitations.contains { $0.nickKey == nickKey && $0.expires > now.uptimeMillis } } ?? false
        let throttle = key == nil ? nil : keyGuessRefusal(for: id, room: name, at: now).map { (ErrorCode.throttled, Self.guessRefusalReason($0, room: name)) }
        return RoomRules.admission(
            of: joiner, to: name, settings: inMemory.map { rooms.values[$0].moderation.settings } ?? moderation.registered[name],
            memberCount: inMemory.map { rooms.values[$0].members.count } ?? 0, invited: invited, key: key, keyThrottle: throttle)
    }

    /// `id` enters `name`, which is in memory and whose rules let it in: uses its invitation,
    /// and gives it the roles it has there — op for whoever creates an unregistered room (unless
    /// the room remembers roles from before a restart: then only the role `id` held there), the
    /// founder's and the roles given to its account in a registered one. Returns whether it took
    /// back a role it held before a restart.
    @discardableResult
    mutating func takeRoles(in name: String, for id: ClientID) -> Bool {
        guard let joiner = actor(id, in: name) else { return false }
        let nickKey = ChatName.nickKey(joiner.nick)
        let remembers = moderation.remembered[name] != nil && rooms[name]?.moderation.settings.founder == nil
        let heldBefore = remembers ? takeRememberedRole(in: name, account: joiner.account, nick: joiner.nick) : nil
        withRoom(name) { room in
            room.moderation.invitations.removeAll { $0.nickKey == nickKey }
            switch heldBefore {
            case .op?: room.moderation.ops.insert(id)
            case .voice?: room.moderation.voices.insert(id)
            case nil:
                // A restart must not hand the room to whoever rejoins first.
                let roles = RoomRules.rolesOnJoining(joiner, settings: room.moderation.settings, creates: room.members.isEmpty && !remembers)
                if roles.op { room.moderation.ops.insert(id) }
                if roles.voice { room.moderation.voices.insert(id) }
            }
        }
        return heldBefore != nil
    }

    /// Who held a role, as a restart remembers it: the account of a member logged in, the nick of
    /// a guest (whoever holds that nick when it rejoins takes it back: a guest's is only as good
    /// as its hold on the nick; a registered room keeps roles by account for good).
    static func roleHolder(account: String?, nick: String?) -> String? {
        if let account { return "account:\(account)" }
        return nick.map { "nick:\(ChatName.nickKey($0))" }
    }

    /// The role `name` remembers from before a restart for a member logged in as `account` or
    /// known as `nick`, taken out of what it remembers; nil for none.
    private mutating func takeRememberedRole(in name: String, account: String?, nick: String?) -> RoomRole? {
        let holders = [account.map { "account:\($0)" }, nick.map { "nick:\(ChatName.nickKey($0))" }].compactMap { $0 }
        guard let holder = holders.first(where: { moderation.remembered[name]?[$0] != nil }),
            let role = moderation.remembered[name]?.removeValue(forKey: holder)
        else { return nil }
        if moderation.remembered[name]?.isEmpty == true { moderation.remembered[name] = nil }
        return role
    }

    /// The roles members hold in unregistered rooms now, queued as a moderation write for the
    /// store to keep across the restart that follows (`ChatServer.shutdown`): each member that
    /// rejoins takes its own back (`takeRoles`). A registered room's roles are its accounts'
    /// already.
    public mutating func rememberRolesForRestart() {
        var roles: [RememberedRole] = []
        for (name, room) in rooms where room.moderation.settings.founder == nil {
            for id in room.members {
                guard let client = clients[id.slot], let holder = Self.roleHolder(account: client.account, nick: client.nick) else {
                    continue
                }
                if room.moderation.ops.contains(id) {
                    roles.append(RememberedRole(room: name, holder: holder, role: RoomRole.op.rawValue))
                } else if room.moderation.voices.contains(id) {
                    roles.append(RememberedRole(room: name, holder: holder, role: RoomRole.voice.rawValue))
                }
            }
        }
        moderation.writes.append(.rememberedRoles(roles))
    }

    /// Forgets the roles remembered from before a restart once `rememberedRoleGrace` has passed
    /// since the first tick: holders that did not come back by then lose them.
    mutating func forgetRememberedRolesIfDue(at now: ServerTime) {
        guard !moderation.remembered.isEmpty else { return }
        guard let until = moderation.rememberedUntil else {
            moderation.rememberedUntil = now.uptimeMillis + Self.rememberedRoleGrace
            return
        }
        if now.uptimeMillis >= until { moderation.remembered.removeAll() }
    }

    /// How long after a start the roles held before it wait for their holders, in milliseconds.
    static let rememberedRoleGrace: UInt64 = 600_000

    // MARK: Who a member is

    /// The ban of a room with `settings` that its member `id` meets under `nick` and its account
    /// and address as they are now (`RoomRules.memberBan`; `isOp`: it is an op there). The one
    /// rule a member's login and nick change meet in each of its rooms, in every mode, as a
    /// joiner meets `RoomRules.admission`.
    func memberBan(of settings: RoomSettings, isOp: Bool, for id: ClientID, nick: String) -> Ban? {
        guard let client = clients[id.slot] else { return nil }
        let member = RoomActor(
            nick: nick, account: client.account, address: client.address, isServerOperator: isServerOperator(id), isMember: true, isOp: isOp)
        return RoomRules.memberBan(member, settings: settings)
    }

    /// `memberBan` in `name`, a room in memory here (none on a cluster node: `clusterStandingsRead`
    /// applies it to what Redis holds).
    func memberBan(in name: String, for id: ClientID, nick: String) -> Ban? {
        guard let room = rooms[name] else { return nil }
        return memberBan(of: room.moderation.settings, isOp: room.moderation.ops.contains(id), for: id, nick: nick)
    }

    /// Why a nick change to `nick` is refused where a room's ban matches the member under it.
    static func bannedNickReason(in name: String, as nick: String, _ ban: Ban) -> String {
        "you are banned from #\(name) as \(nick) (\(ban.entry.mask)); leave it to take that nick"
    }

    /// Why `id` may not change to `nick` while a member of its rooms: a ban of one of them matches
    /// it under that nick (IRC's ERR_BANNICKCHANGE) — or nil. A ban is evaded no more by joining
    /// under one nick and taking another.
    func bannedNickRefusal(of id: ClientID, as nick: String) -> String? {
        for name in clients[id.slot]?.rooms ?? [] {
            if let ban = memberBan(in: name, for: id, nick: nick) { return Self.bannedNickReason(in: name, as: nick, ban) }
        }
        return nil
    }

    /// `id` logged in while a member of rooms: who it is changed, so each room judges it again —
    /// a ban that matches it now (its account's, say) kicks it with the ban's reason, and a
    /// registered room gives it the roles its account has there, announced to every member.
    mutating func loggedInAsMember(_ id: ClientID, at now: ServerTime, into actions: inout [ChatAction]) {
        guard let client = clients[id.slot], let nick = client.nick else { return }
        for name in client.rooms {
            if let ban = memberBan(in: name, for: id, nick: nick) {
                remove(id, from: name, by: ban.entry.setBy, reason: Self.banKickReason(ban.mask, reason: ban.entry.reason), at: now, into: &actions)
                continue
            }
            guard let settings = rooms[name]?.moderation.settings,
                let role = RoomRules.accountRole(client.account, in: settings)
                    ?? (settings.founder == nil ? takeRememberedRole(in: name, account: client.account, nick: nil) : nil)
            else { continue }
            let granted: RoomMode? = withRoom(name) { room in
                switch role {
                case .op: room.moderation.ops.insert(id).inserted ? RoomMode.op : nil
                case .voice: room.moderation.voices.insert(id).inserted ? RoomMode.voice : nil
                }
            } ?? nil
            if let granted { announceMode(granted, on: true, argument: nick, in: name, by: nick, setter: id, at: now, into: &actions) }
        }
    }

    /// Tells `name`'s other version 4 members the roles `id` (called `nick`) took by its account
    /// as it joined a registered room, one `modeChanged` by itself each: the joiner learns them
    /// from its `roomModes`, the others would otherwise only from a `who`. (The creator of an
    /// unregistered room, its op, is alone in it.)
    /// `rolesGivenBack`: `id` took back a role it held before a restart (`takeRoles`); the others
    /// are told too, if there are any.
    mutating func announceRolesTaken(
        in name: String, by id: ClientID, nick: String, rolesGivenBack: Bool = false, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        guard let room = rooms[name], room.moderation.settings.founder != nil || (rolesGivenBack && room.members.count > 1) else { return }
        let taken = [(RoomMode.op, room.moderation.ops.contains(id)), (RoomMode.voice, room.moderation.voices.contains(id))]
        for (mode, holds) in taken where holds {
            announceMode(mode, on: true, argument: nick, in: name, by: nick, setter: id, except: id, at: now, into: &actions)
        }
    }

    /// `name`'s settings and roles for a version 4 client (after `members`); the key only for
    /// `viewer` a member or a server operator (nil: shown), since `who` answers anyone and the
    /// key would otherwise be a free pass past `badRoomKey`.
    func roomModes(of name: String, for viewer: ClientID? = nil) -> RoomModes? {
        guard let room = rooms[name] else { return nil }
        var settings = room.moderation.settings
        if let viewer, !room.members.contains(viewer), !isServerOperator(viewer) { settings.key = nil }
        let ops = room.members.filter { room.moderation.ops.contains($0) }.compactMap { nick(of: $0) }
        let voices = room.members.filter { room.moderation.voices.contains($0) }.compactMap { nick(of: $0) }
        return RoomModes(
            founder: settings.founder.map { accounts.name(of: $0) } ?? "", inviteOnly: settings.inviteOnly,
            moderated: settings.moderated, topicLock: settings.topicLock, key: settings.key ?? "",
            memberLimit: UInt32(settings.memberLimit), ops: ops, voices: voices)
    }

    /// A new room in memory takes its registered settings, if any.
    mutating func applyRegisteredSettings(to name: String) {
        guard let settings = moderation.registered[name] else { return }
        withRoom(name) { $0.moderation = RoomModeration(settings: settings) }
    }

    /// An unregistered room that emptied forgets its modes and bans; a registered one keeps
    /// its settings (the directory has them) and forgets its invitations.
    mutating func resetModeration(of name: String) {
        moderation.remembered[name] = nil
        let settings = moderation.registered[name] ?? RoomSettings()
        withRoom(name) { $0.moderation = RoomModeration(settings: settings) }
    }

    // MARK: Store

    /// Loads what the moderation store kept: registered rooms and server bans. Called once,
    /// before the server serves anyone; records that no longer parse are skipped.
    public mutating func loadModeration(_ snapshot: ModerationSnapshot) {
        for record in snapshot.rooms {
            guard let settings = RoomSettings(record: record) else { continue }
            moderation.registered[record.name] = settings
        }
        moderation.serverBans = snapshot.serverBans.compactMap { stored in
            guard let mask = try? BanMask(parsing: stored.mask, allowsRoom: true) else { return nil }
            return Ban(mask: mask, entry: BanEntry(mask: mask.canonical, setBy: stored.setBy, time: stored.time, reason: stored.reason))
        }
        for remembered in snapshot.rememberedRoles where moderation.registered[remembered.room] == nil {
            guard let role = RoomRole(rawValue: remembered.role) else { continue }
            moderation.remembered[remembered.room, default: [:]][remembered.holder] = role
        }
        // Held in memory from now on: a crash later must not bring back roles of this stop.
        if !snapshot.rememberedRoles.isEmpty { moderation.writes.append(.rememberedRoles([])) }
    }

    /// The moderation changes to write since the last call, oldest first; the server hands
    /// them to its `ModerationStore`.
    public mutating func takeModerationWrites() -> [ModerationWrite] {
        defer { moderation.writes.removeAll() }
        return moderation.writes
    }

    /// The digits of `text` as a number, or nil if it is not one (no sign, no spaces, at most 7 digits).
    static func decimal(_ text: String) -> Int? {
        guard !text.isEmpty, text.utf8.count <= 7, text.utf8.allSatisfy({ $0 &- 0x30 < 10 }) else { return nil }
        return Int(text)
    }
}

extension RoomSettings {
    /// The settings as the store keeps them.
    func record(name: String) -> RegisteredRoomRecord {
        RegisteredRoomRecord(
            name: name, founder: founder ?? "", inviteOnly: inviteOnly, moderated: moderated, topicLock: topicLock,
            key: key ?? "", memberLimit: memberLimit,
            bans: bans.map(\.entry),
            roles: accountRoles.mapValues(\.rawValue))
    }

    /// The settings of a stored room; nil if it has no founder.
    init?(record: RegisteredRoomRecord) {
        guard !record.founder.isEmpty else { return nil }
        founder = record.founder
        inviteOnly = record.inviteOnly
        moderated = record.moderated
        topicLock = record.topicLock
        key = record.key.isEmpty ? nil : record.key
        memberLimit = record.memberLimit
        bans = record.bans.compactMap { stored in
            guard let mask = try? BanMask(parsing: stored.mask, allowsRoom: false) else { return nil }
            return Ban(mask: mask, entry: BanEntry(mask: mask.canonical, setBy: stored.setBy, time: stored.time, reason: stored.reason))
        }
        accountRoles = record.roles.compactMapValues(RoomRole.init(rawValue:))
    }
}
