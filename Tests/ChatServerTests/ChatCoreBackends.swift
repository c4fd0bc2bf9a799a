import ChatAccounts
import ChatCluster
@testable import ChatCore
import ChatProtocol
import RedisClient
import ChatStorage
import Dispatch
import Foundation
import Glibc
import TestSupport
import Testing

@testable import ChatServer
@testable import RoomLog

// MARK: - The three places a room can live
//
// `ChatCore` serves three modes (docs/SERVER.md, docs/CLUSTER.md): rooms in memory only
// (`--no-persistence`), rooms in SQLite (the default), and rooms in a cluster's Redis
// (`--cluster`). The behaviour tests run against each through one `Harness`, which drives the
// core the way the server does in that mode: it feeds it an event and then does what the server
// does before the event's frames leave — nothing, a commit, or the cluster's answers — so a test
// reads what a client would be sent.

/// Where the chat's rooms are kept while a test runs.
enum CoreBackend: String, CaseIterable, Sendable, CustomStringConvertible {
    /// No store: an empty room is forgotten (`--no-persistence`).
    case memory
    /// A real `SQLiteRoomStore` in a temporary directory, committed after every event.
    case sqlite
    /// A clustered core, one node, answered by a real `redis-server` (`RedisBackend`).
    case cluster

    var description: String { rawValue }

    /// Whether a room that empties keeps its epoch, `seq`, topic and history for its next
    /// joiner: SQLite keeps it until retention removes it (docs/SERVER.md, "Durability"), Redis
    /// keeps its log and epoch (docs/CLUSTER.md, "Not done"); memory forgets it (docs/PROTOCOL.md,
    /// "Rooms").
    var keepsEmptyRooms: Bool { self != .memory }
}

/// The harness's hashing pool: password hashes computed at once, with cheap parameters (the
/// rules, not Argon2id's cost, are under test) — or refused, as a full pool refuses them, or held
/// back until the test releases them.
struct AccountDesk {
    /// Whether the pool refuses every job with `busy`, as a full one does.
    var poolFull = false
    /// Password checks computed so far: the guesses that got through.
    var verified = 0
    /// Whether work is held back (`held`) rather than answered, until `releaseAccountWork`.
    var holdWork = false
    var held: [AccountWork] = []
    /// The parameters hashes are made with.
    let hashing = PasswordHashing(passes: 1, memoryBytes: 8 << 10)

    /// The pool's answer to `work`, or nil when it is not the pool's (a record's save or read).
    mutating func hashed(_ work: AccountWork) -> AccountAnswer? {
        switch work.job {
        case .hash(let password):
            return poolFull ? .busy : .hashing(.hashed(hashing.hash(password)))
        case .verify(let password, let stored):
            if poolFull { return .busy }
            verified += 1
            // No stored hash: the pool's dummy, which never matches.
            return .hashing(.verified(stored.map { PasswordHashing.verify(password, against: $0) } ?? false, rehashed: nil))
        default:
            return nil
        }
    }
}

/// Drives a `ChatCore` with a hand-held clock on one of the `CoreBackend`s: no client sockets; a
/// turn waits only for a SQLite commit, or for Redis (on a thread of its own).
///
/// Every event (`send`, `tick`, `disconnect`) returns what the core produced for it and, with a
/// store, after the reads it asked for were answered and the commit of what it staged (as the
/// server holds a turn's frames until their commit, docs/SERVER.md), or, in a cluster, after
/// the cluster answered everything the core asked (as a node's clients get their answers once
/// Redis has replied).
struct Harness {
    /// The chat under test.
    var core: ChatCore
    /// The time of the next event; tests move it by hand or with `tick`.
    var now = ServerTime(wallMillis: 1_767_225_600_000, uptimeMillis: 1_000)
    private var nextSlot = 0
    /// The SQLite store and its directory, for `.sqlite`; closed and removed when the harness goes.
    private let sqlite: SQLiteBackend?
    /// The store the core reads rooms and pages from, with or without `sqlite`.
    private let store: (any RoomStore)?
    /// The cluster's Redis and this chat's node of it, for `.cluster`.
    private let redis: RedisBackend?
    /// The number of the last change of a room staged in `store` (`LogBatch.through`).
    private var lastStagedChange: UInt64 = 0
    /// How the account work the core asks for is answered: hashes here, records in the mode's
    /// account store (memory, SQLite) or in Redis (a cluster).
    var accounts = AccountDesk()
    /// The account records of a server on its own: a `MemoryAccountStore`, or SQLite's beside
    /// the room store, as the server keeps them.
    private let accountStore: (any AccountStore)?

