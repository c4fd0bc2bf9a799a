import ChatProtocol
import Dispatch
import Glibc
import Logging
import SocketCore

/// A chat server: a `ChatCore` served over TCP on one serial Dispatch queue.
///
/// Everything — accepting, reading, the chat logic, writing, the timer — runs on one queue, so the
/// state needs no locks and the machine's other cores are left to the clients. Each client is a
/// `SocketChannel`; all channels read into one shared `ReadBuffer`.
///
/// The hot path: a room event is encoded once into a `ByteChunk` that every member's queue shares;
/// members that received something are marked dirty and flushed together in one pass scheduled
/// after the current batch of reads, so many deliveries to one client leave in one gather write.
/// A client whose queue stays above `outboundQueueLimit` after a flush is disconnected as a slow
/// consumer: the server never drops a frame for a client it keeps.
///
/// Threading: `@unchecked Sendable` because every mutable property is confined to `queue`. Call
/// `start()` and `shutdown` from any thread except that queue.
public final class ChatServer: @unchecked Sendable {
    /// The settings the server runs with.
    public let configuration: ChatServerConfiguration
    /// The address the server listens on; with port 0 it carries the port the OS chose.
    public let localAddress: SocketAddress
    /// The port the server listens on.
    public var port: Int { localAddress.port }

    private enum State { case idle, running, stopping, stopped }

    private let queue = DispatchQueue(label: "ChatServer")
    private let logger: Logger
    private let listener: SocketListener
    private let readBuffer = ReadBuffer()
    private var state = State.idle
    private var core: ChatCore

    /// Open connections, indexed by `ClientID.slot`; a slot is reused only after its channel closed.
    private var connections: [ClientConnection?] = []
    private var freeSlots: [Int] = []
    private var openConnections = 0
    private var nextSerial: UInt64 = 1

    /// Reused for every batch of actions, so the hot path allocates no arrays.
    private var actions: [ChatAction] = []
    private var encodeBuffer: [UInt8] = []
    private var dirty: [ClientConnection] = []
    private var flushing: [ClientConnection] = []
    private var flushScheduled = false

    private var timer: DispatchSourceTimer?
    private var stopWaiters: [@Sendable () -> Void] = []

    /// Binds the listening socket (nothing is accepted until `start()`).
    ///
    /// Throws `ChatServerError.invalidConfiguration` for settings that cannot work, `SocketError`
    /// when the address cannot be bound. Logs through `logger` (connects and disconnects at `info`).
    public init(configuration: ChatServerConfiguration, logger: Logger = Logger(label: "chat-server")) throws {
        if let problem = configuration.problem() { throw ChatServerError.invalidConfiguration(problem) }
        self.configuration = configuration
        self.logger = logger
        core = ChatCore(configuration: configuration)
        listener = try SocketListener(host: configuration.host, port: configuration.port, backlog: 4096)
        localAddress = listener.localAddress
    }

    /// Starts accepting connections and the timer. Call once.
    public func start() {
        queue.sync {
            precondition(state == .idle, "start() called twice")
            state = .running
            listener.start(
                queue: queue, handler: { [weak self] socket in self?.accept(socket) },
                onError: { [weak self] error in
                    self?.logger.warning("accept failed", metadata: ["error": "\(error)"])
                })
            startTimer()
        }
    }

    /// Stops the server: stops accepting, sends every client `goodbye(reason)` after what is
    /// already queued for it, waits up to `drainTimeout` for the bytes to leave and the clients to
    /// close, closes what is left, then calls `completion` (on the server's queue).
    public func shutdown(reason: String = "the server is shutting down", completion: @escaping @Sendable () -> Void) {
        queue.async { [self] in
            switch state {
            case .stopped:
                completion()
                return
            case .stopping:
                stopWaiters.append(completion)
                return
            case .idle, .running:
                stopWaiters.append(completion)
            }
            state = .stopping
            listener.close()
            let now = Self.now()
            let deadline = now.uptimeMillis + configuration.drainTimeout.milliseconds
            let farewell = encode(.goodbye(reason: reason))
            for case let connection? in connections where connection.isActive {
                logDisconnect(connection, reason: reason, nick: core.nick(of: connection.id))
                connection.beginClosing(farewell: farewell, deadline: deadline)
                markDirty(connection)
            }
            flushDirty()
            finishStoppingIfIdle()
        }
    }

