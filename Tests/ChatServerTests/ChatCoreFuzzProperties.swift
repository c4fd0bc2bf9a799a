// Compiled twice: into this test target, and by Scripts/fuzz.sh into the `chatcore` libFuzzer
// target (Fuzz/ChatCoreTarget.swift), against a build of RoomLog made with -enable-testing.
// So the fuzzer and the regression tests check exactly the same invariants.
import ChatProtocol
import ChatStorage
import Dispatch
import Glibc

@testable import ChatCore
@testable import RoomLog

/// Drives a `ChatCore` through a sequence of events read from fuzzer bytes — connections from
/// several addresses, valid frames of every type, raw and broken bytes through a
/// `FrameDecoder`, time steps, disconnects, commits of its store that succeed or fail, restarts
/// — as `ChatServer` would, and checks the core's invariants after every event.
///
/// The input's first byte sets the scene: bit 0 the store (`MemoryRoomStore` or a
/// `SQLiteRoomStore` in a new temporary directory), bits 1–2 one of four limit profiles
/// (`FuzzSetup(profile:)`), bits 3–4 where the clocks start, and bit 5, set, makes the core a
/// cluster node instead, whose requests a model of Redis answers in the order the input picks
/// (`FuzzRedis`, ChatCoreFuzzCluster.swift). Every following byte
/// pair or run is one event (`Scenario.step`); input past its end reads as zeros. The
/// environment variable `CHATCORE_FUZZ_STORE` (`memory`, `sqlite` or `cluster`) overrides bits
/// 0 and 5, to measure or fuzz one backend alone; `CHATCORE_FUZZ_TRACE` (set to anything) prints
/// every event and every frame sent, to read what a crash input does.
///
/// Checked after every event (`Scenario.problems`) and for every action:
/// - `accountingProblems()` is empty: history bytes and entries as counted equal what rooms
///   hold and stay within the budget, connection, nick and membership bookkeeping agree, and a
///   node's held frames are counted right and within the budget;
/// - no room keeps more entries than the history size;
/// - the core's connections and nicks are the ones the actions told the server about;
/// - every frame sent goes to a connected client and fits the protocol's frame limit;
/// - a version 1 client is sent no version 2 frame;
/// - a room event is broadcast only to members of its room, and the `seq`s a member is sent
///   for one room only grow while the room keeps its epoch;
/// - on a cluster node, once every request is answered and every event delivered, no client
///   waits for the cluster and nothing stays held (`Scenario.settleCluster`).
enum ChatCoreFuzzProperties {
    /// Runs the scenario `input` describes; returns the first broken invariant, or nil.
    static func check(_ input: [UInt8]) -> String? {
        // Commits complete on the store's writer thread and hand their completion to `queue`:
        // running the whole scenario on it keeps those hand-offs out of the way until it ends
        // (the scenario runs the completions itself, in its own order, by `runFinishedCommits`).
        let violation: String? = queue.sync {
            var bytes = FuzzBytes(input)
            let setup = bytes.byte()
            var backend = setup & 0x20 != 0 ? "cluster" : setup & 1 == 1 ? "sqlite" : "memory"
            if let forced = getenv("CHATCORE_FUZZ_STORE").map({ String(cString: $0) }) { backend = forced }
            let store: FuzzStore
            do {
                switch backend {
                case "sqlite": store = try .sqlite(FuzzStore.temporarySQLite())
                case "cluster": store = .cluster
                default: store = .memory(MemoryRoomStore())
                }
            } catch {
                return "cannot open the SQLite store: \(error)"
            }
            let violation = run(&bytes, setup: FuzzSetup(profile: Int(setup >> 1) & 3), store: store, clock: Int(setup >> 3) & 3)
            store.close()
            return violation
        }
        // The commits' hand-offs, queued meanwhile, hold the store: once they have run, the store
        // and its descriptors are freed before the next run begins.
        queue.sync {}
        return violation
    }

