import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

/// The attacks of docs/SECURITY.md against the real `chat-server` process on loopback.
///
/// Each starts a server with a memory budget and asserts what a hostile client must not achieve:
/// the server's peak resident memory stays under the budget, clients in the same room keep
/// receiving every message in order, and no client that reads is disconnected. Each runs in every
/// mode a user can choose (durable, the default; memory; a cluster node on a real Redis; TLS):
/// what the defences hold back differs between them (held deliveries, Redis replies, records).
/// The two nested suites run side by side, the attacks within each one at a time: each attack
/// floods a 2-core machine, and its control clients must keep up. One line of them all was the
/// last suite of a run to end, a minute after the rest.
@Suite("Attacks on the real server")
struct AttackTests {
    /// The budget the servers here run with: small enough that every attack would blow it
    /// without the defences (each pushed the old server past hundreds of megabytes).
    static let budget = 128 << 20
    // --max-memory is 24 MiB more: the accounts' reserve (hashing workers, queue, records;
    // AccountSettings.memoryReserve), which no attack here touches, so what the attacks may use
    // is the same 128 MiB as before accounts, and the peak is held to it.
    static let budgetFlags = ["--max-memory", "152M", "--max-clients", "1000", "--log-level", "warning"]

    /// A room member that reads everything: the control whose deliveries must all arrive. From
    /// `host`, so that a control can come from another address than the attackers (::1 needs a
    /// server on `::`).
    private static func member(
        _ nick: String, host: String = "127.0.0.1", of server: ChatServerProcess, room: String
    ) async throws -> TestClient {
        let client = try await TestClient.connect(to: server, host: host, nick: nick)
        try await client.join(room)
        return client
    }

    /// `sender` says `count` numbered lines in `room`; every member in `readers` must receive all of
    /// them, in order. Returns the texts each reader got.
    private static func chat(
        _ count: Int, from sender: TestClient, in room: String, readers: [TestClient]
    ) async throws -> [[String]] {
        let texts = (0..<count).map { "control \($0)" }
        for text in texts { try await sender.send(.say(room: room, text: text)) }
        var seen: [[String]] = []
        for reader in readers {
            seen.append(
                try await reader.collect(count, "control messages") { frame -> String? in
                    if case .message(room, _, _, sender.nick, let text) = frame, text.hasPrefix("control ") { return text }
                    return nil
                })
        }
        #expect(seen.allSatisfy { $0 == texts }, "every reader gets every control message in order")
        return seen
    }

    private static func expectWithinBudget(_ server: ChatServerProcess, _ attack: String) {
        let peak = server.child.peakResidentBytes ?? Int.max
        #expect(peak < budget, "\(attack): the server's peak RSS was \(peak >> 20) MiB, over its budget of \(budget >> 20) MiB")
    }

    /// Needs a server at `--log-level info`: disconnects are logged at info.
    private static func expectNoSlowConsumerDisconnects(_ server: ChatServerProcess, among nicks: [String]) {
        #expect(server.child.lines.contains { $0.contains("client connected") }, "the server logs at info level, or this check sees nothing")
        for line in server.child.lines where line.contains("slow consumer") {
            for nick in nicks {
                #expect(!line.contains("client.nick=\(nick)"), "a reading client was disconnected: \(line)")
            }
        }
    }

    /// Clients that ask for the biggest replies there are and never read them.
    @Suite("Big replies to clients that never read", .serialized) struct BigReplies {
        // MARK: Request amplification

