import CLibEdit
import ChatClient
import Dispatch
import Foundation
import Glibc

/// What the editor asks of the front end, on the main actor.
enum EditorRequest: Sendable {
    /// Enter on this line.
    case submit(String)
    /// Pasted text of several lines, to send as it is.
    case paste(String)
    /// Alt-1…9 (Alt-0 for 10): window number n, from 1.
    case selectWindow(Int)
    /// Ctrl-N (+1) or Ctrl-P (-1).
    case cycleWindow(Int)
    /// Alt-A: the window with activity, a mention first.
    case selectActiveWindow
    /// PageUp (+1) or PageDown (-1): a page back or forward in the window.
    case scroll(pages: Int)
    /// A second Ctrl-C on the empty line.
    case interrupt
    /// Ctrl-C while a paste is being sent.
    case cancelPaste
    /// Ctrl-D on the empty line, or the terminal went away: leave, for this reason.
    case leave(String)
    /// The answer to the question asked with `ask`: true for y or Y.
    case answer(Bool)
    /// The line typed at the hidden prompt of `askSecret`; nil when Ctrl-C (or Ctrl-D on an
    /// empty answer) cancelled it.
    case secret(String?)
    /// A note to show above the line.
    case note(String)
    /// Tab was pressed: what it completes from, now (`TerminalEditor.setCompletionContext`).
    case completionContext
}

/// The input line, edited by libedit through its native wide-character API (`histedit.h`) on a
/// thread of its own, with the status line above it and the client's output printed above both.
///
/// The thread sits in `el_wgets`. libedit does the editing — the keys, the history and its
/// incremental search, redrawing the line, wrapping it over rows — and reads each character
/// through `readCharacter`, our `EL_GETCFN` function, which waits on the terminal *and* on a wake
/// pipe (after LLDB's Editline). The client's news arrives through the pipe: lines to print, a new
/// status line, a question, a resize, leaving. Everything touching the terminal happens on this
/// thread, between two keys, so libedit's idea of the screen is never wrong:
///
/// - Printing above the line: the buffer is taken out and the prompt blanked, then a private key
///   (`Key.clear`) makes libedit run our function that answers `CC_REDISPLAY` — libedit erases
///   its rows and leaves the cursor where its display began. The lines are written there, the
///   buffer and prompt put back, and `EL_REFRESH` draws them below (cursor and half-typed text
///   as they were).
/// - Enter (our `chat-submit`) takes the line out the same way and lets `el_wgets` return, so
///   libedit resets its history position for the next line.
/// - A new screen (another window, a page back, a resize) and Ctrl-L clear the screen, write
///   the rows that fit above the bottom rows (a line too tall for them shows its last rows) and
///   `EL_REFRESH`. The client draws on the
///   terminal's alternate screen (`RawTerminal`), so none of this reaches its scrollback.
/// - Bracketed pastes are cut out by `TerminalInput` before libedit sees a byte of them.
/// - While libedit reads inside a command (its incremental search, a key sequence half typed),
///   nothing is drawn: that waits for the next key at the top level.
///
/// Thread safety: `mailbox` is guarded by `lock` and written from the main actor; everything
/// else belongs to the editor thread (libedit calls back on it; the C callbacks find the
/// editor through `current`).
final class TerminalEditor: @unchecked Sendable {
    /// What the main actor hands over; guarded by `lock`.
    private struct Mailbox {
        var lines: [String] = []
        var status = ""
        var window = "> "
        var promptChanged = true
        var question: String?
        var secretPrompt: String?
        var resized = false
        var screen: [String]?
        var leftover = ""
        var nicks: [String] = []
        var rooms: [String] = []
        var windows: [String] = []
        /// How many completion contexts the front end has handed over.
        var completionContexts = 0
        var maxLineBytes = 16_000
        var pasteInFlight = false
        var bell = false
        var leaving = false
        /// How many answers (`.answer`, `.secret`) the front end has handled.
        var answersHandled = 0
    }

    private let lock = NSLock()
    private var mailbox = Mailbox()
    /// Signalled when a completion context is handed over, for Tab, which waits for it. Taken
    /// around `lock` by both sides, so that the signal cannot come between Tab's look at the
    /// count and its wait.
    private let completionContextArrived = NSCondition()
    private let wakeRead: Int32
    private let wakeWrite: Int32
    private let finished = DispatchSemaphore(value: 0)
    private let requests: @Sendable (EditorRequest) -> Void

    // Editor thread only, from here on.
    private let editLine: OpaquePointer
    private let history: OpaquePointer
    private let output: UnsafeMutablePointer<FILE>
    private let historyFile: String?
    private let colour: Bool
    private var input = TerminalInput()
    private var events: [TerminalInput.Event] = []
    private var eventIndex = 0
    private var status = ""
    private var window = "> "
    private var question: String?
    private var questionStash: (text: [wchar_t], cursor: Int)?
    /// What has been typed at the hidden prompt, while one is open: these keys never reach
    /// libedit, so they are neither drawn nor kept in its history.
    private var secret: [Unicode.Scalar]?
    /// Where a key sequence (an arrow key's `ESC [ A`) typed at the hidden prompt stands: its
    /// bytes are dropped, not taken for the password.
    private var secretSequence = SequenceState.none
    /// How many answers (`.answer`, `.secret`) went to the front end, and how many it has
    /// handled. While some are out, the keys typed after them wait: the answer may open the next
    /// prompt (`/register`'s second password), and a key handed to libedit before it opens
    /// would be drawn, and an Enter would say the next password as chat.
    private var answersSent = 0
    private var answersHandled = 0
    private var nicks: [String] = []
    private var rooms: [String] = []
    private var windows: [String] = []
    private var maxLineBytes = 16_000
    private var pasteInFlight = false
    private var prompt: UnsafeMutablePointer<wchar_t>
    // Never written through: libedit only reads the prompt.
    nonisolated(unsafe) fileprivate static let emptyPrompt: UnsafeMutablePointer<wchar_t> = {
        let empty = UnsafeMutablePointer<wchar_t>.allocate(capacity: 1)
        empty.pointee = 0
        return empty
    }()
    /// The last lines printed, to draw the screen again after a resize or Ctrl-L.
    private var recent: [String] = []
    private var toPrint: [String] = []
    private var stage = Stage.editing
    private var stash: (text: [wchar_t], cursor: Int) = ([], 0)
    private var submitting = false
    private var leaving = false
    private var done = false
    private var redrawWanted = false
    private var sequence = SequenceState.none
    private var interruptArmed = false
    private var fullNoted = false
    private var kill = KillRing()
    /// How many commands the user's keys ran: a kill continues the one before it when that
    /// was the previous command.
    private var commandCount = 0
    /// A key went to libedit since the last check for a line with double-width characters.
    private var wideRedrawDue = false
    /// Whether the user's editrc chose vi mode (`bind -v`).
    private var vi = false
    /// Whether libedit's incremental search (Ctrl-R) was open at the last key: when it closes,
    /// the screen is drawn again, so the row its prompt took does not stay blank.
    private var searchWasOpen = false

