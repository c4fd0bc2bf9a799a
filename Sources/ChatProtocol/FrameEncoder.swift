/// Writes frames in the wire format of docs/PROTOCOL.md.
///
/// The encoder trusts its input: it does not check names or limits, so a caller that puts
/// a bad nick or 2 MiB of text into a frame gets bytes the peer will reject. Servers build
/// frames from values they have already validated; clients check input with `ChatName`.
public enum FrameEncoder {
    /// Appends `frame` to `buffer`, reusing its capacity: no allocation once the buffer has
    /// grown to fit. Returns the number of bytes written.
    @discardableResult
    public static func encode(_ frame: Frame, into buffer: inout [UInt8]) -> Int {
        let start = buffer.count
        // Reserve one byte for the length prefix: every frame under 128 bytes, which is
        // nearly every chat frame, then needs no moving once its length is known.
        buffer.append(0)
        buffer.append(frame.type.rawValue)
        writeFields(of: frame, into: &buffer)
        var length = buffer.count - start - 1
        let prefixLength = varintLength(UInt64(length))
        if prefixLength > 1 {
            buffer.insert(contentsOf: repeatElement(0, count: prefixLength - 1), at: start + 1)
        }
        for index in start..<start + prefixLength - 1 {
            buffer[index] = UInt8(truncatingIfNeeded: length) | 0x80
            length >>= 7
        }
        buffer[start + prefixLength - 1] = UInt8(truncatingIfNeeded: length)
        return buffer.count - start
    }

    /// Returns `frame`'s bytes in a new array. Prefer `encode(_:into:)` on hot paths.
    public static func encode(_ frame: Frame) -> [UInt8] {
        var bytes: [UInt8] = []
        encode(frame, into: &bytes)
        return bytes
    }

