import ChatClient
import Dispatch
import Foundation
import Glibc

/// The interactive client: each window's lines above the status line and the input line,
/// which libedit edits (`TerminalEditor`, on its own thread).
///
/// Every room and query keeps its own lines (`WindowBuffer`, bounded by `buffer_lines`); the
/// screen shows the current window's, and switching windows, paging or a resize draws it anew
/// from them. This type renders events and the status line on the main actor, files each line
/// in its window (and its log), and hands the editor what to draw; what the user does at the
/// keyboard comes back as `EditorRequest`s.
@MainActor
final class TerminalFrontEnd: ClientDisplay {
    private var renderer: MessageRenderer
    private let terminal = RawTerminal()
    private let editor: TerminalEditor
    private weak var driver: ChatClientDriver?
    private var active = false
    private var pendingAnswer: ((Bool) -> Void)?
    private var pendingSecret: ((String?) -> Void)?
    private var settings: ClientSettings
    /// Where `/save` writes the settings; nil when there is no home to keep them in.
    private let configPath: String?
    /// Each window's lines; the key nil holds what arrives while no window is open.
    private var buffers: [ChatWindow?: WindowBuffer] = [:]
    /// The window whose lines are on screen, once the first screen is drawn.
    private var drawnWindow: ChatWindow??
    private var logs: WindowLogs?
    private var lastError: String?

    /// A front end that keeps line history in `historyFile` and starts from `settings` (which
    /// `/save` writes to `configPath`); nil when libedit cannot drive this terminal. Sets up
    /// libedit before the terminal is switched to raw mode (in `start`).
    init?(historyFile: String?, colour: Bool, settings: ClientSettings, configPath: String?) {
        guard let editor = TerminalEditor(historyFile: historyFile, colour: colour, requests: Self.forward) else { return nil }
        self.editor = editor
        self.settings = settings
        self.configPath = configPath
        renderer = MessageRenderer(colour: colour)
        renderer.marksIndent = true
        applySettings()
    }

    /// Connects the editor to `driver` and takes over the terminal.
    func start(driver: ChatClientDriver) {
        self.driver = driver
        TerminalFrontEnd.current = self
        terminal.enter()
        active = true
        driver.setHighlightWords(settings.highlight)
        sessionChanged()
        editor.start()
    }

    /// Takes the bottom rows off the screen and gives the terminal back as it was, then prints
    /// the half-typed line (and, when the client failed, its last error) on the main screen;
    /// safe to call more than once.
    func stop(status: Int32 = 0) {
        guard active else { return }
        active = false
        let leftover = editor.finish()
        terminal.restore()
        if status != 0, let lastError { StandardOutput.write(TerminalText.plain(lastError) + "\n") }
        if !leftover.isEmpty { StandardOutput.write(leftover + "\n") }
        TerminalFrontEnd.current = nil
    }

