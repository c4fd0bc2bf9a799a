import ChatAccounts
import ChatCore
import ChatProtocol
import ChatStorage
import DequeModule
import Dispatch
import Glibc
import Logging
import RoomLog
import SocketCore
import SocketTLS

/// A chat server: a `ChatCore` served over TCP on one serial Dispatch queue.
///
/// Everything — accepting, reading, the chat logic, writing, the timer — runs on one queue, so the
/// state needs no locks and the machine's other cores are left to the clients. Each client is a
/// `SocketChannel`; all channels read into one shared `ReadBuffer`.
///
/// The hot path: a room event is encoded once into a `ByteChunk` that every member's queue shares;
/// members that received something are marked dirty and flushed together in one pass scheduled
/// after the current batch of reads, so many deliveries to one client leave in one gather write.
///
/// Memory stays within `configuration.memoryBudget` by construction:
/// - a client's requests are served only while little is queued for it (`replyHighWater`), so a
///   client that does not read its replies cannot make the server produce more;
/// - every chunk counts against one meter while it lives, and every queue slot against another,
///   so what all queues pin is known exactly; past the output budget, the clients furthest behind
///   are disconnected as slow consumers;
/// - a client whose queue stays above the lag threshold for `slowConsumerTimeout` is a slow
///   consumer; a client that reads catches up long before, so legal bursts never evict it.
/// The server never drops a frame for a client it keeps.
///
/// With a `RoomStore`, acknowledged means stored: the frames that go with room changes staged in
/// it are queued at once but held in their recipients' queues (`SocketChannel.holdsNewBytes`)
/// until the commit of those changes lands, which releases them (`SocketChannel.release`): the
/// log's durable mark, carried into each queue. A store that commits on the server's queue
/// (SQLite's default) commits once per turn, at its end, just before the flush that sends what
/// the commit released — Redis's order: write the log, then reply. A store that commits on a
/// thread of its own has one commit in flight at a time; whatever the chat produces meanwhile is
/// held for the next one. Either way a commit is one transaction for everything since the last
/// (group commit: the busier the server, the more each commit carries), and no delivery
/// overtakes an earlier one, since each queue only ever sends a prefix of itself. Held frames
/// are charged at their real size (`carryOutHeld`); while they cost more than `budget.held`, the
/// server stops reading from welcomed clients. Handshakes, evictions and shutdown never wait for
/// a commit. A failed commit's room events are not delivered; their senders get `storageFailed`,
/// and room events are refused until a commit succeeds again.
///
/// Threading: `@unchecked Sendable` because every mutable property is confined to `queue`. Call
/// `start()` and `shutdown` from any thread except that queue.
public final class ChatServer: @unchecked Sendable {
    /// The settings the server started with.
    public let configuration: ChatServerConfiguration
    /// The settings in force: `configuration` with the live settings of every reload since
    /// (`reconfigure`). On `queue`.
    private var liveSettings: ChatServerConfiguration
    /// How the server divides its memory.
    public let budget: MemoryBudget
    /// The address the server listens on; with port 0 it carries the port the OS chose.
    public let localAddress: SocketAddress
    /// The port the server listens on.
    public var port: Int { localAddress.port }
    /// The plain-text port next to a TLS one (`configuration.plainPort`), or nil.
    public var plainPort: Int? { plainListener?.localAddress.port }

    private enum State { case idle, running, stopping, stopped }

    // Internal, not private: the loop monitor and the metrics' hooks in other files run on it.
    let queue = DispatchQueue(label: "ChatServer")
    private let logger: Logger
    private let listener: SocketListener
    /// The plain-text listener beside a TLS `listener`, if configured.
    private let plainListener: SocketListener?
    /// What new connections on `listener` speak TLS with; replaced by `reloadTLS()`. Sessions
    /// already made keep the context they were made from.
    private var tlsContext: TLSContext?
    /// `MemoryBudget.readBytes` per read, so that what a waiting connection's decoder holds stays
    /// within its share of the budget (`MemoryBudget.perConnection`).
    private let readBuffer: ReadBuffer
    /// What refused connections' input is read into and dropped: 64 KiB, so a client that sent
    /// much before its refusal is drained in a sweep or two, not held until its deadline (and
    /// then reset) as the connections' 4 KiB reads would.
    private let refusalScratch = ReadBuffer(capacity: 64 << 10)
    // The fields the request and delivery paths use skip run-time exclusivity checks: they
    // are used on `queue` only, and no access overlaps another (the debug builds the tests run
    // check that statically where they can). Each check is a call and a thread-local lookup;
    // with SocketChannel's and ClientConnection's they cost about 9% of the server's
    // instructions in memory mode (callgrind, docs/BENCHMARKS.md).
    @exclusivity(unchecked) private var state = State.idle
    @exclusivity(unchecked) private var core: ChatCore
    /// Where rooms are kept beyond memory; nil when they are not.
    private let store: (any RoomStore)?
    /// In cluster mode, this node's side of the cluster; nil for a server on its own.
    private let clusterNode: ClusterNode?
    /// Where accounts are kept, and the workers that hash their passwords off this queue
    /// ("Account work" below).
    private let accountStore: any AccountStore
    private let hashingPool: PasswordHashingPool
    /// Where registered rooms and server bans are kept ("Moderation writes" below).
    private let moderationStore: any ModerationStore
    /// Clients whose requests wait for account work (`ChatCore.isAwaitingAccount`).
    private var accountWaiters: [ClientConnection] = []

    /// What every chunk the server encodes for its queues costs while it lives, however many
    /// queues share it. (History replays, shared until the history changes, belong to the
    /// history's share of the budget and are not counted here.)
    private let chunkMeter = MemoryMeter()
    /// What every queue slot costs while it is taken.
    private let slotMeter = MemoryMeter()
    /// What TLS sessions' ciphertext buffers cost while they exist (encrypted, not yet sent).
    private let ciphertextMeter = MemoryMeter()

    /// Open connections, indexed by `ClientID.slot`; a slot is reused only after its channel closed.
    @exclusivity(unchecked) private var connections: [ClientConnection?] = []
    @exclusivity(unchecked) private var freeSlots: [Int] = []
    @exclusivity(unchecked) private var openConnections = 0
    private var nextSerial: UInt64 = 1

    /// Reused for every batch of actions, so the hot path allocates no arrays.
    @exclusivity(unchecked) private var actions: [ChatAction] = []
    @exclusivity(unchecked) private var encodeBuffer: [UInt8] = []
    /// Where room events are encoded, a segment per room (`RoomSegments`).
    @exclusivity(unchecked) private var roomSegments = RoomSegments()
    @exclusivity(unchecked) private var dirty: [ClientConnection] = []
    @exclusivity(unchecked) private var flushing: [ClientConnection] = []
    @exclusivity(unchecked) private var flushScheduled = false
    /// Clients whose requests wait for their address's rate, in the order they are served again
    /// (round robin among an address's connections); each waits until its `throttledUntil`.
    private var throttled = Deque<ClientConnection>()
    /// Fires when the first of `throttled` may go on.
    private var throttleTimer: DispatchSourceTimer?
    /// When `throttleTimer` is armed for (uptime milliseconds); nil when it is not.
    private var throttleTimerDeadline: UInt64?

    /// How many of `actions` are carried out, held for the next commit (`carryOutHeld`): with a
    /// store, `actions` keeps what the chat produced since the last commit was submitted, so a
    /// failed commit can be carried out again without its events (`replay`). 0 when nothing is.
    @exclusivity(unchecked) private var performed = 0
    /// Which of those went out at once (a handshake's, a slow consumer's end): not carried out again.
    @exclusivity(unchecked) private var performedAtOnce: [Int] = []
    /// Which of those are departures that wait for the commit (`Departure`): carried out after it.
    @exclusivity(unchecked) private var departuresAfterCommit: [Int] = []
    /// Connections whose queues hold frames for the next commit (`SocketChannel.holdsNewBytes`).
    @exclusivity(unchecked) private var holding: [ClientConnection] = []
    /// What the frames held for the next commit cost, by `heldCost(of:)`.
    @exclusivity(unchecked) private var uncommittedCost = 0
    /// What the frames held for the commit in flight cost: their encoded bytes (also counted by
    /// `chunkMeter`, as queued frames are) and their recipient lists.
    @exclusivity(unchecked) private var heldCost = 0
    /// The number of the last change of a room staged in the store (`LogBatch.through`): what
    /// the next commit holds.
    @exclusivity(unchecked) private var lastStagedChange: UInt64 = 0
    /// Whether a commit is in flight; there is at most one, and what arrives meanwhile goes into
    /// the next (group commit: the busier the server, the more each commit holds).
    @exclusivity(unchecked) private var commitInFlight = false
    /// Whether a commit is scheduled for the end of this turn (`scheduleCommit`).
    @exclusivity(unchecked) private var commitScheduled = false
    /// Commits handed to the store so far, and of those, how many are done.
    @exclusivity(unchecked) private var submittedCommits = 0
    @exclusivity(unchecked) private var completedCommits = 0
    /// Slots of closed connections that kept actions may still name, with the commit after
    /// which they are free (in increasing order).
    private var slotsAwaitingCommit = Deque<(slot: Int, after: Int)>()
    /// Clients whose requests wait for the storage writer to catch up.
    private var writerWaiters: [ClientConnection] = []
    /// Clients whose requests wait for a read of the store (`ChatCore.isAwaitingLog`).
    private var readWaiters: [ClientConnection] = []
    /// During shutdown: the commit after which clients are told goodbye, the reason, and the
    /// uptime after which they are told anyway (a stuck writer must not hold up the shutdown).
    private var goodbyeAfterCommit: (commit: Int, reason: String, deadline: UInt64)?

    private var refusalLog = LogThrottle()
    /// Connections refused at the door, waiting for their clients to close.
    private var refused = RefusedSockets()
    /// TLS connections being refused after their handshake (`refuseAfterHandshake`), oldest
    /// first; closed ones are dropped as new ones come (at most `maxTLSRefusals` to look at).
    private var tlsRefusals = Deque<ClientConnection>()
    /// Moderation writes handed to the store and not yet answered: a stop waits for them.
    private var moderationWritesInFlight = 0
    /// Descriptors the server held when it started (its listeners, storage, logs): with
    /// `descriptorReserve`, what clients may not take of the process's limit.
    private var ownDescriptors = 0
    private var timer: DispatchSourceTimer?
    /// The loop monitor's timer (`monitorLoop`), kept while the server lives.
    var loopMonitorTimer: DispatchSourceTimer?
    /// When the flush of this turn was scheduled (uptime nanoseconds), while metrics are recorded:
    /// what a connection dirtied in this turn has waited since (`chat_delivery_latency_seconds`).
    @exclusivity(unchecked) private var flushArmedAt: UInt64 = 0
    private var stopWaiters: [@Sendable () -> Void] = []
    /// What `/metrics` counts, once `startRecordingMetrics()` is called; nil until then.
    // Internal, not private: the loop monitor (`LoopMonitor.swift`) records into it too.
    @exclusivity(unchecked) var metrics: ServerMetrics?
    /// When the server was made (uptime nanoseconds), for the status page's uptime.
    private let startedAt = DispatchTime.now().uptimeNanoseconds

