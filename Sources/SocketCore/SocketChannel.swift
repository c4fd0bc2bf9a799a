import CSocketShims
import Dispatch
import DequeModule
import Glibc
import SocketTLS

/// Scratch memory that channels read into before handing the bytes to their consumer.
///
/// Reading into shared scratch instead of a buffer per connection is what keeps an idle connection
/// small. Share one `ReadBuffer` only among channels whose handlers run on the same serial queue:
/// the buffer is reused by the next read, so consumers copy what they keep.
public final class ReadBuffer: @unchecked Sendable {
    /// The scratch memory; owned by this object.
    public let memory: UnsafeMutableRawBufferPointer

    /// Allocates `capacity` bytes of scratch.
    public init(capacity: Int = 64 * 1024) {
        memory = .allocate(byteCount: capacity, alignment: 16)
    }

    deinit { memory.deallocate() }
}

/// A connected socket driven by the epoll set of its serial queue (`SocketPoller`).
///
/// Ownership: the channel owns its `Socket`. It closes the descriptor exactly once, after taking it
/// out of the epoll set, then calls `onClosed` once; for a started channel on a later turn of the
/// queue, never from inside `close()`.
///
/// Threading: every method and property must be used on `queue`, and every callback runs there.
/// (Set the callbacks before `start()`.) This is what lets the server keep all chat state on one
/// queue without locks.
///
/// Writes are queued as `ByteChunk`s, or ranges of them, and leave in gather writes (`sendmsg`
/// with up to 64 buffers): `enqueue` many, then `flush` once. A range that continues the last one
/// queued, in the same chunk, extends it: a room's events, encoded one after another into a shared
/// chunk, take one queue slot however many there are (`enqueue(_:bytes:)`). When the kernel's send
/// buffer is full the channel waits for the epoll set to report the socket writable and sends the
/// rest then. `outboundBytes` tells the owner how much is waiting and `outboundCost` what it pins
/// in memory, so the owner can bound it.
///
/// An idle channel is small on purpose (a server keeps tens of thousands): no Dispatch source of its
/// own, no buffer (reads go to the shared `ReadBuffer`), and `releaseIdleMemory()` gives back the
/// outbound queue's storage once it is empty.
///
/// Half-close: when the peer ends its input, the channel calls `onEndOfInput` and goes on
/// writing; once the owner has shut down the sending side (`shutdownWrite`) and everything queued
/// has left, the connection is finished both ways and the channel closes itself.
///
/// TLS: a channel made with a `TLSSession` speaks TLS over the socket and plaintext to its owner.
/// `onBytes` sees only decrypted bytes, `enqueue` takes plaintext (which waits until the handshake
/// completes), `outboundBytes` counts plaintext not yet encrypted plus ciphertext not yet sent, the
/// peer's close_notify is end of input and `shutdownWrite` sends ours before the TCP shutdown. A
/// TLS failure (a refused handshake, a plain-text peer, a TCP end without close_notify) closes the
/// channel with a `SocketError` whose code is `.tls(TLSError)`, after one attempt to send the alert
/// that tells the peer why. docs/TLS.md has the design.
public final class SocketChannel: @unchecked Sendable {
    /// The queue all handlers run on and all calls must come from.
    public let queue: DispatchQueue
    /// A name for the peer, used in error messages and logs.
    public let label: String

    /// Called with bytes as they arrive. The buffer is valid only during the call.
    public var onBytes: ((UnsafeRawBufferPointer) -> Void)?
    /// Called once when the peer has shut down its sending side. Writing still works; when this is
    /// `nil` the channel closes itself instead.
    public var onEndOfInput: (() -> Void)?
    /// Called when the outbound queue has emptied after the kernel had pushed back (backpressure over).
    public var onDrained: (() -> Void)?
    /// Called once, after the descriptor is closed, with the error that closed it (`nil` when the
    /// owner closed it or the peer finished cleanly).
    public var onClosed: ((SocketError?) -> Void)?
    /// The TLS session the channel speaks through, or `nil` for plain TCP. Read its negotiated
    /// version and peer certificate on `queue`; the channel alone feeds it bytes.
    public let tls: TLSSession?