        @Test(arguments: ServerMode.allCases)
        func aClientThatPipelinesBigRequestsWithoutReadingCannotGrowTheServer(mode: ServerMode) async throws {
            let server = try await ChatServerProcess(mode, arguments: AttackTests.budgetFlags + ["--no-rate-limits", "--log-level", "info"])
            defer { server.stop() }
            let alice = try await AttackTests.member("alice", of: server, room: "big")
            let bob = try await AttackTests.member("bob", of: server, room: "big")
            // A full history of the largest messages, and rooms with the longest topics.
            let big = String(repeating: "h", count: 16_000)
            for _ in 0..<100 { try await alice.send(.say(room: "big", text: big)) }
            _ = try await bob.collect(100, "history fill") { if case .message = $0 { true } else { nil } }
            for number in 0..<40 {
                try await alice.send([.join(room: "topic\(number)"), .setTopic(room: "topic\(number)", text: big)])
            }

            // Ten clients that never read ask again and again for the biggest replies there are.
            var attackers: [BlockingSocket] = []
            for number in 0..<10 {
                let attacker = try BlockingSocket(to: server, receiveBuffer: 4096)
                await attacker.send([.hello(version: 2, nick: "amp\(number)", password: nil), .join(room: "big")])
                attackers.append(attacker)
            }
            let requests = (0..<2_000).flatMap { _ in
                [Frame.requestHistory(room: "big", count: 100), .listRooms, .who(room: "big"), .fetchHistory(room: "big", direction: .before, seq: 0, limit: 100)]
            }
            await withTaskGroup(of: Void.self) { group in
                for attacker in attackers { group.addTask { await attacker.send(requests, timeout: .seconds(3)) } }
            }

            // The members of the room still get every message, and nobody who reads was cut off.
            _ = try await AttackTests.chat(50, from: alice, in: "big", readers: [alice, bob])
            AttackTests.expectWithinBudget(server, "request amplification")
            AttackTests.expectNoSlowConsumerDisconnects(server, among: ["alice", "bob"])
            for attacker in attackers { attacker.close() }
        }

        // MARK: History

        @Test(arguments: ServerMode.allCases)
        func historyInManyRoomsStaysWithinItsShareAndKeepsTheNewest(mode: ServerMode) async throws {
            let server = try await ChatServerProcess(mode, arguments: AttackTests.budgetFlags + ["--no-rate-limits"])
            defer { server.stop() }
            let text = String(repeating: "m", count: 16_000)
            // 20 clients fill 10 rooms each with 100 messages of 16 kB: 320 MB of history offered.
            await withThrowingTaskGroup(of: Void.self) { group in
                for number in 0..<20 {
                    group.addTask {
                        let filler = try await TestClient.connect(to: server, nick: "filler\(number)")
                        for room in 0..<10 {
                            let name = "f\(number)-\(room)"
                            try await filler.join(name)
                            try await filler.send(Array(repeating: Frame.say(room: name, text: text), count: 100))
                            _ = try await filler.collect(100, "own messages") { if case .message = $0 { true } else { nil } }
                            try await filler.send(.part(room: name))
                        }
                        filler.close()
                    }
                }
            }
            print("history peak \(mode): \((server.child.peakResidentBytes ?? 0) >> 20) MiB")
            AttackTests.expectWithinBudget(server, "history in many rooms")
            // Rooms without members are forgotten; one that is kept has its newest messages.
            let carol = try await TestClient.connect(to: server, nick: "carol")
            try await carol.join("kept")
            try await carol.send([.say(room: "kept", text: "first"), .say(room: "kept", text: "newest")])
            _ = try await carol.collect(2, "own messages") { if case .message = $0 { true } else { nil } }
            let dave = try await TestClient.connect(to: server, nick: "dave")
            try await dave.send(.join(room: "kept"))
            let replay = try await dave.waitFor("the history replay") { frame -> [String]? in
                if case .history("kept", let entries) = frame { return entries.map(\.text) }
                return nil
            }
            #expect(replay == ["first", "newest"])
        }
    }

    /// Tiny frames, floods, guesses, reconnect loops, half-closed and malformed connections.
    @Suite("Floods and odd connections", .serialized) struct Floods {
        // MARK: Tiny-frame pinning

