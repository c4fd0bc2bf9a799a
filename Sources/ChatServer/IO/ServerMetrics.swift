import ChatCore
import ChatProtocol
import CoreMetrics
import Dispatch
import RoomLog
import SocketCore

/// What the server counts for its operators, kept as plain integers on the server's queue and
/// handed to swift-metrics once per snapshot (`ChatServer.snapshot`), not once per event.
///
/// Why plain integers: the hot path (a frame read, a delivery queued) then pays an add to a
/// field of an object it already has, where a swift-metrics counter per event would be an atomic
/// read-modify-write (Prometheus's backend) or a lock on every frame. The snapshot — at most one
/// a second, however often the metrics port is scraped — adds what changed since the last one
/// to the swift-metrics counters and sets the gauges from the server's own state. Histograms
/// (commit latency and size, Redis round trips) record per commit or per round trip, which is
/// already a turn's or a Redis reply's worth of work.
///
/// Without a bootstrapped `MetricsSystem` (a test, an embedding program that does not export
/// metrics) every handle is swift-metrics' no-op one: nothing here requires the bootstrap.
///
/// Labels are bounded sets: frame types and error codes by their protocol names (an unknown one
/// is `unknown`), disconnect reasons by `disconnectLabel(_:)`. Nicks and room names never are.
///
/// Threading: confined to the server's queue (`@unchecked Sendable` only so the cluster node and
/// the server, both confined there, can hold it).
final class ServerMetrics: @unchecked Sendable {
    /// Frames decoded from clients, by type byte.
    var framesReceived = [Int](repeating: 0, count: 256)
    /// Bytes read from clients (after TLS).
    var bytesReceived = 0
    /// Room events queued for members, one per recipient.
    var deliveries = 0
    /// Frames queued for clients (room events, replies, replays), one per recipient.
    var framesQueued = 0
    /// Bytes of the frames queued for clients, one copy per recipient.
    var bytesQueued = 0
    /// `error` frames sent, by code.
    private var errorsSent: [UInt16: Int] = [:]
    /// Sessions ended, by `disconnectLabel`.
    private var disconnects: [String: Int] = [:]
    /// TLS sessions started, and those that failed before their handshake completed, by reason.
    var tlsHandshakesStarted = 0
    private var tlsFailures: [String: Int] = ["timeout": 0, "error": 0]
    /// Commits that failed.
    var storageFailures = 0
    /// Times the cluster link came up again after being up before.
    var clusterReconnects = 0
    /// Jobs handed to the password-hashing pool, by `hashingJob`'s label.
    private var hashingJobs: [String: Int] = ["hash": 0, "verify": 0, "refused": 0]
    /// When the commit in flight was handed to the store (uptime nanoseconds), or nil.
    private var commitStartedAt: UInt64?
    /// Per client flushed, how long its oldest queued frame waited for its socket (`ChatServer`'s
    /// `flushDirty` and `drained`): a sample per flush, not per frame, so the hot path pays a
    /// subtraction and a few comparisons per client and turn.
    var deliveryLatency = LatencyHistogram(name: "chat_delivery_latency_seconds", bounds: LatencyHistogram.latencyBounds)
    /// How late the loop monitor's timer ran (`LoopMonitor`).
    var loopLag = LatencyHistogram(name: "chat_event_loop_lag_seconds", bounds: LatencyHistogram.latencyBounds)

    private let commitLatency = Timer(label: "chat_storage_commit_seconds")
    private let commitSize = Recorder(label: "chat_storage_commit_events", aggregate: true)
    private let redisRoundTrip = Timer(label: "chat_cluster_redis_round_trip_seconds")

    /// What was last handed to swift-metrics, so the next snapshot adds only the difference.
    private var published = Published()
    private var counters: [String: Counter] = [:]
    private var gauges: [String: Gauge] = [:]

    /// Room `seq`s at the last snapshot, to tell each room's events per second (status page).
    var lastSeqs: [String: UInt64] = [:]
    /// When the last snapshot was taken (uptime nanoseconds), for those rates.
    var lastSnapshotAt: UInt64 = 0

    /// Every label a labelled counter can take, so that each series exists at 0 from the first
    /// scrape: a series that appears only at its first event makes `increase()` and `rate()`
    /// miss that event (issue 38: `increase(chat_refusals_total[15m])` read 0 rate-limited
    /// refusals of 100). Bounded sets: the protocol's frame types and error codes, the
    /// disconnect reasons, the storage parts.
    init() {
        for type in FrameType.allKnown { _ = counter("chat_frames_received_total", ("type", type.name ?? "unknown")) }
        for code in ErrorCode.allKnown { _ = counter("chat_refusals_total", ("code", code.name ?? "unknown")) }
        for reason in Self.disconnectLabels { _ = counter("chat_disconnects_total", ("reason", reason)) }
        for part in StorageHealth.Part.allCases { _ = counter("chat_storage_write_failures_total", ("part", part.rawValue)) }
    }

