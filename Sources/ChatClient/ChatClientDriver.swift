import ChatProtocol
import SocketCore
import SocketTLS
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Where the driver puts what the user should see. The terminal front end prints above the
/// line being edited; the pipe front end prints plain lines.
@MainActor
public protocol ClientDisplay: AnyObject {
    /// Shows one event; `logged` false keeps it out of the window's log (what is true only at
    /// the moment: a reconnect's countdown, a completion list, a catch-up's marker).
    func show(_ event: ChatEvent, logged: Bool)
    /// The session changed (windows, nick, connection, activity): refresh the status and prompt.
    func sessionChanged()
    /// Draws the user's attention: a mention of their nick or a direct message arrived.
    func alert()
    /// Asks the user a yes/no question; calls `answer` once. A script answers with its next
    /// line (`/unregister`'s yes).
    func ask(_ question: String, answer: @escaping (Bool) -> Void)
    /// Asks the user for a secret (a password) without showing what is typed, keeping it in the
    /// history or logging it; calls `answer` once, with nil when the user cancels. A script
    /// answers with its next line.
    func askSecret(_ prompt: String, answer: @escaping (String?) -> Void)
    /// Does what only the display can: its window buffers and settings.
    func perform(_ request: DisplayRequest)
}

extension ClientDisplay {
    /// Shows one event and logs it with its window.
    public func show(_ event: ChatEvent) { show(event, logged: true) }
}

/// Runs one chat client: connects, turns typed lines into frames and frames into events,
/// paces pastes under the server's rate limit, watches that the server still answers,
/// reconnects with backoff when the connection drops, and leaves politely on `/quit`.
///
/// Main-actor isolated, like the terminal code it serves: frames are decoded off the main
/// thread and handled on it. Outgoing frames go through one writer task per connection, so
/// they leave in the order they were produced.
@MainActor
public final class ChatClientDriver {
    /// Where and how to connect.
    public struct Configuration: Sendable {
        /// The servers to connect to, in the order to try them (at least one): the nodes of a
        /// cluster, or one server. See `ServerRotation` for the order and the waits.
        public var servers: [ServerAddress]
        /// The server password, if it wants one (the same for every server).
        public var password: String?
        /// Delays between rounds of reconnection attempts.
        public var backoff: ReconnectBackoff
        /// Whether to give up (exit status 1) when no server answers in the first round, instead
        /// of retrying: right for scripts, which should not hang on servers that are not there.
        public var exitIfFirstConnectFails: Bool
        /// How long to wait for the server to accept the TCP connection, and then as long again
        /// for its answer to our hello (the TLS handshake included).
        public var handshakeTimeout: Duration
        /// After this long without hearing from the server, the client pings it; if the ping
        /// goes unanswered for as long again, the connection is taken for dead and redialled.
        public var pingInterval: Duration
        /// Whose certificates to accept when speaking TLS, or nil for plain text; the same for
        /// every server, each verified against its own host name.
        public var tls: TLSTrust?
        /// The account to log in to with every `hello` (`--account`), and its password; nil for a
        /// guest (AccountCommands.swift).
        public var account: AccountLogin?
        /// The file `account`'s password was read from, read again at each `/login` to it and
        /// `/register`, so that a password changed elsewhere can be fixed in the file.
        public var accountPasswordFile: String?

        /// A configuration for `servers` (at least one), tried in order.
        public init(
            servers: [ServerAddress], password: String? = nil, backoff: ReconnectBackoff = ReconnectBackoff(),
            exitIfFirstConnectFails: Bool = false, handshakeTimeout: Duration = .seconds(10),
            pingInterval: Duration = .seconds(30), tls: TLSTrust? = nil
        ) {
            precondition(!servers.isEmpty, "the client needs a server")
            self.tls = tls
            self.servers = servers
            self.password = password
            self.backoff = backoff
            self.exitIfFirstConnectFails = exitIfFirstConnectFails
            self.handshakeTimeout = handshakeTimeout
            self.pingInterval = pingInterval
        }
    }

