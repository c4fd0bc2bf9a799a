import ChatProtocol
import DequeModule

// MARK: - Cluster mode of the chat logic
//
// In a cluster (docs/CLUSTER.md) the chat logic still owns this node's connections — handshakes,
// limits, who is here — but the rooms, their `seq`s and history, nicks and presence are the
// cluster's. So where a server on its own would change a room and broadcast, a node asks the
// cluster (a `ClusterRequest` in `takeClusterRequests()`), and the answers come back as calls
// below: an appended event comes back as `clusterDeliver` — to the sender's node like to any
// other — and only then reaches this node's members, with the `seq` Redis gave it. Nothing here
// does I/O; `ClusterNode` carries the requests out against Redis, and tests can answer them
// by hand.

/// What a clustered `ChatCore` asks of the cluster. The server carries each out and reports the
/// outcome through the `cluster…` method named.
public enum ClusterRequest: Sendable, Equatable {
    /// Claim `nick` for this node as `claimant` → `clusterNickClaimed`, or `clusterNickReserved`
    /// when it is a registered nick and the claimant a guest.
    case claimNick(ClusterAsker, nick: String, claimant: NickClaimant = .guest)
    /// Let `nick` go (its holder left, or changed it).
    case releaseNick(String)
    /// Follow `room` (if not yet) and append `joined` for `nick` with the membership, if the
    /// room's moderation admits it (`admission`) → `clusterJoinAppended`; the event itself comes
    /// back through `clusterDeliver`. With `charge`, the room's member count that Redis reports
    /// settles it → `clusterFanoutCounted`.
    case join(room: String, ClusterAsker, nick: String, charge: FanoutCharge?, admission: ModerationCheck)
    /// Append `event` (its `seq` and time 0: Redis numbers and stamps it) to `room`'s log with
    /// `change`; if it fails, `clusterAppendFailed` tells `sender`. A quit (no sender) or a nick
    /// change that fails for want of Redis is appended again once the cluster is back: the room
    /// must not keep a member that left or a name that changed. With `charge`, as for `join`.
    /// `moderation`: what the room's moderation checks (and changes) with it.
    case append(room: String, event: Frame, change: ClusterChange, sender: ClusterAppender?, charge: FanoutCharge?, moderation: ModerationCheck?)
    /// Read what a joiner of `room` is told — epoch, members, topic, and `history` (before its
    /// own `joined` at `seq`) → `clusterSnapshotRead`.
    case snapshot(room: String, ClusterAsker, seq: UInt64, history: ClusterHistoryRead)
    /// Read `room`'s members, and its modes `withModes` (a version 4 asker) → `clusterMembersRead`.
    case members(room: String, ClusterAsker, withModes: Bool)
    /// Invite `nick` into `room` as `by` (`admin`: a server operator), then tell `nick` through
    /// the node that serves it → `clusterInvited`.
    case invite(room: String, nick: String, by: String, admin: Bool, ClusterAsker)
    /// Read `room`'s bans → `clusterBansRead`.
    case bans(room: String, ClusterAsker)
    /// Read the standing (founder, roles, bans) of each of `rooms`, for `check` →
    /// `clusterStandingsRead`.
    case standings(rooms: [String], ClusterAsker, check: StandingCheck)
    /// Ban `mask` (canonical) from every node, or lift the ban, as `setBy` → `clusterServerBanSet`;
    /// each node hears the change and ends its sessions that a new ban matches
    /// (`clusterServerBansRead`).
    case serverBan(mask: String, on: Bool, setBy: String, reason: String, ClusterAsker)
    /// End the session of `nick`, served by another node, for `reason` → `clusterKillSent`.
    case kill(nick: String, reason: String, ClusterAsker)
    /// Read every room with members → `clusterRoomsRead`.
    case listRooms(ClusterAsker)
    /// Read `history` of `room` → `clusterHistoryRead`. `request` is what asked:
    /// `requestHistory` or `fetchHistory`.
    case history(room: String, ClusterAsker, ClusterHistoryRead, request: FrameType)
    /// Hand `message` (a `direct`) to the node serving its recipient → `clusterDirectSent`.
    case direct(Frame, sender: ClusterAsker)
    /// Stop following `room`: no member here any more.
    case unfollow(room: String)
    /// Keep `nick`'s away message (empty: none) where `tell`s from other nodes find it — now, or
    /// once the cluster is reachable again (the latest one wins).
    case setAway(nick: String, text: String)
}

/// Why a node reads a member's standing in its rooms (`ClusterRequest.standings`): who the member
/// is changes, and each room judges it again by the rule a server on its own applies.
public enum StandingCheck: Sendable, Equatable {
    /// It logged in (or registered) to `account`, as the member `nick`: a ban that matches it now
    /// kicks it, and a registered room gives it its account's roles. Redis learns the member's
    /// account in each room first, as a join would have told it: who founded a room, and whose
    /// role a registered room keeps, is judged there by it.
    case login(nick: String, account: String)
    /// It asks to be known as this nick: refused where a ban matches it under it.
    case nickChange(String)
}

/// Who claims a nick in the cluster, as far as the nick's account goes.
public enum NickClaimant: Sendable, Equatable {
    /// Not logged in to an account of that nick: a registered nick is refused.
    case guest
    /// Logged in to the nick's account, taking it back: a holder on another node is ghosted.
    case ghost
}

/// Who asked for an answer that comes later: the client, and its session, which tells it from a
/// later client in the same slot (which must not get the answer if the asker left meanwhile).
public struct ClusterAsker: Sendable, Hashable {
    /// The client that asked.
    public let id: ClientID
    let session: UInt64
}

/// Who asked for an append to a room, the append's place in its order, and in which of this
/// node's follows of the room it was sent.
public struct ClusterAppender: Sendable, Equatable {
    /// The client that asked.
    public let asker: ClusterAsker
    /// The follow the append was sent in (`ClusterState.Room.follow`). The answer to an append
    /// sent before the room was last followed anew owes its sender no echo: Redis answers the
    /// node's commands in the order sent, so it numbered that event before the new follow read
    /// the room's `seq`, and the new follow delivers only events after it.
    let follow: UInt64
    /// Its place in the sender's order (`ClusterState.PendingEcho.ordinal`; 0: no echo is
    /// expected): which of the sender's pending echoes a failure takes off the list, when
    /// several are the same line.
    let ordinal: UInt64
}

/// What a client's address was charged, when its frame was read, for the deliveries the event it
/// causes will cost the cluster (`--address-fanout-rate`): every member of the room on every node
/// gets it when Redis publishes it, so the node charges the room's members as it last knew them,
/// at once — the address's next frame waits if that puts it in debt, as on a server on its own —
/// and the member count the append reports settles the difference (`clusterFanoutCounted`).
public struct FanoutCharge: Sendable, Equatable {
    /// The address charged.
    public var address: String
    /// What one delivery costs: the frame's size and what a delivery adds to it.
    public var bytesPerDelivery: Int
    /// The deliveries charged.
    public var deliveries: Int
    /// The room's member count, on all nodes, as this node knew it then (0: not known).
    public var memberCount: Int

    /// Describes a charge.
    public init(address: String, bytesPerDelivery: Int, deliveries: Int, memberCount: Int) {
        self.address = address
        self.bytesPerDelivery = bytesPerDelivery
        self.deliveries = deliveries
        self.memberCount = memberCount
    }
}

/// What an appended event changes in the room's shared state besides its log.
public enum ClusterChange: Sendable, Equatable {
    /// Nothing.
    case none
    /// `nick` of this node leaves the members (nothing is appended if it is not one).
    case leave(nick: String)
    /// This node's member `old` is called `new`.
    case rename(old: String, new: String)
    /// The event is the topic.
    case topic
    /// `nick`, served by any node, is kicked out of the members.
    case kick(nick: String)
}

/// What a joiner is told about a room, read from the cluster.
public struct ClusterRoomSnapshot: Sendable, Equatable {
    /// The room's epoch.
    public var epoch: UInt64
    /// The `seq` of the oldest event the cluster keeps; 0 for none.
    public var firstSeq: UInt64
    /// The `seq` of the joiner's own `joined`: what it is told is the room's last.
    public var lastSeq: UInt64
    /// The topic event (a `topic` frame), if the room has a topic.
    public var topic: Frame?
    /// Member nicks, in joining order.
    public var members: [String]
    /// The history before the joiner's `joined`, oldest first, as the snapshot's
    /// `ClusterHistoryRead` cut it: a page for a version 2 joiner, the recent messages for a
    /// version 1 joiner.
    public var history: [HistoryEntry]
    /// Whether no history older than `history` is kept (for a page).
    public var complete: Bool
    /// The room's settings and roles, for a version 4 joiner; nil if they could not be read.
    public var modes: RoomModes?

    /// Describes a snapshot.
    public init(
        epoch: UInt64, firstSeq: UInt64, lastSeq: UInt64, topic: Frame?, members: [String], history: [HistoryEntry], complete: Bool,
        modes: RoomModes? = nil
    ) {
        self.modes = modes
        self.epoch = epoch
        self.firstSeq = firstSeq
        self.lastSeq = lastSeq
        self.topic = topic
        self.members = members
        self.history = history
        self.complete = complete
    }
}

/// Which history entries a read of a room's log answers with. A server on its own answers from
/// what its memory keeps of the room (`RoomHistory`, loaded from its store when it has one); a
/// node has no such memory, so it cuts the same answer from the log itself, which also holds the
/// presence events (joins, leaves, quits, nick changes) that are no history.
public enum ClusterHistoryRead: Sendable, Equatable {
    /// One `historyPage`, as `RoomHistory.page` cuts it: at most `limit` entries next to `seq`
    /// (topics included) that fit one frame, and whether any history lies beyond them.
    case page(HistoryDirection, from: UInt64, limit: Int)
    /// Version 1's `history`, as `RoomHistory.recentMessages` answers it: the newest `count`
    /// messages and actions among what a room's history keeps of the entries before `seq` (0:
    /// all) — the newest `window` (`--history-size`, topic changes counted) that cost at most
    /// `bytes` (the memory budget's share of one room). Sent in as many frames as they take.
    case recentMessages(before: UInt64, count: Int, window: Int, bytes: Int)
}

