import ChatClient
import Glibc
import ChatProtocol
import ChatServer
import Logging
import RoomLog
import SocketCore
import Testing
import TestSupport

/// How long any single wait in these tests may take before it fails. Generous: other suites run
/// on the same two cores.
let patience: Duration = .seconds(30)

/// A wait that took longer than `patience`.
struct TimedOut: Error, CustomStringConvertible {
    let waitingFor: String
    var description: String { "timed out waiting for \(waitingFor)" }
}

/// Runs `body`, failing with `TimedOut` if it has not finished within `limit`.
func withTimeout<T: Sendable>(
    _ limit: Duration = patience, waitingFor what: String, _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: limit)
            throw TimedOut(waitingFor: what)
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}

/// A configuration for in-process tests: an OS-chosen port, quick shutdown, no rate limits, and a
/// handshake deadline no scheduling delay reaches.
func testConfiguration(_ adjust: (inout ChatServerConfiguration) -> Void = { _ in }) -> ChatServerConfiguration {
    var configuration = ChatServerConfiguration()
    configuration.port = 0
    configuration.drainTimeout = .seconds(2)
    // The test clients share the test process's two cooperative threads with suites that block
    // them (child processes, openssl runs); a full run once starved them for five seconds between
    // connect and `hello`, and the default deadline dropped twelve clients. Tests of the deadline
    // set their own.
    configuration.handshakeTimeout = .seconds(60)
    // Test clients read without answering pings; a test that pushes tens of megabytes through a
    // room took 93 s under a full run's load, and the default 90 s cut its reading member off.
    // Tests of idleness set their own.
    configuration.idleTimeout = .seconds(600)
    configuration.turnOffRateLimits()
    adjust(&configuration)
    return configuration
}

/// A logger that drops everything, so test output stays readable — unless `CHAT_TEST_LOG` is
/// set: then info and above go to standard error, which is how an in-process server tells why
/// it closed a failing test's connection.
let quietLogger = Logger(label: "test") { label in
    guard getenv("CHAT_TEST_LOG") != nil else { return SwiftLogNoOpLogHandler() }
    var handler = StreamLogHandler.standardError(label: label)
    handler.logLevel = .info
    return handler
}

/// Starts a server on port 0 (keeping its rooms in `store`, if given), runs `body`, then shuts
/// the server down (also when `body` throws).
func withServer(
    _ configuration: ChatServerConfiguration = testConfiguration(), store: (any RoomStore)? = nil,
    _ body: (ChatServer) async throws -> Void
) async throws {
    let server = try ChatServer(configuration: configuration, store: store, logger: quietLogger)
    server.start()
    do {
        try await body(server)
    } catch {
        await server.shutdown()
        throw error
    }
    await server.shutdown()
}

/// A chat client for tests: a `ChatConnection` with one frame iterator and waits that time out.
///
/// `@unchecked Sendable`: used by one task at a time, as the iterator requires.
final class TestClient: @unchecked Sendable {
    let connection: ChatConnection
    private var iterator: IncomingFrames.AsyncIterator

    var nick: String { connection.welcome.nick }

    private init(connection: ChatConnection) {
        self.connection = connection
        iterator = connection.frames.makeAsyncIterator()
    }

    /// Connects to `server` and completes the handshake as `nick`.
    static func connect(_ server: ChatServer, nick: String, password: String? = nil) async throws -> TestClient {
        try await connect(port: server.port, nick: nick, password: password)
    }

    /// Connects to the server on `port` of `host` (127.0.0.1 unless said) and completes the
    /// handshake as `nick`, asking for protocol `version`.
    static func connect(
        host: String = "127.0.0.1", port: Int, nick: String, password: String? = nil, version: UInt16 = 1
    ) async throws -> TestClient {
        let connection = try await ChatConnection.connect(
            host: host, port: port, nick: nick, password: password, version: version)
        return TestClient(connection: connection)
    }

    /// Connects to the `chat-server` process `server` from `host` as its clients do (over TLS when
    /// it speaks TLS) and completes the handshake as `nick`, asking for protocol `version`.
    static func connect(
        to server: ChatServerProcess, host: String = "127.0.0.1", nick: String, password: String? = nil, version: UInt16 = 1
    ) async throws -> TestClient {
        let connection = try await ChatConnection.connect(
            host: host, port: server.port, nick: nick, password: password, version: version, tls: server.clientTLS)
        return TestClient(connection: connection)
    }

