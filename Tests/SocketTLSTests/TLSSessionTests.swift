import COpenSSL
import Testing
@testable import SocketTLS

/// The session state machine without sockets: two sessions talking through memory.
@Suite("TLS session in memory")
struct TLSSessionTests {
    static let chunkings: [[Int]] = [[1], [2], [5], [8], [1, 0, 3, 0, 7, 1000], [Int.max]]

    @Test(arguments: [TLSVersion.v1_2, .v1_3], chunkings)
    func handshakeAndDataSurviveEveryChunking(version: TLSVersion, chunks: [Int]) throws {
        let fixture = TLSFixture()
        let pair = try fixture.pair(
            server: fixture.serverContext(minimum: version, maximum: version),
            chunkSizes: chunks, readSizes: [1, 7, 300, 16 * 1024])
        // Larger than a record and not a multiple of one, both ways at once.
        let fromClient = patternBytes(40_000, seed: 1)
        let fromServer = patternBytes(23_456, seed: 2)
        pair.send(fromClient, from: pair.client)
        pair.send(fromServer, from: pair.server)
        pair.pump()

        #expect(pair.client.error == nil, "client failed: \(String(describing: pair.client.error))")
        #expect(pair.server.error == nil, "server failed: \(String(describing: pair.server.error))")
        #expect(pair.client.handshakeCompleted && pair.server.handshakeCompleted)
        #expect(pair.client.session.negotiatedVersion == version)
        #expect(pair.server.session.negotiatedVersion == version)
        #expect(pair.server.received == fromClient, "server got \(pair.server.received.count) of \(fromClient.count) bytes, or wrong ones")
        #expect(pair.client.received == fromServer, "client got \(pair.client.received.count) of \(fromServer.count) bytes, or wrong ones")
        #expect(pair.client.session.peerCertificate?.subject == "CN=localhost")
    }

    @Test func clientHelloIsQueuedAsSoonAsTheSessionIsMade() throws {
        let fixture = TLSFixture()
        let client = try fixture.clientContext().makeClientSession(serverName: "localhost", peerLabel: "server")
        let hello = Array(client.pendingCiphertext)
        #expect(hello.first == 22, "a handshake record")
        #expect(recordTypes(hello) == [22], "exactly one whole handshake record")
        #expect(client.state == .handshaking)
    }

    @Test func encryptPacksSmallChunksIntoFullRecords() throws {
        let fixture = TLSFixture()
        let pair = try fixture.pair()
        pair.pump()
        let session = pair.client.session
        #expect(session.isEstablished)

        // 2,000 chat-sized messages, as a server's outbound queue would hold them.
        let messages = (0..<2_000).map { patternBytes(15 + $0 % 40, seed: UInt32($0 + 1)) }
        let total = messages.reduce(0) { $0 + $1.count }
        let consumed = try withBuffers(messages) { try session.encrypt($0) }
        #expect(consumed == total)
        let ciphertext = Array(session.pendingCiphertext)
        let types = try #require(recordTypes(ciphertext), "ciphertext is whole records")
        let expectedRecords = (total + TLSSession.maximumRecordPlaintext - 1) / TLSSession.maximumRecordPlaintext
        #expect(types.count == expectedRecords, "\(types.count) records for \(total) bytes; one per message would be \(messages.count)")
        #expect(types.allSatisfy { $0 == 23 }, "application data records only")
        // TLS 1.3 with an AEAD: 5 header + 1 inner type + 16 tag per record.
        #expect(ciphertext.count - total == 22 * expectedRecords)

        session.consumeCiphertext(ciphertext.count)
        try pair.server.session.receive(ciphertext)
        pair.pump()
        #expect(pair.server.received == messages.flatMap { $0 })
    }

    @Test func encryptStopsAtTheLimitAndSaysHowMuchItConsumed() throws {
        let fixture = TLSFixture()
        let pair = try fixture.pair()
        pair.pump()
        let session = pair.client.session
        let chunks = [patternBytes(10_000, seed: 1), patternBytes(10_000, seed: 2), patternBytes(10_000, seed: 3)]
        let all = chunks.flatMap { $0 }

        let first = try withBuffers(chunks) { try session.encrypt($0, limit: 15_000) }
        #expect(first == 15_000, "stops exactly at the limit, in the middle of the second chunk")
        // Go on from where it stopped, as a channel would with its queue's head offset.
        let rest = try all[first...].withUnsafeBytes { try session.encrypt(CollectionOfOne($0)) }
        #expect(rest == 15_000)
        let ciphertext = Array(session.pendingCiphertext)
        session.consumeCiphertext(ciphertext.count)
        try pair.server.session.receive(ciphertext)
        pair.pump()
        #expect(pair.server.received == all)
    }