    /// After a SIGWINCH: the status line for the new width, and the screen drawn anew.
    func terminalResized() {
        sessionChanged()
        drawWindow(resized: true)
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
        case .submit(let line):
            // A line entered brings the window back to its newest lines: what is said, and a
            // command's answer (`/lastlog` while scrolled back looking for something), show there.
            if buffers[currentWindow]?.isScrolledBack == true {
                buffers[currentWindow]?.scrollToEnd()
                drawWindow(resized: false)
            }
            driver?.submit(line)
        case .paste(let text): driver?.paste(text)
        case .selectWindow(let number): driver?.selectWindow(number: number)
        case .cycleWindow(let offset): driver?.cycleWindow(by: offset)
        case .scroll(let pages): scroll(pages: pages)
        case .selectActiveWindow: driver?.selectActiveWindow()
        case .interrupt: driver?.quit(reason: "interrupted")
        case .cancelPaste: driver?.cancelPaste()
        case .leave(let reason): driver?.quit(reason: reason)
        // Notes about the line being typed (a completion list, "the line is full") are for the
        // moment, not the log.
        case .note(let text): show(.notice(time: ClientClock.now(), text: text), logged: false)
        case .completionContext:
            let session = driver?.session
            editor.setCompletionContext(
                nicks: session?.knownNicks ?? [], rooms: session?.knownRooms ?? [], windows: session?.windows.map(\.title) ?? [])
        case .answer(let yes):
            let answer = pendingAnswer
            pendingAnswer = nil
            answer?(yes)
            editor.answerHandled()
        case .secret(let secret):
            let answer = pendingSecret
            pendingSecret = nil
            answer?(secret)
            editor.answerHandled()
        }
    }

    // MARK: Windows

    private var currentWindow: ChatWindow? { driver?.session.currentWindow }

    /// A page back (positive) or forward in the current window, by screen rows: the rows above
    /// the status line less one, which stays on screen to read on from.
    private func scroll(pages: Int) {
        let size = RawTerminal.size()
        let visible = Self.visibleRows(size.rows)
        buffers[currentWindow, default: WindowBuffer(limit: settings.bufferLines)]
            .scroll(rows: pages * max(1, visible - 1), screenRows: visible, columns: size.columns)
        drawWindow(resized: false)
        sessionChanged()
    }

    /// The rows above the status line and the input line.
    private static func visibleRows(_ rows: Int) -> Int { max(1, rows - 2) }

    /// Draws the current window's rows (up to where it is scrolled) above the bottom rows.
    private func drawWindow(resized: Bool) {
        guard active else { return }
        drawnWindow = .some(currentWindow)
        let size = RawTerminal.size()
        editor.redraw(buffers[currentWindow]?.view(rows: Self.visibleRows(size.rows), columns: size.columns) ?? [], resized: resized)
    }

    /// Files `lines` in `window`'s buffer (with a day-change line first when `time` is on a new
    /// day there) and prints them when that window is on screen and not scrolled back; the
    /// merged window, if there is one, gets `merged` (the same lines naming their room).
    ///
    /// The buffer is changed in place in the dictionary: a copy taken out and put back would
    /// share its storage, and every append would then copy all of the window's lines.
    ///
    /// `/lastlog`'s answer is neither `searchable` by the next `/lastlog` nor `logged`: its lines
    /// are copies of lines already there (and in the log), under the time of the search.
    /// `mayRepeat` lines may be in the log already (a backlog's), and are logged only if not.
    private func add(
        _ lines: [String], merged: [String]? = nil, time: UInt64, to window: ChatWindow?, searchable: Bool = true,
        logged: Bool = true, mayRepeat: Bool = false
    ) {
        var added: [String] = []
        let day = renderer.day(of: time)
        let lastDay = buffers[window]?.lastDay
        if let lastDay, lastDay != day { added.append(renderer.dayChange(time)) }
        let dayChange = added
        added += lines
        let limit = settings.bufferLines
        buffers[window, default: WindowBuffer(limit: limit)].lastDay = day
        for line in added { buffers[window, default: WindowBuffer(limit: limit)].append(line, searchable: searchable) }
        let visible = buffers[window]?.isScrolledBack != true
        // A line of an earlier day (a backlog shown after today's join) changes the day on
        // screen only: in the log it goes in its place by time, where its day already is.
        if logged { log(lastDay.map { day < $0 } == true ? lines : added, time: time, window: window, mayRepeat: mayRepeat) }
        var showMerged = false
        if window != .merged, driver?.session.windows.first == .merged {
            for line in dayChange + (merged ?? lines) { buffers[.merged, default: WindowBuffer(limit: limit)].append(line, searchable: searchable) }
            showMerged = drawnWindow == .some(.merged) && buffers[.merged]?.isScrolledBack != true
        }
        guard active else {
            // Not cut into rows here: the terminal wraps them; the indent mark is not for it.
            let unmarked = added.map { String(String.UnicodeScalarView($0.unicodeScalars.filter { $0 != TerminalText.indentMark })) }
            StandardOutput.write(unmarked.joined(separator: "\n") + "\n")
            return
        }
        if drawnWindow == .some(window) && visible {
            editor.print(added)
        } else if showMerged {
            editor.print(dayChange + (merged ?? lines))
        }
    }

    private func log(_ lines: [String], time: UInt64, window: ChatWindow?, mayRepeat: Bool) {
        guard settings.log, logs != nil, let driver else { return }
        let stamp = renderer.format(time, "%Y-%m-%d %H:%M:%S")
        let day = String(stamp.prefix(10))
        let shortStamp = renderer.timestamp(time) + " "
        for line in lines {
            var text = TerminalText.plain(line)
            if text.hasPrefix(shortStamp) { text = String(text.dropFirst(shortStamp.count)) }
            // In place, as the buffers are: `logs` is a value.
            guard logs?.write(text, stamp: stamp, day: day, window: window?.title ?? "(status)", server: driver.serverName, mayRepeat: mayRepeat) == false
            else { continue }
            if let failure = logs?.failure {
                // Once, then logging is off: the note itself must not try the log again.
                settings.log = false
                show(.error(time: ClientClock.now(), text: failure))
            }
            return
        }
    }

    // MARK: Settings

    /// Makes the renderer, the buffers and the logs follow `settings`.
    private func applySettings() {
        var fresh = MessageRenderer(colour: renderer.colour && settings.colours, ownNick: renderer.ownNick)
        fresh.timestampFormat = settings.timestampFormat
        fresh.marksIndent = renderer.marksIndent
        fresh.highlightWords = settings.highlight
        renderer = fresh
        for key in buffers.keys { buffers[key]?.limit = settings.bufferLines }
        // A new log_directory takes the next line there (the files are opened for each line).
        let directory = settings.logDirectory.map(ClientPaths.expandingTilde) ?? ClientPaths.logDirectory()
        if settings.log, logs?.directory != directory { logs = WindowLogs(directory: directory) }
    }

    private func set(name: String?, value: String?) {
        guard let name else {
            for setting in ClientSettings.names {
                show(.notice(time: ClientClock.now(), text: "\(setting) = \(settings.shown(setting) ?? "(not set)")"))
            }
            return
        }
        guard let value else {
            guard ClientSettings.names.contains(name) else { return showError("unknown setting \(name) (/set lists them)") }
            return show(.notice(time: ClientClock.now(), text: "\(name) = \(settings.shown(name) ?? "(not set)")"))
        }
        do {
            try settings.set(name, typed: value)
        } catch {
            return showError(error.reason)
        }
        applySettings()
        driver?.setHighlightWords(settings.highlight)
        let later = ["nick", "servers", "autojoin", "password_file", "account", "account_password_file", "merged_window"].contains(name) ? " (used at the next start; /save keeps it)" : " for this session (/save keeps it)"
        show(.notice(time: ClientClock.now(), text: "\(name) = \(settings.shown(name) ?? "")\(later)"))
        sessionChanged()
    }

    private func save() {
        guard let configPath else { return showError("there is no home directory to save the settings in") }
        do {
            try ClientPaths.write(settings.rendered(), to: configPath)
            show(.notice(time: ClientClock.now(), text: "settings saved to \(configPath)"))
        } catch {
            showError("cannot save the settings to \(configPath): \(error)")
        }
    }

    private func showError(_ text: String) { show(.error(time: ClientClock.now(), text: text)) }

    // MARK: ClientDisplay

    func show(_ event: ChatEvent, logged: Bool) {
        let window = driver?.session.window(for: event) ?? nil
        // In the room's own window the room goes without saying; elsewhere (the merged window,
        // another window) the line names it.
        let ownWindow = event.room.map { window == .room($0) } ?? false
        let rendered = renderer.render(event, showingRoom: !ownWindow)
        if case .error = event { lastError = rendered }
        let lines = { (text: String) in text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) }
        add(lines(rendered), merged: ownWindow ? lines(renderer.render(event)) : nil, time: event.time, to: window,
            logged: logged, mayRepeat: event.mayBeLoggedAlready)
    }

    func perform(_ request: DisplayRequest) {
        switch request {
        case .clear:
            buffers[currentWindow]?.clear()
            drawWindow(resized: false)
        case .lastlog(let text):
            let matches = buffers[currentWindow]?.matching(text) ?? []
            let limit = 500
            let header = matches.isEmpty ? "lastlog: no line contains \"\(text)\""
                : matches.count > limit ? "lastlog: \(matches.count) lines contain \"\(text)\"; the last \(limit):"
                : "lastlog: \(matches.count) line\(matches.count == 1 ? "" : "s") contain\(matches.count == 1 ? "s" : "") \"\(text)\":"
            let now = ClientClock.now()
            add([renderer.render(.notice(time: now, text: header))] + matches.suffix(limit), time: now, to: currentWindow,
                searchable: false, logged: false)
        case .set(let name, let value):
            set(name: name, value: value)
        case .save:
            save()
        case .renameWindow(let from, let to):
            // The lines go with the window, unless one of that name has lines already.
            if buffers[to] == nil, let lines = buffers.removeValue(forKey: from) { buffers[to] = lines }
            if drawnWindow == .some(from) { drawnWindow = .some(to) }
        }
    }

    /// Whether a status update is queued on the main queue.
    private var statusUpdateQueued = false
    /// When the status line was last built, which spaces the next one (`statusUpdateSpacing`).
    private var lastStatusUpdate: DispatchTime?
    /// The least time between two status lines. Frames arrive one turn of the main queue each,
    /// so turns alone do not bound the work: joining 500 rooms brings some 2,000 frames, and a
    /// status line over 500 windows for each of them took most of the client's CPU. Twenty a
    /// second is more than the eye reads; a change after a quiet spell is still drawn at once.
    private static let statusUpdateSpacing = DispatchTimeInterval.milliseconds(50)

    func sessionChanged() {
        guard active else { return }
        // At once: the next line rendered must know our nick to highlight mentions of it.
        if let nick = driver?.session.nick { renderer.ownNick = nick }
        let current = driver?.session.currentWindow
        // A window switch is drawn at once; the status line at most every `statusUpdateSpacing`,
        // so a burst of frames (1,000 a second into a hidden window) does not build the status
        // line of every window and post it to the editor for each one. What Tab completes is
        // built when Tab asks (`.completionContext`).
        if drawnWindow != .some(current) { drawWindow(resized: false) }
        if let driver { editor.setLimits(maxLineBytes: driver.maxMessageBytes, pasteInFlight: driver.isSendingPaste) }
        guard !statusUpdateQueued else { return }
        statusUpdateQueued = true
        let earliest = lastStatusUpdate.map { $0 + Self.statusUpdateSpacing } ?? .now()
        DispatchQueue.main.asyncAfter(deadline: max(earliest, .now())) {
            MainActor.assumeIsolated {
                self.statusUpdateQueued = false
                self.lastStatusUpdate = .now()
                self.updateStatus()
            }
        }
    }

    /// The status line and the prompt, from the session as it is now.
    private func updateStatus() {
        guard active, let driver else { return }
        let session = driver.session
        let window = session.currentWindow?.title ?? "(no room)"
        // A column short of the width: the padding after it carries the colour's reset (see
        // TerminalEditor.setPromptText).
        let status = StatusLine.render(
            session: session, columns: RawTerminal.size().columns - 1,
            scrolledBack: buffers[session.currentWindow]?.isScrolledBack ?? false)
        editor.setPrompt(status: status, window: session.isConnected ? "[\(window)] " : "[\(window) offline] ")
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

    func askSecret(_ prompt: String, answer: @escaping (String?) -> Void) {
        pendingSecret?(nil)
        pendingSecret = answer
        editor.askSecret(prompt)
    }
}

