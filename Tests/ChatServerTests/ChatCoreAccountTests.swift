import ChatAccounts
import ChatProtocol
import Testing

@testable import ChatCore
@testable import ChatServer

/// A cluster node's chat without sockets, for the exact order of a node's account requests and
/// their answers: the tests below send the cluster's answers by hand (a claim answered
/// `reserved`, a client gone before its claim's answer), and its account work is answered by an
/// account table kept here — hashes with cheap parameters, guesses and registrations counted
/// without limit (the windows' figures are the real scripts', which the suite above runs against
/// a real Redis on `CoreBackend.cluster`).
private struct NodeAccountHarness {
    var core: ChatCore
    var now = ServerTime(wallMillis: 1_700_000_000_000, uptimeMillis: 1_000_000)
    var nextSlot = 0
    /// The accounts Redis holds, and the guesses it counted per account key.
    var redisAccounts: [String: AccountRecord] = [:]
    var redisGuesses: [String: Int] = [:]
    let hashing = PasswordHashing(passes: 1, memoryBytes: 8 << 10)

    init() {
        var configuration = ChatServerConfiguration()
        configuration.turnOffRateLimits()
        core = ChatCore(configuration: configuration, log: .cluster)
        core.clusterAvailability(true)
    }

    mutating func open() -> ClientID {
        let id = ClientID(nextSlot)
        nextSlot += 1
        #expect(core.clientConnected(id, address: "127.0.0.1", at: now) == nil)
        return id
    }

    @discardableResult
    mutating func send(_ frame: Frame, from id: ClientID) -> [ChatAction] {
        var actions: [ChatAction] = []
        core.received(frame, size: FrameEncoder.encode(frame).count, from: id, at: now, into: &actions)
        var work = core.takeAccountWork()
        while !work.isEmpty {
            for item in work { answer(item, into: &actions) }
            work = core.takeAccountWork()
        }
        return actions
    }

    private mutating func answer(_ work: AccountWork, into actions: inout [ChatAction]) {
        let answer: AccountAnswer
        switch work.job {
        case .hash(let password):
            answer = .hashing(.hashed(hashing.hash(password)))
        case .verify(let password, let stored):
            // No stored hash: the pool's dummy, which never matches.
            answer = .hashing(.verified(stored.map { PasswordHashing.verify(password, against: $0) } ?? false, rehashed: nil))
        case .save, .delete:
            answer = .stored(.success(()))
        case .guess(let key, _):
            redisGuesses[key, default: 0] += 1
            answer = .guessed(.success(redisAccounts[key].map { .admitted($0) } ?? .noAccount))
        case .giveBack(let key, _):
            redisGuesses[key, default: 0] -= 1
            return
        case .countRegistration:
            answer = .registrationCounted(.success(.counted))
        case .giveBackRegistration:
            return
        case .create(let record):
            let exists = redisAccounts[record.key] != nil
            if !exists { redisAccounts[record.key] = record }
            answer = .created(.success(exists ? .exists : .created))
        }
        core.accountAnswered(work.ticket, answer, at: now, into: &actions)
    }
}

extension Harness {
    /// Opens a connection from `address` that the server lets in (nothing refuses it); its id.
    fileprivate mutating func opened(from address: String = "127.0.0.1", encrypted: Bool = false) -> ClientID {
        let (id, refusal) = open(from: address, encrypted: encrypted)
        #expect(refusal.isEmpty, "\(address) is let in: \(refusal)")
        return id
    }
}

private func errorCode(to id: ClientID, in actions: [ChatAction]) -> ErrorCode? {
    for frame in frames(to: id, in: actions) { if case .error(let code, _, _, _) = frame { return code } }
    for case .disconnect(id, let disconnection, _) in actions { return disconnection.code }
    return nil
}

private func disconnected(_ id: ClientID, in actions: [ChatAction]) -> Disconnection? {
    for case .disconnect(id, let disconnection, _) in actions { return disconnection }
    return nil
}

