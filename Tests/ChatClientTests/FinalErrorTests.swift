import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

/// `killed` and a server's `banned` end the session for good (docs/PROTOCOL.md, "Version 4",
/// conformance 4): the real chat-client, in pipe mode, against a scripted server that welcomes
/// and then sends the fatal error, must not dial it again.
@Suite(.serialized) struct FinalErrorTests {
    @Test(arguments: [ErrorCode.killed, .banned])
    func aFatalKillOrBanIsNotRedialled(code: ErrorCode) async throws {
        let server = try ScriptedFatalServer(code: code)
        defer { server.stop() }
        let client = try pipeClient(["--nick", "bob", "--port", "\(server.port)"])
        defer { client.stop() }
        #expect(await client.waitForOutput("not reconnecting by itself"), "the end is shown as final: \(client.output)")
        #expect(await client.waitForOutput("/reconnect connects again"), "the client stays offline: \(client.output)")
        // Longer than the first backoff (0.5 s) and its jitter: a redial would have come by now.
        try await Task.sleep(for: .seconds(2))
        #expect(server.connections == 1, "\(code): dialled once, not again: \(server.connections) connections; \(client.output)")
        client.send("/quit")
        #expect(await client.waitForExit() == 0)
    }
}

/// A loopback server that answers every connection's hello with a version 4 welcome and then
/// `error(code, fatal: true)`, and closes; it counts the connections. Owns its listening
/// descriptor, closed once by `stop()`; `lock` guards `count` and `stopped`.
private final class ScriptedFatalServer: @unchecked Sendable {
    let port: Int
    private let listener: Int32
    private let code: ErrorCode
    private let lock = NSLock()
    private var count = 0
    private var stopped = false

    /// How many connections were accepted.
    var connections: Int { lock.withLock { count } }

    init(code: ErrorCode) throws {
        self.code = code
        (listener, port) = try listenOnLoopback()
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    private func acceptLoop() {
        acceptEach(on: listener) { client in
            lock.withLock { count += 1 }
            // The hello (and the login, if any) is read, not checked: any client is ended.
            var buffer = [UInt8](repeating: 0, count: 4096)
            _ = read(client, &buffer, buffer.count)
            var bytes: [UInt8] = []
            FrameEncoder.encode(.welcome(version: 4, nick: "bob", maxFrameSize: 16384, motd: ""), into: &bytes)
            FrameEncoder.encode(.error(code: code, fatal: true, frameType: FrameType(rawValue: 0), reason: "\(code.name ?? "") by the operator"), into: &bytes)
            _ = bytes.withUnsafeBytes { write(client, $0.baseAddress, $0.count) }
            shutdown(client, Int32(SHUT_WR))
            // Until the client closes, so it reads everything before the end.
            while read(client, &buffer, buffer.count) > 0 {}
            close(client)
            return true
        }
    }

    func stop() {
        let first = lock.withLock { () -> Bool in
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }
}
