import Foundation
import Glibc
import Synchronization
import Testing
@testable import SocketCore

/// The Swift-concurrency API: exchange, end of stream and backpressure.
@Suite("Async connections")
struct SocketConnectionTests {
    @Test(arguments: ["127.0.0.1", "::1", "localhost"])
    func exchangesBytesBothWays(host: String) async throws {
        let listener = try ConnectionListener(host: host == "::1" ? "::1" : "127.0.0.1", port: 0)
        defer { listener.close() }
        let (client, server) = try await listener.connectedPair(host: host)
        try await client.write(Array("ping".utf8))
        #expect(try await server.readExactly(count: 4) == Array("ping".utf8))
        try await server.write(Array("pong".utf8))
        #expect(try await client.readExactly(count: 4) == Array("pong".utf8))
        client.close()
        // The peer's close ends the server's inbound sequence.
        var rest: [UInt8] = []
        for try await chunk in server.inbound { rest += chunk }
        #expect(rest.isEmpty)
        server.close()
    }

    @Test func writerToAPeerThatDoesNotReadSuspendsAndResumes() async throws {
        let listener = try ConnectionListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let limit = 64 * 1024
        let (client, server) = try await listener.connectedPair(outboundLimit: limit)

        let chunkSize = 16 * 1024
        let chunkCount = 4096  // 64 MiB: far beyond what loopback buffers hold
        let written = Mutex(0)
        let writer = Task {
            for index in 0..<chunkCount {
                try await client.write([UInt8](repeating: UInt8(truncatingIfNeeded: index), count: chunkSize))
                written.withLock { $0 += chunkSize }
            }
            client.shutdownWrite()
        }

        // Nobody reads, so progress must stop.
        let last = try await settledValue { written.withLock { $0 } }
        // What the writer got rid of fits in the kernel's socket buffers (a few MiB on loopback)
        // plus our bounded queue: nothing piles up in user space.
        #expect(last < 16 * 1024 * 1024, "writer should be suspended, but \(last) bytes were accepted")
        #expect(last < chunkSize * chunkCount)

        // Once the peer reads, the writer carries on to the end and every byte arrives in order.
        var received = 0
        var mismatch = false
        for try await chunk in server.inbound {
            for byte in chunk {
                if byte != UInt8(truncatingIfNeeded: received / chunkSize) { mismatch = true }
                received += 1
            }
        }
        try await writer.value
        #expect(received == chunkSize * chunkCount)
        #expect(!mismatch, "bytes arrived out of order")
        client.close()
        server.close()
    }

    @Test func unreadInboundBytesStopTheReaderAtTheLimit() async throws {
        let listener = try ConnectionListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let (client, server) = try await listener.connectedPair()
        // The server never iterates its inbound bytes: the client's writes must stall all the same,
        // because the server's connection stops reading at its inbound limit.
        let written = Mutex(0)
        let writer = Task {
            for _ in 0..<4096 {
                try await client.write([UInt8](repeating: 7, count: 16 * 1024))
                written.withLock { $0 += 16 * 1024 }
            }
        }
        let last = try await settledValue { written.withLock { $0 } }
        #expect(last < 16 * 1024 * 1024, "\(last) bytes were accepted by a connection nobody reads")
        writer.cancel()
        let outcome = await writer.result
        #expect((outcome.failure as? SocketError)?.isCancellation == true, "expected ECANCELED, got \(outcome)")
        client.close()
        server.close()
    }

    @Test func cancelledReadEndsWithECANCELED() async throws {
        let listener = try ConnectionListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let client = try await SocketConnection.connect(host: "127.0.0.1", port: listener.port)
        let reader = Task { try await client.readExactly(count: 1) }
        try await Task.sleep(for: .milliseconds(50))
        reader.cancel()
        let outcome = await reader.result
        #expect((outcome.failure as? SocketError)?.isCancellation == true, "expected ECANCELED, got \(outcome)")
        client.close()
    }

    @Test func cancellationEndsAReadOrWriteWhicheverHappensFirst() async throws {
        // Cancelling right after starting races the task's registration of its wait on the
        // connection's queue; both orders must end the call, never leave it waiting for good.
        let listener = try ConnectionListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let client = try await SocketConnection.connect(
            host: "127.0.0.1", port: listener.port, outboundLimit: 1)
        for _ in 0..<200 {
            let reader = Task { try await client.readExactly(count: 1) }
            reader.cancel()
            let readOutcome = await reader.result
            #expect((readOutcome.failure as? SocketError)?.isCancellation == true, "expected ECANCELED, got \(readOutcome)")
        }
        var cancelledWrites = 0
        for _ in 0..<200 {
            // With a 1-byte limit every write of 64 KiB that the kernel does not take at once waits.
            let writer = Task { try await client.write([UInt8](repeating: 0, count: 64 * 1024)) }
            writer.cancel()
            if case .failure(let error) = await writer.result {
                #expect((error as? SocketError)?.isCancellation == true, "a cancelled write should fail with ECANCELED, not \(error)")
                cancelledWrites += 1
            }
        }
        #expect(cancelledWrites > 0, "nobody reads, so some writes must have been waiting when cancelled")
        client.close()
    }

    @Test func bytesAndEndArrivingTogetherAfterAHalfCloseAreBothRead() async throws {
        // Once both directions are shut down the socket has hung up, and libdispatch reports it only
        // once more; a reader that stops after the bytes and waits for another event for the end of
        // stream waits forever. Repeat so that bytes and FIN often land in the same wake-up.
        let listener = try ConnectionListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        for round in 0..<100 {
            let (client, server) = try await listener.connectedPair()
            client.shutdownWrite()
            for try await _ in server.inbound {}
            try await server.write(Array("reply \(round)".utf8))
            server.shutdownWrite()
            let reply = try await withTimeout(.seconds(20), "reading the reply and end of stream in round \(round)") {
                var bytes: [UInt8] = []
                for try await chunk in client.inbound { bytes += chunk }
                return bytes
            }
            #expect(reply == Array("reply \(round)".utf8))
            client.close()
            server.close()
            if reply == nil { break }
        }
    }
}
