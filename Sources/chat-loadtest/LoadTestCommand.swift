import ArgumentParser
import ChatLoadTest
import Foundation
import SocketCore
import SocketTLS

/// Measures how many clients and messages a chat server on this machine takes, how fast messages
/// arrive, and that none are lost: the chat system's redis-benchmark.
@main
struct LoadTestCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chat-loadtest",
        abstract: "Load-test a chat server on this machine and check that no message is lost.",
        discussion: """
            Opens --clients connections (at --connect-rate per second), spreads them over --rooms \
            rooms and joins them. Then the first --senders clients send: --rate messages per second \
            in all (open loop: latency counts from each message's scheduled time), or, without \
            --rate, as fast as the server takes them with --window messages in flight per sender. \
            Sending stops after --messages messages or --duration seconds, whichever comes first.

            Every member of a room must receive every message sent to the room exactly once and in \
            order. The run fails (exit status 1) if any delivery is lost, duplicated, reordered or \
            unexpected, or if a client fails to join or is disconnected.

            Only loopback targets are accepted. Start a server first, for example:
              chat-server --port 7000 &
              chat-loadtest --port 7000 --clients 50 --senders 5 --server-pid $!
            Against the nodes of a cluster, name each with --server (client i connects to the \
            (i mod n)-th, so every room has members on every node) and each process with \
            --server-pid:
              chat-loadtest --server 127.0.0.1:7001 --server 127.0.0.1:7002 --server-pid 4242 --server-pid 4243
            With several servers the latency is also reported split: deliveries whose sender used \
            the receiver's node, and deliveries that crossed nodes.
            Scripts/loadtest.sh builds both, runs a standard matrix and prints a table.
            --plot FILE.svg draws the run's latency by percentile (HdrHistogram's percentile plot), \
            beside any runs saved with --hgrm and named with --plot-with; --plot-only draws those \
            alone, without a load test:
              chat-loadtest --plot-only --plot runs.svg --plot-with before=a.hgrm --plot-with after=b.hgrm
            """)

    @Option(help: "The server's address: 127.0.0.1, ::1 or localhost.")
    var host = "127.0.0.1"

    @Option(help: "The server's port.")
    var port = 7000

    @Option(name: .customLong("server"), help: ArgumentHelp(
        "A server to spread the clients over, instead of --host and --port; repeat it for each node of a cluster.",
        valueName: "HOST:PORT"))
    var servers: [String] = []

    @Option(help: "Clients to connect (1...20000; each needs a file descriptor here and in the server).")
    var clients = 50

    @Option(help: "Rooms the clients are spread over (client i joins room i mod rooms).")
    var rooms = 1

    @Option(help: "How many of the clients send (spread over the rooms like the others).")
    var senders = 5

    @Option(help: "Messages per second in all, spread evenly over the senders (open loop). Without it: as fast as the server allows.")
    var rate: Int?

    @Option(help: "Maximum-rate runs: messages each sender keeps in flight (sent, echo not back yet).")
    var window = 64

    @Option(help: "Stop after this many messages in all (at most 100000000).")
    var messages = 1_000_000

    @Option(help: "Stop sending after this many seconds (at most 600).")
    var duration = 10.0

    @Option(name: .customLong("connect-rate"), help: "New connections per second while ramping up.")
    var connectRate = 2_000

    @Option(help: "Bytes of text per message; the payload is padded up to it (0: as short as possible, about 25 bytes).")
    var size = 0

    @Option(help: "I/O threads (serial queues) the clients are spread over.")
    var threads = 2

    @Option(name: .customLong("connect-timeout"), help: "Seconds allowed for all clients to connect and join.")
    var connectTimeout = 60.0

    @Option(name: .customLong("drain-timeout"), help: "After sending, seconds without a delivery before the missing ones count as lost.")
    var drainTimeout = 5.0

    @Option(name: .customLong("server-pid"), help: ArgumentHelp(
        "A server process whose CPU time and memory to report (from /proc); repeat it for several, which are summed.",
        valueName: "PID"))
    var serverPIDs: [Int32] = []

    @Flag(help: "Print one JSON line with the result instead of the report.")
    var json = false

    @Option(help: "Write the latency distribution to this file in HdrHistogram's .hgrm format (milliseconds).")
    var hgrm: String?

    @Option(help: ArgumentHelp(
        "Draw the latency by percentile as an SVG picture in this file: this run, then every --plot-with run.",
        valueName: "FILE.svg"))
    var plot: String?
    @Option(name: .customLong("plot-with"), help: ArgumentHelp(
        "A saved run to draw beside this one, as LABEL=FILE with FILE an --hgrm file; repeat it for several.",
        valueName: "LABEL=FILE"))
    var plotWith: [String] = []
    @Flag(name: .customLong("plot-only"), help: "Run no load test: only draw the --plot-with runs into --plot.")
    var plotOnly = false
    @Option(name: .customLong("plot-label"), help: "What the picture calls this run (default: the --table-row name, else \"this run\").")
    var plotLabel: String?
    @Option(name: .customLong("table-row"), help: ArgumentHelp(
        "Print a Markdown table header and one row for this run, named NAME, instead of the report.",
        valueName: "NAME"))
    var tableRow: String?

    @Flag(name: .customLong("no-progress"), help: "Do not show the progress line, even on a terminal.")
    var noProgress = false

    @Flag(help: "Speak TLS, verifying the server's certificate against the system's CAs (see --tls-ca).")
    var tls = false

    @Option(help: "Speak TLS and trust only the CA certificates in this PEM file (e.g. Scripts/dev-cert.sh's ca.pem).")
    var tlsCa: String?

    @Flag(help: "Speak TLS without checking the server's certificate (testing only).")
    var tlsInsecure = false

    /// Whose certificates the clients accept, or nil for plain text.
    var tlsTrust: TLSTrust? {
        if tlsInsecure { return .insecureAcceptAnything }
        if let tlsCa { return .certificateAuthorities(file: tlsCa) }
        return tls ? .systemDefault : nil
    }

    var loadConfiguration: LoadTestConfiguration {
        var configuration = LoadTestConfiguration()
        configuration.servers =
            servers.isEmpty ? [ServerAddress(host: host, port: port)] : servers.map { (try? ServerAddress(parsing: $0)) ?? ServerAddress(host: $0, port: 0) }
        configuration.clients = clients
        configuration.rooms = rooms
        configuration.senders = senders
        configuration.pacing = rate.map { .fixedRate(messagesPerSecond: $0) } ?? .maximum(window: window)
        configuration.messages = messages
        configuration.duration = duration
        configuration.connectRate = connectRate
        configuration.messageSize = size
        configuration.threads = threads
        configuration.connectTimeout = connectTimeout
        configuration.drainTimeout = drainTimeout
        configuration.serverPIDs = serverPIDs
        return configuration
    }

    func validate() throws {
        if plotOnly || !plotWith.isEmpty || plotLabel != nil, plot == nil { throw ValidationError("--plot-only, --plot-with and --plot-label need --plot FILE.svg") }
        if plotOnly, plotWith.isEmpty { throw ValidationError("--plot-only draws the --plot-with runs: name at least one") }
        _ = try savedRuns()
        for server in servers {
            do {
                _ = try ServerAddress(parsing: server)
            } catch {
                throw ValidationError("--server \(server): \(error)")
            }
        }
        let problems = loadConfiguration.problems
        if !problems.isEmpty { throw ValidationError(problems.joined(separator: "\n")) }
    }

    /// The --plot-with runs, read and parsed; throws a message naming the bad one.
    func savedRuns() throws -> [LatencyPlot.Series] {
        try plotWith.map { argument in
            guard let equals = argument.firstIndex(of: "="), equals != argument.startIndex else {
                throw ValidationError("--plot-with \(argument): expected LABEL=FILE")
            }
            let path = String(argument[argument.index(after: equals)...])
            guard let text = try? String(contentsOfFile: path, encoding: .utf8),
                let series = LatencyPlot.Series(label: String(argument[..<equals]), hgrm: text)
            else { throw ValidationError("--plot-with \(argument): \(path) is not a readable .hgrm file") }
            return series
        }
    }

    /// Writes the picture of `series` into --plot.
    func drawPlot(_ series: [LatencyPlot.Series]) throws {
        guard let plot else { return }
        do {
            try LatencyPlot.svg(series).write(toFile: plot, atomically: true, encoding: .utf8)
        } catch {
            throw ValidationError("cannot write --plot \(plot): \(error.localizedDescription)")
        }
    }

    func run() async throws {
        if plotOnly { return try drawPlot(try savedRuns()) }
        var configuration = loadConfiguration
        do {
            configuration.tls = try tlsTrust.map { trust throws(TLSError) in try TLSContext(.client(trust: trust)) }
        } catch {
            throw ValidationError("\(error)")
        }
        if tlsInsecure { FileHandle.standardError.write(Data("WARNING: --tls-insecure: the server's certificate is not checked\n".utf8)) }
        let test = try LoadTest(configuration: configuration)
        let showProgress = !noProgress && isatty(STDERR_FILENO) == 1
        let result = await test.run(progress: showProgress ? Self.printProgress : nil)
        if showProgress { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
        if let hgrm {
            do {
                try result.hgrm().write(toFile: hgrm, atomically: true, encoding: .utf8)
            } catch {
                throw ValidationError("cannot write --hgrm \(hgrm): \(error.localizedDescription)")
            }
        }
        if plot != nil, let series = LatencyPlot.Series(label: plotLabel ?? tableRow ?? "this run", hgrm: result.hgrm()) {
            try drawPlot([series] + (try savedRuns()))
        }
        if let tableRow {
            print(result.tableRow(name: tableRow))
        } else {
            print(json ? result.jsonLine() : result.textReport())
        }
        if !result.passed { throw ExitCode(1) }
    }

    /// Rewrites the progress line on standard error.
    @Sendable static func printProgress(_ progress: LoadProgress) {
        let line = "\r\u{1B}[K\(progress.phase): \(progress.joined)/\(progress.clients) joined, "
            + "\(progress.sent) sent, \(progress.delivered) delivered, "
            + "\(Int(progress.deliveriesPerSecond)) deliveries/s, p99 \(Int(progress.p99Microseconds)) µs"
        FileHandle.standardError.write(Data(line.utf8))
    }
}