@Suite("Account rules without sockets (ChatCore+Accounts)")
struct ChatCoreAccountTests {
    @Test(arguments: CoreBackend.allCases) func registeringReservesTheNickFromGuestsInEveryLetterCase(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("Alice", version: 3)
        #expect(frames(to: alice, in: await chat.send(.register(password: "hunter2"), from: alice)) == [.registered(account: "Alice")])
        #expect(chat.core.account(of: alice) == "Alice")
        _ = await chat.send(.goodbye(reason: ""), from: alice)
        // A version 1 guest cannot log in, so it is refused at once.
        let old = chat.opened()
        #expect(disconnected(old, in: await chat.send(.hello(version: 1, nick: "aLICE", password: nil), from: old))?.code == .nickReserved)
        let guest = await chat.connect("bob", version: 3)
        #expect(errorCode(to: guest, in: await chat.send(.changeNick(nick: "alice"), from: guest)) == .nickReserved)
        #expect(chat.core.nick(of: guest) == "bob")
    }

    @Test(arguments: CoreBackend.allCases) func aVersion3HelloForAReservedNickWaitsForItsLoginAndIsWelcomedThen(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let first = await chat.connect("alice", version: 3)
        await chat.send(.register(password: "hunter2"), from: first)
        await chat.send(.join(room: "general"), from: first)
        let watcher = await chat.connect("bob", version: 3)
        await chat.send(.join(room: "general"), from: watcher)
        // A second connection of the owner: the stale first one is ghosted.
        let second = chat.opened()
        #expect(await chat.send(.hello(version: 3, nick: "alice", password: nil), from: second).isEmpty, "nothing before the login")
        let actions = await chat.send(.login(account: "alice", password: "hunter2"), from: second)
        let toSecond = frames(to: second, in: actions)
        #expect(toSecond.first == .welcome(version: 3, nick: "alice", maxFrameSize: 16_384, motd: ""))
        #expect(toSecond.last == .loggedIn(account: "alice"))
        #expect(disconnected(first, in: actions)?.code == .ghosted)
        #expect(frames(to: watcher, in: actions).contains { if case .quit(_, _, _, "alice", _) = $0 { true } else { false } })
        #expect(chat.core.nick(of: second) == "alice")
    }

    @Test(arguments: CoreBackend.allCases) func aHelloForAReservedNickFollowedByAnythingButItsLoginIsRefused(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let owner = await chat.connect("alice", version: 3)
        await chat.send(.register(password: "hunter2"), from: owner)
        let other = chat.opened()
        await chat.send(.hello(version: 3, nick: "alice", password: nil), from: other)
        #expect(disconnected(other, in: await chat.send(.join(room: "general"), from: other))?.code == .nickReserved)
        let wrongAccount = chat.opened()
        await chat.send(.hello(version: 3, nick: "alice", password: nil), from: wrongAccount)
        #expect(disconnected(wrongAccount, in: await chat.send(.login(account: "bob", password: "x"), from: wrongAccount))?.code == .nickReserved)
        let wrongPassword = chat.opened()
        await chat.send(.hello(version: 3, nick: "alice", password: nil), from: wrongPassword)
        let refusal = disconnected(wrongPassword, in: await chat.send(.login(account: "alice", password: "nope"), from: wrongPassword))
        #expect(refusal?.code == .authenticationFailed)
        #expect(chat.core.nick(of: owner) == "alice", "the owner keeps its nick")
    }

    @Test(arguments: CoreBackend.allCases) func aVersion3GuestForAReservedNickIsRefusedWhenNoLoginFollowsItsHello(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let owner = await chat.connect("alice", version: 3)
        await chat.send(.register(password: "hunter2"), from: owner)
        let guest = chat.opened()
        #expect(await chat.send(.hello(version: 3, nick: "alice", password: nil), from: guest).isEmpty)
        var actions: [ChatAction] = []
        chat.now.uptimeMillis += chat.core.limits.accounts.loginWait.milliseconds - 1
        chat.core.tick(at: chat.now, into: &actions)
        #expect(disconnected(guest, in: actions) == nil, "the login may still come")
        chat.now.uptimeMillis += 1
        chat.core.tick(at: chat.now, into: &actions)
        #expect(disconnected(guest, in: actions)?.code == .nickReserved)
    }