    func send(_ frame: Frame) async throws { try await connection.send(frame) }
    func send(_ frames: [Frame]) async throws { try await connection.send(frames) }
    func close() { connection.close() }

    /// The next frame, or nil when the server closed the connection.
    func next(waitingFor what: String = "a frame") async throws -> Frame? {
        try await withTimeout(waitingFor: "\(what) at \(nick)") { try await self.iterator.next() }
    }

    /// The next frame; fails if the connection ends first.
    func expectFrame(_ what: String = "a frame") async throws -> Frame {
        guard let frame = try await next(waitingFor: what) else {
            Issue.record("connection of \(nick) ended while waiting for \(what)")
            throw TimedOut(waitingFor: what)
        }
        return frame
    }

    /// Skips frames until `match` accepts one; fails if the connection ends first.
    func waitFor<T>(_ what: String, _ match: (Frame) -> T?) async throws -> T {
        while true {
            let frame = try await expectFrame(what)
            if let matched = match(frame) { return matched }
        }
    }

    /// Collects what `match` extracts from the frames until it has `count`, skipping frames it
    /// returns nil for; one timeout (`limit`) for the whole collection.
    func collect<T: Sendable>(
        _ count: Int, _ what: String, limit: Duration = patience, _ match: @escaping @Sendable (Frame) -> T?
    ) async throws -> [T] {
        try await withTimeout(limit, waitingFor: "\(count) \(what) at \(nick)") {
            var collected: [T] = []
            collected.reserveCapacity(count)
            while collected.count < count {
                guard let frame = try await self.iterator.next() else {
                    Issue.record("connection of \(self.nick) ended after \(collected.count) of \(count) \(what)")
                    throw TimedOut(waitingFor: what)
                }
                if let item = match(frame) { collected.append(item) }
            }
            return collected
        }
    }

    /// Reads until the server closes the connection and returns the frames that came before.
    func readUntilClosed() async throws -> [Frame] {
        var frames: [Frame] = []
        while let frame = try await next(waitingFor: "the server to close the connection") { frames.append(frame) }
        return frames
    }

    /// Joins `room` and reads its join sequence up to `members`; returns the `joined` seq.
    @discardableResult
    func join(_ room: String) async throws -> UInt64 {
        try await send(.join(room: room))
        let seq = try await waitFor("joined #\(room)") { frame -> UInt64? in
            if case .joined(room, let seq, _, nick) = frame { return seq }
            return nil
        }
        _ = try await waitFor("members of #\(room)") { frame -> Bool? in
            if case .members(room, _) = frame { return true }
            return nil
        }
        return seq
    }
}

/// A connection that speaks raw bytes, for frames a well-behaved client would never send.
final class RawClient: @unchecked Sendable {
    let connection: SocketConnection
    private var bytes: InboundBytes.AsyncIterator
    private var decoder = FrameDecoder()

    init(port: Int) async throws {
        connection = try await SocketConnection.connect(host: "127.0.0.1", port: port)
        bytes = connection.inbound.makeAsyncIterator()
    }

    func write(_ raw: [UInt8]) async throws { try await connection.write(raw) }

    func write(_ frame: Frame) async throws { try await connection.write(FrameEncoder.encode(frame)) }

    /// The next frame, or nil at end of stream (a reset counts as the end too).
    func next(waitingFor what: String = "a frame") async throws -> Frame? {
        try await withTimeout(waitingFor: what) {
            while true {
                if let frame = try self.decoder.next() { return frame }
                do {
                    guard let chunk = try await self.bytes.next() else { return nil }
                    self.decoder.append(contentsOf: chunk)
                } catch is SocketError {
                    return nil
                }
            }
        }
    }

    /// Reads until the server closes the connection; returns the frames that came before.
    func readUntilClosed() async throws -> [Frame] {
        var frames: [Frame] = []
        while let frame = try await next(waitingFor: "the server to close the connection") { frames.append(frame) }
        return frames
    }

    func close() { connection.close() }
}

/// The fatal error in `frames`, as (code, reason), if any.
func fatalError(in frames: [Frame]) -> (ErrorCode, String)? {
    for case let .error(code, true, _, reason) in frames { return (code, reason) }
    return nil
}

/// The code of the refusal `connect` ended with, or nil if it did not end in a refusal.
func refusal(_ connect: () async throws -> TestClient) async -> ErrorCode? {
    do {
        let client = try await connect()
        client.close()
        return nil
    } catch let ChatConnection.HandshakeError.refused(code, _) {
        return code
    } catch {
        Issue.record("expected a refusal, got \(error)")
        return nil
    }
}
