import ChatLoadTest
import Foundation
import Testing

/// Runs against the real `chat-server` and through the real `chat-loadtest`, both built next to
/// the test bundle.
@Suite(.serialized) struct RealServerTests {
    @Test func countsAreExactAgainstTheRealServer() async throws {
        let server = try await ChildProcess.startServer()
        defer { server.stop() }
        var configuration = LoadTestConfiguration()
        configuration.port = server.port
        configuration.clients = 20
        configuration.rooms = 2
        configuration.senders = 4
        configuration.messages = 4_000
        configuration.duration = 60
        configuration.serverPID = server.pid
        let result = await (try LoadTest(configuration: configuration)).run()

        #expect(result.joined == 20 && result.failedClients == 0 && result.disconnectedClients == 0, "\(result.textReport())")
        #expect(result.sent == 4_000 && result.refused == 0)
        // Each room has 10 members and gets half of the messages (2 of the 4 senders).
        #expect(result.deliveries == DeliveryTally(expected: 40_000, delivered: 40_000), "got \(result.deliveries)")
        #expect(result.passed, "expected a clean run: \(result.textReport())")
        #expect(result.server != nil, "expected the server's CPU and memory read from /proc")
    }

    @Test func commandLineWritesJSONAndHgrmAndExitsZeroOnACleanRun() async throws {
        let server = try await ChildProcess.startServer()
        defer { server.stop() }
        let hgrm = FileManager.default.temporaryDirectory.appendingPathComponent("chat-loadtest-\(getpid()).hgrm")
        defer { try? FileManager.default.removeItem(at: hgrm) }
        let run = try ChildProcess(binary: try #require(ChildProcess.executable(named: "chat-loadtest"), "expected chat-loadtest built"), arguments: [
            "--port", "\(server.port)", "--clients", "10", "--senders", "2", "--messages", "1000",
            "--rate", "2000", "--json", "--hgrm", hgrm.path, "--server-pid", "\(server.pid)",
        ])
        let status = await run.exitStatus(timeout: 120)
        let output = run.output
        #expect(status == 0, "expected exit 0; output:\n\(output)")
        let line = try #require(output.split(separator: "\n").first { $0.hasPrefix("{") }, "expected a JSON line:\n\(output)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(json["passed"] as? Bool == true)
        #expect(json["sent"] as? Int == 1_000)
        let deliveries = try #require(json["deliveries"] as? [String: Any])
        #expect(deliveries["expected"] as? Int == 10_000 && deliveries["lost"] as? Int == 0, "got \(deliveries)")
        let distribution = try String(contentsOf: hgrm, encoding: .utf8)
        #expect(distribution.contains("Percentile") && distribution.contains("#[Max"), "expected an .hgrm file:\n\(distribution)")
    }

    @Test func commandLineRefusesRemoteHostsWithUsageStatus() async throws {
        let run = try ChildProcess(binary: try #require(ChildProcess.executable(named: "chat-loadtest")), arguments: ["--host", "192.0.2.1"])
        let status = await run.exitStatus(timeout: 60)
        #expect(status == 64, "expected EX_USAGE")
        #expect(run.output.contains("only targets this machine"), "output:\n\(run.output)")
    }
}

/// A child process whose standard output and error are collected, with waits that time out.
///
/// Thread safety: `lock` protects `collected`, `firstLine` and `status`; the pipe and termination
/// handlers run on Foundation's queues.
final class ChildProcess: @unchecked Sendable {
    private let process = Process()
    private let lock = NSLock()
    private var collected = ""
    private var status: Int32?
    private var outputEnded = false
    private var waiters: [(String, Int32?, Bool) -> Bool] = []

    /// The executable `name` built next to the test bundle, or nil.
    static func executable(named name: String) -> URL? {
        guard let directory = Bundle.main.executableURL?.deletingLastPathComponent() else { return nil }
        let binary = directory.appendingPathComponent(name)
        return FileManager.default.isExecutableFile(atPath: binary.path) ? binary : nil
    }

