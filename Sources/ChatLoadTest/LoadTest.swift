import ChatProtocol
import Dispatch
import Glibc
import Histogram
import SocketCore

/// A configuration that cannot run, with every reason.
public struct LoadTestConfigurationError: Error, CustomStringConvertible {
    /// One sentence per problem.
    public var problems: [String]

    /// The problems, one per line.
    public var description: String { problems.joined(separator: "\n") }
}

/// What a run looks like while it is under way; handed to the progress callback once a second.
public struct LoadProgress: Sendable {
    /// The phase: `connecting`, `sending` or `draining`.
    public var phase: String
    /// Clients that have joined their room.
    public var joined: Int
    /// Clients in the run.
    public var clients: Int
    /// Messages sent so far.
    public var sent: Int
    /// Deliveries received so far.
    public var delivered: Int
    /// Deliveries per second over the last interval.
    public var deliveriesPerSecond: Double
    /// The 99th percentile latency so far, in microseconds.
    public var p99Microseconds: Double
}

/// One load-test run against a chat server on this machine: connect, join, send, account, report.
///
/// The run goes through fixed phases, each bounded in time, so it always ends by itself:
/// 1. **connecting**: clients connect at `connectRate` and join their rooms, within `connectTimeout`;
/// 2. **sending**: senders send until their quota (`messages` in all) or `duration` is reached;
/// 3. **draining**: until every expected delivery arrived, or none arrived for `drainTimeout`;
/// 4. **closing**: every connection is closed (at most 10 s to see them all closed).
///
/// All clients join before anyone sends, so each member of a room expects every message sent
/// to it; `LoadTestResult.deliveries` says how that went.
public final class LoadTest: Sendable {
    /// The configuration, checked.
    public let configuration: LoadTestConfiguration

    /// Checks `configuration`; throws when it has problems.
    public init(configuration: LoadTestConfiguration) throws(LoadTestConfigurationError) {
        let problems = configuration.problems
        guard problems.isEmpty else { throw LoadTestConfigurationError(problems: problems) }
        self.configuration = configuration
    }

    /// Runs the test and returns its result; `progress`, if given, is called about once a second.
    public func run(progress: (@Sendable (LoadProgress) -> Void)? = nil) async -> LoadTestResult {
        await withCheckedContinuation { continuation in
            let run = LoadRun(configuration: configuration, progress: progress) { continuation.resume(returning: $0) }
            run.start()
        }
    }
}

/// The controller of one run: a 10 ms tick on its own queue that moves the run through its phases.
///
/// Thread safety: every mutable property is confined to `queue`. It reads the workers' progress
/// from `LoadCounters` and reaches into a worker only through the worker's queue (`sync` from
/// here is safe: workers never wait on this queue).
private final class LoadRun: @unchecked Sendable {
    private enum Phase {
        case connecting, sending, draining, closing, done
    }

    private static let closeTimeout = 10.0
    private static let drainLimit = 60.0

    let configuration: LoadTestConfiguration
    let progress: (@Sendable (LoadProgress) -> Void)?
    let completion: @Sendable (LoadTestResult) -> Void

    private let queue = DispatchQueue(label: "ChatLoadTest.control")
    private let counters = LoadCounters()
    private let workers: [LoadWorker]
    private let clients: [LoadClient]
    private var timer: DispatchSourceTimer?

    private var phase = Phase.connecting
    private var phaseStart = MonotonicClock.now()
    private var started = 0
    private var joinedSenders = 0
    private var lastProgressNanos: UInt64 = 0
    private var lastProgressDelivered = 0
    private var lastDelivered = 0
    private var lastDeliveryChange: UInt64 = 0

    // Measurements taken at phase changes.
    private var serverBeforeConnect: ProcessSample?
    private var serverIdle: ProcessSample?
    private var serverAtSend: ProcessSample?
    private var serverAtEnd: ProcessSample?
    private var selfAtSend = ProcessSample.current()
    private var selfAtEnd = ProcessSample.current()
    private var joinedAtSend = 0
    /// Seconds from the first connect to every client joined (TLS handshakes included).
    private var connectSeconds = 0.0
    private var sendStart: UInt64 = 0
    private var sendEnd: UInt64 = 0
    private var drainEnd: UInt64 = 0

    init(configuration: LoadTestConfiguration, progress: (@Sendable (LoadProgress) -> Void)?,
         completion: @escaping @Sendable (LoadTestResult) -> Void) {
        self.configuration = configuration
        self.progress = progress
        self.completion = completion
        let counters = self.counters
        workers = (0..<configuration.threads).map {
            LoadWorker(io: IOQueue(label: "ChatLoadTest.io.\($0)"), configuration: configuration, counters: counters)
        }
        // A tag from the process ID and the clock keeps concurrent runs on one server apart.
        let tag = String((UInt64(getpid()) &* 1_000_003 &+ MonotonicClock.now() / 1_000) % 46_656, radix: 36)
        let prefix = configuration.namePrefix + tag
        clients = (0..<configuration.clients).map { index in
            let room = configuration.room(ofClient: index)
            let ordinal = index < configuration.senders ? index : nil
            return LoadClient(
                index: index, nick: "\(prefix)x\(index)", roomIndex: room, roomName: "\(prefix)-\(room)",
                senderOrdinal: ordinal, quota: ordinal.map { configuration.quota(ofSender: $0) } ?? 0,
                senderCount: configuration.senders)
        }
    }

