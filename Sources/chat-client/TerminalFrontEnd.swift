import ChatClient
import Dispatch
import Foundation
import Glibc

/// The interactive client: a status line and the input line at the bottom of the terminal,
/// events printed above them, keys read from stdin in raw mode.
///
/// The two bottom rows are redrawn after every change; everything above them is ordinary
/// terminal output that scrolls into the terminal's scrollback. Neither row ever reaches the
/// last column, so neither wraps, and erasing them is always "up one row, clear to the end".
/// Runs on the main actor; stdin is read by a Dispatch source on the main queue.
@MainActor
final class TerminalFrontEnd: ClientDisplay {
    private var editor: LineEditor
    private var decoder = KeyDecoder()
    private var renderer: MessageRenderer
    private let terminal = RawTerminal()
    private let historyFile: String?
    private weak var driver: ChatClientDriver?
    private var input: DispatchSourceRead?
    private var active = false
    /// Whether the status and input rows are on screen, with the cursor on the input row.
    private var bottomDrawn = false
    private var columns = 80
    private var rows = 24
    /// The last lines printed, to draw the screen again after a resize or Ctrl-L.
    private var recentLines: [String] = []
    private var pendingAnswer: ((Bool) -> Void)?
    private var escapeTimerGeneration = 0

    /// A front end that keeps line history in `historyFile`.
    init(historyFile: String?, colour: Bool) {
        self.historyFile = historyFile
        let saved = historyFile.flatMap { try? String(contentsOfFile: $0, encoding: .utf8) }.map(HistoryFile.decode) ?? []
        editor = LineEditor(prompt: "> ", history: saved)
        renderer = MessageRenderer(colour: colour)
    }

    /// Connects the editor to `driver` and takes over the terminal.
    func start(driver: ChatClientDriver) {
        self.driver = driver
        (columns, rows) = RawTerminal.size()
        terminal.enter()
        active = true
        let source = DispatchSource.makeReadSource(fileDescriptor: STDIN_FILENO, queue: .main)
        source.setEventHandler { @Sendable in
            MainActor.assumeIsolated { TerminalFrontEnd.current?.readInput() }
        }
        source.resume()
        input = source
        TerminalFrontEnd.current = self
        sessionChanged()
    }

    /// Takes the bottom rows off the screen, leaves the half-typed line as the last output and
    /// gives the terminal back as it was; safe to call more than once.
    func stop() {
        guard active else { return }
        active = false
        input?.cancel()
        input = nil
        let leftover = editor.text.isEmpty ? "" : TerminalText.sanitized(editor.text) + "\r\n"
        StandardOutput.write(eraseBottom() + leftover)
        bottomDrawn = false
        terminal.restore()
        TerminalFrontEnd.current = nil
    }

    /// Measures the terminal again after a SIGWINCH and draws the screen for the new size.
    func terminalResized() {
        (columns, rows) = RawTerminal.size()
        redrawScreen()
    }

    // The read source's handler reaches the front end through this: it is created once and
    // must not capture main-actor state (see ClientApp).
    private static var current: TerminalFrontEnd?

    // MARK: ClientDisplay

    func show(_ event: ChatEvent) {
        printAbove([renderer.render(event)])
    }

    func sessionChanged() {
        guard let session = driver?.session else { return }
        renderer.ownNick = session.nick
        renderer.currentRoom = session.currentRoom
        renderer.marksOtherRooms = true
        let window = session.currentWindow?.title ?? "(no room)"
        editor.prompt = session.isConnected ? "[\(window)] " : "[\(window) offline] "
        if let limit = driver?.maxMessageBytes { editor.maxLineBytes = limit }
        drawBottom()
    }

    func alert() {
        guard active else { return }
        StandardOutput.write("\u{07}")
    }

    func ask(_ question: String, answer: @escaping (Bool) -> Void) {
        pendingAnswer?(false)
        pendingAnswer = answer
        editor.ask(question)
        drawBottom()
    }

    // MARK: Input

    private func readInput() {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        let count = read(STDIN_FILENO, &buffer, buffer.count)
        if count < 0, errno == EINTR || errno == EAGAIN { return }
        guard count > 0 else {
            // The terminal is gone (EOF or EIO after a hangup): nobody is left to type.
            input?.cancel()
            input = nil
            driver?.quit(reason: "terminal closed")
            return
        }
        handle(KeyDecoder.pasteHeuristic(decoder.feed(buffer[..<count])))
        if decoder.hasPendingEscape { scheduleEscapeFlush() }
    }