    /// A chat on `backend` with `adjust`ed limits (no rate limits unless `adjust` sets them)
    /// whose rooms take the epochs 1, 2, 3 … in order of creation.
    init(_ backend: CoreBackend, _ adjust: (inout ChatServerConfiguration) -> Void = { _ in }) async throws {
        let configuration = Self.configuration(adjust)
        switch backend {
        case .memory:
            sqlite = nil
            store = nil
            redis = nil
            accountStore = MemoryAccountStore()
            core = ChatCore(configuration: configuration, epochs: .sequential())
        case .sqlite:
            let sqlite = try SQLiteBackend()
            self.sqlite = sqlite
            store = sqlite.store
            redis = nil
            accountStore = sqlite.accounts
            core = ChatCore(configuration: configuration, log: .durable, epochs: .sequential())
        case .cluster:
            sqlite = nil
            store = nil
            accountStore = nil
            // Redis gives a room its epoch when the first joiner's snapshot is read: 1, 2, 3 …
            // as the other modes' cores do.
            core = ChatCore(configuration: configuration, log: .cluster)
            redis = try await RedisBackend.start(now: now, configuration: configuration, core: &core)
        }
    }

    /// A chat whose rooms are kept in `store`, one the test holds and inspects: a
    /// `MemoryRoomStore`, which has nothing to commit (the harness commits only its own SQLite
    /// store). Limits and epochs as above.
    init(store: any RoomStore, _ adjust: (inout ChatServerConfiguration) -> Void = { _ in }) {
        sqlite = nil
        self.store = store
        redis = nil
        accountStore = MemoryAccountStore()
        core = ChatCore(configuration: Self.configuration(adjust), log: .durable, epochs: .sequential())
    }

    /// A chat whose rooms are kept in `sqlite`, committed after every event as on `.sqlite`:
    /// for a test that starts a second chat on the same store, as a server restarted on its
    /// data directory. Limits and epochs as above (a restarted chat counts epochs from 1 again).
    init(sqlite: SQLiteBackend, _ adjust: (inout ChatServerConfiguration) -> Void = { _ in }) {
        self.sqlite = sqlite
        store = sqlite.store
        redis = nil
        accountStore = sqlite.accounts
        core = ChatCore(configuration: Self.configuration(adjust), log: .durable, epochs: .sequential())
    }

    /// The default limits without rate limits, then `adjust`ed.
    private static func configuration(_ adjust: (inout ChatServerConfiguration) -> Void) -> ChatServerConfiguration {
        var configuration = ChatServerConfiguration()
        configuration.turnOffRateLimits()
        adjust(&configuration)
        return configuration
    }

    /// Opens a connection from `address`; returns its id and what the core did.
    mutating func open(from address: String = "127.0.0.1", encrypted: Bool = false) -> (ClientID, [ChatAction]) {
        let id = ClientID(nextSlot)
        nextSlot += 1
        // A refusal is shown as the disconnect the server carries out, so tests read it like any other.
        let refusal = core.clientConnected(id, address: address, encrypted: encrypted, at: now)
        return (id, refusal.map { [.disconnect(id, $0, nick: nil)] } ?? [])
    }

    /// Opens a connection from `address` and completes the handshake as `nick`, speaking `version`.
    mutating func connect(_ nick: String, version: UInt16 = 1, from address: String = "127.0.0.1") async -> ClientID {
        let (id, _) = open(from: address)
        let actions = await send(.hello(version: version, nick: nick, password: nil), from: id)
        precondition(actions.first.map { if case .send(.welcome, _) = $0 { true } else { false } } == true, "expected a welcome for \(nick)")
        return id
    }

    /// `frame` arrives from `id`; returns what its sender and others are sent for it.
    @discardableResult
    mutating func send(_ frame: Frame, from id: ClientID) async -> [ChatAction] {
        var actions: [ChatAction] = []
        core.received(frame, size: FrameEncoder.encode(frame).count, from: id, at: now, into: &actions)
        await finishTurn(&actions)
        return actions
    }

    /// The server lets `id` go for `reason` (its connection was lost); returns what that did.
    @discardableResult
    mutating func disconnect(_ id: ClientID, reason: String) async -> [ChatAction] {
        var actions: [ChatAction] = []
        core.disconnect(id, Disconnection(code: nil, reason: reason), at: now, into: &actions)
        await finishTurn(&actions)
        return actions
    }

    /// `milliseconds` pass and the server's timer ticks; returns what the tick did.
    mutating func tick(advancingBy milliseconds: UInt64) async -> [ChatAction] {
        now.uptimeMillis += milliseconds
        now.wallMillis += milliseconds
        var actions: [ChatAction] = []
        core.tick(at: now, into: &actions)
        await finishTurn(&actions)
        return actions
    }

    /// The SQLite store the chat commits to, for `.sqlite`.
    var sqliteStore: SQLiteRoomStore? { sqlite?.store }

    /// The rooms with members, sorted, as the mode knows them: the core's own in memory and with
    /// a store, Redis's in a cluster (a node knows only the rooms of its own clients).
    var roomNames: [String] { redis?.roomNames ?? core.roomNames }

