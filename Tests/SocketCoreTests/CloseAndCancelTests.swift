import Glibc
import Synchronization
import Testing
@testable import SocketCore
import TestSupport

/// The async API when connections close under it and when the tasks using it are cancelled.
@Suite("Close and cancel")
struct CloseAndCancelTests {
    @Test func writesAfterThePeerClosedFailWithTheError() async throws {
        let listener = try ConnectionListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let (client, server) = try await listener.connectedPair()
        server.close()
        // The client sees the close as end of stream; its socket can still send, so the first
        // write is accepted by the kernel, the peer answers it with a reset, and a later write must
        // fail with that error instead of waiting for a wake-up that never comes.
        for try await _ in client.inbound {}
        let failure = try await withTimeout(.seconds(20), "writing to a peer that closed") { () async -> SocketError? in
            for _ in 0..<100 {
                do throws(SocketError) {
                    try await client.write(Array("anyone there?".utf8))
                } catch {
                    return error
                }
            }
            return nil
        }
        let error = try #require(failure ?? nil, "expected a write to a closed peer to fail")
        #expect([EPIPE, ECONNRESET].contains(error.errno ?? 0), "expected EPIPE or ECONNRESET, got \(error)")
        // Once failed, the connection stays failed: the next write reports the same error at once.
        let again = await #expect(throws: SocketError.self) { try await client.write([1]) }
        #expect(again == error)
        client.close()
    }

    @Test func cancellingAConnectEndsItAndClosesItsSocket() async throws {
        let unanswered = try FullBacklogListener()
        defer { unanswered.close() }
        let port = unanswered.port
        let before = try socketDescriptors(port: port)
        let started = ContinuousClock.now
        let connect = Task { () async -> Result<Socket, SocketError> in
            do throws(SocketError) {
                return .success(try await SocketConnector.connect(host: "127.0.0.1", port: port, timeout: .seconds(30)))
            } catch {
                return .failure(error)
            }
        }
        // The connecting socket shows up on the port: cancel while the connect is certainly under way.
        try await waitUntil("the connecting socket exists") { (try? socketDescriptors(port: port)) == before + 1 }
        connect.cancel()
        let outcome = await connect.value
        let elapsed = ContinuousClock.now - started
        if case .success(let socket) = outcome { socket.close() }
        guard case .failure(let error) = outcome else {
            Issue.record("a connect to a port that never answers succeeded")
            return
        }
        #expect(error.isCancellation, "expected ECANCELED, got \(error) after \(elapsed)")
        #expect(error.description == "connect to 127.0.0.1:\(port) failed: Operation canceled (errno 125)")
        // The socket is closed before the connect returns.
        #expect(try socketDescriptors(port: port) == before, "the cancelled connect left its socket open")
    }

    @Test func aConnectionConnectCancelledBeforeItStartsFailsAtOnce() async throws {
        let unanswered = try FullBacklogListener()
        defer { unanswered.close() }
        let port = unanswered.port
        let before = try socketDescriptors(port: port)
        let connect = Task { () async -> Result<SocketConnection, SocketError> in
            do throws(SocketError) {
                return .success(try await SocketConnection.connect(host: "localhost", port: port, timeout: .seconds(30)))
            } catch {
                return .failure(error)
            }
        }
        connect.cancel()
        let outcome = await connect.value
        if case .success(let connection) = outcome { connection.close() }
        guard case .failure(let error) = outcome else {
            Issue.record("a cancelled connect to a port that never answers succeeded")
            return
        }
        #expect(error.isCancellation, "expected ECANCELED, got \(error)")
        #expect(try socketDescriptors(port: port) == before, "the cancelled connect left a socket open")
    }

    @Test func aWriteCancelledWhileWaitingSendsNothing() async throws {
        let listener = try ConnectionListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let (client, server) = try await listener.connectedPair(outboundLimit: 64 * 1024)

        // One write far larger than the kernel's buffers finds the queue empty, so it is queued
        // whole and returns; nobody reads, so the queue then stays over the limit.
        let fill = 32 << 20
        try await client.write([UInt8](repeating: 1, count: fill))

        // A write made now has to wait for room. Cancelled while it waits, it must leave nothing
        // queued, so that a retry cannot send its bytes twice.
        let waiting = Task { () async -> SocketError? in
            do throws(SocketError) {
                try await client.write([UInt8](repeating: 2, count: 1000))
                return nil
            } catch {
                return error
            }
        }
        try await waitUntil("the second write waits for room") { await client.waitingWriteCount == 1 }
        waiting.cancel()
        let waitingError = await waiting.value
        #expect(waitingError?.isCancellation == true, "expected the waiting write to end with ECANCELED, got \(String(describing: waitingError))")

        // What arrives is exactly what the successful writes sent: no byte of the cancelled one.
        let reading = Task {
            var total = 0
            var cancelledBytesArrived = false
            for try await chunk in server.inbound {
                total += chunk.count
                if chunk.contains(2) { cancelledBytesArrived = true }
            }
            return (total, cancelledBytesArrived)
        }
        try await client.write([UInt8](repeating: 3, count: 100))
        client.shutdownWrite()
        let (total, cancelledBytesArrived) = try await reading.value
        #expect(total == fill + 100, "expected the fill and the last write, \(fill + 100) bytes; got \(total)")
        #expect(!cancelledBytesArrived, "a write cancelled while waiting must send nothing, but its bytes arrived")
        client.close()
        server.close()
    }

    @Test func aListenerWhoseConnectionsAreNoLongerTakenStopsListening() async throws {
        let listener = try ConnectionListener(host: "127.0.0.1", port: 0)
        let port = listener.port
        let listening = try listeningSocketIdentities(port: port)
        #expect(listening.count == 1, "expected the one listening socket on port \(port), found \(listening)")
        let taker = Task {
            for await connection in listener.connections { connection.close() }
        }
        taker.cancel()
        await taker.value
        // Nobody can take a connection from the ended sequence any more, so the listener closes
        // instead of accepting connections only to drop them. The check follows the listening
        // socket itself, not the port: once the port is free another test running alongside may
        // listen on it or use it as a connection's source port (CI saw a connect succeed that way).
        try await waitUntil("the listening socket is closed") {
            (try? openSocketIdentities().isDisjoint(with: listening)) == true
        }
        listener.close()
    }

    @Test(arguments: [-1, 65536, 70000])
    func portsOutsideTheTCPRangeAreRejected(port: Int) async throws {
        let resolveError = #expect(throws: SocketError.self) { try Resolver.resolve(host: "localhost", port: port) }
        #expect(resolveError?.errno == EINVAL)
        #expect(resolveError?.description == "resolve localhost:\(port) failed: port \(port) is outside 0…65535 (errno 22)")
        let connectError = await #expect(throws: SocketError.self) {
            _ = try await SocketConnection.connect(host: "127.0.0.1", port: port)
        }
        #expect(connectError?.errno == EINVAL, "\(String(describing: connectError))")
        let listenError = #expect(throws: SocketError.self) { _ = try SocketListener(host: "127.0.0.1", port: port) }
        #expect(listenError?.errno == EINVAL, "\(String(describing: listenError))")
        #expect(SocketAddress(ip: "127.0.0.1", port: port) == nil)
    }
}
