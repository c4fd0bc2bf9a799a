import ChatProtocol
import Dispatch
import Histogram
import SocketCore
import SocketTLS
import Synchronization

// MARK: Shared counters

/// Run-wide counts that the controller reads while the workers update them.
///
/// Workers add once per received chunk or sent batch, not once per message, so two workers and
/// the controller touch these a few thousand times a second, not millions.
final class LoadCounters: Sendable {
    /// Clients whose `join` was acknowledged.
    let joined = Atomic<Int>(0)
    /// Clients that never joined: connect failed, refused, or closed first.
    let failed = Atomic<Int>(0)
    /// Joined clients that the server disconnected before the run closed them.
    let disconnected = Atomic<Int>(0)
    /// Clients whose life is over (connect failed or channel closed).
    let finished = Atomic<Int>(0)
    /// Messages sent.
    let sent = Atomic<Int>(0)
    /// Deliveries the sent messages should cause (members of the sender's room per message).
    let expected = Atomic<Int>(0)
    /// Deliveries received, each message counted once per receiver.
    let delivered = Atomic<Int>(0)
    /// Senders that have sent their whole quota.
    let sendersDone = Atomic<Int>(0)
}

// MARK: One client

/// One simulated chat client: its connection, its place in the run, and its ledger.
///
/// Confined to its worker's queue: every property is read and written there only.
final class LoadClient: @unchecked Sendable {
    enum Phase { case connecting, handshaking, joining, joined, ended }

    /// The client's number, 0 ..< clients.
    let index: Int
    /// The nick asked for in `hello`; replaced by the one `welcome` grants.
    var nick: String
    /// The room's number and wire name.
    let roomIndex: Int
    let roomName: String
    /// The sender ordinal, or nil for a client that only receives.
    let senderOrdinal: Int?

    var phase = Phase.connecting
    var channel: SocketChannel?
    /// Set when sending starts: whether the client is in its room then, so it expects deliveries.
    var isMember = false
    /// Why the client ended, when it was not the run closing it.
    var endReason: String?

    var scanner = MessageScanner()
    var ledger: DeliveryLedger

    /// Sender state: messages allowed, the next sequence number, the unacknowledged messages and
    /// the messages the server refused.
    let quota: UInt64
    var nextSeq: UInt64 = 0
    var inFlight = 0
    var refused: UInt64 = 0
    /// Fixed rate: when message 0 is due, and the time between messages, in monotonic ns.
    var scheduleStart: UInt64 = 0
    var scheduleInterval: UInt64 = 0

    init(index: Int, nick: String, roomIndex: Int, roomName: String, senderOrdinal: Int?, quota: UInt64, senderCount: Int) {
        self.index = index
        self.nick = nick
        self.roomIndex = roomIndex
        self.roomName = roomName
        self.senderOrdinal = senderOrdinal
        self.quota = quota
        self.ledger = DeliveryLedger(senderCount: senderCount)
    }
}

// MARK: Worker

/// A share of the clients, all driven by one serial I/O queue: connecting, handshaking, joining,
/// sending, receiving and accounting, with callbacks straight from `SocketChannel`.
///
/// Callbacks instead of an async sequence per client because a receiver handles a whole read of
/// many frames in one call: at millions of deliveries a second a task switch per frame would cost
/// more than the server's work per delivery. Thread safety: every mutable property is confined
/// to `io.queue`; the controller talks to a worker only through `io.queue`.
final class LoadWorker: @unchecked Sendable {
    /// Above this many unsent bytes a fixed-rate sender holds new messages back; they leave later,
    /// still stamped with their scheduled time, so the stall shows as latency, not lost load.
    static let outboundLimit = 4 << 20
    /// The most messages one fixed-rate sender writes per tick, so one late sender cannot hog the queue.
    static let batchLimit = 4096
    /// How often fixed-rate senders are woken. Part of measured latency: a message is stamped
    /// with its scheduled time but can leave up to one tick later.
    static let tick = DispatchTimeInterval.microseconds(200)

