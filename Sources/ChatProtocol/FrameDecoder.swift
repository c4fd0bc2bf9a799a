/// Turns a byte stream, arriving in chunks of any size, into frames.
///
/// Feed it with `append` whatever a read returned, then call `next()` until it returns nil:
/// it yields each complete frame and keeps the partial one. Frames are found by a
/// `FrameSplitter`, which rejects a length prefix above `maxFrameSize` as soon as the prefix is
/// complete, before any of the body is waited for, so once `next()` has returned nil at most
/// `maxFrameSize` + `WireProtocol.maxVarintLength` - 1 bytes stay buffered.
///
/// The first error poisons the decoder: framing can no longer be trusted, so every later
/// `next()` throws the same error. A value type: give each connection its own.
public struct FrameDecoder: Sendable {
    /// The largest frame body (type + fields) accepted, in bytes.
    public var maxFrameSize: Int { splitter.maxFrameSize }

    private let splitter: FrameSplitter

    private var storage: [UInt8] = []
    private var readIndex = 0
    private var failure: FrameError?

    /// The type of the frame whose decoding failed, when its type byte had arrived; `.none`
    /// before any failure or when the length prefix itself was at fault. A server names it in
    /// the `error` it sends before closing.
    public private(set) var failedFrameType = FrameType.none

    /// Makes a decoder that rejects frames longer than `maxFrameSize` bytes (1 ...
    /// `WireProtocol.maxFrameSize`). Servers use `WireProtocol.defaultServerMaxFrameSize`;
    /// clients use `WireProtocol.maxFrameSize`.
    public init(maxFrameSize: Int = WireProtocol.maxFrameSize) {
        splitter = FrameSplitter(maxFrameSize: maxFrameSize)
    }

    /// The protocol version agreed with the peer (the latest until a handshake says otherwise):
    /// a frame of a type that a later version defines decodes as `.unknown`, skipped by its
    /// length, exactly as a receiver of this version would treat it — never by the later
    /// layout, so a version 1 session cannot reach version 2's requests.
    public var version: UInt16 = WireProtocol.version

    /// Bytes appended but not yet returned as frames.
    public var bufferedByteCount: Int { storage.count - readIndex }