    /// The chat state: nick, windows, current window, known nicks.
    public private(set) var session: ClientSession
    /// Called once, with the process exit status, when the client has finished (after `/quit`,
    /// end of input, or a refusal it cannot recover from). The front end restores the terminal.
    public var onFinished: (Int32) -> Void = { _ in }
    /// Called once after the first successful handshake and joins, e.g. to start reading input.
    public var onFirstConnect: () -> Void = {}
    /// The user's own commands (`wc = "window close"`), from the config file.
    public var aliases: [String: String] = [:]
    /// The server the client is on or trying, `HOST:PORT` (for log directories).
    public private(set) var serverName: String

    /// Pastes of more lines than this ask before they are sent.
    public static let pasteLinesWithoutAsking = 3

    let configuration: Configuration
    private weak var display: (any ClientDisplay)?
    private var connection: ChatConnection?
    private var outbound: AsyncStream<[Frame]>.Continuation?
    private var maxFrameSize = WireProtocol.defaultServerMaxFrameSize
    private var hasConnected = false
    private var quitting = false
    private var finished = false
    private var loop: Task<Void, Never>?
    private let started = ContinuousClock.now
    private var pacer = PastePacer(limits: .assumed, now: .zero)
    private var pasteQueue: [PastedLine] = []
    private var pasteTask: Task<Void, Never>?
    private var lastHeard = ContinuousClock.now
    private var deadReason: String?
    /// What the user asked of the connection (`/reconnect`, `/server`, `/disconnect`), for the
    /// connection loop to act on once the connection is closed.
    private var connectionRequest: ConnectionRequest?
    /// Resumes the connection loop while it stays offline after `/disconnect`.
    private var offlineWait: CheckedContinuation<Void, Never>?
    /// The login sent behind every hello: `--account`'s, or the account and password the server
    /// last accepted at `/register` or `/login`. In memory only, for the life of the process
    /// (AccountCommands.swift; docs/CLIENT.md, "Logging in again").
    var rememberedLogin: AccountLogin?
    /// A `/register` or `/login` sent and not answered yet, with the password it carried.
    var pendingAccount: AccountLogin?
    /// Whether an account request — a command's, or the login behind this connection's hello —
    /// waits for the server's answer; when it ends, `accountWaiters` go on.
    var awaitingAccountAnswer = false {
        didSet {
            guard !awaitingAccountAnswer else { return }
            let waiters = accountWaiters
            accountWaiters = []
            for waiter in waiters { waiter.resume() }
        }
    }
    /// Those waiting in `accountRequestsAnswered`.
    private var accountWaiters: [CheckedContinuation<Void, Never>] = []
    /// The nick the client was started with, before any `nick_` fallback.
    let startNick: String
    /// Whether the server answered one of this connection's requests (our join's echo, the room
    /// list): a settled session resets the reconnection delays, one that welcomed and dropped
    /// us does not.
    private var sessionSettled = false

    /// A driver for `session`, showing events on `display` (which it does not retain).
    public init(configuration: Configuration, session: ClientSession, display: any ClientDisplay) {
        self.configuration = configuration
        self.session = session
        self.display = display
        serverName = configuration.servers[0].description
        startNick = session.nick
        if let account = configuration.account, account.withHello { rememberedLogin = account }
    }

    /// Words that count as mentions besides the nick (`/set highlight`).
    public func setHighlightWords(_ words: [String]) {
        session.highlightWords = words
    }

    /// The most bytes a typed line may have: what fits one frame after the framing, the
    /// command and the longest room or nick name.
    public var maxMessageBytes: Int { max(1, maxFrameSize - 40) }

    /// Starts connecting; returns at once.
    public func start() {
        loop = Task { await self.connectionLoop() }
    }

    /// Returns once no account request waits for the server's answer: a script's next line is
    /// judged after it (a `/password` after the `/register` or the login behind the hello that
    /// makes it possible). At once when none waits; a lost connection ends the wait.
    public func accountRequestsAnswered() async {
        guard awaitingAccountAnswer else { return }
        await withCheckedContinuation { accountWaiters.append($0) }
    }

