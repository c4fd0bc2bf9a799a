// Compiled twice: into this test target, and by Scripts/fuzz.sh (with -D FUZZING, in one
// module with the ChatProtocol sources) into the libFuzzer targets of Fuzz/. So the
// fuzzer and the regression tests check exactly the same properties.
#if !FUZZING
import ChatProtocol
#endif

/// The invariants the codec must keep for any input; each check returns a description of
/// the first violation, or nil.
enum FuzzProperties {
    /// Decodes `input` as a byte stream with a generous and a tight frame limit, whole and
    /// in input-dependent chunks (empty ones included), and checks that every way agrees,
    /// that re-encoding each frame gives back exactly its bytes, and that the decoder never
    /// holds more than one frame's worth of bytes after draining.
    static func checkDecoding(_ input: [UInt8]) -> String? {
        for limit in [WireProtocol.maxFrameSize, 40] {
            let whole = decodeStream(input, limit: limit, chunkSizes: [input.count])
            if let violation = whole.violation { return violation }
            let sizes = input.isEmpty ? [0] : input.map { Int($0 % 9) }
            let chunked = decodeStream(input, limit: limit, chunkSizes: sizes)
            if let violation = chunked.violation { return violation }
            if whole.frames != chunked.frames || whole.error != chunked.error {
                return "chunked decoding differs: whole \(whole.frames) \(String(describing: whole.error)), "
                    + "chunked \(chunked.frames) \(String(describing: chunked.error))"
            }
            var reencoded: [UInt8] = []
            for frame in whole.frames { FrameEncoder.encode(frame, into: &reencoded) }
            if !input.starts(with: reencoded) {
                return "re-encoding \(whole.frames) does not reproduce the input's prefix"
            }
            if whole.error == nil && reencoded.count + whole.buffered != input.count {
                return "consumed \(reencoded.count) + buffered \(whole.buffered) != \(input.count) input bytes"
            }
        }
        return nil
    }

    /// Builds a valid frame from `input`, encodes it after some existing buffer content, and
    /// checks that the buffer's old bytes survive and that decoding (at once, byte by byte,
    /// and as a single frame) gives back the same frame and consumes every byte.
    static func checkRoundTrip(_ input: [UInt8]) -> String? {
        var generator = FrameGenerator(input)
        let frame = generator.frame()
        let existing = Array(input.prefix(3))
        var buffer = existing
        let written = FrameEncoder.encode(frame, into: &buffer)
        guard buffer.starts(with: existing), written == buffer.count - existing.count else {
            return "encoding \(frame) disturbed the buffer or misreported its size"
        }
        let bytes = Array(buffer.dropFirst(existing.count))
        let whole = decodeStream(bytes, limit: WireProtocol.maxFrameSize, chunkSizes: [bytes.count])
        let single = decodeStream(bytes, limit: WireProtocol.maxFrameSize, chunkSizes: [1])
        for result in [whole, single] {
            if let violation = result.violation { return violation }
            if result.frames != [frame] || result.error != nil || result.buffered != 0 {
                return "round trip of \(frame) gave \(result.frames), error \(String(describing: result.error))"
            }
        }
        do {
            let decoded = try Frame(decoding: bytes)
            if decoded != frame { return "Frame(decoding:) of \(frame) gave \(decoded)" }
        } catch {
            return "Frame(decoding:) of \(frame) threw \(error)"
        }
        return nil
    }

    /// What feeding a stream to a decoder produced.
    struct StreamResult {
        var frames: [Frame] = []
        var error: FrameError?
        var buffered = 0
        var violation: String?
    }