    /// Every `disconnectLabel(_:)`: an error code's name, or how a session ended without one.
    static let disconnectLabels = ErrorCode.allKnown.compactMap(\.name) + ["client", "connectionLost", "tls", "shutdown"]

    private struct Published {
        var framesReceived = [Int](repeating: 0, count: 256)
        var bytesReceived = 0
        var deliveries = 0
        var framesQueued = 0
        var bytesQueued = 0
        var errorsSent: [UInt16: Int] = [:]
        var disconnects: [String: Int] = [:]
        var tlsHandshakesStarted = 0
        var tlsFailures: [String: Int] = [:]
        var storageFailures = 0
        var clusterReconnects = 0
        var connectionsAccepted = 0
        var storageWriteFailures: [StorageHealth.Part: Int] = [:]
        var hashingJobs: [String: Int] = [:]
    }

    // MARK: Recording (the server's queue)

    /// Counts a frame queued for one client.
    @inline(__always)
    func queued(_ chunk: ByteChunk) {
        framesQueued += 1
        bytesQueued += chunk.count
    }

    /// Counts a history replay queued for one client.
    func queued(_ shared: SharedFrames) {
        for chunk in shared.chunks { queued(chunk) }
    }

    /// Counts a room event of `bytes` bytes queued for `recipients` members: one multiplication per event, not
    /// an add per member.
    @inline(__always)
    func delivered(bytes: Int, to recipients: Int) {
        deliveries += recipients
        framesQueued += recipients
        bytesQueued += bytes * recipients
    }

    /// Counts a job for the password-hashing pool: `hash` or `verify` (a login's check, for an
    /// existing account or not: the same job) when queued, `refused` when the queue had no place.
    func hashingJob(_ label: String) {
        hashingJobs[label, default: 0] += 1
    }

    /// Counts an `error` frame sent with `code`.
    func errorSent(_ code: ErrorCode) {
        errorsSent[code.rawValue, default: 0] += 1
    }

    /// Counts a session's end: `label` from `disconnectLabel(_:)`.
    func disconnected(_ label: String) {
        disconnects[label, default: 0] += 1
    }

    /// Counts a session's end, and a TLS handshake's failure when it ended one: a connection
    /// still `tlsHandshaking` (its deadline passed), or one that was never `welcomed` and ended
    /// with a TLS error (a failed session no longer says whether its handshake had completed,
    /// and before the chat's hello it nearly always had not).
    func disconnected(_ disconnection: Disconnection, tlsHandshaking: Bool, welcomed: Bool) {
        let label = Self.disconnectLabel(disconnection)
        disconnected(label)
        if tlsHandshaking || (!welcomed && label == "tls") {
            tlsFailures[disconnection.code == .handshakeTimeout ? "timeout" : "error", default: 0] += 1
        }
    }

    /// A commit of `events` stored events was handed to the store.
    func commitStarted(events: Int) {
        commitStartedAt = DispatchTime.now().uptimeNanoseconds
        commitSize.record(events)
    }

    /// The commit in flight completed; records how long it took from hand-over to completion
    /// (what the messages in it waited to be acknowledged).
    func commitFinished(failed: Bool) {
        if failed { storageFailures += 1 }
        guard let started = commitStartedAt else { return }
        commitStartedAt = nil
        commitLatency.recordNanoseconds(Int64(DispatchTime.now().uptimeNanoseconds &- started))
    }

    /// A Redis request sent at `sent` (uptime nanoseconds) was answered.
    func redisAnswered(sentAt sent: UInt64) {
        redisRoundTrip.recordNanoseconds(Int64(DispatchTime.now().uptimeNanoseconds &- sent))
    }

    /// The label a disconnection is counted under: its error code's name, or for a session that
    /// ended without one, how it ended (`client`: a goodbye or a close; `connectionLost`; `tls`).
    static func disconnectLabel(_ disconnection: Disconnection) -> String {
        if let code = disconnection.code { return code.name ?? "unknown" }
        if disconnection.reason.hasPrefix("TLS") { return "tls" }
        if disconnection.reason.hasPrefix("connection lost") { return "connectionLost" }
        return "client"
    }

    // MARK: Publishing (the server's queue, at most once a second)

