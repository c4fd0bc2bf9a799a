import Dispatch
import Glibc
import Testing
@testable import SocketCore

/// `SocketChannel`'s outbound queue: what it costs, giving up on a peer, and half-close.
@Suite("Channel queue")
struct ChannelQueueTests {
    /// A server-side channel on its own queue, and the raw client socket at the other end.
    private struct Pair {
        let channel: SocketChannel
        let queue: DispatchQueue
        let client: Socket
        /// Yields once, when the channel has closed its descriptor.
        let closed: AsyncStream<Void>

        /// With `smallBuffers`, both ends' kernel buffers are a few KiB, so a queue backs up soon.
        static func make(smallBuffers: Bool = false) async throws -> Pair {
            let acceptor = try RawAcceptor()
            defer { acceptor.close() }
            let client = try await SocketConnector.connect(host: "127.0.0.1", port: acceptor.port)
            let accepted = await acceptor.acceptOne()
            if smallBuffers {
                var size: Int32 = 4096
                setsockopt(client.descriptor, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
                setsockopt(accepted.descriptor, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
            }
            let queue = DispatchQueue(label: "ChannelQueueTests")
            let channel = SocketChannel(socket: accepted, queue: queue)
            let (closed, closing) = AsyncStream.makeStream(of: Void.self)
            queue.sync {
                channel.onClosed = { _ in
                    closing.yield()
                    closing.finish()
                }
                channel.start()
            }
            return Pair(channel: channel, queue: queue, client: client, closed: closed)
        }

        /// Reads exactly `count` bytes from the client socket (within 30 s).
        func read(count: Int) async throws -> [UInt8] {
            try await Task.detached { [client] in
                var received: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: count)
                var timeout = timeval(tv_sec: 30, tv_usec: 0)
                setsockopt(client.descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                let flags = fcntl(client.descriptor, F_GETFL)
                _ = fcntl(client.descriptor, F_SETFL, flags & ~O_NONBLOCK)
                while received.count < count {
                    let got = recv(client.descriptor, &buffer, count - received.count, 0)
                    if got < 0 && errno == EINTR { continue }
                    if got <= 0 { throw SocketError(.posix(errno), operation: "recv", target: "test") }
                    received += buffer[0..<got]
                }
                return received
            }.value
        }

        /// Whether the client socket has nothing to read 200 ms from now: the channel sent all it
        /// was going to (loopback delivers at once).
        func nothingMoreArrives() -> Bool {
            var poller = pollfd(fd: client.descriptor, events: Int16(POLLIN), revents: 0)
            return poll(&poller, 1, 200) == 0
        }

        /// Reads from the client socket until end of stream.
        func readToEnd() async throws -> [UInt8] {
            try await Task.detached { [client] in
                var received: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 65_536)
                // Blocking reads on the test's own thread, with a timeout so a bug cannot hang it.
                var timeout = timeval(tv_sec: 30, tv_usec: 0)
                setsockopt(client.descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                let flags = fcntl(client.descriptor, F_GETFL)
                _ = fcntl(client.descriptor, F_SETFL, flags & ~O_NONBLOCK)
                while true {
                    let count = recv(client.descriptor, &buffer, buffer.count, 0)
                    if count < 0 && errno == EINTR { continue }
                    if count < 0 { throw SocketError(.posix(errno), operation: "recv", target: "test") }
                    if count == 0 { return received }
                    received += buffer[0..<count]
                }
            }.value
        }
    }

    @Test func countsWhatQueuedChunksReallyCost() async throws {
        let pair = try await Pair.make()
        defer { pair.client.close() }
        let (bytes, cost) = pair.queue.sync {
            pair.channel.enqueue(ByteChunk([0x02, 0x41, 0x2A]))
            pair.channel.enqueue(ByteChunk([UInt8](repeating: 7, count: 1000)))
            return (pair.channel.outboundBytes, pair.channel.outboundCost)
        }
        #expect(bytes == 1003)
        #expect(cost == 1003 + 2 * (ByteChunk.overheadBytes + SocketChannel.slotBytes), "a 3-byte pong costs far more than 3 bytes")
        let drained = pair.queue.sync {
            pair.channel.flush()
            return (pair.channel.outboundBytes, pair.channel.outboundCost)
        }
        #expect(drained == (0, 0))
        pair.queue.sync { pair.channel.close() }
    }

    @Test func aMeterCountsChunksUntilTheLastQueueLetsThemGo() {
        let meter = MemoryMeter()
        var chunks: [ByteChunk] = (0..<10).map { _ in ByteChunk([UInt8](repeating: 1, count: 100), meter: meter) }
        let shared = chunks
        #expect(meter.bytes == 10 * ByteChunk.cost(ofBytes: 100))
        chunks.removeAll()
        #expect(meter.bytes == 10 * ByteChunk.cost(ofBytes: 100), "still held elsewhere")
        withExtendedLifetime(shared) {}
        _ = consume shared
        #expect(meter.bytes == 0)
    }

    @Test func givingUpKeepsThePartlySentChunkWholeThenSendsTheLastWord() async throws {
        // A client that reads nothing yet, with a small receive buffer, so the queue backs up.
        let pair = try await Pair.make(smallBuffers: true)
        defer { pair.client.close() }
        let chunkSize = 1000
        let chunks = (0..<3000).map { index in
            ByteChunk((0..<chunkSize).map { UInt8(truncatingIfNeeded: index &* 31 &+ $0) })
        }
        let dropped = pair.queue.sync {
            for chunk in chunks { pair.channel.enqueue(chunk) }
            pair.channel.flush()
            let dropped = pair.channel.discardUnsent()
            pair.channel.enqueue(ByteChunk(Array("END".utf8)))
            pair.channel.shutdownWrite()
            pair.channel.flush()
            return dropped
        }
        #expect(dropped > 0, "the peer could not have taken 3 MB")
        let received = try await pair.readToEnd()
        #expect(received.suffix(3) == Array("END".utf8)[...], "the last word arrives last")
        let data = received.dropLast(3)
        #expect(data.count % chunkSize == 0, "only whole chunks before it: \(data.count) bytes")
        let expected = chunks.prefix(data.count / chunkSize).flatMap { Array($0.bytes) }
        #expect(Array(data) == expected, "the chunks that left, in order and intact")
        #expect(data.count + dropped == chunks.count * chunkSize)
        pair.queue.sync { pair.channel.close() }
    }

    /// Ranges of a chunk filled in parts, as the server queues a room's events: a range that
    /// continues the last one extends its slot; anything queued between starts a new one.
    @Test func aRangeThatContinuesTheLastOneExtendsItsSlot() async throws {
        let pair = try await Pair.make()
        defer { pair.client.close() }
        let parts = SegmentParts(channel: pair.channel)
        let segment = parts.segment
        let reply = ByteChunk(Array("reply".utf8))
        let (slotsAfterRun, costAfterRun, costAfterAll) = pair.queue.sync {
            func queuePart(_ text: String) { parts.queue(text) }
            for word in ["one ", "two ", "three "] { queuePart(word) }
            let slotsAfterRun = pair.channel.queuedSlots
            let costAfterRun = pair.channel.outboundCost
            pair.channel.enqueue(reply)
            queuePart("four ")
            // A range that does not continue the last one, in the same chunk, takes its own slot.
            pair.channel.enqueue(segment, bytes: 0..<4)
            return (slotsAfterRun, costAfterRun, pair.channel.outboundCost)
        }
        #expect(slotsAfterRun == 1, "three parts in a row take one slot")
        #expect(costAfterRun == ByteChunk.overheadBytes + SocketChannel.slotBytes + 14, "the bytes, and one overhead")
        let expectedCost = costAfterRun + 3 * (ByteChunk.overheadBytes + SocketChannel.slotBytes) + 5 + 5 + 4
        #expect(costAfterAll == expectedCost, "the reply and the parts after it take slots of their own")
        pair.queue.sync {
            pair.channel.shutdownWrite()
            pair.channel.flush()
        }
        let received = try await pair.readToEnd()
        #expect(String(decoding: received, as: UTF8.self) == "one two three replyfour one ", "in the order queued")
        pair.queue.sync { pair.channel.close() }
    }

    /// A range that continues a slot already partly sent extends it, and leaves after the rest of
    /// it: the queue writes a slot's new end into the ring only when something reads the ring
    /// (`SocketChannel.settleTail`), and this is the case where the ring's end is out of date
    /// while the socket is still sending from it.
    @Test func aSlotExtendedWhileItIsPartlySentSendsItsRestThenTheExtension() async throws {
        let pair = try await Pair.make(smallBuffers: true)
        defer { pair.client.close() }
        // More than loopback takes at once with small buffers (64 KiB).
        let size = 96 << 10
        let bytes = (0..<2 * size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 9) }
        let segment = ByteChunk(capacity: 2 * size)
        bytes.withUnsafeBytes { segment.fill(from: $0, at: 0) }
        let (leftAfterFlush, slots, queued) = pair.queue.sync {
            pair.channel.enqueue(segment, bytes: 0..<size)
            // The kernel takes a few KiB and pushes back: the slot is partly sent.
            pair.channel.flush()
            let left = pair.channel.outboundBytes
            pair.channel.enqueue(segment, bytes: size..<2 * size)
            return (left, pair.channel.queuedSlots, pair.channel.outboundBytes)
        }
        #expect(leftAfterFlush > 0 && leftAfterFlush < size, "part of the first range left (\(leftAfterFlush) of \(size) still queued)")
        #expect(slots == 1, "the second range extends the partly sent slot")
        #expect(queued == leftAfterFlush + size)
        // The rest need not trickle through 4 KiB windows.
        var larger: Int32 = 1 << 20
        setsockopt(pair.client.descriptor, SOL_SOCKET, SO_RCVBUF, &larger, socklen_t(MemoryLayout<Int32>.size))
        pair.queue.sync {
            pair.channel.shutdownWrite()
            pair.channel.flush()
        }
        let received = try await pair.readToEnd()
        #expect(received.count == 2 * size)
        #expect(received == bytes, "the rest of the first range, then the second, in order")
        pair.queue.sync { pair.channel.close() }
    }

