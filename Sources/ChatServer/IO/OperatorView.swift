import ChatStorage
import CoreMetrics
import Dispatch
import Glibc

/// What the metrics port answers: `/metrics` in Prometheus's text format, `/status` as one
/// screen for people, `/healthz` for a load balancer or a probe (200 `ok`, or 503 and why), `/` a
/// list of them. `/status` answers 503 too while the server is unhealthy, with the same page.
///
/// Both start from a `ServerSnapshot`, which the chat's queue takes at most once per
/// `minimumInterval`: scrapes that arrive meanwhile, however many, share the last one (or wait
/// with the one being taken). The process's CPU, memory and descriptors and the store's file
/// sizes are read here, at request time, off the chat's queue. Rendering runs here too.
///
/// `renderMetrics` is the exporter's text (swift-prometheus's registry in `chat-server`): this
/// target records through swift-metrics and does not know which backend, if any, collects it.
/// The view adds a `# HELP` line to each metric (`MetricCatalog`) and the two histograms kept on
/// the loop (`LatencyHistogram`).
///
/// Threading: its state and all rendering are confined to its own serial queue.
public final class OperatorView: @unchecked Sendable {
    private let server: ChatServer
    private let renderMetrics: @Sendable () -> [UInt8]
    private let minimumInterval: UInt64
    private let queue = DispatchQueue(label: "ChatServer.operatorView")
    private var last: (snapshot: ServerSnapshot, at: UInt64)?
    private var waiting: [(ServerSnapshot) -> Void] = []
    private var taking = false
    private let process = ProcessGauges()
    private let databaseBytes = Gauge(label: "chat_storage_database_bytes")
    private let logBytes = Gauge(label: "chat_storage_wal_bytes")
    private let journalFiles = Gauge(label: "chat_storage_journal_files")
    private let buildInfo = Gauge(
        label: "chat_build_info", dimensions: [("version", BuildInfo.version), ("protocol", "\(BuildInfo.protocolVersion)")])

    /// A view of `server`, which starts recording metrics now; `renderMetrics` returns the
    /// exposition text, and snapshots are taken at most once per `minimumInterval`.
    public init(server: ChatServer, minimumInterval: Duration = .seconds(1), renderMetrics: @escaping @Sendable () -> [UInt8]) {
        self.server = server
        self.renderMetrics = renderMetrics
        self.minimumInterval = UInt64(minimumInterval / .nanoseconds(1))
        buildInfo.record(1)
        server.startRecordingMetrics()
    }

    /// Answers `head` (a GET) through `respond`, from the view's queue.
    public func answer(_ head: HTTPRequestHead, respond: @escaping @Sendable (HTTPResponse) -> Void) {
        queue.async { [self] in
            switch head.path {
            case "/metrics":
                withSnapshot { [self] snapshot in
                    publishFileAndProcessGauges(snapshot)
                    var body = MetricCatalog.addingHelp(to: renderMetrics())
                    for histogram in snapshot.histograms {
                        body += Array(histogram.exposition(help: MetricCatalog.help(for: histogram.name) ?? histogram.name).utf8)
                    }
                    respond(HTTPResponse(status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8", body: body))
                }
            case "/status":
                withSnapshot { snapshot in
                    let page = StatusPage.render(snapshot, process: ProcessStatistics.current(), files: Self.fileSizes(snapshot))
                    respond(HTTPResponse(status: snapshot.problems.isEmpty ? 200 : 503, text: page))
                }
            case "/healthz":
                withSnapshot { snapshot in
                    let problems = snapshot.problems
                    respond(
                        problems.isEmpty
                            ? HTTPResponse(status: 200, text: "ok")
                            : HTTPResponse(status: 503, text: "unhealthy\n" + problems.joined(separator: "\n")))
                }
            case "/":
                respond(
                    HTTPResponse(
                        status: 200,
                        text: "chat-server \(BuildInfo.version)\n/metrics  Prometheus text format\n/status   a summary for people\n"
                            + "/healthz  200 ok, or 503 and why"))
            default:
                respond(HTTPResponse(status: 404, text: "not found: try /metrics, /status or /healthz"))
            }
        }
    }

    /// Runs `body` on the view's queue with a snapshot no older than `minimumInterval`.
    private func withSnapshot(_ body: @escaping (ServerSnapshot) -> Void) {
        let now = DispatchTime.now().uptimeNanoseconds
        if let last, now &- last.at < minimumInterval { return body(last.snapshot) }
        waiting.append(body)
        guard !taking else { return }
        taking = true
        server.snapshot { [self] snapshot in
            queue.async { [self] in
                last = (snapshot, DispatchTime.now().uptimeNanoseconds)
                taking = false
                let waiters = waiting
                waiting = []
                for waiter in waiters { waiter(snapshot) }
            }
        }
    }

    private func publishFileAndProcessGauges(_ snapshot: ServerSnapshot) {
        if let files = Self.fileSizes(snapshot) {
            databaseBytes.record(files.database)
            logBytes.record(files.log)
            journalFiles.record(files.journalFiles)
        }
        if let statistics = ProcessStatistics.current() { process.publish(statistics) }
    }

    /// The database's and its write-ahead log's sizes, in durable mode.
    private static func fileSizes(_ snapshot: ServerSnapshot) -> StatusPage.Files? {
        guard let storage = snapshot.storage else { return nil }
        let path = storage.databasePath
        return StatusPage.Files(
            database: size(of: path), log: size(of: path + "-wal"),
            journalFiles: storage.journalDirectory.map { RoomJournal.files(in: $0).count } ?? 0)
    }

    private static func size(of path: String) -> Int {
        var info = stat()
        return stat(path, &info) == 0 ? Int(info.st_size) : 0
    }
}

/// The process's statistics as the conventional `process_…` metrics of Prometheus's client
/// libraries, so dashboards made for any exporter read them.
private final class ProcessGauges {
    private let cpu = FloatingPointCounter(label: "process_cpu_seconds_total")
    private let resident = Gauge(label: "process_resident_memory_bytes")
    private let virtual = Gauge(label: "process_virtual_memory_bytes")
    private let open = Gauge(label: "process_open_fds")
    private let max = Gauge(label: "process_max_fds")
    private let start = Gauge(label: "process_start_time_seconds")
    private var cpuPublished = 0.0

    func publish(_ statistics: ProcessStatistics) {
        cpu.increment(by: Swift.max(0, statistics.cpuSeconds - cpuPublished))
        cpuPublished = Swift.max(cpuPublished, statistics.cpuSeconds)
        resident.record(statistics.residentBytes)
        virtual.record(statistics.virtualBytes)
        open.record(statistics.openDescriptors)
        max.record(statistics.maxDescriptors)
        start.record(statistics.startTimeSeconds)
    }
}
