import COpenSSL
import Glibc
import SocketCore
import Testing
@testable import SocketTLS

/// Sessions over real loopback TCP sockets: a verified handshake, and every way a handshake fails,
/// each seen from both sides. Run serialized: each test owns two sockets and a poll loop.
@Suite("TLS over loopback", .serialized)
struct TLSLoopbackTests {
    /// Connects a client session to a server session over loopback and drives both until each has
    /// either failed or closed.
    private func handshake(
        client: TLSSession?, server: TLSSession?, ip: String = "127.0.0.1", clientSends: String = "", serverSends: String = ""
    ) async throws -> (client: LoopbackEnd, server: LoopbackEnd) {
        let sockets = try loopbackSocketPair(ip: ip)
        let clientEnd = LoopbackEnd(socket: sockets.client, session: client)
        let serverEnd = LoopbackEnd(socket: sockets.server, session: server)
        clientEnd.send(Array(clientSends.utf8))
        serverEnd.send(Array(serverSends.utf8))
        clientEnd.closeOutput()
        serverEnd.closeOutput()
        let settled = await drive([clientEnd, serverEnd]) { clientEnd.isClosed && serverEnd.isClosed }
        #expect(settled, "both ends should have finished; client error \(String(describing: clientEnd.error)), server error \(String(describing: serverEnd.error))")
        clientEnd.socket.close()
        serverEnd.socket.close()
        return (clientEnd, serverEnd)
    }

    // MARK: Success

    @Test(arguments: [("127.0.0.1", "127.0.0.1"), ("::1", "::1"), ("127.0.0.1", "localhost")])
    func verifiedHandshakeCarriesDataAndClosesCleanly(ip: String, serverName: String) async throws {
        let fixture = TLSFixture()
        let client = try fixture.clientContext().makeClientSession(serverName: serverName, peerLabel: ip)
        let server = try fixture.serverContext().makeServerSession(peerLabel: "client")
        let ends = try await handshake(client: client, server: server, ip: ip, clientSends: "hello from the client", serverSends: "hello from the server")
        #expect(ends.client.error == nil, "\(String(describing: ends.client.error))")
        #expect(ends.server.error == nil, "\(String(describing: ends.server.error))")
        #expect(String(decoding: ends.server.received, as: UTF8.self) == "hello from the client")
        #expect(String(decoding: ends.client.received, as: UTF8.self) == "hello from the server")
        #expect(ends.client.inputEnded && ends.server.inputEnded, "both close_notify alerts arrived")
        #expect(client.parametersDescription.hasPrefix("TLS 1.3, TLS_"), "\(client.parametersDescription)")
    }

    @Test func serverSendsItsIntermediatesSoAClientTrustingOnlyTheRootVerifies() async throws {
        let fixture = TLSFixture()
        let intermediate = fixture.pki.certificateAuthority("SocketTLS Intermediate CA", issuedBy: fixture.ca)
        let leaf = fixture.pki.serverCertificate("leaf", issuedBy: intermediate)
        let chain = fixture.pki.concatenate("chain.pem", [leaf.certificateFile, intermediate.certificateFile])
        let server = try TLSContext(.server(certificateChainFile: chain, privateKeyFile: leaf.keyFile)).makeServerSession(peerLabel: "client")
        let client = try fixture.clientContext().makeClientSession(serverName: "localhost", peerLabel: "server")
        let ends = try await handshake(client: client, server: server, clientSends: "ping")
        #expect(ends.client.error == nil && ends.server.error == nil, "\(String(describing: ends.client.error))")
        #expect(ends.server.received == Array("ping".utf8))
    }

    @Test func clientSendsTheHostNameAsSNIButNotAnAddress() async throws {
        let fixture = TLSFixture()
        for (name, expected) in [("localhost", "localhost"), ("127.0.0.1", nil)] as [(String, String?)] {
            let client = try fixture.clientContext().makeClientSession(serverName: name, peerLabel: "server")
            let server = try fixture.serverContext().makeServerSession(peerLabel: "client")
            let ends = try await handshake(client: client, server: server)
            #expect(ends.client.error == nil)
            let sent = SSL_get_servername(server.ssl, TLSEXT_NAMETYPE_host_name).map { String(cString: $0) }
            #expect(sent == expected, "SNI for \(name)")
        }
    }

    @Test func clientWithoutANameVerifiesTheChainOnly() async throws {
        let fixture = TLSFixture()
        let elsewhere = fixture.pki.serverCertificate("elsewhere", commonName: "chat.example", names: ["chat.example"], issuedBy: fixture.ca)
        let client = try fixture.clientContext().makeClientSession(serverName: nil, peerLabel: "server")
        let server = try fixture.serverContext(elsewhere).makeServerSession(peerLabel: "client")
        let ends = try await handshake(client: client, server: server)
        #expect(ends.client.error == nil, "a certificate for another name passes when no name is checked")

        let stranger = fixture.pki.serverCertificate("stranger", issuedBy: nil)
        let strict = try fixture.clientContext().makeClientSession(serverName: nil, peerLabel: "server")
        let refused = try await handshake(client: strict, server: try fixture.serverContext(stranger).makeServerSession(peerLabel: "client"))
        #expect(refused.client.error?.kind == .untrustedCertificate, "the chain is still verified")
    }