    private enum State: UInt8 { case idle, open, closing, closed }

    private let socket: Socket
    private let readBuffer: ReadBuffer
    /// The epoll set the descriptor is in from `start()` until `close()`.
    @exclusivity(unchecked) private var poller: SocketPoller?
    // The flags sit together so that they pack into one word of the object. Like every stored
    // property the read and write paths touch, they are used on `queue` only, never with
    // overlapping accesses: run-time exclusivity checks (a thread-local lookup each) would buy
    // nothing there (see `outbound`).
    @exclusivity(unchecked) private var state = State.idle
    @exclusivity(unchecked) private var readPaused = false
    @exclusivity(unchecked) private var readEnded = false
    @exclusivity(unchecked) private var waitingForWritable = false
    @exclusivity(unchecked) private var writeShutdownRequested = false
    @exclusivity(unchecked) private var writeShutDown = false
    // A ring buffer: a sent chunk leaves the queue (and is released) at once, and the storage is
    // reused, so a queue that never fully drains does not grow. The write path runs once per
    // queued chunk (millions of times a second in the server), and every access here happens on
    // `queue` without overlapping, so the run-time exclusivity checks, about 6% of the server's
    // CPU in a profile, buy nothing.
    @exclusivity(unchecked) private var outbound = Deque<QueuedBytes>()
    /// Bytes of the first queued range already sent.
    @exclusivity(unchecked) private var headOffset = 0
    /// The chunk of the last slot while ranges that continue it are added without writing the
    /// slot (`append`'s first test), and where that slot really ends (`tailEnd`): nil when the
    /// slot in `outbound` is as it stands. A room's events reach a member's queue one after the
    /// other in the same segment, and extending the slot in the ring each time — an index
    /// translated, its storage checked for uniqueness, twice — was most of what a delivery cost.
    /// Whatever reads `outbound` calls `settleTail()` first.
    @exclusivity(unchecked) private var tailChunk: ObjectIdentifier?
    @exclusivity(unchecked) private var tailEnd = 0

    /// Bytes queued but not yet accepted by the kernel: with TLS, plaintext not yet encrypted plus
    /// ciphertext not yet sent.
    public var outboundBytes: Int {
        guard let tls else { return queuedBytes }
        return queuedBytes + tls.pendingCiphertext.count
    }
    /// What the queued chunks pin in memory, counting each chunk's whole cost
    /// (`ByteChunk.cost(ofBytes:)`) and its queue slot, as if no other queue shared it; with TLS,
    /// plus the ciphertext waiting to be sent. (Not the capacity of the session's buffers, which
    /// stays allocated until a queue drains completely: an owner that pauses a busy client above
    /// one mark and resumes it below another would otherwise keep it paused until all was sent.
    /// `ciphertextMeter` counts the capacity for memory totals.)
    public var outboundCost: Int {
        guard let tls else { return queuedCost }
        return queuedCost + tls.pendingCiphertext.count
    }
    /// How many slots the queue holds: one per chunk queued, or per run of ranges that continue
    /// one another (`enqueue(_:bytes:)`).
    public var queuedSlots: Int { outbound.count }
    /// Bytes of the queued chunks not yet sent (with TLS: not yet encrypted).
    @exclusivity(unchecked) private var queuedBytes = 0
    /// The last bytes of the queue, which are not sent until `release(_:)` lets them go: what an
    /// owner queued while `holdsNewBytes` (or behind other held bytes). A server that delivers a
    /// log's events once the log has made them durable queues them at once and releases them
    /// when the commit lands; until then they cost what queued bytes cost, and nothing leaves.
    @exclusivity(unchecked) public private(set) var heldBytes = 0
    /// Whether bytes queued from now on are held (`heldBytes`). Bytes queued behind held ones are
    /// held whatever this says: what leaves is always a prefix of the queue.
    @exclusivity(unchecked) public var holdsNewBytes = false {
        didSet { holds = holdsNewBytes || heldBytes > 0 }
    }
    /// `holdsNewBytes || heldBytes > 0`, kept as one flag: `enqueue` looks at it per member and
    /// event.
    @exclusivity(unchecked) private var holds = false