    /// Feeds `input` to a decoder in chunks of the given sizes, cycling through them (a zero
    /// size feeds an empty chunk, then a 1-byte one), draining it after each chunk.
    static func decodeStream(_ input: [UInt8], limit: Int, chunkSizes: [Int]) -> StreamResult {
        var decoder = FrameDecoder(maxFrameSize: limit)
        var result = StreamResult()
        var offset = 0
        var step = 0
        repeat {
            let size = chunkSizes[step % chunkSizes.count]
            step += 1
            if size == 0 { decoder.append(contentsOf: EmptyCollection<UInt8>()) }
            let end = min(offset + max(size, 1), input.count)
            decoder.append(contentsOf: input[offset..<end])
            offset = end
            do {
                while let frame = try decoder.next() { result.frames.append(frame) }
            } catch {
                result.error = error
                do {
                    _ = try decoder.next()
                    result.violation = "decoder was not poisoned by \(error)"
                } catch let again where again != error {
                    result.violation = "poisoned decoder threw \(again), not \(error)"
                } catch {}
                return result
            }
            if decoder.bufferedByteCount > limit + WireProtocol.maxVarintLength - 1 {
                result.violation = "decoder holds \(decoder.bufferedByteCount) bytes with limit \(limit)"
                return result
            }
        } while offset < input.count
        result.buffered = decoder.bufferedByteCount
        return result
    }
}

/// Turns arbitrary bytes into a valid frame of any type, so that the fuzzer can search the
/// space of frames; once the bytes run out it reads zeros.
struct FrameGenerator {
    private let bytes: [UInt8]
    private var index = 0

    /// Draws from `bytes`.
    init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// The next byte, or 0 past the end.
    mutating func byte() -> UInt8 {
        defer { index += 1 }
        return index < bytes.count ? bytes[index] : 0
    }

    /// An integer spread over every varint length: a random width, then that many bytes.
    mutating func integer() -> UInt64 {
        let width = Int(byte() % 9)
        var value: UInt64 = 0
        for _ in 0..<width { value = value << 8 | UInt64(byte()) }
        return value
    }

