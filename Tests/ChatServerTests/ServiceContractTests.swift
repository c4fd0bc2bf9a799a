import ChatProtocol
import Dispatch
import Foundation
import Glibc
import Testing
import TestSupport

/// What a service manager relies on (issue 38, finding 4): exit statuses that the unit's restart
/// rule reads rightly, `--version`, readiness and a watchdog over systemd's notification socket,
/// and SIGHUP that reloads rather than ends a server started from a terminal.
@Suite("The server as a service", .serialized)
struct ServiceContractTests {
    @Test func aMistypedFlagExitsWithAStatusTheUnitDoesNotRestart() async throws {
        let typo = try await Operations.run(["--prot", "7000"])
        let notRestarted = try Operations.statusesNotRestarted()
        let status = try #require(typo.status, "the typo's run ends")
        #expect(status != 0, "a typo fails: \(typo.output)")
        #expect(notRestarted.contains(status), "exit \(status) for a typo, but the unit restarts all but \(notRestarted.sorted())")
        #expect(try Operations.unitSetting("Restart") == ["on-failure"], "the unit restarts what failed otherwise")
        let badValue = try await Operations.run(["--port", "0", "--max-memory", "lots"])
        #expect(badValue.status.map(notRestarted.contains) == true, "a bad value: exit \(String(describing: badValue.status))")
    }

    @Test func startupRefusalsAreNotRestartedButALostDataDirectoryIs() async throws {
        let notRestarted = try Operations.statusesNotRestarted()
        #expect(!notRestarted.contains(DataDirectoryLockTests.directoryLostStatus), "a server that lost its directory is restarted")
        // A directory another server holds: refused at start, and not retried every 2 s.
        let data = try TemporaryDirectory(prefix: "chat-contract")
        defer { data.remove() }
        let holder = try await ChatServerProcess(arguments: ["--data-dir", data.path, "--log-level", "warning"])
        defer { holder.stop() }
        let refused = try await Operations.run(["--port", "0", "--data-dir", data.path])
        #expect(refused.status.map(notRestarted.contains) == true, "a locked directory: exit \(String(describing: refused.status))")
        // A config file that names an unknown setting: its line, and a status the unit leaves alone.
        let file = data.path + "-bad.toml"
        try "port = 0\nmax-clints = 5\n".write(toFile: file, atomically: true, encoding: .utf8)
        defer { unlink(file) }
        let badFile = try await Operations.run(["--config", file, "--no-persistence"])
        #expect(badFile.status.map(notRestarted.contains) == true, "a bad config file: exit \(String(describing: badFile.status))")
        #expect(badFile.output.contains("\(file):2:"), "the error names the line:\n\(badFile.output)")
    }

    @Test func versionPrintsTheVersionTheMetricsReport() async throws {
        let version = try await Operations.run(["--version"])
        #expect(version.status == 0, "\(version.output)")
        let printed = version.output.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(!printed.isEmpty && printed.first?.isNumber == true, "a version number: \(printed)")
        let server = try await ChatServerProcess(.memory, arguments: ["--metrics", "127.0.0.1:0", "--log-level", "warning"])
        defer { server.stop() }
        let port = try #require(MetricsPortTests.metricsPort(of: server))
        let text = try #require(await MetricsPortTests.get(port: port, path: "/metrics")?.body)
        let info = Operations.samples(named: "chat_build_info", in: text)
        #expect(info.count == 1 && info.first?.value == 1, "one chat_build_info sample:\n\(text)")
        #expect(info.first?.labels.contains("version=\"\(printed)\"") == true, "with the version \(printed): \(info)")
    }

