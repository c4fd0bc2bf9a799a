import ChatProtocol
import DequeModule

/// The whole chat — connections, nicks, rooms, history, limits — as a state machine without I/O.
///
/// The server feeds it events (a connection opened, a frame arrived, a connection ended, time
/// passed) and carries out the `ChatAction`s it appends, in order. Every event carries the time,
/// so tests drive it with a made-up clock and no sockets. It stamps every delivery with the
/// sender's registered nick, the server's time and the room's next sequence number; nothing a
/// client sends can change who a delivery claims to be from.
///
/// Requests that fail are answered with a non-fatal `error`; protocol violations, refusals and
/// timeouts remove the client at once (its rooms see `quit`) and end in `.disconnect` — in a
/// cluster, a client that says goodbye, floods or breaks the protocol goes after the answers
/// still to come to what it sent before (`endSession`), as it would on a server on its own.
///
/// In durable mode (`RoomLogMode.durable`), rooms outlive memory: every change of a room (its
/// `seq`, topic, and each message, action and topic event) goes into the log batch that the
/// server takes when it starts a commit (`takeLogBatch()`); an empty room leaves memory once the
/// server reports its changes committed (`logCommitted(through:)`), and a joiner reads it back
/// with the same epoch, `seq` and topic; history pages older than memory holds are read from
/// the log. Reads are asked for and answered later, off the event loop
/// (ChatCore+Reads.swift). While the log fails, room events are refused with `storageFailed`.
///
/// What it keeps is bounded by its `MemoryBudget`: history by entries and bytes per
/// room and in all rooms together (the globally oldest entries go first), and every frame a
/// client sends by a request rate and a byte rate — per connection, and for all connections from one
/// address together.
public struct ChatCore: Sendable {
    /// The limits in force.
    public private(set) var limits: ChatLimits
    /// Where each new room's epoch comes from.
    private(set) var epochs: EpochSource
    /// Whether rooms are kept in a log the server commits (`RoomLogMode.durable`).
    let isDurable: Bool
    /// How many changes of rooms the core has made for the log: the number of the latest.
    private var logAppends: UInt64 = 0
    /// The rooms' changes for the log that the server has not taken yet (`takeLogBatch()`).
    @usableFromInline var logBatch = LogBatch()
    /// The number of the latest change a commit holds (`logCommitted(through:)`).
    private var logCommittedThrough: UInt64 = 0
    /// Why the store's last commit failed, while no later one has succeeded; room events are
    /// refused meanwhile.
    public private(set) var storageFailure: String?
    /// Empty rooms kept in memory until their changes are committed: read back before that, the
    /// log would give an older `seq`.
    private var roomsAwaitingCommit: Set<String> = []
    /// The store reads asked for and who waits for them (ChatCore+Reads.swift).
    @usableFromInline var reads = LogReads()

    /// Connection state, indexed by `ClientID.slot`; nil for free slots.
    @usableFromInline var clients: [ClientState?] = []
    var nicks: [String: ClientID] = [:]
    var rooms: [String: ChatRoom] = [:]
    /// Connections and shared rate limits by address: for addresses with connections open, and
    /// for those without until their buckets are full again (`tick` forgets them then), so that
    /// reconnecting does not refill them.
    var addresses: [String: AddressState] = [:]
    private var nextPingToken: UInt64 = 1
    @usableFromInline let budget: MemoryBudget

    /// Every history entry kept, oldest first across rooms, so the budget can forget the
    /// globally oldest. Records of entries already gone (their room emptied, or its own bounds
    /// forgot them) are skipped when reached, and swept out when they outnumber the live ones.
    private var historyOrder = Deque<HistoryRecord>()
    /// What all rooms' history costs, by `RoomHistory.cost(of:)`.
    public private(set) var historyBytes = 0
    /// How many history entries all rooms keep.
    private(set) var historyEntries = 0

    /// Wrong passwords by address, for the delay and the lockout.
    private var passwordFailures: [String: PasswordFailures] = [:]
    /// The accounts, and the account work in flight (ChatCore+Accounts.swift).
    @usableFromInline var accounts = AccountDirectory()
    /// Registered rooms' settings, the server's bans and their writes (ChatCore+Moderation.swift).
    var moderation = ModerationDirectory()

    /// In cluster mode, what this node knows of the rooms its clients are in and what it waits
    /// for from the cluster (ChatCore+Cluster.swift); empty, and never asked, for a server on its
    /// own. Not optional: an answer from the cluster must never find it missing.
    @usableFromInline var cluster = ClusterState()
    /// Whether this core is one node of a cluster (`RoomLogMode.cluster`).
    let isClustered: Bool

    /// Connections open, handshaking ones included.
    public private(set) var clientCount = 0

    /// An empty chat with `limits`, keeping what grows within `budget`, and rooms where `log`
    /// says. New rooms take their epochs from `epochs`.
    ///
    /// `.cluster` makes it one node of a cluster (docs/CLUSTER.md): rooms, nicks and history are
    /// the cluster's, and the core asks for them through `takeClusterRequests()` instead of
    /// keeping them itself.
    public init(
        limits: ChatLimits, budget: MemoryBudget, log: RoomLogMode = .memory, epochs: EpochSource = .random()
    ) {
        self.limits = limits
        self.epochs = epochs
        self.budget = budget
        isDurable = log == .durable
        isClustered = log == .cluster
    }

    /// Calls `body` with each room in memory here, its members here and its latest `seq` (on a
    /// cluster node, the latest delivered): what the operator's status page lists.
    package func visitRooms(_ body: (_ name: String, _ members: Int, _ lastSeq: UInt64) -> Void) {
        if isClustered {
            for (name, room) in cluster.rooms { body(name, room.members.count, room.lastDelivered) }
        } else {
            for (name, room) in rooms { body(name, room.members.count, room.lastSeq) }
        }
    }

    /// Whether the room `name` is in memory here.
    package func knowsRoom(_ name: String) -> Bool { rooms[name] != nil || cluster.rooms[name] != nil }

    /// Takes new limits: every later frame, connection and login is judged by them. The server
    /// passes its limits with a reload's live settings applied
    /// (`ChatServerConfiguration.applyingLiveSettings(of:)`). Clients already welcomed were told
    /// the old rates in their `limits` frame and learn the new ones at their next connection.
    public mutating func reconfigure(_ limits: ChatLimits) {
        self.limits = limits
    }

    // MARK: Events

    /// A connection from `address` opened as `id`: registers it and returns `nil`, or, when the
    /// server or the address is at its limit, returns why it is refused and registers nothing (the
    /// caller turns it away without ever reading from it). `encrypted`: it speaks TLS (passwords
    /// from afar are accepted only then, ChatCore+Accounts.swift).
    public mutating func clientConnected(_ id: ClientID, address: String, encrypted: Bool = false, at now: ServerTime) -> Disconnection? {
        precondition(id.slot >= 0, "slots are non-negative")
        if clientCount >= limits.maxClients {
            let reason = "the server is full (\(limits.maxClients) connections)"
            return Disconnection(code: .serverFull, frameType: .hello, reason: reason)
        }
        let fromAddress = addresses[address]?.connections ?? 0
        if fromAddress >= limits.maxClientsPerAddress {
            let reason = "too many connections from \(address) (limit \(limits.maxClientsPerAddress))"
            return Disconnection(code: .tooManyConnectionsFromAddress, frameType: .hello, reason: reason)
        }
        if let refusal = serverBanRefusal(accountKey: nil, nick: nil, address: address, request: .hello) { return refusal }
        var state = addresses[address] ?? AddressState(limits: limits, now: now.uptimeMillis)
        let connectionRate = limits.addressConnectionRate
        if connectionRate > 0 {
            guard state.connectBucket.has(1, rate: connectionRate, burst: limits.addressConnectionBurst, now: now.uptimeMillis)
            else {
                let reason = "connecting too fast from \(address) (at most \(Self.format(connectionRate)) per second)"
                return Disconnection(code: .tooManyConnectionsFromAddress, frameType: .hello, reason: reason)
            }
            state.connectBucket.spend(1)
        }
        if clients.count <= id.slot { clients.append(contentsOf: repeatElement(nil, count: id.slot - clients.count + 1)) }
        precondition(clients[id.slot] == nil, "slot \(id.slot) reused while in use")
        clients[id.slot] = ClientState(
            address: address, burst: limits.messageBurst, byteBurst: limits.byteBurst, now: now.uptimeMillis)
        clients[id.slot]?.passwordsAllowed = Self.acceptsPassword(
            from: address, encrypted: encrypted, allowPlain: limits.accounts.allowPlainPasswords)
        state.connections += 1
        addresses[address] = state
        clientCount += 1
        return nil
    }

