import Foundation
import Glibc
import SocketStreams

// stream-chat-example: parses the command line, then runs either the classic NSStream client on
// the main run loop or the line relay on Dispatch. `--help` explains both.

let options: ExampleOptions
do {
    options = try ExampleOptions.parse(Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment)
} catch {
    writeLine("stream-chat-example: \(error.message)\n\n\(ExampleOptions.usage)", to: STDERR_FILENO)
    exit(64)  // EX_USAGE
}

switch options {
case .help:
    writeLine(ExampleOptions.usage)
case .relay(let port):
    let relay: LineRelay
    do {
        relay = try LineRelay(port: port)
    } catch {
        writeLine("stream-chat-example: \(error)", to: STDERR_FILENO)
        exit(1)
    }
    relay.start()
    writeLine("* relay listening on port \(relay.port)")
    dispatchMain()
case .client(let host, let port, let nick):
    let client = StreamChatClient(host: host, port: port, nick: nick)
    client.start()
    // The run loop returns only if nothing is scheduled any more; the client exits before that.
    while RunLoop.main.run(mode: .default, before: .distantFuture) {}
}
