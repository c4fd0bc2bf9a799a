import ChatClient
import Dispatch
import Foundation
import Glibc

/// The interactive client: libedit prompt, events printed above it, Tab completion from the
/// session's nicks and rooms.
@MainActor
final class TerminalFrontEnd: ClientDisplay {
    private let editor: LineEditor
    private var renderer: MessageRenderer
    private weak var driver: ChatClientDriver?

    /// A front end that keeps line history in `historyFile`.
    init(historyFile: String?, colour: Bool) {
        editor = LineEditor(prompt: "> ", historyFile: historyFile)
        renderer = MessageRenderer(colour: colour)
    }

    /// Connects the editor to `driver` and takes over the terminal.
    func start(driver: ChatClientDriver) {
        self.driver = driver
        editor.onLine = { [weak driver] line in driver?.submit(line) }
        editor.onEndOfInput = { [weak driver] in driver?.quit(reason: CommandParser.defaultQuitReason) }
        editor.complete = { [weak driver] word, lineBefore in
            guard let session = driver?.session else { return [] }
            return CompletionCandidates.candidates(
                for: word, lineBefore: lineBefore, nicks: session.knownNicks, rooms: session.knownRooms)
        }
        editor.start()
        sessionChanged()
    }

    /// Restores the terminal.
    func stop() { editor.stop() }

    /// Re-reads the terminal size after a SIGWINCH.
    func terminalResized() { editor.terminalResized() }

    func show(_ event: ChatEvent) {
        editor.printAbove(renderer.render(event))
    }

    func sessionChanged() {
        guard let session = driver?.session else { return }
        renderer.ownNick = session.nick
        let room = session.currentRoom.map { "#" + $0 } ?? "(no room)"
        editor.setPrompt(session.isConnected ? "[\(room)] " : "[\(room) offline] ")
    }
}

/// The client for pipes and scripts: plain lines in from stdin, plain lines out to stdout.
@MainActor
final class PipeFrontEnd: ClientDisplay {
    private var renderer = MessageRenderer(colour: false)
    private weak var driver: ChatClientDriver?

    /// Starts reading stdin once `driver` is connected, so lines are not refused as unsent.
    func start(driver: ChatClientDriver) {
        self.driver = driver
        let (lines, continuation) = AsyncStream<String?>.makeStream()
        driver.onFirstConnect = {
            // readLine blocks, so it runs on a thread of its own; the stream keeps line order.
            let thread = Thread {
                while let line = readLine(strippingNewline: true) { continuation.yield(line) }
                continuation.yield(nil)
                continuation.finish()
            }
            thread.start()
        }
        Task { @MainActor [weak driver] in
            for await line in lines {
                guard let line else {
                    driver?.quit(reason: "end of input")
                    return
                }
                driver?.submit(line)
            }
        }
    }

    func show(_ event: ChatEvent) {
        StandardOutput.write(renderer.render(event) + "\n")
    }

    func sessionChanged() {
        renderer.ownNick = driver?.session.nick
    }
}
