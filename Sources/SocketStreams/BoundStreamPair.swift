#if os(Linux)
import Foundation
import Glibc

/// The in-memory ring buffer behind one `Stream.getBoundStreams` pair: what the output stream
/// writes, the input stream reads, with at most `capacity` bytes in between.
///
/// Events follow the socket pair's rules: `.hasBytesAvailable` after every write and after every
/// read that leaves bytes behind, `.hasSpaceAvailable` after every read and after every write that
/// leaves room, `.endEncountered` once the output is closed and the buffer drained. A read from an
/// empty buffer blocks until bytes come or the output closes; a write into a full buffer blocks
/// until there is room or the input closes (then it fails with `EPIPE`), as on Apple platforms.
///
/// Ownership and threading: the pair owns its buffer. Every method may be called from any thread;
/// `condition` protects all mutable state.
final class BoundStreamPair: StreamPairCore, @unchecked Sendable {
    private let capacity: Int
    private let storage: UnsafeMutablePointer<UInt8>
    private let inputEvents = StreamEventDelivery()
    private let outputEvents = StreamEventDelivery()

    private let condition = NSCondition()
    /// Index of the oldest unread byte.
    private var head = 0
    private var count = 0
    private var inputStatus = Stream.Status.notOpen
    private var outputStatus = Stream.Status.notOpen
    private var outputError: SocketError?

    /// A pair whose buffer holds `capacity` bytes; `capacity` must be positive.
    init(capacity: Int) {
        precondition(capacity > 0, "getBoundStreams needs a positive buffer size")
        self.capacity = capacity
        storage = .allocate(capacity: capacity)
    }

    deinit {
        storage.deallocate()
    }

    /// `false`: an in-memory pair has no property to set.
    func setProperty(_ value: AnyObject?, forKey key: Stream.PropertyKey) -> Bool {
        false
    }

    func events(for side: StreamSide) -> StreamEventDelivery {
        side == .input ? inputEvents : outputEvents
    }

    func status(_ side: StreamSide) -> Stream.Status {
        condition.withLock { side == .input ? inputStatus : outputStatus }
    }

    func error(_ side: StreamSide) -> Error? {
        condition.withLock { side == .input ? nil : outputError?.nsError }
    }

    func open(_ side: StreamSide) {
        condition.withLock {
            switch side {
            case .input:
                guard inputStatus == .notOpen else { return }
                if count == 0 && outputStatus == .closed {
                    inputStatus = .atEnd
                    inputEvents.post([.openCompleted, .endEncountered])
                } else {
                    inputStatus = .open
                    inputEvents.post(count > 0 ? [.openCompleted, .hasBytesAvailable] : .openCompleted)
                }
            case .output:
                guard outputStatus == .notOpen else { return }
                outputStatus = .open
                outputEvents.post(count < capacity ? [.openCompleted, .hasSpaceAvailable] : .openCompleted)
            }
        }
    }

    func close(_ side: StreamSide) {
        condition.withLock {
            defer { condition.broadcast() }
            switch side {
            case .input:
                inputStatus = .closed
            case .output:
                guard outputStatus != .closed else { return }
                outputStatus = .closed
                if inputStatus == .open && count == 0 { reachedEndLocked() }
            }
        }
    }

    private func reachedEndLocked() {
        inputStatus = .atEnd
        inputEvents.post(.endEncountered)
    }

    func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength: Int) -> Int {
        condition.withLock {
            while true {
                switch inputStatus {
                case .atEnd: return 0
                case .open: break
                default: return -1
                }
                guard maxLength > 0 else { return maxLength == 0 ? 0 : -1 }
                if count > 0 {
                    let taken = min(count, maxLength)
                    let first = min(taken, capacity - head)
                    buffer.update(from: storage + head, count: first)
                    (buffer + first).update(from: storage, count: taken - first)
                    head = (head + taken) % capacity
                    count -= taken
                    if outputStatus == .open { outputEvents.post(.hasSpaceAvailable) }
                    if count > 0 {
                        inputEvents.post(.hasBytesAvailable)
                    } else if outputStatus == .closed {
                        reachedEndLocked()
                    }
                    condition.broadcast()
                    return taken
                }
                if outputStatus == .closed {
                    reachedEndLocked()
                    return 0
                }
                condition.wait()
            }
        }
    }

    func write(_ buffer: UnsafePointer<UInt8>, maxLength: Int) -> Int {
        condition.withLock {
            while true {
                guard outputStatus == .open else { return -1 }
                guard inputStatus != .closed else {
                    outputStatus = .error
                    outputError = SocketError(.posix(EPIPE), operation: "write to", target: "bound input stream")
                    outputEvents.post(.errorOccurred)
                    return -1
                }
                guard maxLength > 0 else { return maxLength == 0 ? 0 : -1 }
                if count < capacity {
                    let stored = min(capacity - count, maxLength)
                    let tail = (head + count) % capacity
                    let first = min(stored, capacity - tail)
                    (storage + tail).update(from: buffer, count: first)
                    storage.update(from: buffer + first, count: stored - first)
                    count += stored
                    if inputStatus == .open { inputEvents.post(.hasBytesAvailable) }
                    if count < capacity { outputEvents.post(.hasSpaceAvailable) }
                    condition.broadcast()
                    return stored
                }
                condition.wait()
            }
        }
    }

    var hasBytesAvailable: Bool {
        condition.withLock { inputStatus == .open && (count > 0 || outputStatus == .closed) }
    }

    var hasSpaceAvailable: Bool {
        condition.withLock { outputStatus == .open && (count < capacity || inputStatus == .closed) }
    }

    func stillHolds(_ event: Stream.Event, for side: StreamSide) -> Bool {
        switch event {
        case .openCompleted: return true
        case .hasBytesAvailable: return side == .input && hasBytesAvailable
        case .hasSpaceAvailable: return side == .output && hasSpaceAvailable
        case .errorOccurred: return status(side) == .error
        case .endEncountered: return side == .input && status(side) == .atEnd
        default: return false
        }
    }

    /// No property is meaningful for an in-memory pair.
    func property(forKey key: Stream.PropertyKey, side: StreamSide) -> AnyObject? {
        nil
    }
}
#endif
