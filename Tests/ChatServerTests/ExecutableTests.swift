import ChatClient
import ChatProtocol
import ChatServer
import Dispatch
import Foundation
import Testing

/// Runs the built `chat-server` binary as a child process, as a user would.
@Suite("chat-server executable", .serialized)
struct ExecutableTests {
    @Test func sigtermDeliversQueuedMessagesAndGoodbyesThenExitsZeroWithNoSocketLeftOpen() async throws {
        let server = try await ServerProcess.start(arguments: ["--port", "0", "--no-rate-limits", "--drain-timeout", "10", "--no-persistence"])
        defer { server.terminateIfRunning() }
        let port = server.port

        let alice = try await ChatConnectionClient.connect(port: port, nick: "alice")
        let bob = try await ChatConnectionClient.connect(port: port, nick: "bob")
        try await alice.client.join("r")
        try await bob.client.join("r")
        _ = try await alice.client.waitFor("bob to join") { if case .joined("r", _, _, "bob") = $0 { true } else { nil } }

        // Bob does not read while alice speaks, so these are queued when the signal arrives.
        let count = 500
        try await alice.client.send((1...count).map { Frame.say(room: "r", text: "message \($0)") })
        _ = try await alice.client.collect(count, "echoes") { if case .message = $0 { true } else { nil } }
        #expect(kill(server.process.processIdentifier, SIGTERM) == 0)

        for client in [alice.client, bob.client] {
            let frames = try await client.readUntilClosed()
            let texts = frames.compactMap { frame -> String? in
                if case .message(_, _, _, _, let text) = frame { return text }
                return nil
            }
            if client === bob.client {
                #expect(texts == (1...count).map { "message \($0)" }, "bob receives every queued message, in order")
            }
            guard case .goodbye(let reason)? = frames.last, reason.contains("shutting down") else {
                Issue.record("\(client.nick) expected a goodbye saying the server is shutting down last, got \(String(describing: frames.last))")
                continue
            }
            client.close()
        }

        let status = try await server.waitForExit()
        #expect(status == 0, "chat-server exits 0 after a graceful shutdown")
        let log = server.standardError()
        #expect(log.components(separatedBy: "client connected").count - 1 == 2, "one log line per connect:\n\(log)")
        #expect(log.components(separatedBy: "client disconnected").count - 1 == 2, "one log line per disconnect:\n\(log)")
        // Counted by the server after binding (before any client) and when exiting; sockets the
        // process inherited would show in both.
        let sockets = log.split(separator: "\n").compactMap { line -> Int? in
            guard let range = line.range(of: "sockets.open=") else { return nil }
            return Int(line[range.upperBound...].prefix { $0.isNumber })
        }
        #expect(sockets.count == 2 && sockets[1] == sockets[0] - 1, "at exit the listener and every client socket are closed: \(sockets)\n\(log)")
    }

    @Test func helpDocumentsEveryLimitWithItsDefault() async throws {
        let server = try await ServerProcess.start(arguments: ["--help"], expectListening: false)
        #expect(try await server.waitForExit() == 0)
        let help = server.standardOutput()
        for flag in [
            "--host", "--port", "--max-clients", "--max-clients-per-address", "--max-frame-size", "--max-rooms-per-client",
            "--rate-limit", "--rate-burst", "--byte-rate", "--byte-burst", "--address-rate-limit", "--address-rate-burst",
            "--address-byte-rate", "--address-byte-burst", "--address-fanout-rate", "--address-fanout-burst",
            "--address-connection-rate", "--address-connection-burst", "--no-rate-limits", "--rate-abuse-limit", "--history-size",
            "--handshake-timeout", "--idle-ping-interval", "--idle-timeout", "--max-memory", "--slow-consumer-timeout",
            "--drain-timeout", "--password-file", "--password-attempts", "--password-lockout", "--log-level",
        ] {
            #expect(help.contains(flag), "--help mentions \(flag)")
        }
        #expect(help.contains("(default: 7000)"))
    }
}

