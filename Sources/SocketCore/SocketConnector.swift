import Dispatch
import Glibc

/// Opens TCP connections: resolves the host, then tries each address in turn with a non-blocking
/// connect, all within one deadline.
public enum SocketConnector {
    /// Connects to `host:port` and calls `completion` on `queue` exactly once.
    ///
    /// A numeric address needs no lookup; a name is resolved on the resolver's small pool of
    /// threads (`getaddrinfo` blocks). Each attempt waits on a Dispatch write source, so a slow
    /// connect costs no thread. The first address that accepts wins; when all fail, the error of
    /// the last attempt is reported. When `timeout` runs out the attempt under way is abandoned
    /// and the error is `ETIMEDOUT`; `cancel()` on the returned attempt ends it the same way with
    /// `ECANCELED`. Either way the attempt's socket is closed before `completion` runs.
    @discardableResult
    public static func connect(
        host: String, port: Int, timeout: Duration = .seconds(10), queue: DispatchQueue,
        completion: @escaping @Sendable (Result<Socket, SocketError>) -> Void
    ) -> ConnectAttempt {
        let attempt = ConnectAttempt(host: host, port: port, queue: queue)
        attempt.begin(timeout: timeout, completion: completion)
        return attempt
    }

    /// Connects to `host:port`; the async form of `connect(host:port:timeout:queue:completion:)`.
    ///
    /// Cancelling the task ends the connect at once with `ECANCELED`, its socket closed.
    public static func connect(host: String, port: Int, timeout: Duration = .seconds(10)) async throws(SocketError) -> Socket {
        // The result crosses from the connect queue to the task through a lock TSan can see.
        let outcome = Locked<Result<Socket, SocketError>?>(nil)
        // A shared I/O queue, not one of its own: a queue per connect would cost a thread per
        // connect under way (see `QueueRing`).
        let attempt = ConnectAttempt(host: host, port: port, queue: IOQueue.next().queue)
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                attempt.begin(timeout: timeout) { result in
                    outcome.withLock { $0 = result }
                    continuation.resume()
                }
            }
        } onCancel: {
            attempt.cancel()
        }
        return try outcome.withLock { $0! }.get()
    }
}

/// One connect under way, as `SocketConnector.connect` returns it: `cancel()` gives it up.
///
/// Ownership: the socket of the attempt in progress belongs to the attempt until it is handed to
/// the completion; an attempt that fails, times out or is cancelled closes it first.
///
/// Threading: confined to `queue` once begun; `cancel()` may be called from any thread.
public final class ConnectAttempt: @unchecked Sendable {
    private let host: String
    private let port: Int
    private let target: String
    private let queue: DispatchQueue
    private var completion: (@Sendable (Result<Socket, SocketError>) -> Void)?
    /// `cancel()` ran before `begin`'s work did.
    private var cancelRequested = false
    private var addresses: [SocketAddress] = []
    private var nextAddress = 0
    private var current: Socket?
    private var writeSource: DispatchSourceWrite?
    /// Why the connect in progress is being given up; its write source's cancel handler reports it.
    private var abandonment: SocketError?
    private var timer: DispatchSourceTimer?
    private var lastError: SocketError?

    init(host: String, port: Int, queue: DispatchQueue) {
        self.host = host
        self.port = port
        self.target = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        self.queue = queue
    }

    /// Gives the connect up: `completion` gets `ECANCELED` once the socket is closed. Does nothing
    /// once the connect has finished.
    public func cancel() {
        queue.async { [self] in
            cancelRequested = true
            abandon(.cancelled("connect", target: target))
        }
    }

    func begin(timeout: Duration, completion: @escaping @Sendable (Result<Socket, SocketError>) -> Void) {
        queue.async { [self] in
            self.completion = completion
            guard !cancelRequested else {
                finish(.failure(.cancelled("connect", target: target)))
                return
            }
            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.schedule(deadline: .now() + timeout.timeInterval)
            timer.setEventHandler { [self] in abandon(SocketError(.posix(ETIMEDOUT), operation: "connect", target: target)) }
            self.timer = timer
            timer.activate()
            if let address = SocketAddress(ip: host, port: port) {
                addresses = [address]
                tryNextAddress()
                return
            }
            Resolver.resolveInBackground(host: host, port: port) { [self] resolved in
                queue.async { [self] in
                    guard self.completion != nil else { return }
                    switch resolved {
                    case .success(let list):
                        addresses = list
                        tryNextAddress()
                    case .failure(let error):
                        finish(.failure(error))
                    }
                }
            }
        }
    }

    private func tryNextAddress() {
        guard completion != nil else { return }
        guard nextAddress < addresses.count else {
            finish(.failure(lastError ?? SocketError(.posix(ECONNREFUSED), operation: "connect", target: target)))
            return
        }
        let address = addresses[nextAddress]
        nextAddress += 1
        do {
            let socket = try Socket(family: address.family, label: target)
            current = socket
            switch try socket.connect(to: address) {
            case .done:
                connected(socket)
            case .wouldBlock:
                waitForConnect(socket)
            }
        } catch {
            lastError = error
            current?.close()
            current = nil
            tryNextAddress()
        }
    }

    private func waitForConnect(_ socket: Socket) {
        let source = DispatchSource.makeWriteSource(fileDescriptor: socket.descriptor, queue: queue)
        var outcome: Int32 = 0
        source.setEventHandler {
            outcome = (try? socket.pendingError()) ?? ECONNREFUSED
            source.cancel()
        }
        // Act only once the source is cancelled: the socket is then free to close or to hand over.
        source.setCancelHandler { [self] in
            writeSource = nil
            current = nil
            if let abandonment {
                socket.close()
                finish(.failure(abandonment))
            } else if outcome == 0 {
                connected(socket)
            } else {
                lastError = SocketError(.posix(outcome), operation: "connect", target: target)
                socket.close()
                tryNextAddress()
            }
        }
        writeSource = source
        source.activate()
    }

    private func connected(_ socket: Socket) {
        current = nil
        // Best effort: a socket without TCP_NODELAY still works, only slower for small lines.
        try? socket.setNoDelay()
        finish(.success(socket))
    }

    /// Ends the attempt with `error` (a timeout or a cancellation), closing its socket before
    /// reporting; a connect in progress is reported by its write source's cancel handler.
    private func abandon(_ error: SocketError) {
        guard completion != nil, abandonment == nil else { return }
        if let writeSource {
            abandonment = error
            writeSource.cancel()
        } else {
            current?.close()
            current = nil
            finish(.failure(error))
        }
    }

    private func finish(_ result: Result<Socket, SocketError>) {
        guard let completion else { return }
        self.completion = nil
        timer?.cancel()
        timer = nil
        completion(result)
    }
}

extension Duration {
    /// The duration as a Dispatch time interval.
    var timeInterval: DispatchTimeInterval {
        let (seconds, attoseconds) = components
        return .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000))
    }
}