    @Test(arguments: CoreBackend.allCases) func aLoginAfterWelcomeTakesTheAccountsNick(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let owner = await chat.connect("alice", version: 3)
        await chat.send(.register(password: "hunter2"), from: owner)
        await chat.send(.goodbye(reason: ""), from: owner)
        let later = await chat.connect("guest1", version: 3)
        await chat.send(.join(room: "general"), from: later)
        let actions = await chat.send(.login(account: "ALICE", password: "hunter2"), from: later)
        let seen = frames(to: later, in: actions)
        #expect(seen.contains(.nickAccepted(nick: "alice")))
        #expect(seen.contains { if case .nickChanged(_, _, _, "guest1", "alice") = $0 { true } else { false } })
        #expect(seen.last == .loggedIn(account: "alice"), "docs/PROTOCOL.md: nickChanged, then loggedIn")
        #expect(chat.core.nick(of: later) == "alice")
    }

    @Test(arguments: CoreBackend.allCases) func wrongPasswordsAndUnknownAccountsGetTheSameAnswer(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let owner = await chat.connect("alice", version: 3)
        await chat.send(.register(password: "hunter2"), from: owner)
        let guest = await chat.connect("bob", version: 3)
        #expect(errorCode(to: guest, in: await chat.send(.login(account: "alice", password: "wrong"), from: guest)) == .authenticationFailed)
        #expect(errorCode(to: guest, in: await chat.send(.login(account: "nobody", password: "wrong"), from: guest)) == .authenticationFailed)
        #expect(chat.core.nick(of: guest) == "bob")
    }

    /// The rule of `GuessWindows`: past the account's window only an address that has not
    /// guessed wrong at it is checked, so fifty addresses get one guess each, the account's window
    /// fills, their second and third guesses are refused — and the owner, from an address of its
    /// own, still gets in.
    @Test(arguments: CoreBackend.allCases) func guessesFromFiftyAddressesGetOneEachPastTheAccountsWindowAndTheOwnerStillGetsIn(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let owner = await chat.connect("alice", version: 3)
        await chat.send(.register(password: "hunter2"), from: owner)
        let limits = chat.core.limits.accounts
        #expect(limits.loginAttemptsPerAccount < 50, "the account's window fills in the first round")
        var guessers: [ClientID] = []
        for host in 2...51 {
            let guesser = await chat.connect("guess\(host)", version: 3, from: "127.0.0.\(host)")
            guessers.append(guesser)
            #expect(errorCode(to: guesser, in: await chat.send(.login(account: "alice", password: "first"), from: guesser)) == .authenticationFailed)
        }
        #expect(chat.accounts.verified == 50, "each address's first guess is checked")
        for guesser in guessers {
            for attempt in 0..<2 {
                let code = errorCode(to: guesser, in: await chat.send(.login(account: "alice", password: "again \(attempt)"), from: guesser))
                #expect(code == .throttled, "an address that guessed wrong, past the account's window")
            }
        }
        #expect(chat.accounts.verified == 50)
        let home = await chat.connect("alice2", version: 3, from: "127.0.0.200")
        #expect(frames(to: home, in: await chat.send(.login(account: "alice", password: "hunter2"), from: home)).last == .loggedIn(account: "alice"))
        // A typo from the owner's address makes it one that guessed wrong: then it waits like the others.
        let typo = await chat.connect("carol", version: 3, from: "127.0.0.201")
        #expect(errorCode(to: typo, in: await chat.send(.login(account: "alice", password: "hunter3"), from: typo)) == .authenticationFailed)
        #expect(errorCode(to: typo, in: await chat.send(.login(account: "alice", password: "hunter2"), from: typo)) == .throttled)
        // The window ends; every address is clean again.
        _ = await chat.tick(advancingBy: limits.loginWindow.milliseconds)
        #expect(frames(to: typo, in: await chat.send(.login(account: "alice", password: "hunter2"), from: typo)).last == .loggedIn(account: "alice"))
    }

    /// Finding 1 of issue 35: an address has the same budget for a name with an account and one
    /// without — the same answers, in the same number, each a check on the hashing pool.
    @Test(arguments: CoreBackend.allCases) func aNameWithoutAnAccountHasTheBudgetOfOneWithAndCostsTheSameHash(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let owner = await chat.connect("alice", version: 3)
        await chat.send(.register(password: "hunter2"), from: owner)
        var answers: [String: [ErrorCode?]] = [:]
        for (name, address) in [("alice", "127.0.0.2"), ("nobody", "127.0.0.3")] {
            let guesser = await chat.connect("g-\(name)", version: 3, from: address)
            let before = chat.accounts.verified
            for attempt in 0..<8 {
                answers[name, default: []].append(errorCode(to: guesser, in: await chat.send(.login(account: name, password: "wrong \(attempt)"), from: guesser)))
            }
            #expect(chat.accounts.verified - before == 5, "\(name): five checks on the pool")
        }
        let budget = Array(repeating: ErrorCode?.some(.authenticationFailed), count: 5) + Array(repeating: .throttled, count: 3)
        #expect(answers["alice"] == budget)
        #expect(answers["nobody"] == budget)
    }