    /// Binds the listening socket (nothing is accepted until `start()`); keeps rooms in `store`
    /// if there is one (the caller closes it after `shutdown`).
    ///
    /// Throws `ChatServerError.invalidConfiguration` for settings that cannot work, `TLSError` when
    /// the certificate or key cannot be loaded, `SocketError` when the address cannot be bound.
    /// Logs through `logger` (connects and disconnects at `info`).
    ///
    /// With `cluster`, the server is a node of that cluster (docs/CLUSTER.md): rooms, nicks and
    /// history are the cluster's, in its Redis, and `store` must be nil.
    ///
    /// Accounts are kept in `accounts` (read whole here); by default in memory, lost at exit.
    /// Registered rooms and server bans likewise in `moderation`.
    public init(
        configuration: ChatServerConfiguration, store: (any RoomStore)? = nil, cluster: ClusterConfiguration? = nil,
        accounts: (any AccountStore)? = nil, moderation: (any ModerationStore)? = nil, logger: Logger = Logger(label: "chat-server")
    ) throws {
        if let problem = configuration.problem() { throw ChatServerError.invalidConfiguration(problem) }
        if cluster != nil, store != nil {
            throw ChatServerError.invalidConfiguration("a cluster node keeps its rooms in the cluster's Redis, not in a store")
        }
        var configuration = configuration
        configuration.isClusterNode = cluster != nil
        if let problem = configuration.memoryBudget.problem { throw ChatServerError.invalidConfiguration(problem) }
        self.configuration = configuration
        liveSettings = configuration
        self.logger = logger
        self.store = store
        budget = configuration.memoryBudget
        readBuffer = ReadBuffer(capacity: MemoryBudget.readBytes)
        core = ChatCore(configuration: configuration, log: cluster != nil ? .cluster : store != nil ? .durable : .memory)
        accountStore = accounts ?? MemoryAccountStore()
        do {
            core.loadAccounts(try accountStore.loadAll())
        } catch {
            throw ChatServerError.invalidConfiguration("cannot read the accounts: \(error)")
        }
        if cluster == nil {
            // A cluster node asks Redis once its link is up (ClusterNode).
            for key in core.missingAdminAccounts {
                let how =
                    accounts == nil
                    ? "with --no-persistence it cannot exist (accounts live in memory only): give the server a --data-dir and create it there"
                    : "stop the server and create it"
                logger.warning("\(Self.missingAdminAccountWarning(key)): \(how) with `chat-server account add \(key)`")
            }
        }
        moderationStore = moderation ?? MemoryModerationStore()
        do {
            // A cluster node serves no moderation yet (ChatCore+Moderation.swift): nothing to load.
            if cluster == nil { core.loadModeration(try moderationStore.loadAll()) }
        } catch {
            throw ChatServerError.invalidConfiguration("cannot read the moderation store: \(error)")
        }
        hashingPool = PasswordHashingPool(
            workers: configuration.accounts.hashingWorkers, queueCapacity: configuration.accounts.hashingQueue,
            hashing: configuration.accounts.hashing)
        let queue = self.queue
        clusterNode = cluster.map { ClusterNode(configuration: $0, chat: configuration, queue: queue, logger: logger) }
        // Loaded before binding, so a bad certificate never leaves a port open that cannot serve.
        tlsContext = try configuration.tls.map { configuration throws(TLSError) in try TLSContext(configuration) }
        // "::" takes IPv4 clients too (as IPv4-mapped addresses), as --help promises.
        let listener = try SocketListener(
            host: configuration.host, port: configuration.port, dualStack: configuration.host == "::", backlog: 4096)
        do throws(SocketError) {
            plainListener = try configuration.plainPort.map { port throws(SocketError) in
                try SocketListener(host: configuration.host, port: port, dualStack: configuration.host == "::", backlog: 4096)
            }
        } catch {
            // Its owner is this init, which is failing: dropped open, the debug build would trap
            // (`Socket`'s deinit) before the caller could print the error.
            listener.close()
            throw error
        }
        self.listener = listener
        localAddress = listener.localAddress
    }

    /// The start of the warning that the `--admin-account` `key` has no account: said at start,
    /// by a server on its own or a cluster node.
    static func missingAdminAccountWarning(_ key: String) -> String {
        "admin account \(key) does not exist, and no client may register it"
    }

    /// The certificate new TLS connections are served with, or nil without TLS.
    public var tlsCertificate: TLSCertificateSummary? { queue.sync { tlsContext?.certificate } }

    /// What an operator should know about the loaded certificate and key (expiring soon, readable
    /// by others, …); empty without TLS.
    public var tlsWarnings: [String] { queue.sync { tlsContext?.warnings ?? [] } }

    /// Reads the certificate and key files again (on SIGHUP): on success new connections get the
    /// new certificate, on failure the current one stays and the error says why. Connections
    /// already open carry on with the certificate they started with. Logs either way.
    @discardableResult
    public func reloadTLS() -> Result<TLSCertificateSummary?, TLSError> {
        queue.sync {
            // The live one's: a reload (`reconfigure`) may have named other files.
            guard let configuration = liveSettings.tls else { return .success(nil) }
            do throws(TLSError) {
                let context = try TLSContext(configuration)
                tlsContext = context
                logger.info("TLS certificate reloaded", metadata: ["tls.certificate": "\(context.certificate.map { "\($0)" } ?? "")"])
                for warning in context.warnings { logger.warning("TLS: \(warning)") }
                return .success(context.certificate)
            } catch {
                logger.error("TLS reload failed, the current certificate stays", metadata: ["error": "\(error)"])
                return .failure(error)
            }
        }
    }

    /// Takes the settings of `new` that can change while the server runs
    /// (`ChatServerConfiguration.liveSettings`), then reads the TLS files again (`reloadTLS()`, which
    /// logs its outcome). Returns the flags of the live settings that changed. Call from any
    /// thread but the server's queue.
    public func reconfigure(_ new: ChatServerConfiguration) -> [String] {
        let changed = queue.sync {
            let changed = liveSettings.liveChanges(to: new)
            liveSettings = liveSettings.applyingLiveSettings(of: new)
            core.reconfigure(liveSettings.limits)
            return changed
        }
        reloadTLS()
        return changed
    }

    /// The live settings in force (`reconfigure`), read on the server's queue.
    public var liveConfiguration: ChatServerConfiguration { queue.sync { liveSettings } }

    /// Starts accepting connections and the timer. Call once.
    public func start() {
        queue.sync {
            precondition(state == .idle, "start() called twice")
            state = .running
            ownDescriptors = DescriptorLimit.openDescriptorCount() ?? 0
            if let budget = clientDescriptorBudget, budget < configuration.maxClients {
                logger.warning(
                    "the descriptor limit holds fewer clients than --max-clients: raise it (ulimit -n, LimitNOFILE=) or lower --max-clients",
                    metadata: [
                        "descriptors.limit": "\(DescriptorLimit.current ?? 0)", "descriptors.server": "\(ownDescriptors)",
                        "descriptors.reserve": "\(Self.descriptorReserve)", "clients.possible": "\(max(0, budget))",
                        "clients.max": "\(configuration.maxClients)",
                    ])
            }
            listener.start(
                queue: queue, handler: { [weak self] socket in self?.accept(socket, tls: true) },
                onError: { [weak self] error in self?.acceptFailed(error) })
            plainListener?.start(
                queue: queue, handler: { [weak self] socket in self?.accept(socket, tls: false) },
                onError: { [weak self] error in self?.acceptFailed(error) })
            startTimer()
            clusterNode?.start { [weak self] body in self?.answerFromCluster(body) }
        }
    }

    /// Closes the listeners of a server that was made but will not be started: a start-up that
    /// fails after `init` (the metrics port cannot be bound) ends without a listener left open,
    /// which `Socket`'s deinit treats as a leak (and the debug build traps on). Call it instead of
    /// `start()`; the caller still closes the store it gave.
    public func discard() {
        queue.sync {
            precondition(state == .idle, "discard() is for a server that never started")
            state = .stopped
            listener.close()
            plainListener?.close()
        }
    }

    /// Stops the server: stops accepting, sends every client `goodbye(reason)` after what is
    /// already queued for it, waits up to `drainTimeout` for the bytes to leave and the clients to
    /// close, closes what is left, then calls `completion` (on the server's queue).
    public func shutdown(reason: String = "the server is shutting down", completion: @escaping @Sendable () -> Void) {
        queue.async { [self] in
            switch state {
            case .stopped:
                completion()
                return
            case .stopping:
                stopWaiters.append(completion)
                return
            case .idle, .running:
                stopWaiters.append(completion)
            }
            state = .stopping
            // Kept for the restart that usually follows: whoever rejoins first must not take
            // over a room (its members take their own roles back). Waited for before stopping.
            if clusterNode == nil {
                core.rememberRolesForRestart()
                writeModeration()
            }
            listener.close()
            plainListener?.close()
            guard let store else {
                sayGoodbye(reason)
                return
            }
            // What is held back goes out first, once committed.
            let lastCommit = performed == 0 ? submittedCommits : submittedCommits + 1
            guard lastCommit > completedCommits else {
                sayGoodbye(reason)
                return
            }
            // Armed first: a store that commits on this queue completes inside `submitCommit`.
            goodbyeAfterCommit = (lastCommit, reason, Self.now().uptimeMillis + configuration.drainTimeout.milliseconds)
            if !commitInFlight, hasChangesToCommit(in: store) || performed > 0 { submitCommit() }
        }
    }

