import Dispatch
import RedisClient
import RedisProtocol
import SocketCore
import TestSupport
import Testing

/// A `RedisConnection` driven from a test: each call hops onto the connection's queue and waits
/// for the reply.
private final class Client: @unchecked Sendable {
    let queue = DispatchQueue(label: "redis-test")
    let connection: RedisConnection
    /// What `onPush` and `onClosed` delivered, in order; touched only on `queue`.
    private var pushes: [RESPValue] = []
    private var closedWith: RedisError?

    init(port: Int, limits: RESPParser.Limits = .init()) async throws {
        let queue = self.queue
        connection = try await withCheckedThrowingContinuation { continuation in
            RedisConnection.connect(host: "127.0.0.1", port: port, queue: queue, limits: limits) { result in
                continuation.resume(with: result)
            }
        }
        queue.sync {
            connection.onPush = { [self] value in pushes.append(value) }
            connection.onClosed = { [self] error in closedWith = error }
        }
    }

    func send(_ arguments: [[UInt8]]) async -> RedisConnection.Reply {
        await withCheckedContinuation { continuation in
            queue.async { [connection] in connection.send(arguments) { continuation.resume(returning: $0) } }
        }
    }

    func send(_ arguments: String...) async -> RedisConnection.Reply {
        await send(arguments.map { Array($0.utf8) })
    }

    /// Sends every command in one turn of the queue and returns the replies in arrival order.
    func pipeline(_ commands: [[String]]) async -> [RedisConnection.Reply] {
        await withCheckedContinuation { continuation in
            queue.async { [connection] in
                var replies: [RedisConnection.Reply] = []
                for command in commands {
                    connection.send(command.map { Array($0.utf8) }) { reply in
                        replies.append(reply)
                        if replies.count == commands.count { continuation.resume(returning: replies) }
                    }
                }
            }
        }
    }

    func subscribe(_ channel: String) {
        queue.async { [connection] in connection.subscribe([Array(channel.utf8)]) }
    }

    var pushed: [RESPValue] { queue.sync { pushes } }
    var closeReason: RedisError? { queue.sync { closedWith } }

    /// Waits (polling the queue, bounded) until `condition` holds for what was pushed and how it
    /// closed; false if it never did.
    func wait(for what: String, _ condition: @escaping ([RESPValue], RedisError?) -> Bool) async -> Bool {
        let held = await eventually(every: .milliseconds(10)) { queue.sync { condition(pushes, closedWith) } }
        if !held { Issue.record("timed out waiting for \(what)") }
        return held
    }

    func close() { queue.async { [connection] in connection.close() } }
}

/// One test at a time: each starts its own redis-server (a process and two reader threads here),
/// and other suites count this process's threads.
@Suite("Redis connection against a real redis-server", .serialized)
struct RedisConnectionTests {
    @Test func answersCommandsAndKeepsValuesBinarySafe() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let client = try await Client(port: redis.port)
        #expect(try await client.send("PING").get() == .simpleString("PONG"))
        let value: [UInt8] = [0, 13, 10, 255, 36]
        #expect(try await client.send([Array("SET".utf8), Array("k".utf8), value]).get() == .simpleString("OK"))
        #expect(try await client.send("GET", "k").get() == .bulkString(value))
        #expect(try await client.send("GET", "missing").get() == .bulkString(nil))
        client.close()
    }

    @Test func pipelinedRepliesReachTheirCommandsInOrder() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let client = try await Client(port: redis.port)
        let replies = await client.pipeline(Array(repeating: ["INCR", "counter"], count: 10_000))
        let numbers = replies.map { try? $0.get().integer }
        #expect(numbers == (1...10_000).map { Int64($0) })
        client.close()
    }

    @Test func anErrorReplyIsAValueAndTheConnectionGoesOn() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let client = try await Client(port: redis.port)
        guard case .error(let text) = try await client.send("NOSUCHCOMMAND", "x").get() else {
            Issue.record("expected an error reply")
            return
        }
        #expect(text.hasPrefix("ERR"), "\(text)")
        #expect(try await client.send("PING").get() == .simpleString("PONG"))
        client.close()
    }

    @Test func aSubscriberGetsEveryMessageInPublishOrder() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let subscriber = try await Client(port: redis.port)
        let publisher = try await Client(port: redis.port)
        subscriber.subscribe("room")
        let confirmed = RESPValue.array([.bulk("subscribe"), .bulk("room"), .integer(1)])
        guard await subscriber.wait(for: "the subscription", { pushes, _ in pushes.first == confirmed }) else { return }
        let payloads = (0..<1_000).map { [UInt8]("\($0)".utf8) + [0, 13, 10] }
        let replies = await withCheckedContinuation { continuation in
            publisher.queue.async { [connection = publisher.connection] in
                var counts: [RedisConnection.Reply] = []
                for payload in payloads {
                    connection.send([Array("PUBLISH".utf8), Array("room".utf8), payload]) { reply in
                        counts.append(reply)
                        if counts.count == payloads.count { continuation.resume(returning: counts) }
                    }
                }
            }
        }
        #expect(replies.allSatisfy { (try? $0.get()) == .integer(1) }, "one subscriber heard each")
        guard await subscriber.wait(for: "every message", { pushes, _ in pushes.count == payloads.count + 1 }) else { return }
        let messages = subscriber.pushed.dropFirst()
        #expect(Array(messages) == payloads.map { .array([.bulk("message"), .bulk("room"), .bulkString($0)]) })
        subscriber.close()
        publisher.close()
    }

    @Test func redisDyingFailsWaitingCommandsAndLaterOnesAtOnce() async throws {
        let redis = try await RedisServerProcess()
        defer { redis.stop() }
        let client = try await Client(port: redis.port)
        // BLPOP with no timeout waits for ever: a command certainly in flight when Redis dies,
        // once Redis counts it among its blocked clients.
        async let blocked = client.send("BLPOP", "nothing-will-come", "0")
        let observer = try await Client(port: redis.port)
        var waiting = false
        for _ in 0..<3_000 where !waiting {
            let info = try await observer.send("INFO", "clients").get().text ?? ""
            waiting = info.contains("blocked_clients:1")
            if !waiting { try await Task.sleep(for: .milliseconds(10)) }
        }
        #expect(waiting, "Redis saw the BLPOP")
        redis.kill()
        let outcome = await blocked
        guard case .failure(let error) = outcome else {
            Issue.record("expected the waiting command to fail, got \(outcome)")
            return
        }
        #expect(error == .closed || { if case .connection = error { true } else { false } }(), "\(error)")
        guard await client.wait(for: "onClosed", { _, closed in closed != nil }) else { return }
        #expect(client.closeReason == error)
        #expect(await client.send("PING") == .failure(error), "a later command fails with the same reason")
    }
}

