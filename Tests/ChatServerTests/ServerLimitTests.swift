import ChatClient
import ChatProtocol
import Testing
import TestSupport

/// Every limit, enforced by the real `chat-server` process over loopback, in every mode a user
/// can run it in: what is refused, and how, must not depend on where the rooms are kept or on TLS.
@Suite("Limits and abuse over loopback", .serialized)
struct ServerLimitTests {
    @Test(arguments: ServerMode.allCases)
    func refusesConnectionsBeyondTheTotalLimit(mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode, arguments: ["--max-clients", "2"])
        defer { server.stop() }
        let first = try await TestClient.connect(to: server, nick: "a")
        let second = try await TestClient.connect(to: server, nick: "b")
        #expect(await refusal { try await TestClient.connect(to: server, nick: "c") } == .serverFull)
        first.close()
        second.close()
    }

    @Test(arguments: ServerMode.allCases)
    func refusesConnectionsBeyondThePerAddressLimit(mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode, arguments: ["--max-clients-per-address", "2"])
        defer { server.stop() }
        let first = try await TestClient.connect(to: server, nick: "a")
        let second = try await TestClient.connect(to: server, nick: "b")
        #expect(await refusal { try await TestClient.connect(to: server, nick: "c") } == .tooManyConnectionsFromAddress)
        // A slot frees up when a connection ends.
        try await first.send(.goodbye(reason: ""))
        _ = try await first.readUntilClosed()
        let third = try await TestClient.connect(to: server, nick: "c")
        second.close()
        third.close()
    }

    @Test(arguments: ServerMode.allCases)
    func aReconnectLoopOverTheLimitIsTurnedAwayWithoutBecomingAConnection(mode: ServerMode) async throws {
        // One connection per address and two in all: the holder from 127.0.0.1 and a checker from
        // ::1. While a refused attempt is still open, the checker gets in only if the attempt is
        // not counted as a connection.
        let server = try await ChatServerProcess(
            mode, arguments: ["--host", "::", "--max-clients-per-address", "1", "--max-clients", "2"])
        defer { server.stop() }
        let holder = try await TestClient.connect(to: server, nick: "holder")
        // Polite attempts send their hello; rude ones follow it with more than the server reads
        // before it closes, so their close is a reset. Either way the refusal must arrive first.
        for attempt in 0..<100 {
            let raw = try BlockingSocket(to: server)
            var bytes = FrameEncoder.encode(.hello(version: 2, nick: "loop\(attempt)", password: nil))
            if attempt.isMultiple(of: 2) { bytes += [UInt8](repeating: 0x01, count: 512 * 1024) }
            await raw.send(bytes)
            let (frames, ended) = await raw.readFrames()
            guard case .error(.tooManyConnectionsFromAddress, true, .hello, _)? = frames.first, frames.count == 1, ended else {
                Issue.record("attempt \(attempt): expected only the refusal, then the end, got \(frames) (ended: \(ended))")
                raw.close()
                return
            }
            // The attempt still holds its end open; the server has already let go of its own.
            if attempt.isMultiple(of: 10) {
                let checker = try await TestClient.connect(to: server, host: "::1", nick: "check\(attempt)")
                try await checker.send(.goodbye(reason: ""))
                _ = try await checker.readUntilClosed()
            }
            raw.close()
        }
        try await holder.send(.ping(token: 7))
        // On a slow run the server may have pinged the idle holder meanwhile.
        var answered = false
        while !answered, let frame = try await holder.next(waitingFor: "pong") {
            if case .pong(7) = frame {
                answered = true
            } else if case .ping = frame {
                continue
            } else {
                Issue.record("the holder got \(frame)")
                break
            }
        }
        #expect(answered, "the holder's session goes on")
        holder.close()
    }

    @Test(arguments: ServerMode.allCases)
    func closesConnectionsThatSendAFrameOverTheSizeLimit(mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode, arguments: ["--max-frame-size", "1024"])
        defer { server.stop() }
        let alice = try await TestClient.connect(to: server, nick: "alice")
        #expect(alice.connection.welcome.maxFrameSize == 1024)
        try await alice.join("r")
        try await alice.send(.say(room: "r", text: String(repeating: "x", count: 2000)))
        let frames = try await alice.readUntilClosed()
        #expect(fatalError(in: frames)?.0 == .frameTooLarge, "got \(frames)")
    }

    @Test(arguments: ServerMode.allCases)
    func refusesJoinsBeyondTheRoomLimit(mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode, arguments: ["--max-rooms-per-client", "2"])
        defer { server.stop() }
        let alice = try await TestClient.connect(to: server, nick: "alice")
        try await alice.join("a")
        try await alice.join("b")
        try await alice.send(.join(room: "c"))
        guard case .error(.tooManyRooms, false, .join, _) = try await alice.expectFrame("tooManyRooms") else {
            Issue.record("expected a non-fatal tooManyRooms")
            return
        }
        alice.close()
    }

    @Test(arguments: ServerMode.allCases)
    func answersFloodsWithRateLimitedThenDisconnects(mode: ServerMode) async throws {
        // Slow enough that the refill during the test cannot matter.
        let server = try await ChatServerProcess(
            mode, arguments: ["--rate-limit", "0.1", "--rate-burst", "3", "--rate-abuse-limit", "5"])
        defer { server.stop() }
        let flooder = try await TestClient.connect(to: server, nick: "flooder")
        try await flooder.join("r")
        try await flooder.send((0..<20).map { Frame.say(room: "r", text: "spam \($0)") })
        let frames = try await flooder.readUntilClosed()
        let delivered = frames.filter { if case .message = $0 { true } else { false } }
        let refused = frames.filter { if case .error(.rateLimited, false, .say, _) = $0 { true } else { false } }
        #expect(delivered.count == 2, "the join took one token of three, the two lines are echoed: \(frames)")
        #expect(refused.count == 4)
        #expect(fatalError(in: frames)?.0 == .rateLimited, "got \(frames)")
    }

    @Test(arguments: ServerMode.allCases)
    func dropsASlowlorisThatNeverFinishesTheHandshake(mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode, arguments: ["--handshake-timeout", "1"])
        defer { server.stop() }
        let slow = try BlockingSocket(to: server)
        // The start of a hello, and then nothing.
        await slow.send([0x09, 0x01, 0x01])
        let (frames, ended) = await slow.readFrames()
        #expect(ended, "the server closes the connection")
        #expect(fatalError(in: frames)?.0 == .handshakeTimeout, "got \(frames)")
        slow.close()
    }

    @Test(arguments: ServerMode.allCases)
    func answersAMalformedFrameWithItsReasonThenCloses(mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode)
        defer { server.stop() }
        let raw = try BlockingSocket(to: server)
        await raw.send([.hello(version: 1, nick: "mallory", password: nil)])
        guard case .welcome = await raw.nextFrame() else {
            Issue.record("expected welcome")
            return
        }
        await raw.send([0x01, 0x80])  // must-understand type 0x80
        let (frames, _) = await raw.readFrames()
        guard let (code, reason) = fatalError(in: frames) else {
            Issue.record("expected a fatal error, got \(frames)")
            return
        }
        #expect(code == .malformedFrame)
        #expect(reason.contains("0x80"), "the reason names the problem: \(reason)")
        raw.close()
    }

    @Test(arguments: ServerMode.allCases)
    func closesConnectionsWhoseFirstFrameIsNotHello(mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode)
        defer { server.stop() }
        let raw = try BlockingSocket(to: server)
        await raw.send([.join(room: "r")])
        let (frames, _) = await raw.readFrames()
        #expect(fatalError(in: frames)?.0 == .handshakeRequired, "got \(frames)")
        raw.close()
    }

    @Test(arguments: ServerMode.allCases)
    func rejectsBadNamesAsInvalid(mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode)
        defer { server.stop() }
        let raw = try BlockingSocket(to: server)
        await raw.send([.hello(version: 1, nick: "mallory", password: nil)])
        _ = await raw.nextFrame()
        // join "General": upper case is not allowed on the wire.
        await raw.send([0x09, 0x03, 0x07] + Array("General".utf8))
        let (frames, _) = await raw.readFrames()
        #expect(fatalError(in: frames)?.0 == .invalidRoom, "got \(frames)")
        raw.close()
    }
}
