import Foundation
import Glibc
import SocketTLS

/// How a test server keeps its rooms and how clients reach it: the modes a user can run it in,
/// for tests that must hold in every one (`@Test(arguments: ServerMode.allCases)`).
public enum ServerMode: String, Sendable, CaseIterable, CustomStringConvertible {
    /// The server's default: rooms in SQLite, in a fresh temporary `--data-dir`.
    case durable
    /// `--no-persistence`: rooms in memory only.
    case memory
    /// A node of a cluster (`--cluster`) on a real `redis-server` of its own.
    case cluster
    /// Durable, and `--port` speaks TLS with a certificate from Scripts/dev-cert.sh.
    case tls

    /// The name the test report shows for the argument.
    public var description: String { rawValue }
}

/// The real `chat-server` binary running as a child process on a loopback port, in one of the
/// modes a user can run it in, with whatever that mode needs (a data directory, a Redis, a
/// certificate) made for it alone and removed when it stops.
public final class ChatServerProcess: Sendable {
    /// The process; its output holds the server's log.
    public let child: ChildProcess
    /// The port it listens on.
    public let port: Int
    /// The mode it was started in.
    public let mode: ServerMode
    /// In TLS mode, a client context that trusts the server's certificate; nil otherwise.
    public let clientTLS: TLSContext?
    /// Its temporary data directory, nil unless the helper made one (a test that names
    /// `--data-dir` keeps its own).
    public let dataDirectory: TemporaryDirectory?
    /// In cluster mode, the node's Redis.
    public let redis: RedisServerProcess?
    // Kept so the certificate files outlive the server that reads them (SIGHUP reloads them).
    private let certificates: DevCertificates?

    /// The process ID.
    public var pid: pid_t { child.pid }

    /// Starts `chat-server` on 127.0.0.1 in `mode` and waits for its `listening on HOST:PORT` line.
    ///
    /// `arguments` come after `--host 127.0.0.1 --port <port>` and the mode's flags (a later
    /// `--host` wins). The mode's storage is left out when `arguments` choose one themselves
    /// (`--data-dir`, `--no-persistence`, `--cluster`), so a test that names its data directory
    /// keeps it; otherwise a durable server gets a fresh temporary directory, never the user's.
    /// A cluster node is ready once its link to Redis is up, which it logs as a notice: a quieter
    /// `--log-level` is lowered to `notice`.
    /// With `port` 0 the OS picks a free one. A fixed port is retried for a while if it is still
    /// taken, as it can be right after a previous server on it exited.
    /// With `descriptorLimit`, the server starts under that open-file limit, soft and hard
    /// (util-linux's `prlimit`, which execs it: the process is the server).
    public init(
        _ mode: ServerMode = .durable, port: Int = 0, arguments: [String] = [], environment: [String: String] = [:],
        descriptorLimit: Int? = nil
    ) async throws {
        var executable = try ChildProcess.builtExecutable(named: "chat-server")
        var launcher: [String] = []
        if let descriptorLimit {
            launcher = ["--nofile=\(descriptorLimit):\(descriptorLimit)", executable.path]
            executable = URL(fileURLWithPath: "/usr/bin/prlimit")
        }
        var arguments = arguments
        let choosesStorage = arguments.contains { ["--data-dir", "--no-persistence", "--cluster", "--help"].contains($0) }
            || environment["CHAT_CLUSTER"] != nil
        var modeArguments: [String] = []
        var dataDirectory: TemporaryDirectory?
        var redis: RedisServerProcess?
        var certificates: DevCertificates?
        // Certificates first: nothing else is made yet if dev-cert.sh fails.
        if mode == .tls {
            let made = try await DevCertificates.make()
            certificates = made
            modeArguments += made.serverArguments
        }
        switch mode {
        case .durable, .tls:
            if !choosesStorage {
                let directory = try TemporaryDirectory(prefix: "chat-server-data")
                dataDirectory = directory
                modeArguments += ["--data-dir", directory.path]
            }
        case .memory:
            if !choosesStorage { modeArguments.append("--no-persistence") }
        case .cluster:
            if !choosesStorage {
                let started = try await RedisServerProcess()
                redis = started
                modeArguments += ["--cluster", "redis://127.0.0.1:\(started.port)"]
                // The node says its link is up at notice level, which we wait for below: a test
                // that asked for a quieter log gets notices too.
                if let level = arguments.firstIndex(of: "--log-level").map({ $0 + 1 }), level < arguments.count,
                    ["warning", "error", "critical"].contains(arguments[level])
                {
                    arguments[level] = "notice"
                }
            }
        }
        self.mode = mode
        self.dataDirectory = dataDirectory
        self.redis = redis
        self.certificates = certificates
        clientTLS = try certificates?.clientContext()

        let deadline = ContinuousClock.now + .seconds(30)
        while true {
            let child = try ChildProcess(
                executable, launcher + ["--host", "127.0.0.1", "--port", "\(port)"] + modeArguments + arguments, environment: environment)
            _ = await child.waitFor(timeout: .seconds(60)) { output, status in
                status != nil || Self.listeningPort(in: output) != nil
            }
            if child.exitStatus == nil, let bound = Self.listeningPort(in: child.output) {
                // A cluster node serves its rooms only once it reaches Redis.
                if redis != nil, !(await child.waitForOutput("cluster link up", timeout: .seconds(60))) {
                    child.stop()
                    redis?.stop()
                    dataDirectory?.remove()
                    throw ServerDidNotStart(output: child.output)
                }
                self.child = child
                self.port = bound
                return
            }
            child.stop()
            guard port != 0, ContinuousClock.now < deadline, child.output.contains("Address already in use") else {
                redis?.stop()
                dataDirectory?.remove()
                throw ServerDidNotStart(output: child.output)
            }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    deinit { stop() }

    /// The port in the first `listening on HOST:PORT` line of `output`.
    static func listeningPort(in output: String) -> Int? {
        let line = output.split(separator: "\n").first { $0.hasPrefix("listening on ") }
        return line.flatMap { $0.split(separator: ":").last }.flatMap { Int($0) }
    }

    /// Stops the server (SIGTERM, its graceful shutdown) and waits for it to exit, then stops its
    /// Redis and removes its data directory. Calling it again does nothing more.
    public func stop() {
        child.stop()
        redis?.stop()
        dataDirectory?.remove()
    }
}

/// `chat-server` exited, or printed no `listening on` line, instead of starting.
public struct ServerDidNotStart: Error, CustomStringConvertible {
    /// What it printed.
    public var output: String

    /// The output, for the test's failure message.
    public var description: String { "chat-server did not start; output:\n\(output)" }
}
