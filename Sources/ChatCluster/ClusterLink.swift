import Dispatch
import RedisClient
import RedisProtocol
import SocketCore

/// A node's link to the cluster's Redis, kept up for as long as the node runs: two connections
/// (commands, subscriptions) with a `RoomLog` and a `NickRegistry` on them, a heartbeat, and
/// reconnection with backoff when either connection fails.
///
/// While the link is down the owner refuses cluster work with an error (`state` says why); the
/// link itself keeps trying, from 100 ms up to 5 s apart. When it is up again it follows every
/// room it followed before *from where it stopped*, so `onEvent` delivers every event of a
/// followed room once and in order across any number of reconnects.
///
/// Threading: confined to `queue`, like its connections; callbacks run there.
public final class ClusterLink: @unchecked Sendable {
    /// Where the link stands.
    public enum State: Equatable, Sendable {
        /// Connecting for the first time.
        case connecting
        /// Both connections are up and the scripts loaded.
        case up
        /// The last attempt failed, or a connection was lost; another attempt is scheduled.
        case down(ClusterError)
    }

    /// Where the link stands now.
    public private(set) var state = State.connecting
    /// Called on every change of `state`.
    public var onStateChange: ((State) -> Void)?
    /// Each event of a followed room, in `seq` order, once, across reconnects.
    public var onEvent: ((_ room: String, _ event: LoggedEvent) -> Void)?
    /// The room log, while up.
    public private(set) var roomLog: RoomLog?
    /// The nick registry, while up.
    public private(set) var nicks: NickRegistry?
    /// The connection for commands (not subscriptions), while up: for reads the log and the
    /// registry do not make.
    public private(set) var commands: RedisConnection?
    /// Called when the node's registration may have lapsed, so other nodes' clients may claim
    /// its nicks: no heartbeat has been acknowledged for longer than the ttl (a stall, or a
    /// partition or Redis outage: said while the link is still down, so the node's clients can
    /// move to another node), or a heartbeat found the node reaped by another node or Redis
    /// without its data. Its clients must go; once the link is up it is registered afresh.
    public var onRegistrationLapsed: (() -> Void)?
    /// Each message published on this node's own channel (`directChannel`), at most once.
    public var onDirect: (([UInt8]) -> Void)?
    /// This node's own channel: what other nodes publish there reaches `onDirect`.
    public var directChannel: [UInt8] { Array("chat:node:\(nodeID):direct".utf8) }
    /// How many commands the current connections have written (`RedisConnection.commandsWritten`):
    /// unchanged across a turn of the queue, nothing was asked of Redis in it.
    public var commandsWritten: Int { connections.reduce(0) { $0 + $1.commandsWritten } }

    /// This node's id in the cluster.
    public let nodeID: String
    private let host: String
    private let port: Int
    private let queue: DispatchQueue
    private let ttlMilliseconds: Int
    /// What the connections' parsers accept: a reply beyond it fails the connection.
    private let limits: RESPParser.Limits
    private var connections: [RedisConnection] = []
    /// Every room followed, with the last `seq` delivered (nil: not delivered anything yet).
    private var followed: [String: UInt64?] = [:]
    /// Who waits for a followed room's subscription to be ready, by room.
    private var readiness: [String: [(Result<Void, ClusterError>) -> Void]] = [:]
    private var heartbeat: DispatchSourceTimer?
    private var nextDelay: Duration = .milliseconds(100)
    private var stopped = false
    /// Whether the link has been up before: a reopened registry that finds the node unregistered
    /// means it was reaped while the link was down.
    private var hasBeenUp = false
    /// Counts connection attempts, so that callbacks of an abandoned attempt do nothing.
    private var attempt = 0
    /// When the heartbeat now waiting for its reply was sent; nil when none waits.
    private var heartbeatSentAt: ContinuousClock.Instant?
    /// When the last heartbeat Redis acknowledged was sent (the registration is at least that
    /// fresh); nil before the first.
    private var lastAcknowledgedBeat: ContinuousClock.Instant?
    /// When the registry of the current attempt started opening (its first heartbeat follows).
    private var registryOpenedAt: ContinuousClock.Instant?
    /// Whether a lapse has been reported since the registration was last confirmed.
    private var lapseReported = false
    /// Watches `lastAcknowledgedBeat` whatever the link's state.
    private var lapseWatch: DispatchSourceTimer?