    @Test func insecureClientConnectsAndSaysWhatItIgnored() async throws {
        let fixture = TLSFixture()
        let selfSigned = fixture.pki.serverCertificate("self", issuedBy: nil)
        let client = try fixture.clientContext(trust: .insecureAcceptAnything).makeClientSession(serverName: "localhost", peerLabel: "server")
        let server = try fixture.serverContext(selfSigned).makeServerSession(peerLabel: "client")
        let ends = try await handshake(client: client, server: server, clientSends: "unauthenticated but encrypted")
        #expect(ends.client.error == nil && ends.server.error == nil)
        #expect(ends.server.received == Array("unauthenticated but encrypted".utf8))
        let ignored = try #require(client.ignoredVerificationFailure, "the client knows verification would have failed")
        #expect(ignored.kind == .untrustedCertificate)
        #expect(ignored.reason.contains("self-signed"), "\(ignored)")
    }

    // MARK: The server's certificate refused by the client

    @Test func expiredCertificateIsRefusedWithItsDate() async throws {
        let fixture = TLSFixture()
        let expired = fixture.pki.serverCertificate("expired", issuedBy: fixture.ca, validFrom: -10 * 86_400, validFor: 5 * 86_400)
        let client = try fixture.clientContext().makeClientSession(serverName: "localhost", peerLabel: "localhost:7443")
        let server = try fixture.serverContext(expired).makeServerSession(peerLabel: "127.0.0.1:50000")
        let ends = try await handshake(client: client, server: server, clientSends: "secret")
        let error = try #require(ends.client.error)
        #expect(error.kind == .certificateExpired)
        let until = try #require(TLSCertificateSummary(expired.certificate).validUntil as String?)
        #expect(error.description.hasPrefix("TLS handshake with localhost:7443 failed: the server's certificate (CN=localhost) expired at \(until); the server must renew it"), "\(error)")
        #expect(ends.server.error?.kind == .peerRejectedCertificate(.certificateExpired), "\(String(describing: ends.server.error))")
        #expect(ends.server.error?.reason.contains("renew it") == true)
        #expect(ends.server.received.isEmpty, "nothing the client queued was sent")
    }

    @Test func notYetValidCertificateIsRefusedWithItsStart() async throws {
        let fixture = TLSFixture()
        let early = fixture.pki.serverCertificate("early", issuedBy: fixture.ca, validFrom: 2 * 86_400)
        let client = try fixture.clientContext().makeClientSession(serverName: "localhost", peerLabel: "server")
        let ends = try await handshake(client: client, server: try fixture.serverContext(early).makeServerSession(peerLabel: "client"))
        let error = try #require(ends.client.error)
        #expect(error.kind == .certificateNotYetValid)
        #expect(error.reason.contains("is not valid before \(TLSCertificateSummary(early.certificate).validFrom)"), "\(error)")
        #expect(ends.server.error?.kind.isPeerRejection == true, "\(String(describing: ends.server.error))")
    }

    @Test func certificateForAnotherHostIsRefusedNamingBoth() async throws {
        let fixture = TLSFixture()
        let other = fixture.pki.serverCertificate("other", commonName: "chat.example", names: ["chat.example", "10.1.2.3"], issuedBy: fixture.ca)
        let client = try fixture.clientContext().makeClientSession(serverName: "localhost", peerLabel: "localhost:7443")
        let ends = try await handshake(client: client, server: try fixture.serverContext(other).makeServerSession(peerLabel: "client"))
        let error = try #require(ends.client.error)
        #expect(error.kind == .hostnameMismatch)
        #expect(error.reason.hasPrefix("the server's certificate (CN=chat.example) is for chat.example, 10.1.2.3, not for localhost; "), "\(error)")
        #expect(ends.server.error?.kind == .peerRejectedCertificate(.badCertificate), "\(String(describing: ends.server.error))")
        #expect(ends.server.error?.reason.contains("does not name the host") == true)
    }

    @Test func certificateWithoutTheAddressConnectedToIsRefused() async throws {
        let fixture = TLSFixture()
        let namesOnly = fixture.pki.serverCertificate("names-only", names: ["localhost"], issuedBy: fixture.ca)
        let client = try fixture.clientContext().makeClientSession(serverName: "127.0.0.1", peerLabel: "127.0.0.1:7443")
        let ends = try await handshake(client: client, server: try fixture.serverContext(namesOnly).makeServerSession(peerLabel: "client"))
        #expect(ends.client.error?.kind == .hostnameMismatch)
        #expect(ends.client.error?.reason.contains("is for localhost, not for 127.0.0.1") == true, "\(String(describing: ends.client.error))")
    }

