import Foundation
import Glibc

/// The real `chat-server` binary running as a child process on a loopback port.
public final class ChatServerProcess: Sendable {
    /// The process; its output holds the server's log.
    public let child: ChildProcess
    /// The port it listens on.
    public let port: Int

    /// The process ID.
    public var pid: pid_t { child.pid }

    /// Starts `chat-server` on 127.0.0.1 and waits for its `listening on HOST:PORT` line.
    ///
    /// `arguments` come after `--host 127.0.0.1 --port <port>` (a later `--host` wins); unless
    /// they name `--data-dir` (or say `--no-persistence`), `--no-persistence` is added, so no test
    /// writes to the user's data directory. With `port` 0 the OS picks a free one. A fixed port is retried for a while if it is still
    /// taken, as it can be right after a previous server on it exited.
    public init(port: Int = 0, arguments: [String] = [], environment: [String: String] = [:]) async throws {
        let executable = try ChildProcess.builtExecutable(named: "chat-server")
        let deadline = ContinuousClock.now + .seconds(30)
        var arguments = arguments
        if !arguments.contains("--data-dir"), !arguments.contains("--no-persistence"), !arguments.contains("--help") {
            arguments.append("--no-persistence")
        }
        while true {
            let child = try ChildProcess(
                executable, ["--host", "127.0.0.1", "--port", "\(port)"] + arguments, environment: environment)
            _ = await child.waitFor(timeout: .seconds(60)) { output, status in
                status != nil || Self.listeningPort(in: output) != nil
            }
            if child.exitStatus == nil, let bound = Self.listeningPort(in: child.output) {
                self.child = child
                self.port = bound
                return
            }
            child.stop()
            guard port != 0, ContinuousClock.now < deadline, child.output.contains("Address already in use") else {
                throw ServerDidNotStart(output: child.output)
            }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    /// The port in the first `listening on HOST:PORT` line of `output`.
    static func listeningPort(in output: String) -> Int? {
        let line = output.split(separator: "\n").first { $0.hasPrefix("listening on ") }
        return line.flatMap { $0.split(separator: ":").last }.flatMap { Int($0) }
    }

    /// Stops the server (SIGTERM, its graceful shutdown) and waits for it to exit.
    public func stop() { child.stop() }
}

/// `chat-server` exited, or printed no `listening on` line, instead of starting.
public struct ServerDidNotStart: Error, CustomStringConvertible {
    /// What it printed.
    public var output: String

    /// The output, for the test's failure message.
    public var description: String { "chat-server did not start; output:\n\(output)" }
}