/// Cuts a `ClusterHistoryRead`'s answer from a room's log, which is read a batch at a time in
/// `direction` from `cursor` on (`ClusterNode` reads Redis's stream; the tests' in-memory Redis
/// its own copy of it). Fed the events of each batch in the order read, it says when it has the
/// answer; until then the next batch starts past `cursor`.
///
/// A full page is told `complete` only once the log shows no history beyond it: presence events
/// are skipped, so the read goes on until the next history entry (not complete) or the end of
/// the log (complete). That costs no more than a page the log cannot fill, which reads to its end.
package struct ClusterHistoryCut: Sendable {
    /// What is cut.
    let read: ClusterHistoryRead
    /// The direction the log is read in: newer (`after`) or older (`before`) than `cursor`.
    package let direction: HistoryDirection
    /// The `seq` the next batch starts beyond (0 with `before`: from the newest event).
    package private(set) var cursor: UInt64
    /// The answer, once known: the entries, oldest first, and whether no history lies beyond them.
    package private(set) var answer: (entries: [HistoryEntry], complete: Bool)?
    /// The entries taken, in the order read.
    private var taken: [HistoryEntry] = []
    /// Entries of the window counted (`recentMessages`: topic changes too, though not taken).
    private var counted = 0
    /// What the counted entries cost, by the read's measure.
    private var spent = 0

    /// A cut of `read`, which reads nothing when the answer is known already.
    package init(_ read: ClusterHistoryRead) {
        self.read = read
        switch read {
        case .page(let direction, let seq, _):
            self.direction = direction
            cursor = seq
        case .recentMessages(let seq, let count, let window, _):
            direction = .before
            cursor = seq
            if count <= 0 || window <= 0 { answer = ([], true) }
        }
        // Nothing is older than the first event.
        if direction == .before, cursor == 1 { answer = ([], true) }
    }

    /// Takes the next batch of the log, `events` in the order read; `logEnded` says the log
    /// holds nothing beyond them (the batch was not full).
    package mutating func take(_ events: [(seq: UInt64, time: UInt64, payload: [UInt8])], logEnded: Bool) {
        guard answer == nil else { return }
        for event in events {
            cursor = event.seq
            guard let entry = ChatCore.historyEntry(payload: event.payload, seq: event.seq, time: event.time) else { continue }
            switch read {
            case .page(_, _, let limit):
                // History beyond a full page, or one that no longer fits the frame.
                if taken.count >= limit { return finish(complete: false) }
                spent += ChatCore.cost(entry)
                if spent > ChatCore.listFrameBudget, !taken.isEmpty { return finish(complete: false) }
                taken.append(entry)
            case .recentMessages(_, let count, let window, let bytes):
                spent += RoomHistory.cost(of: entry)
                // What a room's memory would have forgotten to keep the newer entries.
                if spent > bytes, counted > 0 { return finish(complete: false) }
                counted += 1
                if entry.kind != .topic { taken.append(entry) }
                if taken.count == count || counted == window { return finish(complete: false) }
            }
        }
        if logEnded { finish(complete: true) }
    }

    private mutating func finish(complete: Bool) {
        answer = (direction == .before ? taken.reversed() : taken, complete)
        taken = []
    }
}

/// This node's share of the cluster's rooms and what it waits for, inside `ChatCore`.
@usableFromInline struct ClusterState: Sendable {
    /// A room with clients of this node in it (or on their way in).
    struct Room: Sendable {
        /// Which of this node's follows of the room this is: a room followed anew is another.
        let follow: UInt64
        /// Local members in the order their `joined` arrived: who gets the room's events.
        var members: [ClientID] = []
        /// Clients whose `joined` was asked for and has not arrived, with the nick key it names:
        /// their nick may change while it travels (`joiner`).
        var joining: [ClientID: String] = [:]
        /// Members whose snapshot is being read, with the events held for them meanwhile.
        var snapshotting: [ClientID: [Frame]] = [:]
        /// Members who asked to leave and whose `left` has not arrived: they get it, then go.
        var leaving: Set<ClientID> = []
        /// Members by the nick key the room's log knows them by, from their `joined` on, as its
        /// `nickChanged`s come: a member's rename reaches the log after the node renamed it, so
        /// an event that names a member (its `left`, a kick) is matched here first, and by its
        /// nick only when the log's name is not known (a rename appended again after an outage
        /// can come after the member's `left`).
        var logNicks: [String: ClientID] = [:]
        /// The room's members on all nodes, as the last append of this node's reported them (0:
        /// not known yet): what a line's deliveries are charged by.
        var memberCount = 0
        /// The `seq` of the last event delivered here (0: none yet); events come in `seq` order.
        var lastDelivered: UInt64 = 0
        /// This node's appends to the room whose event has not been delivered, by the nick they
        /// were sent as (a rename does not lose them), each nick's in the order sent: Redis
        /// numbers one node's appends in that order, so the next one delivered is the first.
        var pendingEchoes: [String: Deque<PendingEcho>] = [:]
        /// The place in its client's order (`OrderGate`) of each join under way: its `joined`
        /// and the snapshot after it, or its refusal, go there.
        var joinOrdinals: [ClientID: UInt64] = [:]
        /// Members for whom the room's events wait in their gate behind the answers of their
        /// earlier requests — their arrival (the snapshot's frames), or their own event — by the
        /// place they wait at: the room's later events wait there too, or a member would hear of
        /// the room before it is told it joined, or get its own line after later ones.
        var heldEvents: [ClientID: UInt64] = [:]
        /// The clients owed the delivery of their own event (`Owed.echoes`), by its `seq`: found
        /// by number when it comes, as its author's nick may have changed since.
        var owedEchoes: [UInt64: ClientID] = [:]
        /// Joins asked by clients that left before their `joined` came, oldest first, by who
        /// asked and the nick key the `joined` names: Redis may still number one (or has, and
        /// its event is on the way). The next `joined` of that nick is the one that left's and
        /// makes no one a member; until it comes, or the join fails, a join of the nick here
        /// waits ("try again"), or a next session of the nick would be taken for the one gone.
        var departedJoins: [(asker: ClusterAsker, nickKey: String)] = []

        /// Which joiner the `joined` naming `nickKey` is for, if any, taken off `departedJoins`
        /// if it is a join of a client that left. Up to three may name one nick, in the order
        /// they asked: a client that renamed away from it; a client that held it after and left
        /// (a next holder's join waits for its `joined`); and one that holds it now.
        mutating func takeJoiner(_ nickKey: String, nick: (ClientID) -> String?) -> ClientID? {
            var found: ClientID?
            for (id, key) in joining where key == nickKey {
                if nick(id).map(ChatName.nickKey) != nickKey { return id }
                found = id
            }
            if let departed = departedJoins.firstIndex(where: { $0.nickKey == nickKey }) {
                departedJoins.remove(at: departed)
                return nil
            }
            return found
        }

        /// The first pending echo sent as `author`, taken off the list if `event` is it; one
        /// lookup of the author, on every delivery of an event of this node.
        mutating func takeEcho(_ event: Frame, author: String) -> PendingEcho? {
            guard let index = pendingEchoes.index(forKey: author), pendingEchoes.values[index].first?.event == event else { return nil }
            let echo = pendingEchoes.values[index].removeFirst()
            if pendingEchoes.values[index].isEmpty { pendingEchoes.remove(at: index) }
            return echo
        }

        /// No one here is in the room, on the way in, or waiting for what it is told of it (a
        /// client that left before its snapshot arrived still gets it, then its `left`).
        var isEmpty: Bool { members.isEmpty && joining.isEmpty && snapshotting.isEmpty }
    }

    /// What a paused client waits for; its later requests wait with it, so they keep their order.
    @usableFromInline enum Awaited: Sendable, Equatable {
        /// Its `hello`'s nick claim.
        case hello(nick: String, version: UInt16)
        /// Its `changeNick`'s nick claim.
        case nickChange(String)
        /// The append of its `joined`.
        case join(String)
        /// The delivery of its `left`: a join to the room right after must not overtake it, or
        /// the node would see that join's `joined` and the earlier one's, and this `left`
        /// between them, all under way for one client at once. It comes: a node whose link to
        /// Redis broke resumes each room's events where they stopped (`RoomLog.follow(after:)`).
        case leave(String)
        /// The answer to its read (the room list, a room's members, history). A read costs Redis
        /// up to a page of 64 events — a megabyte of long lines — for a reply of a frame or so;
        /// pipelined by the thousand from clients that never read, they filled the node's link to
        /// Redis until its heartbeat went unanswered. One at a time per client, as a server on
        /// its own answers one before it reads the next, and the reply high-water mark stops a
        /// client that does not read its replies.
        case read
    }

    /// What the cluster still owes a client in answer to the requests it sent: on a server on its
    /// own every reply is given before the client's next request is read, so its session ends
    /// after them; here they come later, from Redis, and its session ends once they have come.
    struct Owed: Sendable {
        /// Requests whose answer has not come: appends not yet numbered (or refused), reads, a
        /// join whose `joined` has not been delivered, a joiner's snapshot.
        var answers = 0
        /// Its own events that Redis numbered but this node has not delivered yet: by room, the
        /// highest `seq`.
        var echoes: [String: UInt64] = [:]
    }

    /// An append of this node whose event has not come back: when it does, its sender's frames
    /// that waited for it may go (`OrderGate`).
    struct PendingEcho: Sendable {
        /// The event as its payload decodes (`seq` 1, time 0): what tells it from a line of the
        /// same sender that failed, or of an earlier holder of the nick.
        var event: Frame
        var sender: ClusterAsker
        /// Its place in the sender's order.
        var ordinal: UInt64
    }

    /// Keeps one client's frames in the order the chat produced them (docs/SERVER.md, "Order")
    /// when some of them come from Redis: the events of its appends (and joins, and direct
    /// messages through another node) come back later, while a ping, a refusal or a `tell` to a
    /// client of this node is answered at once. Each request that Redis answers later takes the
    /// next ordinal; a frame produced meanwhile for the client — or for the recipient of its
    /// `tell` — is held with the last ordinal issued before it (`after`) and goes once every
    /// ordinal up to that one is resolved: its event delivered, its snapshot sent, its answer or
    /// failure given. A client's appends to one room resolve in order (Redis numbers them in the
    /// order sent and they are delivered in `seq` order), to different rooms in any order.
    @usableFromInline struct OrderGate: Sendable {
        /// Ordinals issued so far: the last one is `issued`.
        var issued: UInt64 = 0
        /// Ordinals not resolved yet, ascending.
        var unresolved: Deque<UInt64> = []
        /// Frames that wait, in the order they go (ascending `after`).
        var held: Deque<HeldFrames> = []
        /// What `held` costs: it counts against the client's share like its queued replies.
        @usableFromInline var heldBytes = 0
        /// The ordinals of its `tell`s to other nodes, in the order asked (Redis answers them in
        /// that order).
        var directs: Deque<UInt64> = []

        /// The next ordinal, unresolved until `resolve`.
        mutating func issue() -> UInt64 {
            issued += 1
            unresolved.append(issued)
            return issued
        }

        /// Whether a frame placed after ordinal `after` may go now: every ordinal up to it is
        /// resolved, and nothing placed up to it waits (frames placed later may: it goes first).
        func isClear(upTo after: UInt64) -> Bool {
            (unresolved.first.map { $0 > after } ?? true) && (held.first.map { $0.after > after } ?? true)
        }

        /// Holds `frames` behind those placed up to its place and ahead of those placed later
        /// (an event's echo, or a failure, is placed where its request was sent).
        mutating func hold(_ frames: HeldFrames) {
            var index = held.count
            while index > 0, held[index - 1].after > frames.after { index -= 1 }
            held.insert(frames, at: index)
        }

