import ChatCluster
@testable import ChatCore
import ChatProtocol
import ChatStorage
import Dispatch
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
    /// A clustered core, one node, answered by `SingleNodeRedis`.
    case cluster

    var description: String { rawValue }

    /// Whether a room that empties keeps its epoch, `seq`, topic and history for its next
    /// joiner: SQLite keeps it until retention removes it (docs/SERVER.md, "Durability"), Redis
    /// keeps its log and epoch (docs/CLUSTER.md, "Not done"); memory forgets it (docs/PROTOCOL.md,
    /// "Rooms").
    var keepsEmptyRooms: Bool { self != .memory }
}

/// Drives a `ChatCore` with a hand-held clock on one of the `CoreBackend`s: no sockets, no waiting
/// beyond a SQLite commit.
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
    /// The cluster's Redis, for `.cluster`.
    private var redis: SingleNodeRedis?
    /// The number of the last change of a room staged in `store` (`LogBatch.through`).
    private var lastStagedChange: UInt64 = 0

    /// A chat on `backend` with `adjust`ed limits (no rate limits unless `adjust` sets them)
    /// whose rooms take the epochs 1, 2, 3 … in order of creation.
    init(_ backend: CoreBackend, _ adjust: (inout ChatServerConfiguration) -> Void = { _ in }) throws {
        let configuration = Self.configuration(adjust)
        switch backend {
        case .memory:
            sqlite = nil
            store = nil
            core = ChatCore(configuration: configuration, epochs: .sequential())
        case .sqlite:
            let sqlite = try SQLiteBackend()
            self.sqlite = sqlite
            store = sqlite.store
            core = ChatCore(configuration: configuration, log: .durable, epochs: .sequential())
        case .cluster:
            sqlite = nil
            store = nil
            // Redis gives a room its epoch when the first joiner's snapshot is read: 1, 2, 3 …
            // as the other modes' cores do.
            redis = SingleNodeRedis(epochs: .sequential())
            core = ChatCore(configuration: configuration, log: .cluster)
            core.clusterAvailability(true)
        }
    }

    /// A chat whose rooms are kept in `store`, one the test holds and inspects: a
    /// `MemoryRoomStore`, which has nothing to commit (the harness commits only its own SQLite
    /// store). Limits and epochs as above.
    init(store: any RoomStore, _ adjust: (inout ChatServerConfiguration) -> Void = { _ in }) {
        sqlite = nil
        self.store = store
        core = ChatCore(configuration: Self.configuration(adjust), log: .durable, epochs: .sequential())
    }

    /// A chat whose rooms are kept in `sqlite`, committed after every event as on `.sqlite`:
    /// for a test that starts a second chat on the same store, as a server restarted on its
    /// data directory. Limits and epochs as above (a restarted chat counts epochs from 1 again).
    init(sqlite: SQLiteBackend, _ adjust: (inout ChatServerConfiguration) -> Void = { _ in }) {
        self.sqlite = sqlite
        store = sqlite.store
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
    mutating func open(from address: String = "127.0.0.1") -> (ClientID, [ChatAction]) {
        let id = ClientID(nextSlot)
        nextSlot += 1
        // A refusal is shown as the disconnect the server carries out, so tests read it like any other.
        let refusal = core.clientConnected(id, address: address, at: now)
        return (id, refusal.map { [.disconnect(id, $0, nick: nil)] } ?? [])
    }

    /// Opens a connection from `address` and completes the handshake as `nick`, speaking `version`.
    mutating func connect(_ nick: String, version: UInt16 = 1, from address: String = "127.0.0.1") -> ClientID {
        let (id, _) = open(from: address)
        let actions = send(.hello(version: version, nick: nick, password: nil), from: id)
        precondition(actions.first.map { if case .send(.welcome, _) = $0 { true } else { false } } == true, "expected a welcome for \(nick)")
        return id
    }

    /// `frame` arrives from `id`; returns what its sender and others are sent for it.
    @discardableResult
    mutating func send(_ frame: Frame, from id: ClientID) -> [ChatAction] {
        var actions: [ChatAction] = []
        core.received(frame, size: FrameEncoder.encode(frame).count, from: id, at: now, into: &actions)
        finishTurn(&actions)
        return actions
    }

    /// The server lets `id` go for `reason` (its connection was lost); returns what that did.
    @discardableResult
    mutating func disconnect(_ id: ClientID, reason: String) -> [ChatAction] {
        var actions: [ChatAction] = []
        core.disconnect(id, Disconnection(code: nil, reason: reason), at: now, into: &actions)
        finishTurn(&actions)
        return actions
    }

    /// `milliseconds` pass and the server's timer ticks; returns what the tick did.
    mutating func tick(advancingBy milliseconds: UInt64) -> [ChatAction] {
        now.uptimeMillis += milliseconds
        now.wallMillis += milliseconds
        var actions: [ChatAction] = []
        core.tick(at: now, into: &actions)
        finishTurn(&actions)
        return actions
    }

    /// The SQLite store the chat commits to, for `.sqlite`.
    var sqliteStore: SQLiteRoomStore? { sqlite?.store }

    /// The rooms with members, sorted, as the mode knows them: the core's own in memory and with
    /// a store, Redis's in a cluster (a node knows only the rooms of its own clients).
    var roomNames: [String] { redis?.roomNames ?? core.roomNames }

    /// The nicks in `room`, in joining order, as the mode knows them (see `roomNames`).
    func memberNicks(of room: String) -> [String] { redis?.memberNicks(of: room) ?? core.memberNicks(of: room) }

    /// What the server does at the end of a turn before `actions` leave: stages the rooms'
    /// changes in its store, answers the reads the core asked of it and commits what the turn
    /// staged (a `MemoryRoomStore` has nothing to commit), or carries out what the core asked of
    /// the cluster until it asks no more.
    private mutating func finishTurn(_ actions: inout [ChatAction]) {
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
        if redis != nil { redis!.answer(&core, at: now, into: &actions) }
    }

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
        let done = DispatchSemaphore(value: 0)
        let outcome = ReadOutcome()
        store.read(request, on: DispatchQueue.global()) { answer in
            outcome.answer = answer
            done.signal()
        }
        if done.wait(timeout: .now() + .seconds(30)) == .timedOut {
            Issue.record("a store read was not answered within 30 s")
            done.wait()
        }
        return outcome.answer!
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
    private let directory: TemporaryDirectory
    /// The queue the store hands a finished commit to, as it does the server's queue.
    private let queue = DispatchQueue(label: "ChatCoreBackends.sqlite")

    /// A new, empty store in a new directory under /tmp.
    init() throws {
        directory = try TemporaryDirectory(prefix: "chatcore-backend")
        do {
            // No fsync: these tests are about what the chat does, not what a power loss keeps.
            store = try SQLiteRoomStore(directory: directory.path, durability: .off, retention: .keepAll)
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
        let done = DispatchSemaphore(value: 0)
        let outcome = CommitOutcome()
        store.commitStaged(on: queue) { result in
            outcome.result = result
            done.signal()
        }
        if done.wait(timeout: .now() + .seconds(30)) == .timedOut {
            Issue.record("a SQLite commit did not complete within 30 s")
            // The store is this thread's again only once its completion has run.
            done.wait()
        }
        switch outcome.result {
        case .success?:
            if core.storageFailure != nil { core.storageRecovered() }
            return true
        case .failure(let failure)?:
            let failed = Set(failure.events.map { "\($0.room) \($0.entry.seq)" })
            actions.removeAll { action in
                switch action {
                case .broadcast(let frame, _), .send(let frame, _): Self.storedEventKey(frame).map(failed.contains) ?? false
                case .sendShared, .disconnect: false
                }
            }
            core.storageFailed(failure, into: &actions)
            return false
        case nil:
            Issue.record("a commit completed without a result")
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

/// The answer to one read, handed from the store's completion to the waiting test thread.
private final class ReadOutcome: @unchecked Sendable {
    // Written by the completion before it signals the semaphore the reader waits on.
    var answer: Result<RoomReadAnswer, StorageError>?
}

/// The result of one commit, handed from the store's completion to the waiting test thread.
private final class CommitOutcome: @unchecked Sendable {
    // Written by the completion before it signals the semaphore the reader waits on.
    var result: Result<Void, CommitFailure>?
}

// MARK: - The cluster

/// The cluster's Redis for one node, in memory: carries out a clustered core's
/// `ClusterRequest`s and answers them through its `cluster…` methods as `ClusterNode` does with a
/// real Redis, so what the node's clients are sent is what they would be sent.
///
/// It keeps what the append script keeps (docs/CLUSTER.md): per room a `seq`, the log of every
/// event (presence too), members in joining order, the topic event and the epoch (set once, by
/// the first snapshot); nick claims; away messages. An appended event is published to the node
/// when the node follows the room, in `seq` order, stamped with the harness's wall clock (Redis's
/// clock). History is cut from the stream by the node's own `ClusterHistoryCut`, as
/// `ClusterNode.readHistory` cuts it.
/// Not modelled: the log's `MAXLEN ~ 10000` bound, outages, other nodes.
/// (Adapted from the `FakeCluster` of ChatCoreClusterTests, which drives several nodes with
/// fixed answers.)
struct SingleNodeRedis {
    /// One room's keys.
    private struct Room {
        var seq: UInt64 = 0
        var epoch: UInt64?
        /// Every event, oldest first: the stream `chat:{name}:log`.
        var log: [(seq: UInt64, time: UInt64, payload: [UInt8])] = []
        /// Member nicks in joining order (the sorted set, by the `seq` of each join).
        var members: [String] = []
        /// The topic event: its `seq`, time and payload.
        var topic: (seq: UInt64, time: UInt64, payload: [UInt8])?
    }

    private var rooms: [String: Room] = [:]
    /// Nick keys this node holds.
    private var nicks: Set<String> = []
    /// Away messages by nick key.
    private var aways: [String: (nick: String, text: String)] = [:]
    /// Rooms the node follows (subscribed to), from its `join` until its `unfollow`.
    private var followed: Set<String> = []
    private var epochs: EpochSource

    /// Events of a room's log read per command, as the node reads them
    /// (`ClusterReplies.eventsPerRead`).
    private static let eventsPerRead = 64

    /// An empty Redis that gives a room without an epoch the next of `epochs`.
    init(epochs: EpochSource) {
        self.epochs = epochs
    }

    /// The rooms with members, sorted (`chat:rooms`).
    var roomNames: [String] { rooms.filter { !$0.value.members.isEmpty }.keys.sorted() }

    /// The members of `room`, in joining order.
    func memberNicks(of room: String) -> [String] { rooms[room]?.members ?? [] }

    /// Carries out what `core` asks, feeding the answers back into `actions`, until it asks
    /// nothing more: a request's answer can ask again (a `joined` delivered asks for a snapshot).
    mutating func answer(_ core: inout ChatCore, at now: ServerTime, into actions: inout [ChatAction]) {
        var requests = core.takeClusterRequests()
        while !requests.isEmpty {
            for request in requests { carryOut(request, for: &core, at: now, into: &actions) }
            requests = core.takeClusterRequests()
        }
    }

    private mutating func carryOut(_ request: ClusterRequest, for core: inout ChatCore, at now: ServerTime, into actions: inout [ChatAction]) {
        switch request {
        case .claimNick(let asker, let nick, _):
            // One node: a claim fails only against another node's holder, and there is none.
            nicks.insert(ChatName.nickKey(nick))
            core.clusterNickClaimed(asker, nick: nick, .success(true), at: now, into: &actions)
        case .releaseNick(let nick):
            nicks.remove(ChatName.nickKey(nick))
            aways[ChatName.nickKey(nick)] = nil
        case .join(let room, let asker, let nick, let charge, _):
            // The room's moderation is not emulated here: the append script's checks are tested
            // against a real Redis (RoomModerationTests, ClusterModerationTests).
            followed.insert(room)
            core.clusterJoinAppended(asker, room: room, failure: nil, at: now, into: &actions)
            let seq = append(.joined(room: room, seq: 0, time: 0, nick: nick), to: room, at: now) { room in
                // ZADD: a nick that joins again moves to the end.
                room.members.removeAll { $0 == nick }
                room.members.append(nick)
            }
            settle(charge, in: room, audience: rooms[room]!.members.count, core: &core)
            publish(room, seq: seq, to: &core, into: &actions)
        case .append(let room, let event, let change, let sender, let charge, _):
            if case .leave(let nick) = change, !(rooms[room]?.members.contains(nick) ?? false) {
                // The script's NOTMEMBER: nothing is appended.
                let failure = ClusterFailure(reason: "the cluster is unavailable: Redis refused: NOTMEMBER \(nick) is not a member here")
                if let sender { core.clusterAppendFailed(event, in: room, sender: sender, failure: failure, into: &actions) }
                return
            }
            let seq = append(event, to: room, at: now) { room in
                switch change {
                case .none: break
                case .leave(let nick): room.members.removeAll { $0 == nick }
                case .rename(let old, let new):
                    if let index = room.members.firstIndex(of: old) { room.members[index] = new }
                case .topic: room.topic = room.log.last
                case .kick(let nick): room.members.removeAll { ChatName.nickKey($0) == ChatName.nickKey(nick) }
                }
            }
            // A leaver hears its own `left`, though no longer counted a member.
            let leaver = if case .leave = change { 1 } else { 0 }
            settle(charge, in: room, audience: rooms[room]!.members.count + leaver, core: &core)
            publish(room, seq: seq, to: &core, into: &actions)
            if let sender { core.clusterAppended(room: room, seq: seq, sender: sender, into: &actions) }
        case .snapshot(let name, let asker, let seq, let read):
            if rooms[name]?.epoch == nil { rooms[name, default: Room()].epoch = epochs.next() }
            let room = rooms[name]!
            let topic = room.topic.flatMap { event -> Frame? in
                guard case .topic(_, _, _, let setBy, let text)? = try? Frame(decoding: event.payload) else { return nil }
                return .topic(room: name, seq: event.seq, time: event.time, setBy: setBy, text: text)
            }
            let (history, complete) = history(of: name, read)
            let snapshot = ClusterRoomSnapshot(
                epoch: room.epoch!, firstSeq: room.log.first?.seq ?? 0, lastSeq: seq, topic: topic, members: room.members,
                history: history, complete: complete)
            core.clusterSnapshotRead(room: name, asker, .success(snapshot), into: &actions)
        case .members(let room, let asker, _):
            core.clusterMembersRead(room: room, asker, .success(memberNicks(of: room)), into: &actions)
        case .invite(let room, let nick, _, _, let asker):
            core.clusterInvited(room: room, nick: nick, asker, .failure(ClusterFailure(reason: "not emulated")), into: &actions)
        case .bans(let room, let asker):
            core.clusterBansRead(room: room, asker, .failure(ClusterFailure(reason: "not emulated")), into: &actions)
        case .standings(let rooms, let asker, let check):
            // No moderation here: every room stands without founder, roles or bans.
            let standings = Dictionary(uniqueKeysWithValues: rooms.map { ($0, ClusterRoomStanding()) })
            core.clusterStandingsRead(asker, check, .success(standings), at: now, into: &actions)
        case .serverBan(let mask, let on, _, _, let asker):
            core.clusterServerBanSet(mask: mask, on: on, asker, .failure(ClusterFailure(reason: "not emulated")), into: &actions)
        case .kill(let nick, _, let asker):
            core.clusterKillSent(nick: nick, asker, .failure(ClusterFailure(reason: "not emulated")), into: &actions)
        case .listRooms(let asker):
            let listed = rooms.filter { !$0.value.members.isEmpty }.map { name, room in
                RoomInfo(name: name, memberCount: UInt32(room.members.count), topic: room.topic.flatMap(Self.topicText) ?? "")
            }
            core.clusterRoomsRead(asker, .success(listed), into: &actions)
        case .history(let room, let asker, let read, let request):
            // `GET epoch`: 0 for a room no snapshot has given one.
            let epoch = rooms[room]?.epoch ?? 0
            let (entries, complete) = history(of: room, read)
            core.clusterHistoryRead(
                room: room, asker, request: request, .success((epoch: epoch, entries: entries, complete: complete)), into: &actions)
        case .direct(let message, let sender):
            // Published on the holder's channel: this node's, if it holds the nick.
            guard case .direct(_, let recipient, _, _) = message else { return }
            let key = ChatName.nickKey(recipient)
            let heard = nicks.contains(key)
            if heard { core.clusterDirectReceived(FrameEncoder.encode(message), into: &actions) }
            let away = aways[key].flatMap { $0.text.isEmpty ? nil : $0 }
            core.clusterDirectSent(message, sender: sender, .success(heard), away: away, into: &actions)
        case .unfollow(let room):
            followed.remove(room)
        case .setAway(let nick, let text):
            // Only while the node holds the nick; an empty text deletes it.
            let key = ChatName.nickKey(nick)
            guard nicks.contains(key) else { return }
            aways[key] = text.isEmpty ? nil : (nick, text)
        }
    }

    /// Numbers `event` in `room`, stamps it with Redis's clock, logs it and makes `change` in the
    /// same step, as the append script does; returns its `seq`.
    private mutating func append(_ event: Frame, to name: String, at now: ServerTime, change: (inout Room) -> Void) -> UInt64 {
        var room = rooms[name] ?? Room()
        room.seq += 1
        room.log.append((room.seq, now.wallMillis, ChatCore.clusterPayload(of: event)))
        change(&room)
        rooms[name] = room
        return room.seq
    }

    /// The publication of `room`'s event `seq`, heard by the node if it follows the room.
    private func publish(_ room: String, seq: UInt64, to core: inout ChatCore, into actions: inout [ChatAction]) {
        guard followed.contains(room), let event = rooms[room]?.log.last, event.seq == seq else { return }
        core.clusterDeliver(room: room, seq: event.seq, time: event.time, payload: event.payload, into: &actions)
    }

    /// Tells the core what an event charged with `charge` cost once the room's member count is
    /// known, as `ClusterNode.settle` does: only when it differs from what was charged.
    private func settle(_ charge: FanoutCharge?, in room: String, audience: Int, core: inout ChatCore) {
        let memberCount = rooms[room]?.members.count ?? 0
        guard let charge, audience > charge.deliveries || memberCount != charge.memberCount else { return }
        core.clusterFanoutCounted(room: room, memberCount: memberCount, audience: audience, charge: charge)
    }

    /// `read`'s answer from `room`'s log, as `ClusterNode.readHistory` gets it: the node's own
    /// cut (`ClusterHistoryCut`) fed the stream `eventsPerRead` events at a time.
    private func history(of room: String, _ read: ClusterHistoryRead) -> (entries: [HistoryEntry], complete: Bool) {
        var cut = ClusterHistoryCut(read)
        // Each batch but the last is full and moves the cursor past its events: the loop ends
        // once the log does, if not before.
        while cut.answer == nil {
            let events = range(of: room, cut.direction, from: cut.cursor)
            cut.take(events, logEnded: events.count < Self.eventsPerRead)
        }
        return cut.answer!
    }

    /// `XRANGE` after `cursor`, or `XREVRANGE` before it (0: from the newest), `COUNT`
    /// `eventsPerRead`, as `RoomLog.events` asks them.
    private func range(
        of room: String, _ direction: HistoryDirection, from cursor: UInt64
    ) -> [(seq: UInt64, time: UInt64, payload: [UInt8])] {
        let log = rooms[room]?.log ?? []
        switch direction {
        case .after: return Array(log.lazy.filter { $0.seq > cursor }.prefix(Self.eventsPerRead))
        case .before: return Array(log.reversed().lazy.filter { cursor == 0 || $0.seq < cursor }.prefix(Self.eventsPerRead))
        }
    }

    /// The text of a topic event, as the room list shows it.
    private static func topicText(_ event: (seq: UInt64, time: UInt64, payload: [UInt8])) -> String? {
        guard case .topic(_, _, _, _, let text)? = try? Frame(decoding: event.payload) else { return nil }
        return text
    }
}

// MARK: - The backends themselves

/// The harness drives each mode the way the server does: these tests hold it to that, so the
/// behaviour tests above run on what they claim to.
@Suite("The chat logic's test backends")
struct CoreBackendTests {
    @Test func theSQLiteBackendCommitsEveryTurnAndReadsAnEmptiedRoomBack() throws {
        var chat = try Harness(.sqlite)
        let store = try #require(chat.sqliteStore)
        let alice = chat.connect("alice", version: 2)
        chat.send(.join(room: "r"), from: alice)  // seq 1
        chat.send(.say(room: "r", text: "kept"), from: alice)  // seq 2
        #expect(!store.hasStagedChanges, "committed at the end of the turn")
        let stored = try #require(try store.loadRoom(named: "r", recent: 10))
        #expect(stored.record.lastSeq == 2 && stored.recent.map(\.text) == ["kept"], "in SQLite: \(stored)")
        chat.send(.part(room: "r"), from: alice)  // seq 3
        _ = chat.tick(advancingBy: 1_000)
        #expect(chat.core.historyBytes == 0, "the emptied room left memory once committed")
        let again = frames(to: alice, in: chat.send(.join(room: "r"), from: alice))
        #expect(again.contains(.roomState(room: "r", epoch: 1, firstSeq: 2, lastSeq: 4)), "read back from SQLite: \(again)")
    }

    @Test func aFailedSQLiteCommitIsNotDeliveredAndItsSenderIsTold() throws {
        var chat = try Harness(.sqlite)
        let store = try #require(chat.sqliteStore)
        let alice = chat.connect("alice", version: 2)
        let bob = chat.connect("bob", version: 2)
        chat.send(.join(room: "r"), from: alice)
        chat.send(.join(room: "r"), from: bob)
        try store.capFileSize(bytes: 0)
        // Every commit needs a new page now.
        let lost = chat.send(.say(room: "r", text: String(repeating: "z", count: 8_000)), from: alice)
        #expect(!frames(to: bob, in: lost).contains { $0.type == .message }, "bob never sees what was not stored: \(lost)")
        #expect(frames(to: alice, in: lost).contains { if case .error(.storageFailed, false, .say, _) = $0 { true } else { false } }, "\(lost)")
        #expect(chat.core.storageFailure != nil)
        try store.capFileSize(bytes: 1 << 30)
        // A join is a commit too (the room's seq): once it succeeds, room events are accepted again.
        chat.send(.join(room: "other"), from: bob)
        #expect(chat.core.storageFailure == nil)
        let said = chat.send(.say(room: "r", text: "after"), from: alice)
        #expect(frames(to: bob, in: said).contains { if case .message(_, _, _, "alice", "after") = $0 { true } else { false } })
    }

    @Test func theClusterBackendFollowsOnlyRoomsWithMembersHereAndKeepsTheRoomInRedis() throws {
        var chat = try Harness(.cluster)
        let alice = chat.connect("alice", version: 2)
        chat.send(.join(room: "r"), from: alice)
        #expect(chat.core.clusterRooms == ["r"], "followed while it has a member here")
        #expect(chat.roomNames == ["r"] && chat.memberNicks(of: "r") == ["alice"])
        chat.send(.part(room: "r"), from: alice)
        #expect(chat.core.clusterRooms.isEmpty, "unfollowed once empty")
        #expect(chat.roomNames.isEmpty)
        let again = frames(to: alice, in: chat.send(.join(room: "r"), from: alice))
        #expect(again.first == .joined(room: "r", seq: 3, time: chat.now.wallMillis, nick: "alice"), "Redis kept its seq: \(again)")
    }
}