    /// A frame of `size` bytes (its length prefix included) arrived from `id`. Frames from
    /// clients that are no longer part of the chat, or whose refusal is on its way, are ignored.
    public mutating func received(
        _ frame: Frame, size: Int, from id: ClientID, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        var frame = frame
        if case .setAway(let text) = frame, text.utf8.count > MemoryBudget.awayTextBytes {
            // Kept for as long as the client stays, so bounded like the rest of a connection's
            // state (MemoryBudget.perConnection); cut, as IRC servers cut at AWAYLEN, and the
            // `away` echo shows what was kept.
            frame = .setAway(text: Self.prefix(of: text, bytes: MemoryBudget.awayTextBytes))
        }
        // One access to the client, in place (`ClientState.heard(at:)`).
        guard id.slot < clients.count, cluster.departures[id] == nil, let client = clients[id.slot]?.heard(at: now.uptimeMillis)
        else { return }
        // Every frame read costs its address, whatever becomes of it.
        let address = client.address
        if limits.addressMessageRate > 0 { addresses[address]!.bucket.spend(1) }
        if limits.addressByteRate > 0 { addresses[address]!.byteBucket.spend(Double(size)) }
        guard let nick = client.nick else {
            handshake(frame, from: id, at: now, into: &actions)
            return
        }
        // In a cluster, what this request produces waits for the events that the client's earlier
        // requests caused and Redis has not sent back yet (ChatCore+Cluster.swift, `OrderGate`).
        let orderedFrom = actions.count
        defer { if isClustered { clusterOrder(&actions, from: orderedFrom, for: id) } }
        // Every frame counts against the limits (a flood of pings costs as much as one of
        // messages), except goodbye: ending the session must always work.
        if case .goodbye = frame {} else if !admit(frame, size: size, from: id, at: now, into: &actions) { return }
        // A type of a later version than the session's is unknown to it: skipped, as
        // docs/PROTOCOL.md says (the server's decoder already reads such frames as unknown).
        if let introduced = frame.type.introducedIn, introduced > client.version { return }
        let firstAction = actions.count
        defer { chargeFanout(of: address, size: size, for: actions[firstAction...]) }
        if accountRequest(frame, from: id, nick: nick, at: now, into: &actions) { return }
        if isClustered, clusterReceived(frame, size: size, from: id, nick: nick, at: now, into: &actions) { return }
        if moderationRequest(frame, size: size, from: id, nick: nick, at: now, into: &actions) { return }
        switch frame {
        case .changeNick(let newNick):
            changeNick(of: id, from: nick, to: newNick, at: now, into: &actions)
        case .join(let room):
            join(room, id: id, nick: nick, size: size, at: now, into: &actions)
        case .part(let room):
            addRoomEvent(.left(room: room, seq: 0, time: 0, nick: nick), for: .part, from: id, size: size, at: now, into: &actions)
        case .say(let room, let text):
            let line = Frame.message(room: room, seq: 0, time: 0, sender: nick, text: text)
            addRoomEvent(line, for: .say, from: id, size: size, at: now, into: &actions)
        case .emote(let room, let text):
            let line = Frame.action(room: room, seq: 0, time: 0, sender: nick, text: text)
            addRoomEvent(line, for: .emote, from: id, size: size, at: now, into: &actions)
        case .tell(let recipient, let text):
            tell(recipient, text: text, id: id, nick: nick, at: now, into: &actions)
        case .listRooms:
            appendRoomList(to: id, into: &actions)
        case .who(let room):
            sendMembers(memberNicks(of: room), of: room, to: id, into: &actions)
            if version(of: id) >= 4, let modes = roomModes(of: room, for: id) { actions.append(.send(.roomModes(room: room, modes: modes), to: id)) }
        case .setTopic(let room, let text):
            let topic = Frame.topic(room: room, seq: 0, time: 0, setBy: nick, text: text)
            addRoomEvent(topic, for: .setTopic, from: id, size: size, at: now, into: &actions)
        case .requestHistory(let room, let count):
            sendHistory(of: room, count: Int(count), id: id, into: &actions)
        case let .fetchHistory(room, direction, seq, limit):
            sendHistoryPage(of: room, direction, from: seq, limit: Int(limit), id: id, into: &actions)
        case .setAway(let text):
            clients[id.slot]?.away = text.isEmpty ? nil : text
            actions.append(.send(.away(nick: nick, text: text), to: id))
        case .ping(let token):
            actions.append(.send(.pong(token: token), to: id))
        case .pong, .unknown, .register, .login, .changePassword, .dropAccount, .kick, .setMode, .invite, .listBans,
            .serverBan, .kill, .joinWithKey:
            // Account and moderation requests were served above (`accountRequest`, `moderationRequest`).
            // A pong has done its job by arriving; unknown skippable frames are ignored by design.
            break
        case .goodbye(let reason):
            endSession(id, Disconnection(code: nil, reason: reason.isEmpty ? "goodbye" : reason), at: now, into: &actions)
        case .error(let code, let fatal, _, let reason):
            if fatal {
                endSession(id, Disconnection(code: nil, reason: "client error \(code): \(reason)"), at: now, into: &actions)
            }
        case .hello:
            let violation = Disconnection(code: .unexpectedFrame, frameType: .hello, reason: "the handshake is already done")
            endSession(id, violation, at: now, into: &actions)
        case .welcome, .message, .action, .direct, .joined, .left, .quit, .nickChanged, .nickAccepted, .roomList,
            .members, .topic, .history, .roomState, .historyPage, .roomListPage, .membersPage, .away, .limits,
            .registered, .loggedIn, .passwordChanged, .accountDropped, .kicked, .modeChanged, .invited, .roomModes,
            .banList, .done:
            let violation = Disconnection(
                code: .unexpectedFrame, frameType: frame.type, reason: "a client may not send \(frame.type)")
            endSession(id, violation, at: now, into: &actions)
        }
    }

    /// Ends `id`'s session for `disconnection` after the replies to the requests it sent before,
    /// as a client of a server on its own sees it, where each request is answered before the
    /// next is read: on such a server that is now, as `disconnect` does. In a cluster the answers
    /// come later, from Redis: the client is read no more (`isAwaitingCluster`), still gets what
    /// it is sent, and is disconnected once the answers and its own events' echoes have been
    /// given to it — or after `lingerTimeout` without them, so an unreachable Redis cannot keep
    /// its connection open. Does nothing if `id` is already gone or on its way out.
    public mutating func endSession(
        _ id: ClientID, _ disconnection: Disconnection, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        guard id.slot < clients.count, clients[id.slot] != nil else { return }
        if isClustered, clusterDefersEnd(of: id, disconnection, at: now) { return }
        disconnect(id, disconnection, at: now, into: &actions)
    }

    /// Removes `id` from the chat for `disconnection`: its nick is freed, its rooms see `quit`, and
    /// `.disconnect` is appended. Does nothing if `id` is already gone.
    public mutating func disconnect(
        _ id: ClientID, _ disconnection: Disconnection, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        guard id.slot < clients.count, let client = clients[id.slot] else { return }
        clients[id.slot] = nil
        reads.forget(id)
        accounts.waiting[id] = nil
        moderation.pendingKeys[id] = nil
        clientCount -= 1
        addresses[client.address]?.connections -= 1
        if isClustered {
            clusterDeparted(id, client: client, reason: disconnection.reason, at: now, into: &actions)
        } else if let nick = client.nick {
            nicks[ChatName.nickKey(nick)] = nil
            for room in client.rooms {
                let quit = Frame.quit(room: room, seq: 0, time: 0, nick: nick, reason: disconnection.reason)
                appendRoomEvent(quit, in: room, from: id, size: 0, departure: .gone, at: now, into: &actions)
            }
        }
        actions.append(.disconnect(id, disconnection, nick: client.nick))
    }

    /// Time passed: drops connections that did not finish the handshake in time, pings clients
    /// that have been silent, and disconnects those silent for too long.
    public mutating func tick(at now: ServerTime, into actions: inout [ChatAction]) {
        let handshakeTimeout = limits.handshakeTimeout.milliseconds
        let idlePing = limits.idlePingInterval.milliseconds
        let idleTimeout = limits.idleTimeout.milliseconds
        // Clients let go that wait for the cluster's answers are past pings and idle timeouts.
        if cluster.departures.isEmpty == false { clusterDeparturesDue(at: now, into: &actions) }
        forgetRememberedRolesIfDue(at: now)
        for slot in clients.indices {
            guard let client = clients[slot] else { continue }
            let id = ClientID(slot)
            if cluster.departures[id] != nil { continue }
            if let (refusal, due) = client.pendingRefusal {
                if now.uptimeMillis >= due { disconnect(id, refusal, at: now, into: &actions) }
                continue
            }
            if client.nick == nil {
                if let pending = client.pendingHello, accounts.waiting[id] == nil,
                    now.uptimeMillis &- pending.since >= limits.accounts.loginWait.milliseconds
                {
                    loginNeverCame(id, nick: pending.nick, at: now, into: &actions)
                    continue
                }
                if now.uptimeMillis &- client.connectedAt >= handshakeTimeout {
                    let reason = "no hello within \(limits.handshakeTimeout)"
                    disconnect(id, Disconnection(code: .handshakeTimeout, reason: reason), at: now, into: &actions)
                }
                continue
            }
            let silence = now.uptimeMillis &- client.lastHeard
            if silence >= idleTimeout {
                let reason = "nothing received for \(limits.idleTimeout)"
                disconnect(id, Disconnection(code: .idleTimeout, reason: reason), at: now, into: &actions)
            } else if silence >= idlePing, !client.pinged {
                clients[slot]?.pinged = true
                actions.append(.send(.ping(token: nextPingToken), to: id))
                nextPingToken += 1
            }
        }
        addresses = addresses.filter { _, state in
            var state = state
            return state.connections > 0 || !state.isFull(limits, now: now.uptimeMillis)
        }
        let lockout = limits.passwordLockout.milliseconds
        passwordFailures = passwordFailures.filter { _, failures in
            failures.lockedUntil > now.uptimeMillis || now.uptimeMillis &- failures.lastFailure < lockout
        }
        forgetEndedAccountWindows(at: now)
    }