    /// `outboundCost` without the held bytes: what the peer's reading would drain.
    public var sendableCost: Int { outboundCost - heldBytes }
    /// What the queued chunks pin: `outboundCost` without TLS's buffers.
    @exclusivity(unchecked) private var queuedCost = 0
    /// Plaintext taken from the queue per `encrypt`: about what one `send` takes, so ciphertext
    /// does not pile up ahead of a slow socket (it would only double the queue's memory).
    static let encryptBatchBytes = 64 * 1024

    /// What one queue slot costs beyond its chunk: the reference and the range in the ring buffer.
    public static let slotBytes = MemoryLayout<QueuedBytes>.stride

    /// Counts this queue's slots (`slotBytes` each) while they are taken, so an owner of many
    /// channels can add up what queues cost beyond the chunks themselves (which a chunk's own
    /// `MemoryMeter` counts once, however many queues share it). Updated once per `flush`, not per
    /// chunk, to stay off the hot path. Set it before `start()`.
    @exclusivity(unchecked) public var slotMeter: MemoryMeter?
    /// Counts the TLS session's ciphertext buffers (`TLSSession.bufferedCiphertextCapacity`) while
    /// they exist, so an owner of many channels can add them to what its queues pin: up to one
    /// encrypt batch per connection that the peer is not reading. Updated once per `flush`. Set it
    /// before `start()`; ignored without TLS.
    @exclusivity(unchecked) public var ciphertextMeter: MemoryMeter?
    /// The ciphertext buffer bytes `ciphertextMeter` was last told of.
    @exclusivity(unchecked) private var reportedCiphertextBytes = 0

    /// Slot bytes taken or given back since the meter was last told.
    @exclusivity(unchecked) private var unreportedSlotBytes = 0

    /// Wraps a connected socket; nothing happens until `start()`.
    /// - Parameter readBuffer: scratch to read into; share one among channels on the same queue.
    /// - Parameter tls: a session to speak TLS through (from `TLSContext.makeServerSession` for an
    ///   accepted socket, `makeClientSession` for a connected one); the channel owns it from now.
    public init(socket: Socket, queue: DispatchQueue, readBuffer: ReadBuffer? = nil, tls: TLSSession? = nil) {
        self.socket = socket
        self.queue = queue
        self.label = socket.label
        self.readBuffer = readBuffer ?? ReadBuffer()
        self.tls = tls
    }

    /// Whether the channel is open (started and not closing).
    public var isOpen: Bool { state == .open }

    /// Whether the peer has ended its input (end of stream arrived, or with TLS its close_notify).
    public var inputEnded: Bool { readEnded }

    /// Whether the channel speaks TLS and its handshake has not completed yet.
    public var isHandshaking: Bool {
        guard let tls, case .handshaking = tls.state else { return false }
        return true
    }

    /// Starts reading. Call once, on `queue`. If the descriptor cannot join the queue's epoll set
    /// (out of memory, or past `/proc/sys/fs/epoll/max_user_watches`), the channel closes with
    /// that error.
    public func start() {
        assertOnQueue()
        precondition(state == .idle, "start() called twice")
        state = .open
        do {
            let poller = try SocketPoller.of(queue)
            try poller.add(self, descriptor: socket.descriptor)
            self.poller = poller
        } catch {
            close(error)
            return
        }
        // A client's ClientHello is already waiting in the session.
        if tls != nil { flush() }
    }