/// The client for pipes and scripts: plain lines in from stdin, plain lines out to stdout.
@MainActor
final class PipeFrontEnd: ClientDisplay {
    private var renderer = MessageRenderer(colour: false)
    private weak var driver: ChatClientDriver?
    /// The lines after the account command being handled, which answer its questions in order
    /// (`ask`, `askSecret`); what it does not ask for is dropped with it.
    private var answers: [String] = []

    /// Starts reading stdin once `driver` is connected, so lines are not refused as unsent.
    /// Each line waits until the account requests before it are answered (the login behind the
    /// hello, a `/register`), so that it is judged as logged in; an account command takes the
    /// lines after it as its answers, as many as `answerCount` says whatever becomes of it, so
    /// that a password line is never said as chat.
    func start(driver: ChatClientDriver) {
        self.driver = driver
        let (lines, continuation) = AsyncStream<String>.makeStream()
        driver.onFirstConnect = {
            // readLine blocks, so it runs on a thread of its own; the stream keeps line order.
            let thread = Thread {
                while let line = readLine(strippingNewline: true) { continuation.yield(line) }
                continuation.finish()
            }
            thread.start()
        }
        Task { @MainActor [weak self, weak driver] in
            var input = lines.makeAsyncIterator()
            while let line = await input.next() {
                guard let driver else { return }
                await driver.accountRequestsAnswered()
                var answers: [String] = []
                var ended = false
                for _ in 0..<driver.answerCount(for: line) {
                    guard let answer = await input.next() else {
                        ended = true
                        break
                    }
                    answers.append(answer)
                }
                // Answers missing at the end of input leave the command cancelled (`askSecret`
                // gets nil), not fed from anywhere else.
                self?.answers = answers
                driver.submit(line)
                self?.answers = []
                if ended { break }
            }
            driver?.quit(reason: "end of input")
        }
    }