    /// Sends every client `goodbye(reason)` after what is queued for it and starts closing.
    private func sayGoodbye(_ reason: String) {
        let now = Self.now()
        let deadline = now.uptimeMillis + configuration.drainTimeout.milliseconds
        let farewell = encode(.goodbye(reason: reason))
        for case let connection? in connections where connection.isActive {
            metrics?.disconnected("shutdown")
            logDisconnect(connection, reason: reason, nick: core.nick(of: connection.id), now: now)
            connection.beginClosing(farewell: farewell, deadline: deadline)
            markDirty(connection)
        }
        flushDirty()
        finishStoppingIfIdle()
    }

    /// Stops the server like `shutdown(reason:completion:)` and returns when it has stopped.
    public func shutdown(reason: String = "the server is shutting down") async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            shutdown(reason: reason) { continuation.resume() }
        }
    }

    /// How many connections are open, handshaking and closing ones included.
    public var connectionCount: Int { queue.sync { openConnections } }

    /// What the server's output queues pin now: chunks counted once, plus queue slots.
    public var queuedBytes: Int { queue.sync { outputInUse } }
    /// How many queue slots the output queues hold now, all clients together: a slot is a frame
    /// for one client, or a run of a room's events (`RoomSegments`). What a member that stops
    /// reading costs beyond the bytes themselves.
    public var queuedSlots: Int { queue.sync { slotMeter.bytes / SocketChannel.slotBytes } }

    private var outputInUse: Int { chunkMeter.bytes + slotMeter.bytes + ciphertextMeter.bytes }

    // MARK: Accepting

    /// Descriptors no client may take, for what the server opens while it runs: the journal's
    /// next file and its syncs, SQLite's, the metrics port's 16 connections, `/proc` reads, a
    /// Redis link that reconnects, TLS files read again. Redis keeps 32 likewise
    /// (`CONFIG_MIN_RESERVED_FDS`). Without it, idle connections up to the limit made every
    /// commit fail in durable mode: the journal could not open its next file.
    public static let descriptorReserve = 32

    /// How many descriptors clients may hold — connections, and refused ones still held — under
    /// the process's limit as it is now (an operator may lower it with `prlimit`): the limit
    /// less the server's own and `descriptorReserve`; nil when the limit cannot be read.
    private var clientDescriptorBudget: Int? {
        guard let limit = DescriptorLimit.current else { return nil }
        return Int(clamping: limit) - ownDescriptors - Self.descriptorReserve
    }

    /// A listener's `accept` failed (out of descriptors or memory, the listener backing off for
    /// 100 ms): logged as refusals are, a few per 10 s and then a count, so a flood cannot fill
    /// the log.
    private func acceptFailed(_ error: SocketError) {
        if refusalLog.admit("accept failed: errno \(error.errno ?? 0)", now: Self.now().uptimeMillis) {
            logger.warning("accept failed", metadata: ["error": "\(error)"])
        }
    }

    /// Descriptors clients hold now: connections (closing ones too) and refused ones held open.
    private var clientDescriptors: Int { openConnections + refused.count + tlsRefusals.count }

    /// Takes a connection from a listener; `tls` says whether it came from the TLS one (which
    /// speaks TLS only when a context is loaded).
    private func accept(_ socket: Socket, tls: Bool) {
        guard state == .running else {
            socket.close()
            return
        }
        let address = (try? socket.remoteAddress().ip) ?? "unknown"
        if let budget = clientDescriptorBudget, clientDescriptors >= budget {
            // Its descriptor is the reserve's: told, and closed at once rather than held.
            let refusal = Disconnection(code: .serverFull, reason: "the server is full: no descriptor is left for another connection")
            turnAway(socket, address: address, refusal: refusal, now: Self.now(), holding: false)
            return
        }
        let slot = freeSlots.last ?? connections.count
        let now = Self.now()
        if let refusal = core.clientConnected(ClientID(slot), address: address, encrypted: tls && tlsContext != nil, at: now) {
            if tls, tlsContext != nil {
                refuseAfterHandshake(socket, address: address, refusal: refusal, now: now)
            } else {
                turnAway(socket, address: address, refusal: refusal, now: now)
            }
            return
        }
        let connection = open(socket, address: address, tls: tls)
        // Connections are logged when they are welcomed or refused: a line per attempt of a
        // client in a reconnect loop would be a line too many.
        logger.debug(
            "client connected",
            metadata: ["connection.id": "\(connection.serial)", "connection.remote": "\(connection.channel.label)"])
    }

    /// Makes `socket` a connection in the next free slot, reading and writing on the server's
    /// queue; `tls` says whether it came from the TLS listener.
    private func open(_ socket: Socket, address: String, tls: Bool) -> ClientConnection {
        let slot = freeSlots.popLast() ?? connections.count
        if slot == connections.count { connections.append(nil) }
        // Chat frames are small and latency matters more than packet count; gather writes already
        // batch whatever is queued.
        try? socket.setNoDelay()
        // The TLS handshake runs inside the chat handshake's window: ChatCore's clock started
        // before, and a client that stalls mid-handshake never sends hello.
        let session = tls ? tlsContext?.makeServerSession(peerLabel: socket.label) : nil
        if session != nil { metrics?.tlsHandshakesStarted += 1 }
        let channel = SocketChannel(socket: socket, queue: queue, readBuffer: readBuffer, tls: session)
        channel.slotMeter = slotMeter
        channel.ciphertextMeter = ciphertextMeter
        let connection = ClientConnection(
            id: ClientID(slot), serial: nextSerial, address: address, channel: channel,
            maxFrameSize: configuration.maxFrameSize)
        nextSerial += 1
        connections[slot] = connection
        openConnections += 1
        channel.onBytes = { [weak self] bytes in self?.received(bytes, on: connection) }
        channel.onEndOfInput = { [weak self] in self?.endOfInput(on: connection) }
        channel.onDrained = { [weak self] in self?.drained(connection) }
        channel.onClosed = { [weak self] error in self?.closed(connection, error: error) }
        channel.start()
        return connection
    }

    /// Refuses a connection on the TLS port: a refusal in plain text would reach a TLS client as
    /// garbage ("not TLS"), so the connection completes its TLS handshake, gets its error frame
    /// encrypted, and closes once the client has closed too (its input read and dropped
    /// meanwhile, as `RefusedSockets` does for plain ones). A handshake costs a millisecond of
    /// CPU, so at most `maxTLSRefusalHandshakes` are in progress at once — past that, the
    /// connection is closed unanswered — and at most `maxTLSRefusals` wait for their client to
    /// close: the oldest is closed early to make room.
    private func refuseAfterHandshake(_ socket: Socket, address: String, refusal: Disconnection, now: ServerTime) {
        logRefusal(address: address, label: socket.label, reason: refusal.reason, now: now)
        tlsRefusals.removeAll { if case .closed = $0.phase { true } else { false } }
        guard tlsRefusals.lazy.filter({ $0.channel.isHandshaking }).count < Self.maxTLSRefusalHandshakes else {
            socket.close()
            return
        }
        if tlsRefusals.count >= Self.maxTLSRefusals { tlsRefusals.removeFirst().channel.close() }
        let connection = open(socket, address: address, tls: true)
        tlsRefusals.append(connection)
        // It is not a client of the chat: no welcome, so its refusal is not logged again.
        let deadline = now.uptimeMillis + configuration.handshakeTimeout.milliseconds + configuration.lingerTimeout.milliseconds
        connection.beginClosing(farewell: refusal.errorFrame.map(encode), deadline: deadline)
        markDirty(connection)
    }

    /// The most TLS handshakes of refused connections in progress at once.
    static let maxTLSRefusalHandshakes = 64
    /// The most refused TLS connections open at once, handshaking or waiting for their client to
    /// close; as many as `RefusedSockets` keeps of plain ones.
    static let maxTLSRefusals = 256

    /// Refuses a connection on the listener's turn, at the cost of a few system calls: its error
    /// frame goes into the socket's empty send buffer, then end of stream; what the client already
    /// sent (usually its `hello`) is read and dropped. If the client has closed too, the socket is
    /// closed now; otherwise it waits in `refused` for the client to close. A channel per attempt,
    /// two Dispatch sources and a linger, is what made a reconnect loop over the limits slow
    /// everyone else down.
    /// `holding`: kept open (without a channel) until the client closes, so it reads the error
    /// rather than a reset; false when no descriptor may be held for it.
    private func turnAway(_ socket: Socket, address: String, refusal: Disconnection, now: ServerTime, holding: Bool = true) {
        logRefusal(address: address, label: socket.label, reason: refusal.reason, now: now)
        if let frame = refusal.errorFrame {
            if let code = refusal.code { metrics?.errorSent(code) }
            let bytes = FrameEncoder.encode(frame)
            _ = bytes.withUnsafeBytes { try? socket.write($0) }
        }
        try? socket.shutdownWrite()
        if holding, RefusedSockets.stillOpen(socket, scratch: refusalScratch.memory) {
            refused.add(socket, until: now.uptimeMillis + configuration.lingerTimeout.milliseconds)
        } else {
            socket.close()
        }
    }

    // MARK: Reading

    private func received(_ bytes: UnsafeRawBufferPointer, on connection: ClientConnection) {
        // A closing connection's input is read only to notice when the peer closes.
        guard connection.isActive else { return }
        connection.decoder.append(bytes)
        metrics?.bytesReceived += bytes.count
        connection.readSinceTick = true
        connection.decoderHasGrown = true
        serveRequests(of: connection)
    }

    /// Hands the frames waiting in `connection`'s decoder to the chat, one at a time, and stops —
    /// pausing the connection's reading — as soon as more than `replyHighWater` is queued for it
    /// (its requests wait until it has read what it asked for), or its address has used its
    /// shared rate (they wait until the address may go on).
    private func serveRequests(of connection: ClientConnection) {
        // A throttled client is served again by `serveThrottled` only, so it is queued there once.
        guard connection.throttledUntil == nil else { return }
        let now = Self.now()
        do {
            while connection.isActive, connection.departure == nil {
                // A handshake holds nothing (`hold`), so a newcomer is welcomed however far
                // behind the writer is.
                if store != nil, writerBacklogged, connection.welcomed {
                    waitForWriter(connection)
                    return
                }
                if let clusterNode, core.isAwaitingCluster(connection.id) || clusterNode.isBacklogged {
                    clusterNode.hold(connection)
                    return
                }
                if core.isAwaitingLog(connection.id) {
                    waitForRead(connection)
                    return
                }
                if core.isAwaitingAccount(connection.id) {
                    waitForAccount(connection)
                    return
                }
                if replyBytes(of: connection) > budget.replyHighWater {
                    pauseRequests(of: connection)
                    return
                }
                guard connection.decoder.bufferedByteCount > 0 else { break }
                let wait = core.addressWait(for: connection.id, at: now)
                if wait > 0 {
                    throttle(connection, until: now.uptimeMillis + wait)
                    return
                }
                let before = connection.decoder.bufferedByteCount
                // A version 1 session skips version 2's types, as a version 1 server would.
                connection.decoder.version = core.protocolVersion(of: connection.id)
                guard let frame = try connection.decoder.next() else { break }
                let size = before - connection.decoder.bufferedByteCount
                metrics?.framesReceived[Int(frame.type.rawValue)] += 1
                core.received(frame, size: size, from: connection.id, at: now, into: &actions)
                perform()
            }
            if connection.isActive, connection.departure == nil, connection.channel.inputEnded {
                // Every request the client sent before ending its input has been served (a partial
                // frame at the end is dropped): its session ends as if it had said goodbye, and
                // what is queued for it still goes out before the connection closes (in a
                // cluster, after the answers still to come from Redis).
                core.endSession(
                    connection.id, Disconnection(code: nil, reason: "connection closed by the client"), at: now,
                    into: &actions)
                perform()
            }
        } catch {
            let violation = Disconnection(
                code: error.errorCode, frameType: connection.decoder.failedFrameType, reason: error.description)
            core.endSession(connection.id, violation, at: now, into: &actions)
            perform()
        }
    }

    /// Whether the storage writer is so far behind that no more requests are served.
    private var writerBacklogged: Bool {
        heldCost + uncommittedCost > budget.held
    }

    private func waitForWriter(_ connection: ClientConnection) {
        guard !connection.waitingForWriter else { return }
        connection.waitingForWriter = true
        writerWaiters.append(connection)
        connection.updateReading()
    }

    private func waitForRead(_ connection: ClientConnection) {
        wait(connection, forAnswerIn: \.readWaiters)
    }

    /// Reads `connection` no more until the answer it waits for comes (`serveAnswered`).
    private func wait(_ connection: ClientConnection, forAnswerIn waiters: ReferenceWritableKeyPath<ChatServer, [ClientConnection]>) {
        guard !connection.waitingForAnswer else { return }
        connection.waitingForAnswer = true
        self[keyPath: waiters].append(connection)
        connection.updateReading()
    }

    /// Takes out of `waiters` the clients that no longer wait (`stillWaiting` says no, or they
    /// left) and serves the ones still connected again.
    private func serveAnswered(
        _ waiters: ReferenceWritableKeyPath<ChatServer, [ClientConnection]>, stillWaiting: (ClientID) -> Bool
    ) {
        guard !self[keyPath: waiters].isEmpty else { return }
        var answered: [ClientConnection] = []
        self[keyPath: waiters].removeAll { connection in
            guard !connection.isActive || !stillWaiting(connection.id) else { return false }
            connection.waitingForAnswer = false
            answered.append(connection)
            return true
        }
        // Served after the list is settled: a served client may wait again and join it.
        for connection in answered where connection.isActive {
            serveRequests(of: connection)
            connection.updateReading()
        }
    }

    /// Carries out the reads of the store the core asked for: each on the store's own queue,
    /// its answer handed back on the server's (`answerFromStore`).
    private func carryOutReads(on store: any RoomStore) {
        for read in core.takeLogReads() {
            store.read(read.request, on: queue) { [weak self] answer in
                self?.answerFromStore(read.ticket, answer)
            }
        }
    }

    /// A read of the store was answered: the core takes the answer, what it did is carried out,
    /// and the clients whose requests waited for it are served again.
    private func answerFromStore(_ ticket: UInt64, _ answer: Result<RoomReadAnswer, StorageError>) {
        core.logReadAnswered(ticket, answer.mapError(\.logError), at: Self.now(), into: &actions)
        perform()
        serveAnswered(\.readWaiters) { core.isAwaitingLog($0) }
    }

    /// Serves the clients that waited for the writer, once it has caught up.
    private func resumeWriterWaiters() {
        guard !writerBacklogged, !writerWaiters.isEmpty else { return }
        let waiters = writerWaiters
        writerWaiters.removeAll()
        for connection in waiters {
            connection.waitingForWriter = false
            guard connection.isActive else { continue }
            serveRequests(of: connection)
            connection.updateReading()
        }
    }

    private func pauseRequests(of connection: ClientConnection) {
        guard !connection.requestsPaused else { return }
        connection.requestsPaused = true
        connection.updateReading()
    }

    private func throttle(_ connection: ClientConnection, until deadline: UInt64) {
        connection.throttledUntil = deadline
        connection.updateReading()
        throttled.append(connection)
        if throttleTimerDeadline.map({ deadline < $0 }) ?? true { armThrottleTimer(for: deadline) }
    }

    private func armThrottleTimer(for deadline: UInt64) {
        throttleTimerDeadline = deadline
        let delay = Int(deadline &- min(deadline, Self.now().uptimeMillis))
        throttleTimer?.schedule(deadline: .now() + .milliseconds(delay))
    }

    /// Serves the throttled connections whose wait is over, in turn; those whose address has
    /// used its rate again go to the back.
    private func serveThrottled() {
        throttleTimerDeadline = nil
        let now = Self.now().uptimeMillis
        var earliest: UInt64?
        for _ in 0..<throttled.count {
            let connection = throttled.removeFirst()
            guard connection.isActive, let until = connection.throttledUntil else { continue }
            if until > now {
                throttled.append(connection)
                earliest = min(earliest ?? until, until)
                continue
            }
            connection.throttledUntil = nil
            serveRequests(of: connection)
            if let again = connection.throttledUntil {
                earliest = min(earliest ?? again, again)
            } else {
                connection.updateReading()
            }
        }
        if let earliest, throttleTimerDeadline.map({ earliest < $0 }) ?? true { armThrottleTimer(for: earliest) }
    }

    /// What stands between `connection` and its next request being served: its queue, the
    /// replies to it that its queue holds until a commit lands, and — in a cluster — its frames
    /// that wait for the echoes of its earlier lines (`ChatCore.heldReplyBytes(for:)`), all
    /// against one reply mark.
    private func replyBytes(of connection: ClientConnection) -> Int {
        connection.channel.sendableCost + connection.heldReplyBytes
            + (clusterNode == nil ? 0 : core.heldReplyBytes(for: connection.id))
    }



    /// Serves `connection`'s requests again once its queue is under `replyLowWater`.
    private func resumeRequestsIfDrained(_ connection: ClientConnection) {
        guard connection.requestsPaused, connection.isActive,
            replyBytes(of: connection) < budget.replyLowWater
        else { return }
        connection.requestsPaused = false
        serveRequests(of: connection)
        connection.updateReading()
    }

    private func drained(_ connection: ClientConnection) {
        if metrics != nil {
            let now = DispatchTime.now().uptimeNanoseconds
            var sameTurn = 0
            recordDeliveryLatency(connection, now: now, sameTurn: &sameTurn)
            metrics?.deliveryLatency.record(nanoseconds: now &- min(now, flushArmedAt), samples: sameTurn)
        }
        connection.lagSince = nil
        resumeRequestsIfDrained(connection)
    }

    /// The client ended its input; it may still read. Its session ends once the requests it sent
    /// before are served (later, if they wait for its queue to drain).
    private func endOfInput(on connection: ClientConnection) {
        guard connection.isActive, connection.departure == nil, !connection.requestsPaused, connection.throttledUntil == nil,
            !connection.waitingForWriter, !connection.waitingForAnswer
        else { return }
        serveRequests(of: connection)
    }

    private func closed(_ connection: ClientConnection, error: SocketError?) {
        if connection.isActive {
            let reason = error.map { error in
                error.tlsError.map { "TLS: \($0.reason)" } ?? "connection lost: \(error.reason)"
            } ?? "connection closed"
            core.disconnect(connection.id, Disconnection(code: nil, reason: reason), at: Self.now(), into: &actions)
            perform()
        }
        connection.phase = .closed
        connections[connection.id.slot] = nil
        // Actions kept for a commit may still name this slot (a failed commit carries them out
        // again): it is reused only after them, or a newcomer in it would get what was meant
        // for the one that left.
        let releaseAfter = performed == 0 ? submittedCommits : submittedCommits + 1
        if releaseAfter > completedCommits {
            slotsAwaitingCommit.append((connection.id.slot, releaseAfter))
        } else {
            freeSlots.append(connection.id.slot)
        }
        openConnections -= 1
        finishStoppingIfIdle()
    }

    // MARK: Carrying out actions

    /// Carries out the actions the core appended, in order. Without a store, or with no change
    /// of a room to commit (`hasChangesToCommit`) and none waiting for a commit, they go out now
    /// and the list is emptied; otherwise their
    /// frames are queued at once but held in their recipients' queues until the commit of the
    /// changes staged with them lands (`carryOutHeld`), and the list keeps them until then.
    private func perform() {
        // A commit the writer finished meanwhile goes out now, not after the queued requests.
        defer { store?.runFinishedCommits() }
        if let clusterNode {
            let requests = core.takeClusterRequests()
            if !requests.isEmpty { clusterNode.carryOut(requests) }
        }
        if let store { carryOutReads(on: store) }
        // Before the actions: a refused handshake's connection is still here to be named.
        logLoginFailures()
        carryOutAccountWork()
        writeModeration()
        guard actions.count > performed else { return }
        if let store, commitInFlight || performed > 0 || hasChangesToCommit(in: store) {
            carryOutHeld()
            if store.commitsOnCallersQueue {
                // Committed at the end of the turn, just before the flush that sends what it
                // releases (`flushDirty`): one write of the log per turn, as Redis writes its
                // append-only file before it replies, and no hand-off to another thread.
                scheduleFlush()
            } else if !commitInFlight, !commitScheduled {
                // An idle writer thread takes the first change at once: waiting for the end of
                // the turn would make it wait behind the turn's fan-out too. Under load commits
                // are scheduled by their predecessors' completions, once per turn.
                submitCommit()
            }
            return
        }
        execute(actions)
        actions.removeAll(keepingCapacity: true)
    }

    /// Carries out the actions not yet performed for the next commit: each frame is queued now,
    /// held in its recipients' queues (`SocketChannel.holdsNewBytes`) until the commit lands —
    /// the log's durable mark, carried into each queue — and charged against `budget.held`
    /// meanwhile (`uncommittedCost`). Queued frames keep the order the chat produced them in,
    /// whatever a commit's outcome.
    ///
    /// A handshake's frames go out at once: nothing is held for a client before its welcome (it
    /// is in no room), so it is welcomed however far behind the writer is. A leaving client is
    /// read no more at once: a slow consumer, or a client whose connection is already gone, is
    /// cut off at once too (what is held for it is dropped, as what is queued is); any other gets what is held for it and its farewell when
    /// the commit lands, or its farewell alone at its linger deadline if the commit has not
    /// landed by then.
    private func carryOutHeld() {
        for index in performed..<actions.count {
            let action = actions[index]
            if case .send(.limits, _) = action {
                // The handshake's second frame goes with the welcome before it (below).
                carryOut(action, holding: false)
                performedAtOnce.append(index)
                continue
            }
            if let id = action.soleRecipient, let connection = connections[id.slot], !connection.welcomed {
                carryOut(action, holding: false)
                performedAtOnce.append(index)
                continue
            }
            if case .disconnect(let id, let disconnection, let nick) = action {
                guard let connection = connections[id.slot], connection.isActive else { continue }
                // A slow consumer is cut off at once; so is a connection already gone (a reset):
                // nothing held for it can reach it, and by the commit its slot is empty, so the
                // departure would be neither logged nor counted.
                if disconnection.code == .slowConsumer || !connection.channel.isOpen {
                    carryOut(action, holding: false)
                    performedAtOnce.append(index)
                    continue
                }
                let deadline = Self.now().uptimeMillis + configuration.lingerTimeout.milliseconds
                connection.departure = Departure(disconnection: disconnection, nick: nick, deadline: deadline)
                connection.updateReading()
                departuresAfterCommit.append(index)
                uncommittedCost += Self.departureCost(disconnection)
                continue
            }
            uncommittedCost += carryOut(action, holding: true)
        }
        performed = actions.count
    }

    /// What a departure waiting for a commit is charged against `budget.held`.
    private static func departureCost(_ disconnection: Disconnection) -> Int {
        128 + disconnection.reason.utf8.count
    }

    /// Queues the bytes `range` of `chunk` for `connection`: with `holding`, held from now until
    /// the next commit is submitted (`submitCommit` notes how much that is).
    @inline(__always)
    private func queue(_ chunk: ByteChunk, _ range: Range<Int>, for connection: ClientConnection, holding: Bool) {
        if holding {
            if connection.channel.enqueueHeld(chunk, bytes: range) { self.holding.append(connection) }
        } else {
            connection.channel.enqueue(chunk, bytes: range)
        }
    }

    /// After a commit: commits at the end of this turn what is staged and held — once the
    /// requests already queued have joined it. Under load, one commit per turn, however many
    /// requests it serves (group commit): a commit costs the writer about as much whether it
    /// holds one message or a hundred.
    private func scheduleCommit() {
        guard !commitInFlight, !commitScheduled else { return }
        commitScheduled = true
        queue.async { [weak self] in
            guard let self else { return }
            commitScheduled = false
            guard let store, performed > 0 || hasChangesToCommit(in: store) else { return }
            submitCommit()
        }
    }

    /// Whether the next commit has changes of rooms to store: the core's not yet taken
    /// (`ChatCore.takeLogBatch()`), or the store's staged (a failed commit's rooms, staged again).
    @inline(__always)
    private func hasChangesToCommit(in store: any RoomStore) -> Bool {
        core.hasLogChanges || store.hasStagedChanges
    }

    /// Stages the rooms' changes the core made since the last commit and commits everything
    /// staged; the frames held for it wait in their queues until it is done.
    private func submitCommit() {
        guard let store, !commitInFlight else { return }
        // Taken from the core only now, so that a busy room's changes since the last commit are
        // one record and a run of events (`LogBatch`), however many requests they came from; and
        // before the commit is described, whose `changesThrough` must count them.
        let batch = core.takeLogBatch()
        if !batch.isEmpty {
            store.stage(batch)
            if batch.through != 0 { lastStagedChange = batch.through }
        }
        // Everything a queue holds now is this commit's: the last one's was released or dropped.
        let held = holding.map { HeldBytes(connection: $0, bytes: $0.channel.heldBytes, replies: $0.heldReplyBytes) }
        let commit = PendingCommit(
            actions: actions, performedAtOnce: performedAtOnce, departures: departuresAfterCommit, held: held,
            cost: uncommittedCost, changesThrough: lastStagedChange)
        for connection in holding { connection.channel.holdsNewBytes = false }
        holding.removeAll(keepingCapacity: true)
        actions = []
        actions.reserveCapacity(commit.actions.count)
        performed = 0
        performedAtOnce.removeAll()
        departuresAfterCommit.removeAll()
        heldCost += uncommittedCost
        uncommittedCost = 0
        commitInFlight = true
        submittedCommits += 1
        metrics?.commitStarted(events: (store as? SQLiteRoomStore)?.stagedEventCount ?? 0)
        store.commitStaged(on: queue) { [weak self] result in self?.committed(commit, result) }
    }

    /// A commit is done: what its queues held for it goes (without the events that could not be
    /// stored), what was held meanwhile is submitted, and the clients that waited for the writer
    /// are served.
    private func committed(_ commit: PendingCommit, _ result: Result<Void, CommitFailure>) {
        commitInFlight = false
        completedCommits += 1
        heldCost -= commit.cost
        metrics?.commitFinished(failed: result.isFailure)
        defer {
            while let first = slotsAwaitingCommit.first, first.after <= completedCommits {
                freeSlots.append(slotsAwaitingCommit.removeFirst().slot)
            }
            if let store, performed > 0 || (hasChangesToCommit(in: store) && core.storageFailure == nil) {
                // A store that commits on this queue commits at the end of a turn, but this
                // completion may have come late (a commit it handed to its writer): what was
                // held meanwhile needs a turn's end to be committed at.
                if store.commitsOnCallersQueue { scheduleFlush() } else { scheduleCommit() }
            }
            if let (commit, reason, _) = goodbyeAfterCommit, completedCommits >= commit {
                goodbyeAfterCommit = nil
                sayGoodbye(reason)
            }
        }
        switch result {
        case .success:
            core.logCommitted(through: commit.changesThrough)
            if core.storageFailure != nil {
                core.storageRecovered()
                // Logged there: "storage works again", with the count of failures.
                storageHealth?.succeeded(commitPart)
            }
            for held in commit.held where held.connection.isActive {
                held.connection.channel.release(held.bytes)
                held.connection.heldReplyBytes = max(0, held.connection.heldReplyBytes - held.replies)
                markDirty(held.connection)
            }
            for index in commit.departures { carryOut(commit.actions[index], holding: false) }
        case .failure(let failure):
            // Logged there once per interval, with a count: a full disk fails a commit per turn.
            storageHealth?.failed(
                part(of: failure), "\(failure.error); \(failure.events.count) room events not delivered, and refused until a commit succeeds")
            replay(commit, leavingOut: Set(failure.events.map { StoredEventKey(room: $0.room, seq: $0.entry.seq) }))
            core.storageFailed(failure, into: &actions)
            perform()
        }
        resumeWriterWaiters()
    }

    /// After `commit` failed: every queue drops what it holds — the commit's frames, and those
    /// queued for the next one since — and they are queued again, in order: the commit's, to go
    /// now, without the deliveries of the stored events in `failed`; then the next commit's,
    /// held again. (Not counted again in the metrics: they were when first queued.)
    private func replay(_ commit: PendingCommit, leavingOut failed: Set<StoredEventKey>) {
        for held in commit.held {
            held.connection.channel.discardHeld()
            held.connection.heldReplyBytes = 0
        }
        for connection in holding {
            connection.channel.discardHeld()
            connection.channel.holdsNewBytes = false
            connection.heldReplyBytes = 0
        }
        holding.removeAll(keepingCapacity: true)
        let recording = metrics
        metrics = nil
        defer { metrics = recording }
        let skipped = Set(commit.performedAtOnce).union(commit.departures)
        for index in commit.actions.indices where !skipped.contains(index) {
            let action = commit.actions[index]
            if let event = StoredEventKey(action), failed.contains(event) { continue }
            carryOut(action, holding: false)
        }
        for index in commit.departures { carryOut(commit.actions[index], holding: false) }
        let next = Set(performedAtOnce).union(departuresAfterCommit)
        uncommittedCost = 0
        for index in 0..<performed {
            if next.contains(index) {
                if case .disconnect(_, let disconnection, _) = actions[index] { uncommittedCost += Self.departureCost(disconnection) }
                continue
            }
            uncommittedCost += carryOut(actions[index], holding: true)
        }
    }

    /// Carries out `list`, in order, at once.
    private func execute(_ list: [ChatAction]) {
        for action in list { carryOut(action, holding: false) }
    }

    /// Carries out `action`: its frames queued — held until the next commit, with `holding` —
    /// or the session it ends closed. Returns what its held frames cost (`budget.held`): their
    /// encoded bytes, once however many queues share them, and a recipient list's IDs.
    @discardableResult @inline(__always)
    private func carryOut(_ action: ChatAction, holding: Bool) -> Int {
        switch action {
        case .send(let frame, let id):
            guard let connection = connections[id.slot], connection.isActive else { return 0 }
            if let nick = Self.welcomedNick(frame) { logWelcome(connection, nick: nick) }
            let chunk = encode(frame)
            let cost = ByteChunk.cost(ofBytes: chunk.count)
            if holding { connection.heldReplyBytes += cost }
            queue(chunk, 0..<chunk.count, for: connection, holding: holding)
            metrics?.queued(chunk)
            markDirty(connection)
            return cost
        case .sendShared(let shared, let id):
            guard let connection = connections[id.slot], connection.isActive else { return 0 }
            encodeIfNeeded(shared)
            var cost = 0
            for chunk in shared.chunks {
                queue(chunk, 0..<chunk.count, for: connection, holding: holding)
                cost += ByteChunk.cost(ofBytes: chunk.count)
            }
            if holding { connection.heldReplyBytes += cost }
            metrics?.queued(shared)
            markDirty(connection)
            return cost
        case .broadcast(let frame, let recipients):
            let (chunk, range) = encodeEvent(frame)
            fanOut(chunk, range, to: recipients, holding: holding)
            return ByteChunk.cost(ofBytes: range.count) + 8 * recipients.count
        case .disconnect(let id, let disconnection, let nick):
            guard let connection = connections[id.slot], connection.isActive else { return 0 }
            connection.departure = nil
            let now = Self.now()
            metrics?.disconnected(disconnection, tlsHandshaking: connection.channel.isHandshaking, welcomed: connection.welcomed)
            if connection.channel.isHandshaking {
                // Nothing can be said to a client without TLS keys: close at once, and say
                // which handshake it did not finish (a TLS slowloris reads like this).
                let reason = disconnection.code == .handshakeTimeout
                    ? "TLS handshake not finished within \(configuration.handshakeTimeout)" : disconnection.reason
                logDisconnect(connection, reason: reason, nick: nick, now: now)
                connection.phase = .closing(deadline: now.uptimeMillis)
                connection.channel.close()
                return 0
            }
            logDisconnect(connection, reason: disconnection.reason, nick: nick, now: now)
            if disconnection.code == .slowConsumer {
                // It is not reading: what is queued would only hold memory until the close.
                // Its rooms see it quit, and it can catch up from history when it returns.
                connection.channel.discardUnsent()
                if connection.channel.outboundCost > budget.replyLowWater {
                    // A large frame it has read part of stays queued (its farewell would have
                    // to follow it): a megabyte history page held for the linger time by
                    // each of a dozen hoarders is what pushed the output budget over and had
                    // readers cut off. It gets no farewell: it would not have read it.
                    connection.phase = .closing(deadline: now.uptimeMillis)
                    connection.channel.close()
                    return 0
                }
            }
            let deadline = now.uptimeMillis + configuration.lingerTimeout.milliseconds
            connection.beginClosing(farewell: disconnection.errorFrame.map(encode), deadline: deadline)
            markDirty(connection)
            return 0
        }
    }

    /// The nick a `welcome` frame welcomes, for the log line that says who connected.
    private static func welcomedNick(_ frame: Frame) -> String? {
        if case .welcome(_, let nick, _, _) = frame { return nick }
        return nil
    }

    /// Encodes a history replay once, for every joiner that shares it. It belongs to the
    /// history's share of the budget, so no meter counts it.
    private func encodeIfNeeded(_ shared: SharedFrames) {
        if shared.encoding == nil { shared.encoding = shared.frames.map { encode($0, meter: nil) } }
    }

    /// Encodes `frame` once into a chunk that any number of queues can share, counted against
    /// `meter` (by default the output queues') while it lives.
    private func encode(_ frame: Frame) -> ByteChunk {
        if let metrics, case .error(let code, _, _, _) = frame { metrics.errorSent(code) }
        return encode(frame, meter: chunkMeter)
    }

    /// Encodes `frame`, which goes to several clients: a room event into its room's segment
    /// (`RoomSegments`), anything else (a direct message) into a chunk of its own.
    private func encodeEvent(_ frame: Frame) -> (ByteChunk, Range<Int>) {
        guard let room = ChatCore.room(of: frame) else {
            let chunk = encode(frame)
            return (chunk, 0..<chunk.count)
        }
        return withEncoded(frame) { roomSegments.append($0, room: room, meter: chunkMeter) }
    }

    private func encode(_ frame: Frame, meter: MemoryMeter?) -> ByteChunk {
        withEncoded(frame) { ByteChunk(copying: $0, meter: meter) }
    }

    /// Encodes `frame` into the buffer every encoding reuses and hands `body` its bytes, valid
    /// during the call.
    private func withEncoded<Result>(_ frame: Frame, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        encodeBuffer.removeAll(keepingCapacity: encodeBuffer.capacity <= 64 << 10)
        FrameEncoder.encode(frame, into: &encodeBuffer)
        return encodeBuffer.withUnsafeBytes(body)
    }

    /// Queues `chunk` for each active connection of `recipients`: what a room event costs per
    /// member. The slot table is read through unretained references, so the loop takes no
    /// reference of its own to each connection: a retain and a release per member and event were
    /// most of the quarter of the server's CPU that reference counting took at 500 members
    /// (docs/BENCHMARKS.md). The table holds every connection until it is removed, which never
    /// happens inside this loop.
    @inline(__always)
    private func fanOut(_ chunk: ByteChunk, _ range: Range<Int>, to recipients: [ClientID], holding: Bool) {
        metrics?.delivered(bytes: range.count, to: recipients.count)
        connections.withUnsafeBufferPointer { table in
            // `Optional<ClientConnection>` and `Optional<Unmanaged<ClientConnection>>` are both one
            // nullable pointer.
            table.withMemoryRebound(to: Unmanaged<ClientConnection>?.self) { slots in
                for id in recipients {
                    guard let slot = slots[id.slot] else { continue }
                    slot._withUnsafeGuaranteedRef { connection in
                        guard connection.isActive else { return }
                        queue(chunk, range, for: connection, holding: holding)
                        markDirty(connection)
                    }
                }
            }
        }
    }

    private func markDirty(_ connection: ClientConnection) {
        guard !connection.isDirty else { return }
        connection.isDirty = true
        dirty.append(connection)
        scheduleFlush()
        if metrics != nil, connection.queuedSince == 0 { connection.queuedSince = flushArmedAt }
    }

    /// Records how long `connection`'s oldest frame waited for its socket, once it has all gone
    /// (`chat_delivery_latency_seconds`): a sample per client and flush, not per frame. A client
    /// whose frames were queued in the turn being flushed (`queuedSince == flushArmedAt`, the
    /// common case) is only counted in `sameTurn`: its sample is the flush's, added once for all
    /// of them after the pass, so the fan-out's flush pays a compare and an add per member.
    @inline(__always)
    private func recordDeliveryLatency(_ connection: ClientConnection, now: UInt64, sameTurn: inout Int) {
        guard let metrics, connection.queuedSince != 0, connection.channel.outboundBytes == 0 else { return }
        if connection.queuedSince == flushArmedAt {
            sameTurn += 1
        } else {
            metrics.deliveryLatency.record(nanoseconds: now &- min(now, connection.queuedSince))
        }
        connection.queuedSince = 0
    }

    /// Runs `flushDirty` at the end of this turn: after the blocks already queued (the reads
    /// that are ready), so that one pass sends what all of them produced.
    private func scheduleFlush() {
        guard !flushScheduled else { return }
        flushScheduled = true
        if metrics != nil { flushArmedAt = DispatchTime.now().uptimeNanoseconds }
        queue.async { [weak self] in self?.flushDirty() }
    }

    /// The end of a turn: commits what the turn staged and held, if the store commits on this
    /// queue, then writes out every dirty channel, one gather write each; then disconnects the
    /// clients whose queue is past the per-client bound, and, while all queues together are past
    /// the output budget, the client furthest behind. Repeats while that commits or dirties more.
    private func flushDirty() {
        flushScheduled = true
        defer {
            flushScheduled = false
            // Held inside this turn's last commit (requests it let through): the next turn's end
            // commits them, rather than the timer's next tick.
            if let store, store.commitsOnCallersQueue, !commitInFlight, performed > 0 { scheduleFlush() }
        }
        commitAtEndOfTurn()
        while !dirty.isEmpty {
            swap(&dirty, &flushing)
            let now = Self.now()
            let flushedAt = metrics == nil ? 0 : DispatchTime.now().uptimeNanoseconds
            var flushedSameTurn = 0
            var overLimit: [ClientConnection] = []
            for connection in flushing {
                connection.isDirty = false
                connection.channel.flush()
                recordDeliveryLatency(connection, now: flushedAt, sameTurn: &flushedSameTurn)
                guard connection.isActive else { continue }
                let cost = connection.channel.sendableCost
                if cost > budget.outputPerClient {
                    overLimit.append(connection)
                } else if cost > budget.lagThreshold {
                    if connection.lagSince == nil { connection.lagSince = now.uptimeMillis }
                } else {
                    connection.lagSince = nil
                    if connection.requestsPaused { resumeRequestsIfDrained(connection) }
                }
            }
            flushing.removeAll(keepingCapacity: true)
            metrics?.deliveryLatency.record(nanoseconds: flushedAt &- min(flushedAt, flushArmedAt), samples: flushedSameTurn)
            // A long flush (thousands of clients) must not hold back a finished commit: its
            // deliveries join the next pass of this loop.
            store?.runFinishedCommits()
            for connection in overLimit {
                evictSlowConsumer(
                    connection,
                    reason: "slow consumer: \(connection.channel.sendableCost) bytes queued, more than the "
                        + "\(budget.outputPerClient) one client may hold", now: now)
            }
            relieveOutputPressure(now: now)
            // What the passes held (the quits of evicted clients) is committed before the loop
            // ends, so nothing held waits for another turn.
            commitAtEndOfTurn()
        }
    }

    /// With a store that commits on this queue: commits what is staged and held, which releases
    /// the held frames (`committed`) — unless a commit is still in flight (one the store handed
    /// to its writer thread, whose completion schedules the next turn's end). A commit is tried
    /// at most twice per call: the second carries the replies that a failed first one produced
    /// (its senders' `storageFailed`), so they are not left for the next turn, and a failing
    /// store cannot spin the loop.
    private func commitAtEndOfTurn() {
        guard let store, store.commitsOnCallersQueue else { return }
        for _ in 0..<2 {
            guard !commitInFlight, performed > 0 || (hasChangesToCommit(in: store) && core.storageFailure == nil) else { return }
            submitCommit()
        }
    }

    /// While all queues together pin more than the output budget, disconnects the client with
    /// the most queued: it is the furthest behind, and a client that reads never stays there.
    /// Frames held for a commit are left out, in the total and in each queue: they have their own
    /// share (`budget.held`, which the writer gate keeps), and no eviction frees them before
    /// their commit lands — counting them once cut off every reader, down to queues of 340 bytes.
    private func relieveOutputPressure(now: ServerTime) {
        while outputInUse - heldCost - uncommittedCost > budget.output {
            // A client with less than the reply low-water mark queued is not behind: cutting it
            // off would free next to nothing, whatever else holds the memory.
            var furthest: ClientConnection?
            var furthestCost = budget.replyLowWater
            for case let connection? in connections where connection.isActive {
                let cost = connection.channel.sendableCost
                if cost > furthestCost {
                    furthest = connection
                    furthestCost = cost
                }
            }
            guard let furthest else { return }
            evictSlowConsumer(
                furthest,
                reason: "slow consumer: \(furthest.channel.sendableCost) bytes queued, the most of any client while "
                    + "the server's output queues are full (\(budget.output) bytes)", now: now)
        }
    }

    private func evictSlowConsumer(_ connection: ClientConnection, reason: String, now: ServerTime) {
        guard connection.isActive else { return }
        core.disconnect(connection.id, Disconnection(code: .slowConsumer, reason: reason), at: now, into: &actions)
        perform()
    }

    // MARK: Cluster

    /// An answer from the cluster: runs `body` on the core, carries out what it did, and serves
    /// the clients whose requests waited for it.
    private func answerFromCluster(_ body: (inout ChatCore, inout [ChatAction]) -> Void) {
        body(&core, &actions)
        perform()
        guard let clusterNode else { return }
        for connection in clusterNode.releaseAnswered({ core.isAwaitingCluster($0) }) where connection.isActive {
            serveRequests(of: connection)
            connection.updateReading()
        }
    }

    /// This node's id in its cluster, or nil for a server on its own.
    public var clusterNodeID: String? { clusterNode?.configuration.nodeID }

    /// After `shutdown`: announces the quits of the clients it said goodbye to, lets what was
    /// sent to the cluster's Redis be carried out, for at most `timeout`, then closes the link
    /// and calls `completion` once its sockets are closed. Without a cluster it calls
    /// `completion` at once.
    public func leaveCluster(timeout: Duration = .seconds(2), completion: @escaping @Sendable () -> Void) {
        guard clusterNode != nil else { return completion() }
        queue.async { [self] in
            // Clients that were told goodbye closed without the chat logic hearing of it: their
            // rooms hear them quit now, rather than when another node reaps this one.
            core.clusterDepartAll(reason: "their server shut down", at: Self.now())
            perform()
            clusterNode!.stop(timeout: timeout, completion: completion)
        }
    }

    // MARK: Time

    private func startTimer() {
        let shortest = [
            configuration.handshakeTimeout, configuration.idlePingInterval, configuration.lingerTimeout,
            configuration.drainTimeout, configuration.slowConsumerTimeout,
        ].min()!
        let interval = min(max(shortest.milliseconds / 4, 10), 500)
        timer = queue.startRepeatingTimer(every: .milliseconds(Int(interval))) { [weak self] in self?.tick() }
        let throttleTimer = DispatchSource.makeTimerSource(queue: queue)
        throttleTimer.setEventHandler { [weak self] in self?.serveThrottled() }
        self.throttleTimer = throttleTimer
        throttleTimer.activate()
    }

    /// Runs the core's timeouts, disconnects clients that lagged too long, serves paused clients
    /// whose queue drained, closes connections whose closing deadline passed, gives back the
    /// decoder buffers of idle connections, and writes the summaries of suppressed log lines.
    private func tick() {
        let now = Self.now()
        roomSegments.prune()
        if state == .running {
            core.tick(at: now, into: &actions)
            perform()
            // After a failed commit its rooms' records are staged again: retry them even when no
            // one speaks, so room events are accepted again once there is room.
            if let store, hasChangesToCommit(in: store), !commitInFlight { submitCommit() }
        }
        if let (_, reason, deadline) = goodbyeAfterCommit, now.uptimeMillis >= deadline {
            goodbyeAfterCommit = nil
            logger.warning(
                "the storage writer did not finish within the drain timeout: shutting down without waiting for it",
                metadata: ["storage.held": "\(heldCost + uncommittedCost)"])
            sayGoodbye(reason)
        }
        let slowAfter = configuration.slowConsumerTimeout.milliseconds
        for case let connection? in connections {
            switch connection.phase {
            case .active:
                if let departure = connection.departure {
                    // Its farewell waits for a commit that has not landed: it leaves without
                    // what is held for it.
                    if now.uptimeMillis >= departure.deadline {
                        execute([.disconnect(connection.id, departure.disconnection, nick: departure.nick)])
                    }
                    continue
                }
                connection.releaseIdleBuffers()
                if connection.channel.sendableCost <= budget.lagThreshold { connection.lagSince = nil }
                if let since = connection.lagSince, now.uptimeMillis &- since >= slowAfter {
                    let reason =
                        "slow consumer: more than \(budget.lagThreshold) bytes queued for longer than "
                        + "\(configuration.slowConsumerTimeout)"
                    evictSlowConsumer(connection, reason: reason, now: now)
                } else if connection.requestsPaused {
                    resumeRequestsIfDrained(connection)
                }
            case .closing(let deadline):
                if now.uptimeMillis >= deadline { connection.channel.close() }
            case .closed:
                break
            }
        }
        refused.sweep(now: now.uptimeMillis, scratch: refusalScratch.memory)
        for (key, count) in refusalLog.summaries(now: now.uptimeMillis) {
            logger.info("refusals summarised", metadata: ["refusal": "\(key)", "refusal.suppressed": "\(count)"])
        }
    }

    private func finishStoppingIfIdle() {
        guard state == .stopping, openConnections == 0, moderationWritesInFlight == 0 else { return }
        state = .stopped
        refused.closeAll()
        timer?.cancel()
        timer = nil
        throttleTimer?.cancel()
        throttleTimer = nil
        throttled.removeAll()
        logger.info("server stopped")
        let waiters = stopWaiters
        stopWaiters = []
        for waiter in waiters { waiter() }
    }

    // MARK: Logging

    private func logWelcome(_ connection: ClientConnection, nick: String) {
        connection.welcomed = true
        logger.info(
            "client connected",
            metadata: [
                "connection.id": "\(connection.serial)", "connection.remote": "\(connection.channel.label)",
                "client.nick": "\(nick)",
            ])
    }

    /// Logs why a client left. Refusals of clients never welcomed (a full server, a wrong
    /// password, a reconnect loop over the per-address limit) are throttled per address and
    /// reason, with a summary of what was left out.
    private func logDisconnect(_ connection: ClientConnection, reason: String, nick: String?, now: ServerTime) {
        if !connection.welcomed {
            guard admitRefusalLine(address: connection.address, reason: reason, now: now) else { return }
        }
        var metadata: Logger.Metadata = [
            "connection.id": "\(connection.serial)", "connection.remote": "\(connection.channel.label)",
            "disconnect.reason": "\(reason)",
        ]
        if let nick { metadata["client.nick"] = "\(nick)" }
        logger.info("client disconnected", metadata: metadata)
    }

    /// Logs a connection turned away at the door (a full server, an address over its limits),
    /// throttled like other refusals.
    private func logRefusal(address: String, label: String, reason: String, now: ServerTime) {
        guard admitRefusalLine(address: address, reason: reason, now: now) else { return }
        logger.info("client refused", metadata: ["connection.remote": "\(label)", "disconnect.reason": "\(reason)"])
    }

    /// Logs the logins the core refused for their password — a wrong one, a name without an
    /// account, or guess windows that are full — at info, so that the default level shows them to
    /// the operator and to tools such as fail2ban. Throttled per address like the refusals at the
    /// door: an address guessing thousands of times writes a few lines a window and a summary.
    private func logLoginFailures() {
        let failures = core.takeLoginFailures()
        guard !failures.isEmpty else { return }
        let now = Self.now()
        for failure in failures {
            guard let connection = connections[failure.client.slot] else { continue }
            var metadata: Logger.Metadata = [
                "connection.id": "\(connection.serial)", "connection.remote": "\(connection.channel.label)",
                "login.account": "\(failure.account)",
            ]
            let message: Logger.Message
            switch failure.cause {
            case .wrongPassword, .noAccount:
                message = "login failed"
                metadata["login.failure"] = failure.cause == .noAccount ? "no such account" : "wrong password"
            case .throttled(let account, let wait):
                message = "login throttled"
                metadata["login.window"] = account ? "account" : "address"
                metadata["login.retry.seconds"] = "\((wait + 999) / 1000)"
            }
            guard admitRefusalLine(address: connection.address, reason: message.description, now: now) else { continue }
            logger.info(message, metadata: metadata)
        }
    }

    /// Whether a refusal of `address` for `reason` gets a log line now: a few per address and
    /// reason (the reason's numbers left out), then a periodic summary of the rest.
    private func admitRefusalLine(address: String, reason: String, now: ServerTime) -> Bool {
        refusalLog.admit("\(address): \(reason.prefix { $0 != "(" && $0 != ";" })", now: now.uptimeMillis)
    }

    /// The wall clock for stamps and the monotonic clock for timeouts, read together.
    static func now() -> ServerTime {
        var wall = timespec()
        var uptime = timespec()
        clock_gettime(CLOCK_REALTIME, &wall)
        clock_gettime(CLOCK_MONOTONIC, &uptime)
        return ServerTime(
            wallMillis: UInt64(wall.tv_sec) * 1000 + UInt64(wall.tv_nsec) / 1_000_000,
            uptimeMillis: UInt64(uptime.tv_sec) * 1000 + UInt64(uptime.tv_nsec) / 1_000_000)
    }
}

