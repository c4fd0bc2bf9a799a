import ChatProtocol
import Dispatch
import Foundation
import Glibc
import Testing
import TestSupport

/// The metrics port (`--metrics`) of the real `chat-server`: what `/metrics` and `/status`
/// report, and that an attack on the port — a slowloris holding every connection it may open,
/// and a flood of scrapes — leaves the chat alone: a control client gets every echo in order,
/// the server stays within its memory budget, and the port's own connection limit holds. In
/// every mode a user can run the server in.
@Suite("The metrics port of the real server", .serialized)
struct MetricsPortTests {
    static let budget = 128 << 20
    /// The control chat sends faster than a client's default rate: the attack here is on the
    /// metrics port, not the chat's limits.
    static let flags = [
        "--max-memory", "152M", "--max-clients", "1000", "--log-level", "warning", "--no-rate-limits", "--metrics", "127.0.0.1:0",
    ]
    /// `MetricsEndpoint.Limits().maxConnections`, the endpoint's default.
    static let connectionLimit = 16

    @Test(arguments: ServerMode.allCases)
    func aSlowlorisAndAScrapeFloodOnTheMetricsPortLeaveTheChatAlone(mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode, arguments: Self.flags)
        defer { server.stop() }
        let port = try #require(Self.metricsPort(of: server), "the server prints its metrics port:\n\(server.child.output)")
        let reader = try await TestClient.connect(to: server, nick: "reader")
        try await reader.join("control")
        let sender = try await TestClient.connect(to: server, nick: "sender")
        try await sender.join("control")