    /// Takes the events the epoll set reported for the descriptor (`SocketPoller` calls it, on
    /// `queue`). Each change is reported once (edge-triggered): input, a hang-up or an error sends
    /// the channel reading until `EAGAIN` or end of stream, unless paused; room to write, a
    /// hang-up or an error resumes a write that waits.
    func handleReadiness(_ events: UInt32) {
        let input = UInt32(SOCKETCORE_EPOLLIN | SOCKETCORE_EPOLLRDHUP | SOCKETCORE_EPOLLHUP | SOCKETCORE_EPOLLERR)
        let output = UInt32(SOCKETCORE_EPOLLOUT | SOCKETCORE_EPOLLHUP | SOCKETCORE_EPOLLERR)
        // Input first: bytes the peer sent before it reset are delivered before the reset is.
        if events & input != 0 { readAvailable() }
        if events & output != 0 { writable() }
    }

    // MARK: Reading

    /// Stops delivering bytes until `resumeReading()`; the kernel buffers, then the peer's writes stall.
    public func pauseReading() {
        assertOnQueue()
        guard !readPaused, !readEnded else { return }
        // Readiness reported meanwhile is ignored; `resumeReading` reads whatever it announced.
        readPaused = true
    }

    /// Delivers bytes again after `pauseReading()`.
    public func resumeReading() {
        assertOnQueue()
        guard readPaused, !readEnded else { return }
        readPaused = false
        // What arrived while paused was reported once, and will not be again.
        queue.async { [self] in readAvailable() }
    }

    /// Reads what is waiting now, as a readiness report would. For a caller about to judge the
    /// peer by its silence (a heartbeat's deadline): on a busy queue its timer may run before the
    /// report of bytes that came in time. Call on `queue`.
    public func readWaiting() {
        assertOnQueue()
        readAvailable()
    }

    /// Reads until the socket says `EAGAIN` or end of stream, at most 8 reads per turn so one busy
    /// peer cannot starve the others on the queue.
    ///
    /// It never stops early on the hope of another event: the epoll set reports each change of
    /// readiness once (edge-triggered), so bytes or an end of stream left unread would wait until
    /// the peer sends more, which a peer that has finished never does. For the same reason a turn
    /// that runs out of budget continues through the queue, not the epoll set.
    private func readAvailable() {
        if let tls { return readAvailable(through: tls) }
        for _ in 0..<8 {
            guard state == .open, !readPaused, !readEnded else { return }
            let result: IOResult<Int>
            do {
                result = try socket.read(into: readBuffer.memory)
            } catch {
                close(error)
                return
            }
            switch result {
            case .wouldBlock:
                return
            case .done(0):
                endOfInput()
                return
            case .done(let count):
                onBytes?(UnsafeRawBufferPointer(rebasing: readBuffer.memory[0..<count]))
            }
        }
        queue.async { [self] in readAvailable() }
    }

    /// `readAvailable()` for a TLS channel: plaintext already inside the session first (left there
    /// by a pause), then ciphertext from the socket, each read fed to the session and decrypted
    /// into the same scratch. Replies the session makes on its own (handshake messages, key
    /// updates, alerts) are flushed at once.
    private func readAvailable(through tls: TLSSession) {
        for _ in 0..<8 {
            guard deliverPlaintext(from: tls) else { return }
            let result: IOResult<Int>
            do {
                result = try socket.read(into: readBuffer.memory)
            } catch {
                close(error)
                return
            }
            do throws(TLSError) {
                switch result {
                case .wouldBlock:
                    return
                case .done(0):
                    // The session decides: end of input after a close_notify, truncation without.
                    if try tls.receiveEndOfStream() == .handshakeCompleted { handshakeCompleted() }
                    guard deliverPlaintext(from: tls) else { return }
                    // No close_notify and nothing more: readPlaintext threw `.truncated` above, so
                    // this is reached only while paused or after the channel closed.
                    return
                case .done(let count):
                    if try tls.receive(UnsafeRawBufferPointer(rebasing: readBuffer.memory[0..<count])) == .handshakeCompleted {
                        handshakeCompleted()
                    } else if !tls.pendingCiphertext.isEmpty {
                        flush()
                    }
                }
            } catch {
                fail(error)
                return
            }
        }
        queue.async { [self] in readAvailable() }
    }

