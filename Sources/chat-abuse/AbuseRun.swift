import ChatProtocol
import Dispatch
import Foundation
import Glibc
import Histogram
import SocketCore

/// The hostile behaviours `chat-abuse` can play, each from many connections at once.
enum Attack: String, CaseIterable, Sendable {
    /// Pipelines the requests with the biggest answers (history, room lists, member lists) and
    /// never reads.
    case amplification
    /// Pipelines tiny pings (three-byte pongs each) and never reads.
    case pings
    /// Fills many rooms with the largest messages, reading its echoes so it may go on.
    case history
    /// Sends the largest legal bursts into the control client's room.
    case burst
    /// Pings as fast as it can, reading the answers.
    case pingFlood = "ping-flood"
    /// Sends all but the last byte of the largest frame and stalls.
    case slowloris
    /// Connects and disconnects in a loop, over the per-address limit.
    case reconnect
    /// Guesses the password.
    case guessing

    /// What the attack does, for --help.
    var summary: String {
        switch self {
        case .amplification: "pipeline history/list/who requests, never read"
        case .pings: "pipeline pings, never read"
        case .history: "fill many rooms with 16 kB messages"
        case .burst: "legal bursts into the control's room"
        case .pingFlood: "ping as fast as possible, reading"
        case .slowloris: "send a partial largest frame and stall"
        case .reconnect: "connect and close in a loop"
        case .guessing: "guess the password"
        }
    }
}

/// One run: a control client that chats and measures its echo latency while `connections`
/// hostile connections play `attack` for `duration` seconds; then the server's peak memory.
/// The attackers connect to `attackHost`, the control client (and the setup) to `controlHost`:
/// the server's per-address limits keep an attacker from starving people on other addresses,
/// so the control should come from another address, as a real user would.
///
/// The attackers run on one serial queue (`queue`), the control client on another
/// (`controlQueue`), so that the time this process spends on a thousand attackers does not show
/// up as the server's latency; each property belongs to one of them, as marked.
/// `@unchecked Sendable` for that reason.
///
/// Closures hold the run strongly: the cycles through the peers end when `finish` closes them
/// and cancels the timers.
final class AbuseRun: @unchecked Sendable {
    struct Result: Sendable {
        var attack: Attack
        var connections: Int
        var peakResidentBytes: Int?
        var controlEchoes: Int
        var controlSent: Int
        var p50Milliseconds: Double
        var p99Milliseconds: Double
        var controlEvicted: String?
        var attackersCut: Int
    }

    let attack: Attack
    let attackHost: String
    let controlHost: String
    let port: Int
    let serverPID: Int32?
    let connections: Int
    let duration: Double
    let password: String?

    private let queue = DispatchQueue(label: "chat-abuse.attackers")
    private let controlQueue = DispatchQueue(label: "chat-abuse.control", qos: .userInteractive)
    private let readBuffer = ReadBuffer()
    private let controlReadBuffer = ReadBuffer()

    // On `queue`:
    private var setup: Peer?
    private var attackers: [Peer] = []
    private var attackersCut = 0
    private var stopping = false

    // On `controlQueue`:
    private var control: Peer?
    private var latencies = Histogram<UInt64>(
        lowestDiscernibleValue: 1, highestTrackableValue: 600_000_000_000, numberOfSignificantValueDigits: .three)
    private var sent = 0
    private var echoes = 0
    private var controlEvicted: String?
    private var finished: (@Sendable (Result) -> Void)?

    init(
        attack: Attack, attackHost: String, controlHost: String, port: Int, serverPID: Int32?, connections: Int,
        duration: Double, password: String?
    ) {
        self.password = password
        self.attack = attack
        self.attackHost = attackHost
        self.controlHost = controlHost
        self.port = port
        self.serverPID = serverPID
        self.connections = connections
        self.duration = duration
    }

    /// Runs the whole thing and calls `done` with the result, on the control's queue.
    func start(done: @escaping @Sendable (Result) -> Void) {
        controlQueue.async { [self] in
            finished = done
            connect(nick: "control", host: controlHost, password: password, on: controlQueue) { [self] peer in
                control = peer
                peer.onFrame = { [self] frame in controlReceived(frame) }
                peer.send([.join(room: "control")])
                queue.async { [self] in prepare() }
            }
        }
    }

    // MARK: Setup

