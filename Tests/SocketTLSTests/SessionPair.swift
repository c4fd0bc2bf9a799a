// Also compiled into the TLS fuzz target by Scripts/fuzz.sh (-D FUZZING, one module with
// the SocketTLS sources): no Testing, no imports of our modules outside `#if !FUZZING`.
#if !FUZZING
@testable import SocketTLS
#endif

/// Two sessions wired together through memory, the way two channels would be through a socket,
/// except that every transfer is cut into chunks of the sizes given (cycled), empty ones included,
/// and plaintext is read out through buffers of cycling sizes too.
///
/// Each side queues plaintext as a list of chunks and encrypts from the head of that list with a
/// limit, as a channel's outbound queue will. Each side records what it received, whether the
/// peer's close_notify arrived and the error that ended it. A side that failed keeps delivering
/// what it queued (its alert) to the other side, as a channel would before closing. One byte in
/// transit can be corrupted on purpose.
final class SessionPair {
    /// One side of the pair.
    final class Side {
        let session: TLSSession
        /// Plaintext received, in order.
        var received: [UInt8] = []
        /// Whether the peer's close_notify arrived (`.endOfInput`).
        var inputEnded = false
        /// The error that ended this side, if any.
        var error: TLSError?
        /// Whether the handshake completed on this side (as `receive` reported it).
        var handshakeCompleted = false
        /// Plaintext chunks queued by `send`; the first from `headOffset` on is not yet encrypted.
        var unsent: [PlaintextChunk] = []
        var headOffset = 0
        /// Everything ever queued, in order (what the peer should receive).
        var sent: [UInt8] = []
        /// Whether `closeOutput` is wanted once everything queued is encrypted.
        var closeRequested = false

        init(_ session: TLSSession) { self.session = session }
    }

    let client: Side
    let server: Side
    private let chunkSizes: [Int]
    private var nextChunk = 0
    private let readSizes: [Int]
    private var nextRead = 0

    /// Ciphertext bytes that crossed, both directions together.
    private(set) var transferredBytes = 0
    /// At most this many plaintext bytes per `encrypt` call.
    var encryptLimit = Int.max
    /// Flip the bits of `mask` in the byte at this position of all ciphertext transferred.
    var corruption: (position: Int, mask: UInt8)?

    // Scratch for readPlaintext, as large as the largest read size.
    private let readBuffer: UnsafeMutableRawBufferPointer

    init(client: TLSSession, server: TLSSession, chunkSizes: [Int] = [Int.max], readSizes: [Int] = [64 * 1024]) {
        precondition(chunkSizes.contains { $0 > 0 } && readSizes.allSatisfy { $0 > 0 })
        readBuffer = .allocate(byteCount: readSizes.max()!, alignment: 16)
        self.client = Side(client)
        self.server = Side(server)
        self.chunkSizes = chunkSizes
        self.readSizes = readSizes
    }

    deinit { readBuffer.deallocate() }

    /// Queues plaintext on `side` as one chunk; `pump` encrypts it once the handshake allows.
    func send(_ bytes: [UInt8], from side: Side) {
        guard !bytes.isEmpty else { return }
        side.unsent.append(PlaintextChunk(bytes))
        side.sent += bytes
    }

    /// Asks `side` to send close_notify after what it has queued.
    func closeOutput(of side: Side) {
        side.closeRequested = true
    }

    /// Moves bytes both ways until nothing moves any more.
    func pump() {
        var moved = true
        var rounds = 0
        while moved {
            rounds += 1
            precondition(rounds < 1_000_000, "pump does not settle")
            moved = false
            for (from, to) in [(client, server), (server, client)] {
                if encrypt(from) { moved = true }
                if transfer(from: from, to: to) { moved = true }
                if readPlaintext(to) { moved = true }
            }
        }
    }

    private func encrypt(_ side: Side) -> Bool {
        guard side.error == nil, side.session.isEstablished else { return false }
        var moved = false
        while !side.unsent.isEmpty {
            let consumed: Int
            do {
                consumed = try encryptQueue(of: side)
            } catch {
                side.error = error
                return true
            }
            guard consumed > 0 else { break }
            moved = true
            // Drop what was consumed: whole chunks, then part of the next.
            var remaining = consumed
            while remaining > 0 {
                let available = side.unsent[0].bytes.count - side.headOffset
                if remaining >= available {
                    remaining -= available
                    side.unsent.removeFirst()
                    side.headOffset = 0
                } else {
                    side.headOffset += remaining
                    remaining = 0
                }
            }
        }
        if side.unsent.isEmpty, side.closeRequested {
            side.closeRequested = false
            side.session.closeOutput()
            moved = true
        }
        return moved
    }

    /// One `encrypt` over the whole queue from its head offset, as a channel's flush would call it.
    private func encryptQueue(of side: Side) throws(TLSError) -> Int {
        let buffers = side.unsent.enumerated().lazy.map { index, chunk in
            UnsafeRawBufferPointer(rebasing: chunk.bytes[(index == 0 ? side.headOffset : 0)...])
        }
        return try side.session.encrypt(buffers, limit: encryptLimit)
    }

    /// Moves `from`'s pending ciphertext into `to`, one chunk per `receive`.
    private func transfer(from: Side, to: Side) -> Bool {
        var pending = Array(from.session.pendingCiphertext)
        guard !pending.isEmpty else { return false }
        from.session.consumeCiphertext(pending.count)
        if let corruption, (transferredBytes..<(transferredBytes + pending.count)).contains(corruption.position) {
            pending[corruption.position - transferredBytes] ^= corruption.mask
        }
        transferredBytes += pending.count
        guard to.error == nil else { return true }
        pending.withUnsafeBytes { all in
            var offset = 0
            while offset < all.count {
                let size = min(chunkSizes[nextChunk % chunkSizes.count], all.count - offset)
                nextChunk += 1
                do throws(TLSError) {
                    if try to.session.receive(UnsafeRawBufferPointer(rebasing: all[offset..<(offset + size)])) == .handshakeCompleted {
                        to.handshakeCompleted = true
                    }
                } catch {
                    to.error = error
                    return
                }
                offset += size
            }
        }
        return true
    }

    /// Reads `side`'s plaintext until the session needs more ciphertext.
    private func readPlaintext(_ side: Side) -> Bool {
        guard side.error == nil, !side.inputEnded else { return false }
        var moved = false
        while true {
            let size = readSizes[nextRead % readSizes.count]
            nextRead += 1
            let result: TLSSession.PlaintextRead
            do {
                result = try side.session.readPlaintext(into: UnsafeMutableRawBufferPointer(rebasing: readBuffer[0..<size]))
            } catch {
                side.error = error
                return true
            }
            switch result {
            case .bytes(let count):
                side.received += readBuffer[0..<count]
                moved = true
            case .needsCiphertext:
                return moved
            case .endOfInput:
                side.inputEnded = true
                return true
            }
        }
    }

    /// Tells `side` its peer's TCP stream ended, as a read of 0 would.
    func endOfStream(to side: Side) {
        guard side.error == nil else { return }
        do {
            if try side.session.receiveEndOfStream() == .handshakeCompleted { side.handshakeCompleted = true }
        } catch {
            side.error = error
        }
        _ = readPlaintext(side)
    }
}

/// Plaintext queued on a side: bytes at a stable address, as a channel's `ByteChunk`.
final class PlaintextChunk {
    let bytes: UnsafeMutableRawBufferPointer

    init(_ source: [UInt8]) {
        bytes = .allocate(byteCount: source.count, alignment: 1)
        bytes.copyBytes(from: source)
    }

    deinit { bytes.deallocate() }
}
