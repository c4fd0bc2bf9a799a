import ChatAccounts
import ChatCluster
import ChatCore
import ChatProtocol
import Dispatch
import Glibc
import Logging
import RedisProtocol
import SocketCore

/// Where a node finds its cluster: `--cluster redis://HOST:PORT` (docs/CLUSTER.md).
public struct ClusterConfiguration: Sendable, Equatable {
    /// Redis's host name or address.
    public var host: String
    /// Redis's port.
    public var port: Int
    /// This node's id, unique in the cluster: by default host name, process id and a random part,
    /// so a restarted node is a new one and its predecessor is reaped.
    public var nodeID: String
    /// How long a silent node keeps its nicks and members before another node reaps it; its
    /// heartbeat beats five times as often.
    public var nodeTimeout: Duration = .seconds(5)

    /// A cluster at `host:port`, this node called `nodeID`.
    public init(host: String, port: Int, nodeID: String = ClusterConfiguration.makeNodeID()) {
        self.host = host
        self.port = port
        self.nodeID = nodeID
    }

    /// Parses `redis://HOST:PORT` (the port defaults to 6379; IPv6 hosts in brackets); throws a
    /// sentence that says what is wrong with anything else.
    public init(url: String, nodeID: String = ClusterConfiguration.makeNodeID()) throws(ClusterURLError) {
        let prefix = "redis://"
        guard url.hasPrefix(prefix) else {
            throw ClusterURLError("\"\(url)\" is not a redis://HOST:PORT address (for example redis://127.0.0.1:6379)")
        }
        var rest = Substring(url.dropFirst(prefix.count))
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        guard !rest.isEmpty, !rest.contains("/"), !rest.contains("@"), !rest.contains("?") else {
            throw ClusterURLError("\"\(url)\": give only redis://HOST:PORT, without user, password, database or options")
        }
        var host: Substring
        var portText: Substring?
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw ClusterURLError("\"\(url)\": an IPv6 address needs its closing ]") }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw ClusterURLError("\"\(url)\": expected :PORT after the address") }
                portText = after.dropFirst()
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        } else {
            host = rest
        }
        guard !host.isEmpty else { throw ClusterURLError("\"\(url)\" names no host") }
        let port = portText.map { Int($0) } ?? 6379
        guard let port, (1...65_535).contains(port) else {
            throw ClusterURLError("\"\(url)\": the port must be a number from 1 to 65535")
        }
        self.init(host: String(host), port: port, nodeID: nodeID)
    }

    /// `hostname-pid-random`.
    public static func makeNodeID() -> String {
        var name = [CChar](repeating: 0, count: 256)
        let host = gethostname(&name, name.count) == 0 ? String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : "node"
        let random = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        return "\(host)-\(getpid())-\(random)"
    }
}

/// A `--cluster` address that cannot be used, and why.
public struct ClusterURLError: Error, CustomStringConvertible, Sendable {
    /// What is wrong with it.
    public var description: String

    init(_ description: String) { self.description = description }
}

/// A chat server's side of the cluster: carries out the `ClusterRequest`s of its `ChatCore`
/// against Redis through a `ClusterLink`, and hands the answers, the rooms' events and direct
/// messages back to the core (docs/CLUSTER.md).
///
/// Besides, it reaps: every second it asks Redis for nodes whose heartbeat stopped, and for each
/// one it is first to learn of, it announces the quits of that node's members. Quits and nick
/// releases that fail while Redis is away are kept and retried once the link is up again, so a
/// node's rooms do not keep members that left during an outage; so is the latest away message of
/// each nick, so other nodes' senders see what its holder set meanwhile.
///
/// Threading: confined to the server's queue, like the link and the core.
final class ClusterNode: @unchecked Sendable {
    /// Runs its body on the server's core, then carries out what the core did.
    typealias Answer = ((inout ChatCore, inout [ChatAction]) -> Void) -> Void