    @Test(arguments: CoreBackend.allCases) func guessesFromOneIPv6Slash64AreHeldToTheAddressLimitAcrossAccounts(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) {
            $0.accounts.loginAttemptsPerAddress = 4
            $0.accounts.registrationsPerAddress = 100
        }
        for name in ["a1", "a2", "a3"] {
            let owner = await chat.connect(name, version: 3)
            await chat.send(.register(password: "right"), from: owner)
        }
        var checked = 0
        for host in 1...6 {
            // Different addresses in one /64: one host's.
            let guesser = chat.opened(from: "2001:db8:1:2::\(host)")
            await chat.send(.hello(version: 3, nick: "g\(host)", password: nil), from: guesser)
            _ = await chat.send(.login(account: "a\(host % 3 + 1)", password: "wrong"), from: guesser)
            checked = chat.accounts.verified
        }
        #expect(checked == 0, "passwords from a non-loopback address over plain TCP are not even checked")
        var tls = try await Harness(backend) {
            $0.accounts.loginAttemptsPerAddress = 4
            $0.accounts.registrationsPerAddress = 100
        }
        for name in ["a1", "a2", "a3"] {
            let owner = await tls.connect(name, version: 3)
            await tls.send(.register(password: "right"), from: owner)
        }
        var codes: [ErrorCode?] = []
        for host in 1...6 {
            let guesser = tls.opened(from: "2001:db8:1:2::\(host)", encrypted: true)
            await tls.send(.hello(version: 3, nick: "g\(host)", password: nil), from: guesser)
            codes.append(errorCode(to: guesser, in: await tls.send(.login(account: "a\(host % 3 + 1)", password: "wrong"), from: guesser)))
        }
        #expect(tls.accounts.verified == 4)
        #expect(codes == [.authenticationFailed, .authenticationFailed, .authenticationFailed, .authenticationFailed, .throttled, .throttled])
        #expect(ChatCore.throttleKey(of: "2001:db8:1:2::1") == ChatCore.throttleKey(of: "2001:db8:1:2:ffff::9"))
        #expect(ChatCore.throttleKey(of: "2001:db8:1:3::1") != ChatCore.throttleKey(of: "2001:db8:1:2::1"))
    }

    @Test(arguments: CoreBackend.allCases) func registrationsAreRateLimitedPerAddressAndTheCapHolds(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) {
            $0.accounts.registrationsPerAddress = 3
            $0.accounts.maxAccounts = 4
        }
        var codes: [ErrorCode?] = []
        for index in 0..<5 {
            let id = await chat.connect("flood\(index)", version: 3, from: "127.0.0.9")
            codes.append(errorCode(to: id, in: await chat.send(.register(password: "pw"), from: id)))
        }
        #expect(codes == [nil, nil, nil, .throttled, .throttled])
        var more: [ErrorCode?] = []
        for index in 0..<3 {
            let id = await chat.connect("other\(index)", version: 3, from: "127.0.1.\(index)")
            more.append(errorCode(to: id, in: await chat.send(.register(password: "pw"), from: id)))
        }
        #expect(more == [nil, .tooManyAccounts, .tooManyAccounts])
        #expect(chat.accountCount == 4)
    }

    @Test(arguments: CoreBackend.allCases) func aFullHashingPoolAnswersBusyAndCostsNoAttempt(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) { $0.accounts.loginAttemptsPerAccount = 1 }
        let owner = await chat.connect("alice", version: 3)
        await chat.send(.register(password: "hunter2"), from: owner)
        await chat.send(.goodbye(reason: ""), from: owner)
        let guest = await chat.connect("bob", version: 3)
        chat.accounts.poolFull = true
        #expect(errorCode(to: guest, in: await chat.send(.login(account: "alice", password: "hunter2"), from: guest)) == .busy)
        chat.accounts.poolFull = false
        #expect(frames(to: guest, in: await chat.send(.login(account: "alice", password: "hunter2"), from: guest)).last == .loggedIn(account: "alice"))
    }

    @Test(arguments: CoreBackend.allCases) func theAskingClientWaitsForItsAnswerAndOthersGoOn(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice", version: 3)
        let bob = await chat.connect("bob", version: 3)
        await chat.send(.join(room: "general"), from: bob)
        chat.accounts.holdWork = true
        #expect(await chat.send(.register(password: "pw"), from: alice).isEmpty)
        #expect(chat.core.isAwaitingAccount(alice))
        #expect(!chat.core.isAwaitingAccount(bob))
        #expect(frames(to: bob, in: await chat.send(.say(room: "general", text: "hi"), from: bob)).count == 1)
        #expect(frames(to: alice, in: await chat.releaseAccountWork()) == [.registered(account: "alice")])
        #expect(!chat.core.isAwaitingAccount(alice))
    }

    @Test(arguments: CoreBackend.allCases) func changingThePasswordAndDroppingTheAccountNeedTheLoginAndThePassword(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice", version: 3)
        #expect(errorCode(to: alice, in: await chat.send(.changePassword(old: "a", new: "b"), from: alice)) == .notLoggedIn)
        #expect(errorCode(to: alice, in: await chat.send(.dropAccount(password: "a"), from: alice)) == .notLoggedIn)
        await chat.send(.register(password: "old-pw"), from: alice)
        #expect(errorCode(to: alice, in: await chat.send(.changePassword(old: "wrong", new: "new-pw"), from: alice)) == .authenticationFailed)
        #expect(frames(to: alice, in: await chat.send(.changePassword(old: "old-pw", new: "new-pw"), from: alice)) == [.passwordChanged(account: "alice")])
        #expect(errorCode(to: alice, in: await chat.send(.dropAccount(password: "old-pw"), from: alice)) == .authenticationFailed)
        #expect(frames(to: alice, in: await chat.send(.dropAccount(password: "new-pw"), from: alice)) == [.accountDropped(account: "alice")])
        #expect(chat.accountCount == 0)
        #expect(chat.core.nick(of: alice) == "alice", "the nick stays, as a guest's")
        let later = await chat.connect("bob", version: 3)
        _ = await chat.send(.goodbye(reason: ""), from: alice)
        #expect(frames(to: later, in: await chat.send(.changeNick(nick: "alice"), from: later)) == [.nickAccepted(nick: "alice")])
    }

    @Test(arguments: CoreBackend.allCases) func aPasswordOverPlainTCPFromAfarIsRefusedUnread(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let far = chat.opened(from: "203.0.113.5")
        await chat.send(.hello(version: 3, nick: "far", password: nil), from: far)
        #expect(errorCode(to: far, in: await chat.send(.register(password: "pw"), from: far)) == .plainPasswordRefused)
        #expect(chat.accountCount == 0)
        let farTLS = chat.opened(from: "203.0.113.6", encrypted: true)
        await chat.send(.hello(version: 3, nick: "farTLS", password: nil), from: farTLS)
        #expect(frames(to: farTLS, in: await chat.send(.register(password: "pw"), from: farTLS)) == [.registered(account: "farTLS")])
        var allowed = try await Harness(backend) { $0.accounts.allowPlainPasswords = true }
        let farAllowed = allowed.opened(from: "203.0.113.5")
        await allowed.send(.hello(version: 3, nick: "far", password: nil), from: farAllowed)
        #expect(frames(to: farAllowed, in: await allowed.send(.register(password: "pw"), from: farAllowed)) == [.registered(account: "far")])
    }

    @Test(arguments: [
        ("127.0.0.1", true), ("127.0.0.51", true), ("127.255.255.254", true), ("::1", true), ("::ffff:127.0.0.1", true),
        ("10.0.0.1", false), ("128.0.0.1", false), ("::2", false), ("::ffff:10.0.0.1", false), ("2001:db8::1", false),
        ("unknown", false),
    ])
    func theLoopbackTestOfThePlainPasswordRule(_ address: String, _ loopback: Bool) {
        #expect(ChatCore.acceptsPassword(from: address, encrypted: false, allowPlain: false) == loopback, "\(address)")
        #expect(ChatCore.acceptsPassword(from: address, encrypted: true, allowPlain: false))
        #expect(ChatCore.acceptsPassword(from: address, encrypted: false, allowPlain: true))
    }

    @Test(arguments: CoreBackend.allCases) func aVersion2SessionSkipsAccountFramesAsAVersion2ServerWould(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let old = await chat.connect("old", version: 2)
        #expect(await chat.send(.register(password: "pw"), from: old).isEmpty)
        #expect(chat.accountCount == 0)
    }

    @Test(arguments: CoreBackend.allCases) func passwordsOfNoPlausibleLengthAreRefused(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend)
        let alice = await chat.connect("alice", version: 3)
        #expect(errorCode(to: alice, in: await chat.send(.register(password: ""), from: alice)) == .badPassword)
        let long = String(repeating: "x", count: PasswordHashing.maxPasswordBytes + 1)
        #expect(errorCode(to: alice, in: await chat.send(.register(password: long), from: alice)) == .badPassword)
    }

    // MARK: Cluster mode: records in Redis, the claim decides reservations

    /// Welcomes `nick` on a node: its hello's claim, answered `claimed`.
    private func welcomeOnNode(_ chat: inout NodeAccountHarness, _ nick: String, version: UInt16 = 3) -> ClientID {
        let id = chat.open()
        var actions: [ChatAction] = []
        chat.core.received(.hello(version: version, nick: nick, password: nil), size: 10, from: id, at: chat.now, into: &actions)
        #expect(chat.core.takeClusterRequests() == [.claimNick(chat.core.asker(id), nick: nick)])
        chat.core.clusterNickClaimed(chat.core.asker(id), nick: nick, .success(true), at: chat.now, into: &actions)
        #expect(chat.core.nick(of: id) == nick)
        return id
    }

    @Test func aNodeRegistersInRedisAndKeepsNoRecordOfItsOwn() {
        var chat = NodeAccountHarness()
        let alice = welcomeOnNode(&chat, "alice")
        #expect(frames(to: alice, in: chat.send(.register(password: "pw"), from: alice)) == [.registered(account: "alice")])
        #expect(chat.redisAccounts["alice"]?.name == "alice")
        #expect(chat.core.accountCount == 0, "a node keeps no records: another node may drop the account")
        // Redis says it exists (registered on another node meanwhile): refused as on one server.
        let other = welcomeOnNode(&chat, "Bob")
        chat.redisAccounts["bob"] = AccountRecord(name: "bob", key: "bob", passwordHash: "x", created: 0)
        #expect(errorCode(to: other, in: chat.send(.register(password: "pw"), from: other)) == .accountExists)
    }

    @Test func aReservedClaimHoldsAVersion3HelloForItsLoginAndRefusesOlderOnes() {
        var chat = NodeAccountHarness()
        chat.redisAccounts["alice"] = AccountRecord(name: "Alice", key: "alice", passwordHash: chat.hashing.hash("pw")!, created: 0)
        let old = chat.open()
        var actions: [ChatAction] = []
        chat.core.received(.hello(version: 1, nick: "alice", password: nil), size: 10, from: old, at: chat.now, into: &actions)
        _ = chat.core.takeClusterRequests()
        chat.core.clusterNickReserved(chat.core.asker(old), nick: "alice", at: chat.now, into: &actions)
        #expect(disconnected(old, in: actions)?.code == .nickReserved)

        let owner = chat.open()
        actions = []
        chat.core.received(.hello(version: 3, nick: "alice", password: nil), size: 10, from: owner, at: chat.now, into: &actions)
        _ = chat.core.takeClusterRequests()
        chat.core.clusterNickReserved(chat.core.asker(owner), nick: "alice", at: chat.now, into: &actions)
        #expect(actions.isEmpty, "waits for the login sent with the hello: \(actions)")
        actions = chat.send(.login(account: "alice", password: "pw"), from: owner)
        #expect(chat.redisGuesses["alice"] == 0, "counted in Redis, and given back for the right password")
        // The nick is claimed as its owner's, which ghosts a holder on another node.
        #expect(chat.core.takeClusterRequests() == [.claimNick(chat.core.asker(owner), nick: "alice", claimant: .ghost)])
        actions = []
        chat.core.clusterNickClaimed(chat.core.asker(owner), nick: "alice", .success(true), at: chat.now, into: &actions)
        let sent = frames(to: owner, in: actions)
        #expect(sent.first.map { if case .welcome(3, "alice", _, _) = $0 { true } else { false } } == true, "\(sent)")
        #expect(sent.last == .loggedIn(account: "Alice"), "\(sent)")
    }

    @Test func aWrongPasswordOnANodeCountsItsGuessAndClaimsNothing() {
        var chat = NodeAccountHarness()
        chat.redisAccounts["carol"] = AccountRecord(name: "carol", key: "carol", passwordHash: chat.hashing.hash("pw")!, created: 0)
        let guest = welcomeOnNode(&chat, "guest")
        #expect(errorCode(to: guest, in: chat.send(.login(account: "carol", password: "no"), from: guest)) == .authenticationFailed)
        #expect(chat.redisGuesses["carol"] == 1)
        #expect(chat.core.takeClusterRequests().isEmpty)
    }

    @Test func aLoginAfterWelcomeOnANodeTakesTheNickAsAGhostAndRepliesNameTheAccountAsRegistered() {
        var chat = NodeAccountHarness()
        chat.redisAccounts["gina"] = AccountRecord(name: "Gina", key: "gina", passwordHash: chat.hashing.hash("pw")!, created: 0)
        let guest = welcomeOnNode(&chat, "guest")
        var actions = chat.send(.login(account: "GINA", password: "pw"), from: guest)
        #expect(chat.core.takeClusterRequests() == [.claimNick(chat.core.asker(guest), nick: "Gina", claimant: .ghost)])
        #expect(frames(to: guest, in: actions).isEmpty, "loggedIn waits for the claim")
        actions = []
        chat.core.clusterNickClaimed(chat.core.asker(guest), nick: "Gina", .success(true), at: chat.now, into: &actions)
        let sent = frames(to: guest, in: actions)
        #expect(sent.first == .nickAccepted(nick: "Gina") && sent.last == .loggedIn(account: "Gina"), "\(sent)")
        #expect(frames(to: guest, in: chat.send(.changePassword(old: "pw", new: "new"), from: guest)) == [.passwordChanged(account: "Gina")])
        #expect(chat.core.account(of: guest) == "Gina")
    }

    @Test func aLoginWhoseClientLeftBeforeItsClaimTellsTheNextClientInItsSlotNothing() {
        var chat = NodeAccountHarness()
        chat.redisAccounts["hal"] = AccountRecord(name: "hal", key: "hal", passwordHash: chat.hashing.hash("pw")!, created: 0)
        let leaver = welcomeOnNode(&chat, "guest")
        _ = chat.send(.login(account: "hal", password: "pw"), from: leaver)
        #expect(chat.core.takeClusterRequests() == [.claimNick(chat.core.asker(leaver), nick: "hal", claimant: .ghost)])
        var actions: [ChatAction] = []
        chat.core.disconnect(leaver, Disconnection(code: nil, reason: "connection lost"), at: chat.now, into: &actions)
        _ = chat.core.takeClusterRequests()
        // The same slot, a guest with the same nick; the old claim's answer comes first.
        chat.nextSlot = leaver.slot
        let newcomer = chat.open()
        actions = []
        chat.core.received(.hello(version: 3, nick: "hal", password: nil), size: 10, from: newcomer, at: chat.now, into: &actions)
        chat.core.clusterNickClaimed(chat.core.asker(newcomer), nick: "hal", .success(true), at: chat.now, into: &actions)
        #expect(!frames(to: newcomer, in: actions).contains(.loggedIn(account: "hal")), "\(actions)")
    }

    @Test func aGhostNoticeFromAnotherNodeDisconnectsOnlyAWelcomedHolder() {
        var chat = NodeAccountHarness()
        let holder = welcomeOnNode(&chat, "dave")
        var actions: [ChatAction] = []
        chat.core.clusterGhost(nickKey: "erin", at: chat.now, into: &actions)
        #expect(actions.isEmpty, "nobody here holds erin")
        chat.core.clusterGhost(nickKey: "dave", at: chat.now, into: &actions)
        #expect(disconnected(holder, in: actions)?.code == .ghosted)
    }

    @Test func aLocalHolderLoggedInToTheNickMakesItReservedOnItsNode() {
        var chat = NodeAccountHarness()
        let owner = welcomeOnNode(&chat, "frank")
        _ = chat.send(.register(password: "pw"), from: owner)
        let guest = chat.open()
        let actions = chat.send(.hello(version: 1, nick: "FRANK", password: nil), from: guest)
        #expect(disconnected(guest, in: actions)?.code == .nickReserved, "not nickTaken: \(actions)")
    }

    // MARK: Issue 40: a server operator's name, registrations from many addresses

    @Test(arguments: [CoreBackend.memory, .sqlite]) func aServerOperatorsNickIsReservedBeforeItsAccountExists(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) { $0.accounts.setAdminAccounts(["Root"]) }
        #expect(chat.core.missingAdminAccounts == ["root"])
        let old = chat.opened()
        #expect(disconnected(old, in: await chat.send(.hello(version: 1, nick: "ROOT", password: nil), from: old))?.code == .nickReserved)
        let guest = await chat.connect("mallory", version: 3)
        #expect(errorCode(to: guest, in: await chat.send(.changeNick(nick: "root"), from: guest)) == .nickReserved)
        // A login to it is checked like any (against the dummy hash) and fails like any.
        let pretender = chat.opened()
        await chat.send(.hello(version: 3, nick: "root", password: nil), from: pretender)
        let before = chat.accounts.verified
        #expect(disconnected(pretender, in: await chat.send(.login(account: "root", password: "guess"), from: pretender))?.code == .authenticationFailed)
        #expect(chat.accounts.verified == before + 1)
        // Made by the operator (chat-server account add), it is an account like any.
        chat.core.loadAccounts([AccountRecord(name: "root", key: "root", passwordHash: chat.accounts.hashing.hash("op")!, created: 0)])
        #expect(chat.core.missingAdminAccounts.isEmpty)
        let root = chat.opened()
        await chat.send(.hello(version: 3, nick: "root", password: nil), from: root)
        #expect(frames(to: root, in: await chat.send(.login(account: "root", password: "op"), from: root)).last == .loggedIn(account: "root"))
    }

    @Test(arguments: CoreBackend.allCases) func registrationsFromManyAddressesAreHeldToTheServersWindowAndABusyPoolGivesTheirsBack(_ backend: CoreBackend) async throws {
        var chat = try await Harness(backend) { $0.accounts.registrationsPerServer = 5 }
        let first = await chat.connect("early", version: 3, from: "127.0.2.1")
        chat.accounts.poolFull = true
        #expect(errorCode(to: first, in: await chat.send(.register(password: "pw"), from: first)) == .busy)
        chat.accounts.poolFull = false
        var codes: [ErrorCode?] = []
        for index in 0..<10 {
            let id = await chat.connect("r\(index)", version: 3, from: "127.0.3.\(index + 1)")
            codes.append(errorCode(to: id, in: await chat.send(.register(password: "pw"), from: id)))
        }
        #expect(codes == Array(repeating: nil, count: 5) + Array(repeating: .throttled, count: 5), "the busy one cost nothing: \(codes)")
        #expect(chat.accountCount == 5)
        _ = await chat.tick(advancingBy: chat.core.limits.accounts.registrationWindow.milliseconds)
        #expect(errorCode(to: first, in: await chat.send(.register(password: "pw"), from: first)) == nil, "a new window")
    }

    // MARK: The windows themselves

    @Test func theGuessWindowsKeepOnlyWhatCountsAndNeverMoreThanTheirCapacity() {
        var windows = GuessWindows()
        windows.capacity = 30
        let limits = GuessLimits(perSubject: 20, perSubjectFromAddress: 5, perAddress: 20, window: 60_000)
        #expect(windows.admit("account:a", from: "10.0.0.1", limits: limits, now: 1) == nil)
        #expect(windows.count == 3)
        windows.giveBack("account:a", from: "10.0.0.1")
        #expect(windows.count == 0, "a right password leaves nothing behind")
        // A botnet's first guesses at as many names: three windows each.
        for index in 0..<100 {
            #expect(windows.admit("account:n\(index)", from: "10.0.1.\(index)", limits: limits, now: 1_000 + UInt64(index)) == nil)
            #expect(windows.count <= 30, "at most the capacity: \(windows.count)")
        }
        #expect(windows.byPair[GuessWindows.pairKey("account:n99", "10.0.1.99")]?.count == 1, "the newest windows stay")
        #expect(windows.byPair[GuessWindows.pairKey("account:n0", "10.0.1.0")] == nil, "the oldest went first")
    }
}
