import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

/// Storage health that is true (issue 38, finding 2): a server whose database cannot grow
/// (`ulimit -f`: every write past the size fails with EFBIG) while its journal still takes
/// commits says so in `/metrics`, `/status`, `/healthz` (503) and `chat-server --status` (a
/// failing exit), logs the failures once per interval with a count rather than once each, and
/// says it works again once the limit is lifted.
@Suite("Storage health, against the real server", .serialized)
struct StorageHealthTests {
    static let prlimit = "/usr/bin/prlimit"

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: prlimit)))
    func aDatabaseThatCannotGrowShowsInMetricsHealthAndStatusAndRecovers() async throws {
        let data = try TemporaryDirectory(prefix: "chat-health")
        defer { data.remove() }
        // A soft limit of 1 MiB per file (the hard one unlimited, so the test can lift it): the
        // journal's files, each a tenth of a second of commits, stay under it; the database's
        // log does not.
        let server = try await ServerUnderTest(
            arguments: [
                "--port", "0", "--data-dir", data.path, "--metrics", "127.0.0.1:0", "--no-rate-limits", "--log-level", "info",
            ],
            wrapper: [Self.prlimit, "--fsize=1048576:unlimited"])
        defer { server.stop() }
        let port = try #require(server.metricsPort)
        let healthy = await MetricsPortTests.get(port: port, path: "/healthz")
        #expect(healthy?.status == 200, "healthy at first: \(String(describing: healthy))")

        let writer = try await TestClient.connect(port: server.port, nick: "writer", version: 2)
        _ = try await writer.joinRoom("big")
        // Bounded: at most 4,000 lines of 900 bytes (3.4 MiB), stopping as soon as the server
        // logs a failed write.
        let line = String(repeating: "x", count: 900)
        for batch in 0..<40 where !server.child.output.contains("storage write failed") {
            try await writer.send((0..<100).map { .say(room: "big", text: "\(batch)-\($0) \(line)") })
            _ = try await writer.collect(100, "echoes or refusals") { frame -> Bool? in
                switch frame {
                case .message("big", _, _, "writer", _), .error: true
                default: nil
                }
            }
        }
        let failing = try await MetricsPortTests.metrics(port: port) { Operations.total("chat_storage_write_failures_total", in: $0) > 0 }
        let metrics = try #require(failing, "the database's failed writes are counted:\n\(server.child.output.suffix(2000))")
        let database = Operations.samples(named: "chat_storage_write_failures_total", in: metrics).first { $0.labels.contains("database") }
        #expect((database?.value ?? 0) > 0, "counted as the database's:\n\(metrics)")
        let reported = try await MetricsPortTests.metrics(port: port) { text in
            MetricsPortTests.value(of: "chat_storage_failing", in: text) == 1
                && (MetricsPortTests.value(of: "chat_storage_journal_backlog_bytes", in: text) ?? 0) > 0
        }
        #expect(reported != nil, "failing, with the journal's backlog, in /metrics")
        let health = await MetricsPortTests.get(port: port, path: "/healthz")
        #expect(health?.status == 503, "/healthz answers 503 while storage fails: \(String(describing: health))")
        let status = await MetricsPortTests.get(port: port, path: "/status")
        #expect(status?.body.contains("FAILING") == true, "the status page says so:\n\(status?.body ?? "")")
        let statusCommand = try await Operations.run(["--status", "--metrics", "127.0.0.1:\(port)"])
        #expect(statusCommand.status != 0 && statusCommand.status != nil, "chat-server --status fails:\n\(statusCommand.output)")
        #expect(statusCommand.output.contains("FAILING"), "and prints the page:\n\(statusCommand.output)")

        // Failures repeat every tenth of a second while the limit holds; the log says so once per
        // interval, with a count, not once each.
        let failures = Operations.total("chat_storage_write_failures_total", in: reported ?? metrics)
        let errorLines = server.child.lines.filter { $0.contains("storage write failed") }
        #expect(!errorLines.isEmpty, "the first failure is logged:\n\(server.child.output.suffix(2000))")
        #expect(errorLines.count <= 3, "\(errorLines.count) lines for \(failures) failures:\n\(errorLines.joined(separator: "\n"))")

        // Lifted: the journal's records reach the database, and every report says so.
        let lift = try ChildProcess(URL(fileURLWithPath: Self.prlimit), ["--pid", "\(server.child.pid)", "--fsize=unlimited:unlimited"])
        #expect(await lift.waitForExit() == 0, "prlimit lifts the limit: \(lift.output)")
        let recovered = try await MetricsPortTests.metrics(port: port) { text in
            MetricsPortTests.value(of: "chat_storage_failing", in: text) == 0
                && MetricsPortTests.value(of: "chat_storage_journal_backlog_bytes", in: text) == 0
        }
        #expect(recovered != nil, "healthy again once the database takes the journal in")
        #expect(await MetricsPortTests.get(port: port, path: "/healthz")?.status == 200, "and /healthz says so")
        #expect(server.child.output.contains("storage works again"), "and the log:\n\(server.child.output.suffix(2000))")
        writer.close()
    }
}
