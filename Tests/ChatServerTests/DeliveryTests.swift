import ChatClient
import ChatProtocol
import ChatServer
import RoomLog
import TestSupport
import Testing

/// One room message as a receiver saw it.
private struct Delivery: Hashable, Sendable {
    var seq: UInt64
    var sender: String
    var text: String
}

/// Delivery guarantees under load: exact accounting with many clients, and a client that stops
/// reading. Serialized: each binds many sockets and the second measures the process's memory.
@Suite("Delivery under load", .serialized)
struct DeliveryTests {
    @Test func thousandClientsReceiveEveryMessageExactlyOnceInTheServersOrder() async throws {
        DescriptorLimit.raiseToHardLimit()
        let clientCount = 1_000
        let roomCount = 20
        let messagesPerClient = 5
        let membersPerRoom = clientCount / roomCount
        let expectedPerReceiver = membersPerRoom * messagesPerClient
        try await withServer(testConfiguration { $0.maxClientsPerAddress = clientCount }) { server in
            // Everyone connects and joins before anyone speaks, so every message has every room
            // member as a recipient.
            var clients: [TestClient] = []
            for batch in stride(from: 0, to: clientCount, by: 100) {
                let joined = try await withThrowingTaskGroup(of: (Int, TestClient).self) { group in
                    for index in batch..<min(batch + 100, clientCount) {
                        group.addTask {
                            let client = try await TestClient.connect(server, nick: "user\(index)")
                            try await client.join("room\(index % roomCount)")
                            return (index, client)
                        }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }.sorted { $0.0 < $1.0 }.map(\.1)
                }
                clients += joined
            }

            let received = try await withThrowingTaskGroup(of: (Int, [Delivery]).self) { group in
                for (index, client) in clients.enumerated() {
                    group.addTask {
                        let room = "room\(index % roomCount)"
                        try await client.send((0..<messagesPerClient).map { .say(room: room, text: "user\(index)#\($0)") })
                        let deliveries = try await client.collect(expectedPerReceiver, "messages", limit: .seconds(180)) {
                            frame -> Delivery? in
                            guard case .message(room, let seq, _, let sender, let text) = frame else { return nil }
                            return Delivery(seq: seq, sender: sender, text: text)
                        }
                        return (index, deliveries)
                    }
                }
                return try await group.reduce(into: [Int: [Delivery]]()) { $0[$1.0] = $1.1 }
            }

            var orderByRoom: [Int: [Delivery]] = [:]
            for index in 0..<clientCount {
                let deliveries = received[index] ?? []
                let room = index % roomCount
                let expected = Set(
                    stride(from: room, to: clientCount, by: roomCount).flatMap { sender in
                        (0..<messagesPerClient).map { "user\(sender)#\($0)" }
                    })
                #expect(deliveries.count == expectedPerReceiver, "user\(index) received \(deliveries.count)")
                #expect(Set(deliveries.map(\.text)) == expected, "user\(index): every message exactly once")
                #expect(zip(deliveries, deliveries.dropFirst()).allSatisfy { $0.seq < $1.seq }, "user\(index): seq increases")
                #expect(deliveries.allSatisfy { $0.text.hasPrefix("\($0.sender)#") }, "the server stamps the real sender")
                // Every member of a room sees the same messages in the same order.
                if let reference = orderByRoom[room] {
                    #expect(deliveries == reference, "user\(index) saw room\(room) in a different order")
                } else {
                    orderByRoom[room] = deliveries
                }
            }
            for client in clients { client.close() }
        }
    }

    @Test func disconnectsAClientThatStopsReadingWhileOthersReceiveEverything() async throws {
        let configuration = testConfiguration {
            $0.slowConsumerTimeout = .seconds(2)
            $0.maxFrameSize = 16 << 10
        }
        try await withServer(configuration) { server in
            let alice = try await TestClient.connect(server, nick: "alice")
            let bob = try await TestClient.connect(server, nick: "bob")
            try await alice.join("r")
            try await bob.join("r")
            let stalled = try await RawClient(port: server.port)
            try await stalled.write(.hello(version: 1, nick: "stalled", password: nil))
            try await stalled.write(.join(room: "r"))
            for client in [alice, bob] {
                _ = try await client.waitFor("stalled to join") { if case .joined("r", _, _, "stalled") = $0 { true } else { nil } }
            }

            var mostQueued = 0
            let text = String(repeating: "x", count: 8_000)
            let batches = 512
            let perBatch = 16  // 512 × 16 × 8 kB ≈ 64 MB through the room
            let quits = QuitLog()
            for _ in 0..<batches {
                try await alice.send(Array(repeating: Frame.say(room: "r", text: text), count: perBatch))
                // Keep the readers in step with the sender so that only the stalled client falls behind.
                for client in [alice, bob] {
                    _ = try await client.collect(perBatch, "messages") { frame -> Bool? in
                        if case .quit("r", _, _, "stalled", let reason) = frame { quits.record(reason) }
                        if case .message = frame { return true }
                        return nil
                    }
                }
                mostQueued = max(mostQueued, server.queuedBytes)
            }

            let reasons = quits.reasons
            #expect(reasons.count == 2, "alice and bob each saw the stalled client quit: \(reasons)")
            #expect(reasons.allSatisfy { $0.contains("slow consumer") }, "\(reasons)")
            // Without the bound the stalled client's queue would hold most of the 64 MB. (What the
            // queues pin, measured by the server itself: this process's RSS also counts the
            // tests running beside this one.)
            #expect(mostQueued < 40 << 20, "the server's queues held up to \(mostQueued >> 20) MiB")
            alice.close()
            bob.close()
            stalled.close()
        }
    }
}