        @Test(arguments: ServerMode.allCases)
        func pipelinedPingsFromClientsThatNeverReadStayWithinTheBudget(mode: ServerMode) async throws {
            // A cluster node whose process stalls for its node timeout (5 s) lets its clients go, by
            // design. Under a whole test run on two cores that happened here once: the log said the
            // registration lapsed with no heartbeat sent for 5 s. The flood itself does not do it: a
            // debug node under this attack (chat-abuse --attack pings, 20 connections) had its loop
            // at most 10 ms late (chat_event_loop_lag_seconds), so the test that is about memory
            // gives the node room for the machine's stalls.
            let tolerance = mode == .cluster ? ["--cluster-node-timeout", "30"] : []
            let server = try await ChatServerProcess(mode, arguments: AttackTests.budgetFlags + ["--no-rate-limits", "--log-level", "info"] + tolerance)
            defer { server.stop() }
            let alice = try await AttackTests.member("alice", of: server, room: "r")
            let bob = try await AttackTests.member("bob", of: server, room: "r")
            let pings = (0..<330_000).map { Frame.ping(token: UInt64($0 % 100)) }
            var attackers: [BlockingSocket] = []
            for number in 0..<20 {
                let attacker = try BlockingSocket(to: server, receiveBuffer: 4096)
                await attacker.send([.hello(version: 1, nick: "pinger\(number)", password: nil)])
                attackers.append(attacker)
            }
            await withTaskGroup(of: Void.self) { group in
                for attacker in attackers { group.addTask { await attacker.send(pings, timeout: .seconds(3)) } }
            }
            do {
                _ = try await AttackTests.chat(50, from: alice, in: "r", readers: [alice, bob])
            } catch {
                // Under a whole run's load this once failed in cluster mode with no word of why.
                let said = server.child.lines.filter { $0.contains("alice") || $0.contains("bob") || $0.contains("cluster") }
                Issue.record("what the server said of the members and the cluster: \(said)")
                throw error
            }
            AttackTests.expectWithinBudget(server, "tiny-frame pinning")
            AttackTests.expectNoSlowConsumerDisconnects(server, among: ["alice", "bob"])
            for attacker in attackers { attacker.close() }
        }

        // MARK: Innocent members

        @Test(arguments: ServerMode.allCases)
        func legalBurstsNeverDisconnectAReader(mode: ServerMode) async throws {
            // Default rate limits; a quick slow-consumer timeout, so a wrong rule would show.
            let server = try await ChatServerProcess(mode, arguments: AttackTests.budgetFlags + ["--slow-consumer-timeout", "2", "--log-level", "info"])
            defer { server.stop() }
            let readers = try await (0..<5).asyncMap { try await AttackTests.member("reader\($0)", of: server, room: "busy") }
            let sender = try await AttackTests.member("sender", of: server, room: "busy")
            let second = try await AttackTests.member("second", of: server, room: "busy")
            let text = String(repeating: "b", count: 16_000)
            // Two senders each send their whole legal burst at once: 60 frames of 16 kB, nearly the
            // 1 MiB byte burst, so 1.9 MB reach every member together (the old server cut members
            // off at 1 MiB queued).
            for client in [sender, second] {
                try await client.send(Array(repeating: Frame.say(room: "busy", text: text), count: 60))
            }
            for reader in readers {
                _ = try await reader.collect(120, "the burst") { frame -> Bool? in
                    if case .message("busy", _, _, _, text) = frame { return true }
                    if case .quit = frame { Issue.record("a member quit: \(frame)") }
                    return nil
                }
            }
            // A joiner gets the full history replay, and a stream of direct messages reaches its reader.
            let joiner = try await TestClient.connect(to: server, nick: "joiner")
            try await joiner.send(.join(room: "busy"))
            _ = try await joiner.waitFor("the replay") { if case .history("busy", let entries) = $0, !entries.isEmpty { true } else { nil } }
            let teller = try await TestClient.connect(to: server, nick: "teller")
            try await teller.send(Array(repeating: Frame.tell(recipient: "reader0", text: text), count: 60))
            _ = try await readers[0].collect(60, "direct messages") { if case .direct("teller", "reader0", _, _) = $0 { true } else { nil } }
            AttackTests.expectNoSlowConsumerDisconnects(
                server, among: ["reader0", "reader1", "reader2", "reader3", "reader4", "joiner", "sender", "second", "teller"])
        }

        // MARK: Half-close

        @Test(arguments: ServerMode.allCases)
        func aClientThatHalfClosesStillGetsWhatItWasSent(mode: ServerMode) async throws {
            let server = try await ChatServerProcess(mode, arguments: AttackTests.budgetFlags)
            defer { server.stop() }
            let client = try BlockingSocket(to: server)
            await client.send([.hello(version: 1, nick: "halfway", password: nil), .join(room: "r"), .say(room: "r", text: "bye now")])
            client.shutdownWrite()
            let (frames, ended) = await client.readFrames()
            #expect(ended, "the server closes once it has written everything")
            #expect(frames.contains { if case .welcome = $0 { true } else { false } }, "got \(frames)")
            #expect(frames.contains { if case .joined("r", _, _, "halfway") = $0 { true } else { false } }, "got \(frames)")
            #expect(frames.contains(where: { if case .message("r", _, _, "halfway", "bye now") = $0 { true } else { false } }),
                    "the echo of its last message arrives: \(frames)")
        }