    // MARK: Queries

    /// The protocol version `id` speaks: the one agreed in `welcome`, 1 before it. The server
    /// decodes the client's frames by it, so a version 1 session skips version 2's types.
    @inlinable
    public func protocolVersion(of id: ClientID) -> UInt16 {
        id.slot < clients.count ? clients[id.slot]?.version ?? 1 : 1
    }

    /// The nick `id` holds, or nil before its handshake or after it left.
    public func nick(of id: ClientID) -> String? {
        id.slot < clients.count ? clients[id.slot]?.nick : nil
    }

    /// The names of the rooms that exist (those with members), sorted. A cluster node knows the
    /// rooms its own clients are members of (`clusterRoomNames`).
    public var roomNames: [String] {
        if isClustered { return clusterRoomNames }
        return rooms.filter { !$0.value.members.isEmpty }.keys.sorted()
    }

    /// The nicks in `room`, in joining order; empty if the room does not exist. A cluster node
    /// knows its own clients among them (`clusterMemberNicks(of:)`).
    public func memberNicks(of room: String) -> [String] {
        if isClustered { return clusterMemberNicks(of: room) }
        guard let members = rooms[room]?.members else { return [] }
        return members.compactMap { nick(of: $0) }
    }

    // MARK: Handshake

    private mutating func handshake(_ frame: Frame, from id: ClientID, at now: ServerTime, into actions: inout [ChatAction]) {
        if clients[id.slot]?.pendingHello != nil {
            pendingHelloFrame(frame, from: id, at: now, into: &actions)
            return
        }
        guard case .hello(let version, let nick, let password) = frame else {
            let violation = Disconnection(
                code: .handshakeRequired, frameType: frame.type, reason: "the first frame must be hello, not \(frame.type)")
            disconnect(id, violation, at: now, into: &actions)
            return
        }
        let refusal: Disconnection?
        if version < WireProtocol.minimumVersion {
            refusal = Disconnection(
                code: .unsupportedVersion, frameType: .hello,
                reason: "this server speaks protocol versions \(WireProtocol.minimumVersion) to \(WireProtocol.version)")
        } else if let expected = limits.password, let problem = checkPassword(password, against: expected, from: id, at: now) {
            if let delay = problem.delay {
                // Held back: the connection stays (and says nothing) until the tick that sends it.
                clients[id.slot]?.pendingRefusal = (problem.refusal, now.uptimeMillis + delay)
            } else {
                disconnect(id, problem.refusal, at: now, into: &actions)
            }
            return
        } else if helloForReservedNick(nick, version: version, from: id, at: now, into: &actions) {
            // Refused, or waiting for the login that proves the nick is the client's.
            return
        } else if let banned = serverBanRefusal(accountKey: nil, nick: nick, address: address(of: id), request: .hello) {
            refusal = banned
        } else if nicks[ChatName.nickKey(nick)] != nil {
            refusal = Disconnection(code: .nickTaken, frameType: .hello, reason: "nick \(nick) is taken")
        } else {
            refusal = nil
        }
        if let refusal {
            disconnect(id, refusal, at: now, into: &actions)
            return
        }
        if isClustered {
            clusterClaim(nick, for: id, version: version, at: now, into: &actions)
            return
        }
        welcome(id, nick: nick, version: version, into: &actions)
    }

    /// Completes `id`'s handshake under `nick`, which is its now: sends `welcome` (and `limits`).
    mutating func welcome(_ id: ClientID, nick: String, version: UInt16, into actions: inout [ChatAction]) {
        let agreed = min(version, WireProtocol.version)
        nicks[ChatName.nickKey(nick)] = id
        clients[id.slot]?.nick = nick
        clients[id.slot]?.version = agreed
        let welcome = Frame.welcome(
            version: agreed, nick: nick, maxFrameSize: UInt32(limits.maxFrameSize), motd: limits.motd)
        actions.append(.send(welcome, to: id))
        if agreed >= 2 {
            let rate = limits.messageRate * 1000
            let limits = Frame.limits(
                requestRate: rate.isFinite && rate < Double(UInt32.max) ? UInt32(rate.rounded(.down)) : UInt32.max,
                requestBurst: limits.messageRate > 0 ? UInt32(clamping: limits.messageBurst) : 0,
                byteRate: UInt32(clamping: limits.byteRate),
                byteBurst: limits.byteRate > 0 ? UInt32(clamping: limits.byteBurst) : 0)
            actions.append(.send(limits, to: id))
        }
    }

    /// Checks `password` from `id`'s address; nil when it may go on. A wrong one is answered
    /// after `passwordDelay`; after `passwordAttempts` wrong ones the address is refused for
    /// `passwordLockout` without its password being looked at, so guessing stops there.
    private mutating func checkPassword(
        _ password: String?, against expected: String, from id: ClientID, at now: ServerTime
    ) -> (refusal: Disconnection, delay: UInt64?)? {
        let address = address(of: id)
        let lockedUntil = passwordFailures[address]?.lockedUntil ?? 0
        if lockedUntil > now.uptimeMillis {
            let reason = "too many wrong passwords from \(address); try again in \(Self.waitText(lockedUntil - now.uptimeMillis))"
            return (Disconnection(code: .badPassword, frameType: .hello, reason: reason), nil)
        }
        guard let password else {
            return (Disconnection(code: .badPassword, frameType: .hello, reason: "this server needs a password"), nil)
        }
        if Self.constantTimeEquals(password, expected) {
            passwordFailures[address] = nil
            return nil
        }
        var failures = passwordFailures[address] ?? PasswordFailures()
        failures.count += 1
        failures.lastFailure = now.uptimeMillis
        if failures.count >= limits.passwordAttempts {
            failures.count = 0
            failures.lockedUntil = now.uptimeMillis + limits.passwordLockout.milliseconds
        }
        passwordFailures[address] = failures
        let refusal = Disconnection(code: .badPassword, frameType: .hello, reason: "wrong password")
        return (refusal, limits.passwordDelay.milliseconds)
    }

    /// Compares in time that depends on the lengths only, not on where the first difference is,
    /// so response times do not leak how much of a guess was right.
    static func constantTimeEquals(_ guess: String, _ secret: String) -> Bool {
        let guess = Array(guess.utf8)
        let secret = Array(secret.utf8)
        var difference = UInt8(truncatingIfNeeded: guess.count ^ secret.count)
        for index in 0..<max(guess.count, secret.count) {
            let left = index < guess.count ? guess[index] : 0
            let right = index < secret.count ? secret[index] : 0
            difference |= left ^ right
        }
        return difference == 0
    }

    // MARK: Rate limiting

    /// Takes a request token and `size` byte tokens for `frame`; when either bucket is short,
    /// takes neither, answers `rateLimited` (or disconnects a client that keeps going) and
    /// returns false.
    private mutating func admit(
        _ frame: Frame, size: Int, from id: ClientID, at now: ServerTime, into actions: inout [ChatAction]
    ) -> Bool {
        let rate = limits.messageRate
        let byteRate = limits.byteRate
        let (messageBurst, byteBurst) = (limits.messageBurst, limits.byteBurst)
        let time = now.uptimeMillis
        // One access to the client, in place (a copy of it would retain and release its fields on
        // every request); nil: it is gone, and is admitted nothing.
        guard
            let verdict = clients[id.slot]?.update({ client -> (limit: String?, refusedInARow: Int) in
                var limit: String?
                if rate > 0, !client.bucket.has(1, rate: rate, burst: messageBurst, now: time) {
                    limit = "\(Self.format(rate)) requests per second"
                } else if byteRate > 0, !client.byteBucket.has(Double(size), rate: Double(byteRate), burst: byteBurst, now: time) {
                    limit = "\(byteRate) bytes per second"
                }
                guard limit != nil else {
                    if rate > 0 { client.bucket.spend(1) }
                    if byteRate > 0 { client.byteBucket.spend(Double(size)) }
                    client.refusedInARow = 0
                    return (nil, 0)
                }
                client.refusedInARow += 1
                return (limit, client.refusedInARow)
            })
        else { return false }
        guard let limit = verdict.limit else { return true }
        if verdict.refusedInARow >= limits.rateAbuseLimit {
            let reason = "kept sending faster than \(limit)"
            endSession(id, Disconnection(code: .rateLimited, frameType: frame.type, reason: reason), at: now, into: &actions)
        } else {
            let reason = "slow down: at most \(limit); this \(frame.type) was dropped"
            actions.append(.send(.error(code: .rateLimited, fatal: false, frameType: frame.type, reason: reason), to: id))
        }
        return false
    }