    /// Runs the events of `bytes` on a new core; returns the first broken invariant, or nil.
    private static func run(_ bytes: inout FuzzBytes, setup: FuzzSetup, store: FuzzStore, clock: Int) -> String? {
        var scenario = Scenario(setup: setup, store: store, clock: clock)
        if let problem = scenario.problems() { return "at the start: \(problem)" }
        let trace = tracing
        var steps = 0
        while !bytes.isAtEnd, steps < maxSteps {
            steps += 1
            let event = scenario.step(&bytes)
            if trace { _ = "step \(steps): \(event())\n".withCString { write(STDERR_FILENO, $0, strlen($0)) } }
            if let problem = scenario.violation ?? scenario.problems() { return "step \(steps) (\(event())): \(problem)" }
        }
        scenario.finishCommits()
        if let problem = scenario.violation ?? scenario.problems() { return "after the last commit: \(problem)" }
        scenario.settleCluster()
        return scenario.violation ?? scenario.problems().map { "once the cluster has answered everything: \($0)" }
    }

    /// Whether `CHATCORE_FUZZ_TRACE` asks for every event, and every frame sent, on stderr.
    static let tracing = getenv("CHATCORE_FUZZ_TRACE") != nil

    /// Events in one input, at most: keeps every input's run short.
    static let maxSteps = 400

    /// Where scenarios run, one at a time, and where commits hand their completions to.
    static let queue = DispatchQueue(label: "ChatCoreFuzzProperties")
}

/// A scenario's limits and memory budget, small enough that every bound is reached within a few
/// events. The budget's total is far below what `ChatServerConfiguration.problem()` accepts, on
/// purpose: the history budget (an eighth of what is left after the connections) is then
/// kilobytes, not megabytes.
struct FuzzSetup {
    var limits = ChatLimits()
    let budget: MemoryBudget

    /// - 0: no rate limits, 4 history entries per room, 12 KiB of history in all;
    /// - 1: the default rate limits and history size, 12 KiB of history in all;
    /// - 2: a password (2 wrong ones lock an address out), no history;
    /// - 3: tight rates per connection and per address, short timeouts, 1 MiB of history in
    ///   all but 64 KiB per room.
    init(profile: Int) {
        limits.maxClients = 4
        limits.maxClientsPerAddress = 3
        limits.maxRoomsPerClient = 3
        limits.maxFrameSize = 4096
        var historyRemainder = 96 << 10
        switch profile {
        case 0:
            limits.turnOffRateLimits()
            limits.historySize = 4
        case 1:
            limits.maxFrameSize = WireProtocol.defaultServerMaxFrameSize
        case 2:
            limits.turnOffRateLimits()
            limits.password = "secret"
            limits.passwordAttempts = 2
            limits.historySize = 0
            limits.maxFrameSize = 1024
        default:
            limits.messageRate = 2
            limits.messageBurst = 4
            limits.byteRate = 4096
            limits.byteBurst = 4096
            limits.addressMessageRate = 4
            limits.addressMessageBurst = 8
            limits.addressByteRate = 8192
            limits.addressByteBurst = 8192
            limits.addressFanoutRate = 8192
            limits.addressFanoutBurst = 8192
            limits.addressConnectionRate = 1
            limits.addressConnectionBurst = 2
            limits.rateAbuseLimit = 3
            limits.historySize = 16
            limits.handshakeTimeout = .seconds(1)
            limits.idlePingInterval = .seconds(2)
            limits.idleTimeout = .seconds(5)
            historyRemainder = 8 << 20
        }
        let perConnection = MemoryBudget.connectionStateBytes + limits.maxFrameSize
        budget = MemoryBudget(
            total: MemoryBudget.baselineBytes + perConnection * limits.maxClients + historyRemainder, maxClients: limits.maxClients,
            maxFrameSize: limits.maxFrameSize, accounts: limits.accounts.memoryReserve)
    }
}

/// The fuzzer's bytes, read front to back; zeros past the end.
struct FuzzBytes {
    private let bytes: [UInt8]
    private var index = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var isAtEnd: Bool { index >= bytes.count }

    mutating func byte() -> UInt8 {
        guard index < bytes.count else { return 0 }
        defer { index += 1 }
        return bytes[index]
    }

    /// Up to `count` of the next bytes.
    mutating func take(_ count: Int) -> [UInt8] {
        let end = min(bytes.count, index + count)
        defer { index = max(index, end) }
        return index < end ? Array(bytes[index..<end]) : []
    }