    /// Bytes queued while the channel holds them stay until released, even those that extend a
    /// slot whose first part may leave; what leaves is always a prefix of what was queued.
    @Test func heldBytesLeaveOnlyOnceReleasedAndInOrder() async throws {
        let pair = try await Pair.make()
        defer { pair.client.close() }
        let parts = SegmentParts(channel: pair.channel)
        func queuePart(_ text: String) { parts.queue(text) }
        let (slots, held, costHeld) = pair.queue.sync {
            queuePart("sent ")
            pair.channel.holdsNewBytes = true
            // Extends the slot of "sent ", whose bytes may go.
            queuePart("held ")
            pair.channel.enqueue(ByteChunk(Array("reply ".utf8)))
            pair.channel.holdsNewBytes = false
            // Behind held bytes: held too, whatever `holdsNewBytes` says.
            queuePart("behind")
            pair.channel.flush()
            return (pair.channel.queuedSlots, pair.channel.heldBytes, pair.channel.outboundCost)
        }
        #expect(slots == 3, "the first slot is extended, then a reply, then a new range")
        #expect(held == 5 + 6 + 6, "held: everything queued from the hold on")
        // A slot partly sent costs all its bytes until it has left whole.
        #expect(costHeld == 5 + held + 3 * (ByteChunk.overheadBytes + SocketChannel.slotBytes), "what is held still costs")
        let first = try await pair.read(count: 5)
        #expect(String(decoding: first, as: UTF8.self) == "sent ")
        #expect(pair.nothingMoreArrives(), "nothing held left the queue")
        pair.queue.sync {
            pair.channel.release(5 + 6)
            pair.channel.flush()
        }
        let released = try await pair.read(count: 11)
        #expect(String(decoding: released, as: UTF8.self) == "held reply ")
        #expect(pair.nothingMoreArrives(), "only what was released left")
        pair.queue.sync {
            pair.channel.release(.max)
            pair.channel.shutdownWrite()
            pair.channel.flush()
        }
        #expect(String(decoding: try await pair.readToEnd(), as: UTF8.self) == "behind")
        pair.queue.sync { pair.channel.close() }
    }