    /// Handles one line the user typed.
    public func submit(_ line: String) {
        do {
            guard let command = try CommandParser.parse(line, aliases: aliases) else { return }
            perform(session.perform(command), fromUser: true)
        } catch {
            perform(session.rejected(error), fromUser: true)
        }
    }

    /// Leaves the server with `reason` and finishes (for Ctrl-D, end of input and signals).
    public func quit(reason: String) {
        perform([.quit(reason: reason)], fromUser: true)
    }

    /// Makes window `number` (from 1) current.
    public func selectWindow(number: Int) {
        if !session.selectWindow(number: number) {
            show(.error(time: ClientClock.now(), text: "there is no window \(number) (there are \(session.windows.count))"))
        }
        display?.sessionChanged()
    }

    /// Goes to the window with activity, a mention first (Alt-A, `/window goto active`).
    public func selectActiveWindow() {
        perform(session.perform(.window(.active)), fromUser: true)
    }

    /// Moves `offset` windows on, wrapping around.
    public func cycleWindow(by offset: Int) {
        session.cycleWindow(by: offset)
        display?.sessionChanged()
    }

    // MARK: Pastes

    /// Sends pasted text to the current window, one message per line, as text and never as
    /// commands; more than `pasteLinesWithoutAsking` lines are confirmed first. Lines are paced
    /// under the server's rate limit; blank lines are skipped.
    public func paste(_ text: String) {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
            .filter { !$0.allSatisfy(\.isWhitespace) }
        guard !lines.isEmpty else { return }
        guard session.isConnected else {
            show(.error(time: ClientClock.now(), text: "not connected; the paste (\(lines.count) lines) was not sent \(connectionNote)"))
            return
        }
        guard let window = session.currentWindow, window != .merged else {
            show(.error(time: ClientClock.now(), text: "not in a room or query; the paste was not sent"))
            return
        }
        if let index = lines.firstIndex(where: { $0.utf8.count > maxMessageBytes }) {
            show(.error(time: ClientClock.now(), text:
                "the paste was not sent: line \(index + 1) is \(lines[index].utf8.count) bytes, and a message can hold at most \(maxMessageBytes) (the server's frame limit)"))
            return
        }
        guard lines.count > Self.pasteLinesWithoutAsking else { return enqueue(lines, to: window) }
        display?.ask("send \(lines.count) pasted lines to \(window.title)? (y/n) ") { [weak self] yes in
            guard let self else { return }
            if yes {
                self.enqueue(lines, to: window)
            } else {
                self.show(.notice(time: ClientClock.now(), text: "paste of \(lines.count) lines discarded"))
            }
            self.display?.sessionChanged()
        }
    }

    /// Whether pasted lines are waiting to be sent (Ctrl-C then stops them).
    public var isSendingPaste: Bool { !pasteQueue.isEmpty }

    /// Stops a paste being sent: the lines not sent yet are dropped, and a note says how many went.
    public func cancelPaste() {
        guard let first = pasteQueue.first else { return }
        pasteTask?.cancel()
        pasteTask = nil
        show(.notice(time: ClientClock.now(), text:
            "paste stopped: \(first.index - 1) of \(first.total) lines were sent, \(pasteQueue.count) not"))
        pasteQueue = []
        display?.sessionChanged()
    }

    private func enqueue(_ lines: [String], to window: ChatWindow) {
        for (index, line) in lines.enumerated() {
            pasteQueue.append(PastedLine(window: window, text: line, index: index + 1, total: lines.count))
        }
        guard pasteTask == nil else { return }
        pasteTask = Task { [weak self] in
            await self?.sendPastedLines()
            self?.pasteTask = nil
        }
    }

    /// Sends queued pasted lines as fast as the pacer allows.
    private func sendPastedLines() async {
        while let next = pasteQueue.first {
            guard session.isConnected, outbound != nil else {
                // The connection went while the user was asked, or between two lines.
                return dropPendingPaste(because: "not connected")
            }
            let delay = pacer.delay(forFrameOf: Self.encodedSize(of: next.frame), at: now())
            if delay > .zero {
                do { try await Task.sleep(for: delay) } catch { return }
                continue  // other frames may have gone meanwhile: ask again
            }
            pasteQueue.removeFirst()
            perform(session.sendPasted(next.text, to: next.window, index: next.index, total: next.total), fromUser: true)
        }
    }

