import ChatProtocol

// MARK: - Room moderation (protocol version 4)
//
// The session's side of moderation: moderation commands become `kick`, `setMode`, `invite`,
// `listBans`, `serverBan`, `kill` and `joinWithKey`; `kicked`, `modeChanged`, `invited`,
// `roomModes`, `banList` and `done` update what the session knows and say what happened. Each
// room's roles (`@` op, `+` voiced) are kept from its `roomModes` and the events after it, and
// shown in member lists. A room we were kicked from, or whose join was refused by a ban, an
// invite-only mode, a key or a member limit, is not rejoined by itself — not after a reconnect
// either — until the user joins it again (docs/PROTOCOL.md, "Version 4", conformance 2–4).

/// What the session knows of rooms' moderation.
struct ModerationState: Sendable {
    /// Each room's settings and roles, from its last `roomModes` and the events since.
    var modes: [String: RoomModes] = [:]
    /// The key to rejoin a room with: typed with `/join #room KEY`, or learnt from its modes.
    var keys: [String: String] = [:]
    /// Rooms we must not rejoin by ourselves, with why (`kicked by alice`).
    var removed: [String: String] = [:]
    /// Rooms whose member list was shown before their roles were known (a first join): their
    /// next `roomModes` line names the ops and voiced members.
    var shownWithoutRoles: Set<String> = []
    /// Rooms whose `roomModes` comes with a quiet rejoin, and so is kept, not shown.
    var quietModes: Set<String> = []
}

extension ClientSession {
    /// Why we are out of `room` for this session (`kicked by alice`), when we were kicked from
    /// it or refused entry: it is not rejoined until the user joins it again. Nil otherwise.
    public func removal(from room: String) -> String? { moderation.removed[room] }

    /// `room`'s settings and roles as last known, or nil (not in it, or a server before version 4).
    public func modes(of room: String) -> RoomModes? { moderation.modes[room] }

    /// `nick` as a member list shows it in `room`: `@nick` for an op, `+nick` when voiced.
    public func decorated(_ nick: String, in room: String) -> String {
        guard let modes = moderation.modes[room] else { return nick }
        let key = ChatName.nickKey(nick)
        if modes.ops.contains(where: { ChatName.nickKey($0) == key }) { return "@" + nick }
        if modes.voices.contains(where: { ChatName.nickKey($0) == key }) { return "+" + nick }
        return nick
    }

    /// Whether a fatal error ends the session for good: reconnecting would only be refused
    /// again (`killed`, a server `banned`) or undo someone else's doing (`ghosted`), so the
    /// driver stays offline until the user types `/reconnect`.
    public static func isFinal(_ frame: Frame) -> Bool {
        guard case .error(let code, true, _, _) = frame else { return false }
        return code == .killed || code == .banned || code == .ghosted
    }

    /// The frame that enters `room` as the session would rejoin it: with its key when one is known.
    func joinFrame(for room: String) -> Frame {
        if version >= 4, let key = moderation.keys[room] { return .joinWithKey(room: room, key: key) }
        return .join(room: room)
    }

    // MARK: Commands

    /// What to do for a moderation command.
    mutating func performModeration(_ command: ModerationCommand) -> [SessionAction] {
        guard isConnected else { return [error("not connected; moderation needs the server")] }
        guard version >= 4 else { return [error("this server speaks protocol version \(version), which has no room moderation")] }
        switch command {
        case .kick(let other, let reason):
            guard let room = currentRoom else { return [noRoomForModeration()] }
            return [.send([.kick(room: room, nick: other, reason: reason)])]
        case .ban(let mask, let reason):
            guard let room = currentRoom else { return [noRoomForModeration()] }
            // A ban's reason follows its mask in the argument (docs/PROTOCOL.md, "Version 4");
            // the server's kick of the members it matches carries it.
            let argument = reason.isEmpty ? mask : "\(mask) \(reason)"
            return [.send([.setMode(room: room, mode: .ban, on: true, argument: argument)])]
        case .unban(let mask):
            guard let room = currentRoom else { return [noRoomForModeration()] }
            return [.send([.setMode(room: room, mode: .ban, on: false, argument: mask)])]
        case .listBans:
            guard let room = currentRoom else { return [noRoomForModeration()] }
            return [.send([.listBans(room: room)])]
        case .invite(let other, let room):
            guard let room = room ?? currentRoom else { return [noRoomForModeration()] }
            return [.send([.invite(room: room, nick: other)])]
        case .mode(let room, let changes):
            guard let room = room ?? currentRoom else { return [noRoomForModeration()] }
            guard !changes.isEmpty else { return [showModes(of: room)] }
            return [.send(changes.map { .setMode(room: room, mode: $0.mode, on: $0.on, argument: $0.argument) })]
        case .kill(let other, let reason):
            return [.send([.kill(nick: other, reason: reason)])]
        case .serverBan(let on, let mask, let reason):
            return [.send([.serverBan(on: on, mask: mask, reason: reason)])]
        case .listServerBans:
            return [.send([.listBans(room: "")])]
        }
    }

