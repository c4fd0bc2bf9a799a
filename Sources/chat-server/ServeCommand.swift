import ArgumentParser
import ChatAccounts
import ChatServer
import ChatStorage
import ConfigFormat
import CoreMetrics
import Dispatch
import Glibc
import Logging
import Prometheus
import RoomLog
import SocketCore
import SocketTLS

/// `chat-server [serve]`: serves the chat protocol until SIGINT or SIGTERM, then shuts down
/// gracefully. The root command's default (`ChatServerTool`), so `chat-server --port 7000` serves.
struct ServeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve the chat protocol (docs/PROTOCOL.md) over TCP (the default: `chat-server [serve] [flags]`).",
        discussion: """
            Prints "listening on HOST:PORT" as its first line, then logs one line per connect and \
            disconnect (with the reason) to standard error: `time level message key=value …`, or one \
            JSON object per line with --log-format json; under systemd each line carries its syslog \
            priority for the journal. SIGINT or SIGTERM stops accepting, sends every client a goodbye \
            with the reason after what is queued for it, waits up to --drain-timeout for it to leave, \
            and exits 0.

            --config FILE reads these flags from a file, one `name = value` line each (docs/OPERATIONS.md, \
            "The config file"); flags on the command line override it. SIGHUP reads it again and applies \
            what can change while running — the log level, the rate and login limits, the message of \
            the day, the admin accounts, the TLS files — and logs what waits for a restart; without \
            --config, SIGHUP reads the TLS files again. --check-config checks the file and the flags and \
            exits (0 if they can serve, 78 with the file's line if not — the line of one of the \
            file's settings when a check of two together fails; 64 if only flags are to blame).

            Exit statuses (the systemd unit restarts after none of 1, 2, 64, 78): 0 a graceful stop; \
            1 refused at start (the data directory: locked, unusable, or others could change it; an \
            address: --port, --plain-port, --metrics); 2 a TLS certificate or key that cannot \
            be used; 64 a flag or value this command does not take; 74 the data directory was deleted \
            or replaced while serving; 78 the config file. Under systemd (Type=notify) the server says \
            READY=1 once listening, and beats the watchdog from its event loop.

            Other commands: `chat-server backup DEST` copies a live data directory, `chat-server check \
            DIR` verifies one; `chat-server help` lists them.

            The defaults suit a server people chat on, exposed to the internet. Rates are limited \
            per connection and, for all connections from one address together, per address. Load \
            tests from one address need --no-rate-limits and, beyond 1000 connections, \
            --max-clients-per-address.

            --max-memory bounds the server's memory whatever clients do: it is divided among the \
            connections (each may hold a partial frame of up to --max-frame-size), room history, and \
            what is queued for clients (docs/SECURITY.md). A client whose queue stays past a \
            threshold for --slow-consumer-timeout, or holds the most while all queues are full, is \
            disconnected as a slow consumer; a client that reads is never held back by what others send.
            The server raises its open-file limit to the hard limit at start: allow one descriptor \
            per client (check `ulimit -Hn`).

            With --tls-cert and --tls-key, --port speaks TLS 1.2/1.3 only (Scripts/dev-cert.sh makes a \
            local CA and a certificate to try it; docs/TLS.md); --plain-port adds a plain-text port \
            beside it. The TLS handshake must finish within --handshake-timeout, like hello. SIGHUP \
            reads the certificate and key again (with --config, the files it names now): new \
            connections get the new certificate, open ones carry on, and a broken file is logged while \
            the old certificate stays. Each TLS \
            connection reserves 48 KiB more of --max-memory, whose default is then 1G.

            Rooms are durable: their epoch, seq, topic and history are kept in SQLite under \
            --data-dir, and a message is echoed (acknowledged) only once it is committed (to the journal \
            in front of SQLite, which takes it in every 100 ms), so a killed server loses nothing it \
            acknowledged; --fsync says what a power loss can lose, and a start that cannot prove its \
            journal holds everything acknowledged (a power loss, files damaged or deleted by hand) \
            gives every room a new epoch, so clients see the break. One server at a time: the directory \
            itself is locked, and a server whose directory is deleted or replaced exits (74). \
            The --retain flags bound what is kept on disk: --retain-total-bytes counts every room's \
            events and its row (name and topic), and the data directory stays within 1.5 times it \
            plus 16 MiB (SQLite's pages, its log and the journal); a room without members is deleted once idle for \
            --retain-empty-rooms. --no-persistence keeps rooms in memory only (docs/SERVER.md, \
            "Durability" and "Retention").

            With --cluster redis://HOST:PORT (or $CHAT_CLUSTER) the server is one node of a cluster: \
            every node serves every room, and rooms, their history, nicks and presence live in that \
            Redis, so --data-dir and the --retain flags do not apply (docs/CLUSTER.md). While Redis \
            cannot be reached, room events, joins, hellos and direct messages are refused with \
            error(unavailable) and the node reconnects; Redis should keep an append-only file \
            (Scripts/cluster.sh runs it so) or a Redis restart loses the rooms.

            The password comes from --password-file or the CHAT_SERVER_PASSWORD environment \
            variable, never from the command line, where other users could read it.

            Rooms may be moderated (protocol version 4): ops, modes, kicks, invitations and bans. \
            --admin-account NAME (or $CHAT_SERVER_ADMIN_ACCOUNTS) makes an account's sessions \
            server operators, who may ban from the server and kill sessions; the operator creates \
            such an account with `chat-server account add NAME` (see `chat-server account --help`). \
            Registered rooms and server bans are kept in moderation.sqlite under --data-dir, in memory \
            only with --no-persistence, or in a cluster node's Redis (docs/SERVER.md, "Moderation"; \
            docs/CLUSTER.md).

            With --metrics HOST:PORT the server also answers HTTP GETs there: /metrics in \
            Prometheus's text format, /status, a one-screen summary for people, and /healthz (200 ok, or \
            503 with why: storage failing, a cluster link down) (docs/OPERATIONS.md). Keep it on \
            loopback or a private network: it names rooms on /status. Its second line of output is \
            then "metrics on HOST:PORT". `chat-server --status --metrics HOST:PORT` prints the status \
            page of the server running there and exits 0 if it is healthy, 2 if not.
            """)

    @Option(
        help: ArgumentHelp(
            "Read flags from this file (`name = value` lines, the flags' names without dashes); flags given here override it, and SIGHUP reads it again.",
            valueName: "FILE"))
    var config: String?

    @Flag(help: "Check the config file and the flags (values, combinations, the TLS files) and exit: 0 if they can serve, else the problem and its line.")
    var checkConfig = false

    @Option(help: "How log lines are written: text (time level message key=value …) or json (one object per line).")
    var logFormat: ServerLogHandler.Format = .text

    @Option(
        help: ArgumentHelp(
            "Serve /metrics (Prometheus) and /status over HTTP on this address, e.g. 127.0.0.1:9464 ([::1]:9464 for IPv6; port 0: the OS chooses). Off by default.",
            valueName: "HOST:PORT"))
    var metrics: MetricsAddress?

    @Flag(help: "Print the status page of the server whose --metrics address is given, and exit: 0 healthy, 2 unhealthy (storage failing, cluster link down), 1 if it cannot be read.")
    var status = false

    @Option(help: "The address to listen on; \"::\" for every IPv6 and IPv4 address.")
    var host = "127.0.0.1"

    @Option(help: "The port to listen on; 0 lets the OS choose (see the first line of output).")
    var port = 7000

    @Option(help: "PEM file with the server's certificate chain (its certificate first); with --tls-key, --port speaks TLS.")
    var tlsCert: String?

    @Option(help: "PEM file with the certificate's private key, unencrypted (mode 600).")
    var tlsKey: String?

    @Option(help: "With TLS on --port, also serve plain text on this port (0: the OS chooses), e.g. for loopback tools.")
    var plainPort: Int?

    @Option(help: "The most connections at once, handshaking ones included; more are refused with serverFull.")
    var maxClients = 10_000

    @Option(
        help: """
            The most connections at once from one IP address; more are refused with \
            tooManyConnectionsFromAddress. Generous because load tests connect from 127.0.0.1.
            """)
    var maxClientsPerAddress = 1_000

    @Option(help: "The largest frame a client may send, in bytes (announced in welcome); larger ones end the connection.")
    var maxFrameSize = 16_384

    @Option(help: "The most rooms one client may be in; one more join is refused with tooManyRooms.")
    var maxRoomsPerClient = 50

    @Option(help: "Frames a client may send per second on average, pings included (token bucket); 0 turns the limit off.")
    var rateLimit: Double = 50

    @Option(help: "Frames a client may send at once above the average rate (the bucket's size).")
    var rateBurst = 100

    @Option(help: "Bytes a client may send per second on average, whole frames counted; 0 turns the limit off.")
    var byteRate = 65_536

    @Option(help: "Bytes a client may send at once above the average byte rate; at least --max-frame-size.")
    var byteBurst = 1_048_576

    @Option(help: "Frames all connections from one address may send per second together, on average; 0 turns the limit off.")
    var addressRateLimit: Double = 500

    @Option(help: "Frames all connections from one address may send at once above their average rate.")
    var addressRateBurst = 1_000

    @Option(help: "Bytes all connections from one address may send per second together, on average; 0 turns the limit off.")
    var addressByteRate = 1_048_576

    @Option(help: "Bytes all connections from one address may send at once above their average byte rate; at least --max-frame-size.")
    var addressByteBurst = 4_194_304

    @Option(help: "Bytes per second, on average, that the frames of one address's connections may cost to deliver, every recipient counted; 0 turns the limit off.")
    var addressFanoutRate = 33_554_432

    @Option(help: "Delivery bytes one address's connections may cause at once above their average fan-out rate.")
    var addressFanoutBurst = 67_108_864

    @Option(help: "Connections one address may open per second, on average; more are refused. 0 turns the limit off.")
    var addressConnectionRate: Double = 20

    @Option(help: "Connections one address may open at once above its average connection rate.")
    var addressConnectionBurst = 200

    @Flag(help: "Turn off every rate limit, per connection and per address (for load tests), whatever the rate flags say.")
    var noRateLimits = false

    @Option(help: "Frames refused in a row for exceeding a rate after which the client is disconnected (rateLimited).")
    var rateAbuseLimit = 100

    @Option(help: "Messages, actions and topic changes kept per room and replayed to each joiner (the memory budget may keep fewer).")
    var historySize = 100

    @Option(help: "Seconds a new connection has to send hello (slow or silent ones are dropped).")
    var handshakeTimeout: Double = 5

    @Option(help: "Seconds of silence from a client after which the server pings it.")
    var idlePingInterval: Double = 30

    @Option(help: "Seconds of silence from a client after which it is disconnected (must exceed the ping interval).")
    var idleTimeout: Double = 90

    @Option(
        help: ArgumentHelp(
            "The most memory the server may use (suffix K, M or G for KiB, MiB, GiB); divided among connections, history and output queues. (default: 512M, or 1G with --tls-cert: each TLS connection reserves 48 KiB more)",
            valueName: "SIZE"))
    var maxMemory: ByteSize?

    @Option(help: "Seconds a client's queue may stay past the lag threshold (256 KiB) before it is disconnected as a slow consumer.")
    var slowConsumerTimeout: Double = 10

    @Option(help: "Seconds to let queued bytes reach the clients on shutdown before closing anyway.")
    var drainTimeout: Double = 5

    @Option(help: "A file whose first line is the password clients must send (default: $CHAT_SERVER_PASSWORD, else none).")
    var passwordFile: String?

    @Option(help: "Wrong passwords from one address after which it is refused for --password-lockout, right password or not.")
    var passwordAttempts = 5

    @Option(help: "Seconds an address that guessed wrong --password-attempts times is refused.")
    var passwordLockout: Double = 60

    @Option(help: "The most accounts the server keeps; one more register is refused with tooManyAccounts.")
    var maxAccounts = 10_000

    @Option(help: "Password checks of one account per minute (login, change-password, drop-account) from all addresses together; past them only an address that has not guessed wrong at it is checked, the others are answered throttled. Room keys: the same, per room.")
    var loginAttemptsPerAccount = 20

    @Option(help: "Password checks of one account per minute from one address (IPv6: per /64), for every name alike, with an account or not; more are answered throttled. Room keys: the same, per room.")
    var loginAttemptsPerAccountFromAddress = 5

    @Option(help: "Registrations per hour from all addresses together (a cluster: through all its nodes); more are answered throttled.")
    var registrationsPerServer = 60

    @Option(help: "Password checks per address (IPv6: per /64) per minute, for all accounts together; more are answered throttled.")
    var loginAttemptsPerAddress = 20

    @Option(help: "Registrations per address (IPv6: per /64) per hour; more are answered throttled.")
    var registrationsPerAddress = 3

    @Option(help: "Password hashes (Argon2id, 19 MiB and ~12 ms each) computed at once, off the event loop: 1...8.")
    var hashingWorkers = 1

    @Option(help: "Password checks that may wait for a hashing worker; past them, logins are answered busy at once.")
    var hashingQueue = 32

    @Flag(help: "Accept passwords (register, login) over plain TCP from non-loopback addresses, where anyone on the path can read them.")
    var allowPlainPasswords = false

    @Option(
        help: ArgumentHelp(
            "An account whose sessions are server operators: they act as ops in every room and alone may serverBan, kill and list the server's bans (repeatable; also $CHAT_SERVER_ADMIN_ACCOUNTS, comma-separated). Clients may not register it: create it with `chat-server account add NAME`.",
            valueName: "NAME"))
    var adminAccount: [String] = []

    @Option(
        help: ArgumentHelp(
            "The directory rooms are stored in (created if missing, mode 0700; one server at a time; refused if its group or others may write to it or another user owns it; its files are made 0600). Default: $XDG_STATE_HOME/chat-server, else ~/.local/state/chat-server.",
            valueName: "PATH"))
    var dataDir: String?

    @Flag(help: "Keep rooms in memory only: history and seq start again at every start, and an empty room is forgotten.")
    var noPersistence = false

    @Option(
        help: ArgumentHelp(
            "When a commit reaches the disk: always (fsync every commit; a power loss loses nothing acknowledged), normal (fsync the log every 100 ms; a killed process loses nothing acknowledged, a power loss about the last 100 ms), off (never fsync; a power loss may lose more and corrupt the file).",
            valueName: "always|normal|off"))
    var fsync: Durability = .normal

    @Option(
        help: ArgumentHelp(
            "Where commits run: eventLoop (a journal record written at the end of each turn of the event loop, before the replies it releases, as Redis writes its log, and taken into SQLite every 100 ms; the default) or writerThread (SQLite transactions on a thread of their own, handed back to the loop; the default with --fsync always, whose fsync per commit would stall every client on the loop).",
            valueName: "eventLoop|writerThread"))
    var commitPlacement: CommitPlacement?

    @Option(help: "Events kept per room on disk, the oldest deleted first; 0 for no bound.")
    var retainEvents = 100_000

    @Option(
        help: ArgumentHelp(
            "Bytes kept per room on disk, its events and its row (name, topic), the oldest events deleted first (suffix K, M, G); 0 for no bound.",
            valueName: "SIZE"))
    var retainRoomBytes = ByteSize(bytes: 64 << 20)

    @Option(help: "Days an event is kept on disk; 0 keeps events for ever (within the other bounds).")
    var retainDays: Double = 0

    @Option(
        help: ArgumentHelp(
            "Bytes kept on disk in all rooms together, events and rooms' rows (topics included); over it the oldest goes first: the oldest events, or an empty room idle for longer. The data directory stays within 1.5 times this plus 16 MiB (suffix K, M, G); 0 for no bound.",
            valueName: "SIZE"))
    var retainTotalBytes = ByteSize(bytes: 1 << 30)

    @Option(
        help: ArgumentHelp(
            "How long a room without members and without events is kept on disk (suffix s, m, h, d); then it is deleted with its history and topic, and comes back with a new epoch. 0 keeps such rooms (within --retain-total-bytes).",
            valueName: "DURATION"))
    var retainEmptyRooms = TimeSpan(milliseconds: 30 * 86_400_000)

    @Option(help: "Seconds between retention passes, which apply the per-room, age and empty-room bounds; a commit past --retain-total-bytes is trimmed at once.")
    var retentionInterval: Double = 10

    @Option(
        help: ArgumentHelp(
            "Be a node of the cluster whose Redis is at this address (default: $CHAT_CLUSTER, else none): rooms, nicks and history are shared with every node of it.",
            valueName: "redis://HOST:PORT"))
    var cluster: String?

    @Option(help: "Seconds a cluster node may stay silent before the other nodes free its nicks and announce its members' quits.")
    var clusterNodeTimeout: Double = 5

    @Option(help: "The message of the day sent in welcome.")
    var motd = ""

    @Option(help: "The least important log level shown: trace, debug, info, notice, warning, error, critical.")
    var logLevel: Logger.Level = .info

    mutating func validate() throws {
        if status, metrics == nil { throw ValidationError("--status needs --metrics HOST:PORT: the address of the server's metrics port") }
        if (tlsCert == nil) != (tlsKey == nil) { throw ValidationError("--tls-cert and --tls-key go together") }
        if plainPort != nil, tlsCert == nil { throw ValidationError("--plain-port needs --tls-cert and --tls-key") }
        if let problem = try serverConfiguration().problem() { throw ValidationError(problem) }
        guard retainDays >= 0, retainDays.isFinite else { throw ValidationError("--retain-days must be 0 or more") }
        guard retainEvents >= 0 else { throw ValidationError("--retain-events must be 0 or more") }
        _ = try seconds(retentionInterval, "--retention-interval")
        if noPersistence, dataDir != nil { throw ValidationError("--data-dir and --no-persistence contradict each other") }
        if let cluster = try clusterConfiguration() {
            if dataDir != nil { throw ValidationError("--data-dir does not apply to a cluster node: its rooms live in \(cluster.host):\(cluster.port)") }
        }
        guard clusterNodeTimeout > 0, clusterNodeTimeout.isFinite else { throw ValidationError("--cluster-node-timeout must be positive") }
    }

    /// The cluster from --cluster or $CHAT_CLUSTER, or nil; throws a message for a bad address.
    private func clusterConfiguration() throws -> ClusterConfiguration? {
        let fromEnvironment = getenv("CHAT_CLUSTER").map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 }
        guard let url = cluster ?? fromEnvironment else { return nil }
        let source = cluster != nil ? "--cluster" : "CHAT_CLUSTER"
        do {
            var configuration = try ClusterConfiguration(url: url)
            configuration.nodeTimeout = .milliseconds(Int64(clusterNodeTimeout * 1000))
            return configuration
        } catch {
            throw ValidationError("\(source): \(error)")
        }
    }

    /// The data directory: --data-dir, else $XDG_STATE_HOME/chat-server, else ~/.local/state/chat-server.
    private func dataDirectory() -> String? {
        dataDir ?? DataDirectoryDefault.path()
    }

    /// Ends a start-up that cannot go on: closes `store` (what it opened), says `problem` in one
    /// line on standard error, and returns the exit to throw (`status`: 1 unless told).
    private func refusal(_ problem: String, status: Int32 = ExitStatus.startupRefused, closing store: SQLiteRoomStore?) -> ExitCode {
        store?.close()
        StandardError.write("chat-server: \(problem)\n")
        return ExitCode(status)
    }

    /// Opens the rooms' store, or exits with a one-line message when it cannot.
    private func openStore(logger: Logger) throws -> SQLiteRoomStore? {
        guard !noPersistence else { return nil }
        guard let path = dataDirectory() else {
            throw refusal("no --data-dir given and neither $XDG_STATE_HOME nor $HOME is set", closing: nil)
        }
        let retention = RetentionPolicy(
            maxEventsPerRoom: retainEvents, maxBytesPerRoom: retainRoomBytes.bytes,
            maxAgeMillis: UInt64(retainDays * 86_400_000), maxTotalBytes: retainTotalBytes.bytes,
            maxEmptyRoomMillis: retainEmptyRooms.milliseconds)
        let interval = try seconds(retentionInterval, "--retention-interval")
        // A file-size limit (`ulimit -f`) would kill the server with SIGXFSZ at the write that
        // passes it; ignored, that write fails with EFBIG, a failed commit whose senders are
        // told, as on a full disk (docs/SERVER.md, "Durability").
        signal(SIGXFSZ, SIG_IGN)
        do {
            let store = try SQLiteRoomStore(
                directory: path, durability: fsync, retention: retention, retentionInterval: interval,
                commitPlacement: commitPlacement ?? .recommended(for: fsync), logger: logger)
            if let warning = store.directory.warning { logger.warning("\(warning)") }
            logger.info(
                "rooms stored",
                metadata: [
                    "storage.path": "\(store.directory.databasePath)", "storage.fsync": "\(fsync.rawValue)",
                    "storage.commits": "\(store.placement.rawValue)",
                    "storage.retention":
                        """
                        \(retainEvents) events, \(retainRoomBytes.bytes) bytes per room, \(retainDays) days, \(retainTotalBytes.bytes) \
                        bytes in all, empty rooms \(retainEmptyRooms.defaultValueDescription), every \(retentionInterval) s
                        """,
                ])
            return store
        } catch {
            throw refusal(error.message, closing: nil)
        }
    }

    /// Opens the accounts' file in the rooms' data directory (durable mode); nil — accounts in
    /// memory, lost at exit — without one. When it cannot, closes `store` and exits.
    private func openAccounts(beside store: SQLiteRoomStore?, logger: Logger) throws -> (any AccountStore)? {
        guard let store else { return nil }
        do {
            let accounts = try SQLiteAccountStore(directory: store.directory.path)
            logger.info("accounts stored", metadata: ["accounts.path": "\(accounts.path)"])
            return accounts
        } catch {
            throw refusal("\(error)", closing: store)
        }
    }

    /// Opens the moderation file (registered rooms, server bans) in the rooms' data directory
    /// (durable mode); nil — kept in memory, lost at exit — without one. When it cannot, closes
    /// `store` and exits.
    private func openModeration(beside store: SQLiteRoomStore?, logger: Logger) throws -> (any ModerationStore)? {
        guard let store else { return nil }
        do {
            let moderation = try SQLiteModerationStore(directory: store.directory.path)
            logger.info("moderation stored", metadata: ["moderation.path": "\(moderation.path)"])
            return moderation
        } catch {
            throw refusal("\(error)", closing: store)
        }
    }

    /// The server operators' account names: `--admin-account`s, and those in
    /// `$CHAT_SERVER_ADMIN_ACCOUNTS` (comma-separated; `AccountSettings.problem` checks them).
    private func adminAccountNames() -> [String] {
        let fromEnvironment = getenv("CHAT_SERVER_ADMIN_ACCOUNTS").map { String(cString: $0) } ?? ""
        let listed = fromEnvironment.split(separator: ",").map { String($0.filter { $0 != " " }) }
        return adminAccount + listed.filter { !$0.isEmpty }
    }

    func run() throws {
        if status, let metrics { return try printStatus(of: metrics) }
        if checkConfig { return try checkConfiguration() }
        let raised = DescriptorLimit.raiseToHardLimit()
        // Two malloc arenas, not glibc's eight per core: with one per thread, what the loop, the
        // storage writer and reader, and Dispatch's workers free stays in arenas of their own,
        // and a durable server under the many-rooms history attack peaked at 95–117 MiB of RSS
        // against 74–85 MiB with two, at the same throughput (docs/SECURITY.md, "The memory
        // budget"). Before any thread starts.
        limitMallocArenas(to: 2)
        // Also before any thread starts: the signals are blocked in every thread (ServerSignals).
        let signals = ServerSignals()
        ServerLogHandler.setLevel(logLevel)
        let format = logFormat
        let journald = ServerLogHandler.underJournald()
        LoggingSystem.bootstrap { _ in ServerLogHandler(format: format, journald: journald) }
        let logger = Logger(label: "chat-server")
        let notifier = SystemdNotifier.fromEnvironment()
        let cluster = try clusterConfiguration()
        // Before anything is opened: what can still fail from here on closes what it opened.
        let reloader = ConfigReloader(
            configPath: config, commandLine: ServerInvocation.commandLine, started: try serverConfiguration(),
            startedArguments: try ServerInvocation.effectiveArguments(), logger: logger)
        let store = cluster == nil ? try openStore(logger: logger) : nil
        let accounts = try openAccounts(beside: store, logger: logger)
        let moderation = try openModeration(beside: store, logger: logger)
        let server: ChatServer
        do {
            server = try ChatServer(
                configuration: try serverConfiguration(), store: store, cluster: cluster, accounts: accounts, moderation: moderation,
                logger: logger)
        } catch let error as TLSError {
            // The sentence names the file and what to do; a stack of ArgumentParser text would not.
            throw refusal("\(error)", status: ExitStatus.tlsUnusable, closing: store)
        } catch {
            throw refusal("\(error)", closing: store)
        }
        if let certificate = server.tlsCertificate {
            logger.info("TLS certificate", metadata: ["tls.certificate": "\(certificate)"])
        }
        for warning in server.tlsWarnings { logger.warning("TLS: \(warning)") }
        // Counted before any client can connect: the listener and whatever the process inherited.
        let socketsAtStart = DescriptorLimit.openSocketCount() ?? -1
        let endpoint: MetricsEndpoint?
        do {
            endpoint = try metrics.map { address throws(SocketError) in try startMetrics(at: address, server: server) }
        } catch {
            // Exit 1 with the error, as for the chat port: the listeners already bound are closed
            // first (a `Socket` dropped open is a leak, and a trap in the debug build).
            server.discard()
            throw refusal("cannot serve metrics on \(metrics.map { "\($0)" } ?? ""): \(error)", closing: store)
        }
        // Handlers before the first line: "listening on" tells a supervisor or a test it may
        // signal the server, and a SIGTERM after the line must shut it down cleanly.
        let stopped = DispatchSemaphore(value: 0)
        let exitStatus = Locked(ExitStatus.success)
        server.start()
        // SIGHUP reloads, with a terminal too: ending the server when its terminal closes (the
        // signal's default) lost every client without a goodbye or a line in the log.
        signals.serve(signalHandlers(server: server, reloader: reloader, logger: logger, notifier: notifier) { stopped.signal() })
        // The loop's own beat: the lag histogram, and systemd's watchdog (at most every half of
        // its interval, from the loop, so a stuck loop misses it).
        let step = notifier?.watchdogBeat.map { min(100_000_000, max(1_000_000, $0 / 2)) } ?? 100_000_000
        server.monitorLoop(every: .nanoseconds(Int64(step))) { notifier?.beat() }
        let directoryWatch = store.map { store in
            watchDataDirectory(store.directory, server: server, logger: logger, notifier: notifier) {
                exitStatus.withLock { $0 = ExitStatus.dataDirectoryLost }
                stopped.signal()
            }
        }
        print("listening on \(server.localAddress)")
        if let endpoint { print("metrics on \(endpoint.localAddress)") }
        if let plainPort = server.plainPort { print("plain text also on port \(plainPort)") }
        fflush(nil)  // flushes stdout; naming `stdout` is not concurrency-safe in Swift 6
        notifier?.notify("READY=1\nSTATUS=listening on \(server.localAddress)\nMAINPID=\(getpid())")
        logger.info(
            "serving",
            metadata: [
                "version": "\(BuildInfo.version)", "process.id": "\(getpid())",
                "descriptors.limit": "\(raised.map { String($0.current) } ?? "unknown")",
                "sockets.open": "\(socketsAtStart)",
                "memory.budget": "\(server.budget)",
                "config.file": "\(config ?? "none")",
            ])
        stopped.wait()
        // The clients' quits reach the other nodes before the node's link closes.
        server.leaveCluster { stopped.signal() }
        stopped.wait()
        withExtendedLifetime(signals) {}
        directoryWatch?.cancel()
        endpoint?.close()
        store?.close()
        // Every client socket, the listener and a node's link to Redis must be closed by now: the
        // end-to-end test checks that one socket (the listener) fewer is open than at start.
        logger.info("exiting", metadata: ["sockets.open": "\(DescriptorLimit.openSocketCount() ?? -1)"])
        let status = exitStatus.withLock { $0 }
        if status != ExitStatus.success { throw ExitCode(status) }
    }

    /// `--status`: prints the status page of the server at `metrics`; exits 0 if it is healthy,
    /// 2 if it answers unhealthy (503), 1 if no page can be read.
    private func printStatus(of metrics: MetricsAddress) throws {
        guard let page = StatusClient.fetch(host: metrics.host, port: metrics.port, path: "/status"),
            page.status == 200 || page.status == 503
        else {
            StandardError.write("chat-server: no status page at \(metrics): is a server running with --metrics \(metrics)?\n")
            throw ExitCode(ExitStatus.startupRefused)
        }
        print(page.body, terminator: "")
        if page.status != 200 { throw ExitCode(ExitStatus.unhealthy) }
    }

    /// `--check-config`: the flags and the file were parsed and validated to get here; what is
    /// left to check is what only loading can tell (the TLS files).
    private func checkConfiguration() throws {
        let configuration = try serverConfiguration()
        if let tls = configuration.tls {
            do {
                _ = try TLSContext(tls)
            } catch {
                StandardError.write("chat-server: \(config.map { "\($0): " } ?? "")\(error)\n")
                throw ExitCode(config == nil ? ExitStatus.tlsUnusable : ExitStatus.config)
            }
        }
        print("configuration OK\(config.map { ": \($0)" } ?? " (no --config)")")
    }


    func serverConfiguration() throws -> ChatServerConfiguration {
        var configuration = ChatServerConfiguration()
        configuration.host = host
        configuration.port = port
        if let tlsCert, let tlsKey {
            configuration.tls = .server(certificateChainFile: tlsCert, privateKeyFile: tlsKey)
            configuration.plainPort = plainPort
        }
        configuration.maxClients = maxClients
        configuration.accounts.maxAccounts = maxAccounts
        configuration.accounts.loginAttemptsPerAccount = loginAttemptsPerAccount
        configuration.accounts.loginAttemptsPerAddress = loginAttemptsPerAddress
        configuration.accounts.registrationsPerAddress = registrationsPerAddress
        configuration.accounts.loginAttemptsPerAccountFromAddress = loginAttemptsPerAccountFromAddress
        configuration.accounts.registrationsPerServer = registrationsPerServer
        configuration.accounts.hashingWorkers = hashingWorkers
        configuration.accounts.hashingQueue = hashingQueue
        configuration.accounts.allowPlainPasswords = allowPlainPasswords
        configuration.accounts.setAdminAccounts(adminAccountNames())
        configuration.maxClientsPerAddress = maxClientsPerAddress
        configuration.maxFrameSize = maxFrameSize
        configuration.maxRoomsPerClient = maxRoomsPerClient
        configuration.messageRate = rateLimit
        configuration.messageBurst = rateBurst
        configuration.byteRate = byteRate
        configuration.byteBurst = byteBurst
        configuration.addressMessageRate = addressRateLimit
        configuration.addressMessageBurst = addressRateBurst
        configuration.addressByteRate = addressByteRate
        configuration.addressByteBurst = addressByteBurst
        configuration.addressFanoutRate = addressFanoutRate
        configuration.addressFanoutBurst = addressFanoutBurst
        configuration.addressConnectionRate = addressConnectionRate
        configuration.addressConnectionBurst = addressConnectionBurst
        if noRateLimits { configuration.turnOffRateLimits() }
        configuration.rateAbuseLimit = rateAbuseLimit
        configuration.historySize = historySize
        configuration.handshakeTimeout = try seconds(handshakeTimeout, "--handshake-timeout")
        configuration.idlePingInterval = try seconds(idlePingInterval, "--idle-ping-interval")
        configuration.idleTimeout = try seconds(idleTimeout, "--idle-timeout")
        configuration.maxMemory = maxMemory?.bytes ?? (tlsCert == nil ? 512 << 20 : 1 << 30)
        configuration.slowConsumerTimeout = try seconds(slowConsumerTimeout, "--slow-consumer-timeout")
        configuration.drainTimeout = try seconds(drainTimeout, "--drain-timeout")
        configuration.motd = motd
        configuration.password = try password()
        configuration.passwordAttempts = passwordAttempts
        configuration.passwordLockout = try seconds(passwordLockout, "--password-lockout")
        return configuration
    }

    private func seconds(_ value: Double, _ flag: String) throws -> Duration {
        guard value > 0, value.isFinite else { throw ValidationError("\(flag) must be a positive number of seconds") }
        return .milliseconds(Int64(value * 1000))
    }

    private func password() throws -> String? {
        if let passwordFile {
            do {
                return try PasswordFile.firstLine(of: passwordFile)
            } catch {
                throw ValidationError("cannot read the password file \(passwordFile): \(error)")
            }
        }
        return getenv("CHAT_SERVER_PASSWORD").map { String(cString: $0) }
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}

