import Glibc
import TestSupport
import Testing
@testable import SocketCore
@testable import SocketTLS

/// The channel's TLS glue (reading ciphertext into the session, flushing what the session answers,
/// ending on its errors) against generated hostile peers over real loopback sockets: the engine is
/// fuzzed on its own (`Scripts/fuzz.sh tls`), and this drives the same kind of input through
/// `SocketChannel`, where the socket's chunking, end of stream and the owner's reads come in.
@Suite("TLS channels against generated hostile peers", .serialized)
struct TLSChannelHostilePeerTests {
    @Test func bentClientHellosAndNoiseEndWithAnErrorAndNoPlaintextAndLeaveNoSocket() async throws {
        let fixture = TLSFixture()
        let listener = try ConnectionListener(host: "127.0.0.1", port: 0, tls: fixture.serverContext())
        defer { listener.close() }
        let hello = Array(try fixture.clientContext().makeClientSession(serverName: "localhost", peerLabel: "x").pendingCiphertext)
        var accepted = listener.connections.makeAsyncIterator()
        var random = patternBytes(200_000, seed: 14).makeIterator()
        /// A pseudo-random number in 0..<bound, the same every run.
        func next(_ bound: Int) -> Int {
            let value = Int(random.next()!) << 8 | Int(random.next()!)
            return value % max(bound, 1)
        }

        for index in 0..<150 {
            let input = Self.hostileInput(index: index, hello: hello, next: next)
            let peer = try await SocketConnection.connect(host: "127.0.0.1", port: listener.port)
            let server = try #require(await accepted.next())
            // Sent in chunks of varying size, then end of stream: the peer never completes a handshake.
            var offset = 0
            while offset < input.count {
                let size = min(input.count - offset, 1 + next(700))
                if await peer.writeFailure(Array(input[offset..<offset + size])) != nil { break }
                offset += size
            }
            peer.shutdownWrite()
            let end = try await Self.readToEnd(server, within: .seconds(30))
            #expect(end.bytes.isEmpty, "input \(index): plaintext reached the owner")
            #expect(end.error?.tlsError != nil, "input \(index) (\(input.count) bytes) ended with \(String(describing: end.error))")
            peer.close()
            server.close()
        }
        // Every connection's socket is gone: only the listener's is left on its port.
        var left = try socketDescriptors(port: listener.port)
        let deadline = ContinuousClock.now + .seconds(30)
        while left > 1, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
            left = try socketDescriptors(port: listener.port)
        }
        #expect(left == 1, "\(left - 1) sockets of the hostile peers' connections are still open")
    }

    /// Input `index`: a real ClientHello bent in one of several ways, or noise, some of it dressed
    /// as a handshake record.
    private static func hostileInput(index: Int, hello: [UInt8], next: (Int) -> Int) -> [UInt8] {
        var bytes = hello
        switch index % 6 {
        case 0:  // a few bytes flipped
            for _ in 0..<(1 + next(4)) { bytes[next(bytes.count)] ^= UInt8(truncatingIfNeeded: 1 + next(255)) }
        case 1:  // cut short
            bytes = Array(bytes.prefix(next(bytes.count)))
        case 2:  // noise inserted
            bytes.insert(contentsOf: (0..<(1 + next(64))).map { _ in UInt8(truncatingIfNeeded: next(256)) }, at: next(bytes.count))
        case 3:  // the hello twice, the second bent
            var second = hello
            second[next(second.count)] ^= 0x5a
            bytes += second
        case 4:  // noise that starts like a handshake record with a random length
            bytes = [0x16, 0x03, UInt8(next(5)), UInt8(truncatingIfNeeded: next(256)), UInt8(truncatingIfNeeded: next(256))]
                + (0..<next(2_000)).map { _ in UInt8(truncatingIfNeeded: next(256)) }
        default:  // plain noise
            bytes = (0..<(1 + next(3_000))).map { _ in UInt8(truncatingIfNeeded: next(256)) }
        }
        return bytes
    }

    /// `connection.readToEnd()`, failing the test instead of hanging if it does not end in time.
    private static func readToEnd(_ connection: SocketConnection, within limit: Duration) async throws -> (bytes: [UInt8], error: SocketError?) {
        try await withThrowingTaskGroup(of: (bytes: [UInt8], error: SocketError?)?.self) { group in
            group.addTask { await connection.readToEnd() }
            group.addTask {
                try await Task.sleep(for: limit)
                return nil
            }
            let first = try await group.next()!
            group.cancelAll()
            guard let first else {
                Issue.record("the channel did not end within \(limit)")
                connection.close()
                return ([], nil)
            }
            return first
        }
    }
}