    /// A script's output is one stream, logged by whoever reads it.
    func show(_ event: ChatEvent, logged: Bool) {
        StandardOutput.write(renderer.render(event) + "\n")
    }

    func sessionChanged() {
        renderer.ownNick = driver?.session.nick
    }

    /// A script has no terminal to ring.
    func alert() {}

    /// A script answers on a line of its own after the command: `y` or `yes` (any case) is a
    /// yes; anything else, or no line, a no.
    func ask(_ question: String, answer: @escaping (Bool) -> Void) {
        let line = answers.isEmpty ? nil : answers.removeFirst()
        answer(line.map { ["y", "yes"].contains($0.trimmingCharacters(in: .whitespaces).lowercased()) } ?? false)
    }

    /// A script types each password on a line of its own after the command; nothing is echoed
    /// in pipe mode. No line left (the end of input came first) cancels.
    func askSecret(_ prompt: String, answer: @escaping (String?) -> Void) {
        answer(answers.isEmpty ? nil : answers.removeFirst())
    }

    /// A script's output is one stream: no windows to clear or search, no settings to change.
    func perform(_ request: DisplayRequest) {
        // A query that changed its name: one stream has no windows to rename.
        if case .renameWindow = request { return }
        show(.error(time: ClientClock.now(), text: "windows and settings are for the terminal; a script's output is one stream"))
    }
}