    private func dropPendingPaste(because reason: String) {
        pasteTask?.cancel()
        pasteTask = nil
        guard let first = pasteQueue.first else { return }
        show(.error(time: ClientClock.now(), text:
            "\(reason): lines \(first.index)–\(first.total) of the paste (\(pasteQueue.count)) were not sent"))
        pasteQueue = []
    }

    // MARK: Actions

    private func perform(_ actions: [SessionAction], fromUser: Bool) {
        for action in actions {
            switch action {
            case .show(let event):
                display?.show(event, logged: true)
            case .transient(let event):
                display?.show(event, logged: false)
            case .send(let frames):
                send(frames, fromUser: fromUser)
            case .alert:
                display?.alert()
            case .quit(let reason):
                beginQuit(reason: reason)
            case .display(let request):
                display?.perform(request)
            case .connection(let request):
                requestConnection(request)
            case .account(let request):
                performAccount(request)  // AccountCommands.swift
            }
        }
        display?.sessionChanged()
    }

    /// Sends `frames` in order, but none the server would refuse as too long; returns whether
    /// every one went (`fromUser`: say why not).
    @discardableResult
    func send(_ frames: [Frame], fromUser: Bool) -> Bool {
        guard let outbound else {
            if fromUser { show(.error(time: ClientClock.now(), text: "not connected; not sent \(connectionNote)")) }
            return false
        }
        var allowed: [Frame] = []
        for frame in frames {
            let size = Self.encodedSize(of: frame)
            // The server ends the session over a frame above its limit, so refuse it here.
            if size > maxFrameSize {
                show(.error(time: ClientClock.now(), text: "too long to send (the server accepts \(maxFrameSize) bytes per frame)"))
            } else {
                pacer.record(frameOf: size, at: now())
                allowed.append(frame)
            }
        }
        if !allowed.isEmpty { outbound.yield(allowed) }
        return allowed.count == frames.count
    }

    func show(_ event: ChatEvent) { display?.show(event, logged: true) }

    /// Shows `event` without logging it: what is true only at the moment.
    func showTransient(_ event: ChatEvent) { display?.show(event, logged: false) }

    /// What the client does about being offline, for the notes that refuse what needs the
    /// server: it stays offline after `/disconnect` or a ghost, kill or ban until `/reconnect`,
    /// and otherwise is connecting, the first time, or reconnecting.
    var connectionNote: String {
        if offlineWait != nil || connectionRequest == .disconnect { return "(not reconnecting by itself: /reconnect connects again)" }
        return hasConnected ? "(reconnecting)" : "(still trying to connect)"
    }

    /// Asks the display for a secret (AccountCommands.swift); nil when there is no display.
    func askSecret(_ prompt: String, answer: @escaping (String?) -> Void) {
        guard let display else { return answer(nil) }
        display.askSecret(prompt, answer: answer)
    }

    /// Asks the display a yes/no question (AccountCommands.swift); no when there is no display.
    func ask(_ question: String, answer: @escaping (Bool) -> Void) {
        guard let display else { return answer(false) }
        display.ask(question, answer: answer)
    }

    private func now() -> Duration { ContinuousClock.now - started }

    private static func encodedSize(of frame: Frame) -> Int {
        var bytes: [UInt8] = []
        FrameEncoder.encode(frame, into: &bytes)
        return bytes.count
    }

    /// `/reconnect`, `/server`, `/disconnect`: closes the connection (if any) and leaves the rest
    /// to the connection loop, which reads `connectionRequest` when the connection has ended.
    private func requestConnection(_ request: ConnectionRequest) {
        if case .server(let typed) = request {
            do {
                _ = try ServerAddress(parsing: typed)
            } catch {
                return show(.error(time: ClientClock.now(), text: "/server \(typed): \(error)"))
            }
        }
        if case .disconnect = request, connection == nil, offlineWait != nil {
            return show(.notice(time: ClientClock.now(), text: "already disconnected; /reconnect connects again"))
        }
        connectionRequest = request
        if let offlineWait {
            self.offlineWait = nil
            offlineWait.resume()
        } else if let connection {
            if case .disconnect = request { outbound?.yield([.goodbye(reason: "disconnected")]) }
            connection.close()
        }
        // Otherwise the loop is connecting or waiting to: it looks at the request when that ends.
    }

