import Glibc
import TestSupport
import Testing
@testable import SocketCore
@testable import SocketTLS

/// `SocketChannel` with a TLS session, through the async API (`ConnectionListener(tls:)`,
/// `SocketConnection.connect(tls:)`) over real loopback sockets: what the owner sees is plaintext,
/// each failed handshake ends the connection with its own `TLSError`, and the hostile peers (plain
/// text, a stalled handshake, garbage records, one that never reads) each meet a defined end.
@Suite("TLS channels", .serialized)
struct TLSChannelTests {
    /// A TLS listener presenting `identity` (the fixture's certificate by default) on 127.0.0.1, port 0.
    private func listener(_ fixture: TLSFixture, identity: TestPKI.Identity? = nil) throws -> ConnectionListener {
        try ConnectionListener(host: "127.0.0.1", port: 0, tls: fixture.serverContext(identity))
    }

    /// The next accepted connection, or a recorded failure after 30 s.
    private func accept(_ listener: ConnectionListener) async throws -> SocketConnection {
        var accepted = listener.connections.makeAsyncIterator()
        return try #require(await accepted.next())
    }

    // MARK: Success

    @Test(arguments: ["127.0.0.1", "localhost"])
    func handshakeCarriesPlaintextBothWays(host: String) async throws {
        let fixture = TLSFixture()
        let listener = try listener(fixture)
        defer { listener.close() }
        let client = try await SocketConnection.connect(host: host, port: listener.port, tls: fixture.clientContext())
        let server = try await accept(listener)
        // Written before the handshake completes: it waits in the queue, then leaves encrypted.
        try await client.write(Array("ping".utf8))
        #expect(try await server.readAll(count: 4) == Array("ping".utf8))
        try await server.write(Array("pong".utf8))
        #expect(try await client.readAll(count: 4) == Array("pong".utf8))
        let parameters = await client.tlsParameters
        #expect(parameters?.hasPrefix("TLS 1.3, TLS_") == true, "negotiated TLS 1.3, got \(String(describing: parameters))")
    }

    @Test func plainConnectionsHaveNoTLSParameters() async throws {
        let listener = try ConnectionListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let client = try await SocketConnection.connect(host: "127.0.0.1", port: listener.port)
        #expect(await client.tlsParameters == nil)
    }

    // MARK: Each failed handshake, with its own error

    /// Connects a client trusting the fixture's CA (or `trust`) to a server presenting `identity`,
    /// and returns the errors both ends' `inbound` ended with.
    private func failedHandshake(
        _ fixture: TLSFixture, identity: TestPKI.Identity? = nil, host: String = "localhost", trust: TLSTrust? = nil
    ) async throws -> (client: TLSError?, server: TLSError?) {
        let listener = try listener(fixture, identity: identity)
        defer { listener.close() }
        let client = try await SocketConnection.connect(
            host: host, port: listener.port, tls: fixture.clientContext(trust: trust))
        let server = try await accept(listener)
        let clientEnd = await client.readToEnd()
        let serverEnd = await server.readToEnd()
        #expect(clientEnd.bytes.isEmpty && serverEnd.bytes.isEmpty, "no plaintext crosses a failed handshake")
        // A write after the failure fails with the same error.
        let writeError = await client.writeFailure(Array("after".utf8))
        #expect(writeError?.tlsError == clientEnd.error?.tlsError, "writes fail with the error that ended the connection")
        return (clientEnd.error?.tlsError, serverEnd.error?.tlsError)
    }

    @Test func expiredCertificateEndsBothSidesWithTheirOwnError() async throws {
        let fixture = TLSFixture()
        let expired = fixture.pki.serverCertificate("expired", issuedBy: fixture.ca, validFrom: -2 * 86_400, validFor: 86_400)
        let errors = try await failedHandshake(fixture, identity: expired)
        #expect(errors.client?.kind == .certificateExpired, "client: \(String(describing: errors.client))")
        #expect(errors.client?.description.contains("expired at") == true, "\(String(describing: errors.client))")
        #expect(errors.server?.kind == .peerRejectedCertificate(.certificateExpired), "server: \(String(describing: errors.server))")
    }

