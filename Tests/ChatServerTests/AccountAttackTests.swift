import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

/// The account attacks of issues 35 and 40 against the real `chat-server`, in every mode they
/// apply to (memory, durable, and a cluster node on its own Redis): names that must not leak
/// whether they have an account, a server operator's name that clients must not register,
/// logins an attacker must not lock an owner out of, and limits that must hold against many
/// addresses — room keys per room, registrations per server. Attackers connect from many
/// loopback addresses (127.0.0.0/8), which the server counts as different addresses.
@Suite("Account attacks against the real server", .serialized)
struct AccountAttackTests {
    static let everyMode: [ServerMode] = [.memory, .durable, .cluster]

    // MARK: Account names (issue 35, finding 1)

    /// An address guessing at a name without an account gets what one guessing at a name with
    /// an account gets: five `authenticationFailed`, then `throttled` — the same budget.
    @Test(arguments: everyMode)
    func aNameWithoutAnAccountHasTheGuessBudgetOfOneWith(_ mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode, arguments: ["--handshake-timeout", "60"])
        defer { server.stop() }
        let owner = try await TestClient.connect(to: server, nick: "victim", version: 3)
        try await owner.send(.register(password: "the right one"))
        #expect(try await registration(of: owner) == .registered(account: "victim"))
        owner.close()
        let known = await Self.loginAnswers(server, from: "127.0.0.2", account: "victim", count: 8)
        let unknown = await Self.loginAnswers(server, from: "127.0.0.3", account: "nobody", count: 8)
        let budget = Array(repeating: ErrorCode?.some(.authenticationFailed), count: 5) + Array(repeating: .throttled, count: 3)
        #expect(known == budget, "a name with an account")
        #expect(unknown == budget, "a name without one: the same answers, in the same number")
    }

    /// A login for a name without an account costs a check on the hashing pool, as one for a
    /// name with an account does (the check against the dummy hash): counted by
    /// `chat_password_hashing_jobs_total{job="verify"}`. The time it takes is not asserted here
    /// (Scripts/login-timing.sh measures it); that it takes the same job is.
    @Test(arguments: everyMode)
    func aLoginForANameWithoutAnAccountTakesAHashingJobAsOneWithAnAccountDoes(_ mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode, arguments: ["--handshake-timeout", "60", "--metrics", "127.0.0.1:0"])
        defer { server.stop() }
        let port = try #require(MetricsPortTests.metricsPort(of: server), "the server prints its metrics port:\n\(server.child.output)")
        let owner = try await TestClient.connect(to: server, nick: "victim", version: 3)
        try await owner.send(.register(password: "the right one"))
        #expect(try await registration(of: owner) == .registered(account: "victim"))
        owner.close()
        let verify = #"chat_password_hashing_jobs_total{job="verify"}"#
        var expected = 0.0
        for (account, source) in [("victim", "127.0.0.2"), ("nobody", "127.0.0.3"), ("NoBody2", "127.0.0.4")] {
            #expect(await Self.loginAnswers(server, from: source, account: account, count: 1) == [.authenticationFailed])
            expected += 1
            let counted = try await MetricsPortTests.metrics(port: port) { MetricsPortTests.value(of: verify, in: $0) == expected }
            #expect(counted != nil, "\(account): one password check on the hashing pool (\(expected) in all)")
        }
    }

    // MARK: A server operator's account (issue 40, finding 1)

    /// `--admin-account root2` before root2 exists: the server says so at start, no client may
    /// take the nick (so none can register it), a login to it fails as to any name — and the
    /// operator creates it with `chat-server account add`, after which it logs in and bans. With
    /// `--no-persistence` it cannot be created, and the warning says so.
    @Test(arguments: everyMode)
    func anAdminNameIsRefusedToClientsAndWarnedOfUntilTheOperatorCreatesIt(_ mode: ServerMode) async throws {
        let directory = try TemporaryDirectory(prefix: "chat-admin")
        defer { directory.remove() }
        let passwordFile = directory.path + "/password"
        try "root's own\n".write(toFile: passwordFile, atomically: true, encoding: .utf8)
        let redis = mode == .cluster ? try await RedisServerProcess() : nil
        defer { redis?.stop() }
        let place: [String] =
            switch mode {
            case .cluster: ["--cluster", "redis://127.0.0.1:\(redis!.port)"]
            case .memory: ["--no-persistence"]
            default: ["--data-dir", directory.path + "/data"]
            }
        let arguments = place + ["--admin-account", "Root2", "--handshake-timeout", "60", "--address-connection-rate", "0"]
        do {
            let server = try await ChatServerProcess(mode, arguments: arguments)
            defer { server.stop() }
            if mode == .cluster { #expect(await server.child.waitForOutput("cluster link up", timeout: .seconds(60))) }
            let warned = await server.child.waitForOutput("admin account root2 does not exist", timeout: .seconds(30))
            #expect(warned, "a warning at start names the missing admin account:\n\(server.child.output)")
            if mode == .memory { #expect(server.child.output.contains("--no-persistence it cannot exist")) }
            try await Self.expectAdminNickRefused(on: server)
            // Without a data directory there is nowhere to create it.
            if mode == .memory { return }
            if mode != .cluster {
                // Refused while the server holds the directory: it reads accounts at start.
                let early = try await Self.accountCommand(["add", "root2", "--password-file", passwordFile] + place)
                #expect(early.status != 0 && early.output.contains("stop the server first"), "\(early.output)")
                server.stop()
            }
            // The operator creates it, beside the server's data (stopped) or in the cluster's
            // Redis (while the node runs: a node reads an account when it is used).
            let created = try await Self.accountCommand(["add", "root2", "--password-file", passwordFile] + place)
            #expect(created.status == 0, "\(created.output)")
            if mode == .cluster {
                try await Self.expectOperatorPowers(on: server, password: "root's own")
                let listed = try await Self.accountCommand(["list"] + place)
                #expect(listed.status == 0 && listed.output.split(separator: "\n").contains("root2"), "\(listed.output)")
                return
            }
        }
        let server = try await ChatServerProcess(mode, arguments: arguments)
        defer { server.stop() }
        #expect(!server.child.output.contains("admin account root2 does not exist"), "\(server.child.output)")
        try await Self.expectOperatorPowers(on: server, password: "root's own")
        // The same command changes its password (read from standard input, as a script gives it)
        // and lists it.
        server.stop()
        let changed = try await Self.accountCommand(["passwd", "ROOT2"] + place, input: "a new one")
        #expect(changed.status == 0, "\(changed.output)")
        let listed = try await Self.accountCommand(["list"] + place)
        #expect(listed.status == 0 && listed.output.split(separator: "\n").contains("root2"), "\(listed.output)")
        let again = try await Self.accountCommand(["add", "root2", "--password-file", passwordFile] + place)
        #expect(again.status != 0 && again.output.contains("exists already"), "\(again.output)")
        let restarted = try await ChatServerProcess(mode, arguments: arguments)
        defer { restarted.stop() }
        try await Self.expectOperatorPowers(on: restarted, password: "a new one")
    }

    /// A nick listed in `--admin-account` without an account: a guest's `hello` and
    /// `changeNick` for it are refused `nickReserved` (so no client ever holds it to `register`
    /// it), and a version 3 `hello` with a login for it fails `authenticationFailed`.
    private static func expectAdminNickRefused(on server: ChatServerProcess) async throws {
        let guest = try BlockingSocket(port: server.port, source: "127.0.0.2")
        defer { guest.close() }
        await guest.send([.hello(version: 4, nick: "root2", password: nil)])
        #expect(await errorCode(from: guest) == .nickReserved, "a guest's hello as root2")
        let renamer = try await TestClient.connect(to: server, nick: "mallory", version: 4)
        defer { renamer.close() }
        try await renamer.send(.changeNick(nick: "ROOT2"))
        let refusal = try await renamer.waitFor("the answer to changeNick") { frame -> ErrorCode? in
            if case .error(let code, _, _, _) = frame { return code }
            if case .nickAccepted = frame { return .internal }
            return nil
        }
        #expect(refusal == .nickReserved, "a guest's changeNick to root2")
        let pretender = try BlockingSocket(port: server.port, source: "127.0.0.3")
        defer { pretender.close() }
        await pretender.send([.hello(version: 4, nick: "root2", password: nil), .login(account: "root2", password: "anything")])
        #expect(await errorCode(from: pretender) == .authenticationFailed)
    }

    /// The operator logs in to root2 with `password` and acts as a server operator: bans a nick
    /// from the server.
    private static func expectOperatorPowers(on server: ChatServerProcess, password: String) async throws {
        let root = try BlockingSocket(port: server.port, source: "127.0.0.5")
        defer { root.close() }
        await root.send([.hello(version: 4, nick: "root2", password: nil), .login(account: "root2", password: password)])
        let welcomed = await frames(from: root, until: { $0 == .loggedIn(account: "root2") })
        #expect(welcomed.last == .loggedIn(account: "root2"), "\(welcomed)")
        await root.send([.serverBan(on: true, mask: "nick:mallory", reason: "test")])
        let done = await frames(from: root, until: { if case .done = $0 { true } else { false } })
        #expect(done.last.map { if case .done(.serverBan, _) = $0 { true } else { false } } == true, "\(done)")
    }

    /// Runs `chat-server account …` with `input` as a line on its standard input (a pipe, not a
    /// terminal), and waits for it (30 s at most).
    static func accountCommand(_ arguments: [String], input: String? = nil) async throws -> (status: Int32, output: String) {
        let child = try ChildProcess(try ChildProcess.builtExecutable(named: "chat-server"), ["account"] + arguments)
        if let input { child.send(input) }
        child.closeInput()
        let status = await child.waitForExit() ?? -1
        return (status, child.output)
    }

    // MARK: Logins an attacker must not lock out (issue 40, finding 3)

    /// Three hundred addresses in two /24s keep the hashing pool full with wrong logins (closed
    /// loop, `busy` answers and all); the owner of an account logs in five times meanwhile, from
    /// an address of its own, and gets in every time: its /24 has a share of the queue the
    /// flood cannot take (PasswordHashingPool). Before, it was `busy` nearly every time.
    @Test(arguments: everyMode)
    func anOwnerLogsInDuringAHashingFloodFromThreeHundredAddresses(_ mode: ServerMode) async throws {
        let server = try await ChatServerProcess(
            mode,
            arguments: [
                "--handshake-timeout", "60", "--max-clients", "1000", "--address-connection-rate", "0", "--rate-limit", "0",
                "--login-attempts-per-account", "1000000", "--login-attempts-per-address", "1000000", "--hashing-queue", "32",
            ])
        defer { server.stop() }
        // The flood's targets: thirty accounts, so that the windows of one account from one
        // address (5 a minute) leave every attacker 150 checks — the pool, not the windows, is
        // what it meets.
        var targets: [String] = []
        for index in 0..<31 {
            let nick = index == 30 ? "owner" : "target\(index)"
            let socket = try BlockingSocket(port: server.port, source: "127.0.9.\(index / 3 + 1)")
            defer { socket.close() }
            await socket.send([.hello(version: 3, nick: nick, password: nil), .register(password: "pw-\(nick)")])
            #expect(await answer(from: socket) == .registered(account: nick))
            if index < 30 { targets.append(nick) }
        }
        let sources = (0..<300).map { "127.0.\(1 + $0 / 150).\(1 + $0 % 150)" }
        let flood = try LoginFlood(port: server.port, sources: sources, targets: targets)
        // The flood is at the pool once some of it is refused busy.
        let saturated = await eventually(timeout: .seconds(30)) { flood.answered[.busy, default: 0] > 0 }
        #expect(saturated, "the flood fills the hashing queue: \(flood.answered)")
        var owner: [Frame] = []
        for attempt in 0..<5 {
            let socket = try BlockingSocket(port: server.port, source: "127.0.0.1")
            defer { socket.close() }
            await socket.send([.hello(version: 3, nick: "owner\(attempt)", password: nil), .login(account: "owner", password: "pw-owner")])
            owner.append(await answer(from: socket))
        }
        let busyBefore = flood.answered[.busy, default: 0]
        let stillFlooding = await eventually(timeout: .seconds(10)) { flood.answered[.busy, default: 0] > busyBefore }
        let answers = await flood.stop()
        #expect(owner == Array(repeating: .loggedIn(account: "owner"), count: 5), "the owner's five logins during the flood: \(owner)")
        #expect(stillFlooding, "the flood still filled the queue after the owner's logins: \(answers)")
        #expect(answers[.internal] == nil, "no attacker was cut off: \(answers)")
    }

    /// Fifty addresses guess wrong at an account: each address's first guess is checked, which
    /// fills the account's window (20), and then every address that guessed wrong is refused —
    /// while the owner, from an address that has not guessed, logs in. Before, five wrong
    /// guesses from anywhere kept the owner out.
    @Test(arguments: everyMode)
    func anOwnerFromAnAddressThatHasNotGuessedLogsInWhileTheGuessersAreThrottled(_ mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode, arguments: ["--handshake-timeout", "60"])
        defer { server.stop() }
        let owner = try await TestClient.connect(to: server, nick: "victim", version: 3)
        try await owner.send(.register(password: "the right one"))
        #expect(try await registration(of: owner) == .registered(account: "victim"))
        owner.close()
        var guessers: [BlockingSocket] = []
        defer { for guesser in guessers { guesser.close() } }
        var first: [ErrorCode: Int] = [:]
        for host in 2...51 {
            let guesser = try BlockingSocket(port: server.port, source: "127.0.3.\(host)")
            guessers.append(guesser)
            await guesser.send([.hello(version: 3, nick: "g\(host)", password: nil), .login(account: "victim", password: "guess \(host)")])
            first[await errorCode(from: guesser) ?? .internal, default: 0] += 1
        }
        #expect(first == [.authenticationFailed: 50], "each address's first guess is checked: \(first)")
        var later: [ErrorCode: Int] = [:]
        for guesser in guessers {
            await guesser.send((0..<3).map { Frame.login(account: "victim", password: "again \($0)") })
            for _ in 0..<3 { later[await errorCode(from: guesser) ?? .internal, default: 0] += 1 }
        }
        #expect(later == [.throttled: 150], "the account's window is full for addresses that guessed wrong: \(later)")
        let home = try BlockingSocket(port: server.port, source: "127.0.0.1")
        defer { home.close() }
        await home.send([.hello(version: 3, nick: "victim", password: nil), .login(account: "victim", password: "the right one")])
        #expect(await frames(from: home, until: { $0 == .loggedIn(account: "victim") }).last == .loggedIn(account: "victim"))
    }

    // MARK: Limits that counted per address only (issue 40, finding 4)

    /// Fifty addresses guess a room's key twenty times each (the old figure: 1,000 keys
    /// compared): each address's first key is compared, which fills the room's window, and the
    /// rest are refused uncompared; a member who knows the key, from an address of its own, joins.
    @Test(arguments: everyMode)
    func keyGuessesFromFiftyAddressesAreCountedPerRoom(_ mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode, arguments: ["--handshake-timeout", "60"])
        defer { server.stop() }
        let op = try await TestClient.connect(to: server, nick: "op", version: 4)
        defer { op.close() }
        try await op.send(.join(room: "vault"))
        _ = try await op.waitFor("op's join") { if case .roomModes("vault", _) = $0 { true } else { nil } }
        try await op.send(.setMode(room: "vault", mode: .key, on: true, argument: "sekrit"))
        _ = try await op.waitFor("the key set") { if case .modeChanged("vault", _, _, _, .key, true, _) = $0 { true } else { nil } }
        var guessers: [BlockingSocket] = []
        defer { for guesser in guessers { guesser.close() } }
        var first: [ErrorCode: Int] = [:]
        for host in 2...51 {
            let guesser = try BlockingSocket(port: server.port, source: "127.0.4.\(host)")
            guessers.append(guesser)
            await guesser.send([.hello(version: 4, nick: "k\(host)", password: nil), .joinWithKey(room: "vault", key: "guess \(host)")])
            first[await errorCode(from: guesser) ?? .internal, default: 0] += 1
        }
        #expect(first == [.badRoomKey: 50], "\(first)")
        var later: [ErrorCode: Int] = [:]
        for guesser in guessers {
            await guesser.send((0..<19).map { Frame.joinWithKey(room: "vault", key: "again \($0)") })
            for _ in 0..<19 { later[await errorCode(from: guesser) ?? .internal, default: 0] += 1 }
        }
        #expect(later == [.throttled: 950], "compared keys per room: 50 (each address's first), not 1,000: \(later)")
        let member = try BlockingSocket(port: server.port, source: "127.0.0.1")
        defer { member.close() }
        await member.send([.hello(version: 4, nick: "friend", password: nil), .joinWithKey(room: "vault", key: "sekrit")])
        let joined = await frames(from: member, until: { if case .joined("vault", _, _, "friend") = $0 { true } else { false } })
        #expect(joined.last.map { if case .joined = $0 { true } else { false } } == true, "\(joined)")
    }

    /// Three hundred addresses register one account each (the old figure: 900 in 12 s from
    /// 300): the server takes `--registrations-per-server` (60) an hour in all, through any
    /// number of addresses, and refuses the rest `throttled`.
    @Test(arguments: everyMode)
    func registrationsFromThreeHundredAddressesAreHeldToTheServersRate(_ mode: ServerMode) async throws {
        let server = try await ChatServerProcess(
            mode, arguments: ["--handshake-timeout", "60", "--max-clients", "1000", "--address-connection-rate", "0", "--hashing-queue", "512"])
        defer { server.stop() }
        var sockets: [BlockingSocket] = []
        defer { for socket in sockets { socket.close() } }
        for index in 0..<300 {
            let socket = try BlockingSocket(port: server.port, source: "127.0.\(5 + index / 150).\(1 + index % 150)")
            sockets.append(socket)
            await socket.send([.hello(version: 3, nick: "r\(index)", password: nil), .register(password: "pw")])
        }
        var registered = 0
        var refused: [ErrorCode: Int] = [:]
        for socket in sockets {
            switch await answer(from: socket) {
            case .registered: registered += 1
            case .error(let code, _, _, _): refused[code, default: 0] += 1
            default: refused[.internal, default: 0] += 1
            }
        }
        #expect(registered == 60, "registrations per hour from every address together: \(registered), refused \(refused)")
        #expect(refused == [.throttled: 240], "\(refused)")
    }

    // MARK: Helpers

    /// The codes of the answers to `count` wrong logins at `account`, pipelined behind a version
    /// 3 `hello` from `source`; the passwords are `password` followed by a number.
    static func loginAnswers(
        _ server: ChatServerProcess, from source: String, account: String, count: Int, password: String = "wrong "
    ) async -> [ErrorCode?] {
        guard let socket = try? BlockingSocket(port: server.port, source: source) else { return [] }
        defer { socket.close() }
        let nick = "g" + source.split(separator: ".").suffix(2).joined(separator: "x")
        await socket.send([.hello(version: 3, nick: nick, password: nil)] + (0..<count).map { Frame.login(account: account, password: password + "\($0)") })
        var codes: [ErrorCode?] = []
        for _ in 0..<count { codes.append(await errorCode(from: socket)) }
        return codes
    }
}
