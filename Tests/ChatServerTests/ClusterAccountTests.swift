import ChatProtocol
import Foundation
import Testing
import TestSupport

/// Accounts across the nodes of a cluster (docs/CLUSTER.md, "Accounts"): a real `redis-server`
/// and two real `chat-server` nodes on it. What holds on one server on its own holds across the
/// nodes — a registration on one reserves the nick on the other, a login on one ghosts the
/// holder on the other, the guess limits and the cap count the whole cluster — and the accounts,
/// being in Redis, outlive the nodes.
@Suite("Accounts across cluster nodes", .serialized)
struct ClusterAccountTests {
    @Test func aNickRegisteredOnOneNodeIsRefusedToGuestsOnTheOther() async throws {
        let cluster = try await ClusterNodes()
        defer { cluster.stop() }
        let owner = try await TestClient.connect(port: cluster.nodes[0].port, nick: "alice", version: 3)
        defer { owner.close() }
        try await owner.send(.register(password: "hunter2"))
        #expect(try await registration(of: owner) == .registered(account: "alice"))

        let guest = try BlockingSocket(port: cluster.nodes[1].port)
        defer { guest.close() }
        await guest.send([.hello(version: 1, nick: "Alice", password: nil)])
        #expect(await errorCode(from: guest) == .nickReserved, "a version 1 guest on the other node")

        let renamer = try await TestClient.connect(port: cluster.nodes[1].port, nick: "bob", version: 2)
        defer { renamer.close() }
        try await renamer.send(.changeNick(nick: "alice"))
        let refusal = try await renamer.waitFor("the answer to changeNick") { frame -> ErrorCode? in
            if case .error(let code, _, _, _) = frame { return code }
            if case .nickAccepted = frame { return .internal }
            return nil
        }
        #expect(refusal == .nickReserved, "a guest's changeNick to a registered nick on the other node")
    }

    @Test func aLoginOnOneNodeGhostsTheHolderOnTheOther() async throws {
        let cluster = try await ClusterNodes()
        defer { cluster.stop() }
        let first = try await TestClient.connect(port: cluster.nodes[0].port, nick: "alice", version: 3)
        defer { first.close() }
        try await first.send(.register(password: "hunter2"))
        #expect(try await registration(of: first) == .registered(account: "alice"))

        let second = try BlockingSocket(port: cluster.nodes[1].port, source: "127.0.0.2")
        defer { second.close() }
        await second.send([.hello(version: 3, nick: "alice", password: nil), .login(account: "alice", password: "hunter2")])
        let welcomed = await frames(from: second, until: { $0 == .loggedIn(account: "alice") })
        #expect(welcomed.first.map { if case .welcome(3, "alice", _, _) = $0 { true } else { false } } == true, "\(welcomed)")
        #expect(welcomed.last == .loggedIn(account: "alice"), "\(welcomed)")
        let ghosted = try await first.readUntilClosed()
        #expect(ghosted.contains { if case .error(.ghosted, true, _, _) = $0 { true } else { false } }, "\(ghosted)")
        #expect(try await cluster.redisCLI("GET", "chat:nick:alice").count == 1, "the nick is held")
    }