/// A `TestClient` reached by port rather than through an in-process server.
private struct ChatConnectionClient {
    let client: TestClient

    static func connect(port: Int, nick: String) async throws -> ChatConnectionClient {
        ChatConnectionClient(client: try await TestClient.connect(port: port, nick: nick))
    }
}

/// The `chat-server` binary running as a child process: standard output through a pipe, the log
/// (standard error) in a temporary file.
private final class ServerProcess: @unchecked Sendable {
    let process = Process()
    private(set) var port = 0
    private let output = Pipe()
    private let errorPath: String
    private let exited = DispatchSemaphore(value: 0)

    private init() {
        let directory = FileManager.default.temporaryDirectory.path
        let unique = UUID().uuidString
        errorPath = "\(directory)/chat-server-\(unique).err"
    }

    deinit {
        try? FileManager.default.removeItem(atPath: errorPath)
    }

    /// The built binary: next to the test bundle, in the build products directory.
    static func executable() throws -> URL {
        var candidates: [URL] = []
        candidates.append(URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent())
        if let bundle = Bundle.main.executableURL { candidates.append(bundle.deletingLastPathComponent()) }
        for directory in candidates {
            // The test bundle may be a directory (…xctest/…) inside the products directory.
            for candidate in [directory, directory.deletingLastPathComponent()] {
                let binary = candidate.appendingPathComponent("chat-server")
                if FileManager.default.isExecutableFile(atPath: binary.path) { return binary }
            }
        }
        throw MissingBinary(searched: candidates.map(\.path))
    }

    struct MissingBinary: Error, CustomStringConvertible {
        let searched: [String]
        var description: String { "chat-server not found next to the tests in \(searched); build it with `swift build`" }
    }

    /// Starts the binary and, unless told otherwise, waits for its `listening on HOST:PORT` line.
    static func start(arguments: [String], expectListening: Bool = true) async throws -> ServerProcess {
        let server = ServerProcess()
        _ = FileManager.default.createFile(atPath: server.errorPath, contents: nil)
        server.process.executableURL = try executable()
        server.process.arguments = arguments
        server.process.standardOutput = server.output
        server.process.standardError = FileHandle(forWritingAtPath: server.errorPath)
        server.process.terminationHandler = { [exited = server.exited] _ in exited.signal() }
        try server.process.run()
        if expectListening { server.port = try await server.listeningPort() }
        return server
    }

    /// Waits for the first line of output and takes the port from it.
    private func listeningPort() async throws -> Int {
        let first = try await withTimeout(waitingFor: "chat-server to print its address") { [output] in
            await withCheckedContinuation { continuation in
                // A blocking read on a pipe, off the cooperative pool; it ends at the newline or
                // when the child exits.
                DispatchQueue.global().async {
                    var line: [UInt8] = []
                    while let byte = output.fileHandleForReading.readData(ofLength: 1).first, byte != 0x0A {
                        line.append(byte)
                    }
                    continuation.resume(returning: String(decoding: line, as: UTF8.self))
                }
            }
        }
        guard first.hasPrefix("listening on 127.0.0.1:"), let port = Int(first.split(separator: ":").last ?? "") else {
            throw UnexpectedOutput(line: first)
        }
        return port
    }

    struct UnexpectedOutput: Error { let line: String }

    /// Waits for the process to exit and returns its exit status.
    func waitForExit() async throws -> Int32 {
        try await withTimeout(waitingFor: "chat-server to exit") { [exited] in
            await withCheckedContinuation { continuation in
                DispatchQueue.global().async {
                    exited.wait()
                    exited.signal()
                    continuation.resume()
                }
            }
        }
        return process.terminationReason == .exit ? process.terminationStatus : -process.terminationStatus
    }

    func terminateIfRunning() {
        if process.isRunning { process.terminate() }
    }

    /// What the process printed (after the first line, if that was read); call after it exited.
    func standardOutput() -> String { String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
    func standardError() -> String { (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? "" }
}