    /// Where a drawing cycle stands.
    private enum Stage {
        /// libedit's prompt and line are on screen.
        case editing
        /// `Key.clear` was handed to libedit; when it next asks for a character, its display is
        /// erased and the cursor is where the display began.
        case clearing
    }

    /// Whether libedit is in the middle of a key sequence, and so must not be handed a private key.
    private enum SequenceState {
        case none, escape, controlSequence, singleShift, prefix
    }

    /// Characters libedit never receives from the keyboard (`TerminalInput` turns C1 controls
    /// into U+FFFD), bound to our own functions.
    private enum Key {
        static let clear: wchar_t = 0x91
        static let refresh: wchar_t = 0x92
        static let newline: wchar_t = 0x93
    }

    /// The editor the C callbacks reach: libedit functions are C function pointers and capture
    /// nothing. Set once, before the editor thread starts.
    nonisolated(unsafe) fileprivate static var current: TerminalEditor?

    /// Sets up libedit for the terminal on stdin/stdout, with the history in `historyFile`; the
    /// editor's requests go to `requests` (from the editor thread). Call before the terminal is
    /// put in raw mode, so libedit learns the terminal's own settings. Nil when libedit cannot
    /// work this terminal.
    init?(historyFile: String?, colour: Bool, requests: @escaping @Sendable (EditorRequest) -> Void) {
        Self.chooseUTF8Locale()
        var pipeEnds: [Int32] = [0, 0]
        guard pipe(&pipeEnds) == 0 else { return nil }
        for end in pipeEnds {
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
        guard let inputFile = fdopen(STDIN_FILENO, "r"), let outputFile = fdopen(STDOUT_FILENO, "w"),
            let errorFile = fdopen(STDERR_FILENO, "w"), let editLine = el_init("chat-client", inputFile, outputFile, errorFile),
            let history = history_winit()
        else {
            close(pipeEnds[0])
            close(pipeEnds[1])
            return nil
        }
        wakeRead = pipeEnds[0]
        wakeWrite = pipeEnds[1]
        self.editLine = editLine
        self.history = history
        self.output = outputFile
        self.historyFile = historyFile
        self.colour = colour
        self.requests = requests
        prompt = Self.emptyPrompt
        _ = chat_history_configure(history, 1000)
        if let historyFile { loadHistory(from: historyFile) }
        configure()
    }

    /// The editor on its own thread; returns at once.
    func start() {
        Self.current = self
        let thread = Thread { [self] in
            var count: Int32 = 0
            while !done {
                // Returns after `chat-submit` (the line is already sent) or when leaving.
                _ = el_wgets(editLine, &count)
            }
            finished.signal()
        }
        thread.name = "libedit"
        thread.stackSize = 4 << 20
        thread.start()
    }

    // MARK: From the main actor

    /// Prints `lines` above the status and input lines.
    func print(_ lines: [String]) {
        post { $0.lines.append(contentsOf: lines) }
    }

    /// Shows `status` as the status line and `window` as the input line's prompt.
    func setPrompt(status: String, window: String) {
        post {
            guard $0.status != status || $0.window != window else { return }
            $0.status = status
            $0.window = window
            $0.promptChanged = true
        }
    }

    /// What Tab completes: nicks, rooms and the open windows' titles, handed over when Tab asks
    /// (`.completionContext`). Built then rather than with every frame: with hundreds of rooms the
    /// lists cost more than the frame, and Tab waits for them rather than complete from lists a
    /// burst of frames has left behind.
    func setCompletionContext(nicks: [String], rooms: [String], windows: [String]) {
        completionContextArrived.lock()
        lock.withLock {
            mailbox.nicks = nicks
            mailbox.rooms = rooms
            mailbox.windows = windows
            mailbox.completionContexts += 1
        }
        completionContextArrived.broadcast()
        completionContextArrived.unlock()
    }

    /// The longest line, and whether Ctrl-C should stop a paste.
    func setLimits(maxLineBytes: Int, pasteInFlight: Bool) {
        lock.withLock {
            mailbox.maxLineBytes = maxLineBytes
            mailbox.pasteInFlight = pasteInFlight
        }
    }

    /// Rings the terminal's bell.
    func ring() {
        post { $0.bell = true }
    }

    /// Shows `question` in place of the prompt; the next key answers it (`.answer`).
    func ask(_ question: String) {
        post { $0.question = question }
    }

    /// Shows `prompt` in place of the prompt and reads a line without showing it, until Enter
    /// (`.secret`). The half-typed line is put aside and comes back after.
    func askSecret(_ prompt: String) {
        post { $0.secretPrompt = prompt }
    }

    /// Says that the answer to a question or hidden prompt was handled, and whatever prompt it
    /// leads to was asked: the keys typed after the answer go on, to that prompt if there is one.
    func answerHandled() {
        post { $0.answersHandled += 1 }
    }

    /// Draws the screen anew with `lines` (the newest last; the front end gives the rows of the
    /// window's view, `WindowBuffer.view`) above the bottom rows, in place of what was there and
    /// of lines posted before; `resized` when the terminal changed size.
    func redraw(_ lines: [String], resized: Bool) {
        post {
            $0.lines = []
            $0.screen = lines
            $0.resized = $0.resized || resized
        }
    }

    /// Takes the status and input lines off the screen and ends the editor thread; waits for
    /// that at most `timeout`. Returns the half-typed line, for the caller to print once the
    /// terminal is back on its main screen, so nothing typed is lost. The terminal's modes are
    /// the caller's to restore.
    func finish(timeout: DispatchTimeInterval = .seconds(2)) -> String {
        post { $0.leaving = true }
        _ = finished.wait(timeout: .now() + timeout)
        return lock.withLock { mailbox.leftover }
    }

    private func post(_ change: (inout Mailbox) -> Void) {
        lock.withLock { change(&mailbox) }
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
    }

    // MARK: Setup

    /// libedit works in the locale's character set; it must be UTF-8 for wide characters to
    /// reach the terminal as they are.
    private static func chooseUTF8Locale() {
        _ = setlocale(LC_CTYPE, "")
        if let codeset = nl_langinfo(nl_item(CODESET)), String(cString: codeset) == "UTF-8" { return }
        _ = setlocale(LC_CTYPE, "C.UTF-8")
    }

    private func configure() {
        _ = chat_el_use_emacs(editLine)
        _ = chat_el_set_prompt(editLine, promptFunction, 1)
        _ = chat_el_set_getc(editLine, readCharacter)
        _ = chat_el_set_history(editLine, history)
        // The user's own settings first ($EDITRC or ~/.editrc, as sftp and LLDB read it): vi
        // mode, their bindings. Ours come after, so the keys the client lives by stay its own.
        _ = chat_el_source_editrc(editLine)
        vi = chat_el_is_vi(editLine) != 0
        // Ctrl-C, Ctrl-Z, Ctrl-S and Ctrl-Q are keys here, not signals or flow control.
        for mode in ["-isig", "-ixon"] { _ = mode.withWideCString { chat_el_clear_edit_mode(editLine, $0) } }

        let functions: [(String, String, chat_el_function)] = [
            ("chat-clear", "erase the display (to print above it)", { _, _ in UInt8(CC_REDISPLAY) }),
            ("chat-refresh", "draw the line again", { _, _ in UInt8(CC_REFRESH) }),
            ("chat-newline", "end el_wgets after chat-submit", { _, _ in UInt8(CC_NEWLINE) }),
            ("chat-submit", "send the line", { _, _ in TerminalEditor.current?.submit() ?? UInt8(CC_ERROR) }),
            ("chat-complete", "complete a command, room or nick", { _, _ in TerminalEditor.current?.complete() ?? UInt8(CC_ERROR) }),
            ("chat-interrupt", "clear the line; again on the empty line to quit", { _, _ in TerminalEditor.current?.interrupt() ?? UInt8(CC_ERROR) }),
            ("chat-eof", "delete the next character; on the empty line, quit", { _, _ in TerminalEditor.current?.endOfInput() ?? UInt8(CC_ERROR) }),
            ("chat-window", "go to window n", { _, key in TerminalEditor.current?.selectWindow(key) ?? UInt8(CC_ERROR) }),
            ("chat-next-window", "go to the next window", { _, _ in TerminalEditor.current?.cycleWindow(1) ?? UInt8(CC_ERROR) }),
            ("chat-active-window", "go to the window with activity, mentions first", { _, _ in TerminalEditor.current?.selectActiveWindow() ?? UInt8(CC_ERROR) }),
            ("chat-previous-window", "go to the previous window", { _, _ in TerminalEditor.current?.cycleWindow(-1) ?? UInt8(CC_ERROR) }),
            ("chat-page-up", "a page back in the window", { _, _ in TerminalEditor.current?.scroll(pages: 1) ?? UInt8(CC_ERROR) }),
            ("chat-page-down", "a page forward in the window", { _, _ in TerminalEditor.current?.scroll(pages: -1) ?? UInt8(CC_ERROR) }),
            ("chat-redraw", "draw the screen again", { _, _ in TerminalEditor.current?.requestRedraw() ?? UInt8(CC_ERROR) }),
            ("chat-kill-word", "kill the word before the cursor, up to whitespace", { _, _ in TerminalEditor.current?.killBackward(toWhitespace: true) ?? UInt8(CC_ERROR) }),
            ("chat-kill-prev-word", "kill the word before the cursor", { _, _ in TerminalEditor.current?.killBackward(toWhitespace: false) ?? UInt8(CC_ERROR) }),
            ("chat-kill-next-word", "kill the word after the cursor", { _, _ in TerminalEditor.current?.killForwardWord() ?? UInt8(CC_ERROR) }),
            ("chat-kill-to-end", "kill to the end of the line", { _, _ in TerminalEditor.current?.killToEnd() ?? UInt8(CC_ERROR) }),
            ("chat-kill-to-start", "kill to the start of the line", { _, _ in TerminalEditor.current?.killToStart() ?? UInt8(CC_ERROR) }),
            ("chat-yank", "put back the last kill", { _, _ in TerminalEditor.current?.yank() ?? UInt8(CC_ERROR) }),
            ("chat-yank-pop", "replace what was just put back with the kill before it", { _, _ in TerminalEditor.current?.yankPop() ?? UInt8(CC_ERROR) }),
        ]
        for (name, help, function) in functions {
            // libedit keeps the name and help pointers, not copies: they must live as long as it.
            _ = chat_el_add_function(editLine, name.permanentWideCString(), help.permanentWideCString(), function)
        }
        var bindings: [(String, String)] = [
            (String(UnicodeScalar(UInt32(Key.clear))!), "chat-clear"),
            (String(UnicodeScalar(UInt32(Key.refresh))!), "chat-refresh"),
            (String(UnicodeScalar(UInt32(Key.newline))!), "chat-newline"),
            ("^M", "chat-submit"), ("^J", "chat-submit"), ("^I", "chat-complete"),
            ("^C", "chat-interrupt"), ("^D", "chat-eof"), ("^L", "chat-redraw"),
            ("^N", "chat-next-window"), ("^P", "chat-previous-window"),
            ("\\e[5~", "chat-page-up"), ("\\e[6~", "chat-page-down"), ("\\e[5;2~", "chat-page-up"), ("\\e[6;2~", "chat-page-down"),
            ("^W", "chat-kill-word"), ("\\e^?", "chat-kill-prev-word"), ("\\e^H", "chat-kill-prev-word"),
            ("\\ed", "chat-kill-next-word"), ("^K", "chat-kill-to-end"), ("^U", "chat-kill-to-start"),
            ("^Y", "chat-yank"), ("\\ey", "chat-yank-pop"), ("\\ea", "chat-active-window"),
            // libedit's own functions, for keys its emacs map leaves unbound or binds otherwise.
            ("^R", "em-inc-search-prev"),
            ("\\e[1;5D", "ed-prev-word"), ("\\e[1;5C", "em-next-word"),
            ("\\e[1;3D", "ed-prev-word"), ("\\e[1;3C", "em-next-word"),
            ("\\eb", "ed-prev-word"), ("\\ef", "em-next-word"),
            ("\\e[H", "ed-move-to-beg"), ("\\e[F", "ed-move-to-end"), ("\\eOH", "ed-move-to-beg"), ("\\eOF", "ed-move-to-end"),
            ("\\e[1~", "ed-move-to-beg"), ("\\e[4~", "ed-move-to-end"), ("\\e[7~", "ed-move-to-beg"), ("\\e[8~", "ed-move-to-end"),
            ("\\e[3~", "ed-delete-next-char"),
        ]
        for digit in 0...9 { bindings.append(("\\e\(digit)", "chat-window")) }
        for (keys, function) in bindings {
            if vi, keys.hasPrefix("\\e") {
                // In vi's insert mode Esc is the way to command mode: a sequence bound there
                // would make libedit wait after Esc for the rest of it, and take Esc 0 for
                // Alt-0. Sequences go to the command map, where Esc leads the arrow keys already.
                if keys.hasPrefix("\\e[") || keys.hasPrefix("\\eO") {
                    _ = keys.withWideCString { keys in function.withWideCString { chat_el_bind_alternate(editLine, keys, $0) } }
                }
                continue
            }
            _ = keys.withWideCString { keys in function.withWideCString { chat_el_bind(editLine, keys, $0) } }
            if vi, Self.commandModeKeys.contains(keys) {
                _ = keys.withWideCString { keys in function.withWideCString { chat_el_bind_alternate(editLine, keys, $0) } }
            }
        }
        if vi {
            // The private keys can reach libedit right after an Esc in command mode, where Esc
            // leads a sequence: there they end it and still do their work.
            for (key, function) in [(Key.clear, "chat-clear"), (Key.refresh, "chat-refresh"), (Key.newline, "chat-newline")] {
                let keys = "\\e" + String(UnicodeScalar(UInt32(key))!)
                _ = keys.withWideCString { keys in function.withWideCString { chat_el_bind_alternate(editLine, keys, $0) } }
            }
        }
    }

    /// The client's keys that work in vi's command mode too: its private keys, Enter, Ctrl-C,
    /// Ctrl-D, Ctrl-L, the window keys and the history search. The editing keys are vi's there.
    private static let commandModeKeys: Set<String> = [
        String(UnicodeScalar(UInt32(Key.clear))!), String(UnicodeScalar(UInt32(Key.refresh))!),
        String(UnicodeScalar(UInt32(Key.newline))!), "^M", "^J", "^C", "^D", "^L", "^N", "^P", "^R",
    ]

    // MARK: Reading characters

    /// Our `EL_GETCFN`: the next character for libedit, after drawing whatever waits to be
    /// drawn. Returns 1 with a character, 0 when the editor is done.
    fileprivate func nextCharacter(_ character: UnsafeMutablePointer<wchar_t>) -> Int32 {
        while true {
            if stage == .clearing {
                if let key = drawWhileCleared() {
                    character.pointee = key
                    return 1
                }
                if done { return 0 }
                continue
            }
            let searching = isNested()
            if searchWasOpen, !searching { redrawWanted = true }
            searchWasOpen = searching
            if sequence == .none, !searching, let key = serviceMailbox() ?? redrawWideLine() {
                character.pointee = key
                return 1
            }
            if eventIndex < events.count, answersSent == answersHandled {
                let event = events[eventIndex]
                eventIndex += 1
                if eventIndex == events.count {
                    events = []
                    eventIndex = 0
                }
                if let key = handle(event) {
                    let followed = eventIndex < events.count
                    if searching, key == 0x1B, followed {
                        // libedit's search ends at Esc and takes the rest of a key's sequence
                        // (Right's `[C`) for text to type. So Esc goes alone, to end the search,
                        // and then again with the rest, for the key it is: Right moves in the
                        // line found, as in readline.
                        events.insert(.character("\u{1B}"), at: eventIndex)
                        character.pointee = key
                        return 1
                    }
                    // In vi's insert mode a lone Esc goes to command mode at once: drawing need
                    // not wait for another key (the private keys work after it, see configure).
                    if !(vi && key == 0x1B && !followed) { track(key) }
                    wideRedrawDue = true
                    // A key that completes a sequence runs a command.
                    if sequence == .none { commandCount += 1 }
                    character.pointee = key
                    return 1
                }
                continue
            }
            if !waitForInput() {
                requests(.leave("terminal closed"))
                // Keep serving until the main actor says we are leaving.
                continue
            }
        }
    }

    /// Set once a read of the terminal met its end (a hangup): only the wake pipe is left.
    private var terminalGone = false

    /// Waits for the terminal or the wake pipe; false once the terminal is gone.
    private func waitForInput() -> Bool {
        var descriptors = [
            pollfd(fd: terminalGone ? -1 : STDIN_FILENO, events: Int16(POLLIN), revents: 0),
            pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0),
        ]
        // Held bytes (an Escape that may start a paste marker) go to libedit if nothing follows.
        let ready = poll(&descriptors, 2, input.isHolding ? 50 : -1)
        if ready == 0 {
            events += input.flush()
            return true
        }
        if descriptors[1].revents != 0 {
            var drain = [UInt8](repeating: 0, count: 256)
            while read(wakeRead, &drain, drain.count) > 0 {}
        }
        guard !terminalGone, descriptors[0].revents != 0 else { return true }
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        let count = read(STDIN_FILENO, &buffer, buffer.count)
        if count < 0, errno == EINTR || errno == EAGAIN { return true }
        guard count > 0 else {
            // EOF or EIO after a hangup: nobody is left to type.
            terminalGone = true
            return false
        }
        events += input.feed(buffer[..<count])
        return true
    }

