import ChatProtocol
import Dispatch
import SocketCore
import Synchronization

/// Faults to inject into the `message` frames one client receives.
struct DeliveryFaults: Sendable {
    /// The client whose deliveries are damaged: the number after the last `x` of its nick.
    var victim: Int
    /// Ordinals (0, 1, 2, … among the `message` frames sent to the victim) never sent.
    var drop: Set<Int> = []
    /// Ordinals sent twice in a row.
    var duplicate: Set<Int> = []
    /// Ordinals held back and sent right after the next message instead.
    var swapWithNext: Set<Int> = []
}

/// A minimal chat server for tests: hello, join and say as PROTOCOL.md specifies them (welcome,
/// joined to every member then members to the joiner, message to every member with the room's
/// seq), optionally damaging one client's deliveries on purpose.
///
/// It exists so the load tester's accounting can be proven against faults a real server must not
/// have. Thread safety: all state is confined to `queue`; `start` and `stop` hop onto it.
final class ScriptedChatServer: @unchecked Sendable {
    private final class Session {
        let channel: SocketChannel
        var decoder = FrameDecoder(maxFrameSize: WireProtocol.defaultServerMaxFrameSize)
        var nick = ""
        var rooms: Set<String> = []
        var deliveredMessages = 0
        var heldBack: ByteChunk?

        init(channel: SocketChannel) { self.channel = channel }
    }

    private let queue = DispatchQueue(label: "ScriptedChatServer")
    private let listener: SocketListener
    private let faults: DeliveryFaults?
    private var sessions: [ObjectIdentifier: Session] = [:]
    private var members: [String: [Session]] = [:]
    private var seq: [String: UInt64] = [:]
    private let readBuffer = ReadBuffer()

    /// The port it listens on, on 127.0.0.1.
    var port: Int { listener.port }

    /// Binds 127.0.0.1 on a port the OS chooses.
    init(faults: DeliveryFaults? = nil) throws {
        listener = try SocketListener(host: "127.0.0.1", port: 0)
        self.faults = faults
    }

    /// Starts accepting.
    func start() {
        queue.sync {
            listener.start(queue: queue) { [self] socket in accept(socket) }
        }
    }

    /// Stops accepting and closes every session.
    func stop() {
        queue.sync {
            listener.close()
            for session in sessions.values { session.channel.close() }
        }
    }

    private func accept(_ socket: Socket) {
        let channel = SocketChannel(socket: socket, queue: queue, readBuffer: readBuffer)
        let session = Session(channel: channel)
        sessions[ObjectIdentifier(session)] = session
        channel.onBytes = { [unowned self, unowned session] bytes in received(bytes, from: session) }
        channel.onClosed = { [unowned self, unowned session] _ in
            for room in session.rooms { members[room]?.removeAll { $0 === session } }
            sessions[ObjectIdentifier(session)] = nil
        }
        channel.start()
    }

    private func received(_ bytes: UnsafeRawBufferPointer, from session: Session) {
        session.decoder.append(bytes)
        while let frame = try? session.decoder.next() {
            switch frame {
            case .hello(_, let nick, _):
                session.nick = nick
                send(.welcome(version: WireProtocol.version, nick: nick, maxFrameSize: UInt32(WireProtocol.defaultServerMaxFrameSize), motd: ""), to: session)
            case .join(let room):
                session.rooms.insert(room)
                members[room, default: []].append(session)
                broadcast(.joined(room: room, seq: nextSeq(room), time: 0, nick: session.nick), in: room)
                send(.members(room: room, nicks: members[room, default: []].map(\.nick)), to: session)
            case .say(let room, let text):
                broadcast(.message(room: room, seq: nextSeq(room), time: 0, sender: session.nick, text: text), in: room)
            default:
                break
            }
        }
    }

    private func nextSeq(_ room: String) -> UInt64 {
        seq[room, default: 0] += 1
        return seq[room]!
    }

    private func send(_ frame: Frame, to session: Session) {
        session.channel.write(ByteChunk(FrameEncoder.encode(frame)))
    }

    private func broadcast(_ frame: Frame, in room: String) {
        let chunk = ByteChunk(FrameEncoder.encode(frame))
        let isMessage = frame.type == .message
        for member in members[room, default: []] {
            guard isMessage, let faults, member.nick.split(separator: "x").last.flatMap({ Int($0) }) == faults.victim else {
                member.channel.write(chunk)
                continue
            }
            let ordinal = member.deliveredMessages
            member.deliveredMessages += 1
            if faults.drop.contains(ordinal) { continue }
            if faults.swapWithNext.contains(ordinal) {
                member.heldBack = chunk
                continue
            }
            member.channel.write(chunk)
            if faults.duplicate.contains(ordinal) { member.channel.write(chunk) }
            if let held = member.heldBack {
                member.channel.write(held)
                member.heldBack = nil
            }
        }
    }
}