    /// An integer of `Value`'s width, mostly at the edges: 0, 1, 2, 2^(n−1), 2^n − 1, 2^n − 2,
    /// or one or two bytes of the input.
    mutating func integer<Value: FixedWidthInteger & UnsignedInteger>(_: Value.Type = Value.self) -> Value {
        switch byte() % 8 {
        case 0: 0
        case 1: 1
        case 2: 2
        case 3: Value(1) << (Value.bitWidth - 1)
        case 4: Value.max
        case 5: Value.max - 1
        case 6: Value(truncatingIfNeeded: byte())
        default: Value(truncatingIfNeeded: UInt16(byte()) << 8 | UInt16(byte()))
        }
    }
}

/// The store a scenario runs on, as the server would hold it: a cluster node has none, its
/// room log is Redis (`FuzzRedis`).
enum FuzzStore {
    case memory(MemoryRoomStore)
    case sqlite(SQLiteRoomStore)
    case cluster

    var roomStore: (any RoomStore)? {
        switch self {
        case .memory(let store): store
        case .sqlite(let store): store
        case .cluster: nil
        }
    }

    /// A SQLite store without fsync or retention (whose timer would run at times the input does
    /// not choose), in a new directory in memory (/dev/shm) where there is one, else under /tmp:
    /// creating a database on disk costs more than the rest of a run.
    static func temporarySQLite() throws(StorageError) -> SQLiteRoomStore {
        let parent = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp"
        var template = Array("\(parent)/chatcore-fuzz-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { buffer in mkdtemp(buffer.baseAddress!).map { String(cString: $0) } }
        guard let path = made else {
            throw StorageError("cannot make a temporary directory: \(String(cString: strerror(errno)))")
        }
        return try SQLiteRoomStore(directory: path, durability: .off, retention: .keepAll)
    }

    /// Waits for the commits in flight, closes the store and, for SQLite, deletes its directory.
    func close() {
        roomStore?.close()
        guard case .sqlite(let store) = self else { return }
        let path = store.directory.path
        for name in DirectoryEntries.names(in: path) ?? [] { unlink(path + "/" + name) }
        rmdir(path)
    }
}

/// Completions of commits, in the order they ran. Used on `ChatCoreFuzzProperties.queue` only
/// (completions run inside `runFinishedCommits`, which the scenario calls there).
private final class CommitResults: @unchecked Sendable {
    var results: [Result<Void, CommitFailure>] = []
}

/// A chat core, its store and what the server around it knows of each connection.
struct Scenario {
    /// What the server knows of one open connection.
    struct Connection {
        var decoder: FrameDecoder
        /// From `welcome` and `nickAccepted`.
        var nick: String?
        var version: UInt16 = 1
        /// Per room: the epoch the room had when this client last joined it, the highest `seq`
        /// broadcast to it there, whether it is a member now, and the nick the room knows it by
        /// (a rename reaches the room after the client heard of it).
        var rooms: [String: (epoch: UInt64, seq: UInt64, member: Bool, name: String)] = [:]
    }

    let limits: ChatLimits
    let budget: MemoryBudget
    let store: FuzzStore
    var core: ChatCore
    var now: ServerTime
    /// Open connections by slot.
    var connections: [Int: Connection] = [:]
    private let results = CommitResults()
    /// Commits submitted and not yet completed: at most one, as in the server.
    private var commitInFlight = false
    /// The number of the last change of a room staged, and of the last one the commit in flight
    /// holds (`LogBatch.through`).
    private var lastStagedChange: UInt64 = 0
    private var commitThrough: UInt64 = 0
    /// The first broken invariant seen while carrying out actions.
    private(set) var violation: String?
    /// On a cluster node: Redis, and the requests it has not answered yet.
    var redis: FuzzRedis?

    static let addresses = ["192.0.2.1", "192.0.2.2", "2001:db8::1"]
    static let rooms = ["r", "a", "b", String(repeating: "z", count: ChatName.maxRoomLength)]
    static let nicks = ["alice", "bob", "ALICE", "carol", String(repeating: "n", count: ChatName.maxNickLength)]
    /// Slots a connection may take: more than `maxClients`, so that one over the limit still
    /// reaches the core and is refused there.
    static let slots = 6