    /// Spends from `address`'s fan-out bucket what `actions`, caused by one frame of `size`
    /// bytes, cost to send: each broadcast the frame's size (plus what a delivery adds) once per
    /// recipient — a line to a room of a thousand costs a thousand times its size — and each
    /// reply whose size the request does not bound, what it is (`replyCost`): a request of a few
    /// bytes can ask for a megabyte, and without this, paging history from many connections read
    /// hundreds of megabytes a second out of the server (docs/SECURITY.md).
    private mutating func chargeFanout(of address: String, size: Int, for actions: ArraySlice<ChatAction>) {
        guard limits.addressFanoutRate > 0 else { return }
        var bytes = 0
        for action in actions {
            switch action {
            case .broadcast(_, let to): bytes += (size + Self.deliveryOverhead) * to.count
            case .send(let frame, _): bytes += Self.replyCost(of: frame)
            case .sendShared(let shared, _): bytes += shared.frames.reduce(0) { $0 + Self.replyCost(of: $1) }
            case .disconnect: break
            }
        }
        chargeFanout(of: address, bytesPerDelivery: bytes, deliveries: 1)
    }

    /// Charges `id`'s address for replies to it that come after its request was served (a
    /// cluster node's answers from Redis, which carry no broadcasts).
    mutating func chargeReplies(to id: ClientID, for actions: ArraySlice<ChatAction>) {
        guard let address = id.slot < clients.count ? clients[id.slot]?.address : nil else { return }
        chargeFanout(of: address, size: 0, for: actions)
    }

    /// About what `frame` costs to send when it is a reply whose size the request does not
    /// bound; 0 for the small ones, which the request rate bounds.
    static func replyCost(of frame: Frame) -> Int {
        switch frame {
        case .history(_, let entries), .historyPage(_, _, _, let entries):
            entries.reduce(64) { $0 + cost($1) }
        case .roomList(let rooms), .roomListPage(_, let rooms):
            rooms.reduce(64) { $0 + cost($1) }
        case .members(_, let nicks), .membersPage(_, _, let nicks):
            nicks.reduce(64) { $0 + cost(nick: $1) }
        case .away(let nick, let text):
            64 + nick.utf8.count + text.utf8.count
        default:
            0
        }
    }

    /// Spends from `address`'s fan-out bucket what `deliveries` of `bytesPerDelivery` each cost.
    /// In cluster mode the deliveries happen on every node when Redis publishes the event, so
    /// the clustered path charges what it knows of the room's members (ChatCore+Cluster.swift).
    mutating func chargeFanout(of address: String, bytesPerDelivery: Int, deliveries: Int) {
        guard limits.addressFanoutRate > 0, deliveries > 0, addresses[address] != nil else { return }
        addresses[address]!.fanoutBucket.spend(Double(bytesPerDelivery * deliveries))
    }

    /// About what a delivery adds to what a client sent (seq, time, sender).
    static let deliveryOverhead = 24

    /// How long, in milliseconds, the connections from `id`'s address must wait before the next
    /// frame from any of them is read: 0 while the address's shared buckets are not in debt.
    ///
    /// The address's limits are kept by reading its connections no faster, not by refusing: the
    /// server stops reading them until then, TCP pushes back on the sender, and nothing is
    /// dropped. Each frame read spends its tokens after the fact (`received`), so the buckets may
    /// go one frame into debt; the average rate holds all the same.
    public mutating func addressWait(for id: ClientID, at now: ServerTime) -> UInt64 {
        guard limits.addressMessageRate > 0 || limits.addressByteRate > 0 || limits.addressFanoutRate > 0,
            id.slot < clients.count,
            let address = clients[id.slot]?.address
        else { return 0 }
        var wait: UInt64 = 0
        if limits.addressMessageRate > 0 {
            wait = addresses[address]!.bucket.millisecondsUntilSolvent(
                rate: limits.addressMessageRate, burst: limits.addressMessageBurst, now: now.uptimeMillis)
        }
        if limits.addressByteRate > 0 {
            wait = max(
                wait,
                addresses[address]!.byteBucket.millisecondsUntilSolvent(
                    rate: Double(limits.addressByteRate), burst: limits.addressByteBurst, now: now.uptimeMillis))
        }
        if limits.addressFanoutRate > 0 {
            wait = max(
                wait,
                addresses[address]!.fanoutBucket.millisecondsUntilSolvent(
                    rate: Double(limits.addressFanoutRate), burst: limits.addressFanoutBurst, now: now.uptimeMillis))
        }
        return wait
    }

    private static func format(_ rate: Double) -> String {
        rate == rate.rounded() ? String(Int(rate)) : String(rate)
    }

    // MARK: Requests

    /// `standingChecked`: on a cluster node, the rooms' bans were read for it
    /// (`clusterStandingsRead`), which calls this again.
    mutating func changeNick(
        of id: ClientID, from oldNick: String, to newNick: String, standingChecked: Bool = false, at now: ServerTime,
        into actions: inout [ChatAction]
    ) {
        let newKey = ChatName.nickKey(newNick)
        if let holder = nicks[newKey], holder != id {
            refuse(.changeNick, .nickTaken, "nick \(newNick) is taken", to: id, into: &actions)
            return
        }
        if let reason = reservation(of: newNick, for: id) {
            refuse(.changeNick, .nickReserved, reason, to: id, into: &actions)
            return
        }
        if endIfServerBanned(id, nick: newNick, request: .changeNick, at: now, into: &actions) { return }
        if let reason = bannedNickRefusal(of: id, as: newNick) {
            refuse(.changeNick, .banned, reason, to: id, into: &actions)
            return
        }
        if isClustered {
            // A member's rooms' bans are Redis's: read first, and this is called again.
            if !standingChecked, clients[id.slot]?.rooms.isEmpty == false, cluster.available {
                clusterCheckNickChange(of: id, to: newNick)
                return
            }
            // The cluster's nick registry decides: claimed there first, then `rename`d.
            clusterChangeNick(of: id, from: oldNick, to: newNick, at: now, into: &actions)
            return
        }
        rename(id, from: oldNick, to: newNick, at: now, into: &actions)
    }

    /// `id` is now `newNick` (free, or its account's; on a cluster node, claimed in Redis):
    /// `nickAccepted` to it, then a `nickChanged` in each of its rooms, which the room's log takes
    /// as it takes any room event (`appendRoomEvent`). One path for every mode; a cluster node
    /// also lets the old nick go in Redis and moves its away text to the new one there.
    mutating func rename(_ id: ClientID, from oldNick: String, to newNick: String, at now: ServerTime, into actions: inout [ChatAction]) {
        let oldKey = ChatName.nickKey(oldNick)
        let newKey = ChatName.nickKey(newNick)
        if oldKey != newKey {
            nicks[oldKey] = nil
            if isClustered { ask(.releaseNick(oldNick)) }
        }
        nicks[newKey] = id
        clients[id.slot]?.nick = newNick
        actions.append(.send(.nickAccepted(nick: newNick), to: id))
        if isClustered, let away = clients[id.slot]?.away { ask(.setAway(nick: newNick, text: away)) }
        guard newNick != oldNick else { return }
        // What a member's address is charged for each room's announcement, where fan-out is
        // limited: the request's size, as for a line.
        let size = limits.addressFanoutRate > 0 ? FrameEncoder.encode(Frame.changeNick(nick: newNick)).count : 0
        for room in clients[id.slot]?.rooms ?? [] {
            let event = Frame.nickChanged(room: room, seq: 0, time: 0, old: oldNick, new: newNick)
            appendRoomEvent(event, in: room, from: id, size: size, at: now, into: &actions)
        }
    }

    /// Why `id` may not join `name` — already in it, in as many rooms as allowed, or kept out by
    /// the room's moderation (`moderationJoinRefusal`: a ban, invite-only, its key, its limit) —
    /// as the `error` code and reason to refuse it with; nil when it may. One rule for every mode.
    /// `key`: the one given with `joinWithKey`.
    func joinRefusal(of name: String, for id: ClientID, key: String? = nil, at now: ServerTime) -> (code: ErrorCode, reason: String)? {
        if isMember(id, of: name) { return (.alreadyInRoom, "you are already in #\(name)") }
        if clients[id.slot]?.rooms.count ?? 0 >= limits.maxRoomsPerClient {
            return (.tooManyRooms, "you are in \(limits.maxRoomsPerClient) rooms, the most allowed")
        }
        return moderationJoinRefusal(of: name, for: id, key: key, at: now)
    }