    private func beginQuit(reason: String) {
        guard !quitting else { return }
        quitting = true
        if let offlineWait {
            self.offlineWait = nil
            offlineWait.resume()
        }
        dropPendingPaste(because: "leaving")
        guard let connection, let outbound else {
            loop?.cancel()
            finish(0)
            return
        }
        outbound.yield([.goodbye(reason: reason)])
        outbound.finish()
        // The server closes after our goodbye, which ends the frame loop; this bounds the wait
        // for a server that does not.
        Task {
            try? await Task.sleep(for: .seconds(3))
            connection.close()
        }
    }

    private func finish(_ status: Int32) {
        guard !finished else { return }
        finished = true
        onFinished(status)
    }

    // MARK: Connection life

    private func connectionLoop() async {
        let tlsContext: TLSContext?
        do {
            tlsContext = try configuration.tls.map { trust throws(TLSError) in try TLSContext(.client(trust: trust)) }
        } catch {
            show(.error(time: ClientClock.now(), text: "\(error)"))
            finish(1)
            return
        }
        var rotation = ServerRotation(servers: configuration.servers, backoff: configuration.backoff)
        // The nick refused as taken or registered, and how many `_` fallbacks were tried for it.
        var fallbackBase: String?
        var fallbackAttempt = 0
        while !quitting {
            if case .server(let typed) = connectionRequest, let address = try? ServerAddress(parsing: typed) {
                // From now on this server is the only one: the user chose it.
                rotation = ServerRotation(servers: [address], backoff: configuration.backoff)
            }
            connectionRequest = nil
            let server = rotation.current
            serverName = server.description
            var lostReason = "the server closed the connection"
            var sessionLasted: Duration?
            sessionSettled = false
            let login = loginBehindHello(to: server, encrypted: tlsContext != nil)
            do {
                // A login must ride behind a hello for its own nick (docs/PROTOCOL.md, "Version 3").
                let connection = try await ChatConnection.connect(
                    host: server.host, port: server.port, nick: login?.name ?? session.nick,
                    password: configuration.password, version: WireProtocol.version,
                    timeout: configuration.handshakeTimeout, handshakeTimeout: configuration.handshakeTimeout, tls: tlsContext,
                    login: login)
                fallbackBase = nil
                fallbackAttempt = 0
                let began = ContinuousClock.now
                defer { sessionLasted = ContinuousClock.now - began }
                // The welcome came once the login behind the hello was checked; its answer
                // (`loggedIn`) follows, and a script's lines wait for it.
                awaitingAccountAnswer = login != nil && connection.welcome.version >= 3
                try await run(connection, on: server)
                if let deadReason { lostReason = deadReason }
            } catch let refusal as ChatConnection.HandshakeError {
                if case .refused(let code, let reason) = refusal {
                    if hasConnected, let login, code == .authenticationFailed || code == .plainPasswordRefused {
                        // The password this client held no longer works (changed or dropped
                        // elsewhere): forget it, and go on as a guest rather than end the session.
                        rememberedLogin = nil
                        show(.error(time: ClientClock.now(), text:
                            "the server refused the login to \(login.name): \(reason); going on without it (/login \(login.name) to log in again)"))
                        closeConnection()
                        continue
                    }
                    if code == .nickReserved, login == nil, let own = configuration.account, !own.withHello,
                        ChatName.nickKey(own.name) == ChatName.nickKey(session.nick)
                    {
                        // Registered, and this client holds the password of the nick's own
                        // account (--account-password-file, as when it ran /register): log in
                        // to it behind the next hello. A wrong password is refused then.
                        if let password = readPasswordFile() {
                            show(.notice(time: ClientClock.now(), text: "the nick \(session.nick) is registered: logging in to it with the account password"))
                            rememberedLogin = AccountLogin(name: own.name, password: password)
                            closeConnection()
                            continue
                        }
                    }
                    let mayFallBack = code == .nickReserved ? hasConnected || configuration.account == nil : code == .nickTaken && !hasConnected
                    if mayFallBack {
                        // Someone holds our nick at the start, or it is an account whose password
                        // this client does not know: take nick_, as IRC clients do, and keep the
                        // windows.
                        let base = fallbackBase ?? session.nick
                        fallbackBase = base
                        fallbackAttempt += 1
                        if let fallback = ClientSession.fallbackNick(for: base, attempt: fallbackAttempt) {
                            let why = code == .nickReserved ? "is a registered nick" : "is taken"
                            let text = hasConnected
                                ? "the nick \(session.nick) \(why) and this client has no password for it: going on as \(fallback) (/login \(base) to take it back)"
                                : "the nick \(session.nick) \(why); trying \(fallback)"
                            show(.notice(time: ClientClock.now(), text: text))
                            session.useNick(fallback)
                            closeConnection()
                            continue
                        }
                    }
                    if mustGiveUp(code) {
                        show(.error(time: ClientClock.now(), text: "the server refused us: \(reason)"))
                        finish(1)
                        return
                    }
                }
                lostReason = refusal.description
            } catch is CancellationError {
                break
            } catch let error as SocketError where error.tlsError.map(Self.isPermanent) == true {
                // A certificate or protocol problem does not fix itself by retrying: say it once.
                show(.error(time: ClientClock.now(), text: "\(error)\(error.tlsError.map(Self.hint) ?? "")"))
                finish(1)
                return
            } catch let error as SocketError
                where (error.operation == "send to" && error.code == .posix(EPIPE)) || error.code == .posix(ECONNRESET)
            {
                // A server that closes at once can be seen to do so by a write (the quiet
                // `listRooms` after the welcome) before the read sees its end, or, if it closed
                // with that request unread, by a reset instead of an end: the same event.
                lostReason = deadReason ?? "the server closed the connection"
            } catch let error as SocketError where error.operation == "connect" && error.code == .posix(ETIMEDOUT) {
                // A host that drops packets (a machine that died) is given up on as soon as a
                // silent server is, so it holds up the move to the next no longer.
                lostReason = "the server did not accept the connection within \(configuration.handshakeTimeout.components.seconds) s"
            } catch {
                lostReason = deadReason ?? "\(error)"
            }
            closeConnection()
            if quitting { break }
            switch connectionRequest {
            case .disconnect:
                show(.notice(time: ClientClock.now(), text: "disconnected from \(server); /reconnect connects again"))
                display?.sessionChanged()
                await withCheckedContinuation { offlineWait = $0 }
                continue
            case .reconnect, .server:
                showTransient(.notice(time: ClientClock.now(), text: "reconnecting as you asked"))
                continue
            case nil:
                break
            }
            let next = rotation.failed(sessionLasted: sessionLasted, settled: sessionSettled)
            if !hasConnected, configuration.exitIfFirstConnectFails, case .wait = next {
                show(.error(time: ClientClock.now(), text: Self.unreachable(configuration.servers, lastReason: lostReason)))
                finish(1)
                return
            }
            switch next {
            case .tryNow(let nextServer):
                let what = sessionLasted == nil ? "cannot connect to \(server)" : "connection to \(server) lost"
                showTransient(.error(time: ClientClock.now(), text: "\(what): \(lostReason); trying \(nextServer)"))
                display?.sessionChanged()
            case .wait(let attempt, let nextServer):
                let delay = configuration.backoff.delay(attempt: attempt)
                showTransient(.error(time: ClientClock.now(), text: Self.waitNotice(
                    lost: server, connected: sessionLasted != nil, reason: lostReason, next: nextServer,
                    servers: configuration.servers.count, delay: delay, attempt: attempt)))
                display?.sessionChanged()
                // In slices, so /reconnect or /server during the wait goes ahead at once.
                var waited = Duration.zero
                while waited < delay, connectionRequest == nil, !quitting {
                    let slice = min(.milliseconds(100), delay - waited)
                    do { try await Task.sleep(for: slice) } catch { break }
                    waited += slice
                }
            }
        }
        closeConnection()
        finish(0)
    }

