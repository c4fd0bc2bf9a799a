import ChatProtocol
import ChatServer
import Foundation
import Glibc
import Testing
import TestSupport

/// `/metrics` as Prometheus and its tools read it (issue 38, finding 5): `promtool check metrics`
/// finds nothing to say (a HELP for every series) in every mode, every labelled counter is there
/// at 0 before its first event (so `increase()` sees the first one), and a real Prometheus on
/// loopback scrapes every series docs/OPERATIONS.md documents. Scripts/bootstrap.sh installs
/// Debian's `prometheus` package, which brings both programs.
@Suite("Metrics as Prometheus reads them", .serialized)
struct MetricsHygieneTests {
    static let promtool = "/usr/bin/promtool"
    static let prometheus = "/usr/bin/prometheus"
    static let flags = ["--metrics", "127.0.0.1:0", "--log-level", "warning"]

    @Test(arguments: ServerMode.allCases)
    func promtoolFindsNothingToSay(mode: ServerMode) async throws {
        #expect(FileManager.default.isExecutableFile(atPath: Self.promtool), "promtool is installed (Scripts/bootstrap.sh)")
        let server = try await ChatServerProcess(mode, arguments: Self.flags)
        defer { server.stop() }
        let port = try #require(MetricsPortTests.metricsPort(of: server))
        // Some traffic first, so histograms and labelled series have samples.
        let client = try await TestClient.connect(to: server, nick: "talker", version: 2)
        _ = try await client.joinRoom("room")
        try await client.send(.say(room: "room", text: "hello"))
        _ = try await client.waitFor("the echo") { frame -> Bool? in
            if case .message("room", _, _, "talker", _) = frame { return true }
            return nil
        }
        let text = try #require(await MetricsPortTests.get(port: port, path: "/metrics")?.body)
        let check = try ChildProcess(URL(fileURLWithPath: Self.promtool), ["check", "metrics"])
        check.send(text)
        check.closeInput()
        let status = await check.waitForExit()
        #expect(status == 0, "promtool check metrics exits \(String(describing: status)):\n\(check.output)")
        #expect(check.output.isEmpty, "promtool has remarks:\n\(check.output)")
        client.close()
    }

    @Test func everyLabelledCounterIsThereAtZeroFromTheStart() async throws {
        let server = try await ChatServerProcess(.memory, arguments: Self.flags)
        defer { server.stop() }
        let port = try #require(MetricsPortTests.metricsPort(of: server))
        let text = try #require(await MetricsPortTests.get(port: port, path: "/metrics")?.body)
        for sample in [
            #"chat_refusals_total{code="rateLimited"}"#, #"chat_refusals_total{code="nickTaken"}"#,
            #"chat_refusals_total{code="storageFailed"}"#, #"chat_disconnects_total{reason="slowConsumer"}"#,
            #"chat_disconnects_total{reason="connectionLost"}"#, #"chat_disconnects_total{reason="client"}"#,
            #"chat_frames_received_total{type="say"}"#, #"chat_tls_handshake_failures_total{reason="timeout"}"#,
        ] {
            #expect(MetricsPortTests.value(of: sample, in: text) == 0, "\(sample) is 0 before its first event:\n\(text)")
        }
        #expect((MetricsPortTests.value(of: "chat_memory_max_bytes", in: text) ?? 0) > 0, "--max-memory is reported")
        for name in ["chat_event_loop_lag_seconds_count", "chat_delivery_latency_seconds_count"] {
            #expect(MetricsPortTests.value(of: name, in: text) != nil, "\(name) is reported:\n\(text)")
        }
    }

    @Test func theDeliveryAndLoopHistogramsCountWhatHappened() async throws {
        let server = try await ChatServerProcess(.durable, arguments: Self.flags)
        defer { server.stop() }
        let port = try #require(MetricsPortTests.metricsPort(of: server))
        let sender = try await TestClient.connect(to: server, nick: "sender", version: 2)
        _ = try await sender.joinRoom("room")
        try await sender.send((0..<20).map { .say(room: "room", text: "line \($0)") })
        _ = try await sender.collect(20, "echoes") { frame -> Bool? in
            if case .message("room", _, _, "sender", _) = frame { return true }
            return nil
        }
        let text = try await MetricsPortTests.metrics(port: port) { text in
            (MetricsPortTests.value(of: "chat_delivery_latency_seconds_count", in: text) ?? 0) >= 1
                && (MetricsPortTests.value(of: "chat_event_loop_lag_seconds_count", in: text) ?? 0) >= 1
        }
        #expect(text != nil, "deliveries and the loop's timer are measured")
        sender.close()
    }