    @Test func certificateForAnotherHostIsAHostnameMismatch() async throws {
        let fixture = TLSFixture()
        let other = fixture.pki.serverCertificate("other", commonName: "chat.example", names: ["chat.example"], issuedBy: fixture.ca)
        let errors = try await failedHandshake(fixture, identity: other, host: "localhost")
        #expect(errors.client?.kind == .hostnameMismatch, "client: \(String(describing: errors.client))")
        #expect(errors.client?.description.contains("chat.example") == true, "names the certificate's name: \(String(describing: errors.client))")
        #expect(errors.server?.kind == .peerRejectedCertificate(.badCertificate) || errors.server?.kind.isPeerRejection == true,
                "server: \(String(describing: errors.server))")
    }

    @Test func certificateFromAnUnknownCAIsUntrusted() async throws {
        let fixture = TLSFixture()
        let otherCA = fixture.pki.certificateAuthority("Some Other CA")
        let errors = try await failedHandshake(fixture, trust: .certificateAuthorities(file: otherCA.certificateFile))
        #expect(errors.client?.kind == .untrustedCertificate, "client: \(String(describing: errors.client))")
        #expect(errors.server?.kind == .peerRejectedCertificate(.unknownCA), "server: \(String(describing: errors.server))")
    }

    @Test func tlsErrorIsTheSocketErrorsDescription() async throws {
        let fixture = TLSFixture()
        let otherCA = fixture.pki.certificateAuthority("Some Other CA")
        let listener = try listener(fixture)
        defer { listener.close() }
        let client = try await SocketConnection.connect(
            host: "localhost", port: listener.port, tls: fixture.clientContext(trust: .certificateAuthorities(file: otherCA.certificateFile)))
        let error = try #require(await client.readToEnd().error)
        let tlsError = try #require(error.tlsError)
        #expect(error.description == tlsError.description, "a SocketError carrying a TLSError reads as the TLSError")
        #expect(error.description.hasPrefix("TLS handshake with "), "\(error)")
        #expect(error.errno == nil)
    }

    // MARK: Hostile peers

    @Test func plainTextClientOnTheTLSPortIsNamedAndGetsNoPlaintext() async throws {
        let fixture = TLSFixture()
        let listener = try listener(fixture)
        defer { listener.close() }
        let plain = try await SocketConnection.connect(host: "127.0.0.1", port: listener.port)
        let server = try await accept(listener)
        try await plain.write(Array("HELLO alice\r\n".utf8))
        let serverEnd = await server.readToEnd()
        #expect(serverEnd.bytes.isEmpty, "nothing of a plain-text client reaches the owner")
        #expect(serverEnd.error?.tlsError?.kind == .notTLS, "\(String(describing: serverEnd.error))")
        #expect(serverEnd.error?.description.contains("HELLO") == true, "quotes the first bytes: \(String(describing: serverEnd.error))")
        // The plain client reads at most an alert, then the end: never a byte of chat.
        let plainEnd = await plain.readToEnd()
        #expect(plainEnd.bytes.count <= 7, "at most one alert record, got \(plainEnd.bytes.count) bytes")
    }

    @Test func plainTextServerIsNamedToATLSClient() async throws {
        let plainListener = try ConnectionListener(host: "127.0.0.1", port: 0)
        defer { plainListener.close() }
        let fixture = TLSFixture()
        let client = try await SocketConnection.connect(host: "localhost", port: plainListener.port, tls: fixture.clientContext())
        let server = try await accept(plainListener)
        // A plain server answers the ClientHello with a line of text, as a chat server of another
        // kind or an HTTP server would.
        let hello = await server.readUpTo(count: 5)
        #expect(hello.bytes.count >= 5, "the ClientHello arrived: \(hello)")
        try await server.write(Array("ERROR unknown command\r\n".utf8))
        let clientEnd = await client.readToEnd()
        #expect(clientEnd.error?.tlsError?.kind == .notTLS, "\(String(describing: clientEnd.error))")
    }

    @Test func clientThatStallsMidHandshakeHoldsOnlyItsPartialRecordAndItsCloseIsNamed() async throws {
        let fixture = TLSFixture()
        let listener = try listener(fixture)
        defer { listener.close() }
        let helloSession = try fixture.clientContext().makeClientSession(serverName: "localhost", peerLabel: "server")
        // pendingCiphertext points into the session: copy it while the session is alive.
        let hello = withExtendedLifetime(helloSession) { Array(helloSession.pendingCiphertext) }
        let raw = try connectedSocket(port: listener.port)
        let server = try await accept(listener)
        // Half of a real ClientHello, then nothing: the server can only wait (its owner's handshake
        // timer decides how long; chat-server's end-to-end test covers that).
        let half = Array(hello[0..<(hello.count / 2)])
        try sendAll(half, to: raw)
        try await waitUntil("the server has read the partial ClientHello") {
            await server.inspectChannel { $0.tls?.receivedAnyBytes ?? false }
        }
        let (handshaking, held) = await server.inspectChannel { ($0.isHandshaking, $0.tls?.bufferedCiphertextCapacity ?? -1) }
        #expect(handshaking, "a partial ClientHello leaves the server handshaking")
        #expect(held <= hello.count, "the stalled client pins at most its partial record in our buffers, not \(held) bytes")
        raw.close()
        let serverEnd = await server.readToEnd()
        #expect(serverEnd.error?.tlsError?.kind == .closedDuringHandshake, "\(String(describing: serverEnd.error)) \(hello.prefix(8))")
        #expect(serverEnd.error?.description.contains("middle") == true, "says it was mid-handshake: \(String(describing: serverEnd.error))")
    }

    @Test func garbageRecordsAfterTheHandshakeEndTheConnectionAndNothingOfThemArrives() async throws {
        let fixture = TLSFixture()
        let listener = try listener(fixture)
        defer { listener.close() }
        let raw = try connectedSocket(port: listener.port)
        let session = try fixture.clientContext().makeClientSession(serverName: "localhost", peerLabel: "server")
        let end = LoopbackEnd(socket: raw, session: session)
        let server = try await accept(listener)
        end.send(Array("before".utf8))
        #expect(await drive([end]) { end.handshakeCompleted && !end.wantsWritable }, "handshake completes")
        #expect(try await server.readAll(count: 6) == Array("before".utf8))
        // An application-data record header with 40 bytes of noise: it cannot authenticate.
        let garbage: [UInt8] = [0x17, 0x03, 0x03, 0x00, 0x28] + patternBytes(40)
        try sendAll(garbage, to: raw)
        let serverEnd = await server.readToEnd()
        #expect(serverEnd.bytes.isEmpty, "nothing of a forged record is delivered")
        #expect(serverEnd.error?.tlsError?.kind == .malformedRecords, "\(String(describing: serverEnd.error))")
        raw.close()
    }

    @Test func peerThatVanishesWithoutCloseNotifyIsTruncationAfterItsData() async throws {
        let fixture = TLSFixture()
        let listener = try listener(fixture)
        defer { listener.close() }
        let client = try await SocketConnection.connect(host: "localhost", port: listener.port, tls: fixture.clientContext())
        let server = try await accept(listener)
        try await client.write(Array("last words".utf8))
        #expect(try await server.readAll(count: 10) == Array("last words".utf8))
        // close() drops the connection without a close_notify, as a killed process would.
        client.close()
        let serverEnd = await server.readToEnd()
        #expect(serverEnd.error?.tlsError?.kind == .truncated, "\(String(describing: serverEnd.error))")
    }

    // MARK: Backpressure, pausing, half-close

    @Test func peerThatNeverReadsStopsTheWriterWithinItsBoundAndLosesNothing() async throws {
        let fixture = TLSFixture()
        let listener = try listener(fixture)
        defer { listener.close() }
        let outboundLimit = 256 * 1024
        let client = try await SocketConnection.connect(
            host: "localhost", port: listener.port, inboundLimit: 64 * 1024, tls: fixture.clientContext())
        let server = try await accept(listener)
        // The server's connection has the default outbound limit.
        let writer = server
        let chunk = 48 * 1024
        let total = 8 * 1024 * 1024
        let payload = patternBytes(total)
        let writing = Task {
            var offset = 0
            while offset < total {
                let end = min(offset + chunk, total)
                try await writer.write(payload[offset..<end])
                offset = end
            }
        }
        // The client reads nothing: the writer must end up suspended, with a bounded queue.
        try await waitUntil("the writer waits for room", timeout: .seconds(60)) { await writer.waitingWriteCount == 1 }
        let queued = await writer.outboundBytes
        let bound = outboundLimit + chunk + SocketChannel.encryptBatchBytes + 4 * 1024
        #expect(queued <= bound, "queued \(queued) bytes (plaintext + ciphertext), bound \(bound)")
        #expect(queued > outboundLimit, "the writer waits only because the queue passed its limit (\(queued))")
        let received = try await client.readAll(count: total)
        try await writing.value
        #expect(received.count == total && received == payload, "every byte arrives, in order, after partial writes inside TLS")
    }

    @Test func pausedReaderResumesWithPlaintextThatWaitedInsideTheSession() async throws {
        let fixture = TLSFixture()
        let listener = try listener(fixture)
        defer { listener.close() }
        // A tiny inbound limit pauses the channel after every delivery, usually with the rest of a
        // 16 KiB record still inside the session, where no socket event will announce it.
        let client = try await SocketConnection.connect(
            host: "localhost", port: listener.port, inboundLimit: 100, tls: fixture.clientContext())
        let server = try await accept(listener)
        let payload = patternBytes(300 * 1024, seed: 7)
        try await server.write(payload)
        server.shutdownWrite()
        let clientEnd = await client.readToEnd()
        #expect(clientEnd.error == nil, "\(String(describing: clientEnd.error))")
        #expect(clientEnd.bytes == payload, "got \(clientEnd.bytes.count) of \(payload.count) bytes")
    }

    @Test(arguments: [TLSVersion.v1_2, .v1_3])
    func halfCloseBothWaysWithCloseNotify(version: TLSVersion) async throws {
        let fixture = TLSFixture()
        let listener = try ConnectionListener(host: "127.0.0.1", port: 0, tls: fixture.serverContext(maximum: version))
        defer { listener.close() }
        let client = try await SocketConnection.connect(host: "localhost", port: listener.port, tls: fixture.clientContext())
        let server = try await accept(listener)
        try await client.write(Array("request".utf8))
        client.shutdownWrite()
        // The server sees the request, then a clean end (close_notify), and can still answer.
        let request = await server.readToEnd()
        #expect(request.error == nil && request.bytes == Array("request".utf8), "\(String(describing: request.error))")
        try await server.write(Array("answer after your close_notify".utf8))
        server.shutdownWrite()
        let answer = await client.readToEnd()
        #expect(answer.error == nil, "\(String(describing: answer.error))")
        #expect(String(decoding: answer.bytes, as: UTF8.self) == "answer after your close_notify")
        #expect(await client.tlsParameters?.hasPrefix(version.description) == true)
    }
}