    /// A lone Escape is told from the start of a sequence by the pause after it.
    private func scheduleEscapeFlush() {
        escapeTimerGeneration += 1
        let generation = escapeTimerGeneration
        DispatchQueue.main.asyncAfter(deadline: .now() + .milliseconds(50)) { @Sendable in
            MainActor.assumeIsolated {
                guard let frontEnd = TerminalFrontEnd.current, frontEnd.escapeTimerGeneration == generation else { return }
                frontEnd.handle(frontEnd.decoder.flushPendingEscape())
            }
        }
    }

    private func handle(_ keys: [Key]) {
        guard !keys.isEmpty else { return }
        for key in keys {
            let actions = editor.handle(key) { [weak driver] word, lineBefore in
                guard let session = driver?.session else { return [] }
                return CompletionCandidates.candidates(
                    for: word, lineBefore: lineBefore, nicks: session.knownNicks, rooms: session.knownRooms)
            }
            for action in actions { perform(action) }
            guard active else { return }
        }
        drawInputRow()
    }

    private func perform(_ action: LineEditor.Action) {
        switch action {
        case .submit(let line):
            saveHistory()
            driver?.submit(line)
        case .paste(let text):
            driver?.paste(text)
        case .interrupt:
            driver?.quit(reason: "interrupted")
        case .endOfInput:
            driver?.quit(reason: CommandParser.defaultQuitReason)
        case .selectWindow(let number):
            driver?.selectWindow(number: number)
        case .nextWindow:
            driver?.cycleWindow(by: 1)
        case .previousWindow:
            driver?.cycleWindow(by: -1)
        case .note(let text):
            show(.notice(time: ClientClock.now(), text: text))
        case .answer(let yes):
            let answer = pendingAnswer
            pendingAnswer = nil
            answer?(yes)
        case .redrawScreen:
            redrawScreen()
        }
    }

    private func saveHistory() {
        guard let historyFile else { return }
        try? HistoryFile.encode(editor.history).write(toFile: historyFile, atomically: true, encoding: .utf8)
    }

    // MARK: Drawing

    /// Prints `lines` above the bottom rows, which are drawn again below them.
    private func printAbove(_ lines: [String]) {
        recentLines.append(contentsOf: lines)
        if recentLines.count > 500 { recentLines.removeFirst(recentLines.count - 500) }
        guard active else {
            StandardOutput.write(lines.map { $0 + "\n" }.joined())
            return
        }
        StandardOutput.write(eraseBottom() + lines.map { $0 + "\r\n" }.joined() + bottom())
        bottomDrawn = true
    }

    private func drawBottom() {
        guard active else { return }
        StandardOutput.write(eraseBottom() + bottom())
        bottomDrawn = true
    }

    private func drawInputRow() {
        guard active, bottomDrawn else { return drawBottom() }
        StandardOutput.write("\r\u{1B}[K" + inputRow())
    }

    /// Clears the screen and draws the last lines that fit above the bottom rows.
    private func redrawScreen() {
        guard active else { return }
        var shown: [String] = []
        var used = 0
        for line in recentLines.reversed() {
            let height = max(1, (MessageRenderer.visibleWidth(of: line) + columns - 1) / columns)
            if used + height > rows - 2 { break }
            used += height
            shown.insert(line, at: 0)
        }
        StandardOutput.write("\u{1B}[H\u{1B}[2J" + shown.map { $0 + "\r\n" }.joined() + bottom())
        bottomDrawn = true
    }

    /// Escape codes that take the status and input rows off the screen, leaving the cursor at
    /// the start of the row the status line was on.
    private func eraseBottom() -> String {
        bottomDrawn ? "\r\u{1B}[1A\u{1B}[J" : "\r\u{1B}[J"
    }

    /// The status row, a line break and the input row, with the cursor placed in it.
    private func bottom() -> String {
        statusRow() + "\r\n" + inputRow()
    }

    private func statusRow() -> String {
        guard let session = driver?.session else { return "" }
        let status = StatusLine.render(session: session, columns: columns - 1)
        return renderer.colour ? "\u{1B}[7m" + status + "\u{1B}[0m" : status
    }

    private func inputRow() -> String {
        let (row, cursor) = editor.layout(columns: columns)
        return row + "\u{1B}[K\r" + (cursor > 0 ? "\u{1B}[\(cursor)C" : "")
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