        // MARK: Floods and guessing

        @Test(arguments: ServerMode.allCases)
        func aPingFloodIsRateLimitedAndTheFloodersDisconnected(mode: ServerMode) async throws {
            // The limits per connection, alone: with the address's, 20 flooders would share 500
            // frames a second, each under its own rate, and be read slowly rather than cut off (the
            // address's pacing has a test of its own).
            let perConnectionOnly = ["--address-rate-limit", "0", "--address-byte-rate", "0"]
            let server = try await ChatServerProcess(mode, arguments: AttackTests.budgetFlags + perConnectionOnly + ["--host", "::"])
            defer { server.stop() }
            // From ::1, as a bystander would be.
            let alice = try await AttackTests.member("alice", host: "::1", of: server, room: "r")
            let flood = (0..<20_000).map { Frame.ping(token: UInt64($0)) }
            var flooders: [BlockingSocket] = []
            for number in 0..<20 {
                let flooder = try BlockingSocket(to: server)
                await flooder.send([.hello(version: 1, nick: "flood\(number)", password: nil)])
                flooders.append(flooder)
            }
            let endings = await withTaskGroup(of: [Frame].self) { group in
                for flooder in flooders {
                    group.addTask {
                        await flooder.send(flood, timeout: .seconds(3))
                        return await flooder.readFrames().frames
                    }
                }
                return await group.reduce(into: [[Frame]]()) { $0.append($1) }
            }
            for frames in endings {
                guard case .error(.rateLimited, true, _, _) = frames.last else {
                    Issue.record("expected each flooder cut off with a fatal rateLimited, got \(String(describing: frames.last))")
                    continue
                }
            }
            _ = try await AttackTests.chat(20, from: alice, in: "r", readers: [alice])
        }