    let configuration: ClusterConfiguration
    /// The link to Redis; tests read its connections to know when Redis has answered everything.
    let link: ClusterLink
    private let queue: DispatchQueue
    private let logger: Logger
    /// The time an answer is given at: the server's clock, or a test's.
    private let now: () -> ServerTime
    /// The epoch a room gets when its first joiner's snapshot finds none.
    private var epochs: EpochSource
    /// An epoch drawn for a snapshot whose room had one already, kept for the next.
    private var spareEpoch: UInt64?
    private var answer: Answer = { _ in }
    /// Quits and releases to carry out once the link is up again.
    private var retries: [ClusterRequest] = []
    /// The latest away message of each nick of this node that Redis has not confirmed, by nick
    /// key, numbered so that an older one failing late does not replace it: sent now if the link
    /// is up, and again whenever it comes up until Redis has it.
    private var pendingAways: [String: (nick: String, text: String, number: UInt64)] = [:]
    private var awaysNumbered: UInt64 = 0
    private var reaper: DispatchSourceTimer?
    /// When the link last came up; nil while it is down.
    private var upSince: ContinuousClock.Instant?
    /// Dead nodes whose members' quits are being announced, so a reap that overlaps does not
    /// announce them twice.
    private var reaping: Set<String> = []
    /// Called once the link is closed after `stop`.
    private var stopped: (() -> Void)?
    /// Answers waiting for the next turn of the queue (`later`).
    private var deferred: [(inout ChatCore, inout [ChatAction]) -> Void] = []
    /// Connections whose requests wait for the cluster's answer to an earlier one.
    private(set) var waiters: [ClientConnection] = []
    /// Where round trips and reconnects are counted (`ChatServer.startRecordingMetrics`), or nil.
    var metrics: ServerMetrics?
    /// Whether the link has been up before, so that coming up again counts as a reconnect.
    private var wasUp = false
    /// The keys of the server operators' accounts (`--admin-account`), checked in Redis when the
    /// link first comes up.
    private let adminAccounts: [String]

    /// Whether both Redis connections are up.
    var linkIsUp: Bool { link.state == .up }
    /// Why the link is down, or nil.
    var linkProblem: String? { if case .down(let error) = link.state { "\(error)" } else { nil } }

    /// A node of the cluster `configuration` names, for a server configured as `chat`, whose
    /// answers are given at the time `clock` tells and whose new rooms take `epochs`.
    init(
        configuration: ClusterConfiguration, chat: ChatServerConfiguration, queue: DispatchQueue, logger: Logger,
        clock: @escaping () -> ServerTime = ChatServer.now, epochs: EpochSource = .random()
    ) {
        self.configuration = configuration
        self.queue = queue
        self.logger = logger
        now = clock
        self.epochs = epochs
        adminAccounts = chat.accounts.adminAccounts.sorted()
        link = ClusterLink(
            host: configuration.host, port: configuration.port, nodeID: configuration.nodeID,
            ttlMilliseconds: Int(configuration.nodeTimeout / .milliseconds(1)), limits: Self.parserLimits(maxFrameSize: chat.maxFrameSize),
            queue: queue)
    }

    /// What the node's Redis connections accept when clients' frames are at most `maxFrameSize`:
    /// an event's payload is a client's frame plus what a delivery adds to it (seq, time, sender:
    /// at most `WireProtocol.maxFrameSize - maxFrameSizeCeiling`). The nodes of one cluster share
    /// `--max-frame-size`: an event from a node that allows larger frames fails this node's
    /// connection (which then reconnects) when it arrives.
    static func parserLimits(maxFrameSize: Int) -> RESPParser.Limits {
        ClusterReplies.limits(maxPayload: maxFrameSize + WireProtocol.maxFrameSize - ChatServerConfiguration.maxFrameSizeCeiling)
    }

