import ChatProtocol
import ChatWireComparison
import Foundation
import Histogram

/// Everything one run measured. Encodes to the JSON line of `chat-loadtest --json`.
public struct LoadTestResult: Sendable, Encodable {
    /// Clients in the run.
    public var clients: Int
    /// Rooms they were spread over.
    public var rooms: Int
    /// Clients that sent.
    public var senders: Int
    /// How senders were paced, e.g. `max (window 64)` or `2000 msg/s`.
    public var pacing: String
    /// Bytes of text per message.
    public var messageSize: Int
    /// Clients in their room when sending started.
    public var joined: Int
    /// Clients that never joined (connect failed, refused, too late).
    public var failedClients: Int
    /// Joined clients the server disconnected during the run.
    public var disconnectedClients: Int
    /// Whether the clients spoke TLS.
    public var tls: Bool
    /// Seconds from the first connect until every client had joined (or the connect timeout):
    /// TCP connect, TLS handshake, hello and join, at most `--connect-rate` new ones a second.
    public var connectSeconds: Double
    /// Clients joined per second of `connectSeconds`: with a high `--connect-rate`, handshakes
    /// per second.
    public var connectsPerSecond: Double { Double(joined) / Swift.max(connectSeconds, 1e-9) }
    /// Whether every connection was seen closed at the end.
    public var allClosed: Bool
    /// The first thing that went wrong for any client, if anything did.
    public var firstProblem: String?
    /// Messages sent.
    public var sent: UInt64
    /// Messages the server answered with an error instead of delivering (counted as lost too).
    public var refused: UInt64
    /// Expected against received deliveries.
    public var deliveries: DeliveryTally
    /// Seconds from the start of sending to its end.
    public var sendSeconds: Double
    /// Seconds from the start of sending to the last delivery received.
    public var deliverySeconds: Double
    /// Messages sent per second of `sendSeconds`.
    public var messagesPerSecond: Double
    /// Deliveries received per second of `deliverySeconds`.
    public var deliveriesPerSecond: Double
    /// Latency from (scheduled) send to receipt, over every delivery.
    public var latency: LatencySummary
    /// With more than one server, the same split by where the sender was: `sameServer` over the
    /// deliveries whose sender used the receiver's server, `otherServer` over the rest (in
    /// cluster mode, the deliveries that crossed nodes). Nil with one server.
    public var latencyByServer: ServerLatencySplit?
    /// Bytes on the wire, ours and SOAP's.
    public var wire: WireUsage
    /// The server's CPU and memory, when its PID was given.
    public var server: ServerUsage?
    /// The load generator's own CPU.
    public var loadGenerator: GeneratorUsage
    /// Every latency, in nanoseconds; not part of the JSON line (see `hgrm`).
    public var histogram: Histogram<UInt64>

    /// Whether the run counts as a success: every client joined and stayed, nothing was refused,
    /// lost, duplicated, reordered or unexpected.
    public var passed: Bool {
        failedClients == 0 && disconnectedClients == 0 && refused == 0 && deliveries.isClean && deliveries.expected > 0
    }

    enum CodingKeys: String, CodingKey {
        case clients, rooms, senders, pacing, messageSize, joined, failedClients, disconnectedClients, allClosed
        case tls, connectSeconds, connectsPerSecond
        case firstProblem, sent, refused, deliveries, sendSeconds, deliverySeconds, messagesPerSecond
        case deliveriesPerSecond, latency, latencyByServer, wire, server, loadGenerator, passed
    }

    /// Encodes every field but the histogram, plus `passed`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(clients, forKey: .clients)
        try container.encode(rooms, forKey: .rooms)
        try container.encode(senders, forKey: .senders)
        try container.encode(pacing, forKey: .pacing)
        try container.encode(messageSize, forKey: .messageSize)
        try container.encode(joined, forKey: .joined)
        try container.encode(failedClients, forKey: .failedClients)
        try container.encode(disconnectedClients, forKey: .disconnectedClients)
        try container.encode(allClosed, forKey: .allClosed)
        try container.encode(tls, forKey: .tls)
        try container.encode(connectSeconds, forKey: .connectSeconds)
        try container.encode(connectsPerSecond, forKey: .connectsPerSecond)
        try container.encodeIfPresent(firstProblem, forKey: .firstProblem)
        try container.encode(sent, forKey: .sent)
        try container.encode(refused, forKey: .refused)
        try container.encode(deliveries, forKey: .deliveries)
        try container.encode(sendSeconds, forKey: .sendSeconds)
        try container.encode(deliverySeconds, forKey: .deliverySeconds)
        try container.encode(messagesPerSecond, forKey: .messagesPerSecond)
        try container.encode(deliveriesPerSecond, forKey: .deliveriesPerSecond)
        try container.encode(latency, forKey: .latency)
        try container.encodeIfPresent(latencyByServer, forKey: .latencyByServer)
        try container.encode(wire, forKey: .wire)
        try container.encodeIfPresent(server, forKey: .server)
        try container.encode(loadGenerator, forKey: .loadGenerator)
        try container.encode(passed, forKey: .passed)
    }
}