        // More slowloris connections than the port takes: each sends half a request head and
        // stops. Those past the limit are refused at once; the rest hold their slots until the
        // head timeout.
        let slowloris = (0..<(Self.connectionLimit + 8)).compactMap { _ in RawHTTPConnection(port: port) }
        for connection in slowloris { connection.send("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ") }
        // Scrapers hammer the port meanwhile, bounded in count and time.
        let flood = Task.detached {
            await withTaskGroup(of: [Int].self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        var statuses: [Int] = []
                        let deadline = ContinuousClock.now + .seconds(20)
                        while statuses.count < 150, ContinuousClock.now < deadline {
                            statuses.append(await Self.get(port: port, path: "/metrics")?.status ?? 0)
                        }
                        return statuses
                    }
                }
                return await group.reduce(into: []) { $0 += $1 }
            }
        }
        // The control chat: every echo and every delivery, in order, while the port is attacked.
        let texts = (0..<300).map { "control \($0)" }
        for chunk in stride(from: 0, to: texts.count, by: 50) {
            try await sender.send(texts[chunk..<(chunk + 50)].map { Frame.say(room: "control", text: $0) })
        }
        for client in [reader, sender] {
            let seen = try await client.collect(texts.count, "control messages") { frame -> String? in
                if case .message("control", _, _, "sender", let text) = frame { return text }
                return nil
            }
            #expect(seen == texts, "\(client === reader ? "the reader" : "the sender") gets every control message in order")
        }
        let statuses = await flood.value
        // A refused scrape reads its 503, or a reset if its request arrived before the close.
        #expect(Set(statuses).isSubset(of: [0, 200, 503]), "a scrape is answered 200, or 503 past the limit: \(Set(statuses))")

        // Once the slowloris heads time out, the port serves again, with a snapshot taken after
        // the chat (snapshots are at most a second old).
        var metrics: String?
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            guard let response = await Self.get(port: port, path: "/metrics"), response.status == 200 else { continue }
            metrics = response.body
            if (Self.value(of: "chat_deliveries_total", in: response.body) ?? 0) >= 600 { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        let text = try #require(metrics, "the metrics port serves again once the slowloris connections timed out")
        for connection in slowloris { connection.close() }
        let timedOut = Self.value(of: #"chat_metrics_http_rejections_total{reason="timeout"}"#, in: text) ?? 0
        let overLimit = Self.value(of: #"chat_metrics_http_rejections_total{reason="limit"}"#, in: text) ?? 0
        #expect(timedOut >= 1, "slowloris heads are closed at the head timeout:\n\(text)")
        #expect(overLimit >= 8, "connections past the limit are refused:\n\(text)")
        #expect((Self.value(of: "chat_deliveries_total", in: text) ?? 0) >= 600, "both members' deliveries are counted:\n\(text)")
        #expect(
            (Self.value(of: #"chat_frames_received_total{type="say"}"#, in: text) ?? 0) >= 300, "the says are counted:\n\(text)")
        // The port's limit bounds what it holds: the server's descriptors are the listeners, the
        // two chat clients, the port's own connections and the store's or Redis's few files.
        let descriptors = try #require(Self.value(of: "process_open_fds", in: text), "process_open_fds is reported")
        #expect(descriptors < 60, "the server holds \(descriptors) descriptors after the attack")
        let peak = server.child.peakResidentBytes ?? Int.max
        #expect(peak < Self.budget, "the server's peak RSS was \(peak >> 20) MiB, over its budget of \(Self.budget >> 20) MiB")

        switch mode {
        case .durable, .tls:
            #expect((Self.value(of: "chat_storage_commit_seconds_count", in: text) ?? 0) >= 1, "commits are timed:\n\(text)")
            #expect(text.contains("chat_storage_wal_bytes "), "the log's size is reported")
        case .cluster:
            #expect(Self.value(of: "chat_cluster_link_up", in: text) == 1, "the link is up:\n\(text)")
            #expect(
                (Self.value(of: "chat_cluster_redis_round_trip_seconds_count", in: text) ?? 0) >= 300,
                "the appends' round trips are timed:\n\(text)")
        case .memory:
            #expect(!text.contains("chat_storage_failing"), "a memory server reports no storage state")
        }
        if mode == .tls {
            #expect((Self.value(of: "chat_tls_handshakes_started_total", in: text) ?? 0) >= 2, "TLS handshakes are counted:\n\(text)")
        }
    }

    @Test(arguments: ServerMode.allCases)
    func theStatusPageNamesTheBusiestRoomsAndTheMode(mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode, arguments: Self.flags)
        defer { server.stop() }
        let port = try #require(Self.metricsPort(of: server), "the server prints its metrics port")
        var clients: [TestClient] = []
        for index in 0..<3 {
            let client = try await TestClient.connect(to: server, nick: "member\(index)")
            try await client.join("crowded")
            if index == 0 { try await client.join("quiet") }
            clients.append(client)
        }
        let page = try #require(await Self.get(port: port, path: "/status"), "the status page answers")
        #expect(page.status == 200)
        #expect(page.body.hasPrefix("chat-server: \(mode == .tls ? "durable" : mode.rawValue) mode, up "), "the mode:\n\(page.body)")
        #expect(page.body.contains("3 chatting"), "the welcomed clients:\n\(page.body)")
        #expect(page.body.contains("most members crowded 3, quiet 1"), "the rooms by members:\n\(page.body)")
        #expect(page.body.contains("descriptors"), "the process's statistics:\n\(page.body)")
        // `chat-server --status` prints the same page.
        let executable = try ChildProcess.builtExecutable(named: "chat-server")
        let status = try ChildProcess(executable, ["--status", "--metrics", "127.0.0.1:\(port)"])
        // After the exit, when its output has all been read.
        #expect(await status.waitForExit() == 0, "chat-server --status exits 0:\n\(status.output)")
        #expect(status.output.contains("most members crowded 3, quiet 1"), "chat-server --status prints the page:\n\(status.output)")
        for client in clients { client.close() }
    }

    @Test func theMetricsPortAnswersOnlyGetsOfKnownPaths() async throws {
        let server = try await ChatServerProcess(.memory, arguments: Self.flags)
        defer { server.stop() }
        let port = try #require(Self.metricsPort(of: server), "the server prints its metrics port")
        #expect(await Self.get(port: port, path: "/nowhere")?.status == 404)
        #expect(await Self.request(port: port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")?.status == 405)
        #expect(await Self.request(port: port, "not http at all\r\n\r\n")?.status == 400)
        let huge = "GET /metrics HTTP/1.1\r\nX-Big: " + String(repeating: "a", count: 10_000) + "\r\n\r\n"
        #expect(await Self.request(port: port, huge)?.status == 431, "a head past 8 KiB is refused")
        let metrics = try #require(await Self.get(port: port, path: "/metrics?x=1"))
        #expect(metrics.status == 200)
        for name in [
            "chat_connections{state=\"chatting\"}", "chat_rooms", "chat_memory_budget_bytes{part=\"output\"}",
            "chat_output_queued_bytes", "process_resident_memory_bytes", "process_cpu_seconds_total",
        ] {
            #expect(metrics.body.contains("\(name) "), "/metrics reports \(name):\n\(metrics.body)")
        }
        // No nick or room name is ever a label: every label value is one of the bounded sets
        // (the build's own labels, version and protocol, are one series).
        for line in metrics.body.split(separator: "\n") where !line.hasPrefix("#") && line.contains("{") && !line.hasPrefix("chat_build_info{") {
            #expect(
                line.contains("type=") || line.contains("code=") || line.contains("reason=") || line.contains("state=")
                    || line.contains("part=") || line.contains("le=") || line.contains("job="), "an unexpected label: \(line)")
        }
    }

    @Test func refusalsAndDisconnectsAreCountedByCodeAndReason() async throws {
        let server = try await ChatServerProcess(.memory, arguments: Self.flags)
        defer { server.stop() }
        let port = try #require(Self.metricsPort(of: server), "the server prints its metrics port")
        let holder = try await TestClient.connect(to: server, nick: "holder")
        #expect(await refusal { try await TestClient.connect(to: server, nick: "holder") } == .nickTaken)
        let leaver = try await TestClient.connect(to: server, nick: "leaver")
        try await leaver.send(.goodbye(reason: "bye"))
        // Counters are published with a snapshot, at most a second old: wait for this one's.
        var text = ""
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            text = await Self.get(port: port, path: "/metrics")?.body ?? ""
            if (Self.value(of: #"chat_disconnects_total{reason="client"}"#, in: text) ?? 0) >= 1 { break }
            try await Task.sleep(for: .milliseconds(200))
        }
        #expect(Self.value(of: #"chat_refusals_total{code="nickTaken"}"#, in: text) == 1, "the refused hello:\n\(text)")
        #expect((Self.value(of: #"chat_disconnects_total{reason="client"}"#, in: text) ?? 0) >= 1, "the goodbye:\n\(text)")
        #expect(Self.value(of: #"chat_connections{state="chatting"}"#, in: text) == 1, "the holder chats on:\n\(text)")
        #expect(Self.value(of: #"chat_frames_received_total{type="hello"}"#, in: text) == 3, "three hellos:\n\(text)")
        holder.close()
    }

    @Test func aRedisOutageShowsAsTheLinkDownThenAReconnect() async throws {
        let server = try await ChatServerProcess(.cluster, arguments: Self.flags)
        defer { server.stop() }
        let port = try #require(Self.metricsPort(of: server), "the server prints its metrics port")
        let redis = try #require(server.redis, "a cluster node has its Redis")
        #expect(try await Self.metrics(port: port) { Self.value(of: "chat_cluster_link_up", in: $0) == 1 } != nil, "up at first")
        redis.kill()
        let down = try await Self.metrics(port: port) { Self.value(of: "chat_cluster_link_up", in: $0) == 0 }
        #expect(down != nil, "the link shows down while Redis is gone")
        let status = await Self.get(port: port, path: "/status")?.body ?? ""
        #expect(status.contains("link to Redis DOWN"), "the status page says so:\n\(status)")
        let restarted = try await RedisServerProcess(port: redis.port)
        defer { restarted.stop() }
        let back = try await Self.metrics(port: port) {
            Self.value(of: "chat_cluster_link_up", in: $0) == 1 && Self.value(of: "chat_cluster_reconnects_total", in: $0) == 1
        }
        #expect(back != nil, "the link is up again and the reconnect counted")
    }

    @Test func aFailedTLSHandshakeIsCounted() async throws {
        let server = try await ChatServerProcess(.tls, arguments: Self.flags)
        defer { server.stop() }
        let port = try #require(Self.metricsPort(of: server), "the server prints its metrics port")
        // Plain text where a ClientHello belongs: the TLS session fails at once.
        let plain = try #require(RawHTTPConnection(port: server.port), "connects to the TLS port")
        plain.send("GET / HTTP/1.1\r\n\r\n")
        _ = plain.readToEnd()
        plain.close()
        let counted = try await Self.metrics(port: port) {
            (Self.value(of: #"chat_tls_handshake_failures_total{reason="error"}"#, in: $0) ?? 0) >= 1
        }
        #expect(counted != nil, "the failed handshake is counted")
        #expect((Self.value(of: "chat_tls_handshakes_started_total", in: counted ?? "") ?? 0) >= 1)
    }

    @Test func withoutMetricsTheServerOpensNoSecondPort() async throws {
        let server = try await ChatServerProcess(.memory, arguments: ["--log-level", "warning"])
        defer { server.stop() }
        #expect(Self.metricsPort(of: server) == nil, "no metrics line without --metrics:\n\(server.child.output)")
    }

    // MARK: Helpers

    /// The port of the `metrics on HOST:PORT` line.
    static func metricsPort(of server: ChatServerProcess) -> Int? {
        let line = server.child.lines.first { $0.hasPrefix("metrics on ") }
        return line.flatMap { $0.split(separator: ":").last }.flatMap { Int($0) }
    }

    /// The first `/metrics` text within 30 s that `condition` holds of (snapshots are at most a
    /// second old), or nil.
    static func metrics(port: Int, until condition: (String) -> Bool) async throws -> String? {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if let text = await get(port: port, path: "/metrics")?.body, condition(text) { return text }
            try await Task.sleep(for: .milliseconds(200))
        }
        return nil
    }

    /// The value of the sample `name` (with its labels, as printed) in exposition `text`.
    static func value(of name: String, in text: String) -> Double? {
        for line in text.split(separator: "\n") where line.hasPrefix(name + " ") {
            return Double(line.dropFirst(name.count + 1))
        }
        return nil
    }

    static func get(port: Int, path: String) async -> (status: Int, body: String)? {
        await request(port: port, "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    }

    /// Sends `head` and reads the response to its end, on a thread of its own (blocking calls,
    /// 5 s timeouts), so the test's tasks keep their threads.
    static func request(port: Int, _ head: String) async -> (status: Int, body: String)? {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                guard let connection = RawHTTPConnection(port: port) else { return continuation.resume(returning: nil) }
                defer { connection.close() }
                connection.send(head)
                let response = connection.readToEnd()
                guard response.hasPrefix("HTTP/1.1 "), let status = Int(response.dropFirst(9).prefix(3)),
                    let split = response.range(of: "\r\n\r\n")
                else { return continuation.resume(returning: nil) }
                continuation.resume(returning: (status, String(response[split.upperBound...])))
            }
        }
    }
}

/// A plain blocking TCP connection to 127.0.0.1, with 5 s timeouts: the slowloris's and the
/// scraper's. The test owns its descriptor and closes it once.
final class RawHTTPConnection: @unchecked Sendable {
    private var descriptor: Int32

    init?(port: Int) {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            Glibc.close(descriptor)
            return nil
        }
    }

    func send(_ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// Everything until the peer closes, a reset, or the 5 s timeout.
    func readToEnd() -> String {
        var response: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while response.count < 4 << 20 {
            let count = chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            response += chunk[0..<count]
        }
        return String(decoding: response, as: UTF8.self)
    }

    func close() {
        guard descriptor >= 0 else { return }
        Glibc.close(descriptor)
        descriptor = -1
    }

    deinit { close() }
}
