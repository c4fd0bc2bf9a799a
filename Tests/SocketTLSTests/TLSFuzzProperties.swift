// Compiled twice: into this test target, and by Scripts/fuzz.sh (with -D FUZZING, in one module
// with the SocketTLS sources, TestPKI, TLSFixture and SessionPair) into the libFuzzer target of
// Fuzz/. So the fuzzer and the regression tests check exactly the same properties.
//
// What is fuzzed is our code on the record path: the plain-text sniffer, feeding ciphertext in
// arbitrary pieces, the memory BIOs and their queues, packing chunk lists into records under a
// limit, partial consumption, half-close, and turning OpenSSL's verdicts into errors. OpenSSL's
// own parsers are exercised through it (OSS-Fuzz fuzzes them directly).
#if !FUZZING
@testable import SocketTLS
#endif

/// The invariants a session must keep for any input; each check returns a description of the
/// first violation, or nil.
enum TLSFuzzProperties {
    /// The contexts every check uses, loaded once per process. The files they came from are
    /// deleted as soon as they are loaded (the fixture goes away), so a fuzzing run leaves nothing
    /// behind in /tmp.
    struct Contexts: Sendable {
        let server: TLSContext
        let serverTLS12: TLSContext
        let client: TLSContext

        init() {
            let fixture = TLSFixture()
            do {
                server = try fixture.serverContext()
                serverTLS12 = try fixture.serverContext(maximum: .v1_2)
                client = try fixture.clientContext()
            } catch {
                fatalError("fuzz contexts: \(error)")
            }
        }
    }

    static let contexts = Contexts()

    // MARK: A hostile peer

    /// Arbitrary bytes as everything a peer ever sends, to a server session (first byte even) or a
    /// client session (odd), fed whole and in input-dependent pieces (empty ones included), then
    /// the end of the stream.
    ///
    /// No handshake can complete with bytes that do not know the session's ephemeral keys, so no
    /// plaintext may come out and the session must end failed. A failure must be a handshake
    /// failure class (never a file error), sticky (later calls throw it again), and the memory
    /// held must stay in proportion to the input. A server must reach the same verdict however the
    /// bytes were cut.
    /// The fuzz target's entry: the top bit of the first byte picks `checkConversation` (set) or
    /// `checkHostilePeer` (clear), so one target and one corpus cover both.
    static func check(_ input: [UInt8]) -> String? {
        guard let first = input.first else { return nil }
        return first & 0x80 != 0 ? checkConversation(Array(input.dropFirst())) : checkHostilePeer(input)
    }

    static func checkHostilePeer(_ input: [UInt8]) -> String? {
        guard let control = input.first else { return nil }
        let stream = Array(input.dropFirst())
        let asServer = control & 1 == 0
        let whole = feed(stream, asServer: asServer, chunkSizes: [max(1, stream.count)])
        if let violation = whole.violation { return "whole: \(violation)" }
        // Empty chunks included; the final 1 guarantees progress when every other size is 0.
        let sizes = stream.map { Int($0 % 11) } + [1]
        let chunked = feed(stream, asServer: asServer, chunkSizes: sizes)
        if let violation = chunked.violation { return "chunked: \(violation)" }
        if asServer, whole.verdict != chunked.verdict {
            return "verdict depends on chunking: whole \(whole.verdict), chunked \(chunked.verdict)"
        }
        return nil
    }

    private struct HostileOutcome {
        var verdict: String
        var violation: String?
    }

    private static func feed(_ stream: [UInt8], asServer: Bool, chunkSizes: [Int]) -> HostileOutcome {
        let session: TLSSession
        do {
            session = asServer
                ? contexts.server.makeServerSession(peerLabel: "fuzz")
                : try contexts.client.makeClientSession(serverName: "localhost", peerLabel: "fuzz")
        } catch {
            return HostileOutcome(verdict: "", violation: "making the session failed: \(error)")
        }
        session.consumeCiphertext(session.pendingCiphertext.count)
        var plaintext = [UInt8](repeating: 0, count: 4096)
        var failure: TLSError?
        var offset = 0
        var index = 0
        func violation(_ text: String) -> HostileOutcome { HostileOutcome(verdict: "", violation: text) }

        while failure == nil, offset < stream.count || index == 0 {
            let size = min(chunkSizes[index % chunkSizes.count], stream.count - offset)
            index += 1
            do throws(TLSError) {
                try Array(stream[offset..<(offset + size)]).withBytes { bytes throws(TLSError) in
                    _ = try session.receive(bytes)
                }
                offset += size
                if case .bytes(let count) = try plaintext.withMutableBytes({ bytes throws(TLSError) in try session.readPlaintext(into: bytes) }) {
                    return violation("\(count) plaintext bytes from a peer without keys")
                }
            } catch {
                failure = error
            }
            // Kept in proportion to the input: a record's worth plus what was fed, doubled for growth.
            let limit = 2 * (offset + 17 * 1024)
            if session.bufferedCiphertextCapacity > limit {
                return violation("holds \(session.bufferedCiphertextCapacity) bytes after \(offset) fed")
            }
            session.consumeCiphertext(session.pendingCiphertext.count)
            if stream.isEmpty { break }
        }
        if failure == nil {
            do {
                try session.receiveEndOfStream()
            } catch {
                failure = error
            }
        }
        if session.isEstablished { return violation("handshake completed with a peer without keys") }
        guard let failure else { return violation("still \(session.state) after the end of the stream") }
        guard session.state == .failed(failure) else { return violation("failed with \(failure) but state is \(session.state)") }
        switch failure.kind {
        case .unreadableFile, .invalidCertificateFile, .invalidPrivateKeyFile, .encryptedPrivateKey, .keyMismatch,
             .invalidCAFile, .truncated:
            return violation("impossible failure class for a handshake: \(failure)")
        default:
            break
        }
        if failure.reason.isEmpty || !failure.description.hasPrefix("TLS handshake with fuzz failed: ") {
            return violation("unreadable error: \(failure)")
        }
        do {
            try session.receive(UnsafeRawBufferPointer(start: nil, count: 0))
            try [UInt8(22)].withBytes { bytes throws(TLSError) in _ = try session.receive(bytes) }
            return violation("a failed session accepted more bytes")
        } catch {
            if error != failure { return violation("failed with \(failure), then threw \(error)") }
        }
        return HostileOutcome(verdict: "\(failure.kind)", violation: nil)
    }