    private var ttl: Duration { .milliseconds(ttlMilliseconds) }

    /// How long Redis may leave a heartbeat unanswered before the link counts it as gone: half
    /// the node's ttl, so the link goes down (and the node refuses work) well before other nodes
    /// could take it for dead.
    private var answerTimeout: Duration { .milliseconds(max(ttlMilliseconds / 2, 50)) }

    /// A link to the Redis at `host:port` for the node `nodeID`, whose connections parse with
    /// `limits` (a reply beyond them fails the connection, and the link reconnects); nothing
    /// happens until `start()`.
    public init(
        host: String, port: Int, nodeID: String, ttlMilliseconds: Int = 5_000, limits: RESPParser.Limits = .init(), queue: DispatchQueue
    ) {
        self.host = host
        self.port = port
        self.nodeID = nodeID
        self.ttlMilliseconds = ttlMilliseconds
        self.limits = limits
        self.queue = queue
    }

    /// Starts connecting. Call once, on `queue`.
    public func start() {
        lapseWatch = queue.startRepeatingTimer(every: .milliseconds(max(ttlMilliseconds / 10, 10))) { [weak self] in
            guard let self, let last = lastAcknowledgedBeat, last.duration(to: .now) > ttl else { return }
            // An acknowledgement already in the socket counts.
            guard readWaitingAnswer(), let last = lastAcknowledgedBeat, last.duration(to: .now) > ttl else { return }
            reportLapse()
        }
        connect()
    }

    /// Closes the connections and stops reconnecting; calls `closed` on `queue` once their
    /// descriptors are closed (that takes a turn of the queue or two: a channel closes its socket
    /// after its Dispatch sources' cancel handlers ran), so a process that counts its sockets then
    /// finds none of the link's. The node's nicks stay claimed until its key expires (or the owner
    /// released them first).
    public func stop(closed: @escaping () -> Void = {}) {
        stopped = true
        lapseWatch?.cancel()
        lapseWatch = nil
        var open = connections.filter { !$0.hasEnded }
        for connection in open {
            connection.onClosed = { [weak connection] _ in
                open.removeAll { $0 === connection }
                if open.isEmpty { closed() }
            }
        }
        let nothingOpen = open.isEmpty
        tearDown()
        if nothingOpen { closed() }
    }

    /// Follows `room` from now on (and, after a reconnect, from where it stopped); `ready` is
    /// called once its subscription is ready — every event appended after that is delivered —
    /// or with why it is not (the link went down first).
    public func follow(_ room: String, ready: @escaping (Result<Void, ClusterError>) -> Void = { _ in }) {
        if followed[room] != nil {
            if let log = roomLog, log.isReady(room) {
                ready(.success(()))
            } else if case .down(let error) = state {
                ready(.failure(error))
            } else {
                readiness[room, default: []].append(ready)
            }
            return
        }
        followed[room] = .some(nil)
        readiness[room, default: []].append(ready)
        guard let log = roomLog else {
            if case .down(let error) = state { failReadiness(error) }
            return
        }
        start(following: room, after: nil, in: log)
    }

    /// Stops following `room`.
    public func unfollow(_ room: String) {
        guard followed.removeValue(forKey: room) != nil else { return }
        let waiting = readiness.removeValue(forKey: room) ?? []
        for ready in waiting { ready(.failure(.redis(.closed))) }
        roomLog?.unfollow(room)
    }