    /// Hands the session's plaintext to `onBytes` until it needs more ciphertext; returns whether
    /// the channel may go on reading the socket (open, not paused, input not ended).
    private func deliverPlaintext(from tls: TLSSession) -> Bool {
        while state == .open, !readPaused, !readEnded {
            let read: TLSSession.PlaintextRead
            do {
                read = try tls.readPlaintext(into: readBuffer.memory)
            } catch {
                fail(error)
                return false
            }
            switch read {
            case .bytes(let count):
                onBytes?(UnsafeRawBufferPointer(rebasing: readBuffer.memory[0..<count]))
            case .needsCiphertext:
                if !tls.pendingCiphertext.isEmpty { flush() }
                return state == .open
            case .endOfInput:
                if !tls.pendingCiphertext.isEmpty { flush() }
                if state == .open { endOfInput() }
                return false
            }
        }
        return false
    }

    /// The handshake completed: the plaintext queued meanwhile leaves now.
    private func handshakeCompleted() {
        flush()
    }

    /// Ends the connection over a TLS failure: one attempt to send what the session queued (the
    /// alert that tells the peer why), without waiting for the socket, then close.
    private func fail(_ error: TLSError) {
        if let pending = tls?.pendingCiphertext, !pending.isEmpty {
            _ = try? socket.write(pending)
        }
        close(SocketError.tls(error, target: label))
    }

    private func endOfInput() {
        readEnded = true
        if let onEndOfInput {
            onEndOfInput()
            // Already finished sending (the owner shut it down before the peer's end arrived).
            if writeShutDown { close() }
        } else {
            close()
        }
    }

    // MARK: Writing

    /// Queues `chunk` without sending it yet; call `flush()` after queuing a batch.
    /// Ignored once the channel is closing or writing was shut down.
    public func enqueue(_ chunk: ByteChunk) {
        enqueue(chunk, bytes: 0..<chunk.count)
    }

    /// Queues the bytes `range` of `chunk`, as `enqueue(_:)` queues a whole chunk. A range that
    /// starts where the last queued one ends, in the same chunk, extends that slot instead of
    /// taking one: no reference, no slot, and one buffer of the gather write for the lot.
    ///
    /// The cost counted (`outboundCost`) is the chunk's overhead and a slot once per slot, plus the
    /// bytes of every range, as if no other queue shared the chunk.
    public func enqueue(_ chunk: ByteChunk, bytes range: Range<Int>) {
        append(chunk, bytes: range)
    }

    /// Holds the bytes queued from now on (`holdsNewBytes`) and queues the bytes `range` of
    /// `chunk`, as `enqueue(_:bytes:)` does; returns whether the queue began holding with them.
    /// One call, not the property set from another module then `enqueue`: across modules a
    /// stored property's access is checked at run time whatever its `@exclusivity`, and this is
    /// a path taken per member and event (docs/BENCHMARKS.md, "The durable mark in each queue").
    public func enqueueHeld(_ chunk: ByteChunk, bytes range: Range<Int>) -> Bool {
        let began = !holdsNewBytes
        if began { holdsNewBytes = true }
        append(chunk, bytes: range)
        return began
    }

