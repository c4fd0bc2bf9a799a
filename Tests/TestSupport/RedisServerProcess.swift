import Foundation
import Glibc
import SocketCore

/// A real `redis-server` as a child process on a free loopback port, with no persistence and its
/// working directory in a fresh temporary directory. `Scripts/bootstrap.sh` installs it.
public final class RedisServerProcess: Sendable {
    /// The process; its output holds Redis's log.
    public let child: ChildProcess
    /// The port it listens on, on 127.0.0.1.
    public let port: Int
    /// Its working directory (where an append-only file goes), removed by `stop()` unless the
    /// caller gave it.
    public var directory: String { scratch.path }
    private let scratch: TemporaryDirectory
    private let ownsDirectory: Bool

    /// The process ID.
    public var pid: pid_t { child.pid }

    /// Starts `redis-server` and waits until it accepts connections. Redis cannot listen on an
    /// OS-chosen port, so a port is found free by binding port 0 and handed to it; if another
    /// process takes it in between, another is tried.
    /// With `port`, on that port (to bring a Redis back where its clients expect it); with
    /// `directory`, in that directory (to bring it back with what it wrote there: its append-only
    /// file), which is then the caller's to remove. With `wallClock`, Redis reads the time from it.
    public init(
        port fixedPort: Int? = nil, directory: TemporaryDirectory? = nil, extraArguments: [String] = [],
        wallClock: HandHeldWallClock? = nil
    ) async throws {
        let executable = try Self.executable()
        let environment = try await wallClock?.environment ?? [:]
        let scratch = try directory ?? TemporaryDirectory(prefix: "redis-test")
        self.scratch = scratch
        ownsDirectory = directory == nil
        for _ in 0..<5 {
            let port = try fixedPort ?? Self.freePort()
            let child = try ChildProcess(executable, Self.arguments(port: port, directory: scratch) + extraArguments, environment: environment)
            _ = await child.waitFor(timeout: .seconds(30), Self.startedOrEnded)
            if Self.isReady(child) {
                self.child = child
                self.port = port
                return
            }
            child.stop()
            guard child.output.contains("Address already in use") else { break }
            // A fixed port may still be held by the Redis just killed: give it a moment.
            if fixedPort != nil { try await Task.sleep(for: .milliseconds(200)) }
        }
        if directory == nil { scratch.remove() }
        throw RedisDidNotStart()
    }

    private static func arguments(port: Int, directory: TemporaryDirectory) -> [String] {
        [
            "--port", "\(port)", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", directory.path, "--loglevel", "notice",
        ]
    }

    @Sendable private static func startedOrEnded(output: String, status: Int32?) -> Bool {
        status != nil || output.contains("Ready to accept connections")
    }

    private static func isReady(_ child: ChildProcess) -> Bool {
        child.exitStatus == nil && child.output.contains("Ready to accept connections")
    }

    /// Stops Redis (SIGTERM) and removes its directory.
    public func stop() {
        child.stop()
        if ownsDirectory { scratch.remove() }
    }

    /// Kills Redis with SIGKILL, as a crash would; the directory stays until `stop()`.
    public func kill() { child.killNow() }

    private static func executable() throws -> URL {
        for directory in ["/usr/bin", "/usr/local/bin", "/usr/sbin"] {
            let path = "\(directory)/redis-server"
            if access(path, X_OK) == 0 { return URL(fileURLWithPath: path) }
        }
        throw MissingExecutable(name: "redis-server", searched: ["/usr/bin", "/usr/local/bin", "/usr/sbin"])
    }

    private static func freePort() throws -> Int {
        let socket = try Socket(family: AF_INET, label: "port finder")
        defer { socket.close() }
        try socket.bind(to: SocketAddress(ip: "127.0.0.1", port: 0)!)
        return try socket.localAddress().port
    }
}

/// `redis-server` exited, or never said it was ready.
public struct RedisDidNotStart: Error, CustomStringConvertible {
    /// For the test's failure message.
    public var description: String { "redis-server did not start (is it installed? Scripts/bootstrap.sh installs it)" }
}
