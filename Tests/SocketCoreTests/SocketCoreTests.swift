import Dispatch
import Foundation
import Glibc
import Testing
@testable import SocketCore
import TestSupport

/// The POSIX layer: resolution, errors, listening, connecting and the Dispatch-driven channel.
@Suite("Socket core")
struct SocketCoreTests {
    @Test func resolvesLocalhostToLoopbackAddresses() throws {
        let addresses = try Resolver.resolve(host: "localhost", port: 7000)
        #expect(!addresses.isEmpty, "localhost should resolve")
        for address in addresses {
            #expect(["127.0.0.1", "::1"].contains(address.ip), "unexpected address \(address)")
            #expect(address.port == 7000)
        }
    }

    @Test func printsAddressesInTheUsualNotation() throws {
        #expect(SocketAddress(ip: "127.0.0.1", port: 80)?.description == "127.0.0.1:80")
        #expect(SocketAddress(ip: "::1", port: 7000)?.description == "[::1]:7000")
        #expect(SocketAddress(ip: "not an address", port: 1) == nil)
    }

    @Test func unknownHostGivesAResolverError() {
        let error = #expect(throws: SocketError.self) {
            try Resolver.resolve(host: "no-such-host.invalid", port: 7000)
        }
        guard let error else { return }
        guard case .resolver = error.code else {
            Issue.record("expected a resolver error, got \(error)")
            return
        }
        #expect(error.description.hasPrefix("resolve no-such-host.invalid:7000 failed: "), "\(error)")
    }

    @Test func refusedConnectNamesCallTargetAndErrno() async throws {
        let port = try unusedPort()
        let error = await #expect(throws: SocketError.self) {
            _ = try await SocketConnector.connect(host: "127.0.0.1", port: port)
        }
        #expect(error?.errno == ECONNREFUSED)
        #expect(error?.description == "connect to 127.0.0.1:\(port) failed: Connection refused (errno 111)")
    }

    @Test func listenerOnPortZeroReportsTheChosenPort() throws {
        let listener = try SocketListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        #expect(listener.port > 0)
        #expect(listener.localAddress.ip == "127.0.0.1")
    }

    @Test func acceptedSocketsAreNonBlockingAndCloseOnExec() async throws {
        let acceptor = try RawAcceptor()
        defer { acceptor.close() }
        let client = try await SocketConnector.connect(host: "127.0.0.1", port: acceptor.port)
        defer { client.close() }
        let accepted = await acceptor.acceptOne()
        defer { accepted.close() }
        #expect(fcntl(accepted.descriptor, F_GETFD) & FD_CLOEXEC != 0, "a forked child would inherit the socket")
        #expect(fcntl(accepted.descriptor, F_GETFL) & O_NONBLOCK != 0, "an accepted socket must not block")
    }

    @Test func bindingATakenPortFailsWithAddressInUse() throws {
        let first = try SocketListener(host: "127.0.0.1", port: 0)
        defer { first.close() }
        let error = #expect(throws: SocketError.self) {
            _ = try SocketListener(host: "127.0.0.1", port: first.port)
        }
        #expect(error?.errno == EADDRINUSE)
        #expect(error?.description.hasPrefix("bind 127.0.0.1:\(first.port) failed: Address already in use") == true)
    }

    @Test func dualStackListenerAcceptsIPv4AndIPv6() async throws {
        let listener = try ConnectionListener(host: "::", port: 0, dualStack: true)
        defer { listener.close() }
        for host in ["127.0.0.1", "::1"] {
            let (client, server) = try await listener.connectedPair(host: host)
            try await client.write(Array("via \(host)".utf8))
            #expect(try await server.readExactly(count: 4 + host.utf8.count) == Array("via \(host)".utf8))
            client.close()
            server.close()
        }
    }

    @Test func connectTriesTheNextAddressWhenOneRefuses() async throws {
        // "localhost" resolves to ::1 and 127.0.0.1; only the IPv4 one listens here, so whichever
        // order the resolver picks, the connector must end up on 127.0.0.1.
        let listener = try ConnectionListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let (client, server) = try await listener.connectedPair(host: "localhost")
        try await server.write(Array("hi".utf8))
        #expect(try await client.readExactly(count: 2) == Array("hi".utf8))
        client.close()
        server.close()
    }

    @Test func connectGivesUpAtItsDeadline() async throws {
        // A listener that never accepts, with a full backlog: the kernel drops further SYNs, so the
        // next connect can only end by its own timeout.
        let listener = try SocketListener(host: "127.0.0.1", port: 0, backlog: 0)
        defer { listener.close() }
        var fillers: [Socket] = []
        defer { fillers.forEach { $0.close() } }
        var timedOut: SocketError?
        for _ in 0..<8 where timedOut == nil {
            do {
                fillers.append(try await SocketConnector.connect(host: "127.0.0.1", port: listener.port, timeout: .milliseconds(300)))
            } catch {
                timedOut = error
            }
        }
        #expect(timedOut?.errno == ETIMEDOUT, "expected a connect to time out once the backlog was full, got \(String(describing: timedOut))")
    }

    @Test func channelDeliversHalfCloseAndKeepsWriting() async throws {
        let listener = try ConnectionListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let (client, server) = try await listener.connectedPair()

        try await client.write(Array("request".utf8))
        client.shutdownWrite()
        // The server reads the request, then end of stream, and can still answer.
        var received: [UInt8] = []
        for try await chunk in server.inbound { received += chunk }
        #expect(received == Array("request".utf8))
        try await server.write(Array("reply".utf8))
        server.shutdownWrite()
        var reply: [UInt8] = []
        for try await chunk in client.inbound { reply += chunk }
        #expect(reply == Array("reply".utf8))
        client.close()
        server.close()
    }

    @Test func writingToAResetPeerFailsWithoutKillingTheProcess() async throws {
        let acceptor = try RawAcceptor()
        defer { acceptor.close() }
        let client = try await SocketConnection.connect(host: "127.0.0.1", port: acceptor.port)
        let server = await acceptor.acceptOne()
        // SO_LINGER with a zero timeout makes close() send RST instead of FIN.
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(server.descriptor, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        server.close()
        // The first writes may still be accepted by the kernel; the RST makes a later one fail.
        var failure: Error?
        for _ in 0..<100 where failure == nil {
            do {
                try await client.write([UInt8](repeating: 1, count: 1024))
            } catch {
                failure = error
            }
        }
        let socketError = try #require(failure as? SocketError, "expected a SocketError, got \(String(describing: failure))")
        #expect([ECONNRESET, EPIPE].contains(socketError.errno ?? 0), "\(socketError)")
        client.close()
    }

    @Test func thousandConnectionsLeaveNoDescriptorBehind() async throws {
        let listener = try ConnectionListener(host: "127.0.0.1", port: 0)
        let before = try socketDescriptors(port: listener.port)
        #expect(before == 1, "only the listening socket should be on the port at first")
        var accepted = listener.connections.makeAsyncIterator()
        for _ in 0..<1000 {
            let client = try await SocketConnection.connect(host: "127.0.0.1", port: listener.port)
            let server = try #require(await accepted.next())
            try await client.write([42])
            #expect(try await server.readExactly(count: 1) == [42])
            client.close()
            // The server sees the close as end of stream and closes too.
            for try await _ in server.inbound {}
            server.close()
        }
        // Closing is asynchronous (after the sources' cancel handlers); wait for it to settle —
        // up to 30 s, as the rest of a full run on two cores can hold the queues that long.
        try await waitUntil("descriptors on the port return to \(before)", timeout: .seconds(30)) {
            (try? socketDescriptors(port: listener.port)) == before
        }
        let after = try socketDescriptors(port: listener.port)
        #expect(after == before, "\(after) sockets on port \(listener.port) after the connections closed, \(before) before")
        listener.close()
    }
}

