import Foundation
import Glibc
import SocketCore
import Testing
import TestSupport
@testable import SocketTLS

/// Sessions against an independent TLS implementation: the `openssl` command's `s_server` and
/// `s_client` over real loopback sockets. This is also where peers that do what our own sessions
/// never do live: renegotiation requests, key update requests, TLS 1.1, ciphers without forward
/// secrecy.
@Suite("TLS against the openssl command", .serialized)
struct OpenSSLInteropTests {
    static let openssl = URL(fileURLWithPath: "/usr/bin/openssl")

    /// Starts `openssl s_server` on a free loopback port and returns it with the port.
    private func startServer(_ fixture: TLSFixture, _ options: [String]) async throws -> (ChildProcess, Int) {
        let server = try ChildProcess(Self.openssl, [
            "s_server", "-accept", "127.0.0.1:0", "-naccept", "1",
            "-cert", fixture.server.certificateFile, "-key", fixture.server.keyFile,
        ] + options)
        #expect(await server.waitForOutput("ACCEPT 127.0.0.1:"), "s_server did not start: \(server.output)")
        let line = try #require(server.lines.first { $0.hasPrefix("ACCEPT 127.0.0.1:") })
        let port = try #require(Int(line.split(separator: ":").last ?? ""))
        return (server, port)
    }

    /// Starts `openssl s_client` against a listening socket of ours and returns it with our end.
    private func connectClient(_ fixture: TLSFixture, server context: TLSContext, _ options: [String])
        throws -> (ChildProcess, LoopbackEnd)
    {
        let listener = try listeningSocket()
        defer { listener.close() }
        let client = try ChildProcess(Self.openssl, [
            "s_client", "-connect", "127.0.0.1:\(try listener.localAddress().port)", "-servername", "localhost",
            "-CAfile", fixture.ca.certificateFile, "-verify_return_error",
        ] + options)
        guard let accepted = try acceptOne(from: listener) else {
            client.stop()
            throw HarnessError("s_client did not connect: \(client.output)")
        }
        return (client, LoopbackEnd(socket: accepted, session: context.makeServerSession(peerLabel: "s_client")))
    }

    /// Everything `child` printed, once it has exited (it does after a failed connection): its
    /// last lines can arrive after our end of the connection has already closed.
    private func finalOutput(of child: ChildProcess) async -> String {
        let status = await child.waitForExit()
        #expect(status != nil, "openssl did not exit: \(child.output)")
        return child.output
    }

    @Test(arguments: ["-tls1_2", "-tls1_3"])
    func ourClientTalksToOpenSSLServer(version: String) async throws {
        let fixture = TLSFixture()
        let (server, port) = try await startServer(fixture, [version])
        defer { server.stop() }
        let session = try fixture.clientContext().makeClientSession(serverName: "localhost", peerLabel: "s_server")
        let end = LoopbackEnd(socket: try connectedSocket(port: port), session: session)
        defer { end.socket.close() }
        end.send(Array("hello from swift\n".utf8))
        #expect(await drive([end]) { server.output.contains("hello from swift") }, "s_server output: \(server.output)")
        server.send("hello from openssl")
        #expect(await drive([end]) { String(decoding: end.received, as: UTF8.self).contains("hello from openssl") })
        #expect(end.error == nil, "\(String(describing: end.error))")
        #expect(session.negotiatedVersion == (version == "-tls1_2" ? .v1_2 : .v1_3))
    }