extension Durability: ExpressibleByArgument {}

extension CommitPlacement: ExpressibleByArgument {}

/// Caps glibc's malloc arenas at `count` (`mallopt(M_ARENA_MAX, count)`), found through `dlsym`:
/// Swift's Glibc module does not import `malloc.h`.
private func limitMallocArenas(to count: Int32) {
    typealias MallOpt = @convention(c) (Int32, Int32) -> Int32
    // RTLD_DEFAULT (a null handle): the process's own symbols.
    guard let symbol = dlsym(nil, "mallopt") else { return }
    let arenaMax: Int32 = -8  // M_ARENA_MAX in malloc.h
    _ = unsafeBitCast(symbol, to: MallOpt.self)(arenaMax, count)
}

/// What the server does on a signal: shuts `server` down on SIGINT or SIGTERM and calls `stopped`
/// when it has; reloads on SIGHUP (`ConfigReloader`: the config file's live settings, the TLS
/// files), telling systemd it is reloading meanwhile.
///
/// Nonisolated on purpose: a handler closure formed in a main-actor context would be inferred
/// main-actor isolated and trap when Dispatch runs it on another queue.
private func signalHandlers(
    server: ChatServer, reloader: ConfigReloader, logger: Logger, notifier: SystemdNotifier?,
    stopped: @escaping @Sendable () -> Void
) -> ServerSignals.Handlers {
    ServerSignals.Handlers(
        stop: { name in
            logger.info("shutting down", metadata: ["signal": "\(name)"])
            notifier?.notify("STOPPING=1\nSTATUS=shutting down (\(name))")
            server.shutdown(reason: "the server is shutting down (\(name))", completion: stopped)
        },
        reload: {
            logger.info("reloading", metadata: ["signal": "SIGHUP"])
            notifier?.reloading()
            reloader.reload(server)
            notifier?.notify("READY=1")
        })
}

