import Dispatch
import Foundation
import Glibc
@testable import SocketStreams

// Helpers shared by the StreamBridge* tests. Every name starts with `Bridge` / `bridge` so that
// nothing clashes with the other test files of this target.

// MARK: - Threads with run loops

/// Runs `body` on a new thread (with a run loop of its own, as every thread has) and returns its
/// result. Stream delegates fire on that thread while `body` runs the run loop; test assertions
/// stay in the calling test, on what `body` returns.
func bridgeOnNewThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result(catching: body)) }
        thread.start()
    }
}

/// Runs the current thread's run loop in the default mode until `done()` or `timeout` seconds;
/// returns whether `done()` became true. Each `run(mode:before:)` returns after an event, so
/// `done()` is checked as soon as something happened: no sleeping, no polling.
@discardableResult
func bridgeRunRunLoop(timeout: TimeInterval = 10, until done: () -> Bool) -> Bool {
    let deadline = Date(timeIntervalSinceNow: timeout)
    while !done() {
        // `false` means nothing is scheduled any more, so nothing can make `done()` true.
        guard Date() < deadline, RunLoop.current.run(mode: .default, before: deadline) else { return done() }
    }
    return true
}

/// A value handed from one thread to another, waited for with a timeout.
final class BridgeHandoff<Value>: @unchecked Sendable {
    // `condition` protects `value`.
    private let condition = NSCondition()
    private var value: Value?

    /// Hands `value` over and wakes the waiter.
    func put(_ value: Value) {
        condition.withLock {
            self.value = value
            condition.broadcast()
        }
    }

    /// Waits up to `timeout` seconds for `put`.
    func take(timeout: TimeInterval = 10) -> Value? {
        let deadline = Date(timeIntervalSinceNow: timeout)
        return condition.withLock {
            while value == nil, condition.wait(until: deadline) {}
            return value
        }
    }
}

// MARK: - Delegates

/// A stream delegate that records every call, with the thread it came on, and passes it to `onEvent`.
/// Used only on the thread whose run loop the streams are scheduled in.
final class BridgeEventRecorder: NSObject, StreamDelegate {
    struct Entry {
        let stream: Stream
        let event: Stream.Event
        let thread: pthread_t
    }

    private(set) var entries: [Entry] = []
    var onEvent: (Stream, Stream.Event) -> Void = { _, _ in }

    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        entries.append(Entry(stream: aStream, event: eventCode, thread: pthread_self()))
        onEvent(aStream, eventCode)
    }

    /// Whether `event` was delivered for `stream`.
    func saw(_ event: Stream.Event, on stream: Stream) -> Bool {
        entries.contains { $0.stream === stream && $0.event == event }
    }

    /// The events delivered for `stream`, in order, as names (for failure messages).
    func names(for stream: Stream) -> [String] {
        entries.filter { $0.stream === stream }.map { bridgeEventName($0.event) }
    }
}

/// A readable name for a single stream event.
func bridgeEventName(_ event: Stream.Event) -> String {
    switch event {
    case .openCompleted: return "openCompleted"
    case .hasBytesAvailable: return "hasBytesAvailable"
    case .hasSpaceAvailable: return "hasSpaceAvailable"
    case .errorOccurred: return "errorOccurred"
    case .endEncountered: return "endEncountered"
    default: return "event(\(event.rawValue))"
    }
}

/// Creates a connected pair through the API under test, as Apple-platform code does.
func bridgeStreams(host: String, port: Int) -> (InputStream, OutputStream) {
    var input: InputStream?
    var output: OutputStream?
    Stream.getStreamsToHost(withName: host, port: port, inputStream: &input, outputStream: &output)
    return (input!, output!)
}

/// Reads everything available now from `input`, appending to `bytes`; returns the last read's result.
@discardableResult
func bridgeReadAvailable(_ input: InputStream, into bytes: inout [UInt8]) -> Int {
    var buffer = [UInt8](repeating: 0, count: 64 * 1024)
    var result = 0
    repeat {
        result = input.read(&buffer, maxLength: buffer.count)
        if result > 0 { bytes += buffer[0..<result] }
    } while result > 0 && input.hasBytesAvailable
    return result
}

// MARK: - The peer

/// A loopback TCP server for the bridge tests: `onAccept` receives each connection on `queue`.
///
/// Threading: all state is confined to `queue`; `stop()` hops there.
final class BridgeTestServer: @unchecked Sendable {
    let queue = DispatchQueue(label: "BridgeTestServer")
    private let listener: SocketListener
    private var channels: [SocketChannel] = []

    /// Listens on `host` (a numeric address) with an OS-chosen port.
    init(host: String = "127.0.0.1", onAccept: @escaping (BridgeTestServer, Socket) -> Void) throws {
        listener = try SocketListener(host: host, port: 0)
        let listener = listener
        queue.sync {
            listener.start(queue: queue) { [unowned self] socket in onAccept(self, socket) }
        }
    }

    var port: Int { listener.port }

    /// Keeps `channel` open until `stop()`. Call on `queue`.
    func keep(_ channel: SocketChannel) {
        channels.append(channel)
    }

    /// Closes the listener and every kept channel.
    func stop() {
        queue.sync {
            listener.close()
            for channel in channels { channel.close() }
            channels = []
        }
    }

    /// Echoes every byte back, pausing its reads while more than 4 MiB wait to be sent, and
    /// finishes sending (FIN) once the client finished sending.
    static func echo(_ server: BridgeTestServer, _ socket: Socket) {
        let channel = SocketChannel(socket: socket, queue: server.queue)
        channel.onBytes = { [unowned channel] bytes in
            channel.write(ByteChunk(copying: bytes))
            if channel.outboundBytes > 4 << 20 { channel.pauseReading() }
        }
        channel.onDrained = { [unowned channel] in channel.resumeReading() }
        channel.onEndOfInput = { [unowned channel] in channel.shutdownWrite() }
        server.keep(channel)
        channel.start()
    }

    /// Sends `text`, then finishes sending (FIN) and keeps reading until the client closes.
    static func sendThenFinish(_ text: String) -> (BridgeTestServer, Socket) -> Void {
        { server, socket in
            let channel = SocketChannel(socket: socket, queue: server.queue)
            server.keep(channel)
            channel.start()
            channel.write(ByteChunk(Array(text.utf8)))
            channel.shutdownWrite()
        }
    }

    /// Resets the connection at once: `SO_LINGER` 0 makes `close` send RST instead of FIN.
    static func reset(_ server: BridgeTestServer, _ socket: Socket) {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(socket.descriptor, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        socket.close()
    }
}

/// A local port on which nothing listens: bound but not listening, so a connect is refused, and
/// held by the returned socket so nobody else takes it meanwhile.
func bridgeRefusingPort(ip: String = "127.0.0.1") throws -> (Socket, Int) {
    let address = SocketAddress(ip: ip, port: 0)!
    let socket = try Socket(family: address.family)
    try socket.bind(to: address)
    return (socket, try socket.localAddress().port)
}

// MARK: - Descriptors and CPU


/// CPU time the calling thread has used, in seconds.
func bridgeThreadCPUTime() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}