        @Test(arguments: ServerMode.allCases)
        func connectionsFromOneAddressAreReadNoFasterThanItsRateAndLoseNothing(mode: ServerMode) async throws {
            // Per connection, 40 frames of 16 kB are within the byte burst; per address, 8 connections
            // together (5.1 MB) are not: past the address's 1 MiB burst they are read at 1 MiB/s.
            let addressLimits = ["--address-byte-rate", "1048576", "--address-byte-burst", "1048576"]
            let server = try await ChatServerProcess(mode, arguments: AttackTests.budgetFlags + addressLimits + ["--host", "::"])
            defer { server.stop() }
            let control = try await AttackTests.member("control", host: "::1", of: server, room: "r")
            let senders = try await (0..<8).asyncMap { try await AttackTests.member("sender\($0)", of: server, room: "r") }
            let started = ContinuousClock.now
            for (number, sender) in senders.enumerated() {
                try await sender.send((0..<40).map { Frame.say(room: "r", text: "\(number) \($0) " + String(repeating: "s", count: 16_000)) })
            }
            // The senders read too (a member that stopped reading 5 MB would rightly be cut off), and
            // none is refused anything: every frame it gets back is a message.
            let sendersDone = Task {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for sender in senders {
                        group.addTask {
                            _ = try await sender.collect(320, "the room's lines", limit: .seconds(120)) { frame -> Bool? in
                                if case .error = frame { Issue.record("\(sender.nick) got \(frame)") }
                                if case .message = frame { return true }
                                return nil
                            }
                        }
                    }
                    try await group.waitForAll()
                }
            }
            // The control, on its own address, gets every line, each sender's in order.
            let lines = try await control.collect(320, "the senders' lines", limit: .seconds(120)) { frame -> String? in
                if case .message("r", _, _, let nick, let text) = frame, nick.hasPrefix("sender") { return String(text.prefix(8)) }
                return nil
            }
            let elapsed = ContinuousClock.now - started
            _ = try await sendersDone.value
            for number in 0..<8 {
                let own = lines.filter { $0.hasPrefix("\(number) ") }.map { $0.split(separator: " ")[1] }
                #expect(own == (0..<40).map { "\($0)"[...] }, "sender\(number)'s lines arrive, all and in order")
            }
            // 5.1 MB at 1 MiB/s after a 1 MiB burst cannot take less than about 3.9 s: the address was
            // read at its rate, not at the speed of loopback.
            #expect(elapsed > .seconds(3), "read no faster than the address's rate: took \(elapsed)")
            _ = try await AttackTests.chat(20, from: control, in: "r", readers: [control] + senders)
        }

        @Test(arguments: ServerMode.allCases)
        func passwordGuessesAreDelayedThenTheAddressIsLockedOut(mode: ServerMode) async throws {
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("chat-password-\(getpid())")
            try "s3cret\n".write(to: file, atomically: true, encoding: .utf8)
            defer { try? FileManager.default.removeItem(at: file) }
            let server = try await ChatServerProcess(
                mode, arguments: AttackTests.budgetFlags + ["--password-file", file.path, "--password-attempts", "3", "--password-lockout", "30"])
            defer { server.stop() }
            func attempt(_ password: String) async throws -> String? {
                let client = try BlockingSocket(to: server)
                await client.send([.hello(version: 1, nick: "guesser", password: password)])
                let (frames, _) = await client.readFrames()
                client.close()
                if case .error(.badPassword, true, .hello, let reason) = frames.last { return reason }
                return nil
            }
            for guess in ["a", "b", "c"] { #expect(try await attempt(guess) == "wrong password") }
            let locked = try await attempt("s3cret")
            #expect(locked?.hasPrefix("too many wrong passwords from 127.0.0.1") == true, "even the right password waits out the lockout: \(String(describing: locked))")
        }

        @Test(arguments: ServerMode.allCases)
        func aReconnectLoopOverTheAddressLimitWritesASummaryNotALineEach(mode: ServerMode) async throws {
            let server = try await ChatServerProcess(
                mode,
                // The count limit alone: the connection rate's refusals would be a second kind of line.
                arguments: ["--max-clients-per-address", "2", "--address-connection-rate", "0", "--log-level", "info"])
            defer { server.stop() }
            let held = try await (0..<2).asyncMap { try await TestClient.connect(to: server, nick: "held\($0)") }
            for _ in 0..<300 {
                let client = try BlockingSocket(to: server)
                _ = await client.readFrames(timeout: .seconds(5))
                client.close()
            }
            let refusals = server.child.lines.count { $0.contains("too many connections from") }
            #expect(refusals <= 5, "at most a burst of lines per window: \(refusals)")
            #expect(await server.child.waitForOutput("refusals summarised", timeout: .seconds(40)), "then one summary with the count")
            let summary = server.child.lines.first { $0.contains("refusals summarised") } ?? ""
            #expect(summary.contains("refusal.suppressed=295"), "\(summary)")
            held.forEach { $0.close() }
        }

        // MARK: Addresses and errors

        @Test(arguments: ServerMode.allCases)
        func doubleColonTakesIPv4AndIPv6Clients(mode: ServerMode) async throws {
            let server = try await ChatServerProcess(mode, arguments: AttackTests.budgetFlags + ["--host", "::"])
            defer { server.stop() }
            for host in ["127.0.0.1", "::1"] {
                let client = try BlockingSocket(to: server, host: host)
                await client.send([.hello(version: 1, nick: "v\(host.count)", password: nil), .goodbye(reason: "")])
                let (frames, _) = await client.readFrames()
                #expect(frames.first.map { if case .welcome = $0 { true } else { false } } == true, "\(host): \(frames)")
            }
        }

        @Test(arguments: ServerMode.allCases)
        func aMalformedHelloIsAnsweredWithItsFrameType(mode: ServerMode) async throws {
            let server = try await ChatServerProcess(mode, arguments: AttackTests.budgetFlags)
            defer { server.stop() }
            let client = try BlockingSocket(to: server)
            // hello with the nick "9lice": a nick may not start with a digit.
            await client.send([0x09, 0x01, 0x01, 0x05] + Array("9lice".utf8) + [0x00])
            let (frames, _) = await client.readFrames()
            guard case .error(.invalidNick, true, .hello, _) = frames.last else {
                Issue.record("expected error(invalidNick, frameType: hello), got \(frames)")
                return
            }
        }
    }
}

extension Sequence {
    /// Maps each element with an async throwing function, in order.
    fileprivate func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var result: [T] = []
        for element in self { result.append(try await transform(element)) }
        return result
    }
}