    private func noRoomForModeration() -> SessionAction {
        error("you are not in a room; go to one (or name it: /mode #room, /invite nick #room)")
    }

    /// Whether `other` is in `room`'s member list as we know it.
    func isMember(_ other: String, of room: String) -> Bool {
        members(of: room).contains { ChatName.nickKey($0) == ChatName.nickKey(other) }
    }

    /// `/mode #room` without changes: the room's modes as we know them.
    private func showModes(of room: String) -> SessionAction {
        guard let modes = moderation.modes[room] else {
            return error("the modes of #\(room) are not known (you are not in it, or the server is older than version 4)")
        }
        return .show(.moderation(room: room, time: clock(), text: Self.describe(modes, of: room, withRoles: true)))
    }

    // MARK: Frames from the server

    /// What to do for a moderation frame from the server.
    mutating func moderationFrame(_ frame: Frame) -> [SessionAction] {
        switch frame {
        case let .kicked(room, seq, time, who, by, reason):
            let why = reason.isEmpty ? "" : " (\(reason))"
            if isSelf(who) {
                leaveKeepingWindow(room)
                moderation.removed[room] = "kicked by \(Self.setter(by))"
                return [.show(.kick(room: room, time: time, text:
                    "you were kicked from #\(room) by \(Self.setter(by))\(why); you will not rejoin by yourself (/join #\(room) to go back)")), .alert]
            }
            forgetRoles(of: who, in: room)
            removeMember(who, from: room)
            return live(room: room, seq: seq, .kick(room: room, time: time, text: "\(who) was kicked by \(Self.setter(by))\(why)"))
        case let .modeChanged(room, seq, time, by, mode, on, argument):
            let change = ModeChange(mode, on: on, argument: argument)
            apply(change, to: room)
            return live(room: room, seq: seq, .moderation(room: room, time: time, text: "mode #\(room) \(change) by \(Self.setter(by))"))
        case let .invited(room, who, by):
            if isSelf(who) {
                return [.show(.moderation(room: room, time: clock(), text: "\(by) invites you to #\(room) — /join #\(room)")), .alert]
            }
            return [.show(.moderation(room: room, time: clock(), text: "invited \(who) to #\(room)\(isSelf(by) ? "" : " (by \(by))")"))]
        case let .roomModes(room, modes):
            return roomModesKnown(room: room, modes: modes)
        case let .banList(room, entries):
            let whose = room.isEmpty ? "the server" : "#\(room)"
            guard !entries.isEmpty else { return [notice("\(whose) has no bans")] }
            let lines = entries.map { entry in
                let by = entry.setBy.isEmpty ? "the server's configuration" : entry.setBy
                let reason = entry.reason.isEmpty ? "" : ": \(entry.reason)"
                return notice("  \(entry.mask) by \(by), \(Self.date(entry.time))\(reason)")
            }
            return [notice("bans of \(whose) (\(entries.count)):")] + lines
        case let .done(_, text):
            return [notice(text)]
        default:
            return []
        }
    }

    /// A room's modes: kept, its key remembered for rejoining, and shown unless they come with
    /// a quiet rejoin; a line only when there is something to say.
    private mutating func roomModesKnown(room: String, modes: RoomModes) -> [SessionAction] {
        moderation.modes[room] = modes
        if !modes.key.isEmpty { moderation.keys[room] = modes.key }
        if moderation.quietModes.remove(room) != nil {
            moderation.shownWithoutRoles.remove(room)
            return []
        }
        let withRoles = moderation.shownWithoutRoles.remove(room) != nil && !(modes.ops.isEmpty && modes.voices.isEmpty)
        guard withRoles || Self.flags(modes) != nil else { return [] }
        let line = SessionAction.show(.moderation(room: room, time: clock(), text: Self.describe(modes, of: room, withRoles: withRoles)))
        return deferIfCatchingUp(room, [line])
    }

    /// Notes that `room`'s member list was shown (or kept quietly), so its `roomModes` that
    /// follows is shown (or kept) to match.
    mutating func membersShown(in room: String, quietly: Bool) {
        guard version >= 4 else { return }
        if quietly {
            moderation.quietModes.insert(room)
        } else if moderation.modes[room] == nil {
            moderation.shownWithoutRoles.insert(room)
        }
    }