    /// Stops the server like `shutdown(reason:completion:)` and returns when it has stopped.
    public func shutdown(reason: String = "the server is shutting down") async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            shutdown(reason: reason) { continuation.resume() }
        }
    }

    /// How many connections are open, handshaking and closing ones included.
    public var connectionCount: Int { queue.sync { openConnections } }

    // MARK: Accepting

    private func accept(_ socket: Socket) {
        guard state == .running else {
            socket.close()
            return
        }
        // Chat frames are small and latency matters more than packet count; gather writes already
        // batch whatever is queued.
        try? socket.setNoDelay()
        let address = (try? socket.remoteAddress().ip) ?? "unknown"
        let slot: Int
        if let free = freeSlots.popLast() {
            slot = free
        } else {
            slot = connections.count
            connections.append(nil)
        }
        let channel = SocketChannel(socket: socket, queue: queue, readBuffer: readBuffer)
        let connection = ClientConnection(
            id: ClientID(slot), serial: nextSerial, channel: channel, maxFrameSize: configuration.maxFrameSize)
        nextSerial += 1
        connections[slot] = connection
        openConnections += 1
        channel.onBytes = { [weak self] bytes in self?.received(bytes, on: connection) }
        channel.onEndOfInput = { [weak self] in self?.endOfInput(on: connection) }
        channel.onClosed = { [weak self] error in self?.closed(connection, error: error) }
        channel.start()
        logger.info(
            "client connected",
            metadata: ["connection.id": "\(connection.serial)", "connection.remote": "\(channel.label)"])
        core.clientConnected(connection.id, address: address, at: Self.now(), into: &actions)
        perform()
    }

    // MARK: Reading

    private func received(_ bytes: UnsafeRawBufferPointer, on connection: ClientConnection) {
        // A closing connection's input is read only to notice when the peer closes.
        guard connection.isActive else { return }
        connection.decoder.append(bytes)
        connection.readSinceTick = true
        connection.decoderHasGrown = true
        let now = Self.now()
        do {
            while let frame = try connection.decoder.next() {
                core.received(frame, from: connection.id, at: now, into: &actions)
            }
        } catch {
            let violation = Disconnection(
                code: error.errorCode, frameType: connection.decoder.failedFrameType, reason: error.description)
            core.disconnect(connection.id, violation, at: now, into: &actions)
        }
        perform()
    }

    private func endOfInput(on connection: ClientConnection) {
        if connection.isActive {
            core.disconnect(connection.id, Disconnection(code: nil, reason: "connection closed by the client"), at: Self.now(), into: &actions)
            perform()
        }
        // The peer will read no more; what is still queued for it has nowhere to go.
        connection.channel.close()
    }

    private func closed(_ connection: ClientConnection, error: SocketError?) {
        if connection.isActive {
            let reason = error.map { "connection lost: \($0.reason)" } ?? "connection closed"
            core.disconnect(connection.id, Disconnection(code: nil, reason: reason), at: Self.now(), into: &actions)
            perform()
        }
        connection.phase = .closed
        connections[connection.id.slot] = nil
        freeSlots.append(connection.id.slot)
        openConnections -= 1
        finishStoppingIfIdle()
    }

    // MARK: Carrying out actions

    /// Carries out the actions the core appended, in order, and empties the list.
    private func perform() {
        guard !actions.isEmpty else { return }
        for action in actions {
            switch action {
            case .send(let frame, let id):
                guard let connection = connections[id.slot], connection.isActive else { continue }
                connection.channel.enqueue(encode(frame))
                markDirty(connection)
            case .broadcast(let frame, let recipients):
                let chunk = encode(frame)
                for id in recipients {
                    guard let connection = connections[id.slot], connection.isActive else { continue }
                    connection.channel.enqueue(chunk)
                    markDirty(connection)
                }
            case .disconnect(let id, let disconnection, let nick):
                guard let connection = connections[id.slot], connection.isActive else { continue }
                logDisconnect(connection, reason: disconnection.reason, nick: nick)
                let deadline = Self.now().uptimeMillis + configuration.lingerTimeout.milliseconds
                connection.beginClosing(farewell: disconnection.errorFrame.map(encode), deadline: deadline)
                markDirty(connection)
            }
        }
        actions.removeAll(keepingCapacity: true)
    }

    /// Encodes `frame` once into a chunk that any number of queues can share.
    private func encode(_ frame: Frame) -> ByteChunk {
        encodeBuffer.removeAll(keepingCapacity: encodeBuffer.capacity <= 64 << 10)
        FrameEncoder.encode(frame, into: &encodeBuffer)
        return encodeBuffer.withUnsafeBytes { ByteChunk(copying: $0) }
    }

    private func markDirty(_ connection: ClientConnection) {
        guard !connection.isDirty else { return }
        connection.isDirty = true
        dirty.append(connection)
        if !flushScheduled {
            flushScheduled = true
            queue.async { [weak self] in self?.flushDirty() }
        }
    }

    /// Writes out every dirty channel, one gather write each, and disconnects those whose queue is
    /// still above the limit afterwards. Repeats while disconnections dirty more channels.
    private func flushDirty() {
        flushScheduled = true
        defer { flushScheduled = false }
        var slowConsumers: [ClientConnection] = []
        while !dirty.isEmpty {
            swap(&dirty, &flushing)
            for connection in flushing {
                connection.isDirty = false
                connection.channel.flush()
                if connection.isActive, connection.channel.outboundBytes > configuration.outboundQueueLimit {
                    slowConsumers.append(connection)
                }
            }
            flushing.removeAll(keepingCapacity: true)
            guard !slowConsumers.isEmpty else { continue }
            let now = Self.now()
            for connection in slowConsumers {
                let reason =
                    "slow consumer: \(connection.channel.outboundBytes) bytes waiting, more than the limit of \(configuration.outboundQueueLimit)"
                core.disconnect(connection.id, Disconnection(code: .slowConsumer, reason: reason), at: now, into: &actions)
            }
            slowConsumers.removeAll()
            perform()
        }
    }

    // MARK: Time

    private func startTimer() {
        let shortest = [
            configuration.handshakeTimeout, configuration.idlePingInterval, configuration.lingerTimeout,
            configuration.drainTimeout,
        ].min()!
        let interval = min(max(shortest.milliseconds / 4, 10), 500)
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + .milliseconds(Int(interval)), repeating: .milliseconds(Int(interval)))
        timer.setEventHandler { [weak self] in self?.tick() }
        self.timer = timer
        timer.activate()
    }

    /// Runs the core's timeouts, closes connections whose closing deadline passed, and gives back
    /// the decoder buffers of idle connections.
    private func tick() {
        let now = Self.now()
        if state == .running {
            core.tick(at: now, into: &actions)
            perform()
        }
        for case let connection? in connections {
            switch connection.phase {
            case .active:
                connection.releaseIdleBuffers()
            case .closing(let deadline):
                if now.uptimeMillis >= deadline { connection.channel.close() }
            case .closed:
                break
            }
        }
    }

    private func finishStoppingIfIdle() {
        guard state == .stopping, openConnections == 0 else { return }
        state = .stopped
        timer?.cancel()
        timer = nil
        logger.info("server stopped")
        let waiters = stopWaiters
        stopWaiters = []
        for waiter in waiters { waiter() }
    }

    // MARK: Helpers

    private func logDisconnect(_ connection: ClientConnection, reason: String, nick: String?) {
        var metadata: Logger.Metadata = [
            "connection.id": "\(connection.serial)", "connection.remote": "\(connection.channel.label)",
            "disconnect.reason": "\(reason)",
        ]
        if let nick { metadata["client.nick"] = "\(nick)" }
        logger.info("client disconnected", metadata: metadata)
    }

    /// The wall clock for stamps and the monotonic clock for timeouts, read together.
    static func now() -> ServerTime {
        var wall = timespec()
        var uptime = timespec()
        clock_gettime(CLOCK_REALTIME, &wall)
        clock_gettime(CLOCK_MONOTONIC, &uptime)
        return ServerTime(
            wallMillis: UInt64(wall.tv_sec) * 1000 + UInt64(wall.tv_nsec) / 1_000_000,
            uptimeMillis: UInt64(uptime.tv_sec) * 1000 + UInt64(uptime.tv_nsec) / 1_000_000)
    }
}

/// Why a `ChatServer` could not be created.
public enum ChatServerError: Error, CustomStringConvertible {
    /// A setting cannot work; the text says which and why.
    case invalidConfiguration(String)

    /// The problem, for people.
    public var description: String {
        switch self {
        case .invalidConfiguration(let problem): "invalid configuration: \(problem)"
        }
    }
}
