import ChatClient
import Dispatch
import Foundation
import Glibc

/// The interactive client: the status line and the input line at the bottom of the terminal,
/// edited by libedit (`TerminalEditor`, on its own thread), with events printed above them.
///
/// Everything above the two bottom rows is ordinary terminal output that scrolls into the
/// terminal's scrollback. This type renders events and the status line on the main actor and
/// hands them to the editor, which draws them between two keys; what the user does at the
/// keyboard comes back as `EditorRequest`s.
@MainActor
final class TerminalFrontEnd: ClientDisplay {
    private var renderer: MessageRenderer
    private let terminal = RawTerminal()
    private let editor: TerminalEditor
    private weak var driver: ChatClientDriver?
    private var active = false
    private var pendingAnswer: ((Bool) -> Void)?

    /// A front end that keeps line history in `historyFile`; nil when libedit cannot drive this
    /// terminal. Sets up libedit before the terminal is switched to raw mode (in `start`).
    init?(historyFile: String?, colour: Bool) {
        guard let editor = TerminalEditor(historyFile: historyFile, colour: colour, requests: Self.forward) else { return nil }
        self.editor = editor
        renderer = MessageRenderer(colour: colour)
    }

    /// Connects the editor to `driver` and takes over the terminal.
    func start(driver: ChatClientDriver) {
        self.driver = driver
        TerminalFrontEnd.current = self
        terminal.enter()
        active = true
        sessionChanged()
        editor.start()
    }

    /// Takes the bottom rows off the screen, leaves the half-typed line as the last output and
    /// gives the terminal back as it was; safe to call more than once.
    func stop() {
        guard active else { return }
        active = false
        editor.finish()
        terminal.restore()
        TerminalFrontEnd.current = nil
    }

    /// After a SIGWINCH: the status line for the new width, and the screen drawn anew.
    func terminalResized() {
        sessionChanged()
        editor.resized()
    }

    // The editor's requests reach the front end through this, on the main queue: the editor
    // thread must not call main-actor code, and a closure formed here must not be main-actor
    // isolated (it runs on the editor thread first).
    private static var current: TerminalFrontEnd?

    nonisolated private static func forward(_ request: EditorRequest) {
        DispatchQueue.main.async {
            MainActor.assumeIsolated { TerminalFrontEnd.current?.perform(request) }
        }
    }

    private func perform(_ request: EditorRequest) {
        switch request {
        case .submit(let line): driver?.submit(line)
        case .paste(let text): driver?.paste(text)
        case .selectWindow(let number): driver?.selectWindow(number: number)
        case .cycleWindow(let offset): driver?.cycleWindow(by: offset)
        case .interrupt: driver?.quit(reason: "interrupted")
        case .cancelPaste: driver?.cancelPaste()
        case .leave(let reason): driver?.quit(reason: reason)
        case .note(let text): show(.notice(time: ClientClock.now(), text: text))
        case .answer(let yes):
            let answer = pendingAnswer
            pendingAnswer = nil
            answer?(yes)
        }
    }

    // MARK: ClientDisplay

    func show(_ event: ChatEvent) {
        let line = renderer.render(event)
        if active { editor.print([line]) } else { StandardOutput.write(line + "\n") }
    }

    func sessionChanged() {
        guard active, let driver else { return }
        let session = driver.session
        renderer.ownNick = session.nick
        renderer.currentRoom = session.currentRoom
        renderer.marksOtherRooms = true
        let window = session.currentWindow?.title ?? "(no room)"
        // A column short of the width: the padding after it carries the colour's reset (see
        // TerminalEditor.setPromptText).
        let status = StatusLine.render(session: session, columns: RawTerminal.size().columns - 1)
        editor.setPrompt(status: status, window: session.isConnected ? "[\(window)] " : "[\(window) offline] ")
        editor.setContext(
            nicks: session.knownNicks, rooms: session.knownRooms, maxLineBytes: driver.maxMessageBytes,
            pasteInFlight: driver.isSendingPaste)
    }

    func alert() {
        guard active else { return }
        editor.ring()
    }

    func ask(_ question: String, answer: @escaping (Bool) -> Void) {
        pendingAnswer?(false)
        pendingAnswer = answer
        editor.ask(question)
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

    /// A script has no terminal to ring.
    func alert() {}

    /// A script has no one to ask: it pipes what it means to send.
    func ask(_ question: String, answer: @escaping (Bool) -> Void) {
        answer(true)
    }
}
