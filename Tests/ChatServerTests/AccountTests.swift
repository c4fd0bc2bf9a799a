import ChatProtocol
import Glibc
import Testing
import TestSupport

/// Accounts against the real `chat-server`, in memory and durable modes and on a cluster node
/// (its own Redis) where the behaviour is the same: register, log in, the reserved nick,
/// ghosting, restarts, and the hostile cases of docs/SECURITY.md with their figures. What only a
/// cluster has — two nodes — is ClusterAccountTests. Guessers
/// connect from many loopback addresses (127.0.0.2 …), which the server counts as different
/// addresses and still lets send passwords in plain text (loopback).
@Suite("Accounts against the real server", .serialized)
struct AccountTests {
    static let modes: [ServerMode] = [.memory, .durable]
    /// The modes a behaviour is the same in, a cluster node included.
    static let everyMode: [ServerMode] = [.memory, .durable, .cluster]

    @Test(arguments: everyMode)
    func registerReserveLoginWithHelloGhostChangeAndDrop(_ mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode, arguments: ["--handshake-timeout", "60"])
        defer { server.stop() }
        let first = try await TestClient.connect(to: server, nick: "alice", version: 3)
        defer { first.close() }
        #expect(first.connection.welcome.version == 3)
        try await first.send(.register(password: "hunter2"))
        #expect(try await registration(of: first) == .registered(account: "alice"))

        // A guest of any version cannot take the nick, whoever holds it.
        let guest = try BlockingSocket(port: server.port)
        defer { guest.close() }
        await guest.send([.hello(version: 1, nick: "ALICE", password: nil)])
        #expect(await errorCode(from: guest) == .nickReserved)

        // The owner again, with the login behind its hello: the stale first connection is ghosted.
        let second = try BlockingSocket(port: server.port, source: "127.0.0.2")
        defer { second.close() }
        await second.send([.hello(version: 3, nick: "alice", password: nil), .login(account: "alice", password: "hunter2")])
        let welcomed = await frames(from: second, until: { $0 == .loggedIn(account: "alice") })
        #expect(welcomed.first.map { if case .welcome(3, "alice", _, _) = $0 { true } else { false } } == true, "\(welcomed)")
        let ghosted = try await first.readUntilClosed()
        #expect(ghosted.contains { if case .error(.ghosted, true, _, _) = $0 { true } else { false } }, "\(ghosted)")