    init(setup: FuzzSetup, store: FuzzStore, clock: Int) {
        limits = setup.limits
        budget = setup.budget
        self.store = store
        let start: [UInt64] = [1_000, 0, 1, 1 << 63]
        now = ServerTime(wallMillis: clock == 0 ? 1_767_225_600_000 : start[clock], uptimeMillis: start[clock])
        if case .cluster = store {
            core = ChatCore(limits: limits, budget: budget, log: .cluster)
            core.clusterAvailability(true)
            redis = FuzzRedis()
        } else {
            core = ChatCore(limits: limits, budget: budget, log: .durable, epochs: .sequential())
        }
    }

    // MARK: Events

    /// Reads one event from `bytes`, carries it out and returns what it was, for the report
    /// (formatted only if it is needed: a frame may hold a frame-sized text).
    mutating func step(_ bytes: inout FuzzBytes) -> () -> String {
        switch bytes.byte() % 32 {
        case 0...2:
            let address = Self.addresses[Int(bytes.byte()) % Self.addresses.count]
            let outcome = connect(from: address)
            return { outcome }
        case 3...17, 30, 31:
            let slot = client(bytes.byte())
            let frame = makeFrame(&bytes)
            guard connections[slot] != nil else { return { "no client \(slot) to send \(frame.type)" } }
            feed(FrameEncoder.encode(frame), to: slot)
            return { "client \(slot) sends \(Self.describe(frame))" }
        case 18, 19:
            // Pipelined copies of one frame: a history fills, and a rate runs out, in one event.
            let slot = client(bytes.byte())
            let count = 2 + Int(bytes.byte() % 16)
            let frame = makeFrame(&bytes)
            guard connections[slot] != nil else { return { "no client \(slot) to send \(frame.type)" } }
            feed(Array([[UInt8]](repeating: FrameEncoder.encode(frame), count: count).joined()), to: slot)
            return { "client \(slot) sends \(count) × \(Self.describe(frame))" }
        case 20, 21:
            let slot = client(bytes.byte())
            let raw = makeRawBytes(&bytes)
            guard connections[slot] != nil else { return { "no client \(slot) to send raw bytes" } }
            feed(raw, to: slot)
            return { "client \(slot) sends bytes \(raw.prefix(48).map { String($0, radix: 16) }.joined(separator: " "))" }
        case 22, 23:
            let steps: [UInt64] = [0, 1, 999, 1_000, 2_000, 5_000, 30_000, 60_001, 90_000, 1 << 32, 1 << 40]
            let step = steps[Int(bytes.byte()) % steps.count]
            tick(advancingBy: step)
            return { "tick after \(step) ms" }
        case 24:
            let slot = client(bytes.byte())
            guard connections[slot] != nil else { return { "no client \(slot) to close" } }
            var actions: [ChatAction] = []
            core.disconnect(ClientID(slot), Disconnection(code: nil, reason: "connection closed by the client"), at: now, into: &actions)
            carryOut(actions)
            return { "client \(slot) closes its connection" }
        case 25...28 where redis != nil:
            let outcome = clusterStep(bytes.byte() % 4, &bytes)
            return { outcome }
        case 25, 26:
            let outcome = startCommit(failing: false)
            return { outcome }
        case 27:
            let outcome = finishCommit()
            return { outcome }
        case 28:
            let outcome = startCommit(failing: true)
            return { outcome }
        default:
            restart()
            return { "restart" }
        }
    }

    /// The slot of one of the open connections, picked by `byte`; -1 when there is none. Events
    /// name open connections only, so that none is wasted on a slot nobody holds.
    func client(_ byte: UInt8) -> Int {
        let open = connections.keys.sorted()
        return open.isEmpty ? -1 : open[Int(byte) % open.count]
    }

    /// Opens a connection in the lowest free slot, as the server does (a refused one is closed
    /// without a slot being taken).
    private mutating func connect(from address: String) -> String {
        guard let slot = (0..<Self.slots).first(where: { connections[$0] == nil }) else { return "no free slot" }
        if let refusal = core.clientConnected(ClientID(slot), address: address, at: now) {
            return "connection from \(address) refused: \(refusal.reason)"
        }
        connections[slot] = Connection(decoder: FrameDecoder(maxFrameSize: limits.maxFrameSize))
        return "client \(slot) connects from \(address)"
    }