    @Test func certificateFromAnUnknownCAIsRefusedNamingTheIssuer() async throws {
        let fixture = TLSFixture()
        let otherCA = fixture.pki.certificateAuthority("Some Other CA")
        let foreign = fixture.pki.serverCertificate("foreign", issuedBy: otherCA)
        let client = try fixture.clientContext().makeClientSession(serverName: "localhost", peerLabel: "server")
        let ends = try await handshake(client: client, server: try fixture.serverContext(foreign).makeServerSession(peerLabel: "client"))
        let error = try #require(ends.client.error)
        #expect(error.kind == .untrustedCertificate)
        #expect(error.reason.contains("is issued by CN=Some Other CA, a CA this client does not trust"), "\(error)")
        let serverError = try #require(ends.server.error)
        #expect(serverError.kind == .peerRejectedCertificate(.unknownCA))
        #expect(serverError.reason.hasPrefix("the client does not trust the CA that signed this server's certificate"), "\(serverError)")
    }

    @Test func selfSignedCertificateIsRefusedAsSuch() async throws {
        let fixture = TLSFixture()
        let selfSigned = fixture.pki.serverCertificate("self", issuedBy: nil)
        let client = try fixture.clientContext().makeClientSession(serverName: "localhost", peerLabel: "server")
        let ends = try await handshake(client: client, server: try fixture.serverContext(selfSigned).makeServerSession(peerLabel: "client"))
        #expect(ends.client.error?.kind == .untrustedCertificate)
        #expect(ends.client.error?.reason.contains("is self-signed and not trusted here") == true, "\(String(describing: ends.client.error))")
        #expect(ends.server.error?.kind.isPeerRejection == true)
    }

    // MARK: Versions

    @Test func noCommonVersionIsNamedOnBothSides() async throws {
        let fixture = TLSFixture()
        let client = try fixture.clientContext(maximum: .v1_2).makeClientSession(serverName: "localhost", peerLabel: "server")
        let server = try fixture.serverContext(minimum: .v1_3).makeServerSession(peerLabel: "client")
        let ends = try await handshake(client: client, server: server)
        #expect(ends.server.error?.kind == .protocolVersion, "\(String(describing: ends.server.error))")
        #expect(ends.server.error?.reason.contains("this server speaks TLS 1.3 only") == true, "\(String(describing: ends.server.error))")
        #expect(ends.client.error?.kind == .protocolVersion, "\(String(describing: ends.client.error))")
        #expect(ends.client.error?.reason.contains("with alert protocol_version") == true)
    }

    // MARK: Plain text on one side

    @Test func plainTextClientOnTheTLSPortGetsNothingAndIsNamed() async throws {
        let fixture = TLSFixture()
        let server = try fixture.serverContext().makeServerSession(peerLabel: "127.0.0.1:50001")
        let ends = try await handshake(client: nil, server: server, clientSends: "HELLO alice\n")
        #expect(ends.server.error?.kind == .notTLS)
        #expect(ends.server.error?.reason.contains("(\"HELLO alice.\")") == true, "\(String(describing: ends.server.error))")
        #expect(ends.client.received.isEmpty, "the plain-text client gets no TLS bytes, only the close")
        #expect(ends.client.inputEnded)
    }

    @Test func plainTextServerAnsweringIsNamed() async throws {
        let fixture = TLSFixture()
        let client = try fixture.clientContext().makeClientSession(serverName: "localhost", peerLabel: "localhost:7000")
        let ends = try await handshake(client: client, server: nil, serverSends: "welcome to plain chat\n")
        #expect(ends.client.error?.kind == .notTLS)
        #expect(ends.client.error?.reason.contains("(\"welcome to plain ch\")") == true || ends.client.error?.reason.contains("welcome") == true,
                "\(String(describing: ends.client.error))")
    }

    @Test func silentPlainTextServerThatHangsUpIsNamed() async throws {
        let fixture = TLSFixture()
        let client = try fixture.clientContext().makeClientSession(serverName: "localhost", peerLabel: "localhost:7000")
        let ends = try await handshake(client: client, server: nil)
        #expect(ends.client.error?.kind == .closedDuringHandshake)
        #expect(ends.client.error?.reason.contains("does not speak TLS on this port") == true)
    }

    // MARK: The end of the stream

    @Test func peerThatVanishesWithoutCloseNotifyIsTruncation() async throws {
        let fixture = TLSFixture()
        let client = try fixture.clientContext().makeClientSession(serverName: "localhost", peerLabel: "server")
        let server = try fixture.serverContext().makeServerSession(peerLabel: "client")
        let sockets = try loopbackSocketPair()
        let clientEnd = LoopbackEnd(socket: sockets.client, session: client)
        let serverEnd = LoopbackEnd(socket: sockets.server, session: server)
        clientEnd.send(Array("before the crash".utf8))
        #expect(await drive([clientEnd, serverEnd]) { serverEnd.received.count == 16 })
        // The client process dies: the kernel closes its socket, with no close_notify.
        clientEnd.socket.close()
        #expect(await drive([serverEnd]) { serverEnd.isClosed })
        #expect(serverEnd.received == Array("before the crash".utf8))
        #expect(serverEnd.error?.kind == .truncated, "\(String(describing: serverEnd.error))")
    }
}

extension TLSError.Kind {
    /// Whether this says the peer refused this side's certificate.
    var isPeerRejection: Bool {
        if case .peerRejectedCertificate = self { return true }
        return false
    }
}