    /// Gives the attack something to work on, then starts the attackers and the control's chat.
    private func prepare() {
        connect(nick: "setup", host: controlHost, password: password) { [self] peer in
            setup = peer
            if attack == .amplification {
                // A full history of the largest messages, and rooms with the longest topics.
                let text = String(repeating: "h", count: 15_000)
                peer.send([.join(room: "control")] + Array(repeating: .say(room: "control", text: text), count: 60))
                for room in 0..<40 { peer.send([.join(room: "topic\(room)"), .setTopic(room: "topic\(room)", text: text)]) }
            }
            queue.asyncAfter(deadline: .now() + 1) { [self] in launchAttackers(from: 0) }
        }
    }

    private func launchAttackers(from index: Int) {
        guard !stopping else { return }
        // 500 connections a second at most, so the ramp itself is no attack.
        let batch = min(connections - index, 50)
        for number in index..<index + batch { launchAttacker(number) }
        if index + batch < connections {
            queue.asyncAfter(deadline: .now() + .milliseconds(100)) { [self] in launchAttackers(from: index + batch) }
        } else {
            controlQueue.async { [self] in startChatting() }
        }
    }

    private func launchAttacker(_ number: Int) {
        let nick = "evil\(number)"
        switch attack {
        case .reconnect:
            reconnectLoop(nick: nick)
            return
        case .slowloris:
            connect(nick: nil, reading: false) { [self] peer in
                attackers.append(peer)
                // A frame header announcing the largest frame, and all but its last byte.
                var bytes = [UInt8](repeating: 0, count: 16_384 + 3)
                bytes[0] = 0x80
                bytes[1] = 0x80
                bytes[2] = 0x01
                bytes[3] = FrameType.say.rawValue
                peer.sendRaw(Array(bytes.dropLast()))
            }
            return
        case .guessing:
            guessLoop(nick: nick, attempt: 0)
            return
        default:
            break
        }
        let reads = attack == .history || attack == .burst || attack == .pingFlood
        connect(nick: nick, reading: reads) { [self] peer in
            attackers.append(peer)
            peer.onClosed = { [self] in if !stopping { attackersCut += 1 } }
            switch attack {
            case .amplification:
                let requests: [Frame] = [
                    .join(room: "control"), .requestHistory(room: "control", count: 100), .listRooms, .who(room: "control"),
                    .fetchHistory(room: "control", direction: .before, seq: 0, limit: 100),
                ]
                peer.keepSending(Array(repeating: requests, count: 500).flatMap { $0 })
            case .pings:
                peer.keepSending((0..<50_000).map { .ping(token: UInt64($0)) })
            case .history:
                let text = String(repeating: "m", count: 16_000)
                let rooms = (0..<10).map { "h\(number)-\($0)" }
                peer.send(rooms.map { .join(room: $0) })
                peer.keepSending(rooms.map { .say(room: $0, text: text) })
            case .burst:
                let text = String(repeating: "b", count: 16_000)
                peer.send([.join(room: "control")])
                peer.keepSending(Array(repeating: .say(room: "control", text: text), count: 60))
            case .pingFlood:
                peer.keepSending((0..<2_000).map { .ping(token: UInt64($0)) })
            case .reconnect, .slowloris, .guessing:
                break
            }
        }
    }

    private func reconnectLoop(nick: String) {
        guard !stopping else { return }
        connect(nick: nick) { [self] peer in
            peer.close()
            queue.async { [self] in reconnectLoop(nick: nick) }
        }
    }

    private func guessLoop(nick: String, attempt: Int) {
        guard !stopping else { return }
        connect(nick: nick, password: "guess\(attempt)") { [self] peer in
            peer.onClosed = { [self] in queue.async { self.guessLoop(nick: nick, attempt: attempt + 1) } }
        }
    }

    // MARK: The control client

    /// On the control's queue: tops the attackers up and has the control say a line every 20 ms
    /// until the run's time is up.
    private func startChatting() {
        let feeder = DispatchSource.makeTimerSource(queue: queue)
        feeder.schedule(deadline: .now(), repeating: .milliseconds(20))
        feeder.setEventHandler { [self] in
            if stopping { feeder.cancel() } else { for peer in attackers { peer.topUp() } }
        }
        feeder.activate()
        let timer = DispatchSource.makeTimerSource(queue: controlQueue)
        timer.schedule(deadline: .now(), repeating: .milliseconds(20))
        let end = MonotonicNanos.now() + UInt64(duration * 1e9)
        timer.setEventHandler { [self] in
            guard MonotonicNanos.now() < end else {
                timer.cancel()
                finish()
                return
            }
            guard controlEvicted == nil, let control else { return }
            control.send([.say(room: "control", text: "t\(MonotonicNanos.now())")])
            sent += 1
        }
        timer.activate()
    }