    /// What to hand libedit for `event`; nil when it was dealt with here.
    private func handle(_ event: TerminalInput.Event) -> wchar_t? {
        switch event {
        case .character(let scalar):
            if secret != nil { return secretKey(scalar) }
            if question != nil, sequence == .none {
                // Only y or n answer: a key typed ahead of the question must not decline it, or
                // the lines it asks about would be dropped without the user ever seeing it.
                switch scalar {
                case "y", "Y": return answer(true)
                case "n", "N": return answer(false)
                default: return nil
                }
            }
            if scalar.value >= 0x20, scalar.value != 0x7F, sequence == .none, !fits(additionalBytes: UTF8.width(scalar)) {
                if !fullNoted {
                    fullNoted = true
                    note("the line is full: \(limitText); the rest was not typed")
                }
                return nil
            }
            if sequence == .none, scalar.properties.canonicalCombiningClass != .notReordered, let key = compose(scalar) {
                return key
            }
            return wchar_t(bitPattern: scalar.value)
        case .paste(let text):
            if secret != nil {
                // A pasted password is common; its first line is the password.
                let scalars = text.unicodeScalars
                guard let lineEnd = scalars.firstIndex(where: { $0 == "\n" || $0 == "\r" }) else {
                    secret?.append(contentsOf: scalars)
                    return nil
                }
                secret?.append(contentsOf: scalars[..<lineEnd])
                // Keys typed fast after the Enter share its read, which `TerminalInput` takes for
                // a paste: what follows the line break goes on as the rest of that paste, to the
                // next prompt or the input line, once the answer is handled (`answersSent`).
                let rest = String(scalars[scalars.index(after: lineEnd)...])
                if !rest.isEmpty { events.insert(.paste(rest), at: eventIndex) }
                return endSecret(cancelled: false)
            }
            if question != nil { return nil }  // a paste does not answer a question
            return pasted(text)
        case .pasteTooLarge(let bytes):
            note("a paste of \(bytes) bytes is more than the client keeps; nothing was pasted")
            return nil
        }
    }