    /// Whether `room` is followed and its subscription ready.
    public func isReady(_ room: String) -> Bool {
        roomLog?.isReady(room) ?? false
    }

    private func start(following room: String, after position: UInt64?, in log: RoomLog) {
        log.follow(room, after: position) { [self] result in
            guard followed[room] != nil else { return }
            let waiting = readiness.removeValue(forKey: room) ?? []
            for ready in waiting { ready(result.map { _ in () }) }
        }
    }

    private func failReadiness(_ error: ClusterError) {
        let waiting = readiness
        readiness = [:]
        for (_, callbacks) in waiting { for ready in callbacks { ready(.failure(error)) } }
    }

    // MARK: Connecting

    private func connect() {
        guard !stopped else { return }
        attempt += 1
        let current = attempt
        // A Redis that accepts connections but never answers (stopped, partitioned) must not
        // leave the attempt hanging: connecting, loading the scripts and the first heartbeat get
        // the connect timeout plus two answer timeouts.
        let deadline = Duration.seconds(5) + answerTimeout * 2
        queue.asyncAfter(deadline: .now() + .milliseconds(Int(deadline / .milliseconds(1)))) { [self] in
            guard current == attempt, !stopped, state != .up else { return }
            failed(.timedOut("no answer to the connection's setup within \(deadline)"))
        }
        // One after the other: the commands connection, then the one for subscriptions.
        dial(role: "commands", attempt: current) { [self] commands in
            dial(role: "events", attempt: current) { [self] subscriber in
                open(commands: commands, subscriber: subscriber, attempt: current)
            } onFailure: {
                commands.close()
            }
        } onFailure: {}
    }

    /// Connects one connection of attempt `current` and names it; calls `onFailure` (then fails the
    /// link) if it cannot, and closes it if the attempt was abandoned meanwhile.
    private func dial(
        role: String, attempt current: Int, then next: @escaping (RedisConnection) -> Void, onFailure: @escaping () -> Void
    ) {
        let proceed = Continuation(next: next, onFailure: onFailure)
        RedisConnection.connect(host: host, port: port, queue: queue, limits: limits) { [self] result in
            guard current == attempt, !stopped else {
                if case .success(let connection) = result { connection.close() }
                return
            }
            switch result {
            case .success(let connection):
                // The name shows in CLIENT LIST, for operators and for tests that cut a link.
                connection.send("CLIENT", "SETNAME", "chat-\(nodeID)-\(role)") { _ in }
                proceed.next(connection)
            case .failure(let error):
                proceed.onFailure()
                failed(.redis(error))
            }
        }
    }

    /// What to do after a connect, carried into the connector's `@Sendable` completion, which
    /// runs on `queue` like everything else here.
    private struct Continuation: @unchecked Sendable {
        let next: (RedisConnection) -> Void
        let onFailure: () -> Void
    }

    private func open(commands: RedisConnection, subscriber: RedisConnection, attempt current: Int) {
        connections = [commands, subscriber]
        for connection in connections {
            connection.onClosed = { [self] error in
                guard current == attempt else { return }
                failed(.redis(error))
            }
        }
        RoomLog.open(commands: commands, subscriber: subscriber) { [self] result in
            guard current == attempt else { return }
            switch result {
            case .success(let log):
                registryOpenedAt = .now
                NickRegistry.open(nodeID: nodeID, ttlMilliseconds: ttlMilliseconds, commands: commands) { [self] result in
                    guard current == attempt else { return }
                    switch result {
                    case .success(let registry): up(log: log, registry: registry)
                    case .failure(let error): failed(error)
                    }
                }
            case .failure(let error):
                failed(error)
            }
        }
    }

