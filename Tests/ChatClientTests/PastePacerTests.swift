import ChatClient
import Testing

@Suite struct PastePacerTests {
    /// The server's side: a token bucket as ChatServer's TokenBucket keeps it, full at the start.
    private struct ServerBucket {
        let rate: Double
        let capacity: Double
        var tokens: Double
        var updated = 0.0

        mutating func admit(_ amount: Double, at time: Double) -> Bool {
            tokens = min(capacity, tokens + (time - updated) * rate)
            updated = time
            guard tokens >= amount else { return false }
            tokens -= amount
            return true
        }
    }

    private func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    @Test(arguments: [
        RateLimits(requestsPerSecond: 10, requestBurst: 10, bytesPerSecond: 65_536, byteBurst: 1 << 20),
        RateLimits(requestsPerSecond: 50, requestBurst: 100, bytesPerSecond: 2_000, byteBurst: 16_384),
        RateLimits(requestsPerSecond: 1, requestBurst: 1, bytesPerSecond: 0, byteBurst: 0),
    ])
    func pacedFramesAreNeverRefused(limits: RateLimits) {
        var pacer = PastePacer(limits: limits, now: .zero)
        // Half the burst (rounded down) already spent before the paste, in ways the pacer did not see.
        var requests = ServerBucket(
            rate: limits.requestsPerSecond, capacity: Double(limits.requestBurst), tokens: Double(limits.requestBurst - limits.requestBurst / 2))
        var bytes = ServerBucket(rate: limits.bytesPerSecond, capacity: Double(limits.byteBurst), tokens: Double(limits.byteBurst - limits.byteBurst / 2))
        var now = Duration.zero
        for line in 1...150 {
            let size = 100 + line % 7 * 50
            // A typed line now and then, which the pacer is told of but did not schedule.
            if line % 40 == 0 {
                pacer.record(frameOf: 30, at: now)
                _ = requests.admit(1, at: seconds(now))
                _ = bytes.admit(30, at: seconds(now))
            }
            var delay = pacer.delay(forFrameOf: size, at: now)
            while delay > .zero {
                now += delay
                delay = pacer.delay(forFrameOf: size, at: now)
            }
            pacer.record(frameOf: size, at: now)
            let admitted = requests.admit(1, at: seconds(now))
            #expect(admitted, "line \(line) passes the request limit at \(now)")
            if limits.bytesPerSecond > 0 {
                let fits = bytes.admit(Double(size), at: seconds(now))
                #expect(fits, "line \(line) passes the byte limit")
            }
        }
        #expect(seconds(now) < 150 / (limits.requestsPerSecond * 0.8) + 150 * 400 / max(1, limits.bytesPerSecond * 0.8) + 1,
                "the pacer waits no longer than its own rates require (simulated time \(now))")
    }
}

@Suite struct StatusLineTests {
    private func session() -> ClientSession {
        var session = ClientSession(nick: "alice", rooms: ["general", "dev", "ops"], clock: { 1000 })
        _ = session.connected(nick: "alice", motd: "", version: 2)
        for room in ["general", "dev", "ops"] { _ = session.receive(.joined(room: room, seq: 1, time: 1, nick: "alice")) }
        _ = session.receive(.message(room: "dev", seq: 2, time: 2, sender: "bob", text: "hi"))
        _ = session.receive(.message(room: "dev", seq: 3, time: 3, sender: "bob", text: "alice, look"))
        _ = session.receive(.direct(sender: "carol", recipient: "alice", time: 4, text: "psst"))
        return session
    }

    @Test func showsTheCurrentWindowAndNewsElsewhere() {
        #expect(StatusLine.render(session: session(), columns: 80) == "alice | [1:#general] 2:#dev(2!) 3:#ops 4:carol(1!)")
    }

    @Test func leavesQuietWindowsOutFirstWhenNarrow() {
        #expect(StatusLine.render(session: session(), columns: 46) == "alice | [1:#general] 2:#dev(2!) 4:carol(1!) +1", "+1 counts the window left out")
        #expect(TerminalText.cellWidth(of: StatusLine.render(session: session(), columns: 12)) <= 12)
    }

    @Test func saysAwayAndOffline() {
        var session = session()
        _ = session.receive(.away(nick: "alice", text: "lunch"))
        session.disconnected()
        #expect(StatusLine.render(session: session, columns: 100).hasPrefix("alice (away) | "))
        #expect(StatusLine.render(session: session, columns: 100).hasSuffix(" | offline"))
    }

    @Test func namesTheServerWhenThereAreSeveralAndHidesItOffline() {
        var session = session()
        session.server = "[::1]:7002"
        session.encryption = "TLS 1.3"
        #expect(StatusLine.render(session: session, columns: 100).hasSuffix(" | [::1]:7002 | TLS 1.3"))
        session.disconnected()
        #expect(StatusLine.render(session: session, columns: 100).hasSuffix(" | offline"), "offline, not a server it is not on")
    }
}

@Suite struct HistoryFileTests {
    @Test func roundTripsAnyLine() {
        let entries = ["plain", "with  spaces", "back\\slash", "ünï 日本 😀", "tab\there"]
        #expect(HistoryFile.decode(HistoryFile.encode(entries)) == entries)
    }

    @Test func readsWhatLibeditWrote() {
        #expect(HistoryFile.decode("_HiStOrY_V2_\nhello\\040world\n/join\\040#dev\n") == ["hello world", "/join #dev"])
        #expect(HistoryFile.decode("one\ntwo\n") == ["one", "two"], "a file without the header is plain lines")
    }
}
