import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

/// Every session's end is logged and counted, however it ends and in every mode (issue 38,
/// finding 3: in durable mode a connection reset was neither, as its departure waited for a
/// commit and found the connection gone).
@Suite("Disconnects are logged and counted", .serialized)
struct DisconnectAccountingTests {
    static let clients = 50

    @Test(arguments: ServerMode.allCases)
    func fiftyResetsAreLoggedAndCounted(mode: ServerMode) async throws {
        let server = try await ChatServerProcess(mode, arguments: ["--metrics", "127.0.0.1:0", "--log-level", "info"])
        defer { server.stop() }
        let port = try #require(MetricsPortTests.metricsPort(of: server), "the server prints its metrics port")
        var sockets: [BlockingSocket] = []
        for index in 0..<Self.clients {
            let socket = try BlockingSocket(to: server)
            _ = await socket.send([.hello(version: 2, nick: "reset\(index)", password: nil)])
            let welcome = await socket.nextFrame()
            guard case .welcome = welcome else {
                Issue.record("client \(index) was not welcomed: \(String(describing: welcome))")
                return
            }
            _ = await socket.send([.join(room: "resets")])
            sockets.append(socket)
        }
        // Each ends with a reset: no goodbye, no FIN.
        for socket in sockets {
            var reset = linger(l_onoff: 1, l_linger: 0)
            setsockopt(socket.descriptor, SOL_SOCKET, SO_LINGER, &reset, socklen_t(MemoryLayout<linger>.size))
            socket.close()
        }
        let text = try await MetricsPortTests.metrics(port: port) {
            Operations.total("chat_disconnects_total", in: $0) >= Double(Self.clients)
        }
        #expect(text != nil, "\(Self.clients) disconnects are counted")
        let logged = await server.child.waitFor(timeout: .seconds(30)) { output, _ in
            output.components(separatedBy: "client disconnected").count - 1 >= Self.clients
        }
        let lines = server.child.output.components(separatedBy: "client disconnected").count - 1
        #expect(logged, "\(Self.clients) disconnects are logged, \(lines) were:\n\(server.child.output.suffix(3000))")
    }
}