/// Latency of the deliveries whose sender used the receiver's server, and of those whose sender
/// used another.
public struct ServerLatencySplit: Sendable, Encodable {
    /// Sender and receiver on one server.
    public var sameServer: LatencySummary
    /// Sender and receiver on different servers: in cluster mode, a delivery across nodes.
    public var otherServer: LatencySummary
}

/// Latency percentiles in microseconds.
public struct LatencySummary: Sendable, Encodable {
    /// How many deliveries were measured.
    public var count: UInt64
    /// The median.
    public var p50: Double
    /// The 90th percentile.
    public var p90: Double
    /// The 99th percentile.
    public var p99: Double
    /// The 99.9th percentile.
    public var p999: Double
    /// The largest.
    public var max: Double
    /// The mean.
    public var mean: Double

    /// Summarises a histogram of nanoseconds.
    init(_ histogram: Histogram<UInt64>) {
        func micros(_ nanos: UInt64) -> Double { Double(nanos) / 1_000 }
        let empty = histogram.totalCount == 0
        count = histogram.totalCount
        p50 = empty ? 0 : micros(histogram.valueAtPercentile(50))
        p90 = empty ? 0 : micros(histogram.valueAtPercentile(90))
        p99 = empty ? 0 : micros(histogram.valueAtPercentile(99))
        p999 = empty ? 0 : micros(histogram.valueAtPercentile(99.9))
        max = empty ? 0 : micros(histogram.max)
        mean = empty ? 0 : histogram.mean / 1_000
    }
}

/// Bytes on the wire per delivered message: our frames against SOAP 1.1 doing the same work.
///
/// Ours is measured: every `say` written plus every load-test `message` received, divided by
/// deliveries (TCP/IP headers not included, for both). SOAP 1.1 is computed with
/// `WireComparison` for a message of this run's size: one `SendMessage` request per message sent
/// plus one `Poll` response carrying it per delivery, as an ASMX chat service would need.
public struct WireUsage: Sendable, Encodable {
    /// Bytes per delivered message, ours.
    public var bytesPerDelivery: Double
    /// The average `say` frame, in bytes.
    public var sayFrameBytes: Double
    /// The average `message` frame, in bytes.
    public var messageFrameBytes: Double
    /// Bytes per delivered message for SOAP 1.1.
    public var soap11BytesPerDelivery: Double

    init(sent: UInt64, delivered: UInt64, sayBytes: Int, messageBytes: Int, sampleRoom: String, sampleSender: String, sampleText: String) {
        let deliveries = Double(Swift.max(delivered, 1))
        bytesPerDelivery = Double(sayBytes + messageBytes) / deliveries
        sayFrameBytes = Double(sayBytes) / Double(Swift.max(sent, 1))
        messageFrameBytes = Double(messageBytes) / deliveries
        let request = WireComparison.soap11Request(
            action: "SendMessage", parameters: [.leaf("room", sampleRoom), .leaf("text", sampleText)])
        let response = WireComparison.soap11Response(action: "Poll", result: [
            .node("ChatMessage", [
                .leaf("Room", sampleRoom), .leaf("Seq", "\(WireComparison.sampleTime / 1_000_000)"),
                .leaf("Time", "\(WireComparison.sampleTime)"), .leaf("Sender", sampleSender), .leaf("Text", sampleText),
            ])
        ])
        soap11BytesPerDelivery = (Double(request.utf8.count) * Double(sent) + Double(response.utf8.count) * Double(delivered)) / deliveries
    }
}

/// The server process's CPU and memory, from /proc.
public struct ServerUsage: Sendable, Encodable {
    /// CPU seconds (user + system) from the start of sending to the end of draining.
    public var cpuSeconds: Double
    /// The same as a percentage of one core.
    public var cpuPercent: Double
    /// Resident memory at the end.
    public var residentBytes: Int
    /// The most resident memory the server ever had.
    public var peakResidentBytes: Int
    /// Growth of resident memory from before connecting to all joined, per joined client:
    /// what an idle connection costs the server (nil when not measured).
    public var bytesPerConnection: Double?
}

