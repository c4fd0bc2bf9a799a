import Foundation
import Glibc
import Testing
@testable import SocketStreams
import TestSupport

/// What `Stream.getStreamsToHost` refuses or gives up, and what that leaves behind: closing while
/// connecting, impossible ports, TLS it cannot provide, many streams opening at once, and the
/// process's signal dispositions.
@Suite("Stream.getStreamsToHost refusals and limits")
struct StreamBridgeRefusalTests {
    @Test func closingWhileConnectingClosesTheSocketAtOnce() async throws {
        let unanswered = try FullBacklogListener()
        defer { unanswered.close() }
        let port = unanswered.port
        let before = try socketDescriptors(port: port)

        let (whileConnecting, afterClose, statuses) = try await bridgeOnNewThread {
            let (input, output) = bridgeStreams(host: "127.0.0.1", port: port)
            input.open()
            output.open()
            // No event tells that the connect has started; the socket appearing on the port does.
            let deadline = Date(timeIntervalSinceNow: 10)
            var whileConnecting = (try? socketDescriptors(port: port)) ?? -1
            while whileConnecting != before + 1, Date() < deadline {
                usleep(10_000)
                whileConnecting = (try? socketDescriptors(port: port)) ?? -1
            }
            input.close()
            output.close()
            // As on Apple platforms, the descriptor is gone when close() returns.
            return (whileConnecting, try socketDescriptors(port: port), [input.streamStatus, output.streamStatus])
        }

        #expect(whileConnecting == before + 1, "expected the connecting socket on port \(port)")
        #expect(afterClose == before, "expected close() during the connect to close its socket, found \(afterClose - before) left")
        #expect(statuses == [.closed, .closed])
    }