        /// Takes out of what waits every frame for `id`, which left: a newcomer in its slot must
        /// not get them. Returns whether frames still wait.
        mutating func dropFrames(for id: ClientID) -> Bool {
            var kept: Deque<HeldFrames> = []
            for var frames in held {
                switch frames.action {
                case .send(_, let to), .sendShared(_, let to):
                    if to == id { continue }
                case .broadcast(let frame, var recipients):
                    if let index = recipients.firstIndex(of: id) {
                        recipients.remove(at: index)
                        if recipients.isEmpty { continue }
                        frames.action = .broadcast(frame, to: recipients)
                        frames.cost -= ChatCore.heldCostPerRecipient
                    }
                case .disconnect:
                    break
                }
                kept.append(frames)
            }
            held = kept
            heldBytes = kept.reduce(0) { $0 + $1.cost }
            return !held.isEmpty
        }

        /// `ordinal` is resolved: the held frames it cleared go to `actions`, in order.
        mutating func resolve(_ ordinal: UInt64, into actions: inout [ChatAction]) {
            // Usually the first: a room's appends resolve in order.
            if let index = unresolved.firstIndex(of: ordinal) { unresolved.remove(at: index) }
            while let first = held.first, unresolved.first.map({ $0 > first.after }) ?? true {
                held.removeFirst()
                heldBytes -= first.cost
                actions.append(first.action)
            }
        }
    }

    /// An action held by an `OrderGate`.
    struct HeldFrames: Sendable {
        /// The last ordinal issued before it was produced: it goes once that one is resolved.
        var after: UInt64
        var action: ChatAction
        /// About what it takes in memory, in bytes.
        var cost: Int
    }

    /// A client whose session ends once it is owed nothing (`ChatCore.endSession`): it is read no
    /// more, still gets what it is sent, and is let go at `deadline` (uptime milliseconds) even if
    /// Redis has not answered, so an outage cannot keep its connection open.
    @usableFromInline struct Departure: Sendable {
        /// Why it was let go: what it is told, and its rooms, when it goes.
        var disconnection: Disconnection
        /// When it was let go: the time its disconnection is carried out at.
        var since: ServerTime
        /// When it goes without what it is still owed.
        var deadline: UInt64
    }

    /// Whether the cluster's Redis is reachable; requests that need it are refused while not.
    var available = false
    /// Why it is not, for the `unavailable` errors.
    var unavailableReason = "not connected to the cluster yet"
    var rooms: [String: Room] = [:]
    @usableFromInline var awaiting: [ClientID: Awaited] = [:]
    /// Clients whose join under way gave a key (`joinWithKey`): a wrong one counts against
    /// their address.
    var keyedJoins: Set<ClientID> = []
    /// The session of each welcomed client, by slot: a number no earlier client in the slot had,
    /// so an answer for one that left is not taken for its successor's.
    var sessions: [Int: UInt64] = [:]
    var nextSession: UInt64 = 1
    /// The number of the next room followed (`Room.follow`).
    var nextFollow: UInt64 = 1
    var outbox: [ClusterRequest] = []
    /// What each client is owed; only clients owed something are listed.
    var owed: [ClientID: Owed] = [:]
    /// The clients let go that wait for what they are owed.
    @usableFromInline var departures: [ClientID: Departure] = [:]
    /// The order of each client's frames, from its first request that Redis answers later until
    /// it leaves: its ordinals never start again, so an answer cannot resolve a later request's.
    @usableFromInline var gates: [ClientID: OrderGate] = [:]
    /// The clients whose gate has held frames for another client of this node (the copy of a
    /// `tell`): when that client leaves, they are taken out (`OrderGate.dropFrames`).
    var holdingForOthers: Set<ClientID> = []
    /// The gates of clients that left while frames for other clients waited in them, by the asker
    /// that left. A single server delivered a `tell` when it read it, whatever became of its
    /// sender; here it goes once the events of the sender's earlier requests have (or their
    /// appends failed, or the room is followed no more), still after them.
    var orphanedGates: [ClusterAsker: OrderGate] = [:]
    /// What `orphanedGates` hold, by `OrderGate.heldBytes`: at most the memory budget's `held`
    /// share, which only durable mode's commits use otherwise. Past it a gate that would be
    /// orphaned is dropped, its frames with it.
    var orphanedBytes = 0
    /// Clients that logged in and wait for the claim of their account's nick, with the account's
    /// name: `loggedIn` follows the claim.
    var loggingIn: [ClientID: String] = [:]
}

extension ChatCore {
    // MARK: Talking to the cluster

    /// The requests made since the last call, in order; the server carries them out.
    public mutating func takeClusterRequests() -> [ClusterRequest] {
        guard cluster.outbox.isEmpty == false else { return [] }
        defer { cluster.outbox.removeAll() }
        return cluster.outbox
    }

    /// Whether `id`'s requests must wait for the cluster's answer to an earlier one, or it is let
    /// go and waits for the answers to those it sent (`endSession`): either way it is read no more
    /// meanwhile.
    @inlinable
    public func isAwaitingCluster(_ id: ClientID) -> Bool {
        cluster.awaiting[id] != nil || cluster.departures[id] != nil
            // Its frames held for the events of its earlier requests passed the reply high-water
            // mark: its requests wait for those events, as a client that does not read waits for
            // its queue to drain, so one that pipelines without reading cannot grow the node.
            || heldReplyBytes(for: id) > budget.replyHighWater
    }

    /// The cluster's Redis became reachable (`available`) or not (with why). While it is not,
    /// requests that need it are answered `unavailable`.
    public mutating func clusterAvailability(_ available: Bool, reason: String = "") {
        cluster.available = available
        if !available { cluster.unavailableReason = reason }
    }

    /// The room names this node follows: those with local members or joiners.
    public var clusterRooms: [String] { cluster.rooms.keys.sorted() }

    /// `roomNames` on a node: the rooms where it serves a member, sorted. The cluster's rooms are
    /// Redis's (`listRooms` reads them); a node keeps only what delivering to its own clients
    /// takes.
    var clusterRoomNames: [String] {
        cluster.rooms.filter { !$0.value.members.isEmpty }.keys.sorted()
    }

    /// `memberNicks(of:)` on a node: the members of `room` it serves, in the order their `joined`
    /// was delivered (the cluster's joining order among them). The room's members on every node
    /// are Redis's (`who` reads them).
    func clusterMemberNicks(of room: String) -> [String] {
        cluster.rooms[room]?.members.compactMap { nick(of: $0) } ?? []
    }

    /// `id` as the asker of an answer to come.
    func asker(_ id: ClientID) -> ClusterAsker {
        ClusterAsker(id: id, session: cluster.sessions[id.slot] ?? 0)
    }

    /// Whether `asker`'s session is the one in its slot now: a nick claim is answered before its
    /// client is welcomed, so `resolve` would not find it.
    private func isSameSession(_ asker: ClusterAsker) -> Bool {
        cluster.sessions[asker.id.slot] == asker.session
    }

    /// The client an answer is for, if it is still there.
    private func resolve(_ asker: ClusterAsker) -> ClientID? {
        guard cluster.sessions[asker.id.slot] == asker.session, clients.indices.contains(asker.id.slot),
            clients[asker.id.slot]?.nick != nil
        else { return nil }
        return asker.id
    }

    /// Asks the cluster for `request`; with `owing`, its answer is owed to that client, whose
    /// session then does not end before it comes (`endSession`).
    mutating func ask(_ request: ClusterRequest, owing id: ClientID? = nil) {
        cluster.outbox.append(request)
        if let id { cluster.owed[id, default: ClusterState.Owed()].answers += 1 }
    }

    func unavailableText(_ what: String) -> String {
        "\(what): the cluster is unavailable (\(cluster.unavailableReason)); try again"
    }

    // MARK: Ending a session after its answers

    /// `endSession` in a cluster: lets `id` go once it is owed nothing, and returns true, when it
    /// is owed something now; false when it can be disconnected at once.
    mutating func clusterDefersEnd(of id: ClientID, _ disconnection: Disconnection, at now: ServerTime) -> Bool {
        // Already on its way out: the first reason stands.
        guard cluster.departures[id] == nil else { return true }
        guard isOwed(id) else { return false }
        cluster.departures[id] = ClusterState.Departure(
            disconnection: disconnection, since: now, deadline: now.uptimeMillis + limits.lingerTimeout.milliseconds)
        return true
    }

    /// Lets go the clients whose wait for the cluster's answers passed its deadline: Redis did
    /// not answer within the linger timeout, and an outage must not keep connections open.
    mutating func clusterDeparturesDue(at now: ServerTime, into actions: inout [ChatAction]) {
        for (id, departure) in cluster.departures where now.uptimeMillis >= departure.deadline {
            disconnect(id, departure.disconnection, at: now, into: &actions)
        }
    }

    /// Whether the cluster owes `id` an answer to a request it sent, or the delivery of an event
    /// of its own that Redis numbered.
    private func isOwed(_ id: ClientID) -> Bool {
        if cluster.awaiting[id] != nil || cluster.gates[id]?.unresolved.isEmpty == false { return true }
        guard let owed = cluster.owed[id] else { return false }
        // A room no longer followed delivers nothing more.
        return owed.answers > 0 || owed.echoes.contains { room, seq in (cluster.rooms[room]?.lastDelivered ?? .max) < seq }
    }

    /// One answer owed to `id` came (and was given to it); if it was let go and is owed nothing
    /// more, it is disconnected now, after what was given.
    private mutating func paid(_ id: ClientID, into actions: inout [ChatAction]) {
        if var owed = cluster.owed[id] {
            owed.answers -= 1
            cluster.owed[id] = owed.answers <= 0 && owed.echoes.isEmpty ? nil : owed
        }
        departIfPaid(id, into: &actions)
    }

    /// Disconnects `id` if it was let go and is owed nothing more.
    private mutating func departIfPaid(_ id: ClientID, into actions: inout [ChatAction]) {
        guard let departure = cluster.departures[id], !isOwed(id) else { return }
        disconnect(id, departure.disconnection, at: departure.since, into: &actions)
    }

    /// Who sent a room event that a client appends with itself as the sender (a message, an
    /// action, a topic, a `left`, a `nickChanged` under its new nick): whose echo it is.
    private static func author(of frame: Frame) -> String? {
        switch frame {
        case .message(_, _, _, let sender, _), .action(_, _, _, let sender, _): sender
        case .topic(_, _, _, let setBy, _): setBy
        case .left(_, _, _, let nick): nick
        case .nickChanged(_, _, _, _, let new): new
        case .kicked(_, _, _, _, let by, _), .modeChanged(_, _, _, let by, _, _, _): by
        default: nil
        }
    }

    // MARK: Order: a client's frames wait for the events of its earlier requests

    /// What `id`'s frames held for the events of its earlier requests take (`OrderGate`): they
    /// count against its share like the replies queued for it.
    @inlinable
    public func heldReplyBytes(for id: ClientID) -> Int {
        cluster.gates[id]?.heldBytes ?? 0
    }

