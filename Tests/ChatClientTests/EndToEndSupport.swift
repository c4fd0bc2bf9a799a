import ChatClient
import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

/// A scripted chat participant speaking the protocol directly, for the other end of a test.
final class Peer: @unchecked Sendable {
    // `received` is guarded by `lock`; the reader task appends.
    private let lock = NSLock()
    private var received: [Frame] = []
    let connection: ChatConnection
    private var reader: Task<Void, Never>?

    init(nick: String, port: Int, room: String? = "general", version: UInt16 = 1) async throws {
        connection = try await ChatConnection.connect(host: "127.0.0.1", port: port, nick: nick, version: version)
        reader = Task { [connection, weak self] in
            do {
                for try await frame in connection.frames {
                    guard let self else { return }
                    if case .ping(let token) = frame { try await connection.send(.pong(token: token)) }
                    self.record(frame)
                }
            } catch {}
        }
        if let room { try await join(room) }
    }

    private func record(_ frame: Frame) {
        lock.withLock { received.append(frame) }
    }

    var frames: [Frame] { lock.withLock { received } }

    /// The texts of the room messages `sender` said, in order.
    func messages(from sender: String) -> [String] {
        frames.compactMap { if case .message(_, _, _, let who, let text) = $0, who == sender { text } else { nil } }
    }

    /// Waits until a frame matching `predicate` has arrived.
    func waitFor(timeout: Duration = .seconds(30), _ predicate: @escaping (Frame) -> Bool) async -> Bool {
        await eventually(timeout: timeout) { frames.contains(where: predicate) }
    }

    /// Joins `room` and waits for the echo.
    func join(_ room: String) async throws {
        let nick = connection.welcome.nick
        try await connection.send(.join(room: room))
        #expect(await waitFor { if case .joined(room, _, _, nick) = $0 { true } else { false } }, "\(nick) joined #\(room)")
    }

