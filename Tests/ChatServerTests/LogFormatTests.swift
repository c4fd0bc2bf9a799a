import Foundation
import Glibc
import Testing
import TestSupport

/// chat-server's log lines (issue 38, finding 6): millisecond UTC timestamps and logfmt values
/// (quoted when they hold spaces), one JSON object per line with `--log-format json`, and a
/// syslog priority prefix for journald when standard error is the journal's stream.
@Suite("The server's log lines", .serialized)
struct LogFormatTests {
    /// The server's log lines in `output` (not the `listening on`/`metrics on` lines of stdout).
    static func logLines(_ output: String) -> [Substring] {
        output.split(separator: "\n").filter { !$0.hasPrefix("listening on") && !$0.hasPrefix("metrics on") }
    }

    @Test func textLinesHaveMillisecondsAndQuoteValuesWithSpaces() async throws {
        let server = try await ChatServerProcess(.durable, arguments: ["--log-level", "info"])
        defer { server.stop() }
        // "serving" is logged after "listening on" is printed, which is all the start waits for.
        #expect(await server.child.waitForOutput("serving"), "\(server.child.output)")
        let lines = Self.logLines(server.child.output)
        #expect(!lines.isEmpty)
        let stamp = try Regex(#"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (trace|debug|info|notice|warning|error|critical) "#)
        for line in lines {
            #expect(line.firstMatch(of: stamp) != nil, "a UTC time to the millisecond, then the level: \(line)")
        }
        let serving = try #require(lines.first { $0.contains("serving") })
        #expect(serving.contains("memory.budget=\"max-memory "), "a value with spaces is quoted: \(serving)")
    }

    @Test func jsonLinesAreOneObjectEach() async throws {
        let server = try await ChatServerProcess(.durable, arguments: ["--log-level", "info", "--log-format", "json"])
        defer { server.stop() }
        #expect(await server.child.waitForOutput("\"serving\""), "\(server.child.output)")
        let client = try await TestClient.connect(to: server, nick: "jsonclient")
        client.close()
        #expect(await server.child.waitForOutput("client disconnected"))
        for line in Self.logLines(server.child.output) {
            let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            #expect(object != nil, "a JSON object: \(line)")
            #expect(object?["time"] is String && object?["level"] is String && object?["message"] is String, "\(line)")
        }
        let serving = Self.logLines(server.child.output).first { $0.contains("\"serving\"") } ?? ""
        #expect(serving.contains("\"memory.budget\":\"max-memory "), "metadata as string fields: \(serving)")
    }

    @Test func underJournaldLinesCarryTheirPriority() async throws {
        // JOURNAL_STREAM names the stream standard error is: here the test's pipe, as journald's
        // socket would be under systemd.
        let server = try Operations.executable().path
        let shell = try ChildProcess(
            URL(fileURLWithPath: "/bin/sh"),
            ["-c", "JOURNAL_STREAM=$(stat -L -c %d:%i /proc/self/fd/2) exec \(server) --port 0 --no-persistence --log-level info"])
        defer { shell.stop() }
        #expect(await shell.waitForOutput("serving"), "\(shell.output)")
        let lines = Self.logLines(shell.output)
        let serving = try #require(lines.first { $0.contains("serving") })
        #expect(serving.hasPrefix("<6>info serving"), "info is priority 6, and the journal keeps the time: \(serving)")
    }
}