    /// Writes everything after the type byte; the one place that knows each frame's layout.
    private static func writeFields(of frame: Frame, into out: inout [UInt8]) {
        switch frame {
        case let .hello(version, nick, password):
            out.appendVarint(UInt64(version))
            out.appendString(nick)
            out.appendOptionalString(password)
        case let .changeNick(nick):
            out.appendString(nick)
        case let .join(room), let .part(room), let .who(room):
            out.appendString(room)
        case let .say(room, text), let .emote(room, text), let .setTopic(room, text):
            out.appendString(room)
            out.appendText(text)
        case let .tell(recipient, text):
            out.appendString(recipient)
            out.appendText(text)
        case .listRooms:
            break
        case let .requestHistory(room, count):
            out.appendString(room)
            out.appendVarint(UInt64(count))
        case let .fetchHistory(room, direction, seq, limit):
            out.appendString(room)
            out.append(direction.rawValue)
            out.appendVarint(seq)
            out.appendVarint(UInt64(limit))
        case let .setAway(text):
            out.appendText(text)
        case let .register(password), let .dropAccount(password):
            out.appendString(password)
        case let .login(account, password):
            out.appendString(account)
            out.appendString(password)
        case let .changePassword(old, new):
            out.appendString(old)
            out.appendString(new)
        case let .kick(room, nick, reason):
            out.appendString(room)
            out.appendString(nick)
            out.appendText(reason)
        case let .setMode(room, mode, on, argument):
            out.appendString(room)
            out.append(mode.rawValue)
            out.append(on ? 1 : 0)
            out.appendText(argument)
        case let .invite(room, nick):
            out.appendString(room)
            out.appendString(nick)
        case let .listBans(room):
            out.appendString(room)
        case let .serverBan(on, mask, reason):
            out.append(on ? 1 : 0)
            out.appendString(mask)
            out.appendText(reason)
        case let .kill(nick, reason):
            out.appendString(nick)
            out.appendText(reason)
        case let .joinWithKey(room, key):
            out.appendString(room)
            out.appendText(key)
        case let .kicked(room, seq, time, nick, by, reason):
            out.appendString(room)
            out.appendVarint(seq)
            out.appendVarint(time)
            out.appendString(nick)
            out.appendString(by)
            out.appendText(reason)
        case let .modeChanged(room, seq, time, by, mode, on, argument):
            out.appendString(room)
            out.appendVarint(seq)
            out.appendVarint(time)
            out.appendString(by)
            out.append(mode.rawValue)
            out.append(on ? 1 : 0)
            out.appendText(argument)
        case let .invited(room, nick, by):
            out.appendString(room)
            out.appendString(nick)
            out.appendString(by)
        case let .roomModes(room, modes):
            out.appendString(room)
            out.appendString(modes.founder)
            out.append(modes.inviteOnly ? 1 : 0)
            out.append(modes.moderated ? 1 : 0)
            out.append(modes.topicLock ? 1 : 0)
            out.appendString(modes.key)
            out.appendVarint(UInt64(modes.memberLimit))
            appendNicks(modes.ops, into: &out)
            appendNicks(modes.voices, into: &out)
        case let .banList(room, entries):
            out.appendString(room)
            out.appendVarint(UInt64(entries.count))
            for entry in entries {
                out.appendString(entry.mask)
                out.appendString(entry.setBy)
                out.appendVarint(entry.time)
                out.appendString(entry.reason)
            }
        case let .done(request, text):
            out.append(request.rawValue)
            out.appendText(text)
        case let .registered(account), let .loggedIn(account), let .passwordChanged(account), let .accountDropped(account):
            out.appendString(account)
        case let .welcome(version, nick, maxFrameSize, motd):
            out.appendVarint(UInt64(version))
            out.appendString(nick)
            out.appendVarint(UInt64(maxFrameSize))
            out.appendText(motd)
        case let .message(room, seq, time, sender, text), let .action(room, seq, time, sender, text):
            out.appendString(room)
            out.appendVarint(seq)
            out.appendVarint(time)
            out.appendString(sender)
            out.appendText(text)
        case let .direct(sender, recipient, time, text):
            out.appendString(sender)
            out.appendString(recipient)
            out.appendVarint(time)
            out.appendText(text)
        case let .joined(room, seq, time, nick), let .left(room, seq, time, nick):
            out.appendString(room)
            out.appendVarint(seq)
            out.appendVarint(time)
            out.appendString(nick)
        case let .quit(room, seq, time, nick, reason):
            out.appendString(room)
            out.appendVarint(seq)
            out.appendVarint(time)
            out.appendString(nick)
            out.appendText(reason)
        case let .nickChanged(room, seq, time, old, new):
            out.appendString(room)
            out.appendVarint(seq)
            out.appendVarint(time)
            out.appendString(old)
            out.appendString(new)
        case let .nickAccepted(nick):
            out.appendString(nick)
        case let .roomList(rooms):
            appendRooms(rooms, into: &out)
        case let .members(room, nicks):
            out.appendString(room)
            appendNicks(nicks, into: &out)
        case let .topic(room, seq, time, setBy, text):
            out.appendString(room)
            out.appendVarint(seq)
            out.appendVarint(time)
            out.appendString(setBy)
            out.appendText(text)
        case let .history(room, entries):
            out.appendString(room)
            appendEntries(entries, into: &out)
        case let .roomState(room, epoch, firstSeq, lastSeq):
            out.appendString(room)
            out.appendVarint(epoch)
            out.appendVarint(firstSeq)
            out.appendVarint(lastSeq)
        case let .historyPage(room, epoch, complete, entries):
            out.appendString(room)
            out.appendVarint(epoch)
            out.append(complete ? 1 : 0)
            appendEntries(entries, into: &out)
        case let .roomListPage(complete, rooms):
            out.append(complete ? 1 : 0)
            appendRooms(rooms, into: &out)
        case let .membersPage(room, complete, nicks):
            out.appendString(room)
            out.append(complete ? 1 : 0)
            appendNicks(nicks, into: &out)
        case let .away(nick, text):
            out.appendString(nick)
            out.appendText(text)
        case let .limits(requestRate, requestBurst, byteRate, byteBurst):
            out.appendVarint(UInt64(requestRate))
            out.appendVarint(UInt64(requestBurst))
            out.appendVarint(UInt64(byteRate))
            out.appendVarint(UInt64(byteBurst))
        case let .ping(token), let .pong(token):
            out.appendVarint(token)
        case let .error(code, fatal, frameType, reason):
            out.appendVarint(UInt64(code.rawValue))
            out.append(fatal ? 1 : 0)
            out.append(frameType.rawValue)
            out.appendText(reason)
        case let .goodbye(reason):
            out.appendText(reason)
        case let .unknown(_, payload):
            out.append(contentsOf: payload)
        }
    }

