import ChatProtocol

/// Names one connection for as long as it is open.
///
/// A small index (a slot in the server's connection table) rather than a random token, so that the
/// fan-out hot path finds a recipient by array index instead of hashing. The server hands out the
/// slot and reuses it only after the connection has fully closed.
public struct ClientID: Hashable, Sendable, CustomStringConvertible {
    /// The slot number.
    public var slot: Int

    /// Wraps a slot number.
    public init(_ slot: Int) { self.slot = slot }

    /// The slot as a decimal number, for logs.
    public var description: String { String(slot) }
}

/// The two clocks the chat logic reads, passed in with every event so tests can control time.
public struct ServerTime: Sendable, Equatable {
    /// Milliseconds since the Unix epoch: the `time` stamped on deliveries.
    public var wallMillis: UInt64
    /// Milliseconds on a monotonic clock: what timeouts and the rate limiter measure.
    public var uptimeMillis: UInt64

    /// Makes a time from both clocks.
    public init(wallMillis: UInt64, uptimeMillis: UInt64) {
        self.wallMillis = wallMillis
        self.uptimeMillis = uptimeMillis
    }
}

/// Why a connection ends, and what (if anything) the server tells the client before closing.
public struct Disconnection: Sendable, Equatable {
    /// The code of the fatal `error` sent before closing; nil sends none (the client said goodbye
    /// or is already gone).
    public var code: ErrorCode?
    /// The frame at fault, for the `error` frame.
    public var frameType: FrameType
    /// A human-readable reason: the `error`'s reason, the `quit` reason others see, and the log line.
    public var reason: String

    /// Describes a disconnection.
    public init(code: ErrorCode?, frameType: FrameType = .none, reason: String) {
        self.code = code
        self.frameType = frameType
        self.reason = reason
    }

    /// The fatal `error` frame to send, if any.
    public var errorFrame: Frame? {
        code.map { .error(code: $0, fatal: true, frameType: frameType, reason: reason) }
    }
}

/// What the chat logic asks the I/O layer to do, in order.
public enum ChatAction: Sendable, Equatable {
    /// Send `frame` to one client.
    case send(Frame, to: ClientID)
    /// Send `frame` to every client in `recipients`, in this order; encode it once.
    case broadcast(Frame, to: [ClientID])
    /// Send `frames`, which other clients get alike, to one client; encode them once for all.
    case sendShared(SharedFrames, to: ClientID)
    /// The client is no longer part of the chat: send the disconnection's `error` frame if it has
    /// one, then close. `nick` is who it was, for the log line (nil before the handshake).
    case disconnect(ClientID, Disconnection, nick: String?)
}

/// Frames that many clients receive alike, such as a room's history replay: the chat logic builds
/// them once, and the server encodes them once and keeps the bytes here for the next client, so
/// a thousand joiners cost one encoding, not a thousand.
///
/// `@unchecked Sendable`: `encoding` is set and read only on the server's queue; `frames` never
/// changes.
public final class SharedFrames: @unchecked Sendable, Equatable {
    /// The frames, in order.
    public let frames: [Frame]
    /// What the I/O layer encoded the frames into, once it has (the server keeps its byte chunks
    /// here). Opaque, so that the chat logic knows nothing of the I/O layer's buffers.
    package var encoding: Any?

    /// Wraps `frames`.
    public init(_ frames: [Frame]) {
        self.frames = frames
    }

    /// Equal when the frames are: what tests compare.
    public static func == (left: SharedFrames, right: SharedFrames) -> Bool {
        left.frames == right.frames
    }
}
