import ChatProtocol

// MARK: - Reads of the room log
//
// With a store, what memory does not hold is read from it: a room that left memory, when
// someone joins it again, and history pages older than memory holds. Those reads run off the
// event loop (`RoomStore.read`), so the core asks for them (`takeLogReads`) and goes on; the
// server carries them out and hands each answer back (`logReadAnswered`). A client whose request
// waits for a read is served nothing more until it is answered (`isAwaitingLog`), so its replies
// keep the order of its requests; everyone else goes on meanwhile. A cluster node asks its
// Redis the same way (ChatCore+Cluster.swift); in memory mode nothing is ever read.

/// A read the core waits for: the server carries it out with `RoomStore.read` and hands the
/// answer back with `ChatCore.logReadAnswered`, ticket and all.
public struct LogRead: Sendable {
    /// Tells the answer which read it answers.
    public let ticket: UInt64
    /// What to read.
    public let request: RoomRead
}

/// The reads in flight and who waits for them.
@usableFromInline struct LogReads: Sendable {
    /// What a read in flight is for.
    enum Purpose: Sendable {
        /// The room, for the joiners waiting in `loading`.
        case room(String)
        /// A `historyPage` for a client's `fetchHistory`.
        case page(String, HistoryDirection, from: UInt64, for: ClientID)
        /// The stored topic of a room whose topic event a failed commit did not store, while
        /// its topic is still the one of that event (`seq`).
        case topic(String, seq: UInt64)
    }

    /// Reads asked for and not yet taken by the server.
    var outbox: [LogRead] = []
    var nextTicket: UInt64 = 1
    var purposes: [UInt64: Purpose] = [:]
    /// For each room being read back, its ticket and its joiners in the order they asked.
    var loading: [String: (ticket: UInt64, joiners: [ClientID])] = [:]
    /// The ticket each waiting client waits for. A client's entry goes when it leaves, so an
    /// answer never reaches a later client in the same slot.
    @usableFromInline var waiting: [ClientID: UInt64] = [:]

    /// Asks for `request`, for `purpose`; returns its ticket.
    mutating func ask(_ request: RoomRead, for purpose: Purpose) -> UInt64 {
        let ticket = nextTicket
        nextTicket += 1
        outbox.append(LogRead(ticket: ticket, request: request))
        purposes[ticket] = purpose
        return ticket
    }

    /// Takes `id` out of every wait: it left.
    mutating func forget(_ id: ClientID) {
        guard let ticket = waiting.removeValue(forKey: id), case .room(let name) = purposes[ticket] else { return }
        loading[name]?.joiners.removeAll { $0 == id }
    }
}

extension ChatCore {
    /// Takes the reads the core asked for since the last call, in order: the server carries each
    /// out with `RoomStore.read` and hands its answer to `logReadAnswered`.
    public mutating func takeLogReads() -> [LogRead] {
        guard !reads.outbox.isEmpty else { return [] }
        defer { reads.outbox.removeAll() }
        return reads.outbox
    }

    /// Whether `id` waits for a read's answer: the server serves it no further request until
    /// then, so that its replies keep the order of its requests.
    @inlinable
    public func isAwaitingLog(_ id: ClientID) -> Bool { reads.waiting[id] != nil }

    /// The read `ticket` was answered with `answer`: the joiners waiting for a room join it (or
    /// are refused with `storageFailed`), a page goes to its asker.
    public mutating func logReadAnswered(
        _ ticket: UInt64, _ answer: Result<RoomReadAnswer, LogError>, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        guard let purpose = reads.purposes.removeValue(forKey: ticket) else { return }
        switch purpose {
        case .room(let name):
            roomRead(name, answer.map { if case .room(let room) = $0 { room } else { nil } }, at: now, into: &actions)
        case .page(let name, let direction, let seq, let id):
            guard reads.waiting[id] == ticket else { return }
            reads.waiting[id] = nil
            let firstAction = actions.count
            pageRead(of: name, direction, from: seq, for: id, answer, into: &actions)
            chargeReplies(to: id, for: actions[firstAction...])
        case .topic(let name, let seq):
            guard case .success(.room(let stored)) = answer else { return }
            withRoom(name) { room in
                guard room.topic?.seq == seq else { return }
                room.topic = stored?.record.topic.map { ChatRoom.Topic(text: $0.text, setBy: $0.setBy, time: $0.time, seq: $0.seq) }
                room.replayV1 = nil
                room.replayV2 = nil
            }
        }
    }

    /// Asks for the room `name` for the joiner `id`, or adds `id` to the joiners of a read
    /// already under way.
    mutating func awaitRoom(_ name: String, for id: ClientID) {
        if reads.loading[name] == nil {
            let ticket = reads.ask(.room(name, recent: limits.historySize), for: .room(name))
            reads.loading[name] = (ticket, [])
        }
        reads.loading[name]!.joiners.append(id)
        reads.waiting[id] = reads.loading[name]!.ticket
    }

    /// Asks for a page of `name`'s stored history for `id`'s `fetchHistory`.
    mutating func awaitPage(
        of name: String, _ direction: HistoryDirection, from seq: UInt64, limit: Int, for id: ClientID
    ) {
        let request = RoomRead.page(name, direction, from: seq, limit: limit, budget: Self.listFrameBudget, cost: Self.cost)
        reads.waiting[id] = reads.ask(request, for: .page(name, direction, from: seq, for: id))
    }

    /// Asks for the stored topic of `name`, whose topic event `seq` was not stored.
    mutating func awaitStoredTopic(of name: String, replacing seq: UInt64) {
        _ = reads.ask(.room(name, recent: 0), for: .topic(name, seq: seq))
    }

    /// The room `name` was read: it is made from what was read (or anew) and its joiners,
    /// those still here, join it in the order they asked; if the read failed, they are refused.
    private mutating func roomRead(
        _ name: String, _ answer: Result<StoredRoom?, LogError>, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        guard let (ticket, joiners) = reads.loading.removeValue(forKey: name) else { return }
        let waiting = joiners.filter { reads.waiting[$0] == ticket }
        for id in waiting { reads.waiting[id] = nil }
        guard !waiting.isEmpty else { return }
        switch answer {
        case .success(let stored):
            makeRoom(name, from: stored)
            for id in waiting {
                guard let nick = nick(of: id) else { continue }
                let firstAction = actions.count
                join(name, id: id, nick: nick, size: 0, key: moderation.pendingKeys.removeValue(forKey: id), at: now, into: &actions)
                chargeReplies(to: id, for: actions[firstAction...])
            }
            // Every joiner may have been refused: the room then leaves memory as a part would.
            if rooms[name]?.members.isEmpty == true { removeEmptyRoom(name) }
        case .failure(let error):
            for id in waiting {
                refuse(.join, .storageFailed, "cannot join #\(name) now: \(error)", to: id, into: &actions)
            }
        }
    }
}