    /// One pasted line goes into the line, whole or not at all; several go to the client to send.
    private func pasted(_ text: String) -> wchar_t? {
        // Precomposed, for the reason `compose` gives.
        var body = Substring(text.precomposedStringWithCanonicalMapping)
        if body.hasSuffix("\n") { body = body.dropLast() }
        if body.contains("\n") {
            requests(.paste(text))
            return nil
        }
        guard !body.isEmpty else { return nil }
        // Control characters in a pasted line are text, never keys: shown as U+FFFD.
        let scalars = body.unicodeScalars.map { $0.value < 0x20 && $0 != "\t" || $0.value == 0x7F ? "\u{FFFD}" : $0 }
        let bytes = scalars.reduce(0) { $0 + UTF8.width($1) }
        guard fits(additionalBytes: bytes) else {
            note("not pasted: the line would be \(lineBytes() + bytes) bytes; \(limitText)")
            return nil
        }
        if isNested() {
            // libedit is reading inside a command (its search): the text is typed into it.
            let keys = scalars.map { TerminalInput.Event.character($0) }
            events.insert(contentsOf: keys, at: eventIndex)
            return nil
        }
        insert(scalars.map { wchar_t(bitPattern: $0.value) })
        return Key.refresh
    }

    /// Joins a combining mark to the character before the cursor when Unicode has one
    /// character for both (e + U+0301 is é). libedit gives each wide character its own cells
    /// and draws a zero-width one into the cell the next character overwrites, so a lone
    /// combining mark would vanish from the screen (it stays in the line) and take a Left key of
    /// its own. Marks with no precomposed form still do that (docs/CLIENT.md).
    private func compose(_ mark: Unicode.Scalar) -> wchar_t? {
        let (text, cursor) = line()
        guard cursor > 0, !isNested(), let base = Unicode.Scalar(UInt32(bitPattern: text[cursor - 1])) else { return nil }
        var pair = String.UnicodeScalarView()
        pair.append(base)
        pair.append(mark)
        let composed = String(pair).precomposedStringWithCanonicalMapping.unicodeScalars
        guard composed.count == 1, let single = composed.first else { return nil }
        delete((cursor - 1)..<cursor, cursor: cursor)
        insert([wchar_t(bitPattern: single.value)])
        return Key.refresh
    }