/// Why a `ChatServer` could not be created.
public enum ChatServerError: Error, CustomStringConvertible {
    /// A setting cannot work; the text says which and why.
    case invalidConfiguration(String)

    /// The problem, for people.
    public var description: String {
        switch self {
        case .invalidConfiguration(let problem): "invalid configuration: \(problem)"
        }
    }
}

/// A commit submitted to the store, with what carrying out its actions left to do: the actions
/// the chat produced for it (to carry out again, without the failed events, if it fails), which
/// of them went out at once, which are departures that wait for it, and how many bytes each
/// queue holds for it.
///
/// `@unchecked Sendable`: it names connections, which live on the server's queue; it crosses to
/// the storage writer only inside the commit's completion, which runs back on that queue.
private struct PendingCommit: @unchecked Sendable {
    var actions: [ChatAction]
    var performedAtOnce: [Int]
    var departures: [Int]
    var held: [HeldBytes]
    /// What its held frames cost against `budget.held`.
    var cost: Int
    /// The number of the last change of a room it holds (`ChatCore.logCommitted(through:)`).
    var changesThrough: UInt64
}

/// What a connection's queue holds for a commit: its `bytes` (`SocketChannel.heldBytes`), and of
/// their cost, how much is `replies` to it (`ClientConnection.heldReplyBytes`).
private struct HeldBytes {
    var connection: ClientConnection
    var bytes: Int
    var replies: Int
}