    /// Why a script gives up: no server answered in the first round.
    private static func unreachable(_ servers: [ServerAddress], lastReason: String) -> String {
        guard servers.count > 1 else { return "cannot reach \(servers[0]): \(lastReason)" }
        return "cannot reach any of the \(servers.count) servers (\(servers.map(\.description).joined(separator: ", "))); the last: \(lastReason)"
    }

    /// The note before a wait: with one server the long-standing `disconnected: …; reconnecting in
    /// 0.5 s (attempt 1)`; with several, which server was lost and which comes next.
    private static func waitNotice(
        lost server: ServerAddress, connected: Bool, reason: String, next: ServerAddress, servers: Int, delay: Duration, attempt: Int
    ) -> String {
        let wait = "\(describe(delay)) (attempt \(attempt))"
        guard servers > 1 else { return "disconnected: \(reason); reconnecting in \(wait)" }
        let what = connected ? "connection to \(server) lost" : "cannot connect to \(server)"
        return "\(what): \(reason); every server failed, trying \(next) in \(wait)"
    }

    /// Whether a TLS failure will not go away by retrying (the certificate, the name, the protocol).
    private static func isPermanent(_ error: TLSError) -> Bool {
        switch error.kind {
        case .certificateExpired, .certificateNotYetValid, .hostnameMismatch, .untrustedCertificate, .invalidCertificate,
            .notTLS, .protocolVersion, .noSharedCipher:
            true
        default: false
        }
    }