    /// `id`, called `nick`, joins `name` with a frame of `size` bytes: one rule for every mode
    /// (`joinRefusal`), then the room as the mode has it — made or read back here (memory,
    /// durable: `awaitRoom`), or joined through Redis (`clusterJoin`).
    mutating func join(
        _ name: String, id: ClientID, nick: String, size: Int, key: String? = nil, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        if let refusal = joinRefusal(of: name, for: id, key: key, at: now) {
            if refusal.code == .badRoomKey, key != nil { countWrongKey(from: id, room: name, at: now) }
            refuse(key == nil ? .join : .joinWithKey, refusal.code, refusal.reason, to: id, into: &actions)
            return
        }
        if isClustered {
            clusterJoin(name, id: id, nick: nick, size: size, key: key, at: now, into: &actions)
            return
        }
        if rooms[name] == nil {
            guard !isDurable else {
                // It may be stored: read back first (`roomRead` joins it then, checking again).
                if let key { moderation.pendingKeys[id] = key }
                awaitRoom(name, for: id)
                return
            }
            makeRoom(name, from: nil)
        }
        let rolesGivenBack = takeRoles(in: name, for: id)
        clients[id.slot]?.rooms.append(name)
        let version = version(of: id)
        let members = withRoom(name) { room in
            room.members.append(id)
            return room.members.count
        }
        // Retention spares an occupied room however quiet it is.
        if members == 1, isDurable { logBatch.occupancyChanged(of: name, occupied: true) }
        appendRoomEvent(.joined(room: name, seq: 0, time: 0, nick: nick), in: name, from: id, size: 0, at: now, into: &actions)
        guard let room = rooms[name] else { return }
        announceRolesTaken(in: name, by: id, nick: nick, rolesGivenBack: rolesGivenBack, at: now, into: &actions)
        let arrival = RoomArrival(
            epoch: room.epoch, firstSeq: isDurable ? room.storedFirstSeq : room.history.firstSeq ?? 0, lastSeq: room.lastSeq,
            members: memberNicks(of: name), modes: roomModes(of: name),
            topic: room.topic.map { .topic(room: name, seq: $0.seq, time: $0.time, setBy: $0.setBy, text: $0.text) },
            history: .shared(replay(of: name, version: version)))
        sendArrival(arrival, in: name, to: id, into: &actions)
    }

    /// What a joiner is told of a room after its `joined`, however the mode keeps the room: read
    /// here (`join`) or from Redis (`clusterSnapshotRead`). `sendArrival` sends it by one rule.
    struct RoomArrival {
        var epoch: UInt64
        var firstSeq: UInt64
        var lastSeq: UInt64
        var members: [String]
        var modes: RoomModes?
        /// The room's last `topic` event; one that cleared the topic is not sent.
        var topic: Frame?
        var history: History

        /// The history replay: one the room's joiners share (nil: none for this joiner), or a
        /// page of entries to send as the joiner's version takes them.
        enum History {
            case shared(SharedFrames?)
            case page([HistoryEntry], complete: Bool)
        }
    }

    /// Sends `id` what it is told of `room` once in it, as its version takes it: the room's state
    /// (version 2 on), its members, its modes (version 4 on), its topic, its recent history.
    /// One rule for every mode.
    mutating func sendArrival(_ arrival: RoomArrival, in room: String, to id: ClientID, into actions: inout [ChatAction]) {
        let version = version(of: id)
        if version >= 2 {
            actions.append(.send(.roomState(room: room, epoch: arrival.epoch, firstSeq: arrival.firstSeq, lastSeq: arrival.lastSeq), to: id))
        }
        sendMembers(arrival.members, of: room, to: id, into: &actions)
        if version >= 4, let modes = arrival.modes { actions.append(.send(.roomModes(room: room, modes: modes), to: id)) }
        if let topic = arrival.topic, case .topic(_, _, _, _, let text) = topic, !text.isEmpty { actions.append(.send(topic, to: id)) }
        switch arrival.history {
        case .shared(let replay):
            if let replay { actions.append(.sendShared(replay, to: id)) }
        case .page(let entries, let complete):
            if version >= 2 {
                actions.append(.send(.historyPage(room: room, epoch: arrival.epoch, complete: complete, entries: entries), to: id))
            } else if !entries.isEmpty {
                appendHistoryFrames(room: room, entries: entries, to: id, into: &actions)
            }
        }
    }

    /// The history replay a joiner of `version` gets, built once per change of the history and
    /// shared by every joiner until then; nil when a version 1 joiner gets none.
    private mutating func replay(of name: String, version: UInt16) -> SharedFrames? {
        let historySize = limits.historySize
        return withRoom(name) { room -> SharedFrames? in
            if version >= 2 {
                if let cached = room.replayV2 { return cached }
                // One page of the most recent history, topics included; the client fetches more
                // with `fetchHistory` if it needs to reach further back.
                var (entries, complete) = room.history.page(
                    .before, from: 0, limit: historySize, budget: Self.listFrameBudget, cost: Self.cost)
                if room.olderStored { complete = false }
                let replay = SharedFrames([.historyPage(room: name, epoch: room.epoch, complete: complete, entries: entries)])
                room.replayV2 = replay
                return replay
            }
            if let cached = room.replayV1 { return cached.frames.isEmpty ? nil : cached }
            var frames: [Frame] = []
            Self.splitIntoFrames(room.history.recentMessages(historySize), cost: Self.cost) { part, _ in
                if !part.isEmpty { frames.append(.history(room: name, entries: part)) }
            }
            let replay = SharedFrames(frames)
            room.replayV1 = replay
            return frames.isEmpty ? nil : replay
        } ?? nil
    }

    // MARK: Room events

    /// Why `id` may not add an event to `room` with `request` now, as the `error` code and reason
    /// to refuse it with; nil when it may. One rule for every mode: the sender is in the room,
    /// and the room's log takes events — a cluster's Redis is reachable; a store whose commits
    /// fail takes no stored event (a line, a topic) until one succeeds.
    func roomEventRefusal(_ request: FrameType, in room: String, for id: ClientID) -> (code: ErrorCode, reason: String)? {
        guard isMember(id, of: room) else { return (.notInRoom, "you are not in #\(room)") }
        if isClustered, !cluster.available {
            let what = request == .part ? "cannot leave #\(room) now" : request == .setTopic ? "#\(room): topic not set" : "#\(room): not delivered"
            return (.unavailable, unavailableText(what))
        }
        if request != .part, let storageFailure { return (.storageFailed, Self.notStored(storageFailure)) }
        // On every line's path: a flag read in place (a copy of the room's moderation would
        // retain its sets); the rules are asked only in a moderated room or of a locked topic.
        guard request != .part, let index = rooms.index(forKey: room) else { return nil }
        if request == .setTopic, rooms.values[index].moderation.settings.topicLock, let setter = actor(id, in: room) {
            return RoomRules.settingTopic(setter, in: room, settings: rooms.values[index].moderation.settings)
        }
        if request == .say || request == .emote, rooms.values[index].moderation.settings.moderated, let speaker = actor(id, in: room) {
            return RoomRules.speaking(speaker, in: room, settings: rooms.values[index].moderation.settings)
        }
        return nil
    }

    /// Adds `event` — a `left`, a line or a topic, its `seq` and time not yet given — that `id`
    /// asked for with `request` (a frame of `size` bytes) to its room: the one path of a part, a
    /// line and a topic change in every mode. Refused by `roomEventRefusal`, or else the room's
    /// log takes it: numbered here and broadcast now (memory), staged for the turn's commit too
    /// (a store), or numbered by Redis and delivered when it comes back (a cluster node).
    private mutating func addRoomEvent(
        _ event: Frame, for request: FrameType, from id: ClientID, size: Int, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        guard let name = Self.room(of: event) else { preconditionFailure("\(request) adds a room event") }
        if let refusal = roomEventRefusal(request, in: name, for: id) {
            refuse(request, refusal.code, refusal.reason, to: id, into: &actions)
            return
        }
        if request == .part {
            // It stops being a member for its own requests now, and for the room once its `left`
            // — its acknowledgement — is sent.
            clients[id.slot]?.rooms.removeAll { $0 == name }
        }
        appendRoomEvent(event, in: name, from: id, size: size, departure: request == .part ? .afterHearingIt : .stays, at: now, into: &actions)
    }

    /// How the member that caused a room event stands to it (`appendRoomEvent`).
    enum Departure {
        /// It stays a member.
        case stays
        /// It leaves with the event, after hearing it: its `left`, its `kicked`.
        case afterHearingIt
        /// It is gone (its `quit`): it is not told, and in a room it leaves empty the event takes
        /// no `seq`, since nobody hears it.
        case gone
    }

