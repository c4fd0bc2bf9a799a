/// Every metric the server exports, with its help text: one list, which `/metrics`' `# HELP`
/// lines come from (`OperatorView` adds them to the registry's text: swift-metrics has no place
/// for help text, and swift-prometheus refuses a help text that differs from the one its factory
/// registered, which is none) and which docs/OPERATIONS.md's table describes in more words.
///
/// A series missing here reaches `/metrics` without a HELP line, and `promtool check metrics`
/// fails on it (`MetricsHygieneTests`).
public enum MetricCatalog {
    /// Each metric's name (without `_bucket`, `_sum`, `_count`) and help text.
    public static let metrics: [(name: String, help: String)] = [
        ("chat_build_info", "Always 1; the labels say which chat-server this is (version, protocol)."),
        ("chat_connections", "Open connections by state: tls_handshake, hello (not welcomed yet), chatting, closing, refused."),
        ("chat_connections_accepted_total", "Connections accepted since start."),
        ("chat_rooms", "Rooms in memory (a cluster node: rooms its clients are in)."),
        ("chat_room_members", "Memberships in those rooms."),
        ("chat_frames_received_total", "Frames decoded from clients, by frame type."),
        ("chat_received_bytes_total", "Bytes read from clients, after TLS."),
        ("chat_deliveries_total", "Room events queued for members, one per member."),
        ("chat_sent_frames_total", "Frames queued for clients, one per recipient."),
        ("chat_sent_bytes_total", "Bytes of the frames queued for clients, one copy per recipient, before TLS."),
        ("chat_refusals_total", "Error frames sent, by error code."),
        ("chat_password_hashing_jobs_total", "Jobs handed to the password-hashing pool, by kind (hash, verify), and those it refused at once (refused)."),
        ("chat_disconnects_total", "Sessions ended, by reason: an error code's name, or client, connectionLost, tls, shutdown."),
        ("chat_output_queued_bytes", "What the output queues pin now, in bytes."),
        ("chat_memory_max_bytes", "The memory bound the server keeps to (--max-memory), in bytes."),
        ("chat_memory_budget_bytes", "The shares of --max-memory, by part, in bytes."),
        ("chat_memory_used_bytes", "What the growing parts of the memory budget use now, by part, in bytes."),
        ("chat_delivery_latency_seconds", "Per client flushed: how long its oldest frame waited from being queued to reaching its socket."),
        ("chat_event_loop_lag_seconds", "How late the event loop ran a timer due every 100 ms: time spent on other work before it."),
        ("chat_storage_commit_seconds", "Durable mode: from handing a commit to the store to its completion."),
        ("chat_storage_commit_events", "Durable mode: events per commit."),
        ("chat_storage_failures_total", "Commits that failed (their room events refused)."),
        ("chat_storage_write_failures_total", "Failed writes of the data directory, by part: journal, database, accounts, moderation."),
        ("chat_storage_failing", "Durable mode: 1 while a part of the data directory fails to be written, else 0."),
        ("chat_storage_journal_backlog_bytes", "Durable mode: bytes of journal records the database has not taken in yet."),
        ("chat_storage_journal_backlog_records", "Durable mode: journal records waiting for the next hand-off to the database."),
        ("chat_storage_journal_files", "Durable mode: journal files in the data directory."),
        ("chat_storage_database_bytes", "Durable mode: the size of rooms.sqlite3."),
        ("chat_storage_wal_bytes", "Durable mode: the size of rooms.sqlite3's write-ahead log."),
        ("chat_cluster_link_up", "Cluster mode: 1 while both Redis connections are up, else 0."),
        ("chat_cluster_reconnects_total", "Times the cluster link came back after being up."),
        ("chat_cluster_redis_round_trip_seconds", "Cluster mode: from sending a room event's append to Redis to its answer."),
        ("chat_tls_handshakes_started_total", "TLS connections started."),
        ("chat_tls_handshake_failures_total", "TLS handshakes that failed, by reason: timeout, error."),
        ("chat_metrics_http_rejections_total", "Requests the metrics port refused, by reason: limit, timeout, bad_request."),
        ("process_cpu_seconds_total", "User and system CPU time used, in seconds."),
        ("process_resident_memory_bytes", "Resident memory, in bytes."),
        ("process_virtual_memory_bytes", "Virtual memory, in bytes."),
        ("process_open_fds", "Open file descriptors."),
        ("process_max_fds", "The limit on open file descriptors."),
        ("process_start_time_seconds", "When the process started, in seconds since the Unix epoch."),
    ]

    /// The help text of `name`, if it is listed.
    public static func help(for name: String) -> String? { helps[name] }

    private static let helps = Dictionary(metrics.map { ($0.name, $0.help) }, uniquingKeysWith: { first, _ in first })

    /// `exposition` (Prometheus's text format) with a `# HELP` line before each `# TYPE` line
    /// that has none, from this list; a metric the list does not know keeps none.
    public static func addingHelp(to exposition: [UInt8]) -> [UInt8] {
        var result: [UInt8] = []
        result.reserveCapacity(exposition.count + 4096)
        var previousWasHelp = false
        for line in exposition.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            if line.starts(with: typePrefix), !previousWasHelp {
                let name = String(decoding: line.dropFirst(typePrefix.count).prefix { $0 != UInt8(ascii: " ") }, as: UTF8.self)
                if let help = helps[name] { result += Array("# HELP \(name) \(help)\n".utf8) }
            }
            previousWasHelp = line.starts(with: helpPrefix)
            result += line
            result.append(UInt8(ascii: "\n"))
        }
        // split keeps the text after the last newline as a last piece: the loop added one too many.
        if exposition.last == UInt8(ascii: "\n") || exposition.isEmpty { result.removeLast() }
        return result
    }

    private static let typePrefix = Array("# TYPE ".utf8)
    private static let helpPrefix = Array("# HELP ".utf8)
}