    @Test func encryptConsumesNothingDuringTheHandshake() throws {
        let fixture = TLSFixture()
        let pair = try fixture.pair()
        let consumed = try [UInt8](repeating: 1, count: 100).withUnsafeBytes {
            try pair.client.session.encrypt(CollectionOfOne($0))
        }
        #expect(consumed == 0)
        #expect(recordTypes(Array(pair.client.session.pendingCiphertext)) == [22], "still only the ClientHello")
    }

    @Test func aChunkOfARecordOrMoreIsEncryptedWhole() throws {
        let fixture = TLSFixture()
        let pair = try fixture.pair()
        pair.pump()
        let big = patternBytes(100_000)
        let consumed = try big.withUnsafeBytes { try pair.client.session.encrypt(CollectionOfOne($0)) }
        #expect(consumed == big.count)
        let types = try #require(recordTypes(Array(pair.client.session.pendingCiphertext)))
        #expect(types.count == 7, "100,000 bytes are 7 records of at most 16 KiB")
        pair.pump()
        #expect(pair.server.received == big)
    }

    @Test(arguments: [TLSVersion.v1_2, .v1_3])
    func halfCloseFromTheClientLetsTheServerKeepSending(version: TLSVersion) throws {
        let fixture = TLSFixture()
        let pair = try fixture.pair(server: fixture.serverContext(minimum: version, maximum: version), chunkSizes: [3, 1000])
        pair.send(Array("last words".utf8), from: pair.client)
        pair.closeOutput(of: pair.client)
        pair.pump()
        #expect(pair.server.received == Array("last words".utf8))
        #expect(pair.server.inputEnded, "the server saw the client's close_notify")
        #expect(pair.client.session.state == .established(inputOpen: true, outputOpen: false))
        #expect(pair.server.session.state == .established(inputOpen: false, outputOpen: true))

        // The server answers after the client's close_notify, then closes its side too.
        let reply = patternBytes(50_000)
        pair.send(reply, from: pair.server)
        pair.closeOutput(of: pair.server)
        pair.pump()
        #expect(pair.client.received == reply, "the client still reads after closing its output")
        #expect(pair.client.inputEnded)
        #expect(pair.client.session.state == .established(inputOpen: false, outputOpen: false))
        #expect(pair.server.session.state == .established(inputOpen: false, outputOpen: false))
        #expect(pair.client.error == nil && pair.server.error == nil)
    }

    @Test(arguments: [TLSVersion.v1_2, .v1_3])
    func halfCloseFromTheServerLetsTheClientKeepSending(version: TLSVersion) throws {
        let fixture = TLSFixture()
        let pair = try fixture.pair(server: fixture.serverContext(minimum: version, maximum: version))
        pair.send(Array("goodbye".utf8), from: pair.server)
        pair.closeOutput(of: pair.server)
        pair.pump()
        #expect(pair.client.received == Array("goodbye".utf8))
        #expect(pair.client.inputEnded)

        pair.send(Array("one more thing".utf8), from: pair.client)
        pair.closeOutput(of: pair.client)
        pair.pump()
        #expect(pair.server.received == Array("one more thing".utf8))
        #expect(pair.server.inputEnded)
        #expect(pair.client.error == nil && pair.server.error == nil)
    }

    @Test func endOfStreamAfterCloseNotifyIsAnOrderlyEnd() throws {
        let fixture = TLSFixture()
        let pair = try fixture.pair()
        pair.send(Array("bye".utf8), from: pair.client)
        pair.closeOutput(of: pair.client)
        pair.pump()
        pair.endOfStream(to: pair.server)
        #expect(pair.server.error == nil)
        #expect(pair.server.inputEnded)
        #expect(pair.server.received == Array("bye".utf8))
    }

    @Test func endOfStreamWithoutCloseNotifyIsTruncationAfterTheDataBeforeIt() throws {
        let fixture = TLSFixture()
        let pair = try fixture.pair()
        pair.send(Array("partial".utf8), from: pair.client)
        pair.pump()
        pair.endOfStream(to: pair.server)
        #expect(pair.server.received == Array("partial".utf8), "what arrived before the end is delivered")
        let error = try #require(pair.server.error)
        #expect(error.kind == .truncated)
        #expect(error.description.contains("without TLS close_notify"), "\(error)")
    }

    @Test func endOfStreamInTheMiddleOfARecordIsTruncation() throws {
        let fixture = TLSFixture()
        let pair = try fixture.pair()
        pair.pump()
        _ = try patternBytes(1000).withUnsafeBytes { try pair.client.session.encrypt(CollectionOfOne($0)) }
        let record = Array(pair.client.session.pendingCiphertext)
        try pair.server.session.receive(record[0..<500])
        pair.endOfStream(to: pair.server)
        #expect(pair.server.received.isEmpty, "half a record yields nothing")
        #expect(pair.server.error?.kind == .truncated)
    }

