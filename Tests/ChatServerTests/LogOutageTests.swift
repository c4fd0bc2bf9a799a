import ChatProtocol
import ChatStorage
import Foundation
import Testing
import TestSupport

/// The promise every mode with a room log beyond memory makes when that log stops answering —
/// a journal and database the server may not write, Redis stopped mid-run — tested the same way in
/// each, against the real `chat-server` and the real SQLite or `redis-server`: the sender is
/// told (non-fatally) rather than left waiting, no member hears a line its sender did not hear
/// too, and once the log answers again lines flow and every accepted one reaches every member.
@Suite("When the room log stops answering")
struct LogOutageTests {
    @Test(arguments: [ServerMode.durable, .cluster])
    func theSenderIsToldNoOneHearsWhatItDidNotAndLinesFlowOnceTheLogIsBack(_ mode: ServerMode) async throws {
        // Redis that stops answering is noticed after half the node timeout, 10 s here. The
        // outage must end well before the whole timeout, or the node lets its clients go when it
        // is back (ClusterTests): with 10 s, CI's load once stretched it past that.
        // A long handshake timeout: under the full suite's load a test task can wait seconds
        // between connecting and sending its hello.
        let server = try await ChatServerProcess(
            mode, arguments: ["--handshake-timeout", "60"] + (mode == .cluster ? ["--cluster-node-timeout", "20"] : []))
        defer { server.stop() }
        let alice = try await TestClient.connect(to: server, nick: "alice", version: 2)
        let bob = try await TestClient.connect(to: server, nick: "bob", version: 2)
        defer {
            alice.close()
            bob.close()
        }
        _ = try await alice.joinRoom("r")
        _ = try await bob.joinRoom("r")
        var aliceHeard: [String] = []
        #expect(try await alice.say("before", in: "r", heard: &aliceHeard) == nil, "accepted while the log answers")

        let outage = try await LogOutage(stopping: server)
        let refusal = try await alice.say("during", in: "r", heard: &aliceHeard)
        let expected: ErrorCode = mode == .cluster ? .unavailable : .storageFailed
        #expect(refusal?.code == expected, "the sender is told, with \(expected): \(String(describing: refusal))")
        await outage.end()

        // The log may take a moment to be reached again: refused lines are said again, a bounded
        // number of times, until one is accepted.
        var accepted: String?
        for attempt in 1...100 where accepted == nil {
            let text = "after \(attempt)"
            if try await alice.say(text, in: "r", heard: &aliceHeard) == nil {
                accepted = text
            } else {
                try await Task.sleep(for: .milliseconds(200))
            }
        }
        let last = try #require(accepted, "a line is accepted once the log answers again")
        var bobHeard: [String] = []
        _ = try await bob.waitFor("bob hears \(last)") { frame -> Bool? in
            guard case .message("r", _, _, "alice", let text) = frame else { return nil }
            bobHeard.append(text)
            return text == last ? true : nil
        }
        // A line Redis receives before the node gives up on it may be carried out once Redis runs
        // again (docs/CLUSTER.md): then both members hear it. In SQLite a failed commit is gone.
        #expect(bobHeard == aliceHeard, "alice heard \(aliceHeard), bob \(bobHeard)")
        #expect(aliceHeard.first == "before" && aliceHeard.last == last)
        if mode == .durable { #expect(!aliceHeard.contains("during"), "a line that was not stored is delivered to no one") }
    }
}

/// The room log of `server` made to stop answering, until `end`: in durable mode the server's
/// file-size limit (`RLIMIT_FSIZE`, as `ulimit -f`) is set to one byte, so every write to its
/// journal and its database fails with EFBIG as on a full disk (SQLite's write lock held by
/// another process is not an outage: commits go to the journal meanwhile); in cluster mode
/// Redis is stopped with SIGSTOP (its connections stay up, nothing answers).
private final class LogOutage: Sendable {
    private let server: pid_t?
    private let redis: RedisServerProcess?

    init(stopping server: ChatServerProcess) async throws {
        if let redis = server.redis {
            self.redis = redis
            self.server = nil
            redis.child.signal(SIGSTOP)
            return
        }
        #expect(server.dataDirectory != nil, "a durable server has a data directory")
        #expect(await Self.setFileSizeLimit(of: server.child.pid, to: "1"), "the file-size limit is set")
        self.server = server.child.pid
        redis = nil
    }

    /// Sets the soft file-size limit of process `pid` with util-linux's `prlimit` (Glibc's
    /// `prlimit(2)` is not visible to Swift); whether it did.
    private static func setFileSizeLimit(of pid: pid_t, to limit: String) async -> Bool {
        guard let tool = try? ChildProcess(URL(fileURLWithPath: "/usr/bin/prlimit"), ["--pid", "\(pid)", "--fsize=\(limit):"]) else { return false }
        return await tool.waitForExit(timeout: .seconds(10)) == 0
    }

    /// Lets the log answer again; calling it again does nothing more.
    func end() async {
        if let server { _ = await Self.setFileSizeLimit(of: server, to: "unlimited") }
        redis?.child.signal(SIGCONT)
    }
}

extension TestClient {
    /// Says `text` in `room` and waits for its fate: nil once its echo arrives, or the error that
    /// refused it. Every line of the room heard meanwhile is appended to `heard`.
    fileprivate func say(_ text: String, in room: String, heard: inout [String]) async throws -> (code: ErrorCode, reason: String)? {
        try await send(.say(room: room, text: text))
        while true {
            let frame = try await expectFrame("the echo of \(text) or its refusal")
            if case .message(room, _, _, _, let echoed) = frame {
                heard.append(echoed)
                if echoed == text { return nil }
            } else if case .error(let code, let fatal, .say, let reason) = frame {
                #expect(!fatal, "a refusal, not a disconnection: \(code) \(reason)")
                return (code, reason)
            }
        }
    }
}