    /// Dropping the held bytes leaves the queue as it was before them — a slot cut back to its
    /// released part — and a shutdown asked for meanwhile waits for no held byte.
    @Test func discardingHeldBytesCutsTheQueueBackToWhatWasReleased() async throws {
        let pair = try await Pair.make()
        defer { pair.client.close() }
        let segment = ByteChunk(capacity: 64)
        let (costBefore, costAfter, held) = pair.queue.sync {
            Array("kept ".utf8).withUnsafeBytes { segment.fill(from: $0, at: 0) }
            Array("dropped".utf8).withUnsafeBytes { segment.fill(from: $0, at: 5) }
            pair.channel.enqueue(segment, bytes: 0..<5)
            let costBefore = pair.channel.outboundCost
            pair.channel.holdsNewBytes = true
            pair.channel.enqueue(segment, bytes: 5..<12)
            pair.channel.enqueue(ByteChunk(Array("also dropped".utf8)))
            pair.channel.shutdownWrite()
            pair.channel.flush()
            pair.channel.discardHeld()
            return (costBefore, pair.channel.outboundCost, pair.channel.heldBytes)
        }
        #expect(held == 0)
        #expect(costAfter <= costBefore, "what was held no longer costs anything")
        pair.queue.sync {
            pair.channel.holdsNewBytes = false
            pair.channel.flush()
        }
        #expect(String(decoding: try await pair.readToEnd(), as: UTF8.self) == "kept ", "the end of stream follows the released bytes")
        pair.queue.sync { pair.channel.close() }
    }