    /// Follows the keys handed to libedit, to know when it is inside a key sequence (after
    /// `ESC`, `ESC [` … up to the final byte, `^X`, `^V`): a private key there would end the
    /// sequence wrongly.
    private func track(_ key: wchar_t) {
        switch sequence {
        case .none:
            if key == 0x1B { sequence = .escape } else if key == 0x18 || key == 0x16 { sequence = .prefix }
        case .escape:
            sequence = key == 0x5B ? .controlSequence : key == 0x4F ? .singleShift : .none
        case .controlSequence:
            if (0x40...0x7E).contains(key) { sequence = .none }
        case .singleShift, .prefix:
            sequence = .none
        }
    }

    /// Whether libedit is reading inside one of its commands (the incremental search, which shows
    /// its pattern after a line break in the buffer).
    private func isNested() -> Bool {
        guard let line = el_wline(editLine)?.pointee, let start = line.buffer, let end = line.lastchar else { return false }
        return wmemchr(start, 0x0A, end - start) != nil
    }

    // MARK: Drawing

    /// Takes in what the main actor posted; returns a key to hand libedit when drawing needs it.
    private func serviceMailbox() -> wchar_t? {
        let news = lock.withLock { () -> Mailbox in
            let news = mailbox
            mailbox.lines = []
            mailbox.promptChanged = false
            mailbox.question = nil
            mailbox.secretPrompt = nil
            mailbox.resized = false
            mailbox.screen = nil
            mailbox.bell = false
            return news
        }
        if let screen = news.screen {
            // The new screen holds every line worth showing; what was waiting is in it or gone
            // with the window it belonged to.
            recent = screen
            toPrint = []
        }
        maxLineBytes = news.maxLineBytes
        pasteInFlight = news.pasteInFlight
        // Taken with the prompts below in one snapshot: a prompt the answer opened is open
        // before the keys typed after the answer go on.
        answersHandled = news.answersHandled
        toPrint += news.lines
        if news.bell { writeOut("\u{07}") }
        if news.promptChanged {
            status = news.status
            window = news.window
        }
        if let asked = news.secretPrompt {
            if question == nil {
                questionStash = takeLine()
            } else if secret == nil {
                // A yes/no question was open: the prompt takes its place, and it is declined.
                sendAnswer(.answer(false))
            }
            question = asked
            secret = []
            secretSequence = .none
        }
        if let asked = news.question {
            if secret != nil {
                // The hidden prompt holds the input line: a yes/no question now is declined
                // rather than typed into the password.
                sendAnswer(.answer(false))
            } else {
                if question == nil { questionStash = takeLine() }
                question = asked
            }
        }
        if news.leaving, !leaving {
            leaving = true
            return beginClearing()
        }
        if news.resized || news.screen != nil || redrawWanted {
            if news.resized { el_resize(editLine) }
            redrawWanted = false
            redrawScreen()
            return nil
        }
        if !toPrint.isEmpty || news.promptChanged || news.question != nil || news.secretPrompt != nil {
            // A new prompt (the status line is in it) is drawn whole too: libedit redraws only
            // the cells that changed, which would lose the status line's colour codes.
            return beginClearing()
        }
        return nil
    }

    /// A libedit bug, worked around: after an edit in a line that holds double-width characters
    /// (CJK, emoji), libedit's incremental redraw can leave the terminal's cursor a cell away
    /// from where it draws the next character (delete the character after an emoji, Left over the
    /// emoji, type: the cursor shows one cell right), while a full redraw places it right. So
    /// such a line is drawn whole after every key.
    private func redrawWideLine() -> wchar_t? {
        guard wideRedrawDue else { return nil }
        wideRedrawDue = false
        guard let info = el_wline(editLine)?.pointee, let start = info.buffer, let end = info.lastchar,
            chat_has_double_width(start, end) != 0
        else { return nil }
        return beginClearing()
    }

    /// Takes the line out and blanks the prompt; libedit erases its display on `Key.clear`.
    private func beginClearing() -> wchar_t {
        let taken = takeLine()
        if !submitting { stash = taken }
        setPromptText(blank: true)
        stage = .clearing
        return Key.clear
    }

    /// With libedit's display erased and the cursor where it began: prints what waits, then
    /// puts prompt and line back (or ends the line after a submit, or ends the editor).
    private func drawWhileCleared() -> wchar_t? {
        stage = .editing
        // Cut into rows here rather than wrapped by the terminal: at words, under the text
        // (TerminalText.rows), as the window's view is drawn after a resize or a page.
        let columns = Self.columns()
        let text = toPrint.flatMap { TerminalText.rows(of: $0, columns: columns) }.map { $0 + "\r\n" }.joined()
        remember(toPrint)
        toPrint = []
        if leaving {
            // The half-typed line goes to the main screen once the terminal is back, so nothing
            // typed is lost.
            let leftover = String(decoding: (questionStash ?? stash).text)
            lock.withLock { mailbox.leftover = TerminalText.sanitized(leftover) }
            writeOut(text)
            done = true
            return nil
        }
        writeOut(text)
        setPromptText(blank: false)
        if submitting {
            submitting = false
            return Key.newline
        }
        put(stash)
        stash = ([], 0)
        _ = chat_el_refresh(editLine)
        return nil
    }

