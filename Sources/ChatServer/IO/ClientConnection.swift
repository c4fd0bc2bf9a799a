import ChatCore
import ChatProtocol
import SocketCore

/// The I/O side of one client: its channel, its frame decoder, and where it is in closing.
///
/// Kept small on purpose — ten thousand idle ones must fit in a few tens of megabytes — so chat
/// state lives in `ChatCore` and the read buffer is shared by the server. Used only on the server's
/// queue.
final class ClientConnection {
    /// Where the connection is in its life.
    enum Phase {
        /// Reading and writing normally.
        case active
        /// No longer part of the chat: input is discarded, the write side shuts down once queued
        /// bytes have left, and the channel is closed when the peer closes or at `deadline`
        /// (uptime milliseconds).
        case closing(deadline: UInt64)
        /// The descriptor is closed.
        case closed
    }

    let id: ClientID
    /// A number unique for the server's lifetime (slots are reused), for logs.
    let serial: UInt64
    /// The peer's IP address, for logs and limits.
    let address: String
    let channel: SocketChannel
    @exclusivity(unchecked) var decoder: FrameDecoder
    // Every stored property is used on the server's queue only, several times per delivery,
    // never with overlapping accesses: run-time exclusivity checks would buy nothing but a
    // thread-local lookup each (`ChatServer`'s fields say more).
    // Ten thousand idle connections keep ten thousand of these: the flags follow `phase` to fill
    // the padding after its tag, the two optional times are stored without an Optional's extra
    // byte (and its padding), and the rare departure is boxed.
    @exclusivity(unchecked) var phase = Phase.active
    /// Whether the client completed the handshake (its disconnection is then always logged).
    @exclusivity(unchecked) var welcomed = false
    /// Whether the client's requests wait (its connection is not read, its decoded-but-unserved
    /// frames stay in the decoder) because too much is queued for it.
    @exclusivity(unchecked) var requestsPaused = false
    /// Whether the client's requests wait (its connection is not read) because the storage
    /// writer lags: what it would say could not be acknowledged before the backlog commits.
    @exclusivity(unchecked) var waitingForWriter = false
    /// Whether the client's requests wait (its connection is not read) for the answer to an
    /// earlier one: a read of the store (a join of a room not in memory, a page of older
    /// history), or the cluster's — a nick claim or a join, whose outcome later requests depend
    /// on, or a read, one at a time — or, in a cluster, it is let go and waits for the answers
    /// it is owed (`ChatCore.endSession`).
    @exclusivity(unchecked) var waitingForAnswer = false
    /// Whether the connection is in the server's list of channels to flush.
    @exclusivity(unchecked) var isDirty = false
    /// When the oldest frame not yet handed to the kernel was queued, as the turn's flush time
    /// (uptime nanoseconds); 0 when everything has gone, or metrics are off.
    @exclusivity(unchecked) var queuedSince: UInt64 = 0
    /// Whether bytes arrived since the last tick; an idle decoder is replaced to give back its buffer.
    @exclusivity(unchecked) var readSinceTick = false
    /// Whether the decoder may hold a grown buffer.
    @exclusivity(unchecked) var decoderHasGrown = false
    /// Bytes of replies to this client that its queue holds for a commit (durable mode): they
    /// count against the reply high-water mark as if sent, or a client that never reads could
    /// have the server prepare replies without bound while commits are in flight. (Room events
    /// held for it do not: they are not its requests' doing.)
    @exclusivity(unchecked) var heldReplyBytes = 0
    /// `throttledUntil`, or `UInt64.max` for nil (an uptime in milliseconds never gets there).
    @exclusivity(unchecked) private var storedThrottledUntil = UInt64.max
    /// `lagSince`, or `UInt64.max` for nil.
    @exclusivity(unchecked) private var storedLagSince = UInt64.max
    @exclusivity(unchecked) private var departureBox: DepartureBox?

    /// Until when (uptime milliseconds) the client's requests wait, its connection not read,
    /// because its address has used its shared rate; nil when they do not.
    var throttledUntil: UInt64? {
        get { storedThrottledUntil == .max ? nil : storedThrottledUntil }
        set { storedThrottledUntil = newValue ?? .max }
    }

    /// Since when (uptime milliseconds) its queue has stayed above the lag threshold; nil while
    /// it is below.
    var lagSince: UInt64? {
        get { storedLagSince == .max ? nil : storedLagSince }
        set { storedLagSince = newValue ?? .max }
    }

    /// Set when the chat has let the client go but its farewell is held for a commit: it is read
    /// no more, and is closed at the deadline whether or not the commit has landed.
    var departure: Departure? {
        get { departureBox?.departure }
        set { departureBox = newValue.map(DepartureBox.init) }
    }

    init(id: ClientID, serial: UInt64, address: String, channel: SocketChannel, maxFrameSize: Int) {
        self.id = id
        self.serial = serial
        self.address = address
        self.channel = channel
        decoder = FrameDecoder(maxFrameSize: maxFrameSize)
    }

    var isActive: Bool {
        if case .active = phase { return true }
        return false
    }

    /// Ends the session from the server's side: queues `farewell` (if any) behind what is already
    /// queued, and shuts down the write side after it; the channel stays open for reading until
    /// the peer closes or `deadline` passes.
    func beginClosing(farewell: ByteChunk?, deadline: UInt64) {
        guard isActive else { return }
        phase = .closing(deadline: deadline)
        // The decoder's partial frame is of no more use.
        decoder = FrameDecoder(maxFrameSize: decoder.maxFrameSize)
        // What its queue still holds for a commit is dropped: it leaves without it, as it
        // leaves when the commit does not land by its linger deadline.
        channel.discardHeld()
        channel.holdsNewBytes = false
        heldReplyBytes = 0
        if let farewell { channel.enqueue(farewell) }
        channel.shutdownWrite()
    }

    /// Reads while the client's requests are served; pauses while they wait, for its queue to
    /// drain, for its address's rate, for the storage writer, or for an answer.
    func updateReading() {
        guard isActive else { return }
        if requestsPaused || throttledUntil != nil || waitingForWriter || waitingForAnswer || departure != nil {
            channel.pauseReading()
        } else {
            channel.resumeReading()
        }
    }

    /// Replaces an idle, empty decoder and gives back an empty outbound queue's storage, so that
    /// an idle connection holds neither a receive buffer nor send-queue capacity.
    func releaseIdleBuffers() {
        if readSinceTick {
            readSinceTick = false
        } else if decoderHasGrown, decoder.bufferedByteCount == 0 {
            decoder = FrameDecoder(maxFrameSize: decoder.maxFrameSize)
            decoderHasGrown = false
        }
        channel.releaseIdleMemory()
    }
}

/// Holds a `Departure` outside the connection, which has one only while it leaves.
private final class DepartureBox {
    let departure: Departure

    init(_ departure: Departure) { self.departure = departure }
}

/// A client the chat has let go, waiting for the commit that its farewell is held behind.
struct Departure {
    /// Why it was let go.
    var disconnection: Disconnection
    /// Its nick, for the log line.
    var nick: String?
    /// When (uptime milliseconds) it is closed even if the commit has not landed.
    var deadline: UInt64
}
