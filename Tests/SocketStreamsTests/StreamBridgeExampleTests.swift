import Foundation
import Glibc
import Testing

/// Runs the built `stream-chat-example` for real: the relay and two clients as child processes
/// talking over pipes and loopback sockets.
///
/// This is also the test for events on the main run loop: the client schedules its streams in
/// `RunLoop.main`, and its delegate traps unless it runs on the main thread, so a client that exits
/// cleanly after relaying proves the events came there.
@Suite("stream-chat-example end to end")
struct StreamBridgeExampleTests {
    private struct Outcome: Sendable {
        var relayPort: Int?
        var bobHeard: String?
        var aliceExit: Int32?
        var bobExit: Int32?
        var transcript = ""
    }

    @Test func aLineTypedInOneClientReachesTheOther() async throws {
        let binary = try #require(
            bridgeExampleBinary(),
            "expected stream-chat-example next to the test bundle; build the package (swift build) first")

        let outcome = try await bridgeOnNewThread { () throws -> Outcome in
            var outcome = Outcome()
            let relay = try BridgeChildProcess(binary, arguments: ["--serve", "--port", "0"])
            defer { relay.terminate() }
            let listening = relay.waitForLine { $0.hasPrefix("* relay listening on port ") }
            outcome.relayPort = listening.flatMap { $0.split(separator: " ").last.flatMap { Int($0) } }
            guard let port = outcome.relayPort else {
                outcome.transcript = relay.transcript
                return outcome
            }

            // bob over IPv6, alice by name; each waits for the relay's welcome, so both are
            // registered before alice speaks.
            let bob = try BridgeChildProcess(binary, arguments: ["--host", "::1", "--port", "\(port)", "--nick", "bob"])
            defer { bob.terminate() }
            _ = bob.waitForLine { $0.hasPrefix("* welcome") }
            let alice = try BridgeChildProcess(binary, arguments: ["--host", "localhost", "--port", "\(port)", "--nick", "alice"])
            defer { alice.terminate() }
            _ = alice.waitForLine { $0.hasPrefix("* welcome") }

            alice.send("hello from alice")
            outcome.bobHeard = bob.waitForLine { $0.hasPrefix("alice:") }

            // End of input closes each client's output stream; the relay hangs up and both exit.
            alice.closeInput()
            bob.closeInput()
            outcome.aliceExit = alice.waitForExit()
            outcome.bobExit = bob.waitForExit()
            outcome.transcript = "relay:\n\(relay.transcript)\nalice:\n\(alice.transcript)\nbob:\n\(bob.transcript)"
            return outcome
        }

        #expect(outcome.relayPort != nil, "expected the relay to print its port; output:\n\(outcome.transcript)")
        #expect(outcome.bobHeard == "alice: hello from alice", "transcript:\n\(outcome.transcript)")
        #expect(outcome.aliceExit == 0, "expected alice to exit 0 after the relay hung up; transcript:\n\(outcome.transcript)")
        #expect(outcome.bobExit == 0, "expected bob to exit 0 after the relay hung up; transcript:\n\(outcome.transcript)")
    }

    @Test func helpExplainsBothModesAndBadArgumentsExit64() async throws {
        let binary = try #require(bridgeExampleBinary(), "expected stream-chat-example next to the test bundle")
        let (helpLines, helpExit, complaint, badExit, transcript) = try await bridgeOnNewThread {
            let help = try BridgeChildProcess(binary, arguments: ["--help"])
            let helpExit = help.waitForExit()
            let helpLines = ["--serve", "--host HOST", "--nick NICK"].compactMap { option in
                help.waitForLine { $0.trimmingCharacters(in: .whitespaces).hasPrefix(option) }
            }
            let bad = try BridgeChildProcess(binary, arguments: ["--host", "localhost"])
            let badExit = bad.waitForExit()
            let complaint = bad.waitForLine { $0.hasPrefix("stream-chat-example:") }
            return (helpLines, helpExit, complaint, badExit, help.transcript + bad.transcript)
        }

        #expect(helpExit == 0)
        #expect(helpLines.count == 3, "expected --serve, --host and --nick explained; output:\n\(transcript)")
        #expect(badExit == 64, "expected EX_USAGE for a missing --port")
        #expect(complaint == "stream-chat-example: --port is required", "output:\n\(transcript)")
    }
}

/// The example binary, built next to the test bundle (`.build/debug`), or nil.
private func bridgeExampleBinary() -> URL? {
    guard let directory = Bundle.main.executableURL?.deletingLastPathComponent() else { return nil }
    let binary = directory.appendingPathComponent("stream-chat-example")
    return FileManager.default.isExecutableFile(atPath: binary.path) ? binary : nil
}