/// A stored event by room and `seq`: what a failed commit names so that its deliveries are left out.
private struct StoredEventKey: Hashable {
    var room: String
    var seq: UInt64

    init(room: String, seq: UInt64) {
        self.room = room
        self.seq = seq
    }

    /// The stored event `action` delivers, if it delivers one (a message, an action, a topic).
    init?(_ action: ChatAction) {
        switch action {
        case .send(let frame, _), .broadcast(let frame, _):
            switch frame {
            case .message(let room, let seq, _, _, _), .action(let room, let seq, _, _, _), .topic(let room, let seq, _, _, _):
                self.init(room: room, seq: seq)
            default:
                return nil
            }
        case .sendShared, .disconnect:
            return nil
        }
    }
}

extension ChatAction {
    /// The one client a reply or a disconnection is for; nil for what goes to room members.
    fileprivate var soleRecipient: ClientID? {
        switch self {
        case .send(_, let id), .disconnect(let id, _, _): id
        case .broadcast, .sendShared: nil
        }
    }
}

// MARK: Metrics

extension ChatServer {
    /// Starts counting what `/metrics` reports (`ServerMetrics`): until this is called, the hot
    /// path's hooks find no counters and cost a nil check. Call before `start()`, from any thread
    /// but the server's queue; what it records goes to the bootstrapped `MetricsSystem`, or
    /// nowhere if none is.
    public func startRecordingMetrics() {
        queue.sync {
            guard metrics == nil else { return }
            metrics = ServerMetrics()
            clusterNode?.metrics = metrics
        }
    }

