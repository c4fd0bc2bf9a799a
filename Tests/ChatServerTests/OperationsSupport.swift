import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

/// What the operations suites share: the repository's root, the unit file's settings, a server
/// started with arguments `ChatServerProcess` does not make (a resource limit, an environment of
/// its own), and scrapes of the metrics port.
enum Operations {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The executable under test.
    static func executable() throws -> URL { try ChildProcess.builtExecutable(named: "chat-server") }

    /// Runs `chat-server arguments` to its end (60 s at most) and returns its status and output.
    static func run(_ arguments: [String], environment: [String: String] = [:]) async throws -> (status: Int32?, output: String) {
        let child = try ChildProcess(try executable(), arguments, environment: environment)
        let status = await child.waitForExit(timeout: .seconds(60))
        child.stop()
        return (status, child.output)
    }

    /// The values of `key=` in Scripts/systemd/chat-server.service, split on spaces.
    static func unitSetting(_ key: String) throws -> [String] {
        let unit = try String(contentsOf: root.appendingPathComponent("Scripts/systemd/chat-server.service"), encoding: .utf8)
        let line = unit.split(separator: "\n").first { $0.hasPrefix(key + "=") }
        return line.map { $0.dropFirst(key.count + 1).split(separator: " ").map(String.init) } ?? []
    }

    /// The exit statuses the unit does not restart after.
    static func statusesNotRestarted() throws -> Set<Int32> {
        Set(try unitSetting("RestartPreventExitStatus").compactMap { Int32($0) })
    }

    /// The metrics port a server printed (`metrics on HOST:PORT`), read from `output`.
    static func metricsPort(in output: String) -> Int? {
        let line = output.split(separator: "\n").first { $0.hasPrefix("metrics on ") }
        return line.flatMap { $0.split(separator: ":").last }.flatMap { Int($0) }
    }

    /// Every sample of `/metrics` text whose name (before `{` or the space) is `name`, with its value.
    static func samples(named name: String, in text: String) -> [(labels: String, value: Double)] {
        text.split(separator: "\n").compactMap { line in
            guard !line.hasPrefix("#"), line.hasPrefix(name) else { return nil }
            let rest = line.dropFirst(name.count)
            guard rest.first == " " || rest.first == "{" else { return nil }
            guard let space = rest.lastIndex(of: " "), let value = Double(rest[rest.index(after: space)...]) else { return nil }
            return (String(rest[..<space]), value)
        }
    }

    /// The sum of every sample named `name` in `text` (every label value together).
    static func total(_ name: String, in text: String) -> Double {
        samples(named: name, in: text).reduce(0) { $0 + $1.value }
    }
}

/// `chat-server` started directly, for what `ChatServerProcess` does not do: a wrapper in front
/// of it (`prlimit`), an exact command line. Waits for `listening on`; stops it on `stop()`.
final class ServerUnderTest: Sendable {
    let child: ChildProcess
    let port: Int
    let metricsPort: Int?

    /// Starts `[wrapper…] chat-server arguments` and waits for its `listening on` line.
    init(arguments: [String], wrapper: [String] = [], environment: [String: String] = [:]) async throws {
        let server = try Operations.executable()
        let child: ChildProcess
        if let program = wrapper.first {
            child = try ChildProcess(URL(fileURLWithPath: program), Array(wrapper.dropFirst()) + [server.path] + arguments, environment: environment)
        } else {
            child = try ChildProcess(server, arguments, environment: environment)
        }
        _ = await child.waitFor(timeout: .seconds(60)) { output, status in
            status != nil || (ChatServerProcess.listeningPort(in: output) != nil && (!arguments.contains("--metrics") || Operations.metricsPort(in: output) != nil))
        }
        guard child.exitStatus == nil, let port = ChatServerProcess.listeningPort(in: child.output) else {
            child.stop()
            throw StartFailed(output: child.output)
        }
        self.child = child
        self.port = port
        metricsPort = Operations.metricsPort(in: child.output)
    }

    deinit { child.stop() }

    func stop() { child.stop() }
}

/// `chat-server` exited, or printed no `listening on` line, instead of starting.
struct StartFailed: Error, CustomStringConvertible {
    var output: String
    var description: String { "chat-server did not start; output:\n\(output)" }
}

extension ChatServerProcess {
    /// The port of the `listening on HOST:PORT` line in `output` (for servers started directly).
    static func listeningPort(in output: String) -> Int? {
        let line = output.split(separator: "\n").first { $0.hasPrefix("listening on ") }
        return line.flatMap { $0.split(separator: ":").last }.flatMap { Int($0) }
    }
}
