import ChatClient
import ChatProtocol
import Foundation
import Testing

/// Where `swift build` put the executables: next to the test bundle.
enum Executables {
    static func url(_ name: String) throws -> URL {
        let directory = try #require(Bundle.main.executableURL?.deletingLastPathComponent(), "the test runner's location")
        let candidates = [directory, directory.deletingLastPathComponent()].map { $0.appendingPathComponent(name) }
        return try #require(candidates.first { FileManager.default.isExecutableFile(atPath: $0.path) },
                            "\(name) is built next to the tests (\(directory.path))")
    }
}

/// Waits for `condition`, checking it every 50 ms, for at most `timeout`. Returns whether it held.
func eventually(timeout: Duration = .seconds(20), _ condition: () throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try condition() { return true }
        try? await Task.sleep(for: .milliseconds(50))
    }
    return try condition()
}

/// A child process started with `posix_spawn`, a pipe on its stdin and its stdout and stderr
/// collected.
///
/// Not Foundation's `Process`: that passes on the test runner's blocked signal mask, so a
/// child (and a tmux server and everything in its panes) would never see SIGTERM or SIGHUP.
/// Here the child starts with no signal blocked and default signal dispositions.
final class ChildProcess: @unchecked Sendable {
    // `collected` and `status` are guarded by `lock`; the reader thread appends.
    private let lock = NSLock()
    private var collected: [UInt8] = []
    private var status: Int32?
    private var outputEnded = false
    let pid: pid_t
    private var input: Int32

    /// Starts `executable` with `arguments`; `environment` is added to the test's own.
    /// With `collectOutput` false, stdout and stderr go to /dev/null.
    init(_ executable: URL, _ arguments: [String], environment: [String: String] = [:], collectOutput: Bool = true) throws {
        var stdinPipe: [Int32] = [0, 0]
        var stdoutPipe: [Int32] = [0, 0]
        guard pipe(&stdinPipe) == 0, pipe(&stdoutPipe) == 0 else { throw POSIXError(.EMFILE) }
        // Glibc's module has no pipe2; other children must not inherit these ends.
        for descriptor in stdinPipe + stdoutPipe { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, stdinPipe[0], 0)
        if collectOutput {
            posix_spawn_file_actions_adddup2(&actions, stdoutPipe[1], 1)
            posix_spawn_file_actions_adddup2(&actions, stdoutPipe[1], 2)
        } else {
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT, SIGCHLD, SIGWINCH] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }.map { "\($0.key)=\($0.value)" }
        let argv = ([executable.path] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup($0) } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable.path, &actions, &attributes, argv, envp)
        close(stdinPipe[0])
        close(stdoutPipe[1])
        guard result == 0 else {
            close(stdinPipe[1])
            close(stdoutPipe[0])
            throw POSIXError(POSIXErrorCode(rawValue: result) ?? .EIO)
        }
        self.pid = pid
        self.input = stdinPipe[1]

        let output = stdoutPipe[0]
        Thread.detachNewThread { [self] in
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = read(output, &buffer, buffer.count)
                if count < 0 && errno == EINTR { continue }
                if count <= 0 { break }
                lock.withLock { collected.append(contentsOf: buffer[..<count]) }
            }
            close(output)
            lock.withLock { outputEnded = true }
        }
    }

    /// Everything printed so far (stdout and stderr).
    var output: String {
        lock.withLock { String(decoding: collected, as: UTF8.self) }
    }

    /// Whether the process's stdout and stderr have been closed (it and all its children exited).
    var outputHasEnded: Bool { lock.withLock { outputEnded } }

    /// Writes `line` and a newline to the process's stdin.
    func send(_ line: String) {
        let bytes = Array((line + "\n").utf8)
        _ = bytes.withUnsafeBytes { write(input, $0.baseAddress, $0.count) }
    }

    /// Closes the process's stdin (end of input).
    func closeInput() {
        lock.withLock {
            if input >= 0 { close(input) }
            input = -1
        }
    }

    /// The exit status (or 128 + signal), once the process has exited; reaps it.
    var exitStatus: Int32? {
        lock.withLock {
            if status == nil {
                var raw: Int32 = 0
                if waitpid(pid, &raw, WNOHANG) == pid {
                    let signal = raw & 0x7f
                    status = signal == 0 ? (raw >> 8) & 0xff : 128 + signal
                }
            }
            return status
        }
    }

    /// Waits until the output contains `text`.
    func waitForOutput(_ text: String, timeout: Duration = .seconds(20)) async -> Bool {
        await eventually(timeout: timeout) { output.contains(text) }
    }

    /// Waits for the process to exit and returns its status, or nil if it is still running.
    ///
    /// Then waits (up to 5 s more) for the end of its output, so that `output` holds everything it
    /// printed: the thread draining the pipe can lag behind the exit on a busy machine. The wait is
    /// bounded because a child spawned meanwhile by another test may hold the pipe open a little
    /// longer (close-on-exec is set right after `pipe`, not atomically with it).
    func waitForExit(timeout: Duration = .seconds(20)) async -> Int32? {
        _ = await eventually(timeout: timeout) { exitStatus != nil }
        if exitStatus != nil { _ = await eventually(timeout: .seconds(5)) { outputHasEnded } }
        return exitStatus
    }

    /// Stops the process if it still runs: SIGTERM to its PID, then SIGKILL if it lingers.
    func stop() {
        closeInput()
        guard exitStatus == nil else { return }
        kill(pid, SIGTERM)
        let deadline = ContinuousClock.now + .seconds(10)
        while exitStatus == nil && ContinuousClock.now < deadline { usleep(20_000) }
        if exitStatus == nil {
            kill(pid, SIGKILL)
            var raw: Int32 = 0
            waitpid(pid, &raw, 0)
            lock.withLock { status = 137 }
        }
    }

    deinit { stop() }
}