/// Checks every second that `directory` is still the one at its path; when it is not (deleted,
/// replaced), logs why and shuts the server down, then calls `lost`. Nothing is written there
/// meanwhile that could reach a new directory at the path: the store makes its files through the
/// locked directory itself (`DataDirectory.anchoredPath`). Nonisolated, as the signal handlers are.
private func watchDataDirectory(
    _ directory: DataDirectory, server: ChatServer, logger: Logger, notifier: SystemdNotifier?,
    lost: @escaping @Sendable () -> Void
) -> DispatchSourceTimer {
    let timer = DispatchSource.makeTimerSource(queue: .global())
    let reported = Locked(false)
    timer.schedule(deadline: .now() + .seconds(1), repeating: .seconds(1))
    timer.setEventHandler { @Sendable in
        guard let problem = directory.problem(), reported.withLock({ done in defer { done = true }; return !done }) else { return }
        logger.critical(
            "the data directory is gone: shutting down without writing to whatever is at its path now",
            metadata: ["storage.error": "\(problem)"])
        notifier?.notify("STOPPING=1\nSTATUS=data directory lost: \(problem)")
        server.shutdown(reason: "the server lost its data directory", completion: lost)
    }
    timer.activate()
    return timer
}

/// Bootstraps swift-metrics with swift-prometheus's registry (once: the process exports through
/// one backend) and serves it with the status page on `address`.
///
/// The histograms get buckets sized for what they measure: a commit on the loop takes tens of
/// microseconds, one on the writer thread with `--fsync always` milliseconds; a Redis round trip
/// on loopback a hundred microseconds. Prometheus's default buckets start at 5 ms and would put
/// nearly all of them in the first.
private func startMetrics(at address: MetricsAddress, server: ChatServer) throws(SocketError) -> MetricsEndpoint {
    let registry = PrometheusCollectorRegistry()
    var factory = PrometheusMetricsFactory(registry: registry)
    let latency: [Duration] = [
        .microseconds(25), .microseconds(50), .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1),
        .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
        .milliseconds(250), .seconds(1),
    ]
    factory.durationHistogramBuckets["chat_storage_commit_seconds"] = latency
    factory.durationHistogramBuckets["chat_cluster_redis_round_trip_seconds"] = latency
    factory.valueHistogramBuckets["chat_storage_commit_events"] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]
    MetricsSystem.bootstrap(factory)
    let view = OperatorView(server: server) { registry.emitToBuffer() }
    let endpoint = try MetricsEndpoint(host: address.host, port: address.port) { head, respond in view.answer(head, respond: respond) }
    endpoint.start()
    return endpoint
}