    /// `enqueue(_:bytes:)`, written once and inlined into both callers: a call per member and
    /// event is what the durable server's fan-out cannot afford twice.
    @inline(__always)
    private func append(_ chunk: ByteChunk, bytes range: Range<Int>) {
        assertOnQueue()
        guard state == .open, !writeShutdownRequested, !range.isEmpty else { return }
        assert(range.lowerBound >= 0 && range.upperBound <= chunk.count)
        queuedBytes += range.count
        if holds { heldBytes += range.count }
        queuedCost += range.count
        if tailChunk == ObjectIdentifier(chunk), tailEnd == range.lowerBound {
            tailEnd = range.upperBound
            return
        }
        settleTail()
        tailChunk = ObjectIdentifier(chunk)
        tailEnd = range.upperBound
        if let last = outbound.last, last.chunk === chunk, last.end == range.lowerBound { return }
        outbound.append(QueuedBytes(chunk: chunk, start: range.lowerBound, end: range.upperBound))
        queuedCost += ByteChunk.overheadBytes + Self.slotBytes
        unreportedSlotBytes += Self.slotBytes
    }

    /// Writes where the last slot ends into `outbound` (`tailChunk`): before anything reads it.
    @inline(__always)
    private func settleTail() {
        guard tailChunk != nil else { return }
        outbound[outbound.count - 1].end = tailEnd
        tailChunk = nil
    }

    private func reportSlots() {
        if let tls, let ciphertextMeter {
            let now = state == .open ? tls.bufferedCiphertextCapacity : 0
            if now != reportedCiphertextBytes {
                ciphertextMeter.add(now - reportedCiphertextBytes)
                reportedCiphertextBytes = now
            }
        }
        guard unreportedSlotBytes != 0 else { return }
        slotMeter?.add(unreportedSlotBytes)
        unreportedSlotBytes = 0
    }

    /// Drops every queued range that has not started to leave, keeping the one partly sent (so
    /// the peer never sees half a frame: a range holds whole frames), and returns how many bytes
    /// were dropped. For an owner that gives up on a peer: it can then queue a last word
    /// (`enqueue`) and shut down.
    @discardableResult
    public func discardUnsent() -> Int {
        assertOnQueue()
        settleTail()
        // The held bytes first: the slot kept below may end with some.
        let held = heldBytes
        discardHeld()
        let keep = headOffset > 0 ? 1 : 0
        guard outbound.count > keep else { return held }
        var dropped = held
        while outbound.count > keep {
            let slot = outbound.removeLast()
            dropped += slot.count
            queuedBytes -= slot.count
            queuedCost -= ByteChunk.cost(ofBytes: slot.count) + Self.slotBytes
            unreportedSlotBytes -= Self.slotBytes
        }
        reportSlots()
        return dropped
    }

    /// Lets the first `count` held bytes go (at most all of them); `flush()` sends them.
    public func release(_ count: Int) {
        assertOnQueue()
        heldBytes -= min(count, heldBytes)
        holds = holdsNewBytes || heldBytes > 0
    }

    /// Drops the held bytes: they leave the queue as if never queued (`holdsNewBytes` is left
    /// as it is). For an owner whose log could not make them durable, or that gives up waiting.
    public func discardHeld() {
        assertOnQueue()
        settleTail()
        var left = heldBytes
        guard left > 0 else { return }
        heldBytes = 0
        holds = holdsNewBytes
        queuedBytes -= left
        while left > 0, !outbound.isEmpty {
            let last = outbound.count - 1
            // Held bytes are never sent: of the first slot, only its unsent part can be held.
            let unsent = outbound[last].count - (last == 0 ? headOffset : 0)
            if unsent <= left {
                let slot = outbound.removeLast()
                left -= unsent
                queuedCost -= ByteChunk.cost(ofBytes: slot.count) + Self.slotBytes
                unreportedSlotBytes -= Self.slotBytes
                if last == 0 { headOffset = 0 }
            } else {
                outbound[last].end -= left
                queuedCost -= left
                left = 0
            }
        }
        reportSlots()
    }