    /// The database file in durable mode, nil otherwise.
    public var databasePath: String? { (store as? SQLiteRoomStore)?.directory.databasePath }

    /// The durable store's health (the journal, the database, accounts, moderation); nil in
    /// memory and cluster mode, whose writes cannot fail on a disk.
    var storageHealth: StorageHealth? { (store as? SQLiteRoomStore)?.health }

    /// The part a commit's success speaks for: the journal when commits are journaled on the
    /// loop, the database when the writer thread commits them.
    private var commitPart: StorageHealth.Part { store?.commitsOnCallersQueue == true ? .journal : .database }

    /// The part a failed commit is counted against: the database when SQLite refused it, or
    /// when the journal could take it but the database stayed too far behind to let it (the
    /// store's back-pressure: `SQLiteRoomStore.failure(of:behindBy:)`); else the journal.
    private func part(of failure: CommitFailure) -> StorageHealth.Part {
        if failure.error.sqlite != nil || failure.error.message.contains("behind the journal") { return .database }
        return commitPart
    }

    /// Takes a `ServerSnapshot` on the server's queue, hands the counters' news to swift-metrics
    /// (with `startRecordingMetrics()`), and calls `completion` with it there. Costs a pass over
    /// the connections and the rooms: callers take one at most every second or so
    /// (`OperatorView` does).
    public func snapshot(completion: @escaping @Sendable (ServerSnapshot) -> Void) {
        queue.async { [self] in
            let snapshot = takeSnapshot()
            metrics?.publish(snapshot)
            completion(snapshot)
        }
    }