    /// Starts `binary` with `arguments`.
    init(binary: URL, arguments: [String]) throws {
        process.executableURL = binary
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        pipe.fileHandleForReading.readabilityHandler = { [self] handle in
            let data = handle.availableData
            if data.isEmpty { handle.readabilityHandler = nil }
            changed {
                $0.collected += String(decoding: data, as: UTF8.self)
                if data.isEmpty { $0.outputEnded = true }
            }
        }
        process.terminationHandler = { [self] process in changed { $0.status = process.terminationStatus } }
        try process.run()
    }

    /// The process ID.
    var pid: Int32 { process.processIdentifier }

    /// Everything written so far.
    var output: String { lock.withLock { collected } }

    /// Applies `update` and wakes the waiters whose condition now holds.
    private func changed(_ update: (ChildProcess) -> Void) {
        lock.withLock {
            update(self)
            waiters.removeAll { $0(collected, status, outputEnded) }
        }
    }

    /// Waits, at most `timeout` seconds, until `condition(output, exitStatus)` holds; returns
    /// whether it did. Waits on output and exit events, never by polling.
    func wait(timeout: Double, until condition: @escaping @Sendable (String, Int32?) -> Bool) async -> Bool {
        await wait(timeout: timeout) { output, status, _ in condition(output, status) }
    }

    /// Like `wait(timeout:until:)`, with whether the output has ended (the pipe reached EOF).
    private func wait(timeout: Double, until condition: @escaping @Sendable (String, Int32?, Bool) -> Bool) async -> Bool {
        await withCheckedContinuation { continuation in
            let once = OnceFlag()
            let check: (String, Int32?, Bool) -> Bool = { output, status, ended in
                guard condition(output, status, ended) else { return false }
                if once.claim() { continuation.resume(returning: true) }
                return true
            }
            let satisfied = lock.withLock {
                if check(collected, status, outputEnded) { return true }
                waiters.append(check)
                return false
            }
            guard !satisfied else { return }
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout) {
                if once.claim() { continuation.resume(returning: false) }
            }
        }
    }

    /// The exit status, or nil if the process did not exit within `timeout` seconds (it is then
    /// sent SIGKILL by its PID). Once it returns, `output` holds everything the process wrote.
    func exitStatus(timeout: Double) async -> Int32? {
        guard await wait(timeout: timeout, until: { $1 != nil }) else {
            kill(pid, SIGKILL)
            return nil
        }
        // The pipe's last bytes can be handed over after the exit is reported. Wait for its end,
        // but briefly: a child spawned meanwhile by another test may hold the pipe open a little
        // longer (Foundation's Pipe is not close-on-exec).
        _ = await wait(timeout: 5) { _, _, ended in ended }
        return lock.withLock { status }
    }

    /// Sends SIGTERM to this process (by its PID) and waits for it to exit.
    func stop() {
        guard process.isRunning else { return }
        process.terminate()
        process.waitUntilExit()
    }

    /// The port of a server that printed `listening on HOST:PORT` first.
    var port: Int {
        let line = output.split(separator: "\n").first { $0.hasPrefix("listening on ") }
        return line.flatMap { $0.split(separator: ":").last }.flatMap { Int($0) } ?? 0
    }

    /// Starts `chat-server` on a free loopback port with the rate limit off, as load tests need.
    static func startServer() async throws -> ChildProcess {
        let binary = try #require(executable(named: "chat-server"), "expected chat-server built next to the tests")
        let server = try ChildProcess(binary: binary, arguments: [
            "--host", "127.0.0.1", "--port", "0", "--rate-limit", "0", "--log-level", "warning", "--drain-timeout", "1",
        ])
        let listening = await server.wait(timeout: 60) { output, status in
            status != nil || output.split(separator: "\n").contains { $0.hasPrefix("listening on ") }
        }
        guard listening, server.port > 0 else {
            server.stop()
            throw ServerDidNotStart(output: server.output)
        }
        return server
    }
}

/// The server printed no `listening on` line.
struct ServerDidNotStart: Error, CustomStringConvertible {
    var output: String
    var description: String { "chat-server did not start; output:\n\(output)" }
}

/// A flag that can be claimed once, from any thread.
final class OnceFlag: @unchecked Sendable {
    // `lock` protects `claimed`.
    private let lock = NSLock()
    private var claimed = false

    /// True for the first caller only.
    func claim() -> Bool {
        lock.withLock {
            defer { claimed = true }
            return !claimed
        }
    }
}