    /// Gives back the outbound queue's storage when nothing is queued: a queue keeps the capacity
    /// its busiest moment needed (the burst of a join, a history replay), which an idle connection
    /// would otherwise carry for as long as it stays. Not done on every drain, where the next
    /// burst would allocate it again at once; an owner calls it for channels gone quiet.
    public func releaseIdleMemory() {
        assertOnQueue()
        if outbound.isEmpty { outbound = Deque() }
    }

    /// Queues `chunk` and sends what the kernel takes now.
    public func write(_ chunk: ByteChunk) {
        enqueue(chunk)
        flush()
    }

    /// Sends queued bytes until the queue is empty or the kernel pushes back.
    public func flush() {
        assertOnQueue()
        settleTail()
        defer { reportSlots() }
        guard state == .open, !waitingForWritable else { return }
        if let tls { return flush(through: tls) }
        while queuedBytes > heldBytes {
            let result: IOResult<Int>
            do {
                result = try sendQueued()
            } catch {
                close(error)
                return
            }
            switch result {
            case .wouldBlock:
                waitForWritable()
                return
            case .done(let written):
                consume(written)
            }
        }
        if writeShutdownRequested, queuedBytes == 0 { shutdownWriteNow() }
    }

    /// Shuts down the sending side once everything queued has left; reading goes on.
    public func shutdownWrite() {
        assertOnQueue()
        guard state == .open, !writeShutdownRequested else { return }
        writeShutdownRequested = true
        if tls != nil {
            // flush sends the close_notify once the queue is empty and the handshake complete.
            flush()
        } else if queuedBytes == 0 {
            shutdownWriteNow()
        }
    }

    /// `flush()` for a TLS channel: send the session's ciphertext; when it is all gone, encrypt the
    /// next batch of queued plaintext (once established); when that is all gone too and the owner
    /// asked for it, queue the close_notify, send it, and only then shut down the socket.
    private func flush(through tls: TLSSession) {
        while state == .open {
            let pending = tls.pendingCiphertext
            if !pending.isEmpty {
                let result: IOResult<Int>
                do {
                    result = try socket.write(pending)
                } catch {
                    close(error)
                    return
                }
                switch result {
                case .wouldBlock:
                    waitForWritable()
                    return
                case .done(let written):
                    tls.consumeCiphertext(written)
                }
                continue
            }
            guard case .established(_, let outputOpen) = tls.state else { return }
            if queuedBytes > heldBytes {
                let consumed: Int
                do {
                    // Held bytes end the queue: a limit short of them keeps them out.
                    consumed = try tls.encrypt(queuedPlaintext, limit: min(Self.encryptBatchBytes, queuedBytes - heldBytes))
                } catch {
                    fail(error)
                    return
                }
                consume(consumed)
                continue
            }
            guard writeShutdownRequested, queuedBytes == 0 else { return }
            if outputOpen {
                tls.closeOutput()
                continue
            }
            shutdownWriteNow()
            return
        }
    }

    /// The queued ranges from the first unsent byte on, for `TLSSession.encrypt`.
    private var queuedPlaintext: some Sequence<UnsafeRawBufferPointer> {
        outbound.indices.lazy.map { [self] index in
            let bytes = outbound[index].bytes
            return index == outbound.startIndex ? UnsafeRawBufferPointer(rebasing: bytes[headOffset...]) : bytes
        }
    }

    private func shutdownWriteNow() {
        guard !writeShutDown else { return }
        writeShutDown = true
        do {
            try socket.shutdownWrite()
        } catch {
            // ENOTCONN: the peer is already gone; the read side reports that.
            if error.errno != ENOTCONN { close(error) }
            return
        }
        // Both directions are finished: nothing is left to do with the connection.
        if readEnded { close() }
    }

