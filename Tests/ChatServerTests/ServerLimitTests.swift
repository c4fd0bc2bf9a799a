import ChatClient
import ChatProtocol
import ChatServer
import Testing

/// Every limit, enforced over real loopback connections.
@Suite("Limits and abuse over loopback")
struct ServerLimitTests {
    @Test func refusesConnectionsBeyondTheTotalLimit() async throws {
        try await withServer(testConfiguration { $0.maxClients = 2 }) { server in
            let first = try await TestClient.connect(server, nick: "a")
            let second = try await TestClient.connect(server, nick: "b")
            #expect(await refusal { try await TestClient.connect(server, nick: "c") } == .serverFull)
            first.close()
            second.close()
        }
    }

    @Test func refusesConnectionsBeyondThePerAddressLimit() async throws {
        try await withServer(testConfiguration { $0.maxClientsPerAddress = 2 }) { server in
            let first = try await TestClient.connect(server, nick: "a")
            let second = try await TestClient.connect(server, nick: "b")
            #expect(await refusal { try await TestClient.connect(server, nick: "c") } == .tooManyConnectionsFromAddress)
            // A slot frees up when a connection ends.
            try await first.send(.goodbye(reason: ""))
            _ = try await first.readUntilClosed()
            let third = try await TestClient.connect(server, nick: "c")
            second.close()
            third.close()
        }
    }

    @Test func aReconnectLoopOverTheLimitIsTurnedAwayWithoutBecomingAConnection() async throws {
        // A refused connection waits for its client to close for at most the linger timeout, then
        // is closed — with a reset if the client is still sending. A long one here, so that a test
        // starved by a busy machine still reads before that (CI once took over 2 s to).
        try await withServer(testConfiguration { $0.maxClientsPerAddress = 1; $0.lingerTimeout = .seconds(60) }) { server in
            let holder = try await TestClient.connect(server, nick: "holder")
            // Polite attempts send their hello; rude ones follow it with more than the server reads
            // before it closes, so their close is a reset. Either way the refusal must arrive first.
            for attempt in 0..<100 {
                let raw = try await RawClient(port: server.port)
                var bytes = FrameEncoder.encode(.hello(version: 2, nick: "loop\(attempt)", password: nil))
                if attempt.isMultiple(of: 2) { bytes += [UInt8](repeating: 0x01, count: 512 * 1024) }
                try? await raw.write(bytes)
                let frames = try await raw.readUntilClosed()
                guard case .error(.tooManyConnectionsFromAddress, true, .hello, _)? = frames.first, frames.count == 1 else {
                    Issue.record("attempt \(attempt): expected only the refusal, got \(frames)")
                    raw.close()
                    return
                }
                // The attempt still holds its end open; the server has already let go of its own.
                #expect(server.connectionCount == 1, "attempt \(attempt) is still a connection on the server")
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
    }

    @Test func closesConnectionsThatSendAFrameOverTheSizeLimit() async throws {
        try await withServer(testConfiguration { $0.maxFrameSize = 1024 }) { server in
            let alice = try await TestClient.connect(server, nick: "alice")
            #expect(alice.connection.welcome.maxFrameSize == 1024)
            try await alice.join("r")
            try await alice.send(.say(room: "r", text: String(repeating: "x", count: 2000)))
            let frames = try await alice.readUntilClosed()
            #expect(fatalError(in: frames)?.0 == .frameTooLarge, "got \(frames)")
        }
    }

    @Test func refusesJoinsBeyondTheRoomLimit() async throws {
        try await withServer(testConfiguration { $0.maxRoomsPerClient = 2 }) { server in
            let alice = try await TestClient.connect(server, nick: "alice")
            try await alice.join("a")
            try await alice.join("b")
            try await alice.send(.join(room: "c"))
            guard case .error(.tooManyRooms, false, .join, _) = try await alice.expectFrame("tooManyRooms") else {
                Issue.record("expected a non-fatal tooManyRooms")
                return
            }
            alice.close()
        }
    }

    @Test func answersFloodsWithRateLimitedThenDisconnects() async throws {
        let configuration = testConfiguration {
            // Slow enough that the refill during the test cannot matter.
            $0.messageRate = 0.1
            $0.messageBurst = 3
            $0.rateAbuseLimit = 5
        }
        try await withServer(configuration) { server in
            let flooder = try await TestClient.connect(server, nick: "flooder")
            try await flooder.join("r")
            try await flooder.send((0..<20).map { Frame.say(room: "r", text: "spam \($0)") })
            let frames = try await flooder.readUntilClosed()
            let delivered = frames.filter { if case .message = $0 { true } else { false } }
            let refused = frames.filter { if case .error(.rateLimited, false, .say, _) = $0 { true } else { false } }
            #expect(delivered.count == 2, "the join took one token of three")
            #expect(refused.count == 4)
            #expect(fatalError(in: frames)?.0 == .rateLimited, "got \(frames)")
        }
    }

    @Test func dropsASlowlorisThatNeverFinishesTheHandshake() async throws {
        try await withServer(testConfiguration { $0.handshakeTimeout = .milliseconds(300) }) { server in
            let slow = try await RawClient(port: server.port)
            // The start of a hello, and then nothing.
            try await slow.write([0x09, 0x01, 0x01])
            let frames = try await slow.readUntilClosed()
            #expect(fatalError(in: frames)?.0 == .handshakeTimeout, "got \(frames)")
            slow.close()
        }
    }

    @Test func answersAMalformedFrameWithItsReasonThenCloses() async throws {
        try await withServer { server in
            let raw = try await RawClient(port: server.port)
            try await raw.write(.hello(version: 1, nick: "mallory", password: nil))
            guard case .welcome = try await raw.next(waitingFor: "welcome") else {
                Issue.record("expected welcome")
                return
            }
            try await raw.write([0x01, 0x80])  // must-understand type 0x80
            let frames = try await raw.readUntilClosed()
            guard let (code, reason) = fatalError(in: frames) else {
                Issue.record("expected a fatal error, got \(frames)")
                return
            }
            #expect(code == .malformedFrame)
            #expect(reason.contains("0x80"), "the reason names the problem: \(reason)")
            raw.close()
        }
    }

    @Test func closesConnectionsWhoseFirstFrameIsNotHello() async throws {
        try await withServer { server in
            let raw = try await RawClient(port: server.port)
            try await raw.write(.join(room: "r"))
            let frames = try await raw.readUntilClosed()
            #expect(fatalError(in: frames)?.0 == .handshakeRequired, "got \(frames)")
            raw.close()
        }
    }

    @Test func rejectsBadNamesAsInvalid() async throws {
        try await withServer { server in
            let raw = try await RawClient(port: server.port)
            try await raw.write(.hello(version: 1, nick: "mallory", password: nil))
            _ = try await raw.next(waitingFor: "welcome")
            // join "General": upper case is not allowed on the wire.
            try await raw.write([0x09, 0x03, 0x07] + Array("General".utf8))
            let frames = try await raw.readUntilClosed()
            #expect(fatalError(in: frames)?.0 == .invalidRoom, "got \(frames)")
            raw.close()
        }
    }
}