    /// Feeds `bytes` to the decoder of `slot` and serves what it decodes.
    private mutating func feed(_ bytes: [UInt8], to slot: Int) {
        connections[slot]?.decoder.append(contentsOf: bytes)
        serve(slot)
    }

    /// Hands the frames waiting in `slot`'s decoder to the core, as `ChatServer.serveRequests`
    /// does: one at a time, none while its address must wait or (on a cluster node) while it
    /// waits for the cluster, and a decoding error ends the connection.
    mutating func serve(_ slot: Int) {
        let id = ClientID(slot)
        while let connection = connections[slot], connection.decoder.bufferedByteCount > 0 {
            if core.addressWait(for: id, at: now) > 0 { return }
            if redis != nil, core.isAwaitingCluster(id) { return }
            var decoder = connection.decoder
            var actions: [ChatAction] = []
            do {
                let before = decoder.bufferedByteCount
                guard let frame = try decoder.next() else { return }
                connections[slot]!.decoder = decoder
                core.received(frame, size: before - decoder.bufferedByteCount, from: id, at: now, into: &actions)
            } catch {
                let violation = Disconnection(code: error.errorCode, frameType: decoder.failedFrameType, reason: error.description)
                core.disconnect(id, violation, at: now, into: &actions)
            }
            carryOut(actions)
        }
    }

    mutating func tick(advancingBy milliseconds: UInt64) {
        now.uptimeMillis += milliseconds
        now.wallMillis += milliseconds
        var actions: [ChatAction] = []
        core.tick(at: now, into: &actions)
        carryOut(actions)
        // Clients whose address had to wait are served again once time has passed.
        for slot in connections.keys.sorted() { serve(slot) }
    }

    /// Submits what is staged, as `ChatServer.submitCommit` does; `failing` makes the database
    /// refuse to grow meanwhile, so the commit fails if it needs a new page. The memory store
    /// commits as it stages and never fails: there, commits are nothing to drive.
    private mutating func startCommit(failing: Bool) -> String {
        guard case .sqlite(let store) = store else { return "no commit: the memory store commits as it stages" }
        guard !commitInFlight else { return "a commit is already in flight" }
        commitInFlight = true
        commitThrough = lastStagedChange
        let results = results
        if failing { try? store.capFileSize(bytes: 0) }
        store.commitStaged(on: ChatCoreFuzzProperties.queue) { result in results.results.append(result) }
        // Queued behind the commit on the writer, so only that commit runs with the cap.
        if failing { try? store.capFileSize(bytes: 1 << 30) }
        return failing ? "commit with the disk full" : "commit"
    }

    /// Waits for the commit in flight and carries out its completion, as `ChatServer.committed`
    /// does.
    private mutating func finishCommit() -> String {
        guard commitInFlight, case .sqlite(let store) = store else { return "no commit in flight" }
        let deadline = DispatchTime.now() + .seconds(30)
        while results.results.isEmpty {
            store.runFinishedCommits()
            if results.results.isEmpty {
                guard DispatchTime.now() < deadline else {
                    violation = "a commit did not complete in 30 s"
                    return "waiting for a commit"
                }
                usleep(20)
            }
        }
        commitInFlight = false
        switch results.results.removeFirst() {
        case .success:
            core.logCommitted(through: commitThrough)
            if core.storageFailure != nil { core.storageRecovered() }
            return "commit completes"
        case .failure(let failure):
            var actions: [ChatAction] = []
            core.storageFailed(failure, into: &actions)
            carryOut(actions)
            return "commit fails (\(failure.events.count) events)"
        }
    }

    /// Completes the commit in flight, if any.
    mutating func finishCommits() {
        if commitInFlight { _ = finishCommit() }
    }