/// A child process with piped standard input and output whose output lines can be waited for.
///
/// Other tests in this process spawn children too, some with a plain fork, and a child that
/// inherits one of our pipe ends holds it open: our child then never sees end of input, or we
/// never see end of its output. So both pipes are made close-on-exec at once (the child's own
/// copies, made by dup2, are not), and callers wait for the lines they expect rather than for the
/// end of output.
///
/// Threading: `condition` protects `output` and `exitStatus`; the pipe and termination handlers
/// run on Foundation's queues, everything else on the test's thread.
private final class BridgeChildProcess: @unchecked Sendable {
    private let process = Process()
    private let input = Pipe()
    private let condition = NSCondition()
    private var output = ""
    private var exitStatus: Int32?

    init(_ binary: URL, arguments: [String]) throws {
        process.executableURL = binary
        process.arguments = arguments
        process.standardInput = input
        let outputPipe = Pipe()
        for pipe in [input, outputPipe] {
            for handle in [pipe.fileHandleForReading, pipe.fileHandleForWriting] {
                _ = fcntl(handle.fileDescriptor, F_SETFD, FD_CLOEXEC)
            }
        }
        process.standardOutput = outputPipe
        process.standardError = outputPipe
        outputPipe.fileHandleForReading.readabilityHandler = { [self] handle in
            let data = handle.availableData
            if data.isEmpty { handle.readabilityHandler = nil }
            condition.withLock {
                output += String(decoding: data, as: UTF8.self)
                condition.broadcast()
            }
        }
        process.terminationHandler = { [self] process in
            condition.withLock {
                exitStatus = process.terminationStatus
                condition.broadcast()
            }
        }
        try process.run()
    }

    /// Everything the process wrote to standard output and standard error so far.
    var transcript: String { condition.withLock { output } }

    /// Waits up to `timeout` seconds for a complete output line satisfying `matches`.
    func waitForLine(timeout: TimeInterval = 20, _ matches: (String) -> Bool) -> String? {
        let deadline = Date(timeIntervalSinceNow: timeout)
        return condition.withLock {
            while true {
                let lines = output.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
                if let line = lines.first(where: { matches(String($0)) }) { return String(line) }
                guard condition.wait(until: deadline) else { return nil }
            }
        }
    }

    /// Types `line` on the process's standard input.
    func send(_ line: String) {
        input.fileHandleForWriting.write(Data((line + "\n").utf8))
    }

    /// Closes the process's standard input (end of file).
    func closeInput() {
        try? input.fileHandleForWriting.close()
    }

    /// Waits up to `timeout` seconds for the process to exit; its status, or nil if it did not.
    ///
    /// Foundation learns of an exit from SIGCHLD; once in a full run (hundreds of children
    /// spawned around it) it did not, and a client that had printed its last line was "still
    /// running" 20 s later. So a child that the kernel shows as exited (a zombie) counts as
    /// exited, with its status; one still running has its state and each thread's wait channel
    /// put in the transcript, to tell a hang from a missed notice.
    func waitForExit(timeout: TimeInterval = 20) -> Int32? {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while Date() < deadline {
            let slice = min(deadline, Date(timeIntervalSinceNow: 0.5))
            let status: Int32? = condition.withLock {
                while exitStatus == nil, condition.wait(until: slice) {}
                return exitStatus
            }
            if let status { return status }
            if processState == "Z" {
                // Peeked, not reaped (WNOWAIT): Foundation still reaps it when it notices.
                var info = siginfo_t()
                if waitid(P_PID, id_t(process.processIdentifier), &info, WEXITED | WNOHANG | WNOWAIT) == 0,
                    info.si_code == CLD_EXITED
                {
                    return info._sifields._sigchld.si_status
                }
            }
        }
        let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(process.processIdentifier)/task")) ?? []
        let channels = threads.map { task in
            (try? String(contentsOfFile: "/proc/\(process.processIdentifier)/task/\(task)/wchan", encoding: .utf8)) ?? "?"
        }
        condition.withLock { output += "\n[still running: state \(processState ?? "gone"), thread wait channels \(channels)]\n" }
        return nil
    }

    /// The child's state letter from /proc (R, S, Z, …), or nil once it is gone.
    private var processState: String? {
        guard let stat = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        return stat[stat.index(after: close)...].split(separator: " ").first.map(String.init)
    }

    /// Stops the process if it is still running.
    func terminate() {
        if process.isRunning { process.terminate() }
    }
}