    /// Clears the screen, writes the rows of the recent lines that fit above the prompt (the
    /// prompt at the bottom, as in irssi), and has libedit draw.
    ///
    /// Row by row: a line taller than the space left shows its last rows (as irssi shows the
    /// part that fits), where skipping it whole would leave the newest line off the screen.
    private func redrawScreen() {
        remember(toPrint)
        toPrint = []
        var size = winsize()
        let columns = Self.columns()
        let space = max(0, (ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0 && size.ws_row > 0 ? Int(size.ws_row) : 24) - 2)
        var shown: [String] = []
        for line in recent.reversed() where shown.count < space {
            shown.insert(contentsOf: TerminalText.rows(of: line, columns: columns).suffix(space - shown.count), at: 0)
        }
        setPromptText(blank: false)
        let padding = String(repeating: "\r\n", count: space - shown.count)
        writeOut("\u{1B}[H\u{1B}[2J" + padding + shown.map { $0 + "\r\n" }.joined())
        _ = chat_el_refresh(editLine)
    }

    /// The terminal's width in cells (80 when it cannot be asked).
    private static func columns() -> Int {
        var size = winsize()
        return ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0 && size.ws_col > 0 ? Int(size.ws_col) : 80
    }

    private func remember(_ lines: [String]) {
        recent.append(contentsOf: lines)
        if recent.count > 500 { recent.removeFirst(recent.count - 500) }
    }

    /// Writes `text` to the terminal after whatever libedit still buffers.
    private func writeOut(_ text: String) {
        fflush(output)
        StandardOutput.write(text)
    }

    /// The prompt: the status line, then the window (or the question) on the input row.
    ///
    /// libedit's prompt cannot hold a line break (it is drawn as a cell, not a new row), so the
    /// status line is padded with spaces to the terminal's width and libedit wraps after it. Its
    /// reverse video goes in as libedit literals (`\1…\1`), one per character, each taking the
    /// character after it along (a literal must precede a visible character); the reset rides
    /// on the first space of the padding.
    private func setPromptText(blank: Bool) {
        if prompt != Self.emptyPrompt { prompt.deallocate() }
        guard !blank else {
            prompt = Self.emptyPrompt
            return
        }
        // libedit measures the terminal now too, so the padding fits the width it wraps at.
        el_resize(editLine)
        var size = winsize()
        let columns = ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0 && size.ws_col > 1 ? Int(size.ws_col) : 80
        let padding = String(repeating: " ", count: max(1, columns - TerminalText.cellWidth(of: status)))
        var scalars: [Unicode.Scalar] = []
        if colour {
            for scalar in status.unicodeScalars {
                scalars += "\u{1}\u{1B}[7m\u{1}".unicodeScalars
                scalars.append(scalar)
            }
            scalars += "\u{1}\u{1B}[0m\u{1}".unicodeScalars
        }
        scalars += (colour ? padding : status + padding).unicodeScalars
        scalars += (question ?? window).unicodeScalars
        let text = UnsafeMutablePointer<wchar_t>.allocate(capacity: scalars.count + 1)
        for (index, scalar) in scalars.enumerated() { text[index] = wchar_t(bitPattern: scalar.value) }
        text[scalars.count] = 0
        prompt = text
    }

    fileprivate var promptText: UnsafeMutablePointer<wchar_t> { prompt }

    // MARK: The line

    /// The line's characters and the cursor's index into them.
    private func line() -> (text: [wchar_t], cursor: Int) {
        guard let info = el_wline(editLine)?.pointee, let start = info.buffer, let end = info.lastchar, let cursor = info.cursor
        else { return ([], 0) }
        return (Array(UnsafeBufferPointer(start: start, count: end - start)), cursor - start)
    }

    /// Empties the line, returning what it held.
    private func takeLine() -> (text: [wchar_t], cursor: Int) {
        let taken = line()
        delete(0..<taken.text.count, cursor: taken.cursor)
        return taken
    }

    /// Puts `saved` into the (empty) line, cursor included.
    private func put(_ saved: (text: [wchar_t], cursor: Int)) {
        insert(saved.text)
        _ = el_cursor(editLine, Int32(saved.cursor - saved.text.count))
    }

    private func insert(_ text: [wchar_t]) {
        guard !text.isEmpty else { return }
        _ = (text + [0]).withUnsafeBufferPointer { el_winsertstr(editLine, $0.baseAddress) }
    }

    /// Deletes `range` of the line, the cursor being at `cursor`; leaves the cursor at its start.
    private func delete(_ range: Range<Int>, cursor: Int) {
        guard !range.isEmpty else { return }
        _ = el_cursor(editLine, Int32(range.upperBound - cursor))
        el_deletestr(editLine, Int32(range.count))
    }

    private func lineBytes() -> Int {
        guard let info = el_wline(editLine)?.pointee, let start = info.buffer, let end = info.lastchar else { return 0 }
        return chat_utf8_length(start, end)
    }

    private func fits(additionalBytes: Int) -> Bool { lineBytes() + additionalBytes <= maxLineBytes }

    private var limitText: String { "a message can hold at most \(maxLineBytes) bytes (the server's frame limit)" }

    private func note(_ text: String) { requests(.note(text)) }

    // MARK: Our functions

    private func submit() -> UInt8 {
        let text = String(decoding: line().text)
        // A password typed on the command line (`/register secret`) is refused by the command
        // and must not outlive it in the history file either.
        if !text.allSatisfy(\.isWhitespace), !CommandParser.holdsSecret(text) {
            _ = text.withWideCString { chat_history_enter(history, $0) }
            saveHistory()
        }
        requests(.submit(text))
        interruptArmed = false
        fullNoted = false
        submitting = true
        _ = beginClearing()
        return UInt8(CC_REDISPLAY)
    }