    @Test(arguments: ["-tls1_2", "-tls1_3"])
    func openSSLClientTalksToOurServer(version: String) async throws {
        let fixture = TLSFixture()
        let (client, end) = try connectClient(fixture, server: try fixture.serverContext(), [version, "-quiet"])
        defer {
            client.stop()
            end.socket.close()
        }
        client.send("hello from openssl")
        #expect(await drive([end]) { String(decoding: end.received, as: UTF8.self).contains("hello from openssl") },
                "s_client output: \(client.output)")
        end.send(Array("hello from swift\n".utf8))
        #expect(await drive([end]) { client.output.contains("hello from swift") }, "s_client output: \(client.output)")
        #expect(end.error == nil, "\(String(describing: end.error))")
    }

    @Test func renegotiationRequestIsRefusedAndNamed() async throws {
        let fixture = TLSFixture()
        // s_client's "R" command renegotiates (TLS 1.2 only); commands need no -quiet.
        let (client, end) = try connectClient(fixture, server: try fixture.serverContext(), ["-tls1_2"])
        defer {
            client.stop()
            end.socket.close()
        }
        client.send("before")
        #expect(await drive([end]) { String(decoding: end.received, as: UTF8.self).contains("before") }, "s_client: \(client.output)")
        client.send("R")
        #expect(await drive([end]) { end.isClosed }, "s_client: \(client.output)")
        let output = await finalOutput(of: client)
        #expect(output.contains("RENEGOTIATING"))
        #expect(output.contains("no renegotiation"), "s_client was told no_renegotiation: \(output)")
        #expect(end.error?.kind == .renegotiationRefused, "\(String(describing: end.error))")
        #expect(end.error?.reason.contains("asked to renegotiate the TLS session, which this server refuses") == true)
    }

    @Test func serverRequestToRenegotiateIsRefusedByOurClient() async throws {
        let fixture = TLSFixture()
        let (server, port) = try await startServer(fixture, ["-tls1_2"])
        defer { server.stop() }
        let session = try fixture.clientContext().makeClientSession(serverName: "localhost", peerLabel: "s_server")
        let end = LoopbackEnd(socket: try connectedSocket(port: port), session: session)
        defer { end.socket.close() }
        end.send(Array("hello\n".utf8))
        #expect(await drive([end]) { server.output.contains("hello") }, "s_server: \(server.output)")
        // s_server's "r" command sends a HelloRequest.
        server.send("r")
        #expect(await drive([end]) { end.isClosed }, "s_server: \(server.output)")
        let output = await finalOutput(of: server)
        #expect(output.contains("no renegotiation"), "s_server was told no_renegotiation: \(output)")
        #expect(end.error?.kind == .renegotiationRefused, "\(String(describing: end.error))")
        #expect(end.error?.reason.hasPrefix("the server asked to renegotiate") == true)
    }

    @Test func keyUpdateRequestedByOpenSSLIsAnswered() async throws {
        let fixture = TLSFixture()
        let (client, end) = try connectClient(fixture, server: try fixture.serverContext(), ["-tls1_3"])
        defer {
            client.stop()
            end.socket.close()
        }
        client.send("first")
        #expect(await drive([end]) { String(decoding: end.received, as: UTF8.self).contains("first") }, "s_client: \(client.output)")
        // "K": a KeyUpdate that asks us to update our keys as well.
        client.send("K")
        #expect(await drive([end]) { client.output.contains("KEYUPDATE") }, "s_client: \(client.output)")
        client.send("second")
        end.send(Array("reply after update\n".utf8))
        #expect(await drive([end]) { String(decoding: end.received, as: UTF8.self).contains("second") && client.output.contains("reply after update") },
                "s_client: \(client.output)")
        #expect(end.error == nil, "\(String(describing: end.error))")
    }

    @Test func tls11ClientIsRefusedNamingTheVersion() async throws {
        let fixture = TLSFixture()
        // OpenSSL 3 offers TLS 1.1 only at security level 0.
        let (client, end) = try connectClient(fixture, server: try fixture.serverContext(), ["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"])
        defer {
            client.stop()
            end.socket.close()
        }
        #expect(await drive([end]) { end.isClosed }, "s_client: \(client.output)")
        #expect(end.error?.kind == .protocolVersion, "\(String(describing: end.error))")
        #expect(end.error?.reason.hasPrefix("the client offered only versions older than TLS 1.2 (this server speaks TLS 1.2 and 1.3)") == true,
                "\(String(describing: end.error))")
        let output = await finalOutput(of: client)
        #expect(output.contains("protocol version"), "s_client was told: \(output)")
    }

    @Test func clientWithoutForwardSecretCiphersIsRefusedNamingIt() async throws {
        let fixture = TLSFixture()
        let (client, end) = try connectClient(fixture, server: try fixture.serverContext(), ["-tls1_2", "-cipher", "AES128-SHA"])
        defer {
            client.stop()
            end.socket.close()
        }
        #expect(await drive([end]) { end.isClosed }, "s_client: \(client.output)")
        #expect(end.error?.kind == .noSharedCipher, "\(String(describing: end.error))")
    }

    @Test func openSSLServerOnlySpeakingTLS13RefusesOurTLS12Client() async throws {
        let fixture = TLSFixture()
        let (server, port) = try await startServer(fixture, ["-tls1_3"])
        defer { server.stop() }
        let session = try fixture.clientContext(maximum: .v1_2).makeClientSession(serverName: "localhost", peerLabel: "s_server")
        let end = LoopbackEnd(socket: try connectedSocket(port: port), session: session)
        defer { end.socket.close() }
        #expect(await drive([end]) { end.isClosed })
        #expect(end.error?.kind == .protocolVersion, "\(String(describing: end.error))")
    }
}