    let io: IOQueue
    let configuration: LoadTestConfiguration
    let counters: LoadCounters
    /// `configuration.servers.count`, read once: every delivery needs it to tell a delivery that
    /// crossed servers from one that did not.
    private let serverCount: Int

    var clients: [LoadClient] = []
    private var senders: [LoadClient] = []
    /// Members per room when sending started.
    private var memberCounts: [Int] = []
    private var sending = false
    /// The orderly close of the run has begun: closures are expected now.
    private var closing = false
    private var timer: DispatchSourceTimer?
    private var encoded: [UInt8] = []

    /// Latency of every new delivery whose sender and receiver use the same server, in
    /// nanoseconds (every delivery, with one server).
    var sameServerLatency = LoadWorker.makeHistogram()
    /// Latency of every new delivery whose sender uses another server than its receiver: in
    /// cluster mode, a delivery that crossed nodes.
    var otherServerLatency = LoadWorker.makeHistogram()
    /// When the last new delivery arrived (monotonic ns).
    var lastDeliveryNanos: UInt64 = 0
    /// Bytes of `say` frames written and of load-test `message` frames received.
    var sayBytes = 0
    var messageBytes = 0
    /// The first problem a client of this worker had, for the report.
    var firstProblem: String?

    init(io: IOQueue, configuration: LoadTestConfiguration, counters: LoadCounters) {
        self.io = io
        self.configuration = configuration
        self.counters = counters
        serverCount = configuration.servers.count
    }

    /// A histogram for latencies from 1 ns to an hour at three significant digits.
    static func makeHistogram() -> Histogram<UInt64> {
        Histogram(lowestDiscernibleValue: 1, highestTrackableValue: 3_600_000_000_000, numberOfSignificantValueDigits: .three)
    }

    // MARK: Connecting

    /// Opens `client`'s connection and starts its handshake. On `io.queue`.
    func connect(_ client: LoadClient) {
        clients.append(client)
        if client.senderOrdinal != nil { senders.append(client) }
        let server = configuration.server(ofClient: client.index)
        SocketConnector.connect(
            host: server.host, port: server.port,
            timeout: .seconds(configuration.connectTimeout), queue: io.queue
        ) { [self] result in
            switch result {
            case .success(let socket):
                opened(socket, for: client)
            case .failure(let error):
                end(client, reason: "connect failed: \(error)")
            }
        }
    }

    private func opened(_ socket: Socket, for client: LoadClient) {
        guard !closing, client.phase == .connecting else {
            socket.close()
            return end(client, reason: nil)
        }
        var session: TLSSession?
        if let tls = configuration.tls {
            do {
                session = try tls.makeClientSession(serverName: configuration.server(ofClient: client.index).host, peerLabel: socket.label)
            } catch {
                socket.close()
                return end(client, reason: "\(error)")
            }
        }
        let channel = SocketChannel(socket: socket, queue: io.queue, readBuffer: io.readBuffer, tls: session)
        client.channel = channel
        client.phase = .handshaking
        channel.onBytes = { [unowned self, unowned client] bytes in received(bytes, for: client) }
        channel.onClosed = { [unowned self, unowned client] error in
            end(client, reason: client.endReason ?? error.map { "connection closed: \($0)" } ?? "server closed the connection")
        }
        channel.start()
        // Version 1 is all a load client needs: version 2 changes nothing about room delivery, and
        // its extra replies (limits, roomState, a history page) would only add noise to the byte counts.
        send(.hello(version: 1, nick: client.nick, password: nil), to: client)
    }

    /// Records that `client` is gone, once, and why; `reason` is ignored while the run closes.
    private func end(_ client: LoadClient, reason: String?) {
        guard client.phase != .ended else { return }
        if !closing {
            if client.phase == .joined { counters.disconnected.add(1, ordering: .relaxed) } else { counters.failed.add(1, ordering: .relaxed) }
            if firstProblem == nil, let reason { firstProblem = "\(client.nick): \(reason)" }
        }
        client.phase = .ended
        client.channel = nil
        counters.finished.add(1, ordering: .relaxed)
    }