    private func complete() -> UInt8 {
        updateCompletionContext()
        let (text, cursor) = line()
        var start = cursor
        while start > 0, !Self.isWhitespace(text[start - 1]) { start -= 1 }
        let word = String(decoding: text[start..<cursor])
        let candidates = CompletionCandidates.candidates(
            for: word, lineBefore: String(decoding: text[0..<start]), nicks: nicks, rooms: rooms, windows: windows)
        // Tab after a space that takes no argument does nothing, quietly.
        guard !candidates.isEmpty else { return UInt8(word.isEmpty && cursor > 0 ? CC_NORM : CC_REFRESH_BEEP) }
        let replacement = candidates.count == 1 ? candidates[0] + " " : CompletionCandidates.commonPrefix(of: candidates)
        if replacement.count > word.count || candidates.count == 1 {
            delete(start..<cursor, cursor: cursor)
            insert(replacement.unicodeScalars.map { wchar_t(bitPattern: $0.value) })
            return UInt8(CC_REFRESH)
        }
        note(candidates.joined(separator: "  "))
        return UInt8(CC_NORM)
    }

    /// Asks the front end for what Tab completes now and waits for it, for half a second at most
    /// (a front end stuck that long leaves the lists it last handed over).
    private func updateCompletionContext() {
        completionContextArrived.lock()
        defer { completionContextArrived.unlock() }
        let asked = lock.withLock { mailbox.completionContexts }
        requests(.completionContext)
        let deadline = Date(timeIntervalSinceNow: 0.5)
        while lock.withLock({ mailbox.completionContexts }) == asked, completionContextArrived.wait(until: deadline) {}
        lock.withLock {
            nicks = mailbox.nicks
            rooms = mailbox.rooms
            windows = mailbox.windows
        }
    }

    private func interrupt() -> UInt8 {
        if pasteInFlight {
            requests(.cancelPaste)
            return UInt8(CC_NORM)
        }
        let wasArmed = interruptArmed
        interruptArmed = true
        let taken = line()
        if taken.text.isEmpty {
            if wasArmed { requests(.interrupt) } else { note("press Ctrl-C again to quit (or type /quit)") }
            return UInt8(CC_NORM)
        }
        kill.record(String(decoding: taken.text), backward: true, continuing: false)
        _ = takeLine()
        fullNoted = false
        note("line cleared (Ctrl-Y brings it back); press Ctrl-C again to quit")
        return UInt8(CC_REFRESH)
    }

    private func endOfInput() -> UInt8 {
        let (text, cursor) = line()
        if text.isEmpty {
            requests(.leave(CommandParser.defaultQuitReason))
            return UInt8(CC_NORM)
        }
        guard cursor < text.count else { return UInt8(CC_ERROR) }
        delete(cursor..<(cursor + 1), cursor: cursor)
        return UInt8(CC_REFRESH)
    }

    private func selectWindow(_ key: Int32) -> UInt8 {
        let digit = Int(key) - 0x30
        if (0...9).contains(digit) { requests(.selectWindow(digit == 0 ? 10 : digit)) }
        return UInt8(CC_NORM)
    }

    private func selectActiveWindow() -> UInt8 {
        requests(.selectActiveWindow)
        return UInt8(CC_NORM)
    }

    private func cycleWindow(_ offset: Int) -> UInt8 {
        requests(.cycleWindow(offset))
        return UInt8(CC_NORM)
    }

    private func scroll(pages: Int) -> UInt8 {
        requests(.scroll(pages: pages))
        return UInt8(CC_NORM)
    }

    private func requestRedraw() -> UInt8 {
        redrawWanted = true
        return UInt8(CC_NORM)
    }

    // MARK: Kills
    //
    // libedit keeps one kill and replaces it with each kill, so Ctrl-W Ctrl-W Ctrl-Y would give
    // back one word; its kill buffer is private, and it has no yank-pop (Alt-y). So the kill keys
    // are ours and feed a ring, as readline's and Emacs's do: consecutive kills add up to one
    // entry, Ctrl-Y puts back the newest, and Alt-y right after it puts back older ones instead.

    private func killBackward(toWhitespace: Bool) -> UInt8 {
        let (text, cursor) = line()
        var start = cursor
        let isWord: (wchar_t) -> Bool = toWhitespace ? { character in !Self.isWhitespace(character) } : { character in Self.isWordCharacter(character) }
        while start > 0, !isWord(text[start - 1]) { start -= 1 }
        while start > 0, isWord(text[start - 1]) { start -= 1 }
        return killRange(start..<cursor, of: text, cursor: cursor, backward: true)
    }

    private func killForwardWord() -> UInt8 {
        let (text, cursor) = line()
        var end = cursor
        while end < text.count, !Self.isWordCharacter(text[end]) { end += 1 }
        while end < text.count, Self.isWordCharacter(text[end]) { end += 1 }
        return killRange(cursor..<end, of: text, cursor: cursor, backward: false)
    }

    private func killToEnd() -> UInt8 {
        let (text, cursor) = line()
        return killRange(cursor..<text.count, of: text, cursor: cursor, backward: false)
    }

    private func killToStart() -> UInt8 {
        let (text, cursor) = line()
        return killRange(0..<cursor, of: text, cursor: cursor, backward: true)
    }

    private func killRange(_ range: Range<Int>, of text: [wchar_t], cursor: Int, backward: Bool) -> UInt8 {
        guard !range.isEmpty else { return UInt8(CC_NORM) }
        kill.record(String(decoding: text[range]), backward: backward, continuing: kill.lastCommand == commandCount - 1)
        kill.lastCommand = commandCount
        delete(range, cursor: cursor)
        return UInt8(CC_REFRESH)
    }

    private func yank() -> UInt8 {
        guard let newest = kill.entries.indices.last else { return UInt8(CC_NORM) }
        return putBack(newest, replacing: 0, at: line().cursor)
    }

    /// Alt-y: right after a yank (or another Alt-y), what it put back gives way to the kill
    /// before it in the ring, going round; after anything else it does nothing.
    private func yankPop() -> UInt8 {
        guard let last = kill.lastYank, last.command == commandCount - 1, !kill.entries.isEmpty else { return UInt8(CC_ERROR) }
        let older = (last.entry + kill.entries.count - 1) % kill.entries.count
        return putBack(older, replacing: last.length, at: last.start)
    }

    /// Puts `kill.entries[entry]` into the line at `start`, in place of the `replacing` characters
    /// there, and remembers where it went for a following Alt-y.
    private func putBack(_ entry: Int, replacing length: Int, at start: Int) -> UInt8 {
        let text = kill.entries[entry]
        let scalars = text.unicodeScalars.map { wchar_t(bitPattern: $0.value) }
        let (current, cursor) = line()
        let replaced = String(decoding: current[start..<start + length]).utf8.count
        guard fits(additionalBytes: text.utf8.count - replaced) else {
            note("not put back: the line would be \(lineBytes() + text.utf8.count - replaced) bytes; \(limitText)")
            return UInt8(CC_NORM)
        }
        if length > 0 {
            delete(start..<start + length, cursor: cursor)
        } else {
            _ = el_cursor(editLine, Int32(start - cursor))
        }
        insert(scalars)
        kill.lastYank = (commandCount, start, scalars.count, entry)
        return UInt8(CC_REFRESH)
    }

