import Foundation
import Testing
import TestSupport
@testable import SocketTLS

/// Scripts/dev-cert.sh, run for real: what it makes loads without warnings and verifies over
/// loopback for every name it promises.
@Suite("Scripts/dev-cert.sh", .serialized)
struct DevCertScriptTests {
    static let script = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Scripts/dev-cert.sh")

    private func run(_ arguments: [String]) async throws -> ChildProcess {
        let script = try ChildProcess(Self.script, arguments)
        let status = await script.waitForExit()
        #expect(status == 0, "dev-cert.sh \(arguments) exited \(String(describing: status)): \(script.output)")
        return script
    }

    @Test func certificatesItMakesVerifyForEveryPromisedName() async throws {
        let pki = TestPKI()
        let directory = pki.path("dev")
        _ = try await run(["--out", directory, "--name", "chat.internal"])
        let server = try TLSContext(.server(certificateChainFile: "\(directory)/server.pem", privateKeyFile: "\(directory)/server-key.pem"))
        #expect(server.warnings.isEmpty, "\(server.warnings)")
        #expect(server.certificate?.names == ["localhost", "127.0.0.1", "::1", "chat.internal"])
        let client = try TLSContext(.client(trust: .certificateAuthorities(file: "\(directory)/ca.pem")))

        for (ip, name) in [("127.0.0.1", "127.0.0.1"), ("::1", "::1"), ("127.0.0.1", "localhost"), ("127.0.0.1", "chat.internal")] {
            let sockets = try loopbackSocketPair(ip: ip)
            let clientEnd = LoopbackEnd(socket: sockets.client, session: try client.makeClientSession(serverName: name, peerLabel: name))
            let serverEnd = LoopbackEnd(socket: sockets.server, session: server.makeServerSession(peerLabel: "client"))
            clientEnd.send(Array("hi".utf8))
            #expect(await drive([clientEnd, serverEnd]) { serverEnd.received == Array("hi".utf8) || clientEnd.error != nil },
                    "handshake for \(name)")
            #expect(clientEnd.error == nil, "\(name): \(String(describing: clientEnd.error))")
            sockets.client.close()
            sockets.server.close()
        }
    }

    @Test func secondRunKeepsTheCAAndIssuesAFreshServerCertificate() async throws {
        let pki = TestPKI()
        let directory = pki.path("dev")
        let first = try await run(["--out", directory])
        #expect(first.output.contains("made a new CA"))
        let ca = pki.read("\(directory)/ca.pem")
        let certificate = pki.read("\(directory)/server.pem")
        let second = try await run(["--out", directory, "--days", "7"])
        #expect(second.output.contains("kept the CA"))
        #expect(pki.read("\(directory)/ca.pem") == ca, "clients that trust the CA keep working")
        #expect(pki.read("\(directory)/server.pem") != certificate)
        let context = try TLSContext(.server(certificateChainFile: "\(directory)/server.pem", privateKeyFile: "\(directory)/server-key.pem"))
        #expect(context.warnings.count == 1 && context.warnings.first?.contains("in 7 days") == true,
                "a 7-day certificate is warned about: \(context.warnings)")
    }

    @Test func badDaysIsRefused() async throws {
        let script = try ChildProcess(Self.script, ["--days", "soon"])
        #expect(await script.waitForExit() == 2)
        #expect(script.output.contains("--days must be a positive whole number, not 'soon'"))
    }
}
