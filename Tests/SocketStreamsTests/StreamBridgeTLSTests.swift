import ChatProtocol
import Foundation
import Glibc
import SocketCore
import SocketStreams
import SocketTLS
import Testing
import TestSupport

/// `Stream.getStreamsToHost` with TLS, written as the seed tutorial's code is (security level set
/// on both streams before `open()`, results ignored, delegate events, read and write) against a
/// real TLS echo server on loopback, with certificates from Scripts/dev-cert.sh.
@Suite("Stream.getStreamsToHost over TLS", .serialized)
struct StreamBridgeTLSTests {
    /// dev-cert.sh's CA and server certificate in a temporary directory, removed when released.
    final class Certificates: @unchecked Sendable {
        let directory: String

        init() async throws {
            var template = Array("/tmp/bridge-tls-XXXXXX".utf8CString)
            directory = String(cString: try #require(mkdtemp(&template)))
            let script = URL(fileURLWithPath: #filePath)
                .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("Scripts/dev-cert.sh")
            let run = try ChildProcess(script, ["--out", directory])
            let status = await run.waitForExit()
            #expect(status == 0, "dev-cert.sh: \(run.output)")
        }

        var caFile: String { "\(directory)/ca.pem" }

        func serverContext() throws -> TLSContext {
            try TLSContext(.server(certificateChainFile: "\(directory)/server.pem", privateKeyFile: "\(directory)/server-key.pem"))
        }

        deinit { try? FileManager.default.removeItem(atPath: directory) }
    }

    /// A server that echoes over TLS and finishes (close_notify, FIN) after the client does.
    private func echoServer(_ certificates: Certificates) throws -> BridgeTestServer {
        let context = try certificates.serverContext()
        return try BridgeTestServer { server, socket in
            let channel = SocketChannel(socket: socket, queue: server.queue, tls: context.makeServerSession(peerLabel: socket.label))
            channel.onBytes = { [unowned channel] bytes in channel.write(ByteChunk(copying: bytes)) }
            channel.onEndOfInput = { [unowned channel] in channel.shutdownWrite() }
            server.keep(channel)
            channel.start()
        }
    }

    /// What one tutorial-style exchange saw.
    struct Exchange: Sendable {
        var outputEvents: [String] = []
        var inputEvents: [String] = []
        var received = ""
        var levelReadBack: String?
        var error: NSError?
    }

    /// Opens a pair to `port` with `configure` applied to both streams, writes `line` at the first
    /// `.hasSpaceAvailable`, and reads until the echo or an error.
    private func exchange(
        port: Int, host: String = "localhost", line: String = "hello over TLS\n",
        configure: @escaping @Sendable (Stream) -> Void
    ) async throws -> Exchange {
        try await bridgeOnNewThread {
            var inputStream: InputStream?
            var outputStream: OutputStream?
            Stream.getStreamsToHost(withName: host, port: port, inputStream: &inputStream, outputStream: &outputStream)
            guard let input = inputStream, let output = outputStream else { return Exchange() }
            for stream in [input, output] as [Stream] { configure(stream) }
            let recorder = BridgeEventRecorder()
            var received: [UInt8] = []
            var sent = false
            let bytes = Array(line.utf8)
            recorder.onEvent = { stream, event in
                if stream === output, event == .hasSpaceAvailable, !sent {
                    sent = output.write(bytes, maxLength: bytes.count) == bytes.count
                }
                if stream === input, event == .hasBytesAvailable { _ = bridgeReadAvailable(input, into: &received) }
            }
            for stream in [input, output] as [Stream] {
                stream.delegate = recorder
                stream.schedule(in: .current, forMode: .default)
                stream.open()
            }
            bridgeRunRunLoop(timeout: 30) {
                // A failure fails both streams; wait until each has told its delegate.
                received.count >= bytes.count || (recorder.saw(.errorOccurred, on: input) && recorder.saw(.errorOccurred, on: output))
            }
            defer { input.close(); output.close() }
            return Exchange(
                outputEvents: recorder.names(for: output), inputEvents: recorder.names(for: input),
                received: String(decoding: received, as: UTF8.self),
                levelReadBack: input.property(forKey: .socketSecurityLevelKey) as? String,
                error: (output.streamError ?? input.streamError) as NSError?)
        }
    }

    static let levels: [String] = [StreamSocketSecurityLevel.negotiatedSSL.rawValue, StreamSocketSecurityLevel.tlSv1.rawValue]

    @Test(arguments: levels)
    func securityLevelSpeaksVerifiedTLSLikeOnApplePlatforms(level: String) async throws {
        let certificates = try await Certificates()
        let server = try echoServer(certificates)
        defer { server.stop() }
        let caFile = certificates.caFile
        let result = try await exchange(port: server.port) { stream in
            _ = stream.setProperty(StreamSocketSecurityLevel(rawValue: level) as AnyObject, forKey: .socketSecurityLevelKey)
            _ = stream.setProperty(caFile as NSString, forKey: .tlsCertificateAuthorityFileKey)
        }
        #expect(result.error == nil, "\(String(describing: result.error))")
        #expect(result.received == "hello over TLS\n", "the echo came back through TLS")
        #expect(result.outputEvents.prefix(2) == ["openCompleted", "hasSpaceAvailable"], "\(result.outputEvents)")
        #expect(!result.inputEvents.contains("errorOccurred"), "\(result.inputEvents)")
        #expect(result.levelReadBack == level)
    }

    @Test func sslSettingsWithValidationOffReachASelfSignedStyleServer() async throws {
        let certificates = try await Certificates()
        let server = try echoServer(certificates)
        defer { server.stop() }
        // What tutorials did for a server whose certificate the system does not trust.
        let result = try await exchange(port: server.port) { stream in
            _ = stream.setProperty(
                [kCFStreamSSLValidatesCertificateChain: false] as NSDictionary,
                forKey: Stream.PropertyKey(rawValue: kCFStreamPropertySSLSettings))
        }
        #expect(result.error == nil, "\(String(describing: result.error))")
        #expect(result.received == "hello over TLS\n")
    }

    @Test func untrustedServerIsAnErrorOccurredWithSecureTransportsCode() async throws {
        let certificates = try await Certificates()
        let server = try echoServer(certificates)
        defer { server.stop() }
        let result = try await exchange(port: server.port) { stream in
            _ = stream.setProperty(StreamSocketSecurityLevel.negotiatedSSL as AnyObject, forKey: .socketSecurityLevelKey)
        }
        let error = try #require(result.error, "expected a streamError; events \(result.outputEvents)")
        #expect(error.domain == NSOSStatusErrorDomain && error.code == -9807, "errSSLXCertChainInvalid, got \(error.domain)/\(error.code)")
        #expect(error.localizedDescription.hasPrefix("TLS handshake with localhost:"), "\(error.localizedDescription)")
        // No space before the handshake, and the error last. (`openCompleted` usually comes first,
        // as on Apple's streams; a loaded CI run once saw the handshake fail before the output
        // side was reported open, and only the error. That race is open, noted in TLS.md.)
        #expect(!result.outputEvents.contains("hasSpaceAvailable"), "no space before the handshake: \(result.outputEvents)")
        #expect(result.outputEvents.last == "errorOccurred", "\(result.outputEvents)")
        #expect(result.received.isEmpty)
    }

    @Test func peerNameSettingIsTheNameVerified() async throws {
        let certificates = try await Certificates()
        let server = try echoServer(certificates)
        defer { server.stop() }
        let caFile = certificates.caFile
        let result = try await exchange(port: server.port) { stream in
            _ = stream.setProperty(
                [kCFStreamSSLPeerName: "chat.example"] as NSDictionary, forKey: Stream.PropertyKey(rawValue: kCFStreamPropertySSLSettings))
            _ = stream.setProperty(caFile as NSString, forKey: .tlsCertificateAuthorityFileKey)
        }
        let error = try #require(result.error)
        #expect(error.domain == NSOSStatusErrorDomain && error.code == -9843, "errSSLHostNameMismatch, got \(error.domain)/\(error.code)")
        #expect(error.localizedDescription.contains("chat.example"), "\(error.localizedDescription)")
    }

    @Test func plainTextServerNeverSeesTheSecretInCleartext() async throws {
        let received = BridgeHandoff<[UInt8]>()
        let server = try BridgeTestServer { server, socket in
            let channel = SocketChannel(socket: socket, queue: server.queue)
            var bytes: [UInt8] = []
            channel.onBytes = { [unowned channel] chunk in
                bytes += chunk
                received.put(bytes)
                // A plain server answers a line it does not understand and hangs up.
                channel.write(ByteChunk(Array("ERROR what?\r\n".utf8)))
                channel.shutdownWrite()
            }
            server.keep(channel)
            channel.start()
        }
        defer { server.stop() }
        let result = try await exchange(port: server.port, line: "password=hunter2\n") { stream in
            _ = stream.setProperty(StreamSocketSecurityLevel.negotiatedSSL as AnyObject, forKey: .socketSecurityLevelKey)
        }
        let error = try #require(result.error)
        #expect(error.domain == NSOSStatusErrorDomain && error.code == -9800, "errSSLProtocol for a plain-text server, got \(error.domain)/\(error.code)")
        let seen = received.take(timeout: 5) ?? []
        #expect(seen.first == 0x16, "the server saw a TLS handshake record first")
        #expect(!String(decoding: seen, as: UTF8.self).contains("hunter2"), "the secret never went out in cleartext")
    }

    @Test func tutorialStyleClientChatsWithTheRealTLSServer() async throws {
        let certificates = try await Certificates()
        let server = try await ChatServerProcess(arguments: [
            "--tls-cert", "\(certificates.directory)/server.pem", "--tls-key", "\(certificates.directory)/server-key.pem",
        ])
        defer { server.stop() }
        let (port, caFile) = (server.port, certificates.caFile)
        let frames = try await bridgeOnNewThread { () -> [Frame] in
            // As the seed tutorial: streams to the host, security level, delegate, open, write on
            // space, read on bytes.
            var inputStream: InputStream?
            var outputStream: OutputStream?
            Stream.getStreamsToHost(withName: "localhost", port: port, inputStream: &inputStream, outputStream: &outputStream)
            guard let input = inputStream, let output = outputStream else { return [] }
            _ = input.setProperty(StreamSocketSecurityLevel.negotiatedSSL as AnyObject, forKey: .socketSecurityLevelKey)
            _ = output.setProperty(StreamSocketSecurityLevel.negotiatedSSL as AnyObject, forKey: .socketSecurityLevelKey)
            _ = input.setProperty(caFile as NSString, forKey: .tlsCertificateAuthorityFileKey)
            let hello = FrameEncoder.encode(.hello(version: 1, nick: "tutorial", password: nil))
                + FrameEncoder.encode(.join(room: "lobby")) + FrameEncoder.encode(.say(room: "lobby", text: "sent through NSStream over TLS"))
            let recorder = BridgeEventRecorder()
            var decoder = FrameDecoder()
            var frames: [Frame] = []
            var sent = false
            recorder.onEvent = { stream, event in
                if stream === output, event == .hasSpaceAvailable, !sent {
                    sent = output.write(hello, maxLength: hello.count) == hello.count
                }
                if stream === input, event == .hasBytesAvailable {
                    var bytes: [UInt8] = []
                    _ = bridgeReadAvailable(input, into: &bytes)
                    decoder.append(contentsOf: bytes)
                    while let frame = try? decoder.next() { frames.append(frame) }
                }
            }
            for stream in [input, output] as [Stream] {
                stream.delegate = recorder
                stream.schedule(in: .current, forMode: .default)
                stream.open()
            }
            bridgeRunRunLoop(timeout: 30) {
                frames.contains { if case .message(_, _, _, _, "sent through NSStream over TLS") = $0 { true } else { false } }
                    || recorder.saw(.errorOccurred, on: input)
            }
            defer { input.close(); output.close() }
            return frames
        }
        #expect(frames.first.map { if case .welcome(_, "tutorial", _, _) = $0 { true } else { false } } == true, "\(frames)")
        #expect(frames.contains { if case .message("lobby", _, _, "tutorial", "sent through NSStream over TLS") = $0 { true } else { false } },
                "the server echoed the line to its sender: \(frames)")
    }

    @Test func securityLevelAfterOpenIsRefused() async throws {
        let certificates = try await Certificates()
        let server = try echoServer(certificates)
        defer { server.stop() }
        let port = server.port
        let accepted = try await bridgeOnNewThread {
            let (input, output) = bridgeStreams(host: "127.0.0.1", port: port)
            input.open()
            defer { input.close(); output.close() }
            return output.setProperty(StreamSocketSecurityLevel.negotiatedSSL as AnyObject, forKey: .socketSecurityLevelKey)
        }
        #expect(!accepted, "TLS cannot start once the pair is opening")
    }
}