    private static func appendRooms(_ rooms: [RoomInfo], into out: inout [UInt8]) {
        out.appendVarint(UInt64(rooms.count))
        for room in rooms {
            out.appendString(room.name)
            out.appendVarint(UInt64(room.memberCount))
            out.appendString(room.topic)
        }
    }

    private static func appendNicks(_ nicks: [String], into out: inout [UInt8]) {
        out.appendVarint(UInt64(nicks.count))
        for nick in nicks { out.appendString(nick) }
    }

    private static func appendEntries(_ entries: [HistoryEntry], into out: inout [UInt8]) {
        out.appendVarint(UInt64(entries.count))
        // Deltas from the previous entry (from 0 for the first) keep the 6-byte timestamps and
        // growing sequence numbers down to a byte or two per entry.
        var previousSeq: UInt64 = 0
        var previousTime: UInt64 = 0
        for entry in entries {
            out.appendVarint(UInt64(entry.kind.rawValue))
            out.appendVarint(entry.seq &- previousSeq)
            out.appendVarint(zigzag(entry.time &- previousTime))
            out.appendString(entry.sender)
            out.appendString(entry.text)
            previousSeq = entry.seq
            previousTime = entry.time
        }
    }

    /// How many bytes the varint encoding of `value` takes: 1 to 10.
    static func varintLength(_ value: UInt64) -> Int {
        // One byte per started group of 7 significant bits; zero still takes one byte.
        (64 - (value | 1).leadingZeroBitCount + 6) / 7
    }

    /// Maps a wrapped 64-bit difference to an unsigned value that is small when the signed
    /// difference is small in either direction (0, -1, 1, -2, … → 0, 1, 2, 3, …).
    static func zigzag(_ difference: UInt64) -> UInt64 {
        let signed = Int64(bitPattern: difference)
        return UInt64(bitPattern: (signed << 1) ^ (signed >> 63))
    }

    /// Inverts `zigzag`.
    static func unzigzag(_ value: UInt64) -> UInt64 {
        (value >> 1) ^ (0 &- (value & 1))
    }
}

// MARK: Field writers

extension [UInt8] {
    /// Appends `value` as an unsigned LEB128 varint: 7 bits per byte, low bits first, high
    /// bit set on every byte but the last.
    mutating func appendVarint(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        append(UInt8(truncatingIfNeeded: value))
    }

    /// Appends a string field: its UTF-8 byte count as a varint, then the bytes.
    mutating func appendString(_ string: String) {
        var string = string
        string.withUTF8 { utf8 in
            appendVarint(UInt64(utf8.count))
            append(contentsOf: utf8)
        }
    }

    /// Appends an optional string field: 0 when absent, else byte count + 1, then the bytes.
    mutating func appendOptionalString(_ string: String?) {
        guard var string else { return append(0) }
        string.withUTF8 { utf8 in
            appendVarint(UInt64(utf8.count) + 1)
            append(contentsOf: utf8)
        }
    }

    /// Appends a text field that runs to the end of the frame, so it needs no length.
    mutating func appendText(_ string: String) {
        var string = string
        string.withUTF8 { append(contentsOf: $0) }
    }
}