/// The load generator's own CPU over the same interval as `ServerUsage.cpuSeconds`.
public struct GeneratorUsage: Sendable, Encodable {
    /// CPU seconds (user + system).
    public var cpuSeconds: Double
    /// As a percentage of one core.
    public var cpuPercent: Double
}

extension LoadTestConfiguration.Pacing: CustomStringConvertible {
    /// `max (window N)` or `N msg/s`.
    public var description: String {
        switch self {
        case .maximum(let window): "max (window \(window))"
        case .fixedRate(let rate): "\(rate) msg/s"
        }
    }
}

// MARK: Reports

extension LoadTestResult {
    /// The result as one line of JSON, keys sorted.
    public func jsonLine() -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(self) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }

    /// The standard HdrHistogram percentile distribution (`.hgrm`), values in milliseconds, as
    /// HdrHistogram's plotter and other tools read it.
    public func hgrm() -> String {
        var output = ""
        histogram.outputPercentileDistribution(to: &output, outputValueUnitScalingRatio: 1_000_000)
        return output
    }

    /// The human-readable report: outcome, throughput, latency with a text histogram, wire bytes,
    /// CPU and memory.
    public func textReport() -> String {
        var lines: [String] = []
        func add(_ line: String = "") { lines.append(line) }
        add("chat-loadtest: \(clients) clients, \(rooms) room\(rooms == 1 ? "" : "s"), \(senders) senders, \(pacing), \(messageSize)-byte messages")
        add()
        add("Accounting     \(passed ? "PASS" : "FAIL")")
        add("  clients      \(joined) joined, \(failedClients) failed, \(disconnectedClients) disconnected")
        add("  messages     \(sent) sent, \(refused) refused")
        add("  deliveries   \(deliveries.expected) expected, \(deliveries.delivered) received")
        add("  lost \(deliveries.lost), duplicated \(deliveries.duplicated), reordered \(deliveries.reordered), unexpected \(deliveries.unexpected)")
        if let firstProblem { add("  first problem: \(firstProblem)") }
        add()
        add("Connecting\(tls ? " (TLS)" : "")")
        add("  joined       \(joined) in \(Self.fixed(connectSeconds, 2)) s: \(Self.count(connectsPerSecond)) connects/s (connect\(tls ? ", TLS handshake" : ""), hello, join)")
        add()
        add("Throughput")
        add("  sent         \(Self.count(messagesPerSecond)) msg/s over \(Self.fixed(sendSeconds, 2)) s")
        add("  delivered    \(Self.count(deliveriesPerSecond)) deliveries/s over \(Self.fixed(deliverySeconds, 2)) s")
        add()
        add("Latency (send to receipt)")
        add("  p50 \(Self.duration(latency.p50))  p90 \(Self.duration(latency.p90))  p99 \(Self.duration(latency.p99))  p99.9 \(Self.duration(latency.p999))  max \(Self.duration(latency.max))")
        if let split = latencyByServer {
            add("  sender on the receiver's server  p50 \(Self.duration(split.sameServer.p50))  p99 \(Self.duration(split.sameServer.p99))  (\(split.sameServer.count) deliveries)")
            add("  sender on another server         p50 \(Self.duration(split.otherServer.p50))  p99 \(Self.duration(split.otherServer.p99))  (\(split.otherServer.count) deliveries)")
        }
        lines.append(contentsOf: textHistogram())
        add()
        add("Wire (per delivered message, TCP/IP headers not counted)")
        add("  ours         \(Self.fixed(wire.bytesPerDelivery, 1)) B  (say \(Self.fixed(wire.sayFrameBytes, 1)) B, message \(Self.fixed(wire.messageFrameBytes, 1)) B)")
        add("  SOAP 1.1     \(Self.fixed(wire.soap11BytesPerDelivery, 1)) B  (\(Self.fixed(wire.soap11BytesPerDelivery / Swift.max(wire.bytesPerDelivery, 1), 1))x)")
        add()
        add("CPU while sending and draining (100% = one core)")
        if let server {
            add("  server       \(Self.fixed(server.cpuSeconds, 2)) s, \(Self.fixed(server.cpuPercent, 0))%; RSS \(Self.megabytes(server.residentBytes)), peak \(Self.megabytes(server.peakResidentBytes))")
            if let perConnection = server.bytesPerConnection {
                add("  server memory per idle connection: \(Self.fixed(perConnection / 1024, 2)) KiB")
            }
        } else {
            add("  server       not measured (pass --server-pid)")
        }
        add("  loadtest     \(Self.fixed(loadGenerator.cpuSeconds, 2)) s, \(Self.fixed(loadGenerator.cpuPercent, 0))%")
        return lines.joined(separator: "\n")
    }

    /// A Markdown table: header, separator and this run's row, `name` in the first column.
    /// Scripts/loadtest.sh prints the header once and the row of every case.
    public func tableRow(name: String) -> String {
        let columns: [(String, String)] = [
            ("case", name),
            ("clients", "\(joined)/\(clients)"),
            ("rooms", "\(rooms)"),
            ("senders", "\(senders)"),
            ("pacing", pacing),
            ("connects/s", Self.count(connectsPerSecond)),
            ("msg/s", Self.count(messagesPerSecond)),
            ("deliveries/s", Self.count(deliveriesPerSecond)),
            ("p50", Self.duration(latency.p50)),
            ("p99", Self.duration(latency.p99)),
            ("p99.9", Self.duration(latency.p999)),
            ("max", Self.duration(latency.max)),
            ("lost/dup/reord", "\(deliveries.lost)/\(deliveries.duplicated)/\(deliveries.reordered)"),
            ("server CPU", server.map { "\(Self.fixed($0.cpuPercent, 0))%" } ?? "-"),
            ("loadtest CPU", "\(Self.fixed(loadGenerator.cpuPercent, 0))%"),
            ("server RSS", server.map { Self.megabytes($0.peakResidentBytes) } ?? "-"),
            ("KiB/conn", server?.bytesPerConnection.map { Self.fixed($0 / 1024, 2) } ?? "-"),
            ("B/msg (SOAP 1.1)", "\(Self.fixed(wire.bytesPerDelivery, 0)) (\(Self.fixed(wire.soap11BytesPerDelivery, 0)))"),
            ("result", passed ? "pass" : "FAIL"),
        ]
        func row(_ cells: [String]) -> String { "| " + cells.joined(separator: " | ") + " |" }
        return [
            row(columns.map(\.0)),
            row(columns.map { _ in "---" }),
            row(columns.map(\.1)),
        ].joined(separator: "\n")
    }

    /// Latency buckets from 10 µs up, one line each with a bar, from the first to the last used.
    func textHistogram() -> [String] {
        guard histogram.totalCount > 0 else { return ["  (no deliveries)"] }
        let bounds: [UInt64] = [
            10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000,
            25_000_000, 50_000_000, 100_000_000, 250_000_000, 500_000_000, 1_000_000_000, 2_500_000_000,
            5_000_000_000, histogram.highestTrackableValue,
        ]
        var counts: [UInt64] = []
        var lower: UInt64 = 0
        for upper in bounds {
            counts.append(lower > upper ? 0 : histogram.count(within: lower...upper))
            lower = upper + 1
        }
        guard let first = counts.firstIndex(where: { $0 > 0 }), let last = counts.lastIndex(where: { $0 > 0 }) else { return [] }
        let largest = counts.max() ?? 1
        return (first...last).map { index in
            let label = index == bounds.count - 1 ? "> \(Self.duration(Double(bounds[index - 1]) / 1_000))" : "≤ \(Self.duration(Double(bounds[index]) / 1_000))"
            let share = 100 * Double(counts[index]) / Double(histogram.totalCount)
            let bar = String(repeating: "#", count: Int((40 * Double(counts[index]) / Double(largest)).rounded(.up)))
            return "  \(label.padding(toLength: 11, withPad: " ", startingAt: 0)) \(Self.fixed(share, 2).leftPadded(6))%  \(bar)"
        }
    }

    static func fixed(_ value: Double, _ digits: Int) -> String { String(format: "%.\(digits)f", value) }

    /// A count with a k or M suffix: 4.21 M.
    static func count(_ value: Double) -> String {
        switch value {
        case 1e6...: "\(fixed(value / 1e6, 2)) M"
        case 1e4...: "\(fixed(value / 1e3, 1)) k"
        default: fixed(value, 0)
        }
    }

    /// Microseconds as µs, ms or s.
    static func duration(_ micros: Double) -> String {
        switch micros {
        case 1e6...: "\(fixed(micros / 1e6, 2)) s"
        case 1e3...: "\(fixed(micros / 1e3, 2)) ms"
        default: "\(fixed(micros, 0)) µs"
        }
    }

    static func megabytes(_ bytes: Int) -> String { "\(fixed(Double(bytes) / 1_048_576, 1)) MiB" }
}

extension String {
    /// The string padded with spaces on the left to `width` characters.
    func leftPadded(_ width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}