    /// Closes `client`'s connection because of `reason`.
    private func fail(_ client: LoadClient, _ reason: String) {
        if client.endReason == nil { client.endReason = reason }
        if let channel = client.channel { channel.close() } else { end(client, reason: reason) }
    }

    // MARK: Receiving

    /// Handles one read's worth of bytes: every frame in it, then the sender's next batch.
    private func received(_ bytes: UnsafeRawBufferPointer, for client: LoadClient) {
        let now = MonotonicClock.now()
        var fresh = 0
        do {
            try client.scanner.scan(bytes) { item in
                switch item {
                case .load(let payload, let frameBytes):
                    messageBytes += frameBytes
                    switch client.ledger.record(sender: payload.sender, seq: payload.seq) {
                    case .inOrder, .reordered:
                        fresh += 1
                        let nanos = min(now &- min(now, payload.sendNanos), sameServerLatency.highestTrackableValue)
                        // Client i uses server i mod n, and sender k is client k.
                        if payload.sender % serverCount == client.index % serverCount {
                            sameServerLatency.record(nanos)
                        } else {
                            otherServerLatency.record(nanos)
                        }
                        if payload.sender == client.senderOrdinal { client.inFlight -= 1 }
                    case .duplicate, .foreign:
                        break
                    }
                case .frame(let frame):
                    handle(frame, for: client)
                }
            }
        } catch {
            return fail(client, "undecodable stream from the server: \(error)")
        }
        if fresh > 0 {
            counters.delivered.add(fresh, ordering: .relaxed)
            lastDeliveryNanos = now
            if client.senderOrdinal != nil, case .maximum = configuration.pacing { topUp(client) }
        }
    }

    /// Reacts to a frame other than a load-test message.
    private func handle(_ frame: Frame, for client: LoadClient) {
        switch frame {
        case .welcome(_, let nick, _, _) where client.phase == .handshaking:
            client.nick = nick
            client.phase = .joining
            send(.join(room: client.roomName), to: client)
        case .joined(let room, _, _, let nick) where client.phase == .joining && room == client.roomName && nick == client.nick:
            client.phase = .joined
            counters.joined.add(1, ordering: .relaxed)
        case .error(let code, let fatal, let type, let reason):
            if !fatal, type == .say, client.phase == .joined {
                // Refused messages count as lost too (receivers expect every message sent), but
                // the drain need not wait for them.
                client.refused += 1
                client.inFlight -= 1
                counters.expected.subtract(memberCounts[client.roomIndex], ordering: .relaxed)
                if firstProblem == nil { firstProblem = "\(client.nick): server refused a message: \(reason) (\(code))" }
            } else if fatal || client.phase != .joined {
                fail(client, "server error: \(reason) (\(code))")
            } else if firstProblem == nil {
                firstProblem = "\(client.nick): server error: \(reason) (\(code))"
            }
        case .ping(let token):
            // Idle receivers must answer, or the server disconnects them as dead.
            send(.pong(token: token), to: client)
        default:
            // Others' joins, member lists, topics, history, chatter from outside the run.
            break
        }
    }

    private func send(_ frame: Frame, to client: LoadClient) {
        encoded.removeAll(keepingCapacity: true)
        FrameEncoder.encode(frame, into: &encoded)
        client.channel?.write(ByteChunk(encoded))
    }

    // MARK: Sending

    /// Fixes who is a member: called once, when everyone has joined (or the connect phase timed
    /// out). Returns this worker's members per room.
    func joinedPerRoom() -> [Int] {
        var counts = Array(repeating: 0, count: configuration.rooms)
        for client in clients {
            // Membership is fixed here, before any worker sends: a client that joins later would
            // miss messages that other workers' senders had already sent.
            client.isMember = client.phase == .joined
            if client.isMember { counts[client.roomIndex] += 1 }
        }
        return counts
    }

