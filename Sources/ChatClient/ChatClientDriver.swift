import ChatProtocol

/// Where the driver puts what the user should see. The terminal front end prints above the
/// line being edited; the pipe front end prints plain lines.
@MainActor
public protocol ClientDisplay: AnyObject {
    /// Shows one event.
    func show(_ event: ChatEvent)
    /// The session changed (current room, nick, connection): refresh the prompt.
    func sessionChanged()
}

/// Runs one chat client: connects, turns typed lines into frames and frames into events,
/// reconnects with backoff when the connection drops, and leaves politely on `/quit`.
///
/// Main-actor isolated, like the terminal code it serves (libedit is not thread-safe): frames
/// are decoded off the main thread and handled on it. Outgoing frames go through one writer
/// task per connection, so they leave in the order they were produced.
@MainActor
public final class ChatClientDriver {
    /// Where and how to connect.
    public struct Configuration: Sendable {
        /// The server's host name or address.
        public var host: String
        /// The server's TCP port.
        public var port: Int
        /// The server password, if it wants one.
        public var password: String?
        /// Delays between reconnection attempts.
        public var backoff: ReconnectBackoff
        /// Whether to give up (exit status 1) when the very first connection fails, instead of
        /// retrying: right for scripts, which should not hang on a server that is not there.
        public var exitIfFirstConnectFails: Bool

        /// A configuration for `host:port`.
        public init(host: String, port: Int, password: String? = nil, backoff: ReconnectBackoff = ReconnectBackoff(), exitIfFirstConnectFails: Bool = false) {
            self.host = host
            self.port = port
            self.password = password
            self.backoff = backoff
            self.exitIfFirstConnectFails = exitIfFirstConnectFails
        }
    }

    /// The chat state: nick, rooms, current room, known nicks.
    public private(set) var session: ClientSession
    /// Called once, with the process exit status, when the client has finished (after `/quit`,
    /// end of input, or a refusal it cannot recover from). The front end restores the terminal.
    public var onFinished: (Int32) -> Void = { _ in }
    /// Called once after the first successful handshake and joins, e.g. to start reading input.
    public var onFirstConnect: () -> Void = {}

    private let configuration: Configuration
    private weak var display: (any ClientDisplay)?
    private var connection: ChatConnection?
    private var outbound: AsyncStream<[Frame]>.Continuation?
    private var maxFrameSize = WireProtocol.defaultServerMaxFrameSize
    private var hasConnected = false
    private var quitting = false
    private var finished = false
    private var loop: Task<Void, Never>?

    /// A driver for `session`, showing events on `display` (which it does not retain).
    public init(configuration: Configuration, session: ClientSession, display: any ClientDisplay) {
        self.configuration = configuration
        self.session = session
        self.display = display
    }

    /// Starts connecting; returns at once.
    public func start() {
        loop = Task { await self.connectionLoop() }
    }

    /// Handles one line the user typed.
    public func submit(_ line: String) {
        do {
            guard let command = try CommandParser.parse(line) else { return }
            perform(session.perform(command), fromUser: true)
        } catch {
            perform(session.rejected(error), fromUser: true)
        }
    }

    /// Leaves the server with `reason` and finishes (for Ctrl-D, end of input and signals).
    public func quit(reason: String) {
        perform([.quit(reason: reason)], fromUser: true)
    }

    // MARK: Actions

    private func perform(_ actions: [SessionAction], fromUser: Bool) {
        for action in actions {
            switch action {
            case .show(let event):
                display?.show(event)
            case .send(let frames):
                send(frames, fromUser: fromUser)
            case .quit(let reason):
                beginQuit(reason: reason)
            }
        }
        display?.sessionChanged()
    }

    private func send(_ frames: [Frame], fromUser: Bool) {
        guard let outbound else {
            if fromUser { show(.error(time: ClientClock.now(), text: "not connected; not sent (reconnecting)")) }
            return
        }
        var allowed: [Frame] = []
        for frame in frames {
            var bytes: [UInt8] = []
            FrameEncoder.encode(frame, into: &bytes)
            // The server ends the session over a frame above its limit, so refuse it here.
            if bytes.count > maxFrameSize {
                show(.error(time: ClientClock.now(), text: "too long to send (the server accepts \(maxFrameSize) bytes per frame)"))
            } else {
                allowed.append(frame)
            }
        }
        if !allowed.isEmpty { outbound.yield(allowed) }
    }

    private func show(_ event: ChatEvent) { display?.show(event) }

    private func beginQuit(reason: String) {
        guard !quitting else { return }
        quitting = true
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
        var attempt = 0
        while !quitting {
            var lostReason = "the server closed the connection"
            do {
                let connection = try await ChatConnection.connect(
                    host: configuration.host, port: configuration.port, nick: session.nick,
                    password: configuration.password)
                attempt = 0
                try await run(connection)
            } catch let refusal as ChatConnection.HandshakeError {
                if case .refused(let code, let reason) = refusal, mustGiveUp(code) {
                    show(.error(time: ClientClock.now(), text: "the server refused us: \(reason)"))
                    finish(1)
                    return
                }
                lostReason = refusal.description
            } catch is CancellationError {
                break
            } catch {
                lostReason = "\(error)"
            }
            closeConnection()
            if quitting { break }
            if !hasConnected && configuration.exitIfFirstConnectFails {
                show(.error(time: ClientClock.now(), text: "cannot reach \(configuration.host):\(configuration.port): \(lostReason)"))
                finish(1)
                return
            }
            attempt += 1
            let delay = configuration.backoff.delay(attempt: attempt)
            show(.error(time: ClientClock.now(), text: "disconnected: \(lostReason); reconnecting in \(Self.describe(delay)) (attempt \(attempt))"))
            display?.sessionChanged()
            do { try await Task.sleep(for: delay) } catch { break }
        }
        closeConnection()
        finish(0)
    }

    /// Whether a handshake refusal will not go away by retrying. A taken nick may be our own
    /// previous session that the server has not noticed is gone yet, so only the first
    /// connection gives up on it.
    private func mustGiveUp(_ code: ErrorCode) -> Bool {
        switch code {
        case .invalidNick, .badPassword, .unsupportedVersion: true
        case .nickTaken: !hasConnected
        default: false
        }
    }

    /// Runs one open connection until it ends; throws what ended it.
    private func run(_ connection: ChatConnection) async throws {
        self.connection = connection
        maxFrameSize = connection.welcome.maxFrameSize
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

        show(.notice(time: ClientClock.now(), text: "connected to \(configuration.host):\(configuration.port) as \(connection.welcome.nick)"))
        perform(session.connected(nick: connection.welcome.nick, motd: connection.welcome.motd), fromUser: false)
        if !hasConnected {
            hasConnected = true
            onFirstConnect()
        }
        for try await frame in connection.frames {
            perform(session.receive(frame), fromUser: false)
        }
    }

    private func closeConnection() {
        outbound?.finish()
        outbound = nil
        connection?.close()
        connection = nil
        if session.isConnected {
            session.disconnected()
            // A client on its way out has nothing to reconnect, so its prompt stays as it was.
            if !quitting { display?.sessionChanged() }
        }
    }

    private static func describe(_ delay: Duration) -> String {
        let milliseconds = delay.components.seconds * 1000 + delay.components.attoseconds / 1_000_000_000_000_000
        return "\(milliseconds / 1000).\(milliseconds % 1000 / 100) s"
    }
}
