@preconcurrency import CLibEdit
import ChatClient
import Dispatch
import Glibc

/// The prompt line, edited with libedit, with output printed above it.
///
/// libedit runs in its callback mode: a Dispatch read source on stdin feeds it one keystroke at
/// a time on the main queue, so the main thread is never blocked and network events can print
/// between keystrokes. libedit is not thread-safe and keeps global state, so there is at most
/// one editor, it lives on the main actor, and libedit's C callbacks reach it through `current`.
@MainActor
final class LineEditor {
    /// Called with each line the user enters.
    var onLine: (String) -> Void = { _ in }
    /// Called when the user presses Ctrl-D on an empty line.
    var onEndOfInput: () -> Void = {}
    /// Completes the word before the cursor: (word, the line before the word) → candidates.
    var complete: (String, String) -> [String] = { _, _ in [] }

    private static var current: LineEditor?
    private let historyFile: String?
    private var prompt: String
    private var input: DispatchSourceRead?
    /// The line and the cursor (a byte offset into it) as libedit left them after the last
    /// keystroke, read while they are known to be valid.
    private var line: [UInt8] = []
    private var cursor = 0
    private var active = false

    /// An editor that keeps its history in `historyFile` (nil: no history file).
    init(prompt: String, historyFile: String?) {
        self.prompt = prompt
        self.historyFile = historyFile
    }

    /// Takes over the terminal: raw mode, the prompt, keystrokes from stdin.
    func start() {
        precondition(LineEditor.current == nil, "one line editor at a time")
        LineEditor.current = self
        Self.useUTF8Locale()
        rl_readline_name = Self.readlineName  // lets ~/.editrc hold bindings under "chat-client:"
        // The client's Dispatch signal sources handle SIGINT, SIGTERM, SIGHUP and SIGWINCH. If
        // libedit caught them too, it would save the dispositions it finds and restore them later,
        // and could put back the "ignore" set before libdispatch installed its handler: SIGHUP was
        // then silently dropped and a client outlived its closed terminal.
        rl_catch_signals = 0
        rl_catch_sigwinch = 0
        rl_initialize()
        // Nicks may contain `{|}` and backquotes, which readline's default word breaks split on.
        rl_basic_word_break_characters = Self.wordBreaks
        rl_completer_word_break_characters = UnsafeMutablePointer(mutating: Self.wordBreaks)
        rl_attempted_completion_function = { text, start, _ in
            let word = text.map { String(cString: $0) } ?? ""
            return MainActor.assumeIsolated {
                CompletionList(pointer: LineEditor.current?.completions(for: word, start: Int(start)))
            }.pointer
        }
        // Readline's word kill and word motion on Ctrl-W and Ctrl-Left/Right, which libedit's
        // emacs map binds differently or not at all.
        _ = rl_parse_and_bind("bind ^W ed-delete-prev-word")
        _ = rl_parse_and_bind("bind ^[[1;5D ed-prev-word")
        _ = rl_parse_and_bind("bind ^[[1;5C em-next-word")
        stifle_history(1000)
        if let historyFile { _ = read_history(historyFile) }
        installHandler()

        let source = DispatchSource.makeReadSource(fileDescriptor: STDIN_FILENO, queue: .main)
        source.setEventHandler { @Sendable in
            MainActor.assumeIsolated { LineEditor.current?.readKeystroke() }
        }
        source.resume()
        input = source
        active = true
    }

    /// Gives the terminal back as it was; safe to call more than once and from any exit path.
    func stop() {
        guard active else { return }
        active = false
        input?.cancel()
        input = nil
        // Leave the half-typed line on screen and continue below it.
        StandardOutput.write("\r\n")
        rl_callback_handler_remove()
        LineEditor.current = nil
    }

    /// Prints `text` (one or more lines) above the prompt, leaving the line being edited and
    /// its cursor as they were.
    func printAbove(_ text: String) {
        guard active else {
            StandardOutput.write(text + "\n")
            return
        }
        StandardOutput.write(eraseInput() + text.replacing("\n", with: "\r\n") + "\r\n")
        rl_forced_update_display()
    }

    /// Shows `newPrompt` in place of the current prompt.
    func setPrompt(_ newPrompt: String) {
        guard newPrompt != prompt else { return }
        guard active else {
            prompt = newPrompt
            return
        }
        StandardOutput.write(eraseInput())
        prompt = newPrompt
        _ = rl_set_prompt(newPrompt)
        rl_forced_update_display()
    }

    // MARK: libedit plumbing