    private func sendQueued() throws(SocketError) -> IOResult<Int> {
        let maxVectors = 64
        return try withUnsafeTemporaryAllocation(of: iovec.self, capacity: maxVectors) { vectors throws(SocketError) in
            var count = 0
            var index = 0
            // What may leave: everything but the held bytes at the end.
            var sendable = queuedBytes - heldBytes
            while count < maxVectors, index < outbound.count, sendable > 0 {
                let bytes = outbound[index].bytes
                let skip = index == 0 ? headOffset : 0
                let length = min(bytes.count - skip, sendable)
                vectors[count] = iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress! + skip), iov_len: length)
                sendable -= length
                count += 1
                index += 1
            }
            return try socket.write(vectors: UnsafeMutableBufferPointer(rebasing: vectors[0..<count]))
        }
    }

    private func consume(_ written: Int) {
        queuedBytes -= written
        var remaining = written
        while remaining > 0 {
            let count = outbound[0].count
            let available = count - headOffset
            if remaining >= available {
                remaining -= available
                outbound.removeFirst()
                queuedCost -= ByteChunk.cost(ofBytes: count) + Self.slotBytes
                unreportedSlotBytes -= Self.slotBytes
                headOffset = 0
            } else {
                headOffset += remaining
                remaining = 0
            }
        }
    }

    /// The send that just failed with `EAGAIN` marked the socket short of room, so the kernel
    /// reports it writable once room appears: no registration to change.
    private func waitForWritable() {
        waitingForWritable = true
    }

    private func writable() {
        guard state == .open, waitingForWritable else { return }
        waitingForWritable = false
        flush()
        if state == .open, !waitingForWritable { onDrained?() }
    }

    // MARK: Closing

    /// Closes the channel: drops anything still queued, takes the descriptor out of the epoll set,
    /// and on a later turn of the queue closes the descriptor and calls `onClosed`. Calling it
    /// again does nothing.
    public func close() {
        close(nil)
    }

    private func close(_ reason: SocketError?) {
        assertOnQueue()
        switch state {
        case .closing, .closed:
            return
        case .idle:
            state = .closing
            finishClosing(reason)
        case .open:
            state = .closing
            unreportedSlotBytes -= outbound.count * Self.slotBytes
            reportSlots()
            outbound = Deque()
            tailChunk = nil
            queuedBytes = 0
            heldBytes = 0
            holds = false
            queuedCost = 0
            if let poller {
                poller.remove(self, descriptor: socket.descriptor)
                self.poller = nil
            }
            // Later, as the cancel handlers of Dispatch sources used to run: an owner that closes
            // a channel in the middle of its own bookkeeping is not called back in the middle of it.
            queue.async { [self] in finishClosing(reason) }
        }
    }

    private func finishClosing(_ reason: SocketError?) {
        state = .closed
        socket.close()
        let onClosed = onClosed
        // Drop the callbacks: they usually capture the owner, which usually holds the channel.
        self.onBytes = nil
        self.onEndOfInput = nil
        self.onDrained = nil
        self.onClosed = nil
        onClosed?(reason)
    }

    private func assertOnQueue() {
        assert({ dispatchPrecondition(condition: .onQueue(queue)); return true }())
    }
}

/// A queued range of a chunk: the bytes `start..<end` of `chunk`.
struct QueuedBytes {
    let chunk: ByteChunk
    // 32 bits each, so a slot is 16 bytes: a chunk holds at most a frame or a segment of frames,
    // far below 4 GiB.
    private var storedStart: UInt32
    private var storedEnd: UInt32

    init(chunk: ByteChunk, start: Int, end: Int) {
        self.chunk = chunk
        storedStart = UInt32(start)
        storedEnd = UInt32(end)
    }

    var start: Int { Int(storedStart) }
    var end: Int {
        get { Int(storedEnd) }
        set { storedEnd = UInt32(newValue) }
    }
    /// How many bytes the range holds.
    var count: Int { Int(storedEnd &- storedStart) }
    /// The range's bytes; valid while the chunk lives.
    var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: chunk.bytes.baseAddress! + start, count: count) }
}