    @Test func afterThePeersEndTheQueuedReplyLeavesAndTheChannelClosesItself() async throws {
        let pair = try await Pair.make()
        defer { pair.client.close() }
        pair.queue.sync {
            pair.channel.onEndOfInput = { [channel = pair.channel] in
                channel.enqueue(ByteChunk(Array("reply".utf8)))
                channel.shutdownWrite()
                channel.flush()
            }
        }
        _ = try pair.client.write(vectors: [Array("request".utf8)])
        _ = shutdown(pair.client.descriptor, Int32(SHUT_WR))
        let received = try await pair.readToEnd()
        #expect(received == Array("reply".utf8), "the reply queued at end of input arrives, then end of stream")
        let closed = try await withTimeout(.seconds(30), "the channel to close") { [closed = pair.closed] in
            var events = closed.makeAsyncIterator()
            return await events.next() != nil
        }
        #expect(closed == true, "finished both ways, the channel closed its descriptor")
    }

    @Test func bytesAndTheEndThatArriveWhilePausedAreReadOnResume() async throws {
        // The queue's epoll set reports each change of readiness once, and a paused channel lets
        // that report go by: resuming must read what it announced, the peer's end included.
        let pair = try await Pair.make()
        defer { pair.client.close() }
        let received = Locked<[UInt8]>([])
        let ended = Locked(false)
        pair.queue.sync {
            pair.channel.onBytes = { bytes in received.withLock { $0 += bytes } }
            pair.channel.onEndOfInput = { ended.withLock { $0 = true } }
            pair.channel.pauseReading()
        }
        _ = try pair.client.write(vectors: [Array("sent while paused".utf8)])
        pair.client.close()
        pair.queue.sync {}
        #expect(received.withLock { $0 }.isEmpty, "a paused channel delivers nothing")
        pair.queue.sync { pair.channel.resumeReading() }
        try await waitUntil("the end of input after resuming") { ended.withLock { $0 } }
        #expect(received.withLock { $0 } == Array("sent while paused".utf8), "expected the bytes sent while paused, then the end")
        pair.queue.sync { pair.channel.close() }
    }
}

extension Socket {
    /// Writes `buffers` in one call (test helper over the gather write).
    fileprivate func write(vectors buffers: [[UInt8]]) throws -> Int {
        var total = 0
        for buffer in buffers {
            let result = buffer.withUnsafeBytes { bytes in Glibc.send(descriptor, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL)) }
            if result > 0 { total += result }
        }
        return total
    }
}

/// A segment filled in parts, each part queued on `channel` as it is written: how the server
/// queues a room's events (consecutive ranges of one chunk).
private final class SegmentParts {
    let segment = ByteChunk(capacity: 64)
    let channel: SocketChannel
    private var offset = 0

    init(channel: SocketChannel) { self.channel = channel }

    /// Writes `text` after the last part and queues its range (on the channel's queue).
    func queue(_ text: String) {
        let part = Array(text.utf8)
        part.withUnsafeBytes { segment.fill(from: $0, at: offset) }
        channel.enqueue(segment, bytes: offset..<offset + part.count)
        offset += part.count
    }
}
