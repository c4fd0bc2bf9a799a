import ChatCore
import ChatProtocol
import ChatServer
import ChatStorage
import Foundation
import Glibc
import Testing
import TestSupport

/// The attacks that brought down the durable default (issue 21), against the real `chat-server`:
/// in its default mode (rooms in SQLite), and in every mode where the attack applies. Each
/// asserts what the attacker must not achieve — a crash, a wedged loop, memory past the budget, a
/// share of the server's output past its address's limit, a version 2 frame in a version 1
/// session. Each failed against the server before the fix.
@Suite("Attacks found on the durable default", .serialized)
struct DurableAttackTests {
    static let budget = 128 << 20
    // --max-memory is 24 MiB more: the accounts' reserve (hashing workers, queue, records;
    // AccountSettings.memoryReserve), which no attack here touches, so what the attacks may use
    // is the same 128 MiB as before accounts, and the peak is held to it.
    static let budgetFlags = ["--max-memory", "152M", "--max-clients", "1000", "--log-level", "warning"]

    /// A server in `mode`, stopped (and its directory or Redis removed) afterwards.
    private static func withServer(
        _ mode: ServerMode = .durable, _ flags: [String], _ body: (ChatServerProcess) async throws -> Void
    ) async throws {
        let server = try await ChatServerProcess(mode, arguments: flags)
        defer { server.stop() }
        try await body(server)
    }

    private static func expectWithinBudget(_ server: ChatServerProcess, _ attack: String) {
        let peak = server.child.peakResidentBytes ?? Int.max
        #expect(peak < budget, "\(attack): the server's peak RSS was \(peak >> 20) MiB, over its budget of \(budget >> 20) MiB")
    }

    /// Says `count` lines of `size` bytes in `room` and waits for their echoes.
    private static func fill(_ room: String, by client: TestClient, count: Int, size: Int) async throws {
        let text = String(repeating: "h", count: size)
        for _ in 0..<count { try await client.send(.say(room: room, text: text)) }
        _ = try await client.collect(count, "echoes of the fill") { frame -> Bool? in
            if case .message(room, _, _, _, _) = frame { return true }
            return nil
        }
    }

    /// Joins `room` as a version 2 client: up to the last page of its members.
    /// Joins `room` as the version 2 `client` and reads the join's replies through its replay
    /// (the history page after the members), so that what the client reads next answers what
    /// it asks next — not a replay still on its way.
    private static func join(_ room: String, _ client: TestClient) async throws {
        try await client.send(.join(room: room))
        _ = try await client.waitFor("the replay of #\(room)") { frame -> Bool? in
            if case .historyPage(room, _, _, _) = frame { return true }
            return nil
        }
    }

    // MARK: Client-supplied integers