    /// A request of `id` that Redis answers later: its place in `id`'s order.
    private mutating func issueOrdinal(for id: ClientID) -> UInt64 {
        cluster.gates[id, default: ClusterState.OrderGate()].issue()
    }

    /// `id` asked to append `event` to `room`: until it comes back (or fails), what `id` is sent
    /// next waits for it. Returns the echo's place in `id`'s order; nil when none is expected.
    private mutating func expectEcho(of event: Frame, in room: String, from id: ClientID) -> UInt64? {
        // Only a followed room's events come back.
        guard cluster.rooms[room] != nil, let author = Self.author(of: event), let logged = Self.stamped(event, seq: 1, time: 0)
        else { return nil }
        let echo = ClusterState.PendingEcho(event: logged, sender: asker(id), ordinal: issueOrdinal(for: id))
        cluster.rooms[room]!.pendingEchoes[author, default: []].append(echo)
        return echo.ordinal
    }

    /// The pending echo that a delivered `event` of `room` is, taken off the list: the first
    /// one sent as its author, if the event is that one.
    private mutating func takeEcho(_ event: Frame, in room: String) -> ClusterState.PendingEcho? {
        guard let author = Self.author(of: event) else { return nil }
        return cluster.rooms[room]?.takeEcho(event, author: author)
    }

    /// The pending echo of `sender`'s append of `event` to `room`, which failed, taken off the
    /// list: found by its place in the sender's order, as a client may send one line many
    /// times. An append of an earlier follow of the room has none: the unfollow resolved it.
    private mutating func takeFailedEcho(_ event: Frame, in room: String, sender: ClusterAppender) -> ClusterState.PendingEcho? {
        guard sender.ordinal > 0, cluster.rooms[room]?.follow == sender.follow, let author = Self.author(of: event),
            let index = cluster.rooms[room]!.pendingEchoes[author]?.firstIndex(where: { $0.sender == sender.asker && $0.ordinal == sender.ordinal })
        else { return nil }
        let echo = cluster.rooms[room]!.pendingEchoes[author]!.remove(at: index)
        if cluster.rooms[room]!.pendingEchoes[author]!.isEmpty { cluster.rooms[room]!.pendingEchoes[author] = nil }
        return echo
    }

    /// Takes what was produced for `id` (`actions[first...]`) into its order at the place
    /// `after` (nil: after every request it sent so far): it goes now if nothing before that
    /// place waits, or is held there. A disconnection is not held: its client is gone, and with
    /// it what was held for it, which it was never told of.
    mutating func clusterOrder(_ actions: inout [ChatAction], from first: Int, for id: ClientID, after: UInt64? = nil) {
        guard first < actions.count, let issued = cluster.gates[id]?.issued else { return }
        let place = after ?? issued
        // Asked in place: a copy of the gate kept alive here would copy its queues below.
        guard cluster.gates[id]?.isClear(upTo: place) == false else { return }
        let produced = actions[first...]
        actions.removeSubrange(first...)
        for action in produced {
            if case .disconnect = action {
                actions.append(action)
                continue
            }
            let cost = Self.heldCost(of: action)
            cluster.gates[id]!.heldBytes += cost
            cluster.gates[id]!.hold(ClusterState.HeldFrames(after: place, action: action, cost: cost))
            switch action {
            case .send(_, let to), .sendShared(_, let to): if to != id { cluster.holdingForOthers.insert(id) }
            case .broadcast(_, let recipients): if recipients.contains(where: { $0 != id }) { cluster.holdingForOthers.insert(id) }
            case .disconnect: break
            }
        }
    }

    /// `ordinal` of the client `asker` that left is resolved: the frames for others that waited
    /// for it in its orphaned gate go now.
    private mutating func resolveOrphaned(_ ordinal: UInt64, of asker: ClusterAsker, into actions: inout [ChatAction]) {
        guard var gate = cluster.orphanedGates.removeValue(forKey: asker) else { return }
        cluster.orphanedBytes -= gate.heldBytes
        gate.resolve(ordinal, into: &actions)
        guard !gate.held.isEmpty else { return }
        cluster.orphanedBytes += gate.heldBytes
        cluster.orphanedGates[asker] = gate
    }

    /// `id` left: what its own gate holds for others is orphaned (`orphanedGates`), with the
    /// ordinals that resolve by themselves no more (its joins: no snapshot comes for it)
    /// resolved now, and what other gates hold for it is dropped. Returns whether its gate was
    /// orphaned: its pending echoes then stay listed, to resolve the rest.
    private mutating func orphanGate(of id: ClientID, asker: ClusterAsker, into actions: inout [ChatAction]) -> Bool {
        var orphaned = false
        if var gate = cluster.gates.removeValue(forKey: id), cluster.holdingForOthers.remove(id) != nil, gate.dropFrames(for: id),
            cluster.orphanedBytes + gate.heldBytes <= budget.held
        {
            for room in cluster.rooms.values { if let ordinal = room.joinOrdinals[id] { gate.resolve(ordinal, into: &actions) } }
            if !gate.held.isEmpty {
                cluster.orphanedBytes += gate.heldBytes
                cluster.orphanedGates[asker] = gate
                orphaned = true
            }
        }
        for holder in cluster.holdingForOthers {
            if cluster.gates[holder]?.dropFrames(for: id) != true { cluster.holdingForOthers.remove(holder) }
        }
        for (other, var gate) in cluster.orphanedGates {
            cluster.orphanedBytes -= gate.heldBytes
            if gate.dropFrames(for: id) {
                cluster.orphanedBytes += gate.heldBytes
                cluster.orphanedGates[other] = gate
            } else {
                cluster.orphanedGates[other] = nil
            }
        }
        return orphaned
    }

    /// `ordinal` of `id` is resolved: the frames that waited for it, and for nothing still to
    /// come, go now.
    private mutating func resolveOrdinal(_ ordinal: UInt64, of id: ClientID, into actions: inout [ChatAction]) {
        guard cluster.gates[id] != nil else { return }
        cluster.gates[id]!.resolve(ordinal, into: &actions)
        departIfPaid(id, into: &actions)
    }

    /// What each recipient of a held broadcast adds to its cost.
    static let heldCostPerRecipient = 8

    /// About what a held action takes in memory: its frames encoded, and its bookkeeping.
    private static func heldCost(of action: ChatAction) -> Int {
        let bookkeeping = 64
        switch action {
        case .send(let frame, _): return bookkeeping + FrameEncoder.encode(frame).count
        case .broadcast(let frame, let recipients):
            return bookkeeping + FrameEncoder.encode(frame).count + heldCostPerRecipient * recipients.count
        case .sendShared(let shared, _): return shared.frames.reduce(bookkeeping) { $0 + FrameEncoder.encode($1).count }
        case .disconnect: return bookkeeping
        }
    }

    // MARK: Requests from clients

    /// Handles `frame` from the welcomed `id` the cluster's way; false for frames that are
    /// handled as on a server on its own (pings, goodbye, a `tell` to a client of this node …).
    mutating func clusterReceived(
        _ frame: Frame, size: Int, from id: ClientID, nick: String, at now: ServerTime, into actions: inout [ChatAction]
    ) -> Bool {
        switch frame {
        case .kick(let room, let target, let reason):
            clusterKick(target, from: room, reason: reason, id: id, nick: nick, size: size, into: &actions)
        case .setMode(let room, let mode, let on, let argument):
            clusterSetMode(mode, on: on, argument: argument, in: room, id: id, nick: nick, size: size, into: &actions)
        case .invite(let room, let target):
            clusterInvite(target, to: room, id: id, nick: nick, into: &actions)
        case .listBans(let room):
            clusterListBans(of: room, id: id, into: &actions)
        case .serverBan(let on, let mask, let reason):
            clusterServerBan(mask, on: on, reason: reason, id: id, nick: nick, into: &actions)
        case .kill(let target, let reason):
            // A client of this node is ended here, as on a server on its own.
            if nicks[ChatName.nickKey(target)].flatMap({ self.nick(of: $0) }) != nil { return false }
            clusterKill(target, reason: reason, id: id, nick: nick, into: &actions)
        case .tell(let recipient, let text):
            if nicks[ChatName.nickKey(recipient)].flatMap({ self.nick(of: $0) }) != nil {
                // Served here: as on a server on its own.
                return false
            }
            guard cluster.available else {
                refuse(.tell, .unavailable, unavailableText("not delivered to \(recipient)"), to: id, into: &actions)
                return true
            }
            ask(.direct(.direct(sender: nick, recipient: recipient, time: now.wallMillis, text: text), sender: asker(id)), owing: id)
            // Its copy (or refusal) comes from Redis; what it is sent next waits for it. The
            // recipient's node hears it after the events of this client's earlier appends: Redis
            // runs the scripts in the order this node sent them, and publishes in that order.
            let ordinal = issueOrdinal(for: id)
            cluster.gates[id]!.directs.append(ordinal)
        case .setAway(let text):
            clients[id.slot]?.away = text.isEmpty ? nil : text
            actions.append(.send(.away(nick: nick, text: text), to: id))
            // Accepted at once, as on a server on its own; while Redis is away the node keeps the
            // latest one and sends it when Redis is back, so other nodes' senders see it then.
            ask(.setAway(nick: nick, text: text))
        case .listRooms:
            guard cluster.available else {
                refuse(.listRooms, .unavailable, unavailableText("cannot list the rooms now"), to: id, into: &actions)
                return true
            }
            cluster.awaiting[id] = .read
            ask(.listRooms(asker(id)), owing: id)
        case .who(let room):
            guard cluster.available else {
                refuse(.who, .unavailable, unavailableText("cannot list #\(room) now"), to: id, into: &actions)
                return true
            }
            cluster.awaiting[id] = .read
            ask(.members(room: room, asker(id), withModes: version(of: id) >= 4), owing: id)
        case .requestHistory(let room, let count):
            let read = recentMessages(before: 0, count: min(Int(count), limits.historySize))
            clusterHistory(of: room, id: id, read, request: .requestHistory, into: &actions)
        case let .fetchHistory(room, direction, seq, limit):
            let read = ClusterHistoryRead.page(direction, from: seq, limit: min(Int(limit), limits.historySize))
            clusterHistory(of: room, id: id, read, request: .fetchHistory, into: &actions)
        default:
            return false
        }
        return true
    }

