@testable import SocketTLS

/// Two sessions wired together through memory, the way two channels would be through a socket,
/// except that every transfer is cut into chunks of the sizes given (cycled), empty ones included,
/// and plaintext is read out through buffers of cycling sizes too.
///
/// Each side records what it received, whether the peer's close_notify arrived and the error that
/// ended it. A side that failed keeps delivering what it queued (its alert) to the other side,
/// as a channel would before closing.
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
        /// Plaintext queued by `send` and not yet consumed by `encrypt`.
        var unsent: [UInt8] = []
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

    /// Ciphertext bytes that crossed in each direction (for checks on overhead).
    private(set) var clientToServerBytes = 0
    private(set) var serverToClientBytes = 0

    init(client: TLSSession, server: TLSSession, chunkSizes: [Int] = [Int.max], readSizes: [Int] = [64 * 1024]) {
        precondition(chunkSizes.contains { $0 > 0 } && readSizes.allSatisfy { $0 > 0 })
        self.client = Side(client)
        self.server = Side(server)
        self.chunkSizes = chunkSizes
        self.readSizes = readSizes
    }

    /// Queues plaintext on `side`; `pump` encrypts it once the handshake allows.
    func send(_ bytes: [UInt8], from side: Side) {
        side.unsent += bytes
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
        if !side.unsent.isEmpty {
            do {
                let consumed = try side.unsent.withBytes { bytes throws(TLSError) in
                    try side.session.encrypt(CollectionOfOne(bytes))
                }
                side.unsent.removeFirst(consumed)
                moved = consumed > 0
            } catch {
                side.error = error
                return true
            }
        }
        if side.unsent.isEmpty, side.closeRequested {
            side.closeRequested = false
            side.session.closeOutput()
            moved = true
        }
        return moved
    }

    /// Moves `from`'s pending ciphertext into `to`, one chunk per `receive`.
    private func transfer(from: Side, to: Side) -> Bool {
        let pending = Array(from.session.pendingCiphertext)
        guard !pending.isEmpty else { return false }
        from.session.consumeCiphertext(pending.count)
        if from === client { clientToServerBytes += pending.count } else { serverToClientBytes += pending.count }
        guard to.error == nil else { return true }
        var offset = 0
        while offset < pending.count {
            let size = min(chunkSizes[nextChunk % chunkSizes.count], pending.count - offset)
            nextChunk += 1
            let outcome: TLSSession.ReceiveOutcome
            do {
                outcome = try Array(pending[offset..<(offset + size)]).withBytes { bytes throws(TLSError) in
                    try to.session.receive(bytes)
                }
            } catch {
                to.error = error
                return true
            }
            if outcome == .handshakeCompleted { to.handshakeCompleted = true }
            offset += size
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
            var buffer = [UInt8](repeating: 0, count: size)
            let result: TLSSession.PlaintextRead
            do {
                result = try buffer.withMutableBytes { bytes throws(TLSError) in try side.session.readPlaintext(into: bytes) }
            } catch {
                side.error = error
                return true
            }
            switch result {
            case .bytes(let count):
                side.received += buffer[0..<count]
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