    /// Adds received bytes. Empty chunks are fine.
    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        compact()
        let needed = storage.count + bytes.count
        if needed > storage.capacity {
            // Doubling only up to one whole frame, then just what is needed: a partial frame
            // that trickles in must not leave twice its size allocated (a server counts what a
            // connection's decoder may hold against its memory budget).
            let frame = splitter.maxFrameSize + WireProtocol.maxVarintLength
            storage.reserveCapacity(max(needed, min(2 * storage.capacity, frame)))
        }
        storage.append(contentsOf: bytes)
    }

    /// Adds received bytes from any byte collection (an array, a slice, a `Data`).
    @inlinable
    public mutating func append(contentsOf bytes: some Collection<UInt8>) {
        let appended: Void? = bytes.withContiguousStorageIfAvailable { append(UnsafeRawBufferPointer($0)) }
        if appended == nil { Array(bytes).withUnsafeBytes { append($0) } }
    }

    /// Returns the next complete frame, or nil if more bytes are needed.
    ///
    /// Throws the first problem found in the stream, then the same error on every call.
    public mutating func next() throws(FrameError) -> Frame? {
        if let failure { throw failure }
        let start = readIndex
        let splitter = splitter
        let version = version
        var type = FrameType.none
        do throws(FrameError) {
            let decoded = try storage.withUnsafeBufferPointer {
                (bytes) throws(FrameError) -> (frame: Frame, end: Int)? in
                guard let split = try splitter.frame(in: UnsafeRawBufferPointer(bytes), at: start) else { return nil }
                type = split.type
                let frame = try FrameDecoder.decodeBody(UnsafeBufferPointer(rebasing: bytes[split.body]), version: version)
                return (frame, split.end)
            }
            guard let decoded else { return nil }
            readIndex = decoded.end
            return decoded.frame
        } catch {
            failure = error
            failedFrameType = type
            throw error
        }
    }

    /// Drops consumed bytes when that is cheap: always when all are consumed, otherwise
    /// only once the consumed part outweighs what must move, so that the copying stays
    /// linear in the bytes received however many frames arrive per chunk.
    private mutating func compact() {
        if readIndex == storage.count {
            storage.removeAll(keepingCapacity: true)
            readIndex = 0
        } else if readIndex >= 4096 && readIndex >= storage.count - readIndex {
            storage.removeSubrange(0..<readIndex)
            readIndex = 0
        }
    }

    /// Decodes one frame body: the type byte and its fields, nothing more, nothing less; types
    /// defined after `version` are unknown.
    static func decodeBody(_ body: UnsafeBufferPointer<UInt8>, version: UInt16 = WireProtocol.version) throws(FrameError) -> Frame {
        let type = FrameType(rawValue: body[0])
        var reader = FrameReader(UnsafeBufferPointer(rebasing: body[1...]))
        if let introduced = type.introducedIn, introduced > version {
            // Every later type is skippable (docs/PROTOCOL.md, "Version 2", "Version 3").
            return .unknown(type: type, payload: reader.rest())
        }
        let frame: Frame
        switch type {
        case .hello:
            frame = .hello(
                version: try reader.uint16(.version), nick: try reader.nick(.nick),
                password: try reader.optionalString(.password))
        case .changeNick:
            frame = .changeNick(nick: try reader.nick(.nick))
        case .join:
            frame = .join(room: try reader.room())
        case .part:
            frame = .part(room: try reader.room())
        case .say:
            frame = .say(room: try reader.room(), text: try reader.text(.text))
        case .emote:
            frame = .emote(room: try reader.room(), text: try reader.text(.text))
        case .tell:
            frame = .tell(recipient: try reader.nick(.recipient), text: try reader.text(.text))
        case .listRooms:
            frame = .listRooms
        case .who:
            frame = .who(room: try reader.room())
        case .setTopic:
            frame = .setTopic(room: try reader.room(), text: try reader.text(.text))
        case .requestHistory:
            frame = .requestHistory(room: try reader.room(), count: try reader.uint32(.historyCount))
        case .fetchHistory:
            let room = try reader.room()
            guard let direction = HistoryDirection(rawValue: try reader.byte(.direction)) else {
                throw .invalidValue(.direction)
            }
            frame = .fetchHistory(
                room: room, direction: direction, seq: try reader.varint(.anchor),
                limit: try reader.uint32(.historyCount))
        case .setAway:
            frame = .setAway(text: try reader.text(.text))
        case .register:
            frame = .register(password: try reader.string(.password))
        case .login:
            frame = .login(account: try reader.nick(.account), password: try reader.string(.password))
        case .changePassword:
            frame = .changePassword(old: try reader.string(.password), new: try reader.string(.newPassword))
        case .dropAccount:
            frame = .dropAccount(password: try reader.string(.password))
        case .kick:
            frame = .kick(room: try reader.room(), nick: try reader.nick(.nick), reason: try reader.text(.reason))
        case .setMode:
            frame = .setMode(
                room: try reader.room(), mode: RoomMode(rawValue: try reader.byte(.mode)), on: try reader.bool(.on),
                argument: try reader.text(.argument))
        case .invite:
            frame = .invite(room: try reader.room(), nick: try reader.nick(.nick))
        case .listBans:
            frame = .listBans(room: try reader.roomOrEmpty())
        case .serverBan:
            frame = .serverBan(on: try reader.bool(.on), mask: try reader.string(.mask), reason: try reader.text(.reason))
        case .kill:
            frame = .kill(nick: try reader.nick(.nick), reason: try reader.text(.reason))
        case .joinWithKey:
            frame = .joinWithKey(room: try reader.room(), key: try reader.text(.key))
        case .kicked:
            frame = .kicked(
                room: try reader.room(), seq: try reader.seq(), time: try reader.varint(.time),
                nick: try reader.nick(.nick), by: try reader.nick(.by), reason: try reader.text(.reason))
        case .modeChanged:
            frame = .modeChanged(
                room: try reader.room(), seq: try reader.seq(), time: try reader.varint(.time),
                by: try reader.nick(.by), mode: RoomMode(rawValue: try reader.byte(.mode)), on: try reader.bool(.on),
                argument: try reader.text(.argument))
        case .invited:
            frame = .invited(room: try reader.room(), nick: try reader.nick(.nick), by: try reader.nick(.by))
        case .roomModes:
            frame = .roomModes(
                room: try reader.room(),
                modes: RoomModes(
                    founder: try reader.nickOrEmpty(.founder), inviteOnly: try reader.bool(.inviteOnly), moderated: try reader.bool(.moderated),
                    topicLock: try reader.bool(.topicLock), key: try reader.string(.key),
                    memberLimit: try reader.uint32(.memberLimit), ops: try readNicks(&reader),
                    voices: try readNicks(&reader)))
        case .banList:
            let room = try reader.roomOrEmpty()
            let count = try reader.varint(.listCount)
            var entries: [BanEntry] = []
            entries.reserveCapacity(Int(min(count, UInt64(reader.remaining))))
            for _ in 0..<count {
                entries.append(
                    BanEntry(
                        mask: try reader.string(.mask), setBy: try reader.nickOrEmpty(.setBy), time: try reader.varint(.time),
                        reason: try reader.string(.reason)))
            }
            frame = .banList(room: room, entries: entries)
        case .done:
            frame = .done(request: FrameType(rawValue: try reader.byte(.frameType)), text: try reader.text(.text))
        case .registered:
            frame = .registered(account: try reader.nick(.account))
        case .loggedIn:
            frame = .loggedIn(account: try reader.nick(.account))
        case .passwordChanged:
            frame = .passwordChanged(account: try reader.nick(.account))
        case .accountDropped:
            frame = .accountDropped(account: try reader.nick(.account))
        case .welcome:
            frame = .welcome(
                version: try reader.uint16(.version), nick: try reader.nick(.nick),
                maxFrameSize: try reader.uint32(.maxFrameSize), motd: try reader.text(.motd))
        case .message:
            frame = .message(
                room: try reader.room(), seq: try reader.seq(), time: try reader.varint(.time),
                sender: try reader.nick(.sender), text: try reader.text(.text))
        case .action:
            frame = .action(
                room: try reader.room(), seq: try reader.seq(), time: try reader.varint(.time),
                sender: try reader.nick(.sender), text: try reader.text(.text))
        case .direct:
            frame = .direct(
                sender: try reader.nick(.sender), recipient: try reader.nick(.recipient),
                time: try reader.varint(.time), text: try reader.text(.text))
        case .joined:
            frame = .joined(
                room: try reader.room(), seq: try reader.seq(), time: try reader.varint(.time),
                nick: try reader.nick(.nick))
        case .left:
            frame = .left(
                room: try reader.room(), seq: try reader.seq(), time: try reader.varint(.time),
                nick: try reader.nick(.nick))
        case .quit:
            frame = .quit(
                room: try reader.room(), seq: try reader.seq(), time: try reader.varint(.time),
                nick: try reader.nick(.nick), reason: try reader.text(.reason))
        case .nickChanged:
            frame = .nickChanged(
                room: try reader.room(), seq: try reader.seq(), time: try reader.varint(.time),
                old: try reader.nick(.oldNick), new: try reader.nick(.newNick))
        case .nickAccepted:
            frame = .nickAccepted(nick: try reader.nick(.nick))
        case .roomList:
            frame = .roomList(rooms: try readRooms(&reader))
        case .members:
            frame = .members(room: try reader.room(), nicks: try readNicks(&reader))
        case .topic:
            frame = .topic(
                room: try reader.room(), seq: try reader.seq(), time: try reader.varint(.time),
                setBy: try reader.nick(.setBy), text: try reader.text(.text))
        case .history:
            frame = .history(room: try reader.room(), entries: try readHistory(&reader, allowingTopics: false))
        case .roomState:
            frame = .roomState(
                room: try reader.room(), epoch: try reader.epoch(), firstSeq: try reader.varint(.firstSeq),
                lastSeq: try reader.varint(.lastSeq))
        case .historyPage:
            frame = .historyPage(
                room: try reader.room(), epoch: try reader.epoch(), complete: try reader.bool(.complete),
                entries: try readHistory(&reader, allowingTopics: true))
        case .roomListPage:
            frame = .roomListPage(complete: try reader.bool(.complete), rooms: try readRooms(&reader))
        case .membersPage:
            frame = .membersPage(room: try reader.room(), complete: try reader.bool(.complete), nicks: try readNicks(&reader))
        case .away:
            frame = .away(nick: try reader.nick(.nick), text: try reader.text(.text))
        case .limits:
            frame = .limits(
                requestRate: try reader.uint32(.requestRate), requestBurst: try reader.uint32(.requestBurst),
                byteRate: try reader.uint32(.byteRate), byteBurst: try reader.uint32(.byteBurst))
        case .ping:
            frame = .ping(token: try reader.varint(.token))
        case .pong:
            frame = .pong(token: try reader.varint(.token))
        case .error:
            frame = .error(
                code: ErrorCode(rawValue: try reader.uint16(.code)), fatal: try reader.bool(.fatal),
                frameType: FrameType(rawValue: try reader.byte(.frameType)), reason: try reader.text(.reason))
        case .goodbye:
            frame = .goodbye(reason: try reader.text(.reason))
        default:
            if type.mustUnderstand { throw .unknownType(type) }
            frame = .unknown(type: type, payload: reader.rest())
        }
        try reader.finish(type)
        return frame
    }

    private static func readRooms(_ reader: inout FrameReader) throws(FrameError) -> [RoomInfo] {
        let count = try reader.varint(.listCount)
        var rooms: [RoomInfo] = []
        // A count larger than the bytes left is a lie; do not let it size the allocation.
        rooms.reserveCapacity(Int(min(count, UInt64(reader.remaining))))
        for _ in 0..<count {
            rooms.append(
                RoomInfo(
                    name: try reader.room(), memberCount: try reader.uint32(.memberCount),
                    topic: try reader.string(.topic)))
        }
        return rooms
    }

    private static func readNicks(_ reader: inout FrameReader) throws(FrameError) -> [String] {
        let count = try reader.varint(.listCount)
        var nicks: [String] = []
        nicks.reserveCapacity(Int(min(count, UInt64(reader.remaining))))
        for _ in 0..<count { nicks.append(try reader.nick(.nick)) }
        return nicks
    }

    /// Reads a list of history entries; topic entries are valid only where `allowingTopics`
    /// (a `historyPage`), since version 1's `history` defines kinds 0 and 1 alone.
    private static func readHistory(_ reader: inout FrameReader, allowingTopics: Bool) throws(FrameError) -> [HistoryEntry] {
        let count = try reader.varint(.listCount)
        var entries: [HistoryEntry] = []
        entries.reserveCapacity(Int(min(count, UInt64(reader.remaining))))
        var previousSeq: UInt64 = 0
        var previousTime: UInt64 = 0
        for _ in 0..<count {
            guard let kind = HistoryEntry.Kind(rawValue: try reader.uint8(.entryKind)),
                kind != .topic || allowingTopics
            else {
                throw .invalidValue(.entryKind)
            }
            let seqDelta = try reader.varint(.seq)
            guard seqDelta != 0 else { throw .invalidValue(.seq) }
            let (seq, overflow) = previousSeq.addingReportingOverflow(seqDelta)
            guard !overflow else { throw .integerOverflow(.seq) }
            let time = previousTime &+ FrameEncoder.unzigzag(try reader.varint(.time))
            entries.append(
                HistoryEntry(
                    kind: kind, seq: seq, time: time, sender: try reader.nick(.sender),
                    text: try reader.string(.text)))
            previousSeq = seq
            previousTime = time
        }
        return entries
    }
}

extension Frame {
    /// Decodes `bytes`, which must hold exactly one complete frame.
    ///
    /// Throws `.truncated(.length)` if the bytes end before the frame does, and
    /// `.trailingBytes` if anything follows it.
    public init(decoding bytes: some Collection<UInt8>, maxFrameSize: Int = WireProtocol.maxFrameSize)
        throws(FrameError)
    {
        var decoder = FrameDecoder(maxFrameSize: maxFrameSize)
        decoder.append(contentsOf: bytes)
        guard let frame = try decoder.next() else { throw .truncated(.length) }
        if decoder.bufferedByteCount != 0 {
            throw .trailingBytes(type: frame.type, count: decoder.bufferedByteCount)
        }
        self = frame
    }
}
