import Foundation
import SocketCore
import TestSupport
import Testing

extension SocketConnection {
    /// Reads until `count` bytes arrived or the stream ended.
    func readExactly(count: Int) async throws -> [UInt8] {
        var bytes: [UInt8] = []
        var iterator = inbound.makeAsyncIterator()
        while bytes.count < count, let chunk = try await iterator.next() { bytes += chunk }
        return bytes
    }
}

/// Polls `condition` every 10 ms until it holds, recording an issue after `timeout`.
///
/// For effects that have no event to wait on, such as the kernel releasing a descriptor or a
/// write reaching its wait.
func waitUntil(_ what: String, timeout: Duration = .seconds(10), _ condition: () async -> Bool) async throws {
    if !(await eventually(timeout: timeout, every: .milliseconds(10), condition)) {
        Issue.record("timed out waiting until \(what)")
    }
}

/// Runs `body`, recording an issue and cancelling it if it has not finished after `timeout`.
///
/// For tests of lost wake-ups: without it such a bug hangs the whole test run instead of
/// failing one test.
func withTimeout<T: Sendable>(
    _ timeout: Duration, _ what: String, _ body: @escaping @Sendable () async throws -> T
) async throws -> T? {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: timeout)
            return nil
        }
        let first = try await group.next() ?? nil
        group.cancelAll()
        if first == nil { Issue.record("timed out after \(timeout): \(what)") }
        return first
    }
}

/// Waits until `read()` gives the same value twice, 300 ms apart, and returns it.
///
/// For progress that must stop, such as a writer whose peer does not read: there is no event
/// for "nothing more will happen", only the absence of change.
func settledValue(of read: () -> Int) async throws -> Int {
    var last = read()
    while true {
        try await Task.sleep(for: .milliseconds(300))
        let now = read()
        if now == last { return now }
        last = now
    }
}

extension ConnectionListener {
    /// Connects a client to this listener and returns it with the server's side of the connection.
    func connectedPair(host: String = "127.0.0.1", outboundLimit: Int = 256 * 1024) async throws
        -> (client: SocketConnection, server: SocketConnection)
    {
        let client = try await SocketConnection.connect(host: host, port: port, outboundLimit: outboundLimit)
        var accepted = connections.makeAsyncIterator()
        let server = try #require(await accepted.next())
        return (client, server)
    }
}

extension Result {
    /// The error, if this is a failure.
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