    private func up(log: RoomLog, registry: NickRegistry) {
        roomLog = log
        nicks = registry
        commands = connections.first
        nextDelay = .milliseconds(100)
        log.onEvent = { [self] room, event in
            guard followed[room] != nil else { return }
            followed[room] = event.seq
            onEvent?(room, event)
        }
        for (room, position) in followed { start(following: room, after: position, in: log) }
        log.listen(to: directChannel) { [self] body in onDirect?(body) }
        let lapsed = hasBeenUp && (!registry.wasRegisteredAtOpen || isStale(lastAcknowledgedBeat, at: .now))
        hasBeenUp = true
        heartbeat = queue.startRepeatingTimer(every: .milliseconds(max(ttlMilliseconds / 5, 10))) { [weak self, weak registry] in
            guard let self, let registry else { return }
            beat(registry)
        }
        change(to: .up)
        if lapsed { reportLapse() }
        // The registry's first heartbeat, sent after this instant, registered the node afresh.
        lastAcknowledgedBeat = registryOpenedAt ?? .now
        lapseReported = false
    }

    /// Takes the answer to a heartbeat in flight if it already waits in the socket, before a
    /// timer judges the heartbeat unanswered or the registration lapsed: the queue these timers
    /// run on is the chat's, and when a flood kept it busy for seconds, a timer can run before the
    /// report of an answer that came in time. Taking the link down then refused every room event
    /// with `unavailable` for a stall of the node's own making. False if what was read ended the
    /// attempt (a reply that failed the connection).
    private func readWaitingAnswer() -> Bool {
        guard heartbeatSentAt != nil, let nicks else { return true }
        let current = attempt
        nicks.readWaitingReplies()
        return current == attempt
    }

    /// Sends a heartbeat, unless the last one is still unanswered (`readWaitingAnswer` first):
    /// then, if it has waited longer than `answerTimeout`, Redis has stopped answering and the
    /// link fails.
    private func beat(_ registry: NickRegistry) {
        guard readWaitingAnswer() else { return }
        if let sent = heartbeatSentAt {
            let waited = sent.duration(to: .now)
            if waited > answerTimeout { failed(.timedOut("a heartbeat unanswered for \(waited)")) }
            return
        }
        let sent = ContinuousClock.now
        heartbeatSentAt = sent
        let current = attempt
        registry.heartbeat { [self] result in
            guard current == attempt else { return }
            heartbeatSentAt = nil
            guard case .success(let beat) = result else { return }
            if !beat.wasRegistered || isStale(lastAcknowledgedBeat, at: sent) { reportLapse() }
            lastAcknowledgedBeat = sent
            lapseReported = false
        }
    }

    /// Whether a registration last renewed by a heartbeat sent at `beat` may have expired by `instant`.
    private func isStale(_ beat: ContinuousClock.Instant?, at instant: ContinuousClock.Instant) -> Bool {
        guard let beat else { return false }
        return beat.duration(to: instant) > ttl
    }

    /// Tells the owner the registration may have lapsed, once until it is confirmed again.
    private func reportLapse() {
        guard !lapseReported else { return }
        lapseReported = true
        onRegistrationLapsed?()
    }

    private func failed(_ error: ClusterError) {
        guard !stopped else { return }
        // Down before the connections close: what was waiting on them is answered with the
        // state that says why.
        change(to: .down(error))
        tearDown()
        failReadiness(error)
        // Up to 5 s apart, with jitter so that nodes do not all come back in the same instant.
        let milliseconds = Int(nextDelay / .milliseconds(1) * Double.random(in: 0.5...1.0))
        nextDelay = min(nextDelay * 2, .seconds(5))
        queue.asyncAfter(deadline: .now() + .milliseconds(milliseconds)) { [self] in connect() }
    }

    private func tearDown() {
        attempt += 1
        heartbeatSentAt = nil
        heartbeat?.cancel()
        heartbeat = nil
        roomLog = nil
        nicks = nil
        commands = nil
        let closing = connections
        connections = []
        for connection in closing { connection.close() }
    }

    private func change(to newState: State) {
        guard newState != state else { return }
        state = newState
        onStateChange?(newState)
    }
}