    /// The nicks in `room`, in joining order, as the mode knows them (see `roomNames`).
    func memberNicks(of room: String) -> [String] { redis?.memberNicks(of: room) ?? core.memberNicks(of: room) }

    /// `room`'s settings and roles, as the mode knows them (see `roomNames`).
    func roomModes(of room: String) -> RoomModes? { redis.map { $0.roomModes(of: room) } ?? core.roomModes(of: room) }

    /// How many bans `room` holds, as the mode knows them.
    func banCount(of room: String) -> Int? { redis.map { $0.banCount(of: room) } ?? core.rooms[room]?.moderation.settings.bans.count }

    /// How many invitations to `room` are kept, as the mode knows them.
    func invitationCount(of room: String) -> Int? {
        redis.map { $0.invitationCount(of: room) } ?? core.rooms[room]?.moderation.invitations.count
    }

    /// How many rooms are registered, as the mode knows them.
    var registeredRoomCount: Int { redis?.registeredRoomCount ?? core.moderation.registered.count }

    /// What the server does at the end of a turn before `actions` leave: stages the rooms'
    /// changes in its store, answers the reads the core asked of it and commits what the turn
    /// staged (a `MemoryRoomStore` has nothing to commit), or carries out what the core asked of
    /// the cluster until it asks no more.
    private mutating func finishTurn(_ actions: inout [ChatAction]) async {
        if let store {
            commitChanges(&actions, in: store)
            var reads = core.takeLogReads()
            while !reads.isEmpty {
                for read in reads {
                    core.logReadAnswered(read.ticket, Self.readNow(read.request, from: store).mapError(\.logError), at: now, into: &actions)
                }
                commitChanges(&actions, in: store)
                reads = core.takeLogReads()
            }
        }
        if let redis {
            await redis.answer(&core, at: now, into: &actions, accounts: &accounts)
        } else if let accountStore {
            var work = core.takeAccountWork()
            while !work.isEmpty {
                for item in work { answer(item, from: accountStore, into: &actions) }
                work = core.takeAccountWork()
            }
        }
    }

    /// Answers `work` as a server on its own does: a hash here (`accounts`), a record in its
    /// store, waited for.
    private mutating func answer(_ work: AccountWork, from store: any AccountStore, into actions: inout [ChatAction]) {
        if accounts.holdWork { return accounts.held.append(work) }
        let answer: AccountAnswer
        if let hashed = accounts.hashed(work) {
            answer = hashed
        } else {
            switch work.job {
            case .save(let record): answer = .stored(waitForAnswer("an account save") { store.save(record, replyOn: .global(), $0) })
            case .delete(let key): answer = .stored(waitForAnswer("an account delete") { store.delete(key: key, replyOn: .global(), $0) })
            default:
                Issue.record("a server on its own asked for \(work.job), which only a cluster node asks")
                return
            }
        }
        core.accountAnswered(work.ticket, answer, at: now, into: &actions)
    }

    /// `id`, a member of rooms, has just logged in: each of its rooms judges it again, as the mode
    /// does after a login (a ban that names it now, a role its account has); what that did.
    mutating func memberLoggedIn(_ id: ClientID) async -> [ChatAction] {
        var actions: [ChatAction] = []
        if core.isClustered { core.clusterLoggedInAsMember(id) } else { core.loggedInAsMember(id, at: now, into: &actions) }
        await finishTurn(&actions)
        return actions
    }

    /// Carries out the account work held back by `accounts.holdWork`, and what it leads to.
    mutating func releaseAccountWork() async -> [ChatAction] {
        accounts.holdWork = false
        var actions: [ChatAction] = []
        let held = accounts.held
        accounts.held = []
        if let redis {
            await redis.carryOut(held, for: &core, at: now, into: &actions, accounts: &accounts)
        } else if let accountStore {
            for work in held { answer(work, from: accountStore, into: &actions) }
        }
        await finishTurn(&actions)
        return actions
    }

    /// The process ID of the cluster's `redis-server`, for `.cluster`.
    var redisPID: pid_t? { redis?.redisPID }

    /// How many accounts the mode holds: the server's records, or Redis's (a node keeps none).
    var accountCount: Int { redis?.accountCount ?? core.accountCount }

    /// Stages the rooms' changes the core made in `store`, commits them and reports the commit
    /// to the core, as the server does at the end of a turn.
    private mutating func commitChanges(_ actions: inout [ChatAction], in store: any RoomStore) {
        let batch = core.takeLogBatch()
        store.stage(batch)
        if batch.through != 0 { lastStagedChange = batch.through }
        // A failed commit's rooms are staged again: the next commit that succeeds holds them.
        if sqlite?.commit(&core, actions: &actions) ?? true { core.logCommitted(through: lastStagedChange) }
    }