/// The real `chat-server` on a loopback port.
final class TestServer {
    let child: ChildProcess
    let port: Int

    /// Starts a server on `port` (0: the OS picks one), retrying a taken port for a while
    /// (a restarted server may find its old port still being released).
    init(port: Int = 0) async throws {
        let executable = try Executables.url("chat-server")
        let deadline = ContinuousClock.now + .seconds(20)
        while true {
            let child = try ChildProcess(executable, ["--host", "127.0.0.1", "--port", "\(port)"])
            let started = await eventually { child.output.contains("listening on") || child.exitStatus != nil }
            if started, child.exitStatus == nil, let line = child.output.split(separator: "\n").first(where: { $0.hasPrefix("listening on") }),
                let bound = line.split(separator: ":").last.flatMap({ Int($0) })
            {
                self.child = child
                self.port = bound
                return
            }
            child.stop()
            guard ContinuousClock.now < deadline else {
                Issue.record("chat-server did not start: \(child.output)")
                throw CancellationError()
            }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    /// Stops the server and waits for it to exit.
    func stop() { child.stop() }
}

/// A scripted chat participant speaking the protocol directly, for the other end of a test.
final class Peer: @unchecked Sendable {
    // `received` is guarded by `lock`; the reader task appends.
    private let lock = NSLock()
    private var received: [Frame] = []
    let connection: ChatConnection
    private var reader: Task<Void, Never>?

    init(nick: String, port: Int, room: String = "general") async throws {
        connection = try await ChatConnection.connect(host: "127.0.0.1", port: port, nick: nick)
        reader = Task { [connection, weak self] in
            do {
                for try await frame in connection.frames {
                    guard let self else { return }
                    if case .ping(let token) = frame { try await connection.send(.pong(token: token)) }
                    self.record(frame)
                }
            } catch {}
        }
        try await connection.send(.join(room: room))
        #expect(await waitFor { if case .joined(room, _, _, nick) = $0 { true } else { false } }, "\(nick) joined #\(room)")
    }

    private func record(_ frame: Frame) {
        lock.withLock { received.append(frame) }
    }

    var frames: [Frame] {
        lock.lock()
        defer { lock.unlock() }
        return received
    }

    /// Waits until a frame matching `predicate` has arrived.
    func waitFor(timeout: Duration = .seconds(20), _ predicate: @escaping (Frame) -> Bool) async -> Bool {
        await eventually(timeout: timeout) { frames.contains(where: predicate) }
    }

    /// Says `text` in `room`.
    func say(_ text: String, in room: String = "general") async throws {
        try await connection.send(.say(room: room, text: text))
    }

    func close() {
        reader?.cancel()
        connection.close()
    }

    deinit { close() }
}

/// A tmux server of our own (its own `-L` socket) with one 80×24 window running a command.
///
/// `kill-server` on that socket, in `stop()`, ends only what this session started.
final class TmuxSession {
    let socket = "chat-client-test-\(getpid())-\(UUID().uuidString.prefix(8))"
    private(set) var stopped = false

    /// Starts `command` (a shell command line) in a new detached session.
    init(_ command: String) throws {
        try tmux(["-f", "/dev/null", "new-session", "-d", "-x", "80", "-y", "24", command])
    }

    /// Runs tmux on our socket, waits for it, and returns its stdout.
    @discardableResult
    func tmux(_ arguments: [String]) throws -> String {
        // `new-session` forks the tmux server, which would hold an output pipe open for its
        // whole life; only commands that talk to a running server get one.
        let collect = !arguments.contains("new-session")
        let child = try ChildProcess(URL(fileURLWithPath: "/usr/bin/tmux"), ["-L", socket] + arguments, collectOutput: collect)
        let deadline = ContinuousClock.now + .seconds(30)
        while (child.exitStatus == nil || !child.outputHasEnded) && ContinuousClock.now < deadline { usleep(5_000) }
        if child.exitStatus == nil { child.stop() }
        return child.output
    }

    /// Types `text` literally (no key names).
    func type(_ text: String) throws { try tmux(["send-keys", "-l", text]) }

    /// Presses named keys (`Enter`, `Tab`, `Left`, `C-c`, …).
    func press(_ keys: String...) throws { try tmux(["send-keys"] + keys) }

    /// The visible screen, one string per row, trailing spaces removed.
    func screen() throws -> [String] {
        try tmux(["capture-pane", "-p"]).split(separator: "\n", omittingEmptySubsequences: false).map {
            String($0.reversed().drop { $0 == " " }.reversed())
        }
    }

    /// Waits until the screen satisfies `condition`; on timeout records the screen as an issue.
    @discardableResult
    func waitForScreen(_ what: String, timeout: Duration = .seconds(20), _ condition: ([String]) -> Bool) async throws -> Bool {
        let held = try await eventually(timeout: timeout) { condition(try screen()) }
        if !held { Issue.record("screen never showed \(what):\n\(try screen().joined(separator: "\n"))") }
        return held
    }

    /// Waits until some row contains `text`.
    @discardableResult
    func waitFor(_ text: String, timeout: Duration = .seconds(20)) async throws -> Bool {
        try await waitForScreen("\"\(text)\"", timeout: timeout) { $0.contains { $0.contains(text) } }
    }

    /// The prompt row (the last row starting with `prefix`) and the rows it wraps onto, joined.
    func inputLine(prompt prefix: String) throws -> String? {
        let rows = try screen()
        guard let start = rows.lastIndex(where: { $0.hasPrefix(prefix) }) else { return nil }
        return rows[start...].prefix { !$0.isEmpty }.joined()
    }

    /// The PID of the command the pane's shell is running (the client, in `clientInTerminal`),
    /// or nil when the shell has no child.
    func clientPID() throws -> pid_t? {
        let shell = try tmux(["display-message", "-p", "#{pane_pid}"]).trimmingCharacters(in: .whitespacesAndNewlines)
        let children = try? String(contentsOfFile: "/proc/\(shell)/task/\(shell)/children", encoding: .utf8)
        return children?.split(separator: " ").first.flatMap { pid_t($0) }
    }

    /// Kills our tmux server and everything running in it.
    func stop() {
        guard !stopped else { return }
        stopped = true
        _ = try? tmux(["kill-server"])
        // tmux leaves its socket file behind after kill-server.
        let directory = ProcessInfo.processInfo.environment["TMUX_TMPDIR"] ?? "/tmp"
        unlink("\(directory)/tmux-\(getuid())/\(socket)")
    }

    deinit { stop() }
}

/// A fresh temporary directory, used as HOME so that history and editrc files are the test's own.
func temporaryDirectory() throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("chat-client-test-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

/// The shell command that runs chat-client in a terminal and, after it exits, reports its exit
/// status and the terminal modes, then reads one line through the restored terminal.
func clientInTerminal(nick: String, port: Int, home: URL, extra: [String] = []) throws -> String {
    let client = try Executables.url("chat-client").path
    let wrapper = home.appendingPathComponent("run-client.sh")
    try """
        #!/bin/sh
        # Ctrl-C goes to the whole foreground group: the wrapper must outlive it to report.
        trap : INT
        "$@"
        status=$?
        printf 'EXIT=%s\\n' "$status"
        printf 'TTY=%s\\n' "$(stty -a | tr ' ;' '\\n\\n' | grep -xE -- '-?(icanon|echo|isig)' | tr '\\n' ' ')"
        read line
        printf 'SHELL-READ=%s\\n' "$line"
        exec sleep 600
        """.write(to: wrapper, atomically: true, encoding: .utf8)
    let arguments = ["--nick", nick, "--port", "\(port)", "--room", "general"] + extra
    return "env HOME='\(home.path)' LANG=C.UTF-8 sh '\(wrapper.path)' '\(client)' " + arguments.map { "'\($0)'" }.joined(separator: " ")
}