    func start() {
        queue.async { [self] in
            serverBeforeConnect = ProcessSample.read(pids: configuration.serverPIDs)
            phaseStart = MonotonicClock.now()
            // The timer holds the run until `finish` cancels it.
            timer = queue.startRepeatingTimer(every: .milliseconds(10), firstAfter: .nanoseconds(0), leeway: .milliseconds(2)) {
                [self] in tick()
            }
        }
    }

    private func seconds(since nanos: UInt64, _ now: UInt64) -> Double { Double(now &- nanos) / 1e9 }

    private func worker(of client: LoadClient) -> LoadWorker { workers[client.index % workers.count] }

    private func tick() {
        let now = MonotonicClock.now()
        switch phase {
        case .connecting: connecting(now)
        case .sending: sending(now)
        case .draining: draining(now)
        case .closing: closing(now)
        case .done: break
        }
        if phase == .sending || phase == .draining || phase == .connecting, now &- lastProgressNanos >= 1_000_000_000 {
            report(now)
        }
    }

    private func connecting(_ now: UInt64) {
        let elapsed = seconds(since: phaseStart, now)
        let allowed = min(clients.count, Int(elapsed * Double(configuration.connectRate)) + 1)
        while started < allowed {
            let client = clients[started]
            let worker = worker(of: client)
            worker.io.queue.async { worker.connect(client) }
            started += 1
        }
        let settled = counters.joined.load(ordering: .relaxed) + counters.failed.load(ordering: .relaxed)
        guard settled >= clients.count || elapsed > configuration.connectTimeout else { return }
        // Everyone has joined (or will not): count the members and start the senders.
        serverIdle = ProcessSample.read(pids: configuration.serverPIDs)
        var members = Array(repeating: 0, count: configuration.rooms)
        for worker in workers {
            for (room, count) in worker.io.queue.sync(execute: { worker.joinedPerRoom() }).enumerated() { members[room] += count }
        }
        joinedAtSend = members.reduce(0, +)
        connectSeconds = seconds(since: phaseStart, now)
        let memberCounts = members
        joinedSenders = clients.prefix(configuration.senders).count { client in
            worker(of: client).io.queue.sync { client.phase == .joined }
        }
        serverAtSend = ProcessSample.read(pids: configuration.serverPIDs)
        selfAtSend = ProcessSample.current()
        sendStart = MonotonicClock.now()
        let startNanos = sendStart
        for worker in workers {
            worker.io.queue.async { worker.startSending(memberCounts: memberCounts, startNanos: startNanos) }
        }
        enter(.sending, now)
    }

    private func sending(_ now: UInt64) {
        let done = counters.sendersDone.load(ordering: .relaxed) >= joinedSenders
        guard done || seconds(since: sendStart, now) >= configuration.duration else { return }
        for worker in workers { worker.io.queue.async { worker.stopSending() } }
        sendEnd = now
        lastDelivered = counters.delivered.load(ordering: .relaxed)
        lastDeliveryChange = now
        enter(.draining, now)
    }

    private func draining(_ now: UInt64) {
        let delivered = counters.delivered.load(ordering: .relaxed)
        if delivered != lastDelivered {
            lastDelivered = delivered
            lastDeliveryChange = now
        }
        let complete = delivered >= counters.expected.load(ordering: .relaxed)
        let stalled = seconds(since: lastDeliveryChange, now) >= configuration.drainTimeout
        guard complete || stalled || seconds(since: phaseStart, now) >= Self.drainLimit else { return }
        drainEnd = now
        serverAtEnd = ProcessSample.read(pids: configuration.serverPIDs)
        selfAtEnd = ProcessSample.current()
        for worker in workers { worker.io.queue.async { worker.closeAll() } }
        enter(.closing, now)
    }

    private func closing(_ now: UInt64) {
        let closed = counters.finished.load(ordering: .relaxed) >= started
        guard closed || seconds(since: phaseStart, now) >= Self.closeTimeout else { return }
        enter(.done, now)
        timer?.cancel()
        timer = nil
        completion(result(allClosed: closed))
    }

    private func enter(_ next: Phase, _ now: UInt64) {
        phase = next
        phaseStart = now
    }