    /// What `store` answers to `request`, waited for as the server's queue would not.
    private static func readNow(_ request: RoomRead, from store: any RoomStore) -> Result<RoomReadAnswer, StorageError> {
        waitForAnswer("a store read") { store.read(request, on: DispatchQueue.global(), completion: $0) }
    }
}

// MARK: - SQLite

/// A real `SQLiteRoomStore` in a directory of its own, committed the way the server commits it.
///
/// Owns the store and the directory: `deinit` closes the store (waiting for nothing: every commit
/// was waited for) and removes the directory, once, when the last harness that holds it goes.
///
/// The store is used on the test's thread, and on `queue` only while that thread waits for a
/// commit's completion (`commit`), never both at once.
final class SQLiteBackend {
    /// The store the core stages in.
    let store: SQLiteRoomStore
    /// The account records, in the same directory, as a server keeps them.
    let accounts: SQLiteAccountStore
    private let directory: TemporaryDirectory
    /// The queue the store hands a finished commit to, as it does the server's queue.
    private let queue = DispatchQueue(label: "ChatCoreBackends.sqlite")

    /// A new, empty store in a new directory under /tmp.
    init() throws {
        directory = try TemporaryDirectory(prefix: "chatcore-backend")
        do {
            // No fsync: these tests are about what the chat does, not what a power loss keeps.
            store = try SQLiteRoomStore(directory: directory.path, durability: .off, retention: .keepAll)
            accounts = try SQLiteAccountStore(directory: directory.path)
        } catch {
            directory.remove()
            throw error
        }
    }

    deinit {
        store.close()
        directory.remove()
    }

    /// Commits what the turn staged, if anything, and waits for the completion, wherever the
    /// store runs it (inside the call, or on `queue`); then does what the server does with the
    /// outcome: a success lets room events in again, a failure takes the failed events'
    /// deliveries out of `actions` and tells the core (`storageFailed`). Returns whether it
    /// committed (true with nothing to commit).
    @discardableResult
    func commit(_ core: inout ChatCore, actions: inout [ChatAction]) -> Bool {
        guard store.hasStagedChanges else { return true }
        switch waitForAnswer("a SQLite commit", { store.commitStaged(on: queue, completion: $0) }) {
        case .success:
            if core.storageFailure != nil { core.storageRecovered() }
            return true
        case .failure(let failure):
            let failed = Set(failure.events.map { "\($0.room) \($0.entry.seq)" })
            actions.removeAll { action in
                switch action {
                case .broadcast(let frame, _), .send(let frame, _): Self.storedEventKey(frame).map(failed.contains) ?? false
                case .sendShared, .disconnect: false
                }
            }
            core.storageFailed(failure, into: &actions)
            return false
        }
    }

    /// "room seq" for a stored event (a message, an action, a topic), as the server tells a
    /// failed commit's deliveries apart; nil for other frames.
    private static func storedEventKey(_ frame: Frame) -> String? {
        switch frame {
        case .message(let room, let seq, _, _, _), .action(let room, let seq, _, _, _), .topic(let room, let seq, _, _, _):
            "\(room) \(seq)"
        default:
            nil
        }
    }
}

/// What `body` hands the completion it is given, waited for on the test's thread: a store's read,
/// commit or record. After 30 s an issue says `what` went unanswered, and the wait goes on: the
/// store is the test's again only once its completion has run.
private func waitForAnswer<Value>(_ what: String, _ body: (@escaping @Sendable (Value) -> Void) -> Void) -> Value {
    let done = DispatchSemaphore(value: 0)
    let outcome = ReadValue<Value>()
    body { value in
        outcome.value = value
        done.signal()
    }
    if done.wait(timeout: .now() + .seconds(30)) == .timedOut {
        Issue.record("\(what) was not answered within 30 s")
        done.wait()
    }
    return outcome.value!
}

// MARK: - The cluster

/// The cluster's Redis for one node: a real `redis-server`, whose clock is the harness's
/// (`HandHeldWallClock`), and the server's own `ClusterNode`, which carries out a clustered
/// core's `ClusterRequest`s against it as a node does: the append script with its moderation,
/// the nick registry, snapshots and history reads. What the node's clients are sent is what
/// they would be sent.
///
/// The node runs on a queue of its own. For a turn's end the harness lends it the core
/// (`answer`): the node's answers reach the core on that queue, as they reach a server's, while
/// the test's thread waits until Redis has nothing left to answer (`settle`).
final class RedisBackend: @unchecked Sendable {
    /// Redis's clock.
    private let wallClock: HandHeldWallClock
    private let redis: RedisServerProcess
    private let queue = DispatchQueue(label: "ChatCoreBackends.cluster")
    private let node: ClusterNode
    // On `queue`, or on the test's thread while the queue is idle.
    /// The harness's time, which the node's answers are given at.
    private var now: ServerTime
    /// The harness's core and what the node's answers did, while a turn's end lends them.
    private var lent: ChatCore?
    private var lentActions: [ChatAction] = []
    private var lentAccounts: AccountDesk?
    /// The channel `settle` publishes on, and the last of its messages heard.
    private let barrierChannel = Array("harness:barrier".utf8)
    private var barriersHeard = 0
    private var barriersSent = 0
    private var barrierReplied = 0
    /// Signalled whenever a barrier's reply or message comes in, for the thread waiting on it.
    private let barrierProgress = DispatchSemaphore(value: 0)
    /// Set when the node is stopped because its link never came up.
    private var stopping = false