    /// Starts the senders: `memberCounts` per room, fixed-rate schedules from `startNanos`.
    func startSending(memberCounts: [Int], startNanos: UInt64) {
        self.memberCounts = memberCounts
        // Late joiners would make "expected" ambiguous: the run goes on without them.
        for client in clients where !client.isMember { fail(client, "not joined when sending started") }
        sending = true
        for sender in senders where sender.isMember && sender.quota == 0 { counters.sendersDone.add(1, ordering: .relaxed) }
        switch configuration.pacing {
        case .maximum:
            for sender in senders { topUp(sender) }
        case .fixedRate(let rate):
            let interval = UInt64(1e9 * Double(configuration.senders) / Double(rate))
            for sender in senders {
                sender.scheduleInterval = max(1, interval)
                // Stagger the senders so the aggregate rate is even, not bursts of `senders`.
                sender.scheduleStart = startNanos + interval * UInt64(sender.senderOrdinal!) / UInt64(configuration.senders)
            }
            timer = io.queue.startRepeatingTimer(every: Self.tick, firstAfter: .nanoseconds(0), leeway: .microseconds(50)) {
                [unowned self] in sendDue()
            }
        }
    }

    /// Stops all sending; messages already written still count.
    func stopSending() {
        sending = false
        timer?.cancel()
        timer = nil
    }

    /// Maximum rate: refills `client`'s window.
    private func topUp(_ client: LoadClient) {
        guard case .maximum(let window) = configuration.pacing, client.inFlight < window else { return }
        let count = min(UInt64(window - client.inFlight), client.quota - client.nextSeq)
        let now = MonotonicClock.now()
        write(count, from: client) { _ in now }
        client.inFlight += Int(count)
    }

    /// Fixed rate: writes every message whose scheduled time has come.
    private func sendDue() {
        let now = MonotonicClock.now()
        for client in senders where client.nextSeq < client.quota && now >= client.scheduleStart {
            guard let channel = client.channel, channel.outboundBytes < Self.outboundLimit else { continue }
            let due = min(client.quota, (now - client.scheduleStart) / client.scheduleInterval + 1)
            guard due > client.nextSeq else { continue }
            write(min(due - client.nextSeq, UInt64(Self.batchLimit)), from: client) { seq in
                client.scheduleStart + seq * client.scheduleInterval
            }
        }
    }

    /// Writes `client`'s next `count` messages in one chunk, each stamped `stamp(seq)`.
    private func write(_ count: UInt64, from client: LoadClient, stamp: (UInt64) -> UInt64) {
        guard sending, count > 0, client.phase == .joined, let channel = client.channel, let ordinal = client.senderOrdinal else {
            return
        }
        encoded.removeAll(keepingCapacity: true)
        for _ in 0..<count {
            let payload = LoadPayload(sender: ordinal, seq: client.nextSeq, sendNanos: stamp(client.nextSeq))
            FrameEncoder.encode(.say(room: client.roomName, text: payload.text(paddedTo: configuration.messageSize)), into: &encoded)
            client.nextSeq += 1
        }
        sayBytes += encoded.count
        channel.write(ByteChunk(encoded))
        counters.sent.add(Int(count), ordering: .relaxed)
        counters.expected.add(Int(count) * memberCounts[client.roomIndex], ordering: .relaxed)
        if client.nextSeq == client.quota { counters.sendersDone.add(1, ordering: .relaxed) }
    }

    // MARK: Closing

    /// Closes every connection; each reports to `counters.finished` once closed.
    func closeAll() {
        stopSending()
        closing = true
        for client in clients where client.phase != .ended {
            if let channel = client.channel { channel.close() } else if client.phase != .connecting { end(client, reason: nil) }
        }
    }

    /// Messages sent and refused per sender ordinal, for this worker's senders.
    func senderTotals() -> [(ordinal: Int, sent: UInt64, refused: UInt64)] {
        senders.map { ($0.senderOrdinal!, $0.nextSeq, $0.refused) }
    }

    /// This worker's receivers' accounting: each member expects every message sent in its room.
    func tally(sentBySender: [UInt64], roomOfSender: (Int) -> Int) -> DeliveryTally {
        var tally = DeliveryTally()
        for client in clients where client.isMember {
            tally.add(client.ledger.tally { sender in
                roomOfSender(sender) == client.roomIndex ? sentBySender[sender] : 0
            })
        }
        return tally
    }
}