    // libedit keeps these pointers, so they are allocated once and never freed.
    private static let wordBreaks = UnsafePointer(strdup(" \t")!)
    private static let readlineName = UnsafePointer(strdup("chat-client")!)

    private func installHandler() {
        rl_callback_handler_install(prompt) { line in
            MainActor.assumeIsolated { LineEditor.current?.lineEntered(line) }
        }
    }

    private func readKeystroke() {
        rl_callback_read_char()
        snapshotLine()
    }

    private func snapshotLine() {
        guard let buffer = rl_line_buffer else {
            line = []
            cursor = 0
            return
        }
        line = Array(UnsafeBufferPointer(start: UnsafeRawPointer(buffer).assumingMemoryBound(to: UInt8.self), count: strlen(buffer)))
        cursor = min(max(Int(rl_point), 0), line.count)
    }

    private func lineEntered(_ pointer: UnsafeMutablePointer<CChar>?) {
        guard let pointer else {
            onEndOfInput()
            return
        }
        let entered = String(cString: pointer)
        free(pointer)
        // libedit has moved below the entered line; take it off the screen, since the server's
        // echo shows it properly, and the next prompt goes where it was.
        let rows = TerminalText.cursorRow(cellWidths: Self.cellWidths(of: prompt + entered), columns: Self.columns()) + 1
        StandardOutput.write("\u{1B}[\(rows)A\r\u{1B}[J")
        if !entered.allSatisfy(\.isWhitespace) {
            _ = add_history(entered)
            if let historyFile { _ = write_history(historyFile) }
        }
        line = []
        cursor = 0
        installHandler()
        onLine(entered)
    }

    private func completions(for word: String, start: Int) -> UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? {
        rl_attempted_completion_over = 1  // never fall back to file names
        // libedit counts `start` in characters, not bytes.
        let lineBefore = String(String(decoding: line, as: UTF8.self).unicodeScalars.prefix(start))
        let candidates = complete(word, lineBefore)
        guard !candidates.isEmpty else { return nil }
        // readline's contract: a malloc'd, NULL-terminated array of malloc'd strings, the first
        // being what replaces the word (the common prefix when there are several).
        // A single match gets its trailing space from us: libedit's own append character was
        // seen to go missing now and then after a completion starting with "/".
        rl_completion_append_character = 0
        let entries = candidates.count == 1 ? [candidates[0] + " "] : [CompletionCandidates.commonPrefix(of: candidates)] + candidates
        let array = UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>.allocate(capacity: entries.count + 1)
        for (index, entry) in entries.enumerated() { array[index] = strdup(entry) }
        array[entries.count] = nil
        return array
    }

    /// Moves to the prompt's first row and clears from there down, returning the escape codes.
    private func eraseInput() -> String {
        let beforeCursor = String(decoding: line.prefix(cursor), as: UTF8.self)
        let row = TerminalText.cursorRow(cellWidths: Self.cellWidths(of: prompt + beforeCursor), columns: Self.columns())
        return "\r" + (row > 0 ? "\u{1B}[\(row)A" : "") + "\u{1B}[J"
    }

    /// libedit's idea of the terminal width, which is what its wrapping follows.
    private static func columns() -> Int {
        var rows: Int32 = 0
        var columns: Int32 = 0
        rl_get_screen_size(&rows, &columns)
        return columns > 0 ? Int(columns) : 80
    }

    private static func cellWidths(of text: String) -> [Int] {
        text.unicodeScalars.map { Int(max(characterWidth(wchar_t(bitPattern: $0.value)), 0)) }
    }

    /// The C library's `wcwidth`, which libedit measures with; Swift's Glibc module leaves it
    /// out (it is an X/Open extension), so it is looked up at run time.
    private static let characterWidth: @convention(c) (wchar_t) -> Int32 = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "wcwidth") else {
            fatalError("the C library has no wcwidth")
        }
        return unsafeBitCast(symbol, to: (@convention(c) (wchar_t) -> Int32).self)
    }()

    /// libedit decodes input and measures characters by the C library's locale; without a
    /// UTF-8 one it treats every non-ASCII byte as a separate unprintable character.
    private static func useUTF8Locale() {
        setlocale(LC_ALL, "")
        let codeset = String(cString: nl_langinfo(nl_item(CODESET)))
        if codeset != "UTF-8" { setlocale(LC_CTYPE, "C.UTF-8") }
    }
}

extension LineEditor {
    /// Tells libedit the terminal changed size, so its wrapping (and ours) follows.
    func terminalResized() {
        rl_resize_terminal()
    }
}

/// A completion array handed from the main actor back to libedit, which takes ownership.
private struct CompletionList: @unchecked Sendable {
    let pointer: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
}