    /// A Redis whose clock reads `now`, and a node of it whose new rooms take the epochs 1, 2, 3 …,
    /// started off the test's thread (see `awayFromTheTestsThread`); once the node's link is up,
    /// `core` is told, as the server tells it.
    static func start(now: ServerTime, configuration: ChatServerConfiguration, core: inout ChatCore) async throws -> RedisBackend {
        let wallClock = try HandHeldWallClock(millis: now.wallMillis)
        let redis: RedisServerProcess
        do {
            redis = try await RedisServerProcess(wallClock: wallClock)
        } catch {
            wallClock.remove()
            throw error
        }
        let turn = Turn(core: core, accounts: AccountDesk())
        await busy.enter()
        let started = await awayFromTheTestsThread {
            Result { try RedisBackend(redis, wallClock: wallClock, now: now, configuration: configuration, core: &turn.core) }
        }
        await busy.leave()
        core = turn.core
        return try started.get()
    }

    /// A node of `redis`, waited for until its link is up.
    private init(
        _ redis: RedisServerProcess, wallClock: HandHeldWallClock, now: ServerTime, configuration: ChatServerConfiguration,
        core: inout ChatCore
    ) throws {
        self.wallClock = wallClock
        self.redis = redis
        self.now = now
        var cluster = ClusterConfiguration(host: "127.0.0.1", port: redis.port, nodeID: "harness-node")
        // No heartbeat lapses, and no reaping, while a test waits at a breakpoint.
        cluster.nodeTimeout = .seconds(3_600)
        let clock = Clock()
        node = ClusterNode(
            configuration: cluster, chat: configuration, queue: queue, logger: quietLogger,
            clock: { clock.backend?.now ?? now }, epochs: .sequential())
        clock.backend = self
        queue.sync {
            lent = core
            // Weakly: the node is the backend's, and a backend that its node held would never
            // stop its Redis (a full run once left 900 of them behind).
            node.start { [weak self] body in
                guard let self else { return }
                guard lent != nil else {
                    // A node that never came up is stopped: no core hears of it now.
                    if !stopping { problem("the cluster node answered outside a turn") }
                    return
                }
                body(&lent!, &lentActions)
            }
        }
        guard Self.waitUntil({ self.queue.sync { self.node.linkIsUp } }) else {
            queue.sync {
                lent = nil
                stopping = true
            }
            Self.stop(node, on: queue, redis: redis, wallClock: wallClock)
            throw ClusterDidNotStart(output: redis.child.output)
        }
        queue.sync {
            node.link.roomLog?.listen(to: barrierChannel) { [weak self] message in
                guard let self else { return }
                barriersHeard = max(barriersHeard, Int(String(decoding: message, as: UTF8.self)) ?? 0)
                barrierProgress.signal()
            }
        }
        settle()
        queue.sync {
            core = lent!
            lent = nil
            lentActions = []
        }
    }

    /// Lets the node's clock reach the backend once it exists.
    private final class Clock: @unchecked Sendable {
        weak var backend: RedisBackend?
    }

    deinit { Self.stop(node, on: queue, redis: redis, wallClock: wallClock) }

    /// Stops `node`, then `redis`, on a queue of their own: the harness's end does not wait.
    private static func stop(_ node: ClusterNode, on queue: DispatchQueue, redis: RedisServerProcess, wallClock: HandHeldWallClock) {
        DispatchQueue(label: "ChatCoreBackends.stop").async {
            let stopped = DispatchSemaphore(value: 0)
            queue.async { node.stop(timeout: .seconds(1)) { stopped.signal() } }
            _ = stopped.wait(timeout: .now() + .seconds(5))
            redis.stop()
            wallClock.remove()
        }
    }

    /// Carries out what `core` asks of the cluster, and the account work it asks for (hashes
    /// through `accounts`, records and login windows through Redis, as a node does), and feeds it
    /// the answers at `now` (Redis's clock is moved there first), until it asks nothing more: an
    /// answer can ask again (a `joined` delivered asks for a snapshot, an account read a hash).
    func answer(_ core: inout ChatCore, at now: ServerTime, into actions: inout [ChatAction], accounts: inout AccountDesk) async {
        await carryOut([], for: &core, at: now, into: &actions, accounts: &accounts)
    }