    /// Sends `text` to `nick` alone.
    func tell(_ nick: String, _ text: String) async throws {
        try await connection.send(.tell(recipient: nick, text: text))
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

/// A tmux server of our own (its own `-L` socket) with one window (80×24 unless told) running
/// a command.
///
/// `kill-server` on that socket, in `stop()`, ends only what this session started.
final class TmuxSession {
    let socket = "chat-client-test-\(getpid())-\(UUID().uuidString.prefix(8))"
    private(set) var stopped = false

    /// Starts `command` (a shell command line) in a new detached session `columns`×`rows` big.
    init(_ command: String, columns: Int = 80, rows: Int = 24) async throws {
        try await tmux(["-f", "/dev/null", "new-session", "-d", "-x", "\(columns)", "-y", "\(rows)", command])
    }

    /// Runs tmux on our socket, waits for it, and returns its stdout.
    @discardableResult
    func tmux(_ arguments: [String]) async throws -> String {
        // `new-session` forks the tmux server, which would hold an output pipe open for its
        // whole life; only commands that talk to a running server get one.
        let collect = !arguments.contains("new-session")
        let child = try ChildProcess(URL(fileURLWithPath: "/usr/bin/tmux"), ["-L", socket] + arguments, collectOutput: collect)
        if await child.waitForExit(timeout: .seconds(60)) == nil { child.stop() }
        return child.output
    }

    /// Types `text` literally (no key names), in pieces tmux accepts in one command.
    func type(_ text: String) async throws {
        var rest = Substring(text)
        while !rest.isEmpty {
            let piece = rest.prefix(1000)
            try await tmux(["send-keys", "-l", String(piece)])
            rest = rest.dropFirst(piece.count)
        }
    }

    /// Presses named keys (`Enter`, `Tab`, `Left`, `C-c`, `M-2`, …).
    func press(_ keys: String...) async throws { try await tmux(["send-keys"] + keys) }

    /// Pastes `text` as a terminal does: bracketed (the client asked for it), line breaks as CR.
    func paste(_ text: String) async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("paste-\(UUID().uuidString)")
        try text.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        try await tmux(["load-buffer", "-b", "paste", file.path])
        try await tmux(["paste-buffer", "-p", "-d", "-b", "paste"])
    }

    /// The visible screen, one string per row, trailing spaces removed.
    func screen() async throws -> [String] {
        try await tmux(["capture-pane", "-p"]).split(separator: "\n", omittingEmptySubsequences: false).map {
            String($0.reversed().drop { $0 == " " }.reversed())
        }
    }

    /// The visible screen with lines the terminal wrapped joined again (`capture-pane -J`).
    func logicalLines() async throws -> [String] {
        try await tmux(["capture-pane", "-p", "-J"]).split(separator: "\n").map {
            String($0.reversed().drop { $0 == " " }.reversed())
        }
    }

    /// The visible screen's lines as the client drew them: rows the terminal wrapped joined
    /// (`logicalLines`), and rows the client cut at words (`TerminalText.rows`) joined to the
    /// line they continue, which start with the hanging indent's spaces.
    func drawnLines() async throws -> [String] {
        var lines: [String] = []
        for line in try await logicalLines() {
            if line.hasPrefix(" "), let last = lines.indices.last {
                lines[last] += " " + line.drop { $0 == " " }
            } else {
                lines.append(line)
            }
        }
        return lines
    }

    /// Waits until some line, wrapped lines joined, contains `text`: for lines wider than the
    /// terminal, wrapped by the terminal (the input line) or cut at words by the client. The
    /// client's cuts are compared without spaces, since a row may end where a space was.
    @discardableResult
    func waitForLogicalLine(containing text: String, timeout: Duration = .seconds(30)) async throws -> Bool {
        let bare = text.filter { $0 != " " }
        let held = try await eventually(timeout: timeout) {
            if try await logicalLines().contains(where: { $0.contains(text) }) { return true }
            return try await drawnLines().contains { $0.filter { $0 != " " }.contains(bare) }
        }
        if !held { Issue.record("no line showed \"\(text)\":\n\(try await logicalLines().joined(separator: "\n"))") }
        return held
    }

    /// The value of a tmux format, e.g. `#{cursor_x}`.
    func format(_ format: String) async throws -> String {
        try await tmux(["display-message", "-p", format]).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Waits until the screen satisfies `condition`; on timeout records the screen as an issue.
    @discardableResult
    func waitForScreen(_ what: String, timeout: Duration = .seconds(30), _ condition: ([String]) -> Bool) async throws -> Bool {
        let held = try await eventually(timeout: timeout) { condition(try await screen()) }
        if !held { Issue.record("screen never showed \(what):\n\(try await screen().joined(separator: "\n"))") }
        return held
    }

    /// Waits until some row contains `text`.
    @discardableResult
    func waitFor(_ text: String, timeout: Duration = .seconds(30)) async throws -> Bool {
        try await waitForScreen("\"\(text)\"", timeout: timeout) { $0.contains { $0.contains(text) } }
    }

    /// The input row: the last row that starts with `prefix`.
    func inputLine(prompt prefix: String) async throws -> String? {
        try await screen().last { $0.hasPrefix(prefix) }
    }

    /// The status row (the row above the input row, which is the last non-empty one).
    func statusLine() async throws -> String? {
        let rows = try await screen()
        guard let last = rows.lastIndex(where: { !$0.isEmpty }), last > 0 else { return nil }
        return rows[last - 1]
    }

    /// Waits until the input row reads `prompt + text`.
    @discardableResult
    func waitForInput(_ text: String, prompt: String, timeout: Duration = .seconds(30)) async throws -> Bool {
        // capture-pane drops trailing spaces, so the expected row is compared without them.
        let expected = String((prompt + text).reversed().drop { $0 == " " }.reversed())
        let start = String(prompt.reversed().drop { $0 == " " }.reversed())
        return try await waitForScreen("the input row \"\(prompt + text)\"", timeout: timeout) { rows in
            rows.last { $0.hasPrefix(start) } == expected
        }
    }

    /// The PID of the command the pane's shell is running (the client, in `clientInTerminal`),
    /// or nil when the shell has no child.
    func clientPID() async throws -> pid_t? {
        let shell = try await format("#{pane_pid}")
        let children = try? String(contentsOfFile: "/proc/\(shell)/task/\(shell)/children", encoding: .utf8)
        return children?.split(separator: " ").first.flatMap { pid_t($0) }
    }

    /// Kills our tmux server and everything running in it.
    func stop() {
        guard !stopped else { return }
        stopped = true
        // kill-server must be let finish: stopping it at once left the tmux server (and the
        // client in it) running, unreachable once the socket below is gone.
        if let child = try? ChildProcess(URL(fileURLWithPath: "/usr/bin/tmux"), ["-L", socket, "kill-server"], collectOutput: false) {
            child.finish()
        }
        // tmux leaves its socket file behind after kill-server.
        let directory = ProcessInfo.processInfo.environment["TMUX_TMPDIR"] ?? "/tmp"
        unlink("\(directory)/tmux-\(getuid())/\(socket)")
    }

    deinit { stop() }
}

/// A fresh temporary directory, used as HOME so that history files are the test's own.
func temporaryDirectory() throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("chat-client-test-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

/// The shell command that runs chat-client in a terminal and, after it exits, reports its exit
/// status and the terminal modes, then reads one line through the restored terminal.
/// `port` is given as `--port`; `servers` as `--server`s, in order; `environment` is set for
/// the client beside HOME (e.g. `TZ`).
func clientInTerminal(
    nick: String, port: Int? = nil, servers: [String] = [], home: URL, rooms: [String] = ["general"], extra: [String] = [],
    environment: [String: String] = [:]
) throws -> String {
    // CHAT_CLIENT_EXECUTABLE runs another build of the client, e.g. the AddressSanitizer one
    // (Scripts/test.sh).
    let client = try ProcessInfo.processInfo.environment["CHAT_CLIENT_EXECUTABLE"]
        ?? ChildProcess.builtExecutable(named: "chat-client").path
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
    let arguments = ["--nick", nick] + (port.map { ["--port", "\($0)"] } ?? []) + servers.flatMap { ["--server", $0] }
        + rooms.flatMap { ["--room", $0] } + extra
    // The XDG variables too: a developer's own would otherwise win over HOME, and their config
    // file, logs and history would apply to the test.
    let isolated = "HOME='\(home.path)' XDG_CONFIG_HOME='\(home.path)/.config' XDG_DATA_HOME='\(home.path)/.local/share' "
        + "XDG_STATE_HOME='\(home.path)/.local/state'" + environment.map { " \($0.key)='\($0.value)'" }.joined()
    return "env \(isolated) LANG=C.UTF-8 sh '\(wrapper.path)' '\(client)' " + arguments.map { "'\($0)'" }.joined(separator: " ")
}

/// chat-client in pipe mode (stdin and stdout on pipes) with `arguments`, in a home of its own.
///
/// HOME and the XDG directories point at a directory that does not exist, so no developer's
/// config file (`nick`, `servers`, `autojoin`, `log`…) applies to a test, and nothing is written
/// anywhere: in pipe mode the client keeps no history and no logs.
func pipeClient(_ arguments: [String]) throws -> ChildProcess {
    let home = FileManager.default.temporaryDirectory.appendingPathComponent("chat-client-no-home-\(UUID().uuidString)").path
    let isolated = [
        "HOME": home, "XDG_CONFIG_HOME": home + "/.config", "XDG_DATA_HOME": home + "/.local/share",
        "XDG_STATE_HOME": home + "/.local/state",
    ]
    return try ChildProcess(try ChildProcess.builtExecutable(named: "chat-client"), arguments, environment: isolated)
}

/// A TCP socket listening on a free IPv4 loopback port, and that port; the caller owns the
/// descriptor and closes it.
func listenOnLoopback() throws -> (descriptor: Int32, port: Int) {
    let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) }
    }
    guard bound == 0, listen(listener, 16) == 0 else {
        close(listener)
        throw POSIXError(.EADDRINUSE)
    }
    withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = getsockname(listener, $0, &length) }
    }
    return (listener, Int(UInt16(bigEndian: address.sin_port)))
}

