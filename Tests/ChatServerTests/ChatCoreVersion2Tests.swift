@testable import ChatCore
import ChatProtocol
import Testing

@testable import ChatServer

/// Version 2 of the protocol in the chat logic, on every `CoreBackend` unless a test says otherwise.
@Suite("Protocol version 2 in the chat logic, in every mode")
struct ChatCoreVersion2Tests {
    @Test(arguments: CoreBackend.allCases) func agreesOnTheLowerVersionAndTellsAVersion2ClientItsLimits(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) {
            $0.messageRate = 2.5
            $0.messageBurst = 40
            $0.byteRate = 4_096
            $0.byteBurst = 20_000
        }
        let (newer, _) = chat.open()
        #expect(
            await chat.send(.hello(version: 7, nick: "alice", password: nil), from: newer) == [
                .send(.welcome(version: WireProtocol.version, nick: "alice", maxFrameSize: 16_384, motd: ""), to: newer),
                .send(.limits(requestRate: 2_500, requestBurst: 40, byteRate: 4_096, byteBurst: 20_000), to: newer),
            ])
        let (older, _) = chat.open()
        #expect(
            await chat.send(.hello(version: 1, nick: "bob", password: nil), from: older) == [
                .send(.welcome(version: 1, nick: "bob", maxFrameSize: 16_384, motd: ""), to: older)
            ], "a version 1 client gets no version 2 frames")
    }

    @Test(arguments: CoreBackend.allCases) func saysNoRateLimitAsZero(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let (id, _) = chat.open()
        let actions = await chat.send(.hello(version: 2, nick: "alice", password: nil), from: id)
        #expect(actions.last == .send(.limits(requestRate: 0, requestBurst: 0, byteRate: 0, byteBurst: 0), to: id))
    }

    @Test(arguments: CoreBackend.allCases) func tellsAJoinerTheRoomsEpochAndStoredRangeThenReplaysOnePage(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice", version: 2)
        await chat.send(.join(room: "general"), from: alice)
        await chat.send(.say(room: "general", text: "one"), from: alice)
        await chat.send(.setTopic(room: "general", text: "sockets"), from: alice)
        await chat.send(.emote(room: "general", text: "waves"), from: alice)
        let bob = await chat.connect("bob", version: 2)
        let received = frames(to: bob, in: await chat.send(.join(room: "general"), from: bob))
        let time = chat.now.wallMillis
        // The oldest stored event: the first message where only history is stored (memory,
        // SQLite); alice's `joined` in Redis, whose log holds every event (docs/CLUSTER.md).
        let firstSeq: UInt64 = backend == .cluster ? 1 : 2
        #expect(
            received == [
                .joined(room: "general", seq: 5, time: time, nick: "bob"),
                .roomState(room: "general", epoch: 1, firstSeq: firstSeq, lastSeq: 5),
                .membersPage(room: "general", complete: true, nicks: ["alice", "bob"]),
                .topic(room: "general", seq: 3, time: time, setBy: "alice", text: "sockets"),
                .historyPage(
                    room: "general", epoch: 1, complete: true,
                    entries: [
                        HistoryEntry(kind: .message, seq: 2, time: time, sender: "alice", text: "one"),
                        HistoryEntry(kind: .topic, seq: 3, time: time, setBy: "alice", text: "sockets"),
                        HistoryEntry(kind: .action, seq: 4, time: time, sender: "alice", text: "waves"),
                    ]),
            ])
    }

    @Test(arguments: CoreBackend.allCases) func aVersion1JoinerGetsNoTopicChangesInItsHistory(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice", version: 2)
        await chat.send(.join(room: "general"), from: alice)
        await chat.send(.setTopic(room: "general", text: "sockets"), from: alice)
        await chat.send(.say(room: "general", text: "one"), from: alice)
        let bob = await chat.connect("bob")
        let received = frames(to: bob, in: await chat.send(.join(room: "general"), from: bob))
        let time = chat.now.wallMillis
        #expect(
            received == [
                .joined(room: "general", seq: 4, time: time, nick: "bob"),
                .members(room: "general", nicks: ["alice", "bob"]),
                .topic(room: "general", seq: 2, time: time, setBy: "alice", text: "sockets"),
                .history(room: "general", entries: [HistoryEntry(kind: .message, seq: 3, time: time, sender: "alice", text: "one")]),
            ])
        let asked = frames(to: bob, in: await chat.send(.requestHistory(room: "general", count: 10), from: bob))
        #expect(asked == [.history(room: "general", entries: [HistoryEntry(kind: .message, seq: 3, time: time, sender: "alice", text: "one")])])
    }

    /// Memory forgets an empty room, so the next joiner creates it again with a new epoch; SQLite
    /// and Redis keep its epoch and `seq` (docs/PROTOCOL.md, "Rooms"; docs/CLUSTER.md, "Not done").
    @Test(arguments: CoreBackend.allCases) func aRoomCreatedAgainHasANewEpochOnlyInMemory(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice", version: 2)
        await chat.send(.join(room: "general"), from: alice)  // seq 1
        await chat.send(.part(room: "general"), from: alice)  // seq 2
        // The server's timer ticks: a stored room whose changes are committed leaves memory.
        _ = await chat.tick(advancingBy: 1_000)
        let again = frames(to: alice, in: await chat.send(.join(room: "general"), from: alice))
        let expected: Frame =
            switch backend {
            case .memory: .roomState(room: "general", epoch: 2, firstSeq: 0, lastSeq: 1)
            // Nothing stored is history: no message, action or topic.
            case .sqlite: .roomState(room: "general", epoch: 1, firstSeq: 0, lastSeq: 3)
            // Redis's log holds the join and the part.
            case .cluster: .roomState(room: "general", epoch: 1, firstSeq: 1, lastSeq: 3)
            }
        #expect(again.contains(expected), "\(backend): \(again)")
    }

    @Test(arguments: CoreBackend.allCases) func pagesBackwardAndForwardFromASeq(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice", version: 2)
        await chat.send(.join(room: "general"), from: alice)
        for number in 1...10 { await chat.send(.say(room: "general", text: "m\(number)"), from: alice) }
        // Messages m1…m10 have seq 2…11.
        func page(_ direction: HistoryDirection, _ seq: UInt64, _ limit: UInt32) async -> (seqs: [UInt64], complete: Bool)? {
            let answer = frames(to: alice, in: await chat.send(.fetchHistory(room: "general", direction: direction, seq: seq, limit: limit), from: alice))
            guard answer.count == 1, case let .historyPage("general", 1, complete, entries) = answer[0] else { return nil }
            return (entries.map(\.seq), complete)
        }
        #expect(await page(.before, 0, 3)! == ([9, 10, 11], false), "the newest page")
        #expect(await page(.before, 9, 3)! == ([6, 7, 8], false))
        #expect(await page(.before, 4, 3)! == ([2, 3], true), "reaches the oldest")
        #expect(await page(.before, 2, 3)! == ([], true), "nothing older than the first")
        #expect(await page(.after, 0, 4)! == ([2, 3, 4, 5], false), "from the oldest")
        #expect(await page(.after, 8, 4)! == ([9, 10, 11], true), "reaches the newest")
        #expect(await page(.after, 11, 4)! == ([], true), "nothing newer than the last")
        #expect(await page(.after, 1, 100)! == (Array(2...11), true), "presence events leave gaps, not entries")
    }

    /// How far back a client can scroll depends on what the mode keeps: memory holds the newest
    /// `--history-size` entries and nothing older; SQLite holds the rest on disk (docs/SERVER.md,
    /// "Restart continuity": pages older than memory are read from SQLite) and Redis in the room's
    /// stream (docs/CLUSTER.md: "the room stream *is* the history"). Every mode caps a page at
    /// `--history-size`.
    @Test(arguments: CoreBackend.allCases) func scrollingBackPastTheHistorySizeReachesWhatTheModeKeeps(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) { $0.historySize = 3 }
        let alice = await chat.connect("alice", version: 2)
        await chat.send(.join(room: "general"), from: alice)  // seq 1
        for number in 1...10 { await chat.send(.say(room: "general", text: "m\(number)"), from: alice) }  // seq 2…11
        func page(_ direction: HistoryDirection, _ seq: UInt64) async -> (seqs: [UInt64], complete: Bool)? {
            let answer = frames(to: alice, in: await chat.send(.fetchHistory(room: "general", direction: direction, seq: seq, limit: 100), from: alice))
            guard answer.count == 1, case let .historyPage(_, _, complete, entries) = answer[0] else { return nil }
            return (entries.map(\.seq), complete)
        }
        let newest = try #require(await page(.before, 0))
        if backend == .memory {
            #expect(newest == ([9, 10, 11], true), "the newest three are all memory holds")
            #expect(await page(.before, 9)! == ([], true), "nothing older is kept")
            #expect(await page(.after, 0)! == ([9, 10, 11], true))
        } else {
            #expect(newest == ([9, 10, 11], false), "\(backend): the newest three, and more before them")
            #expect(await page(.before, 9)! == ([6, 7, 8], false), "\(backend): older ones are kept")
            #expect(await page(.before, 3)! == ([2], true), "\(backend): back to the first")
            #expect(await page(.after, 0)! == ([2, 3, 4], false), "\(backend): catching up from the start")
        }
    }

    /// A page that holds the room's oldest (or newest) history entry is `complete`, whatever
    /// presence events lie beyond it: they are no history (docs/PROTOCOL.md, "Paging history";
    /// docs/CLUSTER.md: the stream is "paged to the frame limit as on a single server").
    @Test(arguments: CoreBackend.allCases) func aPageThatHoldsTheLastEntryThatWayIsComplete(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) { $0.historySize = 3 }
        let alice = await chat.connect("alice", version: 2)
        await chat.send(.join(room: "general"), from: alice)  // seq 1
        for number in 1...3 { await chat.send(.say(room: "general", text: "m\(number)"), from: alice) }  // seq 2…4
        let bob = await chat.connect("bob", version: 2)
        let join = frames(to: bob, in: await chat.send(.join(room: "general"), from: bob))  // seq 5
        func page(_ direction: HistoryDirection, _ seq: UInt64) async -> (seqs: [UInt64], complete: Bool)? {
            let answer = frames(to: alice, in: await chat.send(.fetchHistory(room: "general", direction: direction, seq: seq, limit: 3), from: alice))
            guard answer.count == 1, case let .historyPage(_, _, complete, entries) = answer[0] else { return nil }
            return (entries.map(\.seq), complete)
        }
        #expect(await page(.after, 0)! == ([2, 3, 4], true), "\(backend): from the oldest entry to the newest; only bob's joined is newer")
        #expect(join.last == .historyPage(room: "general", epoch: 1, complete: true, entries: [
            HistoryEntry(kind: .message, seq: 2, time: chat.now.wallMillis, sender: "alice", text: "m1"),
            HistoryEntry(kind: .message, seq: 3, time: chat.now.wallMillis, sender: "alice", text: "m2"),
            HistoryEntry(kind: .message, seq: 4, time: chat.now.wallMillis, sender: "alice", text: "m3"),
        ]), "\(backend): the replay holds all the history: \(join)")
        #expect(await page(.before, 0)! == ([2, 3, 4], true), "\(backend): the newest page reaches the oldest entry; only alice's joined is older")
        #expect(await page(.after, 1)! == ([2, 3, 4], true), "\(backend): it reaches the newest entry; only bob's joined is newer")
        #expect(await page(.after, 2)! == ([3, 4], true), "\(backend): a page short of the limit")
        #expect(await page(.before, 4)! == ([2, 3], true), "\(backend): scrolling back to the oldest")
    }

    /// Whether a page is complete depends on the history beyond it, however many presence events
    /// come first: more than a cluster node reads of its log at once (64) here.
    @Test(arguments: CoreBackend.allCases) func aPageIsTheLastOnlyIfNoHistoryLiesBeyondItsPresenceEvents(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) { $0.historySize = 10 }
        let alice = await chat.connect("alice", version: 2)
        let bob = await chat.connect("bob", version: 2)
        await chat.send(.join(room: "r"), from: alice)  // seq 1
        for number in 1...3 { await chat.send(.say(room: "r", text: "m\(number)"), from: alice) }  // seq 2…4
        for _ in 1...50 {  // seq 5…104
            await chat.send(.join(room: "r"), from: bob)
            await chat.send(.part(room: "r"), from: bob)
        }
        func page(_ direction: HistoryDirection, _ seq: UInt64) async -> (seqs: [UInt64], complete: Bool)? {
            let answer = frames(to: alice, in: await chat.send(.fetchHistory(room: "r", direction: direction, seq: seq, limit: 3), from: alice))
            guard answer.count == 1, case let .historyPage(_, _, complete, entries) = answer[0] else { return nil }
            return (entries.map(\.seq), complete)
        }
        #expect(await page(.after, 0)! == ([2, 3, 4], true), "\(backend): 100 presence events and no history after m3")
        await chat.send(.say(room: "r", text: "m4"), from: alice)  // seq 105
        #expect(await page(.after, 0)! == ([2, 3, 4], false), "\(backend): m4 lies beyond the presence events")
        #expect(await page(.after, 4)! == ([105], true), "\(backend): m4 alone")
        #expect(await page(.before, 105)! == ([2, 3, 4], true), "\(backend): back over the presence events to the oldest")
    }

    @Test(arguments: CoreBackend.allCases) func capsAPageAtTheHistorySizeAndTheFrameLimit(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) {
            $0.historySize = 200
            $0.maxFrameSize = 16_384
        }
        let alice = await chat.connect("alice", version: 2)
        await chat.send(.join(room: "general"), from: alice)
        let big = String(repeating: "x", count: 16_000)
        for _ in 1...100 { await chat.send(.say(room: "general", text: big), from: alice) }
        let answer = frames(to: alice, in: await chat.send(.fetchHistory(room: "general", direction: .after, seq: 0, limit: 1_000), from: alice))
        guard case let .historyPage(_, _, complete, entries) = answer.first else {
            Issue.record("expected a historyPage, got \(answer)")
            return
        }
        #expect(!complete, "100 × 16 KB does not fit one frame")
        #expect(entries.count >= 60 && entries.count < 100, "as many as fit: \(entries.count)")
        #expect(FrameEncoder.encode(answer[0]).count <= WireProtocol.maxFrameSize + WireProtocol.maxVarintLength)
        let rest = frames(
            to: alice, in: await chat.send(.fetchHistory(room: "general", direction: .after, seq: entries.last!.seq, limit: 1_000), from: alice))
        guard case let .historyPage(_, _, restComplete, restEntries) = rest.first else {
            Issue.record("expected a historyPage, got \(rest)")
            return
        }
        #expect(restComplete)
        #expect(entries.count + restEntries.count == 100, "the two pages hold every message once")
    }

    @Test(arguments: CoreBackend.allCases) func fetchingARoomOneIsNotInIsRefused(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice", version: 2)
        let answer = frames(to: alice, in: await chat.send(.fetchHistory(room: "general", direction: .before, seq: 0, limit: 5), from: alice))
        guard case let .error(code, fatal, frameType, _) = answer.first else {
            Issue.record("expected an error, got \(answer)")
            return
        }
        #expect(code == .notInRoom && !fatal && frameType == .fetchHistory)
    }

    @Test(arguments: CoreBackend.allCases) func listsEveryRoomOverSeveralFrames(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let topic = String(repeating: "t", count: 16_000)
        var owners: [ClientID] = []
        for number in 0..<100 {
            let owner = await chat.connect("o\(number)")
            await chat.send(.join(room: "room\(number)"), from: owner)
            await chat.send(.setTopic(room: "room\(number)", text: topic), from: owner)
            owners.append(owner)
        }
        let newer = await chat.connect("newer", version: 2)
        let pages = frames(to: newer, in: await chat.send(.listRooms, from: newer))
        var listed: [String] = []
        for (index, page) in pages.enumerated() {
            guard case let .roomListPage(complete, rooms) = page else {
                Issue.record("expected roomListPage, got \(page)")
                return
            }
            #expect(complete == (index == pages.count - 1), "only the last page is complete")
            listed += rooms.map(\.name)
        }
        #expect(pages.count >= 2, "1.6 MB of topics needs more than one frame")
        #expect(listed == (0..<100).map { "room\($0)" }.sorted(), "every room, once, in order")

        let older = await chat.connect("older")
        let lists = frames(to: older, in: await chat.send(.listRooms, from: older))
        let all = lists.flatMap { frame -> [String] in
            guard case let .roomList(rooms) = frame else { return [] }
            return rooms.map(\.name)
        }
        #expect(lists.count == pages.count && all == listed, "a version 1 client gets several roomList frames")
    }

    @Test(arguments: CoreBackend.allCases) func membersArePagedForAVersion2ClientAndListedForAVersion1Client(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice", version: 2)
        let bob = await chat.connect("bob")
        await chat.send(.join(room: "general"), from: alice)
        await chat.send(.join(room: "general"), from: bob)
        #expect(frames(to: alice, in: await chat.send(.who(room: "general"), from: alice)) == [.membersPage(room: "general", complete: true, nicks: ["alice", "bob"])])
        #expect(frames(to: bob, in: await chat.send(.who(room: "general"), from: bob)) == [.members(room: "general", nicks: ["alice", "bob"])])
        #expect(frames(to: bob, in: await chat.send(.who(room: "empty"), from: bob)) == [.members(room: "empty", nicks: [])])
    }

    /// The splitter itself, not a mode: every mode cuts its lists with it.
    @Test func splitsAListWhereTheNextItemWouldOverflowTheBudget() async {
        var parts: [([Int], Bool)] = []
        ChatCore.splitIntoFrames(Array(1...7), budget: 10, cost: { $0 }) { parts.append(($0, $1)) }
        #expect(parts.map(\.0) == [[1, 2, 3, 4], [5], [6], [7]])
        #expect(parts.map(\.1) == [false, false, false, true])
        parts = []
        ChatCore.splitIntoFrames([50], budget: 10, cost: { $0 }) { parts.append(($0, $1)) }
        #expect(parts.map(\.0) == [[50]], "an item above the budget still goes, alone")
        parts = []
        ChatCore.splitIntoFrames([Int](), budget: 10, cost: { $0 }) { parts.append(($0, $1)) }
        #expect(parts.count == 1 && parts[0].0.isEmpty && parts[0].1, "an empty list is one empty, complete part")
    }

    @Test(arguments: CoreBackend.allCases) func anAwayRecipientIsAnnouncedToAVersion2SenderAfterTheEcho(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice", version: 2)
        let bob = await chat.connect("bob", version: 2)
        let carol = await chat.connect("carol")
        #expect(frames(to: bob, in: await chat.send(.setAway(text: "lunch"), from: bob)) == [.away(nick: "bob", text: "lunch")])
        let time = chat.now.wallMillis
        #expect(
            frames(to: alice, in: await chat.send(.tell(recipient: "bob", text: "hi"), from: alice)) == [
                .direct(sender: "alice", recipient: "bob", time: time, text: "hi"), .away(nick: "bob", text: "lunch"),
            ])
        #expect(
            frames(to: carol, in: await chat.send(.tell(recipient: "bob", text: "hi"), from: carol)) == [
                .direct(sender: "carol", recipient: "bob", time: time, text: "hi")
            ], "a version 1 sender gets no away frame")
        #expect(frames(to: bob, in: await chat.send(.setAway(text: ""), from: bob)) == [.away(nick: "bob", text: "")])
        #expect(frames(to: alice, in: await chat.send(.tell(recipient: "bob", text: "back?"), from: alice)).count == 1)
    }
}

extension HistoryEntry {
    /// A topic change as a history entry, spelled the way the protocol names its fields.
    fileprivate init(kind: Kind, seq: UInt64, time: UInt64, setBy: String, text: String) {
        self.init(kind: kind, seq: seq, time: time, sender: setBy, text: text)
    }
}