        await second.send([.changePassword(old: "hunter2", new: "correct horse")])
        #expect(await frames(from: second, until: { $0 == .passwordChanged(account: "alice") }).last == .passwordChanged(account: "alice"))
        await second.send([.dropAccount(password: "hunter2")])
        #expect(await errorCode(from: second) == .authenticationFailed)
        await second.send([.dropAccount(password: "correct horse")])
        #expect(await frames(from: second, until: { $0 == .accountDropped(account: "alice") }).last == .accountDropped(account: "alice"))
        await second.send([.goodbye(reason: "")])
        // Dropped: the nick is anyone's again.
        let anyone = try await TestClient.connect(to: server, nick: "alice", version: 1)
        anyone.close()
    }

    @Test(arguments: everyMode)
    func aLoginAfterWelcomeTakesTheNickAndVersion1And2ClientsChatWithVersion3Ones(_ mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode, arguments: ["--handshake-timeout", "60"])
        defer { server.stop() }
        let owner = try await TestClient.connect(to: server, nick: "carol", version: 3)
        try await owner.send(.register(password: "pw"))
        #expect(try await registration(of: owner) == .registered(account: "carol"))
        owner.close()
        let v1 = try await TestClient.connect(to: server, nick: "one", version: 1)
        let v2 = try await TestClient.connect(to: server, nick: "two", version: 2)
        defer {
            v1.close()
            v2.close()
        }
        #expect(v1.connection.welcome.version == 1)
        #expect(v2.connection.welcome.version == 2)
        try await v1.join("r")
        try await v2.send(.join(room: "r"))
        _ = try await v2.waitFor("joined") { if case .joined("r", _, _, "two") = $0 { true } else { nil } }
        let guest = try await TestClient.connect(to: server, nick: "guest7", version: 3)
        defer { guest.close() }
        try await guest.send(.join(room: "r"))
        _ = try await guest.waitFor("joined") { if case .joined("r", _, _, "guest7") = $0 { true } else { nil } }
        // Waits until carol's old connection is gone, so the login needs no ghosting.
        try await guest.send(.login(account: "Carol", password: "pw"))
        _ = try await guest.waitFor("loggedIn") { $0 == .loggedIn(account: "carol") ? true : nil }
        for client in [v1, v2] {
            _ = try await client.waitFor("the rename") { if case .nickChanged("r", _, _, "guest7", "carol") = $0 { true } else { nil } }
        }
        try await guest.send(.say(room: "r", text: "hello from an account"))
        for client in [v1, v2] {
            _ = try await client.waitFor("carol's line") { if case .message("r", _, _, "carol", "hello from an account") = $0 { true } else { nil } }
        }
        // A version 2 session's account frames are skipped, as a version 2 server would.
        try await v2.send([.register(password: "pw"), .ping(token: 9)])
        #expect(try await v2.waitFor("pong") { if case .pong(let token) = $0 { token } else if case .error = $0 { 0 } else { nil } } == 9)
    }

    @Test(arguments: modes)
    func accountsSurviveARestartInDurableModeAndAreLostInMemoryMode(_ mode: ServerMode) async throws {
        let directory = try TemporaryDirectory(prefix: "chat-accounts")
        defer { directory.remove() }
        let storage = mode == .durable ? ["--data-dir", directory.path] : ["--no-persistence"]
        do {
            let server = try await ChatServerProcess(mode, arguments: storage + ["--handshake-timeout", "60"])
            defer { server.stop() }
            let alice = try await TestClient.connect(to: server, nick: "alice", version: 3)
            try await alice.send(.register(password: "hunter2"))
            #expect(try await registration(of: alice) == .registered(account: "alice"))
            alice.close()
        }
        let server = try await ChatServerProcess(mode, arguments: storage + ["--handshake-timeout", "60"])
        defer { server.stop() }
        let guest = try BlockingSocket(port: server.port)
        defer { guest.close() }
        await guest.send([.hello(version: 1, nick: "alice", password: nil)])
        let answer = await guest.nextFrame()
        if mode == .durable {
            #expect(answer.map { if case .error(.nickReserved, true, _, _) = $0 { true } else { false } } == true, "\(String(describing: answer))")
            let owner = try BlockingSocket(port: server.port)
            defer { owner.close() }
            await owner.send([.hello(version: 3, nick: "alice", password: nil), .login(account: "alice", password: "hunter2")])
            #expect(await frames(from: owner, until: { $0 == .loggedIn(account: "alice") }).last == .loggedIn(account: "alice"))
        } else {
            #expect(answer.map { if case .welcome(_, "alice", _, _) = $0 { true } else { false } } == true, "memory mode forgets: \(String(describing: answer))")
        }
    }

    /// docs/SECURITY.md ("Guessing"): fifty addresses guessing at once get each address's first
    /// guess checked (an address that has not guessed wrong is always let try: the owner's way
    /// in) and, besides, at most what is left of `--login-attempts-per-account` (20 a minute):
    /// never more than 50 + 20 of the 150. AccountAttackTests plays the same in two rounds, for
    /// exact figures.
    @Test(arguments: everyMode)
    func aBruteForceFromFiftyAddressesIsHeldToTheStatedGuessesPerMinute(_ mode: ServerMode) async throws {
        // A hashing queue that holds every guess: the windows, not the pool, are under test.
        let server = try await ChatServerProcess(mode, arguments: ["--handshake-timeout", "60", "--hashing-queue", "200"])
        defer { server.stop() }
        let owner = try await TestClient.connect(to: server, nick: "victim", version: 3)
        try await owner.send(.register(password: "the right one"))
        #expect(try await registration(of: owner) == .registered(account: "victim"))
        var guessers: [BlockingSocket] = []
        defer { for guesser in guessers { guesser.close() } }
        for host in 2...51 {
            let guesser = try BlockingSocket(port: server.port, source: "127.0.0.\(host)")
            guessers.append(guesser)
            await guesser.send(
                [.hello(version: 3, nick: "g\(host)", password: nil)]
                    + (0..<3).map { Frame.login(account: "victim", password: "guess \(host) \($0)") })
        }
        var answers: [ErrorCode: Int] = [:]
        for guesser in guessers {
            for _ in 0..<3 { answers[await errorCode(from: guesser) ?? .internal, default: 0] += 1 }
        }
        let checked = answers[.authenticationFailed, default: 0]
        #expect((50..<70).contains(checked), "checked guesses: each address's first, and fewer than 20 more: \(answers)")
        #expect(answers[.throttled, default: 0] == 150 - checked, "\(answers)")
        // The guessing cost the owner's session nothing: it is still served.
        try await owner.send(.ping(token: 1))
        #expect(try await owner.waitFor("pong") { if case .pong(1) = $0 { true } else { nil } })
        owner.close()
    }

    /// 1,000 wrong logins at once: each is answered `busy`, `throttled` or `authenticationFailed`
    /// — never left unanswered — control clients keep chatting meanwhile, and the server's peak
    /// resident memory stays within `--max-memory`. (Latency under the flood is measured by
    /// Scripts/login-flood.sh, not asserted here.)
    @Test(arguments: everyMode)
    func aFloodOfAThousandWrongLoginsIsAnsweredClearlyWhileChatGoesOn(_ mode: ServerMode) async throws {
        let maxMemory = 192
        let server = try await ChatServerProcess(
            mode,
            arguments: [
                "--handshake-timeout", "60", "--max-memory", "\(maxMemory)M", "--max-clients", "2000",
                "--address-connection-rate", "0", "--login-attempts-per-account", "100000", "--login-attempts-per-address", "100000",
                "--hashing-workers", "1", "--hashing-queue", "16",
            ])
        defer { server.stop() }
        let owner = try await TestClient.connect(to: server, nick: "victim", version: 3)
        try await owner.send(.register(password: "the right one"))
        #expect(try await registration(of: owner) == .registered(account: "victim"))
        owner.close()
        let alice = try await TestClient.connect(to: server, nick: "alice", version: 3)
        let bob = try await TestClient.connect(to: server, nick: "bob", version: 3)
        defer {
            alice.close()
            bob.close()
        }
        try await alice.send(.join(room: "r"))
        _ = try await alice.waitFor("joined") { if case .joined("r", _, _, "alice") = $0 { true } else { nil } }
        try await bob.send(.join(room: "r"))
        _ = try await bob.waitFor("joined") { if case .joined("r", _, _, "bob") = $0 { true } else { nil } }

        var flood: [BlockingSocket] = []
        defer { for socket in flood { socket.close() } }
        for index in 0..<1_000 {
            let socket = try BlockingSocket(port: server.port, source: "127.0.\(1 + index / 200).\(2 + index % 200)")
            flood.append(socket)
            await socket.send([.hello(version: 3, nick: "f\(index)", password: nil), .login(account: "victim", password: "wrong \(index)")])
            if index % 100 == 0 {
                // Chat goes on during the flood.
                try await alice.send(.say(room: "r", text: "line \(index / 100)"))
            }
        }
        let lines = try await bob.collect(10, "alice's lines during the flood") { frame -> String? in
            if case .message("r", _, _, "alice", let text) = frame { text } else { nil }
        }
        #expect(lines == (0..<10).map { "line \($0)" })
        var answers: [ErrorCode: Int] = [:]
        for socket in flood { answers[await errorCode(from: socket) ?? .internal, default: 0] += 1 }
        #expect(answers.values.reduce(0, +) == 1_000)
        #expect(Set(answers.keys).isSubset(of: [.busy, .authenticationFailed]), "\(answers)")
        #expect((answers[.busy] ?? 0) > 0, "a queue of 16 cannot take 1,000 at once: \(answers)")
        let peak = try #require(server.child.peakResidentBytes)
        #expect(peak <= maxMemory << 20, "peak RSS \(peak >> 20) MiB within --max-memory \(maxMemory) MiB")
    }

    /// docs/SECURITY.md: `--registrations-per-address` (3) per hour from one address, and never
    /// more than `--max-accounts`.
    @Test(arguments: everyMode)
    func aRegistrationFloodFromOneAddressIsRateLimitedAndTheCapHolds(_ mode: ServerMode) async throws {
        let server = try await ChatServerProcess(
            mode, arguments: ["--handshake-timeout", "60", "--max-accounts", "4", "--address-connection-rate", "0"])
        defer { server.stop() }
        var answers: [Frame] = []
        var sockets: [BlockingSocket] = []
        defer { for socket in sockets { socket.close() } }
        for index in 0..<20 {
            let socket = try BlockingSocket(port: server.port, source: "127.0.0.9")
            sockets.append(socket)
            await socket.send([.hello(version: 3, nick: "r\(index)", password: nil), .register(password: "pw")])
        }
        for socket in sockets { answers.append(await answer(from: socket)) }
        #expect(answers.filter { if case .registered = $0 { true } else { false } }.count == 3, "\(answers)")
        #expect(answers.filter { if case .error(.throttled, false, .register, _) = $0 { true } else { false } }.count == 17)
        var others: [Frame] = []
        for index in 0..<3 {
            let socket = try BlockingSocket(port: server.port, source: "127.0.1.\(index + 1)")
            sockets.append(socket)
            await socket.send([.hello(version: 3, nick: "o\(index)", password: nil), .register(password: "pw")])
            others.append(await answer(from: socket))
        }
        #expect(others.filter { if case .registered = $0 { true } else { false } }.count == 1, "\(others)")
        #expect(others.filter { if case .error(.tooManyAccounts, _, _, _) = $0 { true } else { false } }.count == 2, "\(others)")
    }
}
