import ChatClient
import ChatProtocol
import Foundation
import Glibc
import SocketCore
import SocketTLS
import Testing
import TestSupport

/// The real `chat-server` with `--tls-cert/--tls-key`, certificates from Scripts/dev-cert.sh in a
/// temporary directory: chat over TLS beside a plain-text port, each hostile client's defined end,
/// and SIGHUP reloading the certificate while connections carry on.
@Suite("chat-server over TLS", .serialized)
struct TLSServerTests {
    private func connect(
        _ server: ChatServerProcess, nick: String, certificates: DevCertificates, host: String = "localhost"
    ) async throws -> ChatConnection {
        try await ChatConnection.connect(host: host, port: server.port, nick: nick, tls: certificates.clientContext())
    }

    @Test func chatsOverTLSBesideAPlainTextPort() async throws {
        let certificates = try await DevCertificates.make()
        let server = try await ChatServerProcess(arguments: certificates.serverArguments + ["--plain-port", "0"])
        defer { server.stop() }
        #expect(await server.child.waitForOutput("plain text also on port "), "\(server.child.output)")
        let plainPort = try #require(
            server.child.lines.first { $0.hasPrefix("plain text also on port ") }.flatMap { Int($0.split(separator: " ").last ?? "") })

        let alice = try await connect(server, nick: "alice", certificates: certificates)
        let bob = try await ChatConnection.connect(host: "127.0.0.1", port: plainPort, nick: "bob")
        #expect(await alice.tlsParameters?.hasPrefix("TLS 1.3, ") == true)
        #expect(await bob.tlsParameters == nil)
        var aliceFrames = alice.frames.makeAsyncIterator()
        var bobFrames = bob.frames.makeAsyncIterator()
        try await alice.send(.join(room: "r"))
        try await bob.send(.join(room: "r"))
        // Bob's own members frame comes after alice is in the room.
        while let frame = try await bobFrames.next() { if case .members("r", _) = frame { break } }
        try await alice.send(.say(room: "r", text: "sealed"))
        var heard: String?
        while let frame = try await bobFrames.next() {
            if case .message("r", _, _, "alice", let text) = frame {
                heard = text
                break
            }
        }
        #expect(heard == "sealed", "a line sent over TLS reaches a plain-text member")
        try await bob.send(.say(room: "r", text: "in the clear"))
        var echoed: String?
        while let frame = try await aliceFrames.next() {
            if case .message("r", _, _, "bob", let text) = frame {
                echoed = text
                break
            }
        }
        #expect(echoed == "in the clear")
    }

    @Test func clientWithoutTheCAIsRefusedAsUntrustedAndTheServerLogsIt() async throws {
        let certificates = try await DevCertificates.make()
        let server = try await ChatServerProcess(arguments: certificates.serverArguments)
        defer { server.stop() }
        do {
            _ = try await ChatConnection.connect(
                host: "localhost", port: server.port, nick: "eve", tls: TLSContext(.client(trust: .systemDefault)))
            Issue.record("a client that does not trust the dev CA must not get through")
        } catch let error as SocketError {
            #expect(error.tlsError?.kind == .untrustedCertificate, "\(error)")
        }
        #expect(await server.child.waitForOutput("unknown_ca"), "the server logs why: \(server.child.output)")
    }

    @Test func plainTextClientOnTheTLSPortGetsNoChatAndIsLogged() async throws {
        let certificates = try await DevCertificates.make()
        let server = try await ChatServerProcess(arguments: certificates.serverArguments)
        defer { server.stop() }
        let plain = try await SocketConnection.connect(host: "127.0.0.1", port: server.port)
        try await plain.write(FrameEncoder.encode(.hello(version: 1, nick: "cleartext", password: nil)))
        var received: [UInt8] = []
        do {
            for try await chunk in plain.inbound { received += chunk }
        } catch {}
        // At most a TLS alert record (7 bytes), never a frame.
        #expect(received.count <= 7, "at most an alert, got \(received)")
        #expect(received.isEmpty || received[0] == 0x15, "an alert record if anything, got \(received)")
        #expect(await server.child.waitForOutput("speaking plain text to this TLS port"), "\(server.child.output)")
    }

    @Test func clientThatStallsMidHandshakeIsDroppedAtTheHandshakeTimeout() async throws {
        let certificates = try await DevCertificates.make()
        let server = try await ChatServerProcess(arguments: certificates.serverArguments + ["--handshake-timeout", "1"])
        defer { server.stop() }
        let session = try certificates.clientContext().makeClientSession(serverName: "localhost", peerLabel: "server")
        let hello = withExtendedLifetime(session) { Array(session.pendingCiphertext) }
        let staller = try await SocketConnection.connect(host: "127.0.0.1", port: server.port)
        // The first 10 bytes of a real ClientHello, then silence: a TLS slowloris.
        try await staller.write(hello.prefix(10))
        var received: [UInt8] = []
        do {
            for try await chunk in staller.inbound { received += chunk }
        } catch {}
        #expect(received.isEmpty, "a client without TLS keys is told nothing: \(received)")
        #expect(await server.child.waitForOutput("TLS handshake not finished within"), "\(server.child.output)")
    }

    @Test func sighupReloadsTheCertificateWhileConnectionsCarryOn() async throws {
        let certificates = try await DevCertificates.make()
        let server = try await ChatServerProcess(arguments: certificates.serverArguments)
        defer { server.stop() }
        let alice = try await connect(server, nick: "alice", certificates: certificates)
        #expect(await alice.tlsPeer?.certificate?.names.contains("reloaded.test") == false)
        var aliceFrames = alice.frames.makeAsyncIterator()
        try await alice.send(.join(room: "r"))
        while let frame = try await aliceFrames.next() { if case .members("r", _) = frame { break } }

        try await certificates.issue(names: ["reloaded.test"])
        server.child.signal(SIGHUP)
        #expect(await server.child.waitForOutput("TLS certificate reloaded"), "\(server.child.output)")
        let bob = try await connect(server, nick: "bob", certificates: certificates)
        #expect(await bob.tlsPeer?.certificate?.names.contains("reloaded.test") == true, "a new client gets the new certificate")
        try await bob.send(.join(room: "r"))
        try await alice.send(.say(room: "r", text: "still here"))
        var heard = false
        var bobFrames = bob.frames.makeAsyncIterator()
        while let frame = try await bobFrames.next() {
            if case .message("r", _, _, "alice", "still here") = frame {
                heard = true
                break
            }
        }
        #expect(heard, "alice's connection from before the reload still chats")

        // A broken key: the reload fails, is logged, and the current certificate keeps serving.
        let keyFile = "\(certificates.directory)/server-key.pem"
        try "not a key\n".write(toFile: keyFile, atomically: true, encoding: .utf8)
        server.child.signal(SIGHUP)
        #expect(await server.child.waitForOutput("TLS reload failed"), "\(server.child.output)")
        let carol = try await connect(server, nick: "carol", certificates: certificates)
        #expect(await carol.tlsPeer?.certificate?.names.contains("reloaded.test") == true)
        #expect(server.child.output.contains(keyFile), "the failure names the file")
    }

    @Test func terminalClientChatsOverTLSAndSaysSoOrRefusesAnUntrustedServerOnce() async throws {
        let certificates = try await DevCertificates.make()
        let server = try await ChatServerProcess(arguments: certificates.serverArguments)
        defer { server.stop() }
        let client = try ChildProcess.builtExecutable(named: "chat-client")
        let common = ["--host", "localhost", "--port", "\(server.port)", "--room", "general"]
        // A home that does not exist, so a developer's config.toml and logs never apply.
        let home = "/tmp/chat-client-no-home-\(getpid())"
        let isolated = [
            "HOME": home, "XDG_CONFIG_HOME": home + "/.config", "XDG_DATA_HOME": home + "/.local/share",
            "XDG_STATE_HOME": home + "/.local/state",
        ]

        let ann = try ChildProcess(client, ["--nick", "ann", "--tls-ca", certificates.caFile] + common, environment: isolated)
        defer { ann.stop() }
        #expect(await ann.waitForOutput("-!- ann joined"), "ann joins over TLS: \(ann.output)")
        #expect(ann.output.contains("encrypted: TLS 1.3"), "the client says the connection is encrypted: \(ann.output)")
        #expect(ann.output.contains("verified") && !ann.output.contains("NOT verified"), "\(ann.output)")
        ann.send("hello over TLS")
        #expect(await ann.waitForOutput("<ann> hello over TLS"), "\(ann.output)")

        // The system's CAs do not include the dev CA: one clear error, no retrying, exit 1.
        let eve = try ChildProcess(client, ["--nick", "eve", "--tls"] + common, environment: isolated)
        #expect(await eve.waitForExit() == 1, "\(eve.output)")
        #expect(eve.output.contains("--tls-ca FILE"), "the error says which flag helps: \(eve.output)")

        let tess = try ChildProcess(client, ["--nick", "tess", "--tls-insecure"] + common, environment: isolated)
        defer { tess.stop() }
        #expect(await tess.waitForOutput("-!- tess joined"), "\(tess.output)")
        #expect(tess.output.contains("WARNING: --tls-insecure"), "the warning cannot be missed: \(tess.output)")
        #expect(tess.output.contains("NOT verified"), "\(tess.output)")
        #expect(tess.output.contains("Verification would have failed"), "names what was ignored: \(tess.output)")
    }

    @Test func loadTesterDeliversEveryMessageOverTLS() async throws {
        let certificates = try await DevCertificates.make()
        let server = try await ChatServerProcess(arguments: certificates.serverArguments + ["--no-rate-limits"])
        defer { server.stop() }
        let loadTest = try ChildProcess(
            try ChildProcess.builtExecutable(named: "chat-loadtest"),
            ["--host", "localhost", "--port", "\(server.port)", "--tls-ca", certificates.caFile, "--clients", "40", "--rooms", "2",
             "--senders", "4", "--messages", "2000", "--duration", "30", "--no-progress"])
        let status = await loadTest.waitForExit(timeout: .seconds(120))
        #expect(status == 0, "every client joins over TLS and every delivery arrives: \(loadTest.output)")
        #expect(loadTest.output.contains("Connecting (TLS)"), "\(loadTest.output)")
        #expect(loadTest.output.contains("lost 0, duplicated 0, reordered 0"), "\(loadTest.output)")
    }

    @Test func mismatchedFlagsAndABadKeyAreRefusedAtStart() async throws {
        let certificates = try await DevCertificates.make()
        let executable = try ChildProcess.builtExecutable(named: "chat-server")
        let onlyCert = try ChildProcess(executable, ["--port", "0", "--tls-cert", "\(certificates.directory)/server.pem"])
        #expect(await onlyCert.waitForExit() != 0)
        #expect(onlyCert.output.contains("--tls-cert and --tls-key go together"), "\(onlyCert.output)")
        let swapped = try ChildProcess(
            executable,
            [
                "--port", "0", "--no-persistence", "--tls-cert", "\(certificates.directory)/server-key.pem", "--tls-key",
                "\(certificates.directory)/server.pem",
            ])
        #expect(await swapped.waitForExit() == 2, "a TLS error exits 2")
        #expect(swapped.output.contains("chat-server: load"), "the TLSError's sentence: \(swapped.output)")
        #expect(!swapped.output.contains("listening on"), "nothing listens with a certificate that cannot serve")
    }
}
