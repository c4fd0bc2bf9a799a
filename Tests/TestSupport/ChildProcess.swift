import Foundation
import Glibc

/// A child process for end-to-end tests: started with `posix_spawn`, its standard input a pipe,
/// its standard output and error collected together, its exit reaped by a thread of its own.
///
/// Not Foundation's `Process`: that passes on the test runner's blocked signal mask, so a child
/// (and a tmux server and everything in its panes) would never see SIGTERM or SIGHUP, and its
/// `Pipe` is not close-on-exec, so other tests' children inherit it. Here the child starts with no
/// signal blocked and default dispositions, and only it gets the pipes.
///
/// Waiting never polls: `waitFor` registers a condition that is checked each time output arrives
/// or the process exits, and gives up after its timeout.
///
/// Thread safety: `lock` protects `collected`, `status`, `outputEnded`, `waiters` and `input`; the
/// reader and reaper threads call `changed`.
public final class ChildProcess: @unchecked Sendable {
    /// The child's process ID; signal it by this PID only.
    public let pid: pid_t

    private let lock = NSLock()
    private var collected: [UInt8] = []
    private var status: Int32?
    private var outputEnded = false
    private var waiters: [(ChildProcess) -> Bool] = []
    private var input: Int32

    /// The test runner ignores SIGPIPE, decided here for itself since no library does it any more:
    /// writing to the input of a child that has already exited then fails with `EPIPE` instead of
    /// killing every test in the process. The children start with SIGPIPE at its default (below).
    private static let brokenPipesFailWrites: Void = { _ = Glibc.signal(SIGPIPE, SIG_IGN) }()