    @Test func peerThatClosesBeforeAnyByteIsNamedAsSuch() throws {
        let fixture = TLSFixture()
        let server = try fixture.serverContext().makeServerSession(peerLabel: "127.0.0.1:5555")
        let error = #expect(throws: TLSError.self) { try server.receiveEndOfStream() }
        #expect(error?.kind == .closedDuringHandshake)
        #expect(error?.description.hasPrefix("TLS handshake with 127.0.0.1:5555 failed: the client connected and closed without starting") == true, "\(String(describing: error))")
        #expect(server.state == .failed(try #require(error)))
    }

    @Test func serverThatClosesWithoutAnsweringIsNamedAsSuch() throws {
        let fixture = TLSFixture()
        let client = try fixture.clientContext().makeClientSession(serverName: "localhost", peerLabel: "localhost:7000")
        let error = #expect(throws: TLSError.self) { try client.receiveEndOfStream() }
        #expect(error?.kind == .closedDuringHandshake)
        #expect(error?.reason.contains("without answering the TLS handshake") == true, "\(String(describing: error))")
    }

    @Test func clientThatClosesMidHandshakeIsNamedAsSuch() throws {
        let fixture = TLSFixture()
        let pair = try fixture.pair()
        // Deliver only the ClientHello, then the end of the stream.
        try pair.server.session.receive(pair.client.session.pendingCiphertext)
        pair.endOfStream(to: pair.server)
        #expect(pair.server.error?.kind == .closedDuringHandshake)
        #expect(pair.server.error?.reason.contains("in the middle of the TLS handshake") == true)
    }

    @Test(arguments: [[Int.max], [1]])
    func plainTextClientIsNamedAsNotTLS(chunks: [Int]) throws {
        let fixture = TLSFixture()
        let server = try fixture.serverContext().makeServerSession(peerLabel: "127.0.0.1:5555")
        let text = Array("hello server\n".utf8)
        var error: TLSError?
        for byte in text.chunks(of: chunks[0]) where error == nil {
            do { try server.receive(byte) } catch let failure { error = failure }
        }
        let failure = try #require(error)
        #expect(failure.kind == .notTLS)
        #expect(failure.reason.contains("plain text to this TLS port"), "\(failure)")
        #expect(failure.reason.contains("68"), "shows the first byte in hex: \(failure)")
        #expect(server.pendingCiphertext.isEmpty, "nothing is sent to a peer that does not speak TLS")
    }

    @Test func httpRequestOnTheTLSPortIsNamedAsOne() throws {
        let fixture = TLSFixture()
        let server = try fixture.serverContext().makeServerSession(peerLabel: "peer")
        let error = #expect(throws: TLSError.self) { try server.receive(Array("GET / HTTP/1.1\r\n".utf8)) }
        #expect(error?.kind == .notTLS)
        #expect(error?.reason.contains("(\"GET / HTTP/1.1..\") (an HTTP request)") == true, "\(String(describing: error))")
    }

    @Test func plainTextServerIsNamedAsNotTLS() throws {
        let fixture = TLSFixture()
        let client = try fixture.clientContext().makeClientSession(serverName: "localhost", peerLabel: "localhost:6379")
        let error = #expect(throws: TLSError.self) { try client.receive(Array("-ERR unknown command\r\n".utf8)) }
        #expect(error?.kind == .notTLS)
        #expect(error?.reason.hasPrefix("the server answered with bytes that are not TLS: 2d 45 52 52") == true, "\(String(describing: error))")
    }

    @Test func handshakeRecordWithNonsenseInsideFailsCleanly() throws {
        let fixture = TLSFixture()
        let server = try fixture.serverContext().makeServerSession(peerLabel: "peer")
        // A handshake record header announcing 5 bytes, then bytes that are no ClientHello.
        let error = #expect(throws: TLSError.self) { try server.receive([22, 3, 1, 0, 5, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]) }
        #expect(error?.kind == .other, "\(String(describing: error))")
        #expect(error?.reason.hasPrefix("the handshake failed: ") == true)
        #expect(error?.detail.isEmpty == false, "carries OpenSSL's wording")
        #expect(recordTypes(Array(server.pendingCiphertext)) == [21], "tells the peer with an alert")
    }