extension DeliveryTests {
    /// The room log's memory promise for a member that stops reading: its queue holds a slot per
    /// segment of the room's encoded events (`RoomSegments`), not a chunk per event — in memory
    /// mode, and in durable mode, where a turn's events wait in the queue for their commit.
    @Test(arguments: [false, true])
    func aMemberThatStopsReadingCostsASlotPerSegmentNotPerMessage(durable: Bool) async throws {
        let data = try TemporaryDirectory(prefix: "chat-delivery")
        defer { data.remove() }
        let store = durable ? try SQLiteRoomStore(directory: data.path, durability: .off, retention: .keepAll) : nil
        defer { store?.close() }
        try await withServer(testConfiguration(), store: store) { server in
            let alice = try await TestClient.connect(server, nick: "alice")
            try await alice.join("r")
            let stalled = try BlockingSocket(port: server.port, receiveBuffer: 4096)
            defer { stalled.close() }
            _ = await stalled.send([.hello(version: 1, nick: "stalled", password: nil), .join(room: "r")])
            _ = try await alice.waitFor("stalled to join") { if case .joined("r", _, _, "stalled") = $0 { true } else { nil } }

            // 20,000 lines, about 3 MB of frames: far more than the stalled client's kernel buffers
            // take, less than the slow-consumer bound (8 MiB).
            let batches = 200
            let perBatch = 100
            let padding = String(repeating: "-", count: 140)
            for batch in 0..<batches {
                try await alice.send((0..<perBatch).map { Frame.say(room: "r", text: "line \(batch * perBatch + $0) \(padding)") })
                _ = try await alice.collect(perBatch, "echoes") { frame -> Bool? in
                    if case .message = frame { return true }
                    return nil
                }
            }
            let (queued, slots) = (server.queuedBytes, server.queuedSlots)
            print("stalled member: \(queued) bytes queued in \(slots) slots")
            #expect(queued > 256 << 10, "the stalled member's queue holds much of the burst: \(queued) bytes")
            // A chunk per line would be a slot per 160 bytes; a segment holds up to 64 KiB.
            #expect(slots <= 2 + queued / (16 << 10), "\(slots) slots for \(queued) bytes queued")
            alice.close()
        }
    }

    /// A room's segment is let go once every member has sent it: after a busy room falls quiet
    /// and its members have read everything, the output queues pin nothing.
    @Test func aQuietRoomsSegmentsAreLetGoOnceSent() async throws {
        try await withServer(testConfiguration()) { server in
            let alice = try await TestClient.connect(server, nick: "alice")
            let bob = try await TestClient.connect(server, nick: "bob")
            try await alice.join("r")
            try await bob.join("r")
            _ = try await alice.waitFor("bob to join") { if case .joined("r", _, _, "bob") = $0 { true } else { nil } }
            let lines = 2_000
            try await alice.send((0..<lines).map { Frame.say(room: "r", text: "line \($0) with some words") })
            for client in [alice, bob] {
                _ = try await client.collect(lines, "lines") { frame -> Bool? in
                    if case .message = frame { return true }
                    return nil
                }
            }
            let released = await eventually(timeout: .seconds(10)) { server.queuedBytes == 0 }
            #expect(released, "the segments are let go at a tick: \(server.queuedBytes) bytes still pinned")
            alice.close()
            bob.close()
        }
    }
}

/// The reasons of `quit` events seen by the readers (who read one at a time).
private final class QuitLog: @unchecked Sendable {
    private(set) var reasons: [String] = []
    func record(_ reason: String) { reasons.append(reason) }
}