    /// Asks Redis to append `event` — a `left`, a line or a topic that `id` sent in a frame of
    /// `size` bytes, admitted by `roomEventRefusal`, or a kick or a mode change — to `room`'s log,
    /// if the room's moderation lets it (`moderation`; for a line or a topic, the checks that a
    /// server on its own makes in `roomEventRefusal`, made where the room's roles are); it is
    /// delivered when it comes back (`clusterDeliver`), and what `id` is sent meanwhile waits for
    /// that echo.
    mutating func clusterAppend(_ event: Frame, in room: String, from id: ClientID, size: Int, moderation: ModerationCheck? = nil) {
        var change = ClusterChange.none
        var moderation = moderation
        switch event {
        case .left(_, _, _, let nick):
            // A member for the room until its `left` arrives; its next requests wait for it.
            cluster.rooms[room]?.leaving.insert(id)
            cluster.awaiting[id] = .leave(room)
            change = .leave(nick: nick)
        case .topic(_, _, _, let setBy, _):
            change = .topic
            moderation = .setTopic(by: setBy, admin: isServerOperator(id))
        case .message(_, _, _, let sender, _), .action(_, _, _, let sender, _):
            moderation = .speak(nick: sender)
        case .kicked(_, _, _, let nick, _, _):
            change = .kick(nick: nick)
        case .nickChanged(_, _, _, let old, let new):
            change = .rename(old: old, new: new)
        default:
            break
        }
        let charge = chargeFanout(of: id, size: size, in: room)
        let ordinal = expectEcho(of: event, in: room, from: id)
        let sender = ClusterAppender(asker: asker(id), follow: cluster.rooms[room]?.follow ?? 0, ordinal: ordinal ?? 0)
        ask(.append(room: room, event: event, change: change, sender: sender, charge: charge, moderation: moderation), owing: id)
    }

    /// Claims `nick` for the handshaking `id` in the cluster; it is reserved here meanwhile, so two
    /// clients of this node cannot both get it (the cluster's claim is per node).
    /// `claimant` `.ghost`: `id` logged in to the nick's account (`clusterCompleteLogin`).
    mutating func clusterClaim(
        _ nick: String, for id: ClientID, version: UInt16, as claimant: NickClaimant = .guest, at now: ServerTime,
        into actions: inout [ChatAction]
    ) {
        guard cluster.available else {
            let refusal = Disconnection(code: .unavailable, frameType: .hello, reason: unavailableText("cannot check the nick \(nick) now"))
            disconnect(id, refusal, at: now, into: &actions)
            return
        }
        nicks[ChatName.nickKey(nick)] = id
        cluster.awaiting[id] = .hello(nick: nick, version: version)
        cluster.sessions[id.slot] = cluster.nextSession
        cluster.nextSession += 1
        ask(.claimNick(asker(id), nick: nick, claimant: claimant))
    }

    /// `changeNick` on a cluster node, for a nick no client of this node holds: claimed in the
    /// cluster first.
    /// `claimant` `.ghost`: `id` logged in to `newNick`'s account, which takes it.
    mutating func clusterChangeNick(
        of id: ClientID, from oldNick: String, to newNick: String, as claimant: NickClaimant = .guest, at now: ServerTime,
        into actions: inout [ChatAction]
    ) {
        let newKey = ChatName.nickKey(newNick)
        guard cluster.available else {
            if claimant == .ghost {
                clients[id.slot]?.account = nil
                refuse(.login, .unavailable, unavailableText("cannot take the nick \(newNick) now"), to: id, into: &actions)
            } else {
                refuse(.changeNick, .unavailable, unavailableText("cannot change your nick now"), to: id, into: &actions)
            }
            return
        }
        if newKey == ChatName.nickKey(oldNick) {
            // Its own nick in other letters: nothing to claim.
            rename(id, from: oldNick, to: newNick, at: now, into: &actions)
            return
        }
        nicks[newKey] = id
        cluster.awaiting[id] = .nickChange(newNick)
        ask(.claimNick(asker(id), nick: newNick, claimant: claimant))
    }

    /// `join` on a cluster node, once `joinRefusal` let it through: Redis appends the `joined`
    /// and answers with the room's snapshot.
    mutating func clusterJoin(
        _ room: String, id: ClientID, nick: String, size: Int, key: String?, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        let request: FrameType = key == nil ? .join : .joinWithKey
        guard cluster.available else {
            refuse(request, .unavailable, unavailableText("cannot join #\(room) now"), to: id, into: &actions)
            return
        }
        if let state = cluster.rooms[room], state.joinOrdinals[id] != nil || state.leaving.contains(id) {
            // Kicked while what it is told of the room was still being read (a part waits for its
            // `left` instead, `Awaited.leave`): a second join's place in its order would be the
            // first's, whose arrival then never goes.
            refuse(request, .unavailable, "cannot join #\(room) yet: your last join there is still on its way; try again", to: id, into: &actions)
            return
        }
        if cluster.rooms[room]?.departedJoins.contains(where: { $0.nickKey == ChatName.nickKey(nick) }) == true {
            // An earlier session of the nick left with its join on the way (`departedJoins`).
            refuse(request, .unavailable, "cannot join #\(room) yet: an earlier join as \(nick) is still on its way; try again", to: id, into: &actions)
            return
        }
        // Keys count in the room's and the address's windows here, as on a server on its own
        // (per node: a guesser that spreads over nodes gets each node's allowance) — counted
        // before Redis compares the key, and given back unless it was wrong (`clusterJoinAppended`).
        if key != nil, let refusal = admitKeyGuess(from: id, room: room, at: now) {
            refuse(request, .throttled, Self.guessRefusalReason(refusal, room: room), to: id, into: &actions)
            return
        }
        guard let client = clients[id.slot] else { return }
        // The room's bans, invite-only mode, key and limit are the cluster's: the join is decided
        // against them as Redis holds them when the `joined` is appended (ClusterAdmission).
        let admission = ModerationCheck.admit(
            account: client.account ?? "", key: key ?? "", inviteKey: ChatName.nickKey(nick), address: client.address,
            admin: isServerOperator(id))
        // The joiner hears its own `joined` too.
        let charge = chargeFanout(of: id, size: size, in: room, joining: true)
        clients[id.slot]?.rooms.append(room)
        if cluster.rooms[room] == nil {
            cluster.rooms[room] = ClusterState.Room(follow: cluster.nextFollow)
            cluster.nextFollow += 1
        }
        cluster.rooms[room]!.joining[id] = ChatName.nickKey(nick)
        // Its `joined` and what it is told of the room come from Redis; what it is sent next waits.
        cluster.rooms[room]!.joinOrdinals[id] = issueOrdinal(for: id)
        cluster.awaiting[id] = .join(room)
        if key != nil { cluster.keyedJoins.insert(id) }
        // Owed until its `joined` is delivered (then its snapshot is, until it is read).
        ask(.join(room: room, asker(id), nick: nick, charge: charge, admission: admission), owing: id)
    }

    /// Charges `id`'s address, now, for its frame of `size` bytes delivered to every member of
    /// `room` on every node as this node knows them (and to the joiner itself, `joining`), so its
    /// next frame waits if that puts the address in debt; nil when fan-out is not limited.
    private mutating func chargeFanout(of id: ClientID, size: Int, in room: String, joining: Bool = false) -> FanoutCharge? {
        guard limits.addressFanoutRate > 0, let address = clients[id.slot]?.address else { return nil }
        let known = cluster.rooms[room]
        let memberCount = known?.memberCount ?? 0
        let deliveries = max(memberCount, known?.members.count ?? 0) + (joining ? 1 : 0)
        let charge = FanoutCharge(
            address: address, bytesPerDelivery: size + Self.deliveryOverhead, deliveries: max(deliveries, 1), memberCount: memberCount)
        chargeFanout(of: address, bytesPerDelivery: charge.bytesPerDelivery, deliveries: charge.deliveries)
        return charge
    }

    /// What a server on its own sends a version 1 client of its history before `seq`: the
    /// newest `count` messages of what a room's memory keeps.
    private func recentMessages(before seq: UInt64, count: Int) -> ClusterHistoryRead {
        .recentMessages(before: seq, count: count, window: limits.historySize, bytes: budget.historyPerRoom)
    }

    private mutating func clusterHistory(
        of room: String, id: ClientID, _ read: ClusterHistoryRead, request: FrameType, into actions: inout [ChatAction]
    ) {
        guard isMember(id, of: room), cluster.rooms[room]?.members.contains(id) == true else {
            refuse(request, .notInRoom, "you are not in #\(room)", to: id, into: &actions)
            return
        }
        guard cluster.available else {
            refuse(request, .unavailable, unavailableText("cannot read the history of #\(room) now"), to: id, into: &actions)
            return
        }
        cluster.awaiting[id] = .read
        ask(.history(room: room, asker(id), read, request: request), owing: id)
    }

    /// `id` left this node (`client` is what was known of it): its rooms hear it quit, through
    /// the cluster, and its nick is let go.
    mutating func clusterDeparted(
        _ id: ClientID, client: ClientState, reason: String, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        let departed = asker(id)
        let awaited = cluster.awaiting.removeValue(forKey: id)
        // A newcomer in its slot must not be told of its login.
        cluster.loggingIn[id] = nil
        cluster.sessions[id.slot] = nil
        cluster.owed[id] = nil
        cluster.departures[id] = nil
        // What was held for it goes with it (it was told nothing of it); what it held for others
        // goes on without it.
        let orphaned = orphanGate(of: id, asker: departed, into: &actions)
        if case .hello(let nick, _) = awaited, nicks[ChatName.nickKey(nick)] == id {
            // Its claim may still succeed: `clusterNickClaimed` lets it go then.
            nicks[ChatName.nickKey(nick)] = nil
        }
        if case .nickChange(let newNick) = awaited, nicks[ChatName.nickKey(newNick)] == id {
            nicks[ChatName.nickKey(newNick)] = nil
        }
        var emptied: [String] = []
        for name in cluster.rooms.keys {
            guard var room = cluster.rooms[name] else { continue }
            if let key = room.joining.removeValue(forKey: id) { room.departedJoins.append((departed, key)) }
            room.snapshotting[id] = nil
            room.leaving.remove(id)
            room.joinOrdinals[id] = nil
            if !room.logNicks.isEmpty { room.logNicks = room.logNicks.filter { $0.value != id } }
            room.heldEvents[id] = nil
            // A next client in its slot must not have its echoes taken for these.
            if !room.owedEchoes.isEmpty { room.owedEchoes = room.owedEchoes.filter { $0.value != id } }
            // Its events still come, and wait for nothing — unless frames for others wait for
            // them: a next holder of its nick must not wait behind them (it does not while they
            // stay listed either: they come first, being appended first).
            for (author, echoes) in room.pendingEchoes where !orphaned && echoes.contains(where: { $0.sender.id == id }) {
                let kept = echoes.filter { $0.sender.id != id }
                room.pendingEchoes[author] = kept.isEmpty ? nil : Deque(kept)
            }
            if let index = room.members.firstIndex(of: id) { room.members.remove(at: index) }
            cluster.rooms[name] = room
            if room.isEmpty { emptied.append(name) }
        }
        // After its quits (below): a room it had left but whose snapshot it still waited for
        // is followed no longer either.
        defer { for name in emptied { unfollowIfEmpty(name, into: &actions) } }
        guard let nick = client.nick else { return }
        nicks[ChatName.nickKey(nick)] = nil
        // Every room it was in or on its way into: a `joined` already appended gets its `quit`
        // (a leave of a nick that is no member appends nothing). The quits go before the
        // release, on the same connection, so whoever takes the nick next finds them done.
        var rooms = client.rooms
        if case .join(let joining) = awaited, !rooms.contains(joining) { rooms.append(joining) }
        for room in rooms {
            let event = Frame.quit(room: room, seq: 0, time: 0, nick: nick, reason: reason)
            ask(.append(room: room, event: event, change: .leave(nick: nick), sender: nil, charge: nil, moderation: nil))
        }
        ask(.releaseNick(nick))
    }