    @Test func theShippedAlertRulesAreValidAndNameOnlyExportedMetrics() async throws {
        #expect(FileManager.default.isExecutableFile(atPath: Self.promtool), "promtool is installed (Scripts/bootstrap.sh)")
        let rules = Operations.root.appendingPathComponent("Scripts/prometheus/chat-server-alerts.yml").path
        let check = try ChildProcess(URL(fileURLWithPath: Self.promtool), ["check", "rules", rules])
        #expect(await check.waitForExit() == 0, "promtool check rules:\n\(check.output)")
        // Every chat_ or process_ name in an expression is one the server exports.
        let text = try String(contentsOfFile: rules, encoding: .utf8)
        let known = Set(MetricCatalog.metrics.map(\.name))
        for match in text.matches(of: /\b((?:chat|process)_[a-z_]+)/) {
            var name = String(match.output.1)
            for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) && !known.contains(name) { name = String(name.dropLast(suffix.count)) }
            #expect(known.contains(name), "the rules name \(name), which the server does not export")
        }
    }

    @Test func aClusterNodeWithoutItsRedisIsUnhealthy() async throws {
        let server = try await ChatServerProcess(.cluster, arguments: Self.flags)
        defer { server.stop() }
        let port = try #require(MetricsPortTests.metricsPort(of: server))
        #expect(await MetricsPortTests.get(port: port, path: "/healthz")?.status == 200, "healthy with its Redis")
        server.redis?.kill()
        let down = await eventually { await MetricsPortTests.get(port: port, path: "/healthz")?.status == 503 }
        #expect(down, "/healthz answers 503 while the link is down")
        let status = try await Operations.run(["--status", "--metrics", "127.0.0.1:\(port)"])
        #expect(status.status == 2, "chat-server --status exits 2 for an unhealthy server:\n\(status.output)")
    }

    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: prometheus)))
    func aRealPrometheusScrapesEveryDocumentedSeries() async throws {
        let server = try await ChatServerProcess(.durable, arguments: Self.flags)
        defer { server.stop() }
        let metricsPort = try #require(MetricsPortTests.metricsPort(of: server))
        let directory = try TemporaryDirectory(prefix: "chat-prometheus")
        defer { directory.remove() }
        let config = """
            global: { scrape_interval: 1s, evaluation_interval: 1s }
            scrape_configs:
              - job_name: chat
                static_configs: [{ targets: ["127.0.0.1:\(metricsPort)"] }]
            """
        try config.write(toFile: directory.path + "/prometheus.yml", atomically: true, encoding: .utf8)
        let webPort = try #require(Self.freePort(), "a free loopback port for Prometheus")
        let prometheus = try ChildProcess(
            URL(fileURLWithPath: Self.prometheus),
            [
                "--config.file=\(directory.path)/prometheus.yml", "--storage.tsdb.path=\(directory.path)/data",
                "--web.listen-address=127.0.0.1:\(webPort)", "--log.level=warn",
            ])
        // Bounded: stopped (SIGTERM, then SIGKILL) when the test ends, whatever happens.
        defer { prometheus.stop() }
        let up = await eventually(timeout: .seconds(60), every: .milliseconds(500)) {
            Self.query(port: webPort, "/api/v1/query?query=up%7Bjob%3D%22chat%22%7D").contains(#""1"]"#)
        }
        #expect(up, "Prometheus scrapes the server:\n\(prometheus.output.suffix(2000))")
        let documented = try Self.documentedMetrics()
        #expect(documented.count >= 30, "the metric table of docs/OPERATIONS.md is read: \(documented)")
        var names = ""
        let all = await eventually(timeout: .seconds(30), every: .milliseconds(500)) {
            names = Self.query(port: webPort, "/api/v1/label/__name__/values")
            return documented.allSatisfy { name in names.contains("\"\(name)\"") || names.contains("\"\(name)_bucket\"") }
        }
        let missing = documented.filter { !names.contains("\"\($0)\"") && !names.contains("\"\($0)_bucket\"") }
        #expect(all, "Prometheus has every documented series of a durable server; missing: \(missing)")
    }

    @Test func theGuideDocumentsEveryMetricTheServerExportsAndNoOther() throws {
        let documented = Set(try Self.documentedMetrics(clusterOnly: true))
        let exported = Set(MetricCatalog.metrics.map(\.name))
        #expect(exported.subtracting(documented).isEmpty, "exported, not in docs/OPERATIONS.md: \(exported.subtracting(documented).sorted())")
        #expect(documented.subtracting(exported).isEmpty, "in docs/OPERATIONS.md, not exported: \(documented.subtracting(exported).sorted())")
    }

    /// The metric names in the table of docs/OPERATIONS.md, but those only a cluster node has
    /// (their rows say so) unless `clusterOnly`.
    static func documentedMetrics(clusterOnly: Bool = false) throws -> [String] {
        let guide = try String(contentsOf: Operations.root.appendingPathComponent("docs/OPERATIONS.md"), encoding: .utf8)
        var names: [String] = []
        for row in guide.split(separator: "\n") where row.hasPrefix("| `chat_") || row.hasPrefix("| `process_") {
            let cells = row.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 3, clusterOnly || !cells[2].hasPrefix("cluster mode") else { continue }
            for piece in cells[0].split(separator: "`") where piece.hasPrefix("chat_") || piece.hasPrefix("process_") {
                names.append(String(piece.prefix { $0 != "{" }))
            }
        }
        return names
    }

    /// A port nothing listens on now (the OS's choice for a socket bound and closed at once).
    static func freePort() -> Int? {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0
            }
        }
        return bound ? Int(UInt16(bigEndian: address.sin_port)) : nil
    }

    /// The body of Prometheus's answer to `GET path` (HTTP/1.0: no chunks, closed at the end).
    static func query(port: Int, _ path: String) -> String {
        guard let connection = RawHTTPConnection(port: port) else { return "" }
        defer { connection.close() }
        connection.send("GET \(path) HTTP/1.0\r\n\r\n")
        let response = connection.readToEnd()
        guard let split = response.range(of: "\r\n\r\n") else { return "" }
        return String(response[split.upperBound...])
    }
}