    /// Finding 1: `fetchHistory(after: 2^64 − 1)` past the history in memory overflowed `seq + 1`
    /// and killed the server with SIGILL. Every extreme now gets a page.
    @Test(arguments: ServerMode.allCases)
    func historyPagesFromTheExtremeSeqsAreAnsweredNotACrash(mode: ServerMode) async throws {
        try await Self.withServer(mode, ["--no-rate-limits"]) { server in
            let alice = try await TestClient.connect(to: server, nick: "alice", version: 2)
            try await Self.join("own", alice)
            try await Self.fill("own", by: alice, count: 101, size: 8)
            for seq: UInt64 in [.max, .max - 1, 1 << 63, 0, 1] {
                for direction in [HistoryDirection.after, .before] {
                    try await alice.send(.fetchHistory(room: "own", direction: direction, seq: seq, limit: 10))
                    let entries = try await alice.waitFor("a page from \(seq)") { frame -> [HistoryEntry]? in
                        if case .historyPage("own", _, _, let entries) = frame { return entries }
                        return nil
                    }
                    if direction == .after, seq >= 1 << 63 { #expect(entries.isEmpty, "nothing follows seq \(seq)") }
                    if direction == .before, seq >= 1 << 63 { #expect(entries.count == 10, "the newest ten precede seq \(seq)") }
                }
            }
            #expect(server.child.exitStatus == nil, "the server is still running")
            let bob = try await TestClient.connect(to: server, nick: "bob")
            bob.close()
            alice.close()
        }
    }

    // MARK: Versions

    /// Finding 7: a version 1 session skips version 2's types, as the forward-compatibility rule
    /// says, and never receives a version 2 frame.
    @Test(arguments: ServerMode.allCases)
    func aVersionOneSessionSkipsVersionTwoRequestsAndGetsNoVersionTwoFrame(mode: ServerMode) async throws {
        try await Self.withServer(mode, []) { server in
            let raw = try BlockingSocket(to: server)
            _ = await raw.send([.hello(version: 1, nick: "old", password: nil)])
            guard case .welcome(1, "old", _, _)? = await raw.nextFrame() else {
                Issue.record("expected a version 1 welcome")
                return
            }
            _ = await raw.send([
                .join(room: "lobby"), .fetchHistory(room: "lobby", direction: .before, seq: 0, limit: 10), .setAway(text: "gone"),
                .ping(token: 7),
            ])
            var frames: [Frame] = []
            while true {
                guard let frame = await raw.nextFrame() else {
                    Issue.record("the server closed a version 1 session that sent version 2 frames: \(frames)")
                    return
                }
                frames.append(frame)
                if case .pong(7) = frame { break }
            }
            for frame in frames {
                #expect((frame.type.introducedIn ?? 1) == 1, "a version 1 session received \(frame.type)")
                if case .error = frame { Issue.record("a skippable frame was answered with \(frame)") }
            }
            raw.close()
        }
    }

    // MARK: Memory

    /// Finding 3: replies held for a commit were costed at 64 bytes each, so clients that ask for
    /// the room list again and again without reading grew the server past 1 GB. Held replies now
    /// count what they encode to, against the client's reply mark and the held share.
    @Test func heldRoomListsCannotGrowTheServerPastItsBudget() async throws {
        try await Self.withServer(.durable, Self.budgetFlags + ["--no-rate-limits"]) { server in
            let topic = String(repeating: "t", count: 16_000)
            var owners: [TestClient] = []
            for owner in 0..<2 {
                let client = try await TestClient.connect(port: server.port, nick: "owner\(owner)")
                for number in 0..<50 {
                    try await client.send([.join(room: "r\(owner)-\(number)"), .setTopic(room: "r\(owner)-\(number)", text: topic)])
                }
                _ = try await client.collect(50, "topics") { if case .topic = $0 { true } else { nil } }
                owners.append(client)
            }
            // A chatter keeps commits in flight, so replies are held while the attack runs.
            let chatter = try await TestClient.connect(port: server.port, nick: "chatter")
            try await chatter.join("busy")
            let chatting = Task {
                for line in 0..<400 {
                    try await chatter.send(.say(room: "busy", text: "line \(line)"))
                    try await Task.sleep(for: .milliseconds(5))
                }
            }
            var attackers: [BlockingSocket] = []
            for number in 0..<10 {
                let attacker = try BlockingSocket(port: server.port, receiveBuffer: 4096)
                let frames = [Frame.hello(version: 2, nick: "hoarder\(number)", password: nil), .join(room: "busy")]
                    + Array(repeating: Frame.listRooms, count: 100)
                _ = await attacker.send(frames)
                attackers.append(attacker)
            }
            try await chatting.value
            try await Task.sleep(for: .seconds(2))
            Self.expectWithinBudget(server, "hoarded room lists")
            let control = try await TestClient.connect(port: server.port, nick: "control")
            try await control.join("busy")
            try await chatter.send(.say(room: "busy", text: "after"))
            _ = try await control.waitFor("a line after the attack") { frame -> Bool? in
                if case .message("busy", _, _, "chatter", "after") = frame { return true }
                return nil
            }
            for attacker in attackers { attacker.close() }
            for owner in owners { owner.close() }
        }
    }

    /// Finding 5: an away text is kept as long as its client stays, and a partial frame as long as
    /// its client takes to finish it; both count in the budget's per-connection share, and what
    /// a connection really costs stays within it.
    @Test(arguments: ServerMode.allCases)
    func aConnectionWithAnAwayTextAndAPartialFrameCostsNoMoreThanItsShare(mode: ServerMode) async throws {
        // At info, the log says when each connection is welcomed.
        try await Self.withServer(mode, ["--max-memory", "152M", "--max-clients", "1000", "--no-rate-limits"]) { server in
            let probe = try await TestClient.connect(to: server, nick: "probe", version: 2)
            try await probe.send(.setAway(text: String(repeating: "a", count: 16_000)))
            let kept = try await probe.waitFor("the away echo") { frame -> String? in
                if case .away("probe", let text) = frame { return text }
                return nil
            }
            #expect(kept.utf8.count == MemoryBudget.awayTextBytes, "the away text is cut to \(MemoryBudget.awayTextBytes) bytes")

            let share = MemoryBudget(
                total: Self.budget, maxClients: 1000, maxFrameSize: WireProtocol.defaultServerMaxFrameSize,
                extraPerConnection: mode == .tls ? ChatServerConfiguration.tlsConnectionBytes : 0
            ).perConnection
            let count = 300
            let before = server.child.residentBytes ?? 0
            var clients: [BlockingSocket] = []
            // A frame announcing the largest size, of which all but the last bytes arrive.
            var partial: [UInt8] = []
            FrameEncoder.encode(.say(room: "x", text: String(repeating: "p", count: 16_000)), into: &partial)
            partial.removeLast(8)
            for number in 0..<count {
                let client = try BlockingSocket(to: server)
                _ = await client.send([.hello(version: 2, nick: "idle\(number)", password: nil), .setAway(text: String(repeating: "a", count: 16_000))])
                _ = await client.send(partial)
                clients.append(client)
            }
            let welcomed = await eventually(timeout: .seconds(30)) {
                (server.child.output.components(separatedBy: "client connected").count - 1) >= count + 1
            }
            #expect(welcomed, "every connection was welcomed")
            try await Task.sleep(for: .milliseconds(500))
            let grown = (server.child.residentBytes ?? 0) - before
            #expect(grown / count <= share, "each connection cost \(grown / count) bytes, over its share of \(share)")
            for client in clients { client.close() }
            probe.close()
        }
    }

    // MARK: Writer stalls

    /// Finding 2: clients that join a room with a deep history, ask for a hundred megabyte pages
    /// each and never read wedged the loop: evicting them waited behind a commit. Here the writer
    /// is stalled as well (another process holds SQLite's write lock), and still a newcomer is
    /// welcomed, memory stays in the budget, and SIGTERM ends the server cleanly.
    @Test func hoardersAndAStalledWriterCannotWedgeTheLoopOrHoldUpShutdown() async throws {
        try await Self.withServer(.durable, Self.budgetFlags + ["--no-rate-limits", "--drain-timeout", "2"]) { server in
            let directory = try #require(server.dataDirectory)
            let filler = try await TestClient.connect(port: server.port, nick: "filler", version: 2)
            try await Self.join("deep", filler)
            try await Self.fill("deep", by: filler, count: 300, size: 15_000)

            let script = """
                import sqlite3, sys
                connection = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
                connection.execute("BEGIN IMMEDIATE")
                print("locked", flush=True)
                sys.stdin.read()
                """
            let locker = try ChildProcess(
                URL(fileURLWithPath: "/usr/bin/env"), ["python3", "-c", script, "\(directory.path)/\(RoomDatabase.fileName)"])
            defer { locker.stop() }
            #expect(await locker.waitForOutput("locked"), "the lock holder took SQLite's write lock: \(locker.output)")

            var hoarders: [BlockingSocket] = []
            for number in 0..<30 {
                let hoarder = try BlockingSocket(port: server.port, receiveBuffer: 4096)
                let frames = [Frame.hello(version: 2, nick: "hoarder\(number)", password: nil), .join(room: "deep")]
                    + Array(repeating: Frame.fetchHistory(room: "deep", direction: .before, seq: 150, limit: 100), count: 100)
                _ = await hoarder.send(frames, timeout: .milliseconds(200))
                hoarders.append(hoarder)
            }
            try await filler.send(.say(room: "deep", text: "while the writer is stalled"))

            let newcomer = try await TestClient.connect(port: server.port, nick: "newcomer")
            newcomer.close()
            Self.expectWithinBudget(server, "hoarders with a stalled writer")

            server.child.signal(SIGTERM)
            let status = await server.child.waitForExit(timeout: .seconds(30))
            #expect(status == 0, "SIGTERM ended the server cleanly (status \(String(describing: status)))")
            for hoarder in hoarders { hoarder.close() }
            filler.close()
        }
    }

    // MARK: History reads

    /// Finding 6: history pages were not charged, so paging clients read hundreds of megabytes a
    /// second out of the server. They now count against their address's fan-out rate, like the
    /// deliveries of what it says: what the pagers get is bounded by burst + rate × time.
    @Test(arguments: ServerMode.allCases)
    func historyPagesAreChargedToTheAddressesFanoutRate(mode: ServerMode) async throws {
        let rate = 4 << 20
        let burst = 16 << 20
        let flags = ["--address-fanout-rate", "\(rate)", "--address-fanout-burst", "\(burst)", "--log-level", "warning"]
        try await Self.withServer(mode, flags) { server in
            let filler = try await TestClient.connect(to: server, nick: "filler", version: 2)
            try await Self.join("deep", filler)
            try await Self.fill("deep", by: filler, count: 60, size: 15_000)
            var pagers: [TestClient] = []
            for number in 0..<8 {
                let pager = try await TestClient.connect(to: server, nick: "pager\(number)", version: 2)
                try await Self.join("deep", pager)
                pagers.append(pager)
            }
            let start = ContinuousClock.now
            let requests = 20
            for pager in pagers {
                try await pager.send(Array(repeating: .fetchHistory(room: "deep", direction: .before, seq: 0, limit: 100), count: requests))
            }
            let window: Duration = .seconds(4)
            let received = try await withThrowingTaskGroup(of: Int.self) { group in
                for pager in pagers {
                    group.addTask {
                        var bytes = 0
                        var pages = 0
                        while pages < requests, ContinuousClock.now - start < window {
                            let remaining = window - (ContinuousClock.now - start)
                            guard let frame = try? await withTimeout(remaining, waitingFor: "a page", { try await pager.next() }) else { break }
                            guard case .historyPage(_, _, _, let entries) = frame else { continue }
                            pages += 1
                            bytes += entries.reduce(0) { $0 + $1.text.utf8.count }
                        }
                        return bytes
                    }
                }
                return try await group.reduce(0, +)
            }
            let elapsed = ContinuousClock.now - start
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            // The joins' replays spent from the same bucket first. A page is charged when it is
            // made, so the bucket may go a page into debt per pager (in cluster mode each pager
            // may have one page on its way from Redis when the bucket runs dry).
            let allowed = burst + Int(Double(rate) * seconds) + pagers.count * 1_000_000
            #expect(received <= allowed, "pagers read \(received >> 20) MiB in \(seconds) s; the address may cause \(allowed >> 20) MiB")
            #expect(received > 0, "the pagers were served")
            for pager in pagers { pager.close() }
            filler.close()
        }
    }
}