extension SocketConnection {
    /// Reads until `count` bytes arrived or the stream ended; throws the connection's error.
    func readAll(count: Int) async throws -> [UInt8] {
        var bytes: [UInt8] = []
        var iterator = inbound.makeAsyncIterator()
        while bytes.count < count, let chunk = try await iterator.next() { bytes += chunk }
        return bytes
    }

    /// Reads until at least `count` bytes arrived or the stream ended or failed.
    func readUpTo(count: Int) async -> (bytes: [UInt8], error: SocketError?) {
        var bytes: [UInt8] = []
        var iterator = inbound.makeAsyncIterator()
        do {
            while bytes.count < count, let chunk = try await iterator.next() { bytes += chunk }
            return (bytes, nil)
        } catch {
            return (bytes, error)
        }
    }

    /// Reads until the stream ends or fails, and returns what arrived and the error, if any.
    func readToEnd() async -> (bytes: [UInt8], error: SocketError?) {
        var bytes: [UInt8] = []
        var iterator = inbound.makeAsyncIterator()
        do {
            while let chunk = try await iterator.next() { bytes += chunk }
            return (bytes, nil)
        } catch {
            return (bytes, error)
        }
    }

    /// The error a write fails with, or `nil` if it succeeds.
    func writeFailure(_ bytes: [UInt8]) async -> SocketError? {
        do {
            try await write(bytes)
            return nil
        } catch {
            return error
        }
    }
}

/// Writes all of `bytes` to the fresh socket `socket` (a few bytes: the kernel takes them at once).
private func sendAll(_ bytes: [UInt8], to socket: Socket) throws {
    let result = try bytes.withBytes { bytes throws(SocketError) in try socket.write(bytes) }
    guard case .done(bytes.count) = result else { throw HarnessError("the kernel did not take \(bytes.count) bytes at once") }
}

/// Polls `condition` every 10 ms until it holds, recording an issue after `timeout`. For effects
/// with no event to wait on (a server reading bytes it will not answer).
func waitUntil(_ what: String, timeout: Duration = .seconds(30), _ condition: () async -> Bool) async throws {
    if !(await eventually(timeout: timeout, every: .milliseconds(10), condition)) {
        Issue.record("timed out waiting until \(what)")
    }
}