    /// The process ends and starts again on the same store: every connection is gone without a
    /// word, and a new core reads rooms back from what was committed.
    private mutating func restart() {
        finishCommits()
        if case .sqlite(let store) = store, store.hasStagedChanges {
            // A server that stops commits what is staged before it exits.
            _ = startCommit(failing: false)
            finishCommits()
        }
        connections.removeAll()
        // The new core numbers its changes from 1 again.
        lastStagedChange = 0
        commitThrough = 0
        if redis != nil {
            // A new process: its requests' answers are gone with the old one, and Redis reaps
            // the members it had.
            redis!.nodeRestarted()
            core = ChatCore(limits: limits, budget: budget, log: .cluster)
            core.clusterAvailability(true)
            return
        }
        // Epochs go on from the old core's: a room made again must not take one a client saw.
        core = ChatCore(limits: limits, budget: budget, log: .durable, epochs: core.epochs)
    }

    // MARK: Actions

    /// Stages the rooms' changes in the store (the memory store commits them as it stages
    /// them), then carries out `actions` in order, as the server would, checking each.
    mutating func carryOut(_ actions: [ChatAction]) {
        let batch = core.takeLogBatch()
        store.roomStore?.stage(batch)
        if redis != nil { redis!.take(core.takeClusterRequests()) }
        if batch.through != 0 {
            lastStagedChange = batch.through
            if case .memory = store { core.logCommitted(through: batch.through) }
        }
        for action in actions {
            switch action {
            case .send(let frame, let id):
                deliver(frame, to: id, broadcast: false)
            case .broadcast(let frame, let recipients):
                if Set(recipients).count != recipients.count { note("\(Self.describe(frame)) is broadcast to a client twice") }
                for id in recipients { deliver(frame, to: id, broadcast: true) }
            case .sendShared(let shared, let id):
                for frame in shared.frames { deliver(frame, to: id, broadcast: false) }
            case .disconnect(let id, _, let nick):
                guard let connection = connections.removeValue(forKey: id.slot) else {
                    note("client \(id.slot) is disconnected but has no connection")
                    continue
                }
                // A node's disconnection overtakes the frames it held for the client (a rename's
                // `nickAccepted` among them), which the client is never told.
                if nick != connection.nick, redis == nil {
                    note("client \(id.slot) is disconnected as \(nick ?? "nil"), not \(connection.nick ?? "nil")")
                }
            }
        }
    }

    /// Checks one frame the server would send to `id`, and learns from it what a client would.
    private mutating func deliver(_ frame: Frame, to id: ClientID, broadcast: Bool) {
        guard var connection = connections[id.slot] else {
            note("\(Self.describe(frame)) is sent to client \(id.slot), which is not connected")
            return
        }
        if ChatCoreFuzzProperties.tracing {
            _ = "  -> client \(id.slot)\(broadcast ? " (broadcast)" : ""): \(Self.describe(frame))\n".withCString { write(STDERR_FILENO, $0, strlen($0)) }
        }
        let size = FrameEncoder.encode(frame).count
        if size > WireProtocol.maxFrameSize + WireProtocol.maxVarintLength {
            note("\(Self.describe(frame)) to client \(id.slot) takes \(size) bytes, over the protocol's limit")
        }
        if connection.version < 2, Self.versionTwoFrames.contains(frame.type) {
            note("version 1 client \(id.slot) is sent \(Self.describe(frame)), a version 2 frame")
        }
        switch frame {
        case .welcome(let version, let nick, _, _):
            connection.nick = nick
            connection.version = version
        case .nickAccepted(let nick):
            connection.nick = nick
        default:
            break
        }
        // A node also sends a client's own events, and what it held for it, one by one; a
        // `topic` sent alone may be the room's state on arrival, older than the `joined`.
        let eventSentAlone: Bool = if case .topic = frame { false } else { redis != nil }
        if broadcast || eventSentAlone, let (room, seq) = Self.roomEvent(frame) {
            let epoch = redis.map { $0.rooms[room]?.epoch } ?? core.rooms[room]?.epoch
            var state = connection.rooms[room]
            let ownJoin = if case .joined(_, _, _, let nick) = frame { nick == connection.nick } else { false }
            if ownJoin {
                guard let epoch else {
                    note("client \(id.slot) joins #\(room), which the core does not hold")
                    return
                }
                // A node may send a rejoiner's held events of the room's old epoch and its new
                // `joined` at once: the epoch known here is the newer one for both.
                if state == nil || state!.epoch != epoch || (redis != nil && !state!.member) { state = (epoch, 0, true, "") }
                state!.member = true
                state!.name = connection.nick ?? ""
            }
            if var known = state, known.member {
                if seq <= known.seq {
                    note("client \(id.slot) is sent \(Self.describe(frame)) after seq \(known.seq) of #\(room) (epoch \(known.epoch))")
                }
                known.seq = max(known.seq, seq)
                switch frame {
                case .left(_, _, _, let nick), .kicked(_, _, _, let nick, _, _): if nick == known.name { known.member = false }
                case .nickChanged(_, _, _, let old, let new): if old == known.name { known.name = new }
                default: break
                }
                connection.rooms[room] = known
            } else {
                note("client \(id.slot) is sent \(Self.describe(frame)) but is not in #\(room)")
            }
        }
        connections[id.slot] = connection
    }