    /// Starts `executable` with `arguments`; `environment` is added to the test's own. With
    /// `collectOutput` false, standard output and error go to /dev/null (for a child that prints
    /// more than a test wants to keep).
    public init(
        _ executable: URL, _ arguments: [String], environment: [String: String] = [:], collectOutput: Bool = true
    ) throws {
        _ = Self.brokenPipesFailWrites
        var stdinPipe: [Int32] = [0, 0]
        var stdoutPipe: [Int32] = [0, 0]
        guard pipe(&stdinPipe) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        guard pipe(&stdoutPipe) == 0 else {
            let code = errno
            close(stdinPipe[0])
            close(stdinPipe[1])
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        }
        // Glibc's module has no pipe2: set close-on-exec at once, so that children other tests
        // spawn do not inherit these ends (the file actions below give the child its own copies).
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
            var buffer = [UInt8](repeating: 0, count: 16 * 1024)
            while true {
                let count = read(output, &buffer, buffer.count)
                if count < 0 && errno == EINTR { continue }
                if count <= 0 { break }
                changed { $0.collected.append(contentsOf: buffer[..<count]) }
            }
            close(output)
            changed { $0.outputEnded = true }
        }
        Thread.detachNewThread { [self, pid] in
            var raw: Int32 = 0
            while waitpid(pid, &raw, 0) == -1 && errno == EINTR {}
            let signal = raw & 0x7f
            changed { $0.status = signal == 0 ? (raw >> 8) & 0xff : 128 + signal }
        }
    }

    deinit { stop() }

    /// Applies `update` under the lock and lets every waiter whose condition now holds go.
    private func changed(_ update: (ChildProcess) -> Void) {
        lock.withLock {
            update(self)
            waiters.removeAll { $0(self) }
        }
    }

    // MARK: Output and input

    /// Everything printed so far (standard output and error, interleaved as written).
    public var output: String { lock.withLock { String(decoding: collected, as: UTF8.self) } }

    /// The lines printed so far.
    public var lines: [Substring] { output.split(separator: "\n") }

    /// Writes `line` and a newline to the child's standard input.
    public func send(_ line: String) {
        let bytes = Array((line + "\n").utf8)
        lock.withLock {
            guard input >= 0 else { return }
            _ = bytes.withUnsafeBytes { write(input, $0.baseAddress, $0.count) }
        }
    }

    /// Closes the child's standard input: it reads end of file.
    public func closeInput() {
        lock.withLock {
            if input >= 0 { close(input) }
            input = -1
        }
    }

    // MARK: Waiting

    /// The exit status, or 128 + the signal that ended it; nil while it runs.
    public var exitStatus: Int32? { lock.withLock { status } }

    /// Waits until `condition(output, exitStatus)` holds, checking it whenever output arrives or
    /// the child exits, for at most `timeout`. Returns whether it held.
    public func waitFor(
        timeout: Duration = .seconds(30), _ condition: @escaping @Sendable (_ output: String, _ status: Int32?) -> Bool
    ) async -> Bool {
        await waitFor(timeout: timeout) { child in
            condition(String(decoding: child.collected, as: UTF8.self), child.status)
        }
    }

    /// Waits until the output contains `text`; false if the child exits or `timeout` passes first.
    public func waitForOutput(_ text: String, timeout: Duration = .seconds(30)) async -> Bool {
        let found = await waitFor(timeout: timeout) { output, status in output.contains(text) || status != nil }
        return found && output.contains(text)
    }

    /// Waits for the child to exit and returns its status, or nil if it still runs after `timeout`.
    ///
    /// Then waits (up to 5 s more) for the end of its output, so that `output` holds everything it
    /// printed: the reader can lag behind the exit on a busy machine. That wait is bounded because
    /// a child another test spawned in the instant before close-on-exec was set may hold the pipe.
    public func waitForExit(timeout: Duration = .seconds(30)) async -> Int32? {
        guard await waitFor(timeout: timeout, { _, status in status != nil }) else { return nil }
        _ = await waitFor(timeout: .seconds(5)) { child in child.outputEnded }
        return exitStatus
    }

    /// Waits until `condition` holds of the child's state (called under `lock`).
    private func waitFor(timeout: Duration, _ condition: @escaping (ChildProcess) -> Bool) async -> Bool {
        await withCheckedContinuation { continuation in
            let once = Once()
            let check: (ChildProcess) -> Bool = { child in
                guard condition(child) else { return false }
                if once.claim() { continuation.resume(returning: true) }
                return true
            }
            let satisfied = lock.withLock {
                if check(self) { return true }
                waiters.append(check)
                return false
            }
            guard !satisfied else { return }
            let (seconds, attoseconds) = timeout.components
            let nanoseconds = Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
            DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(nanoseconds)) {
                if once.claim() { continuation.resume(returning: false) }
            }
        }
    }

    // MARK: Signals

    /// Sends `signal` to the child, by its PID, if it still runs.
    public func signal(_ signal: Int32) {
        lock.withLock {
            if status == nil { kill(pid, signal) }
        }
    }

    /// Stops the child if it still runs: SIGTERM, then SIGKILL if it lingers for 10 s. Returns
    /// when it has exited.
    public func stop() {
        closeInput()
        guard exitStatus == nil else { return }
        signal(SIGTERM)
        if !blockUntilExit(seconds: 10) {
            signal(SIGKILL)
            _ = blockUntilExit(seconds: 30)
        }
    }

    /// Lets the child finish by itself for up to `seconds` (a command that must complete its
    /// work, such as `tmux kill-server`), then stops it if it still runs. Returns when it has exited.
    public func finish(within seconds: Double = 10) {
        closeInput()
        if !blockUntilExit(seconds: seconds) { stop() }
    }

    /// Ends the child at once with SIGKILL, as a crash would, and returns when it has exited.
    public func killNow() {
        signal(SIGKILL)
        _ = blockUntilExit(seconds: 30)
    }

    private func blockUntilExit(seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while exitStatus == nil, Date() < deadline { usleep(5_000) }
        return exitStatus != nil
    }

    // MARK: Memory

    /// The child's resident memory now (`VmRSS`), in bytes; nil once it has exited.
    public var residentBytes: Int? { statusField("VmRSS:") }

    /// The most resident memory the child has had (`VmHWM`), in bytes; nil once it has exited.
    public var peakResidentBytes: Int? { statusField("VmHWM:") }

    private func statusField(_ name: String) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix(name) }) else { return nil }
        let kilobytes = line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Int($0) }
        return kilobytes.map { $0 * 1024 }
    }

    // MARK: Finding executables

    /// The executable `name` that `swift build` put next to the test bundle, or in
    /// `$CHAT_EXECUTABLES_DIR` when that is set: Scripts/test.sh's ThreadSanitizer run builds the
    /// socket layer alone, and its tests run the servers of the plain build.
    public static func builtExecutable(named name: String) throws -> URL {
        var directories: [URL] = []
        if let elsewhere = ProcessInfo.processInfo.environment["CHAT_EXECUTABLES_DIR"] {
            directories.append(URL(fileURLWithPath: elsewhere, isDirectory: true))
        }
        if let bundle = Bundle.main.executableURL?.deletingLastPathComponent() { directories.append(bundle) }
        directories.append(URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent())
        // The test bundle may be a directory (…xctest/…) inside the products directory.
        for directory in directories {
            for candidate in [directory, directory.deletingLastPathComponent()] {
                let binary = candidate.appendingPathComponent(name)
                if FileManager.default.isExecutableFile(atPath: binary.path) { return binary }
            }
        }
        throw MissingExecutable(name: name, searched: directories.map(\.path))
    }
}

/// `swift build` did not build an executable a test needs.
public struct MissingExecutable: Error, CustomStringConvertible {
    /// The executable's name.
    public var name: String
    /// The directories looked in.
    public var searched: [String]

    /// Says what is missing and how to build it.
    public var description: String { "\(name) not found next to the tests in \(searched); build it with `swift build`" }
}

/// A flag that can be claimed once, from any thread.
final class Once: @unchecked Sendable {
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