    // MARK: Two honest sessions, a scheduled conversation, and maybe one flipped bit

    /// Builds a conversation from `input`: the TLS version, how ciphertext is cut in transit, read
    /// buffer sizes, an encrypt limit, then a list of steps (either side queues chunks, the bytes
    /// move, either side half-closes, the limit changes), and perhaps one corrupted byte in transit.
    ///
    /// Without corruption everything sent arrives, in order, both ways, the handshake completes,
    /// half-closes arrive, no error happens, and idle sessions hold no buffers. With it, what
    /// arrives is still a prefix of what was sent: a flipped bit may end or stall the connection,
    /// but it never changes a byte of data.
    static func checkConversation(_ input: [UInt8]) -> String? {
        var reader = FuzzReader(input)
        let serverContext = reader.bit() ? contexts.serverTLS12 : contexts.server
        let chunkSizes = (0..<reader.int(1...6)).map { _ in reader.int(0...64) } + [reader.int(1...20_000)]
        let readSizes = (0..<reader.int(1...3)).map { _ in reader.int(1...17_000) }
        let client: TLSSession
        do {
            client = try contexts.client.makeClientSession(serverName: "localhost", peerLabel: "server")
        } catch {
            return "making the client session failed: \(error)"
        }
        let pair = SessionPair(
            client: client, server: serverContext.makeServerSession(peerLabel: "client"),
            chunkSizes: chunkSizes, readSizes: readSizes)
        if reader.int(0...3) == 0 {
            pair.corruption = (position: reader.int(0...12_000), mask: UInt8(reader.int(1...255)))
        }
        for _ in 0..<32 where !reader.isAtEnd {
            switch reader.int(0...5) {
            case 0, 1:
                let side = reader.bit() ? pair.client : pair.server
                // 40 KB a side crosses record boundaries often enough and keeps a run with a tiny
                // encrypt limit (one record per byte) from taking seconds.
                guard !side.closeRequested, !side.session.state.outputClosed, side.sent.count < 40_000 else { continue }
                for _ in 0..<reader.int(1...4) {
                    pair.send(patternBytes(reader.int(0...3_000), seed: UInt32(side.sent.count + 1)), from: side)
                }
            case 2:
                pair.pump()
            case 3:
                pair.closeOutput(of: reader.bit() ? pair.client : pair.server)
            case 4:
                pair.encryptLimit = reader.int(1...70_000)
            default:
                pair.encryptLimit = .max
            }
        }
        pair.pump()

        for (sender, receiver, name) in [(pair.client, pair.server, "client to server"), (pair.server, pair.client, "server to client")] {
            if !sender.sent.starts(with: receiver.received) {
                return "\(name): received \(receiver.received.count) bytes that are not a prefix of the \(sender.sent.count) sent"
            }
        }
        // A flipped bit may end the connection, or stall it (a record length made longer leaves the
        // receiver waiting for bytes that never come, as a real peer would until its timeout);
        // the prefix check above is all that must hold then.
        guard pair.corruption == nil else { return nil }
        if pair.client.error != nil || pair.server.error != nil {
            return "failed without corruption: client \(String(describing: pair.client.error)), server \(String(describing: pair.server.error))"
        }
        for (sender, receiver, name) in [(pair.client, pair.server, "client to server"), (pair.server, pair.client, "server to client")] {
            if receiver.received != sender.sent {
                return "\(name): \(receiver.received.count) of \(sender.sent.count) bytes arrived"
            }
            if sender.session.state.outputClosed && !receiver.inputEnded {
                return "\(name): close_notify sent but not seen"
            }
        }
        if !(pair.client.handshakeCompleted && pair.server.handshakeCompleted) {
            return "handshake did not complete"
        }
        if pair.client.session.bufferedCiphertextCapacity != 0 || pair.server.session.bufferedCiphertextCapacity != 0 {
            return "idle sessions hold \(pair.client.session.bufferedCiphertextCapacity) and \(pair.server.session.bufferedCiphertextCapacity) bytes"
        }
        return nil
    }
}

/// Reads small decisions out of fuzz input; past its end every answer is the smallest.
struct FuzzReader {
    private let bytes: [UInt8]
    private var offset = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// Whether every byte has been used.
    var isAtEnd: Bool { offset >= bytes.count }

    /// The next byte, or 0 past the end.
    mutating func byte() -> UInt8 {
        defer { offset += 1 }
        return offset < bytes.count ? bytes[offset] : 0
    }

    /// The next bit's worth of decision.
    mutating func bit() -> Bool { byte() & 1 == 1 }

    /// A number in `range`, from one byte (small ranges) or two.
    mutating func int(_ range: ClosedRange<Int>) -> Int {
        let span = range.upperBound - range.lowerBound + 1
        let raw = span <= 256 ? Int(byte()) : Int(byte()) << 8 | Int(byte())
        return range.lowerBound + raw % span
    }
}

extension TLSSession.State {
    /// Whether this side has queued its close_notify.
    var outputClosed: Bool {
        if case .established(_, outputOpen: false) = self { return true }
        return false
    }
}