    /// Carries out `work` first, then as `answer` does.
    func carryOut(
        _ work: [AccountWork], for core: inout ChatCore, at now: ServerTime, into actions: inout [ChatAction],
        accounts: inout AccountDesk
    ) async {
        let turn = Turn(core: core, accounts: accounts)
        await Self.busy.enter()
        await Self.awayFromTheTestsThread { [self] in
            carryOutWaiting(work, for: &turn.core, at: now, into: &turn.actions, accounts: &turn.accounts)
        }
        await Self.busy.leave()
        core = turn.core
        accounts = turn.accounts
        actions += turn.actions
        recordProblems()
    }

    /// How many backends start or end a turn at once, in the whole test process: the Redis work
    /// in flight stays as bounded as the two cooperative threads kept it while these tests were
    /// synchronous, whatever the run's width (a run that started every test at once had a
    /// hundred cluster cases going, and CPU-bound suites beside them timed out).
    private static let busy = Gate(width: 2)

    /// What the test's thread hands a turn's end run elsewhere, and takes back.
    private final class Turn: @unchecked Sendable {
        // Used by one thread at a time: the one the turn runs on, then the test's.
        var core: ChatCore
        var accounts: AccountDesk
        var actions: [ChatAction] = []

        init(core: ChatCore, accounts: AccountDesk) {
            self.core = core
            self.accounts = accounts
        }
    }

    /// Runs `body` on a thread of its own and waits for it without holding the test's: the
    /// harness waits for Redis there, and the test process has two cooperative threads, which
    /// the async suites of real servers and clients need. (Waiting on them, these suites held
    /// one for three minutes of a full run, and a slow-consumer test beside them ran past its
    /// server's idle timeout.) Not a global queue: those are as wide as the cores too. A queue
    /// of its own runs on a thread Dispatch adds when the others are busy.
    private static func awayFromTheTestsThread<Value: Sendable>(_ body: @escaping @Sendable () -> Value) async -> Value {
        await withCheckedContinuation { continuation in
            DispatchQueue(label: "ChatCoreBackends.turn").async { continuation.resume(returning: body()) }
        }
    }

    /// Problems met off the test's task, recorded as issues of the test once back on it.
    private let problems = Problems()

    private func problem(_ text: String) { problems.add(text) }

    /// Records the problems met since the last call as the running test's issues.
    func recordProblems() {
        for text in problems.take() { Issue.record(Comment(rawValue: text)) }
    }

    private func carryOutWaiting(
        _ work: [AccountWork], for core: inout ChatCore, at now: ServerTime, into actions: inout [ChatAction],
        accounts: inout AccountDesk
    ) {
        wallClock.set(now.wallMillis)
        queue.sync {
            self.now = now
            lent = core
            lentAccounts = accounts
        }
        var first = work
        while queue.sync(execute: {
            let requests = lent!.takeClusterRequests()
            let work = first + lent!.takeAccountWork()
            first = []
            for item in work { carryOut(item) }
            node.carryOut(requests)
            return !requests.isEmpty || !work.isEmpty
        }) {
            settle()
        }
        queue.sync {
            core = lent!
            accounts = lentAccounts!
            actions += lentActions
            lent = nil
            lentAccounts = nil
            lentActions = []
        }
    }

    /// Answers `work` as a node does, on `queue`: a hash at once (`AccountDesk`), the rest
    /// through Redis, answered when Redis replies.
    private func carryOut(_ work: AccountWork) {
        if lentAccounts!.holdWork { return lentAccounts!.held.append(work) }
        if let hashed = lentAccounts!.hashed(work) { return lent!.accountAnswered(work.ticket, hashed, at: now, into: &lentActions) }
        node.carryOut(work, limits: lent!.limits.accounts) { [self] answer in
            guard lent != nil else {
                problem("Redis answered account work outside a turn")
                return
            }
            lent!.accountAnswered(work.ticket, answer, at: now, into: &lentActions)
        }
    }

    /// The process ID of the backend's `redis-server`.
    var redisPID: pid_t { redis.pid }

    /// How many accounts Redis holds (`chat:accounts`).
    var accountCount: Int { count([Array("SCARD".utf8), Array("chat:accounts".utf8)]) }

