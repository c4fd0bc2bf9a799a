import DequeModule
import Dispatch
import RedisProtocol
import SocketCore

/// One connection to a Redis server on a `SocketChannel`: commands are pipelined — sent at once,
/// however many are waiting — and each reply goes to its command's callback, in order.
///
/// After `subscribe`, the connection is in Redis's subscriber mode: it may only subscribe and
/// unsubscribe, and every value that is not the reply to an earlier command (the `subscribe` and
/// `unsubscribe` confirmations, each `message`) goes to `onPush`.
///
/// Ownership: owns its channel and so its socket, and stays alive while open even if its owner
/// lets go: only `close()` or the server ends it. When it ends for any reason, every command still
/// waiting gets the reason as its result, then `onClosed` runs once.
///
/// Threading: confined to `queue` — the owner's queue, so that a chat server keeps its state and
/// its Redis traffic on one queue without locks. Every call must come from it, and every callback
/// runs on it.
public final class RedisConnection: @unchecked Sendable {
    /// What a command's callback receives: the reply (perhaps an error reply), or why none came.
    public typealias Reply = Result<RESPValue, RedisError>

    /// The queue everything runs on.
    public var queue: DispatchQueue { channel.queue }
    /// Values that answer no command: in subscriber mode, confirmations and messages.
    public var onPush: ((RESPValue) -> Void)?
    /// Called once when the connection has ended, with why.
    public var onClosed: ((RedisError) -> Void)?

    private let channel: SocketChannel
    private var parser: RESPParser
    private var waiting = Deque<(Reply) -> Void>()
    /// Whether the connection has ended (its descriptor is closed, `onClosed` has been called).
    public var hasEnded: Bool { ended }
    /// Commands sent after the connection ended, told so on the next turn.
    private var refused: [(Reply) -> Void] = []
    private var subscribed = false
    private var flushScheduled = false
    private var failure: RedisError?
    private var ended = false

    /// Connects to the Redis server at `host:port` and calls `completion` on `queue` with the
    /// connection, started, or with why it could not be made.
    public static func connect(
        host: String, port: Int, timeout: Duration = .seconds(5), queue: DispatchQueue,
        limits: RESPParser.Limits = .init(),
        completion: @escaping @Sendable (Result<RedisConnection, RedisError>) -> Void
    ) {
        SocketConnector.connect(host: host, port: port, timeout: timeout, queue: queue) { result in
            switch result {
            case .success(let socket):
                try? socket.setNoDelay()
                let connection = RedisConnection(socket: socket, queue: queue, limits: limits)
                connection.start()
                completion(.success(connection))
            case .failure(let error):
                completion(.failure(.connection(error)))
            }
        }
    }

    /// Wraps a connected socket; nothing is read until `start()`.
    public init(socket: Socket, queue: DispatchQueue, limits: RESPParser.Limits = .init()) {
        channel = SocketChannel(socket: socket, queue: queue)
        parser = RESPParser(limits: limits)
    }

    /// Starts reading replies. Call once, on `queue`.
    public func start() {
        // A retain cycle while open, on purpose: the channel's callbacks keep the connection alive
        // until it has closed (so replies still reach their callbacks), and `closed` breaks it.
        channel.onBytes = { [self] bytes in received(bytes) }
        channel.onClosed = { [self] error in closed(error) }
        channel.start()
    }

    /// How many commands are waiting for their reply.
    public var waitingCount: Int { waiting.count }

    /// How many commands (subscriptions included) have been written so far: a caller that wants
    /// to know whether a callback sent anything compares it before and after.
    public private(set) var commandsWritten = 0

    /// Bytes queued for the server and not yet taken by the kernel.
    public var outboundBytes: Int { channel.outboundBytes }

    /// Sends `arguments` (the command's name first) and calls `reply` with its reply. After the
    /// connection has ended, `reply` gets the reason at once (on a later turn of `queue`).
    public func send(_ arguments: [[UInt8]], reply: @escaping (Reply) -> Void) {
        precondition(!subscribed, "a connection in subscriber mode only subscribes and unsubscribes")
        if let failure = failure ?? (ended ? .closed : nil) {
            // Not inside `send`: a callback that runs before its call returns surprises callers.
            refused.append(reply)
            if refused.count == 1 {
                queue.async { [self] in
                    let callbacks = refused
                    refused = []
                    for callback in callbacks { callback(.failure(failure)) }
                }
            }
            return
        }
        waiting.append(reply)
        write(arguments)
    }

    /// Sends a command whose arguments are all text.
    public func send(_ arguments: String..., reply: @escaping (Reply) -> Void) {
        send(arguments.map { Array($0.utf8) }, reply: reply)
    }

    /// Subscribes to `channels`; from now on the connection is in subscriber mode, and their
    /// confirmations and messages arrive through `onPush`.
    public func subscribe(_ channels: [[UInt8]]) {
        precondition(!channels.isEmpty, "SUBSCRIBE needs a channel")
        subscribed = true
        write([Array("SUBSCRIBE".utf8)] + channels)
    }

    /// Unsubscribes from `channels`; the confirmations arrive through `onPush`.
    public func unsubscribe(_ channels: [[UInt8]]) {
        precondition(!channels.isEmpty, "an empty UNSUBSCRIBE would leave every channel")
        write([Array("UNSUBSCRIBE".utf8)] + channels)
    }

    /// Takes the replies already waiting in the socket now, rather than when the queue reports
    /// them: before a reply's deadline is judged (`SocketChannel.readWaiting`). On the queue.
    public func readWaiting() { channel.readWaiting() }

    /// Closes the connection; waiting commands get `RedisError.closed`.
    public func close() {
        channel.close()
    }

    // MARK: Writing

    private func write(_ arguments: [[UInt8]]) {
        guard channel.isOpen else { return }
        commandsWritten += 1
        var bytes: [UInt8] = []
        RESPEncoder.encodeCommand(arguments, into: &bytes)
        channel.enqueue(ByteChunk(bytes))
        // Commands sent in the same turn leave in one gather write.
        guard !flushScheduled else { return }
        flushScheduled = true
        queue.async { [self] in
            flushScheduled = false
            channel.flush()
        }
    }

    // MARK: Reading

    private func received(_ bytes: UnsafeRawBufferPointer) {
        parser.append(bytes)
        do {
            while let value = try parser.next() {
                if let reply = waiting.popFirst() {
                    reply(.success(value))
                } else if subscribed, let onPush {
                    onPush(value)
                } else {
                    fail(.unexpectedValue)
                    return
                }
            }
        } catch {
            fail(.protocolViolation(error))
        }
    }

    private func fail(_ error: RedisError) {
        failure = failure ?? error
        channel.close()
    }

    private func closed(_ error: SocketError?) {
        ended = true
        let reason = failure ?? error.map(RedisError.connection) ?? .closed
        failure = reason
        let callbacks = waiting
        waiting.removeAll()
        for reply in callbacks { reply(.failure(reason)) }
        channel.onBytes = nil
        channel.onClosed = nil
        let onClosed = self.onClosed
        self.onClosed = nil
        onPush = nil
        onClosed?(reason)
    }
}