    /// `room`'s log takes `event`, which `id` caused (with a request of `size` bytes), once its
    /// rules let it (`addRoomEvent`, `rename`, `join`, a kick, a mode change, a quit): numbered here
    /// and delivered now (memory), staged for the turn's commit too (a store), or numbered by
    /// Redis and delivered when it comes back (a cluster node). Every room event kind takes this
    /// one path, and reaches the members by one rule (`deliverRoomEvent`). `except`: a member not
    /// told (a joiner learns its roles from its `roomModes`).
    mutating func appendRoomEvent(
        _ event: Frame, in name: String, from id: ClientID, size: Int, departure: Departure = .stays, except: ClientID? = nil,
        at now: ServerTime, into actions: inout [ChatAction]
    ) {
        if isClustered {
            clusterAppend(event, in: name, from: id, size: size)
            return
        }
        let time = now.wallMillis
        // Most events (every line) reach every member as they are: broadcast in the room's
        // closure below. A kick or a mode change goes by version, and a role announced to the
        // others skips a member: those few take `deliverRoomEvent` after it.
        let byRule: Bool
        switch event {
        case .kicked, .modeChanged: byRule = true
        default: byRule = except != nil
        }
        var ruledTo: [ClientID] = []
        // The number the log's change for this event takes (`appendToLog`), in durable mode.
        let logNumber: UInt64 = isDurable ? logAppends + 1 : 0
        // In place (`withRoom`), and returning plain values: reading `rooms[name]!` would copy the
        // room, and returning the frame from the closure copied it through the runtime's generic
        // tuple witnesses — both on the per-message path (callgrind: 18 instructions a delivery).
        guard
            let (seq, isEmpty) = withRoom(name, { room -> (UInt64, Bool) in
                if departure == .gone {
                    room.removeMember(id)
                    // Nobody hears it: it takes no seq. The log still learns when the room
                    // emptied, which its retention counts the room's idle time from.
                    if room.members.isEmpty {
                        if logNumber != 0 { room.lastLogAppend = logNumber }
                        return (0, true)
                    }
                }
                let seq = room.nextSeq()
                let frame = Self.stamped(event, seq: seq, time: time)!
                if case .topic(_, _, _, let setBy, let text) = frame {
                    room.topic = text.isEmpty ? nil : ChatRoom.Topic(text: text, setBy: setBy, time: time, seq: seq)
                }
                if logNumber != 0 { room.lastLogAppend = logNumber }
                if byRule {
                    ruledTo = except.map { except in room.members.filter { $0 != except } } ?? room.members
                } else {
                    actions.append(.broadcast(frame, to: room.members))
                }
                if departure == .afterHearingIt { room.removeMember(id) }
                return (seq, room.members.isEmpty)
            })
        else { return }
        if byRule, seq != 0, let frame = Self.stamped(event, seq: seq, time: time) { deliverRoomEvent(frame, to: ruledTo, into: &actions) }
        let entry = seq == 0 ? nil : Self.historyEntry(of: event, seq: seq, time: time)
        if let entry { recordHistory(entry, in: name) }
        if logNumber != 0 { appendToLog(name, event: entry, number: logNumber, at: time) }
        if isEmpty { removeEmptyRoom(name) }
    }

    /// Delivers a numbered room event to `recipients`, in every mode (appended here, or delivered
    /// from Redis): a kick reaches clients of versions 1–3 as `left` with its `seq`, and a mode
    /// change reaches version 4 clients alone (older ones see a gap in the `seq`s), as
    /// PROTOCOL.md says; every other event reaches them all as it is.
    mutating func deliverRoomEvent(_ frame: Frame, to recipients: [ClientID], into actions: inout [ChatAction]) {
        switch frame {
        case .kicked(let room, let seq, let time, let nick, _, _):
            let (current, older) = splitByVersion(recipients)
            if !current.isEmpty { actions.append(.broadcast(frame, to: current)) }
            if !older.isEmpty { actions.append(.broadcast(.left(room: room, seq: seq, time: time, nick: nick), to: older)) }
        case .modeChanged:
            let (current, _) = splitByVersion(recipients)
            if !current.isEmpty { actions.append(.broadcast(frame, to: current)) }
        default:
            actions.append(.broadcast(frame, to: recipients))
        }
    }

    /// `ids` of version 4 and later, and those of earlier versions.
    private func splitByVersion(_ ids: [ClientID]) -> (current: [ClientID], older: [ClientID]) {
        var current: [ClientID] = []
        var older: [ClientID] = []
        for id in ids {
            if version(of: id) >= 4 { current.append(id) } else { older.append(id) }
        }
        return (current, older)
    }

    /// The history entry `event` is stored as, numbered `seq` at `time`; nil for events that are
    /// not kept as history (joins, leaves, kicks, mode changes).
    private static func historyEntry(of event: Frame, seq: UInt64, time: UInt64) -> HistoryEntry? {
        switch event {
        case .message(_, _, _, let sender, let text): HistoryEntry(kind: .message, seq: seq, time: time, sender: sender, text: text)
        case .action(_, _, _, let sender, let text): HistoryEntry(kind: .action, seq: seq, time: time, sender: sender, text: text)
        case .topic(_, _, _, let setBy, let text): HistoryEntry(kind: .topic, seq: seq, time: time, sender: setBy, text: text)
        default: nil
        }
    }

    mutating func tell(
        _ recipient: String, text: String, id: ClientID, nick: String, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        guard let target = nicks[ChatName.nickKey(recipient)], let targetNick = self.nick(of: target) else {
            refuse(.tell, .noSuchNick, "no one is called \(recipient)", to: id, into: &actions)
            return
        }
        let frame = Frame.direct(sender: nick, recipient: targetNick, time: now.wallMillis, text: text)
        actions.append(.broadcast(frame, to: target == id ? [id] : [target, id]))
        if let away = clients[target.slot]?.away, version(of: id) >= 2 {
            actions.append(.send(.away(nick: targetNick, text: away), to: id))
        }
    }

    // MARK: History budget

    /// Keeps `entry` in `name`'s history, then forgets the globally oldest entries while all
    /// rooms' history costs more than the budget allows.
    private mutating func recordHistory(_ entry: HistoryEntry, in name: String) {
        // Every room access here goes through `withRoom`: `rooms[name]?.epoch` would copy the
        // room, retaining and releasing its members and history, on the per-message path.
        guard limits.historySize > 0,
            let (epoch, addedEntries, addedBytes) = withRoom(name, { room in
                let (countBefore, bytesBefore) = (room.history.count, room.history.bytes)
                _ = room.record(entry)  // what it forgot shows in the difference below
                return (room.epoch, room.history.count - countBefore, room.history.bytes - bytesBefore)
            })
        else { return }
        historyEntries += addedEntries
        historyBytes += addedBytes
        historyOrder.append(HistoryRecord(room: name, epoch: epoch, seq: entry.seq))
        while historyBytes > budget.history, let record = historyOrder.popFirst() {
            guard withRoom(record.room, { $0.epoch }) == record.epoch else { continue }
            let forgotten = withRoom(record.room) { room in room.forgetOldest(ifSeq: record.seq) }!
            if forgotten > 0 {
                historyBytes -= forgotten
                historyEntries -= 1
            }
        }
        if historyOrder.count > 2 * historyEntries + 1024 {
            historyOrder = Deque(historyOrder.filter { record in
                guard let room = rooms[record.room], room.epoch == record.epoch, let first = room.history.firstSeq else {
                    return false
                }
                return record.seq >= first
            })
        }
    }

    // MARK: Storage

    /// Makes the room `name` from what the store holds of it, or anew with a new epoch when
    /// nothing is stored.
    mutating func makeRoom(_ name: String, from stored: StoredRoom?) {
        let historySize = limits.historySize
        guard rooms[name] == nil else { return }
        guard let stored else {
            rooms[name] = ChatRoom(name: name, epoch: epochs.next(), historySize: historySize, historyBytes: budget.historyPerRoom)
            applyRegisteredSettings(to: name)
            return
        }
        rooms[name] = ChatRoom(stored: stored, historySize: historySize, historyBytes: budget.historyPerRoom)
        applyRegisteredSettings(to: name)
        for entry in stored.recent { recordHistory(entry, in: name) }
    }

    /// Whether `id` is a member of `room`; false for a client that is gone.
    @inline(__always)
    func isMember(_ id: ClientID, of room: String) -> Bool { clients[id.slot]?.rooms.contains(room) == true }

    /// The protocol version `id` speaks; 1 for a client that is gone.
    @inline(__always)
    func version(of id: ClientID) -> UInt16 { clients[id.slot]?.version ?? 1 }

    /// The address `id` connected from; empty for a client that is gone.
    @inline(__always)
    func address(of id: ClientID) -> String { clients[id.slot]?.address ?? "" }

    /// Adds `name`'s change to the log batch, with `event` if it is one kept as history, at
    /// `time` (durable mode), as change `number`: the core's next, which `appendRoomEvent`
    /// noted in the room.
    private mutating func appendToLog(_ name: String, event: HistoryEntry?, number: UInt64, at time: UInt64) {
        logAppends = number
        // A message or an action changes only the room's last seq and activity: with the room's
        // record changed last, the batch moves those in place, and the record is not built anew
        // (a lookup of the room and copies of its name and topic, per message).
        if let event, event.kind != .topic, logBatch.advance(name, to: event, at: time, number: number) { return }
        // In place (`withRoom`): `rooms[name]` would copy the room, its members and history.
        guard let record = withRoom(name, { $0.record(at: time) }) else { return }
        logBatch.add(record, event: event, number: number)
    }

    /// The number of `name`'s latest change for the log (0 for none, or no such room).
    private mutating func lastLogChange(of name: String) -> UInt64 {
        // In place (`withRoom`), as above.
        withRoom(name) { $0.lastLogAppend } ?? 0
    }