    mutating func note(_ problem: String) {
        if violation == nil { violation = problem }
    }

    /// Frames a version 1 client does not know.
    static let versionTwoFrames: Set<FrameType> = [.roomState, .historyPage, .roomListPage, .membersPage, .away, .limits]

    /// The room and `seq` of a room event.
    static func roomEvent(_ frame: Frame) -> (String, UInt64)? {
        switch frame {
        case .message(let room, let seq, _, _, _), .action(let room, let seq, _, _, _), .joined(let room, let seq, _, _),
            .left(let room, let seq, _, _), .quit(let room, let seq, _, _, _), .nickChanged(let room, let seq, _, _, _),
            .topic(let room, let seq, _, _, _), .kicked(let room, let seq, _, _, _, _), .modeChanged(let room, let seq, _, _, _, _, _):
            (room, seq)
        default:
            nil
        }
    }

    // MARK: Invariants

    /// The first invariant of the core's state that does not hold, or nil.
    func problems() -> String? {
        if let problem = core.accountingProblems().first { return problem }
        for (name, room) in core.rooms where room.history.count > max(0, limits.historySize) {
            return "#\(name) keeps \(room.history.count) history entries, over the history size \(limits.historySize)"
        }
        if core.clientCount != connections.count {
            return "the core counts \(core.clientCount) connections, the server holds \(connections.count)"
        }
        // A node may hold what tells the client its new nick behind the events of its earlier
        // requests: the client knows it once nothing is held for it.
        for (slot, connection) in connections where core.nick(of: ClientID(slot)) != connection.nick {
            if redis != nil, core.heldReplyBytes(for: ClientID(slot)) > 0 || core.cluster.departures[ClientID(slot)] != nil { continue }
            return "client \(slot) is \(core.nick(of: ClientID(slot)) ?? "nil") in the core but was welcomed as \(connection.nick ?? "nil")"
        }
        return nil
    }

    // MARK: Inputs

    /// A valid frame of any type, a client's or not, with its integers at their edges.
    private func makeFrame(_ bytes: inout FuzzBytes) -> Frame {
        let room = Self.rooms[Int(bytes.byte()) % Self.rooms.count]
        let nick = Self.nicks[Int(bytes.byte()) % Self.nicks.count]
        switch bytes.byte() % 24 {
        case 0, 22:
            let passwords: [String?] = [nil, "secret", "wrong"]
            return .hello(version: bytes.integer(), nick: nick, password: passwords[Int(bytes.byte()) % passwords.count])
        case 1: return .changeNick(nick: nick)
        case 2, 19: return .join(room: room)
        case 3: return .part(room: room)
        case 4, 20, 23: return .say(room: room, text: makeText(&bytes))
        case 5: return .emote(room: room, text: makeText(&bytes))
        case 6: return .tell(recipient: nick, text: makeText(&bytes))
        case 7: return .setTopic(room: room, text: makeText(&bytes))
        case 8: return .listRooms
        case 9: return .who(room: room)
        case 10: return .requestHistory(room: room, count: bytes.integer())
        case 11, 21:
            let direction: HistoryDirection = bytes.byte() & 1 == 0 ? .before : .after
            return .fetchHistory(room: room, direction: direction, seq: bytes.integer(), limit: bytes.integer())
        case 12: return .setAway(text: makeText(&bytes))
        case 13: return .ping(token: bytes.integer())
        case 14: return .pong(token: bytes.integer())
        case 15: return .goodbye(reason: makeText(&bytes))
        case 16:
            let type = FrameType(rawValue: bytes.byte())
            return .error(code: ErrorCode(rawValue: bytes.integer()), fatal: bytes.byte() & 1 == 1, frameType: type, reason: makeText(&bytes))
        case 17:
            // A skippable type this version does not define.
            return .unknown(type: FrameType(rawValue: 0x50 + bytes.byte() % 0x30), payload: bytes.take(Int(bytes.byte() % 16)))
        default:
            return makeServerFrame(&bytes, room: room, nick: nick)
        }
    }