/// Accepts connections on `listener` and hands each to `handle`, until the listener is shut
/// down (or `handle` returns false): the loop of the tests' own small servers.
func acceptEach(on listener: Int32, _ handle: (Int32) -> Bool) {
    while true {
        let client = accept(listener, nil, nil)
        if client < 0 {
            if errno == EINTR { continue }
            return
        }
        guard handle(client) else { return }
    }
}

/// A TCP relay on a loopback port in front of a server, so a test can cut the client's
/// connections while the server and everyone else stay (a network outage for one client).
///
/// Each accepted connection gets a connection to the target and a thread that copies bytes
/// both ways with `poll`. `cutAll` shuts down every connection open now; while `refusing` is set,
/// or while there is no target yet, new ones are closed as soon as they are accepted. Thread
/// safety: `lock` protects `pairs`, `stopped`, `refusing` and `target`.
final class TCPRelay: @unchecked Sendable {
    let port: Int
    private var target: Int?
    private let listener: Int32
    private let lock = NSLock()
    private var pairs: [(Int32, Int32)] = []
    private var stopped = false
    private var refusing = false

    /// Whether new connections are closed at once instead of relayed (the server seems down).
    var refusesConnections: Bool {
        get { lock.withLock { refusing } }
        set { lock.withLock { refusing = newValue } }
    }