    /// Whether the rooms changed since the last `takeLogBatch()` (durable mode; never in the
    /// others): every delivery the core made meanwhile must wait for the commit of those changes.
    /// Inlinable: the server asks after every request, and a call across the module would copy
    /// the whole core.
    @inlinable
    public var hasLogChanges: Bool { !logBatch.isEmpty }

    /// The rooms' changes for their log since the last call (durable mode; always empty in the
    /// others), for the server to stage for its next commit: every delivery the core made
    /// meanwhile must wait until that commit lands.
    public mutating func takeLogBatch() -> LogBatch {
        var batch = LogBatch()
        swap(&batch, &logBatch)
        return batch
    }

    /// Forgets the empty room `name` — in durable mode, once its changes are committed
    /// (`logCommitted(through:)` looks again).
    mutating func removeEmptyRoom(_ name: String) {
        resetModeration(of: name)
        guard isDurable else {
            removeRoom(name)
            return
        }
        logBatch.occupancyChanged(of: name, occupied: false)
        if lastLogChange(of: name) > logCommittedThrough {
            roomsAwaitingCommit.insert(name)
        } else {
            removeRoom(name)
        }
    }

    /// The server's log committed every change up to the one numbered `number`
    /// (`LogBatch.through`): the empty rooms that waited for their changes to be stored leave
    /// memory, and a joiner reads them back from the log. A failed commit reports nothing; the
    /// next one that succeeds holds its rooms' changes again and reports a number as high.
    public mutating func logCommitted(through number: UInt64) {
        guard number > logCommittedThrough else { return }
        logCommittedThrough = number
        for name in roomsAwaitingCommit where lastLogChange(of: name) <= number {
            roomsAwaitingCommit.remove(name)
            if rooms[name]?.members.isEmpty == true { removeRoom(name) }
        }
    }

    /// A commit failed with `error`: its events (`unstored`) were not stored, so they are taken
    /// out of the history in memory and never delivered (the server drops them); each sender
    /// still connected gets `storageFailed`, and room events are refused until
    /// `storageRecovered()`.
    public mutating func storageFailed(_ error: LogError, unstored: [StoredEvent], into actions: inout [ChatAction]) {
        storageFailure = error.message
        var told: Set<String> = []
        // The seqs of what was not stored are given back where nothing delivered came after them.
        var failedSeqs: [String: Set<UInt64>] = [:]
        for event in unstored { failedSeqs[event.room, default: []].insert(event.entry.seq) }
        for (name, seqs) in failedSeqs { withRoom(name) { $0.giveBack(seqs: seqs) } }
        for event in unstored {
            let name = event.room
            let entry = event.entry
            if rooms[name] != nil {
                let forgotten = withRoom(name) { room in room.forget(seq: entry.seq) }!
                if forgotten > 0 {
                    historyBytes -= forgotten
                    historyEntries -= 1
                }
                if entry.kind == .topic, rooms[name]!.topic?.seq == entry.seq {
                    // The topic before it is what the store holds, unless a later commit in flight
                    // changes it: read back, unless a later topic replaces this one first.
                    awaitStoredTopic(of: name, replacing: entry.seq)
                }
            }
            guard let sender = nicks[ChatName.nickKey(entry.sender)], told.insert(entry.sender).inserted else { continue }
            let request: FrameType = entry.kind == .topic ? .setTopic : entry.kind == .action ? .emote : .say
            let reason = "#\(name): not delivered: \(error.message)"
            actions.append(.send(.error(code: .storageFailed, fatal: false, frameType: request, reason: reason), to: sender))
        }
    }

    /// A commit succeeded: room events are accepted again.
    public mutating func storageRecovered() {
        storageFailure = nil
    }

    private static func notStored(_ failure: String) -> String {
        "the server cannot store room events now, so it sends none (\(failure))"
    }

    /// Forgets the room `name`, and with it the history it kept.
    private mutating func removeRoom(_ name: String) {
        guard let room = rooms.removeValue(forKey: name) else { return }
        historyBytes -= room.history.bytes
        historyEntries -= room.history.count
    }

    private func sendHistory(of name: String, count: Int, id: ClientID, into actions: inout [ChatAction]) {
        guard isMember(id, of: name), let room = rooms[name] else {
            refuse(.requestHistory, .notInRoom, "you are not in #\(name)", to: id, into: &actions)
            return
        }
        let entries = room.history.recentMessages(min(count, limits.historySize))
        if entries.isEmpty {
            actions.append(.send(.history(room: name, entries: []), to: id))
        } else {
            appendHistoryFrames(room: name, entries: entries, to: id, into: &actions)
        }
    }

    /// Answers `fetchHistory` with one `historyPage`: at most `limit` (and the history size)
    /// entries next to `seq` that fit one frame.
    private mutating func sendHistoryPage(
        of name: String, _ direction: HistoryDirection, from seq: UInt64, limit: Int, id: ClientID,
        into actions: inout [ChatAction]
    ) {
        guard isMember(id, of: name), let room = rooms[name] else {
            refuse(.fetchHistory, .notInRoom, "you are not in #\(name)", to: id, into: &actions)
            return
        }
        let limit = min(limit, limits.historySize)
        let (entries, complete) = room.history.page(
            direction, from: seq, limit: limit, budget: Self.listFrameBudget, cost: Self.cost)
        if isDurable, room.olderStored, Self.pageReachesPastMemory(direction, from: seq, memory: room.history, complete: complete) {
            awaitPage(of: name, direction, from: seq, limit: limit, for: id)
            return
        }
        actions.append(.send(.historyPage(room: name, epoch: room.epoch, complete: complete, entries: entries), to: id))
    }

    /// Answers `id`'s `fetchHistory` with the page read from the store (`awaitPage`).
    mutating func pageRead(
        of name: String, _ direction: HistoryDirection, from seq: UInt64, for id: ClientID,
        _ answer: Result<RoomReadAnswer, LogError>, into actions: inout [ChatAction]
    ) {
        guard clients[id.slot]?.rooms.contains(name) == true, let room = rooms[name] else {
            refuse(.fetchHistory, .notInRoom, "you are not in #\(name)", to: id, into: &actions)
            return
        }
        switch answer {
        case .success(.page(let entries, var complete)):
            // The store has only what is committed: newer events in memory lie beyond this page.
            if direction == .after, let newest = room.history.lastSeq, newest > (entries.last?.seq ?? seq) {
                complete = false
            }
            actions.append(.send(.historyPage(room: name, epoch: room.epoch, complete: complete, entries: entries), to: id))
        case .success(.room):
            preconditionFailure("a page read answers with a page")
        case .failure(let error):
            refuse(.fetchHistory, .storageFailed, "cannot read the history of #\(name) now: \(error)", to: id, into: &actions)
        }
    }

    /// Whether a page next to `seq` needs events older than `memory` holds: scrolling back past
    /// its oldest entry, or catching up from before it.
    private static func pageReachesPastMemory(
        _ direction: HistoryDirection, from seq: UInt64, memory: RoomHistory, complete: Bool
    ) -> Bool {
        switch direction {
        case .before: return complete
        // `seq` comes from the client: `seq + 1` would trap at 2^64 − 1.
        case .after: return memory.firstSeq.map { seq < $0 && $0 - seq > 1 } ?? true
        }
    }

    func refuse(
        _ request: FrameType, _ code: ErrorCode, _ reason: String, to id: ClientID, into actions: inout [ChatAction]
    ) {
        actions.append(.send(.error(code: code, fatal: false, frameType: request, reason: reason), to: id))
    }

    // MARK: Helpers

    /// Runs `body` on the room named `name` in place (one hash lookup, no copy of its members).
    @discardableResult
    mutating func withRoom<Result>(_ name: String, _ body: (inout ChatRoom) -> Result) -> Result? {
        guard let index = rooms.index(forKey: name) else { return nil }
        return body(&rooms.values[index])
    }

    /// Sends `id` every room with its member count and topic, sorted by name, in as many
    /// frames as it takes: `roomListPage`s (the last one `complete`) to a version 2 client,
    /// `roomList`s to a version 1 client.
    private func appendRoomList(to id: ClientID, into actions: inout [ChatAction]) {
        let paged = version(of: id) >= 2
        // The rooms kept here: a cluster node answers `listRooms` from Redis (`clusterReceived`),
        // and its `rooms` would list none.
        let list = rooms.filter { !$0.value.members.isEmpty }.sorted { $0.key < $1.key }.map { name, room in
            RoomInfo(name: name, memberCount: UInt32(room.members.count), topic: room.topic?.text ?? "")
        }
        Self.splitIntoFrames(list, cost: Self.cost) { part, isLast in
            actions.append(.send(paged ? .roomListPage(complete: isLast, rooms: part) : .roomList(rooms: part), to: id))
        }
    }

    /// Sends `id` the `nicks` of `room`'s members, in as many frames as it takes: `membersPage`s
    /// (the last one `complete`) to a version 2 client, `members` to a version 1 client.
    func sendMembers(_ nicks: [String], of room: String, to id: ClientID, into actions: inout [ChatAction]) {
        let paged = version(of: id) >= 2
        Self.splitIntoFrames(nicks, cost: Self.cost(nick:)) { part, isLast in
            actions.append(
                .send(paged ? .membersPage(room: room, complete: isLast, nicks: part) : .members(room: room, nicks: part), to: id))
        }
    }