    /// The node is leaving the cluster (it shuts down): every client still known quits its rooms
    /// with `reason` and lets its nick go, through the cluster, as if it had disconnected.
    public mutating func clusterDepartAll(reason: String, at now: ServerTime) {
        guard isClustered else { return }
        // Every client goes: what one held for another is sent to no one.
        var unsent: [ChatAction] = []
        for slot in clients.indices {
            guard let client = clients[slot], client.nick.map({ nicks[ChatName.nickKey($0)] == ClientID(slot) }) ?? true else { continue }
            clusterDeparted(ClientID(slot), client: client, reason: reason, at: now, into: &unsent)
        }
    }

    /// The cluster took this node for dead and let its clients go (their nicks freed, their
    /// quits announced): each is disconnected with a fatal `unavailable` that says so, to connect
    /// again (here or to another node) and join its rooms anew.
    public mutating func clusterReaped(at now: ServerTime, into actions: inout [ChatAction]) {
        guard isClustered else { return }
        let reason =
            "this server lost touch with the cluster for longer than its node timeout, and the cluster let its clients go; "
            + "connect again"
        for slot in clients.indices where clients[slot] != nil {
            disconnect(ClientID(slot), Disconnection(code: .unavailable, reason: reason), at: now, into: &actions)
        }
    }

    private mutating func unfollowIfEmpty(_ name: String, into actions: inout [ChatAction]) {
        guard let room = cluster.rooms[name], room.isEmpty else { return }
        cluster.rooms[name] = nil
        ask(.unfollow(room: name))
        // Echoes of it still owed will not come: a later follow of the name numbers anew.
        for id in Set(room.owedEchoes.values) where cluster.owed[id]?.echoes[name] != nil {
            cluster.owed[id]!.echoes[name] = nil
            if cluster.owed[id]!.answers <= 0, cluster.owed[id]!.echoes.isEmpty { cluster.owed[id] = nil }
            departIfPaid(id, into: &actions)
        }
        // Its events are heard here no more: what waits behind this node's appends to it goes
        // now — a member kicked just as it renamed has its `nickChanged` still on the way.
        for echoes in room.pendingEchoes.values {
            for echo in echoes {
                if let id = resolve(echo.sender) {
                    resolveOrdinal(echo.ordinal, of: id, into: &actions)
                } else {
                    resolveOrphaned(echo.ordinal, of: echo.sender, into: &actions)
                }
            }
        }
    }

    // MARK: Answers from the cluster

    /// The cluster answered `asker`'s nick claim: `claimed` true (it is this node's now), false
    /// (a client of another node holds it), or an error (Redis could not say).
    public mutating func clusterNickClaimed(
        _ asker: ClusterAsker, nick: String, _ outcome: Result<Bool, ClusterFailure>, at now: ServerTime,
        into actions: inout [ChatAction]
    ) {
        let id = asker.id
        let key = ChatName.nickKey(nick)
        let awaited = isSameSession(asker) ? cluster.awaiting[id] : nil
        let stillWanted: Bool
        switch awaited {
        case .hello(let wanted, _), .nickChange(let wanted): stillWanted = ChatName.nickKey(wanted) == key
        default: stillWanted = false
        }
        guard stillWanted, let awaited else {
            // Its client left meanwhile: what was claimed for it is let go.
            if case .success(true) = outcome, nicks[key] == nil { ask(.releaseNick(nick)) }
            return
        }
        cluster.awaiting[id] = nil
        let loggingIn = cluster.loggingIn.removeValue(forKey: id)
        if settleNickClaim(of: id, nick: nick, awaited: awaited, outcome, loggingIn: loggingIn, at: now, into: &actions),
            let loggingIn
        {
            // After the welcome or the nick change, as on a server on its own: after the
            // `nickChanged`s its rename appended too (docs/PROTOCOL.md), so in the place after
            // every request sent so far.
            let firstAction = actions.count
            actions.append(.send(.loggedIn(account: loggingIn), to: id))
            clusterOrder(&actions, from: firstAction, for: id)
            clusterLoggedInAsMember(id)
        }
        departIfPaid(id, into: &actions)
    }

    /// What `clusterNickClaimed` tells `id` of its claim, `awaited`, of `nick`, in its order:
    /// after the events of the requests before it, and before the `nickChanged`s of its own
    /// rename (their appends, asked here, take the next places). Returns whether a login that
    /// waited for the claim is done, its nick taken.
    private mutating func settleNickClaim(
        of id: ClientID, nick: String, awaited: ClusterState.Awaited, _ outcome: Result<Bool, ClusterFailure>, loggingIn: String?,
        at now: ServerTime, into actions: inout [ChatAction]
    ) -> Bool {
        let key = ChatName.nickKey(nick)
        let firstAction = actions.count
        let place = cluster.gates[id]?.issued ?? 0
        defer { clusterOrder(&actions, from: firstAction, for: id, after: place) }
        if loggingIn != nil, case .nickChange = awaited, case .failure(let failure) = outcome {
            nicks[key] = nil
            clients[id.slot]?.account = nil
            refuse(.login, .unavailable, "cannot take the nick \(nick) now: \(failure.reason); try again", to: id, into: &actions)
            return false
        }
        switch (awaited, outcome) {
        case (.hello(_, let version), .success(true)):
            welcome(id, nick: nick, version: version, into: &actions)
        case (.hello, .success(false)):
            nicks[key] = nil
            disconnect(id, Disconnection(code: .nickTaken, frameType: .hello, reason: "nick \(nick) is taken"), at: now, into: &actions)
        case (.hello, .failure(let failure)):
            nicks[key] = nil
            let refusal = Disconnection(
                code: .unavailable, frameType: .hello, reason: "cannot check the nick \(nick) now: \(failure.reason); try again")
            disconnect(id, refusal, at: now, into: &actions)
        case (.nickChange, .success(true)):
            guard let oldNick = self.nick(of: id) else { return false }
            rename(id, from: oldNick, to: nick, at: now, into: &actions)
        case (.nickChange, .success(false)):
            nicks[key] = nil
            refuse(.changeNick, .nickTaken, "nick \(nick) is taken", to: id, into: &actions)
        case (.nickChange, .failure(let failure)):
            nicks[key] = nil
            refuse(.changeNick, .unavailable, "cannot change your nick now: \(failure.reason); try again", to: id, into: &actions)
        case (.join, _), (.leave, _), (.read, _):
            break
        }
        guard case .success(true) = outcome else { return false }
        return true
    }

    /// The cluster refused `id`'s claim of `nick`: it is a registered nick and `id` a guest. A
    /// version 3 `hello` waits for the login its client sends with it (`helloForReservedNick`
    /// decides that on a server on its own, which knows its accounts); any other is refused
    /// `nickReserved`.
    public mutating func clusterNickReserved(_ asker: ClusterAsker, nick: String, at now: ServerTime, into actions: inout [ChatAction]) {
        let id = asker.id
        let key = ChatName.nickKey(nick)
        guard isSameSession(asker), let awaited = cluster.awaiting[id] else { return }
        switch awaited {
        case .hello(let wanted, let version) where ChatName.nickKey(wanted) == key:
            cluster.awaiting[id] = nil
            nicks[key] = nil
            let reason = "\(nick) is a registered nick; log in to its account to use it"
            guard version >= 3 else {
                disconnect(id, Disconnection(code: .nickReserved, frameType: .hello, reason: reason), at: now, into: &actions)
                return
            }
            clients[id.slot]?.pendingHello = (wanted, version, now.uptimeMillis)
            clients[id.slot]?.version = min(version, WireProtocol.version)
        case .nickChange(let wanted) where ChatName.nickKey(wanted) == key:
            cluster.awaiting[id] = nil
            nicks[key] = nil
            let firstAction = actions.count
            let place = cluster.gates[id]?.issued ?? 0
            defer { clusterOrder(&actions, from: firstAction, for: id, after: place) }
            refuse(.changeNick, .nickReserved, "\(wanted) is a registered nick; log in to its account to use it", to: id, into: &actions)
            departIfPaid(id, into: &actions)
        default:
            break
        }
    }

    /// Another node's client logged in to the account of the nick `key` and took it back: the
    /// client of this node that holds it is disconnected `ghosted`.
    public mutating func clusterGhost(nickKey key: String, at now: ServerTime, into actions: inout [ChatAction]) {
        // Only a client welcomed with the nick: one still claiming it here is no holder.
        guard let holder = nicks[key], let nick = nick(of: holder), ChatName.nickKey(nick) == key else { return }
        let reason = "\(nick) logged in from another connection and took the nick back"
        disconnect(holder, Disconnection(code: .ghosted, reason: reason), at: now, into: &actions)
    }

    /// The append of `asker`'s `joined` in `room` is done: nil, or why it failed (it is not in
    /// the room then, and is told so: the room's moderation kept it out, or Redis could not be
    /// asked).
    public mutating func clusterJoinAppended(
        _ asker: ClusterAsker, room: String, failure: ClusterFailure?, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        if failure != nil, let departed = cluster.rooms[room]?.departedJoins.firstIndex(where: { $0.asker == asker }) {
            // No `joined` comes for a client that left: a next session of its nick may join.
            cluster.rooms[room]!.departedJoins.remove(at: departed)
            return
        }
        guard let id = resolve(asker), cluster.awaiting[id] == .join(room) else { return }
        cluster.awaiting[id] = nil
        let keyed = cluster.keyedJoins.remove(id) != nil
        if keyed, failure?.code != .badRoomKey { giveBackKeyGuess(from: id, room: room) }
        guard let failure else { return }
        clients[id.slot]?.rooms.removeAll { $0 == room }
        cluster.rooms[room]?.joining[id] = nil
        let ordinal = cluster.rooms[room]?.joinOrdinals.removeValue(forKey: id)
        let firstAction = actions.count
        let reason = failure.code == .unavailable ? "cannot join #\(room) now: \(failure.reason); try again" : failure.reason
        refuse(keyed ? .joinWithKey : .join, failure.code, reason, to: id, into: &actions)
        if let ordinal {
            clusterOrder(&actions, from: firstAction, for: id, after: ordinal - 1)
            resolveOrdinal(ordinal, of: id, into: &actions)
        }
        unfollowIfEmpty(room, into: &actions)
        paid(id, into: &actions)
    }