    @Test func readinessAndTheWatchdogReachSystemdsNotificationSocket() async throws {
        let directory = try TemporaryDirectory(prefix: "chat-notify")
        defer { directory.remove() }
        let socket = try NotificationSocket(path: directory.path + "/notify")
        let server = try await ChatServerProcess(
            .durable, arguments: ["--log-level", "warning"],
            environment: ["NOTIFY_SOCKET": socket.path, "WATCHDOG_USEC": "200000"])
        let ready = socket.receive(until: { messages in messages.contains { $0.contains("READY=1") } })
        let readiness = ready.first { $0.contains("READY=1") } ?? ""
        #expect(readiness.contains("READY=1"), "READY=1 once listening: \(ready)")
        #expect(readiness.contains("MAINPID=\(server.pid)"), "with the main process's ID: \(readiness)")
        let beats = socket.receive(until: { messages in messages.filter { $0.contains("WATCHDOG=1") }.count >= 3 })
        #expect(beats.filter { $0.contains("WATCHDOG=1") }.count >= 3, "a watchdog beat every half of WATCHDOG_USEC: \(beats)")
        server.child.signal(SIGTERM)
        let stopping = socket.receive(until: { $0.contains { $0.contains("STOPPING=1") } })
        #expect(stopping.contains { $0.contains("STOPPING=1") }, "STOPPING=1 on SIGTERM: \(stopping)")
        #expect(await server.child.waitForExit() == 0)
        server.stop()
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/script")))
    func sighupFromATerminalReloadsRatherThanEndsTheServer() async throws {
        // `script` gives the server a terminal of its own: a pseudo-terminal as its controlling
        // terminal, as a shell's would be.
        let executable = try Operations.executable()
        let script = try ChildProcess(
            URL(fileURLWithPath: "/usr/bin/script"),
            ["-q", "-e", "-c", "exec \(executable.path) --port 0 --no-persistence", "/dev/null"])
        defer { script.stop() }
        #expect(await script.waitForOutput("listening on"), "the server starts under a terminal:\n\(script.output)")
        let pid = try #require(Self.onlyChild(of: script.pid), "the server is script's child")
        let port = try #require(Self.listeningPort(in: script.output))
        kill(pid, SIGHUP)
        #expect(await script.waitForOutput("SIGHUP"), "SIGHUP is logged:\n\(script.output)")
        let client = try await TestClient.connect(port: port, nick: "afterHangUp")
        client.close()
        #expect(script.exitStatus == nil, "the server still runs:\n\(script.output)")
        kill(pid, SIGTERM)
        #expect(await script.waitForExit() == 0, "and stops cleanly on SIGTERM:\n\(script.output)")
    }

    /// libdispatch reads a signal source's signal only once its manager thread has registered a
    /// signalfd, some time after the source's `activate()`. A signal sent before that, as the
    /// server starts, must neither be lost nor do what it does by default.
    @Test func aSignalWhileTheServerStartsIsNeitherLostNorLeftToItsDefault() async throws {
        let executable = try Operations.executable()
        let data = try TemporaryDirectory(prefix: "chat-start-signal")
        defer { data.remove() }
        // SIGHUP's default would end the server; it is handled once the server serves.
        let hungUp = try ChildProcess(executable, ["--port", "0", "--data-dir", data.path])
        defer { hungUp.stop() }
        #expect(await hungUp.waitForOutput("rooms stored"), "the store opens first:\n\(hungUp.output)")
        hungUp.signal(SIGHUP)
        #expect(await hungUp.waitForOutput("listening on"), "the server starts all the same:\n\(hungUp.output)")
        #expect(await hungUp.waitForOutput("signal=SIGHUP"), "and then handles the SIGHUP:\n\(hungUp.output)")
        let port = try #require(Self.listeningPort(in: hungUp.output))
        let client = try await TestClient.connect(port: port, nick: "afterHangUp")
        client.close()
        hungUp.signal(SIGTERM)
        #expect(await hungUp.waitForExit() == 0, "and stops cleanly on SIGTERM:\n\(hungUp.output)")
        // SIGTERM while starting ends the server: at once if it is still starting (the status
        // names the signal), else by the clean shutdown. Either way the data directory is free.
        let stopped = try ChildProcess(executable, ["--port", "0", "--data-dir", data.path])
        defer { stopped.stop() }
        #expect(await stopped.waitForOutput("rooms stored"), "the store opens first:\n\(stopped.output)")
        stopped.signal(SIGTERM)
        let status = await stopped.waitForExit()
        #expect(status == 128 + SIGTERM || status == 0, "SIGTERM stops a starting server:\n\(stopped.output)")
        let next = try await ChatServerProcess(arguments: ["--data-dir", data.path, "--log-level", "warning"])
        next.stop()
    }

    @Test func installShipsTheGuidesItLinksToAndExampleFiles() async throws {
        let directory = try TemporaryDirectory(prefix: "chat-install")
        defer { directory.remove() }
        let products = try Operations.executable().deletingLastPathComponent()
        let script = try ChildProcess(
            Operations.root.appendingPathComponent("Scripts/install.sh"), ["--debug", "--no-build", "--prefix", directory.path],
            environment: ["SCRATCH_PATH": products.deletingLastPathComponent().path])
        #expect(await script.waitForExit(timeout: .seconds(60)) == 0, "install.sh:\n\(script.output)")
        let doc = directory.path + "/share/doc/chat-server"
        let guide = try String(contentsOfFile: doc + "/OPERATIONS.md", encoding: .utf8)
        // Every document the guide links to is installed beside it.
        let linked = Set(guide.matches(of: /\]\(([A-Z]+\.md)/).map { String($0.output.1) })
        #expect(linked.isSuperset(of: ["SERVER.md", "SECURITY.md"]), "the guide links to \(linked)")
        for name in linked {
            #expect(FileManager.default.fileExists(atPath: doc + "/" + name), "\(name), which OPERATIONS.md links to, is installed")
        }
        for example in ["chat-server.env", "chat-server.toml"] {
            #expect(FileManager.default.fileExists(atPath: doc + "/examples/" + example), "the example \(example) is installed")
        }
        let check = try await Operations.run(["--check-config", "--config", doc + "/examples/chat-server.toml"])
        #expect(check.status == 0, "the installed example config is valid:\n\(check.output)")
    }

    /// The one child of `pid` (Linux's /proc children list), or nil.
    static func onlyChild(of pid: pid_t) -> pid_t? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8) else { return nil }
        let children = text.split(separator: " ").compactMap { pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        return children.count == 1 ? children[0] : nil
    }