    /// Relays new connections to `127.0.0.1:port`: a server started after the relay, on a port
    /// only known then, can stand behind an address the client was given before.
    func forward(to port: Int) {
        lock.withLock { target = port }
    }

    /// A relay to `127.0.0.1:target` listening on a free loopback port; with no target, it
    /// closes what it accepts until `forward(to:)` names one.
    init(to target: Int?) throws {
        self.target = target
        (listener, port) = try listenOnLoopback()
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    private func acceptLoop() {
        acceptEach(on: listener) { client in
            guard let target = lock.withLock({ refusing ? nil : self.target }) else {
                close(client)
                return true
            }
            let server = Self.connectLoopback(port: target)
            guard server >= 0 else {
                close(client)
                return true
            }
            let keep = lock.withLock { () -> Bool in
                if stopped { return false }
                pairs.append((client, server))
                return true
            }
            guard keep else {
                close(client)
                close(server)
                return false
            }
            Thread.detachNewThread { [self] in pump(client, server) }
            return true
        }
    }

    private static func connectLoopback(port: Int) -> Int32 {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if connected != 0 {
            close(descriptor)
            return -1
        }
        return descriptor
    }

    /// Copies bytes both ways until either side ends; then closes both.
    private func pump(_ a: Int32, _ b: Int32) {
        var fds = [pollfd(fd: a, events: Int16(POLLIN), revents: 0), pollfd(fd: b, events: Int16(POLLIN), revents: 0)]
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        loop: while true {
            if poll(&fds, 2, -1) < 0 {
                if errno == EINTR { continue }
                break
            }
            for (index, entry) in fds.enumerated() where entry.revents != 0 {
                let count = read(entry.fd, &buffer, buffer.count)
                if count <= 0 { break loop }
                let other = fds[1 - index].fd
                var sent = 0
                while sent < count {
                    let written = buffer[sent..<count].withUnsafeBytes { write(other, $0.baseAddress, $0.count) }
                    if written <= 0 { break loop }
                    sent += written
                }
            }
        }
        lock.withLock { pairs.removeAll { $0.0 == a } }
        close(a)
        close(b)
    }

    /// Cuts every connection relayed now, as a network failure would.
    func cutAll() {
        lock.withLock {
            for (client, server) in pairs {
                shutdown(client, Int32(SHUT_RDWR))
                shutdown(server, Int32(SHUT_RDWR))
            }
        }
    }

    /// Stops accepting and cuts everything.
    func stop() {
        let first = lock.withLock { () -> Bool in
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        cutAll()
    }

    deinit { stop() }
}

/// A listening loopback socket that never accepts: the kernel completes the TCP handshake and
/// buffers what the client sends, and no answer ever comes — a server that hangs before its
/// hello. Owns its descriptor; `close()` (or deinit) closes it once.
final class SilentListener: @unchecked Sendable {
    // `descriptor` is written once in init and closed once under `lock`.
    let port: Int
    private let descriptor: Int32
    private let lock = NSLock()
    private var closed = false

    init() throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) } }
        guard bound == 0, listen(descriptor, 8) == 0 else {
            Glibc.close(descriptor)
            throw POSIXError(.EADDRINUSE)
        }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) } }
        self.descriptor = descriptor
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    func close() {
        let first = lock.withLock { () -> Bool in
            defer { closed = true }
            return !closed
        }
        if first { Glibc.close(descriptor) }
    }

    deinit { close() }
}
