import DequeModule
import SocketCore

/// Connections refused at the door, closing without a channel. Each has been sent its error frame
/// and end of stream; it waits here, as a bare descriptor, until the client closes its side (its
/// input is read and dropped on every sweep) or its deadline passes. At most `capacity` wait at
/// once: the oldest is closed early to make room.
///
/// Why wait at all: closing a socket whose input has not all been read sends a reset, and a client
/// whose data is still arriving can lose the refusal it has not read yet. Why not a channel: a
/// reconnect loop refused thousands of times a second would cost the event loop two Dispatch
/// sources per attempt, time everyone else waits for.
///
/// Ownership: owns every socket added until it closes it. Threading: the server's queue.
struct RefusedSockets {
    private struct Waiting {
        let socket: Socket
        let deadline: UInt64
    }

    private var waiting = Deque<Waiting>()
    /// How many may wait at once, each holding a descriptor.
    let capacity: Int

    init(capacity: Int = 256) {
        self.capacity = capacity
    }

    /// How many are waiting.
    var count: Int { waiting.count }

    /// Lets `socket` wait until `deadline` (monotonic milliseconds), closing the oldest first if
    /// all places are taken.
    mutating func add(_ socket: Socket, until deadline: UInt64) {
        if waiting.count >= capacity, let oldest = waiting.popFirst() { oldest.socket.close() }
        waiting.append(Waiting(socket: socket, deadline: deadline))
    }

    /// Reads and drops what each client sent, and closes the sockets whose client has closed or
    /// failed, or whose deadline has passed.
    mutating func sweep(now: UInt64, scratch: UnsafeMutableRawBufferPointer) {
        guard !waiting.isEmpty else { return }
        var kept = Deque<Waiting>()
        for entry in waiting {
            if now < entry.deadline, Self.stillOpen(entry.socket, scratch: scratch) {
                kept.append(entry)
            } else {
                entry.socket.close()
            }
        }
        waiting = kept
    }

    /// Closes every waiting socket.
    mutating func closeAll() {
        for entry in waiting { entry.socket.close() }
        waiting.removeAll()
    }

    /// Reads `socket` until it would block; false at end of stream or on an error. Bounded, so a
    /// client that keeps sending cannot hold the sweep: it is closed at its deadline.
    static func stillOpen(_ socket: Socket, scratch: UnsafeMutableRawBufferPointer) -> Bool {
        for _ in 0..<4 {
            switch try? socket.read(into: scratch) {
            case .done(let count)? where count > 0: continue
            case .wouldBlock?: return true
            default: return false
            }
        }
        return true
    }
}