/// A loopback port with nothing listening on it (bound, then released).
private func unusedPort() throws -> Int {
    let probe = try SocketListener(host: "127.0.0.1", port: 0)
    let port = probe.port
    probe.close()
    return port
}

/// A listener whose accepted sockets come out raw, for tests that need the descriptor itself.
///
/// It keeps the `SocketListener` on a queue of its own, as the listener requires, and hands the
/// first accepted socket to `acceptOne()` through a lock TSan can see.
final class RawAcceptor: @unchecked Sendable {
    private let listener: SocketListener
    private let queue = DispatchQueue(label: "RawAcceptor")
    /// The listening port.
    let port: Int

    init() throws {
        listener = try SocketListener(host: "127.0.0.1", port: 0)
        port = listener.port
    }

    /// The first socket accepted (later ones are closed).
    func acceptOne() async -> Socket {
        let accepted = Locked<Socket?>(nil)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            queue.async { [listener, queue] in
                listener.start(queue: queue) { socket in
                    let first = accepted.withLock { slot -> Bool in
                        guard slot == nil else { return false }
                        slot = socket
                        return true
                    }
                    if first { continuation.resume() } else { socket.close() }
                }
            }
        }
        return accepted.withLock { $0! }
    }

    /// Closes the listener on its queue.
    func close() {
        queue.async { [listener] in listener.close() }
    }
}