    @Test func corruptedRecordIsRejectedAndNothingOfItDelivered() throws {
        let fixture = TLSFixture()
        let pair = try fixture.pair()
        pair.pump()
        _ = try Array("good".utf8).withUnsafeBytes { try pair.client.session.encrypt(CollectionOfOne($0)) }
        _ = try Array("evil".utf8).withUnsafeBytes { try pair.client.session.encrypt(CollectionOfOne($0)) }
        var ciphertext = Array(pair.client.session.pendingCiphertext)
        pair.client.session.consumeCiphertext(ciphertext.count)
        // Flip one bit in the second record's encrypted payload.
        ciphertext[ciphertext.count - 20] ^= 0x01
        try pair.server.session.receive(ciphertext)
        pair.pump()
        #expect(pair.server.received == Array("good".utf8), "the intact record arrives, the forged one does not")
        #expect(pair.server.error?.kind == .malformedRecords, "\(String(describing: pair.server.error))")
        #expect(pair.client.error?.kind == .receivedAlert(TLSAlert(20)), "the client is told bad_record_mac: \(String(describing: pair.client.error))")
    }

    @Test func keyUpdatesAreAnsweredWithoutPlaintextToSend() throws {
        let fixture = TLSFixture()
        let pair = try fixture.pair()
        pair.pump()
        // The server asks the client to update its keys too (TLS 1.3).
        #expect(SSL_key_update(pair.server.session.ssl, SSL_KEY_UPDATE_REQUESTED) == 1)
        pair.send(Array("after update".utf8), from: pair.server)
        pair.pump()
        #expect(pair.client.received == Array("after update".utf8))
        // The client has nothing to say, but its own KeyUpdate must still have gone out: after it
        // the server decrypts the client's traffic with the updated keys.
        pair.send(Array("still here".utf8), from: pair.client)
        pair.pump()
        #expect(pair.server.received == Array("still here".utf8))
        #expect(pair.client.error == nil && pair.server.error == nil)
    }

    @Test func plaintextLeftUnreadWaitsInTheSession() throws {
        let fixture = TLSFixture()
        let pair = try fixture.pair()
        pair.pump()
        let data = patternBytes(40_000)
        _ = try data.withBytes { bytes throws(TLSError) in try pair.client.session.encrypt(CollectionOfOne(bytes)) }
        let server = pair.server.session
        try server.receive(pair.client.session.pendingCiphertext)
        #expect(server.hasBufferedInput == true)

        // The owner reads a little, then pauses (its consumer is full).
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1_000)
        guard case .bytes(let first) = try buffer.withMutableBytes({ bytes throws(TLSError) in try server.readPlaintext(into: bytes) }) else {
            Issue.record("expected plaintext")
            return
        }
        received += buffer[0..<first]
        #expect(server.hasBufferedInput, "the rest waits inside the session, with no new ciphertext to announce it")

        // Resuming reads the rest without any new ciphertext.
        while case .bytes(let count) = try buffer.withMutableBytes({ bytes throws(TLSError) in try server.readPlaintext(into: bytes) }) {
            received += buffer[0..<count]
        }
        #expect(received == data)
        #expect(!server.hasBufferedInput)
    }

    @Test func idleSessionsHoldNoCiphertextBuffers() throws {
        let fixture = TLSFixture()
        let pair = try fixture.pair(chunkSizes: [777])
        pair.send(patternBytes(200_000), from: pair.client)
        pair.send(patternBytes(200_000), from: pair.server)
        pair.pump()
        #expect(pair.server.received.count == 200_000)
        #expect(pair.client.session.bufferedCiphertextCapacity == 0)
        #expect(pair.server.session.bufferedCiphertextCapacity == 0)
    }
}

/// Runs `body` with the arrays as a sequence of raw buffers, as a channel's queue of chunks.
func withBuffers<R>(_ arrays: [[UInt8]], _ body: ([UnsafeRawBufferPointer]) throws -> R) rethrows -> R {
    let copies = arrays.map { array -> UnsafeMutableRawBufferPointer in
        let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: array.count, alignment: 1)
        copy.copyBytes(from: array)
        return copy
    }
    defer { copies.forEach { $0.deallocate() } }
    return try body(copies.map { UnsafeRawBufferPointer($0) })
}

extension TLSSession {
    /// Test convenience: receives an array.
    @discardableResult
    func receive<Bytes: Collection<UInt8>>(_ bytes: Bytes) throws(TLSError) -> ReceiveOutcome {
        let copy = Array(bytes)
        return try copy.withBytes { buffer throws(TLSError) in try receive(buffer) }
    }
}

extension Array {
    /// The array cut into pieces of `size` (the last may be shorter).
    func chunks(of size: Int) -> [ArraySlice<Element>] {
        let step = Swift.max(1, Swift.min(size, count))
        return stride(from: 0, to: count, by: step).map { self[$0..<Swift.min($0 + step, count)] }
    }
}