    /// Connects, on the server's queue; `answer` is how answers reach the core.
    func start(answer: @escaping Answer) {
        self.answer = answer
        link.onStateChange = { [self] state in linkChanged(to: state) }
        link.onEvent = { [self] room, event in
            self.answer { core, actions in
                core.clusterDeliver(room: room, seq: event.seq, time: event.time, payload: event.payload, into: &actions)
            }
        }
        link.onRegistrationLapsed = { [self] in
            logger.warning(
                "cluster: this node's registration lapsed (it was out of touch for longer than the node timeout, so its nicks may be taken); its clients are disconnected to connect again",
                metadata: ["cluster.node": "\(configuration.nodeID)"])
            answer { core, actions in core.clusterReaped(at: self.now(), into: &actions) }
        }
        link.onDirect = { [self] payload in
            // A ghost claim's notice (`NickRegistry.claimScript`) is text no frame starts with.
            let ghost = Array("ghost ".utf8)
            if payload.starts(with: ghost) {
                let key = String(decoding: payload.dropFirst(ghost.count), as: UTF8.self)
                return self.answer { core, actions in core.clusterGhost(nickKey: key, at: self.now(), into: &actions) }
            }
            // A server operator's kill on another node (`ClusterRequest.kill`): `kill KEY REASON`.
            let kill = Array("kill ".utf8)
            if payload.starts(with: kill) {
                let rest = String(decoding: payload.dropFirst(kill.count), as: UTF8.self)
                let parts = rest.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: false)
                let reason = parts.count > 1 ? String(parts[1]) : ""
                return self.answer { core, actions in
                    core.clusterKilled(nickKey: String(parts[0]), reason: reason, at: self.now(), into: &actions)
                }
            }
            self.answer { core, actions in core.clusterDirectReceived(payload, into: &actions) }
        }
        logger.info(
            "cluster node starting",
            metadata: ["cluster.node": "\(configuration.nodeID)", "cluster.redis": "\(configuration.host):\(configuration.port)"])
        link.start()
        reaper = queue.startRepeatingTimer(every: .seconds(1)) { [weak self] in
            guard let self else { return }
            reap()
            // Appends answer nothing when they succeed: the backlog's waiters are looked at here
            // too, not only when an event or answer arrives.
            if !waiters.isEmpty { answer { _, _ in } }
        }
    }

    /// Waits until what was sent to Redis has been carried out (at most `timeout`), then closes
    /// the link, and calls `completion` on the queue once its sockets are closed. The node's nicks
    /// not yet released go when other nodes reap it.
    func stop(timeout: Duration = .seconds(2), completion: @escaping () -> Void) {
        reaper?.cancel()
        reaper = nil
        stopped = completion
        guard let commands = link.commands else { return finishStopping() }
        commands.send("PING") { [self] _ in finishStopping() }
        queue.asyncAfter(deadline: .now() + .milliseconds(Int(timeout / .milliseconds(1)))) { [self] in finishStopping() }
    }

    private func finishStopping() {
        guard let completion = stopped else { return }
        stopped = nil
        link.stop { [self] in
            logger.info("cluster link closed", metadata: ["cluster.node": "\(configuration.nodeID)"])
            completion()
        }
    }

    /// The most commands that may wait for Redis's reply before clients' requests wait too.
    /// Enough to keep the pipeline full (a reply takes a fraction of a millisecond); few enough
    /// that what a slow or stopped Redis leaves queued stays small (at most this many frames).
    static let maxCommandsInFlight = 1024

    /// Whether so many commands wait for Redis that no more requests are served: a Redis that
    /// is slow (or stopped, until the link notices) pushes back on the clients, through TCP,
    /// instead of growing the node's queue.
    var isBacklogged: Bool {
        (link.commands?.waitingCount ?? 0) >= Self.maxCommandsInFlight
    }

    /// Holds `connection`'s requests until the core's answer for it arrives, and while the
    /// node is backlogged.
    func hold(_ connection: ClientConnection) {
        guard !connection.waitingForAnswer else { return }
        connection.waitingForAnswer = true
        waiters.append(connection)
        connection.updateReading()
    }

    /// Takes the held connections whose answer arrived, unless the node is backlogged.
    func releaseAnswered(_ isAwaiting: (ClientID) -> Bool) -> [ClientConnection] {
        guard !waiters.isEmpty, !isBacklogged else { return [] }
        var released: [ClientConnection] = []
        waiters.removeAll { connection in
            guard !connection.isActive || !isAwaiting(connection.id) else { return false }
            connection.waitingForAnswer = false
            released.append(connection)
            return true
        }
        return released
    }

    // MARK: The link

    private func linkChanged(to state: ClusterLink.State) {
        switch state {
        case .up:
            logger.notice("cluster link up: room events are accepted", metadata: ["cluster.node": "\(configuration.nodeID)"])
            upSince = .now
            if wasUp { metrics?.clusterReconnects += 1 } else { warnOfMissingAdminAccounts() }
            wasUp = true
            answer { core, _ in core.clusterAvailability(true) }
            // Server bans: every change is heard, and what was missed while the link was down is read now.
            link.roomLog?.listen(to: ClusterServerBans.channel) { [self] _ in readServerBans() }
            readServerBans()
            let pending = retries
            retries = []
            carryOut(pending)
            for key in pendingAways.keys { sendAway(of: key) }
        case .down(let error):
            upSince = nil
            logger.warning(
                "cluster link down: room events are refused with unavailable until it is back",
                metadata: ["cluster.node": "\(configuration.nodeID)", "cluster.error": "\(error)"])
            answer { core, _ in core.clusterAvailability(false, reason: "\(error)") }
        case .connecting:
            break
        }
    }

    /// Logs a warning naming each `--admin-account` that has no account in the cluster yet: a
    /// client may not register one (it is the operator's to make, with `chat-server account add
    /// NAME --cluster …`), so until then nobody is a server operator through it.
    private func warnOfMissingAdminAccounts() {
        guard !adminAccounts.isEmpty, let commands = link.commands else { return }
        ClusterAccounts(commands: commands).missing(adminAccounts) { [logger] result in
            guard case .success(let missing) = result else { return }
            for key in missing {
                logger.warning("\(ChatServer.missingAdminAccountWarning(key)): create it with `chat-server account add \(key) --cluster redis://HOST:PORT`")
            }
        }
    }

    /// Reads the cluster's server bans into the core, which ends its sessions that a new one
    /// matches; a read that fails waits for the next change or reconnect.
    private func readServerBans() {
        guard let commands = link.commands else { return }
        ClusterServerBans(commands: commands).all { [self] result in
            guard case .success(let entries) = result else { return }
            answer { core, actions in core.clusterServerBansRead(entries, at: self.now(), into: &actions) }
        }
    }

    // MARK: Carrying out requests

    /// Carries out `requests` in order; their answers reach the core later, never during this call.
    func carryOut(_ requests: [ClusterRequest]) {
        for request in requests { carryOut(request) }
    }

    private func carryOut(_ request: ClusterRequest) {
        switch request {
        case .claimNick(let asker, let nick, let claimant):
            guard let registry = link.nicks else {
                return later { $0.clusterNickClaimed(asker, nick: nick, .failure(self.down), at: self.now(), into: &$1) }
            }
            registry.claim(ChatName.nickKey(nick), as: claimant == .ghost ? .ghost : .guest) { [self] result in
                answer { core, actions in
                    switch result {
                    case .success(.reserved): core.clusterNickReserved(asker, nick: nick, at: self.now(), into: &actions)
                    case .success(let claim):
                        core.clusterNickClaimed(asker, nick: nick, .success(claim == .claimed), at: self.now(), into: &actions)
                    case .failure(let error):
                        core.clusterNickClaimed(asker, nick: nick, .failure(self.failure(error)), at: self.now(), into: &actions)
                    }
                }
            }
        case .releaseNick(let nick):
            // Its release deletes its away message: one still kept for it is moot.
            pendingAways[ChatName.nickKey(nick)] = nil
            guard let registry = link.nicks else { return retries.append(request) }
            registry.release(ChatName.nickKey(nick)) { [self] result in
                if case .failure(.redis) = result { retries.append(request) }
            }
        case .join(let room, let asker, let nick, let charge, let admission):
            link.follow(room) { [self] ready in
                guard case .success = ready, let log = link.roomLog else {
                    let failure = ready.failure.map(self.failure) ?? down
                    return answer { $0.clusterJoinAppended(asker, room: room, failure: failure, at: self.now(), into: &$1) }
                }
                let joined = ChatCore.clusterPayload(of: .joined(room: room, seq: 0, time: 0, nick: nick))
                log.append(to: room, payload: joined, change: .join(nick: nick, node: configuration.nodeID), moderation: admission) {
                    [self] result in
                    if case .success(let appended) = result {
                        settle(charge, in: room, appended.memberCount, audience: appended.memberCount)
                    }
                    answer {
                        $0.clusterJoinAppended(asker, room: room, failure: result.failure.map(self.failure), at: self.now(), into: &$1)
                    }
                }
            }
        case .append(let room, let event, let change, let sender, let charge, let moderation):
            // A quit or a nick change that does not reach Redis is appended again once it is
            // back, for no one: the room must not keep a member that left or a name that changed.
            let retry: ClusterRequest? =
                if sender == nil {
                    request
                } else if case .rename = change {
                    .append(room: room, event: event, change: change, sender: nil, charge: charge, moderation: moderation)
                } else {
                    nil
                }
            guard let log = link.roomLog else {
                if let retry { retries.append(retry) }
                if let sender {
                    later { $0.clusterAppendFailed(event, in: room, sender: sender, failure: self.down, into: &$1) }
                }
                return
            }
            let node = configuration.nodeID
            let roomChange: RoomChange =
                switch change {
                case .none: .none
                case .leave(let nick): .leave(nick: nick, node: node)
                case .rename(let old, let new): .rename(old: old, new: new, node: node)
                case .topic: .topic
                case .kick(let nick): .kick(nick: nick)
                }
            let sent = metrics == nil ? 0 : DispatchTime.now().uptimeNanoseconds
            log.append(to: room, payload: ChatCore.clusterPayload(of: event), change: roomChange, moderation: moderation) { [self] result in
                metrics?.redisAnswered(sentAt: sent)
                if case .success(let appended) = result {
                    // A leaver hears its own `left`, though no longer counted a member.
                    let leaver = if case .leave = change { 1 } else { 0 }
                    settle(charge, in: room, appended.memberCount, audience: appended.memberCount + leaver)
                    // Its sender is owed the echo from now on: its session does not end before.
                    if let sender {
                        answer { $0.clusterAppended(room: room, seq: appended.event.seq, sender: sender, into: &$1) }
                    }
                    return
                }
                guard case .failure(let error) = result else { return }
                if case .redis = error, let retry { retries.append(retry) }
                // A kick that a ban made found an op, or nobody: nothing to tell anyone.
                if sender == nil, ModerationRefusal.parse(error) != nil { return }
                if let sender {
                    answer { $0.clusterAppendFailed(event, in: room, sender: sender, failure: self.failure(error), into: &$1) }
                }
            }
        case .snapshot(let room, let asker, let seq, let history):
            readSnapshot(of: room, upTo: seq, history: history) { [self] result in
                answer { $0.clusterSnapshotRead(room: room, asker, result, into: &$1) }
            }
        case .members(let room, let id, let withModes):
            guard let commands = link.commands else { return later { $0.clusterMembersRead(room: room, id, .failure(self.down), into: &$1) } }
            let directory = ClusterDirectory(commands: commands)
            directory.members(of: room) { [self] result in
                guard withModes, case .success(let members) = result else {
                    return answer { $0.clusterMembersRead(room: room, id, result.mapError(self.failure), into: &$1) }
                }
                directory.moderation(of: room) { [self] moderation in
                    let modes = moderation.map { Self.modes($0, members: members) }
                    answer { $0.clusterMembersRead(room: room, id, .success(members), modes: try? modes.get(), into: &$1) }
                }
            }
        case .invite(let room, let nick, let by, let admin, let asker):
            guard let commands = link.commands else { return later { $0.clusterInvited(room: room, nick: nick, asker, .failure(self.down), into: &$1) } }
            let directory = ClusterDirectory(commands: commands)
            let key = ChatName.nickKey(nick)
            directory.invite(nick, nickKey: key, into: room, by: by, admin: admin, lifetimeMillis: Int(ModerationLimits.invitationLifetime)) {
                [self] result in
                if case .failure(let error) = result {
                    return answer { $0.clusterInvited(room: room, nick: nick, asker, .failure(self.failure(error)), into: &$1) }
                }
                // The invitee hears of it on the node that serves it, as a direct message would.
                directory.direct(toNick: key, payload: FrameEncoder.encode(Frame.invited(room: room, nick: nick, by: by))) { [self] sent in
                    answer { $0.clusterInvited(room: room, nick: nick, asker, sent.map(\.heard).mapError(self.failure), into: &$1) }
                }
            }
        case .serverBan(let mask, let on, let setBy, let reason, let asker):
            guard let commands = link.commands else {
                return later { $0.clusterServerBanSet(mask: mask, on: on, asker, .failure(self.down), into: &$1) }
            }
            ClusterServerBans(commands: commands).set(mask, on: on, setBy: setBy, reason: reason) { [self] result in
                answer { $0.clusterServerBanSet(mask: mask, on: on, asker, result.mapError(self.failure), into: &$1) }
            }
        case .kill(let nick, let reason, let asker):
            guard let commands = link.commands else { return later { $0.clusterKillSent(nick: nick, asker, .failure(self.down), into: &$1) } }
            let key = ChatName.nickKey(nick)
            ClusterDirectory(commands: commands).direct(toNick: key, payload: Array("kill \(key) \(reason)".utf8)) { [self] sent in
                answer { $0.clusterKillSent(nick: nick, asker, sent.map(\.heard).mapError(self.failure), into: &$1) }
            }
        case .bans(let room, let asker):
            guard let commands = link.commands else { return later { $0.clusterBansRead(room: room, asker, .failure(self.down), into: &$1) } }
            ClusterDirectory(commands: commands).bans(of: room) { [self] result in
                answer { $0.clusterBansRead(room: room, asker, result.mapError(self.failure), into: &$1) }
            }
        case .standings(let rooms, let asker, let check):
            guard let commands = link.commands else {
                return later { $0.clusterStandingsRead(asker, check, .failure(self.down), at: self.now(), into: &$1) }
            }
            // One read per room, answered together once the last has come (or the first failed).
            var standings: [String: ClusterRoomStanding] = [:]
            var failed = false
            for room in rooms {
                if case .login(let nick, let account) = check {
                    // Sent first on the same connection: the read finds it recorded.
                    ClusterDirectory(commands: commands).recordAccount(account, ofMember: nick, in: room)
                }
                ClusterDirectory(commands: commands).standing(of: room) { [self] result in
                    guard !failed else { return }
                    switch result {
                    case .success(let standing):
                        standings[room] = standing
                        guard standings.count == rooms.count else { return }
                        answer { $0.clusterStandingsRead(asker, check, .success(standings), at: self.now(), into: &$1) }
                    case .failure(let error):
                        failed = true
                        answer { $0.clusterStandingsRead(asker, check, .failure(self.failure(error)), at: self.now(), into: &$1) }
                    }
                }
            }
        case .listRooms(let id):
            guard let commands = link.commands else { return later { $0.clusterRoomsRead(id, .failure(self.down), into: &$1) } }
            ClusterDirectory(commands: commands).rooms { [self] result in
                let rooms = result.mapError(self.failure).map { listed in
                    listed.map { room in
                        RoomInfo(
                            name: room.name, memberCount: UInt32(clamping: room.memberCount), topic: room.topic.flatMap(Self.topicText) ?? "")
                    }
                }
                answer { $0.clusterRoomsRead(id, rooms, into: &$1) }
            }
        case .history(let room, let id, let read, let request):
            readEpoch(of: room) { [self] epoch in
                switch epoch {
                case .failure(let failure):
                    answer { $0.clusterHistoryRead(room: room, id, request: request, .failure(failure), into: &$1) }
                case .success(let epoch):
                    readHistory(of: room, read) { [self] page in
                        let result = page.map { (epoch: epoch, entries: $0.entries, complete: $0.complete) }
                        answer { $0.clusterHistoryRead(room: room, id, request: request, result, into: &$1) }
                    }
                }
            }
        case .direct(let message, let sender):
            guard let commands = link.commands, case .direct(_, let recipient, _, _) = message else {
                return later { $0.clusterDirectSent(message, sender: sender, .failure(self.down), into: &$1) }
            }
            ClusterDirectory(commands: commands).direct(toNick: ChatName.nickKey(recipient), payload: FrameEncoder.encode(message)) {
                [self] result in
                let away = try? result.get().away
                answer { $0.clusterDirectSent(message, sender: sender, result.map(\.heard).mapError(self.failure), away: away ?? nil, into: &$1) }
            }
        case .unfollow(let room):
            link.unfollow(room)
        case .setAway(let nick, let text):
            awaysNumbered += 1
            let key = ChatName.nickKey(nick)
            pendingAways[key] = (nick, text, awaysNumbered)
            sendAway(of: key)
        }
    }

    // MARK: Accounts

    /// Carries out account work that Redis does in cluster mode (`ClusterAccounts`): a
    /// registration and its count against the address, a guess, a new password hash, a drop.
    /// `completion` gets the answer on the queue, never during this call; the give-backs answer
    /// nothing.
    func carryOut(_ work: AccountWork, limits: AccountSettings, completion: @escaping @Sendable (AccountAnswer) -> Void) {
        guard let commands = link.commands else {
            let reason = AccountStoreError("\(down.reason)")
            let refusal: AccountAnswer =
                switch work.job {
                case .guess: .guessed(.failure(reason))
                case .create: .created(.failure(reason))
                case .countRegistration: .registrationCounted(.failure(reason))
                default: .stored(.failure(reason))
                }
            switch work.job {
            case .giveBack, .giveBackRegistration: return
            default: break
            }
            return queue.async { completion(refusal) }
        }
        let accounts = ClusterAccounts(commands: commands)
        let error: (ClusterError) -> AccountStoreError = { [self] in AccountStoreError(failure($0).reason) }
        switch work.job {
        case .create(let record):
            accounts.register(
                name: record.name, key: record.key, passwordHash: record.passwordHash, created: record.created, maxAccounts: limits.maxAccounts
            ) { result in
                completion(.created(result.mapError(error).map { registration in
                    switch registration {
                    case .registered: .created
                    case .exists: .exists
                    case .full: .full
                    }
                }))
            }
        case .guess(let key, let address):
            accounts.guess(
                key: key, address: address, perAccount: limits.loginAttemptsPerAccount,
                perAccountFromAddress: limits.loginAttemptsPerAccountFromAddress, perAddress: limits.loginAttemptsPerAddress,
                windowMilliseconds: limits.loginWindow.milliseconds
            ) { result in
                completion(.guessed(result.mapError(error).map { guess in
                    switch guess {
                    case .admitted(let stored):
                        .admitted(AccountRecord(name: stored.name, key: key, passwordHash: stored.passwordHash, created: stored.created))
                    case .noAccount: .noAccount
                    case .accountThrottled(let wait): .throttled(account: true, waitMilliseconds: wait)
                    case .addressThrottled(let wait): .throttled(account: false, waitMilliseconds: wait)
                    }
                }))
            }
        case .giveBack(let key, let address):
            accounts.giveBack(key: key, address: address)
        case .countRegistration(let address):
            accounts.countRegistration(
                address: address, perAddress: limits.registrationsPerAddress, perCluster: limits.registrationsPerServer,
                windowMilliseconds: limits.registrationWindow.milliseconds
            ) { result in
                completion(.registrationCounted(result.mapError(error).map { count in
                    switch count {
                    case .counted: .counted
                    case .full(let cluster, let wait): .full(server: cluster, waitMilliseconds: wait)
                    }
                }))
            }
        case .giveBackRegistration(let address):
            accounts.giveBackRegistration(address: address)
        case .save(let record):
            accounts.setPasswordHash(key: record.key, record.passwordHash) { result in
                completion(.stored(result.mapError(error).flatMap { kept in
                    kept ? .success(()) : .failure(AccountStoreError("the account was dropped meanwhile"))
                }))
            }
        case .delete(let key):
            accounts.drop(key: key) { result in completion(.stored(result.mapError(error))) }
        case .hash, .verify:
            // The hashing pool's (`AccountWork.Job.isHashing`): never sent here.
            break
        }
    }

    /// Sends the kept away message of the nick `key`, if the link is up; it is forgotten once
    /// Redis has carried it out (or refused it: the node does not hold the nick any more), and
    /// kept for the next link-up if the connection failed first.
    private func sendAway(of key: String) {
        guard let commands = link.commands, let away = pendingAways[key] else { return }
        let directory = ClusterDirectory(commands: commands)
        directory.setAway(nick: away.nick, nickKey: key, text: away.text, node: configuration.nodeID) { [self] result in
            if case .failure(.redis) = result { return }
            if pendingAways[key]?.number == away.number { pendingAways[key] = nil }
        }
    }

    /// Tells the core what an appended event's deliveries cost when it differs from what its
    /// sender's address was charged, or the room's member count changed; in a room whose
    /// membership holds still (the common case) nothing needs telling.
    private func settle(_ charge: FanoutCharge?, in room: String, _ memberCount: Int, audience: Int) {
        guard let charge, audience > charge.deliveries || memberCount != charge.memberCount else { return }
        answer { core, _ in core.clusterFanoutCounted(room: room, memberCount: memberCount, audience: audience, charge: charge) }
    }

    /// Answers on a later turn of the queue: never inside `carryOut`, which the server calls
    /// while it carries out the core's actions.
    private func later(_ body: @escaping (inout ChatCore, inout [ChatAction]) -> Void) {
        deferred.append(body)
        guard deferred.count == 1 else { return }
        queue.async { [self] in
            let bodies = deferred
            deferred = []
            for body in bodies { answer(body) }
        }
    }

    private var down: ClusterFailure {
        if case .down(let error) = link.state { return ClusterFailure(reason: "the cluster is unavailable: \(error)") }
        return ClusterFailure(reason: "the cluster is unavailable: not connected yet")
    }

    /// The failure a client is told of for `error`; when the link is down, why it is (a
    /// request cut off by the link's failure got only "closed").
    private func failure(_ error: ClusterError) -> ClusterFailure {
        if let (refusal, text) = ModerationRefusal.parse(error) {
            // The room's moderation said no (ModerationCheck): the client is told why, by the
            // code a server on its own gives.
            return ClusterFailure(code: refusal.errorCode, reason: text)
        }
        if case .down(let cause) = link.state { return ClusterFailure(reason: "the cluster is unavailable: \(cause)") }
        return ClusterFailure(reason: "the cluster is unavailable: \(error)")
    }

    private static func topicText(_ event: LoggedEvent) -> String? {
        guard case .topic(_, _, _, _, let text)? = try? Frame(decoding: event.payload) else { return nil }
        return text
    }

    // MARK: Reading rooms

    private func readEpoch(of room: String, completion: @escaping (Result<UInt64, ClusterFailure>) -> Void) {
        guard let commands = link.commands else { return completion(.failure(down)) }
        commands.send([Array("GET".utf8), RoomKeys(room).epoch]) { reply in
            switch reply {
            case .success(let value):
                completion(.success(value.text.flatMap { UInt64($0) } ?? 0))
            case .failure(let error):
                completion(.failure(self.failure(.redis(error))))
            }
        }
    }

    /// A room's moderation as `roomModes` shows it to `members` (in joining order): its ops and
    /// voiced members among them.
    static func modes(_ moderation: ClusterRoomModeration, members: [String]) -> RoomModes {
        RoomModes(
            founder: moderation.founder, inviteOnly: moderation.inviteOnly, moderated: moderation.moderated,
            topicLock: moderation.topicLock, key: moderation.key, memberLimit: UInt32(clamping: moderation.memberLimit),
            ops: members.filter { moderation.roles[$0]?.contains("o") == true },
            voices: members.filter { moderation.roles[$0]?.contains("v") == true })
    }

    /// What a joiner is told: the room's epoch, members and topic, and `history` before the
    /// joiner's own `joined` at `seq`.
    private func readSnapshot(
        of room: String, upTo seq: UInt64, history: ClusterHistoryRead,
        completion: @escaping (Result<ClusterRoomSnapshot, ClusterFailure>) -> Void
    ) {
        guard let commands = link.commands else { return completion(.failure(down)) }
        let directory = ClusterDirectory(commands: commands)
        let candidate = spareEpoch ?? epochs.next()
        spareEpoch = nil
        directory.snapshot(of: room, newEpoch: candidate) { [self] result in
            // A room that had an epoch leaves the candidate unused: the next new room takes it, so
            // rooms take the source's epochs in the order they are created (1, 2, 3 … in tests).
            if (try? result.get().epoch) != candidate, spareEpoch == nil { spareEpoch = candidate }
            switch result {
            case .failure(let error):
                completion(.failure(self.failure(error)))
            case .success(let snapshot):
                directory.moderation(of: room) { [self] moderation in
                    let modes = (try? moderation.get()).map { Self.modes($0, members: snapshot.members) }
                    readHistory(of: room, history) { page in
                        completion(
                            page.map { page in
                                let topic = snapshot.topic.flatMap { event -> Frame? in
                                    guard case .topic(let name, _, _, let setBy, let text)? = try? Frame(decoding: event.payload) else {
                                        return nil
                                    }
                                    return .topic(room: name, seq: event.seq, time: event.time, setBy: setBy, text: text)
                                }
                                return ClusterRoomSnapshot(
                                    epoch: snapshot.epoch, firstSeq: snapshot.firstSeq, lastSeq: seq, topic: topic,
                                    members: snapshot.members, history: page.entries, complete: page.complete, modes: modes)
                            })
                    }
                }
            }
        }
    }

    /// `read`'s answer, cut from `room`'s log (`ClusterHistoryCut`), which is read a page
    /// (`ClusterReplies.eventsPerRead`) at a time until the cut has it.
    private func readHistory(
        of room: String, _ read: ClusterHistoryRead,
        completion: @escaping (Result<(entries: [HistoryEntry], complete: Bool), ClusterFailure>) -> Void
    ) {
        let batch = ClusterReplies.eventsPerRead
        var cut = ClusterHistoryCut(read)
        func step() {
            if let answer = cut.answer { return completion(.success(answer)) }
            guard let log = link.roomLog else { return completion(.failure(down)) }
            let handle: (Result<[LoggedEvent], ClusterError>) -> Void = { [self] result in
                switch result {
                case .failure(let error):
                    completion(.failure(failure(error)))
                case .success(let events):
                    cut.take(events.map { ($0.seq, $0.time, $0.payload) }, logEnded: events.count < batch)
                    step()
                }
            }
            switch cut.direction {
            case .after: log.events(of: room, after: cut.cursor, limit: batch, completion: handle)
            case .before: log.events(of: room, before: cut.cursor, limit: batch, completion: handle)
            }
        }
        step()
    }

    // MARK: Reaping

    /// Asks Redis for dead nodes; for each this node is the one to learn of, announces the quits
    /// of its members and forgets them.
    ///
    /// Not until the link has been up for a node timeout plus the longest reconnect delay (5 s):
    /// after an outage of Redis every node's heartbeat is stale, and a node that reconnects
    /// first must not reap the others before they have had the time to reconnect too.
    private func reap() {
        guard let registry = link.nicks, let upSince, upSince.duration(to: .now) >= configuration.nodeTimeout + .seconds(5) else { return }
        registry.reap(deadAfterMilliseconds: Int(configuration.nodeTimeout / .milliseconds(1))) { [self] result in
            guard case .success(let dead) = result else { return }
            for (node, nicks) in dead where !reaping.contains(node) {
                reaping.insert(node)
                announceQuits(of: node, freedNicks: nicks.count)
            }
        }
    }

    private func announceQuits(of node: String, freedNicks: Int) {
        guard let commands = link.commands, let log = link.roomLog else {
            reaping.remove(node)
            return
        }
        let directory = ClusterDirectory(commands: commands)
        directory.memberships(of: node) { [self] result in
            guard case .success(let memberships) = result else {
                reaping.remove(node)
                return
            }
            logger.notice(
                "cluster node gone: its members quit",
                metadata: ["cluster.dead": "\(node)", "cluster.members": "\(memberships.count)", "cluster.nicks": "\(freedNicks)"])
            for (room, nick) in memberships {
                let quit = Frame.quit(room: room, seq: 0, time: 0, nick: nick, reason: "its server stopped answering")
                log.append(to: room, payload: ChatCore.clusterPayload(of: quit), change: .leave(nick: nick, node: node)) { _ in }
            }
            directory.forgetRooms(of: node)
            commands.send("PING") { [self] _ in reaping.remove(node) }
        }
    }
}

extension Result {
    fileprivate var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}

extension ModerationRefusal {
    /// The error a server on its own gives for the same refusal.
    var errorCode: ErrorCode {
        switch self {
        case .banned: .banned
        case .inviteOnly: .inviteOnly
        case .badKey: .badRoomKey
        case .full: .roomFull
        case .notOperator, .registered, .isOperator: .notOperator
        case .moderated: .moderated
        case .listFull: .listFull
        case .notMember: .notInRoom
        case .notLoggedIn: .notLoggedIn
        case .badMode: .invalidArgument
        case .alreadyMember: .alreadyInRoom
        case .contended: .unavailable
        }
    }
}