    /// A frame only a server may send.
    private func makeServerFrame(_ bytes: inout FuzzBytes, room: String, nick: String) -> Frame {
        let seq: UInt64 = bytes.integer()
        let entry = HistoryEntry(kind: .message, seq: max(seq, 1), time: now.wallMillis, sender: nick, text: "old")
        let frames: [Frame] = [
            .welcome(version: 2, nick: nick, maxFrameSize: 4096, motd: ""),
            .message(room: room, seq: seq, time: now.wallMillis, sender: nick, text: "spoofed"),
            .action(room: room, seq: seq, time: now.wallMillis, sender: nick, text: "spoofed"),
            .direct(sender: nick, recipient: nick, time: now.wallMillis, text: "spoofed"),
            .joined(room: room, seq: seq, time: now.wallMillis, nick: nick),
            .left(room: room, seq: seq, time: now.wallMillis, nick: nick),
            .quit(room: room, seq: seq, time: now.wallMillis, nick: nick, reason: ""),
            .nickChanged(room: room, seq: seq, time: now.wallMillis, old: nick, new: nick),
            .nickAccepted(nick: nick),
            .roomList(rooms: [RoomInfo(name: room, memberCount: 1, topic: "")]),
            .members(room: room, nicks: [nick]),
            .topic(room: room, seq: seq, time: now.wallMillis, setBy: nick, text: "spoofed"),
            .history(room: room, entries: [entry]),
            .roomState(room: room, epoch: seq, firstSeq: seq, lastSeq: seq),
            .historyPage(room: room, epoch: seq, complete: true, entries: [entry]),
            .roomListPage(complete: true, rooms: []),
            .membersPage(room: room, complete: false, nicks: [nick]),
            .away(nick: nick, text: "gone"),
            .limits(requestRate: bytes.integer(), requestBurst: 0, byteRate: 0, byteBurst: 0),
        ]
        return frames[Int(bytes.byte()) % frames.count]
    }

    /// A text of a length at an edge: empty, short, multi-byte, long, just under the frame
    /// limit, or over it (the decoder then refuses the frame).
    private func makeText(_ bytes: inout FuzzBytes) -> String {
        let limit = limits.maxFrameSize
        switch bytes.byte() % 8 {
        case 0: return ""
        case 1: return "hi"
        case 2: return "héllo wörld ✓ 😀"
        case 3: return String(repeating: "x", count: 100)
        case 4: return String(repeating: "y", count: 1_000)
        case 5: return String(repeating: "w", count: limit - 80)
        case 6: return String(repeating: "v", count: limit)
        default: return String(decoding: bytes.take(Int(bytes.byte() % 32)), as: UTF8.self)
        }
    }

    /// Bytes that may not be a frame: raw input, a valid frame cut short (the rest may follow
    /// later), or a valid frame with one byte changed.
    private func makeRawBytes(_ bytes: inout FuzzBytes) -> [UInt8] {
        switch bytes.byte() % 3 {
        case 0:
            return bytes.take(Int(bytes.byte() % 64))
        case 1:
            let encoded = FrameEncoder.encode(makeFrame(&bytes))
            return Array(encoded.prefix(Int(bytes.byte()) % max(1, encoded.count)))
        default:
            var encoded = FrameEncoder.encode(makeFrame(&bytes))
            let index = Int(bytes.byte()) % encoded.count
            encoded[index] ^= max(1, bytes.byte())
            return encoded
        }
    }

    /// A frame for the report, with long texts shortened.
    static func describe(_ frame: Frame) -> String {
        let text = String(describing: frame)
        return text.count <= 160 ? text : String(text.prefix(160)) + "…(\(text.count) characters)"
    }
}