/// A listener that plays a broken Redis: when a connection's first bytes arrive, it writes
/// `reply` to it, then keeps it open.
private final class FakeRedis: @unchecked Sendable {
    let queue = DispatchQueue(label: "fake-redis")
    let listener: SocketListener
    private var channels: [SocketChannel] = []

    init(reply: [UInt8]) throws {
        listener = try SocketListener(host: "127.0.0.1", port: 0)
        listener.start(queue: queue) { [self] socket in
            let channel = SocketChannel(socket: socket, queue: queue)
            var answered = false
            channel.onBytes = { _ in
                guard !answered else { return }
                answered = true
                channel.write(ByteChunk(reply))
            }
            channels.append(channel)
            channel.start()
        }
    }

    var port: Int { listener.port }

    func stop() {
        queue.sync {
            listener.close()
            for channel in channels {
                channel.onBytes = nil
                channel.close()
            }
            channels = []
        }
    }
}

@Suite("Redis connection against a lying server")
struct RedisHostileServerTests {
    /// Connects to a fake Redis that answers `reply`, sends PING, and returns what PING got and
    /// why the connection closed.
    private func outcome(of reply: String, limits: RESPParser.Limits = .init()) async throws -> (RedisConnection.Reply, RedisError?) {
        let fake = try FakeRedis(reply: Array(reply.utf8))
        defer { fake.stop() }
        let client = try await Client(port: fake.port, limits: limits)
        let result = await client.send("PING")
        _ = await client.wait(for: "the connection to close") { _, closed in closed != nil }
        return (result, client.closeReason)
    }

    @Test func bytesThatAreNotRESPFailTheConnection() async throws {
        let (reply, closed) = try await outcome(of: "!garbage\r\n")
        #expect(reply == .failure(.protocolViolation(.unknownType(UInt8(ascii: "!")))))
        #expect(closed == .protocolViolation(.unknownType(UInt8(ascii: "!"))))
    }

    @Test func aBulkStringOverTheLimitFailsFromItsHeader() async throws {
        var limits = RESPParser.Limits()
        limits.maxBulkLength = 1024
        let (reply, closed) = try await outcome(of: "$999999999\r\n", limits: limits)
        #expect(reply == .failure(.protocolViolation(.bulkTooLong(length: 999_999_999, limit: 1024))))
        #expect(closed == reply.failureValue)
    }

    @Test func aValueNobodyAskedForFailsTheConnection() async throws {
        // Two replies to one PING: the second answers nothing.
        let (reply, closed) = try await outcome(of: "+PONG\r\n+SURPRISE\r\n")
        #expect(reply == .success(.simpleString("PONG")))
        #expect(closed == .unexpectedValue)
    }
}

extension Result {
    /// The error, if this is a failure.
    fileprivate var failureValue: Failure? {
        if case .failure(let error) = self { error } else { nil }
    }
}
