import Foundation
import Glibc
import Testing
@testable import SocketStreams
import TestSupport

/// `Stream.getStreamsToHost` against real sockets on loopback: connecting, exchanging, failing,
/// ending, and not leaking.
@Suite("Stream.getStreamsToHost over loopback")
struct StreamBridgeSocketTests {
    /// What one client run saw, taken back to the test's own task for the assertions.
    private struct Exchange: Sendable {
        var received: [UInt8] = []
        var inputEvents: [String] = []
        var outputEvents: [String] = []
        var finished = false
    }

    @Test("connects and exchanges bytes", arguments: [("127.0.0.1", "127.0.0.1"), ("::1", "::1"), ("localhost", "127.0.0.1")])
    func connectsAndExchangesBytes(host: String, serverAddress: String) async throws {
        let server = try BridgeTestServer(host: serverAddress, onAccept: BridgeTestServer.echo)
        defer { server.stop() }
        let port = server.port
        let message = Array("hello over \(host)\n".utf8)

        let exchange = try await bridgeOnNewThread {
            let (input, output) = bridgeStreams(host: host, port: port)
            let recorder = BridgeEventRecorder()
            var result = Exchange()
            var sent = false
            recorder.onEvent = { stream, event in
                if stream === output, event == .hasSpaceAvailable, !sent {
                    sent = output.write(message, maxLength: message.count) == message.count
                }
                if stream === input, event == .hasBytesAvailable { bridgeReadAvailable(input, into: &result.received) }
            }
            for stream in [input, output] as [Stream] {
                stream.delegate = recorder
                stream.schedule(in: .current, forMode: .default)
                stream.open()
            }
            result.finished = bridgeRunRunLoop { result.received.count >= message.count }
            result.inputEvents = recorder.names(for: input)
            result.outputEvents = recorder.names(for: output)
            input.close()
            output.close()
            return result
        }

        #expect(exchange.finished, "expected the echo of \(message.count) bytes, got \(exchange.received.count)")
        #expect(exchange.received == message, "expected the echoed bytes to equal what was sent")
        #expect(exchange.inputEvents.first == "openCompleted", "input events: \(exchange.inputEvents)")
        #expect(Array(exchange.outputEvents.prefix(2)) == ["openCompleted", "hasSpaceAvailable"],
                "output events: \(exchange.outputEvents)")
    }

    @Test func refusedConnectReportsECONNREFUSED() async throws {
        let (holder, port) = try bridgeRefusingPort()
        defer { holder.close() }

        let (events, inputError, outputError, statuses) = try await bridgeOnNewThread {
            let (input, output) = bridgeStreams(host: "127.0.0.1", port: port)
            let recorder = BridgeEventRecorder()
            for stream in [input, output] as [Stream] {
                stream.delegate = recorder
                stream.schedule(in: .current, forMode: .default)
                stream.open()
            }
            bridgeRunRunLoop { recorder.saw(.errorOccurred, on: input) && recorder.saw(.errorOccurred, on: output) }
            defer { input.close(); output.close() }
            return (recorder.names(for: input) + recorder.names(for: output),
                    input.streamError as NSError?, output.streamError as NSError?,
                    [input.streamStatus, output.streamStatus])
        }

        #expect(events == ["errorOccurred", "errorOccurred"], "expected one errorOccurred per stream, got \(events)")
        #expect(statuses == [.error, .error])
        for error in [inputError, outputError] {
            // As CFNetwork reports it: the errno in NSPOSIXErrorDomain.
            let bridged = try #require(error, "expected a streamError")
            #expect(bridged.domain == NSPOSIXErrorDomain && bridged.code == Int(ECONNREFUSED),
                    "expected NSPOSIXErrorDomain/\(ECONNREFUSED), got \(bridged.domain)/\(bridged.code)")
            #expect(bridged.localizedDescription == "connect to 127.0.0.1:\(port) failed: Connection refused (errno 111)")
            // Swift code can have the SocketError itself.
            let socketError = bridged.userInfo[NSUnderlyingErrorKey] as? SocketError
            #expect(socketError?.errno == ECONNREFUSED, "expected the SocketError under NSUnderlyingErrorKey")
        }
    }

    @Test func unknownHostReportsTheResolverError() async throws {
        let (event, error) = try await bridgeOnNewThread {
            let (input, output) = bridgeStreams(host: "nosuch.invalid", port: 7000)
            let recorder = BridgeEventRecorder()
            input.delegate = recorder
            input.schedule(in: .current, forMode: .default)
            input.open()
            bridgeRunRunLoop { !recorder.entries.isEmpty }
            defer { input.close(); output.close() }
            return (recorder.names(for: input).first, input.streamError as NSError?)
        }

        #expect(event == "errorOccurred")
        // As CFNetwork reports a failed lookup: kCFErrorDomainCFNetwork, kCFHostErrorUnknown, and
        // getaddrinfo's own code under kCFGetAddrInfoFailureKey.
        let bridged = try #require(error, "expected a streamError")
        #expect(bridged.domain == kCFErrorDomainCFNetwork && bridged.code == Int(CFNetworkErrors.cfHostErrorUnknown.rawValue),
                "expected kCFErrorDomainCFNetwork/kCFHostErrorUnknown, got \(bridged.domain)/\(bridged.code)")
        let lookupCode = bridged.userInfo[kCFGetAddrInfoFailureKey] as? Int
        #expect(lookupCode == Int(EAI_NONAME) || lookupCode == Int(EAI_AGAIN),
                "expected EAI_NONAME (or EAI_AGAIN without DNS), got \(String(describing: lookupCode))")
        #expect(bridged.localizedDescription.hasPrefix("resolve nosuch.invalid:7000 failed: "), "\(bridged.localizedDescription)")
        let socketError = bridged.userInfo[NSUnderlyingErrorKey] as? SocketError
        #expect(socketError?.operation == "resolve", "expected the SocketError under NSUnderlyingErrorKey")
    }

    @Test func peerCloseEndsTheInputStream() async throws {
        let server = try BridgeTestServer(onAccept: BridgeTestServer.sendThenFinish("bye\n"))
        defer { server.stop() }
        let port = server.port

        let (received, events, status, lastRead) = try await bridgeOnNewThread {
            var input: InputStream?
            // Only the input stream is asked for: the pair must work with one stream alone.
            Stream.getStreamsToHost(withName: "127.0.0.1", port: port, inputStream: &input, outputStream: nil)
            let stream = input!
            let recorder = BridgeEventRecorder()
            var received: [UInt8] = []
            recorder.onEvent = { _, event in
                if event == .hasBytesAvailable { bridgeReadAvailable(stream, into: &received) }
            }
            stream.delegate = recorder
            stream.schedule(in: .current, forMode: .default)
            stream.open()
            bridgeRunRunLoop { recorder.saw(.endEncountered, on: stream) || recorder.saw(.errorOccurred, on: stream) }
            var byte: UInt8 = 0
            let lastRead = stream.read(&byte, maxLength: 1)
            defer { stream.close() }
            return (received, recorder.names(for: stream), stream.streamStatus, lastRead)
        }

        #expect(String(decoding: received, as: UTF8.self) == "bye\n")
        #expect(events.last == "endEncountered", "events: \(events)")
        #expect(status == .atEnd)
        #expect(lastRead == 0, "a read at end of stream returns 0")
    }

    @Test func closingOnlyTheOutputHalfClosesAndReadingGoesOn() async throws {
        // The echo server finishes sending only after it read our FIN, so the echo arriving
        // followed by .endEncountered proves close() of the output sent FIN and left input open.
        let server = try BridgeTestServer(onAccept: BridgeTestServer.echo)
        defer { server.stop() }
        let port = server.port

        let (received, events, outputStatus) = try await bridgeOnNewThread {
            let (input, output) = bridgeStreams(host: "127.0.0.1", port: port)
            let recorder = BridgeEventRecorder()
            var received: [UInt8] = []
            recorder.onEvent = { stream, event in
                if stream === output, event == .hasSpaceAvailable, output.streamStatus == .open {
                    _ = output.write(Array("last words\n".utf8), maxLength: 11)
                    output.close()
                }
                if stream === input, event == .hasBytesAvailable { bridgeReadAvailable(input, into: &received) }
            }
            for stream in [input, output] as [Stream] {
                stream.delegate = recorder
                stream.schedule(in: .current, forMode: .default)
                stream.open()
            }
            bridgeRunRunLoop { recorder.saw(.endEncountered, on: input) || recorder.saw(.errorOccurred, on: input) }
            defer { input.close() }
            return (received, recorder.names(for: input), output.streamStatus)
        }

        #expect(String(decoding: received, as: UTF8.self) == "last words\n")
        #expect(events.last == "endEncountered", "input events: \(events)")
        #expect(outputStatus == .closed)
    }

    @Test func sixtyFourMebibytesArriveByteIdentical() async throws {
        let server = try BridgeTestServer(onAccept: BridgeTestServer.echo)
        defer { server.stop() }
        let port = server.port
        let total = 64 << 20

        let (sentSum, receivedSum, receivedCount, identical, events) = try await bridgeOnNewThread {
            let sent = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: total)
            let received = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: total)
            defer { sent.deallocate(); received.deallocate() }
            bridgeFillPseudoRandom(UnsafeMutableRawBufferPointer(sent))

            let (input, output) = bridgeStreams(host: "127.0.0.1", port: port)
            let recorder = BridgeEventRecorder()
            var written = 0
            var readCount = 0
            recorder.onEvent = { stream, event in
                switch (stream === input, event) {
                case (false, .hasSpaceAvailable) where written < total:
                    let chunk = min(256 * 1024, total - written)
                    let result = output.write(sent.baseAddress! + written, maxLength: chunk)
                    if result > 0 { written += result }
                    if written == total { output.close() }
                case (true, .hasBytesAvailable):
                    let result = input.read(received.baseAddress! + readCount, maxLength: max(1, total - readCount))
                    if result > 0 { readCount += result }
                default:
                    break
                }
            }
            for stream in [input, output] as [Stream] {
                stream.delegate = recorder
                stream.schedule(in: .current, forMode: .default)
                stream.open()
            }
            bridgeRunRunLoop(timeout: 120) {
                recorder.saw(.endEncountered, on: input) || recorder.saw(.errorOccurred, on: input)
                    || recorder.saw(.errorOccurred, on: output)
            }
            input.close()
            output.close()
            let errors = recorder.entries.filter { $0.event == .errorOccurred }.count
            return (bridgeChecksum(UnsafeRawBufferPointer(sent)),
                    bridgeChecksum(UnsafeRawBufferPointer(UnsafeMutableBufferPointer(rebasing: received[0..<readCount]))),
                    readCount, memcmp(sent.baseAddress!, received.baseAddress!, total) == 0, errors)
        }

        #expect(events == 0, "expected no errorOccurred during the transfer")
        #expect(receivedCount == total, "expected \(total) bytes back, got \(receivedCount)")
        #expect(identical, "expected the echoed bytes to equal the sent bytes")
        #expect(receivedSum == sentSum, "checksum of received \(receivedSum) != sent \(sentSum)")
    }

    @Test func writeToAResetPeerFailsWithoutCrashing() async throws {
        let server = try BridgeTestServer(onAccept: BridgeTestServer.reset)
        defer { server.stop() }
        let port = server.port

        let (failedWrite, outputError, status, sawError) = try await bridgeOnNewThread {
            let (input, output) = bridgeStreams(host: "127.0.0.1", port: port)
            let recorder = BridgeEventRecorder()
            var failedWrite = false
            let chunk = [UInt8](repeating: 0x2A, count: 1024)
            recorder.onEvent = { stream, event in
                // Keep writing until the reset surfaces, as a chat client would.
                if stream === output, event == .hasSpaceAvailable, output.write(chunk, maxLength: chunk.count) < 0 {
                    failedWrite = true
                }
            }
            for stream in [input, output] as [Stream] {
                stream.delegate = recorder
                stream.schedule(in: .current, forMode: .default)
                stream.open()
            }
            bridgeRunRunLoop { failedWrite || recorder.saw(.errorOccurred, on: output) }
            // Whichever noticed first, a write now must fail cleanly, and .errorOccurred follows.
            if !failedWrite { failedWrite = output.write(chunk, maxLength: chunk.count) == -1 }
            bridgeRunRunLoop { recorder.saw(.errorOccurred, on: output) }
            defer { input.close(); output.close() }
            return (failedWrite, (output.streamError as NSError?)?.userInfo[NSUnderlyingErrorKey] as? SocketError, output.streamStatus,
                    recorder.saw(.errorOccurred, on: output))
        }

        #expect(failedWrite, "expected write to return -1 after the peer's reset")
        #expect(status == .error)
        #expect(sawError, "expected .errorOccurred on the output stream")
        let code = try #require(outputError?.errno, "expected a SocketError in streamError")
        #expect([ECONNRESET, EPIPE].contains(code), "expected ECONNRESET or EPIPE, got \(code)")
    }

    @Test func thousandConnectionsLeaveNoDescriptorBehind() async throws {
        let accepted = BridgeHandoff<Void>()
        let count = 1000
        var acceptedSoFar = 0  // confined to the server's queue
        let server = try BridgeTestServer { _, socket in
            socket.close()
            acceptedSoFar += 1
            if acceptedSoFar == count { accepted.put(()) }
        }
        defer { server.stop() }
        let port = server.port
        let before = try socketDescriptors(port: port)

        let opened = try await bridgeOnNewThread {
            var opened = 0
            for _ in 0..<count {
                let (input, output) = bridgeStreams(host: "127.0.0.1", port: port)
                let recorder = BridgeEventRecorder()
                for stream in [input, output] as [Stream] {
                    stream.delegate = recorder
                    stream.schedule(in: .current, forMode: .default)
                    stream.open()
                }
                if bridgeRunRunLoop(until: { recorder.saw(.openCompleted, on: output) }) { opened += 1 }
                input.close()
                output.close()
            }
            return opened
        }
        #expect(opened == count, "expected every connection to open")
        #expect(accepted.take(timeout: 30) != nil, "expected the server to accept \(count) connections")
        let after = try socketDescriptors(port: port)
        #expect(before == 1, "expected only the listener before, found \(before) sockets on port \(port)")
        #expect(after == before, "expected \(before) sockets on port \(port) after \(count) connections, found \(after)")
    }

    @Test func socketPropertiesAnswerLikeCFSocketStream() async throws {
        let server = try BridgeTestServer(onAccept: BridgeTestServer.echo)
        defer { server.stop() }
        let port = server.port

        let (hostName, portNumber, handlePeer) = try await bridgeOnNewThread {
            let (input, output) = bridgeStreams(host: "127.0.0.1", port: port)
            let recorder = BridgeEventRecorder()
            output.delegate = recorder
            output.schedule(in: .current, forMode: .default)
            output.open()
            bridgeRunRunLoop { recorder.saw(.openCompleted, on: output) }
            defer { input.close(); output.close() }
            let handle = output.property(forKey: Stream.PropertyKey("kCFStreamPropertySocketNativeHandle")) as? NSData
            var descriptor: Int32 = -1
            handle?.getBytes(&descriptor, length: MemoryLayout<Int32>.size)
            let peer = socketAddressPort(of: descriptor, getpeername)
            return ((input.property(forKey: Stream.PropertyKey("kCFStreamPropertySocketRemoteHostName")) as? NSString)
                        .map { String(describing: $0) },
                    (input.property(forKey: Stream.PropertyKey("kCFStreamPropertySocketRemotePortNumber")) as? NSNumber)?.intValue,
                    peer)
        }

        #expect(hostName == "127.0.0.1")
        #expect(portNumber == port)
        #expect(handlePeer == port, "expected the native handle to be the socket connected to port \(port)")
    }
}

/// Fills `buffer` with xorshift64 output: incompressible, and cheap enough for 64 MiB in a debug build.
private func bridgeFillPseudoRandom(_ buffer: UnsafeMutableRawBufferPointer) {
    var state: UInt64 = 0x9E37_79B9_7F4A_7C15
    for offset in stride(from: 0, to: buffer.count - 7, by: 8) {
        state ^= state << 13
        state ^= state >> 7
        state ^= state << 17
        buffer.storeBytes(of: state, toByteOffset: offset, as: UInt64.self)
    }
}

/// A position-dependent 64-bit checksum (FNV-1a over 8-byte words, tail bytes included).
private func bridgeChecksum(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
    var hash: UInt64 = 0xCBF2_9CE4_8422_2325
    let wordCount = bytes.count / 8
    for index in 0..<wordCount {
        hash = (hash ^ bytes.loadUnaligned(fromByteOffset: index * 8, as: UInt64.self)) &* 0x100_0000_01B3
    }
    for byte in bytes[(wordCount * 8)...] { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01B3 }
    return hash
}