    /// docs/SECURITY.md ("Guessing"): `--login-attempts-per-account` (20) password checks per
    /// account per minute from the whole cluster besides each address's first, however many
    /// addresses and nodes the guesses come through: the windows are Redis's.
    @Test func aBruteForceThroughBothNodesIsHeldToThePerAccountLimitInTotal() async throws {
        // Hashing queues that hold every guess: the windows, not the pools, are under test.
        let cluster = try await ClusterNodes(arguments: ["--hashing-queue", "200"])
        defer { cluster.stop() }
        let owner = try await TestClient.connect(port: cluster.nodes[0].port, nick: "victim", version: 3)
        defer { owner.close() }
        try await owner.send(.register(password: "the right one"))
        #expect(try await registration(of: owner) == .registered(account: "victim"))
        var guessers: [BlockingSocket] = []
        defer { for guesser in guessers { guesser.close() } }
        for host in 2...51 {
            let guesser = try BlockingSocket(port: cluster.nodes[host % 2].port, source: "127.0.0.\(host)")
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
        #expect((50..<70).contains(checked), "checked guesses, both nodes together: each address's first, and fewer than 20 more: \(answers)")
        #expect(answers[.throttled, default: 0] == 150 - checked, "\(answers)")
        #expect(try await cluster.redisCLI("GET", "chat:guesses:account:victim") == ["\(checked)"], "every checked guess counted once")
    }

    /// `--max-accounts` counts the cluster's accounts: six registrations at once through two
    /// nodes, from six addresses, against a cap of 3.
    @Test func theAccountCapHoldsAcrossNodes() async throws {
        let cluster = try await ClusterNodes(arguments: ["--max-accounts", "3"])
        defer { cluster.stop() }
        var sockets: [BlockingSocket] = []
        defer { for socket in sockets { socket.close() } }
        for index in 0..<6 {
            let socket = try BlockingSocket(port: cluster.nodes[index % 2].port, source: "127.0.2.\(index + 1)")
            sockets.append(socket)
            await socket.send([.hello(version: 3, nick: "r\(index)", password: nil), .register(password: "pw")])
        }
        var answers: [Frame] = []
        for socket in sockets { answers.append(await answer(from: socket)) }
        #expect(answers.filter { if case .registered = $0 { true } else { false } }.count == 3, "\(answers)")
        #expect(answers.filter { if case .error(.tooManyAccounts, false, .register, _) = $0 { true } else { false } }.count == 3, "\(answers)")
        #expect(try await cluster.redisCLI("SCARD", "chat:accounts") == ["3"])
    }

    /// `--registrations-per-address` (3 an hour) counts an address's registrations through
    /// every node together.
    @Test func anAddressRegisteringThroughBothNodesIsHeldToItsLimitInTotal() async throws {
        let cluster = try await ClusterNodes(arguments: ["--address-connection-rate", "0"])
        defer { cluster.stop() }
        var sockets: [BlockingSocket] = []
        defer { for socket in sockets { socket.close() } }
        for index in 0..<10 {
            let socket = try BlockingSocket(port: cluster.nodes[index % 2].port, source: "127.0.0.9")
            sockets.append(socket)
            await socket.send([.hello(version: 3, nick: "r\(index)", password: nil), .register(password: "pw")])
        }
        var answers: [Frame] = []
        for socket in sockets { answers.append(await answer(from: socket)) }
        #expect(answers.filter { if case .registered = $0 { true } else { false } }.count == 3, "\(answers)")
        #expect(answers.filter { if case .error(.throttled, false, .register, _) = $0 { true } else { false } }.count == 7, "\(answers)")
        #expect(try await cluster.redisCLI("GET", "chat:registrations:address:127.0.0.9") == ["3"])
    }

    @Test func accountsOutliveTheNodesBecauseTheyAreInRedis() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        do {
            let node = try await ClusterNodes.node(on: redis, arguments: [])
            defer { node.stop() }
            let alice = try await TestClient.connect(port: node.port, nick: "alice", version: 3)
            try await alice.send(.register(password: "hunter2"))
            #expect(try await registration(of: alice) == .registered(account: "alice"))
            alice.close()
        }
        let node = try await ClusterNodes.node(on: redis, arguments: [])
        defer { node.stop() }
        let guest = try BlockingSocket(port: node.port)
        defer { guest.close() }
        await guest.send([.hello(version: 1, nick: "alice", password: nil)])
        #expect(await errorCode(from: guest) == .nickReserved)
        let owner = try BlockingSocket(port: node.port)
        defer { owner.close() }
        await owner.send([.hello(version: 3, nick: "alice", password: nil), .login(account: "alice", password: "hunter2")])
        #expect(await frames(from: owner, until: { $0 == .loggedIn(account: "alice") }).last == .loggedIn(account: "alice"))
    }
}