    private func takeSnapshot() -> ServerSnapshot {
        let now = DispatchTime.now().uptimeNanoseconds
        var states = ServerSnapshot.Connections()
        for case let connection? in connections {
            switch connection.phase {
            case .active:
                if connection.channel.isHandshaking {
                    states.tlsHandshake += 1
                } else if connection.welcomed {
                    states.chatting += 1
                } else {
                    states.hello += 1
                }
            case .closing: states.closing += 1
            case .closed: break
            }
        }
        // Refused TLS connections are channels (their refusal needs the handshake), counted above.
        states.refused = refused.count
        // Rooms as the core keeps them: its own in memory and durable mode, those its clients
        // are in on a cluster node (whose `seq`s arrive with their events). One pass keeps the
        // few largest of each list, so thousands of rooms cost no sort.
        var busiest = TopRooms(by: { Double($0.members) })
        var liveliest = TopRooms(by: { $0.eventsPerSecond })
        var roomCount = 0
        var memberships = 0
        let elapsed = Double(now &- (metrics?.lastSnapshotAt ?? now)) / 1e9
        func visit(_ name: String, members: Int, seq: UInt64) {
            roomCount += 1
            memberships += members
            let before = metrics?.lastSeqs.updateValue(seq, forKey: name) ?? seq
            let rate = elapsed > 0 && seq >= before ? Double(seq - before) / elapsed : 0
            let room = ServerSnapshot.Room(name: name, members: members, eventsPerSecond: rate, lastSeq: seq)
            busiest.offer(room)
            if rate > 0 { liveliest.offer(room) }
        }
        core.visitRooms(visit)
        if let metrics {
            metrics.lastSnapshotAt = now
            // Rooms that left memory leave the table now and then, not on every pass.
            if metrics.lastSeqs.count > 2 * roomCount + 64 {
                metrics.lastSeqs = metrics.lastSeqs.filter { core.knowsRoom($0.key) }
            }
        }
        var budgetUse = ServerSnapshot.Budget()
        budgetUse.total = budget.total
        budgetUse.outputQueued = outputInUse
        budgetUse.limits = [
            ("process", budget.baseline), ("connections", budget.perConnection * configuration.maxClients),
            ("history", budget.history), ("output", budget.output), ("held", budget.held), ("cluster_link", budget.clusterLink),
        ]
        budgetUse.used = [
            ("connections", budget.perConnection * openConnections), ("history", core.historyBytes),
            ("output", max(0, outputInUse - heldCost - uncommittedCost)), ("held", heldCost + uncommittedCost),
        ]
        let mode: ServerSnapshot.Mode = clusterNode != nil ? .cluster : store != nil ? .durable : .memory
        var snapshot = ServerSnapshot(
            uptimeSeconds: Double(now &- startedAt) / 1e9, mode: mode, connections: states,
            connectionsAccepted: Int(nextSerial - 1), rooms: roomCount, memberships: memberships,
            busiestRooms: busiest.rooms, liveliestRooms: liveliest.rooms,
            budget: budgetUse,
            storage: storageSnapshot(),
            cluster: clusterNode.map { .init(nodeID: $0.configuration.nodeID, linkUp: $0.linkIsUp, linkProblem: $0.linkProblem) })
        snapshot.histograms = metrics.map { [$0.deliveryLatency, $0.loopLag] } ?? []
        return snapshot
    }