    /// An event charged with `charge` was appended, and the room has `memberCount` members on all
    /// nodes after it; `audience` of them (and the leaver, for a leave) get it. What the charge
    /// missed is charged now — a room that grew since the node last knew it — and later frames
    /// are charged by the new count. An overcharge (a room that shrank) is not given back: it is
    /// at most the lines in flight while it shrank.
    public mutating func clusterFanoutCounted(room: String, memberCount: Int, audience: Int, charge: FanoutCharge) {
        cluster.rooms[room]?.memberCount = memberCount
        if audience > charge.deliveries {
            chargeFanout(of: charge.address, bytesPerDelivery: charge.bytesPerDelivery, deliveries: audience - charge.deliveries)
        }
    }

    /// An append `sender` asked for failed: it is told its request was not carried out.
    public mutating func clusterAppendFailed(
        _ event: Frame, in room: String, sender appender: ClusterAppender, failure: ClusterFailure, into actions: inout [ChatAction]
    ) {
        let asker = appender.asker
        // Off the list even if its sender left: a stale first entry would hold up the next
        // holder of the nick.
        let echo = takeFailedEcho(event, in: room, sender: appender)
        guard let sender = resolve(asker) else {
            if let echo { resolveOrphaned(echo.ordinal, of: asker, into: &actions) }
            return
        }
        let request: FrameType?
        switch event {
        case .message: request = .say
        case .action: request = .emote
        case .topic: request = .setTopic
        case .left:
            request = .part
            // Still a member as far as the cluster knows: a member for its requests again too.
            if cluster.awaiting[sender] == .leave(room) { cluster.awaiting[sender] = nil }
            if cluster.rooms[room]?.leaving.remove(sender) != nil, !isMember(sender, of: room) {
                clients[sender.slot]?.rooms.append(room)
            }
        // Its nick is changed all the same (`nickAccepted` said so); the node appends the event
        // again once Redis is back. Nothing to tell, and nothing waits for it any more.
        case .nickChanged: request = nil
        case .kicked: request = .kick
        case .modeChanged: request = .setMode
        default: request = FrameType.none
        }
        // Its error goes where the request was sent, and what waited for it then.
        let firstAction = actions.count
        if let request { refuse(request, failure.code, "#\(room): not done: \(failure.reason)", to: sender, into: &actions) }
        clusterOrder(&actions, from: firstAction, for: sender, after: echo.map { $0.ordinal - 1 })
        if let echo { resolveOrdinal(echo.ordinal, of: sender, into: &actions) }
        paid(sender, into: &actions)
    }

    /// Redis numbered `seq` the event `sender` asked to append to `room`: it is owed that event's
    /// delivery here (its echo), unless that came first or the room was followed anew since.
    public mutating func clusterAppended(room: String, seq: UInt64, sender appender: ClusterAppender, into actions: inout [ChatAction]) {
        guard let sender = resolve(appender.asker) else { return }
        if let followed = cluster.rooms[room], followed.follow == appender.follow, followed.lastDelivered < seq {
            let owed = cluster.owed[sender]?.echoes[room] ?? 0
            cluster.owed[sender, default: ClusterState.Owed()].echoes[room] = max(owed, seq)
            cluster.rooms[room]!.owedEchoes[seq] = sender
        }
        paid(sender, into: &actions)
    }

    /// An event of a followed room, in the room's `seq` order, each once: delivered to this
    /// node's members, encoded once for all of them.
    public mutating func clusterDeliver(
        room name: String, seq: UInt64, time: UInt64, payload: [UInt8], into actions: inout [ChatAction]
    ) {
        guard cluster.rooms[name] != nil, let decoded = try? Frame(decoding: payload) else { return }
        guard let frame = Self.stamped(decoded, seq: seq, time: time), Self.room(of: frame) == name else { return }
        // Taken off the room's list in place, before the room is copied out below.
        let echo = cluster.rooms[name]!.pendingEchoes.isEmpty ? nil : takeEcho(decoded, in: name)
        var room = cluster.rooms[name]!
        room.lastDelivered = seq
        let echoOwner = room.owedEchoes.isEmpty ? nil : room.owedEchoes.removeValue(forKey: seq)
        var newMember: ClientID?
        if case .joined(_, _, _, let nick) = frame, !room.joining.isEmpty || !room.departedJoins.isEmpty,
            let id = room.takeJoiner(ChatName.nickKey(nick), nick: { self.nick(of: $0) }), !room.members.contains(id)
        {
            room.joining[id] = nil
            room.members.append(id)
            room.logNicks[ChatName.nickKey(nick)] = id
            newMember = id
        }
        if case .nickChanged(_, _, _, let old, let new) = frame, !room.logNicks.isEmpty,
            let id = room.logNicks.removeValue(forKey: ChatName.nickKey(old))
        {
            room.logNicks[ChatName.nickKey(new)] = id
        }
        // Members whose snapshot is being read get the event after it; the rest get it now, the
        // member list itself (no copy) when no one waits.
        var recipients = room.members
        if !room.snapshotting.isEmpty {
            recipients = []
            for member in room.members {
                if room.snapshotting[member] != nil {
                    room.snapshotting[member]!.append(frame)
                } else {
                    recipients.append(member)
                }
            }
        }
        // The sender's own event (or a joiner's `joined`) reaches it after what its requests
        // before that one still wait for; the others get it now.
        var ownCopy: (id: ClientID, place: UInt64)?
        if let echo, let id = resolve(echo.sender) { ownCopy = (id, echo.ordinal - 1) }
        if let newMember, let ordinal = room.joinOrdinals[newMember] { ownCopy = (newMember, ordinal - 1) }
        // Where a member's copy waits in its gate, if it must: its own event behind its earlier
        // requests, or any event behind one of this room's that waits there already, so that
        // each member gets the room's events in `seq` order.
        var waiting: [ClientID: UInt64] = [:]
        if let own = ownCopy, let gate = cluster.gates[own.id], !gate.isClear(upTo: own.place) { waiting[own.id] = own.place }
        for (member, place) in room.heldEvents {
            if let gate = cluster.gates[member], !gate.isClear(upTo: place) {
                waiting[member] = max(waiting[member] ?? 0, place)
            } else {
                room.heldEvents[member] = nil
            }
        }
        var held: [ClientID] = []
        if !waiting.isEmpty {
            held = recipients.filter { waiting[$0] != nil }
            if !held.isEmpty { recipients.removeAll { waiting[$0] != nil } }
        }
        if !recipients.isEmpty { deliverRoomEvent(frame, to: recipients, into: &actions) }
        for id in held {
            let place = waiting[id]!
            let firstAction = actions.count
            actions.append(.send(frame, to: id))
            clusterOrder(&actions, from: firstAction, for: id, after: place)
            room.heldEvents[id] = place
        }
        if let newMember, let version = clients[newMember.slot]?.version {
            // What it is told of the room waits for a read; what happens meanwhile waits for it.
            // The join it was owed an answer to is answered by its `joined`; the snapshot is owed
            // in its place.
            room.snapshotting[newMember] = []
            // The replay a joiner of its version gets on a server on its own.
            let history =
                version >= 2
                ? ClusterHistoryRead.page(.before, from: seq, limit: limits.historySize)
                : recentMessages(before: seq, count: limits.historySize)
            ask(.snapshot(room: name, asker(newMember), seq: seq, history: history))
        }
        if case .left(_, _, _, let nick) = frame, let id = room.logNicks[ChatName.nickKey(nick)] ?? nicks[ChatName.nickKey(nick)],
            room.leaving.contains(id), let index = room.members.firstIndex(of: id)
        {
            room.leaving.remove(id)
            room.logNicks = room.logNicks.filter { $0.value != id }
            room.heldEvents[id] = nil
            // Its next join waits for its snapshot too, if that is still being read: the two
            // joins' places in its order would be one.
            if cluster.awaiting[id] == .leave(name), room.snapshotting[id] == nil { cluster.awaiting[id] = nil }
            // The leaver got its own `left` as the acknowledgement above — or, if its snapshot is
            // still being read, gets it after the snapshot, with what was held for it.
            room.members.remove(at: index)
        }
        if case .kicked(_, _, _, let nick, _, _) = frame, let id = room.logNicks[ChatName.nickKey(nick)] ?? nicks[ChatName.nickKey(nick)],
            let index = room.members.firstIndex(of: id)
        {
            room.logNicks = room.logNicks.filter { $0.value != id }
            // Kicked, from whichever node: it got the kick as its last event of the room above
            // (or behind its snapshot), and gets nothing of the room after it.
            room.members.remove(at: index)
            room.leaving.remove(id)
            room.heldEvents[id] = nil
            if cluster.awaiting[id] == .leave(name), room.snapshotting[id] == nil { cluster.awaiting[id] = nil }
            clients[id.slot]?.rooms.removeAll { $0 == name }
        }
        if case .modeChanged(_, _, _, let by, .ban, true, let text) = frame, case .success(let ban) = Self.modeArgument(.ban, on: true, argument: text),
            let mask = ban.mask
        {
            // A new ban kicks the members it matches who are not ops: each node its own, through
            // the log, sparing ops there (Redis knows the roles).
            for member in room.members {
                guard let client = clients[member.slot], let memberNick = client.nick,
                    mask.matches(accountKey: client.account, nick: memberNick, address: client.address)
                else { continue }
                let kick = Frame.kicked(room: name, seq: 0, time: 0, nick: memberNick, by: by, reason: Self.banKickReason(mask, reason: ban.reason))
                ask(.append(
                    room: name, event: kick, change: .kick(nick: memberNick), sender: nil, charge: nil,
                    moderation: .kick(by: by, account: "", admin: true, sparingOps: true)))
            }
        }
        cluster.rooms[name] = room
        // What its sender was sent after asking for it may go now (a join waits for its snapshot).
        if let echo {
            if let id = resolve(echo.sender) {
                resolveOrdinal(echo.ordinal, of: id, into: &actions)
            } else {
                resolveOrphaned(echo.ordinal, of: echo.sender, into: &actions)
            }
        }
        unfollowIfEmpty(name, into: &actions)
        if let id = echoOwner, let echo = cluster.owed[id]?.echoes[name], echo <= seq {
            // Its own event, delivered above (or held for it behind its snapshot, which it is owed).
            cluster.owed[id]!.echoes[name] = nil
            if cluster.owed[id]!.answers == 0, cluster.owed[id]!.echoes.isEmpty { cluster.owed[id] = nil }
            departIfPaid(id, into: &actions)
        }
    }