    /// What this client's flags can do about `error`.
    private static func hint(for error: TLSError) -> String {
        switch error.kind {
        case .untrustedCertificate:
            " (if you trust this server's CA, give this client its certificate: --tls-ca FILE)"
        case .notTLS:
            " (the server speaks plain text on this port: connect without --tls, or to its TLS port)"
        default: ""
        }
    }

    /// Tells the user how the connection is protected, and loudly when it is not authenticated.
    private func announceEncryption(
        parameters: String?, peer: (certificate: TLSCertificateSummary?, ignoredFailure: TLSError?)?
    ) {
        guard let parameters, let peer else {
            session.encryption = nil
            return
        }
        let version = parameters.split(separator: ",").first.map(String.init) ?? parameters
        let subject = peer.certificate?.subject ?? "unknown"
        if configuration.tls == .insecureAcceptAnything {
            session.encryption = "\(version) UNVERIFIED"
            var warning = "WARNING: --tls-insecure: the server's identity is not checked; anyone on the path can read and change this conversation"
            if let failure = peer.ignoredFailure { warning += ". Verification would have failed: \(failure.reason)" }
            show(.error(time: ClientClock.now(), text: warning))
            show(.notice(time: ClientClock.now(), text: "encrypted: \(parameters), certificate \(subject) NOT verified"))
        } else {
            session.encryption = version
            show(.notice(time: ClientClock.now(), text: "encrypted: \(parameters), certificate \(subject) verified"))
        }
    }

    /// Whether a handshake refusal will not go away by retrying. A taken nick may be our own
    /// previous session that the server has not noticed is gone yet, so only the first
    /// connection gives up on it (after trying the fallback nicks). Once connected, a refused
    /// account never ends the client: it goes on as a guest with its windows (above).
    private func mustGiveUp(_ code: ErrorCode) -> Bool {
        switch code {
        case .invalidNick, .badPassword, .unsupportedVersion: true
        // Retrying with the same nick and password cannot go otherwise.
        case .nickReserved, .authenticationFailed, .plainPasswordRefused: !hasConnected
        case .ghosted: true
        // A server ban refuses every hello alike; a kill is final (version 4).
        case .banned, .killed: true
        case .nickTaken: !hasConnected
        default: false
        }
    }