    @Test(arguments: [-1, 65536, 70000])
    func aPortOutsideTheTCPRangeFailsTheOpen(port: Int) async throws {
        let (events, error, statuses) = try await bridgeOnNewThread {
            let (input, output) = bridgeStreams(host: "127.0.0.1", port: port)
            let recorder = BridgeEventRecorder()
            for stream in [input, output] as [Stream] {
                stream.delegate = recorder
                stream.schedule(in: .current, forMode: .default)
                stream.open()
            }
            bridgeRunRunLoop { recorder.saw(.errorOccurred, on: input) && recorder.saw(.errorOccurred, on: output) }
            defer { input.close(); output.close() }
            return (recorder.names(for: input) + recorder.names(for: output), output.streamError as NSError?,
                    [input.streamStatus, output.streamStatus])
        }

        #expect(events == ["errorOccurred", "errorOccurred"], "expected one errorOccurred per stream, got \(events)")
        #expect(statuses == [.error, .error])
        let bridged = try #require(error, "expected a streamError")
        #expect(bridged.domain == NSPOSIXErrorDomain && bridged.code == Int(EINVAL),
                "expected NSPOSIXErrorDomain/EINVAL, got \(bridged.domain)/\(bridged.code)")
        #expect(bridged.localizedDescription.contains("port \(port) is outside 0…65535"), "\(bridged.localizedDescription)")
    }

    /// The TLS requests the bridge cannot honour: the broken SSL versions, and SSL settings it
    /// cannot express (a client identity). docs/TLS.md lists them.
    static let unsupportedTLSRequests: [(key: String, value: String)] = [
        (Stream.PropertyKey.socketSecurityLevelKey.rawValue, StreamSocketSecurityLevel.ssLv3.rawValue),
        (Stream.PropertyKey.socketSecurityLevelKey.rawValue, StreamSocketSecurityLevel.ssLv2.rawValue),
        (kCFStreamPropertySSLSettings, kCFStreamSSLCertificates),
    ]

    @Test(arguments: unsupportedTLSRequests)
    func unsupportedTLSRequestFailsTheOpenInsteadOfSendingCleartext(key: String, value: String) async throws {
        let received = BridgeHandoff<Int>()
        let server = try BridgeTestServer { server, socket in
            // Count what arrives in cleartext: nothing may.
            let channel = SocketChannel(socket: socket, queue: server.queue)
            var count = 0
            channel.onBytes = { bytes in
                count += bytes.count
                received.put(count)
            }
            server.keep(channel)
            channel.start()
        }
        defer { server.stop() }
        let port = server.port

        let (accepted, events, inputError, outputError, statuses) = try await bridgeOnNewThread {
            let (input, output) = bridgeStreams(host: "127.0.0.1", port: port)
            let property: AnyObject =
                key == kCFStreamPropertySSLSettings
                ? NSDictionary(dictionary: [value: NSArray()]) : StreamSocketSecurityLevel(rawValue: value) as AnyObject
            // Tutorial code sets it on both streams and ignores the result.
            let accepted = [input, output].map { $0.setProperty(property, forKey: Stream.PropertyKey(key)) }
            let recorder = BridgeEventRecorder()
            let secret = Array("password=hunter2\n".utf8)
            recorder.onEvent = { stream, event in
                if stream === output, event == .hasSpaceAvailable { _ = output.write(secret, maxLength: secret.count) }
            }
            for stream in [input, output] as [Stream] {
                stream.delegate = recorder
                stream.schedule(in: .current, forMode: .default)
                stream.open()
            }
            bridgeRunRunLoop { recorder.saw(.errorOccurred, on: input) && recorder.saw(.errorOccurred, on: output) }
            defer { input.close(); output.close() }
            return (accepted, recorder.names(for: input) + recorder.names(for: output),
                    input.streamError as NSError?, output.streamError as NSError?, [input.streamStatus, output.streamStatus])
        }

        #expect(accepted == [false, false], "setProperty says no (and, since tutorial code ignores that, the open fails)")
        #expect(events == ["errorOccurred", "errorOccurred"], "expected only errorOccurred, got \(events)")
        #expect(statuses == [.error, .error])
        for error in [inputError, outputError] {
            let bridged = try #require(error, "expected a streamError")
            #expect(bridged.domain == SocketStreamsErrorDomain && bridged.code == SocketStreamsErrorCode.tlsUnavailable.rawValue,
                    "expected \(SocketStreamsErrorDomain)/tlsUnavailable, got \(bridged.domain)/\(bridged.code)")
            #expect(bridged.localizedDescription.contains("TLS"), "\(bridged.localizedDescription)")
        }
        #expect(received.take(timeout: 1) == nil, "bytes reached the server in cleartext")
    }

    @Test func securityLevelNoneKeepsThePlainConnection() async throws {
        let server = try BridgeTestServer(onAccept: BridgeTestServer.echo)
        defer { server.stop() }
        let port = server.port

        let (accepted, echoed) = try await bridgeOnNewThread {
            let (input, output) = bridgeStreams(host: "127.0.0.1", port: port)
            let accepted = output.setProperty(StreamSocketSecurityLevel.none as AnyObject, forKey: .socketSecurityLevelKey)
            let recorder = BridgeEventRecorder()
            var received: [UInt8] = []
            var sent = false
            recorder.onEvent = { stream, event in
                if stream === output, event == .hasSpaceAvailable, !sent { sent = output.write(Array("plain\n".utf8), maxLength: 6) == 6 }
                if stream === input, event == .hasBytesAvailable { bridgeReadAvailable(input, into: &received) }
            }
            for stream in [input, output] as [Stream] {
                stream.delegate = recorder
                stream.schedule(in: .current, forMode: .default)
                stream.open()
            }
            bridgeRunRunLoop { received.count >= 6 || recorder.saw(.errorOccurred, on: input) }
            defer { input.close(); output.close() }
            return (accepted, String(decoding: received, as: UTF8.self))
        }
        #expect(accepted)
        #expect(echoed == "plain\n")
    }

    @Test func threeHundredStreamsOpeningAtOnceUseABoundedNumberOfThreads() async throws {
        // A thread count belongs to the whole process, and tests running in parallel here add
        // threads of their own (over 100 seen), so the streams open in a process of their own.
        let result = try await #require(processExitsWith: .success, observing: [\.standardOutputContent]) {
            let (opened, before, peak) = try await Self.openStreamsAtOnce(count: 300)
            print(opened, before, peak)
        }
        let numbers = String(decoding: result.standardOutputContent, as: UTF8.self)
            .split(whereSeparator: \.isWhitespace).compactMap { Int($0) }
        try #require(numbers.count == 3, "expected the measuring process to print 3 numbers")
        let (opened, before, peak) = (numbers[0], numbers[1], numbers[2])
        #expect(opened == 300, "expected 300 stream pairs to open, \(opened) did")
        // The pool that resolves names and the pairs' queues are bounded: this adds about 20
        // threads on a quiet machine, and 52–66 seen while the whole suite loads both cores
        // (Dispatch adds workers when its threads wait for a core). Before they were bounded, it
        // added more than one per stream (382 threads for 300).
        #expect(peak - before <= 100, "opening 300 stream pairs at once went from \(before) to \(peak) threads")
    }

    /// Opens `count` stream pairs to a local server at once, by name (so that every pair goes
    /// through the resolver as an app's would), and records the peak thread count until all are open.
    static func openStreamsAtOnce(count: Int) async throws -> (opened: Int, before: Int, peak: Int) {
        let server = try BridgeTestServer { server, socket in
            let channel = SocketChannel(socket: socket, queue: server.queue)
            server.keep(channel)
            channel.start()
        }
        defer { server.stop() }
        let port = server.port
        let before = threadCount() ?? 0

        let (opened, peak) = try await bridgeOnNewThread {
            let pairs = (0..<count).map { _ in bridgeStreams(host: "localhost", port: port) }
            let recorder = BridgeEventRecorder()
            var opened = 0
            var peak = threadCount() ?? 0
            recorder.onEvent = { _, event in
                if event == .openCompleted { opened += 1 }
                peak = max(peak, threadCount() ?? 0)
            }
            for (input, output) in pairs {
                for stream in [input, output] as [Stream] {
                    stream.delegate = recorder
                    stream.schedule(in: .current, forMode: .default)
                    stream.open()
                }
            }
            peak = max(peak, threadCount() ?? 0)
            bridgeRunRunLoop(timeout: 60) { opened == 2 * count }
            peak = max(peak, threadCount() ?? 0)
            for (input, output) in pairs {
                input.close()
                output.close()
            }
            return (opened / 2, peak)
        }
        return (opened, before, peak)
    }

    @Test func usingTheLibraryLeavesSIGPIPEAtItsDefault() async throws {
        // Dispositions belong to the process; a library that changes one changes it for the
        // program and every child it starts. So look at real processes that use the library: the
        // example's relay (SocketCore: listener, channels) and its client (the stream bridge), both
        // started with SIGPIPE at its default.
        let binary = try ChildProcess.builtExecutable(named: "stream-chat-example")
        let relay = try ChildProcess(binary, ["--serve", "--port", "0"])
        defer { relay.stop() }
        #expect(await relay.waitForOutput("* relay listening on port "), "relay output:\n\(relay.output)")
        let port = try #require(relay.lines.first { $0.hasPrefix("* relay listening on port ") }?.split(separator: " ").last.flatMap { Int($0) })
        let ann = try ChildProcess(binary, ["--host", "localhost", "--port", "\(port)", "--nick", "ann"])
        defer { ann.stop() }
        let bob = try ChildProcess(binary, ["--host", "127.0.0.1", "--port", "\(port)", "--nick", "bob"])
        defer { bob.stop() }
        #expect(await ann.waitForOutput("* welcome"), "ann's output:\n\(ann.output)")
        #expect(await bob.waitForOutput("* welcome"), "bob's output:\n\(bob.output)")
        ann.send("hello")
        #expect(await bob.waitForOutput("ann: hello"), "bob's output:\n\(bob.output)")

        #expect(ignoresSignal(SIGPIPE, pid: relay.pid) == false, "the relay (SocketCore) ignores SIGPIPE")
        #expect(ignoresSignal(SIGPIPE, pid: ann.pid) == false, "the client (SocketStreams) ignores SIGPIPE")
    }
}