    /// The snapshot of `room` that `asker` waited for since its `joined`, or why it could not be
    /// read.
    public mutating func clusterSnapshotRead(
        room name: String, _ asker: ClusterAsker, _ result: Result<ClusterRoomSnapshot, ClusterFailure>,
        into actions: inout [ChatAction]
    ) {
        guard let id = resolve(asker), let held = cluster.rooms[name]?.snapshotting[id] else { return }
        cluster.rooms[name]!.snapshotting[id] = nil
        // It left while the snapshot was read, and its `left` came: its next join may go now.
        if cluster.awaiting[id] == .leave(name), cluster.rooms[name]!.leaving.contains(id) == false { cluster.awaiting[id] = nil }
        let ordinal = cluster.rooms[name]!.joinOrdinals.removeValue(forKey: id)
        let firstAction = actions.count
        switch result {
        case .success(let snapshot):
            let arrival = RoomArrival(
                epoch: snapshot.epoch, firstSeq: snapshot.firstSeq, lastSeq: snapshot.lastSeq, members: snapshot.members,
                modes: snapshot.modes, topic: snapshot.topic, history: .page(snapshot.history, complete: snapshot.complete))
            sendArrival(arrival, in: name, to: id, into: &actions)
            clusterAnnounceRolesTaken(in: name, by: id, modes: snapshot.modes)
        case .failure(let failure):
            refuse(.join, failure.code, "#\(name): cannot read the room's state now: \(failure.reason)", to: id, into: &actions)
        }
        for frame in held { actions.append(.send(frame, to: id)) }
        // The replay costs its address what a joiner's replay costs on a server on its own.
        chargeReplies(to: id, for: actions[firstAction...])
        // It goes after its `joined`, where the join was asked; then what waited for it.
        if let ordinal {
            clusterOrder(&actions, from: firstAction, for: id, after: ordinal - 1)
            if cluster.gates[id]?.isClear(upTo: ordinal - 1) == false { cluster.rooms[name]!.heldEvents[id] = ordinal - 1 }
            resolveOrdinal(ordinal, of: id, into: &actions)
        }
        // A client that left before its snapshot came was the room's last one here.
        unfollowIfEmpty(name, into: &actions)
        paid(id, into: &actions)
    }

    /// The client a read's answer is for, if it is still there; its next request no longer waits.
    mutating func readAnswered(_ asker: ClusterAsker) -> ClientID? {
        guard let id = resolve(asker) else { return nil }
        if cluster.awaiting[id] == .read { cluster.awaiting[id] = nil }
        return id
    }

    /// After a read's answer was appended from `firstAction` on: its address is charged for it,
    /// it waits for the events of the requests before it, and it is paid.
    mutating func settleRead(of id: ClientID, from firstAction: Int, into actions: inout [ChatAction]) {
        chargeReplies(to: id, for: actions[firstAction...])
        clusterOrder(&actions, from: firstAction, for: id)
        paid(id, into: &actions)
    }

    /// The members of `room` that `id` asked for, or why they could not be read.
    /// With `modes` (asked for a version 4 client), the room's settings and roles follow; its
    /// key only for a member or a server operator, as on a server on its own.
    public mutating func clusterMembersRead(
        room: String, _ asker: ClusterAsker, _ result: Result<[String], ClusterFailure>, modes: RoomModes? = nil,
        into actions: inout [ChatAction]
    ) {
        guard let id = readAnswered(asker) else { return }
        let firstAction = actions.count
        defer { settleRead(of: id, from: firstAction, into: &actions) }
        switch result {
        case .success(let nicks):
            sendMembers(nicks, of: room, to: id, into: &actions)
            if var modes, !nicks.isEmpty {
                if !isMember(id, of: room), !isServerOperator(id) { modes.key = "" }
                actions.append(.send(.roomModes(room: room, modes: modes), to: id))
            }
        case .failure(let failure): refuse(.who, failure.code, "cannot list #\(room) now: \(failure.reason)", to: id, into: &actions)
        }
    }

    /// The rooms that `id` asked for (any order), or why they could not be read.
    public mutating func clusterRoomsRead(
        _ asker: ClusterAsker, _ result: Result<[RoomInfo], ClusterFailure>, into actions: inout [ChatAction]
    ) {
        guard let id = readAnswered(asker), let client = clients[id.slot] else { return }
        let firstAction = actions.count
        defer { settleRead(of: id, from: firstAction, into: &actions) }
        switch result {
        case .success(let rooms):
            let paged = client.version >= 2
            let sorted = rooms.sorted { $0.name < $1.name }
            Self.splitIntoFrames(sorted, cost: Self.cost) { part, isLast in
                actions.append(.send(paged ? .roomListPage(complete: isLast, rooms: part) : .roomList(rooms: part), to: id))
            }
        case .failure(let failure):
            refuse(.listRooms, failure.code, "cannot list the rooms now: \(failure.reason)", to: id, into: &actions)
        }
    }

    /// The history `id` asked for with `request` (its `ClusterHistoryRead`'s answer: a page, or
    /// the recent messages for `requestHistory`), or why it could not be read.
    public mutating func clusterHistoryRead(
        room: String, _ asker: ClusterAsker, request: FrameType,
        _ result: Result<(epoch: UInt64, entries: [HistoryEntry], complete: Bool), ClusterFailure>, into actions: inout [ChatAction]
    ) {
        guard let id = readAnswered(asker) else { return }
        let firstAction = actions.count
        defer { settleRead(of: id, from: firstAction, into: &actions) }
        switch result {
        case .success(let page) where request == .requestHistory:
            if page.entries.isEmpty {
                actions.append(.send(.history(room: room, entries: []), to: id))
            } else {
                appendHistoryFrames(room: room, entries: page.entries, to: id, into: &actions)
            }
        case .success(let page):
            actions.append(.send(.historyPage(room: room, epoch: page.epoch, complete: page.complete, entries: page.entries), to: id))
        case .failure(let failure):
            refuse(request, failure.code, "cannot read the history of #\(room) now: \(failure.reason)", to: id, into: &actions)
        }
    }

    /// The direct message `id` sent through the cluster was heard by the recipient's node
    /// (`heard`; with the recipient's away message if it set one), found no one, or failed.
    public mutating func clusterDirectSent(
        _ message: Frame, sender asker: ClusterAsker, _ result: Result<Bool, ClusterFailure>, away: (nick: String, text: String)? = nil,
        into actions: inout [ChatAction]
    ) {
        guard let id = resolve(asker), case .direct(_, let recipient, _, _) = message else {
            // Its sender left: what it held for others behind this `tell` may go.
            if let ordinal = cluster.orphanedGates[asker]?.directs.first {
                cluster.orphanedGates[asker]!.directs.removeFirst()
                resolveOrphaned(ordinal, of: asker, into: &actions)
            }
            return
        }
        let firstAction = actions.count
        // Its copy, or why not, goes where the `tell` was sent; then what waited for it.
        let ordinal = cluster.gates[id]?.directs.popFirst()
        let place = ordinal.map { $0 - 1 }
        defer {
            chargeReplies(to: id, for: actions[firstAction...])
            clusterOrder(&actions, from: firstAction, for: id, after: place)
            if let ordinal { resolveOrdinal(ordinal, of: id, into: &actions) }
            paid(id, into: &actions)
        }
        switch result {
        case .success(true):
            actions.append(.send(message, to: id))
            if let away, version(of: id) >= 2 { actions.append(.send(.away(nick: away.nick, text: away.text), to: id)) }
        case .success(false): refuse(.tell, .noSuchNick, "no one is called \(recipient)", to: id, into: &actions)
        case .failure(let failure): refuse(.tell, failure.code, "not delivered to \(recipient): \(failure.reason)", to: id, into: &actions)
        }
    }

    /// A direct message from another node, for a client of this one (dropped if it has left).
    /// An invitation (`invited`) for a client of this node comes the same way.
    public mutating func clusterDirectReceived(_ payload: [UInt8], into actions: inout [ChatAction]) {
        let recipient: String
        switch try? Frame(decoding: payload) {
        case .direct(_, let nick, _, _)?: recipient = nick
        case .invited(_, let nick, _)?: recipient = nick
        default: return
        }
        guard let id = nicks[ChatName.nickKey(recipient)], nick(of: id) != nil, let message = try? Frame(decoding: payload) else { return }
        if case .invited = message, version(of: id) < 4 { return }
        actions.append(.send(message, to: id))
    }

    // MARK: Frames

    /// `frame` with the `seq` and time the cluster gave it; nil for a frame that is no room event.
    static func stamped(_ frame: Frame, seq: UInt64, time: UInt64) -> Frame? {
        switch frame {
        case .message(let room, _, _, let sender, let text): .message(room: room, seq: seq, time: time, sender: sender, text: text)
        case .action(let room, _, _, let sender, let text): .action(room: room, seq: seq, time: time, sender: sender, text: text)
        case .topic(let room, _, _, let setBy, let text): .topic(room: room, seq: seq, time: time, setBy: setBy, text: text)
        case .joined(let room, _, _, let nick): .joined(room: room, seq: seq, time: time, nick: nick)
        case .left(let room, _, _, let nick): .left(room: room, seq: seq, time: time, nick: nick)
        case .quit(let room, _, _, let nick, let reason): .quit(room: room, seq: seq, time: time, nick: nick, reason: reason)
        case .nickChanged(let room, _, _, let old, let new): .nickChanged(room: room, seq: seq, time: time, old: old, new: new)
        case .kicked(let room, _, _, let nick, let by, let reason):
            .kicked(room: room, seq: seq, time: time, nick: nick, by: by, reason: reason)
        case .modeChanged(let room, _, _, let by, let mode, let on, let argument):
            .modeChanged(room: room, seq: seq, time: time, by: by, mode: mode, on: on, argument: argument)
        default: nil
        }
    }

    /// The bytes a room event is logged as: its frame, encoded with `seq` 1 and time 0 (a frame
    /// cannot carry `seq` 0); `clusterDeliver` stamps the real ones.
    public static func clusterPayload(of event: Frame) -> [UInt8] {
        FrameEncoder.encode(stamped(event, seq: 1, time: 0) ?? event)
    }

    /// The room a room event belongs to.
    package static func room(of frame: Frame) -> String? {
        switch frame {
        case .message(let room, _, _, _, _), .action(let room, _, _, _, _), .topic(let room, _, _, _, _), .joined(let room, _, _, _),
            .left(let room, _, _, _), .quit(let room, _, _, _, _), .nickChanged(let room, _, _, _, _), .kicked(let room, _, _, _, _, _),
            .modeChanged(let room, _, _, _, _, _, _):
            room
        default: nil
        }
    }

    /// The history entry a logged room event makes — messages, actions and topics are history;
    /// joins, leaves and nick changes are not — or nil.
    public static func historyEntry(payload: [UInt8], seq: UInt64, time: UInt64) -> HistoryEntry? {
        switch try? Frame(decoding: payload) {
        case .message(_, _, _, let sender, let text)?: HistoryEntry(kind: .message, seq: seq, time: time, sender: sender, text: text)
        case .action(_, _, _, let sender, let text)?: HistoryEntry(kind: .action, seq: seq, time: time, sender: sender, text: text)
        case .topic(_, _, _, let setBy, let text)?: HistoryEntry(kind: .topic, seq: seq, time: time, sender: setBy, text: text)
        default: nil
        }
    }
}

/// Why the cluster could not do what was asked, as a client is told it.
public struct ClusterFailure: Error, Sendable, Equatable {
    /// The error code: `unavailable` when Redis could not be reached.
    public var code: ErrorCode
    /// What went wrong, for people.
    public var reason: String

    /// Describes a failure.
    public init(code: ErrorCode = .unavailable, reason: String) {
        self.code = code
        self.reason = reason
    }
}