    /// Waits until Redis has answered everything the node sent and the node has heard every
    /// event published before, and nothing it did with them sent more.
    ///
    /// A `PUBLISH` on the barrier channel is answered after every command sent before it, and
    /// its message arrives after every publication before it; once both are in, the callbacks
    /// they ran have run (the queue runs them in order). If those sent nothing new (the count of
    /// commands grew by the barrier's alone), nothing is left in flight.
    private func settle() {
        while true {
            let before = queue.sync { node.link.commandsWritten }
            guard let number = queue.sync(execute: { publishBarrier() }) else { return }
            // Woken by each reply and message (not polled: these tests hold one of the test
            // process's two cooperative threads while they wait, and async suites need it back).
            let deadline = DispatchTime.now() + .seconds(30)
            while !queue.sync(execute: { barrierReplied >= number && barriersHeard >= number }) {
                guard barrierProgress.wait(timeout: deadline) == .success else {
                    problem("the cluster's Redis did not answer a barrier within 30 s")
                    return
                }
            }
            if queue.sync(execute: { node.link.commandsWritten }) == before + 1 { return }
        }
    }

    /// Publishes the next barrier, on `queue`; its number, or nil without a link.
    private func publishBarrier() -> Int? {
        guard node.link.commands != nil else {
            problem("the cluster node has no link to Redis")
            return nil
        }
        barriersSent += 1
        publish(barriersSent)
        return barriersSent
    }

    private func publish(_ number: Int) {
        node.link.commands?.send([Array("PUBLISH".utf8), barrierChannel, Array(String(number).utf8)]) { [self] reply in
            // No subscriber: the barrier channel's subscription is not confirmed yet; try again.
            guard case .success(.integer(let heard)) = reply, heard > 0 else {
                return queue.asyncAfter(deadline: .now() + .milliseconds(5)) { [self] in publish(number) }
            }
            barrierReplied = max(barrierReplied, number)
            barrierProgress.signal()
        }
    }

    /// Polls `condition` every millisecond for up to 30 s; whether it came to hold.
    private static func waitUntil(_ condition: () -> Bool) -> Bool {
        let deadline = ContinuousClock.now + .seconds(30)
        while !condition() {
            if ContinuousClock.now >= deadline { return false }
            usleep(1_000)
        }
        return true
    }

    /// The rooms with members, sorted, as Redis lists them.
    var roomNames: [String] {
        read { commands, done in ClusterDirectory(commands: commands).rooms { done($0.map { $0.filter { $0.memberCount > 0 }.map(\.name).sorted() }) } } ?? []
    }

    /// The members of `room`, in joining order, as Redis keeps them.
    func memberNicks(of room: String) -> [String] {
        read { commands, done in ClusterDirectory(commands: commands).members(of: room, completion: done) } ?? []
    }

    /// `room`'s settings and roles as Redis holds them, shown as a joiner sees them.
    func roomModes(of room: String) -> RoomModes? {
        let members = memberNicks(of: room)
        return read { commands, done in ClusterDirectory(commands: commands).moderation(of: room, completion: done) }
            .map { ClusterNode.modes($0, members: members) }
    }

    /// How many bans `room` holds in Redis.
    func banCount(of room: String) -> Int {
        read { commands, done in ClusterDirectory(commands: commands).bans(of: room, completion: done) }?.count ?? 0
    }

    /// How many invitations to `room` Redis holds (expired ones until a join finds them).
    func invitationCount(of room: String) -> Int {
        count([Array("HLEN".utf8), RoomKeys(room).invitations])
    }

    /// How many rooms are registered in the cluster.
    var registeredRoomCount: Int { count([Array("SCARD".utf8), Array("chat:registered".utf8)]) }

    /// The integer Redis answers `command` with; 0 on failure.
    private func count(_ command: [[UInt8]]) -> Int {
        let value: Int64? = read { commands, done in
            commands.send(command) { reply in
                guard case .success(.integer(let count)) = reply else { return done(.failure(.malformedReply("\(reply)"))) }
                done(.success(count))
            }
        }
        return Int(value ?? 0)
    }

    /// What `body` reads through the node's commands connection, waited for; nil on failure.
    private func read<Value>(
        _ body: (RedisConnection, @escaping (Result<Value, ClusterError>) -> Void) -> Void
    ) -> Value? {
        let done = DispatchSemaphore(value: 0)
        let outcome = ReadValue<Value>()
        queue.sync {
            guard let commands = node.link.commands else {
                done.signal()
                return
            }
            body(commands) { result in
                outcome.value = try? result.get()
                done.signal()
            }
        }
        guard done.wait(timeout: .now() + .seconds(30)) == .success else {
            Issue.record("the cluster's Redis did not answer a read within 30 s")
            return nil
        }
        return outcome.value
    }
}