    /// Hands what changed since the last call to swift-metrics and sets the gauges from `snapshot`.
    func publish(_ snapshot: ServerSnapshot) {
        for type in 0..<256 where framesReceived[type] != published.framesReceived[type] {
            let name = FrameType(rawValue: UInt8(type)).name ?? "unknown"
            counter("chat_frames_received_total", ("type", name)).increment(by: framesReceived[type] - published.framesReceived[type])
        }
        published.framesReceived = framesReceived
        add(bytesReceived, &published.bytesReceived, "chat_received_bytes_total")
        add(deliveries, &published.deliveries, "chat_deliveries_total")
        add(framesQueued, &published.framesQueued, "chat_sent_frames_total")
        add(bytesQueued, &published.bytesQueued, "chat_sent_bytes_total")
        add(tlsHandshakesStarted, &published.tlsHandshakesStarted, "chat_tls_handshakes_started_total")
        add(storageFailures, &published.storageFailures, "chat_storage_failures_total")
        add(clusterReconnects, &published.clusterReconnects, "chat_cluster_reconnects_total")
        add(snapshot.connectionsAccepted, &published.connectionsAccepted, "chat_connections_accepted_total")
        for (code, count) in errorsSent where count != published.errorsSent[code, default: 0] {
            let name = ErrorCode(rawValue: code).name ?? "unknown"
            counter("chat_refusals_total", ("code", name)).increment(by: count - published.errorsSent[code, default: 0])
        }
        published.errorsSent = errorsSent
        for (reason, count) in disconnects where count != published.disconnects[reason, default: 0] {
            counter("chat_disconnects_total", ("reason", reason)).increment(by: count - published.disconnects[reason, default: 0])
        }
        published.disconnects = disconnects
        for (reason, count) in tlsFailures {
            // Every reason is published, at 0 too: a series that appears only on the first
            // failure makes `rate()` miss that failure.
            counter("chat_tls_handshake_failures_total", ("reason", reason)).increment(by: count - published.tlsFailures[reason, default: 0])
        }
        published.tlsFailures = tlsFailures
        for (job, count) in hashingJobs {
            counter("chat_password_hashing_jobs_total", ("job", job)).increment(by: count - published.hashingJobs[job, default: 0])
        }
        published.hashingJobs = hashingJobs

        for (state, count) in snapshot.connections.byState {
            gauge("chat_connections", ("state", state)).record(count)
        }
        gauge("chat_rooms").record(snapshot.rooms)
        gauge("chat_room_members").record(snapshot.memberships)
        gauge("chat_output_queued_bytes").record(snapshot.budget.outputQueued)
        for (part, bytes) in snapshot.budget.limits {
            gauge("chat_memory_budget_bytes", ("part", part)).record(bytes)
        }
        for (part, bytes) in snapshot.budget.used {
            gauge("chat_memory_used_bytes", ("part", part)).record(bytes)
        }
        gauge("chat_memory_max_bytes").record(snapshot.budget.total)
        if let storage = snapshot.storage {
            gauge("chat_storage_failing").record(storage.problems.isEmpty ? 0 : 1)
            gauge("chat_storage_journal_backlog_bytes").record(storage.journalBacklogBytes)
            gauge("chat_storage_journal_backlog_records").record(storage.journalBacklogRecords)
            for report in storage.parts where report.failures != published.storageWriteFailures[report.part, default: 0] {
                counter("chat_storage_write_failures_total", ("part", report.part.rawValue))
                    .increment(by: report.failures - published.storageWriteFailures[report.part, default: 0])
                published.storageWriteFailures[report.part] = report.failures
            }
        }
        if let cluster = snapshot.cluster {
            gauge("chat_cluster_link_up").record(cluster.linkUp ? 1 : 0)
        }
    }

    private func add(_ value: Int, _ published: inout Int, _ name: String) {
        // Published at 0 too, so every series exists from the first scrape.
        counter(name).increment(by: value - published)
        published = value
    }

    private func counter(_ name: String, _ label: (String, String)? = nil) -> Counter {
        let key = label.map { "\(name){\($0.0)=\($0.1)}" } ?? name
        if let counter = counters[key] { return counter }
        let counter = Counter(label: name, dimensions: label.map { [$0] } ?? [])
        counters[key] = counter
        return counter
    }

    private func gauge(_ name: String, _ label: (String, String)? = nil) -> Gauge {
        let key = label.map { "\(name){\($0.0)=\($0.1)}" } ?? name
        if let gauge = gauges[key] { return gauge }
        let gauge = Gauge(label: name, dimensions: label.map { [$0] } ?? [])
        gauges[key] = gauge
        return gauge
    }
}
