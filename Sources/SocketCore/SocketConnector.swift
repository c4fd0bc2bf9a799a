import Dispatch
import Glibc

/// Opens TCP connections: resolves the host, then tries each address in turn with a non-blocking
/// connect, all within one deadline.
public enum SocketConnector {
    /// Connects to `host:port` and calls `completion` on `queue` exactly once.
    ///
    /// Resolution runs on a global queue (`getaddrinfo` blocks); each attempt waits on a Dispatch
    /// write source, so a slow connect costs no thread. The first address that accepts wins; when all
    /// fail, the error of the last attempt is reported. When `timeout` runs out the attempt under way
    /// is abandoned and the error is `ETIMEDOUT`.
    public static func connect(
        host: String, port: Int, timeout: Duration = .seconds(10), queue: DispatchQueue,
        completion: @escaping @Sendable (Result<Socket, SocketError>) -> Void
    ) {
        let attempt = ConnectAttempt(host: host, port: port, queue: queue, completion: completion)
        attempt.begin(timeout: timeout)
    }

    /// Connects to `host:port`; the async form of `connect(host:port:timeout:queue:completion:)`.
    public static func connect(host: String, port: Int, timeout: Duration = .seconds(10)) async throws(SocketError) -> Socket {
        // The result crosses from the connect queue to the task through a lock TSan can see.
        let outcome = Locked<Result<Socket, SocketError>?>(nil)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            connect(host: host, port: port, timeout: timeout, queue: DispatchQueue(label: "SocketConnector")) { result in
                outcome.withLock { $0 = result }
                continuation.resume()
            }
        }
        return try outcome.withLock { $0! }.get()
    }
}

/// The state of one `SocketConnector.connect` call; confined to `queue` after resolution.
private final class ConnectAttempt: @unchecked Sendable {
    private let host: String
    private let port: Int
    private let target: String
    private let queue: DispatchQueue
    private var completion: (@Sendable (Result<Socket, SocketError>) -> Void)?
    private var addresses: [SocketAddress] = []
    private var nextAddress = 0
    private var current: Socket?
    private var writeSource: DispatchSourceWrite?
    private var timer: DispatchSourceTimer?
    private var lastError: SocketError?

    init(host: String, port: Int, queue: DispatchQueue,
         completion: @escaping @Sendable (Result<Socket, SocketError>) -> Void) {
        self.host = host
        self.port = port
        self.target = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        self.queue = queue
        self.completion = completion
    }

    func begin(timeout: Duration) {
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + timeout.timeInterval)
        timer.setEventHandler { [self] in timedOut() }
        self.timer = timer
        timer.activate()
        DispatchQueue.global().async { [self] in
            let resolved = Result { () throws(SocketError) in try Resolver.resolve(host: host, port: port) }
            queue.async { [self] in
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
            guard completion != nil else {
                socket.close()
                return
            }
            if outcome == 0 {
                connected(socket)
            } else {
                lastError = SocketError(.posix(outcome), operation: "connect", target: target)
                socket.close()
                current = nil
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

    private func timedOut() {
        guard completion != nil else { return }
        let error = SocketError(.posix(ETIMEDOUT), operation: "connect", target: target)
        if let writeSource {
            // The cancel handler closes the socket, since `completion` is gone by then.
            writeSource.cancel()
        } else {
            current?.close()
        }
        current = nil
        finish(.failure(error))
    }

    private func finish(_ result: Result<Socket, SocketError>) {
        guard let completion else {
            if case .success(let socket) = result { socket.close() }
            return
        }
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
