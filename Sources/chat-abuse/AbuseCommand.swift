import ArgumentParser
import Dispatch
import Foundation

/// `chat-abuse`: plays one hostile behaviour against a chat server on this machine from many
/// connections, while a control client chats, and reports what it did to the server.
@main
struct AbuseCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chat-abuse",
        abstract: "Attack a chat server on this machine and report its peak memory and a control client's latency.",
        discussion: """
            Connects a control client from --control-host (it joins #control and says a line \
            every 20 ms, timing its echo), then --connections hostile connections to --attack-host that play --attack for --duration \
            seconds. Prints one Markdown table row: the attack, the server's peak resident memory \
            (with --server-pid), the control client's echo latency, whether the control client was \
            disconnected, and how many attackers the server cut off.

            Attacks:
            \(Attack.allCases.map { "  \($0.rawValue): \($0.summary)" }.joined(separator: "\n"))

            Only loopback addresses are ever targeted. The server must listen on both hosts \
            (chat-server --host :: does). Scripts/abuse.sh runs every attack against a fresh server.
            """)

    @Option(help: "The server's port.")
    var port = 7000

    @Option(help: "Where the attackers connect: a loopback address (127.x.x.x or ::1).")
    var attackHost = "127.0.0.1"

    @Option(help: "Where the control client connects: another loopback address than the attackers', so it has its own per-address limits.")
    var controlHost = "::1"

    @Option(help: "The attack to play.")
    var attack: String

    @Option(help: "Hostile connections (1...2000).")
    var connections = 1000

    @Option(help: "Seconds the control client chats while the attack goes on (1...120).")
    var duration = 10.0

    @Option(name: .customLong("server-pid"), help: "The server's process ID, to report its peak memory (from /proc).")
    var serverPID: Int32?

    @Option(help: "A file whose first line is the server's password, for the control client (the guessing attack needs one).")
    var passwordFile: String?

    @Flag(name: .customLong("table-header"), help: "Print the table's header before the row.")
    var tableHeader = false

    func validate() throws {
        for host in [attackHost, controlHost] where !(host == "::1" || host.hasPrefix("127.")) {
            throw ValidationError("\(host) is not a loopback address: chat-abuse only attacks this machine")
        }
        guard Attack(rawValue: attack) != nil else {
            throw ValidationError("unknown attack \(attack); one of \(Attack.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        guard (1...2_000).contains(connections) else { throw ValidationError("--connections must be 1...2000") }
        guard duration >= 1, duration <= 120 else { throw ValidationError("--duration must be 1...120 seconds") }
    }

    func run() throws {
        let password = try passwordFile.map { path in
            let contents = try String(contentsOfFile: path, encoding: .utf8)
            return String(contents.split(separator: "\n", omittingEmptySubsequences: false).first ?? "")
        }
        let run = AbuseRun(
            attack: Attack(rawValue: attack)!, attackHost: attackHost, controlHost: controlHost, port: port, serverPID: serverPID, connections: connections, duration: duration,
            password: password)
        let done = DispatchSemaphore(value: 0)
        let box = ResultBox()
        run.start { result in
            box.result = result
            done.signal()
        }
        // The run stops by itself after --duration; the extra minute covers connecting. Its
        // timers and peers hold it unowned, so it must outlive the wait.
        let finished = withExtendedLifetime(run) { done.wait(timeout: .now() + duration + 60) == .success }
        guard finished, let result = box.result else {
            throw ValidationError("the run did not finish")
        }
        if tableHeader {
            print("| attack | connections | server peak RSS | control echoes | control p50 | control p99 | control cut off | attackers cut off |")
            print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        }
        let rss = result.peakResidentBytes.map { String(format: "%.1f MiB", Double($0) / 1_048_576) } ?? "-"
        print(
            "| \(result.attack.rawValue) | \(result.connections) | \(rss) | \(result.controlEchoes)/\(result.controlSent) | "
                + String(format: "%.2f ms | %.2f ms", result.p50Milliseconds, result.p99Milliseconds)
                + " | \(result.controlEvicted ?? "no") | \(result.attackersCut) |")
    }
}

/// Hands the result from the run's queue to the main thread.
private final class ResultBox: @unchecked Sendable {
    // Written once before the semaphore is signalled, read after the wait.
    var result: AbuseRun.Result?
}