    /// One key at the hidden prompt: Enter sends, Backspace and Ctrl-U erase, Ctrl-C cancels
    /// (so does Ctrl-D on an empty answer); other control keys and key sequences are dropped.
    /// Nothing reaches libedit.
    private func secretKey(_ scalar: Unicode.Scalar) -> wchar_t? {
        switch secretSequence {
        case .escape:
            secretSequence = scalar == "[" ? .controlSequence : scalar == "O" ? .singleShift : .none
            return nil
        case .controlSequence:
            if (0x40...0x7E).contains(scalar.value) { secretSequence = .none }
            return nil
        case .singleShift, .prefix:
            secretSequence = .none
            return nil
        case .none:
            break
        }
        switch scalar.value {
        case 0x0D, 0x0A: return endSecret(cancelled: false)
        case 0x03: return endSecret(cancelled: true)
        case 0x04 where secret?.isEmpty ?? true: return endSecret(cancelled: true)
        case 0x7F, 0x08: if secret?.isEmpty == false { secret?.removeLast() }
        case 0x15: secret?.removeAll()
        case 0x1B: secretSequence = .escape
        case ..<0x20: break
        default: secret?.append(scalar)
        }
        return nil
    }

    /// Ends the hidden prompt: the answer goes to the front end, the line comes back.
    private func endSecret(cancelled: Bool) -> wchar_t {
        var typed = String.UnicodeScalarView()
        typed.append(contentsOf: secret ?? [])
        secret = nil
        sendAnswer(.secret(cancelled ? nil : String(typed)))
        return endQuestion()
    }

    /// Ends the question with its answer.
    private func answer(_ yes: Bool) -> wchar_t {
        sendAnswer(.answer(yes))
        return endQuestion()
    }

    /// Hands an answer to the front end; the keys after it wait until it is handled.
    private func sendAnswer(_ request: EditorRequest) {
        answersSent += 1
        requests(request)
    }

    /// Ends the question or the hidden prompt: the line comes back, and the prompt is drawn whole.
    private func endQuestion() -> wchar_t {
        question = nil
        if let saved = questionStash {
            questionStash = nil
            _ = takeLine()
            put(saved)
        }
        return beginClearing()
    }

    private static func isWhitespace(_ character: wchar_t) -> Bool {
        guard let scalar = Unicode.Scalar(UInt32(bitPattern: character)) else { return false }
        return scalar.properties.isWhitespace
    }

    private static func isWordCharacter(_ character: wchar_t) -> Bool {
        guard let scalar = Unicode.Scalar(UInt32(bitPattern: character)) else { return false }
        return scalar.properties.isAlphabetic || scalar.properties.numericType != nil || scalar == "_"
    }

    // MARK: History

    /// Reads the history file (libedit's format, or plain lines from older clients) and makes
    /// sure only its owner can read it: it holds private messages.
    private func loadHistory(from path: String) {
        _ = chmod(path, 0o600)
        guard let contents = try? String(contentsOfFile: path, encoding: .utf8) else { return }
        // Lines an older client kept with a password in them go at the next save.
        for entry in HistoryFile.decode(contents) where !CommandParser.holdsSecret(entry) {
            _ = entry.withWideCString { chat_history_enter(history, $0) }
        }
    }

    /// Writes the history to a new file of mode 0600 and renames it over the old one, so the
    /// file is never readable by others, not even for a moment, and never half written.
    private func saveHistory() {
        guard let historyFile else { return }
        var entries: [String] = []
        var entry = chat_history_oldest(history)
        while let current = entry {
            entries.append(String(decoding: UnsafeBufferPointer(start: current, count: wcslen(current))))
            entry = chat_history_newer(history)
        }
        let temporary = historyFile + ".new"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { return }
        _ = fchmod(descriptor, 0o600)
        var bytes = Array(HistoryFile.encode(entries).utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if written < 0, errno == EINTR { continue }
            guard written > 0 else { break }
            bytes = bytes.dropFirst(written)
        }
        close(descriptor)
        if bytes.isEmpty { _ = rename(temporary, historyFile) } else { unlink(temporary) }
    }
}

/// The kill ring: what Ctrl-W, Alt-Backspace, Alt-d, Ctrl-K, Ctrl-U and Ctrl-C took, for Ctrl-Y
/// and Alt-y. Kills in a row add up to one entry (a backward kill in front, a forward one
/// behind), as in readline; the ring keeps the newest `capacity` entries.
struct KillRing {
    /// How many kills the ring keeps, as Emacs's `kill-ring-max` keeps 120 and readline 10.
    static let capacity = 16
    /// The kills, oldest first.
    private(set) var entries: [String] = []
    /// `TerminalEditor.commandCount` at the last kill.
    var lastCommand = -2
    /// The last yank: the command that made it, where its text starts in the line, how many
    /// characters it put there, and which entry it was.
    var lastYank: (command: Int, start: Int, length: Int, entry: Int)?

    mutating func record(_ killed: String, backward: Bool, continuing: Bool) {
        if continuing, let newest = entries.indices.last {
            entries[newest] = backward ? killed + entries[newest] : entries[newest] + killed
            return
        }
        entries.append(killed)
        if entries.count > Self.capacity { entries.removeFirst() }
    }
}

private extension String {
    /// `text` as a String, each `wchar_t` a Unicode scalar (U+FFFD for one that is not).
    init(decoding text: some Sequence<wchar_t>) {
        var scalars = String.UnicodeScalarView()
        for character in text { scalars.append(Unicode.Scalar(UInt32(bitPattern: character)) ?? "\u{FFFD}") }
        self.init(scalars)
    }
}

// libedit's callbacks: C function pointers, so they reach the editor through `current`.

private let readCharacter: el_rfunc_t = { _, character in
    guard let character, let editor = TerminalEditor.current else { return -1 }
    return editor.nextCharacter(character)
}

private let promptFunction: chat_el_prompt_function = { _ in
    TerminalEditor.current?.promptText ?? TerminalEditor.emptyPrompt
}

private extension String {
    /// The string as a NUL-terminated wide string that is never freed.
    func permanentWideCString() -> UnsafePointer<wchar_t> {
        let wide = unicodeScalars.map { wchar_t(bitPattern: $0.value) } + [0]
        let copy = UnsafeMutablePointer<wchar_t>.allocate(capacity: wide.count)
        copy.initialize(from: wide, count: wide.count)
        return UnsafePointer(copy)
    }

    /// Calls `body` with the string as a NUL-terminated wide string (one `wchar_t` per scalar).
    func withWideCString<Result>(_ body: (UnsafePointer<wchar_t>) -> Result) -> Result {
        let wide = unicodeScalars.map { wchar_t(bitPattern: $0.value) } + [0]
        return wide.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}