    /// Cuts `items` into consecutive parts whose `cost` fits `budget` (a frame's list budget)
    /// and hands each to `emit` with whether it is the last; an empty list is one empty part.
    static func splitIntoFrames<Item>(
        _ items: [Item], budget: Int = listFrameBudget, cost: (Item) -> Int,
        emit: (_ part: [Item], _ isLast: Bool) -> Void
    ) {
        var part: [Item] = []
        var left = budget
        for item in items {
            let itemCost = cost(item)
            if itemCost > left, !part.isEmpty {
                emit(part, false)
                part.removeAll()
                left = budget
            }
            part.append(item)
            left -= itemCost
        }
        emit(part, true)
    }

    /// An upper bound of the bytes `entry` takes in a `history` or `historyPage` frame: its
    /// strings plus at most 32 bytes of kind, deltas and lengths.
    static func cost(_ entry: HistoryEntry) -> Int {
        32 + entry.sender.utf8.count + entry.text.utf8.count
    }

    /// An upper bound of the bytes `room` takes in a `roomList` or `roomListPage` frame.
    static func cost(_ room: RoomInfo) -> Int {
        room.name.utf8.count + room.topic.utf8.count + 16
    }

    /// An upper bound of the bytes `nick` takes in a `members` or `membersPage` frame.
    static func cost(nick: String) -> Int {
        nick.utf8.count + 1
    }

    /// Splits `entries` into `history` frames that each fit the protocol's frame limit.
    func appendHistoryFrames(room: String, entries: [HistoryEntry], to id: ClientID, into actions: inout [ChatAction]) {
        Self.splitIntoFrames(entries, cost: Self.cost) { part, _ in
            actions.append(.send(.history(room: room, entries: part), to: id))
        }
    }

    /// The longest prefix of `text` of at most `bytes` UTF-8 bytes that ends on a character.
    static func prefix(of text: String, bytes: Int) -> String {
        var end = text.startIndex
        var used = 0
        for character in text {
            used += character.utf8.count
            guard used <= bytes else { break }
            end = text.index(after: end)
        }
        return String(text[..<end])
    }

    /// Bytes available for the list in a list-carrying frame: the protocol's limit less room for
    /// the type, room name, epoch, flags and counts.
    static let listFrameBudget = WireProtocol.maxFrameSize - 128
}

/// Where one kept history entry is, in the order entries were kept across all rooms.
private struct HistoryRecord: Sendable {
    var room: String
    /// Tells the room from a later one of the same name.
    var epoch: UInt64
    var seq: UInt64
}

/// What all connections from one address share.
struct AddressState: Sendable {
    var connections = 0
    var bucket: TokenBucket
    var byteBucket: TokenBucket
    /// What the address's frames cost to deliver, every recipient counted.
    var fanoutBucket: TokenBucket
    /// Connections opened.
    var connectBucket: TokenBucket

    /// Full buckets as of `now`, no connections yet.
    init(limits: ChatLimits, now: UInt64) {
        bucket = TokenBucket(burst: limits.addressMessageBurst, now: now)
        byteBucket = TokenBucket(burst: limits.addressByteBurst, now: now)
        fanoutBucket = TokenBucket(burst: limits.addressFanoutBurst, now: now)
        connectBucket = TokenBucket(burst: limits.addressConnectionBurst, now: now)
    }

    /// Whether every bucket is full again as of `now`: forgetting the address would change nothing.
    mutating func isFull(_ limits: ChatLimits, now: UInt64) -> Bool {
        return (limits.addressMessageRate == 0
            || bucket.has(Double(limits.addressMessageBurst), rate: limits.addressMessageRate, burst: limits.addressMessageBurst, now: now))
            && (limits.addressByteRate == 0
                || byteBucket.has(Double(limits.addressByteBurst), rate: Double(limits.addressByteRate), burst: limits.addressByteBurst, now: now))
            && (limits.addressFanoutRate == 0
                || fanoutBucket.has(
                    Double(limits.addressFanoutBurst), rate: Double(limits.addressFanoutRate), burst: limits.addressFanoutBurst, now: now))
            && (limits.addressConnectionRate == 0
                || connectBucket.has(
                    Double(limits.addressConnectionBurst), rate: limits.addressConnectionRate, burst: limits.addressConnectionBurst, now: now))
    }
}

/// Wrong passwords from one address.
private struct PasswordFailures: Sendable {
    /// Wrong passwords since the last lockout.
    var count = 0
    /// Uptime milliseconds of the last wrong password.
    var lastFailure: UInt64 = 0
    /// Until when (uptime milliseconds) the address is refused.
    var lockedUntil: UInt64 = 0
}

/// What the chat knows about one connection.
///
/// Kept small: the chat keeps one per slot in an array that grows by doubling, so each byte here
/// can cost two per connection. What few clients ever have (an away message, a refusal held
/// back) shares one optional box, and the small counters and flags sit together at the end.
@usableFromInline struct ClientState: Sendable {
    /// Runs `body` on this client in place: one access through `clients[slot]?.`, where reading
    /// fields out of the optional one by one would copy the whole client for each.
    @inline(__always)
    mutating func update<Result>(_ body: (inout ClientState) -> Result) -> Result { body(&self) }

    /// A frame came from this client at `time`: it was heard, and owes no ping. Returns what
    /// serving the frame reads of it, or nil while it waits out a refusal (`pendingRefusal`).
    @inline(__always)
    mutating func heard(at time: UInt64) -> (address: String, nick: String?, version: UInt16)? {
        guard pendingRefusal == nil else { return nil }
        lastHeard = time
        pinged = false
        return (address, nick, version)
    }

    let address: String
    /// nil until the handshake completes.
    var nick: String?
    /// The rooms the client is in, in joining order; short (at most `maxRoomsPerClient`).
    var rooms: [String] = []
    let connectedAt: UInt64
    var lastHeard: UInt64
    var bucket: TokenBucket
    var byteBucket: TokenBucket
    /// The away message and the held-back refusal; nil while neither is set, as for most clients.
    private var seldomSet: SeldomSet?
    private var storedRefusedInARow: UInt32 = 0
    /// The protocol version agreed in `welcome`; 1 until then.
    @usableFromInline var version: UInt16 = 1
    var pinged = false

    /// Whether a password frame from this client may be looked at: it came over TLS or from a
    /// loopback address, or the operator allows plain passwords (ChatCore+Accounts.swift).
    var passwordsAllowed = false

    /// What few clients have, kept together out of line.
    struct Seldom: Sendable {
        var away: String?
        var pendingRefusal: (Disconnection, UInt64)?
        /// The key of the account the client is logged in as (ChatCore+Accounts.swift).
        var account: String?
        /// A version 3 `hello` for a reserved nick, waiting for the `login` that proves it
        /// (ChatCore+Accounts.swift): the nick, the client's version, and since when (uptime ms).
        var pendingHello: (nick: String, version: UInt16, since: UInt64)?

        var isEmpty: Bool { away == nil && pendingRefusal == nil && account == nil && pendingHello == nil }
    }

    /// Immutable, so copies of a `ClientState` that share one stay independent values.
    private final class SeldomSet: Sendable {
        let values: Seldom

        init(_ values: Seldom) { self.values = values }
    }

    /// The away message set with `setAway`; nil when present.
    var away: String? {
        get { seldomSet?.values.away }
        set { changeSeldom { $0.away = newValue } }
    }

    /// A refusal held back until the uptime given (a wrong password).
    var pendingRefusal: (Disconnection, UInt64)? {
        get { seldomSet?.values.pendingRefusal }
        set { changeSeldom { $0.pendingRefusal = newValue } }
    }

    /// The key of the account the client is logged in as; nil for a guest.
    var account: String? {
        get { seldomSet?.values.account }
        set { changeSeldom { $0.account = newValue } }
    }

    /// A handshake waiting for its `login` (a version 3 `hello` for a reserved nick).
    var pendingHello: (nick: String, version: UInt16, since: UInt64)? {
        get { seldomSet?.values.pendingHello }
        set { changeSeldom { $0.pendingHello = newValue } }
    }

    /// Frames refused in a row for exceeding a rate.
    var refusedInARow: Int {
        get { Int(storedRefusedInARow) }
        // Compared with a limit of a few hundred at most, after which the client is let go.
        set { storedRefusedInARow = UInt32(clamping: newValue) }
    }

    private mutating func changeSeldom(_ change: (inout Seldom) -> Void) {
        var values = seldomSet?.values ?? Seldom()
        change(&values)
        seldomSet = values.isEmpty ? nil : SeldomSet(values)
    }

    init(address: String, burst: Int, byteBurst: Int, now: UInt64) {
        self.address = address
        connectedAt = now
        lastHeard = now
        bucket = TokenBucket(burst: burst, now: now)
        byteBucket = TokenBucket(burst: byteBurst, now: now)
    }
}