    private func report(_ now: UInt64) {
        guard let progress else { return }
        let delivered = counters.delivered.load(ordering: .relaxed)
        let interval = lastProgressNanos == 0 ? 0 : seconds(since: lastProgressNanos, now)
        var latency = LoadWorker.makeHistogram()
        if phase != .connecting {
            for worker in workers {
                // Copied on the worker's queue, merged off it.
                let (same, other) = worker.io.queue.sync { (worker.sameServerLatency, worker.otherServerLatency) }
                latency.add(same)
                latency.add(other)
            }
        }
        progress(LoadProgress(
            phase: "\(phase)", joined: counters.joined.load(ordering: .relaxed), clients: clients.count,
            sent: counters.sent.load(ordering: .relaxed), delivered: delivered,
            deliveriesPerSecond: interval > 0 ? Double(delivered - lastProgressDelivered) / interval : 0,
            p99Microseconds: latency.totalCount > 0 ? Double(latency.valueAtPercentile(99)) / 1_000 : 0))
        lastProgressNanos = now
        lastProgressDelivered = delivered
    }

    // MARK: The result

    private func result(allClosed: Bool) -> LoadTestResult {
        var sentBySender = Array(repeating: UInt64(0), count: configuration.senders)
        var refused: UInt64 = 0
        var sameServerLatency = LoadWorker.makeHistogram()
        var otherServerLatency = LoadWorker.makeHistogram()
        var lastDelivery = sendStart
        var sayBytes = 0
        var messageBytes = 0
        var problem: String?
        for worker in workers {
            worker.io.queue.sync {
                for totals in worker.senderTotals() {
                    sentBySender[totals.ordinal] = totals.sent
                    refused += totals.refused
                }
                sameServerLatency.add(worker.sameServerLatency)
                otherServerLatency.add(worker.otherServerLatency)
                lastDelivery = max(lastDelivery, worker.lastDeliveryNanos)
                sayBytes += worker.sayBytes
                messageBytes += worker.messageBytes
                problem = problem ?? worker.firstProblem
            }
        }
        var tally = DeliveryTally()
        let rooms = configuration.rooms
        for worker in workers {
            tally.add(worker.io.queue.sync { worker.tally(sentBySender: sentBySender, roomOfSender: { $0 % rooms }) })
        }
        let sent = sentBySender.reduce(0, +)
        let sendSeconds = max(seconds(since: sendStart, sendEnd), 1e-9)
        let deliverySeconds = max(seconds(since: sendStart, lastDelivery), 1e-9)
        let measuredSeconds = max(seconds(since: sendStart, drainEnd), 1e-9)

        var server: ServerUsage?
        if let atSend = serverAtSend, let atEnd = serverAtEnd {
            let idleGrowth = (serverIdle?.residentBytes ?? 0) - (serverBeforeConnect?.residentBytes ?? 0)
            server = ServerUsage(
                cpuSeconds: atEnd.cpuSeconds - atSend.cpuSeconds,
                cpuPercent: 100 * (atEnd.cpuSeconds - atSend.cpuSeconds) / measuredSeconds,
                residentBytes: atEnd.residentBytes, peakResidentBytes: atEnd.peakResidentBytes,
                bytesPerConnection: joinedAtSend > 0 && serverBeforeConnect != nil ? Double(idleGrowth) / Double(joinedAtSend) : nil)
        }
        let generatorCPU = selfAtEnd.cpuSeconds - selfAtSend.cpuSeconds
        let sampleText = LoadPayload(sender: 0, seq: sent / UInt64(configuration.senders), sendNanos: sendStart)
            .text(paddedTo: configuration.messageSize)
        let wire = WireUsage(
            sent: sent, delivered: tally.delivered, sayBytes: sayBytes, messageBytes: messageBytes,
            sampleRoom: clients[0].roomName, sampleSender: clients[0].nick, sampleText: sampleText)

        let failed = counters.failed.load(ordering: .relaxed)
        let disconnected = counters.disconnected.load(ordering: .relaxed)
        var latency = sameServerLatency
        latency.add(otherServerLatency)
        let summary = LatencySummary(latency)
        let split = configuration.servers.count > 1
            ? ServerLatencySplit(sameServer: LatencySummary(sameServerLatency), otherServer: LatencySummary(otherServerLatency)) : nil
        return LoadTestResult(
            clients: configuration.clients, rooms: configuration.rooms, senders: configuration.senders,
            pacing: configuration.pacing.description, messageSize: sampleText.utf8.count,
            joined: joinedAtSend, failedClients: failed, disconnectedClients: disconnected,
            tls: configuration.tls != nil, connectSeconds: connectSeconds,
            allClosed: allClosed, firstProblem: problem,
            sent: sent, refused: refused, deliveries: tally,
            sendSeconds: sendSeconds, deliverySeconds: deliverySeconds,
            messagesPerSecond: Double(sent) / sendSeconds,
            deliveriesPerSecond: Double(tally.delivered) / deliverySeconds,
            latency: summary, latencyByServer: split, wire: wire, server: server,
            loadGenerator: GeneratorUsage(cpuSeconds: generatorCPU, cpuPercent: 100 * generatorCPU / measuredSeconds),
            histogram: latency)
    }
}
