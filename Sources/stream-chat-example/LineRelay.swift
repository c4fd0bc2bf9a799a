import Dispatch
import Foundation
import SocketStreams

/// A tiny line relay to try the client against: every complete line one client sends goes to every
/// other client, and each newcomer is greeted with a line starting with "* welcome".
///
/// Built on SocketListener and SocketChannel rather than the stream bridge: a server with many
/// connections is what Dispatch sources are for. It keeps no history and knows no nicks (clients
/// put their nick in the line).
///
/// Ownership and threading: the relay owns the listener and, through their channels, every client
/// socket. All state lives on `queue`; handlers run there.
final class LineRelay: @unchecked Sendable {
    /// The longest line relayed; a client that sends more without a newline is disconnected.
    static let maximumLineLength = 64 * 1024
    /// How much may wait to be sent to one client; a client that falls further behind is disconnected.
    static let maximumBacklog = 1 << 20

    private final class Client {
        let channel: SocketChannel
        /// Received bytes after the last complete line.
        var partialLine: [UInt8] = []
        init(channel: SocketChannel) { self.channel = channel }
    }

    private let queue = DispatchQueue(label: "stream-chat-example.relay")
    private let listener: SocketListener
    private var clients: [ObjectIdentifier: Client] = [:]

    /// Binds `port` on every local address, IPv6 and IPv4 on one socket where the system allows,
    /// otherwise IPv4 only.
    init(port: Int) throws(SocketError) {
        do {
            listener = try SocketListener(host: "::", port: port, dualStack: true)
        } catch {
            listener = try SocketListener(host: "0.0.0.0", port: port)
        }
    }

    /// The port listened on (the chosen one when 0 was asked for).
    var port: Int { listener.port }

    /// Starts accepting clients.
    func start() {
        queue.async { [self] in
            listener.start(queue: queue) { [self] socket in
                accept(socket)
            } onError: { error in
                writeLine("* accept failed: \(error)")
            }
        }
    }

    private func accept(_ socket: Socket) {
        try? socket.setNoDelay()
        let channel = SocketChannel(socket: socket, queue: queue)
        let client = Client(channel: channel)
        let key = ObjectIdentifier(client)
        channel.onBytes = { [unowned self, unowned client] bytes in received(bytes, from: client) }
        channel.onClosed = { [unowned self] _ in
            clients[key] = nil
            writeLine("* \(channel.label) left (\(clients.count) connected)")
        }
        clients[key] = client
        channel.start()
        writeLine("* \(channel.label) joined (\(clients.count) connected)")
        channel.write(ByteChunk(Array("* welcome to the relay (\(clients.count) connected)\n".utf8)))
    }

    /// Relays every complete line in `bytes` to the other clients, sharing one chunk among them.
    private func received(_ bytes: UnsafeRawBufferPointer, from sender: Client) {
        sender.partialLine += bytes
        while let end = sender.partialLine.firstIndex(of: UInt8(ascii: "\n")) {
            let line = ByteChunk(sender.partialLine[...end])
            sender.partialLine.removeFirst(end + 1)
            for client in clients.values where client !== sender {
                client.channel.write(line)
                if client.channel.outboundBytes > Self.maximumBacklog { client.channel.close() }
            }
        }
        if sender.partialLine.count > Self.maximumLineLength { sender.channel.close() }
    }
}