/// At most `width` callers between `enter` and `leave` at once; the others wait, in order,
/// without holding a thread.
private actor Gate {
    private var free: Int
    private var waiting: [CheckedContinuation<Void, Never>] = []

    init(width: Int) { free = width }

    func enter() async {
        if free > 0 {
            free -= 1
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    func leave() {
        if waiting.isEmpty { free += 1 } else { waiting.removeFirst().resume() }
    }
}

/// Texts collected from any thread.
private final class Problems: @unchecked Sendable {
    private let lock = NSLock()
    // Guarded by `lock`.
    private var texts: [String] = []

    func add(_ text: String) { lock.withLock { texts.append(text) } }

    func take() -> [String] {
        lock.withLock {
            defer { texts = [] }
            return texts
        }
    }
}

/// A value a completion hands the test's thread that waits for it.
private final class ReadValue<Value>: @unchecked Sendable {
    // Written before the semaphore the reader waits on is signalled.
    var value: Value?
}

/// The harness's cluster node did not get its link to Redis up.
struct ClusterDidNotStart: Error, CustomStringConvertible {
    var output: String
    var description: String { "the harness's cluster node did not connect to its redis-server: \(output)" }
}

// MARK: - The backends themselves

/// The harness drives each mode the way the server does: these tests hold it to that, so the
/// behaviour tests above run on what they claim to.
@Suite("The chat logic's test backends")
struct CoreBackendTests {
    @Test func theSQLiteBackendCommitsEveryTurnAndReadsAnEmptiedRoomBack() async throws {
        var chat = try await Harness(.sqlite)
        let store = try #require(chat.sqliteStore)
        let alice = await chat.connect("alice", version: 2)
        await chat.send(.join(room: "r"), from: alice)  // seq 1
        await chat.send(.say(room: "r", text: "kept"), from: alice)  // seq 2
        #expect(!store.hasStagedChanges, "committed at the end of the turn")
        let stored = try #require(try store.loadRoom(named: "r", recent: 10))
        #expect(stored.record.lastSeq == 2 && stored.recent.map(\.text) == ["kept"], "in SQLite: \(stored)")
        await chat.send(.part(room: "r"), from: alice)  // seq 3
        _ = await chat.tick(advancingBy: 1_000)
        #expect(chat.core.historyBytes == 0, "the emptied room left memory once committed")
        let again = frames(to: alice, in: await chat.send(.join(room: "r"), from: alice))
        #expect(again.contains(.roomState(room: "r", epoch: 1, firstSeq: 2, lastSeq: 4)), "read back from SQLite: \(again)")
    }

    @Test func aFailedSQLiteCommitIsNotDeliveredAndItsSenderIsTold() async throws {
        var chat = try await Harness(.sqlite)
        let store = try #require(chat.sqliteStore)
        let alice = await chat.connect("alice", version: 2)
        let bob = await chat.connect("bob", version: 2)
        await chat.send(.join(room: "r"), from: alice)
        await chat.send(.join(room: "r"), from: bob)
        try store.capFileSize(bytes: 0)
        // Every commit needs a new page now.
        let lost = await chat.send(.say(room: "r", text: String(repeating: "z", count: 8_000)), from: alice)
        #expect(!frames(to: bob, in: lost).contains { $0.type == .message }, "bob never sees what was not stored: \(lost)")
        #expect(frames(to: alice, in: lost).contains { if case .error(.storageFailed, false, .say, _) = $0 { true } else { false } }, "\(lost)")
        #expect(chat.core.storageFailure != nil)
        try store.capFileSize(bytes: 1 << 30)
        // A join is a commit too (the room's seq): once it succeeds, room events are accepted again.
        await chat.send(.join(room: "other"), from: bob)
        #expect(chat.core.storageFailure == nil)
        let said = await chat.send(.say(room: "r", text: "after"), from: alice)
        #expect(frames(to: bob, in: said).contains { if case .message(_, _, _, "alice", "after") = $0 { true } else { false } })
    }

    @Test func theClusterBackendFollowsOnlyRoomsWithMembersHereAndKeepsTheRoomInRedis() async throws {
        var chat = try await Harness(.cluster)
        let alice = await chat.connect("alice", version: 2)
        await chat.send(.join(room: "r"), from: alice)
        #expect(chat.core.clusterRooms == ["r"], "followed while it has a member here")
        #expect(chat.roomNames == ["r"] && chat.memberNicks(of: "r") == ["alice"])
        await chat.send(.part(room: "r"), from: alice)
        #expect(chat.core.clusterRooms.isEmpty, "unfollowed once empty")
        #expect(chat.roomNames.isEmpty)
        let again = frames(to: alice, in: await chat.send(.join(room: "r"), from: alice))
        #expect(again.first == .joined(room: "r", seq: 3, time: chat.now.wallMillis, nick: "alice"), "Redis kept its seq: \(again)")
    }

    @Test func aClusterHarnessStopsItsRedisWhenItGoes() async throws {
        var pid: pid_t?
        do {
            var chat = try await Harness(.cluster)
            let alice = await chat.connect("alice", version: 2)
            await chat.send(.join(room: "r"), from: alice)
            pid = chat.redisPID
        }
        let redis = try #require(pid)
        // Once a backend its node held never went, and a full run left 900 redis-servers behind.
        #expect(await eventually { kill(redis, 0) != 0 }, "redis-server \(redis) stopped with its harness")
    }
}