/// `--metrics`'s value: `HOST:PORT`, `[IPv6]:PORT`.
struct MetricsAddress: ExpressibleByArgument, CustomStringConvertible, Sendable {
    var host: String
    var port: Int

    init?(argument: String) {
        guard let colon = argument.lastIndex(of: ":"), let port = Int(argument[argument.index(after: colon)...]),
            (0...65_535).contains(port)
        else { return nil }
        var host = String(argument[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { return nil }
        self.host = host
        self.port = port
    }

    var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// Reads one page from a metrics port with a plain blocking socket (5 s at most): all that
/// `--status` needs, without an HTTP client library.
enum StatusClient {
    /// The status and body of `GET path` from `host:port`, or nil if it cannot be had.
    static func fetch(host: String, port: Int, path: String) -> (status: Int, body: String)? {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var found: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &found) == 0, let address = found else { return nil }
        defer { freeaddrinfo(found) }
        let descriptor = socket(address.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard connect(descriptor, address.pointee.ai_addr, address.pointee.ai_addrlen) == 0 else { return nil }
        let request = Array("GET \(path) HTTP/1.1\r\nHost: \(host)\r\nConnection: close\r\n\r\n".utf8)
        guard request.withUnsafeBytes({ send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == request.count else {
            return nil
        }
        var response: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while response.count < 1 << 20 {
            let count = chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            response += chunk[0..<count]
        }
        let separator = Array("\r\n\r\n".utf8)
        let prefix = Array("HTTP/1.1 ".utf8)
        guard response.starts(with: prefix), response.count >= prefix.count + 3,
            let status = Int(String(decoding: response[prefix.count..<(prefix.count + 3)], as: UTF8.self)),
            let end = response.indices.first(where: { response[$0...].starts(with: separator) })
        else { return nil }
        return (status, String(decoding: response[(end + separator.count)...], as: UTF8.self))
    }
}

/// Writes to standard error without Foundation.
enum StandardError {
    /// Writes `text` to descriptor 2.
    static func write(_ text: String) {
        var bytes = Array(text.utf8)
        _ = bytes.withUnsafeMutableBytes { Glibc.write(2, $0.baseAddress, $0.count) }
    }
}

/// A size in bytes as people write it: `536870912`, `512M`, `1G`, `64K` (binary units).
struct ByteSize: ExpressibleByArgument, Sendable {
    var bytes: Int

    init(bytes: Int) { self.bytes = bytes }

    init?(argument: String) {
        let units: [Character: Int] = ["K": 10, "M": 20, "G": 30]
        var digits = Substring(argument.uppercased())
        if digits.hasSuffix("IB") { digits = digits.dropLast(2) } else if digits.hasSuffix("B") { digits = digits.dropLast() }
        var shift = 0
        if let last = digits.last, let unit = units[last] {
            shift = unit
            digits = digits.dropLast()
        }
        guard let value = Int(digits), value >= 0, value <= Int.max >> shift else { return nil }
        bytes = value << shift
    }

    var defaultValueDescription: String { bytes >= 1 << 30 && bytes % (1 << 30) == 0 ? "\(bytes >> 30)G" : "\(bytes >> 20)M" }
}

/// A length of time as people write it: `30d`, `12h`, `15m`, `90s`, `0.5s`; `0` for none.
struct TimeSpan: ExpressibleByArgument, Sendable {
    var milliseconds: UInt64

    init(milliseconds: UInt64) { self.milliseconds = milliseconds }

    init?(argument: String) {
        if argument == "0" {
            milliseconds = 0
            return
        }
        let units: [Character: Double] = ["s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000]
        guard let last = argument.last, let unit = units[last], let value = Double(argument.dropLast()), value >= 0,
            value * unit < 1e18
        else { return nil }
        milliseconds = UInt64(value * unit)
    }

    var defaultValueDescription: String {
        let units: [(String, UInt64)] = [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)]
        guard milliseconds > 0 else { return "0" }
        let (suffix, size) = units.first { milliseconds % $0.1 == 0 } ?? ("s", 1_000)
        return size == 1_000 && milliseconds % 1_000 != 0 ? "\(Double(milliseconds) / 1_000)s" : "\(milliseconds / size)\(suffix)"
    }
}