    /// The port of a `listening on HOST:PORT` line written through a terminal (lines end in \r\n).
    static func listeningPort(in output: String) -> Int? {
        let line = output.split(whereSeparator: { $0 == "\n" || $0 == "\r\n" }).first { $0.contains("listening on ") }
        return line.flatMap { $0.split(separator: ":").last }.flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    }
}

/// A datagram socket where systemd would listen for a service's notifications (`NOTIFY_SOCKET`).
/// The test owns its descriptor and closes it once.
final class NotificationSocket: @unchecked Sendable {
    let path: String
    private let descriptor: Int32
    private var received: [String] = []

    init(path: String) throws {
        self.path = path
        descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(.EIO) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { bytes in
            for (index, byte) in path.utf8.prefix(bytes.count - 1).enumerated() { bytes[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0 else {
            Glibc.close(descriptor)
            throw POSIXError(.EADDRINUSE)
        }
        var timeout = timeval(tv_sec: 0, tv_usec: 200_000)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { Glibc.close(descriptor) }

    /// Every message received so far, after reading more until `done` holds of them or 20 s pass.
    func receive(until done: ([String]) -> Bool) -> [String] {
        let deadline = ContinuousClock.now + .seconds(20)
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !done(received), ContinuousClock.now < deadline {
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count > 0 { received.append(String(decoding: buffer[0..<count], as: UTF8.self)) }
        }
        return received
    }
}