    private func controlReceived(_ frame: Frame) {
        switch frame {
        case .message("control", _, _, "control", let text) where text.hasPrefix("t"):
            if let stamp = UInt64(text.dropFirst()) {
                latencies.record(MonotonicNanos.now() &- stamp)
                echoes += 1
            }
        case .error(let code, true, _, let reason):
            controlEvicted = "\(code): \(reason)"
        default:
            break
        }
    }

    /// On the control's queue: reads the server's peak memory, stops everyone, and reports.
    private func finish() {
        let peak = serverPID.flatMap(Self.peakResidentBytes(of:))
        control?.close()
        let cut = queue.sync { [self] in
            stopping = true
            for peer in attackers { peer.close() }
            setup?.close()
            return attackersCut
        }
        let result = Result(
            attack: attack, connections: connections, peakResidentBytes: peak, controlEchoes: echoes, controlSent: sent,
            p50Milliseconds: Double(latencies.valueAtPercentile(50)) / 1e6,
            p99Milliseconds: Double(latencies.valueAtPercentile(99)) / 1e6, controlEvicted: controlEvicted,
            attackersCut: cut)
        finished?(result)
    }

    // MARK: Connections

    /// Connects to `host` (the attackers' unless said) with a channel on `connectionQueue` (the
    /// attackers' unless said), says hello as `nick` (none for `nil`), and hands over the peer.
    private func connect(
        nick: String?, host: String? = nil, password: String? = nil, reading: Bool = true,
        on connectionQueue: DispatchQueue? = nil, then ready: @escaping @Sendable (Peer) -> Void
    ) {
        let target = connectionQueue ?? queue
        let buffer = target === controlQueue ? controlReadBuffer : readBuffer
        SocketConnector.connect(host: host ?? attackHost, port: port, timeout: .seconds(10), queue: target) { result in
            guard case .success(let socket) = result else { return }
            let peer = Peer(channel: SocketChannel(socket: socket, queue: target, readBuffer: buffer))
            peer.start(reading: reading)
            if let nick { peer.send([.hello(version: 2, nick: nick, password: password)]) }
            ready(peer)
        }
    }

    /// `VmHWM` of `pid`, in bytes.
    static func peakResidentBytes(of pid: Int32) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") })
        else { return nil }
        return line.split(separator: " ").dropFirst().first.flatMap { Int($0) }.map { $0 * 1024 }
    }
}

/// One connection of the run: sends frames, decodes what it reads (if it reads at all).
final class Peer {
    let channel: SocketChannel
    var onFrame: ((Frame) -> Void)?
    var onClosed: (() -> Void)?
    private var decoder = FrameDecoder()
    private var repeated: ByteChunk?

    init(channel: SocketChannel) {
        self.channel = channel
    }

    /// Starts the channel. Its callbacks hold the peer until it closes (the channel drops them
    /// then), so a peer nobody else keeps lives exactly as long as its connection.
    func start(reading: Bool) {
        channel.onBytes = { [self] bytes in
            decoder.append(bytes)
            while let frame = try? decoder.next() { onFrame?(frame) }
        }
        channel.onClosed = { [self] _ in onClosed?() }
        channel.start()
        if !reading { channel.pauseReading() }
    }

    func send(_ frames: [Frame]) {
        var bytes: [UInt8] = []
        for frame in frames { FrameEncoder.encode(frame, into: &bytes) }
        sendRaw(bytes)
    }

    func sendRaw(_ bytes: [UInt8]) {
        channel.write(ByteChunk(bytes))
    }

    /// Sends `frames` over and over: `topUp` queues another copy whenever less than one waits.
    func keepSending(_ frames: [Frame]) {
        var bytes: [UInt8] = []
        for frame in frames { FrameEncoder.encode(frame, into: &bytes) }
        repeated = ByteChunk(bytes)
        topUp()
    }

    /// Queues another copy of what `keepSending` sends if less than one is waiting.
    func topUp() {
        guard let repeated, channel.isOpen, channel.outboundBytes < repeated.count else { return }
        channel.write(repeated)
    }

    func close() {
        repeated = nil
        channel.close()
    }
}

/// The monotonic clock, in nanoseconds.
enum MonotonicNanos {
    static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}