    /// A join refused for a reason that will not go away by itself: the room is not rejoined.
    mutating func joinRefused(_ room: String, code: ErrorCode) -> Bool {
        guard [.banned, .inviteOnly, .badRoomKey, .roomFull].contains(code) else { return false }
        moderation.removed[room] = "\(code.name ?? "refused")"
        if code == .badRoomKey { moderation.keys[room] = nil }
        return true
    }

    /// Applies one change to what we know of `room`.
    private mutating func apply(_ change: ModeChange, to room: String) {
        guard var modes = moderation.modes[room] else {
            if change.mode == .key { moderation.keys[room] = change.on ? change.argument : nil }
            return
        }
        let key = ChatName.nickKey(change.argument)
        switch change.mode {
        case .inviteOnly: modes.inviteOnly = change.on
        case .moderated: modes.moderated = change.on
        case .topicLock: modes.topicLock = change.on
        case .key:
            modes.key = change.on ? change.argument : ""
            moderation.keys[room] = change.on ? change.argument : nil
        case .memberLimit: modes.memberLimit = change.on ? UInt32(change.argument) ?? 0 : 0
        case .registered: modes.founder = change.on ? change.argument : ""
        case .op:
            modes.ops.removeAll { ChatName.nickKey($0) == key }
            if change.on { modes.ops.append(change.argument) }
        case .voice:
            modes.voices.removeAll { ChatName.nickKey($0) == key }
            if change.on { modes.voices.append(change.argument) }
        default:
            break  // bans are not kept (`/bans` asks); unknown modes change nothing we show
        }
        moderation.modes[room] = modes
    }

    /// `who` has no role in `room` any more: it left, was kicked, quit, or joined afresh.
    mutating func forgetRoles(of who: String, in room: String) {
        guard var modes = moderation.modes[room] else { return }
        let key = ChatName.nickKey(who)
        modes.ops.removeAll { ChatName.nickKey($0) == key }
        modes.voices.removeAll { ChatName.nickKey($0) == key }
        moderation.modes[room] = modes
    }

    /// Roles follow a nick change.
    mutating func renameRoles(from old: String, to new: String, in room: String) {
        guard var modes = moderation.modes[room] else { return }
        let key = ChatName.nickKey(old)
        modes.ops = modes.ops.map { ChatName.nickKey($0) == key ? new : $0 }
        modes.voices = modes.voices.map { ChatName.nickKey($0) == key ? new : $0 }
        moderation.modes[room] = modes
    }

    // MARK: Wording

    /// Who did it: the nick, or `the server` for an empty one (the spec leaves `by` of a kick
    /// that a server ban or `/closeroom` causes unsaid).
    static func setter(_ by: String) -> String { by.isEmpty ? "the server" : by }

    /// `+ikmtl s3cret 50`, or nil when no setting is on.
    static func flags(_ modes: RoomModes) -> String? {
        var letters = ""
        var arguments: [String] = []
        if modes.inviteOnly { letters += "i" }
        if !modes.key.isEmpty {
            letters += "k"
            arguments.append(modes.key)
        }
        if modes.moderated { letters += "m" }
        if modes.topicLock { letters += "t" }
        if modes.memberLimit > 0 {
            letters += "l"
            arguments.append(String(modes.memberLimit))
        }
        if !modes.founder.isEmpty { letters += "r" }
        guard !letters.isEmpty else { return nil }
        return (["+" + letters] + arguments).joined(separator: " ")
    }

    /// `modes of #general: +mt 50, registered to alice; ops: alice; voiced: bob`.
    static func describe(_ modes: RoomModes, of room: String, withRoles: Bool) -> String {
        var text = "modes of #\(room): " + (flags(modes) ?? "none")
        if !modes.founder.isEmpty { text += ", registered to \(modes.founder)" }
        if withRoles {
            text += "; ops: " + (modes.ops.isEmpty ? "none" : modes.ops.joined(separator: " "))
            if !modes.voices.isEmpty { text += "; voiced: " + modes.voices.joined(separator: " ") }
        }
        return text
    }

    /// A ban's time as `2026-01-01 00:00 UTC`, the same for everyone whatever their zone.
    static func date(_ milliseconds: UInt64) -> String {
        let days = Int(milliseconds / 86_400_000)
        let minutes = Int(milliseconds / 60_000 % 1440)
        // Civil date from days since 1970-01-01 (Howard Hinnant's days_from_civil, inverted).
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(year)-\(two(month))-\(two(day)) \(two(minutes / 60)):\(two(minutes % 60)) UTC"
    }
}