    /// A valid nick of 1–24 bytes.
    mutating func nick() -> String {
        let letters = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_[]\\`^{}|".utf8)
        let others = letters + Array("0123456789-".utf8)
        let count = 1 + Int(byte()) % ChatName.maxNickLength
        var name = [letters[Int(byte()) % letters.count]]
        for _ in 1..<count { name.append(others[Int(byte()) % others.count]) }
        return String(decoding: name, as: UTF8.self)
    }

    /// A valid room name of 1–32 bytes.
    mutating func room() -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789_-".utf8)
        let count = 1 + Int(byte()) % ChatName.maxRoomLength
        return String(decoding: (0..<count).map { _ in alphabet[Int(byte()) % alphabet.count] }, as: UTF8.self)
    }

    /// Text of 0–300 bytes drawn raw from the input, made valid UTF-8 by replacing bad bytes.
    mutating func text() -> String {
        let count = Int(byte()) + Int(byte() % 45)
        return String(decoding: (0..<count).map { _ in byte() }, as: UTF8.self)
    }

    /// A count for a list, kept small so frames stay small.
    mutating func count() -> Int { Int(byte() % 12) }

    /// A frame of a type chosen by the next byte, every field drawn from the bytes after it.
    mutating func frame() -> Frame {
        switch byte() % 37 {
        case 0: return .hello(version: UInt16(truncatingIfNeeded: integer()), nick: nick(), password: byte() & 1 == 0 ? nil : text())
        case 1: return .changeNick(nick: nick())
        case 2: return .join(room: room())
        case 3: return .part(room: room())
        case 4: return .say(room: room(), text: text())
        case 5: return .emote(room: room(), text: text())
        case 6: return .tell(recipient: nick(), text: text())
        case 7: return .listRooms
        case 8: return .who(room: room())
        case 9: return .setTopic(room: room(), text: text())
        case 10: return .requestHistory(room: room(), count: UInt32(truncatingIfNeeded: integer()))
        case 11: return .welcome(version: UInt16(truncatingIfNeeded: integer()), nick: nick(), maxFrameSize: UInt32(truncatingIfNeeded: integer()), motd: text())
        case 12: return .message(room: room(), seq: seq(), time: integer(), sender: nick(), text: text())
        case 13: return .action(room: room(), seq: seq(), time: integer(), sender: nick(), text: text())
        case 14: return .direct(sender: nick(), recipient: nick(), time: integer(), text: text())
        case 15: return .joined(room: room(), seq: seq(), time: integer(), nick: nick())
        case 16: return .left(room: room(), seq: seq(), time: integer(), nick: nick())
        case 17: return .quit(room: room(), seq: seq(), time: integer(), nick: nick(), reason: text())
        case 18: return .nickChanged(room: room(), seq: seq(), time: integer(), old: nick(), new: nick())
        case 19: return .nickAccepted(nick: nick())
        case 20:
            return .roomList(rooms: (0..<count()).map { _ in
                RoomInfo(name: room(), memberCount: UInt32(truncatingIfNeeded: integer()), topic: text())
            })
        case 21: return .members(room: room(), nicks: (0..<count()).map { _ in nick() })
        case 22: return .topic(room: room(), seq: seq(), time: integer(), setBy: nick(), text: text())
        case 23: return .history(room: room(), entries: historyEntries(allowingTopics: false))
        case 24: return .ping(token: integer())
        case 25: return .pong(token: integer())
        case 26:
            return .error(
                code: ErrorCode(rawValue: UInt16(truncatingIfNeeded: integer())), fatal: byte() & 1 == 1,
                frameType: FrameType(rawValue: byte()), reason: text())
        case 27: return .goodbye(reason: text())
        case 28:
            return .fetchHistory(
                room: room(), direction: byte() & 1 == 0 ? .before : .after, seq: integer(),
                limit: UInt32(truncatingIfNeeded: integer()))
        case 29: return .setAway(text: text())
        case 30: return .roomState(room: room(), epoch: max(1, integer()), firstSeq: integer(), lastSeq: integer())
        case 31:
            return .historyPage(
                room: room(), epoch: max(1, integer()), complete: byte() & 1 == 1, entries: historyEntries(allowingTopics: true))
        case 32:
            return .roomListPage(complete: byte() & 1 == 1, rooms: (0..<count()).map { _ in
                RoomInfo(name: room(), memberCount: UInt32(truncatingIfNeeded: integer()), topic: text())
            })
        case 33: return .membersPage(room: room(), complete: byte() & 1 == 1, nicks: (0..<count()).map { _ in nick() })
        case 34: return .away(nick: nick(), text: text())
        case 35:
            return .limits(
                requestRate: UInt32(truncatingIfNeeded: integer()), requestBurst: UInt32(truncatingIfNeeded: integer()),
                byteRate: UInt32(truncatingIfNeeded: integer()), byteBurst: UInt32(truncatingIfNeeded: integer()))
        default:
            // A skippable type this version does not define.
            var type = FrameType(rawValue: 1 + byte() % 0x7F)
            while type.name != nil { type = FrameType(rawValue: type.rawValue % 0x7F + 1) }
            return .unknown(type: type, payload: (0..<Int(byte())).map { _ in byte() })
        }
    }

    /// A sequence number: never 0.
    private mutating func seq() -> UInt64 { max(1, integer()) }

    /// Entries with strictly increasing sequence numbers and times that may go either way;
    /// topic changes among them only where `allowingTopics` (a `historyPage`).
    private mutating func historyEntries(allowingTopics: Bool) -> [HistoryEntry] {
        let kinds: [HistoryEntry.Kind] = allowingTopics ? [.message, .action, .topic] : [.message, .action]
        var entries: [HistoryEntry] = []
        var seq: UInt64 = 0
        for _ in 0..<count() {
            let (next, overflow) = seq.addingReportingOverflow(max(1, integer()))
            if overflow { break }
            seq = next
            entries.append(
                HistoryEntry(kind: kinds[Int(byte()) % kinds.count], seq: seq, time: integer(), sender: nick(), text: text()))
        }
        return entries
    }
}