    /// The durable store's state for a snapshot: its health, part by part, and the journal's backlog.
    private func storageSnapshot() -> ServerSnapshot.Storage? {
        guard let store = store as? SQLiteRoomStore else { return nil }
        let backlog = store.journalBacklog
        return ServerSnapshot.Storage(
            databasePath: store.directory.databasePath, failure: core.storageFailure, parts: store.health.reports,
            journalBacklogBytes: backlog.bytes, journalBacklogRecords: backlog.records,
            journalDirectory: store.placement == .eventLoop ? store.directory.anchoredPath : nil)
    }
}

// MARK: - Account work
//
// The core asks for password hashes and account writes (ChatCore+Accounts.swift); they run here,
// off the event loop — hashes on the bounded `hashingPool`, writes on the account store's own
// queue — and each answer comes back on the server's queue, where the client that waited for it
// is served again. A full pool answers `busy` at once, without queueing.

extension ChatServer {
    /// Carries out the account work the core asked for.
    private func carryOutAccountWork() {
        for work in core.takeAccountWork() {
            let ticket = work.ticket
            // A node's accounts are in Redis: all but the hashing is the cluster's.
            if let clusterNode, !work.job.isHashing {
                // The live limits: a reload changes the login and registration windows.
                clusterNode.carryOut(work, limits: liveSettings.accounts) { [weak self] answer in self?.accountAnswered(ticket, answer) }
                continue
            }
            switch work.job {
            case .guess, .giveBack, .create, .countRegistration, .giveBackRegistration:
                // Asked only in cluster mode.
                break
            case .hash(let password):
                submitHashing(.hash(password: password), share: work.share, ticket: ticket)
            case .verify(let password, let stored):
                submitHashing(.verify(password: password, stored: stored), share: work.share, ticket: ticket)
            case .save(let record):
                accountStore.save(record, replyOn: queue) { [weak self] result in
                    self?.storageHealth?.record(.accounts, result)
                    self?.accountAnswered(ticket, .stored(result))
                }
            case .delete(let key):
                accountStore.delete(key: key, replyOn: queue) { [weak self] result in
                    self?.storageHealth?.record(.accounts, result)
                    self?.accountAnswered(ticket, .stored(result))
                }
            }
        }
    }

    private func submitHashing(_ job: PasswordHashingPool.Job, share: String, ticket: UInt64) {
        let queued = hashingPool.submit(job, share: share, replyOn: queue) { [weak self] outcome in
            // A job that gave its place to a smaller share was not computed: as busy as one
            // refused at once.
            self?.accountAnswered(ticket, outcome == .refused ? .busy : .hashing(outcome))
        }
        metrics?.hashingJob(queued ? job.metricLabel : "refused")
        // Answered on a later turn, as a queued job would be: the core expects answers after it asked.
        if !queued { queue.async { [weak self] in self?.accountAnswered(ticket, .busy) } }
    }

    private func waitForAccount(_ connection: ClientConnection) {
        wait(connection, forAnswerIn: \.accountWaiters)
    }

    /// Account work was answered: the core takes the answer, what it did is carried out, and the
    /// clients whose requests waited for it are served again.
    private func accountAnswered(_ ticket: UInt64, _ answer: AccountAnswer) {
        core.accountAnswered(ticket, answer, at: Self.now(), into: &actions)
        perform()
        serveAnswered(\.accountWaiters) { core.isAwaitingAccount($0) }
    }
}

extension PasswordHashingPool.Job {
    /// How `/metrics` counts the job (`chat_password_hashing_jobs_total{job=…}`).
    var metricLabel: String {
        switch self {
        case .hash: "hash"
        case .verify: "verify"
        }
    }
}

// MARK: - Moderation writes
//
// Registered rooms and server bans change rarely (an op's command); the core hands each change
// over as it happens and it is written on the moderation store's own queue. Nothing waits for
// the write: the change holds in memory at once, and a failed write is logged.

extension ChatServer {
    /// Hands the moderation changes the core made to the store.
    private func writeModeration() {
        let writes = core.takeModerationWrites()
        guard !writes.isEmpty else { return }
        moderationWritesInFlight += 1
        let health = storageHealth
        moderationStore.apply(writes, replyOn: queue) { [self] failure in
            // A durable server's health counts and logs it; other stores have no disk to fail.
            if let health {
                if let failure { health.failed(.moderation, "moderation change not stored: \(failure)") } else { health.succeeded(.moderation) }
            } else if let failure {
                logger.error("moderation change not stored", metadata: ["error": "\(failure)"])
            }
            moderationWritesInFlight -= 1
            finishStoppingIfIdle()
        }
    }
}

extension SharedFrames {
    /// The frames' byte chunks, once `ChatServer.encodeIfNeeded` has encoded them; none before.
    var chunks: [ByteChunk] { encoding as? [ByteChunk] ?? [] }
}