    /// Runs one open connection until it ends; throws what ended it.
    private func run(_ connection: ChatConnection, on server: ServerAddress) async throws {
        self.connection = connection
        deadReason = nil
        maxFrameSize = connection.welcome.maxFrameSize
        // Asked before there is a way to send: from here to the joins below nothing suspends, so
        // a line typed meanwhile is refused as offline or goes after the joins — never before
        // them, into a room this connection has not rejoined yet.
        let tlsParameters = await connection.tlsParameters
        let tlsPeer = await connection.tlsPeer
        pacer = PastePacer(limits: .assumed, now: now())
        let (stream, continuation) = AsyncStream<[Frame]>.makeStream()
        outbound = continuation
        let writer = Task.detached {
            do {
                for await frames in stream { try await connection.send(frames) }
            } catch {
                // A failed write means the connection is broken; closing it ends the reader.
                connection.close()
            }
        }
        defer { writer.cancel() }
        lastHeard = ContinuousClock.now
        let watchdog = Task { [weak self] in await self?.watch(connection) }
        defer { watchdog.cancel() }

        let welcome = connection.welcome
        // A reconnect is summed up in one line by the session, once its rooms are back.
        if !hasConnected { show(.notice(time: ClientClock.now(), text: "connected to \(server) as \(welcome.nick)")) }
        // With one server there is nothing to tell apart; with several, the status line names it.
        session.server = configuration.servers.count > 1 ? server.description : nil
        announceEncryption(parameters: tlsParameters, peer: tlsPeer)
        perform(session.connected(nick: welcome.nick, motd: welcome.motd, version: welcome.version, server: server.description), fromUser: false)
        if !hasConnected {
            hasConnected = true
            onFirstConnect()
        }
        for try await frame in connection.frames {
            lastHeard = ContinuousClock.now
            // Ghosted (our account logged in elsewhere: reconnecting would ghost that session in
            // turn, and so on for ever), killed or banned by the server (it would refuse us
            // again): stay offline until /reconnect.
            if ClientSession.isFinal(frame) { connectionRequest = .disconnect }
            if !sessionSettled, session.isAnswer(frame) { sessionSettled = true }
            noteAccountAnswer(frame)  // AccountCommands.swift
            perform(session.receive(frame), fromUser: false)
            if case .limits = frame, let limits = session.limits { pacer = PastePacer(limits: limits, now: now()) }
        }
    }

    /// Pings a server that has been silent for `pingInterval`, and closes the connection when
    /// the ping stays unanswered as long again: a server that stopped (or a network that
    /// dropped the connection without a word) is noticed and redialled.
    private func watch(_ connection: ChatConnection) async {
        let interval = configuration.pingInterval
        var token: UInt64 = 0
        while !Task.isCancelled {
            do { try await Task.sleep(for: interval) } catch { return }
            guard ContinuousClock.now - lastHeard >= interval else { continue }
            token += 1
            let pinged = ContinuousClock.now
            send([.ping(token: token)], fromUser: false)
            do { try await Task.sleep(for: interval) } catch { return }
            if lastHeard < pinged {
                deadReason = "the server did not answer a ping for \(interval.components.seconds) s"
                connection.close()
                return
            }
        }
    }

    private func closeConnection() {
        // No answer comes on a closed connection: a script's next line goes on, and is refused
        // as offline if it needs the server.
        awaitingAccountAnswer = false
        outbound?.finish()
        outbound = nil
        connection?.close()
        connection = nil
        if session.isConnected {
            session.disconnected()
            dropPendingPaste(because: "disconnected")
            // A client on its way out has nothing to reconnect, so its prompt stays as it was.
            if !quitting { display?.sessionChanged() }
        }
    }

    private static func describe(_ delay: Duration) -> String {
        let milliseconds = delay.components.seconds * 1000 + delay.components.attoseconds / 1_000_000_000_000_000
        return "\(milliseconds / 1000).\(milliseconds % 1000 / 100) s"
    }
}

/// One line of a paste waiting for its turn.
private struct PastedLine: Sendable {
    let window: ChatWindow
    let text: String
    let index: Int
    let total: Int

    var frame: Frame {
        switch window {
        case .room(let room): .say(room: room, text: text)
        case .query(let nick): .tell(recipient: nick, text: text)
        // `paste` refuses the merged window before anything is queued.
        case .merged: .say(room: "", text: text)
        }
    }
}
